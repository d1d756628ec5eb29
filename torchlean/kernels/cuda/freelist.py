"""A free list of float32 device arrays in front of CuPy's memory pool.

Why: a small model's training step on a fast GPU is bound by host time, and ``cupy.empty`` is a
real part of it (building the ndarray, the pool's lock and size bins), once per temporary. When a Buffer
that alone owns its array dies or is released, the array object itself goes on a list by length,
and the next ``empty(n)`` of that length on the same device and stream pops it (a dict lookup).

Safety: an array is handed out again only on the stream that was current when it came back, so
every kernel queued on that stream before then, the readers of a torchlean training loop (every
kernel runs on the current stream), runs before any kernel that will write it. The one rule for
code that switches streams itself, as with PyTorch's ``record_stream``: synchronize before a
Buffer made and used on one stream dies while another is current. An array comes back only when nothing else refers to it,
to its MemoryPointer or to its memory (reference counts equal to those of a fresh array, measured
once): a view, a DLPack export or a user's ``buffer.data`` keep it out. Only pool memory
(``PooledMemory``) comes back: memory imported through DLPack belongs to its exporter.

Workspaces: the backend's own temporaries (im2col columns, partial sums, batch norm coefficients,
attention's D) are never Buffers, so they would go back to CuPy's pool one by one, at its host cost each way.
A launcher that is done with one hands it over at once with ``give_back(arr)``, under the same rules
(its variable must be the only reference left, which the counts check); float64, uint32 and int64
workspaces have their own lists (``empty_as``).

Bounds: arrays of at most ``_MAX_ARRAY`` bytes, ``_LIMIT`` bytes held per device. ``flush`` hands
everything to the pool (``memory.collect(True)`` calls it first, so the out-of-memory retry sees
that memory too); ``held_bytes`` is reported as cached by the allocator telemetry.
"""

from __future__ import annotations

import sys

import cupy
from cupy.cuda.memory import PooledMemory

__all__ = ["empty", "empty_as", "give_back", "hook", "flush", "held_bytes", "hits_and_misses"]

_MAX_ARRAY = 64 << 20
_LIMIT = 1 << 30
_F32 = cupy.dtype(cupy.float32)
_getdev = cupy.cuda.runtime.getDevice
_refcount = sys.getrefcount

# (device, stream pointer) -> length -> arrays; device -> bytes held
_lists: dict[tuple[int, int], dict[int, list]] = {}
_held: dict[int, int] = {}
_fresh: tuple[int, int, int] | None = None  # reference counts of a fresh array, through recycle's path
_calibrating = False
_counts_hit_miss = [0, 0]  # empty() calls served from the lists / by CuPy, since import


def _stream_ptr() -> int:
    return cupy.cuda.get_current_stream().ptr  # cheap enough to call on every empty()


def empty(n: int) -> cupy.ndarray:
    """A float32 device array of n elements (contents undefined) on the current device."""
    dev = _getdev()
    lists = _lists.get((dev, _stream_ptr()))
    if lists is not None:
        arrs = lists.get(n)
        if arrs:
            _held[dev] -= 4 * n
            _counts_hit_miss[0] += 1
            return arrs.pop()
    _counts_hit_miss[1] += 1
    return cupy.empty(n, dtype=_F32)


# workspace dtypes besides float32: float64 partials, uint32 indices, int64 tables (staging.py)
_OTHER = {"d": cupy.dtype(cupy.float64), "I": cupy.dtype(cupy.uint32), cupy.dtype(cupy.int64).char: cupy.dtype(cupy.int64)}


def empty_as(n: int, char: str) -> cupy.ndarray:
    """A flat workspace of n float64 ("d"), uint32 ("I") or int64 elements (contents undefined)."""
    dev = _getdev()
    lists = _lists.get((dev, _stream_ptr()))
    if lists is not None:
        arrs = lists.get((n, char))
        if arrs:
            arr = arrs.pop()
            _held[dev] -= arr.nbytes
            _counts_hit_miss[0] += 1
            return arr
    _counts_hit_miss[1] += 1
    return cupy.empty(n, dtype=_OTHER[char])


def give_back(arr) -> None:
    """Hand a workspace the caller is done with to the list now (its variable must be the only
    reference: otherwise, as for any array, the counts refuse it and CuPy's pool gets it later).
    Kernels already queued on the current stream that use it run before any later user."""
    _recycle(_getdev(), arr)


def _counts(arr) -> tuple[int, int, int]:
    ptr = arr.data
    return _refcount(arr), _refcount(ptr), _refcount(ptr.mem)


def hook(device: int):
    """The function a dying Buffer of ``device`` hands its array to (``DeviceContext.recycle``).
    The first call measures the reference counts of a fresh array passed the same way: a local
    variable handed to the hook, as Buffer.__del__ and Buffer.release do."""

    def recycle(arr) -> None:
        _recycle(device, arr)

    return recycle


def _calibrate(recycle) -> None:
    global _calibrating
    _calibrating = True
    try:
        fresh = cupy.empty(1, dtype=_F32)
        recycle(fresh)
    finally:
        _calibrating = False


def _recycle(device: int, arr) -> None:
    """Keep ``arr`` for ``empty`` if nothing else refers to it and ``device`` is current (the
    stream that keys the list is the current device's)."""
    global _fresh
    if _calibrating:
        _fresh = _counts(arr)
        return
    if _fresh is None:
        _calibrate(hook(device))
    nbytes = arr.nbytes
    dt = arr.dtype
    if dt == _F32:
        size = arr.size
    elif dt.char in _OTHER:
        size = (arr.size, dt.char)
    else:
        return
    if (nbytes == 0 or nbytes > _MAX_ARRAY or _getdev() != device or arr.base is not None
            or type(arr.data.mem) is not PooledMemory or _counts(arr) != _fresh):
        return
    held = _held.get(device, 0)
    if held + nbytes > _LIMIT:
        return
    key = (device, _stream_ptr())
    lists = _lists.get(key)
    if lists is None:
        lists = _lists[key] = {}
    arrs = lists.get(size)
    if arrs is None:
        arrs = lists[size] = []
    arrs.append(arr)
    _held[device] = held + nbytes


def flush(device: int) -> int:
    """Hand every array held for ``device`` back to CuPy's pool; the bytes handed back."""
    freed = _held.pop(device, 0)
    for key in [k for k in _lists if k[0] == device]:
        del _lists[key]
    return freed


def held_bytes(device: int) -> int:
    return _held.get(device, 0)


def hits_and_misses() -> tuple[int, int]:
    """How many ``empty`` calls the lists served and how many went to CuPy, since import."""
    return _counts_hit_miss[0], _counts_hit_miss[1]
