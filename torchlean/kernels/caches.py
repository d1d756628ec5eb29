"""Caches of arrays that a backend keeps between calls (DFT bases, cuFFT plans, workspaces ...).

Every such cache is bounded, reports its bytes to the allocator telemetry (``cached_bytes`` of
``allocator_stats``: its arrays are no Buffer's, so live bytes never see them) and is emptied by
``collect_allocator(True)``. A cache registers once, under its backend's name ("cpu" or "cuda");
the backend's ``cached_bytes()`` and ``collect(True)`` go through ``held_bytes`` and ``clear``.

Memos of results computed from shapes (plans, launch data, device geometry) are ``memo``s: one
bounded least-recently-used mechanism for the whole package, whose statistics ``stats()`` reports
and ``clear_memos()`` resets.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from typing import Any, Callable, Hashable

__all__ = ["ByteLRU", "register", "register_table", "held_bytes", "clear", "memo", "stats", "clear_memos"]

_registry: dict[str, list[tuple[Callable[[Any], int], Callable[[], int]]]] = {}


def register(backend: str, nbytes: Callable[[Any], int], clear_fn: Callable[[], int]) -> None:
    """Count ``nbytes(device)`` into ``backend``'s cached bytes (``device``: a CUDA device index,
    or None for all); ``clear_fn()`` empties the cache and returns the bytes it let go of."""
    _registry.setdefault(backend, []).append((nbytes, clear_fn))


def register_table(backend: str, table: dict, nbytes_of: Callable[[Any], int]) -> None:
    """Register a plain dict cache whose keys start with the device index (per device and stream
    workspaces, say): ``nbytes_of(value)`` is one entry's bytes; clearing drops every entry (their
    memory returns to the pool once the kernels queued on it have run)."""
    def nbytes(device: Any = None) -> int:
        return sum(nbytes_of(v) for k, v in list(table.items()) if device is None or k[0] == device)

    def clear_fn() -> int:
        freed = nbytes()
        table.clear()
        return freed

    register(backend, nbytes, clear_fn)


def held_bytes(backend: str, device: Any = None) -> int:
    """What the caches registered under ``backend`` hold (on ``device``, where they tell)."""
    return sum(nbytes(device) for nbytes, _ in _registry.get(backend, ()))


def clear(backend: str) -> int:
    """Empty every cache registered under ``backend``; the bytes let go of."""
    return sum(clear_fn() for _, clear_fn in _registry.get(backend, ()))


class ByteLRU:
    """A least-recently-used map bounded by the bytes of its values (and by a number of entries),
    registered under ``backend``. ``get`` and ``put`` take a lock: threads share the cache. A
    value may be put with the device its memory is on (``device=``), for per-device telemetry."""

    def __init__(self, backend: str, max_bytes: int, max_entries: int = 64) -> None:
        self.max_bytes, self.max_entries = max_bytes, max_entries
        self._items: OrderedDict[Hashable, tuple[Any, int, Any]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        register(backend, self.nbytes, self.clear)

    def get(self, key: Hashable) -> Any:
        """The value kept under ``key`` (now the most recently used), or None."""
        with self._lock:
            hit = self._items.get(key)
            if hit is None:
                return None
            self._items.move_to_end(key)
            return hit[0]

    def put(self, key: Hashable, value: Any, nbytes: int, device: Any = None) -> Any:
        """Keep ``value`` (``nbytes`` bytes) under ``key``, evicting the least recently used entries
        over the bounds; a value larger than the whole budget is not kept. Returns ``value``."""
        if nbytes > self.max_bytes:
            return value
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            while self._items and (self._bytes + nbytes > self.max_bytes or len(self._items) >= self.max_entries):
                self._bytes -= self._items.popitem(last=False)[1][1]
            self._items[key] = (value, nbytes, device)
            self._bytes += nbytes
        return value

    def nbytes(self, device: Any = None) -> int:
        """The bytes held (on ``device`` only, when given)."""
        if device is None:
            return self._bytes
        with self._lock:
            return sum(n for _, n, d in self._items.values() if d == device)

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> int:
        with self._lock:
            freed, self._bytes = self._bytes, 0
            self._items.clear()
        return freed


# -- memos -------------------------------------------------------------------------------------------
class _Memo:
    """The bookkeeping of one memo: its lru_cache and how many of its misses raised (those keep no
    entry, so they are no evictions)."""

    __slots__ = ("cached", "failures")

    def __init__(self, cached: Any) -> None:
        self.cached, self.failures = cached, 0

    def stats(self) -> dict[str, int | None]:
        info = self.cached.cache_info()
        return {"hits": info.hits, "misses": info.misses, "entries": info.currsize, "maxsize": info.maxsize,
                "evictions": info.misses - self.failures - info.currsize}

    def clear(self) -> int:
        entries = self.cached.cache_info().currsize
        self.cached.cache_clear()  # (resets its counts too)
        self.failures = 0
        return entries


_memos: dict[str, _Memo] = {}


def memo(name: str, maxsize: int, backend: str | None = None, entry_bytes: int = 0) -> Callable[[Callable], Callable]:
    """Decorator: remember the results of ``fn`` (hashable arguments) for its ``maxsize`` most
    recently used argument tuples, under ``name`` in ``stats()``. Only returned results are kept:
    a call that raises raises again the next time. The wrapper is functools' C ``lru_cache``, so a
    hit costs what an lru_cache hit costs; only a miss runs Python bookkeeping.

    A memo whose values hold memory (device arrays, ``entry_bytes`` each) names its ``backend``: it
    then counts into that backend's cached bytes and ``collect(True)`` empties it."""
    def wrap(fn: Callable) -> Callable:
        record: _Memo

        @functools.wraps(fn)
        def compute(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except BaseException:
                record.failures += 1
                raise

        cached = functools.lru_cache(maxsize=maxsize)(compute)
        record = _memos[name] = _Memo(cached)
        if backend is not None:
            register(backend, lambda device=None: cached.cache_info().currsize * entry_bytes,
                     lambda: record.clear() * entry_bytes)
        return cached

    return wrap


def stats() -> dict[str, dict[str, int | None]]:
    """name -> {hits, misses, evictions, entries, maxsize} of every memo (counted since its last
    clear)."""
    return {name: m.stats() for name, m in _memos.items()}


def clear_memos() -> int:
    """Empty every memo (and reset its counts); the number of entries dropped."""
    return sum(m.clear() for m in list(_memos.values()))
