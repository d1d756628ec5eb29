"""``clip_grad_value_``, ``parameters_to_vector`` and ``vector_to_parameters`` (PyTorch's names and semantics)."""

from __future__ import annotations

import numbers
from typing import Any, Iterable

from ... import autograd, ops
from ..._validate import type_name
from ...errors import ArgumentError, DTypeError, ShapeError
from ...tensor import Tensor

__all__ = ["clip_grad_value_", "parameters_to_vector", "vector_to_parameters"]


def _params(op: str, parameters: Any) -> list[Tensor]:
    ps = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    for p in ps:
        if not isinstance(p, Tensor):
            raise DTypeError(f"{op}: expected Tensors (parameters), got {type_name(p)}")
    return ps


def clip_grad_value_(parameters: Iterable[Tensor] | Tensor, clip_value: float, foreach: bool | None = None) -> None:
    """Clamp every gradient to [-clip_value, clip_value] in place."""
    if isinstance(clip_value, bool) or not isinstance(clip_value, numbers.Real):
        raise ArgumentError(f"clip_grad_value_: clip_value must be a number, got {type_name(clip_value)}")
    v = float(clip_value)
    with autograd.no_grad():
        for p in _params("clip_grad_value_", parameters):
            if p.grad is not None:
                p.grad.clamp_(-v, v)


def parameters_to_vector(parameters: Iterable[Tensor]) -> Tensor:
    """The parameters flattened and concatenated into one vector (differentiable)."""
    ps = _params("parameters_to_vector", parameters)
    if not ps:
        raise ArgumentError("parameters_to_vector: expected at least one parameter")
    return ops.cat([ops.reshape(p, -1) for p in ps], 0)


def vector_to_parameters(vec: Tensor, parameters: Iterable[Tensor]) -> None:
    """Copy consecutive slices of ``vec`` into the parameters (the inverse of parameters_to_vector)."""
    if not isinstance(vec, Tensor):
        raise DTypeError(f"vector_to_parameters: expected a Tensor for vec, got {type_name(vec)}")
    if vec.ndim != 1:
        raise ShapeError(f"vector_to_parameters: vec must be 1-D, got shape {tuple(vec.shape)}")
    ps = _params("vector_to_parameters", parameters)
    total = sum(p.numel() for p in ps)
    if total != vec.numel():
        raise ShapeError(f"vector_to_parameters: vec has {vec.numel()} elements, the parameters {total}")
    pos = 0
    with autograd.no_grad():
        for p in ps:
            n = p.numel()
            p.copy_(ops.reshape(ops.narrow(vec, 0, pos, n), p.shape))
            pos += n
