"""The long tail of everyday PyTorch functions: where, masked_fill, nonzero, unfold,
index_add/index_fill/index_copy, cross, cdist, isclose/allclose/equal, broadcast_tensors, fmod,
mode, histc and erfinv.

Composed, no new primitive. A selection (``where``, ``masked_fill``, ``index_fill``) reads the
mask on the host, builds one flat position per output element into ``cat([a, b])`` and moves the
values with ``take_flat`` (one ``gather_vec``): exact (a move never rounds, so inf and NaN pass
untouched, unlike ``a * m + b * (1 - m)``) and differentiable in both operands (the VJP is the
scatter-add of that gather). ``mode`` and ``histc`` are host computations: PyTorch does not
differentiate them either.
"""

from __future__ import annotations

import collections
import math
import numbers
from typing import Any, Sequence

import numpy as np

from .._validate import type_name
from .. import dtypes
from ..errors import ArgumentError, DTypeError, IndexOutOfRangeError, NotSupportedError, ShapeError
from ._base import Tensor, broadcast_shapes, dim_index, numel, operand, same_device, tensor_arg
from . import integer
from .elementwise import abs as abs_, div, mul, sub
from .math import pow as pow_, trunc
from .reduce import sum as sum_
from .reduce_dim import amax
from .results import array_result, bool_result, host_values, int_result
from .select import narrow, scatter, scatter_add, take_flat
from .shape import cat, expand, reshape, unsqueeze

__all__ = ["where", "masked_fill", "nonzero", "argwhere", "unfold", "index_add", "index_fill", "index_copy",
           "cross", "cdist", "isclose", "allclose", "equal", "broadcast_to", "broadcast_tensors", "fmod",
           "mode", "histc", "erfinv"]


def _is_scalar(v: Any) -> bool:
    return isinstance(v, (numbers.Number, np.number, np.bool_)) and not isinstance(v, complex)


def _bool_mask(op: str, name: str, mask: Any) -> np.ndarray:
    if not isinstance(mask, Tensor):
        raise DTypeError(f"{op}: expected a bool Tensor for {name}, got {type_name(mask)}")
    if mask.dtype is not dtypes.bool_:
        raise DTypeError(f"{op}: expected a bool tensor for {name}, got {mask.dtype!r} (use {name}.bool())")
    return host_values(mask)


def _select(cond: np.ndarray, a: Tensor, b: Tensor) -> Tensor:
    """out = a where cond else b; a, b float tensors of cond's shape, one device."""
    n = cond.size
    pick = np.arange(n, dtype=np.int64)
    pick = np.where(cond.reshape(-1), pick, pick + n)
    return take_flat(cat([reshape(a, -1), reshape(b, -1)], 0), pick.reshape(cond.shape))


def _as_tensor(op: str, v: Any, like: Tensor, d: dtypes.dtype) -> Tensor:
    """A scalar (or a tensor) operand as a tensor of dtype ``d`` on like's device."""
    if isinstance(v, Tensor):
        return v if v.dtype is d else v.to(d)
    from ..tensor import tensor

    return tensor(v, dtype=d, device=like.device)


def where(condition: Any, input: Any = None, other: Any = None) -> Any:  # noqa: A002
    """``where(condition, input, other)``: input where condition else other, broadcast together
    (numbers allowed; the dtype is PyTorch's promotion of input and other); differentiable in both.
    ``where(condition)`` is ``nonzero(condition, as_tuple=True)``."""
    if input is None and other is None:
        return nonzero(condition, as_tuple=True)
    if input is None or other is None:
        raise ArgumentError("where: expected where(condition) or where(condition, input, other)")
    cond = _bool_mask("where", "condition", condition)
    for name, v in (("input", input), ("other", other)):
        if not isinstance(v, Tensor) and not _is_scalar(v):
            raise DTypeError(f"where: expected a Tensor or a number for {name}, got {type_name(v)}")
    like = condition
    tensors = [v for v in (input, other) if isinstance(v, Tensor)]
    same_device("where", condition, *tensors)
    shape = broadcast_shapes("where", cond.shape, *(t.shape for t in tensors))
    d = integer.result_type(input, other)
    if d is dtypes.float32:
        a = expand(_as_tensor("where", input, like, d), shape)
        b = expand(_as_tensor("where", other, like, d), shape)
        return _select(np.broadcast_to(cond, shape), a, b)
    av = host_values(input) if isinstance(input, Tensor) else input
    bv = host_values(other) if isinstance(other, Tensor) else other
    return array_result(np.where(np.broadcast_to(cond, shape), av, bv).astype(d.np), condition.device)


