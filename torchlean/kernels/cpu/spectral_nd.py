"""CPU 2-D/3-D FNO spectral convolutions (spec/spectral_nd.py): the truncated DFT as GEMMs
(kernels/spectral_nd_basis.py), the CUDA backend's algorithm, with the per-mode channel mixing as one
Numba kernel over the kept modes (kernels/cpu/spectral_mix.py) between them.

The last axis is one GEMM against its truncated basis, each leading axis a batched GEMM with the
axis' (2 K_j, 2 n_j) real basis shared by every slice, all through gemm.gemm on the backend's one
pool (parallel.py); no stage's bits depend on the thread count. The adjoints (bwd_x) walk the
transposed bases. The full spectrum is never formed: only the kept modes live between the GEMMs.

Why not FFTs for the leading axes: pocketfft runs its own threads, which fight the pool's workers
(they spin for a while after each region) on a many-core CPU, and lengths such as 94 (the FNO2d
reference's 85 + 9 padding) are slow FFT sizes. An FFT route (pocketfft on the leading axes) cost
about the same on one core, up to 20% less on two at 64 x 64, and 2-2.5x more on 16 (BENCHMARKS.md);
one route keeps the bits a function of the shape alone.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ..caches import ByteLRU
from ..spectral_nd_basis import Bases, analysis, corner_index, kept_counts, make_bases, synthesis
from . import gemm
from .spectral_mix import mix, weight_grad

__all__ = ["spectral_conv2d_rfft_fwd", "spectral_conv2d_rfft_bwd_x", "spectral_conv2d_rfft_bwd_w",
           "spectral_conv3d_rfft_fwd", "spectral_conv3d_rfft_bwd_x", "spectral_conv3d_rfft_bwd_w"]

F32, C64 = np.float32, np.complex64
_cache = ByteLRU("cpu", 64 << 20, max_entries=32)


class _Geo(NamedTuple):
    bases: Bases
    corner: np.ndarray      # per kept mode: its weight corner and index in it (corner_index)
    local: np.ndarray
    off: np.ndarray         # per kept mode: its offset in a channel's M kept modes
    unit: np.ndarray        # per kept mode: 1 (float32)


def _geometry(ns, ms) -> _Geo:
    """The per-(ns, ms) tables, cached."""
    key = ("spectral_nd", ns, ms)
    hit = _cache.get(key)
    if hit is None:
        bases = Bases(*(tuple(np.array(b) for b in t) for t in make_bases(ns, ms)))  # writeable: Numba's one typing
        corner, local = corner_index(ms)
        hit = _Geo(bases, corner, local, np.arange(corner.size, dtype=np.int64), np.ones(corner.size, F32))
        _cache.put(key, hit, sum(b.nbytes for t in bases for b in t) + sum(t.nbytes for t in hit[1:]))
    return hit


def _real_mm(v, basis, p, q):
    """v (p, q) @ basis^T, basis (r, q): one GEMM split over the pool (gemm.py)."""
    return gemm.gemm(np.ascontiguousarray(v, F32).reshape(-1), basis, 1, p, basis.shape[0], q, False, True)


def _batched_mm(basis, v, outer, q, inner):
    """basis (r, q) @ v[o] for each of the outer (q, inner) slices: one batched GEMM with a shared A."""
    return gemm.gemm(basis, np.ascontiguousarray(v, F32).reshape(-1), outer, basis.shape[0], inner, q, False, False,
                     shared_a=True)


def _spectrum(v, lead, ns, ms, bases, adjoint):
    """The kept modes (lead, M) complex64 of v (lead, n..): E v, or T^H v (adjoint)."""
    ks = kept_counts(ms)
    first, rest = (bases.syn_t[-1], bases.syn_t) if adjoint else (bases.ana[-1], bases.ana)
    s = analysis(v, lead, ns, ks, first, rest, _real_mm, _batched_mm).reshape(lead, 2, -1)
    out = np.empty((lead, s.shape[2]), C64)
    out.real, out.imag = s[:, 0], s[:, 1]
    return out


def _synth(spec, lead, ns, ms, bases, adjoint):
    """(lead, n..) float32 flat from the kept modes spec (lead, M): Re(T Y), or Re(E^H Y) (adjoint)."""
    ks = kept_counts(ms)
    rest, last = (bases.ana_t, bases.ana_t[-1]) if adjoint else (bases.syn, bases.syn[-1])
    s = np.stack([spec.real, spec.imag], axis=1)  # (lead, 2, M) float32
    return synthesis(s, lead, ns, ks, rest, last, _real_mm, _batched_mm).reshape(-1)


# -- the primitives ---------------------------------------------------------------------------------
def _fwd(x, w, batch, cin, cout, ns, ms):
    n_out = batch * cout * math.prod(ns)
    if n_out == 0:
        return np.zeros(0, F32)
    if cin == 0:
        return np.zeros(n_out, F32)
    geo = _geometry(ns, ms)
    spec = _spectrum(x, batch * cin, ns, ms, geo.bases, adjoint=False)
    y = np.empty((batch * cout, geo.off.size), C64)
    mix(spec, geo.off, w, geo.corner, geo.local, math.prod(ms), cin, cout, False, geo.unit, y, geo.off, batch)
    return _synth(y, batch * cout, ns, ms, geo.bases, adjoint=False)


def _bwd_x(x, w, dy, batch, cin, cout, ns, ms):
    n_out = batch * cin * math.prod(ns)
    if n_out == 0:
        return np.zeros(0, F32)
    if cout == 0:
        return np.zeros(n_out, F32)
    geo = _geometry(ns, ms)
    g = _spectrum(dy, batch * cout, ns, ms, geo.bases, adjoint=True)
    dxs = np.empty((batch * cin, geo.off.size), C64)
    mix(g, geo.off, w, geo.corner, geo.local, math.prod(ms), cin, cout, True, geo.unit, dxs, geo.off, batch)
    return _synth(dxs, batch * cin, ns, ms, geo.bases, adjoint=True)


def _bwd_w(x, w, dy, batch, cin, cout, ns, ms):
    n_w = 2 ** (len(ms) - 1) * cin * cout * math.prod(ms) * 2
    if batch == 0 or n_w == 0:
        return np.zeros(n_w, F32)
    geo = _geometry(ns, ms)
    xs = _spectrum(x, batch * cin, ns, ms, geo.bases, adjoint=False)
    gs = _spectrum(dy, batch * cout, ns, ms, geo.bases, adjoint=True)
    return weight_grad(xs, gs, geo.off, geo.unit, batch, cin, cout, geo.corner, geo.local, math.prod(ms))


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
