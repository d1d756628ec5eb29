"""The ``Tensor`` class and its factories: a Buffer and a shape, recorded on the tape.

This module sits below the ops (docs/architecture.md): it holds the tensor's data, properties,
conversions, gradient fields and the factories, and imports only the tape and the runtime. The
operators and methods that compute (``+``, ``@``, ``.sum()``, ``.reshape()``, ``.to()``,
``add_`` ...) call ops and are bound onto the class by ``torchlean._methods``, one layer up.

Float tensors are float32 Buffers on their device. Integer (int64, int32, int16, int8, uint8) and
bool tensors hold one array of their own dtype on their device (NumPy on "cpu", CuPy on "cuda":
runtime/arrays.py), never require grad, and keep their dtype through the ops that keep it in
PyTorch (ops/integer.py); PyTorch's promotion rules decide each result's dtype (dtypes.py).

Differences from PyTorch, on purpose: float32 is the only floating dtype; reshape/view never
copy because every tensor is contiguous (so ``view`` is ``reshape``); ``x / c`` for a Python
number multiplies by float32(1/c) (within the division's contract but not always bitwise equal
to PyTorch's true division); float16, bfloat16 and float64 are names only: creating or converting
to them raises DTypeError (``from_numpy`` and ``tensor`` of float64 data make float32 tensors).
"""

from __future__ import annotations

import math
import numbers
import weakref
from typing import Any, Iterable, Sequence

import numpy as np

from . import autograd, dtypes
from ._validate import MAX_FLOAT_ELEMENTS, expect_tensor, int64_indices, real_arg, type_name
from .errors import (ArgumentError, AutogradError, DeviceError, DTypeError, NotPicklableError, OutOfMemoryError,
                     ShapeError)
from .dtypes import as_dtype, bool_, float32, int64, of_array
from .runtime import arrays
from .runtime import primitives as P
from .runtime.buffer import Buffer, zeros as _zeros_buffer
from .runtime.device import canonical_device, device_of, get_context
from .runtime.rng import default_generator
from .size import Size

_Size, _new_size = Size, tuple.__new__  # (module globals: .shape is read by every op)

_new_object = object.__new__


def canonical_dtype(op: str, dtype: Any) -> dtypes.dtype | None:
    """``dtype`` as a torchlean dtype (None stays None); float16/bfloat16/float64 raise DTypeError."""
    return as_dtype(op, dtype)


