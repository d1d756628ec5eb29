"""Tensor dtypes: ``torchlean.int64``, ``torchlean.bool``, ``torchlean.float32`` ... and PyTorch's
type promotion between them.

torchlean computes in float32: it is the one floating dtype a tensor can have. Integer
(int64, int32, int16, int8, uint8) and bool tensors hold an array of their own dtype on their own
device and keep that dtype through the ops that keep it in PyTorch (ops/integer.py). float16,
bfloat16 and float64 exist as names (so that ``dtype=torch.float64`` in a program reads as
PyTorch's), but creating or converting to them raises ``DTypeError``: a float64 tensor that
silently held float32 values would give wrong answers in the very code that asks for float64.

This module sits below ``tensor.py`` and imports only NumPy and the errors.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import DTypeError

__all__ = ["dtype", "float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8",
           "bool_", "complex64", "as_dtype", "of_array", "from_numpy_dtype", "promote_types", "scalar_dtype", "get_default_dtype",
           "set_default_dtype", "finfo", "iinfo", "category", "COMPUTE_NOTE"]

COMPUTE_NOTE = "torchlean computes in float32 (the only floating dtype a tensor can have; use .float())"


class dtype:
    """A tensor element type. Compares equal to itself and to the NumPy dtype it stores as."""

    __slots__ = ("name", "np", "is_floating_point", "is_signed", "itemsize", "supported")

    def __init__(self, name: str, np_dtype: Any, floating: bool, signed: bool, itemsize: int,
                 supported: bool) -> None:
        self.name = name
        self.np = None if np_dtype is None else np.dtype(np_dtype)
        self.is_floating_point = floating
        self.is_signed = signed
        self.itemsize = itemsize
        self.supported = supported

    @property
    def is_complex(self) -> bool:
        return self.np is not None and self.np.kind == "c"

    @property
    def dtype(self) -> np.dtype:
        """NumPy reads this: ``np.zeros(3, dtype=torchlean.int64)`` and ``arr.astype(torchlean.uint8)``."""
        if self.np is None:
            raise DTypeError(f"{self!r} has no NumPy equivalent")
        return self.np

    def to_real(self) -> "dtype":
        return self

    def __repr__(self) -> str:
        return f"torchlean.{self.name}"

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, dtype):
            return other is self
        if isinstance(other, (np.dtype, type)) and self.np is not None:
            try:
                return np.dtype(other) == self.np
            except TypeError:
                return False
        return NotImplemented

    def __ne__(self, other: Any) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self) -> int:
        return hash(self.np) if self.np is not None else hash(self.name)

    def __reduce__(self) -> Any:
        return (_by_name, (self.name,))


float32 = dtype("float32", np.float32, True, True, 4, True)
float64 = dtype("float64", np.float64, True, True, 8, False)
float16 = dtype("float16", np.float16, True, True, 2, False)
bfloat16 = dtype("bfloat16", None, True, True, 2, False)
int64 = dtype("int64", np.int64, False, True, 8, True)
int32 = dtype("int32", np.int32, False, True, 4, True)
int16 = dtype("int16", np.int16, False, True, 2, True)
int8 = dtype("int8", np.int8, False, True, 1, True)
uint8 = dtype("uint8", np.uint8, False, False, 1, True)
bool_ = dtype("bool", np.bool_, False, False, 1, True)
# complex64 tensors are ComplexTensor objects over float32 pairs (complex_tensor.py), never arrays;
# unsupported here so that the real factories refuse it (the complex ones route it themselves)
complex64 = dtype("complex64", np.complex64, False, True, 8, False)

_ALL = (float32, float64, float16, bfloat16, int64, int32, int16, int8, uint8, bool_, complex64)
_NAMES = {d.name: d for d in _ALL}
_NAMES.update(float=float32, double=float64, half=float16, long=int64, int=int32, short=int16, cfloat=complex64)
_FROM_NP = {d.np: d for d in _ALL if d.np is not None}


def _by_name(name: str) -> dtype:
    return _NAMES[name]


def from_numpy_dtype(d: Any) -> dtype | None:
    """The torchlean dtype stored as NumPy dtype ``d``, or None (uint16, complex ...)."""
    return _FROM_NP.get(np.dtype(d))


def of_array(arr: Any) -> dtype:
    """The dtype of a NumPy or CuPy array that a non-float tensor holds."""
    return _FROM_NP[arr.dtype]


def as_dtype(op: str, d: Any, allow_unsupported: bool = False) -> dtype | None:
    """``d`` (a torchlean dtype, a name such as "int64" or "torch.long", a NumPy dtype or type, or a
    torch.dtype) as a torchlean dtype; None stays None. float16/bfloat16/float64 raise DTypeError
    (unless ``allow_unsupported``: promotion and finfo only name them)."""
    if d is None or isinstance(d, dtype):
        out = d
    elif d is float:
        out = float32
    elif d is int:
        out = int64
    elif d is bool:
        out = bool_
    elif isinstance(d, str) or type(d).__module__ == "torch":  # a name, or a torch.dtype (str: "torch.int64")
        out = _NAMES.get(str(d).split(".")[-1])
        if out is None:
            raise DTypeError(f"{op}: unknown dtype {d!r} (expected one of {', '.join(sorted(_NAMES))})")
    else:
        try:
            npd = np.dtype(d)
        except TypeError:
            raise DTypeError(f"{op}: dtype must be a torchlean dtype such as torchlean.int64, got {d!r}") from None
        out = _FROM_NP.get(npd)
        if out is None:
            kind = {"u": "unsigned integer", "c": "complex"}.get(npd.kind, "element")
            raise DTypeError(f"{op}: {kind} dtype {npd} is not supported (torchlean has float32, int64, int32, "
                             f"int16, int8, uint8 and bool)")
    if out is not None and not out.supported and not allow_unsupported:
        if out is complex64:  # reached only by functions that have no complex form
            raise DTypeError(f"{op}: dtype torchlean.complex64 is not supported by {op} (complex tensors come from "
                             f"zeros/ones/full/empty/rand/randn/tensor with dtype=torchlean.cfloat, "
                             f"torchlean.complex, polar and view_as_complex)")
        raise DTypeError(f"{op}: dtype {out!r} is not supported: {COMPUTE_NOTE}")
    return out


def category(d: dtype) -> int:
    """0 bool, 1 integer, 2 floating: the order of PyTorch's promotion categories."""
    return 2 if d.is_floating_point else (0 if d is bool_ else 1)


