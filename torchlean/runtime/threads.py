"""How many threads the CPU backend's parallel kernels use (``torch.set_num_threads``).

The CPU backend runs its parallel kernels on Numba's thread pool (kernels/cpu/parallel.py), so the
count is Numba's: at most ``NUMBA_NUM_THREADS`` (the pool's size, fixed when the process starts;
by default the number of cores), and, as Numba keeps it, per Python thread: a count set in one
thread applies to the kernels that thread runs. The CUDA backend does not use it.
"""

from __future__ import annotations

import numbers
import warnings
from typing import Any

from ..errors import ArgumentError
from ..kernels.cpu import parallel


def get_num_threads() -> int:
    """The threads the calling thread's CPU kernels split their work over."""
    return parallel.threads()


def set_num_threads(n: Any) -> int:
    """Use ``n`` threads for the calling thread's CPU kernels; returns the count in force. ``n``
    above the pool's size (which cannot grow after start-up: set ``NUMBA_NUM_THREADS`` before the
    process starts for more) uses the whole pool, with a warning; ``n < 1`` is an ArgumentError."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or int(n) < 1:
        raise ArgumentError(f"set_num_threads: expected a positive int, got {n!r}")
    top = parallel.max_threads()
    if int(n) > top:
        warnings.warn(f"set_num_threads({n}): the CPU thread pool has {top} threads (NUMBA_NUM_THREADS); "
                      f"using {top}", RuntimeWarning, stacklevel=3)
    return parallel.set_threads(min(int(n), top))
