"""Primitives of the attention family: flash attention forward and its backward passes.

``flash_attention_fwd(q, k, v, mask, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout)
-> (out, lse)`` generalizes the seed's ``flashAttentionFwd(Q K V mask hasMask batch n d scale)``:

* q (batch, n_q, d), k and v (batch, n_k, d), row-major (batch is usually heads); out (batch, n_q, d);
  lse (batch, n_q) the row log-sum-exp of the masked, scaled scores (-inf for a row without any
  allowed key), saved for the backward.
* scores s_ij = (q_i . k_j) * scale (scale rounded to float32).
* causal (bool): key j allowed for query i iff j <= i (PyTorch's is_causal, top-left aligned).
* mask_mode: "none" (mask must be None and is never read), "fill" (the seed's: an entry 0.0
  blocks and the score becomes -1000.0; a fully blocked row averages v uniformly), "hard" (an
  entry 0.0 blocks with weight exactly 0; a row without an allowed key gives out 0, lse -inf and
  zero gradients), "add" (the mask is added to the scores; -inf blocks with weight exactly 0, and
  a row that is -inf everywhere gives 0 like "hard", where PyTorch's math path gives NaN).
* mask_layout (heads, s_n, s_h, s_q, s_k) or None: batch index b = n * heads + h reads the mask
  entry n s_n + h s_h + i s_q + j s_k for (b, i, j); strides 0 broadcast, so a (L, S), (N, 1, L, S)
  or (1, H, L, S) mask is never expanded. None is the seed's dense (batch, n_q, n_k) mask.
* NaN in q or k reaches every row that gives the NaN score weight; NaN/inf in v reaches the rows
  that weight it (a blocked key's 0 weight times inf may or may not give NaN, by tile).

Backward (FlashAttention-2; attention is recomputed tile by tile from the saved out and lse):
``flash_attention_bwd_q``, ``_bwd_k``, ``_bwd_v`` (the seed's three VJP components) and the fused
``flash_attention_bwd_kv -> (dk, dv)``; arguments (q, k, v, mask, out, lse, dout, batch, n_q, n_k,
d, scale, causal, mask_mode, mask_layout). Deterministic: no atomics on any backend.

Packed self-attention, the layout a transformer block has at hand (no head-moving copies):
``flash_attention_packed_fwd(qkv, mask, batch, heads, n, d, scale, causal, mask_mode, mask_layout)
-> (out, lse)`` reads q, k, v from one buffer qkv (batch, n, 3, heads, d) -- the output of a
Linear(E, 3E), E = heads d -- and writes out (batch, n, heads, d), ready for the output projection,
and lse (batch, heads, n). It is flash_attention_fwd over the batch heads pairs b' = b heads + h
with n_q = n_k = n (the mask layout indexes b' the same way), with the same kernels and the same
bits: only the addressing differs. ``flash_attention_packed_bwd(qkv, mask, out, lse, dout, batch,
heads, n, d, scale, causal, mask_mode, mask_layout) -> dqkv`` writes (dq, dk, dv) in qkv's layout.
"""

from __future__ import annotations

from typing import Any

from ..errors import ArgumentError, ShapeError
from .buffer import Buffer, check_buffer, same_device, wrap
from .checks import check_product, check_scalar, check_u32, check_u32_tuple
from .oom import run_allocating

__all__ = ["flash_attention_fwd", "flash_attention_bwd_q", "flash_attention_bwd_k", "flash_attention_bwd_v",
           "flash_attention_bwd_kv", "flash_attention_bwd", "flash_attention_packed_fwd", "flash_attention_packed_bwd"]

MASK_MODES = ("none", "fill", "hard", "add")


