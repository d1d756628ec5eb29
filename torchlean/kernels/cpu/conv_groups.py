"""CPU kernels of grouped and dilated convolutions (plans with ``plain`` False): conv, conv_bwd_input,
conv_bwd_weight; conv.py hands such plans here, and conv_transpose reaches them through its adjoint.

Two routes:

* depthwise 1-D (groups == in_c == out_c, rank 1: the short causal conv of every Mamba block): a
  direct Numba loop per (image, channel) row, rows split over Numba's threads by parallel.parts.
  Each output element is summed in one fixed order (taps ascending; dx: taps ascending; dw: images
  then positions, in float64), so the bits do not depend on the split.
* everything else: a gather im2col, then one GEMM per group (gemm.py, batched over the groups).
  The columns (C*K, nb*P), rows (channel, kernel offset) and columns (image, output position),
  are gathered one axis at a time: along axis i, output o and tap k read input o*stride +
  k*dilation - padding, or a zero appended to the axis where that falls in the padding. Memory is
  the size of the columns whatever the stride and padding (no padded copy of the input). Channel
  rows of group g are the g-th block of C/G, so W_g (O/G, C/G*K) @ col_g is that group's output.
  conv_bwd_input is W_g^T dy_g, then the adjoint of the gathers (per axis, taps ascending, each a
  scatter onto distinct positions; taps in the padding land on the appended slot, which is
  dropped); conv_bwd_weight is dy_g @ col_g^T summed over chunks in order.

Conventions as conv.py's (and the spec's): a padded position is a value 0 in conv and
conv_bwd_weight (0 * inf = NaN), and no term at all in conv_bwd_input.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from ..plans import ConvPlan
from . import parallel
from .gemm import gemm

__all__ = ["conv", "conv_bwd_input", "conv_bwd_weight", "depthwise_1d"]

F32 = np.float32
_COL_BYTES = 8 << 20  # one chunk's column matrix, as in conv.py
_ROW_WORK = 1 << 15   # multiply-adds per part at least (a region's start costs a few microseconds)


def depthwise_1d(plan: ConvPlan) -> bool:
    """Whether the plan is a depthwise 1-D conv (one input and one output channel per group)."""
    return len(plan.spatial) == 1 and plan.groups == plan.in_c == plan.out_c and plan.in_c > 0


# -- depthwise 1-D -----------------------------------------------------------------------------------
@njit(inline="always", nogil=True)
def _dw_fwd_rows(x, w, b, y, r0, r1, c_n, n_in, n_out, k_n, s, p, d, has_b):
    for r in range(r0, r1):
        c = r % c_n
        xb, yb, wb = r * n_in, r * n_out, c * k_n
        for o in range(n_out):
            acc = np.float32(0.0)
            i0 = o * s - p
            for k in range(k_n):
                i = i0 + k * d
                v = x[xb + i] if 0 <= i < n_in else np.float32(0.0)
                acc += w[wb + k] * v
            y[yb + o] = acc + b[c] if has_b else acc


@njit(cache=True, nogil=True, parallel=True, error_model="numpy")
def _dw_fwd(x, w, b, y, t, rows, c_n, n_in, n_out, k_n, s, p, d, has_b):
    for i in prange(t):
        _dw_fwd_rows(x, w, b, y, rows * i // t, rows * (i + 1) // t, c_n, n_in, n_out, k_n, s, p, d, has_b)


@njit(inline="always", nogil=True)
def _dw_bwd_input_rows(dy, w, dx, r0, r1, c_n, n_in, n_out, k_n, s, p, d):
    for r in range(r0, r1):
        c = r % c_n
        xb, yb, wb = r * n_in, r * n_out, c * k_n
        for i in range(n_in):
            acc = np.float32(0.0)
            for k in range(k_n):
                j = i + p - k * d  # = o * s for the output o whose tap k lands on i
                if j >= 0 and j % s == 0 and j // s < n_out:
                    acc += w[wb + k] * dy[yb + j // s]
            dx[xb + i] = acc


@njit(cache=True, nogil=True, parallel=True, error_model="numpy")
def _dw_bwd_input(dy, w, dx, t, rows, c_n, n_in, n_out, k_n, s, p, d):
    for i in prange(t):
        _dw_bwd_input_rows(dy, w, dx, rows * i // t, rows * (i + 1) // t, c_n, n_in, n_out, k_n, s, p, d)


@njit(inline="always", nogil=True)
def _dw_bwd_weight_channels(x, dy, dw, c0, c1, batch, c_n, n_in, n_out, k_n, s, p, d):
    for c in range(c0, c1):
        for k in range(k_n):
            acc = 0.0  # float64: batch * n_out terms
            for n in range(batch):
                xb, yb = (n * c_n + c) * n_in, (n * c_n + c) * n_out
                for o in range(n_out):
                    i = o * s - p + k * d
                    v = x[xb + i] if 0 <= i < n_in else np.float32(0.0)
                    acc += np.float64(dy[yb + o] * v)
            dw[c * k_n + k] = np.float32(acc)


@njit(cache=True, nogil=True, parallel=True, error_model="numpy")
def _dw_bwd_weight(x, dy, dw, t, batch, c_n, n_in, n_out, k_n, s, p, d):
    for i in prange(t):
        _dw_bwd_weight_channels(x, dy, dw, c_n * i // t, c_n * (i + 1) // t, batch, c_n, n_in, n_out, k_n, s, p, d)


def _dw_dims(plan: ConvPlan) -> tuple:
    return (plan.in_c, plan.spatial[0], plan.out[0], plan.kernel[0], plan.stride[0], plan.padding[0],
            plan.dilation[0])


# -- the gather im2col -------------------------------------------------------------------------------
def _taps(n: int, k: int, s: int, p: int, d: int, o: int) -> np.ndarray:
    """(o * k,) input positions of (output, tap) pairs along one axis; slot n (an appended zero) where
    the tap falls in the padding."""
    idx = (np.arange(o, dtype=np.int64)[:, None] * s + np.arange(k, dtype=np.int64) * d - p).reshape(-1)
    idx[(idx < 0) | (idx >= n)] = n
    return idx


def _axis_taps(plan: ConvPlan) -> list:
    return [_taps(n, k, s, p, d, o) for n, k, s, p, d, o in
            zip(plan.spatial, plan.kernel, plan.stride, plan.padding, plan.dilation, plan.out)]


def _im2col(xc: np.ndarray, plan: ConvPlan, taps) -> np.ndarray:
    """The (C*K, nb*P) column matrix of a chunk xc (nb, C, *spatial)."""
    nb, c = xc.shape[:2]
    r = len(plan.kernel)
    a = xc
    for i in range(r):
        ax = 2 + i
        zero = np.zeros(a.shape[:ax] + (1,) + a.shape[ax + 1:], F32)
        a = np.take(np.concatenate([a, zero], axis=ax), taps[i], axis=ax)  # (.., out_i * k_i, ..)
    a = a.reshape((nb, c) + tuple(v for o, k in zip(plan.out, plan.kernel) for v in (o, k)))
    # (nb, C, o0, k0, o1, k1, ...) -> (C, k0, k1, ..., nb, o0, o1, ...)
    order = (1,) + tuple(3 + 2 * i for i in range(r)) + (0,) + tuple(2 + 2 * i for i in range(r))
    col = np.ascontiguousarray(a.transpose(order))
    return col.reshape(c * math.prod(plan.kernel), nb * math.prod(plan.out))


def _col2im(dcol: np.ndarray, nb: int, plan: ConvPlan, taps) -> np.ndarray:
    """The adjoint of _im2col: dcol (C*K, nb*P) onto (nb, C, *spatial), taps in the padding dropped."""
    c, r = plan.in_c, len(plan.kernel)
    a = dcol.reshape((c,) + tuple(plan.kernel) + (nb,) + tuple(plan.out))
    order = (1 + r, 0) + tuple(v for i in range(r) for v in (2 + r + i, 1 + i))  # (nb, C, o0, k0, o1, k1, ...)
    a = a.transpose(order)
    for i in reversed(range(r)):  # the last axis was gathered last; axes before i are still (o_j, k_j) pairs
        ax = 2 + 2 * i
        o, k, n = plan.out[i], plan.kernel[i], plan.spatial[i]
        idx = taps[i].reshape(o, k)
        full = np.zeros(a.shape[:ax] + (n + 1,) + a.shape[ax + 2:], F32)
        every = (slice(None),) * ax
        for j in range(k):  # taps ascending; one tap's outputs land on distinct positions (or the slot)
            full[every + (idx[:, j],)] += a[every + (slice(None), j)]
        a = full[every + (slice(0, n),)]
    return a


def _chunks(batch: int, per_image: int):
    nb = max(1, _COL_BYTES // max(4 * per_image, 1))
    for n0 in range(0, batch, nb):
        yield n0, min(batch, n0 + nb)


def _group_dims(plan: ConvPlan) -> tuple:
    """(G, C/G * K, O/G, K, P)."""
    g, k_n = plan.groups, math.prod(plan.kernel)
    return g, plan.in_c // g * k_n, plan.out_c // g, k_n, math.prod(plan.out)


# -- the primitives ---------------------------------------------------------------------------------
def conv(x, w, b, plan: ConvPlan):
    parallel.blas_one_thread()
    batch, in_c, out_c = plan.batch, plan.in_c, plan.out_c
    g, cgk, og, k_n, p_n = _group_dims(plan)
    y = np.empty((batch, out_c, p_n), F32)
    if y.size == 0:
        return y.reshape(-1)
    with np.errstate(all="ignore"):
        if in_c == 0:  # no terms: the bias alone
            y[...] = 0.0 if b is None else b[:, None]
            return y.reshape(-1)
        if depthwise_1d(plan):
            c_n, n_in, n_out, kk, s, p, d = _dw_dims(plan)
            rows = batch * c_n
            t = parallel.parts(rows * n_out * kk, rows, _ROW_WORK)
            _dw_fwd(x, w, np.zeros(1, F32) if b is None else b, y.reshape(-1), t, rows, c_n, n_in, n_out, kk, s, p,
                    d, b is not None)
            return y.reshape(-1)
        taps = _axis_taps(plan)
        x5 = x.reshape((batch, in_c) + tuple(plan.spatial))
        for n0, n1 in _chunks(batch, in_c * k_n * p_n):
            nb = n1 - n0
            col = _im2col(x5[n0:n1], plan, taps)
            yc = gemm(w, col.reshape(-1), g, og, nb * p_n, cgk, False, False)  # (G, O/G, nb, P)
            y[n0:n1] = yc.reshape(out_c, nb, p_n).transpose(1, 0, 2)
            if b is not None:
                y[n0:n1] += b[:, None]
    return y.reshape(-1)


def conv_bwd_input(dy, w, plan: ConvPlan):
    parallel.blas_one_thread()
    batch, in_c, out_c = plan.batch, plan.in_c, plan.out_c
    g, cgk, og, k_n, p_n = _group_dims(plan)
    s_n = math.prod(plan.spatial)
    dx = np.empty((batch, in_c, s_n), F32)
    if dx.size == 0:
        return dx.reshape(-1)
    if out_c == 0:
        dx[...] = 0.0
        return dx.reshape(-1)
    with np.errstate(all="ignore"):
        if depthwise_1d(plan):
            c_n, n_in, n_out, kk, s, p, d = _dw_dims(plan)
            rows = batch * c_n
            t = parallel.parts(rows * n_in * kk, rows, _ROW_WORK)
            _dw_bwd_input(dy, w, dx.reshape(-1), t, rows, c_n, n_in, n_out, kk, s, p, d)
            return dx.reshape(-1)
        taps = _axis_taps(plan)
        g3 = dy.reshape(batch, out_c, p_n)
        for n0, n1 in _chunks(batch, in_c * k_n * p_n):
            nb = n1 - n0
            dyp = np.ascontiguousarray(g3[n0:n1].transpose(1, 0, 2))  # (G, O/G, nb*P)
            dcol = gemm(w, dyp.reshape(-1), g, cgk, nb * p_n, og, True, False)  # (G, C/G*K, nb*P)
            dx[n0:n1] = _col2im(dcol.reshape(in_c * k_n, nb * p_n), nb, plan, taps).reshape(nb, in_c, s_n)
    return dx.reshape(-1)


def conv_bwd_weight(x, dy, plan: ConvPlan):
    parallel.blas_one_thread()
    batch, in_c, out_c = plan.batch, plan.in_c, plan.out_c
    g, cgk, og, k_n, p_n = _group_dims(plan)
    n_w = out_c * cgk
    if n_w == 0 or batch == 0:
        return np.zeros(n_w, F32)
    with np.errstate(all="ignore"):
        if depthwise_1d(plan):
            c_n, n_in, n_out, kk, s, p, d = _dw_dims(plan)
            dw = np.empty(n_w, F32)
            t = parallel.parts(batch * c_n * n_out * kk, c_n, _ROW_WORK)
            _dw_bwd_weight(x, dy, dw, t, batch, c_n, n_in, n_out, kk, s, p, d)
            return dw
        taps = _axis_taps(plan)
        x5 = x.reshape((batch, in_c) + tuple(plan.spatial))
        g3 = dy.reshape(batch, out_c, p_n)
        dw = None
        for n0, n1 in _chunks(batch, (in_c * k_n + out_c) * p_n):
            nb = n1 - n0
            col = _im2col(x5[n0:n1], plan, taps)                       # (G, C/G*K, nb*P)
            dyp = np.ascontiguousarray(g3[n0:n1].transpose(1, 0, 2))  # (G, O/G, nb*P)
            part = gemm(dyp.reshape(-1), col.reshape(-1), g, og, cgk, nb * p_n, False, True)  # (G, O/G, C/G*K)
            if dw is None:
                dw = part
            else:
                dw += part  # chunks in order: a fixed order of summation
    return dw
