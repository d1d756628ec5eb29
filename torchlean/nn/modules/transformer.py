"""``nn.Transformer`` and its encoder/decoder stacks and layers, as PyTorch's ``torch.nn.modules.transformer``.

Constructor arguments, attribute names and parameter names (``self_attn.in_proj_weight``,
``multihead_attn``, ``linear1``, ``linear2``, ``norm1``-``norm3``, ``layers.0....``) are PyTorch's,
so a PyTorch state dict loads and gives the same outputs. The layers are compositions of
``MultiheadAttention``, ``Linear``, ``LayerNorm`` and ``Dropout``: no primitive of their own.

Masks are handed to ``MultiheadAttention`` as they come (bool: True = blocked; float: added to
the scores). ``is_causal`` / ``tgt_is_causal`` are hints, as in PyTorch, except that a hint
without a mask builds the causal mask (PyTorch raises).

PyTorch's inference fast path is matched where it changes values: ``TransformerEncoder`` with
``enable_nested_tensor`` (batch_first layers, padding mask, eval mode, no gradient wanted) runs on
nested tensors and returns 0 at padded positions (before the final norm); this module zeroes the
same positions.
"""

from __future__ import annotations

import copy
from typing import Any, Callable

import numpy as np

from ... import ops
from ...autograd import is_grad_enabled
from ...errors import ArgumentError, ShapeError
from ...tensor import Tensor, tensor
from .. import functional as F
from ..init import xavier_uniform_
from .activation import GELU, Dropout, ReLU
from .attention import MultiheadAttention
from .container import ModuleList
from .linear import Linear
from .module import Module
from .normalization import LayerNorm

__all__ = ["Transformer", "TransformerEncoder", "TransformerDecoder", "TransformerEncoderLayer",
           "TransformerDecoderLayer"]


def _activation(op: str, activation: Any) -> Callable[[Tensor], Tensor]:
    if isinstance(activation, str):
        if activation == "relu":
            return F.relu
        if activation == "gelu":
            return F.gelu
        raise ArgumentError(f"{op}: activation should be 'relu', 'gelu' or a callable, got {activation!r}")
    if not callable(activation):
        raise ArgumentError(f"{op}: activation should be 'relu', 'gelu' or a callable, got "
                            f"{type(activation).__name__}")
    return activation


def _relu_or_gelu(activation: Any) -> int:
    """PyTorch's ``activation_relu_or_gelu``: 1 relu, 2 gelu, 0 anything else."""
    if activation is F.relu or isinstance(activation, ReLU):
        return 1
    if activation is F.gelu or isinstance(activation, GELU):
        return 2
    return 0


def _clones(op: str, module: Any, n: Any) -> ModuleList:
    if not isinstance(module, Module):
        raise ArgumentError(f"{op}: expected a Module for the layer, got {type(module).__name__}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ArgumentError(f"{op}: num_layers must be a non-negative int, got {n!r}")
    return ModuleList([copy.deepcopy(module) for _ in range(n)])


class TransformerEncoderLayer(Module):
    __constants__ = ["norm_first"]

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: Any = F.relu, layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first, **kw)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, **kw)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, **kw)
        self.norm_first = bool(norm_first)
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        activation = _activation("TransformerEncoderLayer", activation)
        self.activation_relu_or_gelu = _relu_or_gelu(activation)
        self.activation = activation

    def forward(self, src: Tensor, src_mask: Any = None, src_key_padding_mask: Any = None,
                is_causal: bool = False) -> Tensor:
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            x = x + self._ff_block(self.norm2(x))
        else:
            x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
            x = self.norm2(x + self._ff_block(x))
        return x

    def _sa_block(self, x: Tensor, attn_mask: Any, key_padding_mask: Any, is_causal: bool = False) -> Tensor:
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask, need_weights=False,
                           is_causal=bool(is_causal))[0]
        return self.dropout1(x)

    def _ff_block(self, x: Tensor) -> Tensor:
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))


