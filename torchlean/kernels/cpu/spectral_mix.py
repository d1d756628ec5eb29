"""The per-mode channel mixing of the 2-D/3-D FNO spectral convolutions (kernels/cpu/spectral_nd.py)
as Numba kernels over the kept modes, on the backend's one pool (parallel.py).

Each mode is one small complex product ((batch, cin) @ (cin, cout) forward, its conjugate transpose
for dx, conj(X)^T dY summed over the batch for dw): NumPy's batched matmul runs these one after
another on the caller's thread (BLAS at one thread), and around it needs a gather of the kept modes,
a complex copy of the weights in per-mode order and a scatter back. Here one kernel call reads the
spectra where the transforms left them (``*_off[m]``: mode m's offset in a channel's plane), the
weights in their own layout (corners, cin, cout, m.., 2) through ``corner``/``local``
(spectral_nd_basis.corner_index), scales mode m by ``scale[m]`` and writes straight into the next
transform's input (or the weights' gradient layout).

Bits: every output element is computed by one thread as the same float32 chain (products, then the
sum over input channels, or over the batch for dw, in ascending order; no fast-math, so no FMA
contraction or reassociation), so the result does not depend on how the modes are split.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .parallel import parts

__all__ = ["mix", "weight_grad"]

F32 = np.float32
_MIN_MACS = 1 << 15  # complex multiply-adds per part at least: below, one region costs more than it saves


@njit(cache=True, nogil=True)
def _mix_range(m0, m1, src, in_off, s_in, w, corner, local, mm, cin, cout, adj, scale, dst, out_off, s_out, batch):
    """Modes [m0, m1): dst[b, q, out_off[m]] = scale[m] sum_p src[b, p, in_off[m]] W[m, p, q], with
    W = w (cin -> cout) or, adj, its conjugate transpose (cout -> cin). src, dst, w: float32 pairs."""
    np_, nq = (cout, cin) if adj else (cin, cout)
    wr = np.empty((np_, nq), F32)
    wi = np.empty((np_, nq), F32)
    xr = np.empty(np_, F32)
    xi = np.empty(np_, F32)
    ar = np.empty(nq, F32)
    ai = np.empty(nq, F32)
    for m in range(m0, m1):
        for i in range(cin):
            for o in range(cout):
                k = (((corner[m] * cin + i) * cout + o) * mm + local[m]) * 2
                if adj:
                    wr[o, i] = w[k]
                    wi[o, i] = -w[k + 1]
                else:
                    wr[i, o] = w[k]
                    wi[i, o] = w[k + 1]
        sc = scale[m]
        for b in range(batch):
            for p in range(np_):
                k = ((b * np_ + p) * s_in + in_off[m]) * 2
                xr[p] = src[k]
                xi[p] = src[k + 1]
            ar[:] = 0
            ai[:] = 0
            for p in range(np_):
                for q in range(nq):
                    ar[q] += xr[p] * wr[p, q] - xi[p] * wi[p, q]
                    ai[q] += xr[p] * wi[p, q] + xi[p] * wr[p, q]
            for q in range(nq):
                k = ((b * nq + q) * s_out + out_off[m]) * 2
                dst[k] = ar[q] * sc
                dst[k + 1] = ai[q] * sc


@njit(cache=True, nogil=True)
def _grad_range(m0, m1, xs, gs, off, s_pl, scale, batch, cin, cout, corner, local, mm, dw):
    """Modes [m0, m1): dw at (corner, i, o, local) = scale[m] sum_b conj(x[b, i, m]) g[b, o, m]."""
    dr = np.empty((cin, cout), F32)
    di = np.empty((cin, cout), F32)
    gr = np.empty(cout, F32)
    gi = np.empty(cout, F32)
    for m in range(m0, m1):
        dr[:] = 0
        di[:] = 0
        for b in range(batch):
            for o in range(cout):
                k = ((b * cout + o) * s_pl + off[m]) * 2
                gr[o] = gs[k]
                gi[o] = gs[k + 1]
            for i in range(cin):
                k = ((b * cin + i) * s_pl + off[m]) * 2
                xr, xi = xs[k], xs[k + 1]
                for o in range(cout):
                    dr[i, o] += xr * gr[o] + xi * gi[o]
                    di[i, o] += xr * gi[o] - xi * gr[o]
        sc = scale[m]
        for i in range(cin):
            for o in range(cout):
                k = (((corner[m] * cin + i) * cout + o) * mm + local[m]) * 2
                dw[k] = dr[i, o] * sc
                dw[k + 1] = di[i, o] * sc


@njit(cache=True, parallel=True, nogil=True)
def _mix_par(nparts, n_modes, src, in_off, s_in, w, corner, local, mm, cin, cout, adj, scale, dst, out_off, s_out,
             batch):
    for t in prange(nparts):
        _mix_range(n_modes * t // nparts, n_modes * (t + 1) // nparts, src, in_off, s_in, w, corner, local, mm, cin,
                   cout, adj, scale, dst, out_off, s_out, batch)


@njit(cache=True, parallel=True, nogil=True)
def _grad_par(nparts, n_modes, xs, gs, off, s_pl, scale, batch, cin, cout, corner, local, mm, dw):
    for t in prange(nparts):
        _grad_range(n_modes * t // nparts, n_modes * (t + 1) // nparts, xs, gs, off, s_pl, scale, batch, cin, cout,
                    corner, local, mm, dw)


def _f32(a: np.ndarray) -> np.ndarray:
    """A complex64 or float32 array as flat float32 pairs (a view when contiguous and writeable: a
    read-only array is another Numba type, another compile)."""
    return np.require(a, None, ["C", "W"]).view(F32).reshape(-1)


def mix(src, in_off, w, corner, local, mm, cin, cout, adj, scale, dst, out_off, batch):
    """Mixes the kept modes of src (batch, cin, plane) (adj: (batch, cout, plane)) complex64 into dst
    (batch, cout, plane') (adj: cin), a contiguous complex64 array whose other entries are left as
    they are; w flat float32 (corners, cin, cout, m.., 2)."""
    n_modes = in_off.size
    np_ = cout if adj else cin
    s_in, s_out = src.size // max(batch * np_, 1), dst.size // max(batch * (cin if adj else cout), 1)
    args = (_f32(src), in_off, s_in, np.require(w, F32, ["C", "W"]), corner, local, mm, cin, cout, adj, scale,
            dst.view(F32).reshape(-1), out_off, s_out, batch)
    k = parts(n_modes * batch * cin * cout, n_modes, _MIN_MACS)
    if k > 1:
        _mix_par(k, n_modes, *args)
    else:
        _mix_range(0, n_modes, *args)


def weight_grad(xs, gs, off, scale, batch, cin, cout, corner, local, mm):
    """The weights' gradient, flat float32 (corners, cin, cout, m.., 2): per kept mode m,
    scale[m] conj(X_m)^T G_m over the batch, from xs (batch, cin, plane) and gs (batch, cout, plane)."""
    n_modes = off.size
    dw = np.empty(n_modes * cin * cout * 2, F32)
    s_pl = xs.size // max(batch * cin, 1)
    args = (_f32(xs), _f32(gs), off, s_pl, scale, batch, cin, cout, corner, local, mm, dw)
    k = parts(n_modes * batch * cin * cout, n_modes, _MIN_MACS)
    if k > 1:
        _grad_par(k, n_modes, *args)
    else:
        _grad_range(0, n_modes, *args)
    return dw
