"""Differentiable convolutions: conv_nd / conv_transpose_nd (any spatial rank, one tape node each)
and the PyTorch-named front end conv1d/2d/3d, conv_transpose1d/2d/3d.

Both ops take x (N, C, *spatial) or an unbatched (C, *spatial), as PyTorch does, and record ONE
node whose VJP returns (dx, dw, db), computing only the gradients whose parents require them:

    conv_nd:            dx = conv_bwd_input(g, w)        dw = conv_bwd_weight(x, g)
    conv_transpose_nd:  dx = conv(g, w) (channels swapped)   dw = conv_bwd_weight(g, x) (roles swapped)
    both:               db = reduce_from_broadcast(g, (out_c,), (N, out_c, prod(out)), (0, 1, 0))

Where we differ from PyTorch: dilation and groups other than 1 raise ArgumentError (not
supported yet); padding='same' with an even kernel (PyTorch pads one more zero after than
before) is computed with symmetric padding kernel//2 and the first output along that axis
dropped (one extra output row is computed and gathered away).
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


def _unsupported(op: str, name: str, value: Any, rank: int) -> None:
    """dilation / groups: only 1 is supported; anything else is refused, never ignored."""
    if type(value) is int and value == 1:  # the default, without the ABC checks below
        return
    if name == "groups":
        ok = isinstance(value, numbers.Integral) and not isinstance(value, bool) and int(value) == 1
    else:
        try:
            ok = _ints(op, name, value, rank, 1) == (1,) * rank
        except ArgumentError:
            ok = False
    if not ok:
        raise ArgumentError(f"{op}: {name}={value!r} is not supported yet (only {name}=1)")


def _tensor(op: str, name: str, t: Any, like: Tensor | None) -> Tensor:
    if isinstance(t, Tensor):
        return t.float() if t._buf is None else t
    if like is None:
        raise DTypeError(f"{op}: {name} must be a Tensor, got {type(t).__name__}")
    return operand(op, t, like)


def _split(op: str, x_shape: tuple, w_shape: tuple, rank: int,
           transposed: bool) -> tuple[int, int, int, tuple, tuple, bool]:
    """(batch, in_c, out_c, spatial, kernel, unbatched) after checking the input's and the weight's
    shapes against each other."""
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


def _check_bias(op: str, b_shape: tuple | None, out_c: int) -> None:
    if b_shape is not None and b_shape != (out_c,):
        raise ShapeError(f"{op}: bias must have shape ({out_c},) (one per output channel), got {b_shape}")


def _geometry(op: str, x_shape: tuple, w_shape: tuple, b_shape: tuple | None, stride: Any, padding: Any,
              output_padding: Any, transposed: bool) -> tuple:
    """Every check of conv_nd (transposed=False) or conv_transpose_nd on the shapes and arguments, in
    their order, and what they give: (plan, y_shape), the runtime's checked plan of the call (a
    ConvPlan, or a ConvTransposePlan) and the output's shape."""
    rank = len(w_shape) - 2
    if rank < 1:
        wdesc = "(in_channels, out_channels, *kernel)" if transposed else "(out_channels, in_channels, *kernel)"
        raise ShapeError(f"{op}: weight must have at least 3 dims {wdesc}, got shape {w_shape}")
    batch, in_c, out_c, spatial, kernel, unbatched = _split(op, x_shape, w_shape, rank, transposed)
    _check_bias(op, b_shape, out_c)
    st = _ints(op, "stride", stride, rank, 1)
    pd = _ints(op, "padding", padding, rank, 0)
    if not transposed:
        opd = None
        out = tuple((s + 2 * p - k) // t + 1 for s, k, t, p in zip(spatial, kernel, st, pd))
        if any(o < 1 for o in out):
            raise ShapeError(f"{op}: input spatial size {spatial} with padding {pd} is too small for kernel {kernel} "
                             f"at stride {st}: the output {out} would be empty")
    else:
        opd = _ints(op, "output_padding", output_padding, rank, 0)
        if any(o >= s for o, s in zip(opd, st)):
            raise ArgumentError(f"{op}: output_padding {opd} must be smaller than stride {st} along every axis")
        out = tuple((s - 1) * t - 2 * p + k + o for s, k, t, p, o in zip(spatial, kernel, st, pd, opd))
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
        return conv_transpose_plan("conv_transpose", batch, in_c, out_c, spatial, kernel, st, pd, opd), y_shape
    return conv_plan("conv", batch, in_c, out_c, spatial, kernel, st, pd), y_shape


# A module calls its conv with the same shapes and arguments on every step: those are checked, and
# the plan built, once (only successful checks are kept). Tensor shapes are tuples of ints; stride /
# padding / output_padding join the key only as a plain int or a tuple of plain ints (a bool would
# share 1's entry and must still be refused; a list is unhashable).
_geometry_memo = memo("ops.conv.geometry", 1024)(_geometry)


def _checked_geometry(op: str, x: Tensor, w: Tensor, b: Tensor | None, stride: Any, padding: Any,
                      output_padding: Any, transposed: bool) -> tuple:
    geometry = _geometry_memo if plain_ints(stride) and plain_ints(padding) and (
        output_padding is None or plain_ints(output_padding)) else _geometry
    return geometry(op, x._shape, w._shape, None if b is None else b._shape, stride, padding, output_padding,
                    transposed)


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
            _op: str = "conv_nd") -> Tensor:
    """Cross-correlation over the last r = weight.ndim - 2 axes (PyTorch's conv), zero padding.

    x (N, C, *spatial) or (C, *spatial); weight (O, C, *kernel); bias (O,) or None; stride and
    padding an int or r ints. Output (N, O, *out), out_i = (spatial_i + 2 padding_i - kernel_i) // stride_i + 1.
    """
    x = _tensor(_op, "input", x, None)
    return _conv(_op, x, _tensor(_op, "weight", weight, x), bias, stride, padding)


