"""Layout primitives on CuPy arrays: broadcasts, transposes, axis swaps and general permutes.

Every op here is a gather ``out[i] = x[offset(i)]`` over a row-major output. The host describes it
as (output dims, input stride per output axis; 0 on broadcast axes), drops size-1 axes and merges
adjacent axes that are contiguous in both, so typical cases reach the device as rank 1 to 3. Then:
- identity: a device copy;
- a (batched) 2-D transpose with both sides >= 16: the shared-memory tiled kernel ``tl_layout_transpose``;
- otherwise the strided kernel ``tl_layout_strided_*`` (coalesced writes; float4 loads and stores when
  the innermost axis is contiguous, float4 splat stores when it is a broadcast, in both cases
  when its length is a multiple of 4). More than 8 collapsed axes: the outer axes' offsets come
  from a small host-built table (one pass, no NotImplementedError).
narrow_block / narrow_block_bwd (narrow, split, chunk along a later dim) have their own row-block
kernels ``tl_narrow_block_*``: one row per blockIdx.y, no index arithmetic beyond a row offset.

Nothing here synchronizes the device or reads device memory back to the host.
"""

from __future__ import annotations


import cupy
import numpy as np

from ..caches import memo
from .elementwise import copy  # a device memcpy (ndarray.copy runs a CuPy elementwise kernel, dearer on the host)
from .launch import BLOCK, I64, HostStruct, empty, grid_for, kernel

__all__ = [
    "broadcast_vec_to_rows", "broadcast_vec_to_cols", "broadcast_to", "swap_adjacent_at_depth", "permute",
    "transpose2d", "narrow_block", "narrow_block_bwd", "concat_block",
]

_FILE = "layout.cu"
_MAX_RANK = 8          # axes the strided kernel takes as scalar arguments
_GRID_YZ_MAX = 65535   # CUDA's limit on gridDim.y and gridDim.z
_GRID_X_MAX = 2**31 - 1
# The tiled transpose when both matrix sides reach this; below it most of each 32x32 tile would be
# empty, and the strided kernel (coalesced writes, reads that stay within a few cache lines) wins.
_TILED_MIN = 16


def _prod(dims) -> int:
    n = 1
    for d in dims:
        n *= int(d)
    return n


def _contiguous_strides(dims) -> list[int]:
    st, acc = [], 1
    for d in reversed(dims):
        st.append(acc)
        acc *= int(d)
    return st[::-1]


def _collapse(dims, strides) -> tuple[list[int], list[int]]:
    """Drop size-1 axes; merge each axis into the one before it when both are contiguous in x.

    The output is row-major, so two adjacent output axes (p, j) act as one axis of size
    d_p * d_j with stride s_j exactly when s_p == s_j * d_j (this includes two broadcast axes).
    """
    od: list[int] = []
    st: list[int] = []
    for d, s in zip(dims, strides):
        d, s = int(d), int(s)
        if d == 1:
            continue
        if od and st[-1] == s * d:
            od[-1] *= d
            st[-1] = s
        else:
            od.append(d)
            st.append(s)
    return od, st


def _transpose_plan(batch: int, rows: int, cols: int) -> tuple:
    """x (batch, rows, cols) -> out (batch, cols, rows); all three > 0."""
    tiles_x = (cols + 31) // 32
    tiles_y = (rows + 31) // 32
    grid = (min(tiles_x, _GRID_X_MAX), min(tiles_y, _GRID_YZ_MAX), min(batch, _GRID_YZ_MAX))
    return ("tl_layout_transpose", grid, (32, 8, 1), (I64(batch), I64(rows), I64(cols)), None)


def _as_transpose(od, st):
    """(batch, rows, cols) of x when the collapsed gather is a batched 2-D transpose, else None."""
    if 0 in st or len(od) not in (2, 3):
        return None
    order = sorted(range(len(od)), key=lambda a: -st[a])  # x's axes, outermost first
    for pos, a in enumerate(order):
        if st[a] != _prod(od[b] for b in order[pos + 1:]):
            return None  # not a permutation of a contiguous array
    if len(od) == 2 and order == [1, 0]:
        return 1, od[1], od[0]
    if len(od) == 3 and order == [0, 2, 1]:
        return od[0], od[2], od[1]
    return None


