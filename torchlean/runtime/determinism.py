"""The deterministic-reductions switch (seed page Buffer, "Deterministic Reductions Mode").

Kernels that would accumulate float32 values with atomics (scatter-add, broadcast reductions,
pool and embedding backward on CUDA) use a fixed-order reduction instead while the switch is
on, so repeated runs are bitwise equal. The CPU backend always accumulates in a fixed order, so
the switch changes its speed and bits nowhere; it is honoured so that code is portable.

The start value comes from ``TORCHLEAN_CUDA_DETERMINISTIC_REDUCTIONS``: unset, empty or "0"
is off, any other value is on.
"""

from __future__ import annotations

import os

import numpy as np

from ..errors import ArgumentError
from ..kernels import flags
from ..kernels.flags import deterministic_reductions  # noqa: F401  (the reader: one lookup, as kernels do)

ENV_VAR = "TORCHLEAN_CUDA_DETERMINISTIC_REDUCTIONS"


def _from_env() -> bool:
    return os.environ.get(ENV_VAR, "").strip() not in ("", "0")


flags.set_flag("deterministic_reductions", _from_env())


def set_deterministic_reductions(on: bool) -> bool:
    """Turn the mode on or off and return the value now in force (the seed's checked setter)."""
    if not isinstance(on, (bool, int, np.bool_)):
        raise ArgumentError(f"set_deterministic_reductions: expected a bool, got {on!r}")
    return flags.set_flag("deterministic_reductions", bool(on))


class deterministic:
    """Context manager: ``with deterministic(True): ...`` restores the previous mode on exit."""

    def __init__(self, on: bool = True) -> None:
        self._on = bool(on)
        self._prev = False

    def __enter__(self) -> bool:
        self._prev = deterministic_reductions()
        return set_deterministic_reductions(self._on)

    def __exit__(self, *exc: object) -> None:
        set_deterministic_reductions(self._prev)
