"""Training checkpoints in one safetensors file: written atomically, checked whole before loading.

``save_checkpoint(path, model, optimizer=None, scheduler=None, step=0, extra=None)`` writes

* the model's state dict, each entry a safetensors tensor under its own dotted name (float32
  parameters and buffers; complex64 parameters, such as an FNO's spectral weights, as safetensors'
  C64; int64/bool buffers such as ``num_batches_tracked`` keep their dtype),
  so ``safetensors.torch.load_file(path)`` gives a PyTorch-loadable state dict plus a few extra
  entries under ``optimizer/``, ``scheduler/`` and ``extra/`` (names with a "/", which a module
  state dict never has);
* the optimizer's ``state_dict()``: its tensors (``exp_avg``, ``momentum_buffer``, ``step`` ...)
  as tensors named ``optimizer/state.<param index>.<key>``, the rest (param_groups, scalars) as
  JSON in the safetensors metadata, where each tensor is a ``{"__tensor__": name}`` reference;
* the scheduler's ``state_dict()`` the same way (JSON, tensors by reference);
* the default generator's (seed, counter) (``torchlean.get_rng_state``), ``step``, ``extra``
  (JSON values, tuples, NumPy arrays and torchlean tensors) and the format version;
* (format 2) a SHA-256 digest of all of the above: every tensor's name, dtype, shape and bytes,
  the JSON metadata and the version, in the metadata entry ``torchlean.sha256``.

All tensors are saved from host copies, so a CUDA model saves the same file as a CPU one;
loading puts each tensor on the device of the parameter it belongs to.

Atomicity: the bytes go to a temporary file ``.<name>.<12 hex digits>.tmp`` next to the target,
which is flushed and ``fsync``-ed, then ``os.replace``-d onto the target (and the directory is
fsync-ed where the OS allows), so a crash at any moment leaves either the previous checkpoint or
the new one, never a mixture. A save holds an exclusive ``flock`` on its temporary file until the
rename; each save first removes the temporary files of its target that nobody holds (left by a
killed save), never one that a live save, in this process or another, is writing. A target that is
a directory is refused before anything is written.

Loading is all or nothing: ``load_checkpoint`` reads the file, verifies the digest (any bit flip,
truncation or edit is a ``CheckpointFormatError``), parses it, checks everything against the live
objects (model keys, shapes and dtypes; the optimizer's and scheduler's state through their
schemas: kinds, keys, types, ranges, group counts and sizes; the RNG state's range; the step), and
only then applies it; should applying still fail (out of device memory), model, optimizer,
scheduler and RNG state are put back as they were. Format 1 files (no digest, torchlean before the
digest was added) still load, with every check but the digest.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import numbers
import os
import re
from typing import Any

import numpy as np

from ._atomic_file import atomic_write
from .complex_tensor import ComplexTensor
from .errors import ArgumentError, ShapeError, TorchLeanError
from .runtime.rng import get_rng_state, set_rng_state
from .tensor import Tensor

__all__ = ["save_checkpoint", "load_checkpoint", "CheckpointError", "CheckpointFormatError",
           "CheckpointMismatchError", "FORMAT_VERSION"]

FORMAT_VERSION = 2
_READABLE = ("1", "2")  # format 1: the same layout without the digest
_META_KEY = "torchlean.checkpoint"
_VERSION_KEY = "torchlean.format_version"
_DIGEST_KEY = "torchlean.sha256"
_META_FIELDS = {"format_version", "step", "rng_state", "model_keys", "optimizer", "scheduler", "extra"}
_CHUNK = 16 << 20


class CheckpointError(TorchLeanError, ValueError):
    """A checkpoint that cannot be written or loaded."""


class CheckpointFormatError(CheckpointError):
    """Not a torchlean checkpoint, a truncated/corrupt/altered file (its digest does not match), an
    unsupported format version, or content that fails validation (a negative lr, an unknown key)."""


class CheckpointMismatchError(CheckpointError, ShapeError):
    """The checkpoint does not fit the objects it is loaded into (keys, shapes, kinds, counts)."""


# -- JSON encoding with tensors by reference ------------------------------------------------
def _host_array(what: str, path: str, v: Any) -> np.ndarray:
    if isinstance(v, (Tensor, ComplexTensor)):
        arr = v.numpy()
    else:
        arr = np.asarray(v)
    if arr.dtype.kind == "f" and arr.dtype != np.float32:
        arr = arr.astype(np.float32)
    if arr.dtype.kind == "c" and arr.dtype != np.complex64:
        arr = arr.astype(np.complex64)
    if arr.dtype.kind not in "fciub":
        raise ArgumentError(f"save_checkpoint: {what} entry {path!r} has dtype {arr.dtype}; only float32, complex64, "
                            f"integer and bool arrays can be stored")
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
        if isinstance(v, (Tensor, ComplexTensor, np.ndarray)):
            name = f"{self.prefix}{path}"
            k = 1
            while name in self.tensors:  # a path with dots could collide; keep names unique
                name = f"{self.prefix}{path}#{k}"
                k += 1
            self.tensors[name] = _host_array(self.what, path, v)
            return {"__tensor__": name, "kind": "numpy" if isinstance(v, np.ndarray) else "torchlean"}
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
            if arr.dtype.kind == "c":
                from .complex_tensor import from_numpy

                return from_numpy(np.array(arr, np.complex64))
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


# -- writing -------------------------------------------------------------------------------------
def _write_all(f: Any, data: bytes) -> None:
    """Write ``data`` to the open file in chunks (a separate function so tests can interrupt it)."""
    view = memoryview(data)
    for i in range(0, len(view), _CHUNK):
        f.write(view[i:i + _CHUNK])


def _check_target(op: str, path: str) -> None:
    if not path:
        raise ArgumentError(f"{op}: the checkpoint path is empty")
    if os.path.isdir(path) or path.endswith(os.sep) or (os.altsep and path.endswith(os.altsep)):
        raise CheckpointError(f"{op}: {path!r} is a directory; give the checkpoint's file path, e.g. "
                              f"{os.path.join(path, 'checkpoint.safetensors')!r} (nothing was written)")


# -- the digest ------------------------------------------------------------------------------------
def _digest(version: str, meta_json: str, tensors: dict[str, np.ndarray]) -> str:
    """SHA-256 over the format version, the JSON metadata and every tensor's name, dtype, shape and
    bytes (in name order, each part length-prefixed): computed from the arrays, so it does not
    depend on how safetensors lays the file out. Not a signature: it detects corruption and edits
    made without recomputing it, not a forger who rewrites the file with torchlean."""
    h = hashlib.sha256(b"torchlean checkpoint\0")

    def part(b: Any) -> None:
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)

    part(version.encode())
    part(meta_json.encode())
    for name in sorted(tensors):
        arr = tensors[name]
        part(json.dumps([name, arr.dtype.str, list(arr.shape)]).encode())
        part(np.ascontiguousarray(arr).reshape(-1).view(np.uint8))
    return h.hexdigest()


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
    tensors). The write is atomic and removes temporary files left by killed saves to the same
    path; a directory as ``path`` is a ``CheckpointError`` (see the module docstring).
    """
    from safetensors.numpy import save as st_save

    op = "save_checkpoint"
    path = os.fspath(path)
    _check_target(op, path)
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
    version = str(FORMAT_VERSION)
    data = st_save(tensors, metadata={_VERSION_KEY: version, _META_KEY: meta_json,
                                      _DIGEST_KEY: _digest(version, meta_json, tensors)})
    atomic_write(path, data, _write_all)  # (_write_all looked up now: tests replace it)


