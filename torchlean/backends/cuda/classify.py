"""CUDA kernels of the classification: cross_entropy_rows, gelu, gelu_tanh and their backward passes.

Kernels in classify.cu. Each primitive is one launch (plus the upload of the targets as uint32):

* gelu / gelu_tanh and their backward passes: grid-stride float4 loops, erfcf / expf (no fast math).
* cross_entropy_rows: a warp per row for rows of at most 1024 columns (the row held in registers
  when cols % 4 == 0, so it is read from DRAM once), a block of 512 threads per row beyond;
  writes loss and lse only (8 bytes per row), never a (rows, cols) intermediate. Fixed-order
  double accumulation and a launch shape fixed by the problem shape: bitwise repeatable in both
  reduction modes, no atomics.
* cross_entropy_rows_bwd: one pass (read x, write dx), float4 when cols % 4 == 0.
"""

from __future__ import annotations

import cupy
import numpy as np

from .kernels import BLOCK, F32, I64, empty, grid_for, kernel, sm_count

__all__ = ["cross_entropy_rows", "cross_entropy_rows_bwd", "gelu", "gelu_bwd", "gelu_tanh", "gelu_tanh_bwd"]

_FILE = "classify.cu"
_WARP_ROW_MAX = 1024   # rows up to this length: a warp per row; longer: a block per row
_ROW_BLOCK = 512       # threads per block in the block-per-row kernels
_REG_MAX = 1024        # the register-held row kernel: 8 float4 per lane


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


def _targets(targets):
    return cupy.asarray(np.asarray(targets).astype(np.uint32))


def _aligned(*arrays) -> bool:
    return all(a.data.ptr % 16 == 0 for a in arrays)


def cross_entropy_rows(x, rows, cols, targets, label_smoothing):
    if cols == 0:
        return cupy.zeros(rows, dtype=cupy.float32), cupy.full(rows, -np.inf, dtype=cupy.float32)
    loss, lse = empty(rows), empty(rows)
    if rows == 0:
        return loss, lse
    tg = _targets(targets)
    args = (x, I64(rows), I64(cols), tg, F32(label_smoothing), loss, lse)
    if cols <= _REG_MAX and cols % 4 == 0 and _aligned(x):
        kernel(_FILE, "tl_ce_reg")((grid_for(rows * 32),), (BLOCK,), args)
    elif cols <= _WARP_ROW_MAX:
        kernel(_FILE, "tl_ce_warp")((grid_for(rows * 32),), (BLOCK,), args)
    else:
        kernel(_FILE, "tl_ce_block")((min(rows, sm_count() * 8),), (_ROW_BLOCK,), args)
    return loss, lse


def cross_entropy_rows_bwd(x, lse, dloss, rows, cols, targets, label_smoothing):
    dx = empty(rows * cols)
    if rows * cols == 0:
        return dx
    tg = _targets(targets)
    ls = F32(label_smoothing)
    b = ls / F32(cols)                 # float32 arithmetic, as the contract assumes
    ab = (F32(1.0) - ls) + b
    args = (x, lse, dloss, I64(rows), I64(cols), tg, F32(b), F32(ab), dx)
    vec = "4" if cols % 4 == 0 and _aligned(x, dx) else ""
    if cols <= _WARP_ROW_MAX:
        kernel(_FILE, f"tl_ce_bwd_warp{vec}")((grid_for(rows * 32),), (BLOCK,), args)
    else:
        kernel(_FILE, f"tl_ce_bwd_block{vec}")((min(rows, sm_count() * 8),), (_ROW_BLOCK,), args)
    return dx
