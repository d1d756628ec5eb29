"""Reductions with dim/keepdim: max/min (values and indices), argmax/argmin, amax/amin,
norm, var/std, logsumexp, prod, all/any, cumsum/cumprod, median.

Composed. Which element wins a max/min (and every index result) is decided on the host from the
values (a device-to-host copy of the input on CUDA); the values themselves are gathered on the
device from those positions, so they are exact and their gradient goes to the winner (PyTorch's
rule for max/min with a dim). amax/amin split the gradient evenly between tied maxima (PyTorch's
rule for amax/amin). Sums use the deterministic reduce primitives (ops.reduce.sum); prod and the
scans are trees of products and sums (log2(n) steps of shifted gathers).
"""

from __future__ import annotations

import collections
import math
import numbers
from typing import Any

import numpy as np

from .. import autograd
from .._validate import bool_arg, type_name
from ..errors import ArgumentError, DTypeError, IndexOutOfRangeError
from ..runtime import primitives as P
from ..runtime.buffer import Buffer
from ._base import Tensor, dim_index, new, numel, tensor_arg
from .elementwise import abs as abs_, add, div, exp, log, maximum, minimum, mul, sqrt, sub
from .math import pow as pow_
from .reduce import mean, sum
from .results import array_result, bool_result, host_values, int_result
from .select import narrow, take_flat
from .shape import cat, reshape, squeeze

# (norm is not exported: ops.norm is the normalization family's module; torchlean.norm binds it)
__all__ = ["max", "min", "argmax", "argmin", "amax", "amin", "aminmax", "var", "std", "var_mean",
           "std_mean", "logsumexp", "prod", "all", "any", "cumsum", "cumprod", "median", "count_nonzero",
           "return_types"]

_builtin_max, _builtin_min, _builtin_sum, _builtin_any, _builtin_all = max, min, sum, any, all


class return_types:  # noqa: N801 - torch.return_types
    max = collections.namedtuple("max", ["values", "indices"])
    min = collections.namedtuple("min", ["values", "indices"])
    sort = collections.namedtuple("sort", ["values", "indices"])
    topk = collections.namedtuple("topk", ["values", "indices"])
    median = collections.namedtuple("median", ["values", "indices"])
    aminmax = collections.namedtuple("aminmax", ["min", "max"])


def _keepdim(op: str, keepdim: Any) -> bool:
    return keepdim if keepdim is False or keepdim is True else bool_arg(op, "keepdim", keepdim)


def _dims(op: str, dim: Any, rank: int) -> list[int]:
    if dim is None:
        return list(range(rank))
    if isinstance(dim, (list, tuple)):
        ds = [dim_index(op, d, rank) for d in dim]
        if len(set(ds)) != len(ds):
            raise ArgumentError(f"{op}: dim {tuple(dim)} names a dim twice")
        return sorted(ds) if ds else list(range(rank))
    return [dim_index(op, dim, rank)]


def _arg_along(op: str, vals: np.ndarray, d: int, largest: bool) -> np.ndarray:
    """Index of the max (min) along d; NaN wins (the first NaN), as in PyTorch."""
    if vals.shape[d] == 0:
        raise IndexOutOfRangeError(f"{op}: cannot reduce over dim {d} of size 0 (the operation has no identity)")
    if vals.dtype == np.bool_:
        vals = vals.astype(np.int64)
    return np.argmax(vals, axis=d) if largest else np.argmin(vals, axis=d)


def _take_along(x: Tensor, idx: np.ndarray, d: int, keepdim: bool) -> Tensor:
    pos = np.take_along_axis(np.arange(x.numel(), dtype=np.int64).reshape(x.shape), np.expand_dims(idx, d), axis=d)
    out = take_flat(x, pos)
    return out if keepdim else squeeze(out, d)


def _max_min(op: str, largest: bool, x: Any, dim: Any = None, keepdim: bool = False, other: Any = None) -> Any:
    if isinstance(dim, Tensor):  # torch.max(a, b): the elementwise maximum
        other, dim = dim, None
    if other is not None:
        return (maximum if largest else minimum)(x, other)
    tensor_arg(op, "input", x)
    if dim is None:
        if x.numel() == 0:
            raise IndexOutOfRangeError(f"{op}: cannot reduce an empty tensor (the operation has no identity)")
        return (amax if largest else amin)(x)
    d = dim_index(op, dim, _builtin_max(x.ndim, 1))
    keep = _keepdim(op, keepdim)
    if x.ndim == 0:
        return getattr(return_types, op)(x, int_result(np.zeros((), np.int64), x.device))
    idx = _arg_along(op, host_values(x), d, largest)
    vals = _take_along(x, idx, d, keep)
    return getattr(return_types, op)(vals, int_result(np.expand_dims(idx, d) if keep else idx, x.device))


