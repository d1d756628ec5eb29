"""Float64 reference of every non-random primitive (the ``lax_reference`` of torchlean).

Conventions (DESIGN.md): sign(0) = 0; sqrt' = 0 for x <= 0; clamp' = 1 strictly inside (lo, hi);
relu' = 1 for x > 0; max/min follow fmax/fmin (a NaN loses to a number) and their backward gives
the strict winner the gradient and splits a tie 0.5/0.5; sum of empty = 0, mean of empty = NaN,
max over an empty axis = 0; out-of-bounds gather reads 0, out-of-bounds scatter is ignored.
relu and clamp propagate NaN (as PyTorch does).
"""

from __future__ import annotations

import numpy as np

F64 = np.float64
SAFE_LOG_EPS = 1e-6

__all__ = [
    "abs", "abs_bwd", "sqrt", "sqrt_bwd", "exp", "log", "inv", "clamp", "clamp_bwd",
    "max", "max_bwd", "min", "min_bwd", "div", "relu", "relu_bwd", "leaky_relu", "leaky_relu_bwd", "add", "sub", "mul",
    "scale", "copy", "axpy", "add_scalar", "sigmoid", "sigmoid_bwd", "tanh", "tanh_bwd",
    "softplus", "softplus_bwd", "safe_log", "safe_log_bwd",
    "sin", "cos", "erf", "log1p", "expm1", "floor", "ceil", "round", "trunc", "sign", "pow_scalar",
    "atan", "asin", "acos", "asinh", "acosh", "atanh", "atan2",
    "reduce_sum", "reduce_mean", "reduce_sum_axis0", "reduce_sum_axis1", "reduce_max_axis0",
    "reduce_max_axis1", "reduce_sum_axis", "concat1d", "slice1d", "narrow_block", "narrow_block_bwd", "concat_block",
    "broadcast_vec_to_rows",
    "broadcast_vec_to_cols", "broadcast_to", "reduce_from_broadcast", "swap_adjacent_at_depth", "permute",
    "transpose2d", "bmm", "bmm_nt", "bmm_tn", "gather_vec", "gather_rows", "scatter_add", "scatter_add_row",
    "scatter_add_rows", "softmax_rows", "softmax_rows_bwd", "log_softmax_rows",
    "log_softmax_rows_bwd",
]

_abs, _max, _min = abs, max, min  # keep the builtins reachable under the primitive names


def _f(x):
    return np.asarray(x, dtype=F64)


# -- elementwise -------------------------------------------------------------------------
def abs(x):
    return np.abs(_f(x))


def abs_bwd(x, dy):
    return np.sign(_f(x)) * _f(dy)


def sqrt(x):
    with np.errstate(invalid="ignore"):
        return np.sqrt(_f(x))


def sqrt_bwd(x, dy):
    x, dy = _f(x), _f(dy)
    pos = x > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(pos, dy / (2.0 * np.sqrt(np.where(pos, x, 1.0))), 0.0)


def exp(x):
    with np.errstate(over="ignore"):
        return np.exp(_f(x))


def log(x):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(_f(x))


def inv(x):
    with np.errstate(divide="ignore"):
        return 1.0 / _f(x)


def clamp(x, lo, hi):
    x = _f(x)
    return np.where(np.isnan(x), x, np.minimum(np.maximum(x, lo), hi))


def clamp_bwd(x, dy, lo, hi):
    x = _f(x)
    return np.where((x > lo) & (x < hi), _f(dy), 0.0)


def max(a, b):
    return np.fmax(_f(a), _f(b))


def min(a, b):
    return np.fmin(_f(a), _f(b))


def _winner_split(a_wins, b_wins, dy):
    tie = ~(a_wins | b_wins)
    da = np.where(a_wins, dy, np.where(tie, 0.5 * dy, 0.0))
    db = np.where(b_wins, dy, np.where(tie, 0.5 * dy, 0.0))
    return da, db


def max_bwd(a, b, dy):
    a, b, dy = _f(a), _f(b), _f(dy)
    a_wins = (a > b) | (np.isnan(b) & ~np.isnan(a))
    b_wins = (b > a) | (np.isnan(a) & ~np.isnan(b))
    return _winner_split(a_wins, b_wins, dy)


