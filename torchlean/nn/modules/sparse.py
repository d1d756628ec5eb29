"""``Embedding``: rows of a (num_embeddings, embedding_dim) table, initialized N(0, 1) as PyTorch."""

from __future__ import annotations

from typing import Any

from ... import autograd
from ..._validate import int_arg, size_arg
from ...errors import ArgumentError
from ...tensor import Tensor, zeros
from .. import functional as F
from .. import init
from ..parameter import Parameter
from .linear import device_dtype
from .module import Module

__all__ = ["Embedding"]


class Embedding(Module):
    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None,
                 max_norm: float | None = None, norm_type: float = 2.0, scale_grad_by_freq: bool = False,
                 sparse: bool = False, _weight: Tensor | None = None, _freeze: bool = False, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        device = device_dtype("Embedding", device, dtype)
        self.num_embeddings = size_arg("Embedding", "num_embeddings", num_embeddings)
        self.embedding_dim = size_arg("Embedding", "embedding_dim", embedding_dim)
        if padding_idx is not None:
            padding_idx = int_arg("Embedding", "padding_idx", padding_idx)
            if not -self.num_embeddings <= padding_idx < self.num_embeddings:
                raise ArgumentError(f"Embedding: padding_idx must be within num_embeddings ({num_embeddings}), "
                                    f"got {padding_idx}")
            padding_idx %= self.num_embeddings
        self.padding_idx, self.max_norm, self.norm_type = padding_idx, max_norm, norm_type
        self.scale_grad_by_freq, self.sparse = scale_grad_by_freq, sparse
        if _weight is None:
            self.weight = Parameter(zeros(self.num_embeddings, self.embedding_dim, device=device),
                                    requires_grad=not _freeze)
            self.reset_parameters()
        else:
            self.weight = Parameter(_weight, requires_grad=not _freeze)

    def reset_parameters(self) -> None:
        init.normal_(self.weight)
        if self.padding_idx is not None:
            with autograd.no_grad():
                w = self.weight.numpy()
                w[self.padding_idx] = 0.0
                self.weight.copy_(w)

    def forward(self, x: Any) -> Tensor:
        return F.embedding(x, self.weight, self.padding_idx, self.max_norm, self.norm_type, self.scale_grad_by_freq,
                           self.sparse)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}" + (
            f", padding_idx={self.padding_idx}" if self.padding_idx is not None else "")
