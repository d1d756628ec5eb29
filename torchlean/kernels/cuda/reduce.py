"""Reductions, broadcast adjoints and the fused softmax rows on CuPy arrays (kernels: reduce.cu).

Every path here is a fixed-order reduction whose launch shape depends on the problem shape only,
so results are bitwise repeatable whether or not deterministic reductions are on: none of these
needs atomics to be fast (reduce_sum finishes in one launch; see tl_reduce_sum in reduce.cu).
"""

from __future__ import annotations


import cupy
import numpy as np

from ..caches import memo
from .elementwise import copy  # a device memcpy (ndarray.copy runs a CuPy elementwise kernel, dearer on the host)
from .launch import BLOCK, F32, I64, StreamPartials, empty, empty_as, give_back, grid_for, kernel, sm_count

__all__ = [
    "reduce_sum", "reduce_mean", "reduce_sum_axis0", "reduce_sum_axis1", "reduce_max_axis0",
    "reduce_max_axis1", "reduce_sum_axis", "reduce_from_broadcast", "softmax_rows",
    "softmax_rows_bwd", "log_softmax_rows", "log_softmax_rows_bwd", "strided_reduce",
]

_FILE = "reduce.cu"
_MAX_SUM_BLOCKS = 1024       # fixed (not per device), so a sum's bits do not depend on the GPU model
_PER_THREAD = 4 * 8          # at least 8 float4 loads per thread before another block is worth it
_WARP_ROW_MAX = 2048         # rows up to this length: a warp per row; longer: blocks per row
_ROW_CHUNK = 4096            # a block's share of a long row when rows are too few to fill the GPU
_TARGET_BLOCKS = 1024
_TARGET_THREADS = 1 << 18
_ACC = {"sum": np.float64, "max": np.float32}
_TILE_FILL = 256             # 32-column tiles from which the one-launch tile kernel loads the GPU
_CHUNK_BLOCKS = 512          # blocks tl_reduce_cols_chunk aims for (fixed: the sum's order is the shape's)
_CHUNK_MIN_ROWS = 64         # rows per chunk at least
_CHUNK_MIN_LEN = 2048        # shorter axes: the tile kernel (BENCHMARKS.md: column sums)
_TILE_MAX_LEN = 8192         # inner > 1: an axis up to this long is one tl_reduce_cols_tile launch (no partials)
_OUTER_INNER_MAX = 1 << 18   # (A, B, C) -> B in one launch when a block's A*C elements are at most this


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


# per (device, stream): block partials and the zeroed completion counter tl_reduce_sum resets
_workspace = StreamPartials(_MAX_SUM_BLOCKS).get


def _sum(x, div: float):
    n = x.size
    out = empty(1)
    blocks = min(_MAX_SUM_BLOCKS, max(1, _cdiv(n, BLOCK * _PER_THREAD)))
    if blocks > 1:
        ws = _workspace()
        partials, counter = ws.partials, ws.counter
    else:
        partials = counter = out  # one block writes out directly: the workspace is never touched
    kernel(_FILE, "tl_reduce_sum")((blocks,), (BLOCK,), (x, I64(n), partials, counter, out, F32(div)))
    return out


def reduce_sum(x):
    # One fixed-order launch in both modes: determinism costs nothing here (see tl_reduce_sum).
    return _sum(x, 1.0)


def reduce_mean(x):
    # float32(sum) / float32(n), as on the CPU; n = 0 gives 0/0 = NaN.
    return _sum(x, float(np.float32(x.size)))


def _partials(n: int, op: str):
    """A workspace of n partial results in the accumulator type of ``op`` (_ACC)."""
    return empty_as(n, "d") if _ACC[op] is np.float64 else empty(n)


