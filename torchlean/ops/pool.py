"""Differentiable ops of the pooling: max_pool, avg_pool, smooth_max_pool and their backward passes.

``max_pool_nd``, ``avg_pool_nd`` and ``smooth_max_pool_nd`` pool x (N, C, *spatial) or an unbatched
(C, *spatial) over its last r = len(kernel_size) axes (1 <= r <= 8), each as one tape node over one
forward primitive and one backward primitive: max pool keeps x (its VJP recomputes each window's
winner from x: the first NaN, else the first strict maximum), smooth max pool keeps x and y, avg
pool keeps nothing. The buffers kept are the input's and the output's own (never copies), so the
nodes hold no workspace.

The PyTorch-named front end (``max_pool1d/2d/3d``, ``avg_pool1d/2d/3d``, listed in ``FUNCTIONAL``)
has torch.nn.functional's signatures and defaults (max pool: with several NaN in one window the
first gets the gradient, where PyTorch's CPU kernel picks the last); options we do not support yet (dilation != 1,
ceil_mode=True, return_indices=True, count_include_pad=False with padding, divisor_override) raise
ArgumentError instead of being ignored. ``smooth_max_pool1d/2d/3d`` are ours.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Sequence

from .. import autograd
from ..errors import ArgumentError, DTypeError, ShapeError
from ..kernels.caches import memo
from ..runtime.buffer import Buffer
from ..runtime.checks import check_scalar
from ..runtime.primitives_pool import (pool_plan, run_avg_pool, run_avg_pool_bwd, run_max_pool, run_max_pool_bwd,
                                       run_smooth_max_pool, run_smooth_max_pool_bwd)
from ._base import Tensor, fbuf, new, plain_ints

__all__ = ["max_pool_nd", "avg_pool_nd", "smooth_max_pool_nd",
           "max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d",
           "smooth_max_pool1d", "smooth_max_pool2d", "smooth_max_pool3d"]
FUNCTIONAL = ["max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d",
              "smooth_max_pool1d", "smooth_max_pool2d", "smooth_max_pool3d"]

MAX_RANK = 8


# -- argument normalization ------------------------------------------------------------------------
def _is_int(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _ints(op: str, name: str, v: Any, r: int, minimum: int) -> tuple[int, ...]:
    """An int or a sequence of r ints (a single-element sequence is repeated, as PyTorch does)."""
    if _is_int(v):
        vals: tuple = (int(v),) * r
    elif isinstance(v, (tuple, list)) and all(_is_int(e) for e in v) and len(v) in (1, r):
        vals = tuple(int(e) for e in v) * (r if len(v) == 1 else 1)
    else:
        raise ArgumentError(f"{op}: {name} must be an int or a tuple of {r} ints, got {v!r}")
    if any(e < minimum for e in vals):
        raise ArgumentError(f"{op}: {name} must be >= {minimum} on every axis, got {vals}")
    if any(e > 2**32 - 1 for e in vals):
        raise ArgumentError(f"{op}: {name} must fit the runtime's unsigned 32-bit dims (at most 2**32 - 1), "
                            f"got {vals}")
    return vals


def _geometry_checked(op: str, r: int, kernel_size: Any, stride: Any, padding: Any):
    k = _ints(op, "kernel_size", kernel_size, r, 1)
    s = k if stride is None or (isinstance(stride, (tuple, list)) and len(stride) == 0) else _ints(op, "stride", stride, r, 1)
    p = _ints(op, "padding", padding, r, 0)
    return k, s, p


# A module pools with the same arguments on every call: they are checked once (only successful
# checks are kept; the key holds only plain ints, None and op).
_geometry_memo = memo("ops.pool.arguments", 1024)(_geometry_checked)


def _geometry(op: str, r: int, kernel_size: Any, stride: Any, padding: Any):
    """(kernel, stride, padding) as tuples of r ints, each checked (stride None: the kernel)."""
    if plain_ints(kernel_size) and (stride is None or plain_ints(stride)) and plain_ints(padding):
        return _geometry_memo(op, r, kernel_size, stride, padding)
    return _geometry_checked(op, r, kernel_size, stride, padding)


def _rank_of(op: str, kernel_size: Any) -> int:
    if not isinstance(kernel_size, (tuple, list)) or not 1 <= len(kernel_size) <= MAX_RANK:
        raise ArgumentError(f"{op}: kernel_size must be a tuple of 1 to {MAX_RANK} ints (its length is the number "
                            f"of pooled axes), got {kernel_size!r}")
    return len(kernel_size)


def _layout(op: str, prim: str, x: Any, r: int, k, s, p):
    """(x, output shape, plan of the primitive ``prim``) for x (N, C, *spatial) or (C, *spatial)."""
    if not isinstance(x, Tensor):
        raise DTypeError(f"{op}: argument input must be a Tensor, got {type(x).__name__}")
    # k, s, p are tuples of ints (_geometry) and a tensor's shape is a tuple of ints: the shape
    # arithmetic and the plan are made once per (shape, geometry)
    return (x,) + _shape_layout(op, prim, x._shape, r, k, s, p)


@memo("ops.pool.layout", 1024)
def _shape_layout(op: str, prim: str, shape: tuple, r: int, k, s, p):
    """(output shape, plan) of an input of this shape (the plan's own checks name ``prim``)."""
    if len(shape) not in (r + 1, r + 2):
        raise ShapeError(f"{op}: expected a {r + 1}-D (C, *spatial) or {r + 2}-D (N, C, *spatial) input for "
                         f"{r} pooled axes, got shape {tuple(shape)}")
    lead = tuple(shape[:len(shape) - r])
    spatial = tuple(shape[len(shape) - r:])
    out = []
    for i in range(r):
        span = spatial[i] + 2 * p[i]
        if span < k[i]:
            raise ShapeError(f"{op}: input spatial size {spatial} (plus padding {p}) is smaller than kernel_size {k} "
                             f"on axis {i}: the output would be empty")
        out.append((span - k[i]) // s[i] + 1)
    return lead + tuple(out), pool_plan(prim, math.prod(lead), spatial, k, s, p)


# -- tape ops --------------------------------------------------------------------------------------
def _max_pool(op: str, x: Tensor, r: int, k, s, p) -> Tensor:
    x, shape, plan = _layout(op, "max_pool", x, r, k, s, p)
    xb = fbuf(op, x)
    y = new(run_max_pool(plan, xb), shape)

    def vjp(g: Buffer):
        return (run_max_pool_bwd(plan, xb, g),)

    return autograd.record(op, y, (x,), vjp)


def _avg_pool(op: str, x: Tensor, r: int, k, s, p) -> Tensor:
    x, shape, plan = _layout(op, "avg_pool", x, r, k, s, p)
    y = new(run_avg_pool(plan, fbuf(op, x)), shape)
    return autograd.record(op, y, (x,), lambda g: (run_avg_pool_bwd(plan, g),))


def _beta(op: str, beta: Any) -> float:
    b = check_scalar(op, "beta", beta)
    if not math.isfinite(b) or b == 0.0:
        raise ArgumentError(f"{op}: beta must be a finite nonzero number (as float32), got {beta!r}")
    return b


def _smooth_max_pool(op: str, x: Tensor, r: int, k, s, p, beta: Any) -> Tensor:
    b = _beta(op, beta)
    x, shape, plan = _layout(op, "smooth_max_pool", x, r, k, s, p)
    xb = fbuf(op, x)
    yb = run_smooth_max_pool(plan, xb, b)
    y = new(yb, shape)

    def vjp(g: Buffer):
        return (run_smooth_max_pool_bwd(plan, xb, yb, g, b),)

    return autograd.record(op, y, (x,), vjp)


def max_pool_nd(x: Tensor, kernel_size: Sequence[int], stride: Any = None, padding: Any = 0) -> Tensor:
    """Max pool over the last r = len(kernel_size) axes of x (N, C, *spatial) or (C, *spatial).

    Padding is -inf (never selected); a window entirely in padding gives -inf. A NaN in a window
    gives NaN (the first NaN is the winner, as PyTorch); ties go to the first maximum. Any padding
    is accepted here (the front end keeps PyTorch's padding <= kernel_size / 2)."""
    r = _rank_of("max_pool_nd", kernel_size)
    return _max_pool("max_pool_nd", x, r, *_geometry("max_pool_nd", r, kernel_size, stride, padding))


def avg_pool_nd(x: Tensor, kernel_size: Sequence[int], stride: Any = None, padding: Any = 0) -> Tensor:
    """Average pool over the last r = len(kernel_size) axes: window sum / prod(kernel_size), padding
    counting as 0 (PyTorch's count_include_pad=True)."""
    r = _rank_of("avg_pool_nd", kernel_size)
    return _avg_pool("avg_pool_nd", x, r, *_geometry("avg_pool_nd", r, kernel_size, stride, padding))


def smooth_max_pool_nd(x: Tensor, kernel_size: Sequence[int], beta: float, stride: Any = None,
                       padding: Any = 0) -> Tensor:
    """Smooth max pool: y = log(sum over the window of exp(beta v)) / beta (evaluated stably), padding
    counting as v = 0. beta is finite and nonzero; large beta tends to max pool (where no padding is
    involved), beta < 0 is a smooth min. Differentiable everywhere: dy/dv = softmax(beta v)."""
    r = _rank_of("smooth_max_pool_nd", kernel_size)
    return _smooth_max_pool("smooth_max_pool_nd", x, r,
                            *_geometry("smooth_max_pool_nd", r, kernel_size, stride, padding), beta)


# -- PyTorch-named front end -----------------------------------------------------------------------
def _unsupported(op: str, **opts: Any) -> None:
    for name, (value, ok) in opts.items():
        if not ok:
            raise ArgumentError(f"{op}: {name}={value!r} is not supported yet")


def _dilation_ok(dilation: Any) -> bool:
    if _is_int(dilation):
        return int(dilation) == 1
    return isinstance(dilation, (tuple, list)) and all(_is_int(d) and int(d) == 1 for d in dilation)


def _half_kernel_rule(op: str, k, p) -> None:
    """PyTorch: padding must be at most half the kernel size (pad <= kernel // 2) on every axis."""
    if not any(p):  # no padding (the usual case): nothing to check
        return
    for i, (ki, pi) in enumerate(zip(k, p)):
        if pi > ki // 2:
            raise ArgumentError(f"{op}: padding should be at most half of kernel_size (pad <= kernel_size // 2), "
                                f"got padding={p} and kernel_size={k} (axis {i})")


def _max_front(op: str, r: int, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices):
    # the defaults pass without building the option table below
    if not (ceil_mode is False and return_indices is False and type(dilation) is int and dilation == 1):
        _unsupported(op, dilation=(dilation, _dilation_ok(dilation)), ceil_mode=(ceil_mode, not ceil_mode),
                     return_indices=(return_indices, not return_indices))
    k, s, p = _geometry(op, r, kernel_size, stride, padding)
    _half_kernel_rule(op, k, p)
    return _max_pool(op, input, r, k, s, p)


def _avg_front(op: str, r: int, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
               divisor_override):
    k, s, p = _geometry(op, r, kernel_size, stride, padding)
    # count_include_pad=False only changes windows that overlap padding: without padding it is the same op.
    # (The defaults pass without building the option table.)
    if not (ceil_mode is False and count_include_pad is True and divisor_override is None):
        _unsupported(op, ceil_mode=(ceil_mode, not ceil_mode),
                     count_include_pad=(count_include_pad, bool(count_include_pad) or not any(p)),
                     divisor_override=(divisor_override, divisor_override is None))
    _half_kernel_rule(op, k, p)
    return _avg_pool(op, input, r, k, s, p)


def max_pool1d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
               ceil_mode: bool = False, return_indices: bool = False) -> Tensor:
    """torch.nn.functional.max_pool1d on (N, C, L) or (C, L). Not supported yet: dilation != 1,
    ceil_mode=True, return_indices=True (ArgumentError)."""
    return _max_front("max_pool1d", 1, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool2d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
               ceil_mode: bool = False, return_indices: bool = False) -> Tensor:
    """torch.nn.functional.max_pool2d on (N, C, H, W) or (C, H, W): padding is -inf, padding <=
    kernel_size // 2, a NaN in a window propagates, ties go to the first maximum (the gradient goes
    to that one element). Differs from PyTorch's CPU kernel in one corner: with several NaN in one
    window the gradient goes to the first NaN (PyTorch's CPU kernel gives it to the last). Not
    supported yet: dilation != 1, ceil_mode=True, return_indices=True."""
    return _max_front("max_pool2d", 2, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool3d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
               ceil_mode: bool = False, return_indices: bool = False) -> Tensor:
    """torch.nn.functional.max_pool3d on (N, C, D, H, W) or (C, D, H, W). Not supported yet:
    dilation != 1, ceil_mode=True, return_indices=True."""
    return _max_front("max_pool3d", 3, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def avg_pool1d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False,
               count_include_pad: bool = True) -> Tensor:
    """torch.nn.functional.avg_pool1d on (N, C, L) or (C, L): window sum / kernel_size, padding counted.
    Not supported yet: ceil_mode=True, count_include_pad=False with nonzero padding."""
    return _avg_front("avg_pool1d", 1, input, kernel_size, stride, padding, ceil_mode, count_include_pad, None)


def avg_pool2d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override: Any = None) -> Tensor:
    """torch.nn.functional.avg_pool2d on (N, C, H, W) or (C, H, W): window sum / prod(kernel_size),
    padding counted (count_include_pad=True). Not supported yet: ceil_mode=True,
    count_include_pad=False with nonzero padding, divisor_override."""
    return _avg_front("avg_pool2d", 2, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                      divisor_override)


