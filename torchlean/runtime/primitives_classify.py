"""Primitives of the classification: cross_entropy_rows, cross_entropy_reduce, gelu, gelu_tanh and their
backward passes (checked, then dispatched like those in ``primitives``).

Conventions (the spec, ``torchlean.spec.classify``, is the reference):

* ``cross_entropy_rows(x, rows, cols, targets, label_smoothing) -> (loss, lse)``: one fused pass per
  row of the (rows, cols) logits (log-softmax and NLL together, no (rows, cols) intermediate).
  ``lse[r] = log sum_j exp(x[r, j])`` (-inf for a row of -inf, +inf when a logit is +inf, NaN
  when one is NaN); ``loss[r] = lse[r] - (1 - ls) x[r, t_r] - (ls / cols) sum_j x[r, j]``
  (PyTorch's label smoothing), evaluated as log S + (1 - ls)(m - x_t) + (ls/cols) sum (m - x_j)
  with m the row maximum, so it never cancels; a term whose coefficient is 0 is left out. A
  target >= cols marks an ignored row: loss 0.
* ``cross_entropy_rows_bwd(x, lse, dloss, rows, cols, targets, label_smoothing) -> dx``:
  ``dx[r, j] = dloss[r] (exp(x[r, j] - lse[r]) - (1 - ls) [j == t_r] - ls / cols)``; ignored rows 0.
* ``cross_entropy_reduce(x, rows, cols, targets, label_smoothing, scale) -> (loss, lse)``: loss of
  shape (1,) = fl32(scale * sum_r loss_r), the row losses (float32, as cross_entropy_rows gives
  them) summed in double in a fixed order; ``scale`` is rounded to float32 (1 for 'sum', 1 / count
  for 'mean'; NaN gives NaN). The reduced cross entropy in one call instead of three.
* ``cross_entropy_reduce_bwd(x, lse, dloss, rows, cols, targets, label_smoothing, scale) -> dx``:
  cross_entropy_rows_bwd with every ``dloss[r] = fl32(dloss[0] * scale)``: the same bits as scaling
  dloss, broadcasting it to the rows and calling cross_entropy_rows_bwd.
* ``gelu(x) = x Phi(x)`` (exact form), ``gelu_bwd(x, dy) = dy (Phi(x) + x phi(x))``;
  ``gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3)))``, ``gelu_tanh_bwd(x, dy)``.
  Stable for large |x|; gelu(+inf) = +inf, gelu(-inf) = -0, derivative 1 at +inf and 0 at -inf.

``targets`` are host integer indices, each in [0, 2**32); ``label_smoothing`` is rounded to
float32 and must lie in [0, 1].
"""

from __future__ import annotations

from typing import Any

from ..errors import ArgumentError, ShapeError
from .buffer import Buffer, check_buffer, same_device, wrap
from .checks import check_indices, check_product, check_scalar, check_u32
from .oom import run_allocating

__all__ = ["cross_entropy_rows", "cross_entropy_rows_bwd", "cross_entropy_reduce",
           "cross_entropy_reduce_bwd", "gelu", "gelu_bwd", "gelu_tanh", "gelu_tanh_bwd"]


def _label_smoothing(op: str, value: Any) -> float:
    ls = check_scalar(op, "label_smoothing", value)
    if not 0.0 <= ls <= 1.0:
        raise ArgumentError(f"{op}: argument label_smoothing must be in [0, 1], got {value!r}")
    return ls


def _ce_dims(op: str, x: Buffer, rows: Any, cols: Any, targets: Any):
    r, c = check_u32(op, "rows", rows), check_u32(op, "cols", cols)
    check_buffer(op, "x", x, check_product(op, "rows*cols", r, c))
    t = check_indices(op, "targets", targets, r)
    return r, c, t


def cross_entropy_rows(x: Buffer, rows: int, cols: int, targets: Any, label_smoothing: float) -> tuple[Buffer, Buffer]:
    """(loss, lse) of the (rows, cols) logits x against host int targets (>= cols: ignored row)."""
    op = "cross_entropy_rows"
    r, c, t = _ce_dims(op, x, rows, cols, targets)
    ls = _label_smoothing(op, label_smoothing)
    ctx = x._ctx
    loss, lse = run_allocating(op, ctx, 2 * r, ctx.backend.cross_entropy_rows, x._data, r, c, t, ls)
    return wrap(ctx, loss), wrap(ctx, lse)


