"""Learning-rate schedulers with PyTorch's semantics (``torch.optim.lr_scheduler``).

Here: ``LambdaLR``, ``MultiplicativeLR``, ``StepLR``, ``MultiStepLR``, ``ConstantLR``,
``LinearLR``, ``ExponentialLR``, ``PolynomialLR``, ``CosineAnnealingLR``, ``SequentialLR`` and
``ChainedScheduler``; ``ReduceLROnPlateau``, ``CyclicLR``, ``OneCycleLR`` and
``CosineAnnealingWarmRestarts`` live in ``_lr_cyclic`` and are re-exported. The base class, its
state-dict schema and PyTorch's ``last_epoch`` rules are in ``_lr_base``.
"""

from __future__ import annotations

import math
import types
from bisect import bisect_right
from collections import Counter
from typing import Any, Callable

from ..errors import ArgumentError
from ._lr_base import LRScheduler, check_int, finite
from ._lr_cyclic import CosineAnnealingWarmRestarts, CyclicLR, OneCycleLR, ReduceLROnPlateau
from .optimizer import Optimizer

__all__ = ["LRScheduler", "LambdaLR", "MultiplicativeLR", "StepLR", "MultiStepLR", "ConstantLR", "LinearLR",
           "ExponentialLR", "PolynomialLR", "CosineAnnealingLR", "SequentialLR", "ChainedScheduler",
           "ReduceLROnPlateau", "CyclicLR", "OneCycleLR", "CosineAnnealingWarmRestarts"]


_LRScheduler = LRScheduler  # PyTorch's older name, which custom schedulers still subclass


class _LambdaBase(LRScheduler):
    """``lr_lambdas`` (one callable per group) and their state: PyTorch saves a callable object's
    ``__dict__`` (None for a plain function) and loads it back into the same object."""

    _STATE = {**LRScheduler._STATE, "lr_lambdas": "lambdas"}

    def __init__(self, optimizer: Optimizer, lr_lambda: Any, last_epoch: int = -1) -> None:
        name = type(self).__name__
        if not isinstance(optimizer, Optimizer):
            raise ArgumentError(f"{name}: {type(optimizer).__name__} is not an Optimizer")
        n = len(optimizer.param_groups)
        if isinstance(lr_lambda, (list, tuple)):
            if len(lr_lambda) != n:
                raise ArgumentError(f"{name}: Expected {n} lr_lambdas, but got {len(lr_lambda)}")
            self.lr_lambdas = list(lr_lambda)
        else:
            self.lr_lambdas = [lr_lambda] * n
        for fn in self.lr_lambdas:
            if not callable(fn):
                raise ArgumentError(f"{name}: lr_lambda should be a function, but got {type(fn).__name__}")
        super().__init__(optimizer, last_epoch)

    def state_dict(self) -> dict[str, Any]:
        sd = super().state_dict()
        sd["lr_lambdas"] = [None if isinstance(fn, types.FunctionType) else dict(fn.__dict__)
                            for fn in self.lr_lambdas]
        return sd

    def _check_entry(self, op: str, key: str, kind: Any, v: Any) -> Any:
        if kind != "lambdas":
            return super()._check_entry(op, key, kind, v)
        if not isinstance(v, (list, tuple)) or len(v) != len(self.lr_lambdas):
            raise ArgumentError(f"{op}: 'lr_lambdas' must be a list of {len(self.lr_lambdas)} entries, got {v!r}")
        for i, (fn, d) in enumerate(zip(self.lr_lambdas, v)):
            if d is None:
                continue
            if not isinstance(d, dict) or isinstance(fn, types.FunctionType) or not hasattr(fn, "__dict__"):
                raise ArgumentError(f"{op}: 'lr_lambdas'[{i}] must be None (a plain function's) or the attribute "
                                    f"dict of a callable object, got {d!r}")
            if any(not isinstance(k, str) or callable(x) for k, x in d.items()):
                raise ArgumentError(f"{op}: 'lr_lambdas'[{i}] may hold data attributes only, got keys {sorted(d)}")
        return [None if d is None else dict(d) for d in v]

    def _commit_state_dict(self, staged: dict[str, Any]) -> None:
        lambdas = staged.pop("lr_lambdas")
        super()._commit_state_dict(staged)
        for fn, d in zip(self.lr_lambdas, lambdas):
            if d is not None:
                fn.__dict__.update(d)


