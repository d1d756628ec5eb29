"""Counter-based random numbers on the GPU, bit-identical to ``kernels/cpu/rng.py``.

The kernels are in ``rng.cu`` (its per-element math is also built for the host by
``scripts/rng-host-check``, which compares it bitwise with the CPU backend). Every function returns
a new 1-D contiguous float32 array of length n on the current device: one launch, no host round
trip, no sync. Scalars go to the kernels as NumPy scalars of the parameter's exact type.
"""

from __future__ import annotations

import cupy
import numpy as np

from .elementwise import fill
from .launch import BLOCK, F32, I64, empty, grid_for, kernel

_FILE = "rng.cu"
_U64 = np.uint64


def rand_uniform(n: int, key: int) -> cupy.ndarray:
    out = empty(n)
    if n > 0:
        groups = (n + 3) // 4  # four outputs (one float4 store) per work item
        kernel(_FILE, "tl_rand_uniform")((grid_for(groups),), (BLOCK,), (out, I64(n), _U64(key)))
    return out


def bernoulli_mask(n: int, keep_prob: float, key: int) -> cupy.ndarray:
    if np.float32(keep_prob) >= 1:  # keep everything: a draw that rounds to 1.0f must not drop one
        return fill(n, 1.0)
    out = empty(n)
    if n > 0:
        groups = (n + 3) // 4
        kernel(_FILE, "tl_bernoulli_mask")((grid_for(groups),), (BLOCK,), (out, I64(n), F32(keep_prob), _U64(key)))
    return out


def rand_normal(n: int, key: int) -> cupy.ndarray:
    out = empty(n)
    if n > 0:
        pairs = (n + 1) // 2  # one Box-Muller pair (one float2 store) per work item
        kernel(_FILE, "tl_rand_normal")((grid_for(pairs),), (BLOCK,), (out, I64(n), _U64(key)))
    return out