def _strided_plan(od, st, n_units: int, mode: int) -> tuple:
    rank = len(od)
    if rank <= _MAX_RANK:
        d = od + [1] * (_MAX_RANK - rank)
        s = st + [0] * (_MAX_RANK - rank)
        return (f"tl_layout_strided_m{mode}_r{rank}", (grid_for(n_units),), (BLOCK,), _shape_arg(n_units, d, s), None)
    # More axes than the kernel's argument list: axis 0 of the launch enumerates the first
    # rank-7 axes in row-major order, with their offsets from a table built here.
    head = rank - (_MAX_RANK - 1)
    tab = np.zeros(1, dtype=np.int64)
    for d, s in zip(od[:head], st[:head]):
        tab = (tab[:, None] + np.arange(d, dtype=np.int64) * s).reshape(-1)
    d = [int(tab.size)] + od[head:]
    s = [0] + st[head:]
    return (f"tl_layout_strided_tab_m{mode}", (grid_for(n_units),), (BLOCK,), _shape_arg(n_units, d, s), tab)


def _shape_arg(n_units: int, d: list, s: list) -> tuple:
    """The launch's trailing argument: TlStrided (n, d[8], s[8]), one argument instead of 17 int64
    scalars (each costs CuPy a conversion per launch)."""
    return (HostStruct(np.array([n_units, *d, *s], dtype=np.int64)),)


