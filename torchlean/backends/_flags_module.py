"""A module whose attributes read and write torchlean's switches (``cudnn.deterministic = True``)."""

from __future__ import annotations

import sys
import types
from typing import Any, Callable


def switch_property(get: Callable[[], Any], put: Callable[[Any], Any]) -> property:
    return property(lambda self: get(), lambda self, v: put(v))


def install(module_name: str, **props: property) -> None:
    """Give the module ``module_name`` a class with ``props`` (attribute access runs the switch)."""
    cls = type("FlagsModule", (types.ModuleType,), dict(props))
    sys.modules[module_name].__class__ = cls
