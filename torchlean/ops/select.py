"""Shape and index functions: stack, split, chunk, unbind, narrow, tril/triu, flip, roll,
repeat, repeat_interleave, gather, scatter, scatter_add, take_along_dim, masked_select, diag,
diagonal, movedim, unflatten, item and slice assignment, and in-place updates on the tape.

Composed, no new primitive: each function works out on the host, from the shapes alone (and the
integer indices it is given), which element of the input lands where, and moves the values with
one ``gather_vec`` of flat positions (an out-of-range position reads 0: the zeros of tril/triu/
diag). Its VJP is the scatter-add of that gather, deterministic under deterministic mode, so all of
these are differentiable and exact (a move never rounds). Integer and boolean tensors take the
same positions through NumPy. narrow (and split, chunk, unbind through it) is the exception: a
float tensor along a later dim is one strided copy (``shape.narrow_block``), no positions at all.
"""

from __future__ import annotations

import numbers
from typing import Any, Sequence

import numpy as np

from .. import autograd
from .._validate import type_name
from ..errors import ArgumentError, DeviceError, DTypeError, IndexOutOfRangeError, ShapeError
from ..runtime import arrays
from ..runtime import primitives as P
from ._base import Tensor, dim_index, host_indices, new, numel, operand, same_device, tensor_arg
from .index import gather_vec, getitem, scatter_add as scatter_add_1d
from . import integer
from . import pending as PV
from .pending import PendingView
from .results import array_result, host_values
from .shape import cat, expand, narrow_block, permute, reshape, slice0, squeeze, transpose, unsqueeze

__all__ = ["take_flat", "narrow", "split", "chunk", "unbind", "stack", "hstack", "vstack", "tril", "triu",
           "flip", "fliplr", "flipud", "roll", "repeat", "repeat_interleave", "tile", "gather", "scatter",
           "take_along_dim", "masked_select", "diag", "diagonal", "movedim", "swapaxes",
           "unflatten", "setitem", "inplace_update", "snapshot", "index_put", "take"]


def _positions(shape: Sequence[int]) -> np.ndarray:
    return np.arange(numel(shape), dtype=np.int64).reshape(tuple(shape))


def take_flat(x: Tensor, pos: np.ndarray) -> Tensor:
    """out[...] = x.flat[pos[...]]; a position outside [0, numel) reads 0. Differentiable (the VJP
    scatter-adds into zeros). Integer and boolean tensors are read on the host."""
    pos = np.asarray(pos, dtype=np.int64)
    if x._buf is None:
        flat = host_values(x).reshape(-1)
        ok = (pos >= 0) & (pos < flat.size)
        vals = np.where(ok, flat[np.where(ok, pos, 0)] if flat.size else np.zeros(pos.shape, flat.dtype),
                        np.zeros((), flat.dtype))
        return array_result(np.asarray(vals, dtype=flat.dtype).reshape(pos.shape), x.device)
    n = x.numel()
    safe = np.where((pos >= 0) & (pos < n), pos, n)  # gather_vec reads 0 at index >= n
    return reshape(gather_vec(reshape(x, -1), safe.reshape(-1)), pos.shape)


def _move(x: Tensor, fn) -> Tensor:
    """The tensor whose positions are fn(positions of x)."""
    return take_flat(x, fn(_positions(x.shape)))


