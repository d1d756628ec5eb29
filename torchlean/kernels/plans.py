"""Plans: the static facts of one primitive call (dims, derived output dims, sizes), as one frozen,
hashable value.

The runtime builds a plan once per geometry, after checking every dim (``runtime.primitives_conv.
conv_plan``, ``runtime.primitives_pool.pool_plan``), and hands it down with the buffers; the
backends read their dims from it and use it as the key of their memoized launch data. The
constructors here only do the arithmetic: a plan built from unchecked dims (tests and benchmarks
that call a backend directly) is the caller's responsibility.
"""

from __future__ import annotations

import math
from typing import NamedTuple

__all__ = ["ConvPlan", "ConvTransposePlan", "PoolPlan", "conv_plan_of", "conv_transpose_plan_of", "pool_plan_of"]

_U32_LIMIT = 2**32  # dims and buffer sizes are uint32 (the seed's convention)


class ConvPlan(NamedTuple):
    """One convolution geometry: x (batch, in_c, *spatial), w (out_c, in_c / groups, *kernel), y (batch,
    out_c, *out). conv, conv_bwd_input and conv_bwd_weight of one layer share it. ``fits``: every size
    is below 2**32 (otherwise the runtime's full checks run and raise). ``dilation`` (one entry per
    axis) spaces the kernel's taps; ``groups`` splits the channels into that many independent convs
    (in_c / groups input channels to out_c / groups outputs each). ``plain``: no dilation and one
    group, the geometry every backend's original kernels serve."""
    batch: int
    in_c: int
    out_c: int
    spatial: tuple
    kernel: tuple
    stride: tuple
    padding: tuple
    out: tuple
    n_x: int
    n_w: int
    n_y: int
    fits: bool
    dilation: tuple = ()
    groups: int = 1
    plain: bool = True


class ConvTransposePlan(NamedTuple):
    """A transposed convolution: x (batch, in_c, *spatial), w (in_c, out_c / groups, *kernel), y (batch,
    out_c, *out). ``adjoint`` is the conv from out_c channels on ``out`` to in_c on ``spatial`` (same
    dilation and groups) whose input gradient this is (its backward runs that conv's primitives)."""
    batch: int
    in_c: int
    out_c: int
    spatial: tuple
    kernel: tuple
    stride: tuple
    padding: tuple
    output_padding: tuple
    out: tuple
    n_x: int
    n_w: int
    n_y: int
    fits: bool
    adjoint: ConvPlan
    dilation: tuple = ()
    groups: int = 1


class PoolPlan(NamedTuple):
    """One pooling geometry: x (planes, *spatial), y (planes, *out); n_in, n_out their sizes."""
    planes: int
    spatial: tuple
    kernel: tuple
    stride: tuple
    padding: tuple
    out: tuple
    n_in: int
    n_out: int


def _span(k: int, d: int) -> int:
    """The extent of a kernel of k taps at dilation d: d (k - 1) + 1."""
    return d * (k - 1) + 1


def conv_plan_of(batch: int, in_c: int, out_c: int, spatial: tuple, kernel: tuple, stride: tuple,
                 padding: tuple, dilation: tuple | None = None, groups: int = 1) -> ConvPlan:
    spatial, kernel, stride, padding = tuple(spatial), tuple(kernel), tuple(stride), tuple(padding)
    dilation = (1,) * len(spatial) if dilation is None else tuple(dilation)
    out = tuple((s + 2 * p - _span(k, d)) // t + 1 for s, k, t, p, d in zip(spatial, kernel, stride, padding, dilation))
    n_x, n_w, n_y = (math.prod((batch, in_c) + spatial), math.prod((out_c, in_c // groups) + kernel),
                     math.prod((batch, out_c) + out))
    return ConvPlan(batch, in_c, out_c, spatial, kernel, stride, padding, out, n_x, n_w, n_y,
                    max(n_x, n_w, n_y) < _U32_LIMIT, dilation, groups,
                    groups == 1 and all(d == 1 for d in dilation))


def conv_transpose_plan_of(batch: int, in_c: int, out_c: int, spatial: tuple, kernel: tuple, stride: tuple,
                           padding: tuple, output_padding: tuple, dilation: tuple | None = None,
                           groups: int = 1) -> ConvTransposePlan:
    spatial, kernel, stride = tuple(spatial), tuple(kernel), tuple(stride)
    padding, output_padding = tuple(padding), tuple(output_padding)
    dilation = (1,) * len(spatial) if dilation is None else tuple(dilation)
    out = tuple((s - 1) * t - 2 * p + _span(k, d) + o
                for s, k, t, p, o, d in zip(spatial, kernel, stride, padding, output_padding, dilation))
    adjoint = conv_plan_of(batch, out_c, in_c, out, kernel, stride, padding, dilation, groups)
    n_x, n_w, n_y = (math.prod((batch, in_c) + spatial), math.prod((in_c, out_c // groups) + kernel),
                     math.prod((batch, out_c) + out))
    return ConvTransposePlan(batch, in_c, out_c, spatial, kernel, stride, padding, output_padding, out, n_x, n_w, n_y,
                             max(n_x, n_w, n_y) < _U32_LIMIT, adjoint, dilation, groups)


def pool_plan_of(planes: int, spatial: tuple, kernel: tuple, stride: tuple, padding: tuple) -> PoolPlan:
    spatial, kernel, stride, padding = tuple(spatial), tuple(kernel), tuple(stride), tuple(padding)
    out = tuple((s + 2 * p - k) // t + 1 for s, k, t, p in zip(spatial, kernel, stride, padding))
    return PoolPlan(planes, spatial, kernel, stride, padding, out, planes * math.prod(spatial),
                    planes * math.prod(out))
