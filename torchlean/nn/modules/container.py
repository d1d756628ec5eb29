"""Containers: ``Sequential``, ``ModuleList``, ``ModuleDict`` (PyTorch's indexing and naming)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Iterable, Iterator

from ...errors import ArgumentError, DTypeError, IndexOutOfRangeError
from .module import Module

__all__ = ["Sequential", "ModuleList", "ModuleDict"]


def _index(op: str, idx: int, n: int) -> int:
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

    def append(self, module: Module) -> "Sequential":
        self.add_module(str(len(self)), module)
        return self

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

    def append(self, module: Module) -> "ModuleList":
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules: Iterable[Module]) -> "ModuleList":
        for m in modules:
            self.append(m)
        return self

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

    def keys(self):
        return self._modules.keys()

    def values(self):
        return self._modules.values()

    def items(self):
        return self._modules.items()

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise ArgumentError("ModuleDict is not callable: index it in your forward")
