"""Shape ops: reshape (no copy), broadcast, transposes and permutes, concat/slice, to_device."""

from __future__ import annotations

import numbers
from typing import Any, Sequence

import numpy as np

from .. import autograd
from ..errors import ArgumentError, DTypeError, ShapeError
from ..runtime import primitives as P
from ..runtime.buffer import Buffer
from .._validate import type_name
from . import integer
from . import pending as PV
from .pending import PendingView
from ._base import Tensor, dim_index, axis_map_for, fbuf, new, numel, same_device, tensor_arg


# (requested shape, element count) -> resolved shape, for requests made of plain ints only (a
# model asks for the same few shapes every step); errors are never cached.
_resolved: dict[tuple[tuple[int, ...], int], tuple[int, ...]] = {}


def _resolve_shape(op: str, shape: Sequence[Any], n: int) -> tuple[int, ...]:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    for s in shape:
        if type(s) is not int:
            break
    else:
        key = (tuple(shape), n)
        hit = _resolved.get(key)
        if hit is not None:
            return hit
        out = _resolve_shape_slow(op, shape, n)
        if len(_resolved) > 4096:
            _resolved.clear()
        _resolved[key] = out
        return out
    return _resolve_shape_slow(op, shape, n)


def _shape_ints(op: str, shape: Any) -> tuple[int, ...]:
    """A requested shape as ints: integers only (never a bool, float or string), each >= -1."""
    if not isinstance(shape, (tuple, list)):
        raise ShapeError(f"{op}: shape must be a sequence of integers, got {shape!r} ({type_name(shape)})")
    out = []
    for s in shape:
        if type(s) is not int and (isinstance(s, (bool, np.bool_)) or not isinstance(s, numbers.Integral)):
            raise ShapeError(f"{op}: shape must hold integers, got {tuple(shape)!r} ({type_name(s)} in it)")
        if s < -1:
            raise ShapeError(f"{op}: invalid size {int(s)} in shape {tuple(shape)} (sizes are >= 0, or -1 once)")
        out.append(int(s))
    return tuple(out)


