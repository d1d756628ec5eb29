"""Gather and scatter-add on NumPy arrays with host int64 indices already range-checked.

An index that fits in uint32 but is out of bounds reads 0 (gather) or is ignored (scatter);
repeated scatter indices accumulate in index order (``np.add.at`` is sequential).
"""

from __future__ import annotations

import numpy as np

F32 = np.float32

__all__ = ["gather_vec", "gather_rows", "scatter_add", "scatter_add_row", "scatter_add_rows"]


def gather_vec(vec, n, indices, k):
    out = np.zeros(k, dtype=F32)
    ok = indices < n
    out[ok] = vec[indices[ok]]
    return out


def gather_rows(mat, rows, cols, indices, k):
    if k and rows and int(indices.max()) < rows:  # all in bounds: one take, no mask
        return np.take(mat.reshape(rows, cols), indices, axis=0).reshape(-1)
    out = np.zeros((k, cols), dtype=F32)
    ok = indices < rows
    out[ok] = mat.reshape(rows, cols)[indices[ok]]
    return out.reshape(-1)


def scatter_add(x, values, n, indices, k):
    out = x.copy()
    ok = indices < n
    with np.errstate(all="ignore"):
        np.add.at(out, indices[ok], values[ok])
    return out


def scatter_add_row(mat, row_vec, rows, cols, i):
    out = mat.copy()
    if i < rows:
        with np.errstate(all="ignore"):
            out[i * cols:(i + 1) * cols] += row_vec
    return out


def scatter_add_rows(mat, values, rows, cols, indices, k):
    out = mat.reshape(rows, cols).copy()
    ok = indices < rows
    with np.errstate(all="ignore"):
        np.add.at(out, indices[ok], values.reshape(k, cols)[ok])
    return out.reshape(-1)