def min_bwd(a, b, dy):
    a, b, dy = _f(a), _f(b), _f(dy)
    a_wins = (a < b) | (np.isnan(b) & ~np.isnan(a))
    b_wins = (b < a) | (np.isnan(a) & ~np.isnan(b))
    return _winner_split(a_wins, b_wins, dy)


def div(a, b):
    with np.errstate(divide="ignore", invalid="ignore"):
        return _f(a) / _f(b)


def relu(x):
    x = _f(x)
    return np.where(x > 0, x, np.where(np.isnan(x), x, 0.0))


def relu_bwd(x, dy):
    return np.where(_f(x) > 0, _f(dy), 0.0)


def leaky_relu(x, slope):
    x, slope = _f(x), float(np.float32(slope))  # (the runtime rounds the slope to float32)
    return np.where(x > 0, x, x * slope)  # (NaN * slope is NaN: NaN propagates)


def leaky_relu_bwd(x, dy, slope):
    slope = float(np.float32(slope))
    return np.where(_f(x) > 0, _f(dy), _f(dy) * slope)  # slope at x == 0, as PyTorch


def add(a, b):
    return _f(a) + _f(b)


def sub(a, b):
    return _f(a) - _f(b)


def mul(a, b):
    return _f(a) * _f(b)


def sin(x):
    with np.errstate(invalid="ignore"):
        return np.sin(_f(x))


def cos(x):
    with np.errstate(invalid="ignore"):
        return np.cos(_f(x))


def erf(x):
    from scipy.special import erf as _erf

    return _erf(_f(x))


def log1p(x):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log1p(_f(x))


def expm1(x):
    with np.errstate(over="ignore"):
        return np.expm1(_f(x))


def atan(x):
    return np.arctan(_f(x))


def asin(x):
    """NaN outside [-1, 1]."""
    with np.errstate(invalid="ignore"):
        return np.arcsin(_f(x))


def acos(x):
    """NaN outside [-1, 1]."""
    with np.errstate(invalid="ignore"):
        return np.arccos(_f(x))


def asinh(x):
    return np.arcsinh(_f(x))


def acosh(x):
    """NaN below 1."""
    with np.errstate(invalid="ignore"):
        return np.arccosh(_f(x))


def atanh(x):
    """+-inf at +-1, NaN outside [-1, 1]."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.arctanh(_f(x))


def atan2(a, b):
    """The angle of the point (b, a) in [-pi, pi], signed zeros and infinities as C's atan2."""
    return np.arctan2(_f(a), _f(b))


def floor(x):
    return np.floor(_f(x))


def ceil(x):
    return np.ceil(_f(x))


def round(x):
    """Round half to even (PyTorch's and IEEE's roundTiesToEven)."""
    return np.rint(_f(x))


def trunc(x):
    return np.trunc(_f(x))


def sign(x):
    """-1, 0 or 1; +0 for +-0 and for NaN (PyTorch's torch.sign)."""
    x = _f(x)
    return np.where(x > 0, 1.0, np.where(x < 0, -1.0, 0.0))


def pow_scalar(x, c):
    """x ** c (IEEE pow: x < 0 with a non-integer c is NaN, pow(x, 0) = 1 even for NaN x), except that
    x ** 0.5 is sqrt(x) as in NumPy and torch (NaN at -inf, -0 at -0)."""
    with np.errstate(all="ignore"):
        return np.power(_f(x), F64(c))


def scale(x, c):
    return _f(x) * c


def copy(x):
    return _f(x).copy()


def axpy(a, b, c):
    """a + c * b."""
    return _f(a) + c * _f(b)


def add_scalar(x, c):
    return _f(x) + c


def sigmoid(x):
    x = _f(x)
    with np.errstate(over="ignore"):
        e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def sigmoid_bwd(y, dy):
    y = _f(y)
    return _f(dy) * y * (1.0 - y)


def tanh(x):
    return np.tanh(_f(x))


def tanh_bwd(y, dy):
    y = _f(y)
    return _f(dy) * (1.0 - y * y)


def softplus(x):
    x = _f(x)
    return np.maximum(x, 0.0) + np.log1p(np.exp(-np.abs(x)))


def softplus_bwd(x, dy):
    return _f(dy) * sigmoid(x)


