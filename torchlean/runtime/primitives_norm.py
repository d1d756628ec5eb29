"""Primitives of the normalization: layer_norm, batch_norm (training and inference) and their backward passes (checked, then dispatched like those in ``primitives``).

Layer norm works on the rows of a (rows, cols) buffer, batch norm on the channels of a
(batch, channels, inner) buffer (inner = the product of the spatial dims, 1 for (N, C) inputs; the
seed's single channel-first image is batch = 1). gamma and beta may be None (no affine: 1 and 0).
A group of no elements has mean and var NaN. ``eps`` is rounded to float32 and must be finite
and >= 0.
"""

from __future__ import annotations

import math
from typing import Any

from ..errors import ArgumentError
from .buffer import Buffer, check_buffer, same_device, wrap
from .checks import U32_LIMIT, check_product, check_scalar, check_u32
from .oom import run_allocating

__all__ = ["layer_norm", "layer_norm_bwd", "batch_norm", "batch_norm_bwd", "batch_norm_infer", "running_stat_update"]


def _eps(op: str, eps: Any) -> float:
    e = check_scalar(op, "eps", eps)
    if not (math.isfinite(e) and e >= 0.0):
        raise ArgumentError(f"{op}: argument eps must be finite and >= 0, got {eps!r}")
    return e


def _optional(op: str, name: str, buf: Any, size: int) -> Any:
    """The raw array of an optional per-column / per-channel buffer (None passes)."""
    if buf is None:
        return None
    return check_buffer(op, name, buf, size)


def _device(op: str, names: tuple[str, ...], *bufs: Any):
    """The one device of the checked buffers ``bufs`` (None entries skipped), the first one required.
    Positional, not keywords: the common case builds no dict; a mix still gets same_device's error."""
    ctx = bufs[0]._ctx
    for b in bufs:
        if b is not None and b._ctx is not ctx:
            return same_device(op, **{k: v for k, v in zip(names, bufs) if v is not None})
    return ctx


def _raw(b: Buffer | None) -> Any:
    return None if b is None else b._data


def _rows_dims(op: str, rows: Any, cols: Any) -> tuple[int, int, int]:
    r, c = check_u32(op, "rows", rows), check_u32(op, "cols", cols)
    return r, c, check_product(op, "rows*cols", r, c)


def _bn_dims(op: str, batch: Any, channels: Any, inner: Any) -> tuple[int, int, int, int]:
    if type(batch) is int and type(channels) is int and type(inner) is int \
            and 0 <= batch < U32_LIMIT and 0 <= channels < U32_LIMIT and 0 <= inner < U32_LIMIT:
        n = batch * channels * inner  # the common case: plain ints in range, checked in one test
        if n < U32_LIMIT:
            return batch, channels, inner, n
    b, c, i = check_u32(op, "batch", batch), check_u32(op, "channels", channels), check_u32(op, "inner", inner)
    return b, c, i, check_product(op, "batch*channels*inner", b, c, i)


# -- layer norm ----------------------------------------------------------------------------------------
def layer_norm(x: Buffer, gamma: Buffer | None, beta: Buffer | None, rows: int, cols: int,
               eps: float) -> tuple[Buffer, Buffer, Buffer]:
    """(y, mean, var): each row of x (rows, cols) normalized by its mean and biased variance,
    y = (x - mean) / sqrt(var + eps) * gamma + beta (gamma, beta of length cols or None);
    mean and var have length rows (the backward needs them)."""
    op = "layer_norm"
    r, c, n = _rows_dims(op, rows, cols)
    check_buffer(op, "x", x, n)
    _optional(op, "gamma", gamma, c)
    _optional(op, "beta", beta, c)
    e = _eps(op, eps)
    ctx = _device(op, ("x", "gamma", "beta"), x, gamma, beta)
    y, mean, var = run_allocating(op, ctx, n + 2 * r, ctx.backend.layer_norm, x._data, _raw(gamma), _raw(beta), r, c, e)
    return wrap(ctx, y), wrap(ctx, mean), wrap(ctx, var)


def layer_norm_bwd(x: Buffer, gamma: Buffer | None, mean: Buffer, var: Buffer, dy: Buffer, rows: int,
                   cols: int, eps: float) -> tuple[Buffer, Buffer, Buffer]:
    """(dx, dgamma, dbeta): the VJP of layer_norm with the forward's mean and var; dgamma and
    dbeta (length cols, column sums in a fixed order) are returned even when gamma is None."""
    op = "layer_norm_bwd"
    r, c, n = _rows_dims(op, rows, cols)
    check_buffer(op, "x", x, n)
    _optional(op, "gamma", gamma, c)
    check_buffer(op, "mean", mean, r)
    check_buffer(op, "var", var, r)
    check_buffer(op, "dy", dy, n)
    e = _eps(op, eps)
    ctx = _device(op, ("x", "gamma", "mean", "var", "dy"), x, gamma, mean, var, dy)
    dx, dg, db = run_allocating(op, ctx, n + 2 * c, ctx.backend.layer_norm_bwd, x._data, _raw(gamma), mean._data,
                      var._data, dy._data, r, c, e)
    return wrap(ctx, dx), wrap(ctx, dg), wrap(ctx, db)


