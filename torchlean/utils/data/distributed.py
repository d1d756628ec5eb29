"""``DistributedSampler``: each of ``num_replicas`` processes reads its own share of the dataset.

``num_replicas`` and ``rank`` default to the world size and rank of the initialized process group
(``torchlean.distributed.init_process_group``); without one they must be passed.
"""

from __future__ import annotations

import math
from typing import Any, Iterator

from ...distributed.group import get_rank, get_world_size, is_initialized
from ...errors import ArgumentError
from ...runtime import rng_draws
from ...runtime.rng import Generator
from .sampler import Sampler

__all__ = ["DistributedSampler"]


class DistributedSampler(Sampler):
    """The keys of replica ``rank``: every ``num_replicas``-th key of one order shared by all
    replicas (shuffled from ``seed + epoch`` when ``shuffle``), padded by repeating keys so every
    replica gets the same count, or trimmed with ``drop_last``. Call ``set_epoch`` each epoch."""

    def __init__(self, dataset: Any, num_replicas: int | None = None, rank: int | None = None, shuffle: bool = True,
                 seed: int = 0, drop_last: bool = False) -> None:
        if (num_replicas is None or rank is None) and is_initialized():
            num_replicas = get_world_size() if num_replicas is None else num_replicas
            rank = get_rank() if rank is None else rank
        if num_replicas is None or rank is None:
            missing = " and ".join(n for n, v in (("num_replicas", num_replicas), ("rank", rank)) if v is None)
            raise ArgumentError(f"DistributedSampler: {missing} not given, and no process group is initialized "
                                f"(torchlean.distributed.init_process_group): pass num_replicas= and rank=")
        if isinstance(num_replicas, bool) or not isinstance(num_replicas, int) or num_replicas < 1:
            raise ArgumentError(f"DistributedSampler: num_replicas must be a positive integer, got {num_replicas!r}")
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < num_replicas:
            raise ArgumentError(f"DistributedSampler: invalid rank {rank!r}, rank should be in the interval "
                                f"[0, {num_replicas - 1}]")
        self.dataset = dataset
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0
        self.drop_last = drop_last
        n = len(dataset)
        if drop_last and n % num_replicas != 0:
            self.num_samples = math.ceil((n - num_replicas) / num_replicas)
        else:
            self.num_samples = math.ceil(n / num_replicas)
        self.total_size = self.num_samples * num_replicas
        self.shuffle = shuffle
        self.seed = seed

    def __iter__(self) -> Iterator[int]:
        n = len(self.dataset)
        if self.shuffle:
            # every replica draws the same order: a generator of its own, seeded by seed + epoch
            g = Generator().manual_seed((self.seed + self.epoch) % 2**64)
            indices = rng_draws.permutation(n, g, "DistributedSampler").tolist()
        else:
            indices = list(range(n))
        if not self.drop_last:
            padding = self.total_size - len(indices)
            if padding <= len(indices):
                indices += indices[:padding]
            else:
                indices += (indices * math.ceil(padding / len(indices)))[:padding]
        else:
            indices = indices[:self.total_size]
        return iter(indices[self.rank:self.total_size:self.num_replicas])

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """The epoch whose order ``__iter__`` gives next (with ``shuffle``: a new order each epoch)."""
        self.epoch = epoch
