"""CPU 2-D/3-D FNO spectral convolutions (spec/spectral_nd.py): the truncated transforms, and the
per-mode channel mixing as one Numba kernel over the kept modes (kernels/cpu/spectral_mix.py), every
stage on the backend's pool (parallel.py) and no stage's bits depending on the thread count.

Route "gemm" (the default): the truncated DFT as GEMMs (kernels/spectral_nd_basis.py), the CUDA
backend's algorithm: the last axis as one GEMM against its truncated basis, each leading axis as a
batched GEMM with the axis' (2 K_j, 2 n_j) real basis shared by every slice, all through gemm.gemm
on the backend's one pool (parallel.py), and the mixing kernel between them. Every stage runs on
Numba's threads and no bit depends on their count.

Route "fft", the analysis E x of the kept modes:
* the last (real) axis as one GEMM against its truncated DFT basis (n, 2 m_last) [cos | -sin] with the
  columns interleaved, so the product is the complex64 slab (.., m_last) itself;
* every leading axis, last to first, as pocketfft's C2C FFT of the slab (scipy.fft, ``workers``
  from parallel.parts; a transform's bits do not depend on its workers: each line is one thread's),
  each axis but the first cut to its kept rows at once, so the next transforms see 2 m_j of n_j.
  The first axis' kept rows are picked by the mixing kernel, which reads them in place.
The synthesis (NumPy's irfftn of the zero-padded spectrum) walks back: the mixing kernel writes the
kept modes into a zero slab (n_0, K_1 .., m_last), inverse C2C along the first axis, each further
leading axis zero-padded to its length and inverted, then the last axis as one GEMM against
(c_k / n) [cos; -sin] (its sin rows are exactly 0 at bins 0 and n/2, whose imaginary parts the
convention ignores). The adjoints use the same walks: T^H dy = E dy c_k / N on the kept modes (the
scale rides in the mixing kernel) and E^H dX = unscaled inverses, then [cos; -sin]^T.

Why GEMMs by default: pocketfft runs its own threads, which fight the pool's workers (they spin
for a while after each region) on a many-core CPU, and lengths such as 94 (the FNO2d reference's
85 + 9 padding) are slow FFT sizes. On one core the two routes cost about the same
(BENCHMARKS.md). ``CONV_ROUTE`` ("gemm" or "fft") picks the route; the tests run both.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import scipy.fft as sfft

from ..caches import ByteLRU
from ..spectral_nd_basis import Bases, analysis, corner_index, kept, kept_counts, make_bases, synthesis
from . import gemm
from .parallel import parts
from .spectral_mix import copy_corners, mix, weight_grad

__all__ = ["spectral_conv2d_rfft_fwd", "spectral_conv2d_rfft_bwd_x", "spectral_conv2d_rfft_bwd_w",
           "spectral_conv3d_rfft_fwd", "spectral_conv3d_rfft_bwd_x", "spectral_conv3d_rfft_bwd_w"]

F32, C64 = np.float32, np.complex64
CONV_ROUTE = "gemm"
_PARALLEL_MIN = 1 << 16
_cache = ByteLRU("cpu", 64 << 20, max_entries=32)


def _workers(elems: int) -> int:
    """pocketfft's threads for a transform of ``elems`` elements (scipy.fft runs its own: it cannot run
    inside a Numba region), as many as the policy would give a Numba kernel."""
    return parts(elems, elems, _PARALLEL_MIN // 2)


class _Geo(NamedTuple):
    bases: Bases
    corner: np.ndarray      # per kept mode: its weight corner and index in it (corner_index)
    local: np.ndarray
    off: np.ndarray         # per kept mode: its offset in a channel's plane (fft: (n_0, K_1 .., m_last); gemm: M)
    unit: np.ndarray        # per kept mode: 1 (float32)
    adj_scale: np.ndarray   # per kept mode: c_k / N, the adjoint analysis' factor (fft route)
    ana_last: np.ndarray    # (n, 2 m_last) [cos | -sin] interleaved
    syn_last: np.ndarray    # (2 m_last, n) (c_k / n) [cos; -sin] interleaved


def _geometry(ns, ms) -> _Geo:
    """The per-(ns, ms) tables, cached."""
    gemm_route = CONV_ROUTE == "gemm"
    key = ("spectral_nd", ns, ms, gemm_route)
    hit = _cache.get(key)
    if hit is None:
        bases = Bases(*(tuple(np.array(b) for b in t) for t in make_bases(ns, ms)))  # writeable: Numba's one typing
        corner, local = corner_index(ms)
        ks, m_last = kept_counts(ms), ms[-1]
        if gemm_route:
            off = np.arange(corner.size, dtype=np.int64)
        else:
            rows = kept(ns[0], ms[0], False)
            inner = math.prod(ks[1:])
            off = (rows[:, None] * inner + np.arange(inner)[None, :]).reshape(-1)
        f = kept(ns[-1], m_last, True)
        ck = np.where((f == 0) | (2 * f == ns[-1]), 1.0, 2.0) / math.prod(ns)
        adj_scale = np.ascontiguousarray(np.broadcast_to(ck, ks).reshape(-1), F32)
        an = bases.ana[-1]  # (2K, n): rows cos then -sin
        ana_last = np.ascontiguousarray(np.stack([an[:m_last].T, an[m_last:].T], axis=-1).reshape(ns[-1], -1))
        sy = bases.syn[-1]  # (n, 2K): columns c_k/n cos then -c_k/n sin
        syn_last = np.ascontiguousarray(np.stack([sy[:, :m_last].T, sy[:, m_last:].T], axis=1).reshape(2 * m_last, -1))
        hit = _Geo(bases, corner, local, off, np.ones(corner.size, F32), adj_scale, ana_last, syn_last)
        _cache.put(key, hit, sum(b.nbytes for t in bases for b in t) + sum(t.nbytes for t in hit[1:]))
    return hit


# -- the FFT route -------------------------------------------------------------------------------
def _corners_of(s, axis, m):
    """The two corners [0, m) and [n - m, n) of s along axis, as one new array."""
    out = np.empty(s.shape[:axis] + (2 * m,) + s.shape[axis + 1:], s.dtype)
    copy_corners(s, out, axis, m)
    return out


def _zero_padded(y, axis, n, m):
    """y's two corners (2 m along axis) placed at [0, m) and [n - m, n) of zeros of length n."""
    out = np.zeros(y.shape[:axis] + (n,) + y.shape[axis + 1:], y.dtype)  # fresh zero pages: the middle costs nothing
    copy_corners(y, out, axis, m)
    return out


