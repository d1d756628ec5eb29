"""Differentiable ops of the normalization: layer_norm, batch_norm (training and inference) and their backward passes.

Each op is one tape node over the fused primitives: layer_norm and training-mode batch_norm keep
the forward's mean and var as the node's workspace and run one fused backward primitive;
eval-mode batch_norm needs no new backward primitive (dx = batch_norm_infer(dy, 0, var, gamma),
dgamma and dbeta are per-channel sums). The functions here have PyTorch's names, signatures and
defaults, except where a docstring says otherwise.
"""

from __future__ import annotations

import numbers
from typing import Any, Sequence

from .. import autograd
from ..errors import ArgumentError, DTypeError, ShapeError
from ..runtime import primitives as P
from ..runtime.buffer import Buffer, zeros as buffer_zeros
from ._base import Tensor, fbuf, new, numel, same_device

__all__ = ["layer_norm", "batch_norm", "batch_norm_channel_first"]
FUNCTIONAL = ["layer_norm", "batch_norm"]


def _input(op: str, x: Any) -> Tensor:
    if not isinstance(x, Tensor):
        raise DTypeError(f"{op}: argument input must be a Tensor, got {type(x).__name__}")
    return x if x._buf is not None else x.float()


def _param(op: str, name: str, t: Any, shape: tuple[int, ...]) -> Tensor | None:
    """An optional per-feature tensor (weight, bias, running statistics) of exactly ``shape``."""
    if t is None:
        return None
    if not isinstance(t, Tensor):
        raise DTypeError(f"{op}: argument {name} must be a Tensor or None, got {type(t).__name__}")
    if t._shape != shape:  # a tensor's shape is a tuple
        raise ShapeError(f"{op}: argument {name} must have shape {shape}, got {tuple(t.shape)}")
    return t if t._buf is not None else t.float()


def _buf(op: str, t: Tensor | None) -> Buffer | None:
    return None if t is None else fbuf(op, t)


def _parents(x: Tensor, w: Tensor | None, b: Tensor | None) -> tuple[Tensor, ...]:
    """x, w, b without the Nones (spelled out: cheaper than a generator, once per op)."""
    if w is None:
        return (x,) if b is None else (x, b)
    return (x, w) if b is None else (x, w, b)


def _one_device(op: str, x: Tensor, *ts: Tensor | None) -> None:
    """x and the given tensors (None skipped) on one device, else same_device's DeviceError."""
    dev = x._device
    for t in ts:
        if t is not None and t._device != dev:
            same_device(op, x, *(u for u in ts if u is not None))


