"""Uploads of host arrays through pinned memory, asynchronously: index arrays (targets, gather and
scatter indices) as uint32, pointer tables as int64, and float32 data up to ``_F32_MAX`` bytes
(``Buffer.from_numpy``: a training step's batch).

A ring of pinned host buffers per device. The host values are converted into a slot's buffer (so
the caller may modify its array as soon as we return), copied to a new device array on the
current stream, and an event is recorded after the copy; a slot is reused only after its event has
completed (normally long ago: there are _NSTAGE slots), and a slot grows only then, so no pinned
memory is freed or overwritten while a copy from it may still be pending. A pageable
``cupy.asarray`` costs several times the host time per upload (a pinned allocation and event
bookkeeping on every call); a slot costs one host copy and one asynchronous memcpy.

The last few uploads are kept (``_RECENT`` per device) with a host copy of what they hold: an
embedding's forward gather and its backward scatter-add upload the same indices, and the second
finds them here (a host comparison) instead of copying them again. Device index arrays
are only ever read by kernels, so sharing one between launches is safe.
"""

from __future__ import annotations

import threading

import cupy
import numpy as np

from ..caches import register
from .freelist import empty, empty_as

__all__ = ["upload_u32", "upload_i64", "upload_f32"]

_NSTAGE = 8
_RECENT = 4
_MAX_RECENT = 1 << 16  # elements: larger arrays are not kept (the comparison would cost too much)
_F32_MAX = 4 << 20    # bytes: larger uploads of any type take cupy.asarray (pinned slots stay <= 8 x 4 MiB)
_lock = threading.Lock()


class _Slot:
    """One pinned host buffer of the ring, with the event recorded after the last copy from it. It
    keeps a byte view of its memory and the host address: building them per call (np.frombuffer,
    ndarray.ctypes) would cost host time inside every training step."""

    __slots__ = ("mem", "cap", "event", "view", "addr")

    def __init__(self, cap: int) -> None:
        self.mem = cupy.cuda.alloc_pinned_memory(cap)
        self.cap = cap  # bytes
        self.event = cupy.cuda.Event(block=False, disable_timing=True)
        self.view = np.frombuffer(self.mem, dtype=np.uint8, count=cap)
        self.addr = self.view.ctypes.data


class _Ring:
    """A device's _NSTAGE slots (None until first used) and the index of the next one to use."""

    __slots__ = ("next", "slots")

    def __init__(self) -> None:
        self.next = 0
        self.slots: list[_Slot | None] = [None] * _NSTAGE


class _Kept:
    """A recent upload: a host copy of the values and the device array that holds them."""

    __slots__ = ("host", "dev")

    def __init__(self, host: np.ndarray, dev: cupy.ndarray) -> None:
        self.host, self.dev = host, dev


_stages: dict[int, _Ring] = {}
_recent: dict[int, list[_Kept]] = {}


def _stage(host: np.ndarray, n: int, dtype) -> cupy.ndarray:
    dtype = np.dtype(dtype)
    nbytes = n * dtype.itemsize
    # from the free list: float32 arrays, or its uint32 / int64 workspaces
    out = empty(n) if dtype.char == "f" else empty_as(n, dtype.char)
    dev = cupy.cuda.runtime.getDevice()
    stream = cupy.cuda.get_current_stream()
    ring = _stages.get(dev)
    if ring is None:
        ring = _stages[dev] = _Ring()
    i = ring.next
    ring.next = (i + 1) % _NSTAGE
    slot = ring.slots[i]
    if slot is not None:
        slot.event.synchronize()  # the copy that last read this buffer has finished
    if slot is None or slot.cap < nbytes:
        slot = ring.slots[i] = _Slot(max(4096, 1 << (nbytes - 1).bit_length()))
    np.copyto(slot.view[:nbytes].view(dtype), host, casting="unsafe")  # the caller's values fit (checked by the runtime)
    out.data.copy_from_host_async(slot.addr, nbytes, stream)
    slot.event.record(stream)
    return out


def upload_u32(values) -> cupy.ndarray:
    """The host integers ``values`` (already checked to lie in [0, 2**32)) as a flat uint32 device
    array on the current device, uploaded on the current stream (see the module docstring)."""
    host = np.asarray(values).reshape(-1)
    n = int(host.size)
    if n == 0:
        return cupy.empty(0, dtype=cupy.uint32)
    with _lock:
        dev = cupy.cuda.runtime.getDevice()
        recent = _recent.setdefault(dev, [])
        if n <= _MAX_RECENT:
            first, last = host[0], host[-1]
            for entry in recent:
                kept = entry.host
                # the ends first: new indices (a new batch) nearly always differ there, and a full
                # comparison costs more host time per entry
                if kept.shape == host.shape and kept[0] == first and kept[-1] == last and np.array_equal(kept, host):
                    return entry.dev
        out = _stage(host, n, np.uint32) if 4 * n <= _F32_MAX else cupy.asarray(host.astype(np.uint32))
        if n <= _MAX_RECENT:
            recent.insert(0, _Kept(host.copy(), out))
            if len(recent) > _RECENT:
                recent.pop()  # not given back: a caller may still hold it (a tape closure's indices)
        return out


def upload_i64(values: np.ndarray) -> cupy.ndarray:
    """The host int64 array ``values`` as a flat int64 device array, uploaded on the current stream
    through the same ring (never kept: pointer tables change from call to call)."""
    host = np.asarray(values, dtype=np.int64).reshape(-1)
    if host.size == 0:
        return cupy.empty(0, dtype=cupy.int64)
    if 8 * host.size > _F32_MAX:
        return cupy.asarray(host)
    with _lock:
        return _stage(host, int(host.size), np.int64)


def upload_f32(values: np.ndarray) -> cupy.ndarray:
    """The host float32 array ``values`` (flat, contiguous) as a new flat float32 device array on the
    current device, uploaded on the current stream; arrays over ``_F32_MAX`` bytes (and empty ones)
    through ``cupy.asarray`` instead. Either way the caller may change ``values`` on return."""
    n = int(values.size)
    if n == 0 or 4 * n > _F32_MAX:
        return cupy.asarray(values, dtype=cupy.float32)
    with _lock:
        return _stage(values, n, np.float32)


def _held_bytes(device=None) -> int:
    """The kept uploads (device memory) and the pinned slots (host memory) of ``device``: what a
    forced collect hands back."""
    with _lock:
        kept = sum(entry.dev.nbytes for dev, recent in _recent.items() if device is None or dev == device
                   for entry in recent)
        pinned = sum(slot.cap for dev, ring in _stages.items() if device is None or dev == device
                     for slot in ring.slots if slot is not None)
    return kept + pinned


def _clear() -> int:
    """Forget the kept uploads and free the pinned slots once the copies from them have finished."""
    freed = _held_bytes()
    with _lock:
        _recent.clear()
        for ring in _stages.values():
            for slot in ring.slots:
                if slot is not None:
                    slot.event.synchronize()
        _stages.clear()
    return freed


register("cuda", _held_bytes, _clear)  # counted as cached, dropped by collect(True)
