"""Gather and scatter-add on NumPy arrays with host int64 indices already range-checked.

An index that fits in uint32 but is out of bounds reads 0 (gather) or is ignored (scatter);
repeated scatter indices accumulate in index order: the scatters are one sequential Numba loop
(float32 additions in index order, the same bits as the ``np.add.at`` they replace, whose
per-index overhead is far larger than a compiled loop's).
gather_rows is one Numba loop too (a row copy or zeros per index: no bounds-check reduction and
no mask; as fast as ``np.take`` on large tables).
"""

from __future__ import annotations

import numpy as np
from numba import njit

F32 = np.float32

__all__ = ["gather_vec", "gather_rows", "scatter_add", "scatter_add_row", "scatter_add_rows"]


def gather_vec(vec, n, indices, k):
    out = np.zeros(k, dtype=F32)
    ok = indices < n
    out[ok] = vec[indices[ok]]
    return out


@njit(cache=True, error_model="numpy")
def _gather_rows(mat2, rows, indices, out2):
    cols = mat2.shape[1]
    for r in range(indices.size):
        i = indices[r]
        dst = out2[r]
        if i < rows:
            src = mat2[i]
            for c in range(cols):
                dst[c] = src[c]
        else:
            for c in range(cols):
                dst[c] = 0.0


def gather_rows(mat, rows, cols, indices, k):
    out = np.empty(k * cols, dtype=F32)
    if k and cols:
        _gather_rows(mat.reshape(rows, cols), rows, np.ascontiguousarray(indices, dtype=np.int64),
                     out.reshape(k, cols))
    return out


@njit(cache=True, error_model="numpy")
def _scatter_vec(out, values, n, indices):
    for r in range(indices.size):
        i = indices[r]
        if i < n:
            out[i] += values[r]


@njit(cache=True, error_model="numpy")
def _scatter_rows(out2, values2, rows, indices):
    cols = out2.shape[1]
    for r in range(indices.size):
        i = indices[r]
        if i < rows:
            dst, src = out2[i], values2[r]
            for c in range(cols):
                dst[c] += src[c]


def scatter_add(x, values, n, indices, k):
    out = x.copy()
    if k:
        _scatter_vec(out, values, n, np.ascontiguousarray(indices, dtype=np.int64))
    return out


def scatter_add_row(mat, row_vec, rows, cols, i):
    out = mat.copy()
    if i < rows:
        with np.errstate(all="ignore"):
            out[i * cols:(i + 1) * cols] += row_vec
    return out


def scatter_add_rows(mat, values, rows, cols, indices, k):
    out = mat.reshape(rows, cols).copy()
    if k and cols:
        _scatter_rows(out, values.reshape(k, cols), rows, np.ascontiguousarray(indices, dtype=np.int64))
    return out.reshape(-1)
