"""Argument checks at the primitive boundary.

The seed's kernels take dims as UInt32; we check every dim, index and size here, once, so that
backends receive only valid arguments and never see a half-checked call. Every message names the
primitive, the argument, what was expected and what came.
"""

from __future__ import annotations

import math
import numbers
import struct
from typing import Any, Sequence

import numpy as np

from ..errors import ArgumentError, ShapeError

U32_LIMIT = 2**32


def check_u32(op: str, name: str, value: Any) -> int:
    """``value`` as a Python int in [0, 2**32); otherwise ``ShapeError`` naming ``name``."""
    if type(value) is int and 0 <= value < U32_LIMIT:  # the common case, without the ABC checks
        return value
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Integral,)):
        raise ShapeError(f"{op}: argument {name} must be an unsigned 32-bit integer, got {value!r} ({type(value).__name__})")
    v = int(value)
    if v < 0 or v >= U32_LIMIT:
        raise ShapeError(f"{op}: argument {name} must be in [0, 2**32), got {v}")
    return v


def check_flag(op: str, name: str, value: Any) -> int:
    """``value`` as 0 or 1 (a bool or an integer 0 / 1); otherwise ``ArgumentError`` naming ``name``."""
    if type(value) is int and value in (0, 1):
        return value
    if isinstance(value, numbers.Integral) and int(value) in (0, 1):  # bool, numpy ints
        return int(value)
    raise ArgumentError(f"{op}: argument {name} must be 0 or 1 (a flag), got {value!r} ({type(value).__name__})")


def check_u32_tuple(op: str, name: str, values: Any) -> tuple[int, ...]:
    """A sequence of uint32 values (dims, axis numbers) as a tuple."""
    if isinstance(values, (str, bytes)) or not isinstance(values, (Sequence, np.ndarray)):
        raise ShapeError(f"{op}: argument {name} must be a sequence of integers, got {values!r}")
    for d in values:  # fast path: plain ints in range (a loop: cheaper than all(<generator>))
        if type(d) is not int or not 0 <= d < U32_LIMIT:
            break
    else:
        return tuple(values)
    return tuple(check_u32(op, f"{name}[{i}]", d) for i, d in enumerate(values))


def check_dims(op: str, name: str, dims: Any) -> tuple[int, ...]:
    """A sequence of uint32 dims as a tuple; the product must fit in uint32 as well."""
    out = check_u32_tuple(op, name, dims)
    if math.prod(out) >= U32_LIMIT:
        raise ShapeError(f"{op}: argument {name}={list(out)} has {math.prod(out)} elements, more than 2**32 - 1")
    return out


def check_product(op: str, names: str, *dims: int) -> int:
    """The product of already-checked dims, which must itself fit in uint32."""
    n = math.prod(dims)
    if n >= U32_LIMIT:
        raise ShapeError(f"{op}: {names} = {n} elements, more than 2**32 - 1")
    return n


_F32 = struct.Struct("f")


def check_scalar(op: str, name: str, value: Any) -> float:
    """A host scalar rounded to float32, returned as a Python float (the seed casts host Floats)."""
    if type(value) is float:  # fast path: C's double -> float cast rounds to nearest, as np.float32
        try:
            return _F32.unpack(_F32.pack(value))[0]
        except OverflowError:  # finite but beyond float32: np.float32 below gives +-inf
            pass
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise ArgumentError(f"{op}: argument {name} must be a real number, got {value!r} ({type(value).__name__})")
    try:
        with np.errstate(over="ignore"):
            return float(np.float32(value))
    except OverflowError:
        raise ArgumentError(f"{op}: argument {name} = {value!r} is beyond the float range") from None


def check_indices(op: str, name: str, indices: Any, k: Any) -> np.ndarray:
    """Host indices as int64, each in [0, 2**32) (out-of-bounds but in-range is the kernel's job)."""
    k = check_u32(op, "k", k)
    try:
        arr = np.asarray(indices)
    except (TypeError, ValueError):
        raise ArgumentError(f"{op}: argument {name} must be a sequence of integers, got {type(indices).__name__}") from None
    if arr.size == 0:
        arr = arr.reshape(0).astype(np.int64)
    if arr.ndim != 1:
        raise ShapeError(f"{op}: argument {name} must be one-dimensional, got shape {arr.shape}")
    if arr.dtype.kind not in "iu":
        if arr.dtype.kind == "O" and all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in arr):
            big = [int(v) for v in arr if not (0 <= int(v) < U32_LIMIT)]
            if big:
                raise ArgumentError(f"{op}: argument {name} holds {big[0]}, outside the index range [0, 2**32)")
            arr = arr.astype(np.int64)
        else:
            raise ArgumentError(f"{op}: argument {name} must hold integers, got dtype {arr.dtype}")
    if arr.shape[0] != k:
        raise ShapeError(f"{op}: argument {name} has {arr.shape[0]} entries but k = {k}")
    if arr.size:
        lo, hi = int(arr.min()), int(arr.max())
        if lo < 0 or hi >= U32_LIMIT:
            bad = lo if lo < 0 else hi
            raise ArgumentError(f"{op}: argument {name} holds {bad}, outside the index range [0, 2**32)")
    return arr.astype(np.int64, copy=False)