# -- load: read and verify ----------------------------------------------------------------------
def _read(op: str, path: str) -> tuple[str, dict[str, Any], dict[str, np.ndarray]]:
    # The whole file is read at once (it was written from one bytes object too). safetensors'
    # ``load`` keeps 0-d tensors 0-d (``safe_open(...).get_tensor`` returns them as shape (1,)).
    from safetensors.numpy import load as st_load

    with open(path, "rb") as f:
        data = f.read()
    try:
        tensors = st_load(data)
        n = int.from_bytes(data[:8], "little")
        metadata = json.loads(data[8:8 + n]).get("__metadata__") or {}
        if not isinstance(metadata, dict):
            raise ValueError("'__metadata__' is not a JSON object")
    except Exception as exc:  # noqa: BLE001  (safetensors raises its own error types)
        raise CheckpointFormatError(f"{op}: {path!r} is not a readable safetensors file (truncated or corrupt?): "
                                    f"{type(exc).__name__}: {exc}") from None
    version, meta_json = metadata.get(_VERSION_KEY), metadata.get(_META_KEY)
    if version is None or meta_json is None:
        raise CheckpointFormatError(f"{op}: {path!r} is a safetensors file but not a torchlean checkpoint "
                                    f"(no {_VERSION_KEY!r} metadata)")
    if version not in _READABLE or not isinstance(meta_json, str):
        raise CheckpointFormatError(f"{op}: {path!r} has checkpoint format version {version}; this torchlean "
                                    f"reads versions {' and '.join(_READABLE)}")
    digest = metadata.get(_DIGEST_KEY)
    if digest is None and version != "1":
        raise CheckpointFormatError(f"{op}: {path!r} has no {_DIGEST_KEY!r} entry, which format version {version} "
                                    f"always writes: the file was altered")
    if digest is not None and not (isinstance(digest, str) and hmac.compare_digest(
            digest.encode(), _digest(version, meta_json, tensors).encode())):
        raise CheckpointFormatError(f"{op}: {path!r} does not match its SHA-256 digest: the file is corrupt "
                                    f"or was altered after it was written")
    try:
        meta = json.loads(meta_json)
    except ValueError as exc:
        raise CheckpointFormatError(f"{op}: {path!r} has unreadable checkpoint metadata: {exc}") from None
    if not isinstance(meta, dict) or set(meta) != _META_FIELDS:
        got = sorted(meta) if isinstance(meta, dict) else type(meta).__name__
        raise CheckpointFormatError(f"{op}: {path!r} has checkpoint metadata with fields {got}, expected "
                                    f"{sorted(_META_FIELDS)}")
    return version, meta, tensors


