"""PyTorch's process-wide switches, mapped onto torchlean's: ``use_deterministic_algorithms``,
``set_float32_matmul_precision``, ``set_num_threads`` and their readers.

* Deterministic algorithms: torchlean's deterministic-reductions mode (runtime/determinism.py).
  With it on, every kernel gives the same bits run after run (CUDA's atomics become fixed-order
  sums); the CPU backend is deterministic anyway. No torchlean op is left that could only run
  nondeterministically, so ``warn_only`` changes nothing but what
  ``is_deterministic_algorithms_warn_only_enabled()`` reports.
* Float32 matmul precision: "highest" is TF32 off (torchlean's default: bmm's float32 contract),
  "high" and "medium" allow TF32 tensor-core math in CUDA matrix products (runtime/precision.py);
  torchlean has no bfloat16 matmul mode, so "medium" is "high".
* Threads: the CPU backend's thread count (runtime/threads.py).
"""

from __future__ import annotations

import numbers
from typing import Any

from .errors import ArgumentError
from .runtime.determinism import deterministic_reductions, set_deterministic_reductions
from .runtime.precision import allow_tf32, set_allow_tf32
from .runtime.threads import get_num_threads, set_num_threads

__all__ = ["use_deterministic_algorithms", "are_deterministic_algorithms_enabled",
           "is_deterministic_algorithms_warn_only_enabled", "set_float32_matmul_precision",
           "get_float32_matmul_precision", "set_num_threads", "get_num_threads", "set_num_interop_threads",
           "get_num_interop_threads"]

_state = {"warn_only": False, "precision": "highest", "interop": 1}
_PRECISIONS = ("highest", "high", "medium")


def _bool(op: str, name: str, v: Any) -> bool:
    if not isinstance(v, (bool, numbers.Integral)):
        raise ArgumentError(f"{op}: {name} must be a bool, got {v!r}")
    return bool(v)


def use_deterministic_algorithms(mode: Any, *, warn_only: Any = False) -> None:
    """Turn torchlean's deterministic mode on or off (see the module docstring)."""
    op = "use_deterministic_algorithms"
    mode, warn_only = _bool(op, "mode", mode), _bool(op, "warn_only", warn_only)
    set_deterministic_reductions(mode)
    _state["warn_only"] = warn_only


def are_deterministic_algorithms_enabled() -> bool:
    return deterministic_reductions()


def is_deterministic_algorithms_warn_only_enabled() -> bool:
    return deterministic_reductions() and _state["warn_only"]


def set_float32_matmul_precision(precision: Any) -> None:
    """"highest": TF32 off; "high" or "medium": TF32 allowed in CUDA matmuls."""
    if precision not in _PRECISIONS:
        raise ArgumentError(f"set_float32_matmul_precision: expected one of {', '.join(map(repr, _PRECISIONS))}, "
                            f"got {precision!r}")
    set_allow_tf32(precision != "highest")
    _state["precision"] = precision


def get_float32_matmul_precision() -> str:
    """The precision last set, or what the TF32 switch (set elsewhere since) now means."""
    p = _state["precision"]
    if (p != "highest") == allow_tf32():
        return p
    return "high" if allow_tf32() else "highest"


def set_num_interop_threads(n: Any) -> None:
    """Accepted (torchlean runs no inter-op thread pool: ops run in the caller's thread)."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or int(n) < 1:
        raise ArgumentError(f"set_num_interop_threads: expected a positive int, got {n!r}")
    _state["interop"] = int(n)


def get_num_interop_threads() -> int:
    return _state["interop"]
