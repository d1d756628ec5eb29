"""CUDA kernels of the fused optimizer steps: adam_step and sgd_step (kernels in optim.cu), and
their multi-tensor forms adam_step_many and sgd_step_many (one launch over a pointer table); and
clip_grad_norm_'s multi-tensor primitives norm2_many (two launches: chunk partials, then one warp
per tensor) and scale_many (one launch), over the same kind of table.

One launch per call, a grid-stride loop with float4 loads and stores when every pointer is
16-byte aligned (whole CuPy allocations are). Bytes moved per element: adam_step reads p, g, m, v
and writes p, m, v (28 bytes, the minimum for an out-of-place step); sgd_step reads p, g, buf and
writes p, buf (20 bytes; 16 on the first step, which does not read buf). Elementwise, so the bits
do not depend on the grid.
"""

from __future__ import annotations

from collections import OrderedDict

import cupy
import numpy as np

from ..caches import register
from .freelist import empty_as, give_back
from .launch import BLOCK, F32, I64, empty, grid_for, kernel
from .staging import upload_i64

__all__ = ["adam_step", "adam_step_many", "adam_step_many_inplace", "sgd_step", "sgd_step_many",
           "sgd_step_many_inplace", "norm2_many", "scale_many"]

_FILE = "optim.cu"
_I32 = np.int32
_U64 = np.uint64  # a device address passed by value (a pointer argument of the kernel)


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


_MANY_MAX = 1024  # tensors per launch (TL_STEP_MANY_MAX in optim.cu: the quad table sits in shared memory)
_SGD_NO_BUF = 8  # tl_sgd_step_many's mode bit TL_SGD_NO_BUF: the new buffers are not written


def adam_step_many(ps, gs, ms, vs, wd, decay, w1, beta2, w2, bc2_sqrt, eps, neg_step_size, mode):
    """adam_step over T tensors with one launch per 1024 tensors: the pointers and quad offsets go up
    in one small host-to-device copy. Tensors whose storage is not 16-byte aligned (a DLPack view,
    say) take the one-tensor kernel, which has a scalar path; the bits are the same either way."""
    coef = (wd, decay, w1, beta2, w2, bc2_sqrt, eps, neg_step_size, mode)
    outs = ([], [], [])
    batch = []  # indices of aligned, non-empty tensors
    for i, (p, g, m, v) in enumerate(zip(ps, gs, ms, vs)):
        n = p.size
        if n and not _aligned(p, g, m, v):
            po, mo, vo = adam_step(p, g, m, v, n, *coef)
        else:
            po, mo, vo = empty(n), empty(n), empty(n)
            if n:
                batch.append(i)
        outs[0].append(po)
        outs[1].append(mo)
        outs[2].append(vo)
    ptrs = [[a.data.ptr for a in arrays] for arrays in (ps, gs, ms, vs, *outs)]
    _launch_many("tl_adam_step_many", batch, ptrs, [p.size for p in ps], _adam_args(coef))
    return outs


def adam_step_many_inplace(ps, gs, ms, vs, wd, decay, w1, beta2, w2, bc2_sqrt, eps, neg_step_size, mode):
    """adam_step_many with the output pointers the inputs p, m, v (tl_adam_step_many reads each
    element, or float4, before one thread writes it; its pointers are not __restrict__). An
    unaligned tensor runs the one-tensor kernel into scratch, copied back (a device memcpy).
    Each pointer is read once (a CuPy attribute chain, four per tensor)."""
    coef = (wd, decay, w1, beta2, w2, bc2_sqrt, eps, neg_step_size, mode)
    pp, pg, pm, pv = ([a.data.ptr for a in arrays] for arrays in (ps, gs, ms, vs))
    sizes = [p.size for p in ps]
    batch = []
    for i, n in enumerate(sizes):
        if n and not (pp[i] | pg[i] | pm[i] | pv[i]) & 15:
            batch.append(i)
        elif n:
            p, m, v = ps[i], ms[i], vs[i]
            for dst, src in zip((p, m, v), adam_step(p, gs[i], m, v, n, *coef)):
                dst.data.copy_from_device_async(src.data, src.nbytes)
    _launch_many("tl_adam_step_many", batch, (pp, pg, pm, pv, pp, pm, pv), sizes, _adam_args(coef))


def _adam_args(coef) -> tuple:
    """tl_adam_step_many's scalar arguments after the table: the coefficients, typed."""
    wd, decay, w1, beta2, w2, bc2_sqrt, eps, neg_step_size, mode = coef
    return (F32(wd), F32(decay), F32(w1), F32(beta2), F32(w2), F32(bc2_sqrt), F32(eps), F32(neg_step_size),
            _I32(mode))


# Recent launches' tables per (device, stream), keyed by their content: a training loop that updates
# in place sends the same p, m, v pointers every step, and its gradients, drawn from the free list,
# come back to the same addresses every few steps (period 6 to 10 in the examples), so a table is
# built and uploaded only in the first period. Kernels only read the tables; an evicted one goes
# back to the free list (its last reader is queued on this stream), for the next upload.
_TABLES_KEPT = 16


