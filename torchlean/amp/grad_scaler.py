"""``GradScaler``: PyTorch's dynamic loss scaler, with its API and its algorithm.

Why it is correct in float32: the scale is a power of two (unless the user gives another
``init_scale``, ``growth_factor`` or ``backoff_factor``), and multiplying by a power of two is
exact in float32 away from overflow and subnormals; backward is linear in the incoming gradient,
so the scaled gradients are the unscaled ones times the scale, and ``unscale_`` gives back the
same bits. A training run with the scaler therefore equals one without it, except where a
scaled gradient overflows: then, as in PyTorch, the step is skipped and the scale backs off.
Steps whose gradients hold inf or NaN are skipped too (PyTorch does the same).

As PyTorch: ``GradScaler("cuda")`` (the default) where CUDA is unavailable warns and disables
itself (then ``scale`` returns its input, ``step`` just steps, ``get_scale()`` is 1.0 and
``state_dict()`` is empty), so a mixed-precision loop runs on a CPU-only machine unchanged;
``GradScaler("cpu")`` scales on the CPU. ``enabled=False`` is that same pass-through.

The inf/NaN check is one device reduction per gradient (``sum(g * 0)``: zero exactly when every
element is finite) and one host read per optimizer step.
"""

from __future__ import annotations

import enum
import numbers
import warnings
from typing import Any

import numpy as np

from .. import ops
from ..autograd import no_grad
from ..errors import ArgumentError, AutogradError
from ..runtime.device import cuda_unavailable_reason
from ..tensor import Tensor

__all__ = ["GradScaler", "OptState"]


class OptState(enum.Enum):
    READY = 0
    UNSCALED = 1
    STEPPED = 2


def _f32(x: float) -> float:
    """A value as PyTorch's float32 scale tensor holds it."""
    return float(np.float32(x))


def _positive(op: str, name: str, v: Any, above_one: bool = False, below_one: bool = False) -> float:
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or not np.isfinite(float(v)) or float(v) <= 0:
        raise ArgumentError(f"{op}: {name} must be a positive finite number, got {v!r}")
    if above_one and float(v) <= 1.0:
        raise ArgumentError(f"{op}: {name} must be > 1.0, got {v!r}")
    if below_one and float(v) >= 1.0:
        raise ArgumentError(f"{op}: {name} must be < 1.0, got {v!r}")
    return float(v)


