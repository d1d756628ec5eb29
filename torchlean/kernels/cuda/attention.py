"""CUDA kernels of the attention family: tiled flash attention, forward and backward.

* On sm_80+ GPUs every d <= 128 problem runs on tensor cores first (attention_mma.cu: 3xTF32
  products with float32 accuracy, or one TF32 product when ``set_allow_tf32(True)``), 64-row items;
  the kernel flags each item whose operands or results hold a non-finite value (redo, one int per
  item, then their count), and attention.cu's float32 kernel of the same item size then recomputes
  only those (a launch whose blocks return at once when the count is 0). Older GPUs run
  attention.cu's kernels alone.

* flash_attention_fwd: tl_flash_attention_fwd_d{32,64,128} (64 query rows per block, cp.async-staged
  K/V), the smallest instantiation >= d; d > 128: the warp-per-row
  tl_flash_attention_fwd_generic, d <= 1024. Writes out and lse only.
* Tiles are read with coalesced float4 loads along d when d % 4 == 0 and every operand pointer is
  16-byte aligned, else with scalar loads.
* backward: D = rowsum(dout * out) (tl_flash_attention_bwd_rowdot, batch*n_q floats), then
  tl_flash_attention_bwd_dq_d* (a block per query tile, looping over key tiles) and/or
  tl_flash_attention_bwd_dkv_d* (a block per key tile, looping over query tiles). bwd_k and bwd_v
  run the fused kv kernel and drop one output;
  flash_attention_bwd runs both kernels after one rowdot (three launches for dq, dk, dv).
* packed (flash_attention_packed_fwd / _bwd): the same kernels with another TlAttnLay (the rows'
  addresses per role, a HostStruct cached per shape): q, k, v are read at offsets 0, E, 2E of the
  (batch, n, 3, heads, d) buffer with row stride 3E, out and dout are (batch, n, heads, d), and dq,
  dk, dv are written into one dqkv buffer in qkv's layout. Same bits as the unpacked primitives.
Extra device memory: the outputs, lse and D: O(n d). Every element is produced by one block in a
fixed order: deterministic in both reduction modes, no atomics. Mask mode "none" passes a null
mask pointer that the kernels never read.
"""

from __future__ import annotations

import cupy
import numpy as np
from cupy.cuda import driver

from ..flags import allow_tf32
from . import attention_mma
from .launch import BLOCK, F32, I64, HostStruct, empty, give_back, grid_for, kernel, sm_count

__all__ = ["flash_attention_packed_fwd", "flash_attention_packed_bwd", "flash_attention_fwd", "flash_attention_bwd_q", "flash_attention_bwd_k", "flash_attention_bwd_v",
           "flash_attention_bwd_kv", "flash_attention_bwd"]

_FILE = "attention.cu"
_NT = 128
_LD = 68
_GENERIC_MAX_D = 1024
_MODES = {"none": 0, "fill": 1, "hard": 2, "add": 3}
_ITEM = 64  # rows per item of every tiled kernel (both files): a flagged mma item is one float32 item
_MMA_BQ = {32: 64, 64: 64, 128: 32}  # query rows per step of tl_flash_attention_mma_dkv_d*


def _dp(d: int) -> int | None:
    for dp in (32, 64, 128):  # the forward's P V column mapping needs DP >= 32
        if d <= dp:
            return dp
    return None


def _smem(kind: str, dp: int) -> int:
    p = dp + 4
    if kind == "mma_fwd":
        return 4 * 3 * 64 * p
    if kind == "mma_dq":
        return 4 * 4 * 64 * p
    if kind == "mma_dkv":
        bq = _MMA_BQ[dp]
        return 4 * ((2 * 64 + 2 * bq) * p + 2 * bq)
    if kind == "fwd":  # tl_flash_attention_fwd_d*: BR = _ITEM query rows (RT = 4 rows per thread)
        br = _ITEM
        return 4 * (br * (dp + 4) + 64 * (dp + 4) + 64 * dp + 64 * (br + 4))
    if kind == "dq":
        return 4 * (4 * dp * _LD + 64 * _LD)
    return 4 * (4 * dp * _LD + 2 * 64 * _LD + 128)