def masked_fill(x: Tensor, mask: Any, value: Any) -> Tensor:
    """x with ``value`` (a number or a 0-d tensor) where the bool ``mask`` (broadcast) is True; out of
    place, differentiable in x (where kept) and in a 0-d tensor value (summed over the filled places)."""
    tensor_arg("masked_fill", "input", x)
    m = _bool_mask("masked_fill", "mask", mask)
    if isinstance(value, Tensor):
        if value.ndim != 0:
            raise ShapeError(f"masked_fill: only supports a 0-dimensional value tensor, but got tensor with "
                             f"{value.ndim} dimension(s)")
        same_device("masked_fill", x, value)
    elif not _is_scalar(value):
        raise DTypeError(f"masked_fill: expected a number or a 0-d Tensor for value, got {type_name(value)}")
    shape = broadcast_shapes("masked_fill", x.shape, m.shape)
    cond = np.broadcast_to(m, shape)
    if x.dtype is not dtypes.float32:
        vv = value.item() if isinstance(value, Tensor) else value
        if x.dtype is not dtypes.bool_ and isinstance(vv, float) and math.isfinite(vv):
            vv = math.trunc(vv)
        out = np.where(cond, np.array(vv).astype(x.dtype.np) if math.isfinite(float(vv)) else 0,
                       np.broadcast_to(host_values(x), shape))
        return array_result(out.astype(x.dtype.np), x.device)
    v = value.float() if isinstance(value, Tensor) else _as_tensor("masked_fill", float(value), x, dtypes.float32)
    return _select(cond, expand(v, shape), expand(x, shape))


def nonzero(x: Tensor, *, as_tuple: bool = False) -> Any:
    """The indices of the nonzero elements: an int64 tensor (n, ndim), or with ``as_tuple`` one int64
    tensor per dim (a 0-d input counts as 1-d)."""
    tensor_arg("nonzero", "input", x)
    vals = host_values(x)
    if as_tuple:
        idx = np.nonzero(vals.reshape(1) if vals.ndim == 0 else vals)
        return tuple(int_result(i, x.device) for i in idx)
    return int_result(np.argwhere(vals), x.device)


def argwhere(x: Tensor) -> Tensor:
    return nonzero(x)


def unfold(x: Tensor, dimension: int, size: int, step: int) -> Tensor:
    """``Tensor.unfold``: every window of ``size`` elements along ``dimension``, ``step`` apart, as a
    new last dim (dimension's size becomes the number of windows). Differentiable."""
    tensor_arg("unfold", "input", x)
    for name, v in (("size", size), ("step", step)):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise ArgumentError(f"unfold: {name} must be an integer, got {v!r}")
    if step <= 0:
        raise ArgumentError(f"unfold: step is {step} but must be > 0")
    shape = x.shape if x.ndim else (1,)
    d = dim_index("unfold", dimension, len(shape))
    if not 0 <= size <= shape[d]:
        raise ShapeError(f"unfold: maximum size for tensor at dimension {d} is {shape[d]} but size is {size}")
    pos = np.arange(numel(shape), dtype=np.int64).reshape(shape)
    win = np.lib.stride_tricks.sliding_window_view(pos, size, axis=d)
    win = np.take(win, np.arange(0, win.shape[d], step), axis=d)
    if x.ndim == 0:
        win = win.reshape(win.shape[1:])
    return take_flat(x, np.ascontiguousarray(win))


def _index_dim(op: str, x: Tensor, dim: int, index: Any) -> tuple[int, np.ndarray]:
    from ._base import host_indices

    d = dim_index(op, dim, max(x.ndim, 1))
    idx = host_indices(op, "index", index).reshape(-1) if not (
        isinstance(index, Tensor) and index.ndim > 1) else None
    if idx is None:
        raise ShapeError(f"{op}: index must be a vector or a scalar, got shape {index.shape}")
    size = x.shape[d] if x.ndim else 1
    if idx.size and (idx.min() < -size or idx.max() >= size):
        bad = idx[(idx < -size) | (idx >= size)][0]
        raise IndexOutOfRangeError(f"{op}: index {int(bad)} is out of bounds for dim {d} with size {size}")
    return d, np.where(idx < 0, idx + size, idx)


