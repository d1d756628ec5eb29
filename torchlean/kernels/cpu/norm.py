"""CPU kernels of the normalization: layer_norm, batch_norm (training and inference) and their backward passes.

Numba loops (``cache=True``) over groups: a row of layer norm, a channel of batch norm. Every
statistic is accumulated in float64 from the exact float32 inputs (float32 squares and products
are exact in float64; nothing overflows or underflows there for any float32 input), so no group
needs a second, safer pass, and inf/NaN follow IEEE rules (the spec's NaNs). The per-element
results are computed in float64 and rounded once to float32. Far inside the contracts
(contract/norm.py derives them for float32 arithmetic, gamma(n) sums).

Determinism: a group's statistics are accumulated by one thread, in an order fixed by the compiled
code (the sums are compiled with ``fastmath={"reassoc"}`` so that they vectorize; reassociation
never assumes finite values). Column sums across rows (layer_norm_bwd's dgamma and dbeta) are
partial sums over fixed chunks of _CHUNK_ELEMS elements' rows, added in chunk order. Calls that
``parallel.parts`` splits spread groups or chunks over Numba's threads with ``prange``; smaller
ones run on the calling thread (a parallel region costs a few microseconds). Each group or chunk is
computed by the same code whatever thread runs it, so the bits never depend on the thread count
or on the path.

layer_norm: per row, mean and variance by two passes over the row (in L1), y = (x - mu) r g + b.
layer_norm_bwd: dx = r (g dy - mean(g dy) - xhat mean(g dy xhat)), xhat from the given mean, var.
batch_norm: per channel, the layer norm's computation over the channel's batch * inner elements
(two passes for the statistics, the channel stays in cache; a third writes y).
batch_norm_bwd: per channel, one pass for sum(dy) and sum(dy xhat), a second writes dx.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from .parallel import parts as _parts

F32, F64 = np.float32, np.float64
_CHUNK_ELEMS = 1 << 14  # layer_norm_bwd: rows per partial column sum ~ this many elements
# Elements per thread that pay for a parallel region (parallel.parts): Numba's OpenMP layer starts
# one in a few microseconds, so even a small model's layer norms and batch norms gain from a split.
_MIN_WORK = 1 << 14
_RA = {"reassoc", "contract"}  # sums vectorize; never assumes finite values

__all__ = ["layer_norm", "layer_norm_bwd", "batch_norm", "batch_norm_bwd", "batch_norm_infer", "running_stat_update"]

_ONE = np.ones(1, F32)  # stands for an absent gamma / beta (never read)


# -- layer norm -----------------------------------------------------------------------------------------
@njit(inline="always", error_model="numpy", fastmath=_RA)
def _ln_row(xr, g, b, has_g, has_b, eps, yr):
    n = xr.size
    s = 0.0
    for j in range(n):
        s += np.float64(xr[j])
    mu = s / n
    q = 0.0
    for j in range(n):
        d = np.float64(xr[j]) - mu
        q += d * d
    v = q / n
    r = 1.0 / math.sqrt(v + eps)
    if has_g and has_b:
        for j in range(n):
            yr[j] = np.float32((np.float64(xr[j]) - mu) * r * np.float64(g[j]) + np.float64(b[j]))
    elif has_g:
        for j in range(n):
            yr[j] = np.float32((np.float64(xr[j]) - mu) * r * np.float64(g[j]))
    elif has_b:
        for j in range(n):
            yr[j] = np.float32((np.float64(xr[j]) - mu) * r + np.float64(b[j]))
    else:
        for j in range(n):
            yr[j] = np.float32((np.float64(xr[j]) - mu) * r)
    return mu, v


@njit(cache=True, error_model="numpy", fastmath=_RA)
def _ln_rows(x2, g, b, has_g, has_b, eps, y2, mean, var, r0, r1):
    for i in range(r0, r1):
        mu, v = _ln_row(x2[i], g, b, has_g, has_b, eps, y2[i])
        mean[i] = np.float32(mu)
        var[i] = np.float32(v)


@njit(cache=True, parallel=True, error_model="numpy")
def _ln_par(x2, g, b, has_g, has_b, eps, y2, mean, var, tasks):
    rows = x2.shape[0]
    for t in prange(tasks):
        _ln_rows(x2, g, b, has_g, has_b, eps, y2, mean, var, rows * t // tasks, rows * (t + 1) // tasks)


def layer_norm(x, gamma, beta, rows, cols, eps):
    y = np.empty(rows * cols, F32)
    mean, var = np.empty(rows, F32), np.empty(rows, F32)
    if cols == 0:
        mean.fill(np.nan)
        var.fill(np.nan)
        return y, mean, var
    if rows == 0:
        return y, mean, var
    x2, y2 = x.reshape(rows, cols), y.reshape(rows, cols)
    g = _ONE if gamma is None else gamma
    b = _ONE if beta is None else beta
    args = (x2, g, b, gamma is not None, beta is not None, float(eps), y2, mean, var)
    width = _parts(rows * cols, rows, _MIN_WORK)
    if width > 1:
        _ln_par(*args, min(rows, 8 * width))  # 8 tasks a thread: rows of uneven cost even out
    else:
        _ln_rows(*args, 0, rows)
    return y, mean, var


@njit(cache=True, error_model="numpy", fastmath=_RA)
def _ln_bwd_chunk(x2, g, has_g, mean, var, dy2, eps, dx2, dg, db, r0, r1):
    """Rows [r0, r1): dx, and this chunk's column sums dg += dy xhat, db += dy (float64, row order)."""
    n = x2.shape[1]
    inv_n = 1.0 / n
    for i in range(r0, r1):
        xr, dyr, dxr = x2[i], dy2[i], dx2[i]
        mu = np.float64(mean[i])
        r = 1.0 / math.sqrt(np.float64(var[i]) + eps)
        s1 = 0.0
        s2 = 0.0
        for j in range(n):
            dyv = np.float64(dyr[j])
            xh = (np.float64(xr[j]) - mu) * r
            gdy = dyv * np.float64(g[j]) if has_g else dyv
            s1 += gdy
            s2 += gdy * xh
            dg[j] += dyv * xh
            db[j] += dyv
        m1 = s1 * inv_n
        m2 = s2 * inv_n
        for j in range(n):
            xh = (np.float64(xr[j]) - mu) * r
            gdy = np.float64(dyr[j]) * np.float64(g[j]) if has_g else np.float64(dyr[j])
            dxr[j] = np.float32(r * (gdy - m1 - xh * m2))


