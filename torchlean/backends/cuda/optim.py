"""CUDA kernels of the fused optimizer steps: adam_step and sgd_step (kernels in optim.cu).

One launch per call, a grid-stride loop with float4 loads and stores when every pointer is
16-byte aligned (whole CuPy allocations are). Bytes moved per element: adam_step reads p, g, m, v
and writes p, m, v (28 bytes, the minimum for an out-of-place step); sgd_step reads p, g, buf and
writes p, buf (20 bytes; 16 on the first step, which does not read buf). Elementwise, so the bits
do not depend on the grid.
"""

from __future__ import annotations

import numpy as np

from .kernels import BLOCK, F32, I64, empty, grid_for, kernel

__all__ = ["adam_step", "sgd_step"]

_FILE = "optim.cu"
_I32 = np.int32


def _aligned(*arrays) -> bool:
    return all(a.data.ptr % 16 == 0 for a in arrays)


def adam_step(p, g, m, v, n, wd, decay, w1, beta2, w2, bc2_sqrt, eps, neg_step_size, mode):
    po, mo, vo = empty(n), empty(n), empty(n)
    if n:
        vec = _aligned(p, g, m, v, po, mo, vo)
        kernel(_FILE, "tl_adam_step")(
            (grid_for((n + 3) // 4 if vec else n),), (BLOCK,),
            (p, g, m, v, po, mo, vo, I64(n), F32(wd), F32(decay), F32(w1), F32(beta2), F32(w2), F32(bc2_sqrt),
             F32(eps), F32(neg_step_size), _I32(mode), _I32(vec)))
    return po, mo, vo


def sgd_step(p, g, buf, n, wd, momentum, keep, neg_lr, mode):
    po, bo = empty(n), empty(n)
    if n:
        b = g if buf is None else buf
        vec = _aligned(p, g, b, po, bo)
        kernel(_FILE, "tl_sgd_step")(
            (grid_for((n + 3) // 4 if vec else n),), (BLOCK,),
            (p, g, b, po, bo, I64(n), F32(wd), F32(momentum), F32(keep), F32(neg_lr), _I32(mode), _I32(vec)))
    return po, bo