class TransformerDecoderLayer(Module):
    __constants__ = ["norm_first"]

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: Any = F.relu, layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, batch_first=batch_first, bias=bias, **kw)
        self.multihead_attn = MultiheadAttention(d_model, nhead, dropout=dropout, batch_first=batch_first, bias=bias,
                                                 **kw)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, **kw)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, **kw)
        self.norm_first = bool(norm_first)
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm3 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.dropout3 = Dropout(dropout)
        self.activation = _activation("TransformerDecoderLayer", activation)

    def forward(self, tgt: Tensor, memory: Tensor, tgt_mask: Any = None, memory_mask: Any = None,
                tgt_key_padding_mask: Any = None, memory_key_padding_mask: Any = None, tgt_is_causal: bool = False,
                memory_is_causal: bool = False) -> Tensor:
        x = tgt
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal)
            x = x + self._mha_block(self.norm2(x), memory, memory_mask, memory_key_padding_mask, memory_is_causal)
            x = x + self._ff_block(self.norm3(x))
        else:
            x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal))
            x = self.norm2(x + self._mha_block(x, memory, memory_mask, memory_key_padding_mask, memory_is_causal))
            x = self.norm3(x + self._ff_block(x))
        return x

    def _sa_block(self, x: Tensor, attn_mask: Any, key_padding_mask: Any, is_causal: bool = False) -> Tensor:
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                           is_causal=bool(is_causal), need_weights=False)[0]
        return self.dropout1(x)

    def _mha_block(self, x: Tensor, mem: Tensor, attn_mask: Any, key_padding_mask: Any,
                   is_causal: bool = False) -> Tensor:
        x = self.multihead_attn(x, mem, mem, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                                is_causal=bool(is_causal), need_weights=False)[0]
        return self.dropout2(x)

    def _ff_block(self, x: Tensor) -> Tensor:
        return self.dropout3(self.linear2(self.dropout(self.activation(self.linear1(x)))))


