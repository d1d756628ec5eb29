"""``ASGD``: PyTorch's averaged stochastic gradient descent (decaying step size, running average)."""

from __future__ import annotations

from typing import Any, Callable

from .. import autograd
from ..runtime import primitives as P
from ..runtime.buffer import zeros
from ..tensor import Tensor
from ._common import FLAGS, ElementwiseOptimizer, check_nonneg, rebind, scalar_tensor
from .optimizer import check_real, step_tensor, step_value

__all__ = ["ASGD"]


class ASGD(ElementwiseOptimizer):
    """``ASGD(params, lr=1e-2, lambd=1e-4, alpha=0.75, t0=1e6, weight_decay=0, foreach=None,
    maximize=False, differentiable=False, capturable=False)``. State per parameter, created at
    its first step as in PyTorch: ``step``, ``eta`` (the step size, ``lr`` at first), ``mu`` (the
    averaging weight, 1 at first), both 0-d float32 tensors, and ``ax`` (the average).

    Each step: ``p = p * (1 - lambd * eta) - eta * grad``; ``ax`` becomes ``p`` while ``mu`` is 1
    and moves toward it by ``mu`` after; then ``eta = lr / (1 + lambd * lr * step) ** alpha`` and
    ``mu = 1 / max(1, step - t0)``."""

    def __init__(self, params: Any, lr: float = 1e-2, lambd: float = 1e-4, alpha: float = 0.75, t0: float = 1e6,
                 weight_decay: float = 0, foreach: bool | None = None, maximize: bool = False,
                 differentiable: bool = False, capturable: bool = False) -> None:
        defaults = dict(lr=lr, lambd=lambd, alpha=alpha, t0=t0, weight_decay=weight_decay, foreach=foreach,
                        maximize=maximize, differentiable=differentiable, capturable=capturable)
        self._check_group(defaults)
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any]) -> None:
        check_nonneg("ASGD", group, "lr", "weight_decay", label={"lr": "learning rate"})
        for key in ("lambd", "alpha", "t0"):
            check_real("ASGD", key, group[key])
        self._refuse(group, FLAGS)

    def _schema(self, group: dict[str, Any]) -> dict[str, str]:
        return {"step": "step", "eta": "scalar", "mu": "scalar", "ax": "tensor"}

    def _init_state(self, group: dict[str, Any], p: Tensor) -> dict[str, Any]:
        return {"step": step_tensor(0.0), "eta": scalar_tensor(group["lr"]), "mu": scalar_tensor(1.0),
                "ax": Tensor._wrap(zeros(p._buf.size, p._buf.device), p.shape)}

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One ASGD step over every parameter that has a gradient; returns the closure's loss."""
        loss = self._closure_loss(closure)
        with autograd.no_grad():
            for group in self.param_groups:
                lr, lambd, alpha, t0 = group["lr"], group["lambd"], group["alpha"], group["t0"]
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    st = self._state_of(group, p)
                    step = self._next_step(st)
                    g = self._grad(group, p)
                    eta, mu = step_value(st["eta"]), step_value(st["mu"])  # the float32 values, as .item()
                    rebind(p, P.axpy(P.scale(p._buf, 1 - lambd * eta), g, -eta))
                    ax = st["ax"]
                    if mu != 1:
                        rebind(ax, P.add(ax._buf, P.scale(P.sub(p._buf, ax._buf), mu)))
                    else:
                        rebind(ax, P.copy(p._buf))
                    st["eta"] = scalar_tensor(lr / ((1 + lambd * lr * step) ** alpha))
                    st["mu"] = scalar_tensor(1 / max(1, step - t0))
        return loss
