"""softmax / log_softmax (fused row kernels over the last axis) and mse_loss."""

from __future__ import annotations

from .. import autograd
from ..errors import ArgumentError, ShapeError
from ..runtime import primitives as P
from ..runtime.buffer import Buffer
from .._validate import real_arg
from ._base import Tensor, dim_index, fbuf, new, numel, operand, same_device, tensor_arg
from .shape import transpose


def _rows_cols(x: Tensor) -> tuple[int, int]:
    """Fold every leading axis into rows; the last axis is the row (the seed's convention)."""
    if x.ndim == 0:
        return 1, 1
    return numel(x.shape[:-1]), x.shape[-1]


def _last_axis(name: str, x: Tensor, dim: int, fn):
    if not isinstance(x, Tensor):
        tensor_arg(name, "input", x)
    d = dim_index(name, dim, x.ndim)
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
    tensor_arg("mse_loss", "input", input)
    target = operand("mse_loss", target, input)
    if input.shape != target.shape:
        raise ShapeError(f"mse_loss: input shape {input.shape} and target shape {target.shape} differ")
    same_device("mse_loss", input, target)
    if reduction not in ("mean", "sum", "none"):
        raise ArgumentError(f"mse_loss: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
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


def dropout(x: Tensor, p: float = 0.5, training: bool = True, generator=None) -> Tensor:
    """Zero each element with probability p and scale the rest by 1/(1-p) (identity when not training).

    The mask is ``bernoulli_mask(n, 1 - p, key)`` with the generator's next key, so the same seed
    drops the same elements on every device. The mask is the node's workspace.
    """
    from ..runtime.rng import default_generator

    tensor_arg("dropout", "input", x)
    p = real_arg("dropout", "p", p, 0.0, 1.0)
    if generator is not None and not hasattr(generator, "next_key"):
        raise ArgumentError(f"dropout: generator must be a torchlean.Generator or None, got {type(generator).__name__}")
    if not training or p == 0.0:
        return x
    xb = fbuf("dropout", x)
    n = xb.size
    if p == 1.0:
        return autograd.record("dropout", new(P.scale(xb, 0.0), x.shape), (x,), lambda g: (P.scale(g, 0.0),))
    keep = 1.0 - float(p)
    mask = P.bernoulli_mask(n, keep, (generator or default_generator).next_key(), x.device)
    scaled_mask = P.scale(mask, 1.0 / keep)
    mask.release()
    out = new(P.mul(xb, scaled_mask), x.shape)
    return autograd.record("dropout", out, (x,), lambda g: (P.mul(g, scaled_mask),), workspace=(scaled_mask,))
