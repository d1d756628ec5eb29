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
from .staging import upload_i64

__all__ = ["adam_step", "adam_step_many", "adam_step_many_inplace", "sgd_step"]

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


_MANY_MAX = 1024  # tensors per launch (TL_ADAM_MANY_MAX in optim.cu: the quad table sits in shared memory)


def adam_step_many(ps, gs, ms, vs, wd, decay, w1, beta2, w2, bc2_sqrt, eps, neg_step_size, mode):
    """adam_step over T tensors with one launch per 1024 tensors: the pointers and quad offsets go up
    in one small host-to-device copy. Tensors whose storage is not 16-byte aligned (a DLPack view,
    say) take the one-tensor kernel, which has a scalar path; the bits are the same either way."""
    outs = ([], [], [])
    batch = []  # indices of aligned, non-empty tensors
    for i, (p, g, m, v) in enumerate(zip(ps, gs, ms, vs)):
        n = p.size
        if n and not _aligned(p, g, m, v):
            po, mo, vo = adam_step(p, g, m, v, n, wd, decay, w1, beta2, w2, bc2_sqrt, eps, neg_step_size, mode)
        else:
            po, mo, vo = empty(n), empty(n), empty(n)
            if n:
                batch.append(i)
        outs[0].append(po)
        outs[1].append(mo)
        outs[2].append(vo)
    _launch_many(batch, (ps, gs, ms, vs, *outs), (wd, decay, w1, beta2, w2, bc2_sqrt, eps, neg_step_size, mode))
    return outs


def adam_step_many_inplace(ps, gs, ms, vs, wd, decay, w1, beta2, w2, bc2_sqrt, eps, neg_step_size, mode):
    """adam_step_many with the output pointers the inputs p, m, v (tl_adam_step_many reads each
    element, or float4, before one thread writes it; its pointers are not __restrict__). An
    unaligned tensor runs the one-tensor kernel into scratch, copied back (a device memcpy)."""
    coef = (wd, decay, w1, beta2, w2, bc2_sqrt, eps, neg_step_size, mode)
    batch = []
    for i, (p, g, m, v) in enumerate(zip(ps, gs, ms, vs)):
        n = p.size
        if n and _aligned(p, g, m, v):
            batch.append(i)
        elif n:
            for dst, src in zip((p, m, v), adam_step(p, g, m, v, n, *coef)):
                dst.data.copy_from_device_async(src.data, src.nbytes)
    _launch_many(batch, (ps, gs, ms, vs, ps, ms, vs), coef)


def _launch_many(batch, arrays7, coef):
    """tl_adam_step_many over the tensors batch (indices) of the 7 lists p, g, m, v, p_out, m_out,
    v_out: the pointers, quad offsets and sizes go up in one small host-to-device copy per launch."""
    wd, decay, w1, beta2, w2, bc2_sqrt, eps, neg_step_size, mode = coef
    for lo in range(0, len(batch), _MANY_MAX):
        idx = batch[lo:lo + _MANY_MAX]
        t = len(idx)
        table = np.empty(7 * t + 2 * t + 1, dtype=np.int64)  # pointers, then quad prefix sums, then sizes
        for row, arrays in enumerate(arrays7):
            table[row * t:(row + 1) * t] = [arrays[i].data.ptr for i in idx]
        sizes = np.array([arrays7[0][i].size for i in idx], dtype=np.int64)
        quads = table[7 * t:8 * t + 1]
        quads[0] = 0
        np.cumsum((sizes + 3) // 4, out=quads[1:])
        table[8 * t + 1:] = sizes
        dev = upload_i64(table)  # one asynchronous upload; stream-ordered, so freeing it after the launch is safe
        kernel(_FILE, "tl_adam_step_many")(
            (grid_for(int(quads[-1])),), (BLOCK,),
            (dev, dev[7 * t:], dev[8 * t + 1:], _I32(t), F32(wd), F32(decay), F32(w1), F32(beta2), F32(w2),
             F32(bc2_sqrt), F32(eps), F32(neg_step_size), _I32(mode)))


def sgd_step(p, g, buf, n, wd, momentum, keep, neg_lr, mode):
    po, bo = empty(n), empty(n)
    if n:
        b = g if buf is None else buf
        vec = _aligned(p, g, b, po, bo)
        kernel(_FILE, "tl_sgd_step")(
            (grid_for((n + 3) // 4 if vec else n),), (BLOCK,),
            (p, g, b, po, bo, I64(n), F32(wd), F32(momentum), F32(keep), F32(neg_lr), _I32(mode), _I32(vec)))
    return po, bo
