"""Reading the ``.pt`` files that PyTorch's ``torch.save`` writes (its zip format), as
``torch.load(weights_only=True)`` reads them: tensors and plain containers, nothing that runs code.

A PyTorch file is a zip archive: ``<name>/data.pkl`` (a pickle of the object, in which every
tensor's storage is a persistent id ("storage", storage type, key, location, element count)),
``<name>/data/<key>`` (each storage's raw bytes), ``<name>/byteorder`` and version entries.

The pickle is read by ``pickle.Unpickler`` with ``find_class`` restricted to an allowlist, the
approach the Python documentation gives for unpickling untrusted data ("Restricting Globals"): a
pickle can call only what ``find_class`` hands it, and it hands out only

* the tensor rebuilders (``torch._utils._rebuild_tensor_v2``, ``_rebuild_tensor``,
  ``_rebuild_parameter``, ``_rebuild_parameter_with_state``, ``torch._tensor._rebuild_from_type_v2``
  for plain tensors and parameters), here functions of this module that check their arguments
  (sizes, strides and offsets must lie inside the storage) and return inert records;
* the storage types (``torch.FloatStorage`` ...) as dtype markers, ``torch.Size`` (a tuple),
  ``torch.device`` (torchlean's), the dtype names (``torch.float32`` ... as strings);
* ``collections.OrderedDict`` (a subclass whose only extra is to keep PyTorch's ``_metadata``),
  ``set``, ``frozenset``, ``bytearray`` and ``_codecs.encode`` for latin-1 bytes (protocol 2).

Anything else (``os.system``, ``builtins.eval``, a model class, NumPy's reconstructors) is an
``UnsafeFileError`` raised when the pickle names it, before it could be called. The inert records
become torchlean tensors after the pickle has been read.
"""

from __future__ import annotations

import io
import numbers
import pickle
import zipfile
from collections import OrderedDict
from typing import Any

import numpy as np

from ..runtime.device import device as device_type
from .common import FLOAT_DTYPES, Placer, SerializationError, UnsafeFileError

__all__ = ["is_torch_zip", "is_legacy_torch", "decode"]

# storage type -> (dtype name, NumPy dtype it is stored as; bfloat16's bits are read as uint16)
_STORAGES = {
    "FloatStorage": ("float32", np.float32), "DoubleStorage": ("float64", np.float64),
    "HalfStorage": ("float16", np.float16), "BFloat16Storage": ("bfloat16", np.uint16),
    "LongStorage": ("int64", np.int64), "IntStorage": ("int32", np.int32), "ShortStorage": ("int16", np.int16),
    "CharStorage": ("int8", np.int8), "ByteStorage": ("uint8", np.uint8), "BoolStorage": ("bool", np.bool_),
    # complex tensors (the FNO programs' weights): complex64 tensors over float32 pairs
    "ComplexFloatStorage": ("complex64", np.complex64), "ComplexDoubleStorage": ("complex128", np.complex128),
}
_COMPLEX_DTYPES = ("complex64", "complex128")
_UNSUPPORTED_STORAGES = ("QInt8Storage", "QUInt8Storage", "QInt32Storage", "QUInt4x2Storage", "QUInt2x4Storage")
_TORCH_DTYPES = ("float32", "float", "float64", "double", "float16", "half", "bfloat16", "int64", "long", "int32",
                 "int", "int16", "short", "int8", "uint8", "bool", "complex64", "cfloat", "complex128", "cdouble")


def is_torch_zip(data: bytes) -> bool:
    return data[:4] == b"PK\x03\x04"


def is_legacy_torch(data: bytes) -> bool:
    """PyTorch's format before 1.6: a bare pickle stream (protocol 2) starting with a magic number."""
    return data[:2] == b"\x80\x02"


class _StorageType:
    __slots__ = ("name", "dtype_name", "np_dtype")

    def __init__(self, name: str) -> None:
        self.name = name
        self.dtype_name, self.np_dtype = _STORAGES.get(name, (None, None))

    def __setstate__(self, state: Any) -> None:
        raise pickle.UnpicklingError("a storage type cannot be given state")


class _Storage:
    __slots__ = ("array", "dtype_name", "location", "key")

    def __init__(self, array: np.ndarray, dtype_name: str, location: str, key: str) -> None:
        self.array, self.dtype_name, self.location, self.key = array, dtype_name, location, key

    def __setstate__(self, state: Any) -> None:
        raise pickle.UnpicklingError("a storage cannot be given state")