class Tensor:
    """A float32 (or index/mask) tensor. Create with ``torchlean.tensor``, ``zeros``, ``randn`` ..."""

    __slots__ = ("_buf", "_arr", "_shape", "_device", "requires_grad", "grad", "_node", "_retains_grad",
                 "_data_of", "_mirror", "_pending", "__weakref__")  # (_pending: ops/pending.py)
    __array_priority__ = 1000  # numpy scalars on the left defer to our operators

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("use torchlean.tensor(data, ...) or a factory such as torchlean.zeros(...)")

    # -- construction (internal) ---------------------------------------------------------
    @classmethod
    def _blank(cls, buf: Buffer | None, arr: Any, shape: Sequence[int], device: str) -> "Tensor":
        t = object.__new__(cls)
        if buf is not None:
            buf._tensors += 1  # (ownership: runtime/buffer.py)
        t._buf = buf
        t._arr = arr
        t._shape = _new_size(_Size, shape)
        t._device = device
        t.requires_grad = False
        t.grad = None
        t._node = None
        t._retains_grad = False
        t._mirror = None
        return t

    @classmethod
    def _wrap(cls, buf: Buffer, shape: Sequence[int], requires_grad: bool = False) -> "Tensor":
        """A float tensor over ``buf`` (no copy)."""
        # _blank spelled out: this runs for every op's output, and the extra call and the
        # Buffer.device property cost more than the assignments
        t = _new_object(cls)
        buf._tensors += 1  # one more Tensor holds buf (ownership: runtime/buffer.py)
        t._buf = buf
        t._arr = None
        t._shape = shape if type(shape) is _Size else _new_size(_Size, shape)  # (torchlean.Size, a tuple)
        t._device = buf._ctx.name
        t.requires_grad = requires_grad
        t.grad = None
        t._node = None
        t._retains_grad = False
        return t

    @classmethod
    def _wrap_array(cls, arr: Any, device: str, host: np.ndarray | None = None) -> "Tensor":
        """An integer or bool tensor over ``arr`` (no copy): an array of ``device``'s array module
        (NumPy for "cpu", CuPy for "cuda"), kept in the ``_arr`` slot. ``host``: the same values on
        the host, when the caller has them (``host_mirror``)."""
        t = cls._blank(None, arr, arr.shape, device)
        if host is not None and host is not arr:
            t._mirror = (arr, host)
        return t

    def _host_mirror(self) -> np.ndarray | None:
        """The host copy of a device integer tensor's values, kept from where they came from (a
        ``.to(device)`` or a factory of host data): index primitives take host indices, and reading
        them back from the device would wait for the GPU on every embedding lookup and cross
        entropy. Valid while ``_arr`` is the array it mirrors (arrays are never written in place)."""
        m = getattr(self, "_mirror", None)
        return m[1] if m is not None and m[0] is self._arr else None

    # -- properties ----------------------------------------------------------------------
    @property
    def shape(self) -> Size:
        return self._shape  # a Size: _wrap and _blank store one

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
    def dtype(self) -> dtypes.dtype:
        return float32 if self._buf is not None else of_array(self._arr)

    @property
    def device(self) -> str:
        """A ``torchlean.device`` (a str subclass: compares equal to "cpu", "cuda:0" ...)."""
        return device_of(self._device)

    @property
    def is_leaf(self) -> bool:
        return self._node is None

    @property
    def grad_fn(self) -> "autograd.GradFn | None":
        """The op that made this tensor on the tape (None for leaves and tensors made without grad)."""
        return None if self._node is None else autograd.GradFn(self._node)

    def is_floating_point(self) -> bool:
        return self._buf is not None

    @property
    def is_cuda(self) -> bool:
        return self._device != "cpu"

    def element_size(self) -> int:
        return self.dtype.itemsize

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def data(self) -> "Tensor":
        """The same values cut from the graph (as ``detach()``), never requiring grad. As in
        PyTorch, an in-place update of it (``p.data.add_(g, alpha=-lr)``, ``m.weight.data.normal_()``)
        updates this tensor too, for as long as this tensor still holds the values it was taken
        from (``_rebind``); the update is not recorded on the tape."""
        if self._buf is None:
            t = Tensor._wrap_array(self._arr, self._device)
        else:
            t = Tensor._wrap(self._buf, self._shape)
        t._data_of = self
        return t

    @data.setter
    def data(self, value: "Tensor") -> None:
        """``p.data = t``: p holds t's values from now on (its shape too, as in PyTorch), keeping its
        gradient flag and leaving the tape alone."""
        if not isinstance(value, Tensor):
            raise DTypeError(f"data: expected a Tensor, got {type(value).__name__}")
        if (value._buf is None) != (self._buf is None):
            raise DTypeError(f"data: cannot assign a {value.dtype} tensor to a {self.dtype} tensor")
        if value._device != self._device:
            raise DeviceError(f"data: the new values are on {value._device}, the tensor on {self._device}")
        if self._buf is None:
            self._arr = value._arr
        else:
            self._rebind(value._buf)
        self._shape = value._shape

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
            host = self._host_mirror()
            return (arrays.to_host(self._arr) if host is None else host).copy()
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
            raise DTypeError(f"__index__: only one-element integer tensors can be used as an index, got a "
                             f"{self.dtype!r} tensor of shape {self._shape}")
        return int(self.item())

    def __format__(self, spec: str) -> str:
        if self.ndim == 0:
            return format(self.item(), spec)  # f"{loss:.4f}", as PyTorch formats 0-d tensors
        if spec:
            raise ShapeError(f"__format__: format spec {spec!r} needs a 0-d tensor (as in PyTorch), got shape "
                             f"{self._shape}; use .item() or .tolist()")
        return repr(self)

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
        return Tensor._wrap(arrays.float_buffer(self._arr, self._device), self._shape)

    def _as(self, op: str, d: dtypes.dtype) -> "Tensor":
        """This tensor converted to ``d`` (itself when it already is ``d``): PyTorch's casts (a float
        to an integer truncates toward zero; anything nonzero is True)."""
        if not d.supported:
            raise DTypeError(f"{op}: cannot convert to {d!r}: {dtypes.COMPUTE_NOTE}")
        if d is float32:
            return self.float()
        if self._buf is None:
            if self._arr.dtype == d.np:
                return self
            return Tensor._wrap_array(self._arr.astype(d.np), self._device)
        vals = arrays.buffer_array(self._buf, self._shape)
        if d is not bool_:
            xp = arrays.array_module(self._device)
            with np.errstate(invalid="ignore"):
                vals = xp.trunc(vals)
        with np.errstate(invalid="ignore"):
            return Tensor._wrap_array(vals.astype(d.np), self._device)

    def long(self) -> "Tensor":
        return self._as("long", int64)

    def int(self) -> "Tensor":
        return self._as("int", dtypes.int32)

    def short(self) -> "Tensor":
        return self._as("short", dtypes.int16)

    def char(self) -> "Tensor":
        return self._as("char", dtypes.int8)

    def byte(self) -> "Tensor":
        return self._as("byte", dtypes.uint8)

    def bool(self) -> "Tensor":
        return self._as("bool", bool_)

    def double(self) -> "Tensor":
        return self._as("double", dtypes.float64)

    def half(self) -> "Tensor":
        return self._as("half", dtypes.float16)

    def bfloat16(self) -> "Tensor":
        return self._as("bfloat16", dtypes.bfloat16)

    def type(self, dtype: Any = None) -> Any:
        """With no argument, the type name ("torchlean.LongTensor"); else ``to(dtype)``."""
        if dtype is None:
            names = {"float32": "Float", "int64": "Long", "int32": "Int", "int16": "Short", "int8": "Char",
                     "uint8": "Byte", "bool": "Bool"}
            return f"torchlean.{'cuda.' if self.is_cuda else ''}{names[self.dtype.name]}Tensor"
        return self._as("type", canonical_dtype("type", dtype))

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
        autograd.keep_owner(self)  # (the graph holds nodes, not tensors: the node keeps this one)
        return self

    def register_hook(self, hook: Any) -> Any:
        """``hook(grad)`` runs when this tensor's gradient is computed; a returned tensor replaces it."""
        if not self.requires_grad:
            raise AutogradError("register_hook: cannot register a hook on a tensor that does not require grad")
        return autograd.register_tensor_hook(self, hook, Tensor._wrap)

    def register_post_accumulate_grad_hook(self, hook: Any) -> Any:
        """``hook(self)`` runs after backward has accumulated a gradient into this leaf's ``.grad``."""
        if not self.requires_grad or self._node is not None:
            raise AutogradError("register_post_accumulate_grad_hook: only leaf tensors that require grad accumulate "
                                "a .grad (post-accumulate-grad hooks can only be registered on them)")
        return autograd.register_post_accumulate_hook(self, hook)

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
        base = getattr(self, "_data_of", None)  # a ``.data`` view: its tensor follows while it still shares
        if base is not None and base._buf is old and old is not None:
            base._rebind(buf)

    def _stand_in(self) -> "Tensor":
        """A tensor holding this one's current buffer, gradient flag and node: what an in-place update
        computes from and records as its parent, so that the tensor never becomes its own parent.
        One per version: an update computed from one stand-in and recorded over another would run
        the old node's VJP twice."""
        s = _stand_ins.get(id(self))
        if (s is None or s._buf is not self._buf or s._node is not self._node or s._shape != self._shape
                or s.requires_grad != self.requires_grad):  # (an id can be reused once a tensor is gone)
            s = Tensor._wrap(self._buf, self._shape, self.requires_grad)
            s._node = self._node
            _stand_ins[id(self)] = s
        return s

    def _check_inplace(self, op: str) -> None:
        """PyTorch's rule: while gradients are recorded, a leaf that requires grad refuses in-place
        updates (its ``.grad`` would no longer be the gradient of the values it holds)."""
        if self.requires_grad and self._node is None and autograd.is_grad_enabled():
            raise AutogradError(f"{op}: a leaf tensor that requires grad is used in an in-place operation (PyTorch "
                                f"refuses it too); wrap the update in torchlean.no_grad() or use an out-of-place op")

    def _assign(self, op: str, new: "Tensor", old: "Tensor | None" = None) -> "Tensor":
        """Make this tensor hold ``new``'s values, as PyTorch's in-place ops do under autograd: under
        no_grad (or when nothing requires grad) a rebind to ``new``'s buffer, nothing recorded;
        otherwise a recorded update: later uses differentiate through ``new``, uses recorded
        before keep the old value and node (autograd.record_inplace). ``old`` is the stand-in
        for the old value that ``new`` was computed from (``ops.select.snapshot``), if any."""
        if self._buf is None:
            return self._assign_array(op, new)
        self._check_inplace(op)
        if new.shape != self._shape:
            raise ShapeError(f"{op}: the result has shape {new.shape}, the tensor has shape {self._shape}")
        if new._device != self._device:
            raise DeviceError(f"{op}: the update is on {new._device}, the tensor on {self._device}")
        buf = new._float_buffer(op)
        if not (autograd.is_grad_enabled() and (self.requires_grad or new.requires_grad)):
            self._rebind(buf)
            return self
        if old is None or old is self:
            old = self._stand_in()
        self._rebind(buf)
        if new.requires_grad:  # (old is a parent with no gradient of its own: uses before the update reach it)
            autograd.record_inplace(op, self, (new, old), _pass_grad, old)
        else:  # values that do not depend on the graph: the old value's history gets zeros, as in PyTorch
            n, dev = self.numel(), self._device
            autograd.record_inplace(op, self, (old,), lambda g: (_zeros_buffer(n, dev),), old)
        return self

    def _assign_array(self, op: str, new: "Tensor") -> "Tensor":
        """An in-place update of an integer or bool tensor: ``new`` cast to this dtype, which must
        hold it (PyTorch: an int tensor cannot take a float result in place, a bool one an int)."""
        mine = self.dtype
        if dtypes.category(new.dtype) > dtypes.category(mine):
            raise DTypeError(f"{op}: the result has dtype {new.dtype!r}, which cannot be cast to the tensor's "
                             f"dtype {mine!r} in place")
        if new.shape != self._shape:
            raise ShapeError(f"{op}: the result has shape {new.shape}, the tensor has shape {self._shape}")
        if new._device != self._device:
            raise DeviceError(f"{op}: the update is on {new._device}, the tensor on {self._device}")
        arr = new._as(op, mine)._arr
        base = getattr(self, "_data_of", None)  # a ``.data`` view (see ``data``)
        if base is not None and base._arr is self._arr:
            base._arr = arr
        self._arr = arr
        return self

    def zero_(self) -> "Tensor":
        return self._assign("zero_", zeros(*self._shape, device=self._device, dtype=self.dtype))

    def fill_(self, value: float) -> "Tensor":
        if isinstance(value, Tensor):
            if value.numel() != 1:
                raise ShapeError(f"fill_: expected a number or a one-element tensor, got shape {value.shape}")
            value = value.item()
        if self._buf is None and isinstance(value, (bool, np.bool_, numbers.Real)):
            return self._assign("fill_", full(self._shape, value, device=self._device, dtype=self.dtype))
        real_arg("fill_", "value", value)
        return self._assign("fill_", full(self._shape, value, device=self._device, dtype=float32))

    def __repr__(self) -> str:
        vals = np.array2string(self.numpy(), separator=", ", **print_options)
        extra = ""
        if self._device != "cpu":
            extra += f", device='{self._device}'"
        if self._buf is None and self._arr.dtype != np.int64 and self._arr.dtype != np.bool_:
            extra += f", dtype={self.dtype!r}"  # (int64 and bool go without, as PyTorch prints them)
        if self._node is not None:
            extra += f", grad_fn=<{self._node.name}>"
        elif self.requires_grad:
            extra += ", requires_grad=True"
        return f"tensor({vals}{extra})"

    # Tensors hash by identity (as PyTorch's do). object's own identity hash, not a Python
    # function returning id(self): optimizers and the tape look tensors up in dicts every step.
    __hash__ = object.__hash__

    def __reduce_ex__(self, protocol: Any) -> Any:
        # A pickled tensor could only be read back by unpickling, which runs code named in the file.
        raise NotPicklableError("pickle: a torchlean Tensor cannot be pickled (reading a pickle back can run "
                                "arbitrary code); save it with torchlean.save(obj, path) and read it with "
                                "torchlean.load(path), or pickle t.numpy()")

    def __deepcopy__(self, memo: dict) -> "Tensor":
        """A new leaf with a copy of the values (and of ``.grad``), as PyTorch's deepcopy."""
        if self._node is not None:
            raise AutogradError("deepcopy: only leaf tensors (created by the user, not by an op that requires grad) "
                                "can be deep-copied; use t.detach().clone()")
        new = tensor(self.numpy(), dtype=self.dtype, device=self._device, requires_grad=False)
        if type(self) is not Tensor:  # a Parameter: its own constructor shares new's data
            new = type(self).__new__(type(self), new, self.requires_grad)
        else:
            new.requires_grad = self.requires_grad
        memo[id(self)] = new
        if self.grad is not None:
            new.grad = self.grad.__deepcopy__(memo)
        return new


