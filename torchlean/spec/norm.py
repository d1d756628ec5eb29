"""Float64 specs of the normalization: layer_norm, batch_norm (training and inference) and their backward passes.

Layer norm normalizes each row of a (rows, cols) buffer; batch norm normalizes each channel of a
(batch, channels, inner) buffer over its batch * inner elements. Both use the biased variance
var = mean((x - mean)^2) and xhat = (x - mean) / sqrt(var + eps); y = xhat * gamma + beta, where a
missing gamma is 1 and a missing beta is 0. A group of no elements has mean and var NaN (the mean
of an empty set, DESIGN.md). The backward passes take mean and var as inputs (what the forward
returned) and are the VJP formulas evaluated with them:

    dx = r (g dy - mean(g dy) - xhat mean(g dy xhat)),  r = 1 / sqrt(var + eps)
    dgamma = sum(dy xhat),  dbeta = sum(dy)   (sums over the elements that share a gamma)

Everything here is plain float64 NumPy on reshaped views, written for reading, not speed.
"""

from __future__ import annotations

import numpy as np

F64 = np.float64

__all__ = ["layer_norm", "layer_norm_bwd", "batch_norm", "batch_norm_bwd", "batch_norm_infer", "running_stat_update"]


def _f(x):
    return np.asarray(x, dtype=F64)


def _moments(groups):
    """Mean and biased variance of each row of a 2-D float64 array (NaN for rows of no elements)."""
    k, n = groups.shape
    if n == 0:
        return np.full(k, np.nan), np.full(k, np.nan)
    mean = groups.sum(axis=1) / n
    var = ((groups - mean[:, None]) ** 2).sum(axis=1) / n
    return mean, var


def _affine(v, n):
    return np.ones(n) if v is None else _f(v)


def _channels_as_rows(a, batch, channels, inner):
    """(batch, channels, inner) -> (channels, batch * inner): each row holds one channel's elements."""
    return _f(a).reshape(batch, channels, inner).transpose(1, 0, 2).reshape(channels, batch * inner)


def _rows_as_channels(a, batch, channels, inner):
    return a.reshape(channels, batch, inner).transpose(1, 0, 2).reshape(-1)


def _normalize_rows(x2, mean, var, gamma, beta, eps):
    """y = (x - mean) / sqrt(var + eps) * gamma + beta with mean, var, gamma, beta given per row."""
    xhat = (x2 - mean[:, None]) / np.sqrt(var[:, None] + eps)
    return xhat * gamma[:, None] + beta[:, None]


def _vjp_rows(x2, gamma, mean, var, dy2, eps):
    """(dx, per-row-and-column dy * xhat) for rows normalized by their own mean and var; gamma
    already broadcast to the shape of x2."""
    n = x2.shape[1]
    r = 1.0 / np.sqrt(var + eps)
    xhat = (x2 - mean[:, None]) * r[:, None]
    gdy = gamma * dy2
    if n == 0:
        return np.zeros_like(x2), dy2 * xhat
    mean_gdy = gdy.sum(axis=1, keepdims=True) / n
    mean_gdy_xhat = (gdy * xhat).sum(axis=1, keepdims=True) / n
    dx = r[:, None] * (gdy - mean_gdy - xhat * mean_gdy_xhat)
    return dx, dy2 * xhat


# -- layer norm: rows of a (rows, cols) buffer ---------------------------------------------------------
def layer_norm(x, gamma, beta, rows, cols, eps):
    """(y, mean, var): each row normalized by its own mean and biased variance; gamma, beta per column."""
    with np.errstate(all="ignore"):
        x2 = _f(x).reshape(rows, cols)
        mean, var = _moments(x2)
        xhat = (x2 - mean[:, None]) / np.sqrt(var[:, None] + eps)
        y = xhat * _affine(gamma, cols) + (np.zeros(cols) if beta is None else _f(beta))
        return y.reshape(-1), mean, var


def layer_norm_bwd(x, gamma, mean, var, dy, rows, cols, eps):
    """(dx, dgamma, dbeta): the VJP of layer_norm at x, with the forward's mean and var given."""
    with np.errstate(all="ignore"):
        x2, dy2 = _f(x).reshape(rows, cols), _f(dy).reshape(rows, cols)
        g = np.broadcast_to(_affine(gamma, cols), (rows, cols))
        dx, dy_xhat = _vjp_rows(x2, g, _f(mean), _f(var), dy2, eps)
        return dx.reshape(-1), dy_xhat.sum(axis=0), dy2.sum(axis=0)


# -- batch norm: channels of a (batch, channels, inner) buffer ----------------------------------------
def batch_norm(x, gamma, beta, batch, channels, inner, eps):
    """(y, mean, var): each channel normalized by the mean and biased variance of its batch * inner
    elements (training mode); gamma, beta per channel."""
    with np.errstate(all="ignore"):
        xc = _channels_as_rows(x, batch, channels, inner)
        mean, var = _moments(xc)
        beta_ = np.zeros(channels) if beta is None else _f(beta)
        y = _normalize_rows(xc, mean, var, _affine(gamma, channels), beta_, eps)
        return _rows_as_channels(y, batch, channels, inner), mean, var


def batch_norm_bwd(x, gamma, mean, var, dy, batch, channels, inner, eps):
    """(dx, dgamma, dbeta): the training-mode VJP of batch_norm (the statistics depend on x)."""
    with np.errstate(all="ignore"):
        xc = _channels_as_rows(x, batch, channels, inner)
        dyc = _channels_as_rows(dy, batch, channels, inner)
        g = np.broadcast_to(_affine(gamma, channels)[:, None], xc.shape)
        dx, dy_xhat = _vjp_rows(xc, g, _f(mean), _f(var), dyc, eps)
        return _rows_as_channels(dx, batch, channels, inner), dy_xhat.sum(axis=1), dyc.sum(axis=1)


def batch_norm_infer(x, mean, var, gamma, beta, batch, channels, inner, eps):
    """y = (x - mean[c]) / sqrt(var[c] + eps) * gamma[c] + beta[c] with the given (running) statistics."""
    with np.errstate(all="ignore"):
        xc = _channels_as_rows(x, batch, channels, inner)
        beta_ = np.zeros(channels) if beta is None else _f(beta)
        y = _normalize_rows(xc, _f(mean), _f(var), _affine(gamma, channels), beta_, eps)
        return _rows_as_channels(y, batch, channels, inner)


# -- running statistics ---------------------------------------------------------------------------------
def running_stat_update(running, stat, n, momentum, factor):
    """(1 - momentum) running + momentum (factor stat), the coefficients rounded to float32 as the
    primitive takes them: the exponential moving average of batch norm's running statistics
    (factor n/(n-1) turns the biased batch variance into PyTorch's unbiased one)."""
    keep, mom, fac = (float(np.float32(c)) for c in (1.0 - momentum, momentum, factor))
    with np.errstate(all="ignore"):
        return keep * _f(running) + mom * (fac * _f(stat))
