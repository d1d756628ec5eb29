"""CUDA kernels of the normalization: layer_norm, batch_norm (training and inference) and their backward passes.

Launch plans (kernels in norm.cu; every sum in an order fixed by the shape, no atomics, so every
result is bitwise repeatable in both determinism modes):

* layer_norm: one launch. Rows of <= 1024 columns: a warp per row with the row in registers
  (x read once, y written once); longer rows: a block per row.
* layer_norm_bwd: two launches. dx per row fused with the per-column partial sums of dy * xhat and
  dy over a FIXED set of rows per group (warp per row up to 128 columns, block per row up to
  4096), one partial row per block; then tl_norm_colsum2 adds the partial rows in order. Wider
  rows: dx by a block per row, partials by a column pass (three launches).
* batch_norm / batch_norm_bwd: three launches: per-channel partial sums over (batch, inner) split
  into enough units to fill the GPU even with few channels; a warp per channel adds its
  partials in order and writes the statistics (and dgamma, dbeta) and per-channel coefficients;
  one elementwise pass writes y (or dx). Planes layout for inner >= 64 (blocks over contiguous
  planes, float4 when inner % 4 == 0), columns layout otherwise (threads over the (B, C*inner)
  columns, coalesced for BatchNorm1d's (N, C)).
* batch_norm_infer: the coefficients (one tiny launch), then the same elementwise pass.

Grids that carry partial sums are sized from the shape only (never from the device), so a
result's bits do not depend on the GPU model either.
"""

from __future__ import annotations


import cupy
import numpy as np

from ..caches import memo
from .launch import BLOCK, F32, I64, empty, empty_as, give_back, grid_for, kernel, sm_count

__all__ = ["layer_norm", "layer_norm_bwd", "batch_norm", "batch_norm_bwd", "batch_norm_infer", "running_stat_update"]

_FILE = "norm.cu"
_BLOCK = (BLOCK,)
_getdev = cupy.cuda.runtime.getDevice
_NULL = np.uint64(0)  # a NULL device pointer, passed by value: gamma or beta absent

_LN_WARP_COLS = 1024        # forward: a warp holds rows up to this long in registers
_LNB_WARP_COLS = 128        # backward: a warp per row up to this many columns ...
_LNB_BLOCK_COLS = 4096      # ... a block per row (16 columns per thread) up to this many
_LNB_MAX_WARPS = 2048       # groups of the fused backward (each walks rows g, g + groups, ...)
_LNB_MAX_BLOCKS = 512
_BN_PLANE_MIN = 64          # inner >= this: planes layout, else columns layout
_BN_TARGET_UNITS = 1024     # planes layout: channel x plane-chunk units of the statistics pass
_BN_TARGET_THREADS = 1 << 17  # columns layout: column x row-chunk threads of the statistics pass
_BN_APPLY_THREADS = 1 << 18


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _p(a):
    return _NULL if a is None else a


def _aligned(*arrays) -> bool:
    return all(a.data.ptr % 16 == 0 for a in arrays)


def _launch(name: str, grid, block: int, args) -> None:
    kernel(_FILE, name)(grid if isinstance(grid, tuple) else (grid,), (block,), args)


# -- layer norm -----------------------------------------------------------------------------------------
def layer_norm(x, gamma, beta, rows, cols, eps):
    y, mean, var = empty(rows * cols), empty(rows), empty(rows)
    if rows == 0:
        return y, mean, var
    if cols == 0:
        mean.fill(np.nan)
        var.fill(np.nan)
        return y, mean, var
    args = (x, _p(gamma), _p(beta), I64(rows), I64(cols), F32(eps), y, mean, var)
    if cols <= _LN_WARP_COLS:
        name = "tl_layer_norm_fwd_warp4" if cols % 4 == 0 and _aligned(x, y) else "tl_layer_norm_fwd_warp"
        _launch(name, grid_for(rows * 32), BLOCK, args)
    else:  # one block per row, in any grid: a row's result does not depend on which block runs it
        _launch("tl_layer_norm_fwd_block", min(rows, sm_count() * 8), 512, args)
    return y, mean, var


def _parts(nparts: int, cols: int):
    """The (2, nparts, cols) float32 partials of dgamma and dbeta as one allocation and the address
    of its second half (a raw pointer argument: slicing a CuPy array costs microseconds per call);
    the allocation outlives the launches that use it (CuPy's pool frees in stream order)."""
    part = empty(2 * nparts * cols)
    return part, np.uint64(part.data.ptr + 4 * nparts * cols)


