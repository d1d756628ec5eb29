"""softmax / log_softmax (fused row kernels over the last axis) and mse_loss."""

from __future__ import annotations

from .. import autograd
from ..errors import ShapeError
from ..runtime import primitives as P
from ..runtime.buffer import Buffer
from ._base import Tensor, _axis, fbuf, new, numel, operand, same_device
from .shape import transpose


def _rows_cols(x: Tensor) -> tuple[int, int]:
    """Fold every leading axis into rows; the last axis is the row (the seed's convention)."""
    if x.ndim == 0:
        return 1, 1
    return numel(x.shape[:-1]), x.shape[-1]


def _last_axis(name: str, x: Tensor, dim: int, fn):
    d = _axis(name, dim, x.ndim)
    if x.ndim == 0 or d == x.ndim - 1:
        return fn(x)
    return transpose(fn(transpose(x, d, -1)), d, -1)


def softmax(x: Tensor, dim: int = -1) -> Tensor:
    def last(x_: Tensor) -> Tensor:
        rows, cols = _rows_cols(x_)
        yb = P.softmax_rows(fbuf("softmax", x_), rows, cols)
        return autograd.record("softmax", new(yb, x_.shape), (x_,), lambda g: (P.softmax_rows_bwd(yb, g, rows, cols),))

    return _last_axis("softmax", x, dim, last)


def log_softmax(x: Tensor, dim: int = -1) -> Tensor:
    def last(x_: Tensor) -> Tensor:
        rows, cols = _rows_cols(x_)
        yb = P.log_softmax_rows(fbuf("log_softmax", x_), rows, cols)
        return autograd.record("log_softmax", new(yb, x_.shape), (x_,),
                               lambda g: (P.log_softmax_rows_bwd(yb, g, rows, cols),))

    return _last_axis("log_softmax", x, dim, last)


def mse_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    """mean((input - target)^2) (or "sum" / "none"). The difference is the node's workspace."""
    target = operand("mse_loss", target, input)
    if input.shape != target.shape:
        raise ShapeError(f"mse_loss: input shape {input.shape} and target shape {target.shape} differ")
    same_device("mse_loss", input, target)
    if reduction not in ("mean", "sum", "none"):
        raise ShapeError(f"mse_loss: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    n = input.numel()
    diff = P.sub(fbuf("mse_loss", input), fbuf("mse_loss", target))
    sq = P.mul(diff, diff)
    if reduction == "none":
        out = new(sq, input.shape)
        coef = 2.0
    else:
        out = new(P.reduce_mean(sq) if reduction == "mean" else P.reduce_sum(sq), ())
        sq.release()
        coef = 2.0 / n if (reduction == "mean" and n) else 2.0

    def vjp(g: Buffer):
        # d/dinput = coef * diff * g (g broadcast from the scalar for mean/sum)
        gb = g if reduction == "none" else P.broadcast_to(g, (), (n,), (0,))
        d = P.scale(P.mul(diff, gb), coef)
        return d, (P.scale(d, -1.0) if target.requires_grad else None)

    return autograd.record("mse_loss", out, (input, target), vjp, workspace=(diff,))
