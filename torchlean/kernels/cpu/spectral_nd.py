"""CPU 2-D/3-D FNO spectral convolutions (spec/spectral_nd.py): SciPy's pocketfft in complex64 plus
the per-mode channel mixing as one batched complex matmul over the kept modes.

Route "fft" (the default): rfft along the last axis, keep its m_last bins, then the C2C FFT along
the leading axes of that slab only (m_last of n_last//2 + 1 columns: NumPy's rfftn does these on
every column), gather the corners, mix, scatter into a zero slab, inverse C2C along the leading
axes, zero-pad the last axis to n//2 + 1 and one C2R (pocketfft's C2R ignores the imaginary parts of
bins 0 and n/2: NumPy's irfftn, exactly). The adjoints use the same transforms:
T^H dy = fftn(rfft(dy)) c_k / N on the kept modes, and E^H dX = N_lead ifftn (unscaled) then a C2R
of dX n_last / c_k.

Route "gemm": the truncated DFT as GEMMs (kernels/spectral_nd_basis.py), the CUDA backend's
algorithm, here in NumPy: the tests run it on the CPU so the walk the GPU uses is checked here too.
``CONV_ROUTE`` ("fft" or "gemm") picks the route.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.fft as sfft

from ..caches import ByteLRU
from ..spectral_nd_basis import analysis, corner_index, kept, kept_counts, make_bases, synthesis
from .parallel import parts

__all__ = ["spectral_conv2d_rfft_fwd", "spectral_conv2d_rfft_bwd_x", "spectral_conv2d_rfft_bwd_w",
           "spectral_conv3d_rfft_fwd", "spectral_conv3d_rfft_bwd_x", "spectral_conv3d_rfft_bwd_w"]

F32, C64 = np.float32, np.complex64
CONV_ROUTE = "fft"
_PARALLEL_MIN = 1 << 16
_cache = ByteLRU("cpu", 64 << 20, max_entries=32)


def _workers(elems: int) -> int:
    return parts(elems, elems, _PARALLEL_MIN // 2)


def _geometry(ns, ms):
    """(bases or None, corner, local) per (ns, ms), cached: the mode -> corner map, and the GEMM
    route's matrices when that route runs."""
    gemm = CONV_ROUTE == "gemm"
    key = ("spectral_nd", ns, ms, gemm)
    hit = _cache.get(key)
    if hit is None:
        bases = make_bases(ns, ms) if gemm else None
        corner, local = corner_index(ms)
        hit = (bases, corner, local)
        _cache.put(key, hit, corner.nbytes + local.nbytes + (sum(a.nbytes for t in bases for a in t) if gemm else 0))
    return hit


def _weights(w, cin, cout, ms, corner, local, conj_t=False):
    """(M, cin, cout) complex64 per kept mode (or (M, cout, cin) conjugated, for the adjoint)."""
    nc, mm = 2 ** (len(ms) - 1), math.prod(ms)
    wc = w.reshape(nc, cin, cout, mm, 2)
    wc = (wc[..., 0] + 1j * wc[..., 1]).astype(C64)  # (nc, cin, cout, mm)
    per_mode = wc[corner, :, :, local]  # (M, cin, cout)
    return np.conj(per_mode).transpose(0, 2, 1) if conj_t else per_mode


def _fold(dwm, cin, cout, ms, corner, local):
    """(M, cin, cout) complex -> the weights' layout (nc, cin, cout, m.., 2) flat float32."""
    nc, mm = 2 ** (len(ms) - 1), math.prod(ms)
    out = np.zeros((nc, mm, cin, cout), C64)
    out[corner, local] = dwm
    out = out.transpose(0, 2, 3, 1)
    return np.ascontiguousarray(np.stack([out.real, out.imag], axis=-1), dtype=F32).reshape(-1)


# -- the FFT route -------------------------------------------------------------------------------
def _lead_axes(d):
    return tuple(range(2, 2 + d - 1))


def _take_kept(a, ns, ms):
    """(L0, L1, K_0 .. K_{d-1}) from a slab (L0, L1, n_0 .. n_{d-2}, m_last)."""
    for j in range(len(ns) - 1):
        a = np.take(a, kept(ns[j], ms[j], False), axis=2 + j)
    return a


