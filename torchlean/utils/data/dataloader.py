"""``DataLoader``: batches from a dataset, in the main process or in worker processes.

Arguments, defaults and checks follow PyTorch's ``torch.utils.data.DataLoader``. Where we differ:
``shuffle`` and the worker seeds draw from a torchlean ``Generator`` (the same seed gives the same
order on every machine, not PyTorch's order); worker processes start with ``forkserver``/``spawn``,
not ``fork`` (worker.py says why); ``pin_memory`` is accepted and does nothing (batches are built on
the host; move them with ``.to(device)``).
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

from ...errors import ArgumentError, DTypeError
from ...runtime.rng import default_generator
from .collate import default_collate, default_convert
from .dataset import IterableDataset
from .sampler import BatchSampler, RandomSampler, Sampler, SequentialSampler
from .worker import Exhausted, Fetcher, WorkerPool, mp_context

__all__ = ["DataLoader"]


class _InfiniteConstantSampler(Sampler):
    """None forever: the sampler of an iterable dataset, whose batches come from its iterator."""

    def __iter__(self) -> Iterator[None]:
        while True:
            yield None


def _check_count(name: str, v: Any, allow_none: bool = False) -> None:
    if v is None and allow_none:
        return
    if isinstance(v, bool) or not isinstance(v, int):
        raise ArgumentError(f"DataLoader: {name} should be an integer, got {name}={v!r}")


class DataLoader:
    """Iterates over ``dataset`` in batches of ``batch_size`` (``None``: samples one at a time)."""

    _FROZEN = ("batch_size", "batch_sampler", "sampler", "drop_last", "dataset", "persistent_workers")

    def __init__(self, dataset: Any, batch_size: int | None = 1, shuffle: bool | None = None, sampler: Any = None,
                 batch_sampler: Any = None, num_workers: int = 0, collate_fn: Callable | None = None,
                 pin_memory: bool = False, drop_last: bool = False, timeout: float = 0,
                 worker_init_fn: Callable | None = None, multiprocessing_context: Any = None, generator: Any = None,
                 *, prefetch_factor: int | None = None, persistent_workers: bool = False,
                 pin_memory_device: str = "", in_order: bool = True) -> None:
        _check_count("num_workers", num_workers)
        if num_workers < 0:
            raise ArgumentError("DataLoader: num_workers option should be non-negative; use num_workers=0 to "
                                "disable multiprocessing")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
            raise ArgumentError(f"DataLoader: timeout option should be non-negative, got timeout={timeout!r}")
        if num_workers == 0 and prefetch_factor is not None:
            raise ArgumentError("DataLoader: prefetch_factor option could only be specified in multiprocessing. "
                                "let num_workers > 0 to enable multiprocessing, otherwise set prefetch_factor to None")
        if num_workers > 0 and prefetch_factor is None:
            prefetch_factor = 2
        _check_count("prefetch_factor", prefetch_factor, allow_none=True)
        if prefetch_factor is not None and prefetch_factor < 0:
            raise ArgumentError("DataLoader: prefetch_factor option should be non-negative")
        if persistent_workers and num_workers == 0:
            raise ArgumentError("DataLoader: persistent_workers option needs num_workers > 0")
        if multiprocessing_context is not None:
            if num_workers == 0:
                raise ArgumentError(f"DataLoader: multiprocessing_context can only be used with multi-process "
                                    f"loading (num_workers > 0), but got num_workers={num_workers}")
            mp_context(multiprocessing_context)  # a bad name fails here, not at the first epoch
        if generator is not None and not hasattr(generator, "next_key"):
            raise ArgumentError(f"DataLoader: generator must be a torchlean.Generator or None, got "
                                f"{type(generator).__name__}")

        iterable = isinstance(dataset, IterableDataset)
        if iterable:
            if shuffle not in (None, False):
                raise ArgumentError(f"DataLoader with IterableDataset: expected unspecified shuffle option, "
                                    f"but got shuffle={shuffle}")
            if sampler is not None:
                raise ArgumentError(f"DataLoader with IterableDataset: expected unspecified sampler option, "
                                    f"but got sampler={sampler}")
            if batch_sampler is not None:
                raise ArgumentError(f"DataLoader with IterableDataset: expected unspecified batch_sampler "
                                    f"option, but got batch_sampler={batch_sampler}")
        shuffle = bool(shuffle)
        if sampler is not None and shuffle:
            raise ArgumentError("DataLoader: sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ArgumentError("DataLoader: batch_sampler option is mutually exclusive with batch_size, "
                                    "shuffle, sampler, and drop_last")
            batch_size, drop_last = None, False
        elif batch_size is None and drop_last:
            raise ArgumentError("DataLoader: batch_size=None option disables auto-batching and is mutually "
                                "exclusive with drop_last")
        if sampler is None:
            if iterable:
                sampler = _InfiniteConstantSampler()
            elif shuffle:
                sampler = RandomSampler(dataset, generator=generator)
            else:
                sampler = SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        if collate_fn is None:
            collate_fn = default_collate if batch_sampler is not None else default_convert
        elif not callable(collate_fn):
            raise DTypeError(f"DataLoader: collate_fn must be callable, got {type(collate_fn).__name__}")

        self.dataset = dataset
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.num_workers = num_workers
        self.collate_fn = collate_fn
        self.pin_memory = pin_memory  # accepted; batches are host data (see the module docstring)
        self.pin_memory_device = pin_memory_device
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.generator = generator
        self.prefetch_factor = prefetch_factor
        self.persistent_workers = persistent_workers
        self.in_order = in_order  # batches always come in sampler order
        self._iterable = iterable
        self._pool: WorkerPool | None = None
        self._initialized = True

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self._FROZEN and getattr(self, "_initialized", False):
            raise ArgumentError(f"DataLoader: {name} attribute should not be set after DataLoader is initialized")
        object.__setattr__(self, name, value)

    @property
    def _index_sampler(self) -> Any:
        return self.batch_sampler if self.batch_sampler is not None else self.sampler

    def _fetcher(self) -> Fetcher:
        return Fetcher(self.dataset, self._iterable, self.batch_sampler is not None, self.collate_fn,
                       self.drop_last)

    def __iter__(self) -> Iterator[Any]:
        # one draw per epoch from the loader's generator, workers or not, so that num_workers does not
        # change the shuffle order drawn from the same generator
        base_seed = (self.generator or default_generator).next_key()
        indices = iter(self._index_sampler)
        if self.num_workers == 0:
            return _single_process(self._fetcher(), indices)
        if self.persistent_workers:
            if self._pool is None or self._pool.closed:
                object.__setattr__(self, "_pool", self._new_pool(base_seed))
            return self._pool.run(indices)
        return _epoch_pool(self._new_pool(base_seed), indices)

    def _new_pool(self, seed: int) -> WorkerPool:
        job = (self.dataset, self._iterable, self.batch_sampler is not None, self.collate_fn, self.drop_last,
               self.worker_init_fn)
        return WorkerPool(self.num_workers, self.prefetch_factor, self.timeout, self.multiprocessing_context, job,
                          seed)

    def __len__(self) -> int:
        if self._iterable:
            n = len(self.dataset)  # TypeError for a dataset without __len__, as PyTorch
            if self.batch_size is not None:
                n = n // self.batch_size if self.drop_last else -(-n // self.batch_size)
            return n
        return len(self._index_sampler)


def _single_process(fetcher: Fetcher, indices: Iterator[Any]) -> Iterator[Any]:
    for index in indices:
        try:
            yield fetcher.fetch(index)
        except Exhausted:
            return


def _epoch_pool(pool: WorkerPool, indices: Iterator[Any]) -> Iterator[Any]:
    """One epoch on a pool of its own, closed at the end or when the iterator is dropped."""
    try:
        yield from pool.run(indices)
    finally:
        pool.close()