# What ``repr`` shows (np.array2string's arguments); ``torchlean.set_printoptions`` changes them.
print_options: dict[str, Any] = {"precision": 4, "threshold": 50, "edgeitems": 3, "max_line_width": 75}


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


# The stand-in of each float tensor's current version, by id(tensor) (Tensor._stand_in checks that it
# still matches); held weakly: the tape keeps the ones it needs alive.
_stand_ins: "weakref.WeakValueDictionary[int, Tensor]" = weakref.WeakValueDictionary()


def _pass_grad(g: Buffer) -> tuple[Buffer, None]:
    return (g, None)


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


def _data_array(op: str, data: Any) -> np.ndarray:
    if isinstance(data, Tensor):
        return data.numpy()
    if data is None or isinstance(data, (str, bytes)):
        raise DTypeError(f"{op}: data must be numbers (a scalar, nested lists or an array), got {type_name(data)}")
    try:
        arr = np.asarray(data)
    except (ValueError, TypeError) as exc:
        raise ShapeError(f"{op}: data is not a rectangular array of numbers ({exc})") from None
    except MemoryError:
        raise OutOfMemoryError(f"{op}: not enough host memory for the data") from None
    if arr.dtype == object:
        if all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in arr.reshape(-1)):
            _host_int64(op, arr)  # ints beyond 64 bits: the error names the value
        raise ShapeError(f"{op}: data is not a rectangular array of numbers (ragged or non-numeric)")
    if arr.dtype.kind not in "fbiu":
        raise DTypeError(f"{op}: unsupported element type {arr.dtype}" + (
            " (complex data is not supported)" if arr.dtype.kind == "c" else ""))
    return arr


