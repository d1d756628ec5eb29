"""CUDA kernels of the pooling: max_pool, avg_pool, smooth_max_pool and their backward passes.

One launch per forward (one thread per output) and per backward (one thread per input element,
gather form: no atomics, bitwise repeatable in every mode; max_pool_bwd adds one launch before it
that writes each window's winner to a uint32 workspace). The geometry (rank, spatial, kernel,
stride, padding, out, input and output strides) is a small int64 device array memoized per device
and plan, so a call uploads nothing after the first; ranks 1-3 run kernels specialised for
their rank, ranks 4-8 one generic kernel. See pool.cu for the conventions and the order of the
float operations (the CPU backend performs the same ones).

Bytes moved: forward reads each input element about prod(kernel / stride) times (through the
cache) and writes the output once; backward reads dy (and y, x for smooth max) per window and
writes dx once; max_pool_bwd also writes and reads 4 bytes of winner per output.
"""

from __future__ import annotations

import math

import cupy
import numpy as np

from ..caches import memo
from ..plans import PoolPlan
from .launch import BLOCK, F32, I64, empty, empty_as, give_back, grid_for, kernel

__all__ = ["max_pool", "max_pool_bwd", "avg_pool", "avg_pool_bwd", "smooth_max_pool", "smooth_max_pool_bwd"]

_FILE = "pool.cu"
_MAXR = 8


def _strides(dims):
    st = [1] * len(dims)
    for i in range(len(dims) - 2, -1, -1):
        st[i] = st[i + 1] * dims[i + 1]
    return st


# Its device arrays count as the backend's cached bytes (a few hundred each), dropped by collect(True).
@memo("cuda.pool.setup", 512, backend="cuda", entry_bytes=(1 + 7 * _MAXR) * 8)
def _setup_on(device: int, plan: PoolPlan):
    spatial, kernel, stride, padding, out = plan.spatial, plan.kernel, plan.stride, plan.padding, plan.out
    g = np.zeros(1 + 7 * _MAXR, dtype=np.int64)
    g[0] = len(spatial)
    for j, vals in enumerate((spatial, kernel, stride, padding, out, _strides(spatial), _strides(out))):
        g[1 + j * _MAXR: 1 + j * _MAXR + len(vals)] = vals
    with cupy.cuda.Device(device):
        g_dev = cupy.asarray(g)
    r = len(spatial)
    return g_dev, f"r{r}" if r <= 3 else "rn", math.prod(spatial), math.prod(out), math.prod(kernel)


def _setup(plan: PoolPlan):
    """(device geometry, kernel-name suffix, S = prod(spatial), nout = prod(out), K = prod(kernel))
    of the plan on the current device."""
    return _setup_on(cupy.cuda.runtime.getDevice(), plan)


def _launch(name: str, work: int, args) -> None:
    kernel(_FILE, name)((grid_for(work),), (BLOCK,), args)


def max_pool(x, plan: PoolPlan):
    g, suf, S, nout, _ = _setup(plan)
    planes = plan.planes
    y = empty(planes * nout)
    if planes * nout:
        _launch(f"tl_max_pool_{suf}", planes * nout, (x, y, g, I64(planes), I64(S), I64(nout)))
    return y


def avg_pool(x, plan: PoolPlan):
    g, suf, S, nout, K = _setup(plan)
    planes = plan.planes
    y = empty(planes * nout)
    if planes * nout:
        _launch(f"tl_avg_pool_{suf}", planes * nout, (x, y, g, I64(planes), I64(S), I64(nout), F32(K)))
    return y


def smooth_max_pool(x, plan: PoolPlan, beta):
    g, suf, S, nout, K = _setup(plan)
    planes = plan.planes
    y = empty(planes * nout)
    if planes * nout:
        _launch(f"tl_smooth_max_pool_{suf}", planes * nout,
                (x, y, g, I64(planes), I64(S), I64(nout), I64(K), F32(beta)))
    return y


def max_pool_bwd(x, dy, plan: PoolPlan):
    g, suf, S, nout, _ = _setup(plan)
    planes = plan.planes
    dx = empty(planes * S)
    if planes * S == 0:
        return dx
    win = empty_as(planes * nout, "I")
    _launch(f"tl_max_pool_winner_{suf}", planes * nout, (x, win, g, I64(planes), I64(S), I64(nout)))
    _launch(f"tl_max_pool_bwd_{suf}", planes * S, (dy, win, dx, g, I64(planes), I64(S), I64(nout)))
    give_back(win)
    return dx


def avg_pool_bwd(dy, plan: PoolPlan):
    g, suf, S, nout, K = _setup(plan)
    planes = plan.planes
    dx = empty(planes * S)
    if planes * S:
        _launch(f"tl_avg_pool_bwd_{suf}", planes * S, (dy, dx, g, I64(planes), I64(S), I64(nout), F32(K)))
    return dx


def smooth_max_pool_bwd(x, y, dy, plan: PoolPlan, beta):
    g, suf, S, nout, _ = _setup(plan)
    planes = plan.planes
    dx = empty(planes * S)
    if planes * S:
        _launch(f"tl_smooth_max_pool_bwd_{suf}", planes * S,
                (x, y, dy, dx, g, I64(planes), I64(S), I64(nout), F32(beta)))
    return dx
