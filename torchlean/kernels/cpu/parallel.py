"""The CPU backend's parallel policy: which threads run its kernels, when a kernel splits its work
and into how many parts, and who owns BLAS threading.

* One pool: Numba's threads. Every parallel CPU kernel is a Numba parallel region (``prange``; the
  OpenMP or TBB threading layer), the GEMMs included: gemm.py and conv.py call OpenBLAS's
  ``cblas_sgemm`` from inside the regions (``sgemm_address()``). Large kernel bodies run through
  tasks.py (one shared region calling the body's cached callback), which compiles far faster than
  a region of their own; conv's 2-D items and its im2col/col2im branches, attention's lane kernels,
  the split elementwise kernels, the 2x2 max pool, layout's outer-block sums, the GEMM items
  (gemm.py), batch and layer norm and their backward passes (norm.py) and the split GELUs and cross
  entropy (classify.py) do; the other kernels still have their own regions. No other threads run kernels: two
  pools on the same cores fight, because OpenMP's workers (and OpenBLAS's) spin for a while after
  each region waiting for the next one, and a Python thread that needs the GIL to start its share
  waits for the caller to release it. The one exception: scipy.fft's transforms (spectral.py) run
  on pocketfft's own threads, which cannot live inside a Numba region; ``parts()`` sizes them too.
* When and how wide: ``parts(work, items, min_work)``: one part per Numba thread
  (``numba.get_num_threads()``, so it follows ``NUMBA_NUM_THREADS`` and ``numba.set_num_threads``),
  at most one per item (an image, a row block, a chunk) and one per ``min_work`` units of work; 1
  means the caller's thread alone. ``min_work`` is each kernel's own measure of the work that pays
  for a region's start and the other threads' wake-up (a few microseconds on the OpenMP layer),
  given in its own unit (multiply-adds, elements); kernels that split a fixed number of chunks
  pass their chunk count as ``items``. Under Numba's workqueue layer a region costs far more and
  is not safe with concurrent Python threads, so ``threads()`` is 1 there and nothing splits.
* BLAS: OpenBLAS runs at one thread inside torchlean, set at the first GEMM and left there
  (``blas_one_thread()``): its own threads would spin against Numba's. The count it had is kept for
  ``restore_process_settings()`` (process.py). Where NumPy's BLAS is not an OpenBLAS we can find,
  there is nothing to set and GEMMs are NumPy's.

Bits: no kernel's result depends on ``parts()`` except where a kernel says so (conv's N-D weight
gradient adds its parts' partial sums in part order, as it did on the former worker threads).
"""

from __future__ import annotations

import ctypes
import os
import threading

import numba
import numpy as np
from numba import njit, prange

__all__ = ["threads", "max_threads", "set_threads", "parts", "blas_one_thread", "blas_threads", "set_blas_threads", "blas_found_threads",
           "forget_blas_threads", "blas_lock", "sgemm_address"]


def threads() -> int:
    """Numba's thread count now (1 under the workqueue layer: see the module docstring)."""
    return 1 if _layer() == "workqueue" else numba.get_num_threads()


def max_threads() -> int:
    """The most threads Numba's pool can run (``NUMBA_NUM_THREADS``; 1 under the workqueue layer)."""
    return 1 if _layer() == "workqueue" else int(numba.config.NUMBA_NUM_THREADS)


def set_threads(n: int) -> int:
    """Run the calling thread's parallel kernels on ``n`` threads (1 <= n <= max_threads(), checked by
    the caller). Numba keeps this count per Python thread; returns the count in force."""
    if _layer() != "workqueue":
        numba.set_num_threads(int(n))
    return threads()


