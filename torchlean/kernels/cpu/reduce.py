"""Reductions and the fused row kernels (softmax / log-softmax) on float32 NumPy arrays.

NumPy sums contiguous runs pairwise and strided runs sequentially; either way the order is fixed
by the shape, so results are bitwise repeatable.

A long full sum (``reduce_sum`` / ``reduce_mean`` of SUM_SPLIT elements or more: a gradient's
squared norm in ``clip_grad_norm_``, a loss over a large batch) runs on the pool instead: fixed
chunks of SUM_CHUNK elements, each summed in float64, the chunk sums added in chunk order in
float64, rounded once. The chunks are a function of the length alone, so the bits never depend on
the thread count; NumPy's one-thread pairwise sum left 15 of 16 cores idle on these.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from . import parallel

F32 = np.float32
_IGNORE = dict(all="ignore")

__all__ = [
    "reduce_sum", "reduce_mean", "reduce_sum_axis0", "reduce_sum_axis1", "reduce_max_axis0",
    "reduce_max_axis1", "reduce_sum_axis", "softmax_rows", "softmax_rows_bwd",
    "log_softmax_rows", "log_softmax_rows_bwd",
]


SUM_SPLIT = 1 << 20   # elements: from here a full sum runs in chunks on the pool
SUM_CHUNK = 1 << 16   # elements per chunk (the bits depend on it, never on the thread count)


@njit(cache=True, nogil=True)
def _chunk_sums(x, sums, lo, hi):
    n = x.size
    for c in range(lo, hi):
        s = 0.0
        for i in range(c * SUM_CHUNK, min(n, (c + 1) * SUM_CHUNK)):
            s += np.float64(x[i])
        sums[c] = s


@njit(cache=True, nogil=True, parallel=True)
def _chunk_sums_par(x, sums, t):
    nc = sums.size
    for p in prange(t):
        _chunk_sums(x, sums, (nc * p) // t, (nc * (p + 1)) // t)


def _long_sum(x) -> float:
    """float64 sum of x (SUM_SPLIT elements or more) in SUM_CHUNK chunks, chunk sums in order."""
    sums = np.empty(-(-x.size // SUM_CHUNK), np.float64)
    t = parallel.parts(x.size, sums.size, SUM_CHUNK)
    if t > 1:
        _chunk_sums_par(x, sums, t)
    else:
        _chunk_sums(x, sums, 0, sums.size)
    total = 0.0
    for s in sums.tolist():  # chunk order, float64: a few hundred additions
        total += s
    return total


def reduce_sum(x):
    if x.size >= SUM_SPLIT:
        with np.errstate(**_IGNORE):
            return np.array([_long_sum(x)], dtype=F32)
    with np.errstate(**_IGNORE):
        return np.array([np.add.reduce(x)], dtype=F32)


def reduce_mean(x):
    if x.size == 0:
        return np.array([np.nan], dtype=F32)
    with np.errstate(**_IGNORE):
        if x.size >= SUM_SPLIT:  # float32(sum) / float32(n), as below and on CUDA
            return np.array([F32(_long_sum(x)) / F32(x.size)], dtype=F32)
        return np.array([np.add.reduce(x) / F32(x.size)], dtype=F32)


def reduce_sum_axis0(b, rows, cols):
    with np.errstate(**_IGNORE):
        return np.add.reduce(b.reshape(rows, cols), axis=0)


def reduce_sum_axis1(b, rows, cols):
    with np.errstate(**_IGNORE):
        return np.add.reduce(b.reshape(rows, cols), axis=1)


def _fmax(m, axis, other):
    if m.shape[axis] == 0:
        return np.zeros(other, dtype=F32)
    return np.fmax.reduce(m, axis=axis)


def reduce_max_axis0(b, rows, cols):
    return _fmax(b.reshape(rows, cols), 0, cols)


def reduce_max_axis1(b, rows, cols):
    return _fmax(b.reshape(rows, cols), 1, rows)


def reduce_sum_axis(b, dims, axis):
    with np.errstate(**_IGNORE):
        return np.add.reduce(b.reshape(dims), axis=axis).reshape(-1)


def softmax_rows(x, rows, cols):
    if rows * cols == 0:
        return np.zeros(rows * cols, dtype=F32)
    x2 = x.reshape(rows, cols)
    with np.errstate(**_IGNORE):
        e = x2 - x2.max(axis=1, keepdims=True)
        np.exp(e, out=e)
        e /= e.sum(axis=1, keepdims=True)
    return e.reshape(-1)


def softmax_rows_bwd(y, dy, rows, cols):
    y2, d2 = y.reshape(rows, cols), dy.reshape(rows, cols)
    with np.errstate(**_IGNORE):
        dot = np.einsum("ij,ij->i", d2, y2)[:, None] if cols else np.zeros((rows, 1), F32)
        return (y2 * (d2 - dot)).reshape(-1)


def log_softmax_rows(x, rows, cols):
    if rows * cols == 0:
        return np.zeros(rows * cols, dtype=F32)
    x2 = x.reshape(rows, cols)
    with np.errstate(**_IGNORE):
        shifted = x2 - x2.max(axis=1, keepdims=True)
        lse = np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        shifted -= lse
    return shifted.reshape(-1)


def log_softmax_rows_bwd(y, dy, rows, cols):
    y2, d2 = y.reshape(rows, cols), dy.reshape(rows, cols)
    with np.errstate(**_IGNORE):
        return (d2 - np.exp(y2) * d2.sum(axis=1, keepdims=True)).reshape(-1)
