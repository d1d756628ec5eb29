"""Gather and scatter-add on NumPy arrays with host int64 indices already range-checked.

An index that fits in uint32 but is out of bounds reads 0 (gather) or is ignored (scatter);
repeated scatter indices accumulate in index order: the scatters are one sequential Numba loop
(float32 additions in index order, the same bits as the ``np.add.at`` they replace, whose
per-index overhead is far larger than a compiled loop's).
gather_rows is one Numba loop too (a row copy or zeros per index: no bounds-check reduction and
no mask; as fast as ``np.take`` on large tables).

Large calls split over Numba's threads (``parallel.parts``) without changing a bit: gather_rows
by blocks of indices; the scatters copy the input with elementwise.copy (contiguous chunks, so each
thread first-touches its own pages of a fresh result), then split the additions by blocks of the
OUTPUT: each thread walks all the indices in order and adds only into its block, so every output
element receives its additions in index order from one thread, whatever the thread count. The
block is a slab of columns (all rows; slab edges on 64-byte lines) where the rows are wide enough
for every thread to get a line of its own, as an embedding table's gradient: then a skewed index
distribution (a few frequent tokens) still spreads evenly. Otherwise it is a range of rows.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from . import elementwise, parallel

F32 = np.float32
# Floats copied or added per part at least (a parallel region's start costs a few microseconds).
MIN_WORK = 1 << 16
_LINE = 16  # floats per 64-byte cache line: column slabs start on multiples of it

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


@njit(cache=True, nogil=True, parallel=True, error_model="numpy")
def _gather_rows_par(mat2, rows, indices, out2, t):
    k = indices.size
    for p in prange(t):
        lo, hi = k * p // t, k * (p + 1) // t
        _gather_rows(mat2, rows, indices[lo:hi], out2[lo:hi])


def gather_rows(mat, rows, cols, indices, k):
    out = np.empty(k * cols, dtype=F32)
    if k and cols:
        args = (mat.reshape(rows, cols), rows, np.ascontiguousarray(indices, dtype=np.int64), out.reshape(k, cols))
        t = parallel.parts(k * cols, k, MIN_WORK)
        if t > 1:
            _gather_rows_par(*args, t)
        else:
            _gather_rows(*args)
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


@njit(cache=True, nogil=True, error_model="numpy")
def _scatter_block(values2, indices, out2, r0, r1, c0, c1):
    """Adds, in index order, the columns c0:c1 of every values2[j] whose row indices[j] falls in
    [r0, r1) into that row of out2."""
    w = c1 - c0  # the loop runs from 0 (slices): indices known non-negative, no wraparound check
    for j in range(indices.size):
        i = indices[j]
        if i >= r0 and i < r1:
            dst, val = out2[i, c0:c1], values2[j, c0:c1]
            for c in range(w):
                dst[c] += val[c]


@njit(cache=True, nogil=True, parallel=True, error_model="numpy")
def _scatter_par(values2, indices, out2, t, by_cols):
    """out2[indices[j]] += values2[j] (j in order; indices >= rows skipped) on t parts, each
    owning a slab of columns (by_cols) or a range of rows of out2."""
    rows, cols = out2.shape
    for p in prange(t):
        if by_cols:
            c0 = (cols * p // t) // _LINE * _LINE
            c1 = (cols * (p + 1) // t) // _LINE * _LINE if p + 1 < t else cols
            _scatter_block(values2, indices, out2, 0, rows, c0, c1)
        else:
            _scatter_block(values2, indices, out2, rows * p // t, rows * (p + 1) // t, 0, cols)


def _add_rows(out2, values2, indices):
    """out2[indices[j]] += values2[j] in index order, on Numba's threads where it pays. Every part
    walks all the indices, so rows narrower than a cache line stay whole (the walk would cost as
    much as the additions)."""
    rows, cols = out2.shape
    by_cols = cols // _LINE >= parallel.threads()
    t = parallel.parts(indices.size * cols, cols // _LINE if by_cols else rows, MIN_WORK) if cols >= _LINE else 1
    if t > 1:
        _scatter_par(values2, indices, out2, t, by_cols)
    else:
        _scatter_rows(out2, values2, rows, indices)


def scatter_add(x, values, n, indices, k):
    out = elementwise.copy(x)  # on Numba's threads when large (first touch of a fresh mapping included)
    if k:
        _scatter_vec(out, values, n, np.ascontiguousarray(indices, dtype=np.int64))
    return out


def scatter_add_row(mat, row_vec, rows, cols, i):
    out = elementwise.copy(mat)
    if i < rows:
        with np.errstate(all="ignore"):
            out[i * cols:(i + 1) * cols] += row_vec
    return out


def scatter_add_rows(mat, values, rows, cols, indices, k):
    out = elementwise.copy(mat)
    if k and cols:
        _add_rows(out.reshape(rows, cols), values.reshape(k, cols), np.ascontiguousarray(indices, dtype=np.int64))
    return out.reshape(-1)
