"""The schedulers with more state than an epoch count: ``ReduceLROnPlateau``, ``CyclicLR``,
``OneCycleLR`` and ``CosineAnnealingWarmRestarts`` (PyTorch's formulas and state-dict keys;
re-exported by ``lr_scheduler``)."""

from __future__ import annotations

import math
import types
from typing import Any, Callable

from ..errors import ArgumentError
from ._lr_base import LRScheduler, check_int, finite
from .optimizer import Optimizer

__all__ = ["ReduceLROnPlateau", "CyclicLR", "OneCycleLR", "CosineAnnealingWarmRestarts"]


def _per_group(name: str, what: str, optimizer: Optimizer, value: Any) -> list[float]:
    """PyTorch's ``_format_param``: one value per parameter group (a list of that length, or one
    value for all)."""
    n = len(optimizer.param_groups)
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ArgumentError(f"{name}: {what} must have the same length as optimizer.param_groups. {what} has "
                                f"{len(value)} values, param_groups has {n}.")
        return [finite(f"{name}: {what}", v) for v in value]
    return [finite(f"{name}: {what}", value)] * n


def _momentum_key(name: str, optimizer: Optimizer) -> bool:
    """True when the cycled momentum is beta1 (Adam-like), False for ``momentum`` (SGD-like)."""
    if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
        raise ArgumentError(f"{name}: optimizer must support momentum or beta1 with `cycle_momentum` option enabled")
    return "betas" in optimizer.defaults


def _set_momentum(group: dict[str, Any], use_beta1: bool, momentum: float) -> None:
    if use_beta1:
        group["betas"] = (momentum, *group["betas"][1:])
    else:
        group["momentum"] = momentum


class ReduceLROnPlateau(LRScheduler):
    """Reduce each group's lr by ``factor`` once the metric has not improved for ``patience``
    epochs; ``step(metrics)``."""

    _STATE = {"factor": "real", "default_min_lr": "real_or_none", "min_lrs": "reals", "patience": "count",
              "cooldown": "count", "eps": "real", "last_epoch": "epoch", "_last_lr": "lrs",
              "mode_worse": "extended", "mode": ("choice", {"min", "max"}), "threshold": "real",
              "threshold_mode": ("choice", {"rel", "abs"}), "best": "extended", "cooldown_counter": "count",
              "num_bad_epochs": "count"}
    _OPTIONAL = frozenset()

    def __init__(self, optimizer: Optimizer, mode: str = "min", factor: float = 0.1, patience: int = 10,
                 threshold: float = 1e-4, threshold_mode: str = "rel", cooldown: int = 0,
                 min_lr: list[float] | float = 0, eps: float = 1e-8) -> None:
        name = "ReduceLROnPlateau"
        if finite(f"{name}: factor", factor) >= 1.0:
            raise ArgumentError(f"{name}: Factor should be < 1.0, got {factor!r}")
        if not isinstance(optimizer, Optimizer):
            raise ArgumentError(f"{name}: {type(optimizer).__name__} is not an Optimizer")
        self.factor = factor
        self.optimizer = optimizer
        if isinstance(min_lr, (list, tuple)):
            self.default_min_lr = None
            self.min_lrs = _per_group(name, "min_lr", optimizer, min_lr)
        else:
            self.default_min_lr = finite(f"{name}: min_lr", min_lr)
            self.min_lrs = [min_lr] * len(optimizer.param_groups)
        self.patience = check_int(f"{name}: patience", patience, 0)
        self.cooldown = check_int(f"{name}: cooldown", cooldown, 0)
        self.eps = finite(f"{name}: eps", eps)
        self.last_epoch = 0
        self._last_lr = self._group_lrs()
        self._init_is_better(mode, finite(f"{name}: threshold", threshold), threshold_mode)
        self._reset()

    def _reset(self) -> None:
        self.best = self.mode_worse
        self.cooldown_counter = 0
        self.num_bad_epochs = 0

    def step(self, metrics: Any, epoch: int | None = None) -> None:  # type: ignore[override]
        """One epoch with the monitored value ``metrics`` (a number or a one-element tensor)."""
        try:
            current = float(metrics)
        except (TypeError, ValueError) as exc:
            raise ArgumentError(f"ReduceLROnPlateau.step: metrics must be a number or a one-element tensor, got "
                                f"{type(metrics).__name__} ({exc})") from None
        self.last_epoch = self.last_epoch + 1 if epoch is None else epoch
        if self._is_better(current, self.best):
            self.best = current
            self.num_bad_epochs = 0
        else:
            self.num_bad_epochs += 1
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0  # bad epochs in cooldown do not count
        if self.num_bad_epochs > self.patience:
            self._reduce_lr()
            self.cooldown_counter = self.cooldown
            self.num_bad_epochs = 0
        self._last_lr = self._group_lrs()

    @property
    def in_cooldown(self) -> bool:
        return self.cooldown_counter > 0

    def _reduce_lr(self) -> None:
        groups = self.optimizer.param_groups
        if len(groups) != len(self.min_lrs):
            if self.default_min_lr is None:
                raise ArgumentError(f"ReduceLROnPlateau: the number of param groups in the `optimizer` "
                                    f"({len(groups)}) differs from when `ReduceLROnPlateau` was initialized "
                                    f"({len(self.min_lrs)}); set `min_lrs` to one value per group")
            self.min_lrs = [self.default_min_lr] * len(groups)
        for i, group in enumerate(groups):
            old_lr = float(group["lr"])
            new_lr = max(old_lr * self.factor, self.min_lrs[i])
            if old_lr - new_lr > self.eps:
                group["lr"] = new_lr

    def _is_better(self, a: float, best: float) -> bool:
        if self.mode == "min" and self.threshold_mode == "rel":
            return a < best * (1.0 - self.threshold)
        if self.mode == "min":
            return a < best - self.threshold
        if self.threshold_mode == "rel":
            return a > best * (self.threshold + 1.0)
        return a > best + self.threshold

    def _init_is_better(self, mode: str, threshold: float, threshold_mode: str) -> None:
        if mode not in {"min", "max"}:
            raise ArgumentError(f"ReduceLROnPlateau: mode {mode!r} is unknown (expected 'min' or 'max')")
        if threshold_mode not in {"rel", "abs"}:
            raise ArgumentError(f"ReduceLROnPlateau: threshold mode {threshold_mode!r} is unknown (expected 'rel' "
                                f"or 'abs')")
        self.mode_worse = math.inf if mode == "min" else -math.inf
        self.mode, self.threshold, self.threshold_mode = mode, threshold, threshold_mode

    def _check_staged(self, op: str, staged: dict[str, Any]) -> None:
        if staged["mode_worse"] != (math.inf if staged["mode"] == "min" else -math.inf):
            raise ArgumentError(f"{op}: 'mode_worse' must be {'inf' if staged['mode'] == 'min' else '-inf'} for "
                                f"mode {staged['mode']!r}, got {staged['mode_worse']!r}")


