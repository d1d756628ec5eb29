"""Argument checks shared by the front end (factories, Tensor methods, ops, nn, optim).

Each helper either returns the checked value or raises a ``TorchLeanError`` whose message names
the user's call (``op``), the argument, what was expected and what came. They sit below
``tensor.py`` (they import only ``errors`` and NumPy), so every layer above can use them.
The common case of each is one or two type tests: they are cheap enough for the hot path.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from .errors import ArgumentError, AxisError, DTypeError, IndexOutOfRangeError, NotSupportedError, ShapeError

__all__ = ["type_name", "complex_refusal", "expect_tensor", "int_arg", "size_arg", "real_arg", "bool_arg", "int64_indices",
           "unique_dims", "MAX_FLOAT_ELEMENTS"]

# A float32 tensor is one Buffer, whose element count the seed keeps in a uint32.
MAX_FLOAT_ELEMENTS = 2**32 - 1
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1


def type_name(x: Any) -> str:
    """``numpy.ndarray``, ``NoneType``, ``list``...: the name a message shows for a wrong type."""
    t = type(x)
    if getattr(t, "__torchlean_complex__", False):
        return "a complex64 tensor (complex tensors are not supported here)"
    mod = t.__module__
    return t.__name__ if mod in ("builtins", None) or mod.startswith("torchlean") else f"{mod.split('.')[0]}.{t.__name__}"


def complex_refusal(op: str, name: str, x: Any) -> Exception:
    """The error for a non-Tensor argument of a real op: ``NotSupportedError`` naming the op for a
    complex tensor (complex_tensor.py marks its class, which this layer cannot import), else
    ``DTypeError``. The one place every real op's "expected a Tensor" check goes through."""
    if getattr(type(x), "__torchlean_complex__", False):
        return NotSupportedError(f"{op}: complex tensors are not supported by {op} (got a complex64 tensor for "
                                 f"{name}; work on its parts: z.real, z.imag or torchlean.view_as_real(z))")
    return DTypeError(f"{op}: expected a Tensor for {name}, got {type_name(x)}")


def expect_tensor(op: str, name: str, x: Any, tensor_type: type) -> Any:
    """``x`` itself when it is a ``tensor_type`` (torchlean's Tensor), else ``DTypeError``
    (``NotSupportedError`` for a complex tensor)."""
    if isinstance(x, tensor_type):
        return x
    raise complex_refusal(op, name, x)


def _is_int(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_))


def int_arg(op: str, name: str, v: Any, minimum: int | None = None, maximum: int | None = None,
            error: type = ArgumentError) -> int:
    """A Python or NumPy integer (never a bool, float or string) in [minimum, maximum], as an int."""
    if type(v) is not int:
        if not _is_int(v):
            raise error(f"{op}: {name} must be an integer, got {v!r} ({type_name(v)})")
        v = int(v)
    if minimum is not None and v < minimum:
        raise error(f"{op}: {name} must be >= {minimum}, got {v}")
    if maximum is not None and v > maximum:
        raise error(f"{op}: {name} must be <= {maximum}, got {v}")
    return v


def size_arg(op: str, name: str, v: Any, minimum: int = 0) -> int:
    """A size (number of features, channels, embeddings...): an integer >= minimum (ShapeError)."""
    return int_arg(op, name, v, minimum, None, ShapeError)


def real_arg(op: str, name: str, v: Any, lo: float | None = None, hi: float | None = None,
             finite: bool = False) -> float:
    """A real number (not a bool, string or None) within [lo, hi] (NaN never is), as a float."""
    if type(v) is not float:
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real):
            raise ArgumentError(f"{op}: {name} must be a real number, got {v!r} ({type_name(v)})")
        v = float(v)
    if v != v or (finite and not math.isfinite(v)) or (lo is not None and v < lo) or (hi is not None and v > hi):
        where = [f"in [{lo}, {hi}]" if lo is not None and hi is not None else (
            f">= {lo}" if lo is not None else (f"<= {hi}" if hi is not None else ""))]
        where = " and ".join(w for w in (["finite"] if finite else []) + where if w) or "a number"
        raise ArgumentError(f"{op}: {name} must be {where}, got {v}")
    return v


