"""``Adam`` and ``AdamW``: PyTorch's update rules, fused steps (``adam_step_many``: one launch per group)."""

from __future__ import annotations

from typing import Any, Callable

from .. import autograd
from ..errors import ArgumentError
from ..runtime import primitives as P
from ..runtime.buffer import zeros
from ..tensor import Tensor
from .optimizer import Optimizer, check_real, own_rows, step_buffer, step_tensor, step_value

__all__ = ["Adam", "AdamW"]

# foreach/fused choose PyTorch's implementation, not the update: ours is one fused launch per group anyway
_FLAGS = {"amsgrad": (False,), "maximize": (False,), "foreach": (None, False, True), "fused": (None, False, True),
          "capturable": (False,), "differentiable": (False,)}


class Adam(Optimizer):
    """``Adam(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False, *,
    maximize=False, foreach=None, capturable=False, differentiable=False, fused=None,
    decoupled_weight_decay=False)``: PyTorch's single-tensor Adam, within an ulp or two per step
    (see runtime/primitives_optim.py). amsgrad, maximize, capturable and differentiable are not
    supported (ArgumentError); foreach/fused are accepted and change nothing (every step is fused). State per
    parameter: ``step`` (a 0-d CPU tensor), ``exp_avg``, ``exp_avg_sq``."""

    _state_schema = {"step": "step", "exp_avg": "tensor", "exp_avg_sq": "tensor"}  # (load_state_dict checks it)

    def __init__(self, params: Any, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0, amsgrad: bool = False, *, maximize: bool = False,
                 foreach: bool | None = None, capturable: bool = False, differentiable: bool = False,
                 fused: bool | None = None, decoupled_weight_decay: bool = False) -> None:
        try:
            betas = (betas[0], betas[1])
        except (TypeError, IndexError):
            raise ArgumentError(f"{type(self).__name__}: betas must be a pair of floats, got {betas!r}") from None
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad, maximize=maximize,
                        foreach=foreach, capturable=capturable, differentiable=differentiable, fused=fused,
                        decoupled_weight_decay=decoupled_weight_decay)
        self._check_group(defaults)
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any]) -> None:
        name = type(self).__name__
        if check_real(name, "lr", group["lr"]) < 0.0:
            raise ArgumentError(f"{name}: Invalid learning rate: {group['lr']}")
        if check_real(name, "eps", group["eps"]) < 0.0:
            raise ArgumentError(f"{name}: Invalid epsilon value: {group['eps']}")
        b = group["betas"]
        if not isinstance(b, (tuple, list)) or len(b) != 2:
            raise ArgumentError(f"{name}: betas must be a pair of floats, got {b!r}")
        for i in (0, 1):
            if not 0.0 <= check_real(name, f"betas[{i}]", b[i]) < 1.0:
                raise ArgumentError(f"{name}: Invalid beta parameter at index {i}: {b[i]}")
        if check_real(name, "weight_decay", group["weight_decay"]) < 0.0:
            raise ArgumentError(f"{name}: Invalid weight_decay value: {group['weight_decay']}")
        self._refuse(group, _FLAGS)

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One Adam step over every parameter that has a gradient; returns the closure's loss.

        Parameters of a group that share a device and a step count are updated by one
        ``adam_step_many_inplace`` call (one kernel launch on CUDA), bitwise the same as one
        ``adam_step`` per parameter, written over p, exp_avg and exp_avg_sq. A tensor whose buffer
        is also held elsewhere (a state_dict snapshot, a detached tensor, a retained graph), or
        shared with another, is first rebound to a copy of its own (``own_rows``, one tensor at a
        time): the holder keeps its values, so buffers stay values."""
        loss = self._closure_loss(closure)
        state = self.state
        with autograd.no_grad():
            for group in self.param_groups:
                lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
                wd, decoupled = group["weight_decay"], bool(group.get("decoupled_weight_decay", False))
                buckets: dict[tuple[str, float], list] = {}
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    st = state[p]
                    step = step_value(st["step"]) + 1.0 if st else 1.0
                    key = (p._buf._ctx.name, step)  # (the device; Buffer.device is a property)
                    bucket = buckets.get(key)
                    if bucket is None:
                        bucket = buckets[key] = []
                    bucket.append((p, st))
                for (_, step), entries in buckets.items():
                    hyper = (lr, beta1, beta2, eps, wd, int(step), decoupled)
                    P.adam_step_many_inplace(*_step_args(_own_rows(entries)), *hyper)
                    step_buf = step_buffer(step)  # one shared value; each parameter its own Tensor
                    for _, st in entries:
                        st["step"] = Tensor._wrap(step_buf, ())
        return loss


def _own_rows(entries: list) -> list:
    """The (p, exp_avg, exp_avg_sq) tensors of ``entries`` ((parameter, its state) pairs), each
    writable in place (``own_rows``: a state_dict snapshot, a detached tensor or a retained graph
    keeps its values). The first step creates the zero moments here."""
    rows = []
    for p, st in entries:
        if not st:  # first step: zero moments (step 0 until this step lands)
            pb = p._buf
            n, dev = pb.size, pb.device
            st["step"] = step_tensor(0.0)
            st["exp_avg"] = Tensor._wrap(zeros(n, dev), p.shape)
            st["exp_avg_sq"] = Tensor._wrap(zeros(n, dev), p.shape)
        rows.append((p, st["exp_avg"], st["exp_avg_sq"]))
    return own_rows(rows)


def _step_args(triples: list) -> tuple[list, list, list, list]:
    """The adam_step_many arguments (params, grads, exp_avgs, exp_avg_sqs) of (p, m, v) triples."""
    return ([p._buf for p, _, _ in triples], [p.grad._float_buffer("Adam.step") for p, _, _ in triples],
            [m._buf for _, m, _ in triples], [v._buf for _, _, v in triples])


class AdamW(Adam):
    """``AdamW(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False, ...)``:
    Adam with decoupled weight decay p <- p (1 - lr wd), PyTorch's rule."""

    def __init__(self, params: Any, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, amsgrad: bool = False, *, maximize: bool = False,
                 foreach: bool | None = None, capturable: bool = False, differentiable: bool = False,
                 fused: bool | None = None) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize, foreach=foreach,
                         capturable=capturable, differentiable=differentiable, fused=fused,
                         decoupled_weight_decay=True)