@njit(cache=True, error_model="numpy")
def _ln_bwd_serial(x2, g, has_g, mean, var, dy2, eps, dx2, parts, step):
    rows = x2.shape[0]
    for c in range(parts.shape[0]):
        _ln_bwd_chunk(x2, g, has_g, mean, var, dy2, eps, dx2, parts[c, 0], parts[c, 1],
                      c * step, min(rows, (c + 1) * step))


@njit(cache=True, parallel=True, error_model="numpy")
def _ln_bwd_par(x2, g, has_g, mean, var, dy2, eps, dx2, parts, step):
    rows = x2.shape[0]
    for c in prange(parts.shape[0]):
        _ln_bwd_chunk(x2, g, has_g, mean, var, dy2, eps, dx2, parts[c, 0], parts[c, 1],
                      c * step, min(rows, (c + 1) * step))


@njit(cache=True, error_model="numpy")
def _sum_parts(parts, dgamma, dbeta):
    """dgamma, dbeta = the chunks' partial column sums added in chunk order, rounded once."""
    cols = parts.shape[2]
    for j in range(cols):
        a = 0.0
        b = 0.0
        for c in range(parts.shape[0]):
            a += parts[c, 0, j]
            b += parts[c, 1, j]
        dgamma[j] = np.float32(a)
        dbeta[j] = np.float32(b)


