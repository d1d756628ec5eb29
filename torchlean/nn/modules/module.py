"""``Module``: PyTorch's module habits over torchlean tensors.

Attributes that are ``Parameter``s, ``Module``s or registered buffers are recorded in ordered
dicts (registration order = ``named_parameters`` order = ``state_dict`` order, as in PyTorch), so
a PyTorch state dict of the same architecture loads by name. ``to(device)`` moves parameters in
place (the same Parameter objects, so an optimizer built before the move keeps working).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable, Iterator, NamedTuple

import numpy as np

from ... import autograd
from ...errors import ArgumentError, DTypeError, ShapeError, TorchLeanError
from ...runtime import arrays
from ...runtime.buffer import Buffer
from ...runtime.device import canonical_device
from ...tensor import Tensor
from ...interop import as_host_array
from ...complex_tensor import ComplexTensor
from ..parameter import ComplexParameter, Parameter
from .hooks import BackwardHookCall, RemovableHandle

__all__ = ["Module", "IncompatibleKeys", "RemovableHandle"]


class IncompatibleKeys(NamedTuple):
    missing_keys: list[str]
    unexpected_keys: list[str]


class Module:
    """Base class of every layer: subclass it, assign submodules and Parameters in ``__init__``."""

    training: bool

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if args or kwargs:
            raise ArgumentError(f"Module.__init__: unexpected arguments {args} {kwargs}")
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent", set())
        object.__setattr__(self, "_modules", OrderedDict())
        # hook id -> hook (forward hooks: (hook, with_kwargs, always_call)); empty in the common case,
        # so that __call__ is one test away from forward
        object.__setattr__(self, "_forward_pre_hooks", OrderedDict())
        object.__setattr__(self, "_forward_hooks", OrderedDict())
        object.__setattr__(self, "_backward_pre_hooks", OrderedDict())
        object.__setattr__(self, "_backward_hooks", OrderedDict())

    # -- attribute registration ----------------------------------------------------------
    def _check_init(self, what: str) -> None:
        if "_parameters" not in self.__dict__:
            raise TorchLeanError(f"{type(self).__name__}: assign {what} after calling super().__init__()")

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, (Parameter, ComplexParameter)):
            self._check_init("parameters")
            self._drop(name)
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._check_init("submodules")
            self._drop(name)
            self._modules[name] = value
        elif "_parameters" in self.__dict__ and name in self._parameters:
            if value is not None:
                raise DTypeError(f"{type(self).__name__}: cannot assign a {type(value).__name__} to parameter "
                                 f"{name!r} (expected a Parameter or None)")
            self._parameters[name] = None
        elif "_buffers" in self.__dict__ and name in self._buffers:
            if value is not None and not isinstance(value, Tensor):
                raise DTypeError(f"{type(self).__name__}: buffer {name!r} must be a tensor or None, "
                                 f"got {type(value).__name__}")
            self._buffers[name] = value
        elif "_modules" in self.__dict__ and name in self._modules:
            if value is not None:
                raise DTypeError(f"{type(self).__name__}: cannot assign a {type(value).__name__} to submodule "
                                 f"{name!r} (expected a Module or None)")
            self._modules[name] = None
        else:
            object.__setattr__(self, name, value)

    def _drop(self, name: str) -> None:
        for d in (self.__dict__, self._parameters, self._buffers, self._modules):
            d.pop(name, None)
        self._non_persistent.discard(name)

    def __getattr__(self, name: str) -> Any:  # only called when normal lookup fails
        # (every ``self.weight`` in a forward comes here: the three stores spelled out, no loop)
        d = self.__dict__
        store = d.get("_parameters")
        if store is not None and name in store:
            return store[name]
        store = d.get("_buffers")
        if store is not None and name in store:
            return store[name]
        store = d.get("_modules")
        if store is not None and name in store:
            return store[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name: str) -> None:
        for store in (self._parameters, self._buffers, self._modules):
            if name in store:
                del store[name]
                self._non_persistent.discard(name)
                return
        object.__delattr__(self, name)

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        if param is not None and not isinstance(param, (Parameter, ComplexParameter)):
            raise DTypeError(f"register_parameter: {name!r} must be a Parameter or None, got {type(param).__name__}")
        self._check_init("parameters")
        self._drop(name)
        self._parameters[name] = param

    def register_buffer(self, name: str, tensor_: Tensor | None, persistent: bool = True) -> None:
        if tensor_ is not None and not isinstance(tensor_, Tensor):
            raise DTypeError(f"register_buffer: {name!r} must be a tensor or None, got {type(tensor_).__name__}")
        self._check_init("buffers")
        self._drop(name)
        self._buffers[name] = tensor_
        if not persistent:
            self._non_persistent.add(name)

    def add_module(self, name: str, module: "Module | None") -> None:
        if module is not None and not isinstance(module, Module):
            raise DTypeError(f"add_module: {name!r} must be a Module or None, got {type(module).__name__}")
        self._check_init("submodules")
        self._drop(name)
        self._modules[name] = module

    register_module = add_module

    # -- traversal -----------------------------------------------------------------------
    def named_modules(self, memo: set | None = None, prefix: str = "",
                      remove_duplicate: bool = True) -> Iterator[tuple[str, "Module"]]:
        memo = set() if memo is None else memo
        if remove_duplicate:
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, m in self._modules.items():
            if m is not None:
                yield from m.named_modules(memo, f"{prefix}.{name}" if prefix else name, remove_duplicate)

    def modules(self) -> Iterator["Module"]:
        for _, m in self.named_modules():
            yield m

    def named_children(self) -> Iterator[tuple[str, "Module"]]:
        seen: set[int] = set()
        for name, m in self._modules.items():
            if m is not None and id(m) not in seen:
                seen.add(id(m))
                yield name, m

    def children(self) -> Iterator["Module"]:
        for _, m in self.named_children():
            yield m

    def _named_members(self, store: str, prefix: str, recurse: bool) -> Iterator[tuple[str, Tensor]]:
        seen: set[int] = set()
        mods = self.named_modules(prefix=prefix) if recurse else [(prefix, self)]
        for mprefix, m in mods:
            for name, v in getattr(m, store).items():
                if v is None or id(v) in seen:
                    continue
                seen.add(id(v))
                yield (f"{mprefix}.{name}" if mprefix else name), v

    def named_parameters(self, prefix: str = "", recurse: bool = True) -> Iterator[tuple[str, Parameter]]:
        return self._named_members("_parameters", prefix, recurse)

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix: str = "", recurse: bool = True) -> Iterator[tuple[str, Tensor]]:
        return self._named_members("_buffers", prefix, recurse)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def apply(self, fn: Callable[["Module"], None]) -> "Module":
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    def get_submodule(self, target: str) -> "Module":
        """The submodule at a dotted path ("" is the module itself), as PyTorch."""
        if target == "":
            return self
        mod: Module = self
        for item in target.split("."):
            sub = mod._modules.get(item) if isinstance(mod, Module) else None
            if sub is None:
                raise AttributeError(f"get_submodule: {type(mod).__name__} has no submodule {item!r} "
                                     f"(path {target!r})")
            mod = sub
        return mod

    def _get_member(self, op: str, store: str, target: str) -> Tensor:
        path, _, name = target.rpartition(".")
        mod = self.get_submodule(path)
        members = getattr(mod, store)
        if name not in members:
            raise AttributeError(f"{op}: {type(mod).__name__} has no {store[1:-1]} {name!r} (path {target!r})")
        return members[name]

    def get_parameter(self, target: str) -> Parameter:
        return self._get_member("get_parameter", "_parameters", target)

    def get_buffer(self, target: str) -> Tensor:
        return self._get_member("get_buffer", "_buffers", target)

    # -- modes, gradients, devices -------------------------------------------------------
    def train(self, mode: bool = True) -> "Module":
        if not isinstance(mode, bool):
            raise ArgumentError(f"train: mode must be a bool, got {type(mode).__name__}")
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self) -> "Module":
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> "Module":
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.parameters():
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                with autograd.no_grad():
                    p.grad.zero_()

    def to(self, *args: Any, device: Any = None, dtype: Any = None, non_blocking: bool = False,
           memory_format: Any = None) -> "Module":
        """Move every parameter and buffer to ``device`` in place (the same Parameter objects):
        ``to(device)``, ``to(dtype)``, ``to(device, dtype)``, ``to(tensor)``, ``to(memory_format=...)``
        as in PyTorch (float32 is the one floating dtype; a memory format changes nothing)."""
        from ...memory_format import check_memory_format

        check_memory_format("Module.to", memory_format)
        for a in args:
            if isinstance(a, Tensor):
                device, dtype = a.device, a.dtype
            elif isinstance(a, bool):
                continue
            elif _looks_like_dtype(a):
                dtype = a
            elif device is None:
                device = a
            else:
                raise ArgumentError(f"Module.to: expected a device, a dtype or a Tensor, got {a!r}")
        if dtype is not None:
            from ...tensor import canonical_dtype

            if canonical_dtype("Module.to", dtype) != np.float32:
                raise DTypeError(f"Module.to: parameters are float32 only, got dtype {dtype!r}")
        if device is None:
            return self
        dev = canonical_device(device, "Module.to")
        for m in self.modules():
            for store in (m._parameters, m._buffers):
                for t in store.values():
                    if t is not None and t.device != dev:  # (a complex one moves its real view)
                        _move(t.real_view() if isinstance(t, ComplexTensor) else t, dev)
        return self

    def cpu(self) -> "Module":
        return self.to("cpu")

    def cuda(self, device: int | None = None) -> "Module":
        return self.to("cuda" if device is None else f"cuda:{device}")

    def float(self) -> "Module":
        """A no-op: parameters are float32 already."""
        return self

    def _float32_only(self, what: str) -> None:
        raise DTypeError(f"Module.{what}(): torchlean computes in float32 and stores parameters in float32 only; "
                         f"keep the model in float32 (remove the .{what}() call)")

    def half(self) -> "Module":
        self._float32_only("half")

    def double(self) -> "Module":
        self._float32_only("double")

    def bfloat16(self) -> "Module":
        self._float32_only("bfloat16")

    def type(self, dst_type: Any) -> "Module":
        """``type(torchlean.float32)`` (or "torch.FloatTensor") is a no-op; any other type raises."""
        from ... import dtypes

        if dst_type in (dtypes.float32, "torch.FloatTensor", "torchlean.FloatTensor") or getattr(
                dst_type, "name", None) == "float32":
            return self
        raise DTypeError(f"Module.type: torchlean computes in float32 and stores parameters in float32 only, got "
                         f"{dst_type!r}; keep the model in float32 (remove the .type() call)")

    # -- state dict ----------------------------------------------------------------------
    def state_dict(self, destination: Any = None, prefix: str = "", keep_vars: bool = False) -> "OrderedDict[str, Tensor]":
        """Parameters and persistent buffers by dotted name (detached tensors sharing the buffers)."""
        out: OrderedDict[str, Tensor] = OrderedDict() if destination is None else destination
        # every path to a shared submodule gets its own keys, as in PyTorch (parameters() dedups)
        for mprefix, m in self.named_modules(prefix=prefix.rstrip("."), remove_duplicate=False):
            dot = f"{mprefix}." if mprefix else ""
            for name, p in m._parameters.items():
                if p is not None:
                    out[dot + name] = p if keep_vars else p.detach()
            for name, b in m._buffers.items():
                if b is not None and name not in m._non_persistent:
                    out[dot + name] = b if keep_vars else b.detach()
        return out

    def load_state_dict(self, state_dict: Any, strict: bool = True) -> IncompatibleKeys:
        """Copy values in by name (torchlean tensors, NumPy arrays or PyTorch tensors).

        Shapes must match exactly (ShapeError naming the key); with ``strict`` a missing or an
        unexpected key raises ArgumentError listing them all. All or nothing: every entry is
        checked and copied to its device first, and only then are the tensors rebound to the new
        values, a step that cannot fail halfway.
        """
        own = self.state_dict(keep_vars=True)
        given = dict(state_dict)
        missing = [k for k in own if k not in given]
        unexpected = [k for k in given if k not in own]
        if strict and (missing or unexpected):
            raise ArgumentError(f"load_state_dict ({type(self).__name__}): missing keys {missing}, "
                                f"unexpected keys {unexpected}")
        staged = []
        for k, t in own.items():
            if k not in given:
                continue
            if isinstance(t, ComplexTensor) or isinstance(given[k], ComplexTensor):
                arr = _complex_entry(type(self).__name__, k, t, given[k])
                t = t.real_view()
            else:
                arr = as_host_array(f"load_state_dict: entry {k!r}", given[k])
            if tuple(arr.shape) != t.shape:
                raise ShapeError(f"load_state_dict ({type(self).__name__}): {k!r} has shape {tuple(arr.shape)} in "
                                 f"the state dict, the module expects {t.shape}")
            if t._buf is None:  # an integer or bool tensor: an array of its dtype on its device
                host = arr.astype(t._arr.dtype, copy=True)
                staged.append((t, None, host if t._device == "cpu" else arrays.from_host(host, t._device)))
            else:  # (the copy to the device may run out of memory: it happens before any change)
                staged.append((t, Buffer.from_numpy(arr.astype(np.float32).reshape(-1), t.device), None))
        for t, buf, arr in staged:  # a float tensor's update rebinds it to a new buffer, as copy_ does
            if buf is None:
                t._arr = arr
            else:
                t._rebind(buf)
        return IncompatibleKeys(missing, unexpected)

    # -- calling and printing ------------------------------------------------------------
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.forward is not defined")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        d = self.__dict__
        if not (d.get("_forward_pre_hooks") or d.get("_forward_hooks") or d.get("_backward_hooks")
                or d.get("_backward_pre_hooks")):
            return self.forward(*args, **kwargs)
        return self._call_with_hooks(args, kwargs)

    def _call_with_hooks(self, args: tuple, kwargs: dict) -> Any:
        """PyTorch's order: forward pre-hooks, forward, forward hooks; backward hooks on the tape."""
        for hook, with_kwargs in list(self._forward_pre_hooks.values()):
            if with_kwargs:
                res = hook(self, args, kwargs)
                if res is not None:
                    if not (isinstance(res, tuple) and len(res) == 2):
                        raise ArgumentError(f"forward pre-hook of {type(self).__name__}: with_kwargs=True hooks must "
                                            f"return None or a tuple (args, kwargs), got {type(res).__name__}")
                    args, kwargs = res
            else:
                res = hook(self, args)
                if res is not None:
                    args = res if isinstance(res, tuple) else (res,)
        bw = None
        if (self._backward_hooks or self._backward_pre_hooks) and autograd.is_grad_enabled():
            bw = BackwardHookCall(self, list(self._backward_pre_hooks.values()), list(self._backward_hooks.values()))
            args = bw.wrap_inputs(args)
        try:
            result = self.forward(*args, **kwargs)
        except Exception:
            for hook, with_kwargs, always in list(self._forward_hooks.values()):
                if always:
                    try:
                        hook(self, args, kwargs, None) if with_kwargs else hook(self, args, None)
                    except Exception:  # noqa: BLE001 - the forward's own error is the one to report
                        pass
            raise
        for hook, with_kwargs, _ in list(self._forward_hooks.values()):
            res = hook(self, args, kwargs, result) if with_kwargs else hook(self, args, result)
            if res is not None:
                result = res
        if bw is not None:
            result = bw.wrap_outputs(result)
        return result

    # -- hooks ---------------------------------------------------------------------------
    def _add_hook(self, store: str, entry: Any, prepend: bool) -> RemovableHandle:
        hooks = self.__dict__[store]
        handle = RemovableHandle(hooks)
        hooks[handle.id] = entry
        if prepend:
            hooks.move_to_end(handle.id, last=False)
        return handle

    def register_forward_pre_hook(self, hook: Callable, *, prepend: bool = False,
                                  with_kwargs: bool = False) -> RemovableHandle:
        """``hook(module, args)`` (or ``hook(module, args, kwargs)``) before forward; a result replaces
        the arguments."""
        return self._add_hook("_forward_pre_hooks", (hook, bool(with_kwargs)), prepend)

    def register_forward_hook(self, hook: Callable, *, prepend: bool = False, with_kwargs: bool = False,
                              always_call: bool = False) -> RemovableHandle:
        """``hook(module, args, output)`` (or ``hook(module, args, kwargs, output)``) after forward; a
        result replaces the output. ``always_call``: also run (with output None) when forward raises."""
        return self._add_hook("_forward_hooks", (hook, bool(with_kwargs), bool(always_call)), prepend)

    def register_full_backward_hook(self, hook: Callable, prepend: bool = False) -> RemovableHandle:
        """``hook(module, grad_input, grad_output)`` during backward (see hooks.py); a returned tuple
        replaces grad_input."""
        return self._add_hook("_backward_hooks", hook, prepend)

    def register_full_backward_pre_hook(self, hook: Callable, prepend: bool = False) -> RemovableHandle:
        """``hook(module, grad_output)`` during backward, before the module's gradients are computed; a
        returned tuple replaces grad_output."""
        return self._add_hook("_backward_pre_hooks", hook, prepend)

    def register_backward_hook(self, hook: Callable) -> RemovableHandle:
        raise ArgumentError("register_backward_hook: the legacy (non-full) backward hook is not supported; use "
                            "register_full_backward_hook")

    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        """PyTorch's layout: ``Name(extra)`` for a leaf, else one indented line per extra line and child."""
        extra = self.extra_repr()
        lines = extra.split("\n") if extra else []
        n_extra = len(lines)
        for name, m in self._modules.items():
            sub = repr(m).replace("\n", "\n  ")
            lines.append(f"({name}): {sub}")
        if not lines:
            return f"{type(self).__name__}()"
        if n_extra == 1 and len(lines) == 1:
            return f"{type(self).__name__}({lines[0]})"
        return f"{type(self).__name__}(\n  " + "\n  ".join(lines) + "\n)"

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self._parameters) | set(self._buffers) | set(self._modules))