# -- load: check everything against the live objects ----------------------------------------------
def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_scalars(op: str, path: str, version: str, meta: dict[str, Any]) -> tuple[int, tuple[int, int]]:
    """The step and the RNG (seed, counter), checked: a non-negative integer, two u64 values."""
    if meta["format_version"] != int(version) or not _is_int(meta["format_version"]):
        raise CheckpointFormatError(f"{op}: {path!r} says format version {meta['format_version']!r} in its "
                                    f"metadata and {version} in its header")
    step = meta["step"]
    if not _is_int(step) or step < 0:
        raise CheckpointFormatError(f"{op}: {path!r} has step {step!r}; expected a non-negative integer")
    rng = meta["rng_state"]
    if not (isinstance(rng, list) and len(rng) == 2
            and all(isinstance(x, str) and re.fullmatch(r"[0-9]{1,20}", x) and int(x) < 2**64 for x in rng)):
        raise CheckpointFormatError(f"{op}: {path!r} has RNG state {rng!r}; expected [seed, counter], two "
                                    f"integers in [0, 2**64) written in decimal")
    return step, (int(rng[0]), int(rng[1]))


def _check_model(op: str, path: str, model: Any, meta: dict, tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    from .nn.modules.module import Module

    if not isinstance(model, Module):
        raise ArgumentError(f"{op}: model must be a torchlean nn.Module, got {type(model).__name__}")
    keys = meta["model_keys"]
    if not (isinstance(keys, list) and all(isinstance(k, str) and k in tensors for k in keys)
            and len(set(keys)) == len(keys)):
        raise CheckpointFormatError(f"{op}: {path!r} has a malformed list of model entries")
    saved = {k: tensors[k] for k in keys}
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
        if isinstance(t, ComplexTensor):
            want = np.dtype(np.complex64)
        else:
            want = np.dtype(np.float32) if t._buf is not None else t._arr.dtype
        if saved[k].dtype != want:
            raise CheckpointMismatchError(f"{op}: model entry {k!r} has dtype {saved[k].dtype} in the checkpoint, "
                                          f"the model holds {want}")
    return saved


def _saved_kind(op: str, path: str, what: str, obj: Any, saved: Any) -> Any:
    """The state_dict entry of the optimizer or scheduler record, after the kind checks."""
    if saved is None:
        raise CheckpointMismatchError(f"{op}: a {what} was given but the checkpoint has no {what} state")
    if not (isinstance(saved, dict) and set(saved) == {"type", "state_dict"} and isinstance(saved["type"], str)):
        raise CheckpointFormatError(f"{op}: {path!r} has a malformed {what} record")
    if saved["type"] != type(obj).__name__:
        raise CheckpointMismatchError(f"{op}: the checkpoint holds {saved['type']} state, the {what} is a "
                                      f"{type(obj).__name__}")
    return saved["state_dict"]


def _check_optimizer(op: str, path: str, optimizer: Any, meta: dict, tensors: dict[str, np.ndarray]) -> Any:
    """The optimizer's staged (param_groups, state), built by its own schema without changing it."""
    from .optim.optimizer import Optimizer

    if not isinstance(optimizer, Optimizer):
        raise ArgumentError(f"{op}: optimizer must be a torchlean.optim.Optimizer, got {type(optimizer).__name__}")
    osd = _decode(_saved_kind(op, path, "optimizer", optimizer, meta["optimizer"]), tensors, torchlean_tensors=False)
    groups = osd.get("param_groups") if isinstance(osd, dict) else None
    if isinstance(groups, list):  # counts first, for messages in the checkpoint's terms
        if len(groups) != len(optimizer.param_groups):
            raise CheckpointMismatchError(f"{op}: the checkpoint's optimizer has {len(groups)} parameter groups, "
                                          f"the optimizer has {len(optimizer.param_groups)}")
        for i, (g, s) in enumerate(zip(optimizer.param_groups, groups)):
            n = len(s["params"]) if isinstance(s, dict) and isinstance(s.get("params"), list) else None
            if n is not None and n != len(g["params"]):
                raise CheckpointMismatchError(f"{op}: optimizer parameter group {i} has {len(g['params'])} "
                                              f"parameters, the checkpoint's has {n}")
    try:
        return optimizer._stage_state_dict(osd)
    except ShapeError as exc:
        raise CheckpointMismatchError(f"{op}: optimizer state in {path!r} does not fit: {exc}") from None
    except TorchLeanError as exc:
        raise CheckpointFormatError(f"{op}: {path!r} holds optimizer state that {type(optimizer).__name__} "
                                    f"refuses: {exc}") from None


def _check_scheduler(op: str, path: str, scheduler: Any, meta: dict, tensors: dict[str, np.ndarray]) -> Any:
    """The scheduler's staged attribute values, checked by its schema without changing it."""
    from .optim.lr_scheduler import LRScheduler

    if not isinstance(scheduler, LRScheduler):
        raise ArgumentError(f"{op}: scheduler must be a torchlean LRScheduler, got {type(scheduler).__name__}")
    ssd = _decode(_saved_kind(op, path, "scheduler", scheduler, meta["scheduler"]), tensors, torchlean_tensors=True)
    try:
        return scheduler._stage_state_dict(ssd)
    except TorchLeanError as exc:
        raise CheckpointFormatError(f"{op}: {path!r} holds scheduler state that {type(scheduler).__name__} "
                                    f"refuses: {exc}") from None


# -- load: apply ------------------------------------------------------------------------------------
def _apply(model: Any, model_sd: dict, optimizer: Any, opt_staged: Any, scheduler: Any, sch_staged: Any,
           rng: tuple[int, int] | None) -> None:
    """Install everything, or (should anything fail: out of device memory, an interrupt) put the
    model's tensors, the optimizer, the scheduler and the RNG back as they were. Buffers are values,
    so the model's snapshot is references, not copies."""
    own = [t.real_view() if isinstance(t, ComplexTensor) else t for t in model.state_dict(keep_vars=True).values()]
    model_snap = [(t, t._buf, t._arr) for t in own]
    opt_snap = (optimizer.param_groups, optimizer.state) if optimizer is not None else None
    sch_snap = dict(scheduler.__dict__) if scheduler is not None else None
    rng_snap = get_rng_state()
    try:
        model.load_state_dict(model_sd)
        if optimizer is not None:
            optimizer._commit_state_dict(opt_staged)
        if scheduler is not None:
            scheduler._commit_state_dict(sch_staged)
        if rng is not None:
            set_rng_state(rng)
    except BaseException:
        for t, buf, arr in model_snap:
            if buf is not None and t._buf is not buf:
                t._rebind(buf)  # (counts the holder back: runtime/buffer.py)
            t._arr = arr
        if opt_snap is not None:
            optimizer.param_groups, optimizer.state = opt_snap
        if sch_snap is not None:
            scheduler.__dict__.update(sch_snap)
        set_rng_state(rng_snap)
        raise


def load_checkpoint(path: Any, model: Any, optimizer: Any = None, scheduler: Any = None,
                    restore_rng: bool = True) -> dict[str, Any]:
    """Load a ``save_checkpoint`` file into ``model`` (and ``optimizer``, ``scheduler``), all or nothing.

    The file's SHA-256 digest is verified, then everything is checked against the live objects
    (model keys/shapes/dtypes; optimizer and scheduler kinds, schemas, hyperparameter types and
    ranges, group counts and sizes, state shapes; the RNG state's range; the step) before anything
    changes: a failed load raises a ``CheckpointError`` subclass naming the entry and leaves model,
    optimizer, scheduler and RNG state bit for bit as they were. Tensors go to the device of the
    model's parameters. With ``restore_rng`` (the default) the default generator gets the saved
    (seed, counter), so random draws continue where the saved run was.

    Returns ``{"step": int, "extra": ..., "rng_state": (seed, counter), "format_version": int}``.
    """
    op = "load_checkpoint"
    path = os.fspath(path)
    version, meta, tensors = _read(op, path)
    try:
        step, rng = _check_scalars(op, path, version, meta)
        model_sd = _check_model(op, path, model, meta, tensors)
        opt_staged = _check_optimizer(op, path, optimizer, meta, tensors) if optimizer is not None else None
        sch_staged = _check_scheduler(op, path, scheduler, meta, tensors) if scheduler is not None else None
        extra = _decode(meta["extra"], tensors, torchlean_tensors=True)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        if isinstance(exc, TorchLeanError):
            raise
        raise CheckpointFormatError(f"{op}: {path!r} has malformed checkpoint metadata ({type(exc).__name__}: "
                                    f"{exc})") from None
    _apply(model, model_sd, optimizer, opt_staged, scheduler, sch_staged, rng if restore_rng else None)
    return {"step": step, "extra": extra, "rng_state": rng, "format_version": int(version)}
