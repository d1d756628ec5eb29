"""``torchlean.utils.checkpoint`` (PyTorch's ``torch.utils.checkpoint``): activation checkpointing.

``checkpoint(fn, *args)`` runs ``fn`` without recording and keeps only its tensor arguments; in
backward it runs ``fn`` again, recording, from those arguments (and from the random-number state
of the first run, so dropout draws the same masks), and backpropagates through that graph: the
gradients of the arguments go on through the checkpoint's node, those of the parameters ``fn``
reads are accumulated into their ``.grad`` there (PyTorch's reentrant form; ``use_reentrant`` is
accepted and changes nothing). The memory ``fn``'s activations took is free between the two runs.
The gradients are the bits of running ``fn`` plainly (the same ops in the same order), unless a
parameter also gets gradient from outside ``fn`` (the order of its two additions changes).

``fn`` may return a tensor or (nested) tuples and lists of them with other values (a transformer
layer's ``(hidden, None)``, an LSTM's ``(out, (h, c))``): every float tensor in it becomes an output
of the checkpoint, the rest comes from the first run. Several float outputs are joined into one
node (one copy of them), and backward runs from all of them at once; their gradients may then
differ from a plain run's in the last bit, where the order of additions differs.

Where the memory cannot be saved, ``fn`` runs as it is (same values and gradients, a larger
footprint): when no tensor argument requires grad (the node would have nothing to hang on: its
parameters would get no gradient), when grad is disabled, and when ``fn`` returns no float tensor.
``torch.autograd.grad`` through a checkpointed function is refused (AutogradError), as PyTorch's
reentrant checkpoint refuses it: the parameters' gradients go to ``.grad``, not to the caller.
"""

from __future__ import annotations

from typing import Any, Callable

from .. import autograd
from ..errors import ArgumentError, AutogradError
from ..ops.shape import cat
from ..runtime.primitives import slice1d
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
    paths = _float_paths(out)
    if not paths:
        # no float tensor: run it recorded instead, from the same random numbers
        if rng is not None:
            set_rng_state(rng)
        return function(*args, **kwargs)
    firsts = [_at(out, q) for q in paths]
    shapes = [t.shape for t in firsts]
    sizes = [t.numel() for t in firsts]
    total = sum(sizes)
    saved = [(i, t.detach(), t.requires_grad) for i, t in tensors]

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
                outs = [_at(again, q) for q in paths] if _float_paths(again) == paths else None
                if outs is None or [t.shape for t in outs] != shapes:
                    raise AutogradError("checkpoint: the recomputed output differs from the first run's "
                                        f"(float tensors of shapes {[tuple(s) for s in shapes]} at the same places)")
                if len(outs) == 1:
                    root, gr = outs[0], g
                else:  # one root whose gradient reaches each output as exactly its slice of g
                    root, gr, off = None, None, 0
                    for t, n, shape in zip(outs, sizes, shapes):
                        term = (t * Tensor._wrap(slice1d(g, total, off, n), shape)).sum()
                        root, off = term if root is None else root + term, off + n
        finally:
            set_rng_state(now)
        if root.requires_grad:
            autograd.backward(root, gr)
        return tuple(t.grad._float_buffer("checkpoint") if t.requires_grad and t.grad is not None else None
                     for t in leaves)

    if len(firsts) == 1:
        joined = Tensor._wrap(firsts[0]._float_buffer("checkpoint"), shapes[0])
    else:  # the outputs end to end in one buffer: one node, whose gradient is theirs joined
        with autograd.no_grad():
            joined = cat([t.reshape(-1) for t in firsts])
    node_out = autograd.record("checkpoint", joined, [t for _, t in tensors], vjp)
    if len(firsts) == 1:
        results = [node_out]
    else:
        results, off = [], 0
        for n, shape in zip(sizes, shapes):
            results.append(node_out[off:off + n].reshape(shape))
            off += n
    for q, r in zip(paths, results):
        out = _put(out, q, r)
    return out


def _float_paths(out: Any, path: tuple = ()) -> list[tuple]:
    """Where the float tensors of ``fn``'s result are: () for the result itself, index paths into
    tuples and lists (nested: an LSTM's (out, (h, c)))."""
    if isinstance(out, Tensor):
        return [path] if out.is_floating_point() else []
    if type(out) in (tuple, list):
        return [q for i, o in enumerate(out) for q in _float_paths(o, path + (i,))]
    return []


def _at(out: Any, path: tuple) -> Tensor:
    for i in path:
        out = out[i]
    return out


def _put(out: Any, path: tuple, value: Tensor) -> Any:
    if not path:
        return value
    i = path[0]
    return type(out)(_put(o, path[1:], value) if j == i else o for j, o in enumerate(out))


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
