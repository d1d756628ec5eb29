"""``Work``: a collective in flight, finished by ``wait()`` within the process group's deadline.

Both engines run collectives without blocking (MPI's nonblocking requests, NCCL kernels on a
stream of their own), so a waiting rank polls the request or event and gives up when the
deadline passes: a peer that died or hangs makes the survivors raise ``DistTimeoutError``
instead of waiting forever. Polling sleeps a little longer each round (up to 1 ms), so a long
wait costs no CPU and a short one adds microseconds.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from .common import DistTimeoutError

__all__ = ["Work", "poll_until"]


def poll_until(test: Callable[[], bool], timeout_s: float, what: str, on_timeout: Callable[[], None] | None = None,
               check: Callable[[], None] | None = None) -> None:
    """Return once ``test()`` is true; after ``timeout_s`` seconds call ``on_timeout`` and raise
    ``DistTimeoutError`` naming ``what``. ``check`` runs between polls (to surface an engine's
    asynchronous error early)."""
    if test():
        return
    deadline = time.monotonic() + timeout_s
    nap = 0.0
    rounds = 0
    while not test():
        now = time.monotonic()
        if now > deadline:
            if on_timeout is not None:
                on_timeout()
            raise DistTimeoutError(
                f"{what}: did not complete within the process group's timeout of {timeout_s:g} s; a peer rank "
                f"probably died or hangs (its own output says why); this rank gives up")
        rounds += 1
        if check is not None and rounds % 64 == 0:
            check()
        time.sleep(nap)
        nap = min(nap * 2 + 1e-5, 1e-3)


class Work:
    """One collective in flight: ``wait()`` returns its result (what ``finish`` makes of it), and
    raises ``DistTimeoutError`` when it does not complete within the deadline."""

    __slots__ = ("what", "_test", "_finish", "_enqueue", "_on_timeout", "_check", "_timeout_s", "_done", "_result",
                 "keep")

    def __init__(self, what: str, test: Callable[[], bool], finish: Callable[[], Any], timeout_s: float,
                 on_timeout: Callable[[], None] | None = None, check: Callable[[], None] | None = None,
                 keep: Any = None, enqueue: Callable[[], Any] | None = None) -> None:
        self.what = what
        self._test, self._finish, self._enqueue = test, finish, enqueue
        self._on_timeout, self._check = on_timeout, check
        self._timeout_s = timeout_s
        self._done = False
        self._result = None
        self.keep = keep  # arrays the engine reads or writes until the collective completes

    def is_completed(self) -> bool:
        return self._done or bool(self._test())

    def wait(self) -> Any:
        if not self._done:
            poll_until(self._test, self._timeout_s, self.what, self._on_timeout, self._check)
            self._result = self._finish()
            self._done = True
            self.keep = None
        return self._result

    def enqueue(self) -> Any:
        """The result in stream order, without waiting on the host: an engine that runs on a device
        stream (NCCL) orders the caller's stream after the collective and leaves the deadline to
        its watchdog; the others wait as ``wait()`` does."""
        if self._enqueue is None or self._done:
            return self.wait()
        self._result = self._enqueue()
        self._done = True
        self.keep = None  # (the caller's stream is ordered after the collective: its arrays may be reused)
        return self._result