def strided_reduce(x, outer: int, length: int, inner: int, op: str = "sum"):
    """Reduce x viewed as (outer, length, inner) over the middle axis: (outer, inner), flat."""
    n_out = outer * inner
    if n_out == 0:
        return empty(0)
    if length == 0:  # an empty sum is 0; an empty max is 0 by the primitive's definition
        return cupy.zeros(n_out, dtype=cupy.float32)
    out = empty(n_out)
    if inner == 1:
        if length <= _WARP_ROW_MAX:
            kernel(_FILE, f"tl_reduce_rows_warp_{op}")((grid_for(outer * 32),), (BLOCK,),
                                               (x, I64(outer), I64(length), out))
            return out
        split = max(1, min(_cdiv(length, _ROW_CHUNK), _cdiv(_TARGET_BLOCKS, outer)))
        chunk = _cdiv(_cdiv(length, split), 4) * 4  # a multiple of 4: float4 reads stay aligned
        split = _cdiv(length, chunk)
        partials = _partials(outer * split, op) if split > 1 else out
        grid = min(outer * split, sm_count() * 32)
        kernel(_FILE, f"tl_reduce_rows_block_{op}")((grid,), (BLOCK,), (
            x, I64(outer), I64(length), I64(split), I64(chunk), partials, out))
        if split > 1:
            kernel(_FILE, f"tl_reduce_rows_finish_{op}")((grid_for(outer),), (BLOCK,),
                                                 (partials, I64(outer), I64(split), out))
            give_back(partials)
        return out
    split = 1
    if n_out < _TARGET_THREADS // 4 and length >= 64:
        chunks = _col_chunks(outer, length, inner)
        if chunks > 1:
            return _cols_chunked(x, outer, length, inner, chunks, op, out)
        if length <= _TILE_MAX_LEN:
            # One launch: a block per 32 columns, its warps splitting the axis (the warp count
            # depends on the length alone, so the order of the adds is fixed by the shape).
            warps = min(32, _cdiv(length, 8))
            kernel(_FILE, f"tl_reduce_cols_tile_{op}")((min(outer * _cdiv(inner, 32), 65535),), (32 * warps,), (
                x, I64(outer), I64(length), I64(inner), out))
            return out
        split = max(1, min(_cdiv(length, 64), _cdiv(_TARGET_THREADS, n_out)))
    chunk = _cdiv(length, split)
    partials = _partials(n_out * split, op) if split > 1 else out
    kernel(_FILE, f"tl_reduce_cols_{op}")((grid_for(n_out * split),), (BLOCK,), (
        x, I64(outer), I64(length), I64(inner), I64(split), I64(chunk), partials, out))
    if split > 1:
        kernel(_FILE, f"tl_reduce_cols_finish_{op}")((grid_for(n_out),), (BLOCK,),
                                             (partials, I64(n_out), I64(split), out))
        give_back(partials)
    return out


