"""``LRScheduler``: the base of the learning-rate schedulers, with PyTorch's ``last_epoch`` rules.

The schedulers follow ``torch.optim.lr_scheduler`` formula for formula (each step updates a
group's lr from the previous one; the closed forms only when ``step(epoch)`` is given), so the
learning rates are the same doubles as PyTorch's, step for step.

``state_dict()`` has PyTorch's keys, so a PyTorch scheduler's state dict loads into ours and ours
into PyTorch's. ``load_state_dict`` goes through an explicit schema (``_STATE``): unknown keys,
missing keys and values of the wrong type or range are refused before anything changes (a state
dict sets data attributes only, never a method). Keys in ``_OPTIONAL`` may be absent (PyTorch
writes some only in some configurations).
"""

from __future__ import annotations

import math
import numbers
from typing import Any

from ..errors import ArgumentError
from .optimizer import Optimizer

__all__ = ["LRScheduler", "finite", "check_int"]


def finite(where: str, v: Any, allow_inf: bool = False) -> float | int:
    ok = isinstance(v, numbers.Real) and not isinstance(v, bool) and (
        math.isfinite(v) or (allow_inf and not math.isnan(v)))
    if not ok:
        raise ArgumentError(f"{where} must be a {'' if allow_inf else 'finite '}real number, got {v!r} "
                            f"({type(v).__name__})")
    return int(v) if isinstance(v, numbers.Integral) else float(v)


def check_int(where: str, v: Any, low: int) -> int:
    """A Python integer >= low (the constructor checks of step counts and periods)."""
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < low:
        wanted = "a positive integer" if low == 1 else f"an integer >= {low}"
        raise ArgumentError(f"{where} must be {wanted}, got {v!r}")
    return int(v)


