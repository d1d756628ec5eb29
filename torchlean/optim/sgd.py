"""``SGD``: PyTorch's stochastic gradient descent (momentum, dampening, nesterov, weight decay), fused
steps (``sgd_step_many``: one launch per group)."""

from __future__ import annotations

from typing import Any, Callable

from .. import autograd
from ..errors import ArgumentError
from ..runtime import primitives as P
from ..runtime.buffer import zeros
from ..tensor import Tensor
from .optimizer import Optimizer, check_real, own_rows

__all__ = ["SGD"]


class SGD(Optimizer):
    """``SGD(params, lr=1e-3, momentum=0, dampening=0, weight_decay=0, nesterov=False, maximize=False)``,
    PyTorch's update rule (fused: one ``sgd_step_many`` call per group). ``maximize=True`` is not supported
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

        Parameters of a group that share a device and a momentum-buffer presence (momentum 0 keeps
        none; the first step with momentum creates it from the gradient) are updated by one
        ``sgd_step_many`` call (one kernel launch on CUDA), bitwise the same as one ``sgd_step``
        per parameter. The step writes over p (and its buffer) in place; a tensor whose buffer is
        also held elsewhere (a DLPack source, a view, a ``state_dict()`` snapshot, a retained
        graph) is first rebound to a copy of its own (``own_rows``, one tensor at a time), so the
        holder keeps its values. The first step with momentum makes the buffers."""
        loss = self._closure_loss(closure)
        state = self.state
        with autograd.no_grad():
            for group in self.param_groups:
                lr, mom, damp = group["lr"], group["momentum"], group["dampening"]
                wd, nesterov = group["weight_decay"], bool(group["nesterov"])
                buckets: dict[tuple[str, bool], list] = {}
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    buf = state[p].get("momentum_buffer") if mom != 0 else None
                    key = (p._buf._ctx.name, buf is None)  # (the device; Buffer.device is a property)
                    bucket = buckets.get(key)
                    if bucket is None:
                        bucket = buckets[key] = []
                    bucket.append((p,) if buf is None else (p, buf))
                for (_, first), rows in buckets.items():
                    if mom == 0:  # plain SGD (dampening is not applied, nesterov needs momentum)
                        _step_rows(rows, (lr, 0.0, damp, wd, False, True), keep_bufs=False)
                    elif first:
                        _first_momentum_step(state, rows, (lr, mom, damp, wd, nesterov, True))
                    else:
                        _step_rows(rows, (lr, mom, damp, wd, nesterov, False), keep_bufs=True)
        return loss


def _step_rows(rows: list, hyper: tuple, keep_bufs: bool) -> None:
    """Step the (p,) or (p, momentum_buffer) rows in place, each tensor first made writable
    (``own_rows``: one held elsewhere is rebound to a copy of its own)."""
    P.sgd_step_many_inplace(*_step_args(own_rows(rows), keep_bufs), *hyper)


def _first_momentum_step(state: Any, rows: list, hyper: tuple) -> None:
    """The first step with momentum: the buffers start at the (weight-decayed) gradient, as in
    PyTorch (written, never read), and p is written in place."""
    own_rows(rows)
    bufs = [Tensor._wrap(zeros(p._buf.size, p._buf.device), p.shape) for (p,) in rows]
    P.sgd_step_many_inplace(*_step_args(rows, False)[:2], [b._buf for b in bufs], *hyper)
    for (p,), b in zip(rows, bufs):
        state[p]["momentum_buffer"] = b


def _step_args(rows: list, keep_bufs: bool) -> tuple[list, list, list | None]:
    """The sgd_step_many arguments (params, grads, momentum buffers or None) of the rows."""
    return ([row[0]._buf for row in rows], [row[0].grad._float_buffer("SGD.step") for row in rows],
            [row[1]._buf for row in rows] if keep_bufs else None)
