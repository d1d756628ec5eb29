"""The integer and bool path of the ops: PyTorch's dtype rules on arrays of the tensor's device.

Integer (int64, int32, int16, int8, uint8) and bool tensors hold one array on their device (NumPy
on "cpu", CuPy on "cuda": runtime/arrays.py) and never require grad, so these ops compute on the
array module directly and record nothing. The float ops call in here only from their slow paths
(an operand that is not a float32 tensor), and only when PyTorch's result dtype is not float32:
``int_tensor * 1.5`` or ``int_tensor / 2`` go on to the float ops, which promote the operand.
"""

from __future__ import annotations

import numbers
from typing import Any, Sequence

import numpy as np

from .. import dtypes
from .._validate import bool_arg, type_name, unique_dims
from ..dtypes import bool_, category, float32, int64, promote_types
from ..errors import ArgumentError, DeviceError, DTypeError, IndexOutOfRangeError, ShapeError
from ..runtime import arrays
from ._base import Tensor, dim_index, same_device

__all__ = ["result_type", "arith", "compare", "logical", "bitwise", "bitwise_not", "neg", "abs", "pow",
           "floor_divide", "remainder", "sum", "transpose", "permute", "expand", "cat", "stack", "to_device",
           "clone", "getitem", "logical_not", "array"]

_ARITH = {"add": "add", "sub": "subtract", "mul": "multiply", "max": "maximum", "min": "minimum",
          "floor_divide": "floor_divide", "remainder": "remainder", "pow": "power"}
_COMPARE = {"eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal", "gt": "greater",
            "ge": "greater_equal"}
_BITWISE = {"bitwise_and": "bitwise_and", "bitwise_or": "bitwise_or", "bitwise_xor": "bitwise_xor",
            "bitwise_left_shift": "left_shift", "bitwise_right_shift": "right_shift"}
_LOGICAL = {"logical_and": "logical_and", "logical_or": "logical_or", "logical_xor": "logical_xor"}


def array(t: Tensor) -> Any:
    """The values of ``t`` as an array of its device: its own array, or a view of its float Buffer."""
    return t._arr if t._buf is None else arrays.buffer_array(t._buf, t._shape)


def _new(a: Any, device: str) -> Tensor:
    if isinstance(a, np.generic):  # NumPy's reductions and scalar ops return scalars, not 0-d arrays
        a = np.asarray(a)
    return Tensor._wrap_array(a, device)


def _is_scalar(v: Any) -> bool:
    return isinstance(v, (numbers.Real, np.bool_)) and not isinstance(v, Tensor)


def result_type(a: Any, b: Any) -> dtypes.dtype:
    """PyTorch's ``result_type``: tensors with dimensions decide, then 0-d tensors, then Python
    numbers, and a lower group changes the dtype only when its category (bool < int < float) is higher."""
    groups: list[dtypes.dtype | None] = [None, None, None]  # dimensioned, 0-d, Python numbers
    for v in (a, b):
        if isinstance(v, Tensor):
            g, d = (0 if v._shape else 1), v.dtype
        elif _is_scalar(v):
            g, d = 2, dtypes.scalar_dtype(v)
        else:
            raise DTypeError(f"result_type: expected Tensors or numbers, got {type_name(v)}")
        groups[g] = d if groups[g] is None else promote_types(groups[g], d)
    out = None
    for g, d in enumerate(groups):
        if d is None:
            continue
        if out is None:
            out = d
        elif category(d) > category(out):
            out = d if g < 2 else (float32 if d.is_floating_point else int64)
    return out


def _operands(op: str, a: Any, b: Any) -> tuple[Any, Any] | None:
    """Array-likes (lists, NumPy arrays) as tensors on the device of the tensor operand; None
    when an operand is neither a tensor, a number nor array-like (the float path reports it)."""
    like = a if isinstance(a, Tensor) else b
    out = []
    for v in (a, b):
        if isinstance(v, Tensor) or _is_scalar(v):
            out.append(v)
        elif isinstance(v, (list, tuple, np.ndarray)):
            from ..tensor import tensor

            out.append(tensor(v, device=like._device))
        else:
            return None
    return out[0], out[1]


