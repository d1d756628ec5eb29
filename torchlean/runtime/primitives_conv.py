"""Primitives of the convolution: conv, conv_bwd_input, conv_bwd_weight, conv_transpose.

Channels-first, row-major flat float32 buffers, any spatial rank r in 1..8, zero padding, G groups
(default 1), dilation d per axis (default 1):

    x  (batch, in_c, *spatial)     w  (out_c, in_c / G, *kernel)     b  (out_c,) or None
    y  (batch, out_c, *out)        out_i = (spatial_i + 2 padding_i - d_i (kernel_i - 1) - 1) // stride_i + 1 >= 1

Output channel o reads the input channels of its group, o // (out_c / G); in_c and out_c are
multiples of G. conv_transpose takes w in PyTorch's transposed layout (in_c, out_c / G, *kernel)
and gives (batch, out_c, *out) with out_i = (spatial_i - 1) stride_i - 2 padding_i + d_i (kernel_i - 1)
+ output_padding_i + 1. Dims are checked once here (uint32, kernel, stride, dilation and groups
>= 1, channels divisible by groups, one length r for every tuple, the output at least 1 along every
axis, every buffer's size) into a plan (``torchlean.kernels.plans``): ``conv_plan`` /
``conv_transpose_plan`` build it, the ``run_*`` functions run a primitive on one (the ops build a
layer's plan once and reuse it for the forward and both gradients), and the backends get it with
the arrays.
"""

from __future__ import annotations

from typing import Any

from ..errors import ShapeError
from ..kernels.plans import ConvPlan, ConvTransposePlan, conv_plan_of, conv_transpose_plan_of
from .buffer import Buffer, check_buffer, same_device, wrap
from .checks import check_product, check_u32, check_u32_tuple
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
              padding: Any, dilation: Any = None, groups: Any = 1) -> tuple:
    """The checked (batch, in_c, out_c, spatial, kernel, stride, padding, dilation, groups)."""
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
    dl = (1,) * r if dilation is None else _tuple(op, "dilation", dilation, r)
    for i in range(r):
        if dl[i] < 1:
            raise ShapeError(f"{op}: dilation[{i}] must be >= 1, got {dl[i]} (dilation {list(dl)})")
    gr = _groups(op, groups, ic, oc)
    # (no bound on the padded size: no backend materializes more than the tensors' sizes allow, see
    # the CPU backend's _sparse_axes; padding and stride only have to fit the uint32 dims)
    return bt, ic, oc, sp, kn, st, pd, dl, gr


def _groups(op: str, groups: Any, in_c: int, out_c: int) -> int:
    """The checked group count: >= 1 and a divisor of both channel counts."""
    if type(groups) is int and groups == 1:
        return 1
    g = check_u32(op, "groups", groups)
    if g < 1:
        raise ShapeError(f"{op}: groups must be >= 1, got {g}")
    for name, c in (("in_c", in_c), ("out_c", out_c)):
        if c % g:
            raise ShapeError(f"{op}: {name} = {c} must be divisible by groups = {g}")
    return g


# -- plans ------------------------------------------------------------------------------------------
# A plan is checked once, where it is built; the run_* functions take a plan and check only their
# buffers (one cheap test each; when one fails, the full checks run and raise their own error).
def conv_plan(op: str, batch: Any, in_c: Any, out_c: Any, spatial: Any, kernel: Any, stride: Any,
              padding: Any, dilation: Any = None, groups: Any = 1) -> ConvPlan:
    """The checked plan of a conv (and of its two gradients); errors name ``op``."""
    bt, ic, oc, sp, kn, st, pd, dl, gr = _geometry(op, batch, in_c, out_c, spatial, kernel, stride, padding,
                                                   dilation, groups)
    _out_dims(op, sp, kn, st, pd, dl)
    return conv_plan_of(bt, ic, oc, sp, kn, st, pd, dl, gr)


def conv_transpose_plan(op: str, batch: Any, in_c: Any, out_c: Any, spatial: Any, kernel: Any, stride: Any,
                        padding: Any, output_padding: Any, dilation: Any = None,
                        groups: Any = 1) -> ConvTransposePlan:
    """The checked plan of a transposed conv; errors name ``op``."""
    bt, ic, oc, sp, kn, st, pd, dl, gr = _geometry(op, batch, in_c, out_c, spatial, kernel, stride, padding,
                                                   dilation, groups)
    opd, _ = _transpose_out(op, sp, kn, st, pd, output_padding, dl)
    return conv_transpose_plan_of(bt, ic, oc, sp, kn, st, pd, opd, dl, gr)


def _ok(buf: Any, size: int) -> bool:
    """check_buffer's common case as a test: a live Buffer of ``size`` float32 elements."""
    return type(buf) is Buffer and buf._data is not None and buf._nbytes == 4 * size