def _along(idx: np.ndarray, d: int, shape: Sequence[int]) -> np.ndarray:
    """index placed along dim d and broadcast to ``shape`` (shape[d] == len(idx))."""
    view = [1] * len(shape)
    if shape:
        view[d] = idx.size
    return np.ascontiguousarray(np.broadcast_to(idx.reshape(view), tuple(shape)))


def _source(op: str, x: Tensor, d: int, idx: np.ndarray, source: Any) -> Tensor:
    tensor_arg(op, "source", source)
    want = list(x.shape)
    if want:
        want[d] = idx.size
    if tuple(source.shape) != tuple(want) and not (not want and source.numel() == idx.size):
        raise ShapeError(f"{op}: source of shape {tuple(source.shape)} does not match the indexed shape "
                         f"{tuple(want)}")
    return source


def index_add(x: Tensor, dim: int, index: Any, source: Tensor, *, alpha: Any = 1) -> Tensor:
    """x with ``alpha * source[.., j, ..]`` added at ``x[.., index[j], ..]`` along dim (repeats add up)."""
    tensor_arg("index_add", "input", x)
    d, idx = _index_dim("index_add", x, dim, index)
    src = _source("index_add", x, d, idx, source)
    if alpha != 1:
        src = mul(src, alpha) if src.dtype is dtypes.float32 else integer.arith("mul", src, alpha)
    if not x.ndim:
        return reshape(index_add(reshape(x, 1), 0, idx, reshape(src, -1)), ())
    return scatter_add(x, d, _along(idx, d, src.shape), src)


def index_copy(x: Tensor, dim: int, index: Any, source: Tensor) -> Tensor:
    """x with ``x[.., index[j], ..] = source[.., j, ..]`` along dim."""
    tensor_arg("index_copy", "input", x)
    d, idx = _index_dim("index_copy", x, dim, index)
    src = _source("index_copy", x, d, idx, source)
    if not x.ndim:
        return reshape(index_copy(reshape(x, 1), 0, idx, reshape(src, -1)), ())
    return scatter(x, d, _along(idx, d, src.shape), src)


def index_fill(x: Tensor, dim: int, index: Any, value: Any) -> Tensor:
    """x with ``value`` (a number or a 0-d tensor) in every slice ``x[.., index[j], ..]`` along dim."""
    tensor_arg("index_fill", "input", x)
    d, idx = _index_dim("index_fill", x, dim, index)
    hit = np.zeros(x.shape[d] if x.ndim else 1, np.bool_)
    hit[idx] = True
    mask = _along(hit, d, x.shape) if x.ndim else hit.reshape(())
    return masked_fill(x, bool_result(mask, x.device), value)


def cross(a: Tensor, b: Tensor, dim: int | None = None) -> Tensor:
    """The cross product of 3-vectors along ``dim`` (PyTorch's default: the first dim of size 3,
    as ``torch.cross`` without dim). Differentiable."""
    tensor_arg("cross", "input", a)
    tensor_arg("cross", "other", b)
    shape = broadcast_shapes("cross", a.shape, b.shape)
    a, b = operand("cross", a, a), operand("cross", b, a)
    a, b = expand(a, shape), expand(b, shape)
    if dim is None:
        dims = [i for i, s in enumerate(shape) if s == 3]
        if not dims:
            raise ShapeError(f"cross: no dimension of size 3 in input of shape {tuple(shape)}")
        d = dims[0]
    else:
        d = dim_index("cross", dim, len(shape))
    if shape[d] != 3:
        raise ShapeError(f"cross: dimension {dim} does not have size 3 (shape {tuple(shape)})")
    ai = [narrow(a, d, i, 1) for i in range(3)]
    bi = [narrow(b, d, i, 1) for i in range(3)]
    parts = [sub(mul(ai[(i + 1) % 3], bi[(i + 2) % 3]), mul(ai[(i + 2) % 3], bi[(i + 1) % 3])) for i in range(3)]
    return cat(parts, d)


def _safe_sqrt(sq: Tensor) -> Tensor:
    """sqrt(sq) with sq clamped at 0 and a zero gradient where sq <= 0 (PyTorch's cdist backward)."""
    from .elementwise import sqrt

    pos = host_values(sq) > 0
    ones = expand(_as_tensor("cdist", 1.0, sq, dtypes.float32), sq.shape)
    zeros = expand(_as_tensor("cdist", 0.0, sq, dtypes.float32), sq.shape)
    return _select(pos, sqrt(_select(pos, sq, ones)), zeros)