def _arrays(op: str, a: Any, b: Any, d: dtypes.dtype) -> tuple[Any, Any, str, Any]:
    """Both operands as arrays of dtype ``d`` on their one device, and that device and array module."""
    ts = [v for v in (a, b) if isinstance(v, Tensor)]
    dev = ts[0]._device
    for t in ts[1:]:
        if t._device != dev:
            raise DeviceError(f"{op}: expected all tensors on one device, got {ts[0]._device} and {t._device}")
    xp = arrays.array_module(dev)
    out = []
    for v in (a, b):
        if isinstance(v, Tensor):
            x = array(v)
            if x.dtype != d.np:
                with np.errstate(invalid="ignore"):
                    x = x.astype(d.np)
        elif d.is_floating_point:
            x = d.np.type(v)
        elif d is bool_:
            x = np.bool_(v)
        else:
            # wraps as PyTorch's casts do (uint8: 300 -> 44); a NumPy scalar, which CuPy takes too
            x = np.array(int(v), dtype=np.int64).astype(d.np)[()]
        out.append(x)
    return out[0], out[1], dev, xp


def _call(xp: Any, dev: str, fname: str, *args: Any) -> Any:
    try:
        with arrays.on_device(dev), np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            return getattr(xp, fname)(*args)
    except ValueError as exc:  # shapes that do not broadcast
        shapes = " and ".join(str(tuple(a.shape)) for a in args if hasattr(a, "shape"))
        raise ShapeError(f"{fname}: shapes {shapes} are not broadcastable ({exc})") from None


def _nonfloat(a: Any, b: Any) -> bool:
    return (isinstance(a, Tensor) and a._buf is None) or (isinstance(b, Tensor) and b._buf is None)


def arith(op: str, a: Any, b: Any) -> Tensor | None:
    """``a op b`` when PyTorch's result is an integer or bool tensor; None when it is float32
    (the caller's float path then runs, promoting the integer operand)."""
    if not _nonfloat(a, b) or op == "div":
        return None
    ab = _operands(op, a, b)
    if ab is None:
        return None
    a, b = ab
    d = result_type(a, b)
    if d is float32:
        return None
    if d is bool_:
        if op == "sub":
            raise DTypeError("sub: subtracting two bool tensors is not supported (PyTorch refuses it too); to "
                             "invert a mask use ~mask or logical_not()")
        if op in ("floor_divide", "remainder"):
            raise DTypeError(f"{op}: not implemented for bool tensors (PyTorch refuses it too)")
    x, y, dev, xp = _arrays(op, a, b, d)
    if op in ("floor_divide", "remainder") and bool((y == 0).any()):
        raise ArgumentError(f"{op}: integer division by zero")
    if op == "pow" and d is not bool_ and bool((y < 0).any()):
        raise ArgumentError("pow: integers to negative integer powers are not allowed")
    out = _call(xp, dev, _ARITH[op], x, y)
    if d is bool_ and op == "pow":
        out = out.astype(np.bool_)
    return _new(xp.asarray(out, dtype=d.np) if out.dtype != d.np else out, dev)


def floor_divide(a: Any, b: Any) -> Tensor:
    """``a // b``: integers round toward minus infinity (Python's rule, as PyTorch's); floats too, not
    differentiable (PyTorch's gradient of floor division is zero)."""
    out = arith("floor_divide", a, b)
    if out is not None:
        return out
    return _float_result("floor_divide", a, b)


def remainder(a: Any, b: Any) -> Tensor | None:
    """``a % b`` with the sign of ``b`` (Python's and PyTorch's ``remainder``) when the result is an
    integer or bool tensor; None for a float result (ops/elementwise.remainder composes it)."""
    return arith("remainder", a, b)


def _float_result(op: str, a: Any, b: Any) -> Tensor:
    ab = _operands(op, a, b)
    if ab is None:
        raise DTypeError(f"{op}: expected Tensors or numbers, got {type_name(a)} and {type_name(b)}")
    x, y, dev, xp = _arrays(op, *ab, float32)
    out = _call(xp, dev, op, x, y)
    return Tensor._wrap(arrays.float_buffer(out, dev), tuple(out.shape))


def pow(x: Tensor, exponent: Any) -> Tensor | None:
    return arith("pow", x, exponent)


