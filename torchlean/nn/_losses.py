"""Loss functions with PyTorch's names, signatures and reductions.

cross_entropy and nll_loss without class weights are the fused primitives of ops.classify; with
``weight=`` they are composed (log_softmax, the fused nll gather, a gather of the weights) with
PyTorch's normalization ('mean' divides by the summed weights of the counted targets; label
smoothing as in ATen's cross_entropy_loss_label_smoothing). The other losses are compositions of
differentiable elementwise ops and reductions. The legacy ``size_average`` / ``reduce`` arguments
map to ``reduction`` as in PyTorch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import ops
import math

from .._validate import int_arg, real_arg, type_name
from ..errors import ArgumentError, DTypeError, IndexOutOfRangeError, ShapeError
from ..tensor import Tensor
from ._compose import as_tensor_arg, channel_view, const, host, reduce_loss, reduction_arg, same_shape, select

__all__ = ["legacy_reduction", "cross_entropy", "nll_loss", "l1_loss", "smooth_l1_loss", "huber_loss",
           "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div", "cosine_embedding_loss",
           "margin_ranking_loss", "soft_margin_loss", "gaussian_nll_loss", "poisson_nll_loss", "triplet_margin_loss",
           "hinge_embedding_loss"]


def legacy_reduction(size_average: Any, reduce: Any, reduction: str) -> str:
    """PyTorch's mapping of the deprecated size_average / reduce flags onto ``reduction``."""
    if size_average is None and reduce is None:
        return reduction
    size_average = True if size_average is None else bool(size_average)
    reduce = True if reduce is None else bool(reduce)
    return "mean" if (size_average and reduce) else ("sum" if reduce else "none")


def _targets(op: str, target: Any, shape: tuple, classes: int, ignore_index: int) -> tuple[np.ndarray, np.ndarray]:
    """(class indices with ignored entries set to 0, the mask of counted entries), both flat."""
    if isinstance(target, Tensor):
        if target._buf is not None:
            raise DTypeError(f"{op}: target must hold integer class indices, got a float32 tensor")
        arr = target.numpy()
    else:
        arr = np.asarray(target)
    if arr.dtype.kind not in "iu":
        raise DTypeError(f"{op}: target must hold integer class indices, got {type_name(target)} of {arr.dtype}")
    if tuple(arr.shape) != tuple(shape):
        raise ShapeError(f"{op}: expected target of shape {tuple(shape)} for this input, got {tuple(arr.shape)}")
    t = arr.reshape(-1).astype(np.int64)
    valid = t != ignore_index
    bad = valid & ((t < 0) | (t >= classes))
    if bad.any():
        raise IndexOutOfRangeError(f"{op}: target {int(t[bad][0])} is out of bounds for {classes} classes")
    return np.where(valid, t, 0), valid


def _weight(op: str, weight: Any, classes: int, like: Tensor) -> Tensor:
    w = as_tensor_arg(op, "weight", weight)
    if w.shape != (classes,):
        raise ShapeError(f"{op}: weight must have shape ({classes},) (one per class), got {w.shape}")
    return w


def _layout(op: str, x: Tensor) -> tuple[int, tuple]:
    if x.ndim == 0:
        raise ShapeError(f"{op}: input must have shape (C,), (N, C) or (N, C, d1, ...), got a 0-d tensor")
    if x.ndim == 1:
        return x.shape[0], ()
    return x.shape[1], (x.shape[0],) + tuple(x.shape[2:])


def _weighted_nll(op: str, logp: Tensor, target: Any, w: Tensor, ignore_index: int, reduction: str) -> Tensor:
    c, tshape = _layout(op, logp)
    t, valid = _targets(op, target, tshape, c, ignore_index)
    picked = ops.nll_loss(logp, np.where(valid, t, ignore_index).reshape(tshape), ignore_index=ignore_index,
                          reduction="none")  # -logp[target], 0 where ignored
    wt = ops.reshape(ops.mul(ops.gather_vec(w, t), const(valid, logp)), tshape)  # w[target], 0 where ignored
    per = ops.mul(picked, wt)
    if reduction == "none":
        return per
    if reduction == "sum":
        return ops.sum(per)
    return ops.div(ops.sum(per), ops.sum(wt))


