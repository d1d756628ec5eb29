"""Training checkpoints in one safetensors file, written atomically.

``save_checkpoint(path, model, optimizer=None, scheduler=None, step=0, extra=None)`` writes

* the model's state dict, each entry a safetensors tensor under its own dotted name (float32
  parameters and buffers; int64/bool buffers such as ``num_batches_tracked`` keep their dtype),
  so ``safetensors.torch.load_file(path)`` gives a PyTorch-loadable state dict plus a few extra
  entries under ``optimizer/``, ``scheduler/`` and ``extra/`` (names with a "/", which a module
  state dict never has);
* the optimizer's ``state_dict()``: its tensors (``exp_avg``, ``momentum_buffer``, ``step`` ...)
  as tensors named ``optimizer/state.<param index>.<key>``, the rest (param_groups, scalars) as
  JSON in the safetensors metadata, where each tensor is a ``{"__tensor__": name}`` reference;
* the scheduler's ``state_dict()`` the same way (JSON, tensors by reference);
* the default generator's (seed, counter) (``torchlean.get_rng_state``), ``step``, ``extra``
  (JSON values, tuples, NumPy arrays and torchlean tensors) and the format version.

All tensors are saved from host copies, so a CUDA model saves the same file as a CPU one;
loading puts each tensor on the device of the parameter it belongs to.

Atomicity: the bytes go to a temporary file in the target's directory, which is flushed and
``fsync``-ed, then ``os.replace``-d onto the target (and the directory is fsync-ed where the OS
allows), so a crash at any moment leaves either the previous checkpoint or the new one, never a
mixture. On an ordinary error the temporary file is removed; a process killed mid-save may leave
a ``.<name>.<random>.tmp`` file behind (never read by ``load_checkpoint``; delete at will).

``load_checkpoint`` reads and checks everything (format version, keys, shapes, optimizer and
scheduler kinds, parameter counts) before changing any object, so a bad checkpoint changes
nothing; problems raise ``CheckpointError`` subclasses that name the offending key.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import secrets
from typing import Any

import numpy as np

from .errors import ArgumentError, ShapeError, TorchLeanError
from .runtime.rng import get_rng_state, set_rng_state
from .tensor import Tensor

__all__ = ["save_checkpoint", "load_checkpoint", "CheckpointError", "CheckpointFormatError",
           "CheckpointMismatchError", "FORMAT_VERSION"]

FORMAT_VERSION = 1
_META_KEY = "torchlean.checkpoint"
_VERSION_KEY = "torchlean.format_version"
_CHUNK = 16 << 20


class CheckpointError(TorchLeanError, ValueError):
    """A checkpoint that cannot be written or loaded."""


class CheckpointFormatError(CheckpointError):
    """Not a torchlean checkpoint, a truncated/corrupt file, or an unsupported format version."""


class CheckpointMismatchError(CheckpointError, ShapeError):
    """The checkpoint does not fit the objects it is loaded into (keys, shapes, kinds, counts)."""


# -- JSON encoding with tensors by reference ------------------------------------------------
def _host_array(what: str, path: str, v: Any) -> np.ndarray:
    if isinstance(v, Tensor):
        arr = v.numpy()
    else:
        arr = np.asarray(v)
    if arr.dtype.kind == "f" and arr.dtype != np.float32:
        arr = arr.astype(np.float32)
    if arr.dtype.kind not in "fiub":
        raise ArgumentError(f"save_checkpoint: {what} entry {path!r} has dtype {arr.dtype}; only float32, integer "
                            f"and bool arrays can be stored")
    return np.ascontiguousarray(arr).reshape(arr.shape)  # ascontiguousarray alone makes 0-d arrays 1-d


class _Encoder:
    def __init__(self, what: str, prefix: str, tensors: dict[str, np.ndarray]) -> None:
        self.what, self.prefix, self.tensors = what, prefix, tensors

    def __call__(self, v: Any, path: str) -> Any:
        if v is None or isinstance(v, (bool, str)):
            return v
        if isinstance(v, np.bool_):
            return bool(v)
        if isinstance(v, numbers.Integral):
            return int(v)
        if isinstance(v, float) or isinstance(v, np.floating):
            v = float(v)
            return v if math.isfinite(v) else {"__float__": repr(v)}
        if isinstance(v, (Tensor, np.ndarray)):
            name = f"{self.prefix}{path}"
            k = 1
            while name in self.tensors:  # a path with dots could collide; keep names unique
                name = f"{self.prefix}{path}#{k}"
                k += 1
            self.tensors[name] = _host_array(self.what, path, v)
            return {"__tensor__": name, "kind": "torchlean" if isinstance(v, Tensor) else "numpy"}
        if isinstance(v, tuple):
            return {"__tuple__": [self(x, f"{path}.{i}") for i, x in enumerate(v)]}
        if isinstance(v, list):
            return [self(x, f"{path}.{i}") for i, x in enumerate(v)]
        if isinstance(v, dict):
            if all(isinstance(k, str) and not k.startswith("__") for k in v):
                return {k: self(x, f"{path}.{k}" if path else k) for k, x in v.items()}
            return {"__items__": [[self(k, f"{path}.key{i}"), self(x, f"{path}.{k}" if path else str(k))]
                                  for i, (k, x) in enumerate(v.items())]}
        raise ArgumentError(f"save_checkpoint: {self.what} entry {path!r} is a {type(v).__name__}, which a "
                            f"checkpoint cannot store (JSON values, tuples, NumPy arrays and tensors only)")


def _decode(v: Any, tensors: dict[str, np.ndarray], torchlean_tensors: bool) -> Any:
    if isinstance(v, list):
        return [_decode(x, tensors, torchlean_tensors) for x in v]
    if not isinstance(v, dict):
        return v
    if "__tensor__" in v:
        name = v["__tensor__"]
        if name not in tensors:
            raise CheckpointFormatError(f"load_checkpoint: the metadata refers to tensor {name!r}, which the file "
                                        f"does not contain")
        arr = tensors[name]
        if torchlean_tensors and v.get("kind") == "torchlean":
            from .tensor import tensor

            return tensor(arr)
        return arr
    if "__float__" in v:
        return float(v["__float__"])
    if "__tuple__" in v:
        return tuple(_decode(x, tensors, torchlean_tensors) for x in v["__tuple__"])
    def dec(x: Any) -> Any:
        return _decode(x, tensors, torchlean_tensors)

    if "__items__" in v:
        return {dec(k): dec(x) for k, x in v["__items__"]}
    return {k: dec(x) for k, x in v.items()}


# -- atomic file writing ---------------------------------------------------------------------
def _write_all(f: Any, data: bytes) -> None:
    """Write ``data`` to the open file in chunks (a separate function so tests can interrupt it)."""
    view = memoryview(data)
    for i in range(0, len(view), _CHUNK):
        f.write(view[i:i + _CHUNK])


def _fsync_dir(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # e.g. Windows cannot open directories
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _atomic_write(path: str, data: bytes) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            _write_all(f, data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(directory)


# -- save -------------------------------------------------------------------------------------
def _check_step(op: str, step: Any) -> int:
    if isinstance(step, bool) or not isinstance(step, numbers.Integral) or int(step) < 0:
        raise ArgumentError(f"{op}: step must be a non-negative integer, got {step!r}")
    return int(step)


def save_checkpoint(path: Any, model: Any, optimizer: Any = None, scheduler: Any = None, step: int = 0,
                    extra: Any = None) -> None:
    """Write model (+ optimizer, scheduler) state, the RNG state, ``step`` and ``extra`` to ``path``.

    ``model`` is a Module (its ``state_dict()`` is saved) or a state dict itself. ``extra`` is any
    JSON-like value (dicts, lists, tuples, numbers, strings, None) that may also hold NumPy arrays
    and torchlean tensors; it comes back from ``load_checkpoint`` as it went in (tensors as CPU
    tensors). The write is atomic (see the module docstring).
    """
    from safetensors.numpy import save as st_save

    op = "save_checkpoint"
    path = os.fspath(path)
    step = _check_step(op, step)
    sd = model.state_dict() if hasattr(model, "state_dict") else model
    if not hasattr(sd, "items"):
        raise ArgumentError(f"{op}: model must be a Module or a state dict, got {type(model).__name__}")
    tensors: dict[str, np.ndarray] = {}
    model_keys = []
    for k, v in sd.items():
        if not isinstance(k, str) or "/" in k:
            raise ArgumentError(f"{op}: model state dict key {k!r} must be a string without '/'")
        tensors[k] = _host_array("model", k, v)
        model_keys.append(k)
    meta: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "step": step,
        "rng_state": [str(x) for x in get_rng_state()],  # decimal strings: u64 values exceed JSON doubles
        "model_keys": model_keys,
        "optimizer": None,
        "scheduler": None,
        "extra": _Encoder("extra", "extra/", tensors)(extra, ""),
    }
    if optimizer is not None:
        osd = optimizer.state_dict()
        meta["optimizer"] = {"type": type(optimizer).__name__,
                             "state_dict": _Encoder("optimizer", "optimizer/", tensors)(osd, "")}
    if scheduler is not None:
        meta["scheduler"] = {"type": type(scheduler).__name__,
                             "state_dict": _Encoder("scheduler", "scheduler/", tensors)(scheduler.state_dict(), "")}
    try:
        meta_json = json.dumps(meta, allow_nan=False)
    except (TypeError, ValueError) as exc:  # the encoder should have caught everything
        raise ArgumentError(f"{op}: state that cannot be stored as JSON: {exc}") from None
    data = st_save(tensors, metadata={_VERSION_KEY: str(FORMAT_VERSION), _META_KEY: meta_json})
    _atomic_write(path, data)


# -- load -------------------------------------------------------------------------------------
def _read(path: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    # The whole file is read at once (it was written from one bytes object too). safetensors'
    # ``load`` keeps 0-d tensors 0-d (``safe_open(...).get_tensor`` returns them as shape (1,)).
    from safetensors.numpy import load as st_load

    op = "load_checkpoint"
    with open(path, "rb") as f:
        data = f.read()
    try:
        tensors = st_load(data)
        n = int.from_bytes(data[:8], "little")
        metadata = json.loads(data[8:8 + n]).get("__metadata__") or {}
    except Exception as exc:  # noqa: BLE001  (safetensors raises its own error types)
        raise CheckpointFormatError(f"{op}: {path!r} is not a readable safetensors file (truncated or corrupt?): "
                                    f"{type(exc).__name__}: {exc}") from None
    version = metadata.get(_VERSION_KEY)
    if version is None or _META_KEY not in metadata:
        raise CheckpointFormatError(f"{op}: {path!r} is a safetensors file but not a torchlean checkpoint "
                                    f"(no {_VERSION_KEY!r} metadata)")
    if version != str(FORMAT_VERSION):
        raise CheckpointFormatError(f"{op}: {path!r} has checkpoint format version {version}, this torchlean "
                                    f"reads version {FORMAT_VERSION}")
    try:
        meta = json.loads(metadata[_META_KEY])
    except ValueError as exc:
        raise CheckpointFormatError(f"{op}: {path!r} has unreadable checkpoint metadata: {exc}") from None
    return meta, tensors


def _check_model(op: str, model: Any, meta: dict, tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    saved = {k: tensors[k] for k in meta["model_keys"]}
    own = model.state_dict()
    missing = [k for k in own if k not in saved]
    unexpected = [k for k in saved if k not in own]
    if missing or unexpected:
        raise CheckpointMismatchError(f"{op}: model keys differ from the checkpoint's: missing {missing}, "
                                      f"unexpected {unexpected}")
    for k, t in own.items():
        if tuple(saved[k].shape) != tuple(t.shape):
            raise CheckpointMismatchError(f"{op}: model entry {k!r} has shape {tuple(saved[k].shape)} in the "
                                          f"checkpoint, the model expects {tuple(t.shape)}")
        want_float = isinstance(t, Tensor) and t._buf is not None
        if want_float != (saved[k].dtype.kind == "f"):
            raise CheckpointMismatchError(f"{op}: model entry {k!r} has dtype {saved[k].dtype} in the checkpoint, "
                                          f"the model holds {t.dtype}")
    return saved


def _check_optimizer(op: str, optimizer: Any, meta: dict, tensors: dict[str, np.ndarray]) -> dict:
    saved = meta.get("optimizer")
    if saved is None:
        raise CheckpointMismatchError(f"{op}: an optimizer was given but the checkpoint has no optimizer state")
    if saved["type"] != type(optimizer).__name__:
        raise CheckpointMismatchError(f"{op}: the checkpoint holds {saved['type']} state, the optimizer is a "
                                      f"{type(optimizer).__name__}")
    osd = _decode(saved["state_dict"], tensors, torchlean_tensors=False)
    groups, state = osd["param_groups"], osd["state"]
    if len(groups) != len(optimizer.param_groups):
        raise CheckpointMismatchError(f"{op}: the checkpoint's optimizer has {len(groups)} parameter groups, the "
                                      f"optimizer has {len(optimizer.param_groups)}")
    params = {}
    for i, (g, s) in enumerate(zip(optimizer.param_groups, groups)):
        if len(g["params"]) != len(s["params"]):
            raise CheckpointMismatchError(f"{op}: optimizer parameter group {i} has {len(g['params'])} parameters, "
                                          f"the checkpoint's has {len(s['params'])}")
        params.update(zip(s["params"], g["params"]))
    for idx, st in state.items():
        p = params.get(idx)
        if p is None:
            raise CheckpointMismatchError(f"{op}: optimizer state for parameter index {idx} has no parameter")
        for key, v in st.items():
            if isinstance(v, np.ndarray) and key != "step" and tuple(v.shape) != tuple(p.shape):
                raise CheckpointMismatchError(f"{op}: optimizer entry 'state.{idx}.{key}' has shape {tuple(v.shape)} "
                                              f"in the checkpoint, its parameter has shape {tuple(p.shape)}")
    return osd


def load_checkpoint(path: Any, model: Any, optimizer: Any = None, scheduler: Any = None,
                    restore_rng: bool = True) -> dict[str, Any]:
    """Load a ``save_checkpoint`` file into ``model`` (and ``optimizer``, ``scheduler``).

    Everything is read and checked first (format version, model keys/shapes/dtypes, optimizer and
    scheduler kinds, parameter counts, optimizer state shapes): any mismatch raises a
    ``CheckpointError`` subclass naming the key and changes nothing. Tensors go to the device of
    the model's parameters. With ``restore_rng`` (the default) the default generator gets the
    saved (seed, counter), so random draws continue where the saved run was.

    Returns ``{"step": int, "extra": ..., "rng_state": (seed, counter), "format_version": int}``.
    """
    op = "load_checkpoint"
    path = os.fspath(path)
    meta, tensors = _read(path)
    try:
        model_sd = _check_model(op, model, meta, tensors)
        osd = _check_optimizer(op, optimizer, meta, tensors) if optimizer is not None else None
        ssd = None
        if scheduler is not None:
            saved = meta.get("scheduler")
            if saved is None:
                raise CheckpointMismatchError(f"{op}: a scheduler was given but the checkpoint has no scheduler state")
            if saved["type"] != type(scheduler).__name__:
                raise CheckpointMismatchError(f"{op}: the checkpoint holds {saved['type']} state, the scheduler is a "
                                              f"{type(scheduler).__name__}")
            ssd = _decode(saved["state_dict"], tensors, torchlean_tensors=True)
        seed, counter = (int(x) for x in meta["rng_state"])
        extra = _decode(meta["extra"], tensors, torchlean_tensors=True)
        step = int(meta["step"])
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, CheckpointError):
            raise
        raise CheckpointFormatError(f"{op}: {path!r} has malformed checkpoint metadata ({type(exc).__name__}: "
                                    f"{exc})") from None
    model.load_state_dict(model_sd)
    if osd is not None:
        optimizer.load_state_dict(osd)
    if ssd is not None:
        scheduler.load_state_dict(ssd)
    if restore_rng:
        set_rng_state((seed, counter))
    return {"step": step, "extra": extra, "rng_state": (seed, counter), "format_version": int(meta["format_version"])}
