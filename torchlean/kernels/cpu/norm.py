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
``parallel.parts`` splits spread groups or chunks over Numba's threads; smaller ones run on the
calling thread (a parallel region costs a few microseconds). The splits run as tasks (tasks.py:
the body compiles once, as a cached callback, instead of again in a parallel region of its own);
batch norm runs its task on either path (part c = channel c), layer norm its njit loop when whole.
Each group or chunk is computed by the same code whatever thread runs it, so the bits never depend
on the thread count or on the path.

layer_norm: per row, mean and variance by two passes over the row (in L1), y = (x - mu) r g + b.
layer_norm_bwd: dx = r (g dy - mean(g dy) - xhat mean(g dy xhat)), xhat from the given mean, var.
batch_norm: per channel, the layer norm's computation over the channel's batch * inner elements
(two passes for the statistics, the channel stays in cache; a third writes y).
batch_norm_bwd: per channel, one pass for sum(dy) and sum(dy xhat), a second writes dx.
"""

from __future__ import annotations

import math

import numpy as np
from numba import carray, njit

from . import tasks
from .tasks import float_bits, pack_f32
from .parallel import parts as _parts

F32, F64 = np.float32, np.float64
_CHUNK_ELEMS = 1 << 14  # layer_norm_bwd: rows per partial column sum ~ this many elements
# Elements per thread that pay for a parallel region (parallel.parts): Numba's OpenMP layer starts
# one in a few microseconds, so even a small model's layer norms and batch norms gain from a split.
_MIN_WORK = 1 << 14
_RA = {"reassoc", "contract"}  # sums vectorize; never assumes finite values

__all__ = ["layer_norm", "layer_norm_bwd", "batch_norm", "batch_norm_bwd", "batch_norm_infer", "running_stat_update"]

_ONE = np.ones(1, F32)  # stands for an absent gamma / beta (never read)


def _f32(*arrays) -> bool:
    """Whether the arrays are the runtime's (C-contiguous float32), which tasks read through their addresses."""
    return all(a.dtype == F32 and a.flags.c_contiguous for a in arrays)


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


