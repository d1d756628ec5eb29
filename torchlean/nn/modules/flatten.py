"""``Flatten`` and ``Unflatten`` (PyTorch's defaults: Flatten keeps dim 0, the batch)."""

from __future__ import annotations

from typing import Any

from ... import ops
from ..._validate import int_arg
from ...errors import ShapeError
from ...tensor import Tensor, dim_index
from .module import Module

__all__ = ["Flatten", "Unflatten"]


class Flatten(Module):
    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim = int_arg("Flatten", "start_dim", start_dim)
        self.end_dim = int_arg("Flatten", "end_dim", end_dim)

    def forward(self, x: Tensor) -> Tensor:
        return ops.flatten(x, self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    """Expands dim ``dim`` into ``unflattened_size`` (one entry may be -1)."""

    def __init__(self, dim: int, unflattened_size: Any) -> None:
        super().__init__()
        if not isinstance(unflattened_size, (tuple, list)) or not unflattened_size:
            raise ShapeError(f"Unflatten: unflattened_size must be a non-empty tuple of ints, got {unflattened_size!r}")
        self.dim = int_arg("Unflatten", "dim", dim)
        self.unflattened_size = tuple(int_arg("Unflatten", "unflattened_size", s, -1) for s in unflattened_size)

    def forward(self, x: Tensor) -> Tensor:
        d = dim_index("Unflatten", self.dim, x.ndim)
        return ops.reshape(x, x.shape[:d] + self.unflattened_size + x.shape[d + 1:])

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"