class CyclicLR(LRScheduler):
    """The cyclical learning rate policy (triangular, triangular2, exp_range or a ``scale_fn``),
    stepped every batch; with ``cycle_momentum`` the momentum (or beta1) cycles inversely."""

    _STATE = {"max_lrs": "reals", "total_size": "real", "step_ratio": "real", "mode": ("choice", None),
              "gamma": "real", "scale_mode": ("choice", {"cycle", "iterations"}), "cycle_momentum": "bool",
              "use_beta1": "bool", "base_momentums": "reals", "max_momentums": "reals",
              **LRScheduler._STATE, "_scale_fn_custom": "fn_state"}
    _OPTIONAL = LRScheduler._OPTIONAL | {"use_beta1", "base_momentums", "max_momentums"}

    def __init__(self, optimizer: Optimizer, base_lr: float | list[float], max_lr: float | list[float],
                 step_size_up: int = 2000, step_size_down: int | None = None, mode: str = "triangular",
                 gamma: float = 1.0, scale_fn: Callable[[float], float] | None = None, scale_mode: str = "cycle",
                 cycle_momentum: bool = True, base_momentum: float = 0.8, max_momentum: float = 0.9,
                 last_epoch: int = -1) -> None:
        name = "CyclicLR"
        if not isinstance(optimizer, Optimizer):
            raise ArgumentError(f"{name}: {type(optimizer).__name__} is not an Optimizer")
        self.optimizer = optimizer
        base_lrs = _per_group(name, "base_lr", optimizer, base_lr)
        if last_epoch == -1:
            for lr, group in zip(base_lrs, optimizer.param_groups):
                group["lr"] = lr
        self.max_lrs = _per_group(name, "max_lr", optimizer, max_lr)
        up = float(check_int(f"{name}: step_size_up", step_size_up, 1))
        down = float(check_int(f"{name}: step_size_down", step_size_down, 1)) if step_size_down is not None else up
        self.total_size = up + down
        self.step_ratio = up / self.total_size
        if mode not in ("triangular", "triangular2", "exp_range") and scale_fn is None:
            raise ArgumentError(f"{name}: mode {mode!r} is invalid and scale_fn is None")
        if scale_mode not in ("cycle", "iterations"):
            raise ArgumentError(f"{name}: scale_mode must be 'cycle' or 'iterations', got {scale_mode!r}")
        if scale_fn is not None and not callable(scale_fn):
            raise ArgumentError(f"{name}: scale_fn must be callable, got {type(scale_fn).__name__}")
        self.mode = mode
        self.gamma = finite(f"{name}: gamma", gamma)
        self._scale_fn_custom = scale_fn
        self.scale_mode = scale_mode
        self._init_scale_fn()
        self.cycle_momentum = bool(cycle_momentum)
        if self.cycle_momentum:
            self.use_beta1 = _momentum_key(name, optimizer)
            self.base_momentums = _per_group(name, "base_momentum", optimizer, base_momentum)
            self.max_momentums = _per_group(name, "max_momentum", optimizer, max_momentum)
            if last_epoch == -1:
                for m, b, group in zip(self.max_momentums, self.base_momentums, optimizer.param_groups):
                    _set_momentum(group, self.use_beta1, m)
                    group["max_momentum"], group["base_momentum"] = m, b
        super().__init__(optimizer, last_epoch)
        self.base_lrs = base_lrs

    def _init_scale_fn(self) -> None:
        if self._scale_fn_custom is not None:
            return
        self.scale_mode = "iterations" if self.mode == "exp_range" else "cycle"

    def scale_fn(self, x: float) -> float:
        if self._scale_fn_custom is not None:
            return self._scale_fn_custom(x)
        if self.mode == "triangular":
            return 1.0
        if self.mode == "triangular2":
            return 1 / (2.0 ** (x - 1))
        return self.gamma ** x

    def get_lr(self) -> list[float]:
        cycle = math.floor(1 + self.last_epoch / self.total_size)
        x = 1.0 + self.last_epoch / self.total_size - cycle
        scale_factor = x / self.step_ratio if x <= self.step_ratio else (x - 1) / (self.step_ratio - 1)
        at = cycle if self.scale_mode == "cycle" else self.last_epoch
        lrs = [base_lr + (max_lr - base_lr) * scale_factor * self.scale_fn(at)
               for base_lr, max_lr in zip(self.base_lrs, self.max_lrs)]
        if self.cycle_momentum:
            for group, b, m in zip(self.optimizer.param_groups, self.base_momentums, self.max_momentums):
                _set_momentum(group, self.use_beta1, m - (m - b) * scale_factor * self.scale_fn(at))
        return lrs

    def state_dict(self) -> dict[str, Any]:
        sd = super().state_dict()
        fn = self._scale_fn_custom
        sd["_scale_fn_custom"] = None if fn is None or isinstance(fn, types.FunctionType) else dict(fn.__dict__)
        return sd

    def _check_entry(self, op: str, key: str, kind: Any, v: Any) -> Any:
        if key == "mode":
            if not isinstance(v, str):
                raise ArgumentError(f"{op}: 'mode' must be a string, got {type(v).__name__}")
            return v
        if kind == "fn_state":
            if v is None:
                return None
            fn = self._scale_fn_custom
            if (not isinstance(v, dict) or fn is None or isinstance(fn, types.FunctionType)
                    or any(not isinstance(k, str) or callable(x) for k, x in v.items())):
                raise ArgumentError(f"{op}: '_scale_fn_custom' must be None or the data attributes of this "
                                    f"scheduler's callable scale_fn object, got {v!r}")
            return dict(v)
        return super()._check_entry(op, key, kind, v)

    def _check_staged(self, op: str, staged: dict[str, Any]) -> None:
        if staged["mode"] not in ("triangular", "triangular2", "exp_range") and self._scale_fn_custom is None:
            raise ArgumentError(f"{op}: mode {staged['mode']!r} needs a scale_fn, and this scheduler has none")
        if staged["cycle_momentum"] and not {"use_beta1", "base_momentums", "max_momentums"} <= set(staged):
            raise ArgumentError(f"{op}: cycle_momentum=True needs 'use_beta1', 'base_momentums' and "
                                f"'max_momentums'")

    def _commit_state_dict(self, staged: dict[str, Any]) -> None:
        fn_state = staged.pop("_scale_fn_custom")
        super()._commit_state_dict(staged)
        if fn_state is not None:
            self._scale_fn_custom.__dict__.update(fn_state)
        self._init_scale_fn()