def narrow(x: Tensor, dim: int, start: Any, length: int) -> Tensor:
    tensor_arg("narrow", "input", x)
    if x.ndim == 0:
        raise ShapeError("narrow: cannot narrow a 0-d tensor")
    d = dim_index("narrow", dim, x.ndim)
    size = x.shape[d]
    if isinstance(start, Tensor):
        start = start.item()
    if isinstance(start, bool) or not isinstance(start, numbers.Integral) or isinstance(length, bool) \
            or not isinstance(length, numbers.Integral):
        raise ArgumentError(f"narrow: start and length must be integers, got {start!r} and {length!r}")
    start, length = int(start), int(length)
    if start < 0:
        start += size
    if not 0 <= start <= size or length < 0 or start + length > size:
        raise IndexOutOfRangeError(f"narrow: start {start} and length {length} are out of range for dim {d} "
                                   f"of size {size}")
    if type(x) is PendingView:
        _, offset, strides = PV.layout(x)
        out = PV.extend(x, (_narrow_eager, (d, start, length)), x.shape[:d] + (length,) + x.shape[d + 1:],
                        PV.narrowed(offset, strides, d, start), strides)
        if out is not None:
            return out
    if x._buf is not None:
        if d > 0 and numel(x.shape[:d]) > 1 and PV.eligible(x):
            # a layout for later (ops/pending.py): attention may read the piece in place
            return PV.start(x, (_narrow_eager, (d, start, length)), x.shape[:d] + (length,) + x.shape[d + 1:],
                            PV.narrowed(0, PV.contiguous_strides(x.shape), d, start), PV.contiguous_strides(x.shape))
        return _narrow_eager(x, d, start, length)
    return _move(x, lambda p: np.take(p, np.arange(start, start + length), axis=d))


def _narrow_eager(x: Tensor, d: int, start: int, length: int) -> Tensor:
    """narrow of a float tensor computed now (also a pending view's step)."""
    return slice0(x, start, length) if d == 0 else narrow_block(x, d, start, length)


def split(x: Tensor, split_size_or_sections: Any, dim: int = 0) -> tuple[Tensor, ...]:
    """Pieces of ``split_size`` along dim (the last may be smaller), or of the listed sizes."""
    tensor_arg("split", "tensor", x)
    d = dim_index("split", dim, x.ndim)
    n = x.shape[d]
    s = split_size_or_sections
    if isinstance(s, numbers.Integral) and not isinstance(s, bool):
        s = int(s)
        if s <= 0 and not (s == 0 and n == 0):
            raise ArgumentError(f"split: split_size must be a positive integer, got {s}")
        sizes = [min(s, n - i) for i in range(0, n, s)] if n else [0]
    elif isinstance(s, (list, tuple)) and all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in s):
        sizes = [int(v) for v in s]
        if sum(sizes) != n or any(v < 0 for v in sizes):
            raise ShapeError(f"split: sizes {list(sizes)} must be non-negative and sum to {n} (dim {d} of shape "
                             f"{x.shape})")
    else:
        raise ArgumentError(f"split: split_size_or_sections must be an int or a list of ints, got "
                            f"{type_name(split_size_or_sections)}")
    out, start = [], 0
    for length in sizes:
        out.append(narrow(x, d, start, length))
        start += length
    return tuple(out)