def _fft_spectrum(v, lead, ns, ms, geo):
    """(lead, n_0, K_1 .., m_last) complex64 (every axis but the first already cut) of v (lead, n..)."""
    d, m_last = len(ns), ms[-1]
    p = lead * math.prod(ns[:-1])
    s = gemm.gemm(np.ascontiguousarray(v, F32).reshape(-1), geo.ana_last, 1, p, 2 * m_last, ns[-1], False, False)
    s = s.view(C64).reshape((lead,) + tuple(ns[:-1]) + (m_last,))
    for j in range(d - 2, -1, -1):
        s = sfft.fft(s, axis=1 + j, workers=_workers(s.size), overwrite_x=True)
        if j > 0:
            s = _corners_of(s, 1 + j, ms[j])
    return s


def _fft_synthesis(y, lead, ns, ms, geo, adjoint):
    """(lead, n..) float32 flat from the slab y (lead, n_0, K_1 .., m_last) (zeros off the kept modes):
    Re(T Y), or Re(E^H Y) (adjoint)."""
    d, m_last = len(ns), ms[-1]
    norm = "forward" if adjoint else "backward"
    for j in range(d - 1):
        y = sfft.ifft(y, axis=1 + j, norm=norm, workers=_workers(y.size), overwrite_x=True)
        if j + 1 < d - 1:
            y = _zero_padded(y, 2 + j, ns[j + 1], ms[j + 1])
    p = lead * math.prod(ns[:-1])
    yf = np.ascontiguousarray(y).view(F32).reshape(-1)
    if adjoint:
        return gemm.gemm(yf, geo.ana_last, 1, p, ns[-1], 2 * m_last, False, True)
    return gemm.gemm(yf, geo.syn_last, 1, p, ns[-1], 2 * m_last, False, False)


# -- the GEMM route (the CUDA algorithm) ------------------------------------------------------------
def _real_mm(v, basis, p, q):
    """v (p, q) @ basis^T, basis (r, q): one GEMM split over the pool (gemm.py)."""
    return gemm.gemm(np.ascontiguousarray(v, F32).reshape(-1), basis, 1, p, basis.shape[0], q, False, True)


