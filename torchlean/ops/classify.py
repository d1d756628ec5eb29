"""Differentiable ops of the classification: cross_entropy, nll_loss, gelu and embedding.

Each op is one tape node over the primitives (the class axis of an N-D input is first moved last
with one adjacent-axis swap, which is a node of its own). The PyTorch-named front end
(``torch.nn.functional`` names, signatures and defaults) is listed in ``FUNCTIONAL``.

Where we differ from PyTorch:
* ``weight=`` (class weights) and the deprecated ``size_average`` / ``reduce`` raise ArgumentError
  (not supported yet); so do embedding's ``max_norm``, ``scale_grad_by_freq=True`` and ``sparse=True``.
* The 'mean' reduction multiplies the sum by float32(1 / count) (torchlean's ``x / c``), within
  an ulp of PyTorch's division. cross_entropy sums its row losses in double inside the primitive
  (``cross_entropy_reduce``: one call forward, one backward), then rounds once.
* gelu at +-inf gives the limits (+inf and -0, derivative 1 and 0) where PyTorch gives NaN, and
  gelu's tail (x < -5) and the tanh form's tail are accurate relative to the (tiny) result, where
  PyTorch's 1 + erf / 1 + tanh cancel to 0.
* cross_entropy's loss is log S + (1 - ls)(m - x_t) + (ls/C) sum(m - x): accurate relative to the
  loss even for huge logits (PyTorch's log_softmax loses it to cancellation); a row with a +inf
  logit off the target gives loss +inf (PyTorch: NaN).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import autograd
from .._validate import int_arg
from ..errors import ArgumentError, DTypeError, IndexOutOfRangeError, ShapeError
from ..runtime import primitives as P
from ..runtime.buffer import Buffer, zeros
from ._base import Tensor, fbuf, host_indices, new, numel, operand, same_device
from .shape import reshape, transpose

__all__ = ["cross_entropy", "nll_loss", "gelu", "embedding"]
FUNCTIONAL = ["cross_entropy", "nll_loss", "gelu", "embedding"]


# -- argument checks ------------------------------------------------------------------------------
def _not_supported(op: str, **options: Any) -> None:
    """Each option is (given, default): a value other than the default raises, never ignored."""
    for name, (value, default) in options.items():
        given = value is not None if default is None else bool(value) != default
        if given:
            shown = type(value).__name__ if isinstance(value, Tensor) else repr(value)
            raise ArgumentError(f"{op}: argument {name}={shown} is not supported yet (only {name}={default!r})")


def _reduction(op: str, reduction: Any) -> str:
    if reduction not in ("none", "mean", "sum"):
        raise ArgumentError(f"{op}: reduction must be 'none', 'mean' or 'sum', got {reduction!r}")
    return reduction


def _is_float_target(target: Any) -> bool:
    if isinstance(target, Tensor):
        return target._buf is not None
    try:
        arr = np.asarray(target)
    except (TypeError, ValueError):
        return False
    if arr.dtype.kind == "f" and isinstance(target, (list, tuple)):
        # Python ints that no one NumPy integer dtype holds ([0, 2**63]) come out as float64:
        # they are class indices (which _class_targets refuses by value), not probabilities
        return not all(isinstance(v, int) for v in np.asarray(target, dtype=object).reshape(-1))
    return arr.dtype.kind in "fc"


def _class_targets(op: str, target: Any, shape: tuple[int, ...], classes: int,
                   ignore_index: Any) -> tuple[np.ndarray, int]:
    """(flat int64 class indices with ignored entries (== ignore_index) mapped to ``classes``, the
    number of entries not ignored)."""
    if isinstance(target, Tensor) and target._buf is not None:
        raise DTypeError(f"{op}: target must hold integer class indices, got a float32 tensor")
    arr = host_indices(op, "target", target)  # exact int64: a uint64 2**64 - 100 never becomes -100
    if tuple(arr.shape) != tuple(shape):
        raise ShapeError(f"{op}: expected target of shape {tuple(shape)} for this input, got {tuple(arr.shape)}")
    t = arr.reshape(-1)
    ign = int_arg(op, "ignore_index", ignore_index)
    if t.size:  # the common case in one pass over min/max: every index a class, none ignored
        lo, hi = int(t.min()), int(t.max())
        if 0 <= lo and hi < classes and not lo <= ign <= hi:
            return t, t.size
    ignored = t == ign
    bad = ~ignored & ((t < 0) | (t >= classes))
    if bad.any():
        v = int(t[bad][0])
        raise IndexOutOfRangeError(
            f"{op}: target {v} is out of bounds for {classes} classes (valid: 0..{classes - 1}, or ignore_index={ign})")
    return np.where(ignored, classes, t), t.size - int(np.count_nonzero(ignored))


def _class_layout(op: str, x: Tensor) -> tuple[int, int, int, tuple[int, ...]]:
    """(batch N, classes C, inner D, target shape) of an input (C,), (N, C) or (N, C, d1, ...)."""
    if x.ndim == 0:
        raise ShapeError(f"{op}: input must have shape (C,), (N, C) or (N, C, d1, ...), got a 0-d tensor")
    if x.ndim == 1:
        return 1, x.shape[0], 1, ()
    n, c = x.shape[0], x.shape[1]
    return n, c, numel(x.shape[2:]), (n,) + tuple(x.shape[2:])


def _rows(x: Tensor, n: int, c: int, d: int) -> Tensor:
    """A tensor whose buffer is the (N*D, C) rows of the logits, class axis last: the input itself
    when there are no inner dims (its buffer already is (N, C)), else one adjacent-axis swap of its
    (N, C, D) view into (N, D, C)."""
    if d == 1 or x.ndim <= 2:
        return x
    return transpose(reshape(x, (n, c, d)), 1, 2)


def _reduce_rows(per_row: Buffer, reduction: str, count: int, shape: tuple[int, ...]):
    """(output buffer, output shape, scale of the cotangent per row) for a per-row buffer."""
    if reduction == "none":
        return per_row, shape, None
    s = P.reduce_sum(per_row)
    if reduction == "sum":
        return s, (), 1.0
    inv = 1.0 / count if count else float("nan")  # a mean over no rows is NaN, as in PyTorch
    out = P.scale(s, inv)
    s.release()
    return out, (), inv


def _row_cotangent(g: Buffer, rows: int, scale: float | None) -> Buffer:
    if scale is None:
        return g
    gs = P.scale(g, scale) if scale != 1.0 else g
    return P.broadcast_to(gs, (), (rows,), (0,))


# -- cross entropy ----------------------------------------------------------------------------
def cross_entropy(input: Tensor, target: Any, weight: Any = None, size_average: Any = None, ignore_index: int = -100,
                  reduce: Any = None, reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
    """Cross entropy of logits ``input`` (C,), (N, C) or (N, C, d1, ...) against class indices
    (shape (), (N,) or (N, d1, ...); ``ignore_index`` entries contribute 0 and 'mean' divides by
    the number of the others: NaN when there are none) or class probabilities of input's shape.

    One fused kernel per row (log-softmax and NLL together); PyTorch's label smoothing
    (1 - ls) nll + ls mean_j(-log p_j). An index outside [0, C) that is not ignore_index raises
    IndexOutOfRangeError. ``weight``, ``size_average`` and ``reduce`` are not supported yet.
    """
    op = "cross_entropy"
    if not isinstance(input, Tensor):
        raise DTypeError(f"{op}: input must be a Tensor, got {type(input).__name__}")
    _not_supported(op, weight=(weight, None), size_average=(size_average, None), reduce=(reduce, None))
    reduction = _reduction(op, reduction)
    try:
        ls = float(label_smoothing)
    except (TypeError, ValueError):
        raise ArgumentError(f"{op}: label_smoothing must be a number in [0, 1], got {label_smoothing!r}") from None
    if not 0.0 <= ls <= 1.0:
        raise ArgumentError(f"{op}: label_smoothing must be in [0, 1], got {label_smoothing!r}")
    n, c, d, tshape = _class_layout(op, input)
    if _is_float_target(target):
        return _cross_entropy_probs(op, input, target, reduction, ls, c)
    t, count = _class_targets(op, target, tshape, c, ignore_index)
    rows = n * d
    x2 = _rows(input, n, c, d)
    xb = fbuf(op, x2)
    if reduction == "none":
        loss_b, lse_b = P.cross_entropy_rows(xb, rows, c, t, ls)

        def vjp(g: Buffer):
            return (P.cross_entropy_rows_bwd(xb, lse_b, g, rows, c, t, ls),)

        return autograd.record(op, new(loss_b, tshape), (x2,), vjp, workspace=(lse_b,))
    # 'sum' and 'mean': the reduction inside the primitive (one call each way, not three)
    if reduction == "sum":
        scale = 1.0
    else:  # a mean over no counted row is NaN, as in PyTorch
        scale = 1.0 / count if count else float("nan")
    loss_b, lse_b = P.cross_entropy_reduce(xb, rows, c, t, ls, scale)

    def vjp_reduced(g: Buffer):
        return (P.cross_entropy_reduce_bwd(xb, lse_b, g, rows, c, t, ls, scale),)

    return autograd.record(op, new(loss_b, ()), (x2,), vjp_reduced, workspace=(lse_b,))


def _cross_entropy_probs(op: str, input: Tensor, target: Any, reduction: str, ls: float, c: int) -> Tensor:
    """Class-probability targets, composed as PyTorch does: -(target' * log_softmax(input, 1)).sum(1),
    target' = target (1 - ls) + ls / C; 'mean' divides by the number of rows (numel / C)."""
    from .elementwise import add, mul, neg
    from .nn import log_softmax
    from .reduce import sum as tsum

    tgt = operand(op, target, input)
    if tuple(tgt.shape) != tuple(input.shape):
        raise ShapeError(f"{op}: class-probability target must have the input's shape {tuple(input.shape)}, "
                         f"got {tuple(tgt.shape)}")
    same_device(op, input, tgt)
    cdim = 0 if input.ndim == 1 else 1
    if ls > 0.0:
        tgt = add(mul(tgt, 1.0 - ls), ls / c)
    per = neg(tsum(mul(tgt, log_softmax(input, cdim)), cdim))
    if reduction == "none":
        return per
    total = tsum(per)
    if reduction == "sum":
        return total
    count = input.numel() // c if c else 0
    return mul(total, 1.0 / count if count else float("nan"))


# -- nll loss ---------------------------------------------------------------------------------
def nll_loss(input: Tensor, target: Any, weight: Any = None, size_average: Any = None, ignore_index: int = -100,
             reduce: Any = None, reduction: str = "mean") -> Tensor:
    """Negative log-likelihood of log-probabilities ``input`` (C,), (N, C) or (N, C, d1, ...) at the
    class indices ``target``: -input[n, t, ...], ignored entries 0, 'mean' over the others.

    One node: a gather of the flat positions (n C + t) D + s (no transpose of the input), negated
    as 0 - x (so ignored entries are +0); the VJP scatters the negated cotangent back
    (deterministic in deterministic mode).
    """
    op = "nll_loss"
    if not isinstance(input, Tensor):
        raise DTypeError(f"{op}: input must be a Tensor, got {type(input).__name__}")
    _not_supported(op, weight=(weight, None), size_average=(size_average, None), reduce=(reduce, None))
    reduction = _reduction(op, reduction)
    n, c, d, tshape = _class_layout(op, input)
    t, _ = _class_targets(op, target, tshape, c, ignore_index)
    total = input.numel()
    k = t.size
    valid = t < c
    pos = np.arange(k, dtype=np.int64)
    flat = np.where(valid, ((pos // d) * c + np.minimum(t, c - 1 if c else 0)) * d + pos % d, total)
    xb = fbuf(op, input)
    picked = P.gather_vec(xb, total, flat, k)
    per_b = P.axpy(zeros(k, input.device), picked, -1.0)  # 0 - picked: ignored entries are +0, not -0
    picked.release()
    out_b, out_shape, scale = _reduce_rows(per_b, reduction, int(np.count_nonzero(valid)), tshape)
    if out_b is not per_b:
        per_b.release()
    device = input.device

    def vjp(g: Buffer):
        gk = _row_cotangent(g, k, scale)
        neg_g = P.scale(gk, -1.0)
        return (P.scatter_add(zeros(total, device), neg_g, total, flat, k),)

    return autograd.record(op, new(out_b, out_shape), (input,), vjp)


# -- gelu -------------------------------------------------------------------------------------
def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    """0.5 x (1 + erf(x / sqrt 2)) (``approximate='none'``) or its tanh approximation
    (``approximate='tanh'``), both evaluated without cancellation in the tail."""
    op = "gelu"
    if approximate == "none":
        fwd, bwd = P.gelu, P.gelu_bwd
    elif approximate == "tanh":
        fwd, bwd = P.gelu_tanh, P.gelu_tanh_bwd
    else:
        raise ArgumentError(f"{op}: approximate must be 'none' or 'tanh', got {approximate!r}")
    if not isinstance(input, Tensor):
        raise DTypeError(f"{op}: input must be a Tensor, got {type(input).__name__}")
    xb = fbuf(op, input)
    return autograd.record(op, new(fwd(xb), input.shape), (input,), lambda g: (bwd(xb, g),))


# -- embedding --------------------------------------------------------------------------------
def embedding(input: Any, weight: Tensor, padding_idx: int | None = None, max_norm: float | None = None,
              norm_type: float = 2.0, scale_grad_by_freq: bool = False, sparse: bool = False) -> Tensor:
    """Rows of ``weight`` (num_embeddings, embedding_dim) picked by the integer indices ``input``:
    shape input.shape + (embedding_dim,). The VJP is a scatter-add of rows (deterministic in
    deterministic mode); rows at ``padding_idx`` get no gradient, as in PyTorch. An index outside
    [0, num_embeddings) raises IndexOutOfRangeError. ``max_norm``, ``scale_grad_by_freq=True`` and
    ``sparse=True`` are not supported yet.
    """
    op = "embedding"
    _not_supported(op, max_norm=(max_norm, None), scale_grad_by_freq=(scale_grad_by_freq, False),
                   sparse=(sparse, False))
    if not isinstance(weight, Tensor) or weight._buf is None:
        raise DTypeError(f"{op}: weight must be a float32 Tensor, got "
                         f"{type(weight).__name__ if not isinstance(weight, Tensor) else weight.dtype}")
    if weight.ndim != 2:
        raise ShapeError(f"{op}: weight must be 2-D (num_embeddings, embedding_dim), got shape {weight.shape}")
    num, dim = weight.shape
    if input is None or isinstance(input, (str, bytes, float)):
        raise DTypeError(f"{op}: expected a Tensor of integer indices for input, got {type(input).__name__}")
    idx = host_indices(op, "input", input)
    shape = tuple(idx.shape)
    flat = idx.reshape(-1)
    if flat.size and (flat.min() < 0 or flat.max() >= num):
        v = int(flat[(flat < 0) | (flat >= num)][0])
        raise IndexOutOfRangeError(f"{op}: index {v} is out of range for {num} embeddings (valid: 0..{num - 1})")
    grad_idx = flat
    if padding_idx is not None:
        try:
            pad = int(padding_idx)
        except (TypeError, ValueError):
            raise ArgumentError(f"{op}: padding_idx must be an integer or None, got {padding_idx!r}") from None
        if not -num <= pad < num:
            raise ArgumentError(f"{op}: padding_idx must be within [-{num}, {num}), got {pad}")
        pad %= num
        grad_idx = np.where(flat == pad, num, flat)  # an out-of-range row: the scatter skips it
    k = flat.size
    wb = fbuf(op, weight)
    out = new(P.gather_rows(wb, num, dim, flat, k), shape + (dim,))
    device = weight.device
    return autograd.record(op, out, (weight,),
                           lambda g: (P.scatter_add_rows(zeros(num * dim, device), g, num, dim, grad_idx, k),))
