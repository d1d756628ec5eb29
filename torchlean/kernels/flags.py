"""Process-global switches that kernels read on their hot paths.

The runtime owns them (``torchlean.runtime.determinism`` and ``torchlean.runtime.precision``:
the checked public setters, the environment variables, the context manager); it writes them here,
below the kernels, so that a kernel reads a switch without importing the runtime above it.
"""

from __future__ import annotations

_on = {"deterministic_reductions": False, "allow_tf32": False}


def deterministic_reductions() -> bool:
    """Fixed-order reductions instead of atomics (CUDA scatter-add and the like)."""
    return _on["deterministic_reductions"]


def allow_tf32() -> bool:
    """TF32 tensor-core math in CUDA matrix products."""
    return _on["allow_tf32"]


def set_flag(name: str, on: bool) -> bool:
    """Put a switch (already checked by the runtime's setter) in force; returns it."""
    if name not in _on:
        raise KeyError(name)
    _on[name] = on
    return on
