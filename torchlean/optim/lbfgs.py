"""``LBFGS``: PyTorch's limited-memory BFGS (closure, history, tolerances, strong Wolfe line search).

A line-for-line port of ``torch.optim.LBFGS``: vectors are flat float32 Buffers on the
parameters' device, and the scalars PyTorch keeps as 0-d float32 tensors (dot products, ``ro``,
``H_diag``, the first step size) are NumPy float32 scalars here. NumPy's rules for a float32
scalar met with a Python float (the Python float adapts, NEP 50) are PyTorch's for a 0-d tensor,
so every branch decision (``ys > 1e-10``, the Wolfe conditions) sees the same float32 values.
In the state and its ``state_dict()`` those scalars are 0-d CPU tensors, as in PyTorch, so a torch
LBFGS state dict loads and ours has PyTorch's layout.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Callable

import numpy as np

from .. import autograd
from ..errors import ArgumentError, DTypeError, ShapeError
from ..interop import as_host_array
from ..runtime import primitives as P
from ..runtime.buffer import Buffer, zeros
from ..tensor import Tensor
from ._common import rebind, scalar_tensor
from .optimizer import Optimizer, check_real

__all__ = ["LBFGS"]

_f32 = np.float32


def _dot(a: Buffer, b: Buffer) -> np.float32:
    return _f32(P.reduce_sum(P.mul(a, b)).to_numpy()[0])


def _abs_max(a: Buffer) -> np.float32:
    return _f32(P.reduce_max_axis1(P.abs(a), 1, a.size).to_numpy()[0]) if a.size else _f32(0.0)


def _abs_sum(a: Buffer) -> np.float32:
    return _f32(P.reduce_sum(P.abs(a)).to_numpy()[0])


def _cubic_interpolate(x1, f1, g1, x2, f2, g2, bounds=None):
    if bounds is not None:
        xmin_bound, xmax_bound = bounds
    else:
        xmin_bound, xmax_bound = (x1, x2) if x1 <= x2 else (x2, x1)
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    d2_square = d1 ** 2 - g1 * g2
    if d2_square >= 0:
        d2 = np.sqrt(d2_square)
        if x1 <= x2:
            min_pos = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
        else:
            min_pos = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
        return min(max(min_pos, xmin_bound), xmax_bound)
    return (xmin_bound + xmax_bound) / 2.0


def _strong_wolfe(obj_func, x, t, d, f, g, gtd, c1=1e-4, c2=0.9, tolerance_change=1e-9, max_ls=25):
    """PyTorch's ``_strong_wolfe`` (Buffers for g, d; float32 scalars for the directional slopes)."""
    d_norm = _abs_max(d)
    f_new, g_new = obj_func(x, t, d)
    ls_func_evals = 1
    gtd_new = _dot(g_new, d)
    t_prev, f_prev, g_prev, gtd_prev = 0, f, g, gtd
    done = False
    ls_iter = 0
    while ls_iter < max_ls:
        if f_new > (f + c1 * t * gtd) or (ls_iter > 1 and f_new >= f_prev):
            bracket, bracket_f, bracket_g, bracket_gtd = [t_prev, t], [f_prev, f_new], [g_prev, g_new], \
                [gtd_prev, gtd_new]
            break
        if abs(gtd_new) <= -c2 * gtd:
            bracket, bracket_f, bracket_g = [t], [f_new], [g_new]
            done = True
            break
        if gtd_new >= 0:
            bracket, bracket_f, bracket_g, bracket_gtd = [t_prev, t], [f_prev, f_new], [g_prev, g_new], \
                [gtd_prev, gtd_new]
            break
        min_step = t + 0.01 * (t - t_prev)
        max_step = t * 10
        tmp = t
        t = _cubic_interpolate(t_prev, f_prev, gtd_prev, t, f_new, gtd_new, bounds=(min_step, max_step))
        t_prev, f_prev, g_prev, gtd_prev = tmp, f_new, g_new, gtd_new
        f_new, g_new = obj_func(x, t, d)
        ls_func_evals += 1
        gtd_new = _dot(g_new, d)
        ls_iter += 1
    if ls_iter == max_ls:
        bracket, bracket_f, bracket_g = [0, t], [f, f_new], [g, g_new]
    insuf_progress = False
    low_pos, high_pos = (0, 1) if bracket_f[0] <= bracket_f[-1] else (1, 0)
    while not done and ls_iter < max_ls:
        if abs(bracket[1] - bracket[0]) * d_norm < tolerance_change:
            break
        t = _cubic_interpolate(bracket[0], bracket_f[0], bracket_gtd[0], bracket[1], bracket_f[1], bracket_gtd[1])
        eps = 0.1 * (max(bracket) - min(bracket))
        if min(max(bracket) - t, t - min(bracket)) < eps:
            if insuf_progress or t >= max(bracket) or t <= min(bracket):
                if abs(t - max(bracket)) < abs(t - min(bracket)):
                    t = max(bracket) - eps
                else:
                    t = min(bracket) + eps
                insuf_progress = False
            else:
                insuf_progress = True
        else:
            insuf_progress = False
        f_new, g_new = obj_func(x, t, d)
        ls_func_evals += 1
        gtd_new = _dot(g_new, d)
        ls_iter += 1
        if f_new > (f + c1 * t * gtd) or f_new >= bracket_f[low_pos]:
            bracket[high_pos], bracket_f[high_pos] = t, f_new
            bracket_g[high_pos], bracket_gtd[high_pos] = g_new, gtd_new
            low_pos, high_pos = (0, 1) if bracket_f[0] <= bracket_f[1] else (1, 0)
        else:
            if abs(gtd_new) <= -c2 * gtd:
                done = True
            elif gtd_new * (bracket[high_pos] - bracket[low_pos]) >= 0:
                bracket[high_pos], bracket_f[high_pos] = bracket[low_pos], bracket_f[low_pos]
                bracket_g[high_pos], bracket_gtd[high_pos] = bracket_g[low_pos], bracket_gtd[low_pos]
            bracket[low_pos], bracket_f[low_pos] = t, f_new
            bracket_g[low_pos], bracket_gtd[low_pos] = g_new, gtd_new
    return bracket_f[low_pos], bracket_g[low_pos], bracket[low_pos], ls_func_evals


