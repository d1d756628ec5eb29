"""Primitives of the convolution: conv, conv_bwd_input, conv_bwd_weight, conv_transpose.

Channels-first, row-major flat float32 buffers, any spatial rank r in 1..8, zero padding:

    x  (batch, in_c, *spatial)     w  (out_c, in_c, *kernel)     b  (out_c,) or None
    y  (batch, out_c, *out)        out_i = (spatial_i + 2 padding_i - kernel_i) // stride_i + 1 >= 1

conv_transpose takes w in PyTorch's transposed layout (in_c, out_c, *kernel) and gives
(batch, out_c, *out) with out_i = (spatial_i - 1) stride_i - 2 padding_i + kernel_i + output_padding_i.
Dims are checked once here (uint32, kernel and stride >= 1, one length r for every tuple, the
output at least 1 along every axis, every buffer's size); backends get checked tuples of ints.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

from ..errors import ShapeError
from .buffer import Buffer, check_buffer, same_device, wrap
from .checks import U32_LIMIT, check_product, check_u32, check_u32_tuple
from .oom import run_allocating

__all__ = ["conv", "conv_bwd_input", "conv_bwd_weight", "conv_transpose"]

MAX_RANK = 8


def _tuple(op: str, name: str, value: Any, rank: int | None) -> tuple[int, ...]:
    t = check_u32_tuple(op, name, value)
    if rank is not None and len(t) != rank:
        raise ShapeError(f"{op}: argument {name} must have one entry per spatial axis ({rank}), "
                         f"got {len(t)}: {list(t)}")
    return t


def _geometry(op: str, batch: Any, in_c: Any, out_c: Any, spatial: Any, kernel: Any, stride: Any,
              padding: Any) -> tuple:
    """The checked (batch, in_c, out_c, spatial, kernel, stride, padding); calls with plain int
    tuples (every call from the ops layer) are checked once per geometry."""
    args = (op, batch, in_c, out_c, spatial, kernel, stride, padding)
    if _plain(batch, in_c, out_c, spatial, kernel, stride, padding):
        return _geometry_cached(*args)
    return _geometry_checked(*args)


def _geometry_checked(op: str, batch: Any, in_c: Any, out_c: Any, spatial: Any, kernel: Any, stride: Any,
                      padding: Any) -> tuple:
    bt, ic, oc = (check_u32(op, n, v) for n, v in (("batch", batch), ("in_c", in_c), ("out_c", out_c)))
    sp = _tuple(op, "spatial", spatial, None)
    if not 1 <= len(sp) <= MAX_RANK:
        raise ShapeError(f"{op}: spatial must have 1 to {MAX_RANK} axes, got {len(sp)}: {list(sp)}")
    r = len(sp)
    kn = _tuple(op, "kernel", kernel, r)
    st = _tuple(op, "stride", stride, r)
    pd = _tuple(op, "padding", padding, r)
    for i in range(r):
        if kn[i] < 1:
            raise ShapeError(f"{op}: kernel[{i}] must be >= 1, got {kn[i]} (kernel {list(kn)})")
        if st[i] < 1:
            raise ShapeError(f"{op}: stride[{i}] must be >= 1, got {st[i]} (stride {list(st)})")
    # (no bound on the padded size: no backend materializes more than the tensors' sizes allow, see
    # the CPU backend's _sparse_axes; padding and stride only have to fit the uint32 dims)
    return bt, ic, oc, sp, kn, st, pd


# Only successful checks are cached (lru_cache does not keep exceptions); the tuples hold ints
# (bools and numpy ints take the uncached path, where the checks name them).
_geometry_cached = lru_cache(maxsize=1024)(_geometry_checked)


# -- the hot path of conv / conv_bwd_input / conv_bwd_weight ----------------------------------------
# The tape calls these with the same plain-int dims on every step. _plan checks those dims once per
# geometry (the same checks, in the same order, as the full path) and keeps the buffer sizes; a call
# then only has to test its buffers. Whenever a cheap test fails, the full path runs and raises
# exactly its own error.
def _plain(batch: Any, in_c: Any, out_c: Any, spatial: Any, kernel: Any, stride: Any, padding: Any) -> bool:
    """Plain ints and tuples of plain ints only: safe as a cache key (True == 1 would share an entry)."""
    if type(spatial) is tuple and type(kernel) is tuple and type(stride) is tuple and type(padding) is tuple \
            and type(batch) is int and type(in_c) is int and type(out_c) is int:
        for v in spatial + kernel + stride + padding:
            if type(v) is not int:
                return False
        return True
    return False


def _plan(op: str, batch: Any, in_c: Any, out_c: Any, spatial: Any, kernel: Any, stride: Any,
          padding: Any) -> tuple | None:
    """(bt, ic, oc, sp, kn, st, pd, n_x, n_w, n_y) for plain-int dims whose checks pass and whose
    sizes fit in uint32; None for anything else (the caller takes the full path)."""
    if _plain(batch, in_c, out_c, spatial, kernel, stride, padding):
        return _plan_cached(op, batch, in_c, out_c, spatial, kernel, stride, padding)
    return None


@lru_cache(maxsize=1024)
def _plan_cached(op: str, batch: int, in_c: int, out_c: int, spatial: tuple, kernel: tuple, stride: tuple,
                 padding: tuple) -> tuple | None:
    # the full path's first two steps (their errors propagate, never cached) ...
    bt, ic, oc, sp, kn, st, pd = _geometry_checked(op, batch, in_c, out_c, spatial, kernel, stride, padding)
    out = _out_dims(op, sp, kn, st, pd)
    # ... then the sizes it checks next, in whichever order: one too large sends every call to the full
    # path, which raises the error it meets first
    n_x, n_w, n_y = math.prod((bt, ic) + sp), math.prod((oc, ic) + kn), math.prod((bt, oc) + out)
    if n_x >= U32_LIMIT or n_w >= U32_LIMIT or n_y >= U32_LIMIT:
        return None
    return bt, ic, oc, sp, kn, st, pd, n_x, n_w, n_y


def _ok(buf: Any, size: int) -> bool:
    """check_buffer's common case as a test: a live Buffer of ``size`` float32 elements."""
    return type(buf) is Buffer and buf._data is not None and buf._nbytes == 4 * size