def _inferred_dtype(arr: np.ndarray) -> dtypes.dtype:
    """PyTorch's dtype for data: floats float32 (the default dtype; float64 and float16 data too),
    bools bool, integers their own dtype when torchlean has it, else int64 (values checked)."""
    k = arr.dtype.kind
    if k == "f":
        return float32
    if k == "b":
        return bool_
    d = dtypes.from_numpy_dtype(arr.dtype)
    return d if d is not None else int64


def _from_array(op: str, arr: np.ndarray, d: dtypes.dtype, dev: str, requires_grad: bool) -> Tensor:
    get_context(dev, op)
    if d is float32:
        t = Tensor._wrap(Buffer.from_numpy(arr, dev), arr.shape)
        if requires_grad:
            t.requires_grad = True
        return t
    if requires_grad:
        raise DTypeError(f"{op}: only floating point tensors can require gradients, got dtype {d!r}")
    if arr.dtype.kind in "iub" and d is int64:
        host = _host_int64(op, arr)
    elif arr.dtype.kind == "f" and d is not bool_:
        with np.errstate(invalid="ignore"):
            host = np.trunc(arr).astype(d.np)  # truncation toward zero, as PyTorch casts
    else:
        host = np.array(arr, dtype=d.np)
    return Tensor._wrap_array(arrays.from_host(host, dev) if dev != "cpu" else host, dev, host)