def promote_types(a: Any, b: Any) -> dtype:
    """PyTorch's ``promote_types``: the smallest dtype both ``a`` and ``b`` convert to safely."""
    a, b = as_dtype("promote_types", a, True), as_dtype("promote_types", b, True)
    if a is b:
        return a
    if a is bool_ or b is bool_:
        return b if a is bool_ else a
    ca, cb = category(a), category(b)
    if ca != cb:
        return a if ca > cb else b
    if ca == 2:
        if {a, b} == {float16, bfloat16}:
            return float32
        return a if a.itemsize > b.itemsize else b
    return _FROM_NP[np.promote_types(a.np, b.np)]


def scalar_dtype(v: Any) -> dtype:
    """The dtype a Python number takes in promotion: bool, int64 or the default float dtype."""
    if isinstance(v, (bool, np.bool_)):
        return bool_
    if isinstance(v, (int, np.integer)):
        return int64
    return float32


def get_default_dtype() -> dtype:
    return float32


def set_default_dtype(d: Any) -> None:
    """Only float32 can be the default: ``set_default_dtype(torch.float64)`` raises DTypeError."""
    got = as_dtype("set_default_dtype", d, True)
    if got is not float32:
        raise DTypeError(f"set_default_dtype: only torchlean.float32 can be the default dtype, got {got!r}: "
                         f"{COMPUTE_NOTE}")


class finfo:
    """Machine limits of a floating dtype (``torch.finfo``); the default is float32."""

    def __init__(self, type: Any = None) -> None:  # noqa: A002  (PyTorch's name)
        d = float32 if type is None else as_dtype("finfo", type, True)
        if not d.is_floating_point:
            raise DTypeError(f"finfo: expected a floating dtype, got {d!r} (use torchlean.iinfo)")
        if d is bfloat16:
            self.bits, self.eps, self.max, self.min = 16, 0.0078125, 3.3895313892515355e38, -3.3895313892515355e38
            self.tiny = self.smallest_normal = 1.1754943508222875e-38
            self.resolution = 0.01
        else:
            fi = np.finfo(d.np)
            self.bits, self.eps, self.max, self.min = fi.bits, float(fi.eps), float(fi.max), float(fi.min)
            self.tiny = self.smallest_normal = float(fi.tiny)
            self.resolution = float(fi.resolution)
        self.dtype = d.name

    def __repr__(self) -> str:
        return f"finfo(resolution={self.resolution}, min={self.min}, max={self.max}, eps={self.eps}, " \
               f"smallest_normal={self.smallest_normal}, tiny={self.tiny}, dtype={self.dtype})"


class iinfo:
    """Limits of an integer dtype (``torch.iinfo``)."""

    def __init__(self, type: Any) -> None:  # noqa: A002
        d = as_dtype("iinfo", type, True)
        if d.is_floating_point or d is bool_:
            raise DTypeError(f"iinfo: expected an integer dtype, got {d!r}")
        ii = np.iinfo(d.np)
        self.bits, self.min, self.max, self.dtype = ii.bits, int(ii.min), int(ii.max), d.name

    def __repr__(self) -> str:
        return f"iinfo(min={self.min}, max={self.max}, dtype={self.dtype})"