def _check(op: str, q, k, v, mask, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout, sizes: bool = True):
    b, nq, nk, dd = (check_u32(op, n, x) for n, x in (("batch", batch), ("n_q", n_q), ("n_k", n_k), ("d", d)))
    if sizes:  # (the packed primitives check their one qkv buffer themselves)
        check_buffer(op, "q", q, check_product(op, "batch*n_q*d", b, nq, dd))
        check_buffer(op, "k", k, check_product(op, "batch*n_k*d", b, nk, dd))
        check_buffer(op, "v", v, check_product(op, "batch*n_k*d", b, nk, dd))
    check_product(op, "batch*n_q*n_k", b, nq, nk)
    sc = check_scalar(op, "scale", scale)
    if not isinstance(causal, bool):
        raise ArgumentError(f"{op}: argument causal must be a bool, got {causal!r} ({type(causal).__name__})")
    if mask_mode not in MASK_MODES:
        raise ArgumentError(f"{op}: argument mask_mode must be one of {MASK_MODES}, got {mask_mode!r}")
    if mask_mode == "none":
        if mask is not None:
            raise ArgumentError(f"{op}: argument mask must be None with mask_mode 'none', got {type(mask).__name__}")
        if mask_layout is not None:
            raise ArgumentError(f"{op}: argument mask_layout must be None with mask_mode 'none', got {mask_layout!r}")
        return b, nq, nk, dd, sc, None
    check_buffer(op, "mask", mask)
    if mask_layout is None:
        layout = (1, check_product(op, "n_q*n_k", nq, nk), 0, nk, 1)
    else:
        layout = check_u32_tuple(op, "mask_layout", mask_layout)
        if len(layout) != 5:
            raise ShapeError(f"{op}: argument mask_layout must be (heads, s_n, s_h, s_q, s_k), got {mask_layout!r}")
    heads = layout[0]
    if b and (heads == 0 or b % heads):
        raise ShapeError(f"{op}: mask_layout heads = {heads} must be >= 1 and divide batch = {b}")
    if b and nq and nk:
        last = (b // heads - 1) * layout[1] + (heads - 1) * layout[2] + (nq - 1) * layout[3] + (nk - 1) * layout[4]
        if last >= mask.size:
            raise ShapeError(f"{op}: argument mask holds {mask.size} elements, but mask_layout {tuple(layout)} reads "
                             f"up to element {last} for batch={b}, n_q={nq}, n_k={nk}")
    return b, nq, nk, dd, sc, layout


def flash_attention_fwd(q: Buffer, k: Buffer, v: Buffer, mask: Buffer | None, batch: int, n_q: int, n_k: int, d: int,
                        scale: float, causal: bool = False, mask_mode: str = "none",
                        mask_layout: Any = None) -> tuple[Buffer, Buffer]:
    """(out, lse) of softmax(mask(q k^T * scale)) v per batch (see the module docstring)."""
    op = "flash_attention_fwd"
    b, nq, nk, dd, sc, layout = _check(op, q, k, v, mask, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout)
    bufs = dict(q=q, k=k, v=v) if mask is None else dict(q=q, k=k, v=v, mask=mask)
    ctx = same_device(op, **bufs)
    out, lse = run_allocating(op, ctx, b * nq * (dd + 1), ctx.backend.flash_attention_fwd, q._data, k._data, v._data,
                    None if mask is None else mask._data, b, nq, nk, dd, sc, causal, mask_mode, layout)
    return wrap(ctx, out), wrap(ctx, lse)


def _bwd(name: str, outs: int, q: Buffer, k: Buffer, v: Buffer, mask: Buffer | None, out: Buffer, lse: Buffer,
        dout: Buffer, batch: int, n_q: int, n_k: int, d: int, scale: float, causal: bool = False,
        mask_mode: str = "none", mask_layout: Any = None):
    b, nq, nk, dd, sc, layout = _check(name, q, k, v, mask, batch, n_q, n_k, d, scale, causal, mask_mode,
                                       mask_layout)
    check_buffer(name, "out", out, b * nq * dd)
    check_buffer(name, "lse", lse, b * nq)
    check_buffer(name, "dout", dout, b * nq * dd)
    bufs = dict(q=q, k=k, v=v, out=out, lse=lse, dout=dout)
    if mask is not None:
        bufs["mask"] = mask
    ctx = same_device(name, **bufs)
    res = run_allocating(name, ctx, outs * b * max(nq, nk) * dd, getattr(ctx.backend, name), q._data, k._data, v._data,
               None if mask is None else mask._data, out._data, lse._data, dout._data, b, nq, nk, dd, sc, causal,
               mask_mode, layout)
    if outs == 1:
        return wrap(ctx, res)
    return tuple(wrap(ctx, r) for r in res)


def flash_attention_bwd_q(q: Buffer, k: Buffer, v: Buffer, mask: Buffer | None, out: Buffer, lse: Buffer,
        dout: Buffer, batch: int, n_q: int, n_k: int, d: int, scale: float, causal: bool = False,
        mask_mode: str = "none", mask_layout: Any = None):
    """dq = scale dS k (batch, n_q, d), dS = P (dP - D)."""
    return _bwd("flash_attention_bwd_q", 1, q, k, v, mask, out, lse, dout, batch, n_q, n_k, d, scale, causal,
                mask_mode, mask_layout)


def flash_attention_bwd_k(q: Buffer, k: Buffer, v: Buffer, mask: Buffer | None, out: Buffer, lse: Buffer,
        dout: Buffer, batch: int, n_q: int, n_k: int, d: int, scale: float, causal: bool = False,
        mask_mode: str = "none", mask_layout: Any = None):
    """dk = scale dS^T q (batch, n_k, d)."""
    return _bwd("flash_attention_bwd_k", 1, q, k, v, mask, out, lse, dout, batch, n_q, n_k, d, scale, causal,
                mask_mode, mask_layout)


def flash_attention_bwd_v(q: Buffer, k: Buffer, v: Buffer, mask: Buffer | None, out: Buffer, lse: Buffer,
        dout: Buffer, batch: int, n_q: int, n_k: int, d: int, scale: float, causal: bool = False,
        mask_mode: str = "none", mask_layout: Any = None):
    """dv = P^T dout (batch, n_k, d)."""
    return _bwd("flash_attention_bwd_v", 1, q, k, v, mask, out, lse, dout, batch, n_q, n_k, d, scale, causal,
                mask_mode, mask_layout)


def flash_attention_bwd_kv(q: Buffer, k: Buffer, v: Buffer, mask: Buffer | None, out: Buffer, lse: Buffer,
        dout: Buffer, batch: int, n_q: int, n_k: int, d: int, scale: float, causal: bool = False,
        mask_mode: str = "none", mask_layout: Any = None):
    """(dk, dv) in one pass over the tiles."""
    return _bwd("flash_attention_bwd_kv", 2, q, k, v, mask, out, lse, dout, batch, n_q, n_k, d, scale, causal,
                mask_mode, mask_layout)


def flash_attention_bwd(q: Buffer, k: Buffer, v: Buffer, mask: Buffer | None, out: Buffer, lse: Buffer, dout: Buffer,
        batch: int, n_q: int, n_k: int, d: int, scale: float, causal: bool = False, mask_mode: str = "none",
        mask_layout: Any = None):
    """(dq, dk, dv): bwd_q and bwd_kv in one call (D = rowsum(dout out) computed once)."""
    return _bwd("flash_attention_bwd", 3, q, k, v, mask, out, lse, dout, batch, n_q, n_k, d, scale, causal,
                mask_mode, mask_layout)


def _check_packed(op: str, qkv, mask, batch, heads, n, d, scale, causal, mask_mode, mask_layout):
    b, h, nn, dd = (check_u32(op, name, x) for name, x in (("batch", batch), ("heads", heads), ("n", n), ("d", d)))
    bh = check_product(op, "batch*heads", b, h)
    check_buffer(op, "qkv", qkv, check_product(op, "batch*n*3*heads*d", b, nn, 3, h, dd))
    # the rest (scale, causal, mask and its layout over the batch*heads pairs) as the unpacked forward
    *_, sc, layout = _check(op, qkv, qkv, qkv, mask, bh, nn, nn, dd, scale, causal, mask_mode, mask_layout,
                            sizes=False)
    return b, h, nn, dd, sc, layout


def flash_attention_packed_fwd(qkv: Buffer, mask: Buffer | None, batch: int, heads: int, n: int, d: int,
                               scale: float, causal: bool = False, mask_mode: str = "none",
                               mask_layout: Any = None) -> tuple[Buffer, Buffer]:
    """(out (batch, n, heads, d), lse (batch, heads, n)) of self-attention over a packed qkv."""
    op = "flash_attention_packed_fwd"
    b, h, nn, dd, sc, layout = _check_packed(op, qkv, mask, batch, heads, n, d, scale, causal, mask_mode,
                                             mask_layout)
    ctx = same_device(op, qkv=qkv) if mask is None else same_device(op, qkv=qkv, mask=mask)
    out, lse = run_allocating(op, ctx, b * h * nn * (dd + 1), ctx.backend.flash_attention_packed_fwd, qkv._data,
                    None if mask is None else mask._data, b, h, nn, dd, sc, causal, mask_mode, layout)
    return wrap(ctx, out), wrap(ctx, lse)


def flash_attention_packed_bwd(qkv: Buffer, mask: Buffer | None, out: Buffer, lse: Buffer, dout: Buffer, batch: int,
                               heads: int, n: int, d: int, scale: float, causal: bool = False,
                               mask_mode: str = "none", mask_layout: Any = None) -> Buffer:
    """dqkv (batch, n, 3, heads, d): dq, dk and dv of the packed forward, in qkv's layout."""
    op = "flash_attention_packed_bwd"
    b, h, nn, dd, sc, layout = _check_packed(op, qkv, mask, batch, heads, n, d, scale, causal, mask_mode,
                                             mask_layout)
    check_buffer(op, "out", out, b * nn * h * dd)
    check_buffer(op, "lse", lse, b * h * nn)
    check_buffer(op, "dout", dout, b * nn * h * dd)
    bufs = dict(qkv=qkv, out=out, lse=lse, dout=dout)
    if mask is not None:
        bufs["mask"] = mask
    ctx = same_device(op, **bufs)
    res = run_allocating(op, ctx, 3 * b * h * nn * dd, ctx.backend.flash_attention_packed_bwd, qkv._data,
               None if mask is None else mask._data, out._data, lse._data, dout._data, b, h, nn, dd, sc, causal,
               mask_mode, layout)
    return wrap(ctx, res)
