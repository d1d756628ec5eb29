"""Module hooks: handles, and the full backward hook wired through the tape.

A full backward hook puts one identity node on each tensor output (it sees d loss / d output)
and one on each input that requires grad (it sees d loss / d input). The hook runs when the
last input node runs, with PyTorch's arguments ``hook(module, grad_input, grad_output)``; a
returned tuple replaces the gradients of that call's inputs. With several inputs, the earlier
ones have been passed on by then, so only the last one's replacement takes effect (PyTorch
joins them in one node; our tape nodes have one output). With no input requiring grad the hook
runs once every output's gradient is in, with ``grad_input`` all None (as PyTorch does).
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from typing import Any, Callable

from ... import autograd
from ...errors import ArgumentError
from ...tensor import Tensor

__all__ = ["RemovableHandle", "BackwardHookCall"]

_ids = itertools.count()


class RemovableHandle:
    """Returned by every ``register_*hook``: ``remove()`` (or leaving a ``with`` block) unregisters."""

    def __init__(self, *stores: "OrderedDict[int, Any]") -> None:
        self.id = next(_ids)
        self._stores = stores

    def remove(self) -> None:
        for store in self._stores:
            store.pop(self.id, None)

    def __enter__(self) -> "RemovableHandle":
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def _identity(name: str, t: Tensor, vjp: Callable) -> Tensor:
    out = Tensor._wrap(t._buf, t.shape)
    return autograd.record(name, out, (t,), vjp)


def _as_tensor_grads(op: str, result: Any, count: int) -> tuple:
    if not isinstance(result, (tuple, list)) or len(result) != count:
        raise ArgumentError(f"{op}: a backward hook must return None or a tuple of {count} gradients, got {result!r}")
    return tuple(result)


class BackwardHookCall:
    """The state of one call of a module that has full backward (pre) hooks."""

    def __init__(self, module: Any, pre_hooks: list, hooks: list) -> None:
        self.module, self.pre_hooks, self.hooks = module, pre_hooks, hooks
        self.n_inputs = 0
        self.grad_inputs: list = []
        self.input_slots: list[int] = []
        self.arrived_in = 0
        self.grad_outputs: list = []
        self.out_shapes: list = []
        self.arrived_out = 0
        self.waiting_out = 0
        self.fired = False

    # -- inputs ------------------------------------------------------------------------------
    def wrap_inputs(self, args: tuple) -> tuple:
        out = list(args)
        tensor_pos = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        self.n_inputs = len(tensor_pos)
        self.grad_inputs = [None] * self.n_inputs
        for slot, i in enumerate(tensor_pos):
            a = args[i]
            if a.requires_grad and a._buf is not None:
                self.input_slots.append(slot)
                out[i] = _identity("BackwardHookFunction", a, self._input_vjp(slot, a.shape))
        return tuple(out)

    def _input_vjp(self, slot: int, shape: tuple) -> Callable:
        def vjp(g: Any):
            self.grad_inputs[slot] = Tensor._wrap(g, shape)
            self.arrived_in += 1
            if self.arrived_in == len(self.input_slots):
                self._fire()
            new = self.grad_inputs[slot]
            return (None if new is None else new._float_buffer("backward hook"),)

        return vjp

    # -- outputs -----------------------------------------------------------------------------
    def wrap_outputs(self, result: Any) -> Any:
        single = isinstance(result, Tensor)
        items = [result] if single else list(result) if isinstance(result, (tuple, list)) else None
        if items is None:
            return result
        self.grad_outputs = [None] * len(items)
        wrapped, waiting = [], 0
        for k, r in enumerate(items):
            if isinstance(r, Tensor) and r.requires_grad and r._buf is not None:
                waiting += 1
                wrapped.append(_identity("BackwardHookFunctionBackward", r, self._output_vjp(k, r.shape)))
            else:
                wrapped.append(r)
        self.waiting_out = waiting
        if single:
            return wrapped[0]
        return tuple(wrapped) if isinstance(result, tuple) else wrapped

    def _output_vjp(self, k: int, shape: tuple) -> Callable:
        def vjp(g: Any):
            self.grad_outputs[k] = Tensor._wrap(g, shape)
            self.arrived_out += 1
            if self.arrived_out == self.waiting_out:
                for hook in self.pre_hooks:
                    res = hook(self.module, tuple(self.grad_outputs))
                    if res is not None:
                        self.grad_outputs = list(_as_tensor_grads("register_full_backward_pre_hook", res,
                                                                  len(self.grad_outputs)))
                if not self.input_slots:
                    self._fire()
            new = self.grad_outputs[k]
            return (None if new is None else new._float_buffer("backward hook"),)

        return vjp

    def _fire(self) -> None:
        if self.fired:
            return
        self.fired = True
        for hook in self.hooks:
            res = hook(self.module, tuple(self.grad_inputs), tuple(self.grad_outputs))
            if res is not None:
                self.grad_inputs = list(_as_tensor_grads("register_full_backward_hook", res, self.n_inputs))