def avg_pool3d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override: Any = None) -> Tensor:
    """torch.nn.functional.avg_pool3d on (N, C, D, H, W) or (C, D, H, W). Not supported yet:
    ceil_mode=True, count_include_pad=False with nonzero padding, divisor_override."""
    return _avg_front("avg_pool3d", 3, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                      divisor_override)


def smooth_max_pool1d(input: Tensor, kernel_size: Any, beta: float, stride: Any = None, padding: Any = 0) -> Tensor:
    """Smooth max pool over (N, C, L) or (C, L): see ``smooth_max_pool2d``."""
    return _smooth_max_pool("smooth_max_pool1d", input, 1, *_geometry("smooth_max_pool1d", 1, kernel_size, stride,
                                                                       padding), beta)


def smooth_max_pool2d(input: Tensor, kernel_size: Any, beta: float, stride: Any = None, padding: Any = 0) -> Tensor:
    """torchlean's smooth max pool (no PyTorch counterpart) over (N, C, H, W) or (C, H, W):
    y = log(sum over the window of exp(beta v)) / beta, evaluated stably; padding counts as v = 0;
    beta finite and nonzero (beta -> +inf tends to max pool, beta < 0 is a smooth min). stride=None
    means kernel_size. Any padding is accepted (an all-padding window gives log(prod(kernel)) / beta)."""
    return _smooth_max_pool("smooth_max_pool2d", input, 2, *_geometry("smooth_max_pool2d", 2, kernel_size, stride,
                                                                       padding), beta)


def smooth_max_pool3d(input: Tensor, kernel_size: Any, beta: float, stride: Any = None, padding: Any = 0) -> Tensor:
    """Smooth max pool over (N, C, D, H, W) or (C, D, H, W): see ``smooth_max_pool2d``."""
    return _smooth_max_pool("smooth_max_pool3d", input, 3, *_geometry("smooth_max_pool3d", 3, kernel_size, stride,
                                                                       padding), beta)
