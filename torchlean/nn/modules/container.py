"""Containers: ``Sequential``, ``ModuleList``, ``ModuleDict``, ``ParameterList``, ``ParameterDict``
(PyTorch's indexing, naming and renumbering)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Iterable, Iterator

from ...errors import ArgumentError, DTypeError, IndexOutOfRangeError
from ...tensor import Tensor
from ..parameter import Parameter
from .module import Module

__all__ = ["Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict"]


def _index(op: str, idx: int, n: int) -> int:
    if hasattr(idx, "__index__") and not isinstance(idx, (bool, int)):
        idx = idx.__index__()
    if not isinstance(idx, int):
        raise DTypeError(f"{op}: index must be an int or a slice, got {type(idx).__name__}")
    if not -n <= idx < n:
        raise IndexOutOfRangeError(f"{op}: index {idx} is out of range for {n} modules")
    return idx % n


class Sequential(Module):
    """Modules called in order; ``Sequential(OrderedDict(...))`` names them."""

    def __init__(self, *args: Any) -> None:
        super().__init__()
        if len(args) == 1 and isinstance(args[0], (OrderedDict, dict)):
            for name, m in args[0].items():
                self.add_module(name, m)
        else:
            for i, m in enumerate(args):
                if not isinstance(m, Module):
                    raise DTypeError(f"Sequential: argument {i} must be a Module, got {type(m).__name__}")
                self.add_module(str(i), m)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def __getitem__(self, idx: Any) -> Any:
        items = list(self._modules.items())
        if isinstance(idx, slice):
            return Sequential(OrderedDict(items[idx]))
        return items[_index("Sequential", idx, len(items))][1]

    def __setitem__(self, idx: int, module: Module) -> None:
        key = list(self._modules)[_index("Sequential", idx, len(self))]
        self.add_module(key, module)

    def __delitem__(self, idx: Any) -> None:
        keys = list(self._modules)
        for k in (keys[idx] if isinstance(idx, slice) else [keys[_index("Sequential", idx, len(keys))]]):
            del self._modules[k]
        _renumber(self)

    def append(self, module: Module) -> "Sequential":
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules: Iterable[Module]) -> "Sequential":
        for m in modules:
            self.append(m)
        return self

    def insert(self, index: int, module: Module) -> "Sequential":
        _insert(self, "Sequential", index, module)
        return self

    def pop(self, key: int) -> Module:
        m = self[key]
        del self[key]
        return m

    def __add__(self, other: "Sequential") -> "Sequential":
        if not isinstance(other, Sequential):
            raise DTypeError(f"Sequential: can only add a Sequential, got {type(other).__name__}")
        return Sequential(*self, *other)

    def forward(self, x: Any) -> Any:
        for m in self._modules.values():
            x = m(x)
        return x


class ModuleList(Module):
    """A list of modules, registered as "0", "1", ..."""

    def __init__(self, modules: Iterable[Module] | None = None) -> None:
        super().__init__()
        for m in modules or ():
            self.append(m)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def __getitem__(self, idx: Any) -> Any:
        mods = list(self._modules.values())
        if isinstance(idx, slice):
            return ModuleList(mods[idx])
        return mods[_index("ModuleList", idx, len(mods))]

    def __setitem__(self, idx: int, module: Module) -> None:
        self.add_module(str(_index("ModuleList", idx, len(self))), module)

    def __delitem__(self, idx: Any) -> None:
        keys = list(self._modules)
        for k in (keys[idx] if isinstance(idx, slice) else [keys[_index("ModuleList", idx, len(keys))]]):
            del self._modules[k]
        _renumber(self)

    def __iadd__(self, modules: Iterable[Module]) -> "ModuleList":
        return self.extend(modules)

    def __add__(self, other: Iterable[Module]) -> "ModuleList":
        return ModuleList([*self, *other])

    def insert(self, index: int, module: Module) -> None:
        _insert(self, "ModuleList", index, module)

    def pop(self, key: int) -> Module:
        m = self[key]
        del self[key]
        return m

    def append(self, module: Module) -> "ModuleList":
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules: Iterable[Module]) -> "ModuleList":
        for m in modules:
            self.append(m)
        return self

    def __repr__(self) -> str:
        """PyTorch's: runs of equal consecutive entries shown once, as "(i-j): n x Module(...)"."""
        reprs = [repr(m) for m in self]
        if not reprs:
            return "ModuleList()"
        runs: list[list] = []
        for i, r in enumerate(reprs):
            if runs and runs[-1][2] == r:
                runs[-1][1] = i
            else:
                runs.append([i, i, r])
        lines = []
        for a, b, r in runs:
            text = f"({a}): {r}" if a == b else f"({a}-{b}): {b - a + 1} x {r}"
            lines.append(text.replace("\n", "\n  "))
        return "ModuleList(\n  " + "\n  ".join(lines) + "\n)"

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise ArgumentError("ModuleList is not callable: iterate over it in your forward")


