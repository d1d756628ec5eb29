"""Pending views: layout-only ops held back until something reads the values.

PyTorch's ``split``, ``view`` and ``transpose`` return strided views, and its attention reads q, k
and v straight out of the projection they were cut from. Our tensors are contiguous, so each of
these ops is a copy, forward and backward: a GPT block's ``qkv.split(C, 2)`` and the heads'
``view(B, T, h, d).transpose(1, 2)`` cost six copies forward, six more backward and a join of the
gradients, on memory-bound kernels, before attention reads anything.

A ``PendingView`` is the result of such an op on a float tensor, not computed yet. It holds a
snapshot of its source tensor, the steps that would make it (each the eager op it stands for,
with the grad mode of the moment it was asked for) and where its elements sit in the source's
memory (offset and strides, in elements). Further layout ops on it (narrow, view/reshape,
transpose/permute, unbind) extend it. Anything else that reads its buffer or node materializes
it: the steps run then, as the eager ops they stand for (same kernels, same tape nodes, same
bits), and the object becomes a plain ``Tensor``.

What reads a pending view without materializing it:
* ``scaled_dot_product_attention`` (ops/attention.py): q, k and v that are the heads of one
  packed projection (attention's ``_heads_of_packed``) run the packed kernels on the source with no copies,
  and the output is again pending: the heads view of the packed result.
* a view whose elements are its source's, in order (a transpose undoing the heads view, say),
  is a reshape of the source: no kernel.

Why a snapshot: buffers are values (runtime/buffer.py), so a later in-place update of the source
(which rebinds it) leaves the view's values as they were when it was asked for, as in our eager
semantics. The snapshot holds the source's buffer, so an optimizer never updates it in place
while a pending view can still read it (``exclusive``); leaves that require grad (parameters)
therefore never get pending views (``eligible``)."""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

from .. import autograd
from ..dtypes import float32
from ..size import Size
from ..tensor import Tensor

__all__ = ["PendingView", "eligible", "start", "extend", "of_source", "layout", "in_current_mode", "same_source",
           "materialize", "contiguous_strides", "same_layout", "narrowed", "permuted", "viewed"]

_BUF = Tensor._buf  # the slots' descriptors: PendingView's properties read and write through them
_NODE = Tensor._node
_RG = Tensor.requires_grad
_RETAIN = Tensor._retains_grad
_PENDING = Tensor._pending

Step = tuple[Callable[..., Tensor], tuple]


class _Record:
    __slots__ = ("src", "steps", "offset", "strides", "mode")

    def __init__(self, src: Tensor, steps: tuple[Step, ...], offset: int, strides: tuple[int, ...],
                 mode: tuple[bool, bool]) -> None:
        self.src, self.steps, self.offset, self.strides, self.mode = src, steps, offset, strides, mode


def _slot(slot: Any, read_materializes: bool) -> property:
    """A Tensor slot seen through a pending view: writing it (and reading it, when the value does
    not exist before the steps run) materializes the view first."""
    def get(self: Tensor) -> Any:
        if read_materializes:
            materialize(self)
        return slot.__get__(self)

    def put(self: Tensor, value: Any) -> None:
        materialize(self)  # (requires_grad_, retain_grad: the tensor they name must exist)
        slot.__set__(self, value)

    return property(get, put)


class PendingView(Tensor):
    """A float tensor whose values are a layout of another's, computed on first use (module
    docstring). Same slots as Tensor: materializing swaps the class to Tensor."""

    __slots__ = ()
    _buf = _slot(_BUF, True)
    _node = _slot(_NODE, True)
    requires_grad = _slot(_RG, False)  # known before the steps run: what record() will give
    _retains_grad = _slot(_RETAIN, False)

    @property
    def dtype(self) -> Any:
        return float32

    def is_floating_point(self) -> bool:
        return True


def eligible(x: Any) -> bool:
    """x may be the source of a pending view: a plain float tensor that is not a leaf requiring
    grad (an optimizer may update those in place; module docstring)."""
    return type(x) is Tensor and _BUF.__get__(x) is not None and (
        _NODE.__get__(x) is not None or not _RG.__get__(x))


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= s
    return tuple(reversed(out))


def _make(rec: _Record, shape: Sequence[int], requires_grad: bool, device: str) -> PendingView:
    p = object.__new__(PendingView)
    _BUF.__set__(p, None)
    p._arr = None
    p._shape = tuple.__new__(Size, tuple(shape))
    p._device = device
    _RG.__set__(p, requires_grad)
    p.grad = None
    _NODE.__set__(p, None)
    _RETAIN.__set__(p, False)
    p._mirror = None
    _PENDING.__set__(p, rec)
    return p


def start(x: Tensor, step: Step, shape: Sequence[int], offset: int, strides: Sequence[int]) -> PendingView:
    """A pending view of the plain tensor ``x`` (``eligible``): ``step`` applied to it."""
    src = Tensor._wrap(_BUF.__get__(x), x._shape, _RG.__get__(x))
    _NODE.__set__(src, _NODE.__get__(x))
    mode = autograd.current_mode()
    rec = _Record(src, (step,), offset, tuple(strides), mode)
    return _make(rec, shape, mode[0] and src.requires_grad, x._device)