def _out_dims(op: str, sp, kn, st, pd, dl) -> tuple[int, ...]:
    out = []
    for i, (s, k, t, p, d) in enumerate(zip(sp, kn, st, pd, dl)):
        if d != 1:
            o = (s + 2 * p - d * (k - 1) - 1) // t + 1
            if o < 1:
                raise ShapeError(
                    f"{op}: the output would be empty along spatial axis {i}: (spatial + 2 padding - dilation "
                    f"(kernel - 1) - 1) // stride + 1 = ({s} + 2*{p} - {d}*({k} - 1) - 1) // {t} + 1 = {o} (spatial "
                    f"{list(sp)}, kernel {list(kn)}, stride {list(st)}, padding {list(pd)}, dilation {list(dl)})")
            out.append(o)
            continue
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
         padding, dilation=None, groups=1) -> Buffer:
    """Cross-correlation (PyTorch's conv): y[n,o,p] = b[o] + sum_{c,k} w[o,c,k] x[n, g C' + c, p*stride - padding
    + k*dilation] over the C' = in_c / groups channels of o's group g, x read as 0 in the padding (a value:
    0 times an inf weight is NaN)."""
    return run_conv(conv_plan("conv", batch, in_c, out_c, spatial, kernel, stride, padding, dilation, groups), x, w, b)


def conv_bwd_input(dy: Buffer, w: Buffer, batch: int, in_c: int, out_c: int, spatial, kernel, stride,
                   padding, dilation=None, groups=1) -> Buffer:
    """dx (batch, in_c, *spatial): the adjoint of conv in x. Only taps that land inside x are terms
    (one that lands in the padding is dropped whole)."""
    plan = conv_plan("conv_bwd_input", batch, in_c, out_c, spatial, kernel, stride, padding, dilation, groups)
    return run_conv_bwd_input(plan, dy, w)


def conv_bwd_weight(x: Buffer, dy: Buffer, batch: int, in_c: int, out_c: int, spatial, kernel, stride,
                    padding, dilation=None, groups=1) -> Buffer:
    """dw (out_c, in_c / groups, *kernel): dw[o,c,k] = sum_{n,p} dy[n,o,p] x[n, g C' + c, p*stride - padding
    + k*dilation] (x = 0 in the padding)."""
    plan = conv_plan("conv_bwd_weight", batch, in_c, out_c, spatial, kernel, stride, padding, dilation, groups)
    return run_conv_bwd_weight(plan, x, dy)


def conv_transpose(x: Buffer, w: Buffer, b: Buffer | None, batch: int, in_c: int, out_c: int, spatial, kernel,
                   stride, padding, output_padding, dilation=None, groups=1) -> Buffer:
    """Transposed conv (PyTorch's conv_transpose): x (batch, in_c, *spatial), w (in_c, out_c / groups, *kernel),
    y (batch, out_c, *out), out_i = (spatial_i - 1) stride_i - 2 padding_i + dilation_i (kernel_i - 1)
    + output_padding_i + 1; y = conv_bwd_input of a conv from out_c to in_c channels over out, plus the bias."""
    plan = conv_transpose_plan("conv_transpose", batch, in_c, out_c, spatial, kernel, stride, padding, output_padding,
                               dilation, groups)
    return run_conv_transpose(plan, x, w, b)