class LRScheduler:
    """Base class: sets ``initial_lr`` in each group, then takes the initial step (as PyTorch)."""

    _is_initial = False

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1) -> None:
        if not isinstance(optimizer, Optimizer):
            raise ArgumentError(f"{type(self).__name__}: {type(optimizer).__name__} is not an Optimizer")
        check_int(f"{type(self).__name__}: last_epoch", last_epoch, -1)
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
        self._initial_step()

    def _initial_step(self) -> None:
        self._step_count = 0
        self._is_initial = True
        try:
            self.step()
        finally:
            self._is_initial = False
        self._get_lr_called_within_step = False

    # What state_dict() holds and load_state_dict() accepts: attribute -> kind (see _check_entry).
    # A subclass with more state extends it (StepLR adds step_size and gamma).
    _STATE: dict[str, Any] = {"base_lrs": "lrs", "last_epoch": "epoch", "_step_count": "count",
                              "_is_initial": "bool", "_get_lr_called_within_step": "bool", "_last_lr": "lrs"}
    _OPTIONAL: frozenset[str] = frozenset({"_get_lr_called_within_step"})

    def state_dict(self) -> dict[str, Any]:
        """The attributes named in ``_STATE`` (PyTorch's format: every attribute but the optimizer),
        and a user subclass's own plain-data attributes (``_user_keys``)."""
        extra = self._user_keys()
        return {k: _copy(v) for k, v in self.__dict__.items() if k in self._STATE or k in extra}

    def _user_keys(self) -> set[str]:
        """The instance attributes, outside ``_STATE``, of a scheduler class written outside
        torchlean (a warmup schedule subclassing LRScheduler, say) that hold plain data (numbers,
        strings, None, and lists, tuples and dicts of them): PyTorch saves every attribute, and
        these load back; a method, a callable or any other object never does."""
        if type(self).__module__.split(".")[0] == "torchlean":
            return set()
        return {k for k, v in self.__dict__.items() if k not in self._STATE and k != "optimizer" and _plain(v)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load ``state_dict()``'s output or a PyTorch scheduler's, all or nothing: the keys of
        ``_STATE``, each of its type and range (lr lists as long as the optimizer has groups), or
        ArgumentError and no change."""
        self._commit_state_dict(self._stage_state_dict(state_dict))

    def _stage_state_dict(self, state_dict: Any) -> dict[str, Any]:
        """The checked attribute values ``state_dict`` sets, changing nothing."""
        op = f"{type(self).__name__}.load_state_dict"
        if not isinstance(state_dict, dict):
            raise ArgumentError(f"{op}: expected a dict, got {type(state_dict).__name__}")
        required = set(self._STATE) - self._OPTIONAL
        extra = {k for k in self._user_keys() if k in state_dict and _plain(state_dict[k])}
        unknown = sorted((k for k in state_dict if k not in self._STATE and k not in extra), key=str)
        missing = sorted(required - set(state_dict))
        if unknown or missing:
            optional = f" (and optionally {sorted(self._OPTIONAL)})" if self._OPTIONAL else ""
            raise ArgumentError(f"{op}: the state dict must have exactly the keys {sorted(required)}{optional}; "
                                f"unknown {unknown}, missing {missing}")
        staged = {k: self._check_entry(op, k, self._STATE[k], state_dict[k]) for k in self._STATE if k in state_dict}
        staged.update((k, _copy(state_dict[k])) for k in extra)
        self._check_staged(op, staged)
        return staged

    def _check_staged(self, op: str, staged: dict[str, Any]) -> None:
        """Checks across entries (a subclass's); raises ArgumentError."""

    def _commit_state_dict(self, staged: dict[str, Any]) -> None:
        """Set what ``_stage_state_dict`` checked (plain attributes: nothing here can fail)."""
        for k, v in staged.items():
            setattr(self, k, v)

    def _check_entry(self, op: str, key: str, kind: Any, v: Any) -> Any:
        where = f"{op}: {key!r}"
        is_int = isinstance(v, numbers.Integral) and not isinstance(v, bool)
        n = len(self.optimizer.param_groups)
        if kind in ("lrs", "reals"):
            if not isinstance(v, (list, tuple)) or len(v) != n:
                raise ArgumentError(f"{where} must be a list of {n} learning rates (one per parameter group), "
                                    f"got {v!r}")
            return [finite(where, x) for x in v]
        if isinstance(kind, tuple):  # ("choice", allowed strings)
            if not isinstance(v, str) or v not in kind[1]:
                raise ArgumentError(f"{where} must be one of {sorted(kind[1])}, got {v!r}")
            return v
        if kind == "epoch" and is_int and v >= -1:
            return int(v)
        if kind == "count" and is_int and v >= 0:
            return int(v)
        if kind == "positive" and is_int and v > 0:
            return int(v)
        if kind == "bool" and isinstance(v, bool):
            return v
        if kind == "real":
            return finite(where, v)
        if kind == "extended":  # a real number or +-inf (ReduceLROnPlateau's best)
            return finite(where, v, allow_inf=True)
        if kind == "real_or_none":
            return None if v is None else finite(where, v)
        wanted = {"epoch": "an integer >= -1", "count": "an integer >= 0", "positive": "a positive integer",
                  "bool": "a bool"}.get(kind)
        if wanted is None:
            raise AssertionError(f"unknown state kind {kind!r}")  # a bug in a subclass's _STATE
        raise ArgumentError(f"{where} must be {wanted}, got {v!r} ({type(v).__name__})")

    def get_last_lr(self) -> list[float]:
        """The learning rates of the last step, one per parameter group."""
        return self._last_lr

    def get_lr(self) -> list[float]:
        raise NotImplementedError

    def step(self, epoch: int | None = None) -> None:
        """Advance one epoch (or jump to ``epoch``, by the closed form where there is one)."""
        self._step_count += 1
        self._update_lr(epoch)

    def _update_lr(self, epoch: int | None = None) -> None:
        self._get_lr_called_within_step = True
        try:
            if epoch is None:
                self.last_epoch += 1
                values = self.get_lr()
            else:
                self.last_epoch = epoch
                values = self._get_closed_form_lr() if hasattr(self, "_get_closed_form_lr") else self.get_lr()
        finally:
            self._get_lr_called_within_step = False
        for group, lr in zip(self.optimizer.param_groups, values):
            group["lr"] = lr
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def _group_lrs(self) -> list[float]:
        return [group["lr"] for group in self.optimizer.param_groups]


def _plain(v: Any, depth: int = 0) -> bool:
    if v is None or isinstance(v, (bool, numbers.Real, str)):
        return True
    if depth < 4 and isinstance(v, (list, tuple)):
        return all(_plain(x, depth + 1) for x in v)
    if depth < 4 and type(v) is dict:
        return all(isinstance(k, (str, int)) and _plain(x, depth + 1) for k, x in v.items())
    return False


def _copy(v: Any) -> Any:
    if isinstance(v, list):
        return [_copy(x) for x in v]
    if isinstance(v, dict):
        return type(v)({k: _copy(x) for k, x in v.items()})
    return v
