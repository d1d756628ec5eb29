"""Datasets: PyTorch's ``torch.utils.data`` classes with the same behaviour.

A map-style ``Dataset`` has ``__getitem__`` (and usually ``__len__``); an ``IterableDataset`` has
``__iter__``. ``random_split`` draws its permutation from a torchlean ``Generator`` (one draw), so
with the same seed the split is the same on every machine, but not the one PyTorch would pick.
"""

from __future__ import annotations

import bisect
import math
import warnings
from typing import Any, Iterable, Iterator, Sequence

from ...errors import ArgumentError, DTypeError, IndexOutOfRangeError, ShapeError
from ...runtime import rng_draws
from ...tensor import Tensor

__all__ = ["Dataset", "IterableDataset", "TensorDataset", "ConcatDataset", "ChainDataset", "Subset",
           "random_split"]


class Dataset:
    """A map from keys (usually ``0 .. len - 1``) to samples. Subclasses define ``__getitem__``,
    and ``__len__`` for the samplers that need it."""

    def __getitem__(self, index: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define __getitem__")

    def __add__(self, other: "Dataset") -> "ConcatDataset":
        return ConcatDataset([self, other])


class IterableDataset(Dataset):
    """A stream of samples: subclasses define ``__iter__``. With worker processes every worker
    iterates its own copy; use ``get_worker_info()`` in ``__iter__`` to give each a share."""

    def __iter__(self) -> Iterator[Any]:
        raise NotImplementedError(f"{type(self).__name__} must define __iter__")

    def __add__(self, other: "IterableDataset") -> "ChainDataset":
        return ChainDataset([self, other])


def _first_dim(t: Any) -> int:
    shape = getattr(t, "shape", None)
    if shape is None or len(shape) == 0:
        raise ShapeError(f"TensorDataset: every tensor needs a first dimension, got {type(t).__name__} "
                         f"of shape {shape}")
    return shape[0]


class TensorDataset(Dataset):
    """Samples are the rows of the given tensors: ``dataset[i] == (t[i] for t in tensors)``."""

    def __init__(self, *tensors: Tensor) -> None:
        for i, t in enumerate(tensors):
            if not isinstance(t, Tensor):
                raise DTypeError(f"TensorDataset: expected Tensors, got {type(t).__name__} for argument {i}")
        if tensors and any(_first_dim(t) != _first_dim(tensors[0]) for t in tensors):
            raise ShapeError(f"TensorDataset: size mismatch between tensors: first dimensions "
                             f"{[t.shape[0] for t in tensors]}")
        self.tensors = tensors

    def __getitem__(self, index: Any) -> tuple:
        return tuple(t[index] for t in self.tensors)

    def __len__(self) -> int:
        return self.tensors[0].shape[0] if self.tensors else 0


class ConcatDataset(Dataset):
    """Map-style datasets one after the other."""

    def __init__(self, datasets: Iterable[Dataset]) -> None:
        self.datasets = list(datasets)
        if not self.datasets:
            raise ArgumentError("ConcatDataset: datasets should not be an empty iterable")
        for d in self.datasets:
            if isinstance(d, IterableDataset):
                raise ArgumentError("ConcatDataset: does not support IterableDataset (use ChainDataset)")
        self.cumulative_sizes = []
        total = 0
        for d in self.datasets:
            total += len(d)
            self.cumulative_sizes.append(total)

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def __getitem__(self, idx: int) -> Any:
        if idx < 0:
            if -idx > len(self):
                raise IndexOutOfRangeError(f"ConcatDataset: index {idx} out of range for length {len(self)}")
            idx = len(self) + idx
        which = bisect.bisect_right(self.cumulative_sizes, idx)
        if which == len(self.datasets):
            raise IndexOutOfRangeError(f"ConcatDataset: index {idx} out of range for length {len(self)}")
        start = self.cumulative_sizes[which - 1] if which > 0 else 0
        return self.datasets[which][idx - start]


class ChainDataset(IterableDataset):
    """Iterable datasets one after the other."""

    def __init__(self, datasets: Iterable[Dataset]) -> None:
        self.datasets = datasets

    def __iter__(self) -> Iterator[Any]:
        for d in self.datasets:
            if not isinstance(d, IterableDataset):
                raise ArgumentError(f"ChainDataset: only IterableDatasets can be chained, got {type(d).__name__}")
            yield from d

    def __len__(self) -> int:
        return sum(len(d) for d in self.datasets)


class Subset(Dataset):
    """The samples of ``dataset`` at ``indices``, in that order."""

    def __init__(self, dataset: Dataset, indices: Sequence[int]) -> None:
        self.dataset = dataset
        self.indices = indices

    def __getitem__(self, idx: Any) -> Any:
        if isinstance(idx, list):
            return self.dataset[[self.indices[i] for i in idx]]
        return self.dataset[self.indices[idx]]

    def __getitems__(self, indices: list) -> list:
        # batched access when the underlying dataset has it (as PyTorch's Subset)
        inner = getattr(self.dataset, "__getitems__", None)
        if callable(inner):
            return inner([self.indices[i] for i in indices])
        return [self.dataset[self.indices[i]] for i in indices]

    def __len__(self) -> int:
        return len(self.indices)


def _split_lengths(n: int, lengths: Sequence[Any]) -> list[int]:
    lengths = list(lengths)
    if any(isinstance(x, bool) or not isinstance(x, (int, float)) for x in lengths):
        raise DTypeError(f"random_split: lengths must be integers or fractions, got {lengths!r}")
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        for i, frac in enumerate(lengths):
            if not 0 <= frac <= 1:
                raise ArgumentError(f"random_split: fraction at index {i} is not between 0 and 1, got {frac}")
        sizes = [int(math.floor(n * frac)) for frac in lengths]
        for i in range(n - sum(sizes)):  # the remainder goes round-robin, as PyTorch does
            sizes[i % len(sizes)] += 1
        for i, size in enumerate(sizes):
            if size == 0:
                warnings.warn(f"random_split: length of split at index {i} is 0; this split will be empty",
                              stacklevel=3)
        return sizes
    if any(not float(x).is_integer() or x < 0 for x in lengths):
        raise ArgumentError(f"random_split: lengths must be non-negative integers or fractions summing to 1, "
                            f"got {lengths!r}")
    sizes = [int(x) for x in lengths]
    if sum(sizes) != n:
        raise ArgumentError(f"random_split: the lengths sum to {sum(sizes)}, not to the dataset's length {n}")
    return sizes


def random_split(dataset: Dataset, lengths: Sequence[Any], generator: Any = None) -> list[Subset]:
    """Non-overlapping random ``Subset``s of the given lengths (integers summing to ``len(dataset)``,
    or fractions summing to 1). One permutation is drawn from ``generator`` (default: the global one)."""
    sizes = _split_lengths(len(dataset), lengths)
    perm = rng_draws.permutation(sum(sizes), generator, "random_split").tolist()
    out, start = [], 0
    for size in sizes:
        out.append(Subset(dataset, perm[start:start + size]))
        start += size
    return out