class OneCycleLR(LRScheduler):
    """The 1cycle policy: lr from max_lr/div_factor up to max_lr and down to
    max_lr/(div_factor*final_div_factor) over ``total_steps`` (cos or linear annealing), with
    the momentum (or beta1) cycling inversely; stepped every batch."""

    _STATE = {"total_steps": "positive", "_schedule_phases": "phases",
              "_anneal_func_type": ("choice", {"cos", "linear"}), "cycle_momentum": "bool", "use_beta1": "bool",
              **LRScheduler._STATE}
    _OPTIONAL = LRScheduler._OPTIONAL | {"use_beta1"}
    _PHASE_KEYS = {"end_step", "start_lr", "end_lr", "start_momentum", "end_momentum"}
    _GROUP_KEYS = {"initial_lr", "max_lr", "min_lr", "max_momentum", "base_momentum"}

    def __init__(self, optimizer: Optimizer, max_lr: float | list[float], total_steps: int | None = None,
                 epochs: int | None = None, steps_per_epoch: int | None = None, pct_start: float = 0.3,
                 anneal_strategy: str = "cos", cycle_momentum: bool = True, base_momentum: float | list = 0.85,
                 max_momentum: float | list = 0.95, div_factor: float = 25.0, final_div_factor: float = 1e4,
                 three_phase: bool = False, last_epoch: int = -1) -> None:
        name = "OneCycleLR"
        if not isinstance(optimizer, Optimizer):
            raise ArgumentError(f"{name}: {type(optimizer).__name__} is not an Optimizer")
        self.optimizer = optimizer
        if total_steps is not None:
            self.total_steps = check_int(f"{name}: total_steps", total_steps, 1)
        elif epochs is not None and steps_per_epoch is not None:
            self.total_steps = (check_int(f"{name}: epochs", epochs, 1)
                                * check_int(f"{name}: steps_per_epoch", steps_per_epoch, 1))
        else:
            raise ArgumentError(f"{name}: You must define either total_steps OR (epochs AND steps_per_epoch)")
        if not isinstance(pct_start, float) or not 0 <= pct_start <= 1:
            raise ArgumentError(f"{name}: Expected float between 0 and 1 pct_start, but got {pct_start!r}")
        if three_phase:
            self._schedule_phases = [
                dict(end_step=float(pct_start * self.total_steps) - 1, start_lr="initial_lr", end_lr="max_lr",
                     start_momentum="max_momentum", end_momentum="base_momentum"),
                dict(end_step=float(2 * pct_start * self.total_steps) - 2, start_lr="max_lr", end_lr="initial_lr",
                     start_momentum="base_momentum", end_momentum="max_momentum"),
                dict(end_step=self.total_steps - 1, start_lr="initial_lr", end_lr="min_lr",
                     start_momentum="max_momentum", end_momentum="max_momentum")]
        else:
            self._schedule_phases = [
                dict(end_step=float(pct_start * self.total_steps) - 1, start_lr="initial_lr", end_lr="max_lr",
                     start_momentum="max_momentum", end_momentum="base_momentum"),
                dict(end_step=self.total_steps - 1, start_lr="max_lr", end_lr="min_lr",
                     start_momentum="base_momentum", end_momentum="max_momentum")]
        if anneal_strategy not in ("cos", "linear"):
            raise ArgumentError(f"{name}: anneal_strategy must be one of 'cos' or 'linear', instead got "
                                f"{anneal_strategy!r}")
        self._anneal_func_type = anneal_strategy
        max_lrs = _per_group(name, "max_lr", optimizer, max_lr)
        div_factor, final_div_factor = finite(f"{name}: div_factor", div_factor), finite(
            f"{name}: final_div_factor", final_div_factor)
        if last_epoch == -1:
            for m, group in zip(max_lrs, optimizer.param_groups):
                group["initial_lr"] = m / div_factor
                group["max_lr"] = m
                group["min_lr"] = group["initial_lr"] / final_div_factor
        self.cycle_momentum = bool(cycle_momentum)
        if self.cycle_momentum:
            self.use_beta1 = _momentum_key(name, optimizer)
            maxs = _per_group(name, "max_momentum", optimizer, max_momentum)
            bases = _per_group(name, "base_momentum", optimizer, base_momentum)
            if last_epoch == -1:
                for m, b, group in zip(maxs, bases, optimizer.param_groups):
                    _set_momentum(group, self.use_beta1, m)
                    group["max_momentum"], group["base_momentum"] = m, b
        super().__init__(optimizer, last_epoch)

    def _anneal(self, start: float, end: float, pct: float) -> float:
        if self._anneal_func_type == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def get_lr(self) -> list[float]:
        step_num = self.last_epoch
        if step_num > self.total_steps:
            raise ArgumentError(f"OneCycleLR.step: Tried to step {step_num} times. The specified number of total "
                                f"steps is {self.total_steps}")
        lrs = []
        for group in self.optimizer.param_groups:
            start_step = 0.0
            for i, phase in enumerate(self._schedule_phases):
                end_step = phase["end_step"]
                if step_num <= end_step or i == len(self._schedule_phases) - 1:
                    pct = (step_num - start_step) / (end_step - start_step)
                    lr = self._anneal(group[phase["start_lr"]], group[phase["end_lr"]], pct)
                    if self.cycle_momentum:
                        momentum = self._anneal(group[phase["start_momentum"]], group[phase["end_momentum"]], pct)
                    break
                start_step = phase["end_step"]
            lrs.append(lr)
            if self.cycle_momentum:
                _set_momentum(group, self.use_beta1, momentum)
        return lrs

    def _check_entry(self, op: str, key: str, kind: Any, v: Any) -> Any:
        if kind != "phases":
            return super()._check_entry(op, key, kind, v)
        if not isinstance(v, (list, tuple)) or len(v) not in (2, 3):
            raise ArgumentError(f"{op}: '_schedule_phases' must be a list of 2 or 3 phases, got {v!r}")
        out = []
        for i, ph in enumerate(v):
            if not isinstance(ph, dict) or set(ph) != self._PHASE_KEYS:
                raise ArgumentError(f"{op}: '_schedule_phases'[{i}] must be a dict with keys "
                                    f"{sorted(self._PHASE_KEYS)}, got {ph!r}")
            for k in self._PHASE_KEYS - {"end_step"}:
                if ph[k] not in self._GROUP_KEYS:
                    raise ArgumentError(f"{op}: '_schedule_phases'[{i}][{k!r}] must name one of "
                                        f"{sorted(self._GROUP_KEYS)}, got {ph[k]!r}")
            out.append({**ph, "end_step": finite(f"{op}: '_schedule_phases'[{i}]['end_step']", ph["end_step"])})
        return out

    def _check_staged(self, op: str, staged: dict[str, Any]) -> None:
        if staged["cycle_momentum"] and "use_beta1" not in staged:
            raise ArgumentError(f"{op}: cycle_momentum=True needs 'use_beta1'")


