"""torchlean's own file format for ``save``/``load``: one safetensors file.

* Every tensor (and NumPy array) of the saved object is a safetensors tensor with its dtype and
  shape, named by where it sits in the object ("fc.weight" for a state dict entry,
  "state.0.exp_avg" inside an optimizer state dict; "#2" and so on make a repeated name unique).
  A flat state dict therefore reads back in PyTorch too: ``safetensors.torch.load_file(path)``.
* The object's structure is JSON in the safetensors metadata ("torchlean.tree"): every dict (its
  items as [key, value] pairs, so keys may be ints, floats, tuples ...), OrderedDict, tuple, set
  and tensor is a one-key JSON object naming its kind, a list is a JSON list, and numbers, strings,
  bools and None are themselves (a non-finite float is {"float": "inf"}). A tensor's object holds
  its safetensors name, its device and whether it requires grad or is a ``Parameter``; the same
  tensor object saved twice is stored once and loads as one object again.
* A SHA-256 digest over the format version, the JSON and every tensor's name, dtype, shape and
  bytes ("torchlean.sha256"): a bit flip, a truncation or an edit is an error on load.

Nothing in the file is code: loading parses JSON and copies raw arrays, so a file, whoever wrote
it, can never run anything.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import math
import numbers
from collections import OrderedDict
from typing import Any

import numpy as np

from ..runtime.device import device as device_type
from ..complex_tensor import ComplexTensor
from ..tensor import Tensor
from .common import Placer, SerializationError

__all__ = ["FORMAT", "encode", "decode", "is_safetensors"]

FORMAT = "torchlean.save"
VERSION = "1"
_FORMAT_KEY, _VERSION_KEY, _TREE_KEY, _DIGEST_KEY = ("torchlean.format", "torchlean.format_version",
                                                     "torchlean.tree", "torchlean.sha256")
_ARRAY_KINDS = "fiub"


def _refusal(op: str, v: Any, path: str) -> SerializationError:
    where = f" at {path!r}" if path else ""
    kind = type(v).__name__
    if hasattr(v, "state_dict") and hasattr(v, "parameters"):
        hint = f"save its state_dict() instead ({op} stores tensors and plain containers only, so that loading " \
               f"can never run code)"
    elif hasattr(v, "state_dict") and hasattr(v, "param_groups"):
        hint = "save optimizer.state_dict() instead"
    elif hasattr(v, "state_dict"):
        hint = "save its state_dict() instead"
    else:
        hint = ("it holds tensors, NumPy arrays, dicts (OrderedDict too), lists, tuples, sets, numbers, strings, "
                "bytes, bools, None and devices")
    return SerializationError(f"{op}: cannot store a {kind}{where}: {hint}")


class _Encoder:
    def __init__(self, op: str) -> None:
        self.op = op
        self.arrays: dict[str, np.ndarray] = {}
        self.names: dict[int, str] = {}  # id(tensor or array) -> its safetensors name
        self.keep: list[Any] = []  # keeps encoded objects alive, so their ids stay theirs
        self.active: set[int] = set()  # containers on the current path (a cycle is an error)

    def _name(self, path: str) -> str:
        base = path or "tensor"
        name, k = base, 1
        while name in self.arrays:
            k += 1
            name = f"{base}#{k}"
        return name

    def _array(self, v: Any, path: str) -> tuple[str, bool]:
        """(safetensors name, new) of a tensor or array, stored once per object."""
        key = id(v)
        if key in self.names:
            return self.names[key], False
        arr = v.numpy() if isinstance(v, Tensor) else np.asarray(v)
        if arr.dtype.kind not in _ARRAY_KINDS or arr.dtype.byteorder == ">":
            raise SerializationError(f"{self.op}: the array at {path!r} has dtype {arr.dtype}; the file stores "
                                     f"float, integer and bool arrays")
        name = self._name(path)
        self.arrays[name] = np.ascontiguousarray(arr).reshape(arr.shape)  # (0-d stays 0-d)
        self.names[key] = name
        self.keep.append(v)
        return name, True

    def __call__(self, v: Any, path: str = "") -> Any:
        if isinstance(v, device_type):  # (a str subclass)
            return {"device": str.__str__(v)}
        if v is None or isinstance(v, bool):
            return v
        if isinstance(v, str):
            return str.__str__(v)
        if isinstance(v, np.bool_):
            return bool(v)
        if isinstance(v, numbers.Integral):
            return int(v)
        if isinstance(v, (float, np.floating)):
            v = float(v)
            return v if math.isfinite(v) else {"float": repr(v)}
        if isinstance(v, ComplexTensor):  # its float32 real view (*shape, 2): view_as_real in a plain reader
            return {"complex": self(v.real_view(), path)}
        if isinstance(v, Tensor):
            name, _ = self._array(v, path)
            from ..nn.parameter import Parameter

            return {"tensor": name, "device": str(v.device), "requires_grad": bool(v.requires_grad),
                    "parameter": isinstance(v, Parameter)}
        if isinstance(v, np.ndarray):
            return {"ndarray": self._array(v, path)[0]}
        if isinstance(v, (bytes, bytearray)):
            return {"bytes" if isinstance(v, bytes) else "bytearray": base64.b64encode(bytes(v)).decode("ascii")}
        if isinstance(v, (list, tuple, dict, set, frozenset)):
            if id(v) in self.active:
                raise SerializationError(f"{self.op}: the object contains itself at {path!r} (a cycle); the file "
                                         f"stores trees")
            self.active.add(id(v))
            try:
                return self._container(v, path)
            finally:
                self.active.discard(id(v))
        raise _refusal(self.op, v, path)

    def _container(self, v: Any, path: str) -> Any:
        def sub(key: Any) -> str:
            return f"{path}.{key}" if path else str(key)

        if isinstance(v, list):
            return [self(x, sub(i)) for i, x in enumerate(v)]
        if isinstance(v, tuple):
            if hasattr(v, "_fields"):
                raise _refusal(self.op, v, path)
            return {"tuple": [self(x, sub(i)) for i, x in enumerate(v)]}
        if isinstance(v, (set, frozenset)):
            return {type(v).__name__: [self(x, sub(i)) for i, x in enumerate(v)]}
        items = [[self(k, sub(f"key{i}")), self(x, sub(k))] for i, (k, x) in enumerate(v.items())]
        return {"odict" if isinstance(v, OrderedDict) else "dict": items}


def _digest(version: str, tree: str, arrays: dict[str, np.ndarray]) -> str:
    """SHA-256 over the version, the JSON tree and every array's name, dtype, shape and bytes (in name
    order, each part length-prefixed), computed from the arrays rather than the file layout."""
    h = hashlib.sha256(b"torchlean save\0")

    def part(b: Any) -> None:
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)

    part(version.encode())
    part(tree.encode())
    for name in sorted(arrays):
        arr = arrays[name]
        part(json.dumps([name, arr.dtype.str, list(arr.shape)]).encode())
        part(np.ascontiguousarray(arr).reshape(-1).view(np.uint8))
    return h.hexdigest()


def encode(obj: Any, op: str = "save") -> bytes:
    """The file's bytes for ``obj``."""
    from safetensors.numpy import save as st_save

    enc = _Encoder(op)
    tree = json.dumps(enc(obj), allow_nan=False)
    return st_save(enc.arrays, metadata={_FORMAT_KEY: FORMAT, _VERSION_KEY: VERSION, _TREE_KEY: tree,
                                         _DIGEST_KEY: _digest(VERSION, tree, enc.arrays)})


