"""``torchlean.Size``: PyTorch's ``torch.Size``, the type of ``Tensor.shape`` and ``Tensor.size()``.

A tuple of ints (so it compares equal to plain tuples, unpacks, slices and hashes as one) with
PyTorch's extras: ``numel()`` and a ``torchlean.Size([...])`` repr. Slicing and ``+`` give a Size.
Unlike PyTorch, ``str()`` (and ``print``) shows the plain tuple, "(8, 4)".
"""

from __future__ import annotations

import math
import numbers
from typing import Any

from .errors import ShapeError

__all__ = ["Size"]


class Size(tuple):
    __slots__ = ()

    def __new__(cls, sizes: Any = ()) -> "Size":
        if type(sizes) is tuple:
            return tuple.__new__(cls, sizes)
        try:
            items = tuple(sizes)
        except TypeError:
            raise ShapeError(f"Size: expected a sequence of integers, got {type(sizes).__name__}") from None
        for s in items:
            if isinstance(s, bool) or not isinstance(s, numbers.Integral):
                raise ShapeError(f"Size: expected a sequence of integers, got {s!r} ({type(s).__name__}) in it")
        return tuple.__new__(cls, (int(s) for s in items))

    def numel(self) -> int:
        """The number of elements of a tensor of this shape (1 for ``Size([])``)."""
        return math.prod(self)

    def __getitem__(self, key: Any) -> Any:
        out = tuple.__getitem__(self, key)
        return Size(out) if isinstance(key, slice) else out

    def __add__(self, other: Any) -> "Size":
        if not isinstance(other, tuple):
            return NotImplemented
        return Size(tuple.__add__(self, other))

    def __radd__(self, other: Any) -> "Size":
        if not isinstance(other, tuple):
            return NotImplemented
        return Size(tuple.__add__(other, self))

    def __repr__(self) -> str:
        return f"torchlean.Size([{', '.join(str(s) for s in self)}])"

    # str() (and so f"{x.shape}" in torchlean's error messages) stays the plain tuple's "(8, 4)":
    # the messages read the same whichever kind of shape they were given. repr() is PyTorch's form.
    __str__ = tuple.__repr__

    def __reduce__(self) -> Any:
        return (Size, (tuple(self),))
