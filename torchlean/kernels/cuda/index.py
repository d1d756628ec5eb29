"""Gather and scatter-add on CuPy arrays, with host int64 indices already checked to be < 2**32.

Indices are uploaded as uint32 (asynchronously, through our pinned staging ring: staging.py). An index that is
in uint32 range but out of bounds reads 0 in a gather and is skipped in a scatter.

Scatter-adds copy the destination, then accumulate:
- fast mode: float32 atomicAdd (out-of-bounds indices skipped in the kernel);
- deterministic mode (``deterministic_reductions()``): no atomics. The host sorts the indices
  (stable), drops those out of bounds, and plans fixed-order segmented sums (see index.cu);
  every launch then depends only on the indices and values, so repeated runs are bitwise equal.
  Sums are accumulated in double and rounded to float32 once per destination element.
"""

from __future__ import annotations

import cupy
import numpy as np

from ..flags import deterministic_reductions
from .elementwise import copy  # a device memcpy (ndarray.copy runs a CuPy elementwise kernel, dearer on the host)
from .launch import BLOCK, I64, empty, grid_for, kernel
from .staging import upload_u32

__all__ = ["gather_vec", "gather_rows", "scatter_add", "scatter_add_row", "scatter_add_rows"]

_FILE = "index.cu"
_U32 = np.uint32
# Source rows one thread sums per job in the deterministic scatter; longer segments are cut into
# chunks of this many rows, whose partial sums are reduced again at the next level.
_CHUNK = 32


def _launch(name: str, work: int, args) -> None:
    kernel(_FILE, name)((grid_for(work),), (BLOCK,), args)


def gather_vec(vec, n, indices, k):
    out = empty(k)
    if k == 0:
        return out
    idx = upload_u32(indices)
    _launch("tl_gather_vec", k, (vec, idx, out, I64(n), I64(k)))
    return out


def gather_rows(mat, rows, cols, indices, k):
    total = k * cols
    out = empty(total)
    if total == 0:
        return out
    idx = upload_u32(indices)
    if cols % 4 == 0 and mat.data.ptr % 16 == 0:
        c4 = cols // 4
        _launch("tl_gather_rows4", k * c4, (mat, idx, out, I64(rows), I64(c4), I64(k * c4)))
    else:
        _launch("tl_gather_rows", total, (mat, idx, out, I64(rows), I64(cols), I64(total)))
    return out


# -- deterministic plan ------------------------------------------------------------------------
def _plan(indices, limit: int):
    """Host plan of the fixed-order scatter, or None when no index is below limit.

    Returns (order, levels). order: positions of the in-bounds indices sorted stably by index
    (None when the indices were already sorted, so position p is its own source row). Each level
    is (final, part): final = (starts, ends, targets) of the segments short enough to sum directly
    into out; part = (starts, ends) of the chunks of the longer segments (None if there are none);
    chunk j's sum goes to row j of the next level's source (a double buffer), where each long
    segment becomes a segment over its chunks' rows.
    """
    idx = np.asarray(indices, dtype=np.int64)
    if idx.size > 1 and not bool(np.all(idx[1:] >= idx[:-1])):
        order = np.argsort(idx, kind="stable")
        s = idx[order]
    else:
        order, s = None, idx
    m = int(np.searchsorted(s, limit, side="left"))  # sorted: the out-of-bounds ones are at the end
    if m == 0:
        return None
    s = s[:m]
    if order is not None:
        order = order[:m]
    starts = np.concatenate(([0], np.flatnonzero(s[1:] != s[:-1]) + 1)).astype(np.int64)
    ends = np.concatenate((starts[1:], [m])).astype(np.int64)
    targets = s[starts]
    levels = []
    while True:
        lens = ends - starts
        short = lens <= _CHUNK
        final = (starts[short], ends[short], targets[short])
        if bool(short.all()):
            levels.append((final, None))
            break
        lng = ~short
        ls, le, lt = starts[lng], ends[lng], targets[lng]
        nch = (le - ls + _CHUNK - 1) // _CHUNK
        first = np.cumsum(nch) - nch
        total = int(nch.sum())
        seg = np.repeat(np.arange(ls.size), nch)
        ps = ls[seg] + (np.arange(total, dtype=np.int64) - first[seg]) * _CHUNK
        pe = np.minimum(ps + _CHUNK, le[seg])
        levels.append((final, (ps, pe)))
        starts, ends, targets = first, first + nch, lt
    return order, levels


def _scatter_deterministic(out, values, indices, limit: int, cols: int) -> None:
    """out (limit, cols) += values (k, cols) scattered by indices, in a fixed order (no atomics)."""
    plan = _plan(indices, limit)
    if plan is None:
        return
    order, levels = plan
    # One upload for the whole plan: order, then each level's job arrays, all uint32.
    pieces = [] if order is None else [order]
    for final, part in levels:
        pieces.extend(final)
        if part is not None:
            pieces.extend(part)
    dev = upload_u32(np.concatenate([np.asarray(p, dtype=_U32) for p in pieces]))
    views, pos = [], 0
    for p in pieces:
        views.append(dev[pos:pos + len(p)])
        pos += len(p)
    it = iter(views)
    order_dev = dev if order is None else next(it)  # unused by the identity kernels
    src = values
    for lvl, (final, part) in enumerate(levels):
        kind = ("f_ord" if order is not None else "f_id") if lvl == 0 else "d_id"
        fs, fe, ft = next(it), next(it), next(it)
        nxt = None
        if part is not None:
            ps, pe = next(it), next(it)
            nj = len(part[0])
            nxt = cupy.empty(nj * cols, dtype=cupy.float64)
            _launch(f"tl_scatter_add_seg_{kind}_part", nj * cols,
                    (src, order_dev, ps, pe, ps, I64(nj), I64(cols), out, nxt))
        nf = len(final[0])
        if nf:
            _launch(f"tl_scatter_add_seg_{kind}_final", nf * cols,
                    (src, order_dev, fs, fe, ft, I64(nf), I64(cols), out, out if nxt is None else nxt))
        src = nxt


# -- scatters ----------------------------------------------------------------------------------
def scatter_add(x, values, n, indices, k):
    out = copy(x)
    if k == 0 or n == 0:
        return out
    if deterministic_reductions():
        _scatter_deterministic(out, values, indices, n, 1)
    else:
        idx = upload_u32(indices)
        _launch("tl_scatter_add_atomic", k, (values, idx, out, I64(n), I64(k)))
    return out


def scatter_add_row(mat, row_vec, rows, cols, i):
    out = copy(mat)
    if i < rows and cols:
        _launch("tl_scatter_add_row", cols, (out, row_vec, I64(i * cols), I64(cols)))
    return out


def scatter_add_rows(mat, values, rows, cols, indices, k):
    out = copy(mat)
    if k == 0 or rows == 0 or cols == 0:
        return out
    if deterministic_reductions():
        _scatter_deterministic(out, values, indices, rows, cols)
    else:
        idx = upload_u32(indices)
        total = k * cols
        _launch("tl_scatter_add_rows_atomic", total, (values, idx, out, I64(rows), I64(cols), I64(total)))
    return out