# -- batch norm ----------------------------------------------------------------------------------------
def batch_norm(x: Buffer, gamma: Buffer | None, beta: Buffer | None, batch: int, channels: int, inner: int,
               eps: float) -> tuple[Buffer, Buffer, Buffer]:
    """(y, mean, var): x (batch, channels, inner) normalized per channel by the mean and biased
    variance of its batch * inner elements (training mode); gamma, beta per channel or None."""
    op = "batch_norm"
    b, c, i, n = _bn_dims(op, batch, channels, inner)
    check_buffer(op, "x", x, n)
    _optional(op, "gamma", gamma, c)
    _optional(op, "beta", beta, c)
    e = _eps(op, eps)
    ctx = _device(op, ("x", "gamma", "beta"), x, gamma, beta)
    y, mean, var = run_allocating(op, ctx, n + 2 * c, ctx.backend.batch_norm, x._data, _raw(gamma), _raw(beta), b, c, i, e)
    return wrap(ctx, y), wrap(ctx, mean), wrap(ctx, var)


def batch_norm_bwd(x: Buffer, gamma: Buffer | None, mean: Buffer, var: Buffer, dy: Buffer, batch: int,
                   channels: int, inner: int, eps: float) -> tuple[Buffer, Buffer, Buffer]:
    """(dx, dgamma, dbeta): the training-mode VJP of batch_norm (statistics depending on x), with
    the forward's mean and var; dgamma and dbeta have length channels."""
    op = "batch_norm_bwd"
    b, c, i, n = _bn_dims(op, batch, channels, inner)
    check_buffer(op, "x", x, n)
    _optional(op, "gamma", gamma, c)
    check_buffer(op, "mean", mean, c)
    check_buffer(op, "var", var, c)
    check_buffer(op, "dy", dy, n)
    e = _eps(op, eps)
    ctx = _device(op, ("x", "gamma", "mean", "var", "dy"), x, gamma, mean, var, dy)
    dx, dg, db = run_allocating(op, ctx, n + 2 * c, ctx.backend.batch_norm_bwd, x._data, _raw(gamma), mean._data,
                      var._data, dy._data, b, c, i, e)
    return wrap(ctx, dx), wrap(ctx, dg), wrap(ctx, db)


def batch_norm_infer(x: Buffer, mean: Buffer, var: Buffer, gamma: Buffer | None, beta: Buffer | None,
                     batch: int, channels: int, inner: int, eps: float) -> Buffer:
    """y = (x - mean[c]) / sqrt(var[c] + eps) * gamma[c] + beta[c] with given (running) statistics
    (eval mode). Its VJP needs no primitive of its own: dx = batch_norm_infer(dy, 0, var, gamma, None)."""
    op = "batch_norm_infer"
    b, c, i, n = _bn_dims(op, batch, channels, inner)
    check_buffer(op, "x", x, n)
    check_buffer(op, "mean", mean, c)
    check_buffer(op, "var", var, c)
    _optional(op, "gamma", gamma, c)
    _optional(op, "beta", beta, c)
    e = _eps(op, eps)
    ctx = _device(op, ("x", "mean", "var", "gamma", "beta"), x, mean, var, gamma, beta)
    return wrap(ctx, run_allocating(op, ctx, n, ctx.backend.batch_norm_infer, x._data, mean._data, var._data,
                           _raw(gamma), _raw(beta), b, c, i, e))


# -- running statistics --------------------------------------------------------------------------------
def running_stat_update(running: Buffer, stat: Buffer, n: int, momentum: float, factor: float) -> Buffer:
    """(1 - momentum) running + momentum (factor stat) as fl(fl(running k) + fl(m fl(stat f))) with
    k = fl32(1 - momentum), m = fl32(momentum), f = fl32(factor): batch norm's running statistics
    in one call, the same bits as scale(running, 1 - momentum), scale(stat, factor) and axpy."""
    op = "running_stat_update"
    n_ = check_u32(op, "n", n)
    check_buffer(op, "running", running, n_)
    check_buffer(op, "stat", stat, n_)
    m = check_scalar(op, "momentum", momentum)
    keep = check_scalar(op, "1 - momentum", 1.0 - float(momentum))
    f = check_scalar(op, "factor", factor)
    ctx = _device(op, ("running", "stat"), running, stat)
    return wrap(ctx, run_allocating(op, ctx, n_, ctx.backend.running_stat_update, running._data, stat._data, n_, keep, m, f))
