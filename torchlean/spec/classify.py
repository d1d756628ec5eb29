"""Float64 specs of the classification: cross_entropy_rows, cross_entropy_reduce, gelu, gelu_tanh and their
backward passes.

Written for clarity and with algorithms of their own (the kernels shift by the row maximum and sum
exponentials; the spec shifts by the target logit and folds with ``np.logaddexp``; the kernels
evaluate erfc by a Chebyshev fit or CUDA's erfcf, the spec calls SciPy's ``ndtr``), so that a bug
in a kernel cannot hide in a routine the spec shares.

Conventions (documented in the primitives):

* cross_entropy_rows: row r of the (rows, cols) logits x with target t_r and smoothing ls gives
  ``lse_r = log sum_j exp(x_rj)`` (the exact value: -inf for a row of -inf or an empty row, +inf
  when a logit is +inf, NaN when a logit is NaN) and
  ``loss_r = (1 - ls) (lse_r - x_rt) + ls (lse_r - mean_j x_rj)``
  = lse_r - (1 - ls) x_rt - (ls / cols) sum_j x_rj (PyTorch's label smoothing). A term whose
  coefficient is 0 (ls = 0 or ls = 1) is absent, not 0 * (inf or NaN). A target >= cols marks an
  ignored row: loss 0 (lse still computed). Where the row maximum m is finite this is the exact
  value (+inf when x_t = -inf, or when ls > 0 and some logit is -inf; NaN when a logit is NaN);
  where m is +inf or -inf (a row of -inf) the loss is the direct formula above by IEEE rules
  (inf - x_t for a finite x_t, NaN when x_t is infinite too).
* cross_entropy_rows_bwd: ``dx_rj = dloss_r (exp(x_rj - lse_r) - (1 - ls) [j == t_r] - ls / cols)``,
  zero rows for ignored targets.
* cross_entropy_reduce: ``(scale sum_r loss_r, lse)`` with loss_r, lse_r those of cross_entropy_rows
  (ignored rows add 0): the 'sum' (scale 1) and 'mean' (scale 1 / count) reductions in one primitive.
* cross_entropy_reduce_bwd: cross_entropy_rows_bwd with ``dloss_r = dloss scale`` on every row.
* gelu(x) = x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)); gelu_tanh(x) = 0.5 x (1 + tanh(z)) = x sigmoid(2z)
  with z = sqrt(2/pi) (x + 0.044715 x^3). Both are evaluated in the forms without cancellation.
  At the infinities they take their limits: gelu(+inf) = +inf, gelu(-inf) = -0.0, and the
  derivatives are 1 at +inf and 0 at -inf (PyTorch returns NaN there). NaN propagates.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special

F64 = np.float64
SQRT_2_OVER_PI = float(np.sqrt(2.0 / np.pi))
GELU_TANH_C = 0.044715
INV_SQRT_2PI = float(1.0 / np.sqrt(2.0 * np.pi))

__all__ = ["cross_entropy_rows", "cross_entropy_rows_bwd", "cross_entropy_reduce",
           "cross_entropy_reduce_bwd", "gelu", "gelu_bwd", "gelu_tanh", "gelu_tanh_bwd"]


def _f(x):
    return np.asarray(x, dtype=F64)


def _combine(ls, nll, smooth):
    """(1 - ls) nll + ls smooth, leaving out a term whose coefficient is exactly 0."""
    if ls == 0.0:
        return nll
    if ls == 1.0:
        return smooth
    return (1.0 - ls) * nll + ls * smooth


def cross_entropy_rows(x, rows, cols, targets, label_smoothing):
    """(loss, lse), each of length rows."""
    rows, cols = int(rows), int(cols)
    t = np.asarray(targets, dtype=np.int64).reshape(-1)
    loss = np.zeros(rows)
    if cols == 0:  # log of an empty sum; every target >= 0 = cols is ignored
        return loss, np.full(rows, -np.inf)
    x2 = _f(x).reshape(rows, cols)
    with np.errstate(all="ignore"):
        lse = np.logaddexp.reduce(x2, axis=1)  # exact folding: handles +-inf and NaN by IEEE rules
        m = np.max(x2, axis=1)                  # NaN when the row holds a NaN
        ls = float(label_smoothing)
        for r in np.flatnonzero(t < cols):
            row, xt = x2[r], x2[r, t[r]]
            if np.isfinite(m[r]):
                # -log softmax at the target, shifted by the target itself: log sum_j exp(x_j - x_t),
                # with the target's own term exactly exp(0)
                if xt == -np.inf:
                    nll = np.inf  # p_t = 0
                else:
                    diff = row - xt
                    diff[t[r]] = 0.0
                    nll = np.logaddexp.reduce(diff)
                # the smoothing term lse - mean(x) = log sum exp(x - m) + mean(m - x): no cancellation
                smooth = np.logaddexp.reduce(row - m[r]) + np.mean(m[r] - row)
                loss[r] = _combine(ls, nll, smooth)
            else:
                # +inf, a row of -inf, or NaN: the direct formula, by IEEE rules
                loss[r] = lse[r] - _combine(ls, xt, np.mean(row))
    return loss, lse


def cross_entropy_rows_bwd(x, lse, dloss, rows, cols, targets, label_smoothing):
    rows, cols = int(rows), int(cols)
    ls = float(label_smoothing)
    t = np.asarray(targets, dtype=np.int64).reshape(-1)
    if rows * cols == 0:
        return np.zeros(rows * cols)
    x2 = _f(x).reshape(rows, cols)
    with np.errstate(all="ignore"):
        p = np.exp(x2 - _f(lse)[:, None])
        onehot = np.arange(cols)[None, :] == t[:, None]
        c = (1.0 - ls) * onehot + ls / cols
        dx = _f(dloss)[:, None] * (p - c)
    dx[t >= cols] = 0.0
    return dx.reshape(-1)


def cross_entropy_reduce(x, rows, cols, targets, label_smoothing, scale):
    """(loss of shape (1,), lse of length rows): loss = scale * (the exact sum of the row losses)."""
    loss, lse = cross_entropy_rows(x, rows, cols, targets, label_smoothing)
    with np.errstate(all="ignore"):
        total = math.fsum(loss) if np.all(np.isfinite(loss)) else float(np.sum(loss))
        return np.array([float(scale) * total]), lse


def cross_entropy_reduce_bwd(x, lse, dloss, rows, cols, targets, label_smoothing, scale):
    dl = np.full(int(rows), float(_f(dloss).reshape(-1)[0]) * float(scale))
    return cross_entropy_rows_bwd(x, lse, dl, rows, cols, targets, label_smoothing)


def _phi(x):
    with np.errstate(all="ignore"):
        return np.exp(-0.5 * x * x) * INV_SQRT_2PI


def gelu(x):
    x = _f(x)
    with np.errstate(all="ignore"):
        y = x * special.ndtr(x)
    return np.where(x == -np.inf, -0.0, y)


def gelu_bwd(x, dy):
    x = _f(x)
    with np.errstate(all="ignore"):
        d = special.ndtr(x) + x * _phi(x)
        d = np.where(np.isinf(x), np.where(x > 0, 1.0, 0.0), d)
        return _f(dy) * d


def _gelu_tanh_z(x):
    with np.errstate(all="ignore"):
        return SQRT_2_OVER_PI * (x + GELU_TANH_C * x**3)


def gelu_tanh(x):
    x = _f(x)
    with np.errstate(all="ignore"):
        y = x * special.expit(2.0 * _gelu_tanh_z(x))  # 0.5 (1 + tanh z) = sigmoid(2z)
    return np.where(x == -np.inf, -0.0, y)


def gelu_tanh_bwd(x, dy):
    x = _f(x)
    with np.errstate(all="ignore"):
        z = _gelu_tanh_z(x)
        s, sm = special.expit(2.0 * z), special.expit(-2.0 * z)  # sigmoid(2z) and 1 - sigmoid(2z)
        dz = SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_TANH_C * x * x)
        d = s + 2.0 * x * dz * s * sm
        d = np.where(np.isinf(x), np.where(x > 0, 1.0, 0.0), d)
        return _f(dy) * d
