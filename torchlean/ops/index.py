"""Indexing: gather and scatter-add of scalars and rows, index_select and basic ``x[...]``.

Indices live on the host (the seed's convention). The VJP of a gather is a scatter-add into zeros
(deterministic under deterministic mode); the VJP of a scatter-add gathers the gradient.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import autograd
from .._validate import type_name
from ..errors import ArgumentError, DTypeError, IndexOutOfRangeError, ShapeError
from ..runtime import primitives as P
from ..runtime.arrays import to_host
from ..runtime.buffer import Buffer, zeros
from . import integer
from . import pending as PV
from ._base import Tensor, dim_index, fbuf, host_indices, new, numel, same_device, tensor_arg
from .shape import narrow_block, reshape, slice0


def _host_indices(op: str, index: Any) -> np.ndarray:
    return host_indices(op, "indices", index)


def gather_vec(x: Tensor, index: Any) -> Tensor:
    """out[j] = x[index[j]] for a 1-D x (out-of-bounds reads 0)."""
    tensor_arg("gather_vec", "x", x)
    if x.ndim != 1:
        raise ShapeError(f"gather_vec: expects a 1-D tensor, got shape {x.shape}")
    idx = _host_indices("gather_vec", index).reshape(-1)
    n, k = x.shape[0], idx.size
    out = new(P.gather_vec(fbuf("gather_vec", x), n, idx, k), (k,))
    return autograd.record("gather_vec", out, (x,), lambda g: (P.scatter_add(zeros(n, g.device), g, n, idx, k),))


def gather_rows(x: Tensor, index: Any) -> Tensor:
    """out[j, :] = x[index[j], :] for a 2-D x (an out-of-bounds index reads a zero row)."""
    tensor_arg("gather_rows", "x", x)
    if x.ndim != 2:
        raise ShapeError(f"gather_rows: expects a 2-D tensor, got shape {x.shape}")
    idx = _host_indices("gather_rows", index).reshape(-1)
    rows, cols = x.shape
    k = idx.size
    out = new(P.gather_rows(fbuf("gather_rows", x), rows, cols, idx, k), (k, cols))
    return autograd.record("gather_rows", out, (x,),
                           lambda g: (P.scatter_add_rows(zeros(rows * cols, g.device), g, rows, cols, idx, k),))


def scatter_add(x: Tensor, index: Any, values: Tensor) -> Tensor:
    """x with out[index[j]] += values[j] (1-D; out-of-bounds ignored; repeats accumulate)."""
    tensor_arg("scatter_add", "x", x)
    tensor_arg("scatter_add", "values", values)
    if x.ndim != 1 or values.ndim != 1:
        raise ShapeError(f"scatter_add: expects 1-D x and values, got {x.shape} and {values.shape}")
    same_device("scatter_add", x, values)
    idx = _host_indices("scatter_add", index).reshape(-1)
    n, k = x.shape[0], idx.size
    out = new(P.scatter_add(fbuf("scatter_add", x), fbuf("scatter_add", values), n, idx, k), (n,))
    return autograd.record("scatter_add", out, (x, values), lambda g: (g, P.gather_vec(g, n, idx, k)))


def scatter_add_rows(x: Tensor, index: Any, values: Tensor) -> Tensor:
    """x with out[index[r], :] += values[r, :] (2-D; out-of-bounds ignored; repeats accumulate)."""
    tensor_arg("scatter_add_rows", "x", x)
    tensor_arg("scatter_add_rows", "values", values)
    if x.ndim != 2 or values.ndim != 2 or values.shape[1] != x.shape[1]:
        raise ShapeError(f"scatter_add_rows: expects x (rows, cols) and values (k, cols), got {x.shape} and {values.shape}")
    same_device("scatter_add_rows", x, values)
    idx = _host_indices("scatter_add_rows", index).reshape(-1)
    rows, cols = x.shape
    k = idx.size
    out = new(P.scatter_add_rows(fbuf("scatter_add_rows", x), fbuf("scatter_add_rows", values), rows, cols, idx, k),
              x.shape)
    return autograd.record("scatter_add_rows", out, (x, values), lambda g: (g, P.gather_rows(g, rows, cols, idx, k)))


def _check_in_bounds(op: str, idx: np.ndarray, size: int) -> np.ndarray:
    if idx.size and (idx.min() < -size or idx.max() >= size):
        bad = idx[(idx < -size) | (idx >= size)][0]
        raise IndexOutOfRangeError(f"{op}: index {int(bad)} is out of bounds for size {size}")
    return np.where(idx < 0, idx + size, idx)


def index_select(x: Tensor, dim: int, index: Any) -> Tensor:
    """Rows of ``x`` along ``dim`` picked by a 1-D integer index (in bounds; negatives count from the end)."""
    tensor_arg("index_select", "input", x)
    d = dim_index("index_select", dim, x.ndim)
    idx = _host_indices("index_select", index).reshape(-1)
    idx = _check_in_bounds("index_select", idx, x.shape[d] if x.ndim else 1)
    if d == 0 and x.ndim >= 1:
        inner = numel(x.shape[1:])
        rows = gather_rows(reshape(x, (x.shape[0], inner)), idx)
        return reshape(rows, (idx.size,) + x.shape[1:])
    flat = np.arange(x.numel(), dtype=np.int64).reshape(x.shape)
    return _gather_flat(x, np.take(flat, idx, axis=d))


def _block_axes(key: Any, shape: tuple) -> list[tuple[int, int, int, bool]] | None:
    """[(dim, start, length, drop the dim), ...] for every dim ``key`` (checked by _host_key)
    narrows, when it is a tuple of ints and step-1 slices only (``x[:, -1]``, ``x[..., a:b]``,
    ``x[..., :-p, :-p]``, ``x[i, 2:5]``), an Ellipsis standing for full slices; else None (also
    when no dim is narrowed)."""
    if type(key) is not tuple:
        return None
    dots = [i for i, k in enumerate(key) if k is Ellipsis]
    if len(dots) == 1:
        i = dots[0]
        key = key[:i] + (slice(None),) * (len(shape) - len(key) + 1) + key[i + 1:]
    if len(key) > len(shape) or any(k is Ellipsis for k in key):
        return None
    found = []
    for d, k in enumerate(key):
        if type(k) is slice and k.start is None and k.stop is None and k.step in (None, 1):
            continue
        if type(k) in (int, np.int64) and -shape[d] <= k < shape[d]:
            found.append((d, int(k) % shape[d], 1, True))
        elif type(k) is slice and k.step in (None, 1):
            a, b, _ = k.indices(shape[d])
            found.append((d, a, max(b - a, 0), False))
        else:
            return None
    return found or None


def _narrow_blocks(x: Tensor, axes: list[tuple[int, int, int, bool]]) -> Tensor:
    """x narrowed along each of ``axes`` (from _block_axes): dim 0 as slice0's view, every other
    dim one strided copy (narrow_block), the most shrinking first so that later copies are
    smallest; no host index array. Int positions' dims are dropped at the end."""
    shape = x.shape
    out = x
    for d, start, length, _ in sorted(axes, key=lambda a: (a[0] != 0, a[2] / max(shape[a[0]], 1))):
        out = slice0(out, start, length) if d == 0 else narrow_block(out, d, start, length)
    dropped = {d for d, _, _, drop in axes if drop}
    return reshape(out, tuple(n for d, n in enumerate(out.shape) if d not in dropped)) if dropped else out