# Part i of t: the rows [rows*i//t, rows*(i+1)//t). A task (tasks.py; see batch norm's below). Words:
# rows, cols, has_g, has_b, eps, t, then the arrays x, g, b, y, mean, var (address, size).
def _ln_task(i, p):
    a = carray(p, 18)
    rows, cols, has_g, has_b, t = a[0], a[1], a[2] != 0, a[3] != 0, a[5]
    _ln_rows(tasks.as_f32(a[6], (rows, cols)), tasks.as_f32(a[8], a[9]), tasks.as_f32(a[10], a[11]), has_g, has_b,
             tasks.as_float(a[4]), tasks.as_f32(a[12], (rows, cols)), tasks.as_f32(a[14], rows),
             tasks.as_f32(a[16], rows), rows * i // t, rows * (i + 1) // t)


_LN_TASK = tasks.Task(_ln_task)


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
    if width > 1 and _f32(x, g, b):
        t = min(rows, 8 * width)  # 8 parts a thread: rows of uneven cost even out
        words = pack_f32([rows, cols, gamma is not None, beta is not None, float_bits(eps), t], x, g, b, y, mean, var)
        tasks.run(_LN_TASK, words, t, on_pool=True)
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


# Part c: chunk c's rows. A task (tasks.py; see batch norm's below). Words: rows, cols, has_g, eps,
# chunks, step, the address of parts (float64), then the arrays x, g, mean, var, dy, dx (address, size).
def _ln_bwd_task(c, p):
    a = carray(p, 19)
    rows, cols, has_g, eps, step = a[0], a[1], a[2] != 0, tasks.as_float(a[3]), a[5]
    parts = tasks.as_i64(a[6], (a[4], 2, cols)).view(np.float64)
    _ln_bwd_chunk(tasks.as_f32(a[7], (rows, cols)), tasks.as_f32(a[9], a[10]), has_g, tasks.as_f32(a[11], rows),
                  tasks.as_f32(a[13], rows), tasks.as_f32(a[15], (rows, cols)), eps, tasks.as_f32(a[17], (rows, cols)),
                  parts[c, 0], parts[c, 1], c * step, min(rows, (c + 1) * step))


_LN_BWD_TASK = tasks.Task(_ln_bwd_task)


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
    if _parts(rows * cols, chunks, _MIN_WORK) > 1 and _f32(x, g, mean, var, dy):
        words = pack_f32([rows, cols, gamma is not None, float_bits(eps), chunks, step, parts.ctypes.data], x, g, mean,
                         var, dy, dx)
        tasks.run(_LN_BWD_TASK, words, chunks, on_pool=True)
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


# The batch norm kernels run as tasks (tasks.py), part c = channel c, on the pool or on the caller's
# thread: each compiles once, as a cached callback, where a parallel wrapper of its own would compile
# the channel kernel again (and the serial loop once more). The channel kernels stay njit functions
# called from the body, so that their sums keep their fastmath flags; the index is an int64 on every
# path, so each compiles once. Words: batch, channels, inner, has_g, has_b, eps, then the arrays.
@njit(inline="always", nogil=True)
def _bn_words(a):
    return (a[0], a[1], a[2]), a[3] != 0, a[4] != 0, tasks.as_float(a[5])


@njit(inline="always", nogil=True)
def _bn_array(a, j, shape):
    """The j-th array of a batch norm task's words."""
    return tasks.as_f32(a[6 + 2 * j], shape)


def _bn_task(i, p):
    a = carray(p, 18)
    s, has_g, has_b, eps = _bn_words(a)
    _bn_channel(_bn_array(a, 0, s), _bn_array(a, 1, a[9]), _bn_array(a, 2, a[11]), has_g, has_b, eps,
                _bn_array(a, 3, s), _bn_array(a, 4, a[1]), _bn_array(a, 5, a[1]), i)


def _bn_bwd_task(i, p):
    a = carray(p, 22)
    s, has_g, _, eps = _bn_words(a)
    _bn_bwd_channel(_bn_array(a, 0, s), _bn_array(a, 1, a[9]), has_g, _bn_array(a, 2, a[1]), _bn_array(a, 3, a[1]),
                    _bn_array(a, 4, s), eps, _bn_array(a, 5, s), _bn_array(a, 6, a[1]), _bn_array(a, 7, a[1]), i)


def _bn_infer_task(i, p):
    a = carray(p, 18)
    s, has_g, has_b, eps = _bn_words(a)
    _bn_infer_channel(_bn_array(a, 0, s), _bn_array(a, 1, a[1]), _bn_array(a, 2, a[1]), _bn_array(a, 3, a[13]),
                      _bn_array(a, 4, a[15]), has_g, has_b, eps, _bn_array(a, 5, s), i)


_BN_TASK, _BN_BWD_TASK, _BN_INFER_TASK = tasks.Task(_bn_task), tasks.Task(_bn_bwd_task), tasks.Task(_bn_infer_task)


def _bn_run(task, serial, size, channels, words, arrays, args) -> None:
    """task over the channels (on the pool when parallel.parts splits size elements), or, for arrays
    that are not the runtime's (C-contiguous float32), serial(*args) on the caller's thread."""
    if not _f32(*arrays):
        serial(*args)
        return
    tasks.run(task, pack_f32(words, *arrays), channels, on_pool=_parts(size, channels, _MIN_WORK) > 1)


def batch_norm(x, gamma, beta, batch, channels, inner, eps):
    n = batch * inner
    y = np.empty(batch * channels * inner, F32)
    if n == 0 or channels == 0:
        return y, np.full(channels, np.nan, F32), np.full(channels, np.nan, F32)
    mean, var = np.empty(channels, F32), np.empty(channels, F32)
    g, b = _ONE if gamma is None else gamma, _ONE if beta is None else beta
    args = (x.reshape(batch, channels, inner), g, b, gamma is not None, beta is not None, float(eps),
            y.reshape(batch, channels, inner), mean, var)
    words = [batch, channels, inner, gamma is not None, beta is not None, float_bits(eps)]
    _bn_run(_BN_TASK, _bn_serial, y.size, channels, words, (x, g, b, y, mean, var), args)
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


def batch_norm_bwd(x, gamma, mean, var, dy, batch, channels, inner, eps):
    n = batch * inner
    dx = np.empty(batch * channels * inner, F32)
    if n == 0 or channels == 0:
        return dx, np.zeros(channels, F32), np.zeros(channels, F32)
    dgamma, dbeta = np.empty(channels, F32), np.empty(channels, F32)
    shape = (batch, channels, inner)
    g = _ONE if gamma is None else gamma
    args = (x.reshape(shape), g, gamma is not None, mean, var, dy.reshape(shape), float(eps), dx.reshape(shape),
            dgamma, dbeta)
    words = [batch, channels, inner, gamma is not None, False, float_bits(eps)]
    _bn_run(_BN_BWD_TASK, _bn_bwd_serial, dx.size, channels, words, (x, g, mean, var, dy, dx, dgamma, dbeta), args)
    return dx, dgamma, dbeta


@njit(cache=True, error_model="numpy", fastmath=_RA)
def _bn_infer_channel(x3, mean, var, g, b, has_g, has_b, eps, y3, c):
    _bn_apply(x3, np.float64(mean[c]), np.float64(var[c]), g, b, has_g, has_b, eps, y3, c)


@njit(cache=True, error_model="numpy")
def _bn_infer_serial(x3, mean, var, g, b, has_g, has_b, eps, y3):
    for c in range(x3.shape[1]):
        _bn_infer_channel(x3, mean, var, g, b, has_g, has_b, eps, y3, c)


def batch_norm_infer(x, mean, var, gamma, beta, batch, channels, inner, eps):
    y = np.empty(batch * channels * inner, F32)
    if y.size == 0:
        return y
    shape = (batch, channels, inner)
    g, b = _ONE if gamma is None else gamma, _ONE if beta is None else beta
    args = (x.reshape(shape), mean, var, g, b, gamma is not None, beta is not None, float(eps), y.reshape(shape))
    words = [batch, channels, inner, gamma is not None, beta is not None, float_bits(eps)]
    _bn_run(_BN_INFER_TASK, _bn_infer_serial, y.size, channels, words, (x, mean, var, g, b, y), args)
    return y


# -- running statistics ---------------------------------------------------------------------------------
def running_stat_update(running, stat, n, keep, momentum, factor):
    # float32 NumPy arithmetic, one rounding per operation, in the order of the primitive's formula.
    with np.errstate(all="ignore"):
        return running * F32(keep) + F32(momentum) * (stat * F32(factor))