def layer_norm_bwd(x, gamma, mean, var, dy, rows, cols, eps):
    dx = empty(rows * cols)
    if rows * cols == 0:
        return dx, cupy.zeros(cols, dtype=cupy.float32), cupy.zeros(cols, dtype=cupy.float32)
    dgamma, dbeta = empty(cols), empty(cols)
    common = (x, _p(gamma), mean, var, dy, I64(rows), I64(cols), F32(eps))
    if cols <= _LNB_WARP_COLS:
        groups = min(rows, _LNB_MAX_WARPS)
        nparts = _cdiv(groups, 8)
        part, part1 = _parts(nparts, cols)
        _launch("tl_layer_norm_bwd_warp", nparts, 256, common + (I64(groups), dx, part, part1))
    elif cols <= _LNB_BLOCK_COLS:
        per = 4 if cols <= 1024 else 8 if cols <= 2048 else 16
        vec = "_v" if cols % 4 == 0 and _aligned(x, dy, dx) else ""
        nparts = min(rows, _LNB_MAX_BLOCKS)
        part, part1 = _parts(nparts, cols)
        _launch(f"tl_layer_norm_bwd_block{per}{vec}", nparts, 256, common + (dx, part, part1))
    else:
        _launch("tl_layer_norm_bwd_rows", min(rows, sm_count() * 4), 512, common + (dx,))
        nparts = max(1, min(rows, _cdiv(_BN_TARGET_THREADS, cols)))
        chunk = _cdiv(rows, nparts)
        nparts = _cdiv(rows, chunk)
        part, part1 = _parts(nparts, cols)
        _launch("tl_layer_norm_bwd_cols", grid_for(nparts * cols), BLOCK,
                (x, mean, var, dy, I64(rows), I64(cols), F32(eps), I64(nparts), I64(chunk), part, part1))
    _launch("tl_norm_colsum2", (min(_cdiv(cols, 32), 4096), 2), 256,
            (part, part1, I64(nparts), I64(cols), dgamma, dbeta))
    give_back(part)
    return dx, dgamma, dbeta


# -- batch norm -----------------------------------------------------------------------------------------
def _threads_for(items: int) -> int:
    """A block size for items per block: a multiple of 32 in [32, 256]."""
    return max(32, min(256, _cdiv(items, 32) * 32))


def _plan(batch: int, channels: int, inner: int):
    """The statistics pass layout, fixed by the shape: (planes?, S chunks, items per chunk) and the
    (L, stride_s, base_mult) that address a channel's partials (see bn_channel_sum in norm.cu)."""
    if inner >= _BN_PLANE_MIN:
        s = max(1, min(batch, _cdiv(_BN_TARGET_UNITS, channels)))
        pc = _cdiv(batch, s)
        s = _cdiv(batch, pc)
        return True, s, pc, (1, 1, s), channels * s
    ci = channels * inner
    s = max(1, min(_cdiv(batch, 16), _cdiv(_BN_TARGET_THREADS, ci), 65535))
    rc = _cdiv(batch, s)
    s = _cdiv(batch, rc)
    return False, s, rc, (inner, ci, inner), s * ci


class _BNLaunches:
    """batch_norm's (or its backward's) three launches for one (device, shape): functions, grids,
    blocks and every scalar argument built once (``_bn_launches`` caches them), so that a call only
    passes its arrays: less host time per call, where a small network's step is bound by host time."""

    __slots__ = ("stats", "stats_grid", "stats_block", "stats_dims", "nparts", "addr", "finish",
                 "finish_grid", "finish_dims", "apply", "apply_grid", "apply_block", "apply_dims", "n")

    def __init__(self, bwd: bool, batch: int, channels: int, inner: int) -> None:
        pre = "tl_batch_norm_bwd" if bwd else "tl_batch_norm"
        planes, s, per, addr, nparts = _plan(batch, channels, inner)
        self.nparts = nparts
        self.stats_dims = (I64(batch), I64(channels), I64(inner), I64(s), I64(per))
        if planes:
            items = inner // 4 if inner % 4 == 0 else inner
            self.stats = kernel(_FILE, f"{pre}_stats_planes")
            self.stats_grid, self.stats_block = (min(nparts, sm_count() * 16),), (_threads_for(items),)
        else:
            self.stats = kernel(_FILE, f"{pre}_stats_cols")
            self.stats_grid, self.stats_block = (_cdiv(channels * inner, BLOCK), s), (BLOCK,)
        self.addr = (I64(s),) + tuple(I64(a) for a in addr)
        self.finish = kernel(_FILE, f"{pre}_finish")
        self.finish_grid = (grid_for(channels * 32),)
        self.finish_dims = (I64(channels), I64(inner)) if not bwd else (I64(channels),)
        self.n = np.float64(batch * inner)
        self.apply_dims = (I64(batch), I64(channels), I64(inner))
        if inner >= _BN_PLANE_MIN:
            items = inner // 4 if inner % 4 == 0 else inner
            self.apply = kernel(_FILE, f"{pre}_apply_planes")
            self.apply_grid, self.apply_block = (min(batch * channels, sm_count() * 32),), (_threads_for(items),)
        else:
            ci = channels * inner
            rows = max(1, min(batch, 65535, _cdiv(_BN_APPLY_THREADS, _cdiv(ci, BLOCK) * BLOCK)))
            self.apply = kernel(_FILE, f"{pre}_apply_cols")
            self.apply_grid, self.apply_block = (_cdiv(ci, BLOCK), rows), (BLOCK,)


