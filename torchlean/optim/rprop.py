"""``Rprop``: PyTorch's resilient backpropagation (per-element step sizes driven by gradient signs)."""

from __future__ import annotations

import math
from typing import Any, Callable

from .. import autograd
from ..errors import ArgumentError
from ..runtime import primitives as P
from ..runtime.buffer import Buffer, full, zeros
from ..tensor import Tensor
from ._common import FLAGS, T, ElementwiseOptimizer, check_nonneg, rebind
from .optimizer import check_real, step_tensor

__all__ = ["Rprop"]


def _pair(name: str, key: str, value: Any) -> tuple[float, float]:
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise ArgumentError(f"{name}: {key} must be a pair of floats, got {value!r}")
    for i in (0, 1):
        check_real(name, f"{key}[{i}]", value[i])
    return (value[0], value[1])


class Rprop(ElementwiseOptimizer):
    """``Rprop(params, lr=1e-2, etas=(0.5, 1.2), step_sizes=(1e-6, 50), *, capturable=False,
    foreach=None, maximize=False, differentiable=False)``. State per parameter, created at its
    first step as in PyTorch: ``step``, ``prev`` (the last step's sign-filtered gradient, zeros
    at first) and ``step_size`` (``lr`` at first).

    Each step: where ``grad * prev`` is positive the step size grows by ``etas[1]``, where it is
    negative it shrinks by ``etas[0]`` and the gradient is taken as 0 (no move, and ``prev`` is 0
    so the next step does not shrink again), elsewhere it stays; step sizes are clamped to
    ``step_sizes`` and the parameter moves by ``-sign(grad) * step_size``."""

    def __init__(self, params: Any, lr: float = 1e-2, etas: tuple[float, float] = (0.5, 1.2),
                 step_sizes: tuple[float, float] = (1e-6, 50), *, capturable: bool = False,
                 foreach: bool | None = None, maximize: bool = False, differentiable: bool = False) -> None:
        defaults = dict(lr=lr, etas=_pair("Rprop", "etas", etas), step_sizes=_pair("Rprop", "step_sizes", step_sizes),
                        foreach=foreach, maximize=maximize, differentiable=differentiable, capturable=capturable)
        self._check_group(defaults)
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any]) -> None:
        check_nonneg("Rprop", group, "lr", label={"lr": "learning rate"})
        etaminus, etaplus = _pair("Rprop", "etas", group["etas"])
        if not 0.0 < etaminus < 1.0 < etaplus:
            raise ArgumentError(f"Rprop: Invalid eta values: {etaminus}, {etaplus}")
        lo, hi = _pair("Rprop", "step_sizes", group["step_sizes"])
        if not (math.isfinite(lo) and math.isfinite(hi)):  # a state dict keeps finite hyperparameters
            raise ArgumentError(f"Rprop: Invalid step_sizes: {lo}, {hi} (expected finite numbers)")
        self._refuse(group, FLAGS)

    def _schema(self, group: dict[str, Any]) -> dict[str, str]:
        return {"step": "step", "prev": "tensor", "step_size": "tensor"}

    def _init_state(self, group: dict[str, Any], p: Tensor) -> dict[str, Any]:
        n, dev = p._buf.size, p._buf.device
        return {"step": step_tensor(0.0), "prev": Tensor._wrap(zeros(n, dev), p.shape),
                "step_size": Tensor._wrap(full(n, group["lr"], dev), p.shape)}

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One Rprop step over every parameter that has a gradient; returns the closure's loss."""
        loss = self._closure_loss(closure)
        with autograd.no_grad():
            for group in self.param_groups:
                etaminus, etaplus = group["etas"]
                lo, hi = group["step_sizes"]
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    st = self._state_of(group, p)
                    self._next_step(st)
                    g = self._grad(group, p)  # Rprop has no weight decay: maximize only
                    prev, size = st["prev"], st["step_size"]
                    factor = _factor(P.sign(P.mul(g, prev._buf)), etaminus, etaplus)
                    rebind(size, P.clamp(P.mul(size._buf, factor), lo, hi))
                    # where the factor is etaminus (the sign flipped) the gradient counts as 0:
                    # factor - etaminus is 0 exactly there and > 0 elsewhere (etaminus < 1 < etaplus)
                    g = P.relu_bwd(P.add_scalar(factor, -etaminus), g)
                    rebind(p, T.addcmul(p._buf, P.sign(g), size._buf, -1.0))
                    rebind(prev, g)
        return loss


def _factor(sign: Buffer, etaminus: float, etaplus: float) -> Buffer:
    """etaplus where sign > 0, etaminus where sign < 0, 1 where it is 0 (each float32-rounded, as
    PyTorch writes them into its float32 sign tensor). Exactly one term is nonzero per element,
    so the sum is exact."""
    pos, neg = P.relu(sign), P.relu(P.scale(sign, -1.0))
    flat = P.add_scalar(P.scale(P.abs(sign), -1.0), 1.0)
    return P.add(P.add(P.scale(pos, etaplus), P.scale(neg, etaminus)), flat)