def parts(work: int, items: int, min_work: int) -> int:
    """How many parts a kernel splits ``work`` (spread over ``items`` indivisible items) into: one
    per thread, at most one per item and one per ``min_work`` units of work (>= 1)."""
    if work < 2 * min_work or items < 2:
        return 1
    return max(1, min(threads(), items, work // max(min_work, 1)))


@njit(cache=True, parallel=True)
def _touch(a):
    for i in prange(a.size):
        a[i] = i


_LAYER: dict = {}


def _layer() -> str:
    """Numba's threading layer, chosen at the first parallel region of the process (run here)."""
    name = _LAYER.get("name")
    if name is None:
        _touch(np.zeros(1))
        name = _LAYER["name"] = numba.threading_layer()
    return name


# -- OpenBLAS, the BLAS NumPy calls ------------------------------------------------------------------
def _numpy_openblas():
    """The OpenBLAS library NumPy calls (a ctypes.CDLL), or None (another BLAS)."""
    try:
        with open("/proc/self/maps") as f:
            libs = sorted({line.split()[-1] for line in f if "openblas" in line.rsplit("/", 1)[-1].lower()})
    except OSError:
        return None
    for path in libs:  # NumPy's own copy (SciPy ships another)
        if "numpy" in path:
            try:
                return ctypes.CDLL(path)
            except OSError:
                continue
    return None


def _find_controls(lib):
    """(get, set) of that OpenBLAS's thread count, or None."""
    if lib is None:
        return None
    for get, put in (("scipy_openblas_get_num_threads64_", "scipy_openblas_set_num_threads64_"),
                     ("openblas_get_num_threads64_", "openblas_set_num_threads64_"),
                     ("openblas_get_num_threads", "openblas_set_num_threads")):
        if hasattr(lib, get) and hasattr(lib, put):
            g, p_ = getattr(lib, get), getattr(lib, put)
            g.restype, g.argtypes, p_.restype, p_.argtypes = ctypes.c_int, [], None, [ctypes.c_int]
            return g, p_
    return None


def _find_sgemm(lib):
    """(address of cblas_sgemm, a zero of its integer type), or None."""
    if lib is None:
        return None
    for name, itype in (("scipy_cblas_sgemm64_", np.int64), ("cblas_sgemm64_", np.int64), ("cblas_sgemm", np.int32)):
        if hasattr(lib, name):
            return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value, itype(0)
    return None


def _find_core(lib) -> str | None:
    """The name of the kernels that OpenBLAS picked for this CPU ("Haswell", "SkylakeX", ...), or None."""
    if lib is None:
        return None
    for name in ("scipy_openblas_get_corename64_", "openblas_get_corename64_", "openblas_get_corename"):
        if hasattr(lib, name):
            f = getattr(lib, name)
            f.restype, f.argtypes = ctypes.c_char_p, []
            return (f() or b"").decode(errors="replace")
    return None


_LIB = _numpy_openblas()
_CONTROLS = _find_controls(_LIB)
_SGEMM = _find_sgemm(_LIB)
_CORE = _find_core(_LIB)
# Rows of a product whose multiples a GEMM block may start on without changing a bit (gemm.py):
# measured on Haswell kernels (AVX2; AMD Zen runs them too), where OpenBLAS's sgemm takes rows in
# groups of 24 and a partial group by other kernels in another order, and on SkylakeX kernels
# (AVX-512), where any row gave the one-call bits; 48 (both 16 and 24) elsewhere.
_ROW_QUANTA = {"Haswell": 24, "Zen": 24, "SkylakeX": 1, "Cooperlake": 1, "SapphireRapids": 1}
_FOUND = {"threads": None}  # OpenBLAS's thread count before we first set it to one (None: not yet)
_LOCK = threading.Lock()


def _reset_after_fork() -> None:
    """A forked child may inherit the lock held by a thread it does not have."""
    global _LOCK
    _LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


def blas_lock() -> threading.Lock:
    return _LOCK


def blas_threads() -> int | None:
    """OpenBLAS's thread count now, or None where we cannot read it."""
    return None if _CONTROLS is None else int(_CONTROLS[0]())


def set_blas_threads(n: int) -> None:
    if _CONTROLS is not None:
        _CONTROLS[1](int(n))


def blas_found_threads() -> int | None:
    """The count OpenBLAS had before torchlean set it to one (None: never set)."""
    return _FOUND["threads"]


def forget_blas_threads() -> None:
    """After the count was put back (restore_process_settings): the next GEMM sets one again."""
    _FOUND["threads"] = None


def blas_one_thread() -> None:
    """OpenBLAS at one thread from now on, the count it had kept (see the module docstring). Every
    GEMM of the backend calls this first (cheap when already one)."""
    if _CONTROLS is not None and _CONTROLS[0]() != 1:
        with _LOCK:
            if _FOUND["threads"] is None:
                _FOUND["threads"] = int(_CONTROLS[0]())
            _CONTROLS[1](1)


def openblas_core() -> str | None:
    """The kernels NumPy's OpenBLAS picked for this CPU, or None (another BLAS)."""
    return _CORE


def sgemm_row_quantum() -> int:
    """Rows on whose multiples a block of an sgemm may start and end without changing the bits of
    any output (see _ROW_QUANTA)."""
    return _ROW_QUANTA.get(_CORE or "", 48)


def sgemm_address():
    """(cblas_sgemm's address, BLAS integer zero) of NumPy's OpenBLAS, for Numba kernels to call
    (cblas.sgemm), or None where GEMMs are NumPy's: another BLAS, or Numba's workqueue layer (no
    region is worth its start there)."""
    return None if _SGEMM is None or _layer() == "workqueue" else _SGEMM