_TILED_NAMES = {"fwd": "fwd", "dq": "bwd_dq", "dkv": "bwd_dkv"}
_tiled_cache: dict[tuple[int, str, int, bool], tuple] = {}


def _tiled(kind: str, dp: int, tf32: bool = False):
    """(kernel, dynamic shared memory bytes) of a tiled kernel on the current device, configured once;
    ``tf32`` picks the mma kernels' one-product TF32 instantiation."""
    key = (cupy.cuda.runtime.getDevice(), kind, dp, tf32)
    hit = _tiled_cache.get(key)
    if hit is None:
        if kind.startswith("mma_"):
            fn = attention_mma.mma_kernel(kind[4:], dp, tf32)
        else:
            fn = kernel(_FILE, f"tl_flash_attention_{_TILED_NAMES[kind]}_d{dp}")
        smem = _smem(kind, dp)
        if smem > 48 * 1024:
            driver.funcSetAttribute(fn.ptr, driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem)
        hit = _tiled_cache[key] = (fn, smem)
    return hit


# The mask arguments when no mask is read (mode "none"), per causal flag: built once.
_NO_MASK = {c: (np.uintp(0), I64(1), I64(0), I64(0), I64(0), I64(0), np.int32(0), np.int32(1 if c else 0))
            for c in (False, True)}


def _mask_args(mask, mode, layout, causal):
    if mode == "none" or mask is None:
        return _NO_MASK[bool(causal)]
    else:
        heads, s_n, s_h, s_q, s_k = layout
        ptr = mask
        m = _MODES[mode]
    return (ptr, I64(max(heads, 1)), I64(s_n), I64(s_h), I64(s_q), I64(s_k), np.int32(m), np.int32(1 if causal else 0))