class _Table:
    """One launch's uploaded table (``_table``): the device array, its tensor count T and the total
    number of quads (float4 groups; chunks for norm2_many) over those tensors, which sizes the grid."""

    __slots__ = ("dev", "tensors", "quads")

    def __init__(self, dev: cupy.ndarray, tensors: int, quads: int) -> None:
        self.dev, self.tensors, self.quads = dev, tensors, quads


_tables: dict[tuple[int, int], OrderedDict] = {}  # (device, stream) -> key -> [_Table per launch]


def _table_bytes(device=None) -> int:
    return sum(table.dev.nbytes for key, kept in list(_tables.items()) if device is None or key[0] == device
               for plans in list(kept.values()) for table in plans)


def _clear_tables() -> int:
    freed = _table_bytes()
    _tables.clear()  # kernels only read them, in stream order: dropping is safe
    return freed


register("cuda", _table_bytes, _clear_tables)  # counted as cached, dropped by collect(True)


def _launch_many(name, batch, ptrs, sizes, args):
    """The multi-tensor kernel ``name`` over the tensors batch (indices) of the R pointer lists ptrs
    (inputs, then outputs: 7 for tl_adam_step_many, 5 for tl_sgd_step_many, 2 for tl_scale_many),
    with the scalar arguments args: the pointers, quad offsets and sizes go up in one small
    host-to-device copy per launch, or none when a recent call on this stream had the same ones
    (the key is the kernel's name and the table's data, R in its length)."""
    if not batch:
        return
    plans = _plans((name, tuple(batch), tuple(sizes), *map(tuple, ptrs)), lambda: [
        _table(batch[lo:lo + _MANY_MAX], ptrs, sizes) for lo in range(0, len(batch), _MANY_MAX)])
    rows = len(ptrs)
    for table in plans:
        dev, t, total = table.dev, table.tensors, table.quads
        base = dev.data.ptr
        kernel(_FILE, name)(
            (grid_for(total),), (BLOCK,),
            (dev, _U64(base + 8 * rows * t), _U64(base + 8 * ((rows + 1) * t + 1)), _I32(t), *args))


def _plans(key, make) -> list:
    """The uploaded tables of a launch whose table content is ``key`` (the kernel's name first):
    kept from a recent call on this (device, stream), or ``make()``'s, kept now (the oldest of
    more than _TABLES_KEPT go back to the free list)."""
    dev_key = (cupy.cuda.runtime.getDevice(), cupy.cuda.get_current_stream().ptr)
    kept = _tables.get(dev_key)
    if kept is None:
        kept = _tables[dev_key] = OrderedDict()
    plans = kept.get(key)
    if plans is None:
        plans = kept[key] = make()
        if len(kept) > _TABLES_KEPT:
            old = kept.popitem(last=False)[1]
            while old:
                dev_table = old.pop().dev
                give_back(dev_table)  # only this cache held it, and its launches are queued
                del dev_table
    else:
        kept.move_to_end(key)
    return plans


