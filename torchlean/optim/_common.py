"""What the element-wise optimizers (RMSprop, Adagrad, Adadelta, Adamax, NAdam, RAdam) share.

* ``T``: PyTorch's in-place tensor formulas (``lerp_``, ``addcmul_``, ``addcdiv_`` ...) over
  float32 Buffers, in the order PyTorch's single-tensor code evaluates them, so a step lands
  within an ulp or so of PyTorch's (PyTorch's CPU kernels fuse some multiply-adds; ours round
  twice). Each is one or two primitive calls: nothing loops over elements in Python.
* ``ElementwiseOptimizer``: the per-group state schema (RMSprop keeps ``momentum_buffer`` only
  when momentum > 0, NAdam keeps a 0-d ``mu_product`` ...), checked on ``load_state_dict`` with the
  base class's all-or-nothing rule, the refused flags, and the gradient preamble every one of them
  starts with (``maximize``, L2 ``weight_decay``).

Results are written back by rebinding the parameter's and the state tensors' buffers, never in
place (see ``optimizer.exclusively_held``): a ``state_dict()`` snapshot keeps its values.
"""

from __future__ import annotations

import math
import numbers
from collections import defaultdict
from typing import Any

import numpy as np

from ..errors import ArgumentError, DTypeError, ShapeError
from ..interop import as_host_array
from ..runtime import primitives as P
from ..runtime.buffer import Buffer, full, zeros
from ..tensor import Tensor
from .optimizer import Optimizer, check_real, step_tensor, step_value

__all__ = ["T", "FLAGS", "ElementwiseOptimizer", "scalar_tensor", "rebind", "check_betas", "check_nonneg"]

# Options that change the algorithm in ways we do not implement: the value(s) accepted.
FLAGS = {"foreach": (None, False, True), "fused": (None, False, True), "capturable": (False,), "differentiable": (False,)}


class T:
    """PyTorch's float32 tensor formulas on Buffers (scalars rounded to float32, as PyTorch's CPU
    kernels do with a Python scalar operand)."""

    @staticmethod
    def lerp(a: Buffer, b: Buffer, w: float) -> Buffer:
        """torch.lerp: a + w (b - a) for |w| < 0.5, else b - (b - a) (1 - w)."""
        if abs(w) < 0.5:
            return P.axpy(a, P.sub(b, a), w)
        return P.axpy(b, P.sub(b, a), -(1.0 - w))

    @staticmethod
    def addcmul(a: Buffer, t1: Buffer, t2: Buffer, value: float = 1.0) -> Buffer:
        """a + value * t1 * t2 (evaluated left to right, as PyTorch's kernel)."""
        return P.add(a, P.mul(t1 if value == 1.0 else P.scale(t1, value), t2))

    @staticmethod
    def addcdiv(a: Buffer, t1: Buffer, t2: Buffer, value: float = 1.0) -> Buffer:
        """a + value * t1 / t2."""
        return P.add(a, P.div(t1 if value == 1.0 else P.scale(t1, value), t2))

    @staticmethod
    def div_scalar(x: Buffer, c: float) -> Buffer:
        """x / c with c rounded to float32 (a true division, not x * (1/c))."""
        return P.div(x, full(x.size, c, x.device))

    @staticmethod
    def rdiv_scalar(c: float, x: Buffer) -> Buffer:
        """c / x."""
        return P.div(full(x.size, c, x.device), x)


def scalar_tensor(value: float) -> Tensor:
    """A fresh 0-d float32 CPU tensor (PyTorch keeps NAdam's mu_product so)."""
    return Tensor._wrap(Buffer.from_numpy(np.array([value], np.float32), "cpu"), ())


def rebind(t: Tensor, buf: Buffer) -> None:
    """Point ``t`` at the step's new buffer (PyTorch's in-place update, seen from outside)."""
    t._rebind(buf)


def check_betas(name: str, betas: Any) -> tuple[float, float]:
    if not isinstance(betas, (tuple, list)) or len(betas) != 2:
        raise ArgumentError(f"{name}: betas must be a pair of floats, got {betas!r}")
    for i in (0, 1):
        if not 0.0 <= check_real(name, f"betas[{i}]", betas[i]) < 1.0:
            raise ArgumentError(f"{name}: Invalid beta parameter at index {i}: {betas[i]}")
    return (betas[0], betas[1])


def check_nonneg(name: str, group: dict[str, Any], *keys: str, label: dict[str, str] | None = None) -> None:
    """PyTorch's "Invalid <x> value" checks: each key a real number >= 0."""
    for k in keys:
        if check_real(name, k, group[k]) < 0.0:
            what = (label or {}).get(k, f"{k} value")
            raise ArgumentError(f"{name}: Invalid {what}: {group[k]}")


