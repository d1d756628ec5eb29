"""The CPU backend: NumPy (and SciPy BLAS through NumPy's matmul) over flat float32 arrays.

Every function takes flat, contiguous float32 ``numpy.ndarray``s plus dims already checked by the
runtime layer, and returns new arrays; inputs are never written. Accumulations happen in a fixed
order (NumPy's pairwise summation, BLAS, sequential ``np.add.at``), so every result is
bitwise repeatable with or without deterministic mode.
"""

import os

import numpy as np

# Numba's default OpenMP layer spins its workers: on a small machine an empty parallel loop costs
# ~16 ms there against ~0.1 ms with the workqueue layer. A user's NUMBA_THREADING_LAYER still wins.
if "NUMBA_THREADING_LAYER" not in os.environ:
    import numba

    numba.config.THREADING_LAYER = "workqueue"

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
    """NumPy returns memory to the OS as soon as an array dies: nothing is cached."""
    return 0
