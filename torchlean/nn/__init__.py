"""``torchlean.nn``: modules, ``Parameter``, ``init`` and the functional API (PyTorch's names)."""

from . import functional, init, utils
from .modules import *  # noqa: F401,F403
from .modules import __all__ as _modules_all
from .parameter import Parameter
from .parallel import DataParallel

__all__ = ["functional", "init", "utils", "Parameter", "DataParallel", *_modules_all]