def compare(how: str, a: Tensor, b: Any) -> Any:
    """``a how b`` (eq ne lt le gt ge) for tensors of any dtype: a bool tensor on ``a``'s device,
    computed in PyTorch's promoted dtype; NotImplemented for eq/ne with a non-number (x == None)."""
    if not (isinstance(b, Tensor) or _is_scalar(b)):
        if isinstance(b, (list, tuple, np.ndarray)):
            ab = _operands(how, a, b)
            b = ab[1]
        elif how in ("eq", "ne"):
            return NotImplemented
        else:
            raise DTypeError(f"{how}: cannot compare a Tensor with {type_name(b)} (expected a Tensor or a number)")
    if isinstance(b, Tensor) and b._device != a._device:
        raise DeviceError(f"{how}: expected both tensors on one device, got {a._device} and {b._device}")
    x, y, dev, xp = _arrays(how, a, b, result_type(a, b))
    return _new(_call(xp, dev, _COMPARE[how], x, y), dev)


def logical(op: str, a: Any, b: Any) -> Tensor:
    """logical_and / logical_or / logical_xor of any dtypes (nonzero is True): a bool tensor."""
    ab = _operands(op, a, b)
    if ab is None or not any(isinstance(v, Tensor) for v in ab):
        raise DTypeError(f"{op}: expected Tensors or numbers, got {type_name(a)} and {type_name(b)}")
    a, b = ab
    dev = same_device(op, *[v for v in (a, b) if isinstance(v, Tensor)])
    xs = [array(v) if isinstance(v, Tensor) else v for v in (a, b)]
    return _new(_call(arrays.array_module(dev), dev, _LOGICAL[op], *xs), dev)


def logical_not(x: Tensor) -> Tensor:
    return _new(_call(arrays.array_module(x._device), x._device, "logical_not", array(x)), x._device)


def bitwise(op: str, a: Any, b: Any) -> Tensor:
    """&, |, ^, <<, >> of integer and bool tensors (and Python ints/bools)."""
    ab = _operands(op, a, b)
    if ab is None:
        raise DTypeError(f"{op}: expected integer or bool Tensors or numbers, got {type_name(a)} and {type_name(b)}")
    a, b = ab
    d = result_type(a, b)
    if d.is_floating_point:
        raise DTypeError(f"{op}: expected integer or bool tensors, got {a.dtype if isinstance(a, Tensor) else type_name(a)!r}"
                         f" and {b.dtype if isinstance(b, Tensor) else type_name(b)!r} (a float is not a bit pattern)")
    if d is bool_ and "shift" in op:
        d = int64
    x, y, dev, xp = _arrays(op, a, b, d)
    return _new(_call(xp, dev, _BITWISE[op], x, y).astype(d.np, copy=False), dev)


def bitwise_not(x: Tensor) -> Tensor:
    """``~x``: the bits flipped (int), or the mask inverted (bool)."""
    if x._buf is not None:
        raise DTypeError("bitwise_not: expected an integer or bool tensor, got torchlean.float32 (for a mask "
                         "made by a comparison, ~ works on the bool tensor; use logical_not for numbers)")
    return _new(_call(arrays.array_module(x._device), x._device, "invert", x._arr), x._device)


def neg(x: Tensor) -> Tensor:
    if x._arr.dtype == np.bool_:
        raise DTypeError("neg: negating a bool tensor is not supported (PyTorch refuses it too); to invert a "
                         "mask use ~mask or logical_not()")
    return _new(_call(arrays.array_module(x._device), x._device, "negative", x._arr), x._device)


def abs(x: Tensor) -> Tensor:
    if x._arr.dtype == np.bool_:
        raise DTypeError("abs: not implemented for bool tensors (PyTorch refuses it too)")
    return _new(_call(arrays.array_module(x._device), x._device, "absolute", x._arr), x._device)


# -- reductions ----------------------------------------------------------------------------------
def _axes(op: str, dim: Any, rank: int) -> tuple[int, ...] | None:
    if dim is None:
        return None
    if isinstance(dim, (tuple, list)) and len(dim) == 0:
        return None
    return tuple(unique_dims(op, dim, rank, dim_index)) if rank else None


def _keep(op: str, keepdim: Any) -> bool:
    return keepdim if keepdim is True or keepdim is False else bool_arg(op, "keepdim", keepdim)