def is_safetensors(data: bytes) -> bool:
    if len(data) < 10:
        return False
    n = int.from_bytes(data[:8], "little")
    return 2 <= n <= len(data) - 8 and data[8:9] == b"{"


def _read(op: str, source: str, data: bytes) -> tuple[dict[str, Any], dict[str, np.ndarray], list[str]]:
    """(metadata, arrays, names in header order); SerializationError for an unreadable file."""
    from safetensors.numpy import load as st_load

    try:
        arrays = st_load(data)
        header = json.loads(data[8:8 + int.from_bytes(data[:8], "little")])
        meta = header.get("__metadata__") or {}
        if not isinstance(meta, dict):
            raise ValueError("'__metadata__' is not a JSON object")
    except Exception as exc:  # noqa: BLE001  (safetensors raises its own error types)
        raise SerializationError(f"{op}: {source} is not a readable safetensors file (truncated or corrupt?): "
                                 f"{type(exc).__name__}: {exc}") from None
    return meta, arrays, [k for k in header if k != "__metadata__"]


class _Decoder:
    def __init__(self, op: str, source: str, arrays: dict[str, np.ndarray], placer: Placer) -> None:
        self.op, self.source, self.arrays, self.placer = op, source, arrays, placer
        self.made: dict[str, Any] = {}

    def bad(self, what: str) -> SerializationError:
        return SerializationError(f"{self.op}: {self.source} has a malformed structure ({what})")

    def array(self, name: Any) -> np.ndarray:
        if not isinstance(name, str) or name not in self.arrays:
            raise self.bad(f"it refers to tensor {name!r}, which the file does not contain")
        return self.arrays[name]

    def __call__(self, v: Any) -> Any:
        if v is None or isinstance(v, (bool, str, int, float)):
            return v
        if isinstance(v, list):
            return [self(x) for x in v]
        if not isinstance(v, dict) or len(v) == 0:
            raise self.bad(f"unexpected JSON value {v!r:.80}")
        if "tensor" in v:
            return self.tensor(v)
        if len(v) != 1:
            raise self.bad(f"unexpected JSON object with keys {sorted(v)}")
        (kind, x), = v.items()
        if kind in ("dict", "odict"):
            if not isinstance(x, list) or not all(isinstance(p, list) and len(p) == 2 for p in x):
                raise self.bad(f"a {kind} is not a list of [key, value] pairs")
            items = [(self.key(k), self(val)) for k, val in x]
            return OrderedDict(items) if kind == "odict" else dict(items)
        if kind in ("tuple", "set", "frozenset"):
            if not isinstance(x, list):
                raise self.bad(f"a {kind} is not a list")
            items = [self(e) for e in x]
            return {"tuple": tuple, "set": set, "frozenset": frozenset}[kind](self.hashable(items) if kind != "tuple"
                                                                              else items)
        if kind == "float" and x in ("inf", "-inf", "nan"):
            return float(x)
        if kind == "ndarray":
            return self.array(x).copy()
        if kind in ("bytes", "bytearray") and isinstance(x, str):
            try:
                raw = base64.b64decode(x.encode("ascii"), validate=True)
            except ValueError:
                raise self.bad("bytes that are not base64") from None
            return raw if kind == "bytes" else bytearray(raw)
        if kind == "device" and isinstance(x, str):
            return device_type(x)
        if kind == "complex" and isinstance(x, dict) and "tensor" in x:
            return self.complex(x)
        raise self.bad(f"unknown entry kind {kind!r}")

    def complex(self, x: dict[str, Any]) -> Any:
        from ..nn.parameter import ComplexParameter, Parameter

        r = self.tensor(x)
        if r.dtype.name != "float32" or r.ndim == 0 or r.shape[-1] != 2:
            raise self.bad(f"complex entry {x.get('tensor')!r} is not a float32 (..., 2) real view")
        z = ComplexTensor.from_real_view(r, "load")
        return ComplexParameter.of(z, r.requires_grad) if isinstance(r, Parameter) else z

    def hashable(self, items: list[Any]) -> list[Any]:
        try:
            for e in items:
                hash(e)
        except TypeError:
            raise self.bad("a set element is not hashable") from None
        return items

    def key(self, k: Any) -> Any:
        key = self(k)
        try:
            hash(key)
        except TypeError:
            raise self.bad(f"a dict key is not hashable ({type(key).__name__})") from None
        return key

    def tensor(self, v: dict[str, Any]) -> Any:
        name = v.get("tensor")
        if set(v) != {"tensor", "device", "requires_grad", "parameter"} or not isinstance(v["device"], str) \
                or not isinstance(v["requires_grad"], bool) or not isinstance(v["parameter"], bool):
            raise self.bad(f"tensor entry {name!r}")
        if name in self.made:
            return self.made[name]
        arr = self.array(name)
        dtype_name = arr.dtype.name
        if v["parameter"] and dtype_name not in ("float32",):
            raise self.bad(f"parameter {name!r} of dtype {dtype_name}")
        t = self.placer.make(arr, dtype_name, v["device"], v["requires_grad"] and not v["parameter"], name)
        if v["parameter"]:
            from ..nn.parameter import Parameter

            t = Parameter(t, v["requires_grad"])
        self.made[name] = t
        return t