@memo("cuda.norm.bn_launches", 1024)
def _bn_launches(device: int, bwd: bool, batch: int, channels: int, inner: int) -> _BNLaunches:
    return _BNLaunches(bwd, batch, channels, inner)


def _apply(prefix: str, arrays, coef, batch, channels, inner, out):
    args = arrays + (coef, I64(batch), I64(channels), I64(inner), out)
    if inner >= _BN_PLANE_MIN:
        items = inner // 4 if inner % 4 == 0 else inner
        _launch(f"{prefix}_planes", min(batch * channels, sm_count() * 32), _threads_for(items), args)
    else:
        ci = channels * inner
        rows = max(1, min(batch, 65535, _cdiv(_BN_APPLY_THREADS, _cdiv(ci, BLOCK) * BLOCK)))
        _launch(f"{prefix}_cols", (_cdiv(ci, BLOCK), rows), BLOCK, args)


def _bn_stats(lc: _BNLaunches, arrays):
    """The statistics pass: (nparts, 2) float64 partials (a workspace from the free list)."""
    part = empty_as(2 * lc.nparts, "d")
    lc.stats(lc.stats_grid, lc.stats_block, arrays + lc.stats_dims + (part,))
    return part


def _bn_apply(lc: _BNLaunches, arrays, coef, out) -> None:
    lc.apply(lc.apply_grid, lc.apply_block, arrays + (coef,) + lc.apply_dims + (out,))


def batch_norm(x, gamma, beta, batch, channels, inner, eps):
    n = batch * inner
    y = empty(batch * channels * inner)
    if n == 0 or channels == 0:
        nan = cupy.full(channels, np.nan, dtype=cupy.float32)
        return y, nan, nan.copy()
    lc = _bn_launches(_getdev(), False, batch, channels, inner)
    mean, var = empty(channels), empty(channels)
    coef = empty_as(3 * channels, "d")
    part = _bn_stats(lc, (x,))
    lc.finish(lc.finish_grid, _BLOCK, (part, x, _p(gamma), _p(beta)) + lc.finish_dims + lc.addr
              + (lc.n, F32(eps), mean, var, coef))
    give_back(part)
    _bn_apply(lc, (x,), coef, y)
    give_back(coef)
    return y, mean, var


def batch_norm_bwd(x, gamma, mean, var, dy, batch, channels, inner, eps):
    n = batch * inner
    dx = empty(batch * channels * inner)
    if n == 0 or channels == 0:
        return dx, cupy.zeros(channels, dtype=cupy.float32), cupy.zeros(channels, dtype=cupy.float32)
    lc = _bn_launches(_getdev(), True, batch, channels, inner)
    dgamma, dbeta = empty(channels), empty(channels)
    coef = empty_as(4 * channels, "d")
    part = _bn_stats(lc, (x, dy, mean))
    lc.finish(lc.finish_grid, _BLOCK, (part, _p(gamma), mean, var) + lc.finish_dims + lc.addr
              + (lc.n, F32(eps), dgamma, dbeta, coef))
    give_back(part)
    _bn_apply(lc, (x, dy), coef, dx)
    give_back(coef)
    return dx, dgamma, dbeta


def batch_norm_infer(x, mean, var, gamma, beta, batch, channels, inner, eps):
    y = empty(batch * channels * inner)
    if y.size == 0:
        return y
    coef = empty_as(3 * channels, "d")
    _launch("tl_batch_norm_infer_coef", grid_for(channels), BLOCK,
            (mean, var, _p(gamma), _p(beta), I64(channels), F32(eps), coef))
    _apply("tl_batch_norm_apply", (x,), coef, batch, channels, inner, y)
    give_back(coef)
    return y


def running_stat_update(running, stat, n, keep, momentum, factor):
    out = empty(n)
    if n:
        _launch("tl_running_stat_update", grid_for(n), BLOCK,
                (running, stat, I64(n), F32(keep), F32(momentum), F32(factor), out))
    return out
