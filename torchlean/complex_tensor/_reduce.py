"""Complex reductions and products of vectors: prod, var, std, the norms (real results, as
PyTorch's), dot, vdot (conjugating its first argument), inner and outer. Each is real ops on the
parts or the real view, so the gradients are PyTorch's complex ones."""

from __future__ import annotations

import numbers
from typing import Any

from .. import dtypes, ops
from .._validate import type_name
from ..errors import ArgumentError, DTypeError
from ..ops import reduce_dim
from ..ops.einsum import dot as real_dot, inner as real_inner, outer as real_outer
from ..tensor import Tensor
from ._core import ComplexTensor
from ._einsum import expand_parts
from ._math import abs as cabs, conj, dims_of, mul, parts
from ._create import ones
from ._shape import getitem, reshape

__all__ = ["prod", "var", "std", "var_mean", "std_mean", "norm", "vector_norm", "dot", "vdot", "inner", "outer"]


def _c(op: str, z: Any) -> ComplexTensor:
    if not isinstance(z, ComplexTensor):
        raise DTypeError(f"{op}: expected a complex Tensor for input, got {type_name(z)}")
    return z


def _prod_along(z: ComplexTensor, d: int) -> ComplexTensor:
    """The product along axis d (kept, of size 1) as a tree of pairwise complex products."""
    n = z.shape[d]
    if n == 0:
        shape = list(z.shape)
        shape[d] = 1
        return ones(*shape, dtype=dtypes.complex64, device=z.device)
    while n > 1:
        h = n // 2

        def part(lo: int, hi: int, z: ComplexTensor = z) -> ComplexTensor:
            return getitem(z, (slice(None),) * d + (slice(lo, hi),))
        head = mul(part(0, h), part(h, 2 * h))
        z = head if n % 2 == 0 else ComplexTensor.from_real_view(
            ops.cat([head.real_view(), part(2 * h, n).real_view()], d), "prod")
        n = z.shape[d]
    return z


def prod(z: ComplexTensor, dim: Any = None, keepdim: bool = False, dtype: Any = None) -> ComplexTensor:
    """The product over dim (all elements by default): pairwise products, so zeros give exact
    gradients as PyTorch's."""
    _c("prod", z)
    if dtype is not None and str(dtype).split(".")[-1] not in ("complex64", "cfloat"):
        raise DTypeError(f"prod: dtype {dtype!r} is not supported for a complex input (complex64 only)")
    if dim is None:
        out = _prod_along(reshape(z, z.numel()), 0)
        return reshape(out, *([1] * z.ndim)) if keepdim else reshape(out)
    (d,) = dims_of("prod", dim, z.ndim)
    if z.ndim == 0:
        return z
    out = _prod_along(z, d)
    return out if keepdim else ComplexTensor.from_real_view(ops.squeeze(out.real_view(), d), "prod")


def var(z: ComplexTensor, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *,
        correction: Any = None) -> Tensor:
    """sum |z - mean|^2 / (N - correction) = var(re) + var(im): a real tensor, as PyTorch's."""
    x, y = parts(_c("var", z))
    return ops.add(reduce_dim.var(x, dim, unbiased, keepdim, correction=correction),
                   reduce_dim.var(y, dim, unbiased, keepdim, correction=correction))


def std(z: ComplexTensor, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *,
        correction: Any = None) -> Tensor:
    return ops.sqrt(var(_c("std", z), dim, unbiased, keepdim, correction=correction))


def var_mean(z: ComplexTensor, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *,
             correction: Any = None) -> tuple[Tensor, ComplexTensor]:
    from ._math import mean

    return var(z, dim, unbiased, keepdim, correction=correction), mean(z, dim, keepdim)


def std_mean(z: ComplexTensor, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *,
             correction: Any = None) -> tuple[Tensor, ComplexTensor]:
    from ._math import mean

    return std(z, dim, unbiased, keepdim, correction=correction), mean(z, dim, keepdim)


def _norm2(op: str, z: ComplexTensor, dim: Any, keepdim: bool) -> Tensor:
    """The 2-norm over dim of |z|: the real norm of the real view over dim and its [re, im] axis."""
    dims = tuple(range(z.ndim)) if dim is None else dims_of(op, dim, z.ndim)
    out = reduce_dim.norm(z.real_view(), 2, (*dims, z.ndim), True)
    if keepdim:
        return ops.squeeze(out, z.ndim) if z.ndim else ops.reshape(out)
    keep = [s for i, s in enumerate(out.shape[:-1]) if i not in dims]
    return ops.reshape(out, *keep) if keep else ops.reshape(out)


def norm(z: ComplexTensor, p: Any = "fro", dim: Any = None, keepdim: bool = False, dtype: Any = None) -> Tensor:
    """``torch.norm`` of a complex tensor: the real norm of |z| (2 / 'fro' from the real view)."""
    _c("norm", z)
    if dtype is not None:
        raise DTypeError("norm: dtype= is not supported (torchlean computes in float32)")
    if p is None or p == "fro" or (isinstance(p, numbers.Real) and not isinstance(p, bool) and p == 2):
        return _norm2("norm", z, dim, keepdim)
    if isinstance(p, str):
        raise ArgumentError(f"norm: p={p!r} is not supported for complex tensors (expected 'fro' or a number)")
    return reduce_dim.norm(cabs(z), p, dim, keepdim)


def vector_norm(z: ComplexTensor, ord: Any = 2, dim: Any = None, keepdim: bool = False, *,  # noqa: A002
                dtype: Any = None) -> Tensor:
    """``torch.linalg.vector_norm`` of a complex tensor (a real result)."""
    _c("linalg.vector_norm", z)
    if isinstance(ord, (str, bool)) or not isinstance(ord, numbers.Real):
        raise ArgumentError(f"linalg.vector_norm: ord must be a number, got {ord!r}")
    if dtype is not None:
        raise DTypeError("linalg.vector_norm: dtype= is not supported (torchlean computes in float32)")
    if ord == 2:
        return _norm2("linalg.vector_norm", z, dim, keepdim)
    return reduce_dim.norm(cabs(z), ord, dim, keepdim)


def dot(a: Any, b: Any) -> ComplexTensor:
    """sum a * b of two 1-D tensors (no conjugation, as ``torch.dot``)."""
    return expand_parts("dot", [a, b], lambda ts: real_dot(*ts))


def vdot(a: Any, b: Any) -> ComplexTensor:
    """sum conj(a) * b (``torch.vdot``)."""
    return dot(conj(a) if isinstance(a, ComplexTensor) else a, b)


def inner(a: Any, b: Any) -> ComplexTensor:
    return expand_parts("inner", [a, b], lambda ts: real_inner(*ts))


def outer(a: Any, b: Any) -> ComplexTensor:
    return expand_parts("outer", [a, b], lambda ts: real_outer(*ts))
