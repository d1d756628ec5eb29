"""group_norm, instance_norm, rms_norm, the channel dropouts and attention dropout, composed.

group_norm and instance_norm without running statistics are the fused layer_norm primitive over
the (N * groups, C / groups * spatial) rows, then the per-channel affine; instance_norm with
running statistics is PyTorch's own construction (batch_norm over a (1, N * C, ...) view).
rms_norm is x / sqrt(mean(x^2) + eps) * weight. The dropouts draw their masks from torchlean's
counter RNG (``bernoulli`` with the default or given generator).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import autograd, ops
from .._validate import int_arg, real_arg
from ..errors import ArgumentError, DTypeError, ShapeError
from ..tensor import Tensor, bernoulli, full
from ._compose import as_tensor_arg, channel_view, const

__all__ = ["group_norm", "instance_norm", "rms_norm", "dropout1d", "dropout2d", "dropout3d", "feature_dropout",
           "alpha_dropout", "sdpa_with_dropout"]

_FLOAT32_EPS = float(np.finfo(np.float32).eps)


def _affine(op: str, y: Tensor, weight: Any, bias: Any, channels: int) -> Tensor:
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and (not isinstance(t, Tensor) or t.shape != (channels,)):
            raise ShapeError(f"{op}: {name} must be a tensor of shape ({channels},), got "
                             f"{t.shape if isinstance(t, Tensor) else type(t).__name__}")
    if weight is not None:
        y = ops.mul(y, channel_view(weight, y.ndim))
    if bias is not None:
        y = ops.add(y, channel_view(bias, y.ndim))
    return y


def group_norm(input: Tensor, num_groups: int, weight: Any = None, bias: Any = None, eps: float = 1e-5) -> Tensor:
    op = "group_norm"
    x = as_tensor_arg(op, "input", input)
    if x.ndim < 2:
        raise ShapeError(f"{op}: expected an input of shape (N, C, *), got {x.shape}")
    g = int_arg(op, "num_groups", num_groups, 1)
    n, c = x.shape[0], x.shape[1]
    if c % g:
        raise ShapeError(f"{op}: num_channels ({c}) must be divisible by num_groups ({g})")
    eps = real_arg(op, "eps", eps, 0.0, finite=True)
    per = x.numel() // (n * g) if n * g else 0
    y = ops.layer_norm(ops.reshape(x, (n * g, per)), (per,), None, None, eps)
    return _affine(op, ops.reshape(y, x.shape), weight, bias, c)


def instance_norm(input: Tensor, running_mean: Any = None, running_var: Any = None, weight: Any = None,
                  bias: Any = None, use_input_stats: bool = True, momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    op = "instance_norm"
    x = as_tensor_arg(op, "input", input)
    if x.ndim < 3:
        raise ShapeError(f"{op}: expected an input of shape (N, C, L) or (N, C, H, W, ...), got {x.shape}")
    n, c = x.shape[0], x.shape[1]
    eps = real_arg(op, "eps", eps, 0.0, finite=True)
    if running_mean is None and running_var is None:
        if not use_input_stats:
            raise ArgumentError(f"{op}: use_input_stats=False needs running_mean and running_var")
        return group_norm(x, c, weight, bias, eps)
    if running_mean is None or running_var is None:
        raise ArgumentError(f"{op}: give both running_mean and running_var, or neither")
    # PyTorch's construction: batch norm of the (1, N * C, *) view with the statistics repeated per
    # sample, the updated statistics averaged back over the batch
    view = ops.reshape(x, (1, n * c) + tuple(x.shape[2:]))
    rm = ops.reshape(ops.expand(ops.reshape(running_mean.detach(), (1, c)), (n, c)), (n * c,))
    rv = ops.reshape(ops.expand(ops.reshape(running_var.detach(), (1, c)), (n, c)), (n * c,))
    rm, rv = ops.clone(rm), ops.clone(rv)
    w = None if weight is None else ops.reshape(ops.expand(ops.reshape(weight, (1, c)), (n, c)), (n * c,))
    b = None if bias is None else ops.reshape(ops.expand(ops.reshape(bias, (1, c)), (n, c)), (n * c,))
    y = ops.batch_norm(view, rm, rv, w, b, bool(use_input_stats), float(momentum), eps)
    if use_input_stats:
        with autograd.no_grad():
            running_mean.copy_(ops.mean(ops.reshape(rm, (n, c)), 0))
            running_var.copy_(ops.mean(ops.reshape(rv, (n, c)), 0))
    return ops.reshape(y, x.shape)


def rms_norm(input: Tensor, normalized_shape: Any, weight: Any = None, eps: float | None = None) -> Tensor:
    """x / sqrt(mean(x^2 over the trailing normalized_shape dims) + eps) * weight; eps None is
    float32's machine epsilon, as in PyTorch."""
    op = "rms_norm"
    x = as_tensor_arg(op, "input", input)
    shape = tuple(normalized_shape) if isinstance(normalized_shape, (tuple, list)) else (normalized_shape,)
    k = len(shape)
    if k > x.ndim or tuple(x.shape[x.ndim - k:]) != tuple(shape):
        raise ShapeError(f"{op}: normalized_shape {shape} does not match the trailing dims of input {x.shape}")
    e = _FLOAT32_EPS if eps is None else real_arg(op, "eps", eps, 0.0, finite=True)
    dims = tuple(range(x.ndim - k, x.ndim))
    ms = ops.mean(ops.mul(x, x), dims, True) if dims else ops.mul(x, x)
    y = ops.div(x, ops.sqrt(ops.add(ms, e)))
    if weight is not None:
        w = as_tensor_arg(op, "weight", weight)
        if w.shape != shape:
            raise ShapeError(f"{op}: weight must have shape {shape}, got {w.shape}")
        y = ops.mul(y, w)
    return y


