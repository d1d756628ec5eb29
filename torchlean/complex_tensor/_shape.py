"""Shape ops, indexing and moves of complex tensors: each is the real op on the real view with the
trailing [re, im] axis kept last (``z[k]`` reads ``real_view()[k..., :]``), so gradients, slices
and slice assignment (the FNO's ``out_ft[:, :, :m1, :m2] = ...``) are the real ones."""

from __future__ import annotations

import warnings
from typing import Any, Sequence

from .. import autograd, dtypes, ops
from .._validate import type_name
from ..errors import ArgumentError, DTypeError, ShapeError
from ..tensor import Tensor, tensor
from ._core import ComplexTensor
from ._math import dims_of, operand_parts, pack

__all__ = ["reshape", "permute", "transpose", "unsqueeze", "squeeze", "flatten", "expand", "repeat", "clone",
           "detach", "to", "getitem", "setitem", "cat", "stack", "as_complex", "inplace", "mT", "T"]


def _wrap(r: Tensor, op: str) -> ComplexTensor:
    return ComplexTensor.from_real_view(r, op)


def _sizes(args: tuple) -> tuple:
    if len(args) == 1 and isinstance(args[0], (tuple, list)) or (len(args) == 1 and hasattr(args[0], "__len__")
                                                                 and not isinstance(args[0], Tensor)):
        return tuple(args[0])
    return tuple(args)


def reshape(z: ComplexTensor, *shape: Any) -> ComplexTensor:
    return _wrap(ops.reshape(z.real_view(), *_sizes(shape), 2), "reshape")


def permute(z: ComplexTensor, *dims: Any) -> ComplexTensor:
    d = dims_of("permute", _sizes(dims), z.ndim)
    if sorted(d) != list(range(z.ndim)):
        raise ShapeError(f"permute: dims {tuple(_sizes(dims))} are not a permutation of {z.ndim} dimensions")
    return _wrap(ops.permute(z.real_view(), *d, z.ndim), "permute")


def transpose(z: ComplexTensor, dim0: int, dim1: int) -> ComplexTensor:
    a, b = dims_of("transpose", (dim0, dim1), z.ndim)
    return _wrap(ops.transpose(z.real_view(), a, b), "transpose")


def mT(z: ComplexTensor) -> ComplexTensor:  # noqa: N802  (PyTorch's name)
    if z.ndim < 2:
        raise ShapeError(f"mT: expected a tensor of at least 2 dimensions, got {z.ndim}")
    return transpose(z, -2, -1)


def T(z: ComplexTensor) -> ComplexTensor:  # noqa: N802
    return z if z.ndim < 2 else permute(z, *reversed(range(z.ndim)))


def unsqueeze(z: ComplexTensor, dim: int) -> ComplexTensor:
    (d,) = dims_of("unsqueeze", dim, z.ndim + 1)
    return _wrap(ops.unsqueeze(z.real_view(), d), "unsqueeze")


def squeeze(z: ComplexTensor, dim: Any = None) -> ComplexTensor:
    if z.ndim == 0:
        return z
    keep = set() if dim is None else set(dims_of("squeeze", dim, z.ndim))
    shape = [s for i, s in enumerate(z.shape) if s != 1 or (dim is not None and i not in keep)]
    return reshape(z, *shape)


def flatten(z: ComplexTensor, start_dim: int = 0, end_dim: int = -1) -> ComplexTensor:
    if z.ndim == 0:
        return reshape(z, 1)
    a, b = dims_of("flatten", (start_dim, end_dim), z.ndim)
    if a > b:
        raise ShapeError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
    return _wrap(ops.flatten(z.real_view(), a, b), "flatten")


def expand(z: ComplexTensor, *sizes: Any) -> ComplexTensor:
    return _wrap(ops.expand(z.real_view(), (*_sizes(sizes), 2)), "expand")


def repeat(z: ComplexTensor, *reps: Any) -> ComplexTensor:
    reps = _sizes(reps)
    if len(reps) < z.ndim:
        raise ShapeError(f"repeat: expected at least {z.ndim} repeats (the tensor's dimensions), got {len(reps)}")
    r = z.real_view()
    if len(reps) > z.ndim:  # new leading dims, as PyTorch's repeat
        r = ops.reshape(r, *([1] * (len(reps) - z.ndim)), *r.shape)
    return _wrap(r.repeat(*reps, 1), "repeat")


def clone(z: ComplexTensor, memory_format: Any = None) -> ComplexTensor:
    return _wrap(ops.clone(z.real_view()), "clone")


def detach(z: ComplexTensor) -> ComplexTensor:
    return _wrap(z.real_view().detach(), "detach")


