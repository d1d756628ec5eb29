"""Allocation failures: flush the device's cache, retry once, then a clear OutOfMemoryError.

Backends signal a failed allocation with ``MemoryError`` (NumPy does; CuPy's OutOfMemoryError
subclasses it). Every backend call that allocates goes through ``run_allocating``: the retry
returns cached blocks to the driver first (``backend.collect(True)``), which is what a caching
allocator can do about fragmentation; if that is not enough, the error names the operation and
gives the requested, live, peak and device-free bytes, and the process stays usable because
the failed call left no buffer behind.
"""

from __future__ import annotations

from typing import Any, Callable

from ..errors import OutOfMemoryError
from .allocator import format_allocator_stats
from .device import DeviceContext


def _free_text(stats) -> str:
    if stats.device_total_bytes:
        return f"device free {stats.device_free_bytes} of {stats.device_total_bytes} bytes"
    return f"host free {stats.host_free_bytes} of {stats.host_total_bytes} bytes"


def out_of_memory(op: str, ctx: DeviceContext, requested: int) -> OutOfMemoryError:
    from .telemetry import allocator_stats

    stats = allocator_stats(ctx.name)
    return OutOfMemoryError(
        f"{op}: out of memory on {ctx.name}: requested {requested} bytes with {stats.live_bytes} live, "
        f"peak {stats.peak_bytes}, {_free_text(stats)} (after returning cached blocks and retrying once); "
        + format_allocator_stats(stats)
    )


def run_allocating(op: str, ctx: DeviceContext, out_elems: int, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``; on MemoryError flush the cache and retry once, then raise OutOfMemoryError."""
    try:
        return fn(*args)
    except MemoryError:
        return retry_after_flush(op, ctx, out_elems, fn, *args)


def retry_after_flush(op: str, ctx: DeviceContext, out_elems: int, fn: Callable[..., Any], *args: Any) -> Any:
    """The second attempt, after ``fn`` raised MemoryError once."""
    ctx.backend.collect(True)
    try:
        return fn(*args)
    except MemoryError:
        raise out_of_memory(op, ctx, 4 * out_elems) from None
