"""The on-disk cache of the examples' generated data sets (``torchlean train`` reads and fills it).

An example's data is a function of part of its config (the keys in its ``DATA_KEYS``) and of its
code, so a generated data set is stored once and loaded on later runs instead of generated again
(fno1d's Burgers solves take seconds at the GPU schedule's resolution).

* Where: ``$TORCHLEAN_DATA_CACHE`` if set, else ``$XDG_CACHE_HOME/torchlean/datasets``, else
  ``~/.cache/torchlean/datasets``. ``TORCHLEAN_DATA_CACHE=off`` (or 0, false, no) turns the cache
  off; so does ``torchlean train --no-data-cache``. Delete the folder to drop every entry.
* Key: the SHA-256 of the example's name, the values of its ``DATA_KEYS``, the SHA-256 of its
  source file (any edit to the generator's module gives a new key) and NumPy's version (random
  streams and FFTs are NumPy's). An example without ``DATA_KEYS`` is never cached. Entries are
  never evicted: each is one data set of one config (fno1d's GPU schedule: 14 MiB, cnn's: 66 MiB).
* Entry: one file ``<example>-<key>.tldata``: a magic line, a JSON header (the key's inputs, the
  non-array values, each array's dtype, shape and place, the payload's SHA-256 and length) and
  the payload, the arrays' raw bytes (numbers only: nothing in an entry is code or a pickle).
  Written atomically (``_atomic_file``), so a reader sees a whole entry or none. An entry whose
  magic, header, key inputs or payload digest do not match is never trusted: the data are
  generated again and the entry replaced. Reading or writing the cache never fails a run: an
  unreadable or unwritable folder costs a generation.
* Not in the key: code outside the example's module and the modules it lists in ``DATA_MODULES``
  (generators kept in files of their own, e.g. fno2d's). A generator that calls into another
  module must not depend on it changing (the examples' generators use only NumPy and SciPy).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from ._atomic_file import atomic_write

__all__ = ["cache_dir", "cache_enabled", "key_inputs", "entry_path", "load", "store", "cached_data"]

_MAGIC = b"TLDATA 2\n"
_ALIGN = 64
_KINDS = "biufc"  # bool, integer, unsigned, float, complex: raw bytes say everything about them
_OFF = ("off", "0", "false", "no")
_FORMAT = 2


def cache_enabled() -> bool:
    return os.environ.get("TORCHLEAN_DATA_CACHE", "").strip().lower() not in _OFF


def cache_dir() -> Path:
    explicit = os.environ.get("TORCHLEAN_DATA_CACHE", "").strip()
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "").strip()
    # XDG: a relative XDG_CACHE_HOME is invalid and must be ignored
    root = Path(base) if base and os.path.isabs(base) else Path.home() / ".cache"
    return root / "torchlean" / "datasets"


def _source_digest(module: Any) -> str | None:
    path = getattr(module, "__file__", None)
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except (OSError, TypeError):  # no source file to key the data by
        return None


def key_inputs(example: Any, cfg: Mapping[str, Any]) -> dict | None:
    """Everything the data set depends on (JSON-able), or None when it cannot be told: ``example``
    declares no DATA_KEYS, has no source file, or a data key's value is not plain data."""
    keys = getattr(example, "DATA_KEYS", None)
    source = _source_digest(example)
    if keys is None or source is None:
        return None
    import numpy as np

    try:  # the json round trip makes tuples lists: a config read back from a log gives the same key
        config = json.loads(json.dumps({k: cfg.get(k) for k in sorted(keys)}, default=_json_default))
    except (TypeError, ValueError):
        return None
    inputs = {"format": _FORMAT, "example": example.NAME, "config": config, "source_sha256": source,
              "numpy": np.__version__}
    modules = getattr(example, "DATA_MODULES", ())  # generators kept beside the example, keyed by their source too
    if modules:
        digests = {m.__name__: _source_digest(m) for m in modules}
        if None in digests.values():
            return None
        inputs["data_modules_sha256"] = digests
    return inputs


def _json_default(v: Any) -> Any:
    if hasattr(v, "item"):  # a NumPy scalar in a config
        return v.item()
    raise TypeError(f"not JSON serializable: {type(v).__name__}")


def entry_path(directory: Path, inputs: dict) -> Path:
    digest = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:32]
    return directory / f"{inputs['example']}-{digest}.tldata"