def _fft_spectrum(v, lead2, ns, ms, scale_adjoint):
    """The kept modes (L0, L1, K..) complex64 of v (L0, L1, n..): E v, or T^H v (scale_adjoint)."""
    workers = _workers(v.size)
    d = len(ns)
    s = sfft.rfft(v.reshape(lead2 + tuple(ns)), axis=-1, workers=workers)[..., :ms[-1]]
    if d > 1:
        s = sfft.fftn(s, axes=_lead_axes(d), workers=workers)
    s = _take_kept(s, ns, ms)
    if scale_adjoint:
        f = kept(ns[-1], ms[-1], True)
        ck = np.where((f == 0) | (2 * f == ns[-1]), 1.0, 2.0) / math.prod(ns)
        s = s * ck.astype(F32)
    return s.astype(C64, copy=False)


def _fft_synthesis(spec, lead2, ns, ms, adjoint):
    """y (L0, L1, n..) float32 from kept modes (L0, L1, K..): Re(T Y), or Re(E^H Y) (adjoint)."""
    d = len(ns)
    workers = _workers(math.prod(lead2) * math.prod(ns))
    slab = np.zeros(lead2 + tuple(ns[:-1]) + (ns[-1] // 2 + 1,), C64)
    idx = tuple(kept(ns[j], ms[j], False)[(slice(None),) + (None,) * (d - 2 - j)] for j in range(d - 1))
    slab[(slice(None), slice(None)) + idx + (slice(0, ms[-1]),)] = spec
    if adjoint:  # E^H: unscaled inverses, and Re(sum_k X_k e^{i theta}) = n irfft(X / c_k)
        f = kept(ns[-1], ms[-1], True)
        slab[..., :ms[-1]] *= (ns[-1] / np.where((f == 0) | (2 * f == ns[-1]), 1.0, 2.0)).astype(F32)
    norm = "forward" if adjoint else "backward"
    if d > 1:
        slab[..., :ms[-1]] = sfft.ifftn(slab[..., :ms[-1]], axes=_lead_axes(d), workers=workers, norm=norm)
    y = sfft.irfft(slab, n=ns[-1], axis=-1, workers=workers)
    return np.ascontiguousarray(y, dtype=F32).reshape(-1)


def _mix(spec, wm):
    """(L0, cout, K..) from spec (L0, cin, K..) and per-mode matrices wm (M, cin, cout)."""
    b, cin = spec.shape[:2]
    ks = spec.shape[2:]
    xm = spec.reshape(b, cin, -1).transpose(2, 0, 1)  # (M, b, cin)
    ym = np.matmul(xm, wm)  # (M, b, cout)
    return ym.transpose(1, 2, 0).reshape((b, wm.shape[2]) + ks)


# -- the GEMM route (the CUDA algorithm) ------------------------------------------------------------
def _real_mm(v, basis, p, q):
    return np.matmul(np.asarray(v, F32).reshape(p, q), basis.T)


def _batched_mm(basis, v, outer, q, inner):
    return np.matmul(basis, np.asarray(v, F32).reshape(outer, q, inner))


def _gemm_spectrum(v, lead, ns, ms, bases, adjoint):
    ks = kept_counts(ms)
    first, rest = (bases.syn_t[-1], bases.syn_t) if adjoint else (bases.ana[-1], bases.ana)
    s = analysis(v, lead, ns, ks, first, rest, _real_mm, _batched_mm).reshape(lead, 2, -1)
    return (s[:, 0] + 1j * s[:, 1]).astype(C64)  # (lead, M)


def _gemm_synthesis(spec, lead, ns, ms, bases, adjoint):
    ks = kept_counts(ms)
    rest, last = (bases.ana_t, bases.ana_t[-1]) if adjoint else (bases.syn, bases.syn[-1])
    s = np.stack([spec.real, spec.imag], axis=1).astype(F32)  # (lead, 2, M)
    return np.ascontiguousarray(synthesis(s, lead, ns, ks, rest, last, _real_mm, _batched_mm), F32).reshape(-1)


# -- the primitives ---------------------------------------------------------------------------------
def _spectrum(v, b, c, ns, ms, geo, adjoint):
    if CONV_ROUTE == "gemm":
        return _gemm_spectrum(v, b * c, ns, ms, geo[0], adjoint).reshape((b, c) + kept_counts(ms))
    return _fft_spectrum(v, (b, c), ns, ms, adjoint)


def _synth(spec, b, c, ns, ms, geo, adjoint):
    if CONV_ROUTE == "gemm":
        return _gemm_synthesis(spec.reshape(b * c, -1), b * c, ns, ms, geo[0], adjoint)
    return _fft_synthesis(spec, (b, c), ns, ms, adjoint)


def _fwd(x, w, batch, cin, cout, ns, ms):
    n_out = batch * cout * math.prod(ns)
    if n_out == 0:
        return np.zeros(0, F32)
    if cin == 0:
        return np.zeros(n_out, F32)
    geo = _geometry(ns, ms)
    spec = _spectrum(x, batch, cin, ns, ms, geo, adjoint=False)
    y = _mix(spec, _weights(w, cin, cout, ms, geo[1], geo[2]))
    return _synth(y, batch, cout, ns, ms, geo, adjoint=False)


def _bwd_x(x, w, dy, batch, cin, cout, ns, ms):
    n_out = batch * cin * math.prod(ns)
    if n_out == 0:
        return np.zeros(0, F32)
    if cout == 0:
        return np.zeros(n_out, F32)
    geo = _geometry(ns, ms)
    g = _spectrum(dy, batch, cout, ns, ms, geo, adjoint=True)
    dxs = _mix(g, _weights(w, cin, cout, ms, geo[1], geo[2], conj_t=True))
    return _synth(dxs, batch, cin, ns, ms, geo, adjoint=True)


def _bwd_w(x, w, dy, batch, cin, cout, ns, ms):
    n_w = 2 ** (len(ms) - 1) * cin * cout * math.prod(ms) * 2
    if batch == 0 or n_w == 0:
        return np.zeros(n_w, F32)
    geo = _geometry(ns, ms)
    xs = _spectrum(x, batch, cin, ns, ms, geo, adjoint=False).reshape(batch, cin, -1)
    gs = _spectrum(dy, batch, cout, ns, ms, geo, adjoint=True).reshape(batch, cout, -1)
    # per mode: conj(X)^T (cin, batch) @ dY (batch, cout), the batch sum inside BLAS in a fixed order
    dwm = np.matmul(np.conj(xs).transpose(2, 1, 0), gs.transpose(2, 0, 1))
    return _fold(dwm, cin, cout, ms, geo[1], geo[2])


def spectral_conv2d_rfft_fwd(x, w, batch, cin, cout, h, wd, m1, m2):
    return _fwd(x, w, batch, cin, cout, (h, wd), (m1, m2))


def spectral_conv2d_rfft_bwd_x(x, w, dy, batch, cin, cout, h, wd, m1, m2):
    return _bwd_x(x, w, dy, batch, cin, cout, (h, wd), (m1, m2))


def spectral_conv2d_rfft_bwd_w(x, w, dy, batch, cin, cout, h, wd, m1, m2):
    return _bwd_w(x, w, dy, batch, cin, cout, (h, wd), (m1, m2))


def spectral_conv3d_rfft_fwd(x, w, batch, cin, cout, d1, d2, d3, m1, m2, m3):
    return _fwd(x, w, batch, cin, cout, (d1, d2, d3), (m1, m2, m3))


def spectral_conv3d_rfft_bwd_x(x, w, dy, batch, cin, cout, d1, d2, d3, m1, m2, m3):
    return _bwd_x(x, w, dy, batch, cin, cout, (d1, d2, d3), (m1, m2, m3))


def spectral_conv3d_rfft_bwd_w(x, w, dy, batch, cin, cout, d1, d2, d3, m1, m2, m3):
    return _bwd_w(x, w, dy, batch, cin, cout, (d1, d2, d3), (m1, m2, m3))
