"""A free list of float32 device arrays in front of CuPy's memory pool.

Why: a small model's training step on a fast GPU is bound by host time, and ``cupy.empty`` is a
real part of it (building the ndarray, the pool's lock and size bins), once per temporary. When a
Buffer that owns its array alone dies or is released, the array object itself goes on a list by
length, and the next ``empty(n)`` of that length on the same device and stream pops it (a dict
lookup).

Safety: an array is handed out again only on the stream that was current when it came back, so
every kernel queued on that stream before then, the readers of a torchlean training loop (every
kernel runs on the current stream), runs before any kernel that will write it. The one rule for
code that switches streams itself, as with PyTorch's ``record_stream``: synchronize before a
Buffer made and used on one stream dies while another is current.

Ownership is declared, never guessed: an array comes back only from its owner. A Buffer hands
its array over when it dies or is released unless it was ever shared (``Buffer._shared``: a view,
a DLPack export or import, or a caller who took ``Buffer.data``; runtime/buffer.py). Only pool
memory (``PooledMemory``) that is not a view of another array comes back: memory imported
through DLPack belongs to its exporter.

Workspaces: the backend's own temporaries (im2col columns, partial sums, batch norm coefficients,
attention's D) are never Buffers, so they would go back to CuPy's pool one by one, at its host
cost each way. A launcher that is done with one donates it at once with ``give_back(arr)``: the
caller declares that nothing else holds it (a workspace it allocated itself and gave to no one
but the kernels it queued). float64, uint32 and int64 workspaces have their own lists
(``empty_as``).

Bounds: arrays of at most ``_MAX_ARRAY`` bytes, ``_LIMIT`` bytes held per device. ``flush`` hands
everything to the pool (``memory.collect(True)`` calls it first, so the out-of-memory retry sees
that memory too); ``held_bytes`` is reported as cached by the allocator telemetry.
"""

from __future__ import annotations

import cupy
from cupy.cuda.memory import PooledMemory

__all__ = ["empty", "empty_as", "give_back", "hook", "flush", "held_bytes", "hits_and_misses"]

_MAX_ARRAY = 64 << 20
_LIMIT = 1 << 30
_F32 = cupy.dtype(cupy.float32)
_getdev = cupy.cuda.runtime.getDevice

# (device, stream pointer) -> length -> arrays; device -> bytes held
_lists: dict[tuple[int, int], dict[int, list]] = {}
_held: dict[int, int] = {}
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
    """Donate a workspace the caller is done with to the list now: the caller allocated it and
    gave it to nothing but kernels already queued on the current stream, which run before any
    later user."""
    _recycle(_getdev(), arr)


def hook(device: int):
    """The function a dying or released Buffer of ``device`` that owns its array alone hands the
    array to (``DeviceContext.recycle``)."""

    def recycle(arr) -> None:
        _recycle(device, arr)

    return recycle


def _recycle(device: int, arr) -> None:
    """Keep ``arr`` for ``empty`` if it is whole pool memory of a kept dtype and size and
    ``device`` is current (the stream that keys the list is the current device's)."""
    nbytes = arr.nbytes
    dt = arr.dtype
    if dt == _F32:
        size = arr.size
    elif dt.char in _OTHER:
        size = (arr.size, dt.char)
    else:
        return
    if (nbytes == 0 or nbytes > _MAX_ARRAY or _getdev() != device or arr.base is not None
            or type(arr.data.mem) is not PooledMemory):
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