def _pack(inputs: dict, data: Mapping[str, Any]) -> list | None:
    """The entry's bytes, in pieces, or None when ``data`` holds a value the format cannot keep
    exactly. Arrays are stored raw (C order, each at a 64-byte aligned offset of the payload), so
    that loading is one read and one digest: no decoding, no copies."""
    import numpy as np

    arrays, values, pieces, offset = [], {}, [], 0
    for name, v in data.items():
        if isinstance(v, (np.ndarray, np.generic)):
            arr = np.asarray(v)  # (not ascontiguousarray: it makes a scalar 1-d)
            arr = arr if arr.flags.c_contiguous else arr.copy(order="C")
            if arr.dtype.kind not in _KINDS or arr.dtype.fields is not None:
                return None
            pad = -offset % _ALIGN
            pieces += [bytes(pad), memoryview(arr.reshape(-1).view(np.uint8))]
            offset += pad
            arrays.append({"name": name, "dtype": arr.dtype.str, "shape": list(arr.shape), "offset": offset,
                           "nbytes": arr.nbytes, "scalar": isinstance(v, np.generic)})
            offset += arr.nbytes
        elif v is None or isinstance(v, (bool, int, float, str)):
            values[name] = v
        else:
            return None
    digest = hashlib.sha256()
    for piece in pieces:
        digest.update(piece)
    header = json.dumps({"key": inputs, "order": list(data), "values": values, "arrays": arrays, "payload_sha256": digest.hexdigest(),
                         "payload_bytes": offset}, sort_keys=True).encode()
    head = _MAGIC + len(header).to_bytes(8, "little") + header
    return [head + bytes(-len(head) % _ALIGN)] + pieces


def _unpack(raw: bytearray, inputs: dict) -> dict | None:
    """The data of an intact entry made for ``inputs`` (arrays are views of ``raw``), else None."""
    import numpy as np

    if not raw.startswith(_MAGIC) or len(raw) < len(_MAGIC) + 8:
        return None
    at = len(_MAGIC)
    n = int.from_bytes(raw[at:at + 8], "little")
    header = json.loads(bytes(raw[at + 8:at + 8 + n]).decode())
    start = at + 8 + n
    start += -start % _ALIGN
    payload = memoryview(raw)[start:]
    if (header.get("key") != inputs or header.get("payload_bytes") != len(payload)
            or header.get("payload_sha256") != hashlib.sha256(payload).hexdigest()):
        return None
    out: dict[str, Any] = dict(header["values"])
    for spec in header["arrays"]:
        dtype = np.dtype(spec["dtype"])
        count = math.prod(spec["shape"])
        if dtype.kind not in _KINDS or count * dtype.itemsize != spec["nbytes"] or \
                spec["offset"] + spec["nbytes"] > len(payload):
            return None
        arr = np.frombuffer(raw, dtype=dtype, count=count, offset=start + spec["offset"]).reshape(spec["shape"])
        out[spec["name"]] = arr[()] if spec["scalar"] else arr
    return {name: out[name] for name in header["order"]}


def _write_pieces(f: Any, pieces: list) -> None:
    for piece in pieces:
        f.write(piece)


def load(path: Path, inputs: dict) -> dict | None:
    """The cached data at ``path`` if the entry is intact and made for ``inputs``; None otherwise
    (missing, unreadable, corrupt, another key's): never raises for a bad entry."""
    try:
        with open(path, "rb") as f:
            raw = bytearray(os.fstat(f.fileno()).st_size)  # writable: the arrays are views of it
            if f.readinto(raw) != len(raw):
                return None
        return _unpack(raw, inputs)
    except Exception:  # noqa: BLE001 - any damage in a cache entry means "generate again"
        return None


def store(path: Path, inputs: dict, data: Mapping[str, Any]) -> str | None:
    """Write the entry atomically; returns None when written, else why not (never raises for I/O)."""
    raw = _pack(inputs, data)
    if raw is None:
        return "the data hold a value the cache cannot store exactly"
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        atomic_write(str(path), raw, _write_pieces)
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def cached_data(example: Any, cfg: Mapping[str, Any], generate: Callable[[], dict], enabled: bool = True,
                min_seconds: float = 0.0, say: Callable[[str], None] | None = None) -> tuple[dict, str]:
    """``generate()``'s data for ``example`` at ``cfg``, from the cache when a verified entry exists,
    and a few words on where it came from. A generation faster than ``min_seconds`` is not stored
    (reading it back would save nothing worth a file)."""
    inputs = key_inputs(example, cfg) if enabled and cache_enabled() else None
    if inputs is None:
        return generate(), "generated"
    path = entry_path(cache_dir(), inputs)
    data = load(path, inputs)
    if data is not None:
        return data, f"loaded from the cache {path}"
    had_entry = path.exists()
    t0 = time.perf_counter()
    data = generate()
    if time.perf_counter() - t0 < min_seconds:
        return data, "generated"
    why = store(path, inputs, data)
    if why is not None:
        if say is not None:
            say(f"data cache: could not write {path} ({why}); the data will be generated again next run")
        return data, "generated (not cached)"
    return data, f"generated, {'replaced a damaged or stale cache entry' if had_entry else 'cached'} at {path}"

