"""The fast-kernel family on the CPU: fast_gemm (NumPy BLAS), mse_loss_fwd / mse_loss_bwd (Numba).

* fast_gemm, fp32: one float32 GEMM (gemm.py) on the operands' (transposed) *views* (the transpose
  goes to BLAS as a flag: no copies), the bias added by gemm.py's work items as they finish their
  blocks: fl(fl(A B) + bias), on every thread. fp64: the operands widened to float64 (two copies: BLAS has no
  mixed-precision GEMM), one float64 GEMM, the bias added in float64 in place, one rounding.
* mse_loss_fwd: one pass in fixed-size chunks spread over Numba's threads; each chunk sums
  (x - t)^2 in float64 (SIMD lanes, see _chunk_sum); the chunk sums are then added in chunk order.
  The bits never depend on the thread count. No difference or square array is ever allocated.
* mse_loss_bwd: one pass, fl(fl(fl(x - t) * g) * c) in float32, chunks over Numba's threads.
* linear_bwd: bmm and bmm_tn as those primitives compute them (gemm.py: the weight gradient over
  many rows is a sum of inner parts, split over the threads), and the column sums of g as
  reduce_sum_axis0 computes them, with its columns spread over the threads (_column_sums).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from . import parallel
from .gemm import gemm

__all__ = ["fast_gemm", "linear_bwd", "mse_loss_fwd", "mse_loss_bwd"]

F32 = np.float32
F64 = np.float64
_CHUNK = 1 << 15  # elements per parallel task (fixed: the summation order depends on n alone)
_PAR_CHUNKS = 4   # at least this many chunks before Numba's threads are used


def _view(x, rows, cols, trans):
    return x.reshape(cols, rows).T if trans else x.reshape(rows, cols)


def fast_gemm(a, b, bias, m, k, n, trans_a, trans_b, fp64):
    if m * n == 0:
        return np.zeros(m * n, dtype=F32)
    if k == 0:
        out = np.zeros((m, n), dtype=F32)
        if bias is not None:
            out += bias
        return out.reshape(-1)
    with np.errstate(all="ignore"):
        if fp64:  # OpenBLAS at one thread, as every backend GEMM (gemm.py)
            A, B = _view(a, m, k, trans_a), _view(b, k, n, trans_b)
            parallel.blas_one_thread()
            out64 = np.matmul(A.astype(F64), B.astype(F64))
            if bias is not None:
                out64 += bias.astype(F64)
            return out64.astype(F32).reshape(-1)
        return gemm(a, b, 1, m, n, k, bool(trans_a), bool(trans_b),
                    bias=None if bias is None else np.ascontiguousarray(bias, dtype=F32))


# Column sums of a (rows, cols) matrix in NumPy's order for np.add.reduce(axis=0) with cols >= 2:
# one chain per column, row after row (NumPy vectorizes across the columns, not down them), so the
# bits are reduce_sum_axis0's. The columns are split into chunks of at least _COL_CHUNK (a cache
# line of float32 and more), one chunk per thread: the order within a column never changes.
_COL_CHUNK = 16
_COL_MIN_ELEMS = 1 << 16  # below, NumPy's one pass on the caller's thread


@njit(cache=True, error_model="numpy", boundscheck=False)
def _col_sums_range(g, rows, cols, j0, j1, out):
    o = out[j0:j1]
    o[:] = g[j0:j1]
    for i in range(1, rows):
        r = g[i * cols + j0:i * cols + j1]
        for j in range(j1 - j0):
            o[j] += r[j]


@njit(cache=True, error_model="numpy", parallel=True)
def _col_sums_par(g, rows, cols, nparts, out):
    for p in prange(nparts):
        _col_sums_range(g, rows, cols, (cols * p) // nparts, (cols * (p + 1)) // nparts, out)


def _column_sums(g, rows, cols):
    """reduce_sum_axis0(g, rows, cols), bit for bit, over Numba's threads where it pays."""
    from .reduce import reduce_sum_axis0

    t = parallel.parts(rows * cols, cols // _COL_CHUNK, _COL_MIN_ELEMS) if cols >= 2 and rows >= 1 else 1
    if t <= 1:
        return reduce_sum_axis0(g, rows, cols)
    out = np.empty(cols, F32)
    with np.errstate(all="ignore"):
        _col_sums_par(g, rows, cols, t, out)
    return out


def linear_bwd(g, x, w, rows, n_in, n_out):
    # The three products of a linear layer's backward, each exactly as its own primitive computes it.
    from .layout import bmm, bmm_tn

    return bmm(g, w, 1, rows, n_out, n_in), bmm_tn(g, x, 1, n_out, rows, n_in), _column_sums(g, rows, n_out)


# The chunk sum may reassociate (fastmath "reassoc" only: no FMA contraction, no NaN/inf
# assumptions), which lets LLVM keep the float64 partial sums in SIMD lanes instead of one
# scalar chain. The order is then fixed by the compiled code and the chunk bounds (n alone), so the
# bits repeat run to run and for any thread count on a machine (a CPU with other SIMD widths may
# compile another order; the contract holds for every order).
@njit(cache=True, error_model="numpy", fastmath={"reassoc"})
def _chunk_sum(x, t, lo, hi):
    xs, ts = x[lo:hi], t[lo:hi]  # indices from 0: LLVM then vectorizes (range(lo, hi) it does not)
    s = 0.0
    for i in range(xs.size):
        d = np.float64(xs[i]) - np.float64(ts[i])
        s += d * d
    return s


@njit(cache=True, parallel=True, error_model="numpy")
def _mse_sum_par(x, t, part):
    n = x.size
    for c in prange(part.size):
        lo = c * _CHUNK
        part[c] = _chunk_sum(x, t, lo, min(n, lo + _CHUNK))


@njit(cache=True, error_model="numpy")
def _mse_sum_seq(x, t, part):
    n = x.size
    for c in range(part.size):
        lo = c * _CHUNK
        part[c] = _chunk_sum(x, t, lo, min(n, lo + _CHUNK))


@njit(cache=True, error_model="numpy")
def _sum_in_order(part):
    s = 0.0
    for c in range(part.size):
        s += part[c]
    return s


@njit(cache=True, error_model="numpy")
def _bwd_range(x, t, g0, c, out, lo, hi):
    xs, ts, os = x[lo:hi], t[lo:hi], out[lo:hi]
    for i in range(xs.size):
        os[i] = ((xs[i] - ts[i]) * g0) * c


@njit(cache=True, parallel=True, error_model="numpy")
def _mse_bwd_par(x, t, g, c, out):
    n = x.size
    for ch in prange((n + _CHUNK - 1) // _CHUNK):
        lo = ch * _CHUNK
        _bwd_range(x, t, g[0], c, out, lo, min(n, lo + _CHUNK))


@njit(cache=True, error_model="numpy")
def _mse_bwd_seq(x, t, g, c, out):
    _bwd_range(x, t, g[0], c, out, 0, x.size)


def mse_loss_fwd(input, target, n, mean):
    s = 0.0
    if n:
        # Chunks of _CHUNK elements (the same arithmetic whether one thread or many run them),
        # their sums added in chunk order. Few chunks: no thread pool (its wake-up costs more).
        part = np.empty((n + _CHUNK - 1) // _CHUNK, dtype=F64)
        (_mse_sum_par if part.size >= _PAR_CHUNKS else _mse_sum_seq)(input, target, part)
        s = float(_sum_in_order(part))
    if mean:
        s = s / n if n else np.nan
    with np.errstate(over="ignore"):
        return np.array([s], dtype=F64).astype(F32)  # float64 -> float32: one rounding


def mse_coefficient(n: int, mean: int) -> float:
    """c of mse_loss_bwd: float32(2 / n) for mean (as mse_loss's scale by 2/n), 2 for sum or n = 0."""
    return float(np.float32(2.0 / n)) if (mean and n) else 2.0


def mse_loss_bwd(input, target, g, n, mean):
    out = np.empty(n, dtype=F32)
    if n:
        fn = _mse_bwd_par if n >= _PAR_CHUNKS * _CHUNK else _mse_bwd_seq
        fn(input, target, g, F32(mse_coefficient(n, mean)), out)
    return out