def _reduce(op: str, fname: str, x: Tensor, dim: Any, keepdim: Any, dtype: Any) -> Tensor:
    d = int64 if dtype is None else dtypes.as_dtype(op, dtype)
    if d is float32:
        raise DTypeError(f"{op}: dtype=float32 on an integer tensor: convert with .float() first")
    axes = _axes(op, dim, x.ndim)
    out = _call(arrays.array_module(x._device), x._device, fname, x._arr, axes, d.np, None, _keep(op, keepdim))
    return _new(out, x._device)


def sum(x: Tensor, dim: Any = None, keepdim: Any = False, dtype: Any = None) -> Tensor:
    """The sum of an integer or bool tensor: int64 (PyTorch's rule for every integer and bool dtype)."""
    return _reduce("sum", "sum", x, dim, keepdim, dtype)


# -- layout --------------------------------------------------------------------------------------
def permute(x: Tensor, perm: Sequence[int]) -> Tensor:
    """The axes reordered (a contiguous copy: every torchlean tensor is contiguous)."""
    xp = arrays.array_module(x._device)
    with arrays.on_device(x._device):
        return _new(xp.ascontiguousarray(xp.transpose(x._arr, tuple(perm))), x._device)


def transpose(x: Tensor, a: int, b: int) -> Tensor:
    perm = list(range(x.ndim))
    perm[a], perm[b] = perm[b], perm[a]
    return permute(x, perm)


def expand(x: Tensor, shape: tuple) -> Tensor:
    xp = arrays.array_module(x._device)
    with arrays.on_device(x._device):
        return _new(xp.ascontiguousarray(xp.broadcast_to(x._arr, shape)), x._device)


def _join(op: str, tensors: Sequence[Tensor], dim: Any, stack_: bool) -> Tensor:
    """cat / stack where some tensor is not float32: PyTorch's promoted dtype across all of them."""
    dev = same_device(op, *tensors)
    d = tensors[0].dtype
    for t in tensors[1:]:
        d = promote_types(d, t.dtype)
    if d is float32:
        return None
    ref = tensors[0]
    rank = ref.ndim + (1 if stack_ else 0)
    ax = dim_index(op, dim, rank)
    for i, t in enumerate(tensors[1:], 1):
        same = t._shape == ref._shape if stack_ else (
            t.ndim == ref.ndim and t._shape[:ax] + t._shape[ax + 1:] == ref._shape[:ax] + ref._shape[ax + 1:])
        if not same:
            raise ShapeError(f"{op}: tensors[{i}] has shape {t._shape}, tensors[0] {ref._shape} "
                             f"({'all shapes must be equal' if stack_ else f'they must match outside dim {ax}'})")
    xp = arrays.array_module(dev)
    parts = [array(t).astype(d.np, copy=False) for t in tensors]
    with arrays.on_device(dev):
        return _new((xp.stack if stack_ else xp.concatenate)(parts, ax), dev)


def cat(tensors: Sequence[Tensor], dim: Any = 0) -> Tensor | None:
    """cat of integer/bool tensors (None when the promoted dtype is float32: the float path runs)."""
    return _join("cat", tensors, dim, False)


def stack(tensors: Sequence[Tensor], dim: Any = 0) -> Tensor | None:
    return _join("stack", tensors, dim, True)


def to_device(x: Tensor, device: str) -> Tensor:
    host = x._arr if x._device == "cpu" else x._host_mirror()  # (see Tensor._host_mirror)
    return Tensor._wrap_array(arrays.move(x._arr, device), device, host)


def clone(x: Tensor) -> Tensor:
    xp = arrays.array_module(x._device)
    with arrays.on_device(x._device):
        return _new(xp.array(x._arr, copy=True), x._device)


def device_key(key: Any, device: str) -> Any:
    """An index key's integer/bool arrays (host, checked) on ``device``'s array module."""
    xp = arrays.array_module(device)
    if xp is np:
        return key
    if isinstance(key, tuple):
        return tuple(device_key(k, device) for k in key)
    if isinstance(key, np.ndarray):
        with arrays.on_device(device):
            return xp.asarray(key)
    return key


def getitem(x: Tensor, key: Any) -> Tensor:
    """``x[key]`` of an integer or bool tensor (``key`` already checked by index._host_key)."""
    try:
        out = x._arr[device_key(key, x._device)]
    except IndexError as exc:
        raise IndexOutOfRangeError(f"getitem: {exc} (tensor shape {x._shape})") from None
    xp = arrays.array_module(x._device)
    with arrays.on_device(x._device):
        return _new(xp.array(out, copy=True), x._device)
