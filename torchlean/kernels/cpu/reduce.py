"""Reductions and the fused row kernels (softmax / log-softmax) on float32 NumPy arrays.

NumPy sums contiguous runs pairwise and strided runs sequentially; either way the order is fixed
by the shape, so results are bitwise repeatable.
"""

from __future__ import annotations

import numpy as np

F32 = np.float32
_IGNORE = dict(all="ignore")

__all__ = [
    "reduce_sum", "reduce_mean", "reduce_sum_axis0", "reduce_sum_axis1", "reduce_max_axis0",
    "reduce_max_axis1", "reduce_sum_axis", "softmax_rows", "softmax_rows_bwd",
    "log_softmax_rows", "log_softmax_rows_bwd",
]


def reduce_sum(x):
    with np.errstate(**_IGNORE):
        return np.array([np.add.reduce(x)], dtype=F32)


def reduce_mean(x):
    if x.size == 0:
        return np.array([np.nan], dtype=F32)
    with np.errstate(**_IGNORE):
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
