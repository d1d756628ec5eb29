"""The MPI engine (mpi4py): collectives on host NumPy arrays, each a nonblocking request that
``Work.wait`` polls against the deadline.

MPI progresses a request only inside MPI calls (no progress thread by default), so
``progress()`` tests the open requests: DistributedDataParallel calls it from its gradient hooks,
which lets the first buckets travel while backward computes the rest.
"""

from __future__ import annotations

import atexit
import sys
from typing import Any

import numpy as np

from .common import ReduceOp
from .work import Work

__all__ = ["MPIEngine"]


class MPIEngine:
    name = "mpi"
    xp = np

    def __init__(self, MPI: Any, comm: Any, timeout_s: float) -> None:
        self.MPI, self.comm, self.timeout_s = MPI, comm, timeout_s
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self._open: list[Any] = []
        self._ops = {ReduceOp.SUM: MPI.SUM, ReduceOp.AVG: MPI.SUM, ReduceOp.PRODUCT: MPI.PROD,
                     ReduceOp.MAX: MPI.MAX, ReduceOp.MIN: MPI.MIN}
        self._aborting = False

    # -- plumbing ------------------------------------------------------------------------
    def _work(self, what: str, req: Any, finish: Any, keep: Any) -> Work:
        self._open.append(req)
        return Work(what, req.Test, finish, self.timeout_s, self._timed_out, keep=keep)

    def raise_if_failed(self, what: str) -> None:
        """MPI waits on the host (``Work.wait``), so a failure has already raised where it happened."""

    def _timed_out(self) -> None:
        # MPI_Finalize at exit would wait for the dead or hung peer: end the whole job instead, once
        # this process has said why (the traceback is printed before atexit handlers run).
        if not self._aborting:
            self._aborting = True
            atexit.register(self._abort_job)

    def _abort_job(self) -> None:
        sys.stderr.flush()
        sys.stdout.flush()
        self.comm.Abort(1)

    def progress(self) -> None:
        """Let the open requests advance (MPI progresses inside MPI calls only)."""
        if self._open:
            self._open = [r for r in self._open if not r.Test()]

    def to_device(self, host: np.ndarray) -> np.ndarray:
        return host

    def to_host(self, arr: np.ndarray) -> np.ndarray:
        return arr

    # -- collectives on flat arrays ----------------------------------------------------
    def all_reduce(self, what: str, arr: np.ndarray, op: ReduceOp) -> Work:
        out = np.empty_like(arr)
        req = self.comm.Iallreduce(arr, out, self._ops[op])
        return self._work(what, req, self._finisher(out, op), (arr, out))

    def broadcast(self, what: str, arr: np.ndarray, src: int) -> Work:
        buf = np.array(arr, copy=True)
        req = self.comm.Ibcast(buf, root=src)
        return self._work(what, req, lambda: buf, buf)

    def all_gather(self, what: str, arr: np.ndarray) -> Work:
        out = np.empty((self.size,) + arr.shape, arr.dtype)
        req = self.comm.Iallgather(arr, out)
        return self._work(what, req, lambda: out, (arr, out))

    def reduce_scatter(self, what: str, arr: np.ndarray, op: ReduceOp) -> Work:
        n = arr.size // self.size
        out = np.empty(n, arr.dtype)
        req = self.comm.Ireduce_scatter_block(arr, out, self._ops[op])
        return self._work(what, req, self._finisher(out, op), (arr, out))

    def _finisher(self, out: np.ndarray, op: ReduceOp) -> Any:
        """What completes a reduction into ``out``: MPI has no average, so AVG is SUM / size."""
        size = self.size

        def finish() -> np.ndarray:
            if op is ReduceOp.AVG:
                np.divide(out, np.asarray(size, out.dtype), out=out, casting="unsafe")
            return out

        return finish

    def barrier(self, what: str) -> Work:
        return self._work(what, self.comm.Ibarrier(), lambda: None, None)

    def close(self) -> None:
        if self._aborting:
            return
        self._open = []
        # COMM_WORLD itself is MPI's: mpi4py finalizes MPI at exit.