def _out_dims(op: str, sp, kn, st, pd) -> tuple[int, ...]:
    out = []
    for i, (s, k, t, p) in enumerate(zip(sp, kn, st, pd)):
        o = (s + 2 * p - k) // t + 1
        if o < 1:
            raise ShapeError(
                f"{op}: the output would be empty along spatial axis {i}: (spatial + 2 padding - kernel) // stride + 1 "
                f"= ({s} + 2*{p} - {k}) // {t} + 1 = {o} (spatial {list(sp)}, kernel {list(kn)}, stride {list(st)}, "
                f"padding {list(pd)})")
        out.append(o)
    return tuple(out)


def _bias(op: str, b: Any, out_c: int) -> Any:
    if b is None:
        return None
    check_buffer(op, "b", b, out_c)
    return b


def conv(x: Buffer, w: Buffer, b: Buffer | None, batch: int, in_c: int, out_c: int, spatial, kernel, stride,
         padding) -> Buffer:
    """Cross-correlation (PyTorch's conv): y[n,o,p] = b[o] + sum_{c,k} w[o,c,k] x[n,c,p*stride - padding + k],
    x read as 0 in the padding (a value: 0 times an inf weight is NaN)."""
    plan = _plan("conv", batch, in_c, out_c, spatial, kernel, stride, padding)
    if plan is not None:  # the hot path (see _plan); the full checks below otherwise
        bt, ic, oc, sp, kn, st, pd, n_x, n_w, n_y = plan
        ctx = x._ctx if type(x) is Buffer else None
        if _ok(x, n_x) and _ok(w, n_w) and w._ctx is ctx and (b is None or (_ok(b, oc) and b._ctx is ctx)):
            return wrap(ctx, run_allocating("conv", ctx, n_y, ctx.backend.conv, x._data, w._data,
                                   None if b is None else b._data, bt, ic, oc, sp, kn, st, pd))
    bt, ic, oc, sp, kn, st, pd = _geometry("conv", batch, in_c, out_c, spatial, kernel, stride, padding)
    out = _out_dims("conv", sp, kn, st, pd)
    check_buffer("conv", "x", x, check_product("conv", "batch*in_c*prod(spatial)", bt, ic, *sp))
    check_buffer("conv", "w", w, check_product("conv", "out_c*in_c*prod(kernel)", oc, ic, *kn))
    bb = _bias("conv", b, oc)
    ctx = same_device("conv", x=x, w=w, **({} if bb is None else {"b": bb}))
    n_out = check_product("conv", "batch*out_c*prod(out)", bt, oc, *out)
    return wrap(ctx, run_allocating("conv", ctx, n_out, ctx.backend.conv, x._data, w._data, None if bb is None else bb._data,
                           bt, ic, oc, sp, kn, st, pd))


