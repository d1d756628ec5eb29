"""``Identity`` and ``Linear`` (PyTorch's parameter names, shapes and default initialization)."""

from __future__ import annotations

import math
from typing import Any

from ..._validate import size_arg
from ...errors import ArgumentError
from ...tensor import Tensor, zeros
from .. import functional as F
from .. import init
from ..parameter import Parameter
from .module import Module

__all__ = ["Identity", "Linear"]


def device_dtype(op: str, device: Any, dtype: Any) -> Any:
    if dtype is not None:
        from ...tensor import canonical_dtype
        import numpy as np

        if canonical_dtype(op, dtype) != np.float32:
            raise ArgumentError(f"{op}: parameters are float32 only, got dtype {dtype!r}")
    return device


class Identity(Module):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()

    def forward(self, x: Tensor) -> Tensor:
        return x


class Linear(Module):
    """y = x W^T + b with weight (out_features, in_features), bias (out_features,).

    Initialization as PyTorch: W ~ U(-1/sqrt(in), 1/sqrt(in)) (kaiming_uniform_ with a = sqrt(5)),
    b ~ U(-1/sqrt(in), 1/sqrt(in)), drawn from torchlean's generator.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        device = device_dtype("Linear", device, dtype)
        self.in_features = size_arg("Linear", "in_features", in_features)
        self.out_features = size_arg("Linear", "out_features", out_features)
        self.weight = Parameter(zeros(self.out_features, self.in_features, device=device))
        self.bias = Parameter(zeros(self.out_features, device=device)) if bias else None
        if not bias:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None and self.in_features > 0:
            bound = 1 / math.sqrt(self.in_features)
            init.uniform_(self.bias, -bound, bound)

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight, self.bias)  # ops.linear, or linear_fast when Options.fast_kernels

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"
