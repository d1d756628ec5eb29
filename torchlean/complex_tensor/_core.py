"""complex64 tensors (``dtype=torch.cfloat``), stored as float32 pairs.

A ``ComplexTensor`` of shape S holds one float32 ``Tensor`` of shape (*S, 2), its *real view*
(``torch.view_as_real``): [re, im] interleaved, the layout of the packed spectra of the spectral
primitives and of NumPy's complex64. Every complex operation is an op (or a composition of ops) on
real views, so the tape records and differentiates real float32 maps only.

Why the gradient comes out as PyTorch's: for a real loss L and z = x + iy, PyTorch's ``z.grad``
is dL/dx + i dL/dy (the conjugate Wirtinger convention). The gradient of the real view is exactly
(dL/dx, dL/dy), so ``z.grad`` is the complex tensor over the real view's gradient, and an optimizer
that steps the real view elementwise does what PyTorch's optimizers do for complex parameters
(they step ``view_as_real(p)``).

A ComplexTensor is not a subclass of ``Tensor`` on purpose: the real ops read float32 buffers, and
a complex argument passed to one must fail with a clear error, never be read as real numbers
(``_validate.complex_refusal``: "relu: complex tensors are not supported by relu").

This module holds the class and what needs no op; the package's ``__init__`` binds the computing
methods (arithmetic, shape ops, indexing) from the sibling modules, as ``_methods`` does for Tensor.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes
from ..errors import DTypeError, NotSupportedAttributeError, ShapeError
from ..size import Size
from ..tensor import Tensor

__all__ = ["ComplexTensor", "is_complex_tensor", "SUPPORTED_METHODS"]


def _check_real_view(op: str, r: Any) -> Tensor:
    if not isinstance(r, Tensor):
        raise DTypeError(f"{op}: expected a float32 Tensor with a last dimension of size 2, got {type(r).__name__}")
    if r.dtype is not dtypes.float32:
        raise DTypeError(f"{op}: expected a float32 tensor, got {r.dtype!r}")
    if r.ndim == 0 or r.shape[-1] != 2:
        raise ShapeError(f"{op}: expected a last dimension of size 2 ([re, im]), got shape {tuple(r.shape)}")
    return r


class ComplexTensor:
    """A complex64 tensor over a float32 real view of shape (*shape, 2)."""

    __slots__ = ("_r", "__weakref__")
    __array_priority__ = 1000  # NumPy defers to our reflected operators (ndarray * z)
    __torchlean_complex__ = True  # read by _validate.complex_refusal (which cannot import this class)
    __hash__ = object.__hash__  # by identity, as tensors (``__eq__`` is elementwise)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("use torchlean.complex(re, im), torchlean.view_as_complex(t) or a factory with "
                        "dtype=torchlean.cfloat")

    @classmethod
    def from_real_view(cls, r: Tensor, op: str = "view_as_complex") -> "ComplexTensor":
        """The complex tensor whose real view is ``r`` (no copy: they share the tape node too)."""
        z = object.__new__(cls)
        z._r = _check_real_view(op, r)
        return z

    def real_view(self) -> Tensor:
        """The float32 (*shape, 2) tensor of [re, im] pairs (``torch.view_as_real``)."""
        return self._r

    # -- properties ----------------------------------------------------------------------
    @property
    def shape(self) -> Size:
        return Size(self._r.shape[:-1])

    def size(self, dim: int | None = None) -> Any:
        return self.shape if dim is None else self.shape[dim]

    @property
    def ndim(self) -> int:
        return self._r.ndim - 1

    def dim(self) -> int:
        return self.ndim

    def numel(self) -> int:
        return self._r.numel() // 2

    @property
    def dtype(self) -> dtypes.dtype:
        return dtypes.complex64

    @property
    def device(self) -> Any:
        return self._r.device

    @property
    def is_cuda(self) -> bool:
        return self._r.is_cuda

    def is_complex(self) -> bool:
        return True

    def is_floating_point(self) -> bool:
        return False

    @property
    def requires_grad(self) -> bool:
        return self._r.requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        self._r.requires_grad = value

    @property
    def is_leaf(self) -> bool:
        return self._r.is_leaf

    @property
    def grad(self) -> "ComplexTensor | None":
        g = self._r.grad
        return None if g is None else ComplexTensor.from_real_view(g, "grad")

    @grad.setter
    def grad(self, value: "ComplexTensor | None") -> None:
        if value is not None and not isinstance(value, ComplexTensor):
            raise DTypeError(f"grad: a complex tensor's gradient must be complex, got {type(value).__name__}")
        self._r.grad = None if value is None else value._r

    # -- conversion ----------------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """A host copy of the values, complex64, shaped."""
        pairs = np.ascontiguousarray(self._r.numpy(), dtype=np.float32)
        return pairs.view(np.complex64).reshape(self.shape)

    def tolist(self) -> Any:
        return self.numpy().tolist()

    def item(self) -> complex:
        if self.numel() != 1:
            raise ShapeError(f"item: expected a one-element tensor, got shape {tuple(self.shape)}")
        return complex(self.numpy().reshape(-1)[0])

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        arr = self.numpy()
        return arr if dtype is None else arr.astype(dtype)

    def __iter__(self) -> Any:
        if self.ndim == 0:
            raise DTypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self.shape[0]))

    def __bool__(self) -> bool:
        if self.numel() != 1:
            raise ShapeError(f"bool: the truth value of a tensor with {self.numel()} elements is ambiguous")
        return bool(self.item())

    def __complex__(self) -> complex:
        return self.item()

    def __getattr__(self, name: str) -> Any:  # only for names the class lacks
        if name.startswith("__"):
            raise AttributeError(name)
        raise NotSupportedAttributeError(
            f"ComplexTensor.{name}: not supported on complex tensors (torchlean's complex64 supports "
            f"{', '.join(SUPPORTED_METHODS)}; for the rest work on z.real_view() or z.real / z.imag)")

    def __len__(self) -> int:
        if self.ndim == 0:
            raise ShapeError("len: a 0-d tensor has no length")
        return self.shape[0]

    def __repr__(self) -> str:
        body = np.array2string(self.numpy(), separator=", ", prefix="tensor(", precision=4)
        dev = "" if self.device == "cpu" else f", device='{self.device}'"
        grad = ", requires_grad=True" if self.requires_grad else ""
        return f"tensor({body}{dev}{grad})"


# the names the package binds (listed by the error for a method complex tensors lack)
SUPPORTED_METHODS: list[str] = []


def is_complex_tensor(x: Any) -> bool:
    return isinstance(x, ComplexTensor)
