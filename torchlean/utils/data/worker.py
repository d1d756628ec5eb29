"""DataLoader worker processes (``num_workers > 0``), on Python's ``multiprocessing``.

Start method: ``forkserver`` where the platform has it (Linux, macOS), else ``spawn``; never
``fork`` by default. A forked child of a process that has run a parallel CPU kernel dies as soon as
it runs one itself (GNU OpenMP, Numba's threading layer here, is not fork-safe), and a CUDA context
does not survive a fork either. The fork server is started with torchlean imported, so a worker
starts in milliseconds. Pass ``multiprocessing_context="fork"`` to get PyTorch's Linux behaviour
(no ``if __name__ == "__main__":`` guard needed, nothing pickled) when the dataset code runs no
torchlean kernels.

Protocol: one index queue per worker carries ``(epoch, task, index)``; one result queue carries
``(epoch, task, worker_id, kind, payload)`` back, and the main process hands batches out in task
order. The dataset (to the workers) and every batch (back) cross as NumPy arrays (transport.py);
with the default collate function a worker builds its batches from arrays alone.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.context
import pickle
import queue
import random
import signal
import time
import traceback
import weakref
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ...errors import ArgumentError, WorkerError
from ...runtime import rng
from .collate import for_worker
from .transport import dumps

__all__ = ["WorkerInfo", "get_worker_info", "mp_context", "WorkerPool", "Fetcher", "Exhausted"]

_POLL_S = 0.1  # how often a waiting side checks that the other one is still alive


# -- what a worker knows about itself --------------------------------------------------------------
class WorkerInfo:
    """``id``, ``num_workers``, ``seed`` and this worker's copy of ``dataset`` (read-only)."""

    __slots__ = ("id", "num_workers", "seed", "dataset")

    def __init__(self, id: int, num_workers: int, seed: int, dataset: Any) -> None:  # noqa: A002
        for name, value in (("id", id), ("num_workers", num_workers), ("seed", seed), ("dataset", dataset)):
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise ArgumentError(f"WorkerInfo: cannot set {name} (the fields are read-only)")

    def __repr__(self) -> str:
        return f"WorkerInfo(id={self.id}, num_workers={self.num_workers}, seed={self.seed})"


_worker_info: WorkerInfo | None = None


def get_worker_info() -> WorkerInfo | None:
    """In a DataLoader worker process: its ``WorkerInfo``; in the main process: None."""
    return _worker_info


# -- fetching one batch (in the main process with num_workers=0, else in a worker) ---------------------
class Exhausted(Exception):
    """An iterable dataset has no further batch (not StopIteration: user code may raise that)."""


class Fetcher:
    """Turns one index from the loader's sampler into a batch.

    Map-style: the index is a list of keys (batched) or one key. Iterable: the index is a list whose
    length is the batch size (batched) or None, and the items come from the dataset's iterator."""

    def __init__(self, dataset: Any, iterable: bool, auto_collation: bool, collate_fn: Callable, drop_last: bool):
        self.dataset, self.iterable, self.auto_collation = dataset, iterable, auto_collation
        self.collate_fn, self.drop_last = collate_fn, drop_last
        self.reset()

    def reset(self) -> None:
        self.it = iter(self.dataset) if self.iterable else None
        self.ended = False

    def fetch(self, index: Any) -> Any:
        if self.iterable:
            if self.ended:
                raise Exhausted
            if not self.auto_collation:
                try:
                    return self.collate_fn(next(self.it))
                except StopIteration:
                    self.ended = True
                    raise Exhausted from None
            data = []
            for _ in range(len(index)):
                try:
                    data.append(next(self.it))
                except StopIteration:
                    self.ended = True
                    break
            if not data or (self.drop_last and len(data) < len(index)):
                raise Exhausted
            return self.collate_fn(data)
        if not self.auto_collation:
            return self.collate_fn(self.dataset[index])
        getitems = getattr(self.dataset, "__getitems__", None)
        data = getitems(index) if callable(getitems) else [self.dataset[i] for i in index]
        return self.collate_fn(data)


@dataclass
class _Failure:
    """An exception raised in a worker: its type (if it pickles) and the worker's traceback text."""
    exc_type: Any
    text: str

    def reraise(self) -> None:
        # as PyTorch: the same exception type, its message carrying the worker's traceback
        try:
            exc = self.exc_type(self.text) if self.exc_type is not None else None
        except Exception:
            exc = None
        if not isinstance(exc, BaseException):
            exc = WorkerError(self.text)
        raise exc


