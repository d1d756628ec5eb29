"""Indexing: gather and scatter-add of scalars and rows, index_select and basic ``x[...]``.

Indices live on the host (the seed's convention). The VJP of a gather is a scatter-add into zeros
(deterministic under deterministic mode); the VJP of a scatter-add gathers the gradient.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import autograd
from ..errors import DTypeError, IndexOutOfRangeError, ShapeError
from ..runtime import primitives as P
from ..runtime.buffer import Buffer, zeros
from ._base import Tensor, _axis, fbuf, new, numel, same_device
from .shape import reshape, slice0


def _host_indices(op: str, index: Any) -> np.ndarray:
    if isinstance(index, Tensor):
        if index._buf is not None:
            raise DTypeError(f"{op}: indices must be an integer tensor, got float32")
        arr = index._host
    else:
        arr = np.asarray(index)
    if arr.dtype.kind == "b":
        raise DTypeError(f"{op}: indices must be integers, got a boolean mask")
    if arr.size and arr.dtype.kind not in "iu":
        raise DTypeError(f"{op}: indices must be integers, got dtype {arr.dtype}")
    return arr.astype(np.int64, copy=False)


def gather_vec(x: Tensor, index: Any) -> Tensor:
    """out[j] = x[index[j]] for a 1-D x (out-of-bounds reads 0)."""
    if x.ndim != 1:
        raise ShapeError(f"gather_vec: expects a 1-D tensor, got shape {x.shape}")
    idx = _host_indices("gather_vec", index).reshape(-1)
    n, k = x.shape[0], idx.size
    out = new(P.gather_vec(fbuf("gather_vec", x), n, idx, k), (k,))
    return autograd.record("gather_vec", out, (x,), lambda g: (P.scatter_add(zeros(n, g.device), g, n, idx, k),))


def gather_rows(x: Tensor, index: Any) -> Tensor:
    """out[j, :] = x[index[j], :] for a 2-D x (an out-of-bounds index reads a zero row)."""
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
    if x.ndim != 1 or values.ndim != 1:
        raise ShapeError(f"scatter_add: expects 1-D x and values, got {x.shape} and {values.shape}")
    same_device("scatter_add", x, values)
    idx = _host_indices("scatter_add", index).reshape(-1)
    n, k = x.shape[0], idx.size
    out = new(P.scatter_add(fbuf("scatter_add", x), fbuf("scatter_add", values), n, idx, k), (n,))
    return autograd.record("scatter_add", out, (x, values), lambda g: (g, P.gather_vec(g, n, idx, k)))


def scatter_add_rows(x: Tensor, index: Any, values: Tensor) -> Tensor:
    """x with out[index[r], :] += values[r, :] (2-D; out-of-bounds ignored; repeats accumulate)."""
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
    d = _axis("index_select", dim, x.ndim)
    idx = _host_indices("index_select", index).reshape(-1)
    idx = _check_in_bounds("index_select", idx, x.shape[d] if x.ndim else 1)
    if d == 0 and x.ndim >= 1:
        inner = numel(x.shape[1:])
        rows = gather_rows(reshape(x, (x.shape[0], inner)), idx)
        return reshape(rows, (idx.size,) + x.shape[1:])
    flat = np.arange(x.numel(), dtype=np.int64).reshape(x.shape)
    return _gather_flat(x, np.take(flat, idx, axis=d))


def _gather_flat(x: Tensor, flat_index: np.ndarray) -> Tensor:
    shape = flat_index.shape
    return reshape(gather_vec(reshape(x, -1), flat_index.reshape(-1)), shape)


def getitem(x: Tensor, key: Any) -> Tensor:
    """``x[key]``: ints and slices on dim 0 are one contiguous slice; anything NumPy accepts (tuples,
    steps, integer arrays, boolean masks, None, Ellipsis) becomes a gather of flat positions."""
    if x._buf is None:
        return Tensor._wrap_host(np.array(x._host[_host_key(key)]), x.device)
    if x.ndim >= 1 and isinstance(key, (int, np.integer)) and not isinstance(key, bool):
        i = int(key)
        if not -x.shape[0] <= i < x.shape[0]:
            raise IndexOutOfRangeError(f"getitem: index {i} is out of bounds for dim 0 of size {x.shape[0]}")
        i %= x.shape[0]
        return reshape(slice0(x, i, 1), x.shape[1:])
    if x.ndim >= 1 and isinstance(key, slice) and (key.step is None or key.step == 1):
        start, stop, _ = key.indices(x.shape[0])
        return slice0(x, start, max(stop - start, 0))
    flat = np.arange(x.numel(), dtype=np.int64).reshape(x.shape)
    try:
        picked = flat[_host_key(key)]
    except IndexError as exc:
        raise IndexOutOfRangeError(f"getitem: {exc} (tensor shape {x.shape})") from None
    return _gather_flat(x, np.asarray(picked))


def _host_key(key: Any) -> Any:
    if isinstance(key, Tensor):
        return key._host if key._buf is None else key.numpy()
    if isinstance(key, tuple):
        return tuple(_host_key(k) for k in key)
    return key
