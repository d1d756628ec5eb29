"""The NCCL engine, through CuPy's ``cupy.cuda.nccl`` (CuPy is imported only here, and only when a
``nccl`` process group is made).

Every collective runs on a CUDA stream of its own: it waits (an event) for the work already queued
on the caller's stream, so it may start while the caller queues more (DistributedDataParallel's
buckets overlap backward this way), and ``Work.wait`` polls its completion event against the
deadline. When the deadline passes the communicator is aborted (``ncclCommAbort``), which ends
the NCCL kernels that wait for the missing peer, and the group is unusable from then on.

``Work.enqueue`` hands a result over in stream order instead: the caller's stream waits for the
collective's event and the host goes on (DistributedDataParallel ends backward this way, so the
host queues the optimizer step while the GPU still reduces). Then no host call waits on the
deadline, so a watchdog thread does: it polls the collectives in flight and aborts the
communicator when one is past its deadline, which ends the kernels a stream sync could wait on;
the next collective or ``Work`` call on this rank raises ``DistTimeoutError``.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Any, Callable

from .common import DistributedError, DistTimeoutError, ReduceOp
from .work import Work, poll_until

__all__ = ["NCCLEngine", "cupy_nccl"]

# ncclDataType_t and ncclRedOp_t (nccl.h); CuPy exports most of them as NCCL_* constants
_DTYPES = {"int8": 0, "uint8": 1, "int32": 2, "uint32": 3, "int64": 4, "uint64": 5, "float16": 6, "float32": 7,
           "float64": 8}
_OPS = {ReduceOp.SUM: 0, ReduceOp.PRODUCT: 1, ReduceOp.MAX: 2, ReduceOp.MIN: 3, ReduceOp.AVG: 4}
_NCCL_AVG_SINCE = 21000  # ncclAvg came with NCCL 2.10


def cupy_nccl(op: str) -> tuple[Any, Any]:
    """(cupy, cupy.cuda.nccl), or a DistributedError that says what is missing."""
    try:
        import cupy
        from cupy.cuda import nccl
    except ImportError as exc:
        raise DistributedError(f"{op}: backend 'nccl' needs CuPy with NCCL (pip install cupy-cuda12x "
                               f"nvidia-nccl-cu12, or the cuda13 pair): {exc}") from None
    if not getattr(nccl, "available", True):
        raise DistributedError(f"{op}: CuPy was built without NCCL (cupy.cuda.nccl.available is False)")
    return cupy, nccl


def _id_bytes(uid: Any) -> bytes:
    """NCCL's unique id as bytes (CuPy 14 returns bytes, earlier CuPy a tuple of signed C chars)."""
    return uid if isinstance(uid, bytes) else bytes(b & 0xFF for b in uid)


def _communicator(nccl: Any, cupy: Any, size: int, uid: bytes, rank: int, device_index: int, timeout_s: float,
                  op: str) -> Any:
    """``ncclCommInitRank`` within the group's deadline. It blocks until every rank has joined, so a
    peer that died after the id exchange would hang it forever: it runs on a daemon thread (CuPy
    releases the GIL in the call) that this thread waits for up to the deadline."""
    got: dict[str, Any] = {}

    def build() -> None:
        try:
            cupy.cuda.Device(device_index).use()  # the device is per thread in CUDA's runtime API
            try:
                got["comm"] = nccl.NcclCommunicator(size, uid, rank)
            except TypeError:  # CuPy before 14 takes the id as a tuple of C chars, not bytes
                got["comm"] = nccl.NcclCommunicator(size, tuple(b - 256 if b > 127 else b for b in uid), rank)
        except BaseException as exc:  # noqa: BLE001 - NcclError and CUDA errors alike, reported below
            got["error"] = exc

    t = threading.Thread(target=build, name=f"torchlean-nccl-init-{rank}", daemon=True)
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        raise DistTimeoutError(f"{op}: NCCL did not build the communicator for rank {rank} of {size} within the "
                               f"process group's timeout of {timeout_s:g} s; a peer rank probably died or hangs "
                               f"before joining (its own output says why)")
    if "error" in got:
        raise DistributedError(f"{op}: NCCL could not build the communicator for rank {rank} of {size} on "
                               f"cuda:{device_index}: {got['error']}") from None
    return got["comm"]