def _move(t: Tensor, dev: str) -> None:
    """Rebind t (and its grad) to a copy on ``dev``, keeping the Tensor object."""
    if t._buf is not None:
        t._rebind(Buffer.from_numpy(t._buf.to_numpy(), dev))
    else:  # an integer or bool buffer (num_batches_tracked): its array moves to dev's array module
        t._arr = arrays.move(t._arr, dev)
    t._device = dev
    if t.grad is not None:
        g = t.grad
        t.grad = Tensor._wrap(Buffer.from_numpy(g._buf.to_numpy(), dev), g.shape)


def _complex_entry(owner: str, k: str, t: Any, value: Any) -> np.ndarray:
    """A complex entry's new value as the real view's array (*shape, 2); a real value fills the real
    parts (PyTorch's copy_); a complex value for a real tensor raises (it would drop the imaginary parts)."""
    if not isinstance(t, ComplexTensor):
        raise DTypeError(f"load_state_dict ({owner}): {k!r} is complex64 in the state dict, the module's tensor "
                         f"is {t.dtype!r}")
    if isinstance(value, ComplexTensor):
        arr = value.numpy()
    else:
        if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch.Tensor
            value = value.detach().cpu().numpy()
        arr = np.asarray(value)
        if arr.dtype.kind not in "biufc":
            raise DTypeError(f"load_state_dict ({owner}): {k!r} has dtype {arr.dtype}, expected complex numbers")
    if tuple(arr.shape) != tuple(t.shape):
        raise ShapeError(f"load_state_dict ({owner}): {k!r} has shape {tuple(arr.shape)} in the state dict, the "
                         f"module expects {tuple(t.shape)}")
    c = np.ascontiguousarray(arr, dtype=np.complex64)
    return c.view(np.float32).reshape(*c.shape, 2)


def _looks_like_dtype(a: Any) -> bool:
    """A torchlean/NumPy dtype or a dtype name (as opposed to a device)."""
    from ... import dtypes

    if isinstance(a, str):
        return not a.startswith(("cpu", "cuda"))
    return isinstance(a, (dtypes.dtype, np.dtype)) or (isinstance(a, type) and issubclass(a, np.generic))
