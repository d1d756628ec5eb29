"""``Optimizer``: PyTorch's base class (param_groups, state, zero_grad, state_dict) over torchlean tensors.

Differences from ``torch.optim.Optimizer`` (documented where they show):

* Buffers are values: a step REBINDS each parameter's buffer (and each state tensor's buffer) to
  the fused step's new buffer, keeping the Parameter and state Tensor objects (what PyTorch's
  in-place update looks like from outside). ``state_dict()`` therefore returns a true snapshot
  (new Tensor objects over the current, never-mutated buffers): no ``deepcopy`` is needed to keep
  a checkpoint, and resuming from it is bitwise identical to not stopping. (Adam writes over a
  buffer in place, allocating nothing, only when nothing but its own Parameter or state Tensor
  refers to it: see ``exclusively_held``. Nobody can observe the difference.)
* ``load_state_dict`` also takes a PyTorch optimizer's state dict (torch tensors are copied to
  the parameter's device).
* Options that change the algorithm and are not implemented (amsgrad, maximize, capturable,
  differentiable, foreach=True, fused=True) raise ArgumentError; ``foreach=None``/``False`` and
  ``fused=None``/``False`` are accepted and change nothing (every step is one fused kernel per
  parameter anyway).
"""

from __future__ import annotations

import math
import numbers
import sys
import warnings
from collections import defaultdict
from typing import Any, Callable

import numpy as np

from .. import autograd
from ..errors import ArgumentError, DTypeError
from ..runtime.buffer import Buffer
from ..tensor import Tensor
from ..interop import as_host_array

__all__ = ["Optimizer", "required"]


class _RequiredParameter:
    def __repr__(self) -> str:
        return "<required parameter>"


required = _RequiredParameter()

_step_buffers: dict[float, Buffer] = {}
# the values of the buffers above (keyed by the Buffer itself, which hashes by identity): the
# step count is read back every step, and reading a one-element array costs more than a lookup
_buffer_steps: dict[Buffer, float] = {}


class _Slot:
    __slots__ = ("x",)


def _calibrate() -> tuple[int, int]:
    """sys.getrefcount of an object held by one slot, read through a local and through the slot
    (the interpreter's own counting: measured, not assumed)."""
    h, d = _Slot(), _Slot()
    h.x, d.x = object(), object()
    local = h.x
    return sys.getrefcount(local), sys.getrefcount(d.x)


_ONE_HOLDER_LOCAL, _ONE_HOLDER_ATTR = _calibrate()


def exclusively_held(*tensors: Tensor) -> bool:
    """True when each tensor's buffer, and that buffer's array, are referred to by that tensor
    alone: no other Tensor (a ``detach()``, a ``state_dict()`` snapshot), tape closure (a retained
    graph), DLPack export, array view or view Buffer (``Buffer._shared``: a NumPy view of a view
    need not hold a reference to the array it came from) can see them, so writing over them in
    place is unobservable. (Several tensors in one call: Adam asks about p, exp_avg and exp_avg_sq
    of every parameter on every step.)"""
    for t in tensors:
        b = t._buf  # the one local reference that _ONE_HOLDER_LOCAL counts
        if (b is None or b._shared or sys.getrefcount(b) > _ONE_HOLDER_LOCAL
                or sys.getrefcount(b._data) > _ONE_HOLDER_ATTR):
            return False
    return True


def _step_buffer(step: float) -> Buffer:
    """The one-element CPU buffer holding ``step``: buffers are immutable values, so all
    parameters at that step share it."""
    buf = _step_buffers.get(step)
    if buf is None:
        if len(_step_buffers) > 4096:
            _step_buffers.clear()
            _buffer_steps.clear()
        buf = _step_buffers[step] = Buffer.from_numpy(np.array([step], np.float32), "cpu")
        _buffer_steps[buf] = float(buf._data[0])
    return buf


def _step_tensor(step: float) -> Tensor:
    """A 0-d CPU float32 tensor holding ``step`` (torch keeps the step count on the CPU). Buffers
    are immutable values, so the buffer is shared between parameters; each gets its own Tensor."""
    return Tensor._wrap(_step_buffer(step), ())