def _grid(items: int, smem: int) -> int:
    per_sm = max(1, min(4, (227 * 1024) // max(smem, 1)))
    # Up to 64 waves of resident blocks: the hardware hands out the (unequal, when causal) items
    # dynamically; the kernels' grid-stride loops only matter beyond that.
    return max(1, min(items, sm_count() * per_sm * 64))


def _run_tiled(kind: str, dp: int, items: int, args: tuple) -> None:
    """Run the tiled kernel ``kind`` over ``items`` 64-row items: on tensor cores when the device has
    them, then attention.cu's float32 kernel over the items the mma kernel flagged; else the float32
    kernel over all items (redo = null)."""
    fn, smem = _tiled(kind, dp)
    if not attention_mma.available():
        fn((_grid(items, smem),), (_NT,), args + (np.uintp(0),), shared_mem=smem)
        return
    mma, mma_smem = _tiled("mma_" + kind, dp, allow_tf32())
    # int32 words (float32-sized): a flag per item, each written by the mma kernel, then the count of
    # flagged items, which starts at 0
    redo = empty(items + 1)
    cupy.cuda.runtime.memsetAsync(redo.data.ptr + 4 * items, 0, 4, cupy.cuda.get_current_stream().ptr)
    mma((_grid(items, mma_smem),), (_NT,), args + (redo,), shared_mem=mma_smem)
    # The float32 pass: a few blocks per SM, which return at once when nothing is flagged, else walk
    # every item and skip the unflagged ones.
    fn((max(1, min(items, 2 * sm_count())),), (_NT,), args + (redo,), shared_mem=smem)
    give_back(redo)


class _Lay:
    """A TlAttnLay (heads; s_n, s_h, ld of the q, k and o roles) as a kernel argument, with
    ``aligned``: every stride a multiple of 4 floats (rows stay 16-byte aligned for float4 reads)."""

    def __init__(self, vals: tuple) -> None:
        self.arg = HostStruct(np.array(vals, dtype=np.int64))
        self.aligned = all(x % 4 == 0 for x in vals[1:])


_lays: dict[tuple, _Lay] = {}


def _lay(packed: bool, heads: int, n_q: int, n_k: int, d: int) -> _Lay:
    key = (packed, heads, n_q, n_k, d)
    hit = _lays.get(key)
    if hit is None:
        if len(_lays) > 256:
            _lays.clear()
        if packed:  # qkv (batch, n, 3, heads, d), out (batch, n, heads, d); n_q = n_k = n
            e = heads * d
            vals = (heads, n_q * 3 * e, d, 3 * e, n_q * 3 * e, d, 3 * e, n_q * e, d, e)
        else:
            vals = (1, n_q * d, 0, d, n_k * d, 0, d, n_q * d, 0, d)
        hit = _lays[key] = _Lay(vals)
    return hit


def _vec(d: int, lay: _Lay, *ptrs: int) -> np.int32:
    """1 when the tiles can be read as float4 rows: d % 4 == 0, strides multiples of 4 and every base
    pointer 16-byte aligned."""
    ok = d % 4 == 0 and lay.aligned and all(p % 16 == 0 for p in ptrs)
    return np.int32(1 if ok else 0)


def _check_d(d: int) -> None:
    if d > _GENERIC_MAX_D:
        from ...errors import ArgumentError
        raise ArgumentError(f"flash_attention: head dim d = {d} is above the CUDA backend's limit {_GENERIC_MAX_D}")


def _fwd(q, k, v, mask, out, lse, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout, lay):
    """Launch the forward: q, k, v, out device pointers (ints) in the layout ``lay``; lse an array."""
    _check_d(d)
    margs = _mask_args(mask, mask_mode, mask_layout, causal)
    ptrs = (np.uintp(q), np.uintp(k), np.uintp(v))
    dims = (I64(batch), I64(n_q), I64(n_k), np.int32(d), F32(scale))
    dp = _dp(d)
    if dp is not None:
        args = ptrs + margs + (np.uintp(out), lse) + dims + (_vec(d, lay, q, k, v), lay.arg)
        _run_tiled("fwd", dp, batch * ((n_q + _ITEM - 1) // _ITEM), args)
    else:
        kernel(_FILE, "tl_flash_attention_fwd_generic")((grid_for(batch * n_q * 32),), (BLOCK,),
                                                        ptrs + margs + (np.uintp(out), lse) + dims + (lay.arg,))


def flash_attention_fwd(q, k, v, mask, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout):
    out = empty(batch * n_q * d)
    lse = empty(batch * n_q)
    if batch * n_q:
        _fwd(q.data.ptr, k.data.ptr, v.data.ptr, mask, out.data.ptr, lse, batch, n_q, n_k, d, scale, causal,
             mask_mode, mask_layout, _lay(False, 1, n_q, n_k, d))
    return out, lse


def flash_attention_packed_fwd(qkv, mask, batch, heads, n, d, scale, causal, mask_mode, mask_layout):
    e = heads * d
    out = empty(batch * n * e)
    lse = empty(batch * heads * n)
    if batch * heads * n:
        p = qkv.data.ptr
        _fwd(p, p + 4 * e, p + 8 * e, mask, out.data.ptr, lse, batch * heads, n, n, d, scale, causal, mask_mode,
             mask_layout, _lay(True, heads, n, n, d))
    return out, lse


def _bwd_launch(q, k, v, mask, out, lse, dout, dq, dk, dv, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout,
                lay):
    """Launch rowdot and the dq (when dq) and dk/dv (when dk) kernels: pointers (ints) in ``lay``."""
    _check_d(d)
    dd = empty(batch * n_q)
    kernel(_FILE, "tl_flash_attention_bwd_rowdot")(
        (grid_for(batch * n_q * 32),), (BLOCK,),
        (np.uintp(dout), np.uintp(out), dd, I64(batch * n_q), I64(d), I64(n_q), lay.arg))
    margs = _mask_args(mask, mask_mode, mask_layout, causal)
    dims = (I64(batch), I64(n_q), I64(n_k), np.int32(d), F32(scale))
    ptrs = (np.uintp(q), np.uintp(k), np.uintp(v))
    dp = _dp(d)
    vec = _vec(d, lay, q, k, v, dout)
    if dq is not None:
        args = ptrs + margs + (lse, dd, np.uintp(dout), np.uintp(dq)) + dims
        if dp is not None:
            _run_tiled("dq", dp, batch * ((n_q + _ITEM - 1) // _ITEM), args + (vec, lay.arg))
        else:
            kernel(_FILE, "tl_flash_attention_bwd_dq_generic")((grid_for(batch * n_q * 32),), (BLOCK,),
                                                               args + (lay.arg,))
    if dk is not None:
        args = ptrs + margs + (lse, dd, np.uintp(dout), np.uintp(dk), np.uintp(dv)) + dims
        if dp is not None:
            _run_tiled("dkv", dp, batch * ((n_k + _ITEM - 1) // _ITEM), args + (vec, lay.arg))
        else:
            kernel(_FILE, "tl_flash_attention_bwd_dkv_generic")((grid_for(batch * n_k * 32),), (BLOCK,),
                                                                args + (lay.arg,))
    give_back(dd)


def _bwd(q, k, v, mask, out, lse, dout, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout, want_q, want_kv):
    # The kernels write every element of their outputs (a row with no allowed key gets 0), so only
    # a problem with no terms needs zeros.
    alloc = empty if batch * n_q * n_k * d else (lambda n: cupy.zeros(n, dtype=cupy.float32))
    nq, nk = batch * n_q * d, batch * n_k * d
    if want_q and want_kv and nq == nk and nq % 4 == 0:
        # One allocation, dq | dk | dv (16-byte aligned runs): the gradient of the q, k, v slices of
        # one tensor (qkv[0], qkv[1], qkv[2]) then joins without a copy (concat1d's view case).
        packed = alloc(3 * nq)
        dq, dk, dv = packed[:nq], packed[nq:2 * nq], packed[2 * nq:]
    else:
        dq = alloc(nq) if want_q else None
        dk, dv = (alloc(nk), alloc(nk)) if want_kv else (None, None)
    if batch * n_q * n_k * d == 0:
        return dq, dk, dv
    _bwd_launch(q.data.ptr, k.data.ptr, v.data.ptr, mask, out.data.ptr, lse, dout.data.ptr,
                None if dq is None else dq.data.ptr, None if dk is None else dk.data.ptr,
                None if dv is None else dv.data.ptr, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout,
                _lay(False, 1, n_q, n_k, d))
    return dq, dk, dv


def flash_attention_packed_bwd(qkv, mask, out, lse, dout, batch, heads, n, d, scale, causal, mask_mode, mask_layout):
    e = heads * d
    dqkv = empty(batch * n * 3 * e)  # every element written: n = 0 or d = 0 leaves nothing to write
    if batch * heads * n * d:
        p, g = qkv.data.ptr, dqkv.data.ptr
        _bwd_launch(p, p + 4 * e, p + 8 * e, mask, out.data.ptr, lse, dout.data.ptr, g, g + 4 * e, g + 8 * e,
                    batch * heads, n, n, d, scale, causal, mask_mode, mask_layout, _lay(True, heads, n, n, d))
    return dqkv


def flash_attention_bwd_q(q, k, v, mask, out, lse, dout, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout):
    return _bwd(q, k, v, mask, out, lse, dout, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout,
                True, False)[0]


def flash_attention_bwd(q, k, v, mask, out, lse, dout, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout):
    return _bwd(q, k, v, mask, out, lse, dout, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout,
                True, True)


def flash_attention_bwd_kv(q, k, v, mask, out, lse, dout, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout):
    _, dk, dv = _bwd(q, k, v, mask, out, lse, dout, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout,
                     False, True)
    return dk, dv


def flash_attention_bwd_k(q, k, v, mask, out, lse, dout, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout):
    return _bwd(q, k, v, mask, out, lse, dout, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout,
                False, True)[1]


def flash_attention_bwd_v(q, k, v, mask, out, lse, dout, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout):
    return _bwd(q, k, v, mask, out, lse, dout, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout,
                False, True)[2]