def conv_bwd_input(dy: Buffer, w: Buffer, batch: int, in_c: int, out_c: int, spatial, kernel, stride,
                   padding) -> Buffer:
    """dx (batch, in_c, *spatial): the adjoint of conv in x. Only taps that land inside x are terms
    (one that lands in the padding is dropped whole)."""
    op = "conv_bwd_input"
    plan = _plan(op, batch, in_c, out_c, spatial, kernel, stride, padding)
    if plan is not None:
        bt, ic, oc, sp, kn, st, pd, n_x, n_w, n_y = plan
        ctx = dy._ctx if type(dy) is Buffer else None
        if _ok(dy, n_y) and _ok(w, n_w) and w._ctx is ctx:
            return wrap(ctx, run_allocating(op, ctx, n_x, ctx.backend.conv_bwd_input, dy._data, w._data, bt, ic, oc, sp, kn,
                                   st, pd))
    bt, ic, oc, sp, kn, st, pd = _geometry(op, batch, in_c, out_c, spatial, kernel, stride, padding)
    out = _out_dims(op, sp, kn, st, pd)
    check_buffer(op, "dy", dy, check_product(op, "batch*out_c*prod(out)", bt, oc, *out))
    check_buffer(op, "w", w, check_product(op, "out_c*in_c*prod(kernel)", oc, ic, *kn))
    ctx = same_device(op, dy=dy, w=w)
    n_out = check_product(op, "batch*in_c*prod(spatial)", bt, ic, *sp)
    return wrap(ctx, run_allocating(op, ctx, n_out, ctx.backend.conv_bwd_input, dy._data, w._data, bt, ic, oc, sp, kn, st, pd))


def conv_bwd_weight(x: Buffer, dy: Buffer, batch: int, in_c: int, out_c: int, spatial, kernel, stride,
                    padding) -> Buffer:
    """dw (out_c, in_c, *kernel): dw[o,c,k] = sum_{n,p} dy[n,o,p] x[n,c,p*stride - padding + k]
    (x = 0 in the padding)."""
    op = "conv_bwd_weight"
    plan = _plan(op, batch, in_c, out_c, spatial, kernel, stride, padding)
    if plan is not None:
        bt, ic, oc, sp, kn, st, pd, n_x, n_w, n_y = plan
        ctx = x._ctx if type(x) is Buffer else None
        if _ok(x, n_x) and _ok(dy, n_y) and dy._ctx is ctx:
            return wrap(ctx, run_allocating(op, ctx, n_w, ctx.backend.conv_bwd_weight, x._data, dy._data, bt, ic, oc, sp, kn,
                                   st, pd))
    bt, ic, oc, sp, kn, st, pd = _geometry(op, batch, in_c, out_c, spatial, kernel, stride, padding)
    out = _out_dims(op, sp, kn, st, pd)
    check_buffer(op, "x", x, check_product(op, "batch*in_c*prod(spatial)", bt, ic, *sp))
    check_buffer(op, "dy", dy, check_product(op, "batch*out_c*prod(out)", bt, oc, *out))
    ctx = same_device(op, x=x, dy=dy)
    n_out = check_product(op, "out_c*in_c*prod(kernel)", oc, ic, *kn)
    return wrap(ctx, run_allocating(op, ctx, n_out, ctx.backend.conv_bwd_weight, x._data, dy._data, bt, ic, oc, sp, kn, st, pd))


