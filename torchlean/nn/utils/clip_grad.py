"""``clip_grad_norm_``: PyTorch's gradient clipping by total norm, deterministic.

total = norm of the per-gradient norms (PyTorch's two-level form); clip_coef = max_norm /
(total + 1e-6) in float32, clamped to at most 1; every gradient is multiplied by it (always, as
PyTorch does, so a coefficient of exactly 1 leaves the gradients' bits unchanged). Every sum runs
in an order fixed by the shapes, so the result is bitwise repeatable:

* norm_type 2 (the common case) takes the multi-tensor primitives, a handful of launches whatever
  the number of parameters (PyTorch's _foreach path): ``norm2_many`` gives every gradient's norm
  (its squares summed in double in a fixed chunked order, the same bits on the CPU and CUDA,
  rounded to float32 once), total = sqrt(reduce_sum(norms * norms)) (the float32 squares of the
  norms summed by reduce_sum's fixed order over the parameter axis), and ``scale_many``
  multiplies every gradient by the coefficient (each gradient tensor rebound to its new buffer,
  as ``mul_`` rebinds it).
* other orders: a reduction per gradient (reduce_sum, or reduce_max for inf), then the gradients'
  norms combined one by one in parameter order, and ``mul_`` per gradient.

Nothing is copied to the host unless ``error_if_nonfinite`` asks for the check.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Iterable

import numpy as np

from ... import autograd
from ...errors import ArgumentError, TorchLeanError
from ...runtime import primitives as P
from ...runtime.buffer import Buffer, full
from ...complex_tensor import ComplexTensor
from ...tensor import Tensor

__all__ = ["clip_grad_norm_", "NonFiniteNormError"]

_F32_MAX = float(np.finfo(np.float32).max)


class NonFiniteNormError(TorchLeanError, RuntimeError):
    """clip_grad_norm_(error_if_nonfinite=True) found a NaN or infinite total norm."""


def _norm_type(value: Any) -> float:
    if isinstance(value, str) and value.lower() in ("inf", "+inf"):
        return math.inf
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ArgumentError(f"clip_grad_norm_: norm_type must be a positive number or inf, got {value!r}")
    p = float(value)
    if not p > 0:
        raise ArgumentError(f"clip_grad_norm_: norm_type {value!r} is not supported (use a p > 0 or inf)")
    return p


def _grad_norm(g: Buffer, p: float) -> tuple[Buffer, Buffer | None]:
    """(norm of g as a length-1 buffer, NaN marker for the inf norm or None)."""
    n = g.size
    if p == 2.0:
        return P.sqrt(P.reduce_sum(P.mul(g, g))), None
    if p == 1.0:
        return P.reduce_sum(P.abs(g)), None
    if math.isinf(p):
        # reduce_max ignores NaN (fmax): a NaN marker (0 or NaN) restores PyTorch's NaN result.
        c = P.clamp(g, -_F32_MAX, _F32_MAX)
        return P.reduce_max_axis1(P.abs(g), 1, n), P.reduce_sum(P.sub(c, c))
    return _pow(P.reduce_sum(_pow(P.abs(g), p)), 1.0 / p), None


def _pow(x: Buffer, e: float) -> Buffer:
    """x**e for x >= 0 as exp(e log x) (0 at x = 0, inf at inf): within a few ulp of PyTorch's pow."""
    return P.exp(P.scale(P.log(x), e))


def _grads(params: list, p: float) -> tuple[list[Tensor], list[Tensor]]:
    """(the gradients to scale, the tensors whose norms make the total). A complex parameter's
    gradient is scaled through its real view and measured, as PyTorch does, by its elementwise
    moduli |g| (for p = 2 the real view's norm is the same number)."""
    grads, measured = [], []
    for t in params:
        if isinstance(t, ComplexTensor) and t.grad is not None:
            grads.append(t.real_view().grad)
            if p == 2.0:
                measured.append(grads[-1])
            else:
                with autograd.no_grad():
                    measured.append(t.grad.abs())
        elif isinstance(t, Tensor) and t.grad is not None:
            grads.append(t.grad)
            measured.append(t.grad)
    return grads, measured