def cross_entropy_rows_bwd(x: Buffer, lse: Buffer, dloss: Buffer, rows: int, cols: int, targets: Any,
                           label_smoothing: float) -> Buffer:
    """dx = dloss[r] (exp(x - lse[r]) - (1 - ls)[j == t_r] - ls/cols); zero rows where t_r >= cols."""
    op = "cross_entropy_rows_bwd"
    r, c, t = _ce_dims(op, x, rows, cols, targets)
    check_buffer(op, "lse", lse, r)
    check_buffer(op, "dloss", dloss, r)
    ls = _label_smoothing(op, label_smoothing)
    ctx = same_device(op, x=x, lse=lse, dloss=dloss)
    return wrap(ctx, run_allocating(op, ctx, x.size, ctx.backend.cross_entropy_rows_bwd,
                           x._data, lse._data, dloss._data, r, c, t, ls))


def cross_entropy_reduce(x: Buffer, rows: int, cols: int, targets: Any, label_smoothing: float,
                         scale: float) -> tuple[Buffer, Buffer]:
    """(loss (1,), lse (rows,)): scale times the sum of cross_entropy_rows's losses, one call."""
    op = "cross_entropy_reduce"
    r, c, t = _ce_dims(op, x, rows, cols, targets)
    ls = _label_smoothing(op, label_smoothing)
    sc = check_scalar(op, "scale", scale)
    ctx = x._ctx
    loss, lse = run_allocating(op, ctx, 1 + r, ctx.backend.cross_entropy_reduce, x._data, r, c, t, ls, sc)
    return wrap(ctx, loss), wrap(ctx, lse)


def cross_entropy_reduce_bwd(x: Buffer, lse: Buffer, dloss: Buffer, rows: int, cols: int, targets: Any,
                             label_smoothing: float, scale: float) -> Buffer:
    """dx of cross_entropy_reduce for the cotangent dloss (1,): cross_entropy_rows_bwd with
    dloss[r] = fl32(dloss[0] * scale) on every row."""
    op = "cross_entropy_reduce_bwd"
    r, c, t = _ce_dims(op, x, rows, cols, targets)
    check_buffer(op, "lse", lse, r)
    check_buffer(op, "dloss", dloss, 1)
    ls = _label_smoothing(op, label_smoothing)
    sc = check_scalar(op, "scale", scale)
    ctx = same_device(op, x=x, lse=lse, dloss=dloss)
    return wrap(ctx, run_allocating(op, ctx, x.size, ctx.backend.cross_entropy_reduce_bwd,
                           x._data, lse._data, dloss._data, r, c, t, ls, sc))


def _unary(name: str, x: Buffer) -> Buffer:
    check_buffer(name, "x", x)
    ctx = x._ctx
    return wrap(ctx, run_allocating(name, ctx, x.size, getattr(ctx.backend, name), x._data))


def _bwd(name: str, x: Buffer, dy: Buffer) -> Buffer:
    check_buffer(name, "x", x)
    check_buffer(name, "dy", dy)
    ctx = same_device(name, x=x, dy=dy)
    if x.size != dy.size:
        raise ShapeError(f"{name}: expected x and dy of equal size, got {x.size} and {dy.size}")
    return wrap(ctx, run_allocating(name, ctx, x.size, getattr(ctx.backend, name), x._data, dy._data))


def gelu(x: Buffer) -> Buffer:
    """x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)), stable for x -> -inf; gelu(-inf) = -0."""
    return _unary("gelu", x)


def gelu_tanh(x: Buffer) -> Buffer:
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), evaluated as x sigmoid(2z)."""
    return _unary("gelu_tanh", x)


def gelu_bwd(x: Buffer, dy: Buffer) -> Buffer:
    """dx = dy (Phi(x) + x phi(x)); 1 at +inf, 0 at -inf."""
    return _bwd("gelu_bwd", x, dy)


def gelu_tanh_bwd(x: Buffer, dy: Buffer) -> Buffer:
    """dx = dy * d/dx gelu_tanh(x); 1 at +inf, 0 at -inf."""
    return _bwd("gelu_tanh_bwd", x, dy)