def max(x: Any, dim: Any = None, keepdim: bool = False, *, other: Any = None) -> Any:
    return _max_min("max", True, x, dim, keepdim, other)


def min(x: Any, dim: Any = None, keepdim: bool = False, *, other: Any = None) -> Any:
    return _max_min("min", False, x, dim, keepdim, other)


def _argext(op: str, largest: bool, x: Tensor, dim: Any, keepdim: bool) -> Tensor:
    tensor_arg(op, "input", x)
    keep = _keepdim(op, keepdim)
    vals = host_values(x)
    if dim is None:
        if vals.size == 0:
            raise IndexOutOfRangeError(f"{op}: cannot reduce an empty tensor")
        i = _arg_along(op, vals.reshape(-1), 0, largest)
        return int_result(np.full((1,) * x.ndim, i) if keep else np.array(i), x.device)
    d = dim_index(op, dim, _builtin_max(x.ndim, 1))
    if x.ndim == 0:
        return int_result(np.zeros((), np.int64), x.device)
    idx = _arg_along(op, vals, d, largest)
    return int_result(np.expand_dims(idx, d) if keep else idx, x.device)


def argmax(x: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
    return _argext("argmax", True, x, dim, keepdim)


def argmin(x: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
    return _argext("argmin", False, x, dim, keepdim)


def _aext(op: str, largest: bool, x: Tensor, dim: Any, keepdim: bool) -> Tensor:
    tensor_arg(op, "input", x)
    keep = _keepdim(op, keepdim)
    axes = tuple(_dims(op, dim, x.ndim))
    vals = host_values(x)
    if x._buf is None:
        if vals.size == 0 or _builtin_any(x.shape[a] == 0 for a in axes):
            raise IndexOutOfRangeError(f"{op}: cannot reduce over an empty dim (the operation has no identity)")
        r = (np.max if largest else np.min)(vals, axis=axes, keepdims=keep)
        return array_result(np.asarray(r), x.device)
    if _builtin_any(x.shape[a] == 0 for a in axes) or (x.ndim and vals.size == 0):
        raise IndexOutOfRangeError(f"{op}: cannot reduce over an empty dim (the operation has no identity)")
    with np.errstate(invalid="ignore"):
        kept = (np.max if largest else np.min)(vals, axis=axes, keepdims=True)  # NaN propagates, as in torch
        tie = (vals == kept) | (np.isnan(vals) & np.isnan(kept))
    count = np.sum(tie, axis=axes, keepdims=True)
    weight = (tie / np.maximum(count, 1)).astype(np.float32)
    out_shape = kept.shape if keep else tuple(s for j, s in enumerate(x.shape) if j not in axes)
    yb = Buffer.from_numpy(kept.astype(np.float32).reshape(-1), x.device)
    kshape, shape = kept.shape, x.shape

    def vjp(g: Buffer):
        gb = P.broadcast_to(g, kshape, shape, tuple(j + 1 for j in range(len(shape)))) if kshape != shape else g
        return (P.mul(gb, Buffer.from_numpy(weight.reshape(-1), g.device)),)

    return autograd.record(op, new(yb, out_shape), (x,), vjp)


def amax(x: Tensor, dim: Any = (), keepdim: bool = False) -> Tensor:
    return _aext("amax", True, x, None if dim == () else dim, keepdim)


def amin(x: Tensor, dim: Any = (), keepdim: bool = False) -> Tensor:
    return _aext("amin", False, x, None if dim == () else dim, keepdim)


def aminmax(x: Tensor, *, dim: Any = None, keepdim: bool = False) -> Any:
    return return_types.aminmax(amin(x, () if dim is None else dim, keepdim), amax(x, () if dim is None else dim,
                                                                                  keepdim))


def norm(x: Tensor, p: Any = "fro", dim: Any = None, keepdim: bool = False, dtype: Any = None) -> Tensor:
    """Vector norms over dim (all elements by default): p = 2/'fro', 1, inf, -inf, 0 or any real p."""
    tensor_arg("norm", "input", x)
    if dtype is not None:
        raise DTypeError("norm: dtype= is not supported (torchlean computes in float32)")
    if x._buf is None:
        raise DTypeError(f"norm: expected a floating point tensor, got {x.dtype}")
    keep = _keepdim("norm", keepdim)
    if p is None or p == "fro":
        p = 2
    if isinstance(p, str):
        raise ArgumentError(f"norm: p={p!r} is not supported (matrix norms other than 'fro'; expected a number)")
    if isinstance(p, bool) or not isinstance(p, numbers.Real):
        raise ArgumentError(f"norm: p must be a number or 'fro', got {type_name(p)}")
    p = float(p)
    if p == 2.0:
        return sqrt(sum(mul(x, x), dim, keep))
    if p == 1.0:
        return sum(abs_(x), dim, keep)
    if p == math.inf:
        return amax(abs_(x), () if dim is None else dim, keep)
    if p == -math.inf:
        return amin(abs_(x), () if dim is None else dim, keep)
    if p == 0.0:
        nz = (host_values(x) != 0).astype(np.float32)
        axes = tuple(_dims("norm", dim, x.ndim))
        return new(Buffer.from_numpy(np.sum(nz, axis=axes, keepdims=keep).astype(np.float32).reshape(-1), x.device),
                   np.sum(nz, axis=axes, keepdims=keep).shape)
    return pow_(sum(pow_(abs_(x), p), dim, keep), 1.0 / p)


def _correction(op: str, unbiased: Any, correction: Any) -> float:
    if correction is not None:
        if isinstance(correction, bool) or not isinstance(correction, numbers.Real):
            raise ArgumentError(f"{op}: correction must be a number, got {type_name(correction)}")
        return float(correction)
    if unbiased is None:
        return 1.0
    return 1.0 if bool_arg(op, "unbiased", unbiased) else 0.0


def _var(op: str, x: Tensor, dim: Any, unbiased: Any, keepdim: bool, correction: Any) -> tuple[Tensor, Tensor]:
    tensor_arg(op, "input", x)
    if isinstance(dim, bool):  # torch.var(x, True): unbiased given positionally
        dim, unbiased = None, dim
    keep = _keepdim(op, keepdim)
    c = _correction(op, unbiased, correction)
    axes = _dims(op, dim, x.ndim)
    n = numel([x.shape[a] for a in axes])
    m = mean(x, axes, True)
    dev = sub(x, m)
    ss = sum(mul(dev, dev), axes, keep)
    denom = _builtin_max(n - c, 0.0)
    var = div(ss, float(denom)) if denom else mul(ss, float("inf")) if n else mul(ss, float("nan"))
    return var, (m if keep else reshape(m, ss.shape))


def var(x: Tensor, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *, correction: Any = None) -> Tensor:
    return _var("var", x, dim, unbiased, keepdim, correction)[0]


def std(x: Tensor, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *, correction: Any = None) -> Tensor:
    return sqrt(_var("std", x, dim, unbiased, keepdim, correction)[0])


def var_mean(x: Tensor, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *,
             correction: Any = None) -> tuple[Tensor, Tensor]:
    return _var("var_mean", x, dim, unbiased, keepdim, correction)


def std_mean(x: Tensor, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *,
             correction: Any = None) -> tuple[Tensor, Tensor]:
    v, m = _var("std_mean", x, dim, unbiased, keepdim, correction)
    return sqrt(v), m


def logsumexp(x: Tensor, dim: Any, keepdim: bool = False) -> Tensor:
    """log(sum(exp(x))) over dim, shifted by the (constant) max for stability; an infinite max
    shifts by 0 (so all -inf gives -inf and +inf gives +inf, as in PyTorch)."""
    tensor_arg("logsumexp", "input", x)
    keep = _keepdim("logsumexp", keepdim)
    axes = _dims("logsumexp", dim, x.ndim)
    if x._buf is None:
        x = x.float()
    if x.numel() == 0 or _builtin_any(x.shape[a] == 0 for a in axes):
        return log(sum(exp(x), axes, keep))
    with np.errstate(invalid="ignore"):
        m = np.max(host_values(x), axis=tuple(axes), keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0).astype(np.float32)
    mt = new(Buffer.from_numpy(m.reshape(-1), x.device), m.shape)
    out = add(log(sum(exp(sub(x, mt)), axes, True)), mt)
    return out if keep else reshape(out, tuple(s for j, s in enumerate(x.shape) if j not in axes))


def prod(x: Tensor, dim: Any = None, keepdim: bool = False, dtype: Any = None) -> Tensor:
    """Product over dim (all elements by default) as a tree of pairwise products: exact gradients,
    zeros included."""
    tensor_arg("prod", "input", x)
    if x._buf is None:
        vals = host_values(x).astype(np.int64)
        r = np.prod(vals) if dim is None else np.prod(vals, axis=dim_index("prod", dim, _builtin_max(x.ndim, 1)),
                                                       keepdims=_keepdim("prod", keepdim))
        return int_result(r, x.device)
    keep = _keepdim("prod", keepdim)
    if dim is None:
        out = _prod_along(reshape(x, (x.numel(),)), 0)
        return reshape(out, (1,) * x.ndim if keep else ())
    d = dim_index("prod", dim, _builtin_max(x.ndim, 1))
    if x.ndim == 0:
        return mul(x, 1.0)
    out = _prod_along(x, d)
    return out if keep else squeeze(out, d)


def _prod_along(y: Tensor, d: int) -> Tensor:
    """Product along d, keeping d with size 1."""
    n = y.shape[d]
    if n == 0:
        from ..tensor import ones

        shape = list(y.shape)
        shape[d] = 1
        return ones(*shape, device=y.device)
    while n > 1:
        h = n // 2
        r = mul(narrow(y, d, 0, h), narrow(y, d, h, h))
        if n % 2:
            r = cat([r, narrow(y, d, 2 * h, 1)], d)
        y, n = r, h + n % 2
    return y


def _bool_reduce(op: str, fn, x: Tensor, dim: Any, keepdim: bool) -> Tensor:
    tensor_arg(op, "input", x)
    keep = _keepdim(op, keepdim)
    vals = host_values(x) != 0
    if dim is None:
        return bool_result(np.asarray(fn(vals)), x.device)
    axes = tuple(_dims(op, dim, _builtin_max(x.ndim, 1))) if x.ndim else None
    return bool_result(np.asarray(fn(vals, axis=axes, keepdims=keep)), x.device)


def all(x: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
    return _bool_reduce("all", np.all, x, dim, keepdim)


def any(x: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
    return _bool_reduce("any", np.any, x, dim, keepdim)


def count_nonzero(x: Tensor, dim: Any = None) -> Tensor:
    tensor_arg("count_nonzero", "input", x)
    vals = host_values(x) != 0
    axes = None if dim is None else tuple(_dims("count_nonzero", dim, x.ndim))
    return int_result(np.sum(vals, axis=axes), x.device)


def _scan(op: str, x: Tensor, dim: int, combine, fill: float) -> Tensor:
    """Inclusive scan along dim by doubling (Hillis-Steele): log2(n) steps of y = y (+) shift(y, k)."""
    d = dim_index(op, dim, _builtin_max(x.ndim, 1))
    if x.ndim == 0:
        return mul(x, 1.0)
    n = x.shape[d]
    pos = np.arange(x.numel(), dtype=np.int64).reshape(x.shape)
    coord = np.indices(x.shape, dtype=np.int64)[d] if x.numel() else np.zeros(x.shape, np.int64)
    stride = numel(x.shape[d + 1:])
    y, k = x, 1
    while k < n:
        src = np.where(coord >= k, pos - k * stride, -1)
        shifted = take_flat(y, src)
        if fill != 0.0:
            pad = np.where(coord >= k, 0.0, fill).astype(np.float32)
            shifted = add(shifted, new(Buffer.from_numpy(pad.reshape(-1), x.device), x.shape))
        y = combine(y, shifted)
        k *= 2
    return y if y is not x else mul(x, 1.0)


def cumsum(x: Tensor, dim: int, dtype: Any = None) -> Tensor:
    tensor_arg("cumsum", "input", x)
    if x._buf is None:
        return int_result(np.cumsum(host_values(x).astype(np.int64), axis=dim_index("cumsum", dim, _builtin_max(x.ndim, 1))),
                          x.device)
    return _scan("cumsum", x, dim, add, 0.0)


def cumprod(x: Tensor, dim: int, dtype: Any = None) -> Tensor:
    tensor_arg("cumprod", "input", x)
    if x._buf is None:
        return int_result(np.cumprod(host_values(x).astype(np.int64), axis=dim_index("cumprod", dim, _builtin_max(x.ndim, 1))),
                          x.device)
    return _scan("cumprod", x, dim, mul, 1.0)


def median(x: Tensor, dim: Any = None, keepdim: bool = False) -> Any:
    """The lower median (as PyTorch); with dim, (values, indices)."""
    tensor_arg("median", "input", x)
    vals = host_values(x)
    if dim is None:
        if vals.size == 0:
            return new(Buffer.from_numpy(np.array([np.nan], np.float32), x.device), ())
        flat = reshape(x, -1)
        order = np.argsort(vals.reshape(-1), kind="stable")
        nan = np.isnan(vals.reshape(-1)) if vals.dtype.kind == "f" else np.zeros(vals.size, bool)
        i = int(np.flatnonzero(nan)[0]) if nan.any() else int(order[(vals.size - 1) // 2])
        return reshape(take_flat(flat, np.array([i])), ())
    d = dim_index("median", dim, _builtin_max(x.ndim, 1))
    keep = _keepdim("median", keepdim)
    if x.ndim == 0:
        return return_types.median(mul(x, 1.0), int_result(np.zeros((), np.int64), x.device))
    n = x.shape[d]
    if n == 0:
        raise IndexOutOfRangeError(f"median: cannot reduce over dim {d} of size 0")
    order = np.argsort(vals, axis=d, kind="stable")
    idx = np.take(order, (n - 1) // 2, axis=d)
    if vals.dtype.kind == "f":
        nan = np.isnan(vals)
        has = nan.any(axis=d)
        idx = np.where(has, np.argmax(nan, axis=d), idx)
    v = _take_along(x, idx, d, keep)
    return return_types.median(v, int_result(np.expand_dims(idx, d) if keep else idx, x.device))