def decode(data: bytes, op: str, source: str, placer: Placer) -> Any:
    """The object a torchlean file holds; a plain safetensors file (no torchlean metadata) loads as an
    OrderedDict of its tensors (CPU, or ``map_location``)."""
    meta, arrays, order = _read(op, source, data)
    if meta.get(_FORMAT_KEY) != FORMAT:
        if "torchlean.checkpoint" in meta:
            raise SerializationError(f"{op}: {source} is a training checkpoint: read it with "
                                     f"torchlean.load_checkpoint(path, model, optimizer, ...)")
        return OrderedDict((k, placer.make(arrays[k], arrays[k].dtype.name, "cpu", False, k)) for k in order
                           if k in arrays)
    version, tree, digest = meta.get(_VERSION_KEY), meta.get(_TREE_KEY), meta.get(_DIGEST_KEY)
    if version != VERSION:
        raise SerializationError(f"{op}: {source} has torchlean.save format version {version!r}; this torchlean "
                                 f"reads version {VERSION}")
    if not isinstance(tree, str) or not isinstance(digest, str) or not hmac.compare_digest(
            digest.encode(), _digest(version, tree, arrays).encode()):
        raise SerializationError(f"{op}: {source} does not match its SHA-256 digest: the file is corrupt or was "
                                 f"altered after it was written")
    try:
        parsed = json.loads(tree)
    except ValueError as exc:
        raise SerializationError(f"{op}: {source} has an unreadable structure: {exc}") from None
    return _Decoder(op, source, arrays, placer)(parsed)