def safe_log(x):
    """log(softplus(x) + 1e-6)."""
    return np.log(softplus(x) + SAFE_LOG_EPS)


def safe_log_bwd(x, dy):
    return _f(dy) * sigmoid(x) / (softplus(x) + SAFE_LOG_EPS)


# -- reductions --------------------------------------------------------------------------
def reduce_sum(x):
    return np.array([np.sum(_f(x))])


def reduce_mean(x):
    x = _f(x)
    return np.array([np.sum(x) / x.size if x.size else np.nan])


def reduce_sum_axis0(b, rows, cols):
    return _f(b).reshape(rows, cols).sum(axis=0)


def reduce_sum_axis1(b, rows, cols):
    return _f(b).reshape(rows, cols).sum(axis=1)


def _fmax_reduce(m, axis):
    if m.shape[axis] == 0:
        return np.zeros(m.shape[1 - axis])
    return np.fmax.reduce(m, axis=axis)


def reduce_max_axis0(b, rows, cols):
    return _fmax_reduce(_f(b).reshape(rows, cols), 0)


def reduce_max_axis1(b, rows, cols):
    return _fmax_reduce(_f(b).reshape(rows, cols), 1)


def reduce_sum_axis(b, dims, axis):
    return _f(b).reshape(dims).sum(axis=axis).reshape(-1)


# -- layout ------------------------------------------------------------------------------
def concat1d(a, b, n, m):
    return np.concatenate([_f(a), _f(b)])


def slice1d(b, n, start, length):
    return _f(b)[start:start + length].copy()


def narrow_block(x, outer, size, start, length, inner):
    """x seen as (outer, size, inner): out (outer, length, inner) = x[:, start:start+length, :]."""
    return _f(x).reshape(outer, size, inner)[:, start:start + length, :].copy().reshape(-1)


def narrow_block_bwd(dy, outer, size, start, length, inner):
    """The VJP of narrow_block: (outer, size, inner) zeros with dy (outer, length, inner) at
    [:, start:start+length, :]."""
    out = np.zeros((outer, size, inner), dtype=F64)
    out[:, start:start + length, :] = _f(dy).reshape(outer, length, inner)
    return out.reshape(-1)


def concat_block(a, b, outer, size_a, size_b, inner):
    """a (outer, size_a, inner) and b (outer, size_b, inner) joined along the middle axis: out
    (outer, size_a + size_b, inner)."""
    return np.concatenate([_f(a).reshape(outer, size_a, inner), _f(b).reshape(outer, size_b, inner)],
                          axis=1).reshape(-1)


def broadcast_vec_to_rows(vec, rows, cols):
    """out[i, j] = vec[j]."""
    return np.tile(_f(vec), rows)


def broadcast_vec_to_cols(vec, rows, cols):
    """out[i, j] = vec[i]."""
    return np.repeat(_f(vec), cols)


def _in_index(out_idx, in_dims, out_dims, axis_map):
    """The input coordinates read by output coordinates ``out_idx`` under ``axis_map``."""
    idx = [0] * len(in_dims)
    for j, a in enumerate(axis_map):
        if a != 0 and in_dims[a - 1] != 1:
            idx[a - 1] = out_idx[j]
    return tuple(idx)


def broadcast_to(x, in_dims, out_dims, axis_map):
    """out[o] = x[i(o)], i(o)[a] = o[j] for the output axis j mapped to input axis a (0 if size 1)."""
    xs = _f(x).reshape(in_dims)
    out = np.empty(out_dims, dtype=F64)
    for o in np.ndindex(*out_dims):
        out[o] = xs[_in_index(o, in_dims, out_dims, axis_map)]
    return out.reshape(-1)


def reduce_from_broadcast(dout, in_dims, out_dims, axis_map):
    """Adjoint of ``broadcast_to``: every output element adds into the input element it read."""
    d = _f(dout).reshape(out_dims)
    acc = np.zeros(in_dims, dtype=F64)
    for o in np.ndindex(*out_dims):
        acc[_in_index(o, in_dims, out_dims, axis_map)] += d[o]
    return acc.reshape(-1)


def swap_adjacent_at_depth(b, dims, depth):
    """Swap axes depth and depth+1; the identity when depth+1 is not an axis."""
    if depth + 1 >= len(dims):
        return _f(b).copy()
    return np.swapaxes(_f(b).reshape(dims), depth, depth + 1).reshape(-1)


