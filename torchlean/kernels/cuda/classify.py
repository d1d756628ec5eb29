"""CUDA kernels of the classification: cross_entropy_rows, cross_entropy_reduce, gelu, gelu_tanh and their
backward passes.

Kernels in classify.cu. Each primitive is one launch (plus the upload of the targets as uint32),
except cross_entropy_reduce (two) and the split long-row path (two):

* gelu / gelu_tanh and their backward passes: grid-stride float4 loops, erfcf / expf (no fast math).
* cross_entropy_rows: every path reads each logit once and writes loss and lse only (8 bytes per
  row), never a (rows, cols) intermediate. Rows of at most 1024 columns: a warp per row, the row
  held in registers (tl_cross_entropy_rows_reg4: float4 loads when cols % 4 == 0 and x is 16-byte
  aligned; else tl_cross_entropy_rows_reg1). Longer rows: a block of 512 threads per row with an
  online (running max, rescaled sum) pass (tl_cross_entropy_rows_block4 /
  tl_cross_entropy_rows_block1), or, for few rows (rows * nsplit blocks needed to fill the device),
  nsplit blocks per row and a warp per row combining them (tl_cross_entropy_rows_part* +
  tl_cross_entropy_rows_split_fin). Fixed-order accumulation (float trees per thread, double across
  threads) and launch parameters (block size, nsplit, segment) that depend on (rows, cols) only:
  bitwise repeatable in both reduction modes, no atomics.
* cross_entropy_reduce: the row kernels above write the losses to a workspace, then one block sums
  them in double in a fixed order (tl_cross_entropy_reduce_sum_scale, 256 lanes; the CPU repeats the
  order) and writes fl32(sum * scale): two launches for what took a row kernel, a reduction and a
  scale.
* cross_entropy_rows_bwd: one pass (read x, write dx): a warp per row with the row's loads all in
  flight (tl_cross_entropy_rows_bwd_reg4/1, cols <= 1024), else tiles of 16 values per thread over
  (row, tile) (tl_cross_entropy_rows_bwd_tile4/1). cross_entropy_reduce_bwd is the same launch
  reading dloss[0] for every row, scaled in float32 in the kernel (dloss step 0 and a scale; the
  rows primitive passes step 1, scale 1).

The targets go up through a pinned staging buffer and an asynchronous copy on the current stream
(staging.upload_u32).
"""

from __future__ import annotations


import cupy
import numpy as np

from .launch import BLOCK, F32, I64, empty, give_back, grid_for, kernel
from .staging import upload_u32

__all__ = ["cross_entropy_rows", "cross_entropy_rows_bwd", "cross_entropy_reduce", "cross_entropy_reduce_bwd",
           "gelu", "gelu_bwd", "gelu_tanh", "gelu_tanh_bwd"]

_FILE = "classify.cu"
_REG_MAX = 1024        # rows up to this length: a warp per row, held in registers (32 floats per lane)
_ROW_BLOCK = 512       # threads per block of the long-row forward kernels (cols > 1024)
_SPLIT_TARGET = 256    # few long rows: aim at rows * nsplit >= this many blocks (about 2 per SM)
_SPLIT_MIN_SEG = 8192  # ... but never segments shorter than this (a block's 512 threads x 16 values)
_SPLIT_MAX = 32        # the combining warp takes one segment per lane
# Long-row kernels get a block per work item (row, segment or tile) up to this many: the hardware
# then hands out work as blocks finish (a grid-stride loop over fewer blocks leaves a tail of up to
# one row per block). The grid never changes results: each item's order depends on blockDim only.
_GRID_MAX = 65535
_SUM_LANES = 256       # threads of tl_cross_entropy_reduce_sum_scale (TL_CE_SUM_LANES)


def _unary(kname: str):
    def fn(x):
        n = x.size
        y = empty(n)
        if n:
            kernel(_FILE, kname)((grid_for((n + 3) >> 2),), (BLOCK,), (x, y, I64(n)))
        return y

    fn.__name__ = kname[3:-2]
    return fn


def _bwd(kname: str):
    def fn(x, dy):
        n = x.size
        y = empty(n)
        if n:
            kernel(_FILE, kname)((grid_for((n + 3) >> 2),), (BLOCK,), (x, dy, y, I64(n)))
        return y

    fn.__name__ = kname[3:-2]
    return fn


gelu = _unary("tl_gelu_k")
gelu_tanh = _unary("tl_gelu_tanh_k")
gelu_bwd = _bwd("tl_gelu_bwd_k")
gelu_tanh_bwd = _bwd("tl_gelu_tanh_bwd_k")


def _aligned(*arrays) -> bool:
    return all(a.data.ptr % 16 == 0 for a in arrays)