# -- the state: PyTorch's layout (vectors as 1-D tensors, float32 scalars as 0-d CPU tensors) ------
def _vec(buf: Buffer) -> Tensor:
    return Tensor._wrap(buf, (buf.size,))


def _stored_scalar(v: Any) -> Any:
    return scalar_tensor(float(v)) if isinstance(v, np.float32) else v


def _loaded_scalar(v: Any) -> Any:
    if isinstance(v, Tensor):
        return _f32(v.item())
    return v


_KEYS = ("func_evals", "n_iter", "d", "t", "old_dirs", "old_stps", "ro", "H_diag", "prev_flat_grad", "prev_loss")


class LBFGS(Optimizer):
    """``LBFGS(params, lr=1, max_iter=20, max_eval=None, tolerance_grad=1e-7, tolerance_change=1e-9,
    history_size=100, line_search_fn=None)``; ``line_search_fn`` None or "strong_wolfe". One
    parameter group only (as PyTorch); ``step(closure)`` requires the closure."""

    def __init__(self, params: Any, lr: float = 1, max_iter: int = 20, max_eval: int | None = None,
                 tolerance_grad: float = 1e-7, tolerance_change: float = 1e-9, history_size: int = 100,
                 line_search_fn: str | None = None) -> None:
        if max_eval is None and _count(max_iter):
            max_eval = max_iter * 5 // 4
        defaults = dict(lr=lr, max_iter=max_iter, max_eval=max_eval, tolerance_grad=tolerance_grad,
                        tolerance_change=tolerance_change, history_size=history_size, line_search_fn=line_search_fn)
        self._check_group(defaults)
        super().__init__(params, defaults)
        if len(self.param_groups) != 1:
            raise ArgumentError("LBFGS doesn't support per-parameter options (parameter groups)")
        self._params = self.param_groups[0]["params"]
        self._numel = sum(p.numel() for p in self._params)

    def _check_group(self, group: dict[str, Any]) -> None:
        if check_real("LBFGS", "lr", group["lr"]) < 0.0:
            raise ArgumentError(f"LBFGS: Invalid learning rate: {group['lr']}")
        for key in ("max_iter", "max_eval", "history_size"):
            if not _count(group[key]):
                raise ArgumentError(f"LBFGS: {key} must be a positive integer, got {group[key]!r}")
        check_real("LBFGS", "tolerance_grad", group["tolerance_grad"])
        check_real("LBFGS", "tolerance_change", group["tolerance_change"])
        if group["line_search_fn"] not in (None, "strong_wolfe"):
            raise ArgumentError(f"LBFGS: line_search_fn must be None or 'strong_wolfe', got "
                                f"{group['line_search_fn']!r} (only 'strong_wolfe' is supported)")

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        if self.param_groups:
            raise ArgumentError("LBFGS.add_param_group: LBFGS doesn't support per-parameter options "
                                "(parameter groups)")
        super().add_param_group(param_group)

    def _group_value(self, op: str, i: int, key: str, value: Any) -> Any:
        if key == "line_search_fn":  # a string or None (the base class checks numbers and flags)
            if value not in (None, "strong_wolfe"):
                raise ArgumentError(f"{op}: param_groups[{i}]['line_search_fn'] must be None or 'strong_wolfe', "
                                    f"got {value!r}")
            return value
        if key in ("max_iter", "max_eval", "history_size") and not _count(value):
            raise ArgumentError(f"{op}: param_groups[{i}][{key!r}] must be a positive integer, got {value!r}")
        return super()._group_value(op, i, key, value)

    # -- flat vectors ------------------------------------------------------------------------------
    def _gather_flat_grad(self) -> Buffer:
        flat = None
        for p in self._params:
            g = p.grad._float_buffer("LBFGS.step") if p.grad is not None else zeros(p.numel(), p._buf.device)
            flat = g if flat is None else P.concat1d(flat, g, flat.size, g.size)
        return flat if len(self._params) > 1 else P.copy(flat)

    def _add_grad(self, step_size: Any, update: Buffer) -> None:
        offset = 0
        for p in self._params:
            n = p.numel()
            piece = update if len(self._params) == 1 else P.slice1d(update, update.size, offset, n)
            rebind(p, P.axpy(p._buf, piece, float(step_size)))
            offset += n

    def _directional_evaluate(self, closure: Callable[[], Any], x: list[Buffer], t: Any,
                              d: Buffer) -> tuple[float, Buffer]:
        self._add_grad(t, d)
        with autograd.enable_grad():
            loss = float(closure())
        flat_grad = self._gather_flat_grad()
        for p, b in zip(self._params, x):  # buffers are values: the saved ones are the old parameters
            rebind(p, b)
        return loss, flat_grad

    # -- the step ----------------------------------------------------------------------------------
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Up to ``max_iter`` L-BFGS iterations; returns the closure's first loss."""
        if closure is None or not callable(closure):
            raise ArgumentError("LBFGS.step: a closure that reevaluates the model and returns the loss is "
                                f"required, got {type(closure).__name__}")
        with autograd.no_grad(), np.errstate(all="ignore"):
            return self._step(closure)

    def _step(self, closure: Callable[[], Any]) -> Any:  # noqa: C901 (PyTorch's algorithm, kept whole to compare)
        group = self.param_groups[0]
        lr, max_iter, max_eval = group["lr"], group["max_iter"], group["max_eval"]
        tolerance_grad, tolerance_change = group["tolerance_grad"], group["tolerance_change"]
        line_search_fn, history_size = group["line_search_fn"], group["history_size"]
        state = self.state[self._params[0]]
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)

        with autograd.enable_grad():
            orig_loss = closure()
        loss = float(orig_loss)
        current_evals = 1
        state["func_evals"] += 1
        flat_grad = self._gather_flat_grad()
        if _abs_max(flat_grad) <= tolerance_grad:
            return orig_loss

        d = state["d"]._buf if "d" in state else None
        t = _loaded_scalar(state.get("t"))
        old_dirs = [v._buf for v in state.get("old_dirs", [])]
        old_stps = [v._buf for v in state.get("old_stps", [])]
        ro = [_loaded_scalar(v) for v in state.get("ro", [])]
        H_diag = _loaded_scalar(state.get("H_diag"))
        prev_flat_grad = state["prev_flat_grad"]._buf if state.get("prev_flat_grad") is not None else None
        prev_loss = state.get("prev_loss")
        al = [_loaded_scalar(v) for v in state["al"]] if "al" in state else None

        n_iter = 0
        while n_iter < max_iter:
            n_iter += 1
            state["n_iter"] += 1
            if state["n_iter"] == 1:
                d = P.scale(flat_grad, -1.0)
                old_dirs, old_stps, ro = [], [], []
                H_diag = 1
            else:
                y = P.sub(flat_grad, prev_flat_grad)
                s = P.scale(d, t)
                ys = _dot(y, s)
                if ys > 1e-10:
                    if len(old_dirs) == history_size:
                        old_dirs.pop(0)
                        old_stps.pop(0)
                        ro.pop(0)
                    old_dirs.append(y)
                    old_stps.append(s)
                    ro.append(1.0 / ys)
                    H_diag = ys / _dot(y, y)
                num_old = len(old_dirs)
                if al is None:
                    al = [None] * history_size
                q = P.scale(flat_grad, -1.0)
                for i in range(num_old - 1, -1, -1):
                    al[i] = _dot(old_stps[i], q) * ro[i]
                    q = P.axpy(q, old_dirs[i], float(-al[i]))
                r = P.scale(q, H_diag)
                for i in range(num_old):
                    be_i = _dot(old_dirs[i], r) * ro[i]
                    r = P.axpy(r, old_stps[i], float(al[i] - be_i))
                d = r
            prev_flat_grad = flat_grad  # (a value: never written in place)
            prev_loss = loss
            if state["n_iter"] == 1:
                t = min(1.0, 1.0 / _abs_sum(flat_grad)) * lr
            else:
                t = lr
            gtd = _dot(flat_grad, d)
            if gtd > -tolerance_change:
                break

            ls_func_evals = 0
            if line_search_fn is not None:
                x_init = [p._buf for p in self._params]

                def obj_func(x, t, d):
                    return self._directional_evaluate(closure, x, t, d)

                loss, flat_grad, t, ls_func_evals = _strong_wolfe(obj_func, x_init, t, d, loss, flat_grad, gtd,
                                                                  max_ls=max_eval - current_evals)
                self._add_grad(t, d)
                opt_cond = _abs_max(flat_grad) <= tolerance_grad
            else:
                self._add_grad(t, d)
                if n_iter != max_iter:
                    with autograd.enable_grad():
                        loss = float(closure())
                    flat_grad = self._gather_flat_grad()
                    opt_cond = _abs_max(flat_grad) <= tolerance_grad
                    ls_func_evals = 1
            current_evals += ls_func_evals
            state["func_evals"] += ls_func_evals
            if n_iter == max_iter:
                break
            if current_evals >= max_eval:
                break
            if opt_cond:
                break
            if _abs_max(P.scale(d, t)) <= tolerance_change:
                break
            if abs(loss - prev_loss) < tolerance_change:
                break

        state["d"] = _vec(d)
        state["t"] = _stored_scalar(t)
        state["old_dirs"] = [_vec(b) for b in old_dirs]
        state["old_stps"] = [_vec(b) for b in old_stps]
        state["ro"] = [_stored_scalar(v) for v in ro]
        state["H_diag"] = _stored_scalar(H_diag)
        state["prev_flat_grad"] = _vec(prev_flat_grad)
        state["prev_loss"] = prev_loss
        if al is not None:
            state["al"] = [_stored_scalar(v) for v in al]
        return orig_loss

    # -- state dicts -------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """PyTorch's layout; a snapshot (lists copied, tensors rewrapped over their value buffers)."""
        sd = super().state_dict()
        sd["state"] = {k: {key: _snapshot(v) for key, v in st.items()} for k, st in sd["state"].items()}
        return sd

    def _stage_param_state(self, op: str, k: int, p: Tensor, st: dict[str, Any]) -> dict[str, Any]:
        """Check one loaded state entry (ours or a torch LBFGS's): the counters alone (a step that
        stopped at once), or every key of a finished step (``al`` once a second iteration ran)."""
        where = f"{op}: state[{k}]"
        if p is not self._params[0]:
            raise ArgumentError(f"{where}: LBFGS keeps its state under its first parameter only")
        keys = set(st)
        if keys != {"func_evals", "n_iter"} and keys != set(_KEYS) and keys != set(_KEYS) | {"al"}:
            raise ArgumentError(f"{where} has keys {sorted(map(str, keys))}; LBFGS keeps {sorted(_KEYS)} "
                                f"(and 'al'), or only func_evals and n_iter")
        out: dict[str, Any] = {}
        for key in ("func_evals", "n_iter"):
            v = st[key]
            if not (isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_)) and v >= 0):
                raise ArgumentError(f"{where}[{key!r}] must be an integer >= 0, got {v!r}")
            out[key] = int(v)
        if len(keys) == 2:
            return out
        hist = self.param_groups[0]["history_size"]
        out["d"] = self._flat(f"{where}['d']", st["d"])
        out["prev_flat_grad"] = self._flat(f"{where}['prev_flat_grad']", st["prev_flat_grad"])
        out["t"] = _scalar(f"{where}['t']", st["t"])
        out["H_diag"] = _scalar(f"{where}['H_diag']", st["H_diag"])
        out["prev_loss"] = float(_scalar(f"{where}['prev_loss']", st["prev_loss"]))
        lists = {key: st[key] for key in ("old_dirs", "old_stps", "ro")}
        for key, v in lists.items():
            if not isinstance(v, (list, tuple)) or len(v) > hist:
                raise ArgumentError(f"{where}[{key!r}] must be a list of at most history_size={hist} entries, "
                                    f"got {type(v).__name__}")
        if not len(lists["old_dirs"]) == len(lists["old_stps"]) == len(lists["ro"]):
            raise ArgumentError(f"{where}: old_dirs, old_stps and ro must have one entry per stored pair, got "
                                f"{len(lists['old_dirs'])}, {len(lists['old_stps'])} and {len(lists['ro'])}")
        out["old_dirs"] = [self._flat(f"{where}['old_dirs'][{i}]", v) for i, v in enumerate(lists["old_dirs"])]
        out["old_stps"] = [self._flat(f"{where}['old_stps'][{i}]", v) for i, v in enumerate(lists["old_stps"])]
        out["ro"] = [_scalar(f"{where}['ro'][{i}]", v) for i, v in enumerate(lists["ro"])]
        if "al" in st:
            al = st["al"]
            if not isinstance(al, (list, tuple)) or len(al) != hist:
                raise ArgumentError(f"{where}['al'] must be a list of history_size={hist} entries, got {al!r}")
            out["al"] = [None if v is None else _scalar(f"{where}['al'][{i}]", v) for i, v in enumerate(al)]
        return out

    def _flat(self, where: str, value: Any) -> Tensor:
        if not (isinstance(value, (Tensor, np.ndarray)) or (hasattr(value, "detach") and hasattr(value, "cpu"))):
            raise ArgumentError(f"{where} must be a tensor, got {type(value).__name__}")
        arr = as_host_array(where, value)
        if arr.dtype.kind != "f":
            raise DTypeError(f"{where} has dtype {arr.dtype}, expected a floating tensor")
        if tuple(arr.shape) != (self._numel,):
            raise ShapeError(f"{where} has shape {tuple(arr.shape)}, expected ({self._numel},) (every "
                             f"parameter's elements, flattened)")
        return _vec(Buffer.from_numpy(arr.astype(np.float32), self._params[0].device))


def _count(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_)) and v > 0


def _scalar(where: str, value: Any) -> Any:
    """A loaded scalar: a Python number stays one; a one-element tensor becomes a 0-d CPU tensor."""
    if isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)):
        if not math.isfinite(value):
            raise ArgumentError(f"{where} must be finite, got {value!r}")
        return value
    if not (isinstance(value, (Tensor, np.ndarray)) or (hasattr(value, "detach") and hasattr(value, "cpu"))):
        raise ArgumentError(f"{where} must be a number or a one-element tensor, got {type(value).__name__}")
    arr = as_host_array(where, value)
    if arr.size != 1 or arr.dtype.kind != "f":
        raise ArgumentError(f"{where} must be a one-element floating tensor, got shape {tuple(arr.shape)} "
                            f"dtype {arr.dtype}")
    return scalar_tensor(float(arr.reshape(-1)[0]))


def _snapshot(v: Any) -> Any:
    if isinstance(v, list):
        return [_snapshot(x) for x in v]
    if isinstance(v, Tensor) and v._buf is not None:
        return Tensor._wrap(v._buf, v.shape)
    return v
