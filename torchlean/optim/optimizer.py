"""``Optimizer``: PyTorch's base class (param_groups, state, zero_grad, state_dict) over torchlean tensors.

Differences from ``torch.optim.Optimizer`` (documented where they show):

* Buffers are values: a step REBINDS each parameter's buffer (and each state tensor's buffer) to
  the fused step's new buffer, keeping the Parameter and state Tensor objects (what PyTorch's
  in-place update looks like from outside). ``state_dict()`` therefore returns a true snapshot
  (new Tensor objects over the current, never-mutated buffers): no ``deepcopy`` is needed to keep
  a checkpoint, and resuming from it is bitwise identical to not stopping. (Adam and SGD write
  over a buffer in place only when nothing but its own Parameter or state Tensor refers to it,
  see ``exclusively_held``; any other tensor is first given a copy of its own, ``own_rows``.
  Nobody can observe the difference.)
* ``load_state_dict`` also takes a PyTorch optimizer's state dict (torch tensors are copied to
  the parameter's device). It is all or nothing: every key, type, range and shape is checked
  against this optimizer (an explicit schema: unknown keys are refused) before anything changes.
* Options that change the algorithm and are not implemented (amsgrad, maximize, capturable,
  differentiable) raise ArgumentError; ``foreach`` and ``fused`` (any value) are accepted and
  change nothing: they pick PyTorch's implementation, and every step here is fused anyway.
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections import defaultdict
from typing import Any, Callable

import numpy as np

from .. import autograd
from ..errors import ArgumentError, DTypeError, ShapeError, TorchLeanError
from ..runtime import primitives as P
from ..runtime.allocator import register_cache
from ..runtime.buffer import Buffer, exclusive
from ..complex_tensor import ComplexTensor
from ..tensor import Tensor
from ..interop import as_host_array

__all__ = ["Optimizer", "required"]


class _RequiredParameter:
    def __repr__(self) -> str:
        return "<required parameter>"


required = _RequiredParameter()

# The last few step counts' one-element buffers, oldest first (steps only grow, so a short memory
# serves every optimizer of a training loop). They are live Buffers, counted as such; the cache
# holds at most _STEP_CACHE_MAX and collect_allocator(True) empties it.
_STEP_CACHE_MAX = 8
_step_buffers: dict[float, Buffer] = {}
# the values of the buffers above (keyed by the Buffer itself, which hashes by identity): the
# step count is read back every step, and reading a one-element array costs more than a lookup
_buffer_steps: dict[Buffer, float] = {}


def _clear_step_cache() -> int:
    _step_buffers.clear()
    _buffer_steps.clear()
    return 0  # its buffers are live Buffers: they leave the live count as their last holder goes


register_cache("cpu", lambda: 0, _clear_step_cache)


def exclusively_held(*tensors: Tensor) -> bool:
    """True when each tensor's buffer can be written in place without anyone else seeing it:
    ``runtime.buffer.exclusive`` (never shared, bound to this tensor alone, read by no live tape
    node). A ``detach()``, a ``state_dict()`` snapshot, a retained graph, a DLPack export or
    import, or a caller holding ``Buffer.data`` make it False. (Several tensors in one call: Adam
    asks about p, exp_avg and exp_avg_sq of every parameter on every step.)

    This is the one rule of every optimizer: memory is written in place only when this says so,
    and otherwise the tensor is first rebound to a fresh buffer (``own_rows``: a copy), so a
    source's values (a read-only one included) are never changed and naming a variable changes
    nothing."""
    for t in tensors:
        b = t._buf
        if b is None or t._node is not None or not exclusive(b):  # (only leaves: autograd.Node)
            return False
    return True


def own_rows(rows: list) -> list:
    """Make every tensor of ``rows`` (a parameter that has a gradient, then its state tensors: one
    row per parameter) writable in place, and return ``rows``.

    In place needs each buffer held by its own tensor alone (``exclusively_held``), the buffers of
    all rows distinct, and none of them a gradient (``p.grad = p.detach()``, say: an element read
    after it was overwritten would be wrong). A tensor that breaks the rule is rebound to a copy
    of its buffer: whoever else holds the old one (a ``state_dict()`` snapshot, a detached tensor,
    a retained graph) keeps its values, as an out-of-place step would leave them. The copies are
    made one tensor at a time, so a step that finds its parameters held elsewhere (every first
    step: a parameter's construction and ``copy_`` leave counted holders behind, see
    runtime/buffer.py) needs at most one tensor's memory more, not a second copy of every
    parameter and state at once (Adam's out-of-place step: three)."""
    grads = {id(row[0].grad._buf) for row in rows if row[0].grad is not None}
    seen: set[int] = set()
    for row in rows:
        for t in row:
            b = t._buf
            if not exclusively_held(t) or id(b) in seen or id(b) in grads:
                t._rebind(P.copy(b))
            seen.add(id(t._buf))
            del b  # (the old buffer goes now if nobody else holds it)
    return rows


def step_buffer(step: float) -> Buffer:
    """The one-element CPU buffer holding ``step``: buffers are immutable values, so all
    parameters at that step share it."""
    buf = _step_buffers.get(step)
    if buf is None:
        while len(_step_buffers) >= _STEP_CACHE_MAX:
            try:
                _buffer_steps.pop(_step_buffers.pop(next(iter(_step_buffers))), None)
            except (KeyError, StopIteration, RuntimeError):  # another thread evicted it first
                break
        buf = Buffer.from_numpy(np.array([step], np.float32), "cpu")
        _buffer_steps[buf] = float(buf._data[0])
        _step_buffers[step] = buf
    return buf


def step_tensor(step: float) -> Tensor:
    """A 0-d CPU float32 tensor holding ``step`` (torch keeps the step count on the CPU). Buffers
    are immutable values, so the buffer is shared between parameters; each gets its own Tensor."""
    return Tensor._wrap(step_buffer(step), ())


def step_value(t: Any) -> float:
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


def check_real(op: str, name: str, value: Any) -> float:
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
        if isinstance(params, (Tensor, ComplexTensor)):
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
        if isinstance(params, (Tensor, ComplexTensor)):
            params = [params]
        elif isinstance(params, set):
            raise ArgumentError(f"{op}: parameters must be an ordered collection (a list), got a set")
        else:
            try:
                params = list(params)
            except TypeError:
                raise ArgumentError(f"{op}: 'params' must be a Tensor or an iterable of Tensors, "
                                    f"got {type(params).__name__}") from None
        # a complex parameter is stepped through its real view, as PyTorch steps view_as_real(p)
        params = [p.real_view() if isinstance(p, ComplexTensor) else p for p in params]
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
        """Load a state dict from ``state_dict()`` or from a PyTorch optimizer of the same kind.

        All or nothing: the whole dict is checked against this optimizer first (see
        ``_stage_state_dict``), and only then are ``param_groups`` and ``state`` replaced."""
        self._commit_state_dict(self._stage_state_dict(state_dict))

    # The per-parameter state a subclass keeps: key -> "step" (a step count), "tensor" (a float
    # tensor of the parameter's shape) or "tensor_or_none". A parameter's state is either empty
    # (not stepped yet) or holds exactly these keys. None (a subclass that declares nothing): any
    # string key, with tensors, step counts and plain scalars as values.
    _state_schema: dict[str, str] | None = None

    def _stage_state_dict(self, state_dict: Any) -> tuple[list[dict[str, Any]], defaultdict]:
        """The (param_groups, state) that loading ``state_dict`` gives, built without changing
        anything: the top level must be {"state", "param_groups"}; the groups must match this
        optimizer's in number and size, with distinct integer parameter indices; a group's keys
        must be hyperparameters of this optimizer (or "initial_lr"), each of its default's type and
        accepted by the constructor's checks (missing ones take the default); state entries must
        belong to a listed index and follow ``_state_schema``, tensors shaped as their parameter.
        Raises ArgumentError (ShapeError, DTypeError) naming the entry."""
        op = f"{type(self).__name__}.load_state_dict"
        if not isinstance(state_dict, dict) or set(state_dict) != {"state", "param_groups"}:
            got = sorted(map(str, state_dict)) if isinstance(state_dict, dict) else type(state_dict).__name__
            raise ArgumentError(f"{op}: expected a dict with exactly 'state' and 'param_groups', got {got}")
        saved_groups, saved_state = state_dict["param_groups"], state_dict["state"]
        if not isinstance(saved_groups, (list, tuple)) or not isinstance(saved_state, dict):
            raise ArgumentError(f"{op}: 'param_groups' must be a list and 'state' a dict, got "
                                f"{type(saved_groups).__name__} and {type(saved_state).__name__}")
        if len(saved_groups) != len(self.param_groups):
            raise ArgumentError(f"{op}: loaded state dict has {len(saved_groups)} parameter groups, "
                                f"the optimizer has {len(self.param_groups)}")
        id_map: dict[int, Tensor] = {}
        new_groups = []
        for i, (g, s) in enumerate(zip(self.param_groups, saved_groups)):
            if not isinstance(s, dict):
                raise ArgumentError(f"{op}: param_groups[{i}] must be a dict, got {type(s).__name__}")
            indices = s.get("params")
            if not isinstance(indices, (list, tuple)) or not all(_is_int(k) for k in indices):
                raise ArgumentError(f"{op}: param_groups[{i}]['params'] must be a list of integer indices, "
                                    f"got {indices!r}")
            if len(g["params"]) != len(indices):
                raise ArgumentError(f"{op}: parameter group {i} has {len(g['params'])} parameters, the loaded "
                                    f"state dict's has {len(indices)}")
            for p, k in zip(g["params"], indices):
                if k in id_map:
                    raise ArgumentError(f"{op}: parameter index {k} appears more than once in param_groups")
                id_map[k] = p
            ng = {key: self._group_value(op, i, key, v) for key, v in s.items() if key != "params"}
            for key, default in self.defaults.items():
                if key not in ng:
                    if default is required:
                        raise ArgumentError(f"{op}: param_groups[{i}] has no {key!r}, which {type(self).__name__} "
                                            f"requires")
                    ng[key] = default
            ng["params"] = g["params"]
            try:
                self._check_group(ng)
            except TorchLeanError as exc:
                raise ArgumentError(f"{op}: param_groups[{i}]: {exc}") from None
            new_groups.append(ng)
        new_state: defaultdict = defaultdict(dict)
        for k, st in saved_state.items():
            if not _is_int(k) or k not in id_map:
                raise ArgumentError(f"{op}: 'state' has an entry for parameter index {k!r}, which no parameter "
                                    f"group lists")
            if not isinstance(st, dict):
                raise ArgumentError(f"{op}: state[{k}] must be a dict, got {type(st).__name__}")
            if st:
                new_state[id_map[k]] = self._stage_param_state(op, k, id_map[k], st)
        return new_groups, new_state

    def _commit_state_dict(self, staged: tuple[list[dict[str, Any]], defaultdict]) -> None:
        """Install what ``_stage_state_dict`` built (two assignments: nothing here can fail)."""
        self.param_groups, self.state = staged

    def _group_value(self, op: str, i: int, key: str, value: Any) -> Any:
        """A loaded hyperparameter, checked against the type of this optimizer's default."""
        where = f"{op}: param_groups[{i}][{key!r}]"
        if key in ("initial_lr", "max_lr", "min_lr", "max_momentum", "base_momentum"):  # set by a scheduler
            default: Any = 0.0
        elif key in self.defaults:
            default = self.defaults[key]
        else:
            raise ArgumentError(f"{where}: {type(self).__name__} has no hyperparameter {key!r} (it has "
                                f"{', '.join(sorted(self.defaults))})")
        if isinstance(default, bool):
            if not isinstance(value, (bool, np.bool_)):
                raise ArgumentError(f"{where} must be a bool, got {value!r} ({type(value).__name__})")
            return bool(value)
        if default is None:  # foreach / fused: None or a bool
            if value is not None and not isinstance(value, (bool, np.bool_)):
                raise ArgumentError(f"{where} must be None or a bool, got {value!r} ({type(value).__name__})")
            return value if value is None else bool(value)
        if isinstance(default, tuple):
            if not isinstance(value, (tuple, list)) or len(value) != len(default):
                raise ArgumentError(f"{where} must be a pair of numbers, got {value!r}")
            return tuple(_finite_real(where, v) for v in value)
        return _finite_real(where, value)

    def _stage_param_state(self, op: str, k: int, p: Tensor, st: dict[str, Any]) -> dict[str, Any]:
        schema = self._state_schema
        if schema is not None and set(st) != set(schema):
            raise ArgumentError(f"{op}: state[{k}] has keys {sorted(map(str, st))}, {type(self).__name__} keeps "
                                f"{sorted(schema)}")
        out = {}
        for key, value in st.items():
            where = f"{op}: state[{k}][{key!r}]"
            kind = schema[key] if schema is not None else _guess_kind(where, key, value)
            if kind == "step":
                out[key] = step_tensor(_check_step_count(where, value))
            elif kind == "tensor_or_none" and value is None:
                out[key] = None
            elif kind in ("tensor", "tensor_or_none"):
                out[key] = _state_tensor(where, p, value)
            else:  # "scalar" (no schema)
                out[key] = value
        return out


def _is_int(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_))


