"""A test-only audit of the CUDA free list's declared ownership.

The package decides from state (``Buffer._shared``) that a dying Buffer's array may be recycled;
here every such array is also checked against the interpreter's reference counts, so that the
whole CUDA suite proves the state true: an array taken back from a Buffer while something else
still refers to it (a hidden holder a later kernel could read: a cache, a second Buffer over the
same array) is recorded, and the test that caused it fails (``tests/conftest.py``). Workspaces
given back by a launcher (``give_back``) are the launcher's declaration and are not audited: a
dead local alias in the launcher's own frame (a kernel's argument tuple) would count as a holder.
"""

from __future__ import annotations

import sys
import traceback

violations: list[str] = []
_fresh: tuple[int, int, int] | None = None
_installed = False


def _counts(arr) -> tuple[int, int, int]:
    ptr = arr.data
    return sys.getrefcount(arr), sys.getrefcount(ptr), sys.getrefcount(ptr.mem)


def install() -> None:
    """Wrap freelist._recycle once; calibrate on a fresh array passed the way Buffers pass theirs."""
    global _installed, _fresh
    if _installed:
        return
    import cupy

    from torchlean.kernels.cuda import freelist

    inner = freelist._recycle
    calibrating = [True]

    def audited(device, arr):  # same depth as the real path: one frame per caller
        global _fresh
        if sys._getframe(1).f_code.co_name != "recycle":  # give_back: a declaration (docstring)
            return inner(device, arr)
        if calibrating[0]:
            _fresh = _counts(arr)
            return
        counts = _counts(arr)
        if _fresh is not None and counts != _fresh and arr.base is None:
            violations.append(f"recycled an array still referenced elsewhere (counts {counts}, a lone array "
                              f"{_fresh}; held by {_holders(arr)}):\n" + "".join(traceback.format_stack(limit=8)))
        inner(device, arr)

    freelist._recycle = audited
    from torchlean.runtime.buffer import Buffer
    from torchlean.runtime.device import get_context

    lone = Buffer(cupy.empty(1, dtype=cupy.float32), get_context("cuda"))
    del lone  # __del__'s local, the hook's and audited's parameters: the path every Buffer takes
    calibrating[0] = False
    _installed = True


def _holders(arr) -> list[str]:
    """What refers to ``arr``: containers the collector tracks, and frames' local variables."""
    import gc

    found = [type(r).__name__ + ": " + repr(r)[:160] for r in gc.get_referrers(arr) if not hasattr(r, "f_code")]
    frame = sys._getframe(2)
    while frame is not None:
        for name, value in frame.f_locals.items():
            if value is arr:
                found.append(f"local {name!r} of {frame.f_code.co_name} ({frame.f_code.co_filename}:{frame.f_lineno})")
        frame = frame.f_back
    return found
