"""Multi-head attention: the seed's ``multi_head_attention`` and the pieces ``nn.MultiheadAttention`` uses.

Two paths compute the same attention:

* flash (``use_flash=True``): the fused ``flash_attention`` op (tiled, online softmax, O(n d)
  memory, backward from saved row statistics);
* composed: ``softmax(Q K^T * scale + mask) V`` from bmm, softmax and elementwise ops, which
  materializes the (heads, n, n) weights; ``nn.MultiheadAttention`` uses it when the caller
  asks for the weights (``need_weights=True``) or for attention dropout.

Masks (host arrays; see ``attention_mask``): the seed's convention "1 = allowed, a blocked score
is replaced by -1000.0" (``mask_mode='fill'``), and hard masks (``'hard'``: blocked weight exactly
0; a fully blocked row gives 0, or PyTorch's NaN on request) or additive float masks (``'add'``)
for the PyTorch-style front end.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import ArgumentError, DTypeError, ShapeError
from ..tensor import Tensor, tensor
from . import nn as _nn
from .elementwise import add, mul
from .linalg import bmm, matmul
from .shape import permute, reshape, transpose

__all__ = ["multi_head_attention", "composed_attention", "split_heads", "merge_heads"]

FILL = -1000.0  # the seed's fill for a blocked score


def split_heads(x: Tensor, heads: int) -> Tensor:
    """(..., n, heads * hd) -> (..., heads, n, hd) (one permute copy)."""
    *lead, n, e = x.shape
    x = reshape(x, (*lead, n, heads, e // heads))
    r = len(lead)
    return permute(x, *range(r), r + 1, r, r + 2)


def merge_heads(x: Tensor) -> Tensor:
    """(..., heads, n, hd) -> (..., n, heads * hd)."""
    *lead, h, n, hd = x.shape
    r = len(lead)
    return reshape(permute(x, *range(r), r + 1, r, r + 2), (*lead, n, h * hd))


def _host_mask(op: str, mask: Any) -> np.ndarray:
    if isinstance(mask, Tensor):
        return mask.numpy()
    return np.asarray(mask)


def composed_attention(q: Tensor, k: Tensor, v: Tensor, scale: float, mask: Any = None, mask_mode: str = "fill",
                       dropout_p: float = 0.0, training: bool = False, generator: Any = None,
                       blocked_rows_nan: bool = False) -> tuple[Tensor, Tensor]:
    """(out, weights) of softmax(q k^T * scale [masked]) v on (..., n_q, d), (..., n_k, d), (..., n_k, dv).

    ``mask`` broadcasts to (..., n_q, n_k): for 'fill' and 'hard' it is boolean-like (nonzero =
    allowed), for 'add' a float tensor or array added to the scores. Dropout (training only) is
    applied to the weights (and the returned weights are the dropped-out ones), as PyTorch's
    multi-head attention does. A query row whose keys are all
    blocked ('hard'/'add') gets weights 0, or NaN with ``blocked_rows_nan`` (PyTorch's
    ``MultiheadAttention`` with ``need_weights=True``: softmax of an all -inf row).
    """
    op = "composed_attention"
    s = mul(matmul(q, transpose(k, -2, -1)), scale)
    keep_rows = None
    if mask is not None:
        if mask_mode == "fill":
            m = (_host_mask(op, mask) != 0).astype(np.float32)
            s = add(mul(s, tensor(m, device=s.device)), tensor((1.0 - m) * FILL, device=s.device))
        elif mask_mode in ("hard", "add"):
            if mask_mode == "hard":
                a = np.where(_host_mask(op, mask) != 0, 0.0, -np.inf).astype(np.float32)
            elif isinstance(mask, Tensor) and mask.is_floating_point():
                a = mask  # stays a device tensor: the scores' gradient passes through it unchanged
            else:
                a = np.asarray(_host_mask(op, mask), dtype=np.float32)
            host = a.numpy() if isinstance(a, Tensor) else a
            blocked = np.all(np.isneginf(host), axis=-1, keepdims=True)
            if blocked.any():
                # A fully blocked row: softmax of a zero row (finite), then weight 0 for the whole row.
                host = np.where(blocked, 0.0, host).astype(np.float32)
                a = host
                keep = np.where(blocked, np.float32(np.nan if blocked_rows_nan else 0.0), np.float32(1.0))
                keep_rows = tensor(keep.astype(np.float32), device=s.device)
            s = add(s, a if isinstance(a, Tensor) else tensor(a, device=s.device))
        else:
            raise ArgumentError(f"{op}: mask_mode must be 'fill', 'hard' or 'add', got {mask_mode!r}")
    w = _nn.softmax(s, -1)
    if keep_rows is not None:
        w = mul(w, keep_rows)
    wd = _nn.dropout(w, dropout_p, training, generator) if dropout_p > 0.0 and training else w
    return matmul(wd, v), wd  # the weights as applied (after dropout), as PyTorch returns them


def multi_head_attention(x: Tensor, wq: Tensor, wk: Tensor, wv: Tensor, wo: Tensor, num_heads: int,
                         mask: Any = None, use_flash: bool = True, causal: bool = False) -> Tensor:
    """The seed's multi-head self-attention: x (..., n, d_model), weights (d_model, d_model) used as x @ W.

    Q = x Wq, K = x Wk, V = x Wv (no biases); heads split (..., heads, n, d_model / heads); per
    head softmax(Q K^T / sqrt(head_dim) [mask]) V; heads merged; output projection @ Wo. ``mask``
    (n, n) (or broadcastable to (..., heads, n, n)) is boolean-like, 1 = allowed, a blocked score
    replaced by -1000.0 (the seed's convention). ``use_flash`` picks the fused kernel (default) or
    the composed path; both give the same values within their contracts.
    """
    op = "multi_head_attention"
    if not isinstance(x, Tensor) or x.ndim < 2:
        raise ShapeError(f"{op}: expected x of shape (..., n, d_model), got {getattr(x, 'shape', type(x).__name__)}")
    d_model = x.shape[-1]
    for name, w in (("wq", wq), ("wk", wk), ("wv", wv), ("wo", wo)):
        if not isinstance(w, Tensor) or w.shape != (d_model, d_model):
            raise ShapeError(f"{op}: expected {name} of shape ({d_model}, {d_model}), got "
                             f"{getattr(w, 'shape', type(w).__name__)}")
    if not isinstance(num_heads, int) or num_heads < 1 or d_model % num_heads:
        raise ArgumentError(f"{op}: num_heads must be a positive divisor of d_model={d_model}, got {num_heads!r}")
    n = x.shape[-2]
    if mask is not None:
        mshape = np.shape(_host_mask(op, mask))
        if len(mshape) < 2 or mshape[-2:] != (n, n):
            raise ShapeError(f"{op}: expected a mask of shape (n, n) = ({n}, {n}) (or with leading dims), got {mshape}")
    if mask is not None:  # a 0/1 mask: taken from the host, placed next to x (the seed passes host masks)
        mask = (_host_mask(op, mask) != 0).astype(np.float32)
    if causal:
        tri = np.tril(np.ones((n, n), dtype=np.float32))
        mask = tri if mask is None else mask * tri
    q, k, v = (split_heads(matmul(x, w), num_heads) for w in (wq, wk, wv))
    scale = 1.0 / math.sqrt(d_model // num_heads)
    if use_flash:
        from .attention import flash_attention

        o = flash_attention(q, k, v, mask=None if mask is None else tensor(mask, device=x.device), scale=scale,
                            mask_mode="fill")
    else:
        o, _ = composed_attention(q, k, v, scale, mask, "fill")
    return matmul(merge_heads(o), wo)