def cdist(x1: Tensor, x2: Tensor, p: float = 2.0, compute_mode: str = "use_mm_for_euclid_dist_if_necessary") -> Tensor:
    """Pairwise p-norm distances between the rows of x1 (.., P, M) and x2 (.., R, M): (.., P, R).
    p=2 uses the matmul form |x|^2 + |y|^2 - 2 x.y (clamped at 0), p=1 and others the broadcast
    differences. Differentiable (a zero distance has a zero gradient, as in PyTorch)."""
    from .linalg import matmul
    from .shape import transpose

    tensor_arg("cdist", "x1", x1)
    tensor_arg("cdist", "x2", x2)
    if x1.ndim < 2 or x2.ndim < 2:
        raise ShapeError(f"cdist: x1 and x2 must have at least 2 dims, got shapes {tuple(x1.shape)} and "
                         f"{tuple(x2.shape)}")
    if x1.shape[-1] != x2.shape[-1]:
        raise ShapeError(f"cdist: x1 and x2 must have the same number of columns, got {x1.shape[-1]} and "
                         f"{x2.shape[-1]}")
    if isinstance(p, bool) or not isinstance(p, numbers.Real) or p < 0:
        raise ArgumentError(f"cdist: p must be a non-negative number, got {p!r}")
    x1, x2 = operand("cdist", x1, x1), operand("cdist", x2, x1)
    same_device("cdist", x1, x2)
    batch = broadcast_shapes("cdist", x1.shape[:-2], x2.shape[:-2])
    x1 = expand(x1, tuple(batch) + tuple(x1.shape[-2:]))
    x2 = expand(x2, tuple(batch) + tuple(x2.shape[-2:]))
    if p == 2 and compute_mode != "donot_use_mm_for_euclid_dist":
        n1 = sum_(mul(x1, x1), -1, True)
        n2 = sum_(mul(x2, x2), -1, True)
        sq = sub(_add(n1, transpose(n2, -1, -2)), mul(matmul(x1, transpose(x2, -1, -2)), 2.0))
        return _safe_sqrt(sq)
    diff = sub(unsqueeze(x1, -2), unsqueeze(x2, -3))  # (.., P, R, M)
    if p == 2:
        return _safe_sqrt(sum_(mul(diff, diff), -1))
    if p == 1:
        return sum_(abs_(diff), -1)
    if math.isinf(p):
        return amax(abs_(diff), -1)
    if p == 0:
        return sum_(bool_result(host_values(diff) != 0, diff.device).float(), -1)
    return pow_(sum_(pow_(abs_(diff), float(p)), -1), 1.0 / float(p))


def _add(a: Tensor, b: Tensor) -> Tensor:
    from .elementwise import add

    return add(a, b)


def _host_pair(op: str, a: Any, b: Any) -> tuple[np.ndarray, np.ndarray]:
    tensor_arg(op, "input", a)
    tensor_arg(op, "other", b)
    same_device(op, a, b)
    return host_values(a), host_values(b)