class ElementwiseOptimizer(Optimizer):
    """Base of the element-wise optimizers: a state schema per group (``_schema``), lazily created
    state (``_init_state``) and the gradient preamble (``_grad``)."""

    def _schema(self, group: dict[str, Any]) -> dict[str, str]:
        """The state keys a parameter of ``group`` keeps: "step" (a step count), "tensor" (float32,
        the parameter's shape, on its device) or "scalar" (a 0-d float32 CPU tensor)."""
        raise NotImplementedError

    def _init_state(self, group: dict[str, Any], p: Tensor) -> dict[str, Any]:
        """PyTorch's initial state: step 0, zero tensors, scalars 1 (subclasses refine it)."""
        n, dev = p._buf.size, p._buf.device
        st: dict[str, Any] = {}
        for key, kind in self._schema(group).items():
            if kind == "step":
                st[key] = step_tensor(0.0)
            elif kind == "scalar":
                st[key] = scalar_tensor(1.0)
            else:
                st[key] = Tensor._wrap(zeros(n, dev), p.shape)
        return st

    def _state_of(self, group: dict[str, Any], p: Tensor) -> dict[str, Any]:
        st = self.state[p]
        if not st:
            st.update(self._init_state(group, p))
        return st

    def _grad(self, group: dict[str, Any], p: Tensor, l2: bool = True) -> Buffer:
        """The gradient the update uses: negated for ``maximize``, plus ``weight_decay * p`` (L2)
        unless ``l2`` is False (decoupled decay, applied by the caller)."""
        g = p.grad._float_buffer(f"{type(self).__name__}.step")
        if group.get("maximize", False):
            g = P.scale(g, -1.0)
        wd = group.get("weight_decay", 0)
        if l2 and wd != 0:
            g = P.axpy(g, p._buf, wd)
        return g

    @staticmethod
    def _next_step(st: dict[str, Any]) -> float:
        """Advance the stored step count by one (PyTorch's ``step_t += 1``) and return it."""
        step = step_value(st["step"]) + 1.0
        st["step"] = step_tensor(step)
        return step

    # -- load_state_dict: the schema depends on the (loaded) group of each parameter --------------
    def _stage_param_state(self, op: str, k: int, p: Tensor, st: dict[str, Any]) -> dict[str, Any]:
        return dict(st)  # checked in _stage_state_dict below, once the loaded groups are known

    def _stage_state_dict(self, state_dict: Any) -> tuple[list[dict[str, Any]], defaultdict]:
        groups, raw = super()._stage_state_dict(state_dict)
        op = f"{type(self).__name__}.load_state_dict"
        index, owner = {}, {}
        for g, saved in zip(groups, state_dict["param_groups"]):
            for p, k in zip(g["params"], saved["params"]):
                index[id(p)], owner[id(p)] = k, g
        state: defaultdict = defaultdict(dict)
        for p, st in raw.items():
            k, schema = index[id(p)], self._schema(owner[id(p)])
            if set(st) != set(schema):
                raise ArgumentError(f"{op}: state[{k}] has keys {sorted(map(str, st))}, {type(self).__name__} "
                                    f"keeps {sorted(schema)} for this parameter group's options")
            state[p] = {key: _state_value(f"{op}: state[{k}][{key!r}]", kind, p, st[key])
                        for key, kind in schema.items()}
        return groups, state


def _state_value(where: str, kind: str, p: Tensor, value: Any) -> Tensor:
    if isinstance(value, (bool, np.bool_)) or not (isinstance(value, numbers.Real) or _array_like(value)):
        raise ArgumentError(f"{where} must be a tensor, got {value!r} ({type(value).__name__})")
    arr = np.asarray(value, np.float64) if isinstance(value, numbers.Real) else as_host_array(where, value)
    if kind in ("step", "scalar"):
        if arr.size != 1:
            raise ShapeError(f"{where} must have one element, got shape {tuple(arr.shape)}")
        v = float(arr.reshape(-1)[0])
        if kind == "step" and not (math.isfinite(v) and v == int(v) and 0 <= v <= 2**24):
            raise ArgumentError(f"{where}: a step count must be a whole number in [0, 2**24], got {v!r}")
        if kind == "scalar" and not math.isfinite(v):
            raise ArgumentError(f"{where} must be finite, got {v!r}")
        return step_tensor(v) if kind == "step" else scalar_tensor(v)
    if arr.dtype.kind != "f":
        raise DTypeError(f"{where} has dtype {arr.dtype}, expected a floating tensor")
    if tuple(arr.shape) != p.shape:
        raise ShapeError(f"{where} has shape {tuple(arr.shape)}, its parameter has shape {p.shape}")
    return Tensor._wrap(Buffer.from_numpy(arr.astype(np.float32).reshape(-1), p.device), p.shape)


def _array_like(value: Any) -> bool:
    return isinstance(value, (Tensor, np.ndarray)) or (hasattr(value, "detach") and hasattr(value, "cpu"))