def _p(op: str, p: Any) -> float:
    return real_arg(op, "p", p, 0.0, 1.0)


def _mask(op: str, shape: tuple, keep: float, like: Tensor, generator: Any) -> Tensor:
    """A {0, 1/keep} mask of ``shape`` from the counter RNG."""
    probs = full(shape, keep, device=like.device)
    return ops.mul(bernoulli(probs, generator=generator), 1.0 / keep)


def feature_dropout(op: str, x: Tensor, p: float, training: bool, batched_rank: int, generator: Any = None) -> Tensor:
    """Zero whole channels: one draw per (N, C) (or per C for an unbatched input)."""
    p = _p(op, p)
    if x.ndim not in (batched_rank, batched_rank - 1):
        raise ShapeError(f"{op}: expected a {batched_rank - 1}-D or {batched_rank}-D input, got shape {x.shape}")
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return ops.mul(x, 0.0)
    lead = 2 if x.ndim == batched_rank else 1
    mshape = tuple(x.shape[:lead]) + (1,) * (x.ndim - lead)
    return ops.mul(x, _mask(op, mshape, 1.0 - p, x, generator))


def dropout1d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    return feature_dropout("dropout1d", as_tensor_arg("dropout1d", "input", input), p, training, 3)


def dropout2d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    x = as_tensor_arg("dropout2d", "input", input)
    # PyTorch (still) reads a 3-D input as (N, C, L) here: one draw per (N, C), as dropout1d
    return feature_dropout("dropout2d", x, p, training, 4 if x.ndim != 3 else 3)


def dropout3d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    return feature_dropout("dropout3d", as_tensor_arg("dropout3d", "input", input), p, training, 5)


def alpha_dropout(input: Tensor, p: float = 0.5, training: bool = False, inplace: bool = False) -> Tensor:
    """SELU-preserving dropout: dropped units set to alpha' = -scale * alpha, then an affine
    correction a (x m + alpha' (1 - m)) + b keeping mean 0 and variance 1."""
    op = "alpha_dropout"
    x = as_tensor_arg(op, "input", input)
    p = _p(op, p)
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return ops.mul(x, 0.0)
    alpha_p = -1.7580993408473766
    keep = 1.0 - p
    a = 1.0 / math.sqrt((alpha_p ** 2 * p + 1) * keep)
    m = bernoulli(full(x.shape, keep, device=x.device))
    b = -a * alpha_p * p
    kept = ops.add(ops.mul(x, m), ops.mul(ops.sub(1.0, m), alpha_p))
    return ops.add(ops.mul(kept, a), b)


def sdpa_with_dropout(query: Tensor, key: Tensor, value: Tensor, attn_mask: Any, dropout_p: float, is_causal: bool,
                      scale: Any) -> Tensor:
    """softmax(q k^T * scale + mask) with dropout on the weights, then @ v (PyTorch's math path),
    composed because the fused attention has no dropout; the mask comes from the counter RNG."""
    op = "scaled_dot_product_attention"
    q = as_tensor_arg(op, "query", query)
    k = as_tensor_arg(op, "key", key)
    v = as_tensor_arg(op, "value", value)
    if q.ndim < 2 or k.ndim < 2 or v.ndim < 2:
        raise ShapeError(f"{op}: query, key and value need at least 2 dims, got {q.shape}, {k.shape}, {v.shape}")
    L, S, E = q.shape[-2], k.shape[-2], q.shape[-1]
    if k.shape[-1] != E or v.shape[-2] != S:
        raise ShapeError(f"{op}: expected query (..., L, E), key (..., S, E) and value (..., S, Ev), got "
                         f"{q.shape}, {k.shape}, {v.shape}")
    sc = 1.0 / math.sqrt(E) if scale is None else real_arg(op, "scale", scale)
    scores = ops.mul(ops.matmul(q, ops.transpose(k, -2, -1)), sc)
    bias = None
    if is_causal:
        bias = np.where(np.tril(np.ones((L, S), dtype=bool)), 0.0, -np.inf).astype(np.float32)
    if attn_mask is not None:
        m = attn_mask.numpy() if isinstance(attn_mask, Tensor) else np.asarray(attn_mask)
        if m.dtype.kind == "b":
            bias = np.where(m, 0.0, -np.inf).astype(np.float32)
        elif m.dtype.kind == "f":
            bias = None
            scores = ops.add(scores, attn_mask if isinstance(attn_mask, Tensor) else const(m, scores))
        else:
            raise DTypeError(f"{op}: attn_mask must be a bool or float tensor, got {m.dtype}")
    if bias is not None:
        scores = ops.add(scores, const(bias, scores))
    weights = ops.dropout(ops.softmax(scores, -1), float(dropout_p), True)
    return ops.matmul(weights, v)