class TransformerEncoder(Module):
    __constants__ = ["norm"]

    def __init__(self, encoder_layer: Module, num_layers: int, norm: Module | None = None,
                 enable_nested_tensor: bool = True, mask_check: bool = True) -> None:
        super().__init__()
        self.layers = _clones("TransformerEncoder", encoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm
        self.enable_nested_tensor = bool(enable_nested_tensor)
        self.mask_check = bool(mask_check)
        # PyTorch's conditions for its nested-tensor path (checked once, as PyTorch does in __init__)
        attn = getattr(encoder_layer, "self_attn", None)
        self.use_nested_tensor = bool(
            enable_nested_tensor and isinstance(encoder_layer, TransformerEncoderLayer)
            and not encoder_layer.norm_first and attn.batch_first and attn._qkv_same_embed_dim
            and attn.in_proj_bias is not None and encoder_layer.activation_relu_or_gelu
            and encoder_layer.norm1.eps == encoder_layer.norm2.eps and attn.num_heads % 2 == 0)

    def forward(self, src: Tensor, mask: Any = None, src_key_padding_mask: Any = None,
                is_causal: bool | None = None) -> Tensor:
        output = src
        for mod in self.layers:
            output = mod(output, src_mask=mask, is_causal=bool(is_causal), src_key_padding_mask=src_key_padding_mask)
        keep = self._nested_keep(src, mask, src_key_padding_mask)
        if keep is not None:
            output = ops.mul(output, tensor(keep[:, :, None], device=output.device))
        if self.norm is not None:
            output = self.norm(output)
        return output

    def _nested_keep(self, src: Tensor, mask: Any, key_padding_mask: Any) -> np.ndarray | None:
        """(N, S) float32 with 0 at the padded positions where PyTorch would run its nested-tensor
        path (and so return 0 there), else None."""
        if not self.use_nested_tensor or key_padding_mask is None or mask is not None or src.ndim != 3 \
                or not self.layers or self.layers[0].training:
            return None
        first = self.layers[0]
        wanted = (src, first.self_attn.in_proj_weight, first.self_attn.in_proj_bias, first.self_attn.out_proj.weight,
                  first.self_attn.out_proj.bias, first.norm1.weight, first.norm1.bias, first.norm2.weight,
                  first.norm2.bias, first.linear1.weight, first.linear1.bias, first.linear2.weight,
                  first.linear2.bias)
        if is_grad_enabled() and any(t is not None and t.requires_grad for t in wanted):
            return None
        kpm = key_padding_mask.numpy() if isinstance(key_padding_mask, Tensor) else np.asarray(key_padding_mask)
        keep = (kpm == 0) if kpm.dtype != bool else ~kpm  # a float mask keeps its 0 entries (PyTorch)
        if keep.shape != tuple(src.shape[:2]):
            return None
        left_aligned = bool(np.all(keep[:, 1:] <= keep[:, :-1]))
        if self.mask_check and not left_aligned:
            return None
        return keep.astype(np.float32)


class TransformerDecoder(Module):
    __constants__ = ["norm"]

    def __init__(self, decoder_layer: Module, num_layers: int, norm: Module | None = None) -> None:
        super().__init__()
        self.layers = _clones("TransformerDecoder", decoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, tgt: Tensor, memory: Tensor, tgt_mask: Any = None, memory_mask: Any = None,
                tgt_key_padding_mask: Any = None, memory_key_padding_mask: Any = None,
                tgt_is_causal: bool | None = None, memory_is_causal: bool = False) -> Tensor:
        output = tgt
        for mod in self.layers:
            output = mod(output, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                         tgt_key_padding_mask=tgt_key_padding_mask, memory_key_padding_mask=memory_key_padding_mask,
                         tgt_is_causal=bool(tgt_is_causal), memory_is_causal=memory_is_causal)
        if self.norm is not None:
            output = self.norm(output)
        return output


class Transformer(Module):
    def __init__(self, d_model: int = 512, nhead: int = 8, num_encoder_layers: int = 6, num_decoder_layers: int = 6,
                 dim_feedforward: int = 2048, dropout: float = 0.1, activation: Any = F.relu,
                 custom_encoder: Any = None, custom_decoder: Any = None, layer_norm_eps: float = 1e-5,
                 batch_first: bool = False, norm_first: bool = False, bias: bool = True, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        layer_args = (d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps, batch_first, norm_first,
                      bias)
        if custom_encoder is not None:
            self.encoder = custom_encoder
        else:
            self.encoder = TransformerEncoder(TransformerEncoderLayer(*layer_args, **kw), num_encoder_layers,
                                              LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw))
        if custom_decoder is not None:
            self.decoder = custom_decoder
        else:
            self.decoder = TransformerDecoder(TransformerDecoderLayer(*layer_args, **kw), num_decoder_layers,
                                              LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw))
        self._reset_parameters()
        self.d_model, self.nhead, self.batch_first = d_model, nhead, bool(batch_first)

    def forward(self, src: Tensor, tgt: Tensor, src_mask: Any = None, tgt_mask: Any = None, memory_mask: Any = None,
                src_key_padding_mask: Any = None, tgt_key_padding_mask: Any = None,
                memory_key_padding_mask: Any = None, src_is_causal: bool | None = None,
                tgt_is_causal: bool | None = None, memory_is_causal: bool = False) -> Tensor:
        op = "Transformer"
        for name, t in (("src", src), ("tgt", tgt)):
            if not isinstance(t, Tensor):
                raise ArgumentError(f"{op}: expected a Tensor for {name}, got {type(t).__name__}")
        if src.ndim == 3:
            b = 0 if self.batch_first else 1
            if tgt.ndim != 3 or src.shape[b] != tgt.shape[b]:
                raise ShapeError(f"{op}: the batch number of src and tgt must be equal (batch_first="
                                 f"{self.batch_first}), got src {src.shape} and tgt {tgt.shape}")
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise ShapeError(f"{op}: the feature number of src and tgt must be equal to d_model={self.d_model}, "
                             f"got src {src.shape} and tgt {tgt.shape}")
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask, is_causal=src_is_causal)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask, tgt_is_causal=tgt_is_causal,
                            memory_is_causal=memory_is_causal)

    @staticmethod
    def generate_square_subsequent_mask(sz: int, device: Any = None, dtype: Any = None) -> Tensor:
        """(sz, sz) float mask: -inf above the diagonal, 0 on and below it (PyTorch's causal mask)."""
        if isinstance(sz, bool) or not isinstance(sz, (int, np.integer)) or sz < 0:
            raise ArgumentError(f"Transformer.generate_square_subsequent_mask: sz must be a non-negative int, "
                                f"got {sz!r}")
        m = np.triu(np.full((int(sz), int(sz)), -np.inf, dtype=np.float32), 1)
        return tensor(m, device=device) if dtype is None else tensor(m, dtype=dtype, device=device)

    def _reset_parameters(self) -> None:
        for p in self.parameters():
            if p.dim() > 1:
                xavier_uniform_(p)
