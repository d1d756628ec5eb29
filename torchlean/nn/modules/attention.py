"""``MultiheadAttention`` with PyTorch's constructor, parameter names, initialization and forward.

Parameters (as ``torch.nn.MultiheadAttention``, so its state dict loads): ``in_proj_weight``
(3E, E) and ``in_proj_bias`` (3E,) when kdim == vdim == E, else ``q_proj_weight`` (E, E),
``k_proj_weight`` (E, kdim), ``v_proj_weight`` (E, vdim) and ``in_proj_bias``; ``out_proj``
(a Linear(E, E)). ``forward`` returns ``(attn_output, attn_weights)``.

Paths: when the caller does not ask for the weights (``need_weights=False``) and there is no
attention dropout in training, attention runs in the fused flash kernel (O(n d) memory) -- for
self-attention (``query is key is value``, kdim == vdim == E) in ``flash_attention_packed`` on the
packed (N, L, 3E) in-projection, with the same bits as slicing q, k, v and moving the heads;
otherwise in the composed path that materializes the weights (as PyTorch does).

A query row whose keys are all masked gives NaN with ``need_weights=True`` and 0 without, as
PyTorch's module does outside its inference fast path (which gives NaN either way).

Differences from PyTorch: ``is_causal=True`` without ``attn_mask`` builds the causal mask (PyTorch
requires the mask); ``add_bias_kv`` and ``add_zero_attn`` raise ArgumentError (not supported yet).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ... import ops
from ..._validate import real_arg, size_arg
from ...errors import ArgumentError, ShapeError
from ...ops import mha
from ...tensor import Tensor, tensor, zeros
from .. import init
from ..parameter import Parameter
from .linear import Linear, device_dtype
from .module import Module

__all__ = ["MultiheadAttention"]


class MultiheadAttention(Module):
    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim: int | None = None,
                 vdim: int | None = None, batch_first: bool = False, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        op = "MultiheadAttention"
        device = device_dtype(op, device, dtype)
        embed_dim, num_heads = size_arg(op, "embed_dim", embed_dim, 1), size_arg(op, "num_heads", num_heads, 1)
        kdim = None if kdim is None else size_arg(op, "kdim", kdim, 1)
        vdim = None if vdim is None else size_arg(op, "vdim", vdim, 1)
        dropout = real_arg(op, "dropout", dropout, 0.0, 1.0)
        if embed_dim <= 0 or num_heads <= 0 or embed_dim % num_heads:
            raise ArgumentError(f"{op}: embed_dim ({embed_dim}) must be a positive multiple of num_heads ({num_heads})")
        if add_bias_kv or add_zero_attn:
            raise ArgumentError(f"{op}: add_bias_kv and add_zero_attn are not supported yet (only False), got "
                                f"add_bias_kv={add_bias_kv!r}, add_zero_attn={add_zero_attn!r}")
        if not 0.0 <= float(dropout) <= 1.0:
            raise ArgumentError(f"{op}: dropout must be in [0, 1], got {dropout}")
        self.embed_dim, self.num_heads = int(embed_dim), int(num_heads)
        self.head_dim = self.embed_dim // self.num_heads
        self.kdim = self.embed_dim if kdim is None else int(kdim)
        self.vdim = self.embed_dim if vdim is None else int(vdim)
        self._qkv_same_embed_dim = self.kdim == self.embed_dim and self.vdim == self.embed_dim
        self.dropout, self.batch_first = float(dropout), bool(batch_first)
        E = self.embed_dim
        if self._qkv_same_embed_dim:
            self.in_proj_weight = Parameter(zeros(3 * E, E, device=device))
            for n in ("q_proj_weight", "k_proj_weight", "v_proj_weight"):
                self.register_parameter(n, None)
        else:
            self.q_proj_weight = Parameter(zeros(E, E, device=device))
            self.k_proj_weight = Parameter(zeros(E, self.kdim, device=device))
            self.v_proj_weight = Parameter(zeros(E, self.vdim, device=device))
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(zeros(3 * E, device=device))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = Linear(E, E, bias=bias, device=device)
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        # As PyTorch: xavier_uniform_ on the packed (or separate) input projections, zero biases.
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            for w in (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight):
                init.xavier_uniform_(w)
        if self.in_proj_bias is not None:
            init.zeros_(self.in_proj_bias)
            init.zeros_(self.out_proj.bias)

    def extra_repr(self) -> str:
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, batch_first={self.batch_first}"

    # -- forward -------------------------------------------------------------------------
    def _projections(self, query: Tensor, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        E = self.embed_dim
        b = self.in_proj_bias
        bq, bk, bv = (None, None, None) if b is None else (b[0:E], b[E:2 * E], b[2 * E:3 * E])
        if self._qkv_same_embed_dim:
            w = self.in_proj_weight
            if query is key and key is value:  # self-attention: one GEMM for all three
                qkv = ops.linear(query, w, b)
                return qkv[..., 0:E], qkv[..., E:2 * E], qkv[..., 2 * E:3 * E]
            wq, wk, wv = w[0:E], w[E:2 * E], w[2 * E:3 * E]
        else:
            wq, wk, wv = self.q_proj_weight, self.k_proj_weight, self.v_proj_weight
        return ops.linear(query, wq, bq), ops.linear(key, wk, bk), ops.linear(value, wv, bv)

    def _merged_mask(self, op: str, N: int, L: int, S: int, attn_mask: Any, key_padding_mask: Any,
                     is_causal: bool, device: str) -> tuple[Any, str]:
        """One mask broadcastable to (N, H, L, S): ('hard', allowed bools) or ('add', float), or (None, '')."""
        H = self.num_heads
        parts_bool, parts_add = [], []

        def take(name: str, m: Any, shapes: list[tuple[int, ...]], to4: Any) -> None:
            # a host float mask goes to the inputs' device (it is added to the scores there)
            arr = m if isinstance(m, Tensor) else tensor(np.asarray(m), device=device)
            if arr.shape not in shapes:
                raise ShapeError(f"{op}: {name} must have shape {' or '.join(map(str, shapes))}, got {arr.shape}")
            if arr._buf is not None:  # a float mask (bool and integer tensors live on the host)
                parts_add.append(to4(arr))
            else:  # PyTorch's MultiheadAttention: True = NOT allowed
                parts_bool.append(to4(~arr.numpy().astype(bool)))

        if attn_mask is not None:
            take("attn_mask", attn_mask, [(L, S), (N * H, L, S)],
                 lambda m: (m.reshape(N, H, L, S) if m.ndim == 3 else m.reshape(1, 1, L, S))
                 if isinstance(m, np.ndarray) else (ops.reshape(m, (N, H, L, S)) if m.ndim == 3
                                                     else ops.reshape(m, (1, 1, L, S))))
        elif is_causal:
            parts_bool.append(np.tril(np.ones((L, S), dtype=bool)).reshape(1, 1, L, S))
        if key_padding_mask is not None:
            take("key_padding_mask", key_padding_mask, [(N, S)],
                 lambda m: m.reshape(N, 1, 1, S) if isinstance(m, np.ndarray) else ops.reshape(m, (N, 1, 1, S)))
        if not parts_add:
            if not parts_bool:
                return None, ""
            allowed = parts_bool[0]
            for p in parts_bool[1:]:
                allowed = allowed & p
            return allowed, "hard"
        total = parts_add[0]
        for p in parts_add[1:]:
            total = ops.add(total, p)
        if parts_bool:
            allowed = parts_bool[0]
            for p in parts_bool[1:]:
                allowed = allowed & p
            total = ops.add(total, tensor(np.where(allowed, 0.0, -np.inf).astype(np.float32), device=total.device))
        return total, "add"

    def forward(self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Any = None,
                need_weights: bool = True, attn_mask: Any = None, average_attn_weights: bool = True,
                is_causal: bool = False) -> tuple[Tensor, Tensor | None]:
        op = "MultiheadAttention"
        batched = query.ndim == 3
        if query.ndim not in (2, 3) or key.ndim != query.ndim or value.ndim != query.ndim:
            raise ShapeError(f"{op}: expected query, key, value all 3-D (batched) or all 2-D, got "
                             f"{query.shape}, {key.shape}, {value.shape}")
        if not batched:
            ax = 1 if not self.batch_first else 0
            uq = ops.unsqueeze(query, ax)  # keep `query is key is value` (self-attention) as it was
            uk = uq if key is query else ops.unsqueeze(key, ax)
            value = uq if value is query else uk if value is key else ops.unsqueeze(value, ax)
            query, key = uq, uk
            if key_padding_mask is not None:
                key_padding_mask = np.asarray(_host(key_padding_mask)).reshape(1, -1)
        if not self.batch_first:  # (L, N, E) -> (N, L, E)
            same_kv = key is value
            self_attn = query is key and same_kv
            query = ops.transpose(query, 0, 1)
            key = query if self_attn else ops.transpose(key, 0, 1)
            value = key if (self_attn or same_kv) else ops.transpose(value, 0, 1)
        N, L, E = query.shape
        S = key.shape[1]
        if E != self.embed_dim or key.shape[0] != N or value.shape[:2] != (N, S) or key.shape[2] != self.kdim \
                or value.shape[2] != self.vdim:
            raise ShapeError(f"{op}: expected query (N, L, {self.embed_dim}), key (N, S, {self.kdim}), value "
                             f"(N, S, {self.vdim}) (batch_first={self.batch_first}), got {query.shape}, "
                             f"{key.shape}, {value.shape}")
        scale = 1.0 / math.sqrt(self.head_dim)
        drop = self.dropout if self.training else 0.0
        weights = None
        if not (need_weights or drop > 0.0) and self._qkv_same_embed_dim and query is key and key is value:
            # fused self-attention on the packed projection (N, L, 3E): the heads are read from and
            # written to the Linear layouts directly, no slicing, split_heads or merge_heads
            qkv = ops.linear(query, self.in_proj_weight, self.in_proj_bias)
            mask, mode = self._merged_mask(op, N, L, S, attn_mask, key_padding_mask, is_causal, query.device)
            o = ops.flash_attention_packed(qkv, self.num_heads, attn_mask=_sdpa_mask(mask, mode, L, S, qkv.device),
                                           scale=scale)  # (N, L, E)
            out = self.out_proj(o)
        else:
            q, k, v = self._projections(query, key, value)
            q, k, v = (mha.split_heads(t, self.num_heads) for t in (q, k, v))  # (N, H, n, hd)
            mask, mode = self._merged_mask(op, N, L, S, attn_mask, key_padding_mask, is_causal, query.device)
            if need_weights or drop > 0.0:
                o, w = mha.composed_attention(q, k, v, scale, mask, mode or "hard", drop, self.training,
                                              blocked_rows_nan=need_weights)
                if need_weights:
                    weights = ops.mean(w, 1) if average_attn_weights else w
            else:
                from ..functional import scaled_dot_product_attention as sdpa

                o = sdpa(q, k, v, attn_mask=_sdpa_mask(mask, mode, L, S, q.device), scale=scale)
            out = self.out_proj(mha.merge_heads(o))  # (N, L, E)
        if not self.batch_first:
            out = ops.transpose(out, 0, 1)
        if not batched:
            out = ops.squeeze(out, 1 if not self.batch_first else 0)
            if weights is not None:
                weights = ops.squeeze(weights, 0)
        return out, weights


def _sdpa_mask(mask: Any, mode: str, L: int, S: int, device: str) -> Any:
    """The merged mask as the fused kernels take it: a bool tensor (True = allowed; the host array
    broadcast to at least (1, 1, L, S)) for 'hard', the float tensor for 'add', or None."""
    if mode == "hard":
        return tensor(np.broadcast_to(mask, np.broadcast_shapes(mask.shape, (1, 1, L, S))).copy(), device=device)
    if mode == "add":
        return mask
    return None


def _host(m: Any) -> Any:
    return m.numpy() if isinstance(m, Tensor) else m