def to(z: ComplexTensor, *args: Any, device: Any = None, dtype: Any = None, non_blocking: bool = False,
       copy: bool = False, memory_format: Any = None) -> Any:
    """``to(device)``, ``to(dtype)``: complex64 stays; a real dtype keeps the real part and warns,
    as PyTorch's cast of complex to real does."""
    for a in args:
        if isinstance(a, bool):
            continue
        if isinstance(a, (ComplexTensor, Tensor)):
            device, dtype = a.device, a.dtype
        elif isinstance(a, dtypes.dtype) or type(a).__module__ == "torch" and "dtype" in type(a).__name__:
            dtype = a
        elif isinstance(a, str) and not a.startswith(("cpu", "cuda")):
            dtype = a
        elif device is None:
            device = a
        else:
            raise DTypeError(f"to: expected a device, a dtype or a Tensor, got {a!r} ({type_name(a)})")
    r = z.real_view()
    if device is not None:
        r = r.to(device)
    out: Any = _wrap(r, "to") if r is not z.real_view() else z
    if dtype is not None:
        d = dtypes.as_dtype("to", dtype, True)
        if d is not dtypes.complex64:
            warnings.warn("to: casting complex values to a real dtype discards the imaginary part", UserWarning,
                          stacklevel=2)
            return out.real_view()[..., 0].to(dtype=d) if d is not dtypes.float32 else out.real_view()[..., 0]
    if copy and out is z:
        out = clone(z)
    return out


def _real_key(key: Any) -> tuple:
    """The real view's key for ``z[key]``: the trailing [re, im] axis kept whole."""
    if isinstance(key, ComplexTensor):
        raise DTypeError("index: a complex tensor cannot be an index")
    k = key if isinstance(key, tuple) else (key,)
    if any(e is Ellipsis for e in k):
        return (*k, slice(None))
    return (*k, Ellipsis, slice(None))


def getitem(z: ComplexTensor, key: Any) -> ComplexTensor:
    return _wrap(ops.getitem(z.real_view(), _real_key(key)), "getitem")


def as_complex(op: str, v: Any, like: ComplexTensor) -> ComplexTensor:
    """v (a ComplexTensor, a real Tensor or a number) as a complex tensor on like's device."""
    if isinstance(v, ComplexTensor):
        return v
    p = operand_parts(op, v)
    if p is None:
        if isinstance(v, (list, tuple)) or hasattr(v, "__array__"):
            from ._create import tensor as complex_tensor

            return complex_tensor(v, dtype=dtypes.complex64, device=like.device)
        raise DTypeError(f"{op}: value must be a Tensor or a number, got {type_name(v)}")
    re, im = p
    if isinstance(re, Tensor):
        return pack(re, im, op)
    return ComplexTensor.from_real_view(tensor([re, 0.0 if im is None else im], device=like.device), op)


def setitem(z: ComplexTensor, key: Any, value: Any) -> None:
    """``z[key] = value``: the real view's slice assignment (recorded on the tape as the real one:
    differentiable in the value, and in z where z is kept)."""
    v = as_complex("setitem", value, z)
    ops.setitem(z.real_view(), _real_key(key), v.real_view())


def _complex_list(op: str, tensors: Sequence[Any]) -> list[ComplexTensor]:
    if isinstance(tensors, (ComplexTensor, Tensor)) or not isinstance(tensors, (list, tuple)):
        raise DTypeError(f"{op}: expected a list or tuple of tensors, got {type_name(tensors)}")
    if not tensors:
        raise ArgumentError(f"{op}: expected a non-empty list of tensors")
    like = next(t for t in tensors if isinstance(t, ComplexTensor))
    out = []
    for i, t in enumerate(tensors):
        if not isinstance(t, (ComplexTensor, Tensor)):
            raise DTypeError(f"{op}: expected a Tensor for tensors[{i}], got {type_name(t)}")
        out.append(as_complex(op, t, like))
    return out


def cat(tensors: Sequence[Any], dim: int = 0) -> ComplexTensor:
    zs = _complex_list("cat", tensors)
    (d,) = dims_of("cat", dim, zs[0].ndim)
    return _wrap(ops.cat([z.real_view() for z in zs], d), "cat")


def stack(tensors: Sequence[Any], dim: int = 0) -> ComplexTensor:
    zs = _complex_list("stack", tensors)
    (d,) = dims_of("stack", dim, zs[0].ndim + 1)
    return _wrap(ops.stack([z.real_view() for z in zs], d), "stack")


def inplace(op: str, fn, z: ComplexTensor, other: Any, *extra: Any) -> ComplexTensor:
    """``z.add_(other)`` and friends: z's real view takes the result's values (``copy_``: recorded
    as PyTorch's in-place ops are, so it also works on a non-leaf with grad enabled)."""
    new = fn(z, other, *extra)
    if tuple(new.shape) != tuple(z.shape):
        raise ShapeError(f"{op}: the result has shape {tuple(new.shape)}, the tensor has shape {tuple(z.shape)}")
    r = z.real_view()
    if autograd.is_grad_enabled() and r.is_leaf and r.requires_grad:
        raise ArgumentError(f"{op}: a leaf tensor that requires grad cannot be changed in place (wrap the update "
                            f"in torchlean.no_grad())")
    r.copy_(new.real_view())
    return z