def chunk(x: Tensor, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
    tensor_arg("chunk", "input", x)
    if isinstance(chunks, bool) or not isinstance(chunks, numbers.Integral) or chunks <= 0:
        raise ArgumentError(f"chunk: chunks must be a positive integer, got {chunks!r}")
    d = dim_index("chunk", dim, x.ndim)
    n = x.shape[d]
    size = -(-n // int(chunks)) if n else 0
    return split(x, size, d) if size else (x,) if n == 0 else ()


def unbind(x: Tensor, dim: int = 0) -> tuple[Tensor, ...]:
    tensor_arg("unbind", "input", x)
    d = dim_index("unbind", dim, x.ndim)
    if type(x) is not PendingView and x._buf is None:
        vals = host_values(x)
        return tuple(array_result(np.take(vals, i, axis=d), x.device) for i in range(x.shape[d]))
    return tuple(squeeze(narrow(x, d, i, 1), d) for i in range(x.shape[d]))


def _tensor_list(op: str, tensors: Any) -> list[Tensor]:
    if isinstance(tensors, Tensor) or not isinstance(tensors, (list, tuple)):
        raise DTypeError(f"{op}: expected a list or tuple of Tensors, got {type_name(tensors)}")
    if not tensors:
        raise ShapeError(f"{op}: expected a non-empty sequence of tensors")
    for i, t in enumerate(tensors):
        tensor_arg(op, f"tensors[{i}]", t)
    return list(tensors)


def stack(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """One copy on the device (the data loader's collate and ``get_batch`` loops stack every step);
    differentiable: the VJP hands each input its slice of the gradient (a view along dim 0)."""
    ts = _tensor_list("stack", tensors)
    ref = ts[0]
    shape, dev = ref._shape, ref._device
    for t in ts:
        if t._shape != shape:
            raise ShapeError(f"stack: expects tensors of one shape, got {[tuple(t.shape) for t in ts]}")
        if t._device != dev:
            same_device("stack", *ts)  # (raises, naming the devices)
    d = dim_index("stack", dim, len(shape) + 1)
    out_shape = shape[:d] + (len(ts),) + shape[d:]
    floats = sum(t._buf is not None for t in ts)
    if floats == 0:
        dt = ref._arr.dtype
        if all(t._arr.dtype == dt for t in ts):
            xp = arrays.array_module(dev)
            with arrays.on_device(dev):
                return Tensor._wrap_array(xp.stack([t._arr for t in ts], d), dev)
        out = integer.stack(ts, d)  # PyTorch's promoted dtype
        if out is not None:
            return out
    elif floats == len(ts):
        recording = autograd.is_grad_enabled() and any(t.requires_grad for t in ts)
        if not recording or d == 0:
            out = new(arrays.stack_buffers("stack", [t._buf for t in ts], shape, d, dev), out_shape)
            if not recording:
                return out
            n, k, total = len(ts), numel(shape), numel(out_shape)
            return autograd.record("stack", out, tuple(ts), lambda g: tuple(P.slice1d(g, total, i * k, k)
                                                                            for i in range(n)))
    return cat([unsqueeze(t, d) for t in ts], d)


def hstack(tensors: Sequence[Tensor]) -> Tensor:
    ts = _tensor_list("hstack", tensors)
    return cat(ts, 0 if ts[0].ndim == 1 else 1)


def vstack(tensors: Sequence[Tensor]) -> Tensor:
    ts = _tensor_list("vstack", tensors)
    return cat([reshape(t, (1, -1)) if t.ndim < 2 else t for t in ts], 0)


def _tri(op: str, x: Tensor, diagonal: int, lower: bool) -> Tensor:
    tensor_arg(op, "input", x)
    if x.ndim < 2:
        raise ShapeError(f"{op}: expects a tensor of at least 2 dims, got shape {x.shape}")
    if isinstance(diagonal, bool) or not isinstance(diagonal, numbers.Integral):
        raise ArgumentError(f"{op}: diagonal must be an integer, got {diagonal!r}")
    r, c = x.shape[-2:]
    keep = np.tril(np.ones((r, c), np.bool_), int(diagonal)) if lower else np.triu(np.ones((r, c), np.bool_),
                                                                                   int(diagonal))
    return _move(x, lambda p: np.where(keep, p, -1))


def tril(x: Tensor, diagonal: int = 0) -> Tensor:
    return _tri("tril", x, diagonal, True)


def triu(x: Tensor, diagonal: int = 0) -> Tensor:
    return _tri("triu", x, diagonal, False)


def _dims_arg(op: str, dims: Any, rank: int) -> list[int]:
    if isinstance(dims, numbers.Integral) and not isinstance(dims, bool):
        dims = (dims,)
    if not isinstance(dims, (list, tuple)):
        raise ArgumentError(f"{op}: dims must be an int or a sequence of ints, got {type_name(dims)}")
    out = [dim_index(op, d, rank) for d in dims]
    if len(set(out)) != len(out):
        raise ArgumentError(f"{op}: dims {list(dims)} name a dim twice")
    return out


def flip(x: Tensor, dims: Any) -> Tensor:
    tensor_arg("flip", "input", x)
    ds = _dims_arg("flip", dims, max(x.ndim, 1))
    return _move(x, lambda p: np.flip(p, ds) if x.ndim else p)


def fliplr(x: Tensor) -> Tensor:
    return flip(x, 1)


def flipud(x: Tensor) -> Tensor:
    return flip(x, 0)


def roll(x: Tensor, shifts: Any, dims: Any = None) -> Tensor:
    tensor_arg("roll", "input", x)
    sh = (shifts,) if isinstance(shifts, numbers.Integral) else tuple(shifts)
    if any(isinstance(s, bool) or not isinstance(s, numbers.Integral) for s in sh):
        raise ArgumentError(f"roll: shifts must be integers, got {shifts!r}")
    if dims is None:
        if len(sh) != 1:
            raise ArgumentError(f"roll: without dims, shifts must be one integer, got {shifts!r}")
        return _move(x, lambda p: np.roll(p.reshape(-1), int(sh[0])).reshape(p.shape))
    ds = _dims_arg("roll", dims, max(x.ndim, 1))
    if len(ds) != len(sh):
        raise ArgumentError(f"roll: shifts and dims must have the same length, got {shifts!r} and {dims!r}")
    return _move(x, lambda p: np.roll(p, [int(s) for s in sh], ds))


def _sizes_arg(op: str, sizes: tuple) -> tuple[int, ...]:
    if len(sizes) == 1 and isinstance(sizes[0], (list, tuple)):
        sizes = tuple(sizes[0])
    if any(isinstance(s, bool) or not isinstance(s, numbers.Integral) or s < 0 for s in sizes):
        raise ArgumentError(f"{op}: sizes must be non-negative integers, got {sizes!r}")
    return tuple(int(s) for s in sizes)


def repeat(x: Tensor, *sizes: Any) -> Tensor:
    """Tensor.repeat: tile x (the sizes may add leading dims)."""
    tensor_arg("repeat", "input", x)
    reps = _sizes_arg("repeat", sizes)
    if len(reps) < x.ndim:
        raise ShapeError(f"repeat: needs at least as many sizes as dims ({x.ndim}), got {reps}")
    return _move(x, lambda p: np.tile(p.reshape((1,) * (len(reps) - x.ndim) + p.shape), reps))


def tile(x: Tensor, dims: Any) -> Tensor:
    tensor_arg("tile", "input", x)
    reps = _sizes_arg("tile", (dims,) if isinstance(dims, (list, tuple)) else (dims,))
    reps = (1,) * (x.ndim - len(reps)) + reps
    return repeat(x, reps)


def repeat_interleave(x: Tensor, repeats: Any, dim: int | None = None, output_size: int | None = None) -> Tensor:
    tensor_arg("repeat_interleave", "input", x)
    if isinstance(repeats, Tensor):
        reps = host_indices("repeat_interleave", "repeats", repeats)
        reps = reps.reshape(-1) if reps.ndim else int(reps)
    elif isinstance(repeats, numbers.Integral) and not isinstance(repeats, bool):
        reps = int(repeats)
    else:
        raise ArgumentError(f"repeat_interleave: repeats must be an int or an integer tensor, got "
                            f"{type_name(repeats)}")
    if np.any(np.asarray(reps) < 0):
        raise ArgumentError("repeat_interleave: repeats must be non-negative")
    if dim is None:
        return _move(x, lambda p: np.repeat(p.reshape(-1), reps))
    d = dim_index("repeat_interleave", dim, x.ndim)
    if not np.isscalar(reps) and np.asarray(reps).size not in (1, x.shape[d]):
        raise ShapeError(f"repeat_interleave: repeats has {np.asarray(reps).size} values for dim {d} of size "
                         f"{x.shape[d]}")
    return _move(x, lambda p: np.repeat(p, reps, axis=d))


def _index_arg(op: str, index: Any) -> np.ndarray:
    if isinstance(index, Tensor) and index._buf is not None:
        raise DTypeError(f"{op}: index must be an integer (int64) tensor, got float32")
    return host_indices(op, "index", index)


def _scatter_positions(op: str, x_shape: tuple, d: int, idx: np.ndarray) -> np.ndarray:
    """Flat positions in x of index's elements along dim d (torch.gather/scatter addressing)."""
    if idx.ndim != len(x_shape) and not (idx.ndim == 0 and len(x_shape) == 0):
        raise ShapeError(f"{op}: index must have as many dims as input ({len(x_shape)}), got shape {idx.shape}")
    for j, (si, sx) in enumerate(zip(idx.shape, x_shape)):
        if j != d and si > sx:
            raise ShapeError(f"{op}: index shape {idx.shape} is larger than input shape {x_shape} at dim {j}")
    size = x_shape[d] if x_shape else 1
    if idx.size and (idx.min() < -size or idx.max() >= size):
        bad = idx[(idx < -size) | (idx >= size)].reshape(-1)[0]
        raise IndexOutOfRangeError(f"{op}: index {int(bad)} is out of bounds for dim {d} with size {size}")
    idx = np.where(idx < 0, idx + size, idx)
    if not x_shape:
        return np.zeros(idx.shape, np.int64)
    grid = list(np.indices(idx.shape, dtype=np.int64)) if idx.ndim else []
    grid[d] = idx
    return np.ravel_multi_index(tuple(grid), x_shape).astype(np.int64) if idx.size else np.zeros(idx.shape, np.int64)


def gather(x: Tensor, dim: int, index: Any, sparse_grad: bool = False) -> Tensor:
    """out[i][j][k] = x[index[i][j][k]][j][k] (dim 0), and so on: torch.gather."""
    tensor_arg("gather", "input", x)
    d = dim_index("gather", dim, max(x.ndim, 1))
    idx = _index_arg("gather", index)
    return take_flat(x, _scatter_positions("gather", x.shape, d, idx))


def take(x: Tensor, index: Any) -> Tensor:
    tensor_arg("take", "input", x)
    idx = _index_arg("take", index)
    n = x.numel()
    if idx.size and (idx.min() < -n or idx.max() >= n):
        raise IndexOutOfRangeError(f"take: index out of range for a tensor of {n} elements")
    return take_flat(x, np.where(idx < 0, idx + n, idx))


def take_along_dim(x: Tensor, indices: Any, dim: int | None = None) -> Tensor:
    tensor_arg("take_along_dim", "input", x)
    idx = _index_arg("take_along_dim", indices)
    if dim is None:
        return take(reshape(x, -1), idx.reshape(-1))
    d = dim_index("take_along_dim", dim, x.ndim)
    if idx.ndim != x.ndim:
        raise ShapeError(f"take_along_dim: indices must have as many dims as input ({x.ndim}), got {idx.shape}")
    size = x.shape[d]
    if idx.size and (idx.min() < -size or idx.max() >= size):
        raise IndexOutOfRangeError(f"take_along_dim: an index is out of bounds for dim {d} with size {size}")
    idx = np.where(idx < 0, idx + size, idx)
    try:
        return take_flat(x, np.take_along_axis(_positions(x.shape), idx, axis=d))
    except ValueError:
        pass
    # broadcast input and indices outside dim (as torch does)
    bshape = tuple(max(a, b) for a, b in zip(x.shape, idx.shape))
    xs = list(bshape)
    xs[d] = x.shape[d]
    ish = list(bshape)
    ish[d] = idx.shape[d]
    try:
        xe = expand(x, tuple(xs)) if tuple(xs) != x.shape else x
        ie = np.broadcast_to(idx, tuple(ish))
    except (ValueError, ShapeError):  # (NumPy's broadcast error, or ours from expand)
        raise ShapeError(f"take_along_dim: input {x.shape} and indices {idx.shape} do not broadcast outside "
                         f"dim {d}") from None
    return take_flat(xe, np.take_along_axis(_positions(xe.shape), ie, axis=d))


def _merge(x: Tensor, slots: np.ndarray, src: Tensor, src_pos: np.ndarray, op: str) -> Tensor:
    """x with x.flat[slots[j]] replaced by src.flat[src_pos[j]] (a later j wins a repeated slot):
    one gather from [x; src], so the gradient reaches x where it was kept and src where it landed."""
    n = x.numel()
    src_vals = take_flat(src, src_pos.reshape(-1))
    if x._buf is None and src_vals._buf is None:
        out = host_values(x).reshape(-1)
        out[slots.reshape(-1)] = host_values(src_vals).astype(out.dtype)
        return array_result(out.reshape(x.shape), x.device)
    xf = x.float() if x._buf is None else x
    if src_vals._buf is None:
        src_vals = src_vals.float()
    same_device(op, xf, src_vals)
    pick = np.arange(n, dtype=np.int64)
    pick[slots.reshape(-1)] = n + np.arange(slots.size, dtype=np.int64)
    both = cat([reshape(xf, -1), src_vals], 0) if slots.size else reshape(xf, -1)
    return take_flat(both, pick.reshape(x.shape))


def _src_arg(op: str, x: Tensor, src: Any, value: Any) -> Tensor:
    if src is None and value is None:
        raise ArgumentError(f"{op}: expected src or value")
    v = src if src is not None else value
    if isinstance(v, Tensor):
        return v
    if isinstance(v, numbers.Real) and not isinstance(v, bool) or isinstance(v, bool):
        from ..tensor import tensor

        return tensor(np.full((1,), v, dtype=x.dtype if x._buf is None else np.float32), device=x.device)
    raise DTypeError(f"{op}: src must be a Tensor or a number, got {type_name(v)}")


def scatter(x: Tensor, dim: int, index: Any, src: Any = None, value: Any = None, reduce: str | None = None) -> Tensor:
    """x with out[index[i][j]][j] = src[i][j] (dim 0) and so on: torch.scatter (out of place).
    Repeated positions: the last write wins (PyTorch leaves the order undefined)."""
    tensor_arg("scatter", "input", x)
    if reduce is not None:
        if reduce == "add":
            return scatter_add(x, dim, index, _src_arg("scatter", x, src, value) if src is not None else
                               expand(_src_arg("scatter", x, src, value), np.shape(_index_arg("scatter", index))))
        raise ArgumentError(f"scatter: reduce={reduce!r} is not supported (use scatter_add or reduce='add')")
    if src is not None and not isinstance(src, Tensor) and value is None:
        src, value = None, src  # x.scatter(dim, index, 2.0): a number given as src
    d = dim_index("scatter", dim, max(x.ndim, 1))
    idx = _index_arg("scatter", index)
    slots = _scatter_positions("scatter", x.shape, d, idx)
    s = _src_arg("scatter", x, src, value)
    if src is None:  # a number: every slot reads it
        src_pos = np.zeros(idx.shape, np.int64)
    else:
        if s.ndim != idx.ndim or any(a > b for a, b in zip(idx.shape, s.shape)):
            raise ShapeError(f"scatter: src shape {s.shape} must cover index shape {idx.shape}")
        src_pos = np.ravel_multi_index(tuple(np.indices(idx.shape, dtype=np.int64)), s.shape) if idx.size and idx.ndim \
            else np.zeros(idx.shape, np.int64)
    return _merge(x, slots, s, np.asarray(src_pos, np.int64), "scatter")


def scatter_add(x: Tensor, dim: int, index: Any, src: Tensor) -> Tensor:
    """x with out[index[i][j]][j] += src[i][j] (dim 0): torch.scatter_add; repeats accumulate."""
    tensor_arg("scatter_add", "input", x)
    tensor_arg("scatter_add", "src", src)
    d = dim_index("scatter_add", dim, max(x.ndim, 1))
    idx = _index_arg("scatter_add", index)
    slots = _scatter_positions("scatter_add", x.shape, d, idx)
    if src.ndim != idx.ndim or any(a > b for a, b in zip(idx.shape, src.shape)):
        raise ShapeError(f"scatter_add: src shape {src.shape} must cover index shape {idx.shape}")
    src_pos = np.ravel_multi_index(tuple(np.indices(idx.shape, dtype=np.int64)), src.shape) if idx.size and idx.ndim \
        else np.zeros(idx.shape, np.int64)
    vals = take_flat(src, np.asarray(src_pos, np.int64).reshape(-1))
    if x._buf is None and vals._buf is None:
        out = host_values(x).reshape(-1)
        np.add.at(out, slots.reshape(-1), host_values(vals).astype(out.dtype))
        return array_result(out.reshape(x.shape), x.device)
    xf = x.float() if x._buf is None else x
    out = scatter_add_1d(reshape(xf, -1), slots.reshape(-1), vals.float() if vals._buf is None else vals)
    return reshape(out, x.shape)


def masked_select(x: Tensor, mask: Any) -> Tensor:
    tensor_arg("masked_select", "input", x)
    m = host_values(mask) if isinstance(mask, Tensor) else np.asarray(mask)
    if m.dtype != np.bool_:
        raise DTypeError(f"masked_select: mask must be a bool tensor, got {m.dtype}")
    try:
        shape = np.broadcast_shapes(x.shape, m.shape)
    except ValueError:
        raise ShapeError(f"masked_select: mask shape {m.shape} does not broadcast with input shape {x.shape}") from None
    xe = expand(x, shape) if shape != x.shape else x
    return take_flat(xe, _positions(shape)[np.broadcast_to(m, shape)])


def diag(x: Tensor, diagonal: int = 0) -> Tensor:
    tensor_arg("diag", "input", x)
    k = int(diagonal)
    if x.ndim == 1:
        n = x.shape[0]
        size = n + abs(k)
        pos = np.full((size, size), -1, np.int64)
        r = np.arange(n) + max(-k, 0)
        c = np.arange(n) + max(k, 0)
        pos[r, c] = np.arange(n)
        return take_flat(x, pos)
    if x.ndim == 2:
        return diagonal_(x, k, 0, 1)
    raise ShapeError(f"diag: expects a 1-D or 2-D tensor, got shape {x.shape}")


def diagonal_(x: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    tensor_arg("diagonal", "input", x)
    a, b = dim_index("diagonal", dim1, x.ndim), dim_index("diagonal", dim2, x.ndim)
    if a == b:
        raise ArgumentError(f"diagonal: dim1 and dim2 must differ, got {dim1} and {dim2}")
    return _move(x, lambda p: np.diagonal(p, int(offset), a, b).copy())


diagonal = diagonal_


def movedim(x: Tensor, source: Any, destination: Any) -> Tensor:
    tensor_arg("movedim", "input", x)
    src = _dims_arg("movedim", source, x.ndim)
    dst = _dims_arg("movedim", destination, x.ndim)
    if len(src) != len(dst):
        raise ArgumentError(f"movedim: source and destination must have the same length, got {source!r} and "
                            f"{destination!r}")
    order = [i for i in range(x.ndim) if i not in src]
    perm = [0] * x.ndim
    for s, t in sorted(zip(dst, src)):
        order.insert(s, t)
    perm = order
    if x._buf is None:
        return array_result(np.ascontiguousarray(np.transpose(host_values(x), perm)), x.device)
    return permute(x, perm)


def swapaxes(x: Tensor, axis0: int, axis1: int) -> Tensor:
    return transpose(x, axis0, axis1)


def unflatten(x: Tensor, dim: int, sizes: Sequence[int]) -> Tensor:
    tensor_arg("unflatten", "input", x)
    d = dim_index("unflatten", dim, x.ndim)
    sizes = tuple(int(s) for s in sizes)
    n = x.shape[d]
    if sizes.count(-1) == 1:
        known = numel([s for s in sizes if s != -1])
        if known == 0 or n % known:
            raise ShapeError(f"unflatten: sizes {sizes} do not fit dim {d} of size {n}")
        sizes = tuple(n // known if s == -1 else s for s in sizes)
    if numel(sizes) != n or any(s < 0 for s in sizes):
        raise ShapeError(f"unflatten: sizes {sizes} do not multiply to dim {d} of size {n}")
    return reshape(x, x.shape[:d] + sizes + x.shape[d + 1:])


# -- assignment and in-place updates on the tape ----------------------------------------------
def inplace_update(op: str, x: Tensor, new: Tensor, old: Tensor | None = None) -> Tensor:
    """Make ``x`` hold ``new``'s values, recorded on the tape as PyTorch's in-place ops are: later
    uses of x see the new values and differentiate through them; earlier uses keep the old values
    (their VJPs hold the old buffer). A leaf that requires grad refuses, as in PyTorch; under
    no_grad x is rebound (Tensor._assign). ``new`` is computed from ``old = snapshot(x)``, never x."""
    tensor_arg(op, "self", x)
    if new.shape != x.shape:
        raise ShapeError(f"{op}: the result has shape {new.shape}, the tensor has shape {x.shape}")
    if new.device != x.device:
        raise DeviceError(f"{op}: the result is on {new.device}, the tensor on {x.device}")
    if x._buf is None:
        if new._buf is not None:
            vals = new.numpy()
            if x.dtype != np.bool_ and not np.array_equal(vals, np.trunc(vals)) and np.all(np.isfinite(vals)):
                raise DTypeError(f"{op}: result type float32 can't be cast to the desired output type {x.dtype}")
        x._arr = new._as(op, x.dtype)._arr  # (on x's device: arrays are never written in place)
        return x
    return x._assign(op, new.float(), old)


def snapshot(x: Tensor) -> Tensor:
    """A stand-in holding x's current value and tape position, so that recording an update of x
    never makes x its own parent."""
    if x._buf is None:  # (an integer array is never written in place: x's own will do)
        return Tensor._wrap_array(x._arr, x._device)
    return x._stand_in()


def setitem(x: Tensor, key: Any, value: Any) -> None:
    """``x[key] = value``: value (a number or a tensor broadcast to x[key]'s shape) written at the
    positions that ``x[key]`` reads; differentiable in x (where kept) and in value."""
    tensor_arg("setitem", "self", x)
    if isinstance(key, Tensor) and key._buf is None and key.shape == x.shape and host_values(key).dtype == np.bool_:
        slots = _positions(x.shape)[host_values(key)]
    else:
        slots = np.asarray(host_values(getitem(array_result(_positions(x.shape), "cpu"), _cpu_key(key))), np.int64)
    if isinstance(value, Tensor):
        v = value
    elif isinstance(value, (numbers.Real, np.number)) or isinstance(value, (list, tuple, np.ndarray)):
        v = operand("setitem", value, x) if x._buf is not None else array_result(
            np.asarray(value).astype(host_values(x).dtype), x.device)
    else:
        raise DTypeError(f"setitem: value must be a Tensor or a number, got {type_name(value)}")
    try:
        vshape = np.broadcast_shapes(v.shape, slots.shape)
    except ValueError:
        vshape = None
    if vshape != slots.shape:
        raise ShapeError(f"setitem: value of shape {v.shape} cannot be broadcast to the indexed shape {slots.shape}")
    vpos = np.broadcast_to(_positions(v.shape), slots.shape)
    if x._buf is None:
        vals = v.numpy()
        out = host_values(x).reshape(-1)
        out[slots.reshape(-1)] = np.asarray(vals).reshape(-1)[vpos.reshape(-1)].astype(out.dtype)
        x._arr = array_result(out.reshape(x.shape), x.device)._arr
        return
    x._check_inplace("setitem")
    old = snapshot(x)
    inplace_update("setitem", x, _merge(old, slots, v, vpos, "setitem"), old)


def _cpu_key(key: Any) -> Any:
    """The key with its tensors as host arrays: the positions it selects are found on the host."""
    if isinstance(key, tuple):
        return tuple(_cpu_key(k) for k in key)
    if isinstance(key, Tensor):
        if key._buf is not None:
            raise DTypeError("setitem: a tensor index must be an integer or boolean tensor, got float32")
        return host_values(key)
    return key


def index_put(x: Tensor, indices: tuple, values: Any, accumulate: bool = False) -> Tensor:
    """Out-of-place ``x[indices] = values`` (accumulate=False)."""
    if accumulate:
        raise ArgumentError("index_put: accumulate=True is not supported (use index_add or scatter_add)")
    out = x.clone()
    setitem(out, tuple(indices), values)
    return out