class _Loaded:
    """A tensor read from the file, made a torchlean tensor once the pickle is read."""

    __slots__ = ("array", "dtype_name", "location", "requires_grad", "parameter", "ident")

    def __init__(self, array: np.ndarray, dtype_name: str, location: str, requires_grad: bool, ident: tuple) -> None:
        self.array, self.dtype_name, self.location = array, dtype_name, location
        self.requires_grad, self.parameter, self.ident = requires_grad, False, ident

    def __setstate__(self, state: Any) -> None:
        raise pickle.UnpicklingError("a tensor cannot be given state here")


class _TypeMarker:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __setstate__(self, state: Any) -> None:
        raise pickle.UnpicklingError("a type cannot be given state")


_TENSOR_TYPE, _PARAMETER_TYPE = _TypeMarker("Tensor"), _TypeMarker("Parameter")


class _OrderedDict(OrderedDict):
    """``collections.OrderedDict`` as the pickle rebuilds it; BUILD may give it PyTorch's
    ``_metadata`` (a dict of plain values) and nothing else."""

    def __setstate__(self, state: Any) -> None:
        if not isinstance(state, dict) or not set(state) <= {"_metadata"}:
            raise pickle.UnpicklingError("an OrderedDict can only be given PyTorch's _metadata")
        self.metadata = state.get("_metadata")


def _ints(what: str, v: Any) -> tuple[int, ...]:
    if not isinstance(v, (tuple, list)) or not all(isinstance(x, numbers.Integral) and not isinstance(x, bool)
                                                   for x in v):
        raise pickle.UnpicklingError(f"a tensor's {what} is not a tuple of ints: {v!r:.80}")
    return tuple(int(x) for x in v)


def _rebuild_tensor(storage: Any, storage_offset: Any, size: Any, stride: Any, requires_grad: Any = False,
                    backward_hooks: Any = None, metadata: Any = None) -> _Loaded:
    if not isinstance(storage, _Storage):
        raise pickle.UnpicklingError(f"a tensor's storage is a {type(storage).__name__}, not a storage")
    size, stride = _ints("size", size), _ints("stride", stride)
    if not isinstance(storage_offset, numbers.Integral) or isinstance(storage_offset, bool):
        raise pickle.UnpicklingError(f"a tensor's storage offset is not an int: {storage_offset!r:.80}")
    offset = int(storage_offset)
    if len(size) != len(stride) or any(s < 0 for s in size) or any(s < 0 for s in stride) or offset < 0:
        raise pickle.UnpicklingError(f"a tensor has size {size}, stride {stride} and offset {offset}")
    arr = storage.array
    if 0 in size:
        out = np.zeros(size, dtype=arr.dtype)
    else:
        last = offset + sum((n - 1) * s for n, s in zip(size, stride))
        if last >= arr.size:  # would read past the storage: as_strided does not check
            raise pickle.UnpicklingError(f"a tensor (size {size}, stride {stride}, offset {offset}) reaches past its "
                                         f"storage of {arr.size} elements")
        item = arr.itemsize
        out = np.lib.stride_tricks.as_strided(arr[offset:], shape=size, strides=tuple(s * item for s in stride),
                                              writeable=False).copy()
    return _Loaded(out, storage.dtype_name, storage.location, bool(requires_grad),
                   (storage.key, offset, size, stride))


def _rebuild_tensor_v1(storage: Any, storage_offset: Any, size: Any, stride: Any) -> _Loaded:
    return _rebuild_tensor(storage, storage_offset, size, stride)


def _rebuild_parameter(data: Any, requires_grad: Any, backward_hooks: Any, state: Any = None) -> _Loaded:
    if not isinstance(data, _Loaded):
        raise pickle.UnpicklingError(f"a parameter's data is a {type(data).__name__}, not a tensor")
    if state not in (None, {}) and not (isinstance(state, (tuple, dict)) and not state):
        raise pickle.UnpicklingError("a parameter with extra Python state")
    out = _Loaded(data.array, data.dtype_name, data.location, bool(requires_grad), data.ident + ("parameter",))
    out.parameter = True
    return out


