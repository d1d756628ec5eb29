"""Shared helpers for the differentiable ops: shapes, broadcasting, operand conversion."""

from __future__ import annotations

import math
import numbers
from typing import Any, Sequence

from .._validate import complex_refusal, expect_tensor, int64_indices, type_name
from ..errors import DeviceError, DTypeError, ShapeError
from ..runtime.arrays import to_host
from ..runtime.buffer import Buffer
from ..tensor import Tensor, dim_index, tensor

__all__ = ["Tensor", "new", "fbuf", "operand", "broadcast_shapes", "axis_map_for", "dim_index", "numel",
           "same_device", "plain_ints", "tensor_arg", "host_indices"]


# new(buf, shape): a float tensor over buf, the output of every tape op. An alias of the bound
# classmethod rather than a wrapper around it: one Python call less per op.
new = Tensor._wrap


def numel(shape: Sequence[int]) -> int:
    return math.prod(shape)


def fbuf(op: str, t: Tensor) -> Buffer:
    """The float32 buffer of ``t``; integer and bool tensors are promoted (not differentiable)."""
    if t._buf is not None:
        return t._buf
    return t.float()._buf


def tensor_arg(op: str, name: str, x: Any) -> Tensor:
    """``x`` when it is a Tensor; else DTypeError "op: expected a Tensor for name, got numpy.ndarray"."""
    if isinstance(x, Tensor):
        return x
    return expect_tensor(op, name, x, Tensor)


def host_indices(op: str, name: str, index: Any) -> Any:
    """Integer indices (an int64/bool-free integer Tensor, an array or a sequence) as a host int64
    array, every value exact: one that int64 cannot hold raises, never wraps (see int64_indices)."""
    if isinstance(index, Tensor):
        if index._buf is not None:
            raise DTypeError(f"{op}: {name} must be an integer tensor, got torchlean.float32 (use .long())")
        host = index._host_mirror()  # the index kernels take host indices
        index = to_host(index._arr) if host is None else host
    return int64_indices(op, name, index)


def operand(op: str, x: Any, like: Tensor) -> Tensor:
    """A tensor operand: Tensors pass (int/bool promoted to float), array-likes are copied to like's device."""
    if isinstance(x, Tensor):
        if x._buf is None:
            x = x.float()
        return x
    if getattr(type(x), "__torchlean_complex__", False):
        raise complex_refusal(op, "an operand", x)
    if x is None or isinstance(x, (str, bytes, complex)) or not (
            isinstance(x, (numbers.Real, list, tuple)) or hasattr(x, "__array__") or hasattr(x, "__array_interface__")):
        raise DTypeError(f"{op}: expected a Tensor or a number as an operand, got {type_name(x)}")
    try:
        return tensor(x, dtype="float32", device=like.device)
    except Exception as exc:  # noqa: BLE001 - reported as the op's own error
        raise DTypeError(f"{op}: cannot use {type_name(x)} as a tensor operand ({exc})") from None


def plain_ints(value: Any) -> bool:
    """A plain int or a tuple of plain ints: safe as a cache key (True == 1 would share an entry, and
    a bool must still be refused; a NumPy int or a list is accepted but takes the uncached path)."""
    if type(value) is int:
        return True
    if type(value) is tuple:
        for v in value:
            if type(v) is not int:
                return False
        return True
    return False


def same_device(op: str, *ts: Tensor) -> str:
    dev = ts[0].device
    for t in ts[1:]:
        if t.device != dev:
            raise DeviceError(f"{op}: expected tensors on one device, got {', '.join(t.device for t in ts)}")
    return dev


def broadcast_shapes(op: str, *shapes: Sequence[int]) -> tuple[int, ...]:
    """NumPy/PyTorch broadcasting of shapes; ``ShapeError`` naming op and shapes otherwise."""
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for j in range(rank):
        dims = {s[len(s) - rank + j] for s in shapes if len(s) - rank + j >= 0}
        dims.discard(1)
        if len(dims) > 1:
            raise ShapeError(f"{op}: shapes {' and '.join(str(tuple(s)) for s in shapes)} are not broadcastable")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def axis_map_for(in_shape: Sequence[int], out_shape: Sequence[int]) -> tuple[int, ...]:
    """The broadcast_to axis_map of right-aligned NumPy broadcasting from in_shape to out_shape."""
    lead = len(out_shape) - len(in_shape)
    return tuple(0 if j < lead else j - lead + 1 for j in range(len(out_shape)))