def _batched_mm(basis, v, outer, q, inner):
    """basis (r, q) @ v[o] for each of the outer (q, inner) slices: one batched GEMM with a shared A."""
    return gemm.gemm(basis, np.ascontiguousarray(v, F32).reshape(-1), outer, basis.shape[0], inner, q, False, False,
                     shared_a=True)


def _gemm_spectrum(v, lead, ns, ms, bases, adjoint):
    ks = kept_counts(ms)
    first, rest = (bases.syn_t[-1], bases.syn_t) if adjoint else (bases.ana[-1], bases.ana)
    s = analysis(v, lead, ns, ks, first, rest, _real_mm, _batched_mm).reshape(lead, 2, -1)
    out = np.empty((lead, s.shape[2]), C64)
    out.real, out.imag = s[:, 0], s[:, 1]
    return out  # (lead, M)


def _gemm_synthesis(spec, lead, ns, ms, bases, adjoint):
    ks = kept_counts(ms)
    rest, last = (bases.ana_t, bases.ana_t[-1]) if adjoint else (bases.syn, bases.syn[-1])
    s = np.stack([spec.real, spec.imag], axis=1)  # (lead, 2, M) float32
    return synthesis(s, lead, ns, ks, rest, last, _real_mm, _batched_mm).reshape(-1)


# -- the primitives ---------------------------------------------------------------------------------
def _spectrum(v, lead, ns, ms, geo, adjoint):
    """The kept modes of v (lead, n..) and the per-mode factor that completes them: (E v, 1), or for
    T^H v (E v, c_k / N) on the fft route and (T^H v, 1) on the gemm route."""
    if CONV_ROUTE == "gemm":
        return _gemm_spectrum(v, lead, ns, ms, geo.bases, adjoint), geo.unit
    return _fft_spectrum(v, lead, ns, ms, geo), (geo.adj_scale if adjoint else geo.unit)


def _slab(lead, ns, ms):
    """The zeros the mixing writes the kept modes into: the synthesis' input."""
    ks = kept_counts(ms)
    if CONV_ROUTE == "gemm":
        return np.zeros((lead, math.prod(ks)), C64)
    return np.zeros((lead, ns[0]) + ks[1:], C64)


def _synth(y, lead, ns, ms, geo, adjoint):
    if CONV_ROUTE == "gemm":
        return _gemm_synthesis(y, lead, ns, ms, geo.bases, adjoint)
    return _fft_synthesis(y, lead, ns, ms, geo, adjoint)


def _fwd(x, w, batch, cin, cout, ns, ms):
    n_out = batch * cout * math.prod(ns)
    if n_out == 0:
        return np.zeros(0, F32)
    if cin == 0:
        return np.zeros(n_out, F32)
    geo = _geometry(ns, ms)
    spec, scale = _spectrum(x, batch * cin, ns, ms, geo, adjoint=False)
    y = _slab(batch * cout, ns, ms)
    mix(spec, geo.off, w, geo.corner, geo.local, math.prod(ms), cin, cout, False, scale, y, geo.off, batch)
    return _synth(y, batch * cout, ns, ms, geo, adjoint=False)


def _bwd_x(x, w, dy, batch, cin, cout, ns, ms):
    n_out = batch * cin * math.prod(ns)
    if n_out == 0:
        return np.zeros(0, F32)
    if cout == 0:
        return np.zeros(n_out, F32)
    geo = _geometry(ns, ms)
    g, scale = _spectrum(dy, batch * cout, ns, ms, geo, adjoint=True)
    dxs = _slab(batch * cin, ns, ms)
    mix(g, geo.off, w, geo.corner, geo.local, math.prod(ms), cin, cout, True, scale, dxs, geo.off, batch)
    return _synth(dxs, batch * cin, ns, ms, geo, adjoint=True)


def _bwd_w(x, w, dy, batch, cin, cout, ns, ms):
    n_w = 2 ** (len(ms) - 1) * cin * cout * math.prod(ms) * 2
    if batch == 0 or n_w == 0:
        return np.zeros(n_w, F32)
    geo = _geometry(ns, ms)
    xs, _ = _spectrum(x, batch * cin, ns, ms, geo, adjoint=False)
    gs, scale = _spectrum(dy, batch * cout, ns, ms, geo, adjoint=True)
    return weight_grad(xs, gs, geo.off, scale, batch, cin, cout, geo.corner, geo.local, math.prod(ms))


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
