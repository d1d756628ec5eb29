"""``torchlean.linalg`` (PyTorch's ``torch.linalg``): the norms, composed from differentiable ops.

The decompositions and solvers (inv, solve, svd, qr, eigh, cholesky, det ...) need new primitives
(spec, contract, CPU and CUDA kernels): each raises ``NotSupportedError`` naming the call.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

from ._validate import type_name
from .complex_tensor import ComplexTensor
from .complex_tensor import vector_norm as complex_vector_norm
from .errors import ArgumentError, DTypeError, NotSupportedError, ShapeError
from .ops import extra as E
from .ops.elementwise import abs as _abs, mul, sqrt
from .ops.reduce import sum as _sum
from .ops.reduce_dim import amax, amin, norm as _vnorm
from .tensor import Tensor, dim_index

__all__ = ["norm", "vector_norm", "matrix_norm", "cross", "vecdot", "inv", "inv_ex", "solve", "solve_ex", "svd",
           "svdvals", "qr", "eigh", "eigvalsh", "eig", "eigvals", "cholesky", "cholesky_ex", "det", "slogdet",
           "lstsq", "pinv", "matrix_rank", "matrix_power", "matrix_exp", "lu", "lu_factor"]


def _float(op: str, x: Any) -> Tensor:
    if not isinstance(x, Tensor):
        raise DTypeError(f"linalg.{op}: expected a Tensor for input, got {type_name(x)}")
    if x.dtype.name != "float32":
        raise DTypeError(f"linalg.{op}: expected a floating point tensor, got {x.dtype!r}")
    return x


def vector_norm(x: Tensor, ord: Any = 2, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    """The ord-norm of the elements over dim (all of them by default): ord 2, 1, inf, -inf, 0 or any real."""
    if isinstance(x, ComplexTensor):  # the norm of |z|: a real result, as PyTorch's
        return complex_vector_norm(x, ord, dim, keepdim, dtype=dtype)
    _float("vector_norm", x)
    if isinstance(ord, str) or isinstance(ord, bool) or not isinstance(ord, numbers.Real):
        raise ArgumentError(f"linalg.vector_norm: ord must be a number, got {ord!r}")
    return _vnorm(x, ord, dim, keepdim, dtype)


def matrix_norm(A: Tensor, ord: Any = "fro", dim: Any = (-2, -1), keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    """'fro' (the default), 1, -1, inf or -inf over the two dims ``dim`` (matrices in the last two
    by default); 'nuc', 2 and -2 need singular values (NotSupportedError)."""
    _float("matrix_norm", A)
    if dtype is not None:
        raise DTypeError("linalg.matrix_norm: dtype= is not supported (torchlean computes in float32)")
    if A.ndim < 2:
        raise ShapeError(f"linalg.matrix_norm: the input must have at least 2 dimensions, got shape {tuple(A.shape)}")
    if not isinstance(dim, (tuple, list)) or len(dim) != 2:
        raise ArgumentError(f"linalg.matrix_norm: dim must be a 2-tuple, got {dim!r}")
    r, c = (dim_index("linalg.matrix_norm", d, A.ndim) for d in dim)
    if r == c:
        raise ArgumentError(f"linalg.matrix_norm: dims must be different, got {dim!r}")
    if ord == "fro":
        return sqrt(_sum(mul(A, A), (r, c), keepdim))
    if ord in ("nuc", 2, -2):
        raise NotSupportedError(f"linalg.matrix_norm: ord={ord!r} needs singular values (an SVD primitive), "
                                f"not supported yet")
    if isinstance(ord, str) or isinstance(ord, bool) or not isinstance(ord, numbers.Real) or \
            abs(ord) not in (1, math.inf):
        raise ArgumentError(f"linalg.matrix_norm: ord must be 'fro', 'nuc', 1, -1, 2, -2, inf or -inf, got {ord!r}")
    # ord 1: the largest column sum of |A| (sum over rows); inf: the largest row sum
    summed, other = (r, c) if abs(ord) == 1 else (c, r)
    sums = _sum(_abs(A), summed, True)
    ext = (amax if ord > 0 else amin)(sums, other, True)
    if keepdim:
        return ext
    from .ops.shape import squeeze

    return squeeze(squeeze(ext, max(r, c)), min(r, c))


def norm(A: Tensor, ord: Any = None, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    """``vector_norm`` when dim is an int (or ord is None and dim is None: all elements, 2-norm), or
    the input is 1-D; ``matrix_norm`` when dim is a 2-tuple or the input is 2-D."""
    _float("norm", A)
    if dim is not None and not isinstance(dim, (tuple, list)):
        dim = (dim,)
    if ord is None:
        if dim is not None and len(dim) == 2:
            return matrix_norm(A, "fro", dim, keepdim, dtype=dtype)
        return vector_norm(A, 2, dim, keepdim, dtype=dtype)
    if dim is None:
        if A.ndim == 1:
            return vector_norm(A, ord, None, keepdim, dtype=dtype)
        if A.ndim == 2:
            return matrix_norm(A, ord, (-2, -1), keepdim, dtype=dtype)
        raise ShapeError(f"linalg.norm: with ord={ord!r} and no dim, the input must be 1-D or 2-D, got "
                         f"{A.ndim}-D")
    if len(dim) == 1:
        return vector_norm(A, ord, dim, keepdim, dtype=dtype)
    if len(dim) == 2:
        return matrix_norm(A, ord, dim, keepdim, dtype=dtype)
    raise ArgumentError(f"linalg.norm: dim must be an int or a 2-tuple, got {dim!r}")


def cross(input: Tensor, other: Tensor, *, dim: int = -1) -> Tensor:  # noqa: A002
    return E.cross(input, other, dim)


def vecdot(x: Tensor, y: Tensor, *, dim: int = -1) -> Tensor:
    return _sum(mul(x, y), dim)


def _unsupported(name: str):
    def fn(*args: Any, **kwargs: Any) -> Any:
        raise NotSupportedError(f"linalg.{name}: not supported yet (it needs a new primitive: spec, contract, CPU "
                                f"and CUDA kernels); torchlean's linalg has norm, vector_norm, matrix_norm, cross "
                                f"and vecdot")
    fn.__name__ = name
    fn.__qualname__ = name
    return fn


(inv, inv_ex, solve, solve_ex, svd, svdvals, qr, eigh, eigvalsh, eig, eigvals, cholesky, cholesky_ex, det, slogdet,
 lstsq, pinv, matrix_rank, matrix_power, matrix_exp, lu, lu_factor) = (
    _unsupported(n) for n in ("inv", "inv_ex", "solve", "solve_ex", "svd", "svdvals", "qr", "eigh", "eigvalsh", "eig",
                              "eigvals", "cholesky", "cholesky_ex", "det", "slogdet", "lstsq", "pinv", "matrix_rank",
                              "matrix_power", "matrix_exp", "lu", "lu_factor"))