def isclose(a: Tensor, b: Tensor, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> Tensor:
    """|a - b| <= atol + rtol * |b| elementwise (infinities equal only to themselves), a bool tensor."""
    av, bv = _host_pair("isclose", a, b)
    if rtol < 0 or atol < 0:
        raise ArgumentError(f"isclose: rtol and atol must be non-negative, got rtol={rtol}, atol={atol}")
    with np.errstate(invalid="ignore", over="ignore"):
        out = np.isclose(av.astype(np.float64), bv.astype(np.float64), rtol=rtol, atol=atol, equal_nan=equal_nan)
    if av.dtype == np.bool_ and bv.dtype == np.bool_:
        out = av == bv
    return bool_result(out, a.device)


def allclose(a: Tensor, b: Tensor, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> bool:
    return bool(host_values(isclose(a, b, rtol, atol, equal_nan)).all())


def equal(a: Tensor, b: Tensor) -> bool:
    """True when a and b have the same shape and the same values (NaN is never equal)."""
    av, bv = _host_pair("equal", a, b)
    return av.shape == bv.shape and bool(np.array_equal(av, bv))


def broadcast_to(x: Tensor, size: Sequence[int]) -> Tensor:
    tensor_arg("broadcast_to", "input", x)
    return expand(x, tuple(size))


def broadcast_tensors(*tensors: Tensor) -> tuple[Tensor, ...]:
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    for i, t in enumerate(tensors):
        tensor_arg("broadcast_tensors", f"tensors[{i}]", t)
    shape = broadcast_shapes("broadcast_tensors", *(t.shape for t in tensors))
    return tuple(t if t.shape == shape else expand(t, shape) for t in tensors)


def fmod(a: Any, b: Any) -> Tensor:
    """The remainder of a / b with the sign of a (C's fmod): integers stay integers (a zero divisor
    raises, as in PyTorch); floats are a - trunc(a / b) * b with trunc(a / b) a constant (PyTorch's
    gradients: 1 and -trunc(a / b))."""
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        raise DTypeError(f"fmod: expected a Tensor for input, got {type_name(a)}")
    d = integer.result_type(a, b)
    if d is not dtypes.float32:
        av = host_values(a) if isinstance(a, Tensor) else a
        bv = host_values(b) if isinstance(b, Tensor) else b
        if np.any(np.asarray(bv) == 0):
            raise ZeroDivisionError("fmod: ZeroDivisionError (integer division by zero)")
        dev = a.device if isinstance(a, Tensor) else b.device
        return array_result(np.fmod(av, bv).astype(d.np), dev)
    from ..autograd import no_grad

    with no_grad():
        q = trunc(div(a, b))
    return sub(a, mul(q, b))


mode_result = collections.namedtuple("mode", ["values", "indices"])  # (torch.return_types.mode)


def mode(x: Tensor, dim: int = -1, keepdim: bool = False) -> Any:
    """(values, indices): the most frequent value along dim (the smallest of a tie) and the index
    of its last occurrence; host computation, not differentiable (nor in PyTorch)."""
    tensor_arg("mode", "input", x)
    vals = host_values(x)
    v = vals.reshape(1) if vals.ndim == 0 else vals
    d = dim_index("mode", dim, v.ndim)
    moved = np.moveaxis(v, d, -1)
    flat = moved.reshape(-1, moved.shape[-1])
    if flat.shape[1] == 0:
        raise ShapeError(f"mode: expected a non-empty dim {d}, got shape {tuple(x.shape)}")
    out_v = np.empty(flat.shape[0], vals.dtype)
    out_i = np.empty(flat.shape[0], np.int64)
    for r, row in enumerate(flat):
        uniq, counts = np.unique(row, return_counts=True)
        best = uniq[np.argmax(counts)]
        out_v[r] = best
        out_i[r] = np.nonzero(row == best)[0][-1]
    shape = moved.shape[:-1]
    out_v, out_i = out_v.reshape(shape), out_i.reshape(shape)
    if keepdim and vals.ndim:
        out_v, out_i = np.expand_dims(out_v, d), np.expand_dims(out_i, d)
    if vals.ndim == 0:
        out_v, out_i = out_v.reshape(()), out_i.reshape(())
    from ..tensor import tensor

    values = tensor(out_v, dtype=x.dtype, device=x.device)
    return mode_result(values, int_result(out_i, x.device))


def histc(x: Tensor, bins: int = 100, min: float = 0, max: float = 0) -> Tensor:  # noqa: A002
    """A float32 histogram of ``bins`` equal bins over [min, max] (min == max: the data's range);
    elements outside are ignored, the last bin includes max. Host computation, not differentiable."""
    tensor_arg("histc", "input", x)
    if x.dtype is not dtypes.float32:
        raise DTypeError(f"histc: expected a float32 tensor, got {x.dtype!r}")
    if isinstance(bins, bool) or not isinstance(bins, numbers.Integral) or bins <= 0:
        raise ArgumentError(f"histc: bins must be a positive integer, got {bins!r}")
    vals = host_values(x).reshape(-1).astype(np.float64)
    lo, hi = float(min), float(max)
    if lo > hi:
        raise ArgumentError(f"histc: max must be larger than min, got min={min}, max={max}")
    if lo == hi and vals.size:
        lo, hi = float(vals.min()), float(vals.max())
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ArgumentError(f"histc: range of [{lo}, {hi}] is not finite")
    vals = vals[(vals >= lo) & (vals <= hi)]
    counts = np.bincount(np.minimum(((vals - lo) * bins / (hi - lo)).astype(np.int64), bins - 1),
                         minlength=bins)
    from ..tensor import tensor

    return tensor(counts.astype(np.float32), device=x.device)


def erfinv(x: Tensor) -> Tensor:
    raise NotSupportedError("erfinv: not supported yet: it needs a new primitive (spec, contract, CPU and CUDA "
                            "kernels)")

