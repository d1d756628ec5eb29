"""Creating complex tensors, and the public factories that route ``dtype=torch.cfloat`` (or complex
data) here and everything else to the real factories of ``torchlean.tensor`` unchanged.

``rand``/``randn`` draw the real view from the real generators (the same seed path, devices and
``generator=``): rand's parts are independent uniforms on [0, 1) and randn's are independent
normals of variance 1/2 each, so that E|z|^2 = 1, as PyTorch's complex randn."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import dtypes, ops
from .._validate import type_name
from ..errors import DTypeError, ShapeError
from ..tensor import Tensor
from ..tensor import as_tensor as real_as_tensor, empty as real_empty, empty_like as real_empty_like
from ..tensor import from_numpy as real_from_numpy, full as real_full, full_like as real_full_like
from ..tensor import ones as real_ones, ones_like as real_ones_like, rand as real_rand, randn as real_randn
from ..tensor import tensor as real_tensor, zeros as real_zeros, zeros_like as real_zeros_like
from ._core import ComplexTensor

__all__ = ["is_cfloat", "zeros", "ones", "empty", "full", "zeros_like", "ones_like", "empty_like", "full_like",
           "rand", "randn", "rand_like", "randn_like", "tensor", "as_tensor", "from_numpy", "view_as_real",
           "view_as_complex", "from_array"]


def is_cfloat(op: str, dtype: Any) -> bool:
    """Whether ``dtype`` names complex64 (complex128 and other complex dtypes raise DTypeError)."""
    if dtype is None or dtype is dtypes.float32:
        return False
    if dtype is dtypes.complex64:
        return True
    name = str(dtype).split(".")[-1] if isinstance(dtype, str) or type(dtype).__module__ == "torch" else None
    if name in ("complex128", "cdouble", "complex32", "chalf"):
        raise DTypeError(f"{op}: dtype {name} is not supported: torchlean's one complex dtype is complex64 "
                         f"(torchlean.cfloat), float32 pairs")
    if name is None and not isinstance(dtype, dtypes.dtype):
        try:
            npd = np.dtype(dtype)
        except TypeError:
            return False
        if npd == np.complex64:
            return True
        if npd.kind == "c":
            raise DTypeError(f"{op}: dtype {npd} is not supported: torchlean's one complex dtype is complex64 "
                             f"(torchlean.cfloat), float32 pairs")
        return False
    return dtypes.as_dtype(op, dtype, True) is dtypes.complex64


def _shape(op: str, size: tuple) -> tuple[int, ...]:
    if len(size) == 1 and not isinstance(size[0], (int, np.integer)):
        size = tuple(size[0])
    for s in size:
        if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 0:
            raise ShapeError(f"{op}: size must be a sequence of non-negative integers, got {tuple(size)!r}")
    return tuple(int(s) for s in size)


def from_array(op: str, arr: Any, device: Any = None, requires_grad: bool = False) -> ComplexTensor:
    """A complex tensor with the values of a NumPy array (any numeric dtype; complex128 rounds)."""
    c = np.ascontiguousarray(np.asarray(arr), dtype=np.complex64)
    r = real_tensor(c.view(np.float32).reshape(*c.shape, 2), device=device, requires_grad=requires_grad)
    return ComplexTensor.from_real_view(r, op)


def _filled(op: str, size: tuple, value: complex, device: Any, requires_grad: bool) -> ComplexTensor:
    shape = _shape(op, size)
    if value == 0:
        r = real_zeros(*shape, 2, device=device, requires_grad=requires_grad)
        return ComplexTensor.from_real_view(r, op)
    return from_array(op, np.full(shape, value, np.complex64), device, requires_grad)


def zeros(*size: Any, device: Any = None, requires_grad: bool = False, dtype: Any = None, **kw: Any) -> Any:
    if is_cfloat("zeros", dtype):
        return _filled("zeros", size, 0, device, requires_grad)
    return real_zeros(*size, device=device, requires_grad=requires_grad, dtype=dtype, **kw)


def ones(*size: Any, device: Any = None, requires_grad: bool = False, dtype: Any = None, **kw: Any) -> Any:
    if is_cfloat("ones", dtype):
        return _filled("ones", size, 1, device, requires_grad)
    return real_ones(*size, device=device, requires_grad=requires_grad, dtype=dtype, **kw)


def empty(*size: Any, device: Any = None, requires_grad: bool = False, dtype: Any = None, **kw: Any) -> Any:
    """Zeros (PyTorch leaves the values unset; torchlean's are defined)."""
    if is_cfloat("empty", dtype):
        return _filled("empty", size, 0, device, requires_grad)
    return real_empty(*size, device=device, requires_grad=requires_grad, dtype=dtype, **kw)


def full(size: Any, fill_value: Any, device: Any = None, requires_grad: bool = False, dtype: Any = None,
         **kw: Any) -> Any:
    """A complex fill value (or dtype=cfloat) gives a complex tensor, as in PyTorch."""
    if is_cfloat("full", dtype) or (dtype is None and isinstance(fill_value, complex)):
        return _filled("full", (size,) if isinstance(size, (int, np.integer)) else tuple(size), complex(fill_value),
                       device, requires_grad)
    return real_full(size, fill_value, device=device, requires_grad=requires_grad, dtype=dtype, **kw)


def _like_target(op: str, x: Any, dtype: Any) -> bool:
    """Whether the ``*_like`` result is complex: a complex input keeps complex unless dtype says."""
    if dtype is not None:
        return is_cfloat(op, dtype)
    return isinstance(x, ComplexTensor)


def _like(op: str, real_fn, filler):
    def fn(input: Any, *args: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False,
           **kw: Any) -> Any:  # noqa: A002
        if _like_target(op, input, dtype):
            if not isinstance(input, (Tensor, ComplexTensor)):
                raise DTypeError(f"{op}: expected a Tensor for input, got {type_name(input)}")
            dev = input.device if device is None else device
            return filler(tuple(input.shape), *args, device=dev, requires_grad=requires_grad, **kw)
        if isinstance(input, ComplexTensor):  # a complex input, a real dtype asked for
            input = input.real_view()[..., 0]
        return real_fn(input, *args, dtype=dtype, device=device, requires_grad=requires_grad, **kw)
    fn.__name__ = op
    return fn


def _rand(op: str, real_fn, scale: float):
    def fn(*size: Any, device: Any = None, requires_grad: bool = False, generator: Any = None,
           dtype: Any = None) -> Any:
        if not is_cfloat(op, dtype):
            return real_fn(*size, device=device, requires_grad=requires_grad, generator=generator, dtype=dtype)
        shape = _shape(op, size)
        r = real_fn(*shape, 2, device=device, generator=generator)
        if scale != 1.0:
            r = ops.mul(r, scale)
        if requires_grad:
            r.requires_grad_(True)
        return ComplexTensor.from_real_view(r, op)
    fn.__name__ = op
    return fn


rand = _rand("rand", real_rand, 1.0)
randn = _rand("randn", real_randn, 1.0 / math.sqrt(2.0))


def _fill_zeros(shape: tuple, device: Any = None, requires_grad: bool = False) -> ComplexTensor:
    return _filled("zeros_like", shape, 0, device, requires_grad)


def _fill_ones(shape: tuple, device: Any = None, requires_grad: bool = False) -> ComplexTensor:
    return _filled("ones_like", shape, 1, device, requires_grad)


def _fill_value(shape: tuple, fill_value: Any, device: Any = None, requires_grad: bool = False) -> ComplexTensor:
    return _filled("full_like", shape, complex(fill_value), device, requires_grad)


def _fill_rand(shape: tuple, device: Any = None, requires_grad: bool = False, generator: Any = None):
    return rand(*shape, device=device, requires_grad=requires_grad, generator=generator, dtype=dtypes.complex64)


def _fill_randn(shape: tuple, device: Any = None, requires_grad: bool = False, generator: Any = None):
    return randn(*shape, device=device, requires_grad=requires_grad, generator=generator, dtype=dtypes.complex64)


zeros_like = _like("zeros_like", real_zeros_like, _fill_zeros)
ones_like = _like("ones_like", real_ones_like, _fill_ones)
empty_like = _like("empty_like", real_empty_like, _fill_zeros)
full_like = _like("full_like", real_full_like, _fill_value)
rand_like = _like("rand_like", ops.creation.rand_like, _fill_rand)
randn_like = _like("randn_like", ops.creation.randn_like, _fill_randn)


def _holds_complex(data: Any) -> bool:
    if isinstance(data, (complex, np.complexfloating, ComplexTensor)):
        return True
    if isinstance(data, np.ndarray):
        return data.dtype.kind == "c"
    return False


def tensor(data: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Any:
    """``torch.tensor``: complex data (Python complex numbers, a complex NumPy array, a complex
    tensor) or dtype=cfloat gives a complex64 tensor; the rest is the real factory's."""
    if is_cfloat("tensor", dtype) or (dtype is None and _holds_complex(data)):
        return _complex_copy("tensor", data, device, requires_grad)
    try:
        return real_tensor(data, dtype=dtype, device=device, requires_grad=requires_grad)
    except DTypeError:
        # nested lists holding complex numbers: found only when the real path refuses them (no cost otherwise)
        if dtype is None and isinstance(data, (list, tuple)):
            try:
                kind = np.asarray(data).dtype.kind
            except (TypeError, ValueError):
                kind = ""
            if kind == "c":
                return _complex_copy("tensor", data, device, requires_grad)
        raise


def _complex_copy(op: str, data: Any, device: Any, requires_grad: bool) -> ComplexTensor:
    if isinstance(data, ComplexTensor):
        return ComplexTensor.from_real_view(
            real_tensor(data.real_view().numpy(), device=device or data.device, requires_grad=requires_grad), op)
    if isinstance(data, Tensor):
        data = data.numpy()
    return from_array(op, data, device, requires_grad)


def as_tensor(data: Any, dtype: Any = None, device: Any = None) -> Any:
    if isinstance(data, ComplexTensor) and (dtype is None or is_cfloat("as_tensor", dtype)):
        return data if device is None else data.to(device)
    if is_cfloat("as_tensor", dtype) or (dtype is None and _holds_complex(data)):
        return _complex_copy("as_tensor", data, device, False)
    return real_as_tensor(data, dtype=dtype, device=device)


def from_numpy(a: Any) -> Any:
    """A complex64 or complex128 array gives a complex64 tensor (complex128 rounds, as float64 does)."""
    if isinstance(a, np.ndarray) and a.dtype.kind == "c":
        return from_array("from_numpy", a, "cpu")
    return real_from_numpy(a)


def view_as_real(input: Any) -> Tensor:  # noqa: A002
    """The float32 (*shape, 2) real view: the same tensor (and tape node) the complex one holds, so
    gradients flow both ways and writing it writes the complex tensor (as PyTorch's view does)."""
    if not isinstance(input, ComplexTensor):
        got = f"a {input.dtype!r} tensor" if isinstance(input, Tensor) else type_name(input)
        raise DTypeError(f"view_as_real: expected a complex tensor, got {got}")
    return input.real_view()


def view_as_complex(input: Any) -> ComplexTensor:  # noqa: A002
    """The complex tensor over a float32 tensor whose last dimension is 2 (no copy: the same node)."""
    return ComplexTensor.from_real_view(input, "view_as_complex")