@memo("cuda.layout.gather", 1024)
def _plan(dims: tuple, strides: tuple, aligned: bool) -> tuple | str:
    """The launch for a gather: computed once per (dims, strides), since training loops repeat shapes.

    Returns "empty", "copy", or (kernel name, grid, block, integer args, offset table or None).
    """
    if _prod(dims) == 0:
        return "empty"
    od, st = _collapse(dims, strides)
    if not od:
        od, st = [1], [0]
    if len(od) == 1 and st[0] == 1:
        return "copy"  # identity (n == x.size)
    tr = _as_transpose(od, st)
    if tr is not None and min(tr[1], tr[2]) >= _TILED_MIN:
        return _transpose_plan(*tr)
    n = _prod(dims)
    mode = 0
    if od[-1] % 4 == 0:
        if st[-1] == 1 and all(s % 4 == 0 for s in st[:-1]) and aligned:
            mode = 1  # float4 in and out: every unit is measured in float4s
            od = od[:-1] + [od[-1] // 4]
            st = [s // 4 for s in st[:-1]] + [1]
        elif st[-1] == 0:
            mode = 2  # one float read, a float4 of it written
            od = od[:-1] + [od[-1] // 4]
    return _strided_plan(od, st, n if mode == 0 else n // 4, mode)


def _gather(x, dims, strides):
    """out (row-major over dims)[coords] = x[sum coords * strides]; a new contiguous float32 array."""
    plan = _plan(tuple(dims), tuple(strides), x.data.ptr % 16 == 0)
    if plan == "empty":
        return empty(0)
    if plan == "copy":
        return copy(x)  # a device-to-device copy
    name, grid, block, ints, tab = plan
    out = empty(_prod(dims))
    if tab is None:
        kernel(_FILE, name)(grid, block, (x, out, *ints))
    else:  # uploaded per call (asynchronous, pinned staging): the plan cache holds host data only
        kernel(_FILE, name)(grid, block, (x, out, cupy.asarray(tab), *ints))
    return out


def permute(x, dims, perm):
    """x.reshape(dims).transpose(perm) as a new contiguous flat float32 array."""
    dims = tuple(int(d) for d in dims)
    cs = _contiguous_strides(dims)
    return _gather(x, [dims[p] for p in perm], [cs[p] for p in perm])


def broadcast_vec_to_rows(vec, rows, cols):
    """out[i, j] = vec[j] (vec has length cols)."""
    return _gather(vec, [rows, cols], [0, 1])


def broadcast_vec_to_cols(vec, rows, cols):
    """out[i, j] = vec[i] (vec has length rows)."""
    return _gather(vec, [rows, cols], [1, 0])


def broadcast_to(x, in_dims, out_dims, axis_map):
    """As the CPU backend: axis_map[j] == 0 inserts output axis j, else names input axis axis_map[j]-1."""
    cs = _contiguous_strides(in_dims)
    strides = []
    for j, a in enumerate(axis_map):
        if a == 0 or in_dims[a - 1] == 1:
            strides.append(0)  # inserted or size-1 input axis: broadcast
        else:
            strides.append(cs[a - 1])
    return _gather(x, list(out_dims), strides)


def swap_adjacent_at_depth(b, dims, depth):
    """Swap axes depth and depth+1 of b (shape dims); a copy when depth+1 >= rank."""
    dims = tuple(int(d) for d in dims)
    if depth + 1 >= len(dims):
        return copy(b)
    perm = list(range(len(dims)))
    perm[depth], perm[depth + 1] = perm[depth + 1], perm[depth]
    return permute(b, dims, perm)


def transpose2d(b, rows, cols):
    """b (rows, cols) -> (cols, rows)."""
    return permute(b, (rows, cols), (1, 0))


# -- narrow_block: rows of a (outer, size * inner) matrix, a column range of each ----------------
@memo("cuda.layout.narrow_block", 256)
def _narrow_plan(rows: int, units: int) -> tuple:
    """(grid, block) for ``rows`` rows of ``units`` elements each (float or float4): one row per
    blockIdx.y (the kernel strides over rows past CUDA's 65535), a block just wide enough for a
    short row, and enough blocks along x to fill the device when the rows are few."""
    block = min(BLOCK, max(32, (units + 31) // 32 * 32))
    gy = min(rows, _GRID_YZ_MAX)
    gx = max(1, min((units + block - 1) // block, -(-grid_for(rows * units, block) // gy)))
    return (gx, gy), (block,)


def _narrow_launch(name: str, src, bwd: bool, outer: int, size: int, start: int, length: int, inner: int):
    """The narrow_block kernels on rows of w = length * inner (narrowed) and s = size * inner (full)
    floats, the narrowed columns starting at off = start * inner; in float4 units when w, s, off
    and both pointers allow it. Each row's loop runs over the output's columns (s backward, w
    forward)."""
    w, s, off = length * inner, size * inner, start * inner
    out = empty(outer * (s if bwd else w))
    if out.size == 0:
        return out
    if w % 4 == 0 and s % 4 == 0 and off % 4 == 0 and src.data.ptr % 16 == 0 and out.data.ptr % 16 == 0:
        suffix, w, s, off = "v4", w // 4, s // 4, off // 4
    else:
        suffix = "f"
    grid, block = _narrow_plan(outer, s if bwd else w)
    kernel(_FILE, f"{name}_{suffix}")(grid, block, (src, out, I64(outer), I64(w), I64(s), I64(off)))
    return out


def narrow_block(x, outer, size, start, length, inner):
    """x (outer, size, inner) -> x[:, start:start+length, :] as a new contiguous flat array."""
    return _narrow_launch("tl_narrow_block", x, False, outer, size, start, length, inner)


def narrow_block_bwd(dy, outer, size, start, length, inner):
    """dy (outer, length, inner) placed at [:, start:start+length, :] of (outer, size, inner) zeros."""
    return _narrow_launch("tl_narrow_block_bwd", dy, True, outer, size, start, length, inner)


def concat_block(a, b, outer, size_a, size_b, inner):
    """a (outer, size_a, inner) and b (outer, size_b, inner) joined along the middle axis: one
    launch (narrow_block_bwd's grid), float4 when both row widths and all pointers allow it."""
    wa, wb = size_a * inner, size_b * inner
    out = empty(outer * (wa + wb))
    if out.size == 0:
        return out
    if wa % 4 == 0 and wb % 4 == 0 and a.data.ptr % 16 == 0 and b.data.ptr % 16 == 0 and out.data.ptr % 16 == 0:
        suffix, wa, wb = "v4", wa // 4, wb // 4
    else:
        suffix = "f"
    grid, block = _narrow_plan(outer, wa + wb)
    kernel(_FILE, f"tl_concat_block_{suffix}")(grid, block, (a, b, out, I64(outer), I64(wa), I64(wb)))
    return out