def nll_loss(input: Tensor, target: Any, weight: Any = None, size_average: Any = None, ignore_index: int = -100,
             reduce: Any = None, reduction: str = "mean") -> Tensor:
    reduction = reduction_arg("nll_loss", legacy_reduction(size_average, reduce, reduction))
    if weight is None:
        return ops.nll_loss(input, target, ignore_index=ignore_index, reduction=reduction)
    x = as_tensor_arg("nll_loss", "input", input)
    w = _weight("nll_loss", weight, _layout("nll_loss", x)[0], x)
    return _weighted_nll("nll_loss", x, target, w, int_arg("nll_loss", "ignore_index", ignore_index), reduction)


def _is_float(target: Any) -> bool:
    if isinstance(target, Tensor):
        return target._buf is not None
    return np.asarray(target).dtype.kind == "f"


def cross_entropy(input: Tensor, target: Any, weight: Any = None, size_average: Any = None, ignore_index: int = -100,
                  reduce: Any = None, reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
    """PyTorch's cross_entropy: class indices or class probabilities, (C,), (N, C) or (N, C, d1, ...)."""
    op = "cross_entropy"
    reduction = reduction_arg(op, legacy_reduction(size_average, reduce, reduction))
    if weight is None:
        return ops.cross_entropy(input, target, ignore_index=ignore_index, reduction=reduction,
                                 label_smoothing=label_smoothing)
    x = as_tensor_arg(op, "input", input)
    ls = real_arg(op, "label_smoothing", label_smoothing, 0.0, 1.0)
    c, _ = _layout(op, x)
    w = _weight(op, weight, c, x)
    cdim = 0 if x.ndim == 1 else 1
    logp = ops.log_softmax(x, cdim)
    wv = w if x.ndim == 1 else channel_view(w, x.ndim)
    if _is_float(target):
        tgt = as_tensor_arg(op, "target", target)
        same_shape(op, x, tgt)
        if ls > 0.0:
            tgt = ops.add(ops.mul(tgt, 1.0 - ls), ls / c)
        per = ops.neg(ops.sum(ops.mul(ops.mul(logp, tgt), wv), cdim))
        if reduction != "mean":
            return reduce_loss(per, reduction)
        rows = x.numel() // c if c else 0
        return ops.mul(ops.sum(per), 1.0 / rows if rows else float("nan"))
    ign = int_arg(op, "ignore_index", ignore_index)
    nll = _weighted_nll(op, logp, target, w, ign, reduction)
    if ls == 0.0:
        return nll
    _, tshape = _layout(op, x)
    t, valid = _targets(op, target, tshape, c, ign)
    smooth = ops.mul(ops.neg(ops.sum(ops.mul(logp, wv), cdim)), const(valid.reshape(tshape), x))
    if reduction == "sum":
        smooth = ops.sum(smooth)
    elif reduction == "mean":
        smooth = ops.div(ops.sum(smooth), ops.sum(ops.mul(ops.gather_vec(w, t), const(valid, x))))
    return ops.add(ops.mul(nll, 1.0 - ls), ops.mul(smooth, ls / c))


def _pair(op: str, input: Any, target: Any, same: bool = True) -> tuple[Tensor, Tensor]:
    x = as_tensor_arg(op, "input", input)
    t = as_tensor_arg(op, "target", target) if isinstance(target, Tensor) else const(target, x)
    if same:
        same_shape(op, x, t)
    return x, t


def l1_loss(input: Tensor, target: Tensor, size_average: Any = None, reduce: Any = None,
            reduction: str = "mean") -> Tensor:
    reduction = reduction_arg("l1_loss", legacy_reduction(size_average, reduce, reduction))
    x, t = _pair("l1_loss", input, target)
    return reduce_loss(ops.abs(ops.sub(x, t)), reduction)


def _huber(a: Tensor, delta: float) -> Tensor:
    """0.5 m^2 + delta (a - m) with m = min(a, delta): 0.5 a^2 inside, delta (a - delta / 2) outside."""
    m = ops.clamp(a, None, delta)
    return ops.add(ops.mul(ops.mul(m, m), 0.5), ops.mul(ops.sub(a, m), delta))


def smooth_l1_loss(input: Tensor, target: Tensor, size_average: Any = None, reduce: Any = None,
                   reduction: str = "mean", beta: float = 1.0) -> Tensor:
    reduction = reduction_arg("smooth_l1_loss", legacy_reduction(size_average, reduce, reduction))
    beta = real_arg("smooth_l1_loss", "beta", beta, 0.0)
    x, t = _pair("smooth_l1_loss", input, target)
    a = ops.abs(ops.sub(x, t))
    if beta == 0.0:
        return reduce_loss(a, reduction)
    return reduce_loss(ops.mul(_huber(a, beta), 1.0 / beta), reduction)


def huber_loss(input: Tensor, target: Tensor, reduction: str = "mean", delta: float = 1.0,
               weight: Any = None) -> Tensor:
    reduction = reduction_arg("huber_loss", reduction)
    delta = real_arg("huber_loss", "delta", delta, 0.0)
    if delta == 0.0:
        raise ArgumentError("huber_loss: delta must be positive, got 0.0")
    x, t = _pair("huber_loss", input, target)
    loss = _huber(ops.abs(ops.sub(x, t)), delta)
    if weight is not None:
        loss = ops.mul(loss, as_tensor_arg("huber_loss", "weight", weight))
    return reduce_loss(loss, reduction)


def binary_cross_entropy(input: Tensor, target: Tensor, weight: Any = None, size_average: Any = None,
                         reduce: Any = None, reduction: str = "mean") -> Tensor:
    """-w (t log x + (1 - t) log(1 - x)), each log clamped at -100 as in PyTorch; an input outside
    [0, 1] raises (one host read of the input, as PyTorch's CPU kernel checks it)."""
    op = "binary_cross_entropy"
    reduction = reduction_arg(op, legacy_reduction(size_average, reduce, reduction))
    x, t = _pair(op, input, target)
    hx = host(x)
    if hx.size and not ((hx >= 0) & (hx <= 1)).all():
        raise ArgumentError(f"{op}: all elements of input should be between 0 and 1 (got min {hx.min()}, "
                            f"max {hx.max()})")
    log_x = ops.clamp(ops.log(x), -100.0)
    log_1mx = ops.clamp(ops.log(ops.sub(1.0, x)), -100.0)
    loss = ops.neg(ops.add(ops.mul(t, log_x), ops.mul(ops.sub(1.0, t), log_1mx)))
    if weight is not None:
        loss = ops.mul(loss, as_tensor_arg(op, "weight", weight))
    return reduce_loss(loss, reduction)


def binary_cross_entropy_with_logits(input: Tensor, target: Tensor, weight: Any = None, size_average: Any = None,
                                     reduce: Any = None, reduction: str = "mean", pos_weight: Any = None) -> Tensor:
    """(1 - t) x + (1 + (pos_weight - 1) t) softplus(-x): stable for every logit."""
    op = "binary_cross_entropy_with_logits"
    reduction = reduction_arg(op, legacy_reduction(size_average, reduce, reduction))
    x, t = _pair(op, input, target)
    sp = ops.softplus(ops.neg(x))
    if pos_weight is not None:
        pw = as_tensor_arg(op, "pos_weight", pos_weight)
        sp = ops.mul(sp, ops.add(ops.mul(ops.add(pw, -1.0), t), 1.0))
    loss = ops.add(ops.mul(ops.sub(1.0, t), x), sp)
    if weight is not None:
        loss = ops.mul(loss, as_tensor_arg(op, "weight", weight))
    return reduce_loss(loss, reduction)


def kl_div(input: Tensor, target: Tensor, size_average: Any = None, reduce: Any = None, reduction: str = "mean",
           log_target: bool = False) -> Tensor:
    """target (log target - input) pointwise (0 where target is 0), or exp(t) (t - input) with
    ``log_target``; 'batchmean' divides the sum by the batch size."""
    op = "kl_div"
    reduction = reduction_arg(op, legacy_reduction(size_average, reduce, reduction), ("batchmean",))
    x, t = _pair(op, input, target, same=False)
    if log_target:
        loss = ops.mul(ops.exp(t), ops.sub(t, x))
    else:
        zero = host(t) == 0  # xlogy: 0 log 0 = 0 (log of 1 there, times 0)
        log_t = ops.log(ops.add(t, const(zero, t))) if zero.any() else ops.log(t)
        loss = ops.mul(t, ops.sub(log_t, x))
    if reduction == "batchmean":
        total = ops.sum(loss)
        return ops.div(total, x.shape[0]) if x.ndim else total
    return reduce_loss(loss, reduction)


def cosine_embedding_loss(input1: Tensor, input2: Tensor, target: Tensor, margin: float = 0.0,
                          size_average: Any = None, reduce: Any = None, reduction: str = "mean") -> Tensor:
    """1 - cos(x1, x2) where target is 1, max(0, cos - margin) where it is -1 (cos over the last dim)."""
    op = "cosine_embedding_loss"
    reduction = reduction_arg(op, legacy_reduction(size_average, reduce, reduction))
    a = as_tensor_arg(op, "input1", input1)
    b = as_tensor_arg(op, "input2", input2)
    if a.shape != b.shape or a.ndim not in (1, 2):
        raise ShapeError(f"{op}: input1 and input2 must be 1-D or 2-D of one shape, got {a.shape} and {b.shape}")
    y = host(target) if isinstance(target, Tensor) else np.asarray(target)
    d = a.ndim - 1
    eps = 1e-12
    dot = ops.sum(ops.mul(a, b), d)
    m1 = ops.add(ops.sum(ops.mul(a, a), d), eps)
    m2 = ops.add(ops.sum(ops.mul(b, b), d), eps)
    cos = ops.div(dot, ops.sqrt(ops.mul(m1, m2)))
    if y.shape != tuple(cos.shape):
        raise ShapeError(f"{op}: target must have shape {cos.shape}, got {y.shape}")
    loss = select(y == 1, ops.sub(1.0, cos), ops.relu(ops.add(cos, -float(margin))))
    return reduce_loss(loss, reduction)


def margin_ranking_loss(input1: Tensor, input2: Tensor, target: Tensor, margin: float = 0.0,
                        size_average: Any = None, reduce: Any = None, reduction: str = "mean") -> Tensor:
    """max(0, -y (x1 - x2) + margin)."""
    op = "margin_ranking_loss"
    reduction = reduction_arg(op, legacy_reduction(size_average, reduce, reduction))
    a, b = as_tensor_arg(op, "input1", input1), as_tensor_arg(op, "input2", input2)
    y = as_tensor_arg(op, "target", target) if isinstance(target, Tensor) else const(target, a)
    return reduce_loss(ops.relu(ops.add(ops.neg(ops.mul(y, ops.sub(a, b))), float(margin))), reduction)


def soft_margin_loss(input: Tensor, target: Tensor, size_average: Any = None, reduce: Any = None,
                     reduction: str = "mean") -> Tensor:
    """log(1 + exp(-y x))."""
    op = "soft_margin_loss"
    reduction = reduction_arg(op, legacy_reduction(size_average, reduce, reduction))
    x, t = _pair(op, input, target)
    return reduce_loss(ops.softplus(ops.neg(ops.mul(t, x))), reduction)


def gaussian_nll_loss(input: Tensor, target: Tensor, var: Any, full: bool = False, eps: float = 1e-6,
                      reduction: str = "mean") -> Tensor:
    """0.5 (log var + (input - target)^2 / var) (+ 0.5 log 2 pi with ``full``); var is clamped at eps
    without blocking its gradient, as PyTorch's no-grad clamp of a clone."""
    op = "gaussian_nll_loss"
    reduction = reduction_arg(op, reduction)
    x, t = _pair(op, input, target)
    v = as_tensor_arg(op, "var", var) if isinstance(var, Tensor) else const(np.full(x.shape, var), x)
    if v.shape != x.shape:
        if v.shape == x.shape[:-1]:
            v = ops.unsqueeze(v, -1)
        elif not (v.shape[:-1] == x.shape[:-1] and v.shape[-1:] == (1,)):
            raise ShapeError(f"{op}: var of shape {v.shape} does not match input of shape {x.shape}")
    e = real_arg(op, "eps", eps, 0.0)
    hv = host(v)
    if (hv < e).any():
        v = ops.add(v, const(np.maximum(hv, e) - hv, v))
    d = ops.sub(x, t)
    loss = ops.mul(ops.add(ops.log(v), ops.div(ops.mul(d, d), v)), 0.5)
    if full:
        loss = ops.add(loss, 0.5 * math.log(2 * math.pi))
    return reduce_loss(loss, reduction)


def poisson_nll_loss(input: Tensor, target: Tensor, log_input: bool = True, full: bool = False,
                     size_average: Any = None, eps: float = 1e-8, reduce: Any = None,
                     reduction: str = "mean") -> Tensor:
    """exp(input) - target input (``log_input``) or input - target log(input + eps), plus the
    Stirling term where target > 1 with ``full``."""
    op = "poisson_nll_loss"
    reduction = reduction_arg(op, legacy_reduction(size_average, reduce, reduction))
    x, t = _pair(op, input, target)
    if log_input:
        loss = ops.sub(ops.exp(x), ops.mul(t, x))
    else:
        loss = ops.sub(x, ops.mul(t, ops.log(ops.add(x, real_arg(op, "eps", eps)))))
    if full:
        ht = host(t).astype(np.float64)
        safe = np.where(ht > 1, ht, 1.0)
        stirling = np.where(ht > 1, safe * np.log(safe) - safe + 0.5 * np.log(2 * np.pi * safe), 0.0)
        loss = ops.add(loss, const(stirling, x))
    return reduce_loss(loss, reduction)


def triplet_margin_loss(anchor: Tensor, positive: Tensor, negative: Tensor, margin: float = 1.0, p: float = 2,
                        eps: float = 1e-6, swap: bool = False, size_average: Any = None, reduce: Any = None,
                        reduction: str = "mean") -> Tensor:
    """max(d(a, p) - d(a, n) + margin, 0) with d the pairwise distance (p = 1 or 2)."""
    from ._spatial import pairwise_distance

    op = "triplet_margin_loss"
    reduction = reduction_arg(op, legacy_reduction(size_average, reduce, reduction))
    a, pos, neg = (as_tensor_arg(op, n, v) for n, v in (("anchor", anchor), ("positive", positive),
                                                        ("negative", negative)))
    d_ap = pairwise_distance(a, pos, p, eps)
    d_an = pairwise_distance(a, neg, p, eps)
    if swap:
        d_an = ops.minimum(d_an, pairwise_distance(pos, neg, p, eps))
    return reduce_loss(ops.relu(ops.add(ops.sub(d_ap, d_an), float(margin))), reduction)


def hinge_embedding_loss(input: Tensor, target: Tensor, margin: float = 1.0, size_average: Any = None,
                         reduce: Any = None, reduction: str = "mean") -> Tensor:
    """input where target is 1, max(0, margin - input) where it is -1 (PyTorch's sum of both terms)."""
    op = "hinge_embedding_loss"
    reduction = reduction_arg(op, legacy_reduction(size_average, reduce, reduction))
    x = as_tensor_arg(op, "input", input)
    y = np.broadcast_to(host(target) if isinstance(target, Tensor) else np.asarray(target), x.shape)
    margin_part = ops.mul(ops.relu(ops.sub(float(margin), x)), const(y != 1, x))
    self_part = ops.mul(x, const(y != -1, x))
    return reduce_loss(ops.add(margin_part, self_part), reduction)
