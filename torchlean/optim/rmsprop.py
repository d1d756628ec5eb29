"""``RMSprop``: PyTorch's update rule (momentum, centered, weight decay, maximize)."""

from __future__ import annotations

from typing import Any, Callable

from .. import autograd
from ..runtime import primitives as P
from ._common import FLAGS, T, ElementwiseOptimizer, check_nonneg, rebind

__all__ = ["RMSprop"]


class RMSprop(ElementwiseOptimizer):
    """``RMSprop(params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0, centered=False,
    capturable=False, foreach=None, maximize=False, differentiable=False)``. State per parameter:
    ``step``, ``square_avg``, and ``momentum_buffer`` (momentum > 0) and ``grad_avg`` (centered)."""

    def __init__(self, params: Any, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8,
                 weight_decay: float = 0, momentum: float = 0, centered: bool = False, capturable: bool = False,
                 foreach: bool | None = None, maximize: bool = False, differentiable: bool = False) -> None:
        defaults = dict(lr=lr, momentum=momentum, alpha=alpha, eps=eps, centered=centered,
                        weight_decay=weight_decay, capturable=capturable, foreach=foreach, maximize=maximize,
                        differentiable=differentiable)
        self._check_group(defaults)
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any]) -> None:
        check_nonneg("RMSprop", group, "lr", "eps", "momentum", "weight_decay", "alpha",
                     label={"lr": "learning rate", "eps": "epsilon value"})
        self._refuse(group, FLAGS)

    def _schema(self, group: dict[str, Any]) -> dict[str, str]:
        schema = {"step": "step", "square_avg": "tensor"}
        if group["momentum"] > 0:
            schema["momentum_buffer"] = "tensor"
        if group["centered"]:
            schema["grad_avg"] = "tensor"
        return schema

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One RMSprop step over every parameter that has a gradient; returns the closure's loss."""
        loss = self._closure_loss(closure)
        with autograd.no_grad():
            for group in self.param_groups:
                lr, alpha, eps, mom = group["lr"], group["alpha"], group["eps"], group["momentum"]
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    st = self._state_of(group, p)
                    self._next_step(st)
                    g = self._grad(group, p)
                    sq = st["square_avg"]
                    rebind(sq, T.addcmul(P.scale(sq._buf, alpha), g, g, 1 - alpha))
                    if group["centered"]:
                        ga = st["grad_avg"]
                        rebind(ga, T.lerp(ga._buf, g, 1 - alpha))
                        avg = P.sqrt(T.addcmul(sq._buf, ga._buf, ga._buf, -1.0))
                    else:
                        avg = P.sqrt(sq._buf)
                    avg = P.add_scalar(avg, eps)
                    if mom > 0:
                        buf = st["momentum_buffer"]
                        rebind(buf, T.addcdiv(P.scale(buf._buf, mom), g, avg))
                        rebind(p, P.axpy(p._buf, buf._buf, -lr))
                    else:
                        rebind(p, T.addcdiv(p._buf, g, avg, -lr))
        return loss
