"""Differentiable convolutions: conv_nd / conv_transpose_nd (any spatial rank, one tape node each)
and the PyTorch-named front end conv1d/2d/3d, conv_transpose1d/2d/3d.

Both ops take x (N, C, *spatial) or an unbatched (C, *spatial), as PyTorch does, and record ONE
node whose VJP returns (dx, dw, db), computing only the gradients whose parents require them:

    conv_nd:            dx = conv_bwd_input(g, w)        dw = conv_bwd_weight(x, g)
    conv_transpose_nd:  dx = conv(g, w) (channels swapped)   dw = conv_bwd_weight(g, x) (roles swapped)
    both:               db = reduce_from_broadcast(g, (out_c,), (N, out_c, prod(out)), (0, 1, 0))

groups and dilation follow PyTorch (weight (O, C/groups, *kernel) for conv, (C, O/groups, *kernel)
for the transposed conv). Where we differ from PyTorch: padding='same' where the total padding
dilation (kernel - 1) is odd (PyTorch pads one more zero after than before) is computed with
symmetric padding of the larger half and the first output along that axis dropped (one extra
output row is computed and gathered away); a transposed conv's output_padding must stay below the
stride (PyTorch also accepts it below the dilation): ArgumentError.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

from .. import autograd
from .._validate import MAX_FLOAT_ELEMENTS
from ..errors import ArgumentError, DTypeError, ShapeError
from ..kernels.caches import memo
from ..runtime import primitives as P
from ..runtime.buffer import Buffer
from ..runtime.primitives_conv import (conv_plan, conv_transpose_plan, run_conv, run_conv_bwd_input,
                                       run_conv_bwd_weight, run_conv_transpose)
from ._base import Tensor, new, operand, plain_ints, same_device

_U32_MAX = 2**32 - 1  # stride, padding and output_padding reach the primitives as uint32 dims
FUNCTIONAL = ["conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"]
__all__ = ["conv_nd", "conv_transpose_nd"] + FUNCTIONAL


# -- argument handling ---------------------------------------------------------------------------
def _ints(op: str, name: str, value: Any, rank: int, minimum: int) -> tuple[int, ...]:
    """An int or a sequence of ``rank`` ints, each >= minimum, as a tuple (PyTorch's _ntuple)."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        vals = (int(value),) * rank
    elif isinstance(value, (tuple, list)) and all(isinstance(v, numbers.Integral) and not isinstance(v, bool)
                                                  for v in value):
        vals = tuple(int(v) for v in value)
        if len(vals) == 1 and rank > 1:
            vals = vals * rank
        if len(vals) != rank:
            raise ArgumentError(f"{op}: {name} must be an int or a sequence of {rank} ints, got {value!r}")
    else:
        raise ArgumentError(f"{op}: {name} must be an int or a sequence of {rank} ints, got {value!r}")
    if any(v < minimum for v in vals):
        raise ArgumentError(f"{op}: {name} must be >= {minimum} along every axis, got {value!r}")
    if any(v > _U32_MAX for v in vals):
        raise ArgumentError(f"{op}: {name} must fit the runtime's unsigned 32-bit dims (at most 2**32 - 1), "
                            f"got {value!r}")
    return vals


def _groups(op: str, groups: Any) -> int:
    """groups: a positive int (never a bool)."""
    if type(groups) is int and groups >= 1:
        return groups
    if not isinstance(groups, numbers.Integral) or isinstance(groups, bool):
        raise ArgumentError(f"{op}: groups must be a positive int, got {groups!r}")
    if not 1 <= int(groups) <= _U32_MAX:
        raise ArgumentError(f"{op}: groups must be a positive int (at most 2**32 - 1), got {groups!r}")
    return int(groups)


def _tensor(op: str, name: str, t: Any, like: Tensor | None) -> Tensor:
    if isinstance(t, Tensor):
        return t.float() if t._buf is None else t
    if like is None:
        raise DTypeError(f"{op}: {name} must be a Tensor, got {type(t).__name__}")
    return operand(op, t, like)


def _split(op: str, x_shape: tuple, w_shape: tuple, rank: int, transposed: bool,
           groups: int = 1) -> tuple[int, int, int, tuple, tuple, bool]:
    """(batch, in_c, out_c, spatial, kernel, unbatched) after checking the input's and the weight's
    shapes against each other and against ``groups``."""
    if groups != 1:
        return _split_groups(op, x_shape, w_shape, rank, transposed, groups)
    wdesc = "(in_channels, out_channels, *kernel)" if transposed else "(out_channels, in_channels, *kernel)"
    if len(w_shape) != rank + 2:
        raise ShapeError(f"{op}: weight must have {rank + 2} dims {wdesc}, got shape {w_shape}")
    if len(x_shape) not in (rank + 1, rank + 2):
        raise ShapeError(f"{op}: input must have {rank + 1} dims (unbatched: channels, *spatial) or {rank + 2} "
                         f"(batch, channels, *spatial), got shape {x_shape}")
    unbatched = len(x_shape) == rank + 1
    batch = 1 if unbatched else x_shape[0]
    c = x_shape[-rank - 1]
    spatial = tuple(x_shape[-rank:])
    kernel = tuple(w_shape[2:])
    w_in = w_shape[0] if transposed else w_shape[1]
    out_c = w_shape[1] if transposed else w_shape[0]
    if c != w_in:
        which = "weight.shape[0]" if transposed else "weight.shape[1]"
        raise ShapeError(f"{op}: input has {c} channels (shape {x_shape}) but {which} = {w_in} (weight shape "
                         f"{w_shape}): they must be equal")
    if any(k < 1 for k in kernel):
        raise ShapeError(f"{op}: weight has an empty kernel {kernel} (weight shape {w_shape})")
    return batch, c, out_c, spatial, kernel, unbatched


def _split_groups(op: str, x_shape: tuple, w_shape: tuple, rank: int, transposed: bool,
                  groups: int) -> tuple[int, int, int, tuple, tuple, bool]:
    """_split with groups > 1: conv's weight is (out_c, in_c / groups, *kernel), the transposed conv's
    (in_c, out_c / groups, *kernel); both channel counts are multiples of groups."""
    wdesc = ("(in_channels, out_channels / groups, *kernel)" if transposed
             else "(out_channels, in_channels / groups, *kernel)")
    if len(w_shape) != rank + 2:
        raise ShapeError(f"{op}: weight must have {rank + 2} dims {wdesc}, got shape {w_shape}")
    if len(x_shape) not in (rank + 1, rank + 2):
        raise ShapeError(f"{op}: input must have {rank + 1} dims (unbatched: channels, *spatial) or {rank + 2} "
                         f"(batch, channels, *spatial), got shape {x_shape}")
    unbatched = len(x_shape) == rank + 1
    batch = 1 if unbatched else x_shape[0]
    c = x_shape[-rank - 1]
    spatial, kernel = tuple(x_shape[-rank:]), tuple(w_shape[2:])
    if transposed:
        if c != w_shape[0]:
            raise ShapeError(f"{op}: input has {c} channels (shape {x_shape}) but weight.shape[0] = {w_shape[0]} "
                             f"(weight shape {w_shape}): they must be equal")
        out_c = w_shape[1] * groups
    else:
        if c != w_shape[1] * groups:
            raise ShapeError(f"{op}: with groups={groups}, weight of shape {w_shape} expects the input to have "
                             f"weight.shape[1] * groups = {w_shape[1] * groups} channels, got {c} (input shape "
                             f"{x_shape})")
        out_c = w_shape[0]
    for name, n in (("input channels", c), ("output channels", out_c)):
        if n % groups:
            raise ShapeError(f"{op}: the {name} ({n}) must be divisible by groups={groups} (input shape "
                             f"{x_shape}, weight shape {w_shape})")
    if any(k < 1 for k in kernel):
        raise ShapeError(f"{op}: weight has an empty kernel {kernel} (weight shape {w_shape})")
    return batch, c, out_c, spatial, kernel, unbatched


def _check_bias(op: str, b_shape: tuple | None, out_c: int) -> None:
    if b_shape is not None and b_shape != (out_c,):
        raise ShapeError(f"{op}: bias must have shape ({out_c},) (one per output channel), got {b_shape}")


def _geometry(op: str, x_shape: tuple, w_shape: tuple, b_shape: tuple | None, stride: Any, padding: Any,
              output_padding: Any, transposed: bool, dilation: Any = 1, groups: Any = 1) -> tuple:
    """Every check of conv_nd (transposed=False) or conv_transpose_nd on the shapes and arguments, in
    their order, and what they give: (plan, y_shape), the runtime's checked plan of the call (a
    ConvPlan, or a ConvTransposePlan) and the output's shape."""
    rank = len(w_shape) - 2
    if rank < 1:
        wdesc = "(in_channels, out_channels, *kernel)" if transposed else "(out_channels, in_channels, *kernel)"
        raise ShapeError(f"{op}: weight must have at least 3 dims {wdesc}, got shape {w_shape}")
    gr = _groups(op, groups)
    batch, in_c, out_c, spatial, kernel, unbatched = _split(op, x_shape, w_shape, rank, transposed, gr)
    _check_bias(op, b_shape, out_c)
    st = _ints(op, "stride", stride, rank, 1)
    pd = _ints(op, "padding", padding, rank, 0)
    dl = (1,) * rank if type(dilation) is int and dilation == 1 else _ints(op, "dilation", dilation, rank, 1)
    span = tuple(d * (k - 1) + 1 for k, d in zip(kernel, dl))  # the kernel's extent
    if not transposed:
        opd = None
        out = tuple((s + 2 * p - e) // t + 1 for s, e, t, p in zip(spatial, span, st, pd))
        if any(o < 1 for o in out):
            dtext = "" if dl == (1,) * rank else f" at dilation {dl}"
            raise ShapeError(f"{op}: input spatial size {spatial} with padding {pd} is too small for kernel {kernel}"
                             f"{dtext} at stride {st}: the output {out} would be empty")
    else:
        opd = _ints(op, "output_padding", output_padding, rank, 0)
        if any(o >= s for o, s in zip(opd, st)):
            if all(o < max(s, d) for o, s, d in zip(opd, st, dl)):
                raise ArgumentError(f"{op}: output_padding {opd} at or above stride {st} is not supported (PyTorch "
                                    f"accepts it below the dilation {dl}); give output_padding smaller than the "
                                    f"stride along every axis")
            raise ArgumentError(f"{op}: output_padding {opd} must be smaller than stride {st} along every axis")
        out = tuple((s - 1) * t - 2 * p + e + o for s, e, t, p, o in zip(spatial, span, st, pd, opd))
        if any(o < 1 for o in out):
            raise ShapeError(f"{op}: input spatial size {spatial} with kernel {kernel}, stride {st}, padding {pd} and "
                             f"output_padding {opd} gives an empty output {out}")
    y_shape = ((out_c,) if unbatched else (batch, out_c)) + out
    n_out = math.prod(y_shape)
    if n_out > MAX_FLOAT_ELEMENTS:  # one float32 buffer holds at most 2**32 - 1 elements (the seed's uint32)
        raise ShapeError(f"{op}: the output would have shape {y_shape} = {n_out} elements, more than a tensor can "
                         f"hold (2**32 - 1)")
    # (the plan's own checks name the primitive, as a direct call of it would)
    if transposed:
        return conv_transpose_plan("conv_transpose", batch, in_c, out_c, spatial, kernel, st, pd, opd, dl,
                                   gr), y_shape
    return conv_plan("conv", batch, in_c, out_c, spatial, kernel, st, pd, dl, gr), y_shape


# A module calls its conv with the same shapes and arguments on every step: those are checked, and
# the plan built, once (only successful checks are kept). Tensor shapes are tuples of ints; stride /
# padding / output_padding join the key only as a plain int or a tuple of plain ints (a bool would
# share 1's entry and must still be refused; a list is unhashable).
_geometry_memo = memo("ops.conv.geometry", 1024)(_geometry)


def _checked_geometry(op: str, x: Tensor, w: Tensor, b: Tensor | None, stride: Any, padding: Any,
                      output_padding: Any, transposed: bool, dilation: Any = 1, groups: Any = 1) -> tuple:
    geometry = _geometry_memo if plain_ints(stride) and plain_ints(padding) and (
        output_padding is None or plain_ints(output_padding)) and plain_ints(dilation) \
        and type(groups) is int else _geometry
    return geometry(op, x._shape, w._shape, None if b is None else b._shape, stride, padding, output_padding,
                    transposed, dilation, groups)


def _parents(op: str, x: Tensor, w: Tensor, b: Tensor | None) -> tuple:
    """(x, w) or (x, w, b), all on one device (else same_device's DeviceError)."""
    dev = x._device
    if b is None:
        if w._device != dev:
            same_device(op, x, w)
        return x, w
    if w._device != dev or b._device != dev:
        same_device(op, x, w, b)
    return x, w, b


def _bias_grad(g: Buffer, batch: int, out_c: int, n_out: int) -> Buffer:
    return P.reduce_from_broadcast(g, (out_c,), (batch, out_c, n_out), (0, 1, 0))


# -- the ops ------------------------------------------------------------------------------------
def conv_nd(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
            _op: str = "conv_nd", dilation: Any = 1, groups: int = 1) -> Tensor:
    """Cross-correlation over the last r = weight.ndim - 2 axes (PyTorch's conv), zero padding.

    x (N, C, *spatial) or (C, *spatial); weight (O, C / groups, *kernel); bias (O,) or None; stride,
    padding and dilation an int or r ints. Output (N, O, *out),
    out_i = (spatial_i + 2 padding_i - dilation_i (kernel_i - 1) - 1) // stride_i + 1.
    """
    x = _tensor(_op, "input", x, None)
    return _conv(_op, x, _tensor(_op, "weight", weight, x), bias, stride, padding, dilation, groups)


def _conv(op: str, x: Tensor, weight: Tensor, bias: Any, stride: Any, padding: Any, dilation: Any = 1,
          groups: Any = 1) -> Tensor:
    """conv_nd once its input and weight are float tensors."""
    bias = None if bias is None else _tensor(op, "bias", bias, x)
    plan, shape = _checked_geometry(op, x, weight, bias, stride, padding, None, False, dilation, groups)
    parents = _parents(op, x, weight, bias)
    xb, wb = x._buf, weight._buf  # float tensors (_tensor)
    bb = None if bias is None else bias._buf
    yb = run_conv(plan, xb, wb, bb)

    def vjp(g: Buffer):
        dx = run_conv_bwd_input(plan, g, wb) if x.requires_grad else None
        dw = run_conv_bwd_weight(plan, xb, g) if weight.requires_grad else None
        if bias is None:
            return dx, dw
        return dx, dw, (_bias_grad(g, plan.batch, plan.out_c, math.prod(plan.out)) if bias.requires_grad else None)

    return autograd.record(op, new(yb, shape), parents, vjp)


def conv_transpose_nd(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
                      output_padding: Any = 0, _op: str = "conv_transpose_nd", groups: int = 1,
                      dilation: Any = 1) -> Tensor:
    """Transposed convolution over the last r = weight.ndim - 2 axes (PyTorch's conv_transpose).

    x (N, C_in, *spatial) or unbatched; weight (C_in, C_out / groups, *kernel); output (N, C_out, *out) with
    out_i = (spatial_i - 1) stride_i - 2 padding_i + dilation_i (kernel_i - 1) + output_padding_i + 1,
    output_padding_i < stride_i.
    """
    x = _tensor(_op, "input", x, None)
    return _conv_transpose(_op, x, _tensor(_op, "weight", weight, x), bias, stride, padding, output_padding,
                           groups, dilation)


def _conv_transpose(op: str, x: Tensor, weight: Tensor, bias: Any, stride: Any, padding: Any,
                    output_padding: Any, groups: Any = 1, dilation: Any = 1) -> Tensor:
    """conv_transpose_nd once its input and weight are float tensors."""
    bias = None if bias is None else _tensor(op, "bias", bias, x)
    plan, shape = _checked_geometry(op, x, weight, bias, stride, padding, output_padding, True, dilation, groups)
    parents = _parents(op, x, weight, bias)
    xb, wb = x._buf, weight._buf  # float tensors (_tensor)
    bb = None if bias is None else bias._buf
    yb = run_conv_transpose(plan, xb, wb, bb)

    def vjp(g: Buffer):
        # y = A^T x with A the plan's adjoint conv (out_c to in_c channels over `out`, this weight),
        # so dx = A g (a conv of g) and dw = the weight gradient of that conv with g as its input.
        dx = run_conv(plan.adjoint, g, wb, None) if x.requires_grad else None
        dw = run_conv_bwd_weight(plan.adjoint, g, xb) if weight.requires_grad else None
        if bias is None:
            return dx, dw
        return dx, dw, (_bias_grad(g, plan.batch, plan.out_c, math.prod(plan.out)) if bias.requires_grad else None)

    return autograd.record(op, new(yb, shape), parents, vjp)


# -- PyTorch front end --------------------------------------------------------------------------
def same_padding(op: str, kernel: tuple, dilation: Any, stride: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """PyTorch's padding='same' (stride 1 only): per axis, total = dilation (kernel - 1) zeros, total // 2
    before and the rest after. Returns (before, after)."""
    rank = len(kernel)
    st = _ints(op, "stride", stride, rank, 1)
    if any(s != 1 for s in st):
        raise ArgumentError(f"{op}: padding='same' is not supported for strided convolutions (stride {st})")
    dl = _ints(op, "dilation", dilation, rank, 1)
    total = tuple(d * (k - 1) for k, d in zip(kernel, dl))
    return tuple(t // 2 for t in total), tuple(t - t // 2 for t in total)


def _conv_front(op: str, rank: int, input: Tensor, weight: Tensor, bias: Any, stride: Any, padding: Any,
                dilation: Any, groups: Any) -> Tensor:
    input = _tensor(op, "input", input, None)
    weight = _tensor(op, "weight", weight, input)
    if weight.ndim != rank + 2:
        raise ShapeError(f"{op}: weight must have {rank + 2} dims (out_channels, in_channels, *kernel of {rank}), "
                         f"got shape {weight.shape}")
    if input.ndim not in (rank + 1, rank + 2):
        raise ShapeError(f"{op}: expected a {rank + 1}-D (unbatched) or {rank + 2}-D (batched) input, "
                         f"got shape {input.shape}")
    drop = ()
    if isinstance(padding, str):
        if padding == "valid":
            padding = 0
        elif padding == "same":
            # PyTorch pads total // 2 before and the rest after; symmetric padding by the larger half
            # gives the same outputs shifted by one where the total is odd: drop the first output there.
            before, after = same_padding(op, tuple(weight.shape[2:]), dilation, stride)
            padding = after
            drop = tuple(i for i, (a, b) in enumerate(zip(before, after)) if a != b)
        else:
            raise ArgumentError(f"{op}: padding must be 'valid', 'same', an int or a tuple of {rank} ints, "
                                f"got {padding!r}")
    y = _conv(op, input, weight, bias, stride, padding, dilation, groups)
    if drop:
        lead = y.ndim - rank
        key = (slice(None),) * lead + tuple(slice(1, None) if i in drop else slice(None) for i in range(rank))
        y = y[key]
    return y


def _transpose_front(op: str, rank: int, input: Tensor, weight: Tensor, bias: Any, stride: Any, padding: Any,
                     output_padding: Any, groups: Any, dilation: Any) -> Tensor:
    input = _tensor(op, "input", input, None)
    weight = _tensor(op, "weight", weight, input)
    if weight.ndim != rank + 2:
        raise ShapeError(f"{op}: weight must have {rank + 2} dims (in_channels, out_channels, *kernel of {rank}), "
                         f"got shape {weight.shape}")
    if input.ndim not in (rank + 1, rank + 2):
        raise ShapeError(f"{op}: expected a {rank + 1}-D (unbatched) or {rank + 2}-D (batched) input, "
                         f"got shape {input.shape}")
    if isinstance(padding, str):
        raise ArgumentError(f"{op}: padding must be an int or a tuple of {rank} ints, got {padding!r}")
    return _conv_transpose(op, input, weight, bias, stride, padding, output_padding, groups, dilation)


def conv1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1) -> Tensor:
    """PyTorch's conv1d: input (N, C_in, L) or (C_in, L), weight (C_out, C_in / groups, k)."""
    return _conv_front("conv1d", 1, input, weight, bias, stride, padding, dilation, groups)


def conv2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1) -> Tensor:
    """PyTorch's conv2d: input (N, C_in, H, W) or (C_in, H, W), weight (C_out, C_in / groups, kH, kW)."""
    return _conv_front("conv2d", 2, input, weight, bias, stride, padding, dilation, groups)


def conv3d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1) -> Tensor:
    """PyTorch's conv3d: input (N, C_in, D, H, W) or unbatched, weight (C_out, C_in / groups, kD, kH, kW)."""
    return _conv_front("conv3d", 3, input, weight, bias, stride, padding, dilation, groups)


def conv_transpose1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
                     output_padding: Any = 0, groups: int = 1, dilation: Any = 1) -> Tensor:
    """PyTorch's conv_transpose1d: input (N, C_in, L) or unbatched, weight (C_in, C_out, k).
    The weight's second dim is C_out / groups."""
    return _transpose_front("conv_transpose1d", 1, input, weight, bias, stride, padding, output_padding, groups,
                            dilation)


def conv_transpose2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
                     output_padding: Any = 0, groups: int = 1, dilation: Any = 1) -> Tensor:
    """PyTorch's conv_transpose2d: input (N, C_in, H, W) or unbatched, weight (C_in, C_out, kH, kW).
    The weight's second dim is C_out / groups."""
    return _transpose_front("conv_transpose2d", 2, input, weight, bias, stride, padding, output_padding, groups,
                            dilation)


def conv_transpose3d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
                     output_padding: Any = 0, groups: int = 1, dilation: Any = 1) -> Tensor:
    """PyTorch's conv_transpose3d: input (N, C_in, D, H, W) or unbatched, weight (C_in, C_out, kD, kH, kW).
    The weight's second dim is C_out / groups."""
    return _transpose_front("conv_transpose3d", 3, input, weight, bias, stride, padding, output_padding, groups,
                            dilation)
