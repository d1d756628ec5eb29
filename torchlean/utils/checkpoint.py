"""``torchlean.utils.checkpoint`` (PyTorch's ``torch.utils.checkpoint``): activation checkpointing.

``checkpoint(fn, *args)`` runs ``fn`` without recording and keeps only its tensor arguments; in
backward it runs ``fn`` again, recording, from those arguments (and from the random-number state
of the first run, so dropout draws the same masks), and backpropagates through that graph: the
gradients of the arguments go on through the checkpoint's node, those of the parameters ``fn``
reads are accumulated into their ``.grad`` there (PyTorch's reentrant form; ``use_reentrant`` is
accepted and changes nothing). The memory ``fn``'s activations took is free between the two runs.
The gradients are the bits of running ``fn`` plainly (the same ops in the same order), unless a
parameter also gets gradient from outside ``fn`` (the order of its two additions changes).

Where the memory cannot be saved, ``fn`` runs as it is (same values and gradients, a larger
footprint): when no tensor argument requires grad (the node would have nothing to hang on: its
parameters would get no gradient), when grad is disabled, and when ``fn`` returns neither one float
tensor nor a tuple or list holding exactly one (a transformer layer's ``(hidden,)``, with Nones or
integer tensors beside it: those come from the first run). ``torch.autograd.grad`` through a checkpointed function is refused (AutogradError), as
PyTorch's reentrant checkpoint refuses it: the parameters' gradients go to ``.grad``, not to the
caller.
"""

from __future__ import annotations

from typing import Any, Callable

from .. import autograd
from ..errors import ArgumentError, AutogradError
from ..runtime.rng import get_rng_state, set_rng_state
from ..tensor import Tensor

__all__ = ["checkpoint", "checkpoint_sequential"]


def checkpoint(function: Callable, *args: Any, use_reentrant: bool | None = None, context_fn: Any = None,
               determinism_check: str = "default", debug: bool = False, preserve_rng_state: bool = True,
               **kwargs: Any) -> Any:
    if not callable(function):
        raise ArgumentError(f"checkpoint: expected a callable, got {type(function).__name__}")
    tensors = [(i, a) for i, a in enumerate(args) if isinstance(a, Tensor)]
    if not autograd.is_grad_enabled() or not any(t.requires_grad for _, t in tensors):
        return function(*args, **kwargs)
    rng = get_rng_state() if preserve_rng_state else None
    with autograd.no_grad():
        out = function(*args, **kwargs)
    at = _the_float_output(out)
    if at is None:
        # no float tensor, or several: run it recorded instead, from the same random numbers
        if rng is not None:
            set_rng_state(rng)
        return function(*args, **kwargs)
    saved = [(i, t.detach(), t.requires_grad) for i, t in tensors]
    shape = _pick(out, at).shape

    def vjp(g):
        if autograd.in_functional_walk():
            raise AutogradError("checkpoint: torch.autograd.grad through a checkpointed function is not "
                                "supported (the parameters' gradients go to .grad); call .backward()")
        call = list(args)
        leaves = []
        for i, t, rg in saved:
            call[i] = t.detach().requires_grad_(rg)
            leaves.append(call[i])
        now = get_rng_state()
        if rng is not None:
            set_rng_state(rng)
        try:
            with autograd.enable_grad():
                again = function(*call, **kwargs)
        finally:
            set_rng_state(now)
        again = _pick(again, at) if _the_float_output(again) == at else None
        if again is None or again.shape != shape:
            raise AutogradError(f"checkpoint: the recomputed output differs from the first run's "
                                f"(a float tensor of shape {shape} at the same place)")
        if again.requires_grad:
            autograd.backward(again, g)
        return tuple(t.grad._float_buffer("checkpoint") if t.requires_grad and t.grad is not None else None
                     for t in leaves)

    node_out = autograd.record("checkpoint", Tensor._wrap(_pick(out, at)._float_buffer("checkpoint"), shape),
                               [t for _, t in tensors], vjp)
    if at == -1:
        return node_out
    return type(out)(node_out if i == at else o for i, o in enumerate(out))


def _the_float_output(out: Any) -> int | None:
    """Where the one float tensor of ``fn``'s result is: -1 for the result itself, its index in a
    tuple or list whose other items are no float tensors (a transformer layer's ``(hidden,)`` or
    ``(hidden, None)``), else None."""
    if isinstance(out, Tensor):
        return -1 if out.is_floating_point() else None
    if type(out) in (tuple, list):
        found = [i for i, o in enumerate(out) if isinstance(o, Tensor) and o.is_floating_point()]
        return found[0] if len(found) == 1 else None
    return None


def _pick(out: Any, at: int) -> Tensor:
    return out if at == -1 else out[at]


def checkpoint_sequential(functions: Any, segments: int, input: Any, use_reentrant: bool | None = None,  # noqa: A002
                          **kwargs: Any) -> Any:
    """The modules of ``functions`` (a Sequential or a list) in ``segments`` runs of consecutive
    modules, each checkpointed but the last (PyTorch's split)."""
    mods = list(functions.children()) if hasattr(functions, "children") else list(functions)
    if isinstance(segments, bool) or not isinstance(segments, int) or segments < 1:
        raise ArgumentError(f"checkpoint_sequential: segments must be a positive integer, got {segments!r}")
    size = max(1, len(mods) // segments)

    def run(lo: int, hi: int) -> Callable:
        def seg(x: Any) -> Any:
            for m in mods[lo:hi]:
                x = m(x)
            return x
        return seg

    out, end = input, 0
    for start in range(0, size * (segments - 1), size):
        end = min(start + size, len(mods))
        out = checkpoint(run(start, end), out, **kwargs)
    return run(end, len(mods))(out)
