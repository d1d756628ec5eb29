"""Factories, random draws and sorting: randperm, multinomial, rand_like, randn_like,
randint_like, linspace, logspace, eye, meshgrid, sort, argsort, topk, unique, searchsorted,
bucketize, bincount.

randperm and multinomial draw from the same counter-based generator as rand/randn: one key per
call, element i uses splitmix64(key + i) (64 bits), computed exactly on the host, so a seed gives
the same draws on every device. Sorting decides the order on the host
(stable, NaN last ascending and first descending, as PyTorch); the values are gathered on the
device from those positions (exact, differentiable).
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from .._validate import real_arg, type_name
from ..errors import ArgumentError, DTypeError, ShapeError
from ..runtime.rng import default_generator
from ..tensor import canonical_dtype, float32, rand, randint, randn, tensor
from ._base import Tensor, dim_index, tensor_arg
from .reduce_dim import return_types
from .results import array_result, host_values, int_result
from .select import take_flat
from .shape import expand, reshape

__all__ = ["randint_like", "randperm", "multinomial", "rand_like", "randn_like", "linspace", "logspace",
           "eye", "meshgrid", "sort", "argsort", "topk", "unique",
           "searchsorted", "bucketize", "bincount", "random_bits"]

_MASK = np.uint64(0xFFFFFFFFFFFFFFFF)


def random_bits(n: int, generator: Any = None) -> np.ndarray:
    """n uint64 draws splitmix64(key + i) for one fresh key of the generator."""
    gen = default_generator if generator is None else generator
    if not hasattr(gen, "next_key"):
        raise ArgumentError(f"random: generator must be a torchlean.Generator or None, got {type_name(generator)}")
    key = np.uint64(gen.next_key())
    with np.errstate(over="ignore"):
        z = key + np.arange(n, dtype=np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def _int(op: str, name: str, v: Any) -> int:
    if isinstance(v, Tensor):
        v = v.item()
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise ArgumentError(f"{op}: {name} must be an integer, got {v!r}")
    return int(v)


def randint_like(x: Tensor, low: int = 0, high: int | None = None, **kw: Any) -> Tensor:
    tensor_arg("randint_like", "input", x)
    if high is None:
        low, high = 0, low
    return randint(low, high, x.shape, device=kw.get("device", x.device), dtype=kw.get("dtype", x.dtype),
                   generator=kw.get("generator"))


def randperm(n: int, generator: Any = None, device: Any = None, dtype: Any = None, requires_grad: bool = False) -> Tensor:
    n = _int("randperm", "n", n)
    if n < 0:
        raise ArgumentError(f"randperm: n must be non-negative, got {n}")
    perm = np.argsort(random_bits(n, generator), kind="stable").astype(np.int64)
    return tensor(perm, device=device, dtype=dtype)


def rand_like(x: Tensor, dtype: Any = None, device: Any = None, requires_grad: bool = False,
              generator: Any = None) -> Tensor:
    tensor_arg("rand_like", "input", x)
    return rand(*x.shape, device=device or x.device, requires_grad=requires_grad, generator=generator)


def randn_like(x: Tensor, dtype: Any = None, device: Any = None, requires_grad: bool = False,
               generator: Any = None) -> Tensor:
    tensor_arg("randn_like", "input", x)
    return randn(*x.shape, device=device or x.device, requires_grad=requires_grad, generator=generator)


def multinomial(input: Tensor, num_samples: int, replacement: bool = False, *, generator: Any = None) -> Tensor:
    """Indices drawn from the rows of non-negative weights (1-D or 2-D), int64."""
    tensor_arg("multinomial", "input", input)
    if input.ndim not in (1, 2):
        raise ShapeError(f"multinomial: expects a 1-D or 2-D tensor of weights, got shape {input.shape}")
    k = _int("multinomial", "num_samples", num_samples)
    w = host_values(input).astype(np.float64).reshape(-1 if input.ndim == 1 else input.shape[0], input.shape[-1]) \
        if input.ndim == 2 else host_values(input).astype(np.float64).reshape(1, -1)
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ArgumentError("multinomial: weights must be finite and non-negative")
    rows, n = w.shape
    if np.any(w.sum(axis=1) <= 0):
        raise ArgumentError("multinomial: every row of weights must have a positive sum")
    if k <= 0:
        raise ArgumentError(f"multinomial: num_samples must be positive, got {k}")
    if not replacement and k > n:
        raise ArgumentError(f"multinomial: cannot draw {k} samples without replacement from {n} categories")
    u = (random_bits(rows * k, generator) >> np.uint64(11)).astype(np.float64) * 2.0**-53
    u = u.reshape(rows, k)
    out = np.empty((rows, k), np.int64)
    for r in range(rows):
        p = w[r] / w[r].sum()
        if replacement:
            cdf = np.cumsum(p)
            out[r] = np.minimum(np.searchsorted(cdf, u[r] * cdf[-1], side="right"), n - 1)
        else:  # sequential draws without replacement: exponential race (Efraimidis-Spirakis)
            u_all = (random_bits(n, generator) >> np.uint64(11)).astype(np.float64) * 2.0**-53
            with np.errstate(divide="ignore"):
                keys = np.where(p > 0, -np.log1p(-u_all) / p, np.inf)
            out[r] = np.argsort(keys, kind="stable")[:k]
            if np.isinf(keys[out[r]]).any():
                raise ArgumentError("multinomial: fewer categories with positive weight than num_samples")
    return int_result(out.reshape(k) if input.ndim == 1 else out, input.device)


def linspace(start: Any, end: Any, steps: int, *, device: Any = None, dtype: Any = None,
             requires_grad: bool = False) -> Tensor:
    s = real_arg("linspace", "start", start.item() if isinstance(start, Tensor) else start)
    e = real_arg("linspace", "end", end.item() if isinstance(end, Tensor) else end)
    n = _int("linspace", "steps", steps)
    if n < 0:
        raise ArgumentError(f"linspace: steps must be non-negative, got {n}")
    # PyTorch's formula: from the start for the first half, from the end for the second
    step = (e - s) / (n - 1) if n > 1 else 0.0
    i = np.arange(n, dtype=np.float64)
    vals = np.where(i < n // 2, s + i * step, e - (n - 1 - i) * step) if n > 1 else np.full(n, s)
    d = canonical_dtype("linspace", dtype)
    if d is not None and d != float32:
        return tensor(vals.astype(d.np), device=device, dtype=d)
    return tensor(vals.astype(np.float32), device=device, requires_grad=requires_grad)


def logspace(start: Any, end: Any, steps: int, base: float = 10.0, *, device: Any = None, dtype: Any = None,
             requires_grad: bool = False) -> Tensor:
    lin = linspace(start, end, steps).numpy().astype(np.float64)
    b = real_arg("logspace", "base", base)
    return tensor(np.power(b, lin).astype(np.float32), device=device, requires_grad=requires_grad)


def eye(n: int, m: int | None = None, *, device: Any = None, dtype: Any = None, requires_grad: bool = False) -> Tensor:
    n = _int("eye", "n", n)
    m = n if m is None else _int("eye", "m", m)
    if n < 0 or m < 0:
        raise ArgumentError(f"eye: sizes must be non-negative, got n={n}, m={m}")
    d = canonical_dtype("eye", dtype)
    if d is not None and d != float32:
        return tensor(np.eye(n, m, dtype=d.np), device=device, dtype=d)
    return tensor(np.eye(n, m, dtype=np.float32), device=device, requires_grad=requires_grad)


def meshgrid(*tensors: Any, indexing: str = "ij") -> tuple[Tensor, ...]:
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if indexing not in ("ij", "xy"):
        raise ArgumentError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
    for i, t in enumerate(tensors):
        tensor_arg("meshgrid", f"tensors[{i}]", t)
        if t.ndim > 1:
            raise ShapeError(f"meshgrid: expects 0-D or 1-D tensors, got shape {t.shape} at {i}")
    ts = [reshape(t, (-1,)) if t.ndim == 0 else t for t in tensors]
    if indexing == "xy" and len(ts) >= 2:
        ts[0], ts[1] = ts[1], ts[0]
    shape = tuple(t.shape[0] for t in ts)
    out = []
    for i, t in enumerate(ts):
        view = [1] * len(ts)
        view[i] = t.shape[0]
        if t._buf is None:
            out.append(array_result(np.ascontiguousarray(np.broadcast_to(host_values(t).reshape(view), shape)),
                                    t.device))
        else:
            out.append(expand(reshape(t, tuple(view)), shape))
    if indexing == "xy" and len(ts) >= 2:  # the grid of (t1, t0, ...), handed back in the callers' order
        out[0], out[1] = out[1], out[0]
    return tuple(out)


# -- sorting ------------------------------------------------------------------------------------
def _order(vals: np.ndarray, d: int, descending: bool) -> np.ndarray:
    """Stable order along d: NaN last ascending, first descending (PyTorch)."""
    if vals.dtype == np.bool_:
        vals = vals.astype(np.int64)
    if not descending:
        return np.argsort(vals, axis=d, kind="stable")
    moved = np.moveaxis(vals, d, -1)
    flat = moved.reshape(-1, moved.shape[-1]) if moved.size else moved.reshape(0, moved.shape[-1])
    with np.errstate(invalid="ignore"):
        neg = -flat.astype(np.float64) if vals.dtype.kind == "f" else -flat
    nan = np.isnan(flat) if vals.dtype.kind == "f" else np.zeros(flat.shape, bool)
    rows = [np.lexsort((neg[r], ~nan[r])) for r in range(flat.shape[0])]
    out = np.array(rows, dtype=np.int64).reshape(moved.shape) if rows else np.zeros(moved.shape, np.int64)
    return np.moveaxis(out, -1, d)


def _along(x: Tensor, idx: np.ndarray, d: int) -> Tensor:
    pos = np.take_along_axis(np.arange(x.numel(), dtype=np.int64).reshape(x.shape), idx, axis=d)
    return take_flat(x, pos)


def sort(x: Tensor, dim: int = -1, descending: bool = False, stable: bool = False) -> Any:
    tensor_arg("sort", "input", x)
    if x.ndim == 0:
        return return_types.sort(x if x._buf is None else take_flat(x, np.zeros((), np.int64)),
                                 int_result(np.zeros((), np.int64), x.device))
    d = dim_index("sort", dim, x.ndim)
    idx = _order(host_values(x), d, bool(descending))
    return return_types.sort(_along(x, idx, d), int_result(idx, x.device))


def argsort(x: Tensor, dim: int = -1, descending: bool = False, stable: bool = False) -> Tensor:
    tensor_arg("argsort", "input", x)
    if x.ndim == 0:
        return int_result(np.zeros((), np.int64), x.device)
    d = dim_index("argsort", dim, x.ndim)
    return int_result(_order(host_values(x), d, bool(descending)), x.device)


def topk(x: Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> Any:
    tensor_arg("topk", "input", x)
    k = _int("topk", "k", k)
    d = dim_index("topk", dim, max(x.ndim, 1))
    n = x.shape[d] if x.ndim else 1
    if not 0 <= k <= n:
        raise ArgumentError(f"topk: k={k} is out of range for dim {d} of size {n}")
    if x.ndim == 0:
        return return_types.topk(take_flat(x, np.zeros((), np.int64)), int_result(np.zeros((), np.int64), x.device))
    idx = np.take(_order(host_values(x), d, bool(largest)), np.arange(k), axis=d)
    return return_types.topk(_along(x, idx, d), int_result(idx, x.device))


def unique(x: Tensor, sorted: bool = True, return_inverse: bool = False, return_counts: bool = False,
           dim: int | None = None) -> Any:
    """Sorted unique values (not differentiable), with the inverse indices and counts on request."""
    tensor_arg("unique", "input", x)
    vals = host_values(x)
    if dim is None:
        u, inv, cnt = np.unique(vals.reshape(-1), return_inverse=True, return_counts=True)
        inv = inv.reshape(x.shape)
    else:
        d = dim_index("unique", dim, x.ndim)
        u, inv, cnt = np.unique(vals, return_inverse=True, return_counts=True, axis=d)
        inv = inv.reshape(-1)
    out = tensor(u, device=x.device) if x._buf is not None else array_result(np.asarray(u, vals.dtype), x.device)
    if not (return_inverse or return_counts):
        return out
    res = [out]
    if return_inverse:
        res.append(int_result(inv, x.device))
    if return_counts:
        res.append(int_result(cnt, x.device))
    return tuple(res)


def searchsorted(sorted_sequence: Tensor, values: Any, *, out_int32: bool = False, right: bool = False,
                 side: str | None = None, sorter: Any = None) -> Tensor:
    tensor_arg("searchsorted", "sorted_sequence", sorted_sequence)
    seq = host_values(sorted_sequence)
    v = host_values(values) if isinstance(values, Tensor) else np.asarray(values)
    s = side or ("right" if right else "left")
    if s not in ("left", "right"):
        raise ArgumentError(f"searchsorted: side must be 'left' or 'right', got {side!r}")
    if seq.ndim <= 1:
        return int_result(np.searchsorted(seq, v, side=s), sorted_sequence.device)
    if seq.shape[:-1] != v.shape[:-1]:
        raise ShapeError(f"searchsorted: leading dims of sorted_sequence {seq.shape} and values {v.shape} differ")
    flat_s = seq.reshape(-1, seq.shape[-1])
    flat_v = v.reshape(-1, v.shape[-1])
    out = np.stack([np.searchsorted(a, b, side=s) for a, b in zip(flat_s, flat_v)]).reshape(v.shape)
    return int_result(out, sorted_sequence.device)


def bucketize(input: Any, boundaries: Tensor, *, out_int32: bool = False, right: bool = False) -> Tensor:
    tensor_arg("bucketize", "boundaries", boundaries)
    v = host_values(input) if isinstance(input, Tensor) else np.asarray(input)
    return int_result(np.searchsorted(host_values(boundaries), v, side="right" if right else "left"),
                      boundaries.device)


def bincount(input: Tensor, weights: Any = None, minlength: int = 0) -> Tensor:
    tensor_arg("bincount", "input", input)
    if input._buf is not None or input.ndim != 1:
        raise DTypeError(f"bincount: expects a 1-D integer tensor, got a {input.dtype} tensor of shape {input.shape}")
    v = host_values(input)
    if v.size and v.min() < 0:
        raise ArgumentError("bincount: input must be non-negative")
    if weights is None:
        return int_result(np.bincount(v, minlength=int(minlength)), input.device)
    w = host_values(weights) if isinstance(weights, Tensor) else np.asarray(weights)
    return tensor(np.bincount(v, weights=w, minlength=int(minlength)).astype(np.float32), device=input.device)
