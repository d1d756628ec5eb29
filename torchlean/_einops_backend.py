"""einops on torchlean tensors: the backend that ``einops`` finds for them.

einops picks a backend per tensor type by walking the subclasses of its ``AbstractBackend`` whose
``framework_name`` is an imported module (here ``torchlean``), so defining the subclass is the
whole registration: ``torchlean/__init__.py`` imports this module, which defines it when einops is
installed (einops is optional; without it this module defines nothing). Every method is a
torchlean op, so ``rearrange``/``reduce``/``repeat``/``einsum`` record gradients and keep dtypes as
the ops do. The layers (``Rearrange``, ``Reduce``, ``EinMix``) are in ``torchlean.nn.einops_layers``.
"""

from __future__ import annotations

from typing import Any

from . import ops
from .tensor import Tensor, arange, tensor

try:
    from einops._backends import AbstractBackend
except ImportError:  # einops is optional
    AbstractBackend = None

__all__ = ["TorchleanBackend"] if AbstractBackend is not None else []

if AbstractBackend is not None:

    class TorchleanBackend(AbstractBackend):  # type: ignore[misc,valid-type]
        framework_name = "torchlean"

        def is_appropriate_type(self, x: Any) -> bool:
            return isinstance(x, Tensor)

        def from_numpy(self, x: Any) -> Tensor:
            t = tensor(x)
            if t.is_floating_point():  # as einops' torch backend: only floating tensors take gradients
                t.requires_grad_(True)
            return t

        def to_numpy(self, x: Tensor) -> Any:
            return x.detach().numpy()

        def arange(self, start: int, stop: int) -> Tensor:
            return arange(start, stop)

        def shape(self, x: Tensor) -> tuple[int, ...]:
            return tuple(x.shape)

        def reshape(self, x: Tensor, shape: Any) -> Tensor:
            return ops.reshape(x, tuple(shape))

        def transpose(self, x: Tensor, axes: Any) -> Tensor:
            return ops.permute(x, *axes)

        def reduce(self, x: Tensor, operation: str, reduced_axes: Any) -> Tensor:
            axes = tuple(reduced_axes)
            if operation == "min":
                return x.amin(dim=axes)
            if operation == "max":
                return x.amax(dim=axes)
            if operation == "sum":
                return x.sum(dim=axes)
            if operation == "mean":
                return x.mean(dim=axes)
            if operation in ("prod", "any", "all"):  # one axis at a time, from the last
                for axis in sorted(axes, reverse=True):
                    x = getattr(x, operation)(dim=axis)
                return x
            raise NotImplementedError(f"einops reduction {operation!r} on torchlean tensors")

        def stack_on_zeroth_dimension(self, tensors: list) -> Tensor:
            return ops.stack(list(tensors))

        def add_axis(self, x: Tensor, new_position: int) -> Tensor:
            return ops.unsqueeze(x, new_position)

        def add_axes(self, x: Tensor, n_axes: int, pos2len: dict) -> Tensor:
            sizes = [-1] * n_axes
            for position, length in pos2len.items():
                x = self.add_axis(x, position)
                sizes[position] = length
            return x.expand(*sizes)  # a broadcast view where the op allows it, as torch's backend

        def tile(self, x: Tensor, repeats: Any) -> Tensor:
            return x.repeat(*repeats)

        def concat(self, tensors: list, axis: int) -> Tensor:
            return ops.cat(list(tensors), axis)

        def is_float_type(self, x: Tensor) -> bool:
            return x.is_floating_point()

        def layers(self) -> Any:
            from .nn import einops_layers

            return einops_layers

        def einsum(self, pattern: str, *x: Tensor) -> Tensor:
            return ops.einsum(pattern, *x)
