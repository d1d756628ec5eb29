"""CUDA launcher of the LSTM recurrence of one layer-direction (rnn_seq.cu): one fused launch per time
step (the step's GEMM h W_hh^T, then the cell), the steps looped here; every output element is
written by one thread in a fixed order of summation (no atomics: bitwise repeatable)."""

from __future__ import annotations

import cupy
import numpy as np
from cupy.cuda import driver

from ..caches import memo
from .launch import HostStruct, empty, kernel, sm_count

__all__ = ["lstm_recurrence_fwd", "lstm_recurrence_bwd"]

_FILE = "rnn_seq.cu"

# A batch tile of R rows per blockIdx.y (as few tiles as 32-row kernels allow: each tile reads all
# of W_hh); the kernel's BT is R rounded up to a multiple of 4 (its accumulators; shared rows past
# R are zeros). Forward block: JB hidden units x KS warps per unit (each over a share of the
# columns), the h_prev tile transposed in shared memory (chunks of KCH columns of S floats).
# Backward block: JC hidden columns x RR row groups, the dg_next tile (chunks of RC gate columns of
# BT rows): one chunk when the tile fits in shared memory, else double-buffered chunks (NBUF = 2).
# The launch arguments are one struct of int64 words made once per call; between the launches only
# t and the mode change.
_RING = 2          # weight steps each thread prefetches (rnn_seq.cu's TL_LSTM_REC_RING)
_MAXT = {4: 512, 8: 512, 12: 512, 16: 320, 20: 320, 24: 256, 28: 256, 32: 256}  # the kernels' launch bounds
_T_SLOT, _FLAGS_SLOT = 11, 17  # words of t and flags in the argument structs
_L2_BYTES_PER_CYCLE = 32


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


class _SeqPlan:
    __slots__ = ("fwd", "bwd", "grid_f", "block_f", "grid_b", "block_b", "fwd_words", "bwd_words",
                 "fwd_smem", "bwd_smem")


# kernel handle -> the dynamic shared memory it allows (only raised): one entry per kernel and device
_smem_set: dict[int, int] = {}


def _smem_cap(dev: int) -> int:
    """Dynamic shared memory a launch may ask for: the device's opt-in limit less room for the
    kernels' static part (at most 8 KiB)."""
    optin = cupy.cuda.runtime.getDeviceProperties(dev).get("sharedMemPerBlockOptin", 48 * 1024)
    return max(32 * 1024, int(optin) - 12 * 1024)


def _configured(fn, smem: int):
    """``fn``, allowed at least ``smem`` bytes of dynamic shared memory (the attribute is per kernel,
    shared by every plan: never lowered, or an earlier plan's launches would fail)."""
    if smem > max(48 * 1024, _smem_set.get(fn.ptr, 0)):
        driver.funcSetAttribute(fn.ptr, driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem)
        _smem_set[fn.ptr] = smem
    return fn


def _chunks(cols: int, unit: int, pad: int, row_bytes: int, cap: int):
    """(chunk columns, buffers, bytes) of a tile of ``cols`` columns of ``row_bytes`` bytes each: one
    chunk (padded to a multiple of ``pad``) when it fits in ``cap``, else two buffers of as many
    columns as fit (a multiple of ``unit``); None if not even two of ``unit`` columns fit. (Measured
    on an H200: splitting a tile that fits into chunks to overlap its load with the products was
    slower, by the barriers it adds.)"""
    ch = _ceil(cols, pad) * pad
    if ch * row_bytes <= cap:
        return ch, 1, ch * row_bytes
    ch = cap // (2 * row_bytes) // unit * unit
    if ch < unit:
        return None
    return ch, 2, 2 * ch * row_bytes


