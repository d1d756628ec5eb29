"""``RAdam``: PyTorch's rectified Adam (decoupled_weight_decay)."""

from __future__ import annotations

from typing import Any, Callable

from .. import autograd
from ..runtime import primitives as P
from ._common import FLAGS, T, ElementwiseOptimizer, check_betas, check_nonneg, rebind

__all__ = ["RAdam"]


class RAdam(ElementwiseOptimizer):
    """``RAdam(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
    decoupled_weight_decay=False, *, foreach=None, maximize=False, capturable=False,
    differentiable=False)``. State per parameter: ``step``, ``exp_avg``, ``exp_avg_sq``."""

    def __init__(self, params: Any, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0, decoupled_weight_decay: bool = False, *, foreach: bool | None = None,
                 maximize: bool = False, capturable: bool = False, differentiable: bool = False) -> None:
        defaults = dict(lr=lr, betas=check_betas("RAdam", betas), eps=eps, weight_decay=weight_decay,
                        maximize=maximize, foreach=foreach, capturable=capturable,
                        decoupled_weight_decay=decoupled_weight_decay, differentiable=differentiable)
        self._check_group(defaults)
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any]) -> None:
        check_nonneg("RAdam", group, "lr", "eps", "weight_decay", label={"lr": "learning rate",
                                                                         "eps": "epsilon value"})
        check_betas("RAdam", group["betas"])
        self._refuse(group, FLAGS)

    def _schema(self, group: dict[str, Any]) -> dict[str, str]:
        return {"step": "step", "exp_avg": "tensor", "exp_avg_sq": "tensor"}

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One RAdam step over every parameter that has a gradient; returns the closure's loss."""
        loss = self._closure_loss(closure)
        with autograd.no_grad():
            for group in self.param_groups:
                lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
                wd, decoupled = group["weight_decay"], group["decoupled_weight_decay"]
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    st = self._state_of(group, p)
                    step = self._next_step(st)
                    g = self._grad(group, p, l2=not decoupled)
                    if decoupled and wd != 0:
                        rebind(p, P.scale(p._buf, 1 - lr * wd))
                    m, v = st["exp_avg"], st["exp_avg_sq"]
                    rebind(m, T.lerp(m._buf, g, 1 - beta1))
                    rebind(v, T.addcmul(P.scale(v._buf, beta2), g, g, 1 - beta2))
                    bias_correction1 = 1 - beta1 ** step
                    bias_correction2 = 1 - beta2 ** step
                    corrected = P.scale(T.div_scalar(m._buf, bias_correction1), lr)  # exp_avg / bc1 * lr
                    rho_inf = 2 / (1 - beta2) - 1
                    rho_t = rho_inf - 2 * step * (beta2 ** step) / bias_correction2
                    if rho_t > 5.0:
                        adaptive = T.rdiv_scalar(bias_correction2 ** 0.5, P.add_scalar(P.sqrt(v._buf), eps))
                        rect = ((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t)) ** 0.5
                        corrected = P.scale(P.mul(corrected, adaptive), rect)
                    rebind(p, P.sub(p._buf, corrected))
        return loss