def _rebuild_from_type_v2(func: Any, new_type: Any, args: Any, state: Any) -> _Loaded:
    if func not in (_rebuild_tensor, _rebuild_tensor_v1, _rebuild_parameter) or \
            new_type not in (_TENSOR_TYPE, _PARAMETER_TYPE) or not isinstance(args, tuple):
        raise pickle.UnpicklingError("a tensor subclass or a tensor with Python attributes")
    out = func(*args)
    if state not in (None, {}) and not (isinstance(state, (tuple, dict)) and not any(state)):
        raise pickle.UnpicklingError("a tensor with Python attributes")
    if new_type is _PARAMETER_TYPE and not out.parameter:
        out = _rebuild_parameter(out, True, None)
    return out


def _size(*args: Any) -> tuple[int, ...]:
    return _ints("torch.Size", args[0] if args else ())


def _encode(obj: Any, encoding: Any = "utf-8") -> bytes:
    if not isinstance(obj, str) or encoding not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError("_codecs.encode is allowed for latin-1 bytes only")
    return obj.encode("latin-1")


_ALLOWED: dict[tuple[str, str], Any] = {
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor_v1,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    ("torch._tensor", "_rebuild_from_type_v2"): _rebuild_from_type_v2,
    ("torch", "Tensor"): _TENSOR_TYPE,
    ("torch.nn.parameter", "Parameter"): _PARAMETER_TYPE,
    ("torch", "Size"): _size,
    ("torch", "device"): device_type,
    ("collections", "OrderedDict"): _OrderedDict,
    ("builtins", "set"): set, ("__builtin__", "set"): set,
    ("builtins", "frozenset"): frozenset, ("__builtin__", "frozenset"): frozenset,
    ("builtins", "bytearray"): bytearray, ("__builtin__", "bytearray"): bytearray,
    ("_codecs", "encode"): _encode,
}
_ALLOWED.update({("torch", name): _StorageType(name) for name in _STORAGES})
_ALLOWED.update({("torch", name): f"torch.{name}" for name in _TORCH_DTYPES})


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: Any, op: str, source: str, zf: zipfile.ZipFile, prefix: str, byteorder: str) -> None:
        super().__init__(file, encoding="utf-8")
        self.op, self.source, self.zf, self.prefix, self.byteorder = op, source, zf, prefix, byteorder
        self.storages: dict[str, _Storage] = {}

    def find_class(self, module: str, name: str) -> Any:
        found = _ALLOWED.get((module, name))
        if found is not None:
            return found
        if module == "torch" and name in _UNSUPPORTED_STORAGES:
            raise SerializationError(f"{self.op}: {self.source} holds a {name} tensor; torchlean has float32, complex64, "
                                     f"integer and bool tensors only")
        raise UnsafeFileError(
            f"{self.op}: {self.source} refers to the Python global '{module}.{name}', which is not allowed: torchlean "
            f"reads tensors and plain containers from PyTorch files (as torch.load(weights_only=True)) and never "
            f"runs code from a file. If the file holds a pickled model or other objects, load it with PyTorch and "
            f"save the state_dict() of what you need")

    def persistent_load(self, pid: Any) -> _Storage:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise pickle.UnpicklingError(f"unexpected persistent id {pid!r:.80}")
        _, stype, key, location, numel = pid
        if not isinstance(stype, _StorageType) or stype.dtype_name is None or not isinstance(key, str) \
                or not isinstance(location, str) or not isinstance(numel, numbers.Integral) or numel < 0:
            raise pickle.UnpicklingError(f"unexpected storage reference {pid!r:.80}")
        if key in self.storages:
            return self.storages[key]
        try:
            raw = self.zf.read(f"{self.prefix}data/{key}")
        except KeyError:
            raise SerializationError(f"{self.op}: {self.source} lacks the storage {key!r} its pickle refers to "
                                     f"(truncated or corrupt?)") from None
        dt = np.dtype(stype.np_dtype).newbyteorder("<" if self.byteorder == "little" else ">")
        if len(raw) < int(numel) * dt.itemsize:
            raise SerializationError(f"{self.op}: {self.source}: storage {key!r} holds {len(raw)} bytes, "
                                     f"{int(numel) * dt.itemsize} expected (truncated or corrupt?)")
        arr = np.frombuffer(raw, dtype=dt, count=int(numel))
        if arr.dtype.byteorder not in ("=", "|") and arr.dtype != arr.dtype.newbyteorder("="):
            arr = arr.astype(arr.dtype.newbyteorder("="))
        if stype.dtype_name == "bfloat16":  # the top 16 bits of a float32: widening is exact
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        st = self.storages[key] = _Storage(arr, stype.dtype_name, location, key)
        return st