def _resolve_shape_slow(op: str, shape: Sequence[Any], n: int) -> tuple[int, ...]:
    shape = _shape_ints(op, shape)
    if shape.count(-1) > 1:
        raise ShapeError(f"{op}: only one dimension can be -1, got {shape}")
    if -1 in shape:
        rest = numel([s for s in shape if s != -1])
        if rest == 0 or n % rest:
            raise ShapeError(f"{op}: cannot reshape {n} elements into {shape}")
        shape = tuple(n // rest if s == -1 else s for s in shape)
    if any(s < 0 for s in shape) or numel(shape) != n:
        raise ShapeError(f"{op}: cannot reshape {n} elements into {shape}")
    return shape


def _identity_vjp(g: Buffer) -> tuple[Buffer]:
    return (g,)


def reshape(x: Tensor, *shape: Any) -> Tensor:
    """Same buffer, new shape (tensors are always contiguous, so this never copies)."""
    if not isinstance(x, Tensor):
        tensor_arg("reshape", "input", x)
    new_shape = _resolve_shape("reshape", shape, x.numel())
    if type(x) is PendingView:
        _, offset, strides = PV.layout(x)
        out = PV.extend(x, (reshape, (new_shape,)), new_shape, offset, PV.viewed(x._shape, strides, new_shape))
        if out is not None:
            return out
    if x._buf is None:
        return Tensor._wrap_array(x._arr.reshape(new_shape), x.device)
    out = new(x._buf, new_shape)
    return autograd.record("reshape", out, (x,), _identity_vjp)


def flatten(x: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    tensor_arg("flatten", "input", x)
    if x.ndim == 0:
        return reshape(x, 1)
    s, e = dim_index("flatten", start_dim, x.ndim), dim_index("flatten", end_dim, x.ndim)
    if s > e:
        raise ShapeError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
    shape = x.shape[:s] + (numel(x.shape[s:e + 1]),) + x.shape[e + 1:]
    return reshape(x, shape)


def unsqueeze(x: Tensor, dim: int) -> Tensor:
    tensor_arg("unsqueeze", "input", x)
    d = dim_index("unsqueeze", dim, x.ndim + 1)
    return reshape(x, x.shape[:d] + (1,) + x.shape[d:])


def squeeze(x: Tensor, dim: int | None = None) -> Tensor:
    tensor_arg("squeeze", "input", x)
    if dim is None:
        return reshape(x, tuple(s for s in x.shape if s != 1))
    d = dim_index("squeeze", dim, x.ndim)
    if x.shape[d] != 1:
        return x
    return reshape(x, x.shape[:d] + x.shape[d + 1:])


def expand(x: Tensor, *shape: Any) -> Tensor:
    """Broadcast x to ``shape`` (NumPy rules; -1 keeps a size); the VJP sums back (reduce_from_broadcast)."""
    tensor_arg("expand", "input", x)
    shape = _shape_ints("expand", shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape)
    if len(shape) < x.ndim:
        raise ShapeError(f"expand: cannot broadcast shape {x.shape} to {shape}")
    lead = len(shape) - x.ndim
    shape = tuple(x.shape[j - lead] if (s == -1 and j >= lead) else s for j, s in enumerate(shape))
    if shape == x.shape:
        return x
    for j, s in enumerate(shape):
        if s == -1:
            raise ShapeError(f"expand: -1 is not allowed for the new leading dimension {j} (shape {shape})")
        if j >= lead and x.shape[j - lead] != 1 and x.shape[j - lead] != s:
            raise ShapeError(f"expand: the expanded size {s} must match the existing size {x.shape[j - lead]} at "
                             f"dim {j} (from {x.shape} to {shape}), unless that size is 1")
    if x._buf is None:
        return integer.expand(x, shape)
    amap = axis_map_for(x.shape, shape)
    xb = fbuf("expand", x)
    out = new(P.broadcast_to(xb, x.shape, shape, amap), shape)
    in_shape = x.shape
    return autograd.record("expand", out, (x,), lambda g: (P.reduce_from_broadcast(g, in_shape, shape, amap),))


broadcast_to = expand


def _swap(x: Tensor, depth: int) -> Tensor:
    """Swap axes depth and depth+1 (one swap_adjacent_at_depth kernel; VJP: the same swap back)."""
    shape = list(x.shape)
    out_shape = shape.copy()
    out_shape[depth], out_shape[depth + 1] = shape[depth + 1], shape[depth]
    xb = fbuf("transpose", x)
    out = new(P.swap_adjacent_at_depth(xb, tuple(shape), depth), out_shape)
    return autograd.record("swap_adjacent", out, (x,),
                           lambda g: (P.swap_adjacent_at_depth(g, tuple(out_shape), depth),))


def swap_adjacent(x: Tensor, depth: int) -> Tensor:
    """Swap axes depth and depth+1; a depth past the last pair is the identity (the seed's Ops page)."""
    if isinstance(depth, bool) or not isinstance(depth, numbers.Integral) or depth < 0:
        raise ArgumentError(f"swap_adjacent: depth must be a non-negative int, got {depth!r}")
    if depth >= x.ndim - 1:
        return x
    return _swap(x, int(depth))


def transpose(x: Tensor, dim0: int, dim1: int) -> Tensor:
    tensor_arg("transpose", "input", x)
    a, b = sorted((dim_index("transpose", dim0, x.ndim), dim_index("transpose", dim1, x.ndim)))
    if a == b:
        return x
    if type(x) is PendingView or (x.ndim >= 3 and PV.eligible(x)):
        perm = list(range(x.ndim))
        perm[a], perm[b] = perm[b], perm[a]
        return permute(x, *perm)
    if x._buf is None:
        return integer.transpose(x, a, b)
    if x.ndim == 2:
        r, c = x.shape
        out = new(P.transpose2d(fbuf("transpose", x), r, c), (c, r))
        return autograd.record("transpose2d", out, (x,), lambda g: (P.transpose2d(g, c, r),))
    if b == a + 1:
        return _swap(x, a)
    perm = list(range(x.ndim))
    perm[a], perm[b] = perm[b], perm[a]
    return permute(x, *perm)


def t(x: Tensor) -> Tensor:
    tensor_arg("t", "input", x)
    if x.ndim < 2:
        return x
    if x.ndim != 2:
        raise ShapeError(f"t: expects a tensor of rank <= 2, got shape {x.shape}")
    return transpose(x, 0, 1)


# (input shape, dims) -> what permute does: None (nothing moves), an int (one adjacent swap at
# that depth) or (perm, out_shape, inverse); for dims made of plain ints, as _resolved above.
_permute_plans: dict[tuple[tuple[int, ...], tuple[int, ...]], Any] = {}


def _permute_plan(x: Tensor, dims: tuple) -> Any:
    perm = tuple(dim_index("permute", d, x.ndim) for d in dims)
    if sorted(perm) != list(range(x.ndim)):
        raise ShapeError(f"permute: {tuple(dims)} is not a permutation of the {x.ndim} axes of shape {x.shape}")
    moved = [j for j in range(x.ndim) if perm[j] != j]
    if not moved:
        return None
    if len(moved) == 2 and moved[1] == moved[0] + 1:
        return moved[0]
    shape = tuple(x.shape)
    out_shape = tuple(shape[p] for p in perm)
    inverse = tuple(perm.index(j) for j in range(x.ndim))
    return perm, out_shape, inverse


def permute(x: Tensor, *dims: Any) -> Tensor:
    """Reorder axes: output axis j is input axis dims[j]. One permute kernel (one adjacent swap:
    swap_adjacent_at_depth); the VJP is the inverse permutation, again one kernel."""
    if not isinstance(x, Tensor):
        tensor_arg("permute", "input", x)
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = tuple(dims[0])
    for d in dims:
        if type(d) is not int:
            plan = _permute_plan(x, dims)
            break
    else:
        key = (x._shape, dims)
        plan = _permute_plans.get(key, key)  # (key as the "missing" mark: None is a valid plan)
        if plan is key:
            plan = _permute_plan(x, dims)
            if len(_permute_plans) > 4096:
                _permute_plans.clear()
            _permute_plans[key] = plan
    if plan is None:
        return x
    if type(x) is PendingView or (x.ndim >= 3 and PV.eligible(x)):
        # a layout for later (ops/pending.py): attention may read it in place, or it is undone
        perm = _adjacent(x.ndim, plan) if type(plan) is int else plan[0]
        out_shape = PV.permuted(x._shape, perm)
        if type(x) is PendingView:
            _, offset, strides = PV.layout(x)
            out = PV.extend(x, (permute_now, (tuple(perm),)), out_shape, offset, PV.permuted(strides, perm))
            if out is not None:
                return out
        else:
            return PV.start(x, (permute_now, (tuple(perm),)), out_shape, 0,
                            PV.permuted(PV.contiguous_strides(x._shape), perm))
    return _permute_planned(x, plan)


def permute_now(x: Tensor, perm: tuple[int, ...]) -> Tensor:
    """permute(x, *perm) computed now (a pending view's step)."""
    return _permute_planned(x, _permute_plan(x, perm))


def _permute_planned(x: Tensor, plan: Any) -> Tensor:
    if plan is None:
        return x
    if x._buf is None:
        return integer.permute(x, plan[0] if type(plan) is not int else _adjacent(x.ndim, plan))
    if type(plan) is int:
        return _swap(x, plan)
    perm, out_shape, inverse = plan
    out = new(P.permute(fbuf("permute", x), x._shape, perm), out_shape)
    return autograd.record("permute", out, (x,), lambda g: (P.permute(g, out_shape, inverse),))


def _adjacent(rank: int, depth: int) -> list[int]:
    perm = list(range(rank))
    perm[depth], perm[depth + 1] = depth + 1, depth
    return perm


def permute_bca(x: Tensor) -> Tensor:
    """(a, b, c) -> (b, c, a)."""
    return permute(x, 1, 2, 0)


def permute_cab(x: Tensor) -> Tensor:
    """(a, b, c) -> (c, a, b)."""
    return permute(x, 2, 0, 1)


def swap_last2(x: Tensor) -> Tensor:
    """(a, b, c) -> (a, c, b)."""
    if x.ndim != 3:
        raise ShapeError(f"swap_last2: expects a 3-D tensor, got shape {x.shape}")
    return _swap(x, 1)


def concat1d(a: Tensor, b: Tensor) -> Tensor:
    if a.ndim != 1 or b.ndim != 1:
        raise ShapeError(f"concat1d: expects two 1-D tensors, got shapes {a.shape} and {b.shape}")
    same_device("concat1d", a, b)
    n, m = a.shape[0], b.shape[0]
    out = new(P.concat1d(fbuf("concat1d", a), fbuf("concat1d", b), n, m), (n + m,))
    return autograd.record("concat1d", out, (a, b), lambda g: (P.slice1d(g, n + m, 0, n), P.slice1d(g, n + m, n, m)))


def slice1d(x: Tensor, start: int, length: int) -> Tensor:
    if x.ndim != 1:
        raise ShapeError(f"slice1d: expects a 1-D tensor, got shape {x.shape}")
    return slice0(x, start, length)


def slice0(x: Tensor, start: int, length: int) -> Tensor:
    """x[start:start+length] along dim 0: one contiguous run of the flat buffer."""
    if x.ndim == 0:
        raise ShapeError("slice: cannot slice a 0-d tensor")
    n0 = x.shape[0]
    if start < 0 or length < 0 or start + length > n0:
        raise ShapeError(f"slice: rows [{start}, {start + length}) out of range for dim 0 of size {n0}")
    inner = numel(x.shape[1:])
    total = x.numel()
    out_shape = (length,) + x.shape[1:]
    xb = fbuf("slice", x)
    out = new(P.slice1d(xb, total, start * inner, length * inner), out_shape)

    def vjp(g: Buffer) -> tuple[autograd.SliceGrad]:
        # g at offset start*inner, zeros around it (padded only when the backward pass needs it,
        # so the parts of one tensor join by concatenation)
        return (autograd.SliceGrad(g, start * inner, total),)

    return autograd.record("slice0", out, (x,), vjp)


def narrow_block(x: Tensor, d: int, start: int, length: int) -> Tensor:
    """A float x narrowed to [start, start + length) along dim d >= 1 (checked by the caller): one
    strided copy of x seen as (outer, size, inner), no host index array; its VJP places the
    gradient back in zeros (narrow_block_bwd), or joins it with those of the other pieces
    (concat_block, autograd.BlockGrad). When the dims before d all have size 1 the piece is
    one contiguous run: slice0's view and concatenating gradient."""
    shape = x.shape
    size, inner, outer = shape[d], numel(shape[d + 1:]), numel(shape[:d])
    out_shape = shape[:d] + (length,) + shape[d + 1:]
    if outer == 1:
        return reshape(slice0(reshape(x, shape[d:]), start, length), out_shape)
    out = new(P.narrow_block(fbuf("narrow", x), outer, size, start, length, inner), out_shape)
    # the gradient placed lazily (BlockGrad): the pieces of one split join by concat_block
    return autograd.record("narrow_block", out, (x,),
                           lambda g: (autograd.BlockGrad(g, outer, size, start, length, inner),))


def pad_block(x: Tensor, d: int, lo: int, hi: int) -> Tensor:
    """A float x with lo >= 0 zeros before and hi >= 0 zeros after it along dim d (checked by the
    caller): one placement of x, seen as (outer, size, inner), into zeros (narrow_block_bwd); its VJP
    is the narrow back (narrow_block). F.pad's constant zero mode: no zero pieces, no permutes."""
    shape = x.shape
    size, inner, outer = shape[d], numel(shape[d + 1:]), numel(shape[:d])
    total = size + lo + hi
    out = new(P.narrow_block_bwd(fbuf("pad", x), outer, total, lo, size, inner), shape[:d] + (total,) + shape[d + 1:])
    return autograd.record("pad_block", out, (x,), lambda g: (P.narrow_block(g, outer, total, lo, size, inner),))


def cat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """Concatenate along ``dim``: contiguous runs joined by concat1d when every dim before ``dim``
    has size 1, else one concat_block per join (_cat_block); always a new tensor, as PyTorch's."""
    if isinstance(tensors, Tensor) or not isinstance(tensors, (list, tuple)):
        raise DTypeError(f"cat: expected a list or tuple of Tensors, got {type_name(tensors)}")
    tensors = list(tensors)
    if not tensors:
        raise ShapeError("cat: expected a non-empty sequence of tensors")
    for i, t_ in enumerate(tensors):
        tensor_arg("cat", f"tensors[{i}]", t_)
    for t_ in tensors:
        if t_._buf is None:
            out = integer.cat(tensors, dim)  # None when PyTorch's promoted dtype is float32
            if out is not None:
                return out
            break
    tensors = [t.float() if t._buf is None else t for t in tensors]
    ref = tensors[0]
    d = dim_index("cat", dim, ref.ndim)
    same_device("cat", *tensors)
    for t_ in tensors[1:]:
        if t_.ndim != ref.ndim or t_.shape[:d] + t_.shape[d + 1:] != ref.shape[:d] + ref.shape[d + 1:]:
            raise ShapeError(f"cat: shapes {[tuple(t.shape) for t in tensors]} differ outside dim {d}")
    if len(tensors) == 1:
        return clone(ref)
    outer, inner = numel(ref.shape[:d]), numel(ref.shape[d + 1:])
    if outer != 1:
        return _cat_block(tensors, d, outer, inner)
    # every dim before d has size 1: the pieces are contiguous runs, joined end to end (pairwise
    # in rounds, so each element is copied about log2(len(tensors)) times)
    level = [reshape(t_, -1) for t_ in tensors]
    while len(level) > 1:
        nxt = [concat1d(a, b) for a, b in zip(level[0::2], level[1::2])]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return reshape(level[0], ref.shape[:d] + (sum(t_.shape[d] for t_ in tensors),) + ref.shape[d + 1:])


def _cat_block(tensors: list[Tensor], d: int, outer: int, inner: int) -> Tensor:
    """cat along a dim with outer > 1 elements before it: the pieces, seen as (outer, size_i,
    inner), joined along the middle axis by concat_block (autograd.join_blocks); each piece's
    gradient is its block of the output's (narrow_block)."""
    sizes = [t_.shape[d] for t_ in tensors]
    total = sum(sizes)
    ref = tensors[0]
    out = new(autograd.join_blocks([(fbuf("cat", t_), n) for t_, n in zip(tensors, sizes)], outer, inner),
              ref.shape[:d] + (total,) + ref.shape[d + 1:])
    starts = [sum(sizes[:i]) for i in range(len(sizes))]

    def vjp(g: Buffer) -> tuple[Buffer, ...]:
        return tuple(P.narrow_block(g, outer, total, s0, n, inner) for s0, n in zip(starts, sizes))

    return autograd.record("cat_block", out, tuple(tensors), vjp)


def to_device(x: Tensor, device: Any) -> Tensor:
    """A copy on another device; the VJP copies the gradient back."""
    if x._buf is None:
        from ..runtime.device import get_context

        return integer.to_device(x, get_context(device, "to").name)
    src = x.device
    out = new(x._buf.copy_to(device), x.shape)
    return autograd.record("to_device", out, (x,), lambda g: (g.copy_to(src),))


def clone(x: Tensor) -> Tensor:
    if x._buf is None:
        return integer.clone(x)
    return autograd.record("clone", new(P.copy(x._buf), x.shape), (x,), _identity_vjp)
