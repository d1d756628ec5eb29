"""Float64 specs of the pooling: max_pool, avg_pool, smooth_max_pool and their backward passes.

Layout: flat (planes, *spatial) arrays, channels-first; pooling never mixes planes. For spatial
rank r, output p on axis i covers input positions p*stride_i - padding_i + k, k in [0, kernel_i),
and out_i = (spatial_i + 2 padding_i - kernel_i) // stride_i + 1.

The reference is built the plain way: ``window_table`` lists, for every output position, the
flat input position of every kernel offset in row-major order (-1 for padding), by enumerating
output and kernel coordinates with ``itertools.product``; every pool is then a computation over
the rows of that table, vectorized over planes. (The kernels never build such a table: they clip
index ranges per axis, so a bug in either shows up as a disagreement.)

Conventions (DESIGN.md):
- max_pool: padding is -inf and is never selected. Among the in-bounds positions in row-major
  order the winner is the first NaN if there is one, else the first position holding the maximum
  (so ties go to the first, -0 and +0 included, and an all -inf window picks its first position).
  A window entirely in padding gives -inf and has no winner (no gradient).
- avg_pool: sum of the in-bounds values / prod(kernel) (padding counts as 0 in the divisor:
  PyTorch's count_include_pad=True).
- smooth_max_pool: y = (m + log(sum_j exp(beta v_j - m))) / beta over the whole window, padding
  positions counting as v = 0, m = max_j beta v_j (NaN ignored); a term whose beta v_j equals m
  is exp(0) = 1 (so a window with +-inf gives +-inf, not NaN); a NaN anywhere gives NaN.
- smooth_max_pool_bwd: dx[q] = sum over windows w containing q of dy[w] exp(beta x[q] - beta y[w])
  (the exponent 0 when beta x[q] == beta y[w]); padding positions have no dx.
"""

from __future__ import annotations

import itertools
from functools import lru_cache

import numpy as np

__all__ = ["max_pool", "max_pool_bwd", "avg_pool", "avg_pool_bwd", "smooth_max_pool", "smooth_max_pool_bwd"]

F64 = np.float64