def bool_arg(op: str, name: str, v: Any) -> bool:
    """A bool (Python or NumPy), as PyTorch's keyword flags take."""
    if v is True or v is False:
        return v
    if isinstance(v, np.bool_):
        return bool(v)
    raise ArgumentError(f"{op}: {name} must be a bool, got {v!r} ({type_name(v)})")


def int64_indices(op: str, name: str, index: Any) -> np.ndarray:
    """Host integer indices as an int64 array, every value kept exactly: a value that int64 cannot
    hold (a uint64 >= 2**63, a Python int beyond int64) raises ``IndexOutOfRangeError``, never
    wraps (a wrapped 2**64 - 1 would be -1, i.e. the last row). Floats and bools raise DTypeError."""
    if isinstance(index, np.ndarray):
        arr = index
    else:
        if isinstance(index, (str, bytes)) or index is None:
            raise DTypeError(f"{op}: {name} must hold integer indices, got {type_name(index)}")
        try:
            arr = np.asarray(index)
        except (TypeError, ValueError, OverflowError):
            raise DTypeError(f"{op}: {name} must be an integer array or sequence, got {type_name(index)}") from None
    kind = arr.dtype.kind
    if kind == "i":
        return arr if arr.dtype == np.int64 else arr.astype(np.int64)
    if kind == "u":
        if arr.dtype.itemsize == 8 and arr.size and int(arr.max()) > _I64_MAX:
            raise IndexOutOfRangeError(f"{op}: {name} holds {int(arr.max())}, which does not fit in int64 "
                                       f"(indices must be in [-2**63, 2**63))")
        return arr.astype(np.int64)
    if kind == "b":
        raise DTypeError(f"{op}: {name} must hold integer indices, got a boolean mask")
    if arr.size == 0:
        return arr.astype(np.int64)
    if kind == "O":  # Python ints beyond 64 bits (or mixed objects)
        flat = arr.reshape(-1)
        for v in flat:
            if not _is_int(v):
                raise DTypeError(f"{op}: {name} must hold integer indices, got {v!r} ({type_name(v)})")
            if not _I64_MIN <= int(v) <= _I64_MAX:
                raise IndexOutOfRangeError(f"{op}: {name} holds {int(v)}, which does not fit in int64 "
                                           f"(indices must be in [-2**63, 2**63))")
        return arr.astype(np.int64)
    if kind == "f" and isinstance(index, (list, tuple)):
        # NumPy makes a float64 array of ints that no one integer dtype holds ([2**63, -1])
        ints = [v for v in np.asarray(index, dtype=object).reshape(-1) if _is_int(v)]
        if len(ints) == arr.size:
            big = next((int(v) for v in ints if not _I64_MIN <= int(v) <= _I64_MAX), None)
            if big is not None:
                raise IndexOutOfRangeError(f"{op}: {name} holds {big}, which does not fit in int64 "
                                           f"(indices must be in [-2**63, 2**63))")
    raise DTypeError(f"{op}: {name} must hold integer indices, got dtype {arr.dtype}")


def unique_dims(op: str, dims: Any, rank: int, axis) -> list[int]:
    """The sorted axes named by ``dims`` (an int or a sequence of ints), each once (PyTorch refuses
    a repeated dim); ``axis`` normalizes one dim (tensor._axis)."""
    seq = dims if isinstance(dims, (tuple, list)) else (dims,)
    out = [axis(op, d, rank) for d in seq]
    if len(set(out)) != len(out):
        dup = next(d for d in out if out.count(d) > 1)
        raise AxisError(f"{op}: dim {dup} appears more than once in dim={dims!r}")
    return sorted(out)