def _gather_flat(x: Tensor, flat_index: np.ndarray) -> Tensor:
    shape = flat_index.shape
    return reshape(gather_vec(reshape(x, -1), flat_index.reshape(-1)), shape)


def getitem(x: Tensor, key: Any) -> Tensor:
    """``x[key]``: ints and slices on dim 0 are one contiguous slice; a tuple of ints and step-1
    slices (``x[..., :-p, :-p]``) narrows dim by dim (one strided copy each); anything else PyTorch
    accepts (steps, integer arrays, boolean masks, None) becomes a gather of flat positions;
    negative steps are NumPy's (PyTorch refuses them). Every key is checked first (getitem's own
    errors, never NumPy's): integer arrays are read exactly (a uint64 2**64 - 1 is refused, not
    wrapped to -1), a step is never 0."""
    if x.ndim >= 1 and type(key) is int:
        n0 = x.shape[0]
        if not -n0 <= key < n0:
            raise IndexOutOfRangeError(f"getitem: index {key} is out of bounds for dim 0 of size {n0}")
        if type(x) is PV.PendingView:  # (qkv[0], qkv[1], qkv[2] of permuted heads: still pending)
            _, offset, strides = PV.layout(x)
            out = PV.extend(x, (_row_now, (key % n0,)), x.shape[1:], offset + (key % n0) * strides[0], strides[1:])
            if out is not None:
                return out
        return _row_now(x, key % n0) if x._buf is not None else integer.getitem(x, key)
    if x.ndim >= 1 and type(key) is slice and key.step is None and x._buf is not None \
            and (key.start is None or type(key.start) is int) and (key.stop is None or type(key.stop) is int):
        start, stop, _ = key.indices(x.shape[0])
        return slice0(x, start, max(stop - start, 0))
    hk = _host_key(key)
    if x._buf is None:
        return integer.getitem(x, hk)
    if x.ndim >= 1 and isinstance(hk, slice) and hk.step == 1:
        start, stop, _ = hk.indices(x.shape[0])
        return slice0(x, start, max(stop - start, 0))
    axes = _block_axes(hk, x.shape)
    if axes is not None:
        return _narrow_blocks(x, axes)
    flat = np.arange(x.numel(), dtype=np.int64).reshape(x.shape)
    return _gather_flat(x, np.asarray(_index_host(flat, hk, x.shape)))


