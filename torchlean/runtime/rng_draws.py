"""Host-side index draws (permutations, integers, weighted choices) on the counter-based generators.

Each call is one draw: it takes one key from the generator (``next_key()``, the counter advances by
one whatever the size) and derives element ``i`` from ``splitmix64(key + i)``, as ``rand_uniform``
does. So the n-th call on a seeded generator gives the same indices on every machine, and a
generator's state stays two integers. The values differ from PyTorch's generator (a different
algorithm), only the distributions agree.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ArgumentError
from .rng import default_generator

__all__ = ["uniform64", "permutation", "integers", "weighted_choice"]

_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def _generator(op: str, generator: Any) -> Any:
    if generator is None:
        return default_generator
    if not hasattr(generator, "next_key"):
        raise ArgumentError(f"{op}: generator must be a torchlean.Generator or None, got {type(generator).__name__}")
    return generator


def _bits(n: int, key: int) -> np.ndarray:
    """splitmix64(key + i) for i < n, in uint64 arithmetic (wraps mod 2**64 as the spec's integers)."""
    z = np.arange(n, dtype=np.uint64) + np.uint64(key) + _GAMMA
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


def uniform64(n: int, generator: Any = None, op: str = "uniform64") -> np.ndarray:
    """n float64 values in [0, 1) (53 random bits each) from one draw of ``generator``."""
    key = _generator(op, generator).next_key()
    return (_bits(n, key) >> np.uint64(11)).astype(np.float64) * 2.0**-53


def permutation(n: int, generator: Any = None, op: str = "permutation") -> np.ndarray:
    """A uniformly random permutation of range(n) (int64): the order of n random 64-bit keys (a
    stable sort, so the rare equal keys still give a permutation)."""
    key = _generator(op, generator).next_key()
    return np.argsort(_bits(n, key), kind="stable").astype(np.int64)


def integers(high: int, n: int, generator: Any = None, op: str = "integers") -> np.ndarray:
    """n integers uniform in [0, high) (int64), high <= 2**53."""
    if high <= 0:
        raise ArgumentError(f"{op}: high must be positive, got {high}")
    u = uniform64(n, generator, op)
    return np.minimum(np.floor(u * high), high - 1).astype(np.int64)


def weighted_choice(weights: np.ndarray, n: int, replacement: bool, generator: Any = None,
                    op: str = "weighted_choice") -> np.ndarray:
    """n indices drawn with probability proportional to ``weights`` (1-d, non-negative, finite).

    With replacement: inverse CDF. Without: the Efraimidis-Spirakis keys u**(1/w), largest first,
    which gives the order of sequential weighted draws without replacement; as in PyTorch, categories
    of weight zero come last, once the others are used up."""
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or w.size == 0:
        raise ArgumentError(f"{op}: weights must be a non-empty 1-d sequence, got shape {w.shape}")
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ArgumentError(f"{op}: weights must be finite and non-negative")
    positive = int(np.count_nonzero(w))
    if positive == 0:
        raise ArgumentError(f"{op}: the weights sum to zero")
    if replacement:
        cdf = np.cumsum(w)
        u = uniform64(n, generator, op) * cdf[-1]
        return np.minimum(np.searchsorted(cdf, u, side="right"), w.size - 1).astype(np.int64)
    if n > w.size:
        raise ArgumentError(f"{op}: cannot draw {n} samples without replacement from {w.size} categories")
    u = 1.0 - uniform64(w.size, generator, op)  # in (0, 1]: log is finite
    with np.errstate(divide="ignore"):
        keys = np.where(w > 0, np.log(u) / np.where(w > 0, w, 1.0), -np.inf)
    return np.argsort(-keys, kind="stable")[:n].astype(np.int64)
