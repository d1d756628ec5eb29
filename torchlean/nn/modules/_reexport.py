"""PyTorch's module paths (``torch.nn.modules.rnn``, ``.batchnorm`` ...) for classes that torchlean
keeps elsewhere: each such module names its classes, and reading one returns ``torchlean.nn``'s
class of that name (looked up when first used, so a class added to ``torchlean.nn`` later is found
without editing the path module)."""

from __future__ import annotations

import importlib
from typing import Any, Callable

from ...errors import TorchLeanError


class MissingClassError(TorchLeanError, AttributeError):
    """A class that PyTorch has at this module path and torchlean does not (yet). (An AttributeError,
    so that ``hasattr`` answers False; ``from ... import`` turns it into an ImportError.)"""


def path_module(module_name: str, names: tuple[str, ...]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """(``__getattr__``, ``__dir__``) for the module ``module_name`` that re-exports ``names``."""

    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        nn = importlib.import_module("torchlean.nn")
        try:
            return getattr(nn, name)
        except AttributeError:
            raise MissingClassError(f"{module_name}.{name}: torchlean does not implement nn.{name} (PyTorch has it "
                                    f"at this path)") from None

    def __dir__() -> list[str]:
        return sorted(names)

    return __getattr__, __dir__