def _failure(exc: BaseException, worker_id: int) -> _Failure:
    text = (f"Caught {type(exc).__name__} in DataLoader worker process {worker_id}.\nOriginal "
            + "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
    try:
        pickle.dumps(type(exc))
        exc_type = type(exc)
    except Exception:  # a class defined where the main process cannot import it
        exc_type = None
    return _Failure(exc_type, text)


# -- the worker process -----------------------------------------------------------------------------
def _seed_worker(seed: int) -> None:
    rng.manual_seed(seed)
    random.seed(seed)
    np.random.seed(rng.splitmix64(seed) & 0xFFFFFFFF)


def _worker_loop(worker_id: int, num_workers: int, seed: int, job: Any, index_queue: Any, result_queue: Any,
                 done: Any) -> None:
    global _worker_info
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the main process, which stops us
    failure = None
    fetcher = None
    try:
        _seed_worker(seed)
        dataset, iterable, auto_collation, collate_fn, drop_last, worker_init_fn = (
            pickle.loads(job) if isinstance(job, bytes) else job)
        _worker_info = WorkerInfo(worker_id, num_workers, seed, dataset)
        if worker_init_fn is not None:
            worker_init_fn(worker_id)
        fetcher = Fetcher(dataset, iterable, auto_collation, for_worker(collate_fn), drop_last)
    except Exception as exc:  # reported with the first task, where the main process is waiting
        failure = _failure(exc, worker_id)
    parent = multiprocessing.parent_process()
    try:
        while True:
            try:
                task = index_queue.get(timeout=_POLL_S)
            except queue.Empty:
                if done.is_set() or (parent is not None and not parent.is_alive()):
                    break
                continue
            if task is None:
                break
            epoch, idx, index = task
            if index == "reset":  # a new epoch on persistent workers
                if fetcher is not None and failure is None:
                    try:
                        fetcher.reset()
                    except Exception as exc:
                        failure = _failure(exc, worker_id)
                continue
            if failure is not None:
                result_queue.put((epoch, idx, worker_id, "error", failure))
                continue
            try:
                result_queue.put((epoch, idx, worker_id, "data", dumps(fetcher.fetch(index))))
            except Exhausted:
                result_queue.put((epoch, idx, worker_id, "exhausted", None))
            except Exception as exc:
                result_queue.put((epoch, idx, worker_id, "error", _failure(exc, worker_id)))
    finally:
        # the main process may have stopped reading: do not wait at exit to flush what is queued
        result_queue.cancel_join_thread()


# -- the main process's side --------------------------------------------------------------------------
_preload_set = False


def mp_context(choice: Any) -> multiprocessing.context.BaseContext:
    """The multiprocessing context for a loader's ``multiprocessing_context`` argument."""
    if isinstance(choice, multiprocessing.context.BaseContext):
        return choice
    global _preload_set
    if choice is None:
        method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
        ctx = multiprocessing.get_context(method)
        if method == "forkserver" and not _preload_set:
            # the server imports torchlean once; workers fork from it ready to run. __main__ stays
            # out: each worker imports it anyway, and a script without a main guard would otherwise
            # run inside the server
            ctx.set_forkserver_preload(["torchlean"])
            _preload_set = True
        return ctx
    if isinstance(choice, str):
        try:
            return multiprocessing.get_context(choice)
        except ValueError:
            raise ArgumentError(f"DataLoader: multiprocessing_context must be one of "
                                f"{multiprocessing.get_all_start_methods()} or a context, got {choice!r}") from None
    raise ArgumentError(f"DataLoader: multiprocessing_context must be a start method name or a multiprocessing "
                        f"context, got {type(choice).__name__}")


def _shutdown(workers: list, index_queues: list, result_queue: Any, done: Any) -> None:
    done.set()
    for q in index_queues:
        try:
            q.put(None)
        except (OSError, ValueError):
            pass
    # an idle worker leaves within one poll; one still inside user code (a slow __getitem__) gets a
    # second, then is stopped: its batch is no longer wanted
    deadline = time.monotonic() + 1.0
    for w in workers:
        w.join(timeout=max(0.0, deadline - time.monotonic()))
    for w in workers:
        if w.is_alive():
            w.terminate()
            w.join(timeout=1.0)
    for q in index_queues + [result_queue]:
        q.cancel_join_thread()
        q.close()


class WorkerPool:
    """The worker processes of one epoch (or of every epoch, with ``persistent_workers``).

    ``run(index_iter)`` yields the batches of one epoch in sampler order, keeping at most
    ``prefetch_factor * num_workers`` tasks in flight. The processes stop when the pool is closed or
    garbage-collected, also when an epoch was abandoned halfway."""

    def __init__(self, num_workers: int, prefetch_factor: int, timeout: float, context: Any, job: tuple,
                 seed: int) -> None:
        """``job``: (dataset, iterable, auto_collation, collate_fn, drop_last, worker_init_fn)."""
        self.num_workers = num_workers
        self.prefetch = prefetch_factor * num_workers
        self.timeout = timeout
        self.epoch = 0
        ctx = mp_context(context)
        if ctx.get_start_method() != "fork":  # a forked worker inherits the objects themselves
            try:
                job = dumps(job)
            except Exception as exc:
                raise ArgumentError(
                    f"DataLoader: with num_workers > 0 the dataset, collate_fn and worker_init_fn go to the worker "
                    f"processes ({ctx.get_start_method()}) and must pickle: {type(exc).__name__}: {exc}. Define "
                    f"them at module level, or use num_workers=0") from None
        self.result_queue = ctx.Queue()
        self.done = ctx.Event()
        self.index_queues, self.workers = [], []
        for wid in range(self.num_workers):
            # not base + id as PyTorch: generator seeds one apart give the same keys shifted by one
            # draw (key = splitmix64(seed + counter)), so each worker's seed is mixed
            iq = ctx.Queue()
            w = ctx.Process(target=_worker_loop, daemon=True, args=(
                wid, self.num_workers, rng.derive_key(seed, wid), job, iq, self.result_queue, self.done))
            w.start()
            self.index_queues.append(iq)
            self.workers.append(w)
        self._close = weakref.finalize(self, _shutdown, self.workers, self.index_queues, self.result_queue, self.done)

    def close(self) -> None:
        self._close()

    @property
    def closed(self) -> bool:
        return not self._close.alive

    def new_epoch(self) -> int:
        self.epoch += 1
        if self.epoch > 1:
            for q in self.index_queues:
                q.put((self.epoch, -1, "reset"))
        return self.epoch

    def _get(self) -> tuple:
        start = time.monotonic()
        while True:
            wait = _POLL_S
            if self.timeout > 0:
                left = self.timeout - (time.monotonic() - start)
                if left <= 0:
                    self.close()
                    raise WorkerError(f"DataLoader: timed out after {self.timeout} seconds waiting for a batch "
                                      f"from the worker processes (timeout={self.timeout})")
                wait = min(wait, left)
            try:
                return self.result_queue.get(timeout=wait)
            except queue.Empty:
                pass
            dead = [(i, w) for i, w in enumerate(self.workers) if w.exitcode is not None]
            if dead:
                self.close()
                names = ", ".join(f"{i} (pid {w.pid}, exit code {w.exitcode})" for i, w in dead)
                raise WorkerError(f"DataLoader: worker process {names} exited unexpectedly; its error output "
                                  f"says why. A script that starts workers at import time needs an "
                                  f"`if __name__ == \"__main__\":` guard (workers import the main module)")

    def run(self, index_iter: Any) -> Any:
        """The batches of one epoch, in order (a generator)."""
        epoch = self.new_epoch()
        active = [True] * self.num_workers
        ready: dict[int, tuple] = {}
        in_flight: set[int] = set()
        sent = delivered = 0
        next_worker = 0
        sampler_done = False
        while True:
            while not sampler_done and len(in_flight) + len(ready) < self.prefetch:
                if not any(active):
                    sampler_done = True
                    break
                while not active[next_worker]:
                    next_worker = (next_worker + 1) % self.num_workers
                try:
                    index = next(index_iter)
                except StopIteration:
                    sampler_done = True
                    break
                self.index_queues[next_worker].put((epoch, sent, index))
                in_flight.add(sent)
                sent += 1
                next_worker = (next_worker + 1) % self.num_workers
            if delivered in ready:
                kind, payload = ready.pop(delivered)
                delivered += 1
                if kind == "data":
                    yield pickle.loads(payload)
                elif kind == "error":
                    self.close()
                    payload.reraise()
                continue
            if delivered == sent:  # nothing in flight and nothing more to send
                return
            ep, idx, wid, kind, payload = self._get()
            if ep != epoch:  # from an epoch abandoned halfway (persistent workers)
                continue
            in_flight.discard(idx)
            if kind == "exhausted":
                active[wid] = False
            ready[idx] = (kind, payload)