def clip_grad_norm_(parameters: Any, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False,
                    foreach: bool | None = None) -> Tensor:
    """Clip the gradients of ``parameters`` (a tensor or an iterable of tensors) in place so that
    their total ``norm_type`` norm is at most ``max_norm``; returns the total norm (a 0-d tensor)
    before clipping. ``foreach`` is accepted and changes nothing. norm_type: any p > 0 or inf
    (PyTorch's 0 and -inf are not supported: ArgumentError)."""
    if isinstance(parameters, (Tensor, ComplexTensor)):
        parameters = [parameters]
    params: Iterable[Tensor] = list(parameters)
    if isinstance(max_norm, bool) or not isinstance(max_norm, numbers.Real):
        raise ArgumentError(f"clip_grad_norm_: max_norm must be a real number, got {max_norm!r}")
    p = _norm_type(norm_type)
    grads, measured = _grads(params, p)
    if not grads:
        return Tensor._wrap(full(1, 0.0, "cpu"), ())
    dev = grads[0].device
    if p == 2.0:
        with autograd.no_grad():
            return _clip_l2(grads, measured, dev, max_norm, norm_type, error_if_nonfinite)
    with autograd.no_grad():
        total = nan_acc = None
        for g in measured:
            gb = g._float_buffer("clip_grad_norm_")
            if g.device != dev:
                raise ArgumentError(f"clip_grad_norm_: gradients on several devices ({dev} and {g.device}) "
                                    f"are not supported")
            n_i, marker = _grad_norm(gb, p)
            if marker is not None:
                nan_acc = marker if nan_acc is None else P.add(nan_acc, marker)
            if math.isinf(p):
                total = n_i if total is None else P.max(total, n_i)
            elif p == 2.0:
                sq = P.mul(n_i, n_i)
                total = sq if total is None else P.add(total, sq)
            elif p == 1.0:
                total = n_i if total is None else P.add(total, n_i)
            else:
                t_p = _pow(n_i, p)
                total = t_p if total is None else P.add(total, t_p)
        if p == 2.0:
            total = P.sqrt(total)
        elif math.isinf(p):
            total = P.add(total, nan_acc)
        elif p != 1.0:
            total = _pow(total, 1.0 / p)
        total_t = Tensor._wrap(total, ())
        if error_if_nonfinite:
            _check_finite(total, norm_type)
        coef_t = Tensor._wrap(_coefficient(total, max_norm, dev), ())
        for g in grads:
            g.mul_(coef_t)
    return total_t


def _check_finite(total: Buffer, norm_type: Any) -> None:
    value = float(total.to_numpy()[0])
    if not math.isfinite(value):
        raise NonFiniteNormError(
            f"clip_grad_norm_: the total norm of order {norm_type} of the gradients is {value}, so they "
            f"cannot be clipped; set error_if_nonfinite=False to clip anyway")


def _coefficient(total: Buffer, max_norm: float, dev: Any) -> Buffer:
    """clamp(max_norm / (total + 1e-6), max=1) in float32, on the device (a length-1 buffer)."""
    return P.clamp(P.div(full(1, float(max_norm), dev), P.add_scalar(total, 1e-6)), -math.inf, 1.0)


def _clip_l2(grads: list[Tensor], measured: list[Tensor], dev: Any, max_norm: float, norm_type: Any,
             error_if_nonfinite: bool) -> Tensor:
    """The p = 2 path (under no_grad): a fixed handful of primitive calls whatever the number of
    gradients (norm2_many, mul, reduce_sum, sqrt, the coefficient's three, scale_many)."""
    bufs = []
    for g in measured:
        gb = g._float_buffer("clip_grad_norm_")
        if g.device != dev:
            raise ArgumentError(f"clip_grad_norm_: gradients on several devices ({dev} and {g.device}) "
                                f"are not supported")
        bufs.append(gb)
    norms = P.norm2_many(bufs)
    total = P.sqrt(P.reduce_sum(P.mul(norms, norms)))
    total_t = Tensor._wrap(total, ())
    if error_if_nonfinite:
        _check_finite(total, norm_type)
    coef = _coefficient(total, max_norm, dev)
    scaled = P.scale_many([g._float_buffer("clip_grad_norm_") for g in grads], coef)
    for g, buf in zip(grads, scaled):
        # what g.mul_(coef) does under no_grad: the same checks, then g holds the new buffer
        g._assign("mul_", Tensor._wrap(buf, g._shape))
    return total_t