def _table(idx, ptrs, sizes, unit: int = 4) -> _Table:
    """The launch table of the tensors idx: R T pointers (R = len(ptrs)), T + 1 prefix sums of the
    tensors' unit counts (ceil(n / unit): quads for the step kernels, chunks for norm2_many), T
    sizes, uploaded asynchronously (stream-ordered: dropping it after the launch is safe)."""
    t, rows = len(idx), len(ptrs)
    table = np.empty(rows * t + 2 * t + 1, dtype=np.int64)
    for row, col in enumerate(ptrs):
        table[row * t:(row + 1) * t] = [col[i] for i in idx]
    table[(rows + 1) * t + 1:] = [sizes[i] for i in idx]
    units = table[rows * t:(rows + 1) * t + 1]
    units[0] = 0
    np.cumsum((table[(rows + 1) * t + 1:] + (unit - 1)) // unit, out=units[1:])
    return _Table(upload_i64(table), t, int(units[-1]))


def sgd_step(p, g, buf, n, wd, momentum, keep, neg_lr, mode):
    po, bo = empty(n), empty(n)
    if n:
        b = g if buf is None else buf
        vec = _aligned(p, g, b, po, bo)
        kernel(_FILE, "tl_sgd_step")(
            (grid_for((n + 3) // 4 if vec else n),), (BLOCK,),
            (p, g, b, po, bo, I64(n), F32(wd), F32(momentum), F32(keep), F32(neg_lr), _I32(mode), _I32(vec)))
    return po, bo


def sgd_step_many(ps, gs, bufs, wd, momentum, keep, neg_lr, mode):
    """sgd_step over T tensors with one launch per 1024 tensors (tl_sgd_step_many), as adam_step_many:
    tensors whose storage is not 16-byte aligned take the one-tensor kernel, the same bits. bufs
    None (the first step, buf not read): g's pointers fill the buffer row."""
    coef = (wd, momentum, keep, neg_lr, mode)
    bs = gs if bufs is None else bufs
    outs = ([], [])
    batch = []  # indices of aligned, non-empty tensors
    for i, (p, g, b) in enumerate(zip(ps, gs, bs)):
        n = p.size
        if n and not _aligned(p, g, b):
            po, bo = sgd_step(p, g, b, n, *coef)
        else:
            po, bo = empty(n), empty(n)
            if n:
                batch.append(i)
        outs[0].append(po)
        outs[1].append(bo)
    ptrs = [[a.data.ptr for a in arrays] for arrays in (ps, gs, bs, *outs)]
    _launch_many("tl_sgd_step_many", batch, ptrs, [p.size for p in ps], _sgd_args(coef, False))
    return outs


def sgd_step_many_inplace(ps, gs, bufs, wd, momentum, keep, neg_lr, mode):
    """sgd_step_many with the output pointers the inputs p and buf. bufs None (first step, plain
    SGD): p alone is written (_SGD_NO_BUF) and g's pointers fill both buffer rows, neither read nor
    written. An unaligned tensor runs the one-tensor kernel into scratch, copied back."""
    coef = (wd, momentum, keep, neg_lr, mode)
    pp, pg = ([a.data.ptr for a in arrays] for arrays in (ps, gs))
    pb = pg if bufs is None else [b.data.ptr for b in bufs]
    sizes = [p.size for p in ps]
    batch = []
    for i, n in enumerate(sizes):
        if n and not (pp[i] | pg[i] | pb[i]) & 15:
            batch.append(i)
        elif n:
            p, b = ps[i], None if bufs is None else bufs[i]
            po, bo = sgd_step(p, gs[i], b, n, *coef)
            for dst, src in ((p, po),) if b is None else ((p, po), (b, bo)):
                dst.data.copy_from_device_async(src.data, src.nbytes)
    _launch_many("tl_sgd_step_many", batch, (pp, pg, pb, pp, pb), sizes, _sgd_args(coef, bufs is None))


def _sgd_args(coef, no_buf: bool) -> tuple:
    """tl_sgd_step_many's scalar arguments after the table: the coefficients, typed, and the mode."""
    wd, momentum, keep, neg_lr, mode = coef
    return F32(wd), F32(momentum), F32(keep), F32(neg_lr), _I32(mode | (_SGD_NO_BUF if no_buf else 0))


# -- norm2_many and scale_many (clip_grad_norm_) ------------------------------------------------------
_NORM2_THREADS = 256                     # TL_NORM2_THREADS in optim.cu: one block sums one chunk
_NORM2_CHUNK = 4 * _NORM2_THREADS * 8    # TL_NORM2_CHUNK: elements per chunk (the order depends on it)


def norm2_many(xs):
    """The float32 2-norms of T tensors (T >= 1) in two launches, whatever T and the sizes: chunk
    partials (tl_norm2_many_chunks, a block per TL_NORM2_CHUNK elements of any tensor), then one
    warp per tensor adding its partials in order and taking the sqrt (tl_norm2_many_finish). The
    table (pointers, chunk prefix sums, sizes) is kept as the step kernels' tables are: gradients
    drawn from the free list come back to the same addresses."""
    t = len(xs)
    sizes = [x.size for x in xs]
    ptrs = [x.data.ptr for x in xs]
    table = _plans(("tl_norm2_many", tuple(sizes), tuple(ptrs)),
                   lambda: [_table(range(t), (ptrs,), sizes, _NORM2_CHUNK)])[0]
    dev, total = table.dev, table.quads
    base = dev.data.ptr
    chunks = _U64(base + 8 * t)  # the T + 1 chunk prefix sums; the sizes follow them
    out = empty(t)
    partials = empty_as(total, "d") if total else out  # (no chunks: finish reads no partial)
    if total:
        kernel(_FILE, "tl_norm2_many_chunks")(
            (grid_for(total * _NORM2_THREADS, _NORM2_THREADS),), (_NORM2_THREADS,),
            (dev, chunks, _U64(base + 8 * (2 * t + 1)), _I32(t), I64(total), partials))
    kernel(_FILE, "tl_norm2_many_finish")((grid_for(32 * t),), (BLOCK,), (chunks, _I32(t), partials, out))
    if total:
        give_back(partials)
    return out


def scale_many(xs, coef):
    """x * coef[0] for each of T tensors into new arrays, one launch (per 1024 tensors) of
    tl_scale_many over a (x, out) pointer table; coef stays on the device."""
    outs = [empty(x.size) for x in xs]
    sizes = [x.size for x in xs]
    batch = [i for i, n in enumerate(sizes) if n]
    ptrs = ([x.data.ptr for x in xs], [o.data.ptr for o in outs])
    _launch_many("tl_scale_many", batch, ptrs, sizes, (coef,))
    return outs
