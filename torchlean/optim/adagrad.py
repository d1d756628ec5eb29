"""``Adagrad``: PyTorch's update rule (lr_decay, initial_accumulator_value, weight decay, maximize)."""

from __future__ import annotations

from typing import Any, Callable

from .. import autograd
from ..runtime import primitives as P
from ..runtime.buffer import full
from ..tensor import Tensor
from ._common import FLAGS, T, ElementwiseOptimizer, check_nonneg, rebind
from .optimizer import step_tensor

__all__ = ["Adagrad"]


class Adagrad(ElementwiseOptimizer):
    """``Adagrad(params, lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0, eps=1e-10,
    foreach=None, *, maximize=False, differentiable=False, fused=None)``. As in PyTorch, the state
    (``step``, ``sum``) of every parameter is created by the constructor (and by
    ``add_param_group``), so ``state_dict()`` lists it before the first step."""

    def __init__(self, params: Any, lr: float = 1e-2, lr_decay: float = 0, weight_decay: float = 0,
                 initial_accumulator_value: float = 0, eps: float = 1e-10, foreach: bool | None = None, *,
                 maximize: bool = False, differentiable: bool = False, fused: bool | None = None) -> None:
        defaults = dict(lr=lr, lr_decay=lr_decay, eps=eps, weight_decay=weight_decay,
                        initial_accumulator_value=initial_accumulator_value, foreach=foreach, maximize=maximize,
                        differentiable=differentiable, fused=fused)
        self._check_group(defaults)
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any]) -> None:
        check_nonneg("Adagrad", group, "lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps",
                     label={"lr": "learning rate", "eps": "epsilon value"})
        self._refuse(group, FLAGS)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        for p in group["params"]:
            self.state[p].update(self._init_state(group, p))

    def _schema(self, group: dict[str, Any]) -> dict[str, str]:
        return {"step": "step", "sum": "tensor"}

    def _init_state(self, group: dict[str, Any], p: Tensor) -> dict[str, Any]:
        init = group["initial_accumulator_value"]
        return {"step": step_tensor(0.0), "sum": Tensor._wrap(full(p._buf.size, init, p._buf.device), p.shape)}

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One Adagrad step over every parameter that has a gradient; returns the closure's loss."""
        loss = self._closure_loss(closure)
        with autograd.no_grad():
            for group in self.param_groups:
                lr, lr_decay, eps = group["lr"], group["lr_decay"], group["eps"]
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    st = self._state_of(group, p)
                    step = self._next_step(st)
                    g = self._grad(group, p)
                    clr = lr / (1 + (step - 1) * lr_decay)
                    s = st["sum"]
                    rebind(s, T.addcmul(s._buf, g, g))
                    std = P.add_scalar(P.sqrt(s._buf), eps)
                    rebind(p, T.addcdiv(p._buf, g, std, -clr))
        return loss
