"""``torchlean.utils.checkpoint`` (PyTorch's ``torch.utils.checkpoint``).

``checkpoint(fn, *args)`` runs ``fn(*args)`` as it is: the gradients are the same as PyTorch's
activation checkpointing gives, but no memory is saved (the activations stay on the tape; nothing
is recomputed). Programs that use it to fit a large model therefore run, with a larger footprint.
"""

from __future__ import annotations

from typing import Any, Callable

from ..errors import ArgumentError

__all__ = ["checkpoint", "checkpoint_sequential"]


def checkpoint(function: Callable, *args: Any, use_reentrant: bool | None = None, context_fn: Any = None,
               determinism_check: str = "default", debug: bool = False, preserve_rng_state: bool = True,
               **kwargs: Any) -> Any:
    if not callable(function):
        raise ArgumentError(f"checkpoint: expected a callable, got {type(function).__name__}")
    return function(*args, **kwargs)


def checkpoint_sequential(functions: Any, segments: int, input: Any, use_reentrant: bool | None = None,  # noqa: A002
                          **kwargs: Any) -> Any:
    """Runs the modules of ``functions`` (a Sequential or a list) one after another."""
    mods = list(functions.children()) if hasattr(functions, "children") else list(functions)
    out = input
    for m in mods:
        out = m(out)
    return out
