"""The dtype part of the ``torchlean`` namespace: dtype names as PyTorch spells them, promotion
(``promote_types``, ``result_type``), limits (``finfo``, ``iinfo``), the default dtype and the
functions whose result dtype follows PyTorch's promotion (comparisons, bitwise, logical)."""

from __future__ import annotations

from typing import Any

from . import dtypes, ops
from ._validate import type_name
from .dtypes import (bfloat16, bool_, dtype, finfo, float16, float32, float64, get_default_dtype, iinfo, int8,
                     int16, int32, int64, promote_types, set_default_dtype, uint8)
from .errors import DTypeError
from .tensor import Tensor, empty, empty_like, from_numpy, full_like, randint

__all__ = ["dtype", "float32", "float", "float64", "double", "float16", "half", "bfloat16", "int64", "long",
           "int32", "int", "int16", "short", "int8", "uint8", "bool", "bool_", "finfo", "iinfo", "promote_types",
           "result_type", "get_default_dtype", "set_default_dtype", "is_tensor", "is_floating_point",
           "empty", "empty_like", "full_like", "from_numpy", "randint", "eq", "ne", "lt", "le", "gt", "ge",
           "greater", "less", "greater_equal", "less_equal", "not_equal", "bitwise_and", "bitwise_or",
           "bitwise_xor", "bitwise_not", "bitwise_left_shift", "bitwise_right_shift", "logical_and",
           "logical_or", "logical_xor", "logical_not", "floor_divide", "remainder", "can_cast"]

float = float32  # noqa: A001  (torch.float is float32 too)
double = float64
half = float16
long = int64
int = int32  # noqa: A001
short = int16
bool = bool_  # noqa: A001


def result_type(tensor1: Any, tensor2: Any) -> dtypes.dtype:
    """The dtype PyTorch gives ``tensor1 op tensor2`` (tensors or numbers)."""
    return ops.integer.result_type(tensor1, tensor2)


def can_cast(from_: Any, to: Any) -> bool:
    """Whether PyTorch's in-place ops cast ``from_`` to ``to`` (never down a category: float to int, int to bool)."""
    a, b = dtypes.as_dtype("can_cast", from_, True), dtypes.as_dtype("can_cast", to, True)
    return dtypes.category(a) <= dtypes.category(b)


def is_tensor(obj: Any) -> bool:
    return isinstance(obj, Tensor)


def is_floating_point(input: Any) -> bool:  # noqa: A002  (PyTorch's name)
    if not isinstance(input, Tensor):
        raise DTypeError(f"is_floating_point: expected a Tensor for input, got {type_name(input)}")
    return input.is_floating_point()


def _cmp(how: str):
    def fn(input: Tensor, other: Any) -> Tensor:  # noqa: A002
        if not isinstance(input, Tensor):
            raise DTypeError(f"{how}: expected a Tensor for input, got {type_name(input)}")
        return ops.integer.compare(how, input, other)
    fn.__name__ = how
    return fn


eq, ne, lt, le, gt, ge = (_cmp(h) for h in ("eq", "ne", "lt", "le", "gt", "ge"))
greater, less, greater_equal, less_equal, not_equal = gt, lt, ge, le, ne


def _two(op: str, impl):
    def fn(input: Any, other: Any) -> Tensor:  # noqa: A002
        return impl(op, input, other)
    fn.__name__ = op
    return fn


bitwise_and, bitwise_or, bitwise_xor, bitwise_left_shift, bitwise_right_shift = (
    _two(op, ops.integer.bitwise) for op in ("bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift",
                                             "bitwise_right_shift"))
logical_and, logical_or, logical_xor = (_two(op, ops.integer.logical)
                                        for op in ("logical_and", "logical_or", "logical_xor"))


def bitwise_not(input: Tensor) -> Tensor:  # noqa: A002
    return ops.integer.bitwise_not(input)


def logical_not(input: Tensor) -> Tensor:  # noqa: A002
    return ops.integer.logical_not(input)


def floor_divide(input: Any, other: Any) -> Tensor:  # noqa: A002
    return ops.integer.floor_divide(input, other)


def remainder(input: Any, other: Any) -> Tensor:  # noqa: A002
    return ops.elementwise.remainder(input, other)