class GradScaler:
    """``GradScaler(device="cuda", init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5,
    growth_interval=2000, enabled=True)``: PyTorch's API and algorithm (see the module docstring)."""

    def __init__(self, device: str = "cuda", init_scale: float = 2.0**16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000, enabled: bool = True) -> None:
        op = "GradScaler"
        if device not in ("cuda", "cpu"):
            raise ArgumentError(f"{op}: device must be 'cuda' or 'cpu', got {device!r}")
        self._device = device
        self._enabled = bool(enabled)
        if self._enabled and device == "cuda" and cuda_unavailable_reason() is not None:
            warnings.warn("torchlean.amp.GradScaler is enabled, but CUDA is not available. Disabling.",
                          UserWarning, stacklevel=2)
            self._enabled = False
        if self._enabled:
            self._scale = _f32(_positive(op, "init_scale", init_scale))
            self._growth_factor = _positive(op, "growth_factor", growth_factor, above_one=True)
            self._backoff_factor = _positive(op, "backoff_factor", backoff_factor, below_one=True)
            if isinstance(growth_interval, bool) or not isinstance(growth_interval, numbers.Integral) \
                    or growth_interval <= 0:
                raise ArgumentError(f"{op}: growth_interval must be a positive int, got {growth_interval!r}")
            self._growth_interval = int(growth_interval)
            self._growth_tracker = 0
        self._per_optimizer: dict[int, dict[str, Any]] = {}

    # -- scaling ------------------------------------------------------------------------------
    def scale(self, outputs: Any) -> Any:
        """``outputs`` (a tensor, or nested lists/tuples of tensors) times the scale."""
        if not self._enabled:
            return outputs
        if isinstance(outputs, Tensor):
            return ops.mul(outputs, self._scale)
        if isinstance(outputs, (list, tuple)):
            scaled = [self.scale(o) for o in outputs]
            return type(outputs)(scaled)
        raise ArgumentError(f"GradScaler.scale: outputs must be a Tensor or a list/tuple of tensors, "
                            f"got {type(outputs).__name__}")

    def _state(self, optimizer: Any) -> dict[str, Any]:
        return self._per_optimizer.setdefault(id(optimizer), {"stage": OptState.READY, "found_inf": False})

    def unscale_(self, optimizer: Any) -> None:
        """Divide ``optimizer``'s gradients by the scale (in place) and note whether any is inf/NaN."""
        if not self._enabled:
            return
        st = self._state(optimizer)
        if st["stage"] is OptState.UNSCALED:
            raise AutogradError("GradScaler.unscale_: unscale_() has already been called on this optimizer "
                                "since the last update()")
        if st["stage"] is OptState.STEPPED:
            raise AutogradError("GradScaler.unscale_: unscale_() is being called after step()")
        inv = _f32(1.0 / self._scale)  # as PyTorch: the reciprocal in double, rounded to float32
        checks: dict[str, Tensor] = {}  # per device: the sum of every gradient times zero
        with no_grad():
            for group in optimizer.param_groups:
                for p in group["params"]:
                    g = p.grad
                    if g is None:
                        continue
                    zero = ops.sum(ops.mul(g, 0.0))  # 0 exactly unless g holds inf or NaN
                    prev = checks.get(g.device)
                    checks[g.device] = zero if prev is None else ops.add(prev, zero)
                    g.mul_(inv)
        st["found_inf"] = any(not c.item() == 0.0 for c in checks.values())
        st["stage"] = OptState.UNSCALED

    def step(self, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        """``unscale_`` (unless done), then ``optimizer.step()`` unless a gradient was inf/NaN;
        returns what ``optimizer.step`` returned (None when the step was skipped)."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise ArgumentError("GradScaler.step: closure use is not supported while GradScaler is enabled")
        st = self._state(optimizer)
        if st["stage"] is OptState.STEPPED:
            raise AutogradError("GradScaler.step: step() has already been called since the last update()")
        if st["stage"] is OptState.READY:
            self.unscale_(optimizer)
        result = None if st["found_inf"] else optimizer.step(*args, **kwargs)
        st["stage"] = OptState.STEPPED
        return result

    def update(self, new_scale: Any = None) -> None:
        """Back the scale off after a skipped step, grow it after ``growth_interval`` good ones (or
        set ``new_scale``); then start the next iteration."""
        if not self._enabled:
            return
        if new_scale is not None:
            if isinstance(new_scale, Tensor):
                if new_scale.numel() != 1:
                    raise ArgumentError(f"GradScaler.update: new_scale must be a one-element tensor, got shape "
                                        f"{new_scale.shape}")
                new_scale = new_scale.item()
            self._scale = _f32(_positive("GradScaler.update", "new_scale", new_scale))
        else:
            seen = [st for st in self._per_optimizer.values() if st["stage"] is not OptState.READY]
            if not seen:
                raise AutogradError("GradScaler.update: no inf checks were recorded prior to update() (call "
                                    "scaler.step(optimizer) or scaler.unscale_(optimizer) first)")
            if any(st["found_inf"] for st in seen):
                self._scale = _f32(self._scale * self._backoff_factor)
                self._growth_tracker = 0
            else:
                self._growth_tracker += 1
                if self._growth_tracker == self._growth_interval:
                    grown = _f32(self._scale * self._growth_factor)
                    if np.isfinite(grown):
                        self._scale = grown
                    self._growth_tracker = 0
        self._per_optimizer.clear()

    # -- PyTorch's accessors ------------------------------------------------------------------
    def is_enabled(self) -> bool:
        return self._enabled

    def get_scale(self) -> float:
        return self._scale if self._enabled else 1.0

    def get_growth_factor(self) -> float:
        return self._growth_factor

    def set_growth_factor(self, new_factor: float) -> None:
        self._growth_factor = _positive("GradScaler.set_growth_factor", "new_factor", new_factor, above_one=True)

    def get_backoff_factor(self) -> float:
        return self._backoff_factor

    def set_backoff_factor(self, new_factor: float) -> None:
        self._backoff_factor = _positive("GradScaler.set_backoff_factor", "new_factor", new_factor, below_one=True)

    def get_growth_interval(self) -> int:
        return self._growth_interval

    def set_growth_interval(self, new_interval: int) -> None:
        if isinstance(new_interval, bool) or not isinstance(new_interval, numbers.Integral) or new_interval <= 0:
            raise ArgumentError(f"GradScaler.set_growth_interval: expected a positive int, got {new_interval!r}")
        self._growth_interval = int(new_interval)

    def state_dict(self) -> dict[str, Any]:
        """PyTorch's keys (empty when disabled)."""
        if not self._enabled:
            return {}
        return {"scale": self._scale, "growth_factor": self._growth_factor, "backoff_factor": self._backoff_factor,
                "growth_interval": self._growth_interval, "_growth_tracker": self._growth_tracker}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if not self._enabled:
            return
        op = "GradScaler.load_state_dict"
        if not isinstance(state_dict, dict) or len(state_dict) == 0:
            raise ArgumentError(f"{op}: the source state dict is empty, possibly because it was saved from a "
                                f"disabled GradScaler")
        keys = {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"}
        if set(state_dict) != keys:
            raise ArgumentError(f"{op}: expected the keys {sorted(keys)}, got {sorted(map(str, state_dict))}")
        tracker = state_dict["_growth_tracker"]
        if isinstance(tracker, Tensor):
            tracker = tracker.item()
        if isinstance(tracker, bool) or not isinstance(tracker, numbers.Integral) or tracker < 0:
            raise ArgumentError(f"{op}: _growth_tracker must be a non-negative int, got {tracker!r}")
        scale = state_dict["scale"]
        scale = scale.item() if isinstance(scale, Tensor) else scale
        self._scale = _f32(_positive(op, "scale", scale))
        self.set_growth_factor(state_dict["growth_factor"])
        self.set_backoff_factor(state_dict["backoff_factor"])
        self.set_growth_interval(state_dict["growth_interval"])
        self._growth_tracker = int(tracker)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_per_optimizer"] = {}
        return state
