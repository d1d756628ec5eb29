"""The CPU backend: NumPy (and SciPy BLAS through NumPy's matmul) over flat float32 arrays.

Every function takes flat, contiguous float32 ``numpy.ndarray``s plus dims already checked by the
runtime layer, and returns new arrays; inputs are never written. Accumulations happen in a fixed
order (NumPy's pairwise summation, BLAS, sequential ``np.add.at``), so every result is
bitwise repeatable with or without deterministic mode.
"""

import os

import numpy as np

# Numba's threading layer: its default choice (TBB, else OpenMP, else its own workqueue). A parallel
# region of the OpenMP layer starts in ~1.5 us (5 us after a few ms idle) on the 2-core machine, the
# workqueue's in 50-100 us; the GEMMs (gemm.py) split only under the first two. (An earlier version
# forced the workqueue: OpenMP's spinning workers then fought OpenBLAS's, which now stay at one
# thread.) A user's NUMBA_THREADING_LAYER still wins.


def _reuse_freed_memory() -> bool:
    """glibc malloc: serve arrays up to 32 MiB from the heap and keep up to 256 MiB of freed heap
    for reuse. By default glibc maps each array above its (adaptive) threshold afresh and trims
    freed heap back to the OS, so every new multi-MB array pays ~1 page fault per 4 KiB on first
    touch (and its free a munmap): half of a mamba training step on 2 cores (73 -> 37 ms), with
    the same peak memory. A user's MALLOC_*/GLIBC_TUNABLES settings win. True when applied."""
    if any(k.startswith("MALLOC_") for k in os.environ) or "GLIBC_TUNABLES" in os.environ:
        return False
    import ctypes
    import platform

    if platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    m_trim_threshold, m_mmap_threshold = -1, -3
    return bool(mallopt(m_mmap_threshold, 32 << 20)) and bool(mallopt(m_trim_threshold, 256 << 20))


_reuse_freed_memory()

from .attention import *  # noqa: F401,F403
from .classify import *  # noqa: F401,F403
from .conv import *  # noqa: F401,F403
from .elementwise import *  # noqa: F401,F403
from .fast import *  # noqa: F401,F403
from .index import *  # noqa: F401,F403
from .layout import *  # noqa: F401,F403
from .norm import *  # noqa: F401,F403
from .optim import *  # noqa: F401,F403
from .pool import *  # noqa: F401,F403
from .reduce import *  # noqa: F401,F403
from .rng import bernoulli_mask, rand_normal, rand_uniform  # noqa: F401
from .scan import *  # noqa: F401,F403
from .spectral import *  # noqa: F401,F403

NAME = "cpu"


def from_host(a: np.ndarray) -> np.ndarray:
    """Adopt a host float32 array: copy so the caller's array and the buffer never alias."""
    return np.array(a, dtype=np.float32, copy=True)


def to_host(a: np.ndarray) -> np.ndarray:
    return a.copy()


def full(n: int, value: float) -> np.ndarray:
    return np.full(n, value, dtype=np.float32)


def memory_info() -> tuple[int, int]:
    from ...runtime.allocator import host_memory_bytes

    return host_memory_bytes()


def collect(force: bool) -> int:
    """Nothing is cached by torchlean: NumPy frees an array as soon as it dies (malloc may keep
    freed heap for reuse, see _reuse_freed_memory)."""
    return 0
