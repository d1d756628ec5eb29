"""Allocator telemetry across devices: ``allocator_stats``, ``collect_allocator``."""

from __future__ import annotations

from typing import Any

from .allocator import AllocatorStats, collect_garbage
from .device import get_context, known_contexts


def allocator_stats(device: Any = "cpu") -> AllocatorStats:
    """A snapshot of ``device``'s allocator: live/peak bytes, alloc/free counts, device free/total."""
    ctx = get_context(device, "allocator_stats")
    c = ctx.counters
    free, total = ctx.backend.memory_info()
    cached = ctx.backend.cached_bytes() if hasattr(ctx.backend, "cached_bytes") else 0
    return AllocatorStats(ctx.name, c.live_bytes, c.peak_bytes, c.alloc_count, c.free_count, free, total, cached)


def reset_peak_bytes(device: Any = "cpu") -> None:
    """Start peak tracking afresh from the current live bytes."""
    c = get_context(device, "reset_peak_bytes").counters
    c.peak_bytes = c.live_bytes


def collect_allocator(force: bool = False) -> int:
    """Finalize unreachable buffers; with ``force``, also return cached device blocks to the driver.

    Returns the number of cached bytes handed back (always 0 on the CPU, which caches nothing).
    """
    collect_garbage()
    freed = 0
    for ctx in known_contexts():
        freed += ctx.backend.collect(bool(force))
    return freed
