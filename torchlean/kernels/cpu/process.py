"""Settings of the whole process that the CPU backend changes, what they are now, and how to undo them.

The CPU backend changes two things that belong to the process, not to torchlean:

* glibc malloc's thresholds (``mallopt``), once, when the backend loads (the first CPU tensor or
  buffer of the process): ``M_MMAP_THRESHOLD`` 32 MiB and ``M_TRIM_THRESHOLD`` 256 MiB. By default
  glibc maps each multi-MB array afresh and gives freed heap back to the OS, so every new array
  pays a page fault per 4 KiB on first touch (and its free a munmap): a large share of a step
  that makes many multi-MB temporaries (mamba's), saved at the same peak memory. Skipped where
  ``TORCHLEAN_MALLOPT=0``, where the user tunes malloc (any ``MALLOC_*`` variable or
  ``GLIBC_TUNABLES``), and off glibc.
* the thread count of the OpenBLAS that NumPy calls, set to one at torchlean's first GEMM (and
  again at any later one that finds it changed): torchlean splits its GEMMs over Numba's threads
  instead (parallel.py, which owns the controls). NumPy GEMMs elsewhere in the process then run
  on one thread too.

``process_settings()`` says what is changed now; ``restore_process_settings()`` puts back the
OpenBLAS thread count that torchlean found and glibc's default thresholds (128 KiB each: glibc can
report neither the previous values nor turn its adaptive mmap threshold back on), and returns the
freed heap the raised trim threshold kept to the OS (``malloc_trim``). Call it when the
process is done with torchlean's CPU kernels: the next torchlean GEMM sets OpenBLAS to one thread
again. Nothing is restored at exit, where the settings end with the process anyway (and raising
OpenBLAS's count would start its threads during interpreter shutdown).
"""

from __future__ import annotations

import ctypes
import os
import platform
from typing import Any

from . import parallel

__all__ = ["process_settings", "restore_process_settings"]

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
_MMAP_BYTES, _TRIM_BYTES = 32 << 20, 256 << 20
_GLIBC_DEFAULT = 128 << 10  # DEFAULT_MMAP_THRESHOLD_MIN and DEFAULT_TRIM_THRESHOLD
_malloc_state = {"applied": False}


def _mallopt():
    """glibc's mallopt through ctypes, or None elsewhere."""
    if platform.libc_ver()[0] != "glibc":
        return None
    try:
        fn = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return fn


def apply_malloc_settings() -> bool:
    """Set the thresholds above (the backend calls this once, when it loads); True when applied."""
    env = os.environ
    if env.get("TORCHLEAN_MALLOPT", "").strip() == "0":
        return False
    if any(k.startswith("MALLOC_") for k in env) or "GLIBC_TUNABLES" in env:
        return False
    mallopt = _mallopt()
    if mallopt is None:
        return False
    ok = bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_BYTES))
    ok = bool(mallopt(_M_TRIM_THRESHOLD, _TRIM_BYTES)) and ok
    _malloc_state["applied"] = True  # (even half-applied: restoring sets both back)
    return ok


def process_settings() -> dict[str, Any]:
    """What torchlean has changed in this process now: ``{"malloc_thresholds": (mmap, trim) bytes
    or None, "openblas_threads": (the count torchlean found, the count now) or None}``."""
    found, now = parallel.blas_found_threads(), parallel.blas_threads()
    blas = None if found is None or now is None else (found, now)
    malloc = (_MMAP_BYTES, _TRIM_BYTES) if _malloc_state["applied"] else None
    return {"malloc_thresholds": malloc, "openblas_threads": blas}


def restore_process_settings() -> dict[str, Any]:
    """Undo the changes ``process_settings()`` lists (see the module docstring); returns what was
    restored, in the same form (empty when nothing was changed)."""
    restored: dict[str, Any] = {}
    with parallel.blas_lock():
        found = parallel.blas_found_threads()
        if found is not None and parallel.blas_threads() is not None:
            parallel.set_blas_threads(found)
            parallel.forget_blas_threads()
            restored["openblas_threads"] = found
    if _malloc_state["applied"]:
        mallopt = _mallopt()
        if mallopt is not None:
            mallopt(_M_MMAP_THRESHOLD, _GLIBC_DEFAULT)
            mallopt(_M_TRIM_THRESHOLD, _GLIBC_DEFAULT)
            ctypes.CDLL(None).malloc_trim(0)  # and give back the freed heap the old threshold kept
        _malloc_state["applied"] = False
        restored["malloc_thresholds"] = (_GLIBC_DEFAULT, _GLIBC_DEFAULT)
    return restored
