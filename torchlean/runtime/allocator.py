"""Allocator telemetry: what each device's buffers hold now, at peak, and how often they came and went.

The counters are fed by ``Buffer`` itself (creation, ``release()`` and garbage collection), so
they count torchlean buffers only; ``device_free_bytes``/``device_total_bytes`` come from the
device's driver (CUDA), and are 0 on ``"cpu"`` as in the seed's CPU stub, which has no device
memory; ``host_free_bytes``/``host_total_bytes`` are the host's available and total memory on
every device. So a long run can tell a torchlean lifetime leak (live bytes grow) from outside
memory pressure (free bytes fall alone).
"""

from __future__ import annotations

import gc
import os
from dataclasses import dataclass
from typing import Callable


class AllocatorCounters:
    """Mutable per-device counters. One instance per device, owned by its ``DeviceContext``."""

    __slots__ = ("live_bytes", "peak_bytes", "alloc_count", "free_count")

    def __init__(self) -> None:
        self.live_bytes = 0
        self.peak_bytes = 0
        self.alloc_count = 0
        self.free_count = 0

    def on_alloc(self, nbytes: int) -> None:
        self.live_bytes += nbytes
        self.alloc_count += 1
        if self.live_bytes > self.peak_bytes:
            self.peak_bytes = self.live_bytes

    def on_free(self, nbytes: int) -> None:
        self.live_bytes -= nbytes
        self.free_count += 1


@dataclass(frozen=True)
class AllocatorStats:
    """A snapshot of one device's allocator (see ``allocator_stats``)."""

    device: str
    live_bytes: int
    peak_bytes: int
    alloc_count: int
    free_count: int
    device_free_bytes: int
    device_total_bytes: int
    cached_bytes: int = 0
    host_free_bytes: int = 0
    host_total_bytes: int = 0


def host_memory_bytes() -> tuple[int, int]:
    """(available, total) bytes of host memory, or (0, 0) where the OS does not say."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            info = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f if line.strip()}
        return info.get("MemAvailable", 0), info.get("MemTotal", 0)
    except (OSError, ValueError, IndexError):
        try:
            page = os.sysconf("SC_PAGE_SIZE")
            return os.sysconf("SC_AVPHYS_PAGES") * page, os.sysconf("SC_PHYS_PAGES") * page
        except (ValueError, OSError, AttributeError):
            return 0, 0


def _mib(nbytes: int) -> str:
    return f"{nbytes / 2**20:.1f} MiB"


def format_allocator_stats(stats: AllocatorStats) -> str:
    """The one-line report used in progress logs."""
    line = (
        f"alloc[{stats.device}] live {_mib(stats.live_bytes)} peak {_mib(stats.peak_bytes)} "
        f"allocs {stats.alloc_count} frees {stats.free_count}"
    )
    if stats.cached_bytes:
        line += f" cached {_mib(stats.cached_bytes)}"
    if stats.device_total_bytes:
        line += f" | device free {_mib(stats.device_free_bytes)} of {_mib(stats.device_total_bytes)}"
    elif stats.host_total_bytes:  # the CPU: no device memory, say what the host has
        line += f" | host free {_mib(stats.host_free_bytes)} of {_mib(stats.host_total_bytes)}"
    return line


def collect_garbage() -> None:
    """Finalize unreachable buffers caught in reference cycles so their bytes leave ``live``."""
    gc.collect()


# Caches above the backends (the optimizer's step values, ...) register here, so that
# ``allocator_stats`` reports their bytes as cached and ``collect_allocator(True)`` empties them.
# The backends' own caches are reported by each backend's ``cached_bytes``/``collect``.
_caches: list[tuple[str, Callable[[], int], Callable[[], int]]] = []


def register_cache(device: str, nbytes: Callable[[], int], clear: Callable[[], int]) -> None:
    """Make a cache visible: ``nbytes()`` is what it holds on ``device`` (bytes that no Buffer's
    live count includes), ``clear()`` empties it and returns the bytes it let go of."""
    _caches.append((device, nbytes, clear))


def registered_cached_bytes(device: str) -> int:
    """The bytes the registered caches hold on ``device``."""
    return sum(nbytes() for dev, nbytes, _ in _caches if dev == device)


def clear_registered_caches() -> int:
    """Empty every registered cache; the bytes let go of."""
    return sum(clear() for _, _, clear in _caches)
