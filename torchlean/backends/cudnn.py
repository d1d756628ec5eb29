"""``torchlean.backends.cudnn``: torchlean does not use cuDNN; its attributes map to torchlean's
switches (see ``torchlean.backends``): ``allow_tf32`` (the TF32 switch), ``deterministic``
(deterministic mode), ``benchmark`` and ``enabled`` (accepted, no effect)."""

from __future__ import annotations

import numbers
from typing import Any

from ..errors import ArgumentError
from ..runtime.determinism import deterministic_reductions, set_deterministic_reductions
from ..runtime.precision import allow_tf32, set_allow_tf32
from ._flags_module import install, switch_property

__all__ = ["is_available", "version"]  # (and the switches: allow_tf32, deterministic, benchmark, enabled)

_accepted = {"benchmark": False, "enabled": True}


def is_available() -> bool:
    """False: torchlean's convolutions are its own kernels, not cuDNN's."""
    return False


def version() -> None:
    return None


def _accept(name: str) -> Any:
    def put(v: Any) -> None:
        if not isinstance(v, (bool, numbers.Integral)):
            raise ArgumentError(f"backends.cudnn.{name}: expected a bool, got {v!r}")
        _accepted[name] = bool(v)
    return put


install(__name__,
        allow_tf32=switch_property(allow_tf32, set_allow_tf32),
        deterministic=switch_property(deterministic_reductions, set_deterministic_reductions),
        benchmark=switch_property(lambda: _accepted["benchmark"], _accept("benchmark")),
        enabled=switch_property(lambda: _accepted["enabled"], _accept("enabled")))
