"""``SGD``: PyTorch's stochastic gradient descent (momentum, dampening, nesterov, weight decay)."""

from __future__ import annotations

from typing import Any, Callable

from .. import autograd
from ..errors import ArgumentError
from ..runtime import primitives as P
from ..tensor import Tensor
from .optimizer import Optimizer, check_real

__all__ = ["SGD"]


class SGD(Optimizer):
    """``SGD(params, lr=1e-3, momentum=0, dampening=0, weight_decay=0, nesterov=False, maximize=False)``,
    PyTorch's update rule (one fused ``sgd_step`` per parameter). ``maximize=True`` is not supported
    (ArgumentError); foreach/fused accept None or False and change nothing."""

    _state_schema = {"momentum_buffer": "tensor_or_none"}  # (load_state_dict checks it)

    def __init__(self, params: Any, lr: float = 1e-3, momentum: float = 0, dampening: float = 0,
                 weight_decay: float = 0, nesterov: bool = False, *, maximize: bool = False,
                 foreach: bool | None = None, differentiable: bool = False, fused: bool | None = None) -> None:
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                        nesterov=nesterov, maximize=maximize, foreach=foreach, differentiable=differentiable,
                        fused=fused)
        self._check_group(defaults)
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any]) -> None:
        lr = check_real("SGD", "lr", group["lr"])
        if lr < 0.0:
            raise ArgumentError(f"SGD: Invalid learning rate: {group['lr']}")
        if check_real("SGD", "momentum", group["momentum"]) < 0.0:
            raise ArgumentError(f"SGD: Invalid momentum value: {group['momentum']}")
        check_real("SGD", "dampening", group["dampening"])
        if check_real("SGD", "weight_decay", group["weight_decay"]) < 0.0:
            raise ArgumentError(f"SGD: Invalid weight_decay value: {group['weight_decay']}")
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ArgumentError("SGD: Nesterov momentum requires a momentum and zero dampening")
        self._refuse(group, {"maximize": (False,), "foreach": (None, False, True), "fused": (None, False, True),
                             "differentiable": (False,)})

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One SGD step over every parameter that has a gradient; returns the closure's loss.

        Every step rebinds the parameter (and its momentum buffer) to the fused step's new buffers:
        SGD never writes in place, so memory shared with another holder (a DLPack source, a view, a
        ``state_dict()`` snapshot) keeps its values, the rule every optimizer follows
        (``optimizer.exclusively_held``)."""
        loss = self._closure_loss(closure)
        sgd_step = P.sgd_step
        with autograd.no_grad():
            for group in self.param_groups:
                lr, mom, damp = group["lr"], group["momentum"], group["dampening"]
                wd, nesterov = group["weight_decay"], bool(group["nesterov"])
                for p in group["params"]:
                    g = p.grad
                    if g is None:
                        continue
                    pb = p._buf
                    if mom != 0:
                        st = self.state[p]
                        buf = st.get("momentum_buffer")
                        if buf is None:
                            pn, bn = sgd_step(pb, g._float_buffer("SGD.step"), None, pb.size, lr, mom, damp, wd,
                                              nesterov, True)
                            st["momentum_buffer"] = Tensor._wrap(bn, p.shape)
                        else:
                            pn, bn = sgd_step(pb, g._float_buffer("SGD.step"), buf._buf, pb.size, lr, mom, damp,
                                              wd, nesterov, False)
                            buf._rebind(bn)
                    else:
                        pn, bn = sgd_step(pb, g._float_buffer("SGD.step"), None, pb.size, lr, 0.0, damp, wd, False,
                                          True)
                        bn.release()
                    p._rebind(pn)
        return loss