def _conv(op: str, x: Tensor, weight: Tensor, bias: Any, stride: Any, padding: Any) -> Tensor:
    """conv_nd once its input and weight are float tensors."""
    bias = None if bias is None else _tensor(op, "bias", bias, x)
    plan, shape = _checked_geometry(op, x, weight, bias, stride, padding, None, False)
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
                      output_padding: Any = 0, _op: str = "conv_transpose_nd") -> Tensor:
    """Transposed convolution over the last r = weight.ndim - 2 axes (PyTorch's conv_transpose).

    x (N, C_in, *spatial) or unbatched; weight (C_in, C_out, *kernel); output (N, C_out, *out) with
    out_i = (spatial_i - 1) stride_i - 2 padding_i + kernel_i + output_padding_i, output_padding_i < stride_i.
    """
    x = _tensor(_op, "input", x, None)
    return _conv_transpose(_op, x, _tensor(_op, "weight", weight, x), bias, stride, padding, output_padding)


def _conv_transpose(op: str, x: Tensor, weight: Tensor, bias: Any, stride: Any, padding: Any,
                    output_padding: Any) -> Tensor:
    """conv_transpose_nd once its input and weight are float tensors."""
    bias = None if bias is None else _tensor(op, "bias", bias, x)
    plan, shape = _checked_geometry(op, x, weight, bias, stride, padding, output_padding, True)
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
def _conv_front(op: str, rank: int, input: Tensor, weight: Tensor, bias: Any, stride: Any, padding: Any,
                dilation: Any, groups: Any) -> Tensor:
    _unsupported(op, "dilation", dilation, rank)
    _unsupported(op, "groups", groups, rank)
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
            st = _ints(op, "stride", stride, rank, 1)
            if any(s != 1 for s in st):
                raise ArgumentError(f"{op}: padding='same' is not supported for strided convolutions (stride {st})")
            # PyTorch pads (k-1)//2 before and k//2 after; symmetric k//2 gives the same outputs
            # shifted by one where k is even: drop the first output there.
            kernel = tuple(weight.shape[2:])
            padding = tuple(k // 2 for k in kernel)
            drop = tuple(i for i, k in enumerate(kernel) if k % 2 == 0)
        else:
            raise ArgumentError(f"{op}: padding must be 'valid', 'same', an int or a tuple of {rank} ints, "
                                f"got {padding!r}")
    y = _conv(op, input, weight, bias, stride, padding)
    if drop:
        lead = y.ndim - rank
        key = (slice(None),) * lead + tuple(slice(1, None) if i in drop else slice(None) for i in range(rank))
        y = y[key]
    return y


def _transpose_front(op: str, rank: int, input: Tensor, weight: Tensor, bias: Any, stride: Any, padding: Any,
                     output_padding: Any, groups: Any, dilation: Any) -> Tensor:
    _unsupported(op, "dilation", dilation, rank)
    _unsupported(op, "groups", groups, rank)
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
    return _conv_transpose(op, input, weight, bias, stride, padding, output_padding)


def conv1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1) -> Tensor:
    """PyTorch's conv1d: input (N, C_in, L) or (C_in, L), weight (C_out, C_in, k). dilation and
    groups other than 1 are not supported yet (ArgumentError)."""
    return _conv_front("conv1d", 1, input, weight, bias, stride, padding, dilation, groups)


def conv2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1) -> Tensor:
    """PyTorch's conv2d: input (N, C_in, H, W) or (C_in, H, W), weight (C_out, C_in, kH, kW).
    dilation and groups other than 1 are not supported yet (ArgumentError)."""
    return _conv_front("conv2d", 2, input, weight, bias, stride, padding, dilation, groups)


def conv3d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1) -> Tensor:
    """PyTorch's conv3d: input (N, C_in, D, H, W) or unbatched, weight (C_out, C_in, kD, kH, kW).
    dilation and groups other than 1 are not supported yet (ArgumentError)."""
    return _conv_front("conv3d", 3, input, weight, bias, stride, padding, dilation, groups)


def conv_transpose1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
                     output_padding: Any = 0, groups: int = 1, dilation: Any = 1) -> Tensor:
    """PyTorch's conv_transpose1d: input (N, C_in, L) or unbatched, weight (C_in, C_out, k).
    dilation and groups other than 1 are not supported yet (ArgumentError)."""
    return _transpose_front("conv_transpose1d", 1, input, weight, bias, stride, padding, output_padding, groups,
                            dilation)


def conv_transpose2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
                     output_padding: Any = 0, groups: int = 1, dilation: Any = 1) -> Tensor:
    """PyTorch's conv_transpose2d: input (N, C_in, H, W) or unbatched, weight (C_in, C_out, kH, kW).
    dilation and groups other than 1 are not supported yet (ArgumentError)."""
    return _transpose_front("conv_transpose2d", 2, input, weight, bias, stride, padding, output_padding, groups,
                            dilation)


def conv_transpose3d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
                     output_padding: Any = 0, groups: int = 1, dilation: Any = 1) -> Tensor:
    """PyTorch's conv_transpose3d: input (N, C_in, D, H, W) or unbatched, weight (C_in, C_out, kD, kH, kW).
    dilation and groups other than 1 are not supported yet (ArgumentError)."""
    return _transpose_front("conv_transpose3d", 3, input, weight, bias, stride, padding, output_padding, groups,
                            dilation)
