"""The CPU backend: NumPy (and SciPy BLAS through NumPy's matmul) over flat float32 arrays.

Every function takes flat, contiguous float32 ``numpy.ndarray``s plus dims already checked by the
runtime layer, and returns new arrays; inputs are never written. Accumulations happen in a fixed
order (NumPy's pairwise summation, BLAS, sequential ``np.add.at``), so every result is
bitwise repeatable with or without deterministic mode.
"""

import numpy as np

# Threads: parallel.py (one pool, Numba's; when kernels split; OpenBLAS at one thread). Numba picks
# its threading layer (TBB, else OpenMP, else its workqueue); a user's NUMBA_THREADING_LAYER wins,
# but "workqueue" is not safe with threads: it aborts the process when two Python threads run
# parallel kernels at once (docs/design.md).


# glibc malloc's thresholds: set once, here, for the whole process (process.py says which, why, and
# how to restore them: torchlean.kernels.cpu.restore_process_settings()).
from .process import apply_malloc_settings as _apply_malloc_settings
from .process import process_settings, restore_process_settings  # noqa: F401

_apply_malloc_settings()

from .attention import *  # noqa: F401,F403
from .classify import *  # noqa: F401,F403
from .conv import *  # noqa: F401,F403
from .elementwise import *  # noqa: F401,F403
from .fast import *  # noqa: F401,F403
from .fft import *  # noqa: F401,F403
from .index import *  # noqa: F401,F403
from .layout import *  # noqa: F401,F403
from .norm import *  # noqa: F401,F403
from .optim import *  # noqa: F401,F403
from .pool import *  # noqa: F401,F403
from .reduce import *  # noqa: F401,F403
from .rng import bernoulli_mask, rand_normal, rand_uniform  # noqa: F401
from .rnn import *  # noqa: F401,F403
from .scan import *  # noqa: F401,F403
from .spectral import *  # noqa: F401,F403
from .spectral_nd import *  # noqa: F401,F403

from .. import caches as _caches

NAME = "cpu"
array_module = np  # the arrays of integer and bool tensors (runtime/arrays.py)


def from_host(a: np.ndarray) -> np.ndarray:
    """Adopt a host float32 array: copy so the caller's array and the buffer never alias."""
    return np.array(a, dtype=np.float32, copy=True)


def to_host(a: np.ndarray) -> np.ndarray:
    return a.copy()


def full(n: int, value: float) -> np.ndarray:
    return np.full(n, value, dtype=np.float32)


def memory_info() -> tuple[int, int]:
    """(device free, device total): 0 and 0, as the seed's CPU stub reports (host memory is not
    device memory; the telemetry reports it under its own name)."""
    return 0, 0


def cached_bytes() -> int:
    """Bytes of the arrays this backend keeps between calls (the spectral convolution's DFT bases,
    see kernels/caches.py). Buffers themselves are never cached: NumPy frees an array as soon as
    it dies."""
    return _caches.held_bytes("cpu")


def collect(force: bool) -> int:
    """With ``force``, drop every cached array; the bytes let go of. (malloc may keep freed heap
    for reuse: see ``process.py``.)"""
    return _caches.clear("cpu") if force else 0