def _split(rows: int, cols: int) -> tuple[int, int]:
    """(nsplit, seg) for rows longer than _REG_MAX: several blocks per row only when the rows alone
    leave the device idle. A function of (rows, cols) only, so results repeat bitwise on any GPU."""
    nsplit = min(_SPLIT_MAX, cols // _SPLIT_MIN_SEG, -(-_SPLIT_TARGET // rows))
    if nsplit < 2:
        return 1, cols
    seg = -(-cols // nsplit)
    seg = (seg + 3) & ~3  # segment starts stay 16-byte aligned for the float4 kernel
    return nsplit, seg


def cross_entropy_rows(x, rows, cols, targets, label_smoothing):
    if cols == 0:
        return cupy.zeros(rows, dtype=cupy.float32), cupy.full(rows, -np.inf, dtype=cupy.float32)
    loss, lse = empty(rows), empty(rows)
    if rows:
        _rows_fwd(x, rows, cols, targets, label_smoothing, loss, lse)
    return loss, lse


def _rows_fwd(x, rows, cols, targets, label_smoothing, loss, lse) -> None:
    """loss[r], lse[r] of every row (rows >= 1, cols >= 1)."""
    tg = upload_u32(targets)
    ls = F32(label_smoothing)
    vec = "4" if cols % 4 == 0 and _aligned(x) else "1"
    if cols <= _REG_MAX:
        # a warp per row, the row in registers: one DRAM read, terms shifted by the true maximum
        kernel(_FILE, f"tl_cross_entropy_rows_reg{vec}")((grid_for(rows * 32),), (BLOCK,),
                                          (x, I64(rows), I64(cols), tg, ls, loss, lse))
        return
    nsplit, seg = _split(rows, cols)
    if nsplit == 1:
        # a block per row, one online pass (the row is read once, not once per reduction)
        kernel(_FILE, f"tl_cross_entropy_rows_block{vec}")((min(rows, _GRID_MAX),), (_ROW_BLOCK,),
                                            (x, I64(rows), I64(cols), tg, ls, loss, lse))
        return
    # few long rows: nsplit blocks per row write (max, sum, smoothing sum) states, a warp per row
    # combines them in lane order
    work = rows * nsplit
    pm = cupy.empty(work, dtype=cupy.float32)
    ps = cupy.empty(work, dtype=cupy.float64)
    pq = cupy.empty(work, dtype=cupy.float64)
    kernel(_FILE, f"tl_cross_entropy_rows_part{vec}")((min(work, _GRID_MAX),), (_ROW_BLOCK,),
                                       (x, I64(rows), I64(cols), I64(nsplit), I64(seg), ls, pm, ps, pq))
    kernel(_FILE, "tl_cross_entropy_rows_split_fin")((grid_for(rows * 32),), (BLOCK,),
                                     (x, I64(rows), I64(cols), I64(nsplit), I64(seg), tg, ls, pm, ps, pq, loss, lse))


def cross_entropy_reduce(x, rows, cols, targets, label_smoothing, scale):
    out = empty(1)
    if cols == 0:  # every row ignored: the losses are 0
        lw, lse = cupy.zeros(rows, dtype=cupy.float32), cupy.full(rows, -np.inf, dtype=cupy.float32)
    else:
        lw, lse = empty(rows), empty(rows)
        if rows:
            _rows_fwd(x, rows, cols, targets, label_smoothing, lw, lse)
    kernel(_FILE, "tl_cross_entropy_reduce_sum_scale")((1,), (_SUM_LANES,), (lw, I64(rows), F32(scale), out))
    give_back(lw)  # the row losses: a workspace
    return out, lse


def cross_entropy_rows_bwd(x, lse, dloss, rows, cols, targets, label_smoothing):
    return _bwd_rows(x, lse, dloss, 1, F32(1.0), rows, cols, targets, label_smoothing)


def cross_entropy_reduce_bwd(x, lse, dloss, rows, cols, targets, label_smoothing, scale):
    # every row reads dloss[0] (step 0) scaled by fl32(scale) in float32
    return _bwd_rows(x, lse, dloss, 0, F32(scale), rows, cols, targets, label_smoothing)


def _bwd_rows(x, lse, dloss, dstep, dsc, rows, cols, targets, label_smoothing):
    dx = empty(rows * cols)
    if rows * cols == 0:
        return dx
    tg = upload_u32(targets)
    ls = F32(label_smoothing)
    b = ls / F32(cols)                 # float32 arithmetic, as the contract assumes
    ab = (F32(1.0) - ls) + b
    args = (x, lse, dloss, I64(dstep), dsc, I64(rows), I64(cols), tg, F32(b), F32(ab), dx)
    vec = "4" if cols % 4 == 0 and _aligned(x, dx) else "1"
    if cols <= _REG_MAX:
        # a warp per row, every load of the row issued before the first use
        kernel(_FILE, f"tl_cross_entropy_rows_bwd_reg{vec}")((grid_for(rows * 32),), (BLOCK,), args)
    else:
        # (row, tile) work items of BLOCK * 16 columns: all loads of a tile in flight, few rows still fill the GPU
        tiles = rows * -(-cols // (BLOCK * 16))
        kernel(_FILE, f"tl_cross_entropy_rows_bwd_tile{vec}")((min(tiles, _GRID_MAX),), (BLOCK,), args)
    return dx
