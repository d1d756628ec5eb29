"""Samplers: which dataset keys a DataLoader visits, and in which order (PyTorch's classes).

Random samplers draw from a torchlean ``Generator`` (``generator=``; default: the global one), one
draw per permutation or block of indices: the same seed gives the same order on every machine,
though not the order PyTorch's generator would give.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from ...errors import ArgumentError, DTypeError
from ...runtime import rng_draws

__all__ = ["Sampler", "SequentialSampler", "RandomSampler", "SubsetRandomSampler", "WeightedRandomSampler",
           "BatchSampler"]


def _positive_int(op: str, name: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v <= 0:
        raise ArgumentError(f"{op}: {name} should be a positive integer value, but got {name}={v!r}")
    return int(v)


def _bool(op: str, name: str, v: Any) -> bool:
    if not isinstance(v, bool):
        raise DTypeError(f"{op}: {name} should be a boolean value, but got {name}={v!r}")
    return v


class Sampler:
    """Base class: an iterable of dataset keys (or of lists of keys, for batch samplers)."""

    def __init__(self, data_source: Any = None) -> None:
        pass

    def __iter__(self) -> Iterator[Any]:
        raise NotImplementedError(f"{type(self).__name__} must define __iter__")


class SequentialSampler(Sampler):
    """0, 1, ..., len(data_source) - 1."""

    def __init__(self, data_source: Any) -> None:
        self.data_source = data_source

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


class RandomSampler(Sampler):
    """A random order of the dataset (a fresh permutation each epoch), or ``num_samples`` keys drawn
    uniformly with ``replacement``."""

    def __init__(self, data_source: Any, replacement: bool = False, num_samples: int | None = None,
                 generator: Any = None) -> None:
        self.data_source = data_source
        self.replacement = _bool("RandomSampler", "replacement", replacement)
        self._num_samples = num_samples
        self.generator = generator
        _positive_int("RandomSampler", "num_samples", self.num_samples)

    @property
    def num_samples(self) -> int:
        # the dataset may change size between construction and iteration
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self) -> Iterator[int]:
        n, total = len(self.data_source), self.num_samples
        if self.replacement:
            # blocks of 32 as PyTorch: a long epoch does not hold all its indices at once
            for start in range(0, total, 32):
                yield from rng_draws.integers(n, min(32, total - start), self.generator, "RandomSampler").tolist()
            return
        for _ in range(total // n):
            yield from rng_draws.permutation(n, self.generator, "RandomSampler").tolist()
        if total % n:
            yield from rng_draws.permutation(n, self.generator, "RandomSampler")[:total % n].tolist()

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """The given indices in a random order (a fresh one each epoch)."""

    def __init__(self, indices: Sequence[int], generator: Any = None) -> None:
        self.indices = indices
        self.generator = generator

    def __iter__(self) -> Iterator[int]:
        for i in rng_draws.permutation(len(self.indices), self.generator, "SubsetRandomSampler").tolist():
            yield self.indices[i]

    def __len__(self) -> int:
        return len(self.indices)


class WeightedRandomSampler(Sampler):
    """``num_samples`` indices in [0, len(weights)), index i with probability proportional to weights[i]."""

    def __init__(self, weights: Sequence[float], num_samples: int, replacement: bool = True,
                 generator: Any = None) -> None:
        self.num_samples = _positive_int("WeightedRandomSampler", "num_samples", num_samples)
        self.replacement = _bool("WeightedRandomSampler", "replacement", replacement)
        w = np.asarray(weights, dtype=np.float64)
        if w.ndim != 1:
            raise ArgumentError(f"WeightedRandomSampler: weights should be a 1-d sequence, got shape {w.shape}")
        self.weights = w
        self.generator = generator

    def __iter__(self) -> Iterator[int]:
        return iter(rng_draws.weighted_choice(self.weights, self.num_samples, self.replacement, self.generator,
                                              "WeightedRandomSampler").tolist())

    def __len__(self) -> int:
        return self.num_samples


class BatchSampler(Sampler):
    """Lists of ``batch_size`` keys from ``sampler``; the last, shorter one is dropped with ``drop_last``."""

    def __init__(self, sampler: Iterable[Any], batch_size: int, drop_last: bool) -> None:
        self.batch_size = _positive_int("BatchSampler", "batch_size", batch_size)
        if not isinstance(drop_last, bool):
            raise ArgumentError(f"BatchSampler: drop_last should be a boolean value, but got drop_last={drop_last!r}")
        self.sampler = sampler
        self.drop_last = drop_last

    def __iter__(self) -> Iterator[list]:
        batch = []
        for idx in self.sampler:
            batch.append(idx)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self) -> int:
        if self.drop_last:
            return len(self.sampler) // self.batch_size
        return (len(self.sampler) + self.batch_size - 1) // self.batch_size