def run_conv(plan: ConvPlan, x: Buffer, w: Buffer, b: Buffer | None) -> Buffer:
    """conv on a checked plan."""
    ctx = x._ctx if type(x) is Buffer else None
    if not (plan.fits and _ok(x, plan.n_x) and _ok(w, plan.n_w) and w._ctx is ctx
            and (b is None or (_ok(b, plan.out_c) and b._ctx is ctx))):
        op, (bt, ic, oc, sp, kn) = "conv", plan[:5]
        check_buffer(op, "x", x, check_product(op, "batch*in_c*prod(spatial)", bt, ic, *sp))
        check_buffer(op, "w", w, check_product(op, "out_c*(in_c/groups)*prod(kernel)", oc, ic // plan.groups, *kn))
        _bias(op, b, oc)
        ctx = same_device(op, x=x, w=w, **({} if b is None else {"b": b}))
        check_product(op, "batch*out_c*prod(out)", bt, oc, *plan.out)
    return wrap(ctx, run_allocating("conv", ctx, plan.n_y, ctx.backend.conv, x._data, w._data,
                                    None if b is None else b._data, plan))


def run_conv_bwd_input(plan: ConvPlan, dy: Buffer, w: Buffer) -> Buffer:
    """conv_bwd_input on a checked plan."""
    ctx = dy._ctx if type(dy) is Buffer else None
    if not (plan.fits and _ok(dy, plan.n_y) and _ok(w, plan.n_w) and w._ctx is ctx):
        op, (bt, ic, oc, sp, kn) = "conv_bwd_input", plan[:5]
        check_buffer(op, "dy", dy, check_product(op, "batch*out_c*prod(out)", bt, oc, *plan.out))
        check_buffer(op, "w", w, check_product(op, "out_c*(in_c/groups)*prod(kernel)", oc, ic // plan.groups, *kn))
        ctx = same_device(op, dy=dy, w=w)
        check_product(op, "batch*in_c*prod(spatial)", bt, ic, *sp)
    return wrap(ctx, run_allocating("conv_bwd_input", ctx, plan.n_x, ctx.backend.conv_bwd_input, dy._data, w._data,
                                    plan))


def run_conv_bwd_weight(plan: ConvPlan, x: Buffer, dy: Buffer) -> Buffer:
    """conv_bwd_weight on a checked plan."""
    ctx = x._ctx if type(x) is Buffer else None
    if not (plan.fits and _ok(x, plan.n_x) and _ok(dy, plan.n_y) and dy._ctx is ctx):
        op, (bt, ic, oc, sp, kn) = "conv_bwd_weight", plan[:5]
        check_buffer(op, "x", x, check_product(op, "batch*in_c*prod(spatial)", bt, ic, *sp))
        check_buffer(op, "dy", dy, check_product(op, "batch*out_c*prod(out)", bt, oc, *plan.out))
        ctx = same_device(op, x=x, dy=dy)
        check_product(op, "out_c*(in_c/groups)*prod(kernel)", oc, ic // plan.groups, *kn)
    return wrap(ctx, run_allocating("conv_bwd_weight", ctx, plan.n_w, ctx.backend.conv_bwd_weight, x._data, dy._data,
                                    plan))


def run_conv_transpose(plan: ConvTransposePlan, x: Buffer, w: Buffer, b: Buffer | None) -> Buffer:
    """conv_transpose on a checked plan."""
    ctx = x._ctx if type(x) is Buffer else None
    if not (plan.fits and _ok(x, plan.n_x) and _ok(w, plan.n_w) and w._ctx is ctx
            and (b is None or (_ok(b, plan.out_c) and b._ctx is ctx))):
        op, (bt, ic, oc, sp, kn) = "conv_transpose", plan[:5]
        check_buffer(op, "x", x, check_product(op, "batch*in_c*prod(spatial)", bt, ic, *sp))
        check_buffer(op, "w", w, check_product(op, "in_c*(out_c/groups)*prod(kernel)", ic, oc // plan.groups, *kn))
        _bias(op, b, oc)
        ctx = same_device(op, x=x, w=w, **({} if b is None else {"b": b}))
        check_product(op, "batch*out_c*prod(out)", bt, oc, *plan.out)
    return wrap(ctx, run_allocating("conv_transpose", ctx, plan.n_y, ctx.backend.conv_transpose, x._data, w._data,
                                    None if b is None else b._data, plan))


def _transpose_out(op: str, sp, kn, st, pd, output_padding: Any, dl) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The checked output_padding and conv_transpose's output dims. output_padding stays below the
    stride even where PyTorch also allows it below the dilation: the adjoint conv over the output
    must give back exactly ``spatial`` positions."""
    opd = _tuple(op, "output_padding", output_padding, len(sp))
    out = []
    for i, (s, k, t, p, o, d) in enumerate(zip(sp, kn, st, pd, opd, dl)):
        if o >= t:
            raise ShapeError(f"{op}: output_padding[{i}] = {o} must be smaller than stride[{i}] = {t} "
                             f"(output_padding {list(opd)}, stride {list(st)})")
        if d != 1:
            n = (s - 1) * t - 2 * p + d * (k - 1) + 1 + o
            if n < 1:
                raise ShapeError(
                    f"{op}: the output would be empty along spatial axis {i}: (spatial - 1) stride - 2 padding + "
                    f"dilation (kernel - 1) + 1 + output_padding = ({s} - 1)*{t} - 2*{p} + {d}*({k} - 1) + 1 + {o} "
                    f"= {n} (spatial {list(sp)}, kernel {list(kn)}, stride {list(st)}, padding {list(pd)}, "
                    f"output_padding {list(opd)}, dilation {list(dl)})")
            out.append(n)
            continue
        n = (s - 1) * t - 2 * p + k + o
        if n < 1:
            raise ShapeError(
                f"{op}: the output would be empty along spatial axis {i}: (spatial - 1) stride - 2 padding + kernel "
                f"+ output_padding = ({s} - 1)*{t} - 2*{p} + {k} + {o} = {n} (spatial {list(sp)}, kernel {list(kn)}, "
                f"stride {list(st)}, padding {list(pd)}, output_padding {list(opd)})")
        out.append(n)
    return opd, tuple(out)
