"""``SGD``: PyTorch's stochastic gradient descent (momentum, dampening, nesterov, weight decay), fused
steps (``sgd_step_many``: one launch per group)."""

from __future__ import annotations

from typing import Any, Callable

from .. import autograd
from ..errors import ArgumentError
from ..runtime import primitives as P
from ..tensor import Tensor
from .optimizer import Optimizer, check_real, split_by_ownership

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
        per parameter. With a buffer, or with none kept (momentum 0), the step writes over p (and
        its buffer) in place when nothing else refers to them (``split_by_ownership``): a
        parameter whose buffers are also held elsewhere (a DLPack source, a view, a ``state_dict()``
        snapshot, a retained graph) steps out of place and is rebound, so the holder keeps its
        values. The first step with momentum is out of place: it makes the buffers anyway."""
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
    """Step the (p,) or (p, momentum_buffer) rows: in place where ``split_by_ownership`` allows,
    out of place and rebound otherwise. Without kept buffers (momentum 0) the out-of-place step's
    new buffers are dropped at once."""
    own, shared = split_by_ownership(rows)
    if own:
        P.sgd_step_many_inplace(*_step_args(own, keep_bufs), *hyper)
    if shared:
        out = P.sgd_step_many(*_step_args(shared, keep_bufs), *hyper)
        t = len(shared)
        for i, row in enumerate(shared):
            row[0]._rebind(out[i])
            if keep_bufs:
                row[1]._rebind(out[t + i])
            else:
                out[t + i].release()


def _first_momentum_step(state: Any, rows: list, hyper: tuple) -> None:
    """The first step with momentum: the buffers start at the (weight-decayed) gradient, as in
    PyTorch; they are new buffers either way, so the step is out of place and p is rebound."""
    out = P.sgd_step_many(*_step_args(rows, False), *hyper)
    t = len(rows)
    for i, (p,) in enumerate(rows):
        p._rebind(out[i])
        state[p]["momentum_buffer"] = Tensor._wrap(out[t + i], p.shape)


def _step_args(rows: list, keep_bufs: bool) -> tuple[list, list, list | None]:
    """The sgd_step_many arguments (params, grads, momentum buffers or None) of the rows."""
    return ([row[0]._buf for row in rows], [row[0].grad._float_buffer("SGD.step") for row in rows],
            [row[1]._buf for row in rows] if keep_bufs else None)
