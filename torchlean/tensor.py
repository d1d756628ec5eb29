"""The ``Tensor`` class and its factories: a Buffer and a shape, recorded on the tape.

This module sits below the ops (docs/architecture.md): it holds the tensor's data, properties,
conversions, gradient fields and the factories, and imports only the tape and the runtime. The
operators and methods that compute (``+``, ``@``, ``.sum()``, ``.reshape()``, ``.to()``,
``add_`` ...) call ops and are bound onto the class by ``torchlean._methods``, one layer up.

Float tensors are float32 Buffers on their device. Integer (int64) and boolean tensors are
index and mask tensors: they hold a host NumPy array (the seed's kernels take host indices),
never require grad, and are promoted to float32 when mixed with float tensors in arithmetic.

Differences from PyTorch, on purpose: float32 is the only floating dtype; reshape/view never
copy because every tensor is contiguous (so ``view`` is ``reshape``); ``x / c`` for a Python
number multiplies by float32(1/c) (within the division's contract but not always bitwise equal
to PyTorch's true division); comparisons (``x > 0``) return host boolean tensors.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Iterable, Sequence

import numpy as np

from . import autograd
from ._validate import MAX_FLOAT_ELEMENTS, expect_tensor, int64_indices, real_arg, type_name
from .errors import ArgumentError, AutogradError, DeviceError, DTypeError, OutOfMemoryError, ShapeError
from .runtime import primitives as P
from .runtime.buffer import Buffer
from .runtime.device import canonical_device, get_context
from .runtime.rng import default_generator

float32 = np.dtype(np.float32)
_new_object = object.__new__
int64 = np.dtype(np.int64)
bool_ = np.dtype(np.bool_)
_DTYPES = {"float32": float32, "float": float32, "int64": int64, "long": int64, "bool": bool_}


def canonical_dtype(op: str, dtype: Any) -> np.dtype | None:
    if dtype is None:
        return None
    if isinstance(dtype, str) and dtype in _DTYPES:
        return _DTYPES[dtype]
    try:
        d = np.dtype(dtype)
    except TypeError:
        raise DTypeError(f"{op}: unknown dtype {dtype!r}") from None
    if d.kind == "f":
        if d != float32:
            raise DTypeError(f"{op}: torchlean computes in float32 only, got dtype {d}")
        return float32
    if d.kind in "iu":
        return int64
    if d.kind == "b":
        return bool_
    raise DTypeError(f"{op}: unsupported dtype {d}")


class Tensor:
    """A float32 (or index/mask) tensor. Create with ``torchlean.tensor``, ``zeros``, ``randn`` ..."""

    __slots__ = ("_buf", "_host", "_shape", "_device", "requires_grad", "grad", "_node", "_retains_grad",
                 "__weakref__")
    __array_priority__ = 1000  # numpy scalars on the left defer to our operators

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("use torchlean.tensor(data, ...) or a factory such as torchlean.zeros(...)")

    # -- construction (internal) ---------------------------------------------------------
    @classmethod
    def _blank(cls, buf: Buffer | None, host: np.ndarray | None, shape: Sequence[int], device: str) -> "Tensor":
        t = object.__new__(cls)
        if buf is not None:
            buf._tensors += 1  # (ownership: runtime/buffer.py)
        t._buf = buf
        t._host = host
        t._shape = tuple(shape)
        t._device = device
        t.requires_grad = False
        t.grad = None
        t._node = None
        t._retains_grad = False
        return t

    @classmethod
    def _wrap(cls, buf: Buffer, shape: Sequence[int], requires_grad: bool = False) -> "Tensor":
        """A float tensor over ``buf`` (no copy)."""
        # _blank spelled out: this runs for every op's output, and the extra call and the
        # Buffer.device property cost more than the assignments
        t = _new_object(cls)
        buf._tensors += 1  # one more Tensor holds buf (ownership: runtime/buffer.py)
        t._buf = buf
        t._host = None
        t._shape = shape if type(shape) is tuple else tuple(shape)
        t._device = buf._ctx.name
        t.requires_grad = requires_grad
        t.grad = None
        t._node = None
        t._retains_grad = False
        return t

    @classmethod
    def _wrap_host(cls, arr: np.ndarray, device: str) -> "Tensor":
        """An index or mask tensor over a host array (no copy)."""
        return cls._blank(None, arr, arr.shape, device)

    # -- properties ----------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    def size(self, dim: int | None = None) -> Any:
        return self._shape if dim is None else self._shape[dim_index("size", dim, self.ndim)]

    @property
    def ndim(self) -> int:
        return len(self._shape)

    def dim(self) -> int:
        return len(self._shape)

    def numel(self) -> int:
        return math.prod(self._shape)

    @property
    def dtype(self) -> np.dtype:
        return float32 if self._buf is not None else self._host.dtype

    @property
    def device(self) -> str:
        return self._device

    @property
    def is_leaf(self) -> bool:
        return self._node is None

    @property
    def is_floating_point(self) -> bool:
        return self._buf is not None

    @property
    def buffer(self) -> Buffer:
        """The underlying flat float32 Buffer (layer 1)."""
        return self._float_buffer("buffer")

    def _float_buffer(self, op: str) -> Buffer:
        if self._buf is None:
            raise DTypeError(f"{op}: expected a float32 tensor, got an {self.dtype} tensor (use .float())")
        return self._buf

    # -- conversion ----------------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """A host copy of the values (float32, int64 or bool), shaped."""
        if self._buf is None:
            return self._host.copy()
        return self._buf.to_numpy().reshape(self._shape)

    def tolist(self) -> Any:
        return self.numpy().tolist()

    def item(self) -> Any:
        if self.numel() != 1:
            raise ShapeError(f"item: expected a one-element tensor, got shape {self._shape}")
        return self.numpy().reshape(-1)[0].item()

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __bool__(self) -> bool:
        if self.numel() != 1:
            raise ShapeError(f"bool: the truth value of a tensor with {self.numel()} elements is ambiguous")
        return bool(self.item())

    def __index__(self) -> int:
        if self._buf is not None or self.numel() != 1:
            raise DTypeError("__index__: only one-element integer tensors can be used as an index")
        return int(self.item())

    def __len__(self) -> int:
        if not self._shape:
            raise ShapeError("len: a 0-d tensor has no length")
        return self._shape[0]

    def __iter__(self) -> Iterable["Tensor"]:
        for i in range(len(self)):
            yield self[i]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)

    def float(self) -> "Tensor":
        if self._buf is not None:
            return self
        return Tensor._wrap(Buffer.from_numpy(self._host.astype(np.float32), self._device), self._shape)

    def long(self) -> "Tensor":
        return Tensor._wrap_host(np.asarray(self.numpy()).astype(np.int64), self._device)

    def bool(self) -> "Tensor":
        return Tensor._wrap_host(np.asarray(self.numpy()).astype(np.bool_), self._device)

    def cpu(self) -> "Tensor":
        return self.to("cpu")

    def cuda(self, device: int | None = None) -> "Tensor":
        return self.to("cuda" if device is None else f"cuda:{device}")

    def detach(self) -> "Tensor":
        """The same buffer, cut from the graph."""
        if self._buf is None:
            return self
        return Tensor._wrap(self._buf, self._shape)

    def requires_grad_(self, requires_grad: bool = True) -> "Tensor":
        if requires_grad and self._buf is None:
            raise DTypeError("requires_grad_: only float32 tensors can require gradients")
        if not self.is_leaf and not requires_grad:
            raise AutogradError("requires_grad_: cannot turn off requires_grad on a non-leaf tensor; use detach()")
        self.requires_grad = bool(requires_grad)
        return self

    def retain_grad(self) -> "Tensor":
        self._retains_grad = True
        return self

    def backward(self, gradient: "Tensor | None" = None, retain_graph: bool = False) -> None:
        if gradient is None or not self.requires_grad:
            autograd.backward(self, None, retain_graph)  # (raises when nothing was recorded)
            return
        if not isinstance(gradient, Tensor):
            raise AutogradError(f"backward: gradient must be a Tensor, got {type(gradient).__name__}")
        if gradient._shape != self._shape:
            raise ShapeError(f"backward: gradient shape {gradient._shape} does not match output shape {self._shape}")
        if gradient._device != self._device:
            raise DeviceError(f"backward: gradient on {gradient._device} but output on {self._device}")
        autograd.backward(self, gradient._float_buffer("backward"), retain_graph)

    def _accumulate_grad(self, g: Buffer) -> None:
        if self.grad is None:
            self.grad = Tensor._wrap(g, self._shape)
        else:
            self.grad = Tensor._wrap(P.add(self.grad._float_buffer("grad"), g), self._shape)

    # -- in-place updates (optimizers, under no_grad) --------------------------------------
    def _rebind(self, buf: Buffer) -> None:
        """Hold ``buf`` instead of the current buffer (what every in-place update and optimizer
        step does): the old buffer has one holder less, the new one one more (runtime/buffer.py)."""
        old = self._buf
        if old is not None:
            old._tensors -= 1
        buf._tensors += 1
        self._buf = buf

    def _assign(self, op: str, new: "Tensor") -> "Tensor":
        if autograd.is_grad_enabled() and (self.requires_grad or new.requires_grad):
            raise AutogradError(
                f"{op}: in-place update of a tensor that requires grad; wrap it in torchlean.no_grad()")
        if new.shape != self._shape:
            raise ShapeError(f"{op}: the result has shape {new.shape}, the tensor has shape {self._shape}")
        if new._device != self._device:
            raise DeviceError(f"{op}: the update is on {new._device}, the tensor on {self._device}")
        self._rebind(new._float_buffer(op))
        return self

    def zero_(self) -> "Tensor":
        return self._assign("zero_", zeros(*self._shape, device=self._device))

    def fill_(self, value: float) -> "Tensor":
        if isinstance(value, Tensor):
            if value.numel() != 1:
                raise ShapeError(f"fill_: expected a number or a one-element tensor, got shape {value.shape}")
            value = value.item()
        real_arg("fill_", "value", value)
        return self._assign("fill_", full(self._shape, value, device=self._device))

    def __repr__(self) -> str:
        vals = np.array2string(self.numpy(), precision=4, separator=", ", threshold=50)
        extra = ""
        if self._device != "cpu":
            extra += f", device='{self._device}'"
        if self._buf is None:
            extra += f", dtype={self.dtype}"
        if self._node is not None:
            extra += f", grad_fn=<{self._node.name}>"
        elif self.requires_grad:
            extra += ", requires_grad=True"
        return f"tensor({vals}{extra})"

    # Tensors hash by identity (as PyTorch's do). object's own identity hash, not a Python
    # function returning id(self): optimizers and the tape look tensors up in dicts every step.
    __hash__ = object.__hash__

    def __getstate__(self) -> Any:
        raise TypeError("Tensor: cannot be pickled; use .numpy()")


def dim_index(op: str, dim: Any, rank: int) -> int:
    if type(dim) is int and -rank <= dim < rank:  # the common case, without the ABC checks below
        return dim % rank
    from .errors import AxisError

    if isinstance(dim, bool) or not isinstance(dim, numbers.Integral):
        raise AxisError(f"{op}: dim must be an integer, got {dim!r}")
    d = int(dim)
    lo, hi = (-1, 0) if rank == 0 else (-rank, rank - 1)
    if not lo <= d <= hi:
        raise AxisError(f"{op}: dim {d} out of range for a tensor of rank {rank} (expected [{lo}, {hi}])")
    return d % rank if rank else 0


def inplace_operand(op: str, other: Any) -> None:
    """The other operand of an in-place update: a Tensor, a real number or array-like numbers."""
    if isinstance(other, (Tensor, float, int, np.ndarray, np.number, list, tuple)) and not isinstance(other, bool):
        return
    raise DTypeError(f"{op}: expected a Tensor or a number for other, got {type_name(other)}")


# -- factories ----------------------------------------------------------------------------
def _shape_arg(op: str, size: tuple, floats: bool = True) -> tuple[int, ...]:
    """The sizes of a factory call (ints or one sequence of ints), each >= 0; a float32 tensor
    (``floats``) holds at most 2**32 - 1 elements (one Buffer, whose size the seed keeps in a uint32)."""
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    out = []
    for s in size:
        if type(s) is not int and (isinstance(s, (bool, np.bool_)) or not isinstance(s, numbers.Integral)):
            raise ShapeError(f"{op}: sizes must be non-negative integers, got {size!r} ({type_name(s)} in it)")
        if s < 0:
            raise ShapeError(f"{op}: sizes must be non-negative integers, got {size!r}")
        out.append(int(s))
    if floats and math.prod(out) > MAX_FLOAT_ELEMENTS:
        raise ShapeError(f"{op}: size {tuple(out)} has {math.prod(out)} elements; a float32 tensor holds at most "
                         f"2**32 - 1")
    return tuple(out)


def _float_dtype(op: str, dtype: Any) -> None:
    """Factories of float tensors take dtype=None or float32 only."""
    if dtype is not None and canonical_dtype(op, dtype) != float32:
        raise DTypeError(f"{op}: creates float32 tensors only, got dtype={dtype!r}")


def _generator(op: str, generator: Any) -> Any:
    if generator is None:
        return default_generator
    if not hasattr(generator, "next_key"):
        raise ArgumentError(f"{op}: generator must be a torchlean.Generator or None, got {type_name(generator)}")
    return generator


def _host_int64(op: str, arr: np.ndarray) -> np.ndarray:
    """Integer (or bool) data as a new int64 array, refusing values that int64 cannot hold."""
    if arr.dtype.kind == "b":
        return arr.astype(np.int64)
    try:
        return np.array(int64_indices(op, "data", arr), dtype=np.int64)
    except (DTypeError, IndexError) as exc:
        raise ArgumentError(str(exc).replace("indices", "values")) from None


def tensor(data: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    """A new tensor copied from ``data`` (nested lists, NumPy arrays, scalars or a Tensor).

    Float data becomes float32; integer data int64 and booleans bool (index and mask tensors).
    """
    dev = canonical_device(device, "tensor")
    d = canonical_dtype("tensor", dtype)
    if isinstance(data, Tensor):
        data = data.numpy()
    if data is None or isinstance(data, (str, bytes)):
        raise DTypeError(f"tensor: data must be numbers (a scalar, nested lists or an array), got {type_name(data)}")
    try:
        arr = np.asarray(data)
    except (ValueError, TypeError) as exc:
        raise ShapeError(f"tensor: data is not a rectangular array of numbers ({exc})") from None
    except MemoryError:
        raise OutOfMemoryError("tensor: not enough host memory for the data") from None
    if arr.dtype == object:
        if all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in arr.reshape(-1)):
            _host_int64("tensor", arr)  # ints beyond 64 bits: the error names the value
        raise ShapeError("tensor: data is not a rectangular array of numbers (ragged or non-numeric)")
    if d is None:
        d = float32 if arr.dtype.kind in "fc" else (bool_ if arr.dtype.kind == "b" else int64)
        if arr.dtype.kind not in "fbiu":
            raise DTypeError(f"tensor: unsupported element type {arr.dtype}")
    if d == float32:
        if arr.dtype.kind == "c":
            raise DTypeError("tensor: complex data is not supported")
        get_context(dev, "tensor")
        t = Tensor._wrap(Buffer.from_numpy(arr, dev), arr.shape)
        if requires_grad:
            t.requires_grad = True
        return t
    if requires_grad:
        raise DTypeError(f"tensor: only float32 tensors can require gradients, got dtype {d}")
    get_context(dev, "tensor")
    if d == int64 and arr.dtype.kind in "iub":
        return Tensor._wrap_host(_host_int64("tensor", arr), dev)
    return Tensor._wrap_host(np.array(arr, dtype=d), dev)


def as_tensor(data: Any, device: Any = None) -> Tensor:
    if isinstance(data, Tensor):
        return data.to(device) if device is not None else data
    return tensor(data, device=device)


def full(size: Sequence[int], fill_value: float, device: Any = None, requires_grad: bool = False,
         dtype: Any = None) -> Tensor:
    if isinstance(size, numbers.Integral) and not isinstance(size, bool):
        size = (size,)
    elif not isinstance(size, (tuple, list)):
        raise ShapeError(f"full: size must be a sequence of non-negative integers, got {size!r} ({type_name(size)})")
    shape = _shape_arg("full", tuple(size))
    _float_dtype("full", dtype)
    real_arg("full", "fill_value", fill_value)
    buf = _filled(math.prod(shape), fill_value, device, "full")
    return Tensor._wrap(buf, shape, requires_grad)


def _filled(n: int, value: float, device: Any, op: str = "full") -> Buffer:
    from .runtime.buffer import full as buffer_full

    return buffer_full(n, value, canonical_device(device, op))


def zeros(*size: Any, device: Any = None, requires_grad: bool = False, dtype: Any = None) -> Tensor:
    shape = _shape_arg("zeros", size)
    _float_dtype("zeros", dtype)
    return Tensor._wrap(_filled(math.prod(shape), 0.0, device, "zeros"), shape, requires_grad)


def ones(*size: Any, device: Any = None, requires_grad: bool = False, dtype: Any = None) -> Tensor:
    shape = _shape_arg("ones", size)
    _float_dtype("ones", dtype)
    return Tensor._wrap(_filled(math.prod(shape), 1.0, device, "ones"), shape, requires_grad)


def zeros_like(t: Tensor, requires_grad: bool = False) -> Tensor:
    expect_tensor("zeros_like", "input", t, Tensor)
    return zeros(*t.shape, device=t.device, requires_grad=requires_grad)


def ones_like(t: Tensor, requires_grad: bool = False) -> Tensor:
    expect_tensor("ones_like", "input", t, Tensor)
    return ones(*t.shape, device=t.device, requires_grad=requires_grad)


def rand(*size: Any, device: Any = None, requires_grad: bool = False, generator: Any = None,
         dtype: Any = None) -> Tensor:
    """Uniform [0, 1) float32 (see ``rand_uniform``): the same bits on every device for the same seed."""
    shape = _shape_arg("rand", size)
    _float_dtype("rand", dtype)
    dev = canonical_device(device, "rand")
    key = _generator("rand", generator).next_key()
    return Tensor._wrap(P.rand_uniform(math.prod(shape), key, dev), shape, requires_grad)


def randn(*size: Any, device: Any = None, requires_grad: bool = False, generator: Any = None,
          dtype: Any = None) -> Tensor:
    """Standard normal float32 (see ``rand_normal``): the same bits on every device for the same seed."""
    shape = _shape_arg("randn", size)
    _float_dtype("randn", dtype)
    dev = canonical_device(device, "randn")
    key = _generator("randn", generator).next_key()
    return Tensor._wrap(P.rand_normal(math.prod(shape), key, dev), shape, requires_grad)


def bernoulli(p: Tensor, generator: Any = None) -> Tensor:
    """1.0 where float32(p) > u for one uniform draw u per element, else 0.0 (not differentiable).

    For a constant probability this equals ``bernoulli_mask`` bit for bit (same key, same u).
    """
    if not isinstance(p, Tensor):
        raise DTypeError(f"bernoulli: expected a tensor of probabilities, got {type(p).__name__}")
    pb = p._float_buffer("bernoulli")
    u = P.rand_uniform(pb.size, _generator("bernoulli", generator).next_key(), p.device)
    # sign(p - u) is 1 exactly where p > u (abs_bwd(x, 1) = sign(x)); relu keeps those 1s.
    ones_ = _filled(pb.size, 1.0, p.device)
    return Tensor._wrap(P.relu(P.abs_bwd(P.sub(pb, u), ones_)), p.shape)


def arange(start: float, end: float | None = None, step: float = 1, device: Any = None, dtype: Any = None) -> Tensor:
    """[start, end) in steps of ``step``: int64 (an index tensor) when all three are integers, else
    float32 (as PyTorch; ``dtype`` picks one). The length is checked before anything is allocated."""
    if end is None:
        start, end = 0, start
    vals = []
    for name, v in (("start", start), ("end", end), ("step", step)):
        if isinstance(v, Tensor):
            v = v.item()
        vals.append(real_arg("arange", name, v, finite=True) if not _plain_int(v) else int(v))
    start, end, step = vals
    for name, v in (("start", start), ("end", end), ("step", step)):
        if type(v) is int and not -(2**63) <= v < 2**63:
            raise ArgumentError(f"arange: {name}={v} does not fit in int64")
    if step == 0:
        raise ArgumentError("arange: step must be nonzero")
    if (end - start) * step < 0:
        raise ArgumentError(f"arange: the bounds start={start}, end={end} are inconsistent with the sign of step={step}")
    d = canonical_dtype("arange", dtype)
    ints = all(type(v) is int for v in vals)
    if d is None:
        d = int64 if ints else float32
    n = max(0, math.ceil((end - start) / step)) if not ints else max(0, -((start - end) // step))
    if d == float32 and n > MAX_FLOAT_ELEMENTS:
        raise ShapeError(f"arange: {n} elements; a float32 tensor holds at most 2**32 - 1")
    if d == int64 and not ints:
        raise DTypeError("arange: dtype int64 needs integer start, end and step")
    try:
        arr = np.arange(start, end, step, dtype=np.int64 if d == int64 else np.float64)
    except (MemoryError, ValueError):  # (NumPy's ValueError here: more bytes than an address space holds)
        raise OutOfMemoryError(f"arange: not enough host memory for {n} elements") from None
    return tensor(arr, device=device, dtype=d)


def _plain_int(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_))
