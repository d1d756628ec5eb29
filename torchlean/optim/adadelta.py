"""``Adadelta``: PyTorch's update rule (rho, eps, weight decay, maximize)."""

from __future__ import annotations

from typing import Any, Callable

from .. import autograd
from ..errors import ArgumentError
from ..runtime import primitives as P
from ._common import FLAGS, T, ElementwiseOptimizer, check_nonneg, rebind
from .optimizer import check_real

__all__ = ["Adadelta"]


class Adadelta(ElementwiseOptimizer):
    """``Adadelta(params, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0, foreach=None, *, capturable=False,
    maximize=False, differentiable=False)``. State per parameter: ``step``, ``square_avg``,
    ``acc_delta``."""

    def __init__(self, params: Any, lr: float = 1.0, rho: float = 0.9, eps: float = 1e-6, weight_decay: float = 0,
                 foreach: bool | None = None, *, capturable: bool = False, maximize: bool = False,
                 differentiable: bool = False) -> None:
        defaults = dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, maximize=maximize,
                        capturable=capturable, foreach=foreach, differentiable=differentiable)
        self._check_group(defaults)
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any]) -> None:
        check_nonneg("Adadelta", group, "lr", "eps", "weight_decay",
                     label={"lr": "learning rate", "eps": "epsilon value"})
        if not 0.0 <= check_real("Adadelta", "rho", group["rho"]) <= 1.0:
            raise ArgumentError(f"Adadelta: Invalid rho value: {group['rho']}")
        self._refuse(group, FLAGS)

    def _schema(self, group: dict[str, Any]) -> dict[str, str]:
        return {"step": "step", "square_avg": "tensor", "acc_delta": "tensor"}

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One Adadelta step over every parameter that has a gradient; returns the closure's loss."""
        loss = self._closure_loss(closure)
        with autograd.no_grad():
            for group in self.param_groups:
                lr, rho, eps = group["lr"], group["rho"], group["eps"]
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    st = self._state_of(group, p)
                    self._next_step(st)
                    g = self._grad(group, p)
                    sq, acc = st["square_avg"], st["acc_delta"]
                    rebind(sq, T.addcmul(P.scale(sq._buf, rho), g, g, 1 - rho))
                    std = P.sqrt(P.add_scalar(sq._buf, eps))
                    delta = P.mul(P.div(P.sqrt(P.add_scalar(acc._buf, eps)), std), g)
                    rebind(acc, T.addcmul(P.scale(acc._buf, rho), delta, delta, 1 - rho))
                    rebind(p, P.axpy(p._buf, delta, -lr))
        return loss
