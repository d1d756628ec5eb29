"""Learning-rate schedulers with PyTorch's semantics: ``StepLR`` and ``CosineAnnealingLR``.

The same recursive formulas as ``torch.optim.lr_scheduler`` (each step updates the group's
current lr from the previous one; the closed forms only when ``step(epoch)`` is given), so the
learning rates are the same doubles as PyTorch's, step for step.

``load_state_dict`` goes through an explicit schema (``_STATE``): unknown keys, missing keys and
values of the wrong type or range are refused before anything changes (a state dict can set
data attributes only, never replace a method).
"""

from __future__ import annotations

import math
import numbers
from typing import Any

from ..errors import ArgumentError
from .optimizer import Optimizer

__all__ = ["LRScheduler", "StepLR", "CosineAnnealingLR"]


def _finite(where: str, v: Any) -> float | int:
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v):
        raise ArgumentError(f"{where} must be a finite real number, got {v!r} ({type(v).__name__})")
    return int(v) if isinstance(v, numbers.Integral) else float(v)


class LRScheduler:
    """Base class: sets ``initial_lr`` in each group, then takes the initial step (as PyTorch)."""

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1) -> None:
        if not isinstance(optimizer, Optimizer):
            raise ArgumentError(f"{type(self).__name__}: {type(optimizer).__name__} is not an Optimizer")
        self.optimizer = optimizer
        if last_epoch == -1:
            for group in optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])
        else:
            for i, group in enumerate(optimizer.param_groups):
                if "initial_lr" not in group:
                    raise ArgumentError(f"{type(self).__name__}: param 'initial_lr' is not specified in "
                                        f"param_groups[{i}] when resuming a scheduler with last_epoch >= 0")
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._step_count = 0
        self._is_initial = True
        try:
            self.step()
        finally:
            self._is_initial = False

    # What state_dict() holds and load_state_dict() accepts: attribute -> kind (see _check_entry).
    # A subclass with more state extends it (StepLR adds step_size and gamma).
    _STATE: dict[str, str] = {"base_lrs": "lrs", "last_epoch": "epoch", "_step_count": "count",
                              "_is_initial": "bool", "_last_lr": "lrs"}

    def state_dict(self) -> dict[str, Any]:
        """The attributes named in ``_STATE``: every attribute but the optimizer (PyTorch's format)."""
        return {k: list(v) if isinstance(v, list) else v for k, v in self.__dict__.items() if k in self._STATE}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load ``state_dict()``'s output, all or nothing: exactly the keys of ``_STATE``, each of its
        type and range (lr lists as long as the optimizer has groups), or ArgumentError and no change."""
        self._commit_state_dict(self._stage_state_dict(state_dict))

    def _stage_state_dict(self, state_dict: Any) -> dict[str, Any]:
        """The checked attribute values ``state_dict`` sets, changing nothing."""
        op = f"{type(self).__name__}.load_state_dict"
        if not isinstance(state_dict, dict):
            raise ArgumentError(f"{op}: expected a dict, got {type(state_dict).__name__}")
        unknown = sorted((k for k in state_dict if k not in self._STATE), key=str)
        missing = sorted(set(self._STATE) - set(state_dict))
        if unknown or missing:
            raise ArgumentError(f"{op}: the state dict must have exactly the keys {sorted(self._STATE)}; "
                                f"unknown {unknown}, missing {missing}")
        return {k: self._check_entry(op, k, self._STATE[k], state_dict[k]) for k in self._STATE}

    def _commit_state_dict(self, staged: dict[str, Any]) -> None:
        """Set what ``_stage_state_dict`` checked (plain attributes: nothing here can fail)."""
        for k, v in staged.items():
            setattr(self, k, v)

    def _check_entry(self, op: str, key: str, kind: str, v: Any) -> Any:
        where = f"{op}: {key!r}"
        is_int = isinstance(v, numbers.Integral) and not isinstance(v, bool)
        if kind == "lrs":
            n = len(self.optimizer.param_groups)
            if not isinstance(v, list) or len(v) != n:
                raise ArgumentError(f"{where} must be a list of {n} learning rates (one per parameter group), "
                                    f"got {v!r}")
            return [_finite(where, x) for x in v]
        if kind == "epoch" and is_int and v >= -1:
            return int(v)
        if kind == "count" and is_int and v >= 0:
            return int(v)
        if kind == "positive" and is_int and v > 0:
            return int(v)
        if kind == "bool" and isinstance(v, bool):
            return v
        if kind == "real":
            return _finite(where, v)
        wanted = {"epoch": "an integer >= -1", "count": "an integer >= 0", "positive": "a positive integer",
                  "bool": "a bool"}[kind]
        raise ArgumentError(f"{where} must be {wanted}, got {v!r} ({type(v).__name__})")

    def get_last_lr(self) -> list[float]:
        return self._last_lr

    def get_lr(self) -> list[float]:
        raise NotImplementedError

    def step(self, epoch: int | None = None) -> None:
        self._step_count += 1
        if epoch is None:
            self.last_epoch += 1
            values = self.get_lr()
        else:
            self.last_epoch = epoch
            values = self._get_closed_form_lr() if hasattr(self, "_get_closed_form_lr") else self.get_lr()
        for group, lr in zip(self.optimizer.param_groups, values):
            group["lr"] = lr
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]


class StepLR(LRScheduler):
    """Multiply each group's lr by ``gamma`` every ``step_size`` epochs."""

    _STATE = {**LRScheduler._STATE, "step_size": "positive", "gamma": "real"}

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1) -> None:
        if isinstance(step_size, bool) or not isinstance(step_size, int) or step_size <= 0:
            raise ArgumentError(f"StepLR: step_size must be a positive integer, got {step_size!r}")
        self.step_size = step_size
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return [group["lr"] for group in self.optimizer.param_groups]
        return [group["lr"] * self.gamma for group in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list[float]:
        return [base_lr * self.gamma ** (self.last_epoch // self.step_size) for base_lr in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    """eta_min + (base_lr - eta_min) (1 + cos(pi t / T_max)) / 2, by PyTorch's recursive form."""

    _STATE = {**LRScheduler._STATE, "T_max": "positive", "eta_min": "real"}

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1) -> None:
        if isinstance(T_max, bool) or not isinstance(T_max, int) or T_max <= 0:
            raise ArgumentError(f"CosineAnnealingLR: T_max must be a positive integer, got {T_max!r}")
        self.T_max = T_max
        self.eta_min = eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        groups = self.optimizer.param_groups
        if self._is_initial:
            return [group["lr"] for group in groups]
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