class LambdaLR(_LambdaBase):
    """lr = base_lr * lr_lambda(epoch)."""

    def __init__(self, optimizer: Optimizer, lr_lambda: Callable[[int], float] | list, last_epoch: int = -1) -> None:
        super().__init__(optimizer, lr_lambda, last_epoch)

    def get_lr(self) -> list[float]:
        return [base_lr * fn(self.last_epoch) for fn, base_lr in zip(self.lr_lambdas, self.base_lrs)]


class MultiplicativeLR(_LambdaBase):
    """lr *= lr_lambda(epoch) each step (not on the initial step)."""

    def __init__(self, optimizer: Optimizer, lr_lambda: Callable[[int], float] | list, last_epoch: int = -1) -> None:
        super().__init__(optimizer, lr_lambda, last_epoch)

    def get_lr(self) -> list[float]:
        if self._is_initial:
            return self._group_lrs()
        return [g["lr"] * fn(self.last_epoch) for fn, g in zip(self.lr_lambdas, self.optimizer.param_groups)]


class StepLR(LRScheduler):
    """Multiply each group's lr by ``gamma`` every ``step_size`` epochs."""

    _STATE = {**LRScheduler._STATE, "step_size": "positive", "gamma": "real"}

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1) -> None:
        self.step_size = check_int("StepLR: step_size", step_size, 1)
        self.gamma = finite("StepLR: gamma", gamma)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return self._group_lrs()
        return [lr * self.gamma for lr in self._group_lrs()]

    def _get_closed_form_lr(self) -> list[float]:
        return [base_lr * self.gamma ** (self.last_epoch // self.step_size) for base_lr in self.base_lrs]


class MultiStepLR(LRScheduler):
    """Multiply each group's lr by ``gamma`` at each milestone (repeated milestones count twice)."""

    _STATE = {**LRScheduler._STATE, "milestones": "milestones", "gamma": "real"}

    def __init__(self, optimizer: Optimizer, milestones: Any, gamma: float = 0.1, last_epoch: int = -1) -> None:
        try:
            ms = list(milestones)
        except TypeError:
            raise ArgumentError(f"MultiStepLR: milestones must be a list of integers, got "
                                f"{type(milestones).__name__}") from None
        self.milestones = Counter(check_int("MultiStepLR: milestones[]", m, 0) for m in ms)
        self.gamma = finite("MultiStepLR: gamma", gamma)
        super().__init__(optimizer, last_epoch)

    def _check_entry(self, op: str, key: str, kind: Any, v: Any) -> Any:
        if kind != "milestones":
            return super()._check_entry(op, key, kind, v)
        items = v.items() if isinstance(v, dict) else Counter(v).items() if isinstance(v, (list, tuple)) else None
        if items is None:
            raise ArgumentError(f"{op}: 'milestones' must be a Counter (epoch -> count) or a list, got "
                                f"{type(v).__name__}")
        out = Counter()
        for m, c in items:
            m = int(m) if isinstance(m, str) and m.isdigit() else m  # (JSON made the epochs strings)
            out[check_int(f"{op}: 'milestones' epoch", m, 0)] = check_int(f"{op}: 'milestones' count", c, 1)
        return out

    def get_lr(self) -> list[float]:
        if self.last_epoch not in self.milestones:
            return self._group_lrs()
        return [lr * self.gamma ** self.milestones[self.last_epoch] for lr in self._group_lrs()]

    def _get_closed_form_lr(self) -> list[float]:
        milestones = sorted(self.milestones.elements())
        return [base_lr * self.gamma ** bisect_right(milestones, self.last_epoch) for base_lr in self.base_lrs]


class ConstantLR(LRScheduler):
    """lr = base_lr * factor until ``total_iters``, then base_lr."""

    _STATE = {**LRScheduler._STATE, "factor": "real", "total_iters": "count"}

    def __init__(self, optimizer: Optimizer, factor: float = 1.0 / 3, total_iters: int = 5,
                 last_epoch: int = -1) -> None:
        if not 0 <= finite("ConstantLR: factor", factor) <= 1.0:
            raise ArgumentError("ConstantLR: Constant multiplicative factor expected to be between 0 and 1, "
                                f"got {factor!r}")
        self.factor = factor
        self.total_iters = check_int("ConstantLR: total_iters", total_iters, 0)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        if self.last_epoch == 0:
            return [lr * self.factor for lr in self._group_lrs()]
        if self.last_epoch != self.total_iters:
            return self._group_lrs()
        return [lr * (1.0 / self.factor) for lr in self._group_lrs()]

    def _get_closed_form_lr(self) -> list[float]:
        return [base_lr * (self.factor + (self.last_epoch >= self.total_iters) * (1 - self.factor))
                for base_lr in self.base_lrs]


class LinearLR(LRScheduler):
    """lr goes linearly from base_lr * start_factor to base_lr * end_factor over ``total_iters``."""

    _STATE = {**LRScheduler._STATE, "start_factor": "real", "end_factor": "real", "total_iters": "count"}

    def __init__(self, optimizer: Optimizer, start_factor: float = 1.0 / 3, end_factor: float = 1.0,
                 total_iters: int = 5, last_epoch: int = -1) -> None:
        if not 0 < finite("LinearLR: start_factor", start_factor) <= 1.0:
            raise ArgumentError("LinearLR: Starting multiplicative factor expected to be greater than 0 and less "
                                f"or equal to 1, got {start_factor!r}")
        if not 0 <= finite("LinearLR: end_factor", end_factor) <= 1.0:
            raise ArgumentError(f"LinearLR: Ending multiplicative factor expected to be between 0 and 1, got "
                                f"{end_factor!r}")
        self.start_factor, self.end_factor = start_factor, end_factor
        self.total_iters = check_int("LinearLR: total_iters", total_iters, 0)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        if self.last_epoch == 0:
            return [lr * self.start_factor for lr in self._group_lrs()]
        if self._is_initial or self.last_epoch > self.total_iters:
            return self._group_lrs()
        return [lr * (1.0 + (self.end_factor - self.start_factor)
                      / (self.total_iters * self.start_factor
                         + (self.last_epoch - 1) * (self.end_factor - self.start_factor)))
                for lr in self._group_lrs()]

    def _get_closed_form_lr(self) -> list[float]:
        return [base_lr * (self.start_factor + (self.end_factor - self.start_factor)
                           * min(self.total_iters, self.last_epoch) / self.total_iters)
                for base_lr in self.base_lrs]


class ExponentialLR(LRScheduler):
    """lr *= gamma every epoch."""

    _STATE = {**LRScheduler._STATE, "gamma": "real"}

    def __init__(self, optimizer: Optimizer, gamma: float, last_epoch: int = -1) -> None:
        self.gamma = finite("ExponentialLR: gamma", gamma)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        if self._is_initial:
            return self._group_lrs()
        return [lr * self.gamma for lr in self._group_lrs()]

    def _get_closed_form_lr(self) -> list[float]:
        return [base_lr * self.gamma ** self.last_epoch for base_lr in self.base_lrs]


class PolynomialLR(LRScheduler):
    """lr = base_lr * (1 - epoch / total_iters) ** power, then constant."""

    _STATE = {**LRScheduler._STATE, "total_iters": "count", "power": "real"}

    def __init__(self, optimizer: Optimizer, total_iters: int = 5, power: float = 1.0, last_epoch: int = -1) -> None:
        self.total_iters = check_int("PolynomialLR: total_iters", total_iters, 1)
        self.power = finite("PolynomialLR: power", power)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        if self._is_initial or self.last_epoch > self.total_iters:
            return self._group_lrs()
        decay = ((1.0 - self.last_epoch / self.total_iters)
                 / (1.0 - (self.last_epoch - 1) / self.total_iters)) ** self.power
        return [lr * decay for lr in self._group_lrs()]

    def _get_closed_form_lr(self) -> list[float]:
        return [base_lr * (1.0 - min(self.total_iters, self.last_epoch) / self.total_iters) ** self.power
                for base_lr in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    """eta_min + (base_lr - eta_min) (1 + cos(pi t / T_max)) / 2, by PyTorch's recursive form."""

    _STATE = {**LRScheduler._STATE, "T_max": "positive", "eta_min": "real"}

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1) -> None:
        self.T_max = check_int("CosineAnnealingLR: T_max", T_max, 1)
        self.eta_min = finite("CosineAnnealingLR: eta_min", eta_min)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        groups = self.optimizer.param_groups
        if self._is_initial:
            return self._group_lrs()
        if self._step_count == 1 and self.last_epoch > 0:
            return [self.eta_min + (base_lr - self.eta_min) * (1 + math.cos(self.last_epoch * math.pi / self.T_max)) / 2
                    for base_lr in self.base_lrs]
        if (self.last_epoch - 1 - self.T_max) % (2 * self.T_max) == 0:
            return [group["lr"] + (base_lr - self.eta_min) * (1 - math.cos(math.pi / self.T_max)) / 2
                    for base_lr, group in zip(self.base_lrs, groups)]
        return [(1 + math.cos(math.pi * self.last_epoch / self.T_max))
                / (1 + math.cos(math.pi * (self.last_epoch - 1) / self.T_max))
                * (group["lr"] - self.eta_min) + self.eta_min for group in groups]

    def _get_closed_form_lr(self) -> list[float]:
        return [self.eta_min + (base_lr - self.eta_min) * (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2
                for base_lr in self.base_lrs]


# -- schedulers of schedulers --------------------------------------------------------------------------
def _check_children(name: str, optimizer: Optimizer, schedulers: Any) -> list[LRScheduler]:
    try:
        children = list(schedulers)
    except TypeError:
        raise ArgumentError(f"{name}: schedulers must be a list of schedulers, got "
                            f"{type(schedulers).__name__}") from None
    if not children:
        raise ArgumentError(f"{name} expects at least one scheduler, but got no scheduler")
    for i, s in enumerate(children):
        if not isinstance(s, LRScheduler):
            raise ArgumentError(f"{name}: schedulers[{i}] is a {type(s).__name__}, expected an LRScheduler")
        if isinstance(s, ReduceLROnPlateau):
            raise ArgumentError(f"{name} does not support `ReduceLROnPlateau` scheduler as it requires additional "
                                f"kwargs to be specified when calling `step`, but got one at index {i}")
        if s.optimizer is not optimizer:
            raise ArgumentError(f"{name} expects all schedulers to belong to the same optimizer, but scheduler "
                                f"{type(s).__name__} at index {i} has another one")
    return children


class _Composite(LRScheduler):
    """State of a scheduler of schedulers: its own keys plus ``_schedulers``, one state dict per
    child, each staged by the child's own schema before anything is set."""

    _schedulers: list[LRScheduler]

    def state_dict(self) -> dict[str, Any]:
        sd = super().state_dict()
        sd["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return sd

    def _check_entry(self, op: str, key: str, kind: Any, v: Any) -> Any:
        if kind == "children":
            if not isinstance(v, (list, tuple)) or len(v) != len(self._schedulers):
                raise ArgumentError(f"{op}: '_schedulers' must be a list of {len(self._schedulers)} state dicts, "
                                    f"got {type(v).__name__}")
            return [s._stage_state_dict(d) for s, d in zip(self._schedulers, v)]
        if kind == "milestone_list":
            if not isinstance(v, (list, tuple)) or len(v) != len(self._milestones):
                raise ArgumentError(f"{op}: '_milestones' must be a list of {len(self._milestones)} integers, "
                                    f"got {v!r}")
            return [check_int(f"{op}: '_milestones'[]", m, 0) for m in v]
        return super()._check_entry(op, key, kind, v)

    def _commit_state_dict(self, staged: dict[str, Any]) -> None:
        children = staged.pop("_schedulers")
        super()._commit_state_dict(staged)
        for s, st in zip(self._schedulers, children):
            s._commit_state_dict(st)


class SequentialLR(_Composite):
    """Run ``schedulers[i]`` between ``milestones[i-1]`` and ``milestones[i]``; each one after the
    first restarts (its closed form at epoch 0) at its milestone."""

    _STATE = {"_milestones": "milestone_list", "last_epoch": "epoch", "_last_lr": "lrs", "_schedulers": "children"}
    _OPTIONAL = frozenset()

    def __init__(self, optimizer: Optimizer, schedulers: list, milestones: list, last_epoch: int = -1) -> None:
        if not isinstance(optimizer, Optimizer):
            raise ArgumentError(f"SequentialLR: {type(optimizer).__name__} is not an Optimizer")
        children = _check_children("SequentialLR", optimizer, schedulers)
        try:
            ms = [check_int("SequentialLR: milestones[]", m, 0) for m in milestones]
        except TypeError:
            raise ArgumentError(f"SequentialLR: milestones must be a list of integers, got "
                                f"{type(milestones).__name__}") from None
        if len(ms) != len(children) - 1:
            raise ArgumentError(f"SequentialLR: Sequential Schedulers expects number of schedulers provided to be one "
                                f"more than the number of milestone points, but got number of schedulers "
                                f"{len(children)} and the number of milestones to be equal to {len(ms)}")
        self._schedulers, self._milestones = children, ms
        self.last_epoch = check_int("SequentialLR: last_epoch", last_epoch, -1) + 1
        self.optimizer = optimizer
        for group in optimizer.param_groups:
            group["lr"] = group["initial_lr"]
        self.recursive_undo()
        idx = bisect_right(self._milestones, 0)
        self._schedulers[idx]._initial_step()
        self._last_lr = self._schedulers[idx].get_last_lr()

    def recursive_undo(self, sched: Any = None) -> None:
        """Undo the initial step each child took when it was built (PyTorch's rule)."""
        scheds = self if sched is None else sched
        if hasattr(scheds, "_schedulers"):
            for s in scheds._schedulers:
                self.recursive_undo(s)
        elif hasattr(scheds, "last_epoch"):
            scheds.last_epoch -= 1

    def step(self) -> None:  # type: ignore[override]
        self.last_epoch += 1
        idx = bisect_right(self._milestones, self.last_epoch)
        scheduler = self._schedulers[idx]
        if idx > 0 and self._milestones[idx - 1] == self.last_epoch:
            scheduler._update_lr(0)
        else:
            scheduler.step()
        self._last_lr = scheduler.get_last_lr()


class ChainedScheduler(_Composite):
    """Step every scheduler of the list, in order, on each step."""

    _STATE = {"_last_lr": "lrs", "_schedulers": "children"}
    _OPTIONAL = frozenset()

    def __init__(self, schedulers: Any, optimizer: Optimizer | None = None) -> None:
        try:
            first = list(schedulers)[0]
        except (TypeError, IndexError):
            raise ArgumentError("ChainedScheduler expects at least one scheduler to be chained, but got no "
                                "scheduler") from None
        optimizer = optimizer or getattr(first, "optimizer", None)
        self._schedulers = _check_children("ChainedScheduler", optimizer, schedulers)
        self.optimizer = optimizer
        self._last_lr = self._group_lrs()

    def step(self) -> None:  # type: ignore[override]
        for scheduler in self._schedulers:
            scheduler.step()
        self._last_lr = self._group_lrs()