class ModuleDict(Module):
    """A dict of modules by name (insertion order)."""

    def __init__(self, modules: Any = None) -> None:
        super().__init__()
        for name, m in (dict(modules) if modules else {}).items():
            self.add_module(name, m)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __contains__(self, key: str) -> bool:
        return key in self._modules

    def __getitem__(self, key: str) -> Module:
        if key not in self._modules:
            raise ArgumentError(f"ModuleDict: no module named {key!r} (has {list(self._modules)})")
        return self._modules[key]

    def __setitem__(self, key: str, module: Module) -> None:
        self.add_module(key, module)

    def __delitem__(self, key: str) -> None:
        del self._modules[key]

    def keys(self):
        return self._modules.keys()

    def values(self):
        return self._modules.values()

    def items(self):
        return self._modules.items()

    def pop(self, key: str) -> Module:
        m = self[key]
        del self._modules[key]
        return m

    def clear(self) -> None:
        self._modules.clear()

    def update(self, modules: Any) -> None:
        for name, m in (modules.items() if hasattr(modules, "items") else modules):
            self.add_module(name, m)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise ArgumentError("ModuleDict is not callable: index it in your forward")


def _renumber(container: Module) -> None:
    """Keys "0", "1", ... again after a deletion or insertion (PyTorch keeps them dense)."""
    mods = list(container._modules.values())
    container._modules.clear()
    for i, m in enumerate(mods):
        container._modules[str(i)] = m


def _insert(container: Module, op: str, index: int, module: Module) -> None:
    if not isinstance(module, Module):
        raise DTypeError(f"{op}.insert: expected a Module, got {type(module).__name__}")
    n = len(container._modules)
    if not isinstance(index, int) or isinstance(index, bool):
        raise DTypeError(f"{op}.insert: index must be an int, got {type(index).__name__}")
    index = max(0, min(n, index + n if index < 0 else index))  # list.insert's clamping
    mods = list(container._modules.values())
    mods.insert(index, module)
    container._modules.clear()
    for i, m in enumerate(mods):
        container._modules[str(i)] = m


def _as_parameter(op: str, value: Any) -> Any:
    """Tensors become Parameters (as PyTorch's ParameterList/Dict do); None and Parameters pass."""
    if value is None or isinstance(value, Parameter):
        return value
    if isinstance(value, Tensor):
        return Parameter(value)
    raise DTypeError(f"{op}: expected a Parameter or a Tensor, got {type(value).__name__}")


class ParameterList(Module):
    """A list of Parameters, registered as "0", "1", ... (tensors are wrapped as Parameters)."""

    def __init__(self, values: Iterable[Any] | None = None) -> None:
        super().__init__()
        for v in values or ():
            self.append(v)

    def __len__(self) -> int:
        return len(self._parameters)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._parameters.values())

    def __getitem__(self, idx: Any) -> Any:
        vals = list(self._parameters.values())
        if isinstance(idx, slice):
            return ParameterList(vals[idx])
        return vals[_index("ParameterList", idx, len(vals))]

    def __setitem__(self, idx: int, value: Any) -> None:
        self.register_parameter(str(_index("ParameterList", idx, len(self))), _as_parameter("ParameterList", value))

    def __iadd__(self, values: Iterable[Any]) -> "ParameterList":
        return self.extend(values)

    def append(self, value: Any) -> "ParameterList":
        self.register_parameter(str(len(self)), _as_parameter("ParameterList", value))
        return self

    def extend(self, values: Iterable[Any]) -> "ParameterList":
        for v in values:
            self.append(v)
        return self

    def extra_repr(self) -> str:
        return "\n".join(f"({i}): Parameter containing: [{p.dtype} of size {'x'.join(map(str, p.shape))}]"
                         for i, p in enumerate(self) if p is not None)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise ArgumentError("ParameterList is not callable: iterate over it in your forward")


class ParameterDict(Module):
    """A dict of Parameters by name (insertion order; tensors are wrapped as Parameters)."""

    def __init__(self, parameters: Any = None) -> None:
        super().__init__()
        if parameters is not None:
            self.update(parameters)

    def __len__(self) -> int:
        return len(self._parameters)

    def __iter__(self) -> Iterator[str]:
        return iter(self._parameters)

    def __contains__(self, key: str) -> bool:
        return key in self._parameters

    def __getitem__(self, key: str) -> Any:
        if key not in self._parameters:
            raise KeyError(key)
        return self._parameters[key]

    def __setitem__(self, key: str, value: Any) -> None:
        if not isinstance(key, str):
            raise DTypeError(f"ParameterDict: keys must be strings, got {type(key).__name__}")
        self.register_parameter(key, _as_parameter("ParameterDict", value))

    def __delitem__(self, key: str) -> None:
        del self._parameters[key]

    def keys(self):
        return self._parameters.keys()

    def values(self):
        return self._parameters.values()

    def items(self):
        return self._parameters.items()

    def get(self, key: str, default: Any = None) -> Any:
        return self._parameters.get(key, default)

    def pop(self, key: str) -> Any:
        v = self[key]
        del self._parameters[key]
        return v

    def clear(self) -> None:
        self._parameters.clear()

    def update(self, parameters: Any) -> None:
        for k, v in (parameters.items() if hasattr(parameters, "items") else parameters):
            self[k] = v

    def extra_repr(self) -> str:
        return "\n".join(f"({k}): Parameter containing: [{p.dtype} of size {'x'.join(map(str, p.shape))}]"
                         for k, p in self.items() if p is not None)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise ArgumentError("ParameterDict is not callable: index it in your forward")