def _step_value(t: Any) -> float:
    """The step count stored in state (our 0-d tensor, a torch tensor or a number) as a float."""
    if isinstance(t, Tensor):
        b = t._buf
        if b is not None:
            v = _buffer_steps.get(b)  # one of ours (every step of Adam reads one per parameter)
            if v is not None:
                return v
            if b._ctx.name == "cpu":
                return float(b._data[0])
        return float(t.item())
    if hasattr(t, "item"):
        return float(t.item())
    return float(t)


def _check_real(op: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ArgumentError(f"{op}: {name} must be a real number, got {value!r} ({type(value).__name__})")
    v = float(value)
    if math.isnan(v):
        raise ArgumentError(f"{op}: {name} must not be NaN")
    return v


class Optimizer:
    """Base class: ``Optimizer(params, defaults)``; subclasses implement ``step``."""

    def __init__(self, params: Any, defaults: dict[str, Any]) -> None:
        self.defaults = defaults
        self.state: defaultdict = defaultdict(dict)
        self.param_groups: list[dict[str, Any]] = []
        if isinstance(params, Tensor):
            raise ArgumentError(f"{type(self).__name__}: params must be an iterable of Tensors or dicts, "
                                f"got a Tensor")
        if isinstance(params, dict):
            params = [params]
        try:
            groups = list(params)
        except TypeError:
            raise ArgumentError(f"{type(self).__name__}: params must be an iterable of Tensors or dicts, "
                                f"got {type(params).__name__}") from None
        if not groups:
            raise ArgumentError(f"{type(self).__name__}: got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for g in groups:
            self.add_param_group(g)

    def __repr__(self) -> str:
        lines = [type(self).__name__ + " ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            lines += [f"    {k}: {group[k]}" for k in sorted(group) if k != "params"]
        return "\n".join(lines) + "\n)"

    def __getstate__(self) -> Any:
        raise TypeError("Optimizer: cannot be pickled; use state_dict()")

    # -- groups ----------------------------------------------------------------------------
    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a group (a dict with "params" and optional hyperparameters; the rest from defaults)."""
        op = f"{type(self).__name__}.add_param_group"
        if not isinstance(param_group, dict):
            raise ArgumentError(f"{op}: a param group must be a dict, got {type(param_group).__name__}")
        params = param_group.get("params")
        if isinstance(params, Tensor):
            params = [params]
        elif isinstance(params, set):
            raise ArgumentError(f"{op}: parameters must be an ordered collection (a list), got a set")
        else:
            try:
                params = list(params)
            except TypeError:
                raise ArgumentError(f"{op}: 'params' must be a Tensor or an iterable of Tensors, "
                                    f"got {type(params).__name__}") from None
        for i, p in enumerate(params):
            if not isinstance(p, Tensor):
                raise ArgumentError(f"{op}: params[{i}] is a {type(p).__name__}, expected a Tensor")
            if p._buf is None:
                raise DTypeError(f"{op}: params[{i}] is an {p.dtype} tensor; only float32 tensors can be optimized")
            if not p.is_leaf:
                raise ArgumentError(f"{op}: params[{i}] is not a leaf tensor; only leaves can be optimized")
        group = dict(param_group)
        group["params"] = params
        for k, v in self.defaults.items():
            if v is required and k not in group:
                raise ArgumentError(f"{op}: parameter group didn't specify a value of required "
                                    f"optimization parameter {k}")
            group.setdefault(k, v)
        if len({id(p) for p in params}) != len(params):
            warnings.warn(f"{op}: a parameter group contains a parameter more than once; this will be an "
                          f"error in a future version (as in PyTorch)", UserWarning, stacklevel=2)
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in seen for p in params):
            raise ArgumentError(f"{op}: some parameters appear in more than one parameter group")
        self._check_group(group)
        self.param_groups.append(group)

    def _check_group(self, group: dict[str, Any]) -> None:
        """Subclasses validate hyperparameters and refuse unsupported options here."""

    def _refuse(self, group: dict[str, Any], flags: dict[str, Any]) -> None:
        name = type(self).__name__
        for key, allowed in flags.items():
            if key in group and group[key] not in allowed:
                raise ArgumentError(f"{name}: option {key}={group[key]!r} is not supported by torchlean "
                                    f"(supported: {', '.join(repr(a) for a in allowed)})")

    # -- gradients ---------------------------------------------------------------------------
    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop every parameter's gradient (``set_to_none``) or set it to zeros."""
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    with autograd.no_grad():
                        p.grad.zero_()

    def _closure_loss(self, closure: Callable[[], Any] | None) -> Any:
        if closure is None:
            return None
        with autograd.enable_grad():
            return closure()

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        raise NotImplementedError

    # -- state dicts ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """PyTorch's format: {"state": {index: {...}}, "param_groups": [{..., "params": [indices]}]}.
        A snapshot: later steps do not change it (see the module docstring)."""
        index: dict[int, int] = {}
        groups = []
        for group in self.param_groups:
            packed = {k: v for k, v in group.items() if k != "params"}
            for p in group["params"]:
                index.setdefault(id(p), len(index))
            packed["params"] = [index[id(p)] for p in group["params"]]
            groups.append(packed)
        state = {}
        for p, st in self.state.items():
            if id(p) not in index:
                continue
            state[index[id(p)]] = {k: (Tensor._wrap(v._buf, v.shape) if isinstance(v, Tensor) and v._buf is not None
                                       else v) for k, v in st.items()}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a state dict from ``state_dict()`` or from a PyTorch optimizer of the same kind."""
        op = f"{type(self).__name__}.load_state_dict"
        try:
            saved_groups, saved_state = state_dict["param_groups"], state_dict["state"]
        except (KeyError, TypeError):
            raise ArgumentError(f"{op}: expected a dict with 'state' and 'param_groups'") from None
        if len(saved_groups) != len(self.param_groups):
            raise ArgumentError(f"{op}: loaded state dict has {len(saved_groups)} parameter groups, "
                                f"the optimizer has {len(self.param_groups)}")
        for i, (g, s) in enumerate(zip(self.param_groups, saved_groups)):
            if len(g["params"]) != len(s["params"]):
                raise ArgumentError(f"{op}: parameter group {i} has {len(g['params'])} parameters, the loaded "
                                    f"state dict's has {len(s['params'])}")
        id_map = {}
        for g, s in zip(self.param_groups, saved_groups):
            for p, k in zip(g["params"], s["params"]):
                id_map[k] = p
        new_state: defaultdict = defaultdict(dict)
        for k, st in saved_state.items():
            if k not in id_map:
                continue
            p = id_map[k]
            new_state[p] = {key: self._cast_state(op, p, key, value) for key, value in st.items()}
        new_groups = []
        for g, s in zip(self.param_groups, saved_groups):
            ng = {k: v for k, v in s.items() if k != "params"}
            if isinstance(ng.get("betas"), list):
                ng["betas"] = tuple(ng["betas"])
            ng["params"] = g["params"]
            self._check_group(ng)
            new_groups.append(ng)
        self.param_groups = new_groups
        self.state = new_state

    @staticmethod
    def _cast_state(op: str, p: Tensor, key: str, value: Any) -> Any:
        if key == "step":
            return _step_tensor(_step_value(value))
        if isinstance(value, Tensor) or (hasattr(value, "detach") and hasattr(value, "cpu")) or \
                isinstance(value, np.ndarray):
            arr = as_host_array(f"load_state_dict: state entry {key!r}", value).astype(np.float32)
            if arr.size != p.numel():
                raise ArgumentError(f"{op}: state entry {key!r} has {arr.size} elements, its parameter "
                                    f"{p.numel()}")
            return Tensor._wrap(Buffer.from_numpy(arr.reshape(-1), p.device), p.shape)
        return value