def _fwd_shape(H: int, tiles: int, R: int, bt: int, nsm: int, cap: int):
    """(cost, JB, KS, (KCH, NBUF), dynamic shared bytes) of the forward, or None if none fits ``cap``.
    The cost, in cycles of one SM (one block per SM: the register budget): per wave, the busiest
    scheduler's instructions (warps per scheduler x steps per warp x instructions per step) or the
    weight slice streamed from L2, whichever is longer, plus the h_prev tile (loaded before the
    first step)."""
    S = bt if (bt // 4) % 2 else bt + 4
    steps, maxw, best = _ceil(H, 32), _MAXT[bt] // 32, None
    tile = R * H * 4 / _L2_BYTES_PER_CYCLE
    for ks in (1, 2, 3, 4):
        ch = _chunks(H, 32 * _RING * ks, 32, S * 4, cap)
        if ch is None:
            continue
        per_warp = _ceil(_ceil(steps, _RING), ks) * _RING * (4.25 * bt + 24)
        for jb in range(1, maxw // ks + 1):
            blocks = _ceil(H, jb) * tiles
            work = max(_ceil(jb * ks, 4) * per_warp, 4 * jb * H * 4 / _L2_BYTES_PER_CYCLE)
            cost = (_ceil(blocks, nsm) * (work + tile), blocks, ks)
            if best is None or cost < best[0]:
                best = (cost, jb, ks, ch[:2], ch[2])
    return best


def _bwd_shape(H: int, tiles: int, R: int, bt: int, nsm: int, cap: int):
    """(JC, RR, (RC, NBUF), dynamic shared bytes) of the backward, or None if none fits ``cap``.
    256 threads; as few columns per block as keep the blocks within one wave (a power of two up to
    32: every block loads all of its rows' dg_next, so more blocks cost L2 traffic), the rest row
    groups, fewer when 4H gives a thread under 4 steps (the best of the shapes measured on an H200
    at (B, H) = (20, 650), (64, 1024), (128, 256))."""
    jc = 1
    while jc < 32 and _ceil(H, jc) * tiles > nsm:
        jc *= 2
    rr = 256 // jc
    while rr > 8 and 4 * rr * _RING * 4 > 4 * H:  # at least 4 steps a thread
        rr //= 2
    ch = _chunks(4 * H, 4 * rr * _RING, 4 * rr, bt * 4, cap)
    if ch is None:
        return None
    smem = max(ch[2], rr * bt * jc * 4)
    return (jc, rr, ch[:2], smem) if smem <= cap else None


def _seq_plan(batch: int, hidden: int) -> _SeqPlan:
    """Kernels, grids and the size words of the recurrence for (batch, hidden) on the current
    device (batch * hidden > 0)."""
    return _seq_plan_on(cupy.cuda.runtime.getDevice(), batch, hidden)


@memo("cuda.rnn_seq.plan", 256)
def _seq_plan_on(dev: int, batch: int, hidden: int) -> _SeqPlan:
    cap, nsm, H = _smem_cap(dev), sm_count(), hidden
    rmax = 32
    while True:  # the widest tiles whose buffers fit (any cap of 8 KiB or more fits 4 rows)
        tiles = _ceil(batch, rmax)
        R = _ceil(batch, tiles)
        bt = _ceil(R, 4) * 4
        fshape, bshape = _fwd_shape(H, tiles, R, bt, nsm, cap), _bwd_shape(H, tiles, R, bt, nsm, cap)
        if (fshape is not None and bshape is not None) or rmax == 4:
            break
        rmax //= 2
    _, jb, ks, (kch, fbuf), fsmem = fshape
    jc, rr, (rc, bbuf), bsmem = bshape
    plan = _SeqPlan()
    plan.fwd = _configured(kernel(_FILE, f"tl_lstm_recurrence_fwd_b{bt}"), fsmem)
    plan.bwd = _configured(kernel(_FILE, f"tl_lstm_recurrence_bwd_b{bt}"), bsmem)
    plan.grid_f, plan.block_f, plan.fwd_smem = (_ceil(H, jb), tiles), (32 * jb * ks,), fsmem
    plan.grid_b, plan.block_b, plan.bwd_smem = (_ceil(H, jc), tiles), (jc * rr,), bsmem
    plan.fwd_words = (R, kch, jb, ks, fbuf)   # words 12..16 of the structs
    plan.bwd_words = (R, rc, jc, rr, bbuf)
    return plan


def _order(steps: int, reverse) -> range:
    return range(steps - 1, -1, -1) if reverse else range(steps)


def lstm_recurrence_fwd(gi, h0, c0, w_hh, b_hh, steps, batch, hidden, reverse):
    T, B, H = steps, batch, hidden
    n = B * H
    y, cs, act = empty((T + 1) * n), empty(T * n), empty(5 * T * n)
    if n == 0:
        return y, cs, act
    if T == 0:
        y[:] = c0  # c_n = c0
        return y, cs, act
    p = _seq_plan(B, H)
    flags = (1 if b_hh is not None else 0) | (2 if reverse else 0)
    words = np.array([gi.data.ptr, h0.data.ptr, c0.data.ptr, w_hh.data.ptr, (w_hh if b_hh is None else b_hh).data.ptr,
                      y.data.ptr, cs.data.ptr, act.data.ptr, B, H, T, 0, *p.fwd_words, flags], dtype=np.int64)
    args = (HostStruct(words),)  # CuPy copies the struct's bytes at each launch
    fn, grid, block, smem = p.fwd, p.grid_f, p.block_f, p.fwd_smem
    for t in _order(T, reverse):
        words[_T_SLOT] = t
        fn(grid, block, args, shared_mem=smem)
    return y, cs, act


def lstm_recurrence_bwd(act, cs, c0, w_hh, gy, steps, batch, hidden, reverse):
    T, B, H = steps, batch, hidden
    n = B * H
    dgates, dh0, dc0 = empty(4 * T * n), empty(n), empty(n)
    if n == 0:
        return dgates, dh0, dc0
    if T == 0:
        dh0.fill(0)
        dc0[:] = gy[:n]
        return dgates, dh0, dc0
    p = _seq_plan(B, H)
    rev = 2 if reverse else 0
    words = np.array([act.data.ptr, cs.data.ptr, c0.data.ptr, w_hh.data.ptr, gy.data.ptr, dgates.data.ptr,
                      dc0.data.ptr, dh0.data.ptr, B, H, T, 0, *p.bwd_words, rev], dtype=np.int64)
    args = (HostStruct(words),)
    fn, grid, block, smem = p.bwd, p.grid_b, p.block_b, p.bwd_smem
    walk = list(_order(T, reverse))[::-1]
    for t in walk:  # the first step walked has no recurrent term (mode 0), the later ones mode 1
        words[_T_SLOT] = t
        fn(grid, block, args, shared_mem=smem)
        words[_FLAGS_SLOT] = rev | 1 << 2
    # dh0 = dgates of the first step processed times W_hh (mode 2: no cell)
    words[_T_SLOT], words[_FLAGS_SLOT] = walk[-1], rev | 2 << 2
    fn(grid, block, args, shared_mem=smem)
    return dgates, dh0, dc0
