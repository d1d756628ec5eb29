"""Primitives of the pooling: max_pool, avg_pool, smooth_max_pool and their backward passes (checked, then dispatched like those in ``primitives``).

Flat float32 buffers, channels-first: x is (planes, *spatial) with planes = batch * channels
(pooling never mixes planes). ``spatial``, ``kernel``, ``stride``, ``padding`` are tuples of one
length r, 1 <= r <= 8; kernel_i >= 1, stride_i >= 1; the output is (planes, *out) with
out_i = (spatial_i + 2 padding_i - kernel_i) // stride_i + 1 >= 1. Output p on axis i covers
input positions p * stride_i - padding_i + k, k in [0, kernel_i), visited in row-major order of
the kernel offsets. See ``torchlean.spec.pool`` for the exact conventions.

``pool_plan`` checks those dims once into a plan (``torchlean.kernels.plans.PoolPlan``), which the
``run_*`` functions take (a forward and its backward share one) and the backends get with the arrays.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from ..errors import ArgumentError, ShapeError
from ..kernels.plans import PoolPlan, pool_plan_of
from .buffer import Buffer, check_buffer, same_device, wrap
from .checks import check_dims, check_product, check_scalar, check_u32, check_u32_tuple
from .oom import run_allocating

__all__ = ["max_pool", "max_pool_bwd", "avg_pool", "avg_pool_bwd", "smooth_max_pool", "smooth_max_pool_bwd"]

MAX_RANK = 8


def pool_plan(op: str, planes: Any, spatial: Any, kernel: Any, stride: Any, padding: Any) -> PoolPlan:
    """The checked plan of a pooling (and of its backward); errors name ``op``."""
    pl = check_u32(op, "planes", planes)
    sp = check_dims(op, "spatial", spatial)
    r = len(sp)
    if not 1 <= r <= MAX_RANK:
        raise ShapeError(f"{op}: spatial must have 1 to {MAX_RANK} axes, got {r} ({list(sp)})")
    kn = check_dims(op, "kernel", kernel)
    st = check_u32_tuple(op, "stride", stride)
    pd = check_u32_tuple(op, "padding", padding)
    for name, v in (("kernel", kn), ("stride", st), ("padding", pd)):
        if len(v) != r:
            raise ShapeError(f"{op}: {name} must have one entry per spatial axis ({r}), got {len(v)} ({list(v)})")
    for i in range(r):
        if kn[i] < 1:
            raise ShapeError(f"{op}: kernel[{i}] must be >= 1, got {kn[i]}")
        if st[i] < 1:
            raise ShapeError(f"{op}: stride[{i}] must be >= 1, got {st[i]}")
    out = []
    for i in range(r):
        span = sp[i] + 2 * pd[i]
        if span < kn[i]:
            raise ShapeError(
                f"{op}: axis {i}: kernel {kn[i]} is larger than the padded input (spatial {sp[i]} + 2 * padding "
                f"{pd[i]} = {span}), so there is no output position")
        out.append((span - kn[i]) // st[i] + 1)
    out = tuple(out)
    check_product(op, "planes*prod(spatial)", pl, *sp)
    check_product(op, "prod(out)", *out)
    check_product(op, "planes*prod(out)", pl, *out)
    return pool_plan_of(pl, sp, kn, st, pd)


def _beta(op: str, beta: Any) -> float:
    b = check_scalar(op, "beta", beta)
    if not math.isfinite(b) or b == 0.0:
        raise ArgumentError(f"{op}: beta must be a finite nonzero float32, got {beta!r} (float32: {b!r})")
    return b


def _run_pool(op: str, n_elems: int, buffers: tuple[tuple[str, Buffer, int], ...], *dims: Any) -> Buffer:
    """Check the (name, buffer, size) operands, then run the backend's ``op`` on their arrays and
    ``dims`` (the plan, and beta where there is one)."""
    ctx = None
    for _, buf, size in buffers:  # the common case in one test per buffer: live, the right size, one device
        if type(buf) is not Buffer or buf._data is None or buf._nbytes != 4 * size \
                or (ctx is not None and buf._ctx is not ctx):
            ctx = _checked_device(op, buffers)
            break
        ctx = buf._ctx
    return wrap(ctx, run_allocating(op, ctx, n_elems, getattr(ctx.backend, op), *[b._data for _, b, _ in buffers], *dims))


def _checked_device(op: str, buffers: tuple[tuple[str, Buffer, int], ...]) -> Any:
    """The full checks of the operands (their errors), then their one device."""
    for name, buf, size in buffers:
        check_buffer(op, name, buf, size)
    return same_device(op, **{name: b for name, b, _ in buffers})


def max_pool(x: Buffer, planes: int, spatial: Sequence[int], kernel: Sequence[int], stride: Sequence[int],
             padding: Sequence[int]) -> Buffer:
    """y (planes, *out): the window maximum; padding is -inf and never selected; a NaN in the window
    wins (the first one); an all-padding window gives -inf."""
    return run_max_pool(pool_plan("max_pool", planes, spatial, kernel, stride, padding), x)


def max_pool_bwd(x: Buffer, dy: Buffer, planes: int, spatial: Sequence[int], kernel: Sequence[int],
                 stride: Sequence[int], padding: Sequence[int]) -> Buffer:
    """dx (planes, *spatial): each window's winner (recomputed from x: the first NaN, else the first
    strict maximum) receives its dy; dx[q] sums them in row-major order of the windows."""
    return run_max_pool_bwd(pool_plan("max_pool_bwd", planes, spatial, kernel, stride, padding), x, dy)


def avg_pool(x: Buffer, planes: int, spatial: Sequence[int], kernel: Sequence[int], stride: Sequence[int],
             padding: Sequence[int]) -> Buffer:
    """y (planes, *out) = (sum of the window's in-bounds values) / prod(kernel): padding counts as 0
    (PyTorch's count_include_pad=True)."""
    return run_avg_pool(pool_plan("avg_pool", planes, spatial, kernel, stride, padding), x)


def avg_pool_bwd(dy: Buffer, planes: int, spatial: Sequence[int], kernel: Sequence[int], stride: Sequence[int],
                 padding: Sequence[int]) -> Buffer:
    """dx (planes, *spatial): dx[q] = (sum of dy over the windows containing q, in row-major order) /
    prod(kernel)."""
    return run_avg_pool_bwd(pool_plan("avg_pool_bwd", planes, spatial, kernel, stride, padding), dy)


def smooth_max_pool(x: Buffer, planes: int, spatial: Sequence[int], kernel: Sequence[int], stride: Sequence[int],
                    padding: Sequence[int], beta: float) -> Buffer:
    """y (planes, *out) = (m + log sum exp(beta v - m)) / beta over each window, padding counting as
    v = 0, m = max of beta v; beta finite and nonzero (beta < 0: a smooth min)."""
    plan = pool_plan("smooth_max_pool", planes, spatial, kernel, stride, padding)
    return run_smooth_max_pool(plan, x, _beta("smooth_max_pool", beta))


def smooth_max_pool_bwd(x: Buffer, y: Buffer, dy: Buffer, planes: int, spatial: Sequence[int], kernel: Sequence[int],
                        stride: Sequence[int], padding: Sequence[int], beta: float) -> Buffer:
    """dx (planes, *spatial): dx[q] = sum over windows w containing q (row-major) of
    dy[w] * exp(beta x[q] - beta y[w]), y the forward output; padding positions get nothing."""
    plan = pool_plan("smooth_max_pool_bwd", planes, spatial, kernel, stride, padding)
    return run_smooth_max_pool_bwd(plan, x, y, dy, _beta("smooth_max_pool_bwd", beta))


# -- on a checked plan (and, for the smooth max, a beta checked by the caller) -----------------------
def run_max_pool(plan: PoolPlan, x: Buffer) -> Buffer:
    return _run_pool("max_pool", plan.n_out, (("x", x, plan.n_in),), plan)


def run_max_pool_bwd(plan: PoolPlan, x: Buffer, dy: Buffer) -> Buffer:
    return _run_pool("max_pool_bwd", plan.n_in, (("x", x, plan.n_in), ("dy", dy, plan.n_out)), plan)


def run_avg_pool(plan: PoolPlan, x: Buffer) -> Buffer:
    return _run_pool("avg_pool", plan.n_out, (("x", x, plan.n_in),), plan)


def run_avg_pool_bwd(plan: PoolPlan, dy: Buffer) -> Buffer:
    return _run_pool("avg_pool_bwd", plan.n_in, (("dy", dy, plan.n_out),), plan)


def run_smooth_max_pool(plan: PoolPlan, x: Buffer, beta: float) -> Buffer:
    return _run_pool("smooth_max_pool", plan.n_out, (("x", x, plan.n_in),), plan, beta)


def run_smooth_max_pool_bwd(plan: PoolPlan, x: Buffer, y: Buffer, dy: Buffer, beta: float) -> Buffer:
    return _run_pool("smooth_max_pool_bwd", plan.n_in, (("x", x, plan.n_in), ("y", y, plan.n_out),
                                                        ("dy", dy, plan.n_out)), plan, beta)