def tensor(data: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    """A new tensor copied from ``data`` (nested lists, NumPy arrays, scalars or a Tensor).

    Float data becomes float32 (float64 data too: torchlean computes in float32); integer data
    keeps its dtype (Python ints: int64); booleans bool.
    """
    dev = canonical_device(device, "tensor")
    d = canonical_dtype("tensor", dtype)
    arr = _data_array("tensor", data)
    return _from_array("tensor", arr, _inferred_dtype(arr) if d is None else d, dev, requires_grad)


def from_numpy(a: Any) -> Tensor:
    """A CPU tensor with the values of the NumPy array ``a``: integer and bool arrays keep their dtype;
    float64 and float16 arrays become float32 (torchlean computes in float32; PyTorch would keep
    float64). Unlike PyTorch's, the tensor is a copy: writing ``a`` later does not change it."""
    if not isinstance(a, np.ndarray):
        raise DTypeError(f"from_numpy: expected a numpy.ndarray, got {type_name(a)}")
    arr = _data_array("from_numpy", a)
    return _from_array("from_numpy", arr, _inferred_dtype(arr), "cpu", False)


def as_tensor(data: Any, dtype: Any = None, device: Any = None) -> Tensor:
    if isinstance(data, Tensor):
        out = data if dtype is None else data._as("as_tensor", canonical_dtype("as_tensor", dtype))
        return out.to(device) if device is not None else out
    return tensor(data, dtype=dtype, device=device)


def _filled_array(op: str, shape: tuple, value: Any, d: dtypes.dtype, device: Any,
                  requires_grad: bool) -> Tensor:
    """A non-float tensor of ``shape`` filled with ``value`` (cast as PyTorch casts it)."""
    if requires_grad:
        raise DTypeError(f"{op}: only floating point tensors can require gradients, got dtype {d!r}")
    dev = canonical_device(device, op)
    xp = arrays.array_module(dev)
    with arrays.on_device(dev), np.errstate(invalid="ignore", over="ignore"):
        if isinstance(value, float) and d is not bool_:
            value = math.trunc(value) if math.isfinite(value) else 0
        if type(value) is int and d is not bool_:
            value = np.array(value, dtype=np.int64).astype(d.np)  # wraps like PyTorch (uint8 256 -> 0)
        return Tensor._wrap_array(xp.full(shape, value, dtype=d.np), dev)


def full(size: Sequence[int], fill_value: float, device: Any = None, requires_grad: bool = False,
         dtype: Any = None) -> Tensor:
    """``size`` filled with ``fill_value``; without ``dtype``, the value's own (PyTorch: a bool gives
    bool, an int int64, a float float32)."""
    if isinstance(size, numbers.Integral) and not isinstance(size, bool):
        size = (size,)
    elif not isinstance(size, (tuple, list)):
        raise ShapeError(f"full: size must be a sequence of non-negative integers, got {size!r} ({type_name(size)})")
    if isinstance(fill_value, Tensor):
        fill_value = fill_value.item()
    d = canonical_dtype("full", dtype)
    if d is None and (isinstance(fill_value, (bool, np.bool_, numbers.Integral))):
        d = dtypes.scalar_dtype(fill_value)
    if d is not None and d is not float32:
        if isinstance(fill_value, (bool, np.bool_)):
            fill_value = bool(fill_value)
        elif isinstance(fill_value, numbers.Real):
            fill_value = int(fill_value) if isinstance(fill_value, numbers.Integral) else float(fill_value)
        else:
            raise ArgumentError(f"full: fill_value must be a number, got {fill_value!r} ({type_name(fill_value)})")
        return _filled_array("full", _shape_arg("full", tuple(size), False), fill_value, d, device, requires_grad)
    shape = _shape_arg("full", tuple(size))
    if isinstance(fill_value, (bool, np.bool_)):
        fill_value = float(fill_value)
    real_arg("full", "fill_value", fill_value)
    buf = _filled(math.prod(shape), fill_value, device, "full")
    return Tensor._wrap(buf, shape, requires_grad)


def _filled(n: int, value: float, device: Any, op: str = "full") -> Buffer:
    from .runtime.buffer import full as buffer_full

    return buffer_full(n, value, canonical_device(device, op))


def zeros(*size: Any, device: Any = None, requires_grad: bool = False, dtype: Any = None) -> Tensor:
    if dtype is not None and dtype is not float32:
        d = canonical_dtype("zeros", dtype)
        if d is not float32:
            return _filled_array("zeros", _shape_arg("zeros", size, False), 0, d, device, requires_grad)
    shape = _shape_arg("zeros", size)
    return Tensor._wrap(_filled(math.prod(shape), 0.0, device, "zeros"), shape, requires_grad)


def ones(*size: Any, device: Any = None, requires_grad: bool = False, dtype: Any = None) -> Tensor:
    if dtype is not None and dtype is not float32:
        d = canonical_dtype("ones", dtype)
        if d is not float32:
            return _filled_array("ones", _shape_arg("ones", size, False), 1, d, device, requires_grad)
    shape = _shape_arg("ones", size)
    return Tensor._wrap(_filled(math.prod(shape), 1.0, device, "ones"), shape, requires_grad)


def empty(*size: Any, device: Any = None, requires_grad: bool = False, dtype: Any = None) -> Tensor:
    """Zeros (PyTorch leaves the values unset; torchlean's are defined)."""
    return zeros(*size, device=device, requires_grad=requires_grad, dtype=dtype)


def _like(op: str, t: Tensor, dtype: Any, device: Any) -> tuple[Any, Any]:
    expect_tensor(op, "input", t, Tensor)
    return (t.dtype if dtype is None else dtype), (t.device if device is None else device)


def zeros_like(t: Tensor, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    d, dev = _like("zeros_like", t, dtype, device)
    return zeros(*t.shape, device=dev, requires_grad=requires_grad, dtype=d)


def ones_like(t: Tensor, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    d, dev = _like("ones_like", t, dtype, device)
    return ones(*t.shape, device=dev, requires_grad=requires_grad, dtype=d)


def empty_like(t: Tensor, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    d, dev = _like("empty_like", t, dtype, device)
    return zeros(*t.shape, device=dev, requires_grad=requires_grad, dtype=d)


def full_like(t: Tensor, fill_value: Any, dtype: Any = None, device: Any = None,
              requires_grad: bool = False) -> Tensor:
    d, dev = _like("full_like", t, dtype, device)
    return full(t.shape, fill_value, device=dev, requires_grad=requires_grad, dtype=d)


def randint(*args: Any, size: Any = None, generator: Any = None, dtype: Any = None, device: Any = None,
            requires_grad: bool = False) -> Tensor:
    """``randint(high, size)`` or ``randint(low, high, size)``: integers uniform in [low, high), int64
    unless ``dtype`` says otherwise, drawn from torchlean's counter RNG (the same values on every
    device for one seed; not PyTorch's stream). Each value is floor(low + u * (high - low)) for one
    float32 uniform u, so ranges wider than 2**24 do not reach every integer."""
    if size is None and args and isinstance(args[-1], (tuple, list)):
        args, size = args[:-1], args[-1]
    if size is None or len(args) not in (1, 2):
        raise ArgumentError("randint: expected randint(high, size) or randint(low, high, size)")
    low, high = (0, args[0]) if len(args) == 1 else args
    low, high = (int(v.item()) if isinstance(v, Tensor) else v for v in (low, high))
    for name, v in (("low", low), ("high", high)):
        if not _plain_int(v):
            raise ArgumentError(f"randint: {name} must be an integer, got {v!r} ({type_name(v)})")
    if high <= low:
        raise ArgumentError(f"randint: expected low < high, got low={low}, high={high}")
    d = int64 if dtype is None else canonical_dtype("randint", dtype)
    shape = _shape_arg("randint", tuple(size))
    dev = canonical_device(device, "randint")
    key = _generator("randint", generator).next_key()
    u = P.rand_uniform(math.prod(shape), key, dev).to_numpy().astype(np.float64)
    vals = np.minimum(np.floor(low + u * (high - low)), high - 1).astype(np.int64).reshape(shape)
    if d is float32:
        return tensor(vals, device=dev, requires_grad=requires_grad)
    return _from_array("randint", vals, d, dev, requires_grad)


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
    if d is float32 and n > MAX_FLOAT_ELEMENTS:
        raise ShapeError(f"arange: {n} elements; a float32 tensor holds at most 2**32 - 1")
    if d is not float32 and not ints:
        raise DTypeError(f"arange: dtype {d!r} needs integer start, end and step")
    try:
        arr = np.arange(start, end, step, dtype=np.float64 if d is float32 else np.int64)
    except (MemoryError, ValueError):  # (NumPy's ValueError here: more bytes than an address space holds)
        raise OutOfMemoryError(f"arange: not enough host memory for {n} elements") from None
    return tensor(arr, device=device, dtype=d)


def _plain_int(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_))