def conv_transpose(x: Buffer, w: Buffer, b: Buffer | None, batch: int, in_c: int, out_c: int, spatial, kernel,
                   stride, padding, output_padding) -> Buffer:
    """Transposed conv (PyTorch's conv_transpose): x (batch, in_c, *spatial), w (in_c, out_c, *kernel),
    y (batch, out_c, *out), out_i = (spatial_i - 1) stride_i - 2 padding_i + kernel_i + output_padding_i;
    y = conv_bwd_input of a conv from out_c to in_c channels over out, plus the bias."""
    op = "conv_transpose"
    plan = _transpose_plan(op, batch, in_c, out_c, spatial, kernel, stride, padding, output_padding)
    if plan is not None:  # the hot path, as in conv
        bt, ic, oc, sp, kn, st, pd, opd, n_x, n_w, n_y = plan
        ctx = x._ctx if type(x) is Buffer else None
        if _ok(x, n_x) and _ok(w, n_w) and w._ctx is ctx and (b is None or (_ok(b, oc) and b._ctx is ctx)):
            return wrap(ctx, run_allocating(op, ctx, n_y, ctx.backend.conv_transpose, x._data, w._data,
                                   None if b is None else b._data, bt, ic, oc, sp, kn, st, pd, opd))
    bt, ic, oc, sp, kn, st, pd = _geometry(op, batch, in_c, out_c, spatial, kernel, stride, padding)
    opd, out = _transpose_out(op, sp, kn, st, pd, output_padding)
    check_buffer(op, "x", x, check_product(op, "batch*in_c*prod(spatial)", bt, ic, *sp))
    check_buffer(op, "w", w, check_product(op, "in_c*out_c*prod(kernel)", ic, oc, *kn))
    bb = _bias(op, b, oc)
    ctx = same_device(op, x=x, w=w, **({} if bb is None else {"b": bb}))
    n_out = check_product(op, "batch*out_c*prod(out)", bt, oc, *out)
    return wrap(ctx, run_allocating(op, ctx, n_out, ctx.backend.conv_transpose, x._data, w._data,
                           None if bb is None else bb._data, bt, ic, oc, sp, kn, st, pd, opd))


def _transpose_out(op: str, sp, kn, st, pd, output_padding: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The checked output_padding and conv_transpose's output dims."""
    opd = _tuple(op, "output_padding", output_padding, len(sp))
    out = []
    for i, (s, k, t, p, o) in enumerate(zip(sp, kn, st, pd, opd)):
        if o >= t:
            raise ShapeError(f"{op}: output_padding[{i}] = {o} must be smaller than stride[{i}] = {t} "
                             f"(output_padding {list(opd)}, stride {list(st)})")
        n = (s - 1) * t - 2 * p + k + o
        if n < 1:
            raise ShapeError(
                f"{op}: the output would be empty along spatial axis {i}: (spatial - 1) stride - 2 padding + kernel "
                f"+ output_padding = ({s} - 1)*{t} - 2*{p} + {k} + {o} = {n} (spatial {list(sp)}, kernel {list(kn)}, "
                f"stride {list(st)}, padding {list(pd)}, output_padding {list(opd)})")
        out.append(n)
    return opd, tuple(out)


def _transpose_plan(op: str, batch: Any, in_c: Any, out_c: Any, spatial: Any, kernel: Any, stride: Any,
                    padding: Any, output_padding: Any) -> tuple | None:
    """_plan for conv_transpose: (bt, ic, oc, sp, kn, st, pd, opd, n_x, n_w, n_y) or None."""
    if type(output_padding) is not tuple or not _plain(batch, in_c, out_c, spatial, kernel, stride, padding):
        return None
    for v in output_padding:
        if type(v) is not int:
            return None
    return _transpose_plan_cached(op, batch, in_c, out_c, spatial, kernel, stride, padding, output_padding)


@lru_cache(maxsize=1024)
def _transpose_plan_cached(op: str, batch: int, in_c: int, out_c: int, spatial: tuple, kernel: tuple,
                           stride: tuple, padding: tuple, output_padding: tuple) -> tuple | None:
    # conv_transpose's own steps up to the buffer checks (errors propagate, never cached), then its sizes
    bt, ic, oc, sp, kn, st, pd = _geometry_checked(op, batch, in_c, out_c, spatial, kernel, stride, padding)
    opd, out = _transpose_out(op, sp, kn, st, pd, output_padding)
    sizes = (math.prod((bt, ic) + sp), math.prod((ic, oc) + kn), math.prod((bt, oc) + out))
    if max(sizes) >= U32_LIMIT:
        return None
    return (bt, ic, oc, sp, kn, st, pd, opd) + sizes