def _finite_real(where: str, value: Any) -> float | int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ArgumentError(f"{where} must be a finite real number, got {value!r} ({type(value).__name__})")
    return int(value) if isinstance(value, numbers.Integral) else float(value)


def _is_array_like(value: Any) -> bool:
    return isinstance(value, (Tensor, np.ndarray)) or (hasattr(value, "detach") and hasattr(value, "cpu"))


def _guess_kind(where: str, key: str, value: Any) -> str:
    if key == "step":
        return "step"
    if _is_array_like(value):
        return "tensor"
    if value is None or isinstance(value, (bool, numbers.Real, str)):
        return "scalar"
    raise ArgumentError(f"{where} is a {type(value).__name__}; optimizer state holds tensors and numbers")


def _check_step_count(where: str, value: Any) -> float:
    """A step count (our 0-d tensor, a torch tensor, an array or a number): a whole number in
    [0, 2**24], where float32 (the step tensor's type) still counts exactly."""
    if _is_array_like(value):
        arr = as_host_array(where, value)
        if arr.size != 1:
            raise ArgumentError(f"{where}: a step count has one element, got shape {tuple(arr.shape)}")
        value = arr.reshape(-1)[0].item()
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise ArgumentError(f"{where}: a step count must be a number, got {value!r} ({type(value).__name__})")
    v = float(value)
    if not (math.isfinite(v) and v == int(v) and 0 <= v <= 2**24):
        raise ArgumentError(f"{where}: a step count must be a whole number in [0, 2**24], got {value!r}")
    return v


def _state_tensor(where: str, p: Tensor, value: Any) -> Tensor:
    """A float state tensor (exp_avg, momentum_buffer ...) copied to its parameter's device."""
    if not _is_array_like(value):
        raise ArgumentError(f"{where} must be a tensor, got {value!r} ({type(value).__name__})")
    arr = as_host_array(where, value)
    if arr.dtype.kind != "f":
        raise DTypeError(f"{where} has dtype {arr.dtype}, expected a floating tensor")
    if tuple(arr.shape) != p.shape:
        raise ShapeError(f"{where} has shape {tuple(arr.shape)}, its parameter has shape {p.shape}")
    return Tensor._wrap(Buffer.from_numpy(arr.astype(np.float32).reshape(-1), p.device), p.shape)
