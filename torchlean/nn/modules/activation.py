"""Activation modules (``ReLU``, ``GELU``, ``Tanh``, ``Sigmoid``, ``Softmax``) and ``Dropout``."""

from __future__ import annotations

from typing import Any

from ..._validate import int_arg, real_arg
from ...errors import ArgumentError
from ...tensor import Tensor
from .. import functional as F
from .module import Module

__all__ = ["ReLU", "GELU", "Tanh", "Sigmoid", "Softmax", "Dropout"]


class ReLU(Module):
    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(x)


class GELU(Module):
    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ArgumentError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return F.gelu(x, approximate=self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class Tanh(Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.tanh(x)


class Sigmoid(Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.sigmoid(x)


class Softmax(Module):
    def __init__(self, dim: int | None = -1) -> None:
        super().__init__()
        self.dim = -1 if dim is None else int_arg("Softmax", "dim", dim)

    def forward(self, x: Tensor) -> Tensor:
        return F.softmax(x, self.dim)


class Dropout(Module):
    """Counter-based dropout (identity in eval mode): the same mask on every device for a seed."""

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        self.p = real_arg("Dropout", "p", p, 0.0, 1.0)

    def forward(self, x: Tensor, generator: Any = None) -> Tensor:
        return F.dropout(x, self.p, self.training, generator=generator)

    def extra_repr(self) -> str:
        return f"p={self.p}"
