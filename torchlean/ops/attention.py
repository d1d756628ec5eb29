"""Differentiable attention: the ``flash_attention`` tape op and ``scaled_dot_product_attention``.

One tape node per call over the flash primitives: the forward saves only its output and the row
log-sum-exp (workspace, O(n) per head); the VJP recomputes attention tile by tile with
``flash_attention_bwd_q`` (when q needs a gradient) and the fused ``flash_attention_bwd_kv``
(when k or v does). Leading dims are folded into the batch without copies (tensors are
contiguous), and a mask is passed with per-axis strides (0 on broadcast axes), never expanded.

``scaled_dot_product_attention`` follows torch.nn.functional's signature. Where we differ:
* ``dropout_p != 0`` and ``enable_gqa=True`` raise ArgumentError (not supported yet); so does a
  value head dim Ev != E (the fused kernels take d_v = d).
* q, k and v must have the same leading dims (PyTorch broadcasts them); the mask broadcasts
  against (..., L, S) as in PyTorch. A mask whose broadcast over three or more leading dims
  cannot be written as two strides is expanded over the leading dims (only then).
* A boolean mask (True = take part) uses the hard mode; a float mask is added to the scores.
  A row with no allowed key gives 0 and zero gradients (as PyTorch 2.5+; older math paths
  gave NaN). The mask receives no gradient: a float mask that requires grad raises ArgumentError.
* ``attn_mask`` together with ``is_causal=True`` raises ArgumentError (PyTorch raises too).

``flash_attention_packed(qkv, num_heads, ...)`` (also in ``torchlean.nn.functional``; not in
PyTorch) is the same attention for the layout a transformer block has at hand: qkv (..., L, 3E),
the output of a Linear(E, 3E), in, and (..., L, E), the output projection's input, out. It equals
``qkv.reshape(..., L, 3, H, E/H)``, moved to q, k, v (..., H, L, E/H), through
``scaled_dot_product_attention``, then ``.transpose(-3, -2).reshape(..., L, E)`` -- bit for bit --
but as one tape node over the flash_attention_packed primitives, whose kernels read and write those
layouts directly: no head-moving copies forward or backward.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from .. import autograd
from ..errors import ArgumentError, DeviceError, DTypeError, ShapeError
from ..runtime.arrays import to_host
from ..runtime import primitives as P
from ..runtime.buffer import Buffer
from ._base import Tensor, fbuf, new, numel, same_device
from . import pending as PV
from .shape import permute_now, reshape

__all__ = ["flash_attention", "flash_attention_packed", "scaled_dot_product_attention"]
FUNCTIONAL = ["scaled_dot_product_attention", "flash_attention_packed"]

_MODES = ("fill", "hard", "add")


def _layout(op: str, mshape: Sequence[int], lead: Sequence[int], n_q: int, n_k: int):
    """(heads, s_n, s_h, s_q, s_k) reading a contiguous mask of shape ``mshape`` broadcast to
    lead + (n_q, n_k), or None when the leading broadcast needs more than two strides."""
    rank = len(lead) + 2
    if len(mshape) > rank:
        raise ShapeError(f"{op}: attn_mask of shape {tuple(mshape)} has more dims than the scores "
                         f"{tuple(lead) + (n_q, n_k)}")
    full = (1,) * (rank - len(mshape)) + tuple(mshape)
    target = tuple(lead) + (n_q, n_k)
    for a, t in zip(full, target):
        if a != t and a != 1:
            raise ShapeError(f"{op}: attn_mask of shape {tuple(mshape)} does not broadcast to the scores' shape "
                             f"{target}")
    strides, acc = [], 1
    for a in reversed(full):
        strides.append(acc)
        acc *= a
    strides = strides[::-1]
    st = [0 if a == 1 and t != 1 else s for a, t, s in zip(full, target, strides)]
    st = [0 if t == 1 else s for t, s in zip(target, st)]  # a size-1 axis never moves the offset
    s_q, s_k = st[-2], st[-1]
    # merge the leading axes into groups with one stride each: (size, stride) from the innermost
    groups: list[list[int]] = []
    for size, s in zip(reversed(lead), reversed(st[:-2])):
        if size == 1:
            continue
        if groups and s == groups[-1][1] * groups[-1][0]:  # continues the group (or both broadcast: 0)
            groups[-1][0] *= size
        else:
            groups.append([size, s])
    if len(groups) > 2:
        return None
    if not groups:
        return (1, 0, 0, s_q, s_k)
    if len(groups) == 1:
        return (1, groups[0][1], 0, s_q, s_k)
    inner, outer = groups
    return (inner[0], outer[1], inner[1], s_q, s_k)


def _mask_buffer(op: str, mask: Any, device: str, mode: str | None) -> tuple[Buffer, str, tuple[int, ...]]:
    """(buffer, mode, shape) of a mask: bool -> 0/1 (hard unless mode given), float -> as is."""
    if isinstance(mask, Tensor):
        if mask.device != device:
            raise DeviceError(f"{op}: attn_mask is on {mask.device}, the inputs on {device}")
        if mask._buf is None:
            host = to_host(mask._arr)  # (a CuPy array for a mask on CUDA)
            if host.dtype.kind != "b":
                host = host.astype(np.float32)
        else:
            if mask.requires_grad and autograd.is_grad_enabled():
                raise ArgumentError(f"{op}: attn_mask requires grad, but the mask receives no gradient "
                                    "(not supported yet); detach it")
            return mask._buf, mode or "add", tuple(mask.shape)
    else:
        try:
            host = np.asarray(mask)
        except (TypeError, ValueError):
            raise DTypeError(f"{op}: attn_mask must be a tensor or array, got {type(mask).__name__}") from None
        if host.dtype.kind not in "biuf":
            raise DTypeError(f"{op}: attn_mask must hold bools or floats, got dtype {host.dtype}")
    if host.dtype.kind == "b":
        mode = mode or "hard"
    else:
        mode = mode or "add"
    return Buffer.from_numpy(np.ascontiguousarray(host, dtype=np.float32).reshape(-1), device), mode, host.shape


def _record(op: str, q: Tensor, k: Tensor, v: Tensor, out_shape, mask_b, mode, layout, causal: bool, scale: float,
            batch: int, n_q: int, n_k: int, d: int, own_mask: bool) -> Tensor:
    qb, kb, vb = fbuf(op, q), fbuf(op, k), fbuf(op, v)
    out_b, lse_b = P.flash_attention_fwd(qb, kb, vb, mask_b, batch, n_q, n_k, d, scale, causal, mode, layout)
    need_q, need_kv = q.requires_grad, k.requires_grad or v.requires_grad

    def vjp(g: Buffer):
        dq = dk = dv = None
        args = (qb, kb, vb, mask_b, out_b, lse_b, g, batch, n_q, n_k, d, scale, causal, mode, layout)
        if need_q and need_kv:
            return P.flash_attention_bwd(*args)
        if need_q:
            dq = P.flash_attention_bwd_q(*args)
        if need_kv:
            dk, dv = P.flash_attention_bwd_kv(*args)
        return dq, dk, dv

    ws = (lse_b, mask_b) if own_mask else (lse_b,)
    return autograd.record(op, new(out_b, out_shape), (q, k, v), vjp, workspace=ws)


def _check_qkv(op: str, q: Any, k: Any, v: Any):
    for name, t in (("query", q), ("key", k), ("value", v)):
        if not isinstance(t, Tensor):
            raise DTypeError(f"{op}: {name} must be a Tensor, got {type(t).__name__}")
        if t._buf is None:
            raise DTypeError(f"{op}: {name} must be a float32 tensor, got {t.dtype}")
        if t.ndim < 2:
            raise ShapeError(f"{op}: {name} must have shape (..., n, E) with at least 2 dims, got {t.shape}")
    same_device(op, q, k, v)
    if q.shape[:-2] != k.shape[:-2] or q.shape[:-2] != v.shape[:-2]:
        raise ShapeError(f"{op}: query, key and value must have the same leading dims, got {q.shape}, {k.shape}, "
                         f"{v.shape}")
    if k.shape[-2] != v.shape[-2]:
        raise ShapeError(f"{op}: key and value must have the same length S, got {k.shape} and {v.shape}")
    if q.shape[-1] != k.shape[-1]:
        raise ShapeError(f"{op}: query and key must have the same embedding dim E, got {q.shape} and {k.shape}")
    if v.shape[-1] != q.shape[-1]:
        raise ArgumentError(f"{op}: a value dim Ev = {v.shape[-1]} different from E = {q.shape[-1]} is not "
                            "supported yet")


def _scale(op: str, scale: Any, e: int) -> float:
    if scale is None:
        return 1.0 / math.sqrt(e) if e else 1.0
    try:
        return float(scale)
    except (TypeError, ValueError):
        raise ArgumentError(f"{op}: scale must be a number or None, got {scale!r}") from None


def _mask_arg(op: str, mask: Any, device: str, mode: str | None, lead: tuple, n_q: int, n_k: int):
    """(buffer, mode, layout, own) of a mask broadcast to lead + (n_q, n_k); (None, 'none', None,
    False) without one. ``own``: the buffer was made here (the tape node keeps and frees it)."""
    if mask is None:
        return None, "none", None, False
    mask_b, mode, mshape = _mask_buffer(op, mask, device, mode)
    own = not (isinstance(mask, Tensor) and mask._buf is mask_b)
    layout = _layout(op, mshape, lead, n_q, n_k)
    if layout is None:  # three or more leading groups: expand the mask over the leading dims only
        full = (1,) * (len(lead) + 2 - len(mshape)) + tuple(mshape)
        m = np.ascontiguousarray(np.broadcast_to(mask_b.to_numpy().reshape(full), tuple(lead) + full[-2:]))
        if own:
            mask_b.release()
        mask_b, own = Buffer.from_numpy(m.reshape(-1), device), True
        layout = _layout(op, m.shape, lead, n_q, n_k)
    return mask_b, mode, layout, own


def _attend(op: str, q: Tensor, k: Tensor, v: Tensor, mask: Any, causal: bool, scale: float, mode: str | None):
    lead = q.shape[:-2]
    n_q, d = q.shape[-2:]
    n_k = k.shape[-2]
    mask_b, mode, layout, own = _mask_arg(op, mask, q.device, mode, tuple(lead), n_q, n_k)
    return _record(op, q, k, v, tuple(lead) + (n_q, d), mask_b, mode, layout, bool(causal), scale, numel(lead), n_q,
                   n_k, d, own)


def flash_attention(q: Tensor, k: Tensor, v: Tensor, mask: Any = None, causal: bool = False, scale: float | None = None,
                    mask_mode: str = "fill") -> Tensor:
    """softmax(mask(q k^T * scale)) v over (batch, n, d) tensors (any leading dims), one tape node.

    ``mask`` (broadcastable to (batch, n_q, n_k)) is read with ``mask_mode``: "fill" (the seed's:
    0.0 blocks, the score becomes -1000), "hard" (0.0 blocks with weight 0) or "add" (added to
    the scores). ``scale`` defaults to 1/sqrt(d). ``causal`` allows key j for query i iff j <= i.
    """
    op = "flash_attention"
    _check_qkv(op, q, k, v)
    if mask_mode not in _MODES:
        raise ArgumentError(f"{op}: mask_mode must be one of {_MODES}, got {mask_mode!r}")
    return _attend(op, q, k, v, mask, causal, _scale(op, scale, q.shape[-1]), mask_mode if mask is not None else None)


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: Any = None,
                                 dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False) -> Tensor:
    """PyTorch's scaled_dot_product_attention over (..., L, E), (..., S, E), (..., S, E) tensors.

    ``attn_mask``: bool (True = take part; a row with none gives 0) or float (added to the
    scores), broadcastable to (..., L, S). ``is_causal``: key j for query i iff j <= i. ``scale``
    defaults to 1/sqrt(E). ``dropout_p`` must be 0 and ``enable_gqa`` False (not supported yet);
    Ev must equal E. See the module docstring for the other differences from PyTorch.
    """
    op = "scaled_dot_product_attention"
    try:
        dp = float(dropout_p)
    except (TypeError, ValueError):
        raise ArgumentError(f"{op}: dropout_p must be a number, got {dropout_p!r}") from None
    if dp != 0.0:
        raise ArgumentError(f"{op}: argument dropout_p={dropout_p!r} is not supported yet (only dropout_p=0.0)")
    if enable_gqa:
        raise ArgumentError(f"{op}: argument enable_gqa=True is not supported yet (only enable_gqa=False)")
    if attn_mask is not None and is_causal:
        raise ArgumentError(f"{op}: attn_mask and is_causal=True cannot be given together (PyTorch raises too)")
    packed = _heads_of_packed(query, key, value)
    if packed is not None:  # the heads of one projection, not moved yet (ops/pending.py): read in place
        qkv, heads = packed
        return _heads_view(_packed(op, qkv, heads, attn_mask, is_causal, scale), heads)
    _check_qkv(op, query, key, value)
    return _attend(op, query, key, value, attn_mask, bool(is_causal), _scale(op, scale, query.shape[-1]), None)


def flash_attention_packed(qkv: Tensor, num_heads: int, attn_mask: Any = None, is_causal: bool = False,
                           scale: float | None = None) -> Tensor:
    """Self-attention over a packed projection: qkv (..., L, 3E) -> (..., L, E), E = num_heads * Eh.

    The last dim of qkv holds [q | k | v], each E = num_heads * Eh wide with the heads in order (the
    output of ``Linear(E, 3 * E)``); the result has the heads side by side again, ready for the
    output projection. ``attn_mask`` (bool: True = take part; float: added) broadcasts to
    (..., num_heads, L, L); ``is_causal`` and ``scale`` are as in ``scaled_dot_product_attention``,
    which this equals bit for bit after moving the heads (module docstring).
    """
    op = "flash_attention_packed"
    if not isinstance(qkv, Tensor):
        raise DTypeError(f"{op}: qkv must be a Tensor, got {type(qkv).__name__}")
    if qkv._buf is None:
        raise DTypeError(f"{op}: qkv must be a float32 tensor, got {qkv.dtype}")
    if isinstance(num_heads, bool) or not isinstance(num_heads, (int, np.integer)) or num_heads < 1:
        raise ArgumentError(f"{op}: num_heads must be a positive int, got {num_heads!r}")
    heads = int(num_heads)
    if qkv.ndim < 2 or qkv.shape[-1] % (3 * heads):
        raise ShapeError(f"{op}: qkv must have shape (..., L, 3 * E) with E a multiple of num_heads = {heads}, "
                         f"got {qkv.shape}")
    if attn_mask is not None and is_causal:
        raise ArgumentError(f"{op}: attn_mask and is_causal=True cannot be given together")
    return _packed(op, qkv, int(num_heads), attn_mask, is_causal, scale)


def _packed(op: str, qkv: Tensor, heads: int, attn_mask: Any, is_causal: bool, scale: float | None) -> Tensor:
    lead, n, e = tuple(qkv.shape[:-2]), qkv.shape[-2], qkv.shape[-1] // 3
    d = e // heads
    sc = _scale(op, scale, d)
    mask_b, mode, layout, own = _mask_arg(op, attn_mask, qkv.device, None, lead + (heads,), n, n)
    batch = numel(lead)
    qb = fbuf(op, qkv)
    out_b, lse_b = P.flash_attention_packed_fwd(qb, mask_b, batch, heads, n, d, sc, bool(is_causal), mode, layout)

    def vjp(g: Buffer):
        return (P.flash_attention_packed_bwd(qb, mask_b, out_b, lse_b, g, batch, heads, n, d, sc, bool(is_causal),
                                             mode, layout),)

    ws = (lse_b, mask_b) if own else (lse_b,)
    return autograd.record(op, new(out_b, lead + (n, e)), (qkv,), vjp, workspace=ws)


# -- heads of a packed projection, as pending views (ops/pending.py) --------------------------------
def _heads_of_packed(q: Any, k: Any, v: Any) -> tuple[Tensor, int] | None:
    """(qkv, heads) when q, k and v (..., H, L, d) are unmaterialized pending views of one source
    whose memory is (..., L, 3, H, d) with q, k and v at thirds 0, 1, 2: the layout
    ``flash_attention_packed`` reads (nanoGPT's split/view/transpose, timm's reshape/permute/unbind).
    qkv is that source as (..., L, 3 H d). None otherwise."""
    P_ = PV.PendingView
    if type(q) is not P_ or type(k) is not P_ or type(v) is not P_ or q.ndim < 3:
        return None
    if q.shape != k.shape or q.shape != v.shape or not all(PV.in_current_mode(t) for t in (q, k, v)):
        return None
    (src, oq, sq), (sk_src, ok, sk), (sv_src, ov, sv) = PV.layout(q), PV.layout(k), PV.layout(v)
    if not PV.same_source(src, sk_src) or not PV.same_source(src, sv_src):
        return None
    shape = tuple(q.shape)
    lead, heads, n, d = shape[:-3], shape[-3], shape[-2], shape[-1]
    e = heads * d
    if n == 0 or e == 0 or numel(src.shape) != numel(lead) * n * 3 * e:
        return None
    want = PV.contiguous_strides(lead + (n * 3 * e,))[:-1] + (d, 3 * e, 1)
    for offset, strides, third in ((oq, sq, 0), (ok, sk, e), (ov, sv, 2 * e)):
        if offset != third or not PV.same_layout(shape, strides, want):
            return None
    qkv = src if tuple(src.shape) == lead + (n, 3 * e) else reshape(src, lead + (n, 3 * e))
    return qkv, heads


def _heads_view(y: Tensor, heads: int) -> Tensor:
    """y (..., L, H d), the packed attention's fresh output, seen as (..., H, L, d): pending (the
    program's transpose back then makes it a reshape of y again)."""
    shape = tuple(y.shape)
    lead, n, e = shape[:-2], shape[-2], shape[-1]
    split = lead + (n, heads, e // heads)
    perm = tuple(range(len(lead))) + (len(lead) + 1, len(lead), len(lead) + 2)
    return PV.of_source(y, ((reshape, (split,)), (permute_now, (perm,))), PV.permuted(split, perm), 0,
                        PV.permuted(PV.contiguous_strides(split), perm))