def out_dims(spatial, kernel, stride, padding) -> tuple[int, ...]:
    return tuple((n + 2 * p - k) // s + 1 for n, k, s, p in zip(spatial, kernel, stride, padding))


@lru_cache(maxsize=64)
def _window_table(spatial, kernel, stride, padding) -> np.ndarray:
    out = out_dims(spatial, kernel, stride, padding)
    rows = []
    for p in itertools.product(*[range(o) for o in out]):
        row = []
        for k in itertools.product(*[range(kk) for kk in kernel]):
            c = [pi * si - pdi + ki for pi, si, pdi, ki in zip(p, stride, padding, k)]
            if all(0 <= ci < ni for ci, ni in zip(c, spatial)):
                row.append(int(np.ravel_multi_index(c, spatial)))
            else:
                row.append(-1)
        rows.append(row)
    table = np.array(rows, dtype=np.int64).reshape(len(rows), int(np.prod(kernel)))
    table.setflags(write=False)
    return table


def window_table(spatial, kernel, stride, padding) -> np.ndarray:
    """(prod(out), prod(kernel)) int64: the flat in-plane input position of each kernel offset of
    each output (row-major in both), -1 for a padding position."""
    return _window_table(*(tuple(int(v) for v in a) for a in (spatial, kernel, stride, padding)))


def _planes(x, planes, n):
    return np.asarray(x, dtype=F64).reshape(planes, n)


def _gather(xp, table):
    """(planes, n_out, K) window values (0 at padding) and the (n_out, K) in-bounds mask."""
    valid = table >= 0
    vals = xp[:, np.where(valid, table, 0)] if xp.shape[1] else np.zeros(xp.shape[:1] + table.shape)
    return np.where(valid, vals, 0.0), valid


def _winners(x, planes, spatial, kernel, stride, padding):
    """(planes, n_out) flat in-plane index of each window's winner, -1 for an all-padding window."""
    table = window_table(spatial, kernel, stride, padding)
    xp = _planes(x, planes, int(np.prod(spatial)))
    vals, valid = _gather(xp, table)
    isnan = np.isnan(vals) & valid
    with np.errstate(invalid="ignore"):
        m = np.max(np.where(valid & ~isnan, vals, -np.inf), axis=2, keepdims=True)
        is_max = valid & ~isnan & (vals == m)
    pick = np.where(isnan.any(axis=2, keepdims=True), isnan, is_max)  # the first NaN, else the first max
    first = np.argmax(pick, axis=2)
    has = pick.any(axis=2)
    win = np.take_along_axis(np.broadcast_to(table, vals.shape), first[:, :, None], axis=2)[:, :, 0]
    return np.where(has, win, -1)


def max_pool(x, planes, spatial, kernel, stride, padding):
    xp = _planes(x, planes, int(np.prod(spatial)))
    win = _winners(x, planes, spatial, kernel, stride, padding)
    vals = np.take_along_axis(xp, np.maximum(win, 0), axis=1) if xp.shape[1] else np.zeros(win.shape)
    return np.where(win >= 0, vals, -np.inf).reshape(-1)


def max_pool_bwd(x, dy, planes, spatial, kernel, stride, padding):
    n = int(np.prod(spatial))
    win = _winners(x, planes, spatial, kernel, stride, padding)
    g = np.asarray(dy, dtype=F64).reshape(win.shape)
    dx = np.zeros((planes, n))
    for pl in range(planes):
        ok = win[pl] >= 0
        np.add.at(dx[pl], win[pl][ok], g[pl][ok])
    return dx.reshape(-1)


def avg_pool(x, planes, spatial, kernel, stride, padding):
    table = window_table(spatial, kernel, stride, padding)
    vals, _ = _gather(_planes(x, planes, int(np.prod(spatial))), table)
    return (vals.sum(axis=2) / table.shape[1]).reshape(-1)


def _scatter_windows(terms, table, planes, n):
    """dx (planes, n): terms (planes, n_out, K) added to the input position of each kernel offset."""
    dx = np.zeros((planes, n))
    valid = table >= 0
    for pl in range(planes):
        np.add.at(dx[pl], table[valid], terms[pl][valid])
    return dx.reshape(-1)


def avg_pool_bwd(dy, planes, spatial, kernel, stride, padding):
    table = window_table(spatial, kernel, stride, padding)
    g = np.asarray(dy, dtype=F64).reshape(planes, table.shape[0], 1)
    terms = np.broadcast_to(g / table.shape[1], (planes,) + table.shape)
    return _scatter_windows(terms, table, planes, int(np.prod(spatial)))


def smooth_max_pool(x, planes, spatial, kernel, stride, padding, beta):
    table = window_table(spatial, kernel, stride, padding)
    vals, _ = _gather(_planes(x, planes, int(np.prod(spatial))), table)  # padding: v = 0
    with np.errstate(invalid="ignore", over="ignore"):
        bv = beta * vals
        m = np.max(np.where(np.isnan(bv), -np.inf, bv), axis=2, keepdims=True)
        t = np.where(bv == m, 0.0, bv - m)
        s = np.sum(np.exp(t), axis=2)
        return ((m[:, :, 0] + np.log(s)) / beta).reshape(-1)


def smooth_max_pool_bwd(x, y, dy, planes, spatial, kernel, stride, padding, beta):
    table = window_table(spatial, kernel, stride, padding)
    n = int(np.prod(spatial))
    vals, _ = _gather(_planes(x, planes, n), table)
    by = beta * np.asarray(y, dtype=F64).reshape(planes, table.shape[0], 1)
    g = np.asarray(dy, dtype=F64).reshape(planes, table.shape[0], 1)
    with np.errstate(invalid="ignore", over="ignore"):
        bx = beta * vals
        d = np.where(bx == by, 0.0, bx - by)
        terms = g * np.exp(d)
    return _scatter_windows(terms, table, planes, n)