def layer_norm_bwd(x, gamma, mean, var, dy, rows, cols, eps):
    dx = np.empty(rows * cols, F32)
    dgamma, dbeta = np.zeros(cols, F32), np.zeros(cols, F32)
    if rows * cols == 0:
        return dx, dgamma, dbeta
    step = max(1, _CHUNK_ELEMS // cols)  # rows per chunk: fixed by the shape, never by the threads
    chunks = -(-rows // step)
    parts = np.zeros((chunks, 2, cols), F64)
    g = _ONE if gamma is None else gamma
    args = (x.reshape(rows, cols), g, gamma is not None, mean, var, dy.reshape(rows, cols), float(eps),
            dx.reshape(rows, cols), parts, step)
    if _parts(rows * cols, chunks, _MIN_WORK) > 1:
        _ln_bwd_par(*args)
    else:
        _ln_bwd_serial(*args)
    _sum_parts(parts, dgamma, dbeta)
    return dx, dgamma, dbeta


# -- batch norm -----------------------------------------------------------------------------------------
@njit(cache=True, error_model="numpy", fastmath=_RA)
def _bn_stats(x3, c):
    """(mean, biased var) of channel c in float64: two passes (the channel is in cache for the second)."""
    batch, inner = x3.shape[0], x3.shape[2]
    s = 0.0
    for bi in range(batch):
        row = x3[bi, c]
        for j in range(inner):
            s += np.float64(row[j])
    mu = s / (batch * inner)
    q = 0.0
    for bi in range(batch):
        row = x3[bi, c]
        for j in range(inner):
            d = np.float64(row[j]) - mu
            q += d * d
    return mu, q / (batch * inner)


@njit(inline="always", error_model="numpy", fastmath=_RA)
def _bn_apply(x3, mu, v, g, b, has_g, has_b, eps, y3, c):
    """y = ((x - mu) r) g + b for channel c, r = 1/sqrt(v + eps), in float64, rounded once."""
    r = 1.0 / math.sqrt(v + eps)
    rg = r * np.float64(g[c]) if has_g else r
    bb = np.float64(b[c]) if has_b else 0.0
    for bi in range(x3.shape[0]):
        row, out = x3[bi, c], y3[bi, c]
        for j in range(x3.shape[2]):
            out[j] = np.float32((np.float64(row[j]) - mu) * rg + bb)


@njit(cache=True, error_model="numpy", fastmath=_RA)
def _bn_channel(x3, g, b, has_g, has_b, eps, y3, mean, var, c):
    mu, v = _bn_stats(x3, c)
    mean[c] = np.float32(mu)
    var[c] = np.float32(v)
    _bn_apply(x3, mu, v, g, b, has_g, has_b, eps, y3, c)


@njit(cache=True, error_model="numpy")
def _bn_serial(x3, g, b, has_g, has_b, eps, y3, mean, var):
    for c in range(x3.shape[1]):
        _bn_channel(x3, g, b, has_g, has_b, eps, y3, mean, var, c)


@njit(cache=True, parallel=True, error_model="numpy")
def _bn_par(x3, g, b, has_g, has_b, eps, y3, mean, var):
    for c in prange(x3.shape[1]):
        _bn_channel(x3, g, b, has_g, has_b, eps, y3, mean, var, c)


def batch_norm(x, gamma, beta, batch, channels, inner, eps):
    n = batch * inner
    y = np.empty(batch * channels * inner, F32)
    if n == 0 or channels == 0:
        return y, np.full(channels, np.nan, F32), np.full(channels, np.nan, F32)
    mean, var = np.empty(channels, F32), np.empty(channels, F32)
    args = (x.reshape(batch, channels, inner), _ONE if gamma is None else gamma, _ONE if beta is None else beta,
            gamma is not None, beta is not None, float(eps), y.reshape(batch, channels, inner), mean, var)
    if _parts(y.size, channels, _MIN_WORK) > 1:
        _bn_par(*args)
    else:
        _bn_serial(*args)
    return y, mean, var


@njit(cache=True, error_model="numpy", fastmath=_RA)
def _bn_bwd_channel(x3, g, has_g, mean, var, dy3, eps, dx3, dgamma, dbeta, c):
    batch, inner = x3.shape[0], x3.shape[2]
    mu = np.float64(mean[c])
    r = 1.0 / math.sqrt(np.float64(var[c]) + eps)
    s1 = 0.0
    s2 = 0.0
    for bi in range(batch):
        row, drow = x3[bi, c], dy3[bi, c]
        for j in range(inner):
            dyv = np.float64(drow[j])
            s1 += dyv
            s2 += dyv * ((np.float64(row[j]) - mu) * r)
    dgamma[c] = np.float32(s2)
    dbeta[c] = np.float32(s1)
    n = batch * inner
    m1 = s1 / n
    m2 = s2 / n
    k = r * np.float64(g[c]) if has_g else r  # gamma is constant over a channel
    for bi in range(batch):
        row, drow, out = x3[bi, c], dy3[bi, c], dx3[bi, c]
        for j in range(inner):
            xh = (np.float64(row[j]) - mu) * r
            out[j] = np.float32(k * (np.float64(drow[j]) - m1 - xh * m2))


@njit(cache=True, error_model="numpy")
def _bn_bwd_serial(x3, g, has_g, mean, var, dy3, eps, dx3, dgamma, dbeta):
    for c in range(x3.shape[1]):
        _bn_bwd_channel(x3, g, has_g, mean, var, dy3, eps, dx3, dgamma, dbeta, c)


@njit(cache=True, parallel=True, error_model="numpy")
def _bn_bwd_par(x3, g, has_g, mean, var, dy3, eps, dx3, dgamma, dbeta):
    for c in prange(x3.shape[1]):
        _bn_bwd_channel(x3, g, has_g, mean, var, dy3, eps, dx3, dgamma, dbeta, c)


def batch_norm_bwd(x, gamma, mean, var, dy, batch, channels, inner, eps):
    n = batch * inner
    dx = np.empty(batch * channels * inner, F32)
    if n == 0 or channels == 0:
        return dx, np.zeros(channels, F32), np.zeros(channels, F32)
    dgamma, dbeta = np.empty(channels, F32), np.empty(channels, F32)
    shape = (batch, channels, inner)
    args = (x.reshape(shape), _ONE if gamma is None else gamma, gamma is not None, mean, var, dy.reshape(shape),
            float(eps), dx.reshape(shape), dgamma, dbeta)
    if _parts(dx.size, channels, _MIN_WORK) > 1:
        _bn_bwd_par(*args)
    else:
        _bn_bwd_serial(*args)
    return dx, dgamma, dbeta


@njit(cache=True, error_model="numpy", fastmath=_RA)
def _bn_infer_channel(x3, mean, var, g, b, has_g, has_b, eps, y3, c):
    _bn_apply(x3, np.float64(mean[c]), np.float64(var[c]), g, b, has_g, has_b, eps, y3, c)


@njit(cache=True, error_model="numpy")
def _bn_infer_serial(x3, mean, var, g, b, has_g, has_b, eps, y3):
    for c in range(x3.shape[1]):
        _bn_infer_channel(x3, mean, var, g, b, has_g, has_b, eps, y3, c)


@njit(cache=True, parallel=True, error_model="numpy")
def _bn_infer_par(x3, mean, var, g, b, has_g, has_b, eps, y3):
    for c in prange(x3.shape[1]):
        _bn_infer_channel(x3, mean, var, g, b, has_g, has_b, eps, y3, c)


def batch_norm_infer(x, mean, var, gamma, beta, batch, channels, inner, eps):
    y = np.empty(batch * channels * inner, F32)
    if y.size == 0:
        return y
    shape = (batch, channels, inner)
    args = (x.reshape(shape), mean, var, _ONE if gamma is None else gamma, _ONE if beta is None else beta,
            gamma is not None, beta is not None, float(eps), y.reshape(shape))
    if _parts(y.size, channels, _MIN_WORK) > 1:
        _bn_infer_par(*args)
    else:
        _bn_infer_serial(*args)
    return y


# -- running statistics ---------------------------------------------------------------------------------
def running_stat_update(running, stat, n, keep, momentum, factor):
    # float32 NumPy arithmetic, one rounding per operation, in the order of the primitive's formula.
    with np.errstate(all="ignore"):
        return running * F32(keep) + F32(momentum) * (stat * F32(factor))