def _normalized_shape(op: str, normalized_shape: Any) -> tuple[int, ...]:
    if type(normalized_shape) is tuple and normalized_shape:  # LayerNorm's own: skip the ABC checks below
        for d in normalized_shape:
            if type(d) is not int or d < 0:
                break
        else:
            return normalized_shape
    if isinstance(normalized_shape, numbers.Integral) and not isinstance(normalized_shape, bool):
        shape: Sequence[Any] = (int(normalized_shape),)
    elif isinstance(normalized_shape, (tuple, list)) or hasattr(normalized_shape, "__iter__"):
        shape = tuple(normalized_shape)
    else:
        raise ShapeError(f"{op}: normalized_shape must be an int or a sequence of ints, got {normalized_shape!r}")
    if not shape:
        raise ShapeError(f"{op}: normalized_shape must name at least one dimension, got {tuple(shape)}")
    if not all(isinstance(d, numbers.Integral) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise ShapeError(f"{op}: normalized_shape must hold non-negative ints, got {tuple(shape)!r}")
    return tuple(int(d) for d in shape)


# -- layer norm -----------------------------------------------------------------------------------------
def layer_norm(input: Tensor, normalized_shape: Any, weight: Tensor | None = None, bias: Tensor | None = None,
               eps: float = 1e-6) -> Tensor:
    """Normalize over the trailing dims named by ``normalized_shape`` (an int or a tuple):
    y = (x - mean) / sqrt(var + eps) * weight + bias, with the biased variance.

    The default ``eps`` is the seed's 1e-6 (std = sqrt(var + 1e-6); docs/design.md);
    ``torchlean.nn.functional.layer_norm``, PyTorch's name, defaults to PyTorch's 1e-5. eps is rounded to float32 and must be finite and >= 0.
    """
    op = "layer_norm"
    x = _input(op, input)
    shape = _normalized_shape(op, normalized_shape)
    k = len(shape)
    if k > x.ndim or tuple(x.shape[x.ndim - k:]) != shape:
        raise ShapeError(f"{op}: normalized_shape {shape} must equal the trailing dims of input shape {tuple(x.shape)}")
    w, b = _param(op, "weight", weight, shape), _param(op, "bias", bias, shape)
    parents = _parents(x, w, b)
    _one_device(op, x, w, b)
    rows, cols = numel(x.shape[:x.ndim - k]), numel(shape)
    xb, gb, bb = fbuf(op, x), _buf(op, w), _buf(op, b)
    y, mean, var = P.layer_norm(xb, gb, bb, rows, cols, eps)

    def vjp(g: Buffer):
        dx, dgamma, dbeta = P.layer_norm_bwd(xb, gb, mean, var, g, rows, cols, eps)
        grads = [dx]
        for t, d in ((w, dgamma), (b, dbeta)):
            if t is None:
                d.release()
            else:
                grads.append(d)
        return grads

    return autograd.record(op, new(y, x.shape), parents, vjp, workspace=(mean, var))


# -- batch norm -----------------------------------------------------------------------------------------
def _rebind(t: Tensor, buf: Buffer) -> None:
    """Point a running-statistics tensor at its updated values. Not recorded: running statistics are
    state, not part of the differentiated computation (buffers are values: anyone holding the
    old buffer keeps the old numbers)."""
    t._rebind(buf)


def _update_running(op: str, running: Tensor, batch_stat: Buffer, momentum: float, factor: float = 1.0) -> None:
    """running = (1 - momentum) running + momentum (factor batch_stat), in one primitive call."""
    _rebind(running, P.running_stat_update(fbuf(op, running), batch_stat, batch_stat._nbytes // 4, momentum,
                                           factor))  # _nbytes // 4: Buffer.size without the property call


def _batch_norm_train(op: str, x: Tensor, w: Tensor | None, b: Tensor | None, batch: int, channels: int,
                      inner: int, eps: float, running_mean: Tensor | None = None,
                      running_var: Tensor | None = None, momentum: float = 0.1) -> Tensor:
    parents = _parents(x, w, b)
    xb, gb, bb = fbuf(op, x), _buf(op, w), _buf(op, b)
    y, mean, var = P.batch_norm(xb, gb, bb, batch, channels, inner, eps)
    n = batch * inner
    if n > 0:  # as PyTorch, an empty batch leaves the running statistics alone
        if running_mean is not None:
            _update_running(op, running_mean, mean, momentum)
        if running_var is not None:  # PyTorch's running_var uses the unbiased variance
            _update_running(op, running_var, var, momentum, n / (n - 1))

    def vjp(g: Buffer):
        dx, dgamma, dbeta = P.batch_norm_bwd(xb, gb, mean, var, g, batch, channels, inner, eps)
        grads = [dx]
        for t, d in ((w, dgamma), (b, dbeta)):
            if t is None:
                d.release()
            else:
                grads.append(d)
        return grads

    return autograd.record(op, new(y, x.shape), parents, vjp, workspace=(mean, var))


def _batch_norm_eval(op: str, x: Tensor, running_mean: Tensor, running_var: Tensor, w: Tensor | None,
                     b: Tensor | None, batch: int, channels: int, inner: int, eps: float) -> Tensor:
    parents = _parents(x, w, b)
    xb, gb, bb = fbuf(op, x), _buf(op, w), _buf(op, b)
    mb, vb = fbuf(op, running_mean), fbuf(op, running_var)  # values: a later update rebinds, never writes
    y = P.batch_norm_infer(xb, mb, vb, gb, bb, batch, channels, inner, eps)
    dims, per_channel = (batch, channels, inner), (0, 1, 0)

    def vjp(g: Buffer):
        grads: list[Buffer | None] = [None]
        if x.requires_grad:  # dx = g r gamma: the same kernel with mean 0 and no beta
            zero = buffer_zeros(channels, x.device)
            grads[0] = P.batch_norm_infer(g, zero, vb, gb, None, batch, channels, inner, eps)
            zero.release()
        if w is not None:
            dgamma = None
            if w.requires_grad:
                xhat = P.batch_norm_infer(xb, mb, vb, None, None, batch, channels, inner, eps)
                prod = P.mul(g, xhat)
                xhat.release()
                dgamma = P.reduce_from_broadcast(prod, (channels,), dims, per_channel)
                prod.release()
            grads.append(dgamma)
        if b is not None:
            grads.append(P.reduce_from_broadcast(g, (channels,), dims, per_channel) if b.requires_grad else None)
        return grads

    return autograd.record(op, new(y, x.shape), parents, vjp)


def batch_norm(input: Tensor, running_mean: Tensor | None, running_var: Tensor | None,
               weight: Tensor | None = None, bias: Tensor | None = None, training: bool = False,
               momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Batch normalization of input (N, C) or (N, C, *spatial) per channel C.

    training=True: normalize with the batch's mean and biased variance over N and the spatial
    dims; when running_mean / running_var are given, update them in place (not recorded on the
    tape): running = (1 - momentum) running + momentum stat, where the variance's stat is the
    UNBIASED batch variance var * n / (n - 1), as in PyTorch. training=False: normalize with
    running_mean and running_var (both required). The running statistics are not differentiated.
    As in PyTorch, training with one value per channel is an error; an empty batch leaves the
    running statistics unchanged.
    """
    op = "batch_norm"
    x = _input(op, input)
    if x.ndim < 2:
        raise ShapeError(f"{op}: input must have shape (N, C) or (N, C, *spatial), got {tuple(x.shape)}")
    batch, channels, inner = x.shape[0], x.shape[1], numel(x.shape[2:])
    shape = (channels,)
    w, b = _param(op, "weight", weight, shape), _param(op, "bias", bias, shape)
    rm, rv = _param(op, "running_mean", running_mean, shape), _param(op, "running_var", running_var, shape)
    _one_device(op, x, w, b, rm, rv)
    if type(momentum) is not float and (isinstance(momentum, bool) or not isinstance(momentum, numbers.Real)):
        raise ArgumentError(f"{op}: argument momentum must be a real number, got {momentum!r}")
    if training:
        if batch * inner == 1:
            raise ArgumentError(
                f"{op}: expected more than 1 value per channel when training, got input shape {tuple(x.shape)}")
        return _batch_norm_train(op, x, w, b, batch, channels, inner, eps, rm, rv, float(momentum))
    if rm is None or rv is None:
        missing = "running_mean" if rm is None else "running_var"
        raise ArgumentError(f"{op}: argument {missing} is required when training=False (eval mode)")
    return _batch_norm_eval(op, x, rm, rv, w, b, batch, channels, inner, eps)


def batch_norm_channel_first(x: Tensor, weight: Tensor | None = None, bias: Tensor | None = None,
                             eps: float = 1e-6) -> Tensor:
    """The seed's batchnormChannelFirst: one channel-first image (C, *spatial) with no batch axis,
    normalized per channel over its spatial elements with their own statistics (batch = 1 of
    batch_norm in training mode, no running statistics). eps defaults to 1e-6, the seed's layer
    norm value that this op reuses."""
    op = "batch_norm_channel_first"
    x = _input(op, x)
    if x.ndim < 1:
        raise ShapeError(f"{op}: input must have shape (C, *spatial), got {tuple(x.shape)}")
    channels, inner = x.shape[0], numel(x.shape[1:])
    w, b = _param(op, "weight", weight, (channels,)), _param(op, "bias", bias, (channels,))
    _one_device(op, x, w, b)
    return _batch_norm_train(op, x, w, b, 1, channels, inner, eps)