def _prefix(op: str, source: str, zf: zipfile.ZipFile) -> str:
    pkls = [n for n in zf.namelist() if n.endswith("data.pkl") and n.count("/") == 1]
    if len(pkls) != 1:
        raise SerializationError(f"{op}: {source} is a zip file but not a PyTorch save file (expected one "
                                 f"<name>/data.pkl entry, found {len(pkls)})")
    return pkls[0][: -len("data.pkl")]


def decode(data: bytes, op: str, source: str, placer: Placer) -> Any:
    """The object a PyTorch zip file holds, with its tensors as torchlean tensors."""
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
        prefix = _prefix(op, source, zf)
        byteorder = zf.read(f"{prefix}byteorder").decode().strip() if f"{prefix}byteorder" in zf.namelist() \
            else "little"
        if byteorder not in ("little", "big"):
            raise SerializationError(f"{op}: {source} names the byte order {byteorder!r}")
        pkl = zf.read(f"{prefix}data.pkl")
        obj = _Unpickler(io.BytesIO(pkl), op, source, zf, prefix, byteorder).load()
    except SerializationError:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, pickle.UnpicklingError, ValueError, TypeError,
            KeyError, IndexError, AttributeError, MemoryError, RecursionError, OSError) as exc:
        raise SerializationError(f"{op}: {source} is not a readable PyTorch file (truncated or corrupt?): "
                                 f"{type(exc).__name__}: {exc}") from None
    return _Converter(op, placer)(obj, "")


class _Converter:
    """The unpickled object with each ``_Loaded`` record made a torchlean tensor (a record met twice,
    a tensor saved twice in PyTorch, becomes one tensor)."""

    def __init__(self, op: str, placer: Placer) -> None:
        self.op, self.placer = op, placer
        self.made: dict[tuple, Any] = {}

    def __call__(self, v: Any, path: str) -> Any:
        def sub(key: Any) -> str:
            return f"{path}.{key}" if path else str(key)

        if isinstance(v, _Loaded):
            return self.tensor(v, path)
        if isinstance(v, _OrderedDict):
            out = OrderedDict((k, self(x, sub(k))) for k, x in v.items())
            if getattr(v, "metadata", None) is not None:
                out._metadata = v.metadata  # as PyTorch keeps it on state dicts
            return out
        if isinstance(v, dict):
            return {k: self(x, sub(k)) for k, x in v.items()}
        if isinstance(v, list):
            return [self(x, sub(i)) for i, x in enumerate(v)]
        if isinstance(v, tuple):
            return tuple(self(x, sub(i)) for i, x in enumerate(v))
        if isinstance(v, (_Storage, _StorageType, _TypeMarker)) or callable(v):
            raise SerializationError(f"{self.op}: the file holds a bare {type(v).__name__.strip('_')} at {path!r}, "
                                     f"which torchlean does not load (tensors and plain containers only)")
        return v

    def tensor(self, v: _Loaded, path: str) -> Any:
        made = self.made.get(v.ident)
        if made is not None:
            return made
        if v.parameter and v.dtype_name not in FLOAT_DTYPES + _COMPLEX_DTYPES:
            raise SerializationError(f"{self.op}: parameter {path!r} has dtype {v.dtype_name}")
        if v.dtype_name in _COMPLEX_DTYPES:
            t = self.complex_tensor(v, path)
        else:
            t = self.placer.make(v.array, v.dtype_name, v.location, v.requires_grad and not v.parameter, path)
        if v.parameter:
            from ..nn.parameter import Parameter

            t = Parameter(t, v.requires_grad)
        self.made[v.ident] = t
        return t

    def complex_tensor(self, v: _Loaded, path: str) -> Any:
        """A complex64 tensor over the float32 pairs of the values (complex128 rounded, with the
        float64 warning), placed like a float tensor."""
        from ..complex_tensor import ComplexTensor

        c = np.ascontiguousarray(v.array, dtype=np.complex64)
        pairs = c.view(np.float32).reshape(c.shape + (2,))
        real = self.placer.make(pairs, "float32" if v.dtype_name == "complex64" else "float64", v.location,
                                v.requires_grad and not v.parameter, path)
        return ComplexTensor.from_real_view(real, self.op)
