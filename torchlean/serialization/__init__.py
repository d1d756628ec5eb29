"""``torchlean.save`` / ``torchlean.load``: PyTorch's ``torch.save``/``torch.load`` for tensors,
state dicts, optimizer state dicts and nested containers of them, in files that cannot run code.

``save(obj, f)`` writes torchlean's format (native.py: a safetensors file whose metadata holds the
object's structure as JSON, with a SHA-256 digest), to a path (atomically: a crash leaves the old
file or the new one, never a mixture; see torchlean/_atomic_file.py) or to a writable binary file
object. Modules and optimizers themselves are refused with a pointer to ``state_dict()``.

``load(f, map_location=None, weights_only=None)`` reads

* torchlean's format (and any plain safetensors file, as an OrderedDict of tensors);
* PyTorch's zip format (``torch.save`` since 1.6), with PyTorch's ``weights_only=True`` semantics
  whatever ``weights_only`` says: tensors and plain containers load, anything else is an
  ``UnsafeFileError`` raised before it runs (torch_zip.py). float64 tensors are rounded to float32,
  float16/bfloat16 widened exactly (with one warning saying so); integer and bool tensors keep the
  dtypes torchlean has.

Both check the whole file before returning anything: a truncated or corrupt file raises
``SerializationError`` and leaves nothing half-loaded (``load`` changes no existing object: apply
the result with ``load_state_dict``). ``map_location`` follows PyTorch: None restores each tensor
on the device it was saved from (a CUDA tensor where CUDA is unavailable is a ``DeviceError``
suggesting ``map_location="cpu"``), a device moves everything there, a dict maps saved locations
to devices, a callable ``f(cpu_tensor, saved_location)`` returns the tensor to use (or None).

Tensors themselves refuse ``pickle`` (pickle would need to run code on load): use ``save``.
"""

from __future__ import annotations

import os
from typing import Any

from .._atomic_file import atomic_write
from . import native, torch_zip
from .common import Placer, SerializationError, UnsafeFileError

__all__ = ["save", "load", "SerializationError", "UnsafeFileError"]


def _write_all(f: Any, data: bytes) -> None:
    view = memoryview(data)
    for i in range(0, len(view), 16 << 20):
        f.write(view[i:i + (16 << 20)])


def save(obj: Any, f: Any, pickle_module: Any = None, pickle_protocol: Any = None,
         _use_new_zipfile_serialization: bool = True, _disable_byteorder_record: bool = False) -> None:
    """Write ``obj`` (tensors, NumPy arrays and containers of them and of plain values) to ``f``, a
    path or a writable binary file object. ``pickle_module`` and ``pickle_protocol`` are PyTorch's
    and have no effect here: nothing is pickled."""
    op = "save"
    if pickle_module is not None:
        raise SerializationError(f"{op}: pickle_module is not supported: torchlean's format pickles nothing")
    data = native.encode(obj, op)
    if hasattr(f, "write"):
        _write_all(f, data)
        return
    try:
        path = os.fspath(f)
    except TypeError:
        raise SerializationError(f"{op}: f must be a path or a writable binary file object, got "
                                 f"{type(f).__name__}") from None
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not path or os.path.isdir(path):
        raise SerializationError(f"{op}: {path!r} is not a file path (a directory or empty); nothing was written")
    atomic_write(path, data, _write_all)


def _read_bytes(op: str, f: Any) -> tuple[bytes, str]:
    if hasattr(f, "read"):
        data = f.read()
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise SerializationError(f"{op}: the file object returned {type(data).__name__}; open it in binary mode")
        return bytes(data), f"the file object {getattr(f, 'name', type(f).__name__)!r}"
    try:
        path = os.fspath(f)
    except TypeError:
        raise SerializationError(f"{op}: f must be a path or a readable binary file object, got "
                                 f"{type(f).__name__}") from None
    with open(path, "rb") as fh:
        return fh.read(), repr(os.fsdecode(path))


def load(f: Any, map_location: Any = None, pickle_module: Any = None, *, weights_only: Any = None,
         mmap: Any = None, **pickle_load_args: Any) -> Any:
    """Read what ``save`` (torchlean) or ``torch.save`` (PyTorch, zip format) wrote to ``f``; see
    the module docstring. ``weights_only`` is accepted: torchlean always loads as PyTorch's
    weights_only=True does. ``mmap`` is accepted (the file is read whole)."""
    op = "load"
    if pickle_module is not None:
        raise SerializationError(f"{op}: pickle_module is not supported: torchlean never unpickles with another "
                                 f"module")
    if weights_only not in (None, True, False):
        raise SerializationError(f"{op}: weights_only must be a bool or None, got {weights_only!r}")
    unknown = set(pickle_load_args) - {"encoding"}
    if unknown:
        raise SerializationError(f"{op}: unexpected keyword arguments {sorted(unknown)}")
    data, source = _read_bytes(op, f)
    placer = Placer(op, map_location, source)
    if torch_zip.is_torch_zip(data):
        out = torch_zip.decode(data, op, source, placer)
    elif native.is_safetensors(data):
        out = native.decode(data, op, source, placer)
    elif torch_zip.is_legacy_torch(data):
        raise SerializationError(f"{op}: {source} is in PyTorch's legacy format (before PyTorch 1.6), which "
                                 f"torchlean does not read: load it with PyTorch and save it again")
    else:
        raise SerializationError(f"{op}: {source} is neither a torchlean file nor a PyTorch file (truncated, or "
                                 f"another format?)")
    placer.warn()
    return out
