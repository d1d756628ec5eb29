"""Seeded generators on top of the counter-based primitives.

A generator is (seed, counter). Each draw takes ``key = splitmix64(seed + counter)`` and then
advances the counter by one, so a program's n-th draw has the same key on every device and the
state can be saved and restored exactly as two integers.

Threads: a generator, the default one included, is shared by every thread of the process. Taking
a counter value and advancing it is one step under a lock, so threads drawing at once always get
distinct keys; which thread gets which key depends on the scheduling, so a thread that needs
reproducible draws passes its own ``Generator`` (``generator=``).
"""

from __future__ import annotations

import threading
from typing import Any

from ..errors import ArgumentError
from ..spec.rng import derive_key, splitmix64  # exact integer SplitMix64 (host side, scalars)

__all__ = ["Generator", "default_generator", "manual_seed", "splitmix64", "derive_key",
           "get_rng_state", "set_rng_state"]


def _u64(op: str, name: str, v: Any) -> int:
    if isinstance(v, bool) or not hasattr(v, "__index__"):
        raise ArgumentError(f"{op}: {name} must be an integer, got {v!r}")
    v = int(v)
    if not 0 <= v < 2**64:
        raise ArgumentError(f"{op}: {name} must be in [0, 2**64), got {v}")
    return v


_MASK64 = 2**64 - 1


class Generator:
    """Counter-based random state: a 64-bit seed and a 64-bit draw counter. Safe to share between
    threads (see the module docstring)."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = _u64("Generator", "seed", seed)
        self.counter = 0
        self._lock = threading.Lock()

    def manual_seed(self, seed: int) -> "Generator":
        seed = _u64("manual_seed", "seed", seed)
        with self._lock:
            self.seed, self.counter = seed, 0
        return self

    def next_key(self) -> int:
        """The key for the next draw; advances the counter (atomically: each key goes to one draw)."""
        with self._lock:
            seed, counter = self.seed, self.counter
            self.counter = (counter + 1) & _MASK64
        return derive_key(seed, counter)

    def get_state(self) -> tuple[int, int]:
        with self._lock:
            return self.seed, self.counter

    def set_state(self, state: tuple[int, int]) -> None:
        try:
            seed, counter = state
        except (TypeError, ValueError):
            raise ArgumentError(f"set_state: expected a (seed, counter) pair, got {state!r}") from None
        # check both before assigning: a bad state must leave the generator as it was
        seed, counter = _u64("set_state", "seed", seed), _u64("set_state", "counter", counter)
        with self._lock:
            self.seed, self.counter = seed, counter

    def __getstate__(self) -> tuple[int, int]:  # (a lock cannot be pickled or deep-copied)
        return self.get_state()

    def __setstate__(self, state: tuple[int, int]) -> None:
        self._lock = threading.Lock()
        self.seed, self.counter = state

    def __repr__(self) -> str:
        return f"Generator(seed={self.seed}, counter={self.counter})"


default_generator = Generator(0)


def manual_seed(seed: int) -> Generator:
    """Reset the default generator to ``seed`` with counter 0 (as ``torch.manual_seed``)."""
    return default_generator.manual_seed(seed)


def get_rng_state() -> tuple[int, int]:
    return default_generator.get_state()


def set_rng_state(state: tuple[int, int]) -> None:
    default_generator.set_state(state)
