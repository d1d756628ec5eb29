"""``Bilinear``, ``LocalResponseNorm``, ``ChannelShuffle``, ``EmbeddingBag`` and ``CTCLoss`` (which
raises ``NotSupportedError``): PyTorch's names, parameter names, shapes and initialization."""

from __future__ import annotations

import math
from typing import Any

from ... import autograd
from ..._validate import size_arg
from ...errors import ArgumentError, NotSupportedError
from ...tensor import Tensor, zeros
from .. import _more as F
from .. import init
from ..parameter import Parameter
from .linear import device_dtype
from .module import Module

__all__ = ["Bilinear", "LocalResponseNorm", "ChannelShuffle", "EmbeddingBag", "CTCLoss"]


class Bilinear(Module):
    """y = x1^T W_k x2 + b_k, weight (out_features, in1_features, in2_features), both U(-1/sqrt(in1), 1/sqrt(in1))."""

    def __init__(self, in1_features: int, in2_features: int, out_features: int, bias: bool = True,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        device = device_dtype("Bilinear", device, dtype)
        self.in1_features = size_arg("Bilinear", "in1_features", in1_features)
        self.in2_features = size_arg("Bilinear", "in2_features", in2_features)
        self.out_features = size_arg("Bilinear", "out_features", out_features)
        self.weight = Parameter(zeros(self.out_features, self.in1_features, self.in2_features, device=device))
        if bias:
            self.bias = Parameter(zeros(self.out_features, device=device))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1 / math.sqrt(self.weight.shape[1]) if self.weight.shape[1] else 0.0
        init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input1: Tensor, input2: Tensor) -> Tensor:
        return F.bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}")


class LocalResponseNorm(Module):
    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0) -> None:
        super().__init__()
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.local_response_norm(input, self.size, self.alpha, self.beta, self.k)

    def extra_repr(self) -> str:
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"


class ChannelShuffle(Module):
    def __init__(self, groups: int) -> None:
        super().__init__()
        self.groups = groups

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.channel_shuffle(input, self.groups)

    def extra_repr(self) -> str:
        return f"groups={self.groups}"


class EmbeddingBag(Module):
    """Sums, means or maxima of bags of rows of a (num_embeddings, embedding_dim) table, N(0, 1)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, max_norm: float | None = None,
                 norm_type: float = 2.0, scale_grad_by_freq: bool = False, mode: str = "mean", sparse: bool = False,
                 _weight: Tensor | None = None, include_last_offset: bool = False, padding_idx: int | None = None,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        device = device_dtype("EmbeddingBag", device, dtype)
        if mode not in ("sum", "mean", "max"):
            raise ArgumentError(f"EmbeddingBag: mode must be 'sum', 'mean' or 'max', got {mode!r}")
        self.num_embeddings = size_arg("EmbeddingBag", "num_embeddings", num_embeddings)
        self.embedding_dim = size_arg("EmbeddingBag", "embedding_dim", embedding_dim)
        self.max_norm, self.norm_type, self.scale_grad_by_freq = max_norm, norm_type, scale_grad_by_freq
        self.mode, self.sparse, self.include_last_offset = mode, sparse, include_last_offset
        if padding_idx is not None:
            padding_idx %= self.num_embeddings
        self.padding_idx = padding_idx
        if _weight is None:
            self.weight = Parameter(zeros(self.num_embeddings, self.embedding_dim, device=device))
            self.reset_parameters()
        else:
            self.weight = Parameter(_weight)

    def reset_parameters(self) -> None:
        init.normal_(self.weight)
        if self.padding_idx is not None:
            with autograd.no_grad():
                w = self.weight.numpy()
                w[self.padding_idx] = 0.0
                self.weight.copy_(w)

    def forward(self, input: Any, offsets: Any = None, per_sample_weights: Any = None) -> Tensor:  # noqa: A002
        return F.embedding_bag(input, self.weight, offsets, self.max_norm, self.norm_type, self.scale_grad_by_freq,
                               self.mode, self.sparse, per_sample_weights, self.include_last_offset,
                               self.padding_idx)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, mode={self.mode!r}"


class CTCLoss(Module):
    def __init__(self, blank: int = 0, reduction: str = "mean", zero_infinity: bool = False) -> None:
        raise NotSupportedError("CTCLoss: not supported yet (the CTC forward-backward recursion needs a new fused "
                                "primitive)")