class NCCLEngine:
    name = "nccl"

    def __init__(self, rank: int, size: int, device_index: int, share_uid: Callable[[Any], Any],
                 timeout_s: float, op: str = "init_process_group") -> None:
        cupy, nccl = cupy_nccl(op)
        self.cupy, self.nccl, self.xp = cupy, nccl, cupy
        self.rank, self.size, self.timeout_s, self.device_index = rank, size, timeout_s, device_index
        cupy.cuda.Device(device_index).use()  # NCCL binds the communicator to the current device
        uid = share_uid(_id_bytes(nccl.get_unique_id()) if rank == 0 else None)
        self.comm = _communicator(nccl, cupy, size, uid, rank, device_index, timeout_s, op)
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self._has_avg = nccl.get_version() >= _NCCL_AVG_SINCE
        self.aborted = False
        self._failure: str | None = None  # what the watchdog found past its deadline
        self._inflight: collections.deque = collections.deque()  # (deadline, event, what), launch order
        self._lock = threading.Lock()
        self._watchdog: threading.Thread | None = None

    # -- plumbing ------------------------------------------------------------------------
    def _abort(self) -> None:
        with self._lock:
            if not self.aborted:
                self.aborted = True
                self.comm.abort()

    def _watch(self, what: str, done: Any) -> None:
        with self._lock:
            self._inflight.append((time.monotonic() + self.timeout_s, done, what))
            if self._watchdog is None:
                self._watchdog = threading.Thread(target=self._watchdog_loop, name="torchlean-nccl-watchdog",
                                                  daemon=True)
                self._watchdog.start()

    def _watchdog_loop(self) -> None:
        """Retire completed collectives (in launch order: one stream completes in order); abort the
        communicator when the oldest is past its deadline."""
        self.cupy.cuda.Device(self.device_index).use()  # (this thread's CUDA calls on this rank's GPU)
        while not self.aborted:
            with self._lock:
                while self._inflight and self._inflight[0][1].done:
                    self._inflight.popleft()
                late = self._inflight[0] if self._inflight and time.monotonic() > self._inflight[0][0] else None
            if late is not None:
                self._failure = (f"{late[2]}: did not complete within the process group's timeout of "
                                 f"{self.timeout_s:g} s; a peer rank probably died or hangs (its own output says "
                                 f"why); the watchdog aborted this rank's NCCL communicator")
                self._abort()
                return
            time.sleep(0.05)

    def raise_if_failed(self, what: str) -> None:
        if self._failure is not None:
            raise DistTimeoutError(f"{what}: stopped, a collective failed: {self._failure}")

    def _check(self) -> None:
        try:
            with self._lock:  # (never on a communicator the watchdog is aborting)
                if self.aborted:
                    return
                self.comm.check_async_error()
        except Exception as exc:  # noqa: BLE001
            self._abort()
            raise DistributedError(f"NCCL reported an error (a peer failed or the network broke): {exc}") from None

    def _run(self, what: str, launch: Callable[[int], None], finish: Callable[[], Any], keep: Any) -> Work:
        self.raise_if_failed(what)
        if self.aborted:
            raise DistributedError(f"{what}: the NCCL communicator was aborted after an earlier failure; "
                                   f"destroy_process_group() and start a new job")
        cupy = self.cupy
        caller = cupy.cuda.get_current_stream()
        ready = cupy.cuda.Event(block=False, disable_timing=True)
        ready.record(caller)
        self.stream.wait_event(ready)  # the inputs were written on the caller's stream
        try:
            launch(self.stream.ptr)
        except Exception as exc:  # noqa: BLE001
            raise DistributedError(f"{what}: NCCL failed to launch the collective: {exc}") from None
        done = cupy.cuda.Event(block=False, disable_timing=True)
        done.record(self.stream)
        self._watch(what, done)

        def finish_on_caller() -> Any:
            # (a collective the watchdog aborted also completes: its result is garbage, so raise)
            self.raise_if_failed(what)
            caller.wait_event(done)  # (after wait(): already complete; after enqueue(): the ordering)
            return finish()

        return Work(what, lambda: done.done, finish_on_caller, self.timeout_s, self._abort, self._check,
                    keep=(keep, done), enqueue=finish_on_caller)

    def _dtype(self, what: str, arr: Any) -> int:
        code = _DTYPES.get(arr.dtype.name)
        if code is None:
            raise DistributedError(f"{what}: NCCL collectives take float or integer tensors, got dtype {arr.dtype}")
        return code

    def to_device(self, host: Any) -> Any:
        with self.cupy.cuda.Device(self.device_index):
            return self.cupy.asarray(host)

    def to_host(self, arr: Any) -> Any:
        return arr.get()

    def progress(self) -> None:
        """NCCL progresses on the GPU by itself."""

    # -- collectives on flat device arrays ---------------------------------------------
    def all_reduce(self, what: str, arr: Any, op: ReduceOp) -> Work:
        dt = self._dtype(what, arr)
        out = self.cupy.empty_like(arr)
        native_avg = op is ReduceOp.AVG and self._has_avg and arr.dtype.kind == "f"
        code = _OPS[op] if (op is not ReduceOp.AVG or native_avg) else _OPS[ReduceOp.SUM]
        comm, n, cupy = self.comm, arr.size, self.cupy
        size = self.size

        def finish() -> Any:
            if op is ReduceOp.AVG and not native_avg:
                cupy.divide(out, out.dtype.type(size), out=out)  # (on the caller's stream, after the collective)
            return out

        return self._run(what, lambda s: comm.allReduce(arr.data.ptr, out.data.ptr, n, dt, code, s), finish,
                         (arr, out))

    def broadcast(self, what: str, arr: Any, src: int) -> Work:
        dt = self._dtype(what, arr)
        buf = arr.copy() if self.rank == src else self.cupy.empty_like(arr)
        comm, n = self.comm, arr.size
        return self._run(what, lambda s: comm.broadcast(buf.data.ptr, buf.data.ptr, n, dt, src, s), lambda: buf, buf)

    def all_gather(self, what: str, arr: Any) -> Work:
        dt = self._dtype(what, arr)
        out = self.cupy.empty((self.size,) + arr.shape, arr.dtype)
        comm, n = self.comm, arr.size
        return self._run(what, lambda s: comm.allGather(arr.data.ptr, out.data.ptr, n, dt, s), lambda: out, (arr, out))

    def reduce_scatter(self, what: str, arr: Any, op: ReduceOp) -> Work:
        dt = self._dtype(what, arr)
        n = arr.size // self.size
        out = self.cupy.empty(n, arr.dtype)
        native_avg = op is ReduceOp.AVG and self._has_avg and arr.dtype.kind == "f"
        code = _OPS[op] if (op is not ReduceOp.AVG or native_avg) else _OPS[ReduceOp.SUM]
        comm, size, cupy = self.comm, self.size, self.cupy

        def finish() -> Any:
            if op is ReduceOp.AVG and not native_avg:
                cupy.divide(out, out.dtype.type(size), out=out)
            return out

        return self._run(what, lambda s: comm.reduceScatter(arr.data.ptr, out.data.ptr, n, dt, code, s), finish,
                         (arr, out))

    def barrier(self, what: str) -> Work:
        one = self.cupy.zeros(1, self.cupy.float32)
        return self.all_reduce(what, one, ReduceOp.SUM)

    def close(self) -> None:
        if not self.aborted:  # let the queued collectives finish, within the deadline
            idle = self.cupy.cuda.Event(block=False, disable_timing=True)
            idle.record(self.stream)
            poll_until(lambda: idle.done or self.aborted, self.timeout_s, "destroy_process_group", self._abort)
        with self._lock:
            if not self.aborted:
                self.comm.destroy()
            self.aborted = True