def permute(b, dims, perm):
    """Output axis j is input axis perm[j]: each output element read by its own coordinates."""
    x = _f(b).reshape(dims)
    out_dims = [dims[p] for p in perm]
    out = np.zeros(out_dims, dtype=F64)
    for o in np.ndindex(*out_dims):
        src = [0] * len(dims)
        for j, p in enumerate(perm):
            src[p] = o[j]
        out[o] = x[tuple(src)]
    return out.reshape(-1)


def transpose2d(b, rows, cols):
    return _f(b).reshape(rows, cols).T.reshape(-1)


def bmm(a, b, batch, m, n, p):
    a3 = _f(a).reshape(batch, m, n)
    b3 = _f(b).reshape(batch, n, p)
    out = np.zeros((batch, m, p))
    for t in range(batch):  # explicit loop: the reference should not depend on BLAS batching
        out[t] = a3[t] @ b3[t]
    return out.reshape(-1)


def bmm_nt(a, b, batch, m, n, p):
    """a (batch, m, n) times the transpose of b (batch, p, n): (batch, m, p)."""
    b3 = _f(b).reshape(batch, p, n)
    return bmm(a, np.ascontiguousarray(np.swapaxes(b3, 1, 2)).reshape(-1), batch, m, n, p)


def bmm_tn(a, b, batch, m, n, p):
    """The transpose of a (batch, n, m) times b (batch, n, p): (batch, m, p)."""
    a3 = _f(a).reshape(batch, n, m)
    return bmm(np.ascontiguousarray(np.swapaxes(a3, 1, 2)).reshape(-1), b, batch, m, n, p)


# -- indexing ----------------------------------------------------------------------------
def gather_vec(vec, n, indices, k):
    v = _f(vec)
    return np.array([v[i] if i < n else 0.0 for i in indices], dtype=F64)


def gather_rows(mat, rows, cols, indices, k):
    m = _f(mat).reshape(rows, cols)
    out = np.zeros((k, cols))
    for r, i in enumerate(indices):
        if i < rows:
            out[r] = m[i]
    return out.reshape(-1)


def scatter_add(x, values, n, indices, k):
    out = _f(x).copy()
    v = _f(values)
    for j, i in enumerate(indices):
        if i < n:
            out[i] += v[j]
    return out


def scatter_add_row(mat, row_vec, rows, cols, i):
    out = _f(mat).reshape(rows, cols).copy()
    if i < rows:
        out[i] += _f(row_vec)
    return out.reshape(-1)


def scatter_add_rows(mat, values, rows, cols, indices, k):
    out = _f(mat).reshape(rows, cols).copy()
    v = _f(values).reshape(k, cols)
    for r, i in enumerate(indices):
        if i < rows:
            out[i] += v[r]
    return out.reshape(-1)


# -- fused rows --------------------------------------------------------------------------
def softmax_rows(x, rows, cols):
    x2 = _f(x).reshape(rows, cols)
    if x2.size == 0:
        return x2.reshape(-1).copy()
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(x2 - x2.max(axis=1, keepdims=True))
        return (e / e.sum(axis=1, keepdims=True)).reshape(-1)


def softmax_rows_bwd(y, dy, rows, cols):
    """dx = y * (dy - sum(dy * y, axis=1))."""
    y2, d2 = _f(y).reshape(rows, cols), _f(dy).reshape(rows, cols)
    return (y2 * (d2 - (d2 * y2).sum(axis=1, keepdims=True))).reshape(-1)


def log_softmax_rows(x, rows, cols):
    x2 = _f(x).reshape(rows, cols)
    if x2.size == 0:
        return x2.reshape(-1).copy()
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        m = x2.max(axis=1, keepdims=True)
        return (x2 - m - np.log(np.exp(x2 - m).sum(axis=1, keepdims=True))).reshape(-1)


def log_softmax_rows_bwd(y, dy, rows, cols):
    """dx = dy - exp(y) * sum(dy, axis=1)."""
    y2, d2 = _f(y).reshape(rows, cols), _f(dy).reshape(rows, cols)
    return (d2 - np.exp(y2) * d2.sum(axis=1, keepdims=True)).reshape(-1)
