"""Host transfers, fills, copies and the caching allocator's view for the CUDA backend.

Device memory comes from CuPy's default memory pool: a caching allocator (size-binned, stream
aware) that keeps freed blocks for reuse, so the steady state of a training loop does no
cudaMalloc at all. torchlean counts its own buffers (``AllocatorCounters``); this module adds
what the driver and the pool know: device free/total bytes and the bytes held in the cache.
``collect(True)`` hands cached blocks back to the driver (also the first step after an
allocation failure, see runtime/oom.py).
"""

from __future__ import annotations

import cupy
import numpy as np

from .. import caches
from . import freelist
from .elementwise import fill
from .launch import empty
from .staging import upload_f32

__all__ = ["from_host", "to_host", "full", "memory_info", "cached_bytes", "collect", "concat1d", "slice1d",
           "adjacent_union"]


def from_host(a: np.ndarray):
    """A float32 device copy of the flat float32 host array ``a`` (staged through pinned memory)."""
    return upload_f32(a)


def to_host(a) -> np.ndarray:
    return cupy.asnumpy(a)


def full(n: int, value: float):
    return fill(n, value)


def memory_info() -> tuple[int, int]:
    free, total = cupy.cuda.runtime.memGetInfo()
    return int(free), int(total)


def cached_bytes() -> int:
    """Bytes cached for reuse: free blocks in CuPy's pool, arrays on our free list and the arrays
    the backend's caches keep (DFT bases, cuFFT work areas, workspaces, kept index uploads and the
    pinned staging slots: kernels/caches.py), which the pool counts as used."""
    pool = cupy.get_default_memory_pool()
    dev = cupy.cuda.runtime.getDevice()
    return int(pool.total_bytes() - pool.used_bytes()) + freelist.held_bytes(dev) + caches.held_bytes("cuda", dev)


def collect(force: bool) -> int:
    """With ``force``, empty the backend's caches and our free list, then return every unused
    block to the driver; the bytes handed back."""
    if not force:
        return 0
    freed = cached_bytes()
    caches.clear("cuda")
    freelist.flush(cupy.cuda.runtime.getDevice())
    cupy.get_default_memory_pool().free_all_blocks()
    cupy.get_default_pinned_memory_pool().free_all_blocks()
    return freed


def concat1d(a, b, n, m):
    out = empty(n + m)
    if n:
        out.data.copy_from_device_async(a.data, 4 * n)
    if m:
        (out.data + 4 * n).copy_from_device_async(b.data, 4 * m)
    return out


def adjacent_union(a, b):
    """The view [a; b] when b's memory starts where a's ends in one allocation, else None (not a
    primitive: concat1d's no-copy case)."""
    base = a.base
    if base is None or b.base is not base or base.dtype != cupy.float32 or not base.flags.c_contiguous:
        return None
    pa = a.data.ptr
    if pa + a.nbytes != b.data.ptr:
        return None
    off = (pa - base.data.ptr) // 4
    return base.reshape(-1)[off:off + a.size + b.size]


def slice1d(b, n, start, length):
    out = empty(length)
    if length:
        out.data.copy_from_device_async(b.data + 4 * start, 4 * length)
    return out
