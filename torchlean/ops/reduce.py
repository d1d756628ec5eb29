"""sum and mean, over everything or over some axes; the VJP broadcasts the gradient back."""

from __future__ import annotations

from typing import Any, Sequence

from .. import autograd
from ..runtime import primitives as P
from ..runtime.buffer import Buffer
from .._validate import bool_arg, unique_dims
from ..errors import DTypeError
from . import integer
from ._base import Tensor, dim_index, axis_map_for, fbuf, new, numel, tensor_arg


def _dims(op: str, dim: Any, rank: int) -> list[int]:
    """The reduced axes, sorted; a dim named twice is refused (as PyTorch does)."""
    if dim is None:
        return list(range(rank))
    if type(dim) is int:
        return [dim_index(op, dim, rank)]
    return unique_dims(op, dim, rank, dim_index)


def _expand_grad(g: Buffer, kept_shape: Sequence[int], full_shape: Sequence[int]) -> Buffer:
    """Broadcast a gradient shaped like the keepdim result back to the input's shape."""
    if tuple(kept_shape) == tuple(full_shape):
        return g
    amap = tuple(j + 1 for j in range(len(full_shape)))
    return P.broadcast_to(g, tuple(kept_shape), tuple(full_shape), amap)


def sum(x: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
    if not isinstance(x, Tensor):
        tensor_arg("sum", "input", x)
    if keepdim is not False and keepdim is not True:
        keepdim = bool_arg("sum", "keepdim", keepdim)
    if x._buf is None:
        return integer.sum(x, dim, keepdim)  # int64, as PyTorch sums every integer and bool dtype
    xb = fbuf("sum", x)
    axes = _dims("sum", dim, x.ndim)
    shape = x.shape
    kept = tuple(1 if j in axes else s for j, s in enumerate(shape))
    out_shape = kept if keepdim else tuple(s for j, s in enumerate(shape) if j not in axes)
    if len(axes) == x.ndim:
        yb = P.reduce_sum(xb)
    else:
        yb, cur = xb, list(shape)
        for a in reversed(axes):  # highest axis first so lower axis numbers stay valid
            prev = yb
            yb = P.reduce_sum_axis(yb, tuple(cur), a)
            if prev is not xb:
                prev.release()  # an intermediate of this op only
            cur.pop(a)
    return autograd.record("sum", new(yb, out_shape), (x,), lambda g: (_expand_grad(g, kept, shape),))


def mean(x: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
    if not isinstance(x, Tensor):
        tensor_arg("mean", "input", x)
    if keepdim is not False and keepdim is not True:
        keepdim = bool_arg("mean", "keepdim", keepdim)
    if x._buf is None:
        raise DTypeError(f"mean: expected a floating point tensor, got {x.dtype!r} (PyTorch refuses it too; "
                         f"use x.float().mean())")
    axes = _dims("mean", dim, x.ndim)
    count = numel([x.shape[a] for a in axes])
    if len(axes) == x.ndim:
        xb = fbuf("mean", x)
        shape = x.shape
        kept = tuple(1 for _ in shape)
        out_shape = kept if keepdim else ()
        yb = P.reduce_mean(xb)
        inv = 1.0 / count if count else float("nan")
        return autograd.record("mean", new(yb, out_shape), (x,),
                               lambda g: (_expand_grad(P.scale(g, inv), kept, shape),))
    s = sum(x, dim, keepdim)
    from .elementwise import mul

    return mul(s, 1.0 / count if count else float("nan"))