def _col_chunks(outer: int, length: int, inner: int) -> int:
    """How many row chunks tl_reduce_cols_chunk splits the axis into: 1 (the one-launch tile
    kernel) for an axis shorter than _CHUNK_MIN_LEN (the second launch costs more than it saves)
    or when the tile kernel's 32-column tiles already make _TILE_FILL blocks, else enough
    128-column chunk blocks for _CHUNK_BLOCKS, each chunk at least _CHUNK_MIN_ROWS long. Shape
    only: the order of the adds must not depend on the device."""
    if length < _CHUNK_MIN_LEN or outer * _cdiv(inner, 32) >= _TILE_FILL:
        return 1
    return max(1, min(length // _CHUNK_MIN_ROWS, _cdiv(_CHUNK_BLOCKS, outer * _cdiv(inner, 128))))


def _cols_chunked(x, outer: int, length: int, inner: int, chunks: int, op: str, out):
    chunk = _cdiv(length, chunks)
    chunks = _cdiv(length, chunk)
    n_out = outer * inner
    partials = _partials(n_out * chunks, op)
    vec = np.int32(inner % 4 == 0 and x.data.ptr % 16 == 0)
    tiles = outer * _cdiv(inner, 128)
    kernel(_FILE, f"tl_reduce_cols_chunk_{op}")((min(tiles, 65535), chunks), (32 * 8,), (
        x, I64(outer), I64(length), I64(inner), I64(chunk), vec, partials))
    kernel(_FILE, f"tl_reduce_cols_finish_{op}")((grid_for(n_out),), (BLOCK,), (partials, I64(n_out), I64(chunks), out))
    give_back(partials)
    return out


def reduce_sum_axis0(b, rows, cols):
    return strided_reduce(b, 1, rows, cols, "sum")


def reduce_sum_axis1(b, rows, cols):
    return strided_reduce(b, rows, cols, 1, "sum")


def reduce_max_axis0(b, rows, cols):
    return strided_reduce(b, 1, rows, cols, "max")


def reduce_max_axis1(b, rows, cols):
    return strided_reduce(b, rows, cols, 1, "max")


def reduce_sum_axis(b, dims, axis):
    outer = int(np.prod(dims[:axis], dtype=np.int64))
    inner = int(np.prod(dims[axis + 1:], dtype=np.int64))
    return strided_reduce(b, outer, dims[axis], inner, "sum")


@memo("cuda.reduce.broadcast_adjoint", 1024)
def _broadcast_adjoint_plan(in_dims: tuple, out_dims: tuple, axis_map: tuple) -> tuple:
    """The (outer, length, inner) strided sums, the final permutation (or None), and the (A, B, C)
    of a one-launch per-channel sum (or None), once per shape."""
    aligned = [1 if a == 0 else in_dims[a - 1] for a in axis_map]
    # Runs of adjacent output axes that are all reduced or all kept; axes of size 1 vanish.
    groups: list[list] = []  # [size, reduced]
    for s, o in zip(aligned, out_dims):
        if o == 1:
            continue
        reduced = s == 1
        if groups and groups[-1][1] == reduced:
            groups[-1][0] *= o
        else:
            groups.append([o, reduced])
    steps = []
    while any(r for _, r in groups):
        j = max(i for i, (_, r) in enumerate(groups) if r)  # innermost first: inner extents stay large
        outer = int(np.prod([g[0] for g in groups[:j]], dtype=np.int64))
        inner = int(np.prod([g[0] for g in groups[j + 1:]], dtype=np.int64))
        steps.append((outer, groups[j][0], inner))
        del groups[j]
    used = [a - 1 for a in axis_map if a != 0]
    order = tuple(sorted(range(len(used)), key=lambda i: used[i]))
    perm = None
    if order != tuple(range(len(used))):
        perm = (tuple(aligned[j] for j, a in enumerate(axis_map) if a != 0), order)
    # Summed axes on both sides of one kept run, (A, B, C) -> B (a per-channel sum such as a conv
    # bias gradient): one tl_reduce_from_broadcast_outer_inner launch instead of a pass per side.
    direct = None
    if perm is None and len(steps) == 2 and steps[0][2] == 1 and steps[1][0] == 1:
        (ab, c, _), (_, a, b) = steps
        if c >= 32 and a * c <= _OUTER_INNER_MAX:  # rows of at least a warp's width
            direct = (a, b, c)
    return tuple(steps), perm, direct


def reduce_from_broadcast(dout, in_dims, out_dims, axis_map):
    """Sum dout over the broadcast axes (one strided pass per run of them), then undo any permutation."""
    steps, perm, direct = _broadcast_adjoint_plan(tuple(in_dims), tuple(out_dims), tuple(axis_map))
    if direct is not None:
        a, b, c = direct
        out = empty(b)
        if b:
            vec = np.int32(c % 4 == 0 and dout.data.ptr % 16 == 0)
            kernel(_FILE, "tl_reduce_from_broadcast_outer_inner")((min(b, 65535),), (1024,),
                                                                  (dout, I64(a), I64(b), I64(c), vec, out))
        return out
    d = dout
    for outer, length, inner in steps:
        d = strided_reduce(d, outer, length, inner, "sum")
    if d is dout:
        d = copy(dout)
    if perm is not None:
        from .layout import permute

        d = permute(d, *perm)
    return d


def _softmax(kind: str, x, rows: int, cols: int):
    y = empty(rows * cols)
    if rows * cols == 0:
        return y
    if cols <= 1024 and cols % 4 == 0:
        kernel(_FILE, f"tl_{kind}_rows_reg")((grid_for(rows * 32),), (BLOCK,), (x, I64(rows), I64(cols), y))
    elif cols <= 1024:
        kernel(_FILE, f"tl_{kind}_rows_warp")((grid_for(rows * 32),), (BLOCK,), (x, I64(rows), I64(cols), y))
    else:
        kernel(_FILE, f"tl_{kind}_rows_block")((min(rows, sm_count() * 8),), (512,), (x, I64(rows), I64(cols), y))
    return y


def _softmax_bwd(kind: str, y, dy, rows: int, cols: int):
    dx = empty(rows * cols)
    if rows * cols == 0:
        return dx
    if cols <= 1024 and cols % 4 == 0:
        kernel(_FILE, f"tl_{kind}_rows_bwd_reg")((grid_for(rows * 32),), (BLOCK,), (y, dy, I64(rows), I64(cols), dx))
    elif cols <= 1024:
        kernel(_FILE, f"tl_{kind}_rows_bwd_warp")((grid_for(rows * 32),), (BLOCK,), (y, dy, I64(rows), I64(cols), dx))
    else:
        kernel(_FILE, f"tl_{kind}_rows_bwd_block")((min(rows, sm_count() * 8),), (512,),
                                              (y, dy, I64(rows), I64(cols), dx))
    return dx


def softmax_rows(x, rows, cols):
    return _softmax("softmax", x, rows, cols)


def log_softmax_rows(x, rows, cols):
    return _softmax("log_softmax", x, rows, cols)


def softmax_rows_bwd(y, dy, rows, cols):
    return _softmax_bwd("softmax", y, dy, rows, cols)


def log_softmax_rows_bwd(y, dy, rows, cols):
    return _softmax_bwd("log_softmax", y, dy, rows, cols)
