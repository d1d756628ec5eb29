"""Allocator telemetry across devices: ``allocator_stats``, ``collect_allocator``."""

from __future__ import annotations

from typing import Any

from .allocator import (AllocatorStats, clear_registered_caches, collect_garbage, host_memory_bytes,
                        registered_cached_bytes)
from .device import get_context, known_contexts


def allocator_stats(device: Any = "cpu") -> AllocatorStats:
    """A snapshot of ``device``'s allocator: live/peak bytes, alloc/free counts, device free/total
    (0 on the CPU, as in the seed), cached bytes, host free/total."""
    ctx = get_context(device, "allocator_stats")
    c = ctx.counters
    free, total = ctx.backend.memory_info()
    cached = ctx.backend.cached_bytes() if hasattr(ctx.backend, "cached_bytes") else 0
    cached += registered_cached_bytes(ctx.name)
    host_free, host_total = host_memory_bytes()
    return AllocatorStats(ctx.name, c.live_bytes, c.peak_bytes, c.alloc_count, c.free_count, free, total, cached,
                          host_free, host_total)


def reset_peak_bytes(device: Any = "cpu") -> None:
    """Start peak tracking afresh from the current live bytes."""
    c = get_context(device, "reset_peak_bytes").counters
    c.peak_bytes = c.live_bytes


def collect_allocator(force: bool = False) -> int:
    """Finalize unreachable buffers; with ``force``, also empty every cache torchlean keeps (the
    CPU's DFT bases, the optimizer's step values, CUDA's free list, workspaces and cuFFT plans)
    and return cached device blocks to the driver.

    Returns the number of cached bytes handed back (what ``allocator_stats(...).cached_bytes``
    reported for them).
    """
    freed = clear_registered_caches() if force else 0
    collect_garbage()
    for ctx in known_contexts():
        freed += ctx.backend.collect(bool(force))
    return freed