def _row_now(x: Tensor, i: int) -> Tensor:
    """x[i] of a float tensor, computed now (also a pending view's step): a view of one row."""
    return reshape(slice0(x, i, 1), x.shape[1:])


def _index_host(arr: np.ndarray, key: Any, shape: tuple) -> Any:
    try:
        return arr[key]
    except IndexError as exc:
        raise IndexOutOfRangeError(f"getitem: {exc} (tensor shape {shape})") from None


def _host_key(key: Any) -> Any:
    """The key with its parts checked: ints, slices with integer (or None) bounds and a nonzero
    step, None, Ellipsis, boolean masks and integer arrays (as exact int64)."""
    if isinstance(key, tuple):
        return tuple(_key_part(k) for k in key)
    return _key_part(key)


def _key_part(k: Any) -> Any:
    if k is None or k is Ellipsis:
        return k
    if isinstance(k, slice):
        for name in ("start", "stop", "step"):
            v = getattr(k, name)
            if v is not None and (isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer))):
                if isinstance(v, Tensor) and v._buf is None and v.numel() == 1:
                    continue  # (int() below reads it)
                raise DTypeError(f"getitem: slice {name} must be an integer or None, got {v!r} ({type_name(v)})")
        if k.step is not None and int(k.step) == 0:
            raise ArgumentError("getitem: slice step cannot be zero")
        return slice(*(None if v is None else int(v) for v in (k.start, k.stop, k.step)))
    if isinstance(k, (bool, np.bool_)):
        return bool(k)
    if isinstance(k, (int, np.integer)):
        v = int(k)
        if not -(2**63) <= v < 2**63:
            raise IndexOutOfRangeError(f"getitem: index {v} does not fit in int64")
        return v
    if isinstance(k, Tensor):
        if k._buf is not None:
            raise DTypeError("getitem: a tensor index must be an integer or boolean tensor, got torchlean.float32 "
                             "(use .long())")
        k = to_host(k._arr)
    if isinstance(k, (list, np.ndarray)):
        arr = k if isinstance(k, np.ndarray) else None
        if arr is None:
            try:
                arr = np.asarray(k)
            except (TypeError, ValueError):
                raise DTypeError(f"getitem: an index list must hold integers or bools, got {k!r}") from None
        if arr.dtype.kind == "b":
            return arr
        return host_indices("getitem", "the index", arr if arr.dtype.kind != "f" or not isinstance(k, list) else k)
    raise DTypeError(f"getitem: only integers, slices, None, Ellipsis and integer or boolean tensors/arrays are "
                     f"valid indices, got {type_name(k)}")