def extend(p: PendingView, step: Step, shape: Sequence[int], offset: int, strides: Sequence[int] | None
           ) -> Tensor | None:
    """``step`` applied to the pending ``p``, still pending (or, when its elements are the source's
    in order, a reshape of the source); None when it cannot stay pending (the grad mode changed
    since p was asked for, or the new layout has no strides): the caller materializes p and runs
    the op eagerly."""
    rec: _Record = _PENDING.__get__(p)
    if strides is None or autograd.current_mode() != rec.mode:
        return None
    src = rec.src
    strides = tuple(strides)
    if offset == 0 and math.prod(shape) == math.prod(src._shape) and same_layout(shape, strides,
                                                                                  contiguous_strides(shape)):
        # the source's elements in order: the reshape op's alias of its buffer, no kernel
        out = Tensor._wrap(_BUF.__get__(src), tuple(shape))
        return autograd.record("reshape", out, (src,), _identity_vjp)
    return _make(_Record(src, rec.steps + (step,), offset, strides, rec.mode), shape, _RG.__get__(p), p._device)


def of_source(y: Tensor, steps: tuple[Step, ...], shape: Sequence[int], offset: int, strides: Sequence[int]
              ) -> PendingView:
    """A pending view of ``y`` (``eligible``, held by nothing else: no snapshot) made by ``steps``."""
    mode = autograd.current_mode()
    return _make(_Record(y, tuple(steps), offset, tuple(strides), mode), shape, mode[0] and _RG.__get__(y),
                 y._device)


def layout(p: PendingView) -> tuple[Tensor, int, tuple[int, ...]]:
    """(source, offset, strides) of an unmaterialized pending view."""
    rec: _Record = _PENDING.__get__(p)
    return rec.src, rec.offset, rec.strides


def in_current_mode(p: PendingView) -> bool:
    """p's steps were all asked for under the grad mode in force now."""
    return _PENDING.__get__(p).mode == autograd.current_mode()


def same_source(a: Tensor, b: Tensor) -> bool:
    """Two sources (snapshots) of the same values: one buffer, one node."""
    return _BUF.__get__(a) is _BUF.__get__(b) and _NODE.__get__(a) is _NODE.__get__(b)


def _identity_vjp(g: Any) -> tuple[Any]:
    return (g,)


def materialize(p: Tensor) -> None:
    """Run p's steps (eagerly, under the grad mode they were asked for) and make p the plain tensor
    they give. Nothing to do once p is plain."""
    if type(p) is not PendingView:
        return
    rec: _Record = _PENDING.__get__(p)
    with autograd.run_in_mode(rec.mode):
        x = rec.src
        for fn, args in rec.steps:
            x = fn(x, *args)
    buf = x._buf
    buf._tensors += 1  # p holds it from now on (ownership: runtime/buffer.py)
    p.__class__ = Tensor
    p._buf = buf
    p._node = x._node
    p.requires_grad = x.requires_grad
    p._pending = None


def same_layout(shape: Sequence[int], a: Sequence[int], b: Sequence[int]) -> bool:
    """Strides a and b address the same elements for ``shape`` (axes of size 1 never move)."""
    return all(s == 1 or x == y for s, x, y in zip(shape, a, b))


# -- the layout algebra: where a narrow, view or permute of a view sits in the source ----------------
def narrowed(offset: int, strides: Sequence[int], d: int, start_: int) -> int:
    return offset + start_ * strides[d]


def permuted(seq: Sequence[int], perm: Sequence[int]) -> tuple[int, ...]:
    return tuple(seq[j] for j in perm)


def viewed(shape: Sequence[int], strides: Sequence[int], new_shape: Sequence[int]) -> tuple[int, ...] | None:
    """Strides of ``new_shape`` over the same elements as (shape, strides), or None when the view
    cannot be written with strides (PyTorch's rule for ``view``)."""
    if math.prod(shape) == 0:
        return contiguous_strides(new_shape)
    new_strides = [0] * len(new_shape)
    view_d = len(new_shape) - 1
    if not shape:  # a 0-d tensor: every new axis has size 1
        return tuple([1] * len(new_shape))
    chunk = strides[-1]
    tensor_numel = view_numel = 1
    for tensor_d in range(len(shape) - 1, -1, -1):
        tensor_numel *= shape[tensor_d]
        if tensor_d == 0 or (shape[tensor_d - 1] != 1 and strides[tensor_d - 1] != tensor_numel * chunk):
            while view_d >= 0 and (view_numel < tensor_numel or new_shape[view_d] == 1):
                new_strides[view_d] = view_numel * chunk
                view_numel *= new_shape[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if tensor_d > 0:
                chunk = strides[tensor_d - 1]
                tensor_numel = view_numel = 1
    if view_d != -1:
        return None
    return tuple(new_strides)