class CosineAnnealingWarmRestarts(LRScheduler):
    """Cosine annealing restarted every ``T_i`` epochs (``T_i`` multiplied by ``T_mult`` at each
    restart); ``step(epoch)`` accepts fractional epochs, as PyTorch's."""

    _STATE = {"T_0": "positive", "T_i": "positive", "T_mult": "positive", "eta_min": "real", "T_cur": "real",
              **LRScheduler._STATE}

    def __init__(self, optimizer: Optimizer, T_0: int, T_mult: int = 1, eta_min: float = 0.0,
                 last_epoch: int = -1) -> None:
        name = "CosineAnnealingWarmRestarts"
        self.T_0 = check_int(f"{name}: T_0", T_0, 1)
        self.T_i = T_0
        self.T_mult = check_int(f"{name}: T_mult", T_mult, 1)
        self.eta_min = finite(f"{name}: eta_min", eta_min)
        self.T_cur = last_epoch
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        return [self.eta_min + (base_lr - self.eta_min) * (1 + math.cos(math.pi * self.T_cur / self.T_i)) / 2
                for base_lr in self.base_lrs]

    def step(self, epoch: float | None = None) -> None:
        if epoch is None and self.last_epoch < 0:
            epoch = 0
        if epoch is None:
            epoch = self.last_epoch + 1
            self.T_cur = self.T_cur + 1
            if self.T_cur >= self.T_i:
                self.T_cur = self.T_cur % self.T_i
                self.T_i = self.T_i * self.T_mult
        else:
            epoch = finite("CosineAnnealingWarmRestarts.step: epoch", epoch)
            if epoch < 0:
                raise ArgumentError(f"CosineAnnealingWarmRestarts.step: Expected non-negative epoch, but got {epoch}")
            if epoch >= self.T_0:
                if self.T_mult == 1:
                    self.T_cur = epoch % self.T_0
                else:
                    n = int(math.log((epoch / self.T_0 * (self.T_mult - 1) + 1), self.T_mult))
                    self.T_cur = epoch - self.T_0 * (self.T_mult ** n - 1) / (self.T_mult - 1)
                    self.T_i = self.T_0 * self.T_mult ** n
            else:
                self.T_i = self.T_0
                self.T_cur = epoch
        self.last_epoch = math.floor(epoch)
        self._get_lr_called_within_step = True
        try:
            lrs = self.get_lr()
        finally:
            self._get_lr_called_within_step = False
        for group, lr in zip(self.optimizer.param_groups, lrs):
            group["lr"] = lr
        self._last_lr = self._group_lrs()
