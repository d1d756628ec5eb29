"""CPU kernels of the normalization: layer_norm, batch_norm (training and inference) and their backward passes.

Vectorised NumPy over blocks of rows (layer norm) or of batch items (batch norm) of about 1 MiB, so
the several elementwise passes of a block run in the L2 cache and each input is read from memory
once per pass over the data (layer norm: once; batch norm: twice for the statistics, once more to
normalize). Sums are float32 (NumPy's pairwise sums and einsum's fixed loops) within a block and
float64 across blocks, in block order: the order is fixed by the shape, so every result is bitwise
repeatable.

Statistics in float32 can overflow (|x| near 1e19 and beyond: the squares) or lose digits to
underflow (|x - mean| below 2^-63): a row or channel whose sum of squares is not finite or is
below 2^-60 is computed again entirely in float64, which covers every float32 input. So constant
rows (variance 0) and rows with inf or NaN take the float64 path too; it gives the same NaNs.
"""

from __future__ import annotations

import numpy as np

F32, F64 = np.float32, np.float64
_BLOCK_BYTES = 1 << 20
_SMALL = 2.0**-60

__all__ = ["layer_norm", "layer_norm_bwd", "batch_norm", "batch_norm_bwd", "batch_norm_infer"]


def _blocks(total: int, item_elems: int):
    """[i, j) ranges over ``total`` items of ``item_elems`` float32 each, about _BLOCK_BYTES per range."""
    step = max(1, _BLOCK_BYTES // max(4 * item_elems, 1))
    for i in range(0, total, step):
        yield i, min(total, i + step)


def _suspect(q) -> np.ndarray:
    """Indices of the groups whose float32 sum of squares overflowed, is NaN or is near underflow."""
    return np.flatnonzero(~(q >= _SMALL) | ~np.isfinite(q))


def _moments64(groups):
    """Float64 mean, biased variance and centred values of each row of a 2-D float32 array."""
    g = groups.astype(F64)
    n = g.shape[1]
    mu = g.sum(axis=1) / n
    d = g - mu[:, None]
    return mu, np.einsum("ij,ij->i", d, d) / n, d


# -- layer norm -----------------------------------------------------------------------------------------
def layer_norm(x, gamma, beta, rows, cols, eps):
    y = np.empty(rows * cols, F32)
    mean, var = np.empty(rows, F32), np.empty(rows, F32)
    if cols == 0:
        mean.fill(np.nan)
        var.fill(np.nan)
        return y, mean, var
    x2, y2 = x.reshape(rows, cols), y.reshape(rows, cols)
    with np.errstate(all="ignore"):
        for i, j in _blocks(rows, cols):
            xc, yc = x2[i:j], y2[i:j]
            mu = (np.add.reduce(xc, axis=1).astype(F64) / cols).astype(F32)
            np.subtract(xc, mu[:, None], out=yc)
            q = np.einsum("ij,ij->i", yc, yc)
            v = q.astype(F64) / cols
            yc *= (1.0 / np.sqrt(v + eps)).astype(F32)[:, None]
            if gamma is not None:
                yc *= gamma
            if beta is not None:
                yc += beta
            bad = _suspect(q)
            if bad.size:
                mu64, v64, d = _moments64(xc[bad])
                yb = d * (1.0 / np.sqrt(v64 + eps))[:, None]
                if gamma is not None:
                    yb *= gamma
                if beta is not None:
                    yb += beta
                yc[bad], mu[bad], v[bad] = yb, mu64, v64
            mean[i:j], var[i:j] = mu, v
    return y, mean, var


def layer_norm_bwd(x, gamma, mean, var, dy, rows, cols, eps):
    dx = np.empty(rows * cols, F32)
    dgamma, dbeta = np.zeros(cols, F64), np.zeros(cols, F64)
    if rows * cols == 0:
        return dx, dgamma.astype(F32), dbeta.astype(F32)
    x2, dy2, dx2 = x.reshape(rows, cols), dy.reshape(rows, cols), dx.reshape(rows, cols)
    with np.errstate(all="ignore"):
        r_all = (1.0 / np.sqrt(var.astype(F64) + eps)).astype(F32)
        for i, j in _blocks(rows, cols):
            xc, dyc, dxc = x2[i:j], dy2[i:j], dx2[i:j]
            r = r_all[i:j, None]
            xhat = xc - mean[i:j, None]
            xhat *= r
            dgamma += np.einsum("ij,ij->j", dyc, xhat)
            dbeta += np.add.reduce(dyc, axis=0)
            gdy = dyc * gamma if gamma is not None else dyc
            m1 = (np.add.reduce(gdy, axis=1).astype(F64) / cols).astype(F32)
            m2 = (np.einsum("ij,ij->i", gdy, xhat).astype(F64) / cols).astype(F32)
            # dx = r (g dy - mean(g dy) - xhat mean(g dy xhat))
            xhat *= m2[:, None]
            np.subtract(gdy, xhat, out=dxc)
            dxc -= m1[:, None]
            dxc *= r
    return dx, dgamma.astype(F32), dbeta.astype(F32)


# -- batch norm -----------------------------------------------------------------------------------------
def _per_channel(v):
    return np.asarray(v, dtype=F32)[None, :, None]


def batch_norm(x, gamma, beta, batch, channels, inner, eps):
    n = batch * inner
    y = np.empty(batch * channels * inner, F32)
    if n == 0 or channels == 0:
        return y, np.full(channels, np.nan, F32), np.full(channels, np.nan, F32)
    x3, y3 = x.reshape(batch, channels, inner), y.reshape(batch, channels, inner)
    blocks = list(_blocks(batch, channels * inner))
    with np.errstate(all="ignore"):
        s = np.zeros(channels, F64)
        for i, j in blocks:
            s += np.add.reduce(x3[i:j], axis=(0, 2))
        mu = (s / n).astype(F32)
        mu3 = _per_channel(mu)
        q = np.zeros(channels, F64)
        for i, j in blocks:
            d = np.subtract(x3[i:j], mu3, out=y3[i:j])  # y as scratch: rewritten below
            q += np.einsum("bci,bci->c", d, d)
        v = q / n
        r = 1.0 / np.sqrt(v + eps)
        rg = _per_channel(r if gamma is None else r * gamma)
        for i, j in blocks:
            yc = np.subtract(x3[i:j], mu3, out=y3[i:j])
            yc *= rg
            if beta is not None:
                yc += _per_channel(beta)
        for c in _suspect(q):
            mu64, v64, d = _moments64(x3[:, c, :].reshape(1, n))
            yb = d * (1.0 / np.sqrt(v64 + eps))
            if gamma is not None:
                yb *= gamma[c]
            if beta is not None:
                yb += beta[c]
            y3[:, c, :] = yb.reshape(batch, inner)
            mu[c], v[c] = mu64[0], v64[0]
    return y, mu, v.astype(F32)


def batch_norm_bwd(x, gamma, mean, var, dy, batch, channels, inner, eps):
    n = batch * inner
    dx = np.empty(batch * channels * inner, F32)
    if n == 0 or channels == 0:
        return dx, np.zeros(channels, F32), np.zeros(channels, F32)
    x3, dy3, dx3 = (a.reshape(batch, channels, inner) for a in (x, dy, dx))
    blocks = list(_blocks(batch, channels * inner))
    with np.errstate(all="ignore"):
        r = 1.0 / np.sqrt(var.astype(F64) + eps)
        mu3, r3 = _per_channel(mean), _per_channel(r)
        s1, s2 = np.zeros(channels, F64), np.zeros(channels, F64)
        for i, j in blocks:
            xhat = np.subtract(x3[i:j], mu3, out=dx3[i:j])  # dx as scratch: rewritten below
            xhat *= r3
            s1 += np.add.reduce(dy3[i:j], axis=(0, 2))
            s2 += np.einsum("bci,bci->c", dy3[i:j], xhat)
        # dx = g r (dy - mean(dy) - xhat mean(dy xhat)): gamma is constant over a channel
        m1, m2 = _per_channel(s1 / n), _per_channel(s2 / n)
        k3 = _per_channel(r if gamma is None else r * gamma)
        for i, j in blocks:
            t = np.subtract(x3[i:j], mu3, out=dx3[i:j])
            t *= r3
            t *= m2
            np.subtract(dy3[i:j], t, out=t)
            t -= m1
            t *= k3
    return dx, s2.astype(F32), s1.astype(F32)


def batch_norm_infer(x, mean, var, gamma, beta, batch, channels, inner, eps):
    y = np.empty(batch * channels * inner, F32)
    if y.size == 0:
        return y
    x3, y3 = x.reshape(batch, channels, inner), y.reshape(batch, channels, inner)
    with np.errstate(all="ignore"):
        mu3 = _per_channel(mean)
        r = 1.0 / np.sqrt(var.astype(F64) + eps)
        rg3 = _per_channel(r if gamma is None else r * gamma)  # r gamma rounded once: still the direct form
        for i, j in _blocks(batch, channels * inner):
            yc = np.subtract(x3[i:j], mu3, out=y3[i:j])
            yc *= rg3
            if beta is not None:
                yc += _per_channel(beta)
    return y
