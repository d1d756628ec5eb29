"""``NAdam``: PyTorch's update rule (momentum_decay, decoupled_weight_decay)."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .. import autograd
from ..runtime import primitives as P
from ._common import FLAGS, T, ElementwiseOptimizer, check_betas, check_nonneg, rebind, scalar_tensor
from .optimizer import step_value

__all__ = ["NAdam"]


class NAdam(ElementwiseOptimizer):
    """``NAdam(params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, momentum_decay=4e-3,
    decoupled_weight_decay=False, *, foreach=None, maximize=False, capturable=False,
    differentiable=False)``. State per parameter: ``step``, ``mu_product`` (a 0-d float32 CPU
    tensor, multiplied in float32 as PyTorch does), ``exp_avg``, ``exp_avg_sq``."""

    def __init__(self, params: Any, lr: float = 2e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0, momentum_decay: float = 4e-3, decoupled_weight_decay: bool = False, *,
                 foreach: bool | None = None, maximize: bool = False, capturable: bool = False,
                 differentiable: bool = False) -> None:
        defaults = dict(lr=lr, betas=check_betas("NAdam", betas), eps=eps, weight_decay=weight_decay,
                        momentum_decay=momentum_decay, decoupled_weight_decay=decoupled_weight_decay,
                        maximize=maximize, foreach=foreach, capturable=capturable, differentiable=differentiable)
        self._check_group(defaults)
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any]) -> None:
        check_nonneg("NAdam", group, "lr", "eps", "weight_decay", "momentum_decay",
                     label={"lr": "learning rate", "eps": "epsilon value"})
        check_betas("NAdam", group["betas"])
        self._refuse(group, FLAGS)

    def _schema(self, group: dict[str, Any]) -> dict[str, str]:
        return {"step": "step", "mu_product": "scalar", "exp_avg": "tensor", "exp_avg_sq": "tensor"}

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One NAdam step over every parameter that has a gradient; returns the closure's loss."""
        loss = self._closure_loss(closure)
        with autograd.no_grad():
            for group in self.param_groups:
                lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
                wd, md, decoupled = group["weight_decay"], group["momentum_decay"], group["decoupled_weight_decay"]
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    st = self._state_of(group, p)
                    step = self._next_step(st)
                    g = self._grad(group, p, l2=not decoupled)
                    if decoupled and wd != 0:
                        rebind(p, P.scale(p._buf, 1 - lr * wd))
                    bias_correction2 = 1 - beta2 ** step
                    mu = beta1 * (1.0 - 0.5 * (0.96 ** (step * md)))
                    mu_next = beta1 * (1.0 - 0.5 * (0.96 ** ((step + 1) * md)))
                    # PyTorch's `mu_product *= mu` on a float32 tensor: a float32 product
                    mu_product = float(np.float32(step_value(st["mu_product"])) * np.float32(mu))
                    st["mu_product"] = scalar_tensor(mu_product)
                    m, v = st["exp_avg"], st["exp_avg_sq"]
                    rebind(m, T.lerp(m._buf, g, 1 - beta1))
                    rebind(v, T.addcmul(P.scale(v._buf, beta2), g, g, 1 - beta2))
                    denom = P.add_scalar(P.sqrt(T.div_scalar(v._buf, bias_correction2)), eps)
                    mu_product_next = mu_product * mu_next
                    pb = T.addcdiv(p._buf, g, denom, -lr * (1.0 - mu) / (1.0 - mu_product))
                    rebind(p, T.addcdiv(pb, m._buf, denom, (-lr * mu_next) / (1.0 - mu_product_next)))
        return loss
