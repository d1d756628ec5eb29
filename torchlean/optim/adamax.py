"""``Adamax``: PyTorch's update rule (Adam with the infinity norm)."""

from __future__ import annotations

from typing import Any, Callable

from .. import autograd
from ..runtime import primitives as P
from ._common import FLAGS, T, ElementwiseOptimizer, check_betas, check_nonneg, rebind

__all__ = ["Adamax"]


class Adamax(ElementwiseOptimizer):
    """``Adamax(params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, foreach=None, *,
    maximize=False, differentiable=False, capturable=False)``. State per parameter: ``step``,
    ``exp_avg``, ``exp_inf``. (The running maximum is NumPy's fmax: a NaN gradient does not enter
    ``exp_inf``, where PyTorch's maximum would carry it; the step is NaN either way.)"""

    def __init__(self, params: Any, lr: float = 2e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0, foreach: bool | None = None, *, maximize: bool = False,
                 differentiable: bool = False, capturable: bool = False) -> None:
        defaults = dict(lr=lr, betas=check_betas("Adamax", betas), eps=eps, weight_decay=weight_decay,
                        foreach=foreach, maximize=maximize, differentiable=differentiable, capturable=capturable)
        self._check_group(defaults)
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any]) -> None:
        check_nonneg("Adamax", group, "lr", "eps", "weight_decay", label={"lr": "learning rate",
                                                                          "eps": "epsilon value"})
        check_betas("Adamax", group["betas"])
        self._refuse(group, FLAGS)

    def _schema(self, group: dict[str, Any]) -> dict[str, str]:
        return {"step": "step", "exp_avg": "tensor", "exp_inf": "tensor"}

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One Adamax step over every parameter that has a gradient; returns the closure's loss."""
        loss = self._closure_loss(closure)
        with autograd.no_grad():
            for group in self.param_groups:
                lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    st = self._state_of(group, p)
                    step = self._next_step(st)
                    g = self._grad(group, p)
                    m, u = st["exp_avg"], st["exp_inf"]
                    rebind(m, T.lerp(m._buf, g, 1 - beta1))
                    rebind(u, P.max(P.scale(u._buf, beta2), P.add_scalar(P.abs(g), eps)))
                    clr = lr / (1 - beta1 ** step)
                    rebind(p, T.addcdiv(p._buf, m._buf, u._buf, -clr))
        return loss
