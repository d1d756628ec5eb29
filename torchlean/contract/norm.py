"""Contracts of the normalization: layer_norm, batch_norm (training and inference) and their backward passes.

Both norms are the same computation over *groups*: a row of a (rows, cols) buffer for layer norm,
a channel's batch * inner elements for batch norm. Notation per group of n elements: A = sum|x|,
mu and var the exact mean and biased variance (from the spec), V = var + eps, r = 1/sqrt(V),
xhat = (x - mu) r, and g, b the gamma, beta that apply to an element (1 and 0 when absent).

The bounds are derived for the plainest correct float32 kernel: sums in any order (Higham's
gamma(k) sum|terms|, as for reduce_sum), then a fixed handful of roundings per element. Kernels that
accumulate in double meet them with room to spare. Underflow into subnormals costs at most
2^-150 per rounding, hence the 2^-149 and TINY terms.

Forward (layer_norm, batch_norm), per group:

* mean: S = fl(sum x) is within gamma(n-1) A; dividing by n and rounding the result to float32
  add two roundings of |mu| <= A/n:  e_mu = gamma(n+1) A/n + 2^-149.
* var: with the computed mean m, d_j = fl(x_j - m) and Q = fl(sum d_j^2). Because sum(x_j - mu) = 0,
  sum (x_j - m)^2 = n var + n (mu - m)^2 exactly, so Q/n = (var + (mu - m)^2)(1 + theta) with
  |theta| <= gamma(n+3) (one rounding in d, one in the square, n-1 in the sum, one in /n): the
  internal variance is within e_v = gamma(n+3) var + 2 e_mu^2 + n 2^-149 (the last term: squares
  that underflow). The float32 output adds one rounding: gamma(n+4) var + 2 e_mu^2 + n 2^-149 + TINY.
  The e_mu^2 term is the conditioning of the variance: data with |mu| >> std lose digits to the
  mean's error, in any float32 algorithm that does not first shift the data.
* y: V is known to relative rho = e_v / V; r = 1/sqrt(V) then carries (1 - rho)^(-1/2) - 1 from V
  (first order rho/2, but kept exact so that the bound stays valid up to rho < 1; beyond that it is
  infinite: eps too small for a variance lost to rounding) plus gamma(4) for the add, sqrt and
  divide: rho_r. xhat = fl(d r) adds the roundings of d and of the product, and d carries the mean's
  error e_mu, amplified by r:  e_xhat = |xhat| rho_x + e_mu r (1 + rho_x), rho_x = (1 + rho_r)(1 +
  gamma(2)) - 1. So when var is tiny, eps dominates r <= 1/sqrt(eps) and bounds the amplification.
  Then y = fl(fl(xhat g) + b) (or the same roundings in another association, such as d (r g) + b):
  e_y = |g| ((1 + gamma(3)) e_xhat + gamma(3) |xhat|) + u |b| + TINY.

Backward (layer_norm_bwd, batch_norm_bwd) with mean and var GIVEN (exact inputs), per group:
r_k = r (1 + gamma(3)) (add, sqrt, divide) and xhat_k = xhat (1 + gamma(5)) (with d's rounding and
the product). S1 = sum(g dy) within gamma(n) sum|g dy|; S2 = sum(g dy xhat) within gamma(n+6)
sum|g dy xhat|; dx_j = r (g_j dy_j - S1/n - xhat_j S2/n) then carries at most
gamma(n+18) r (|g_j dy_j| + sum|g dy|/n + |xhat_j| sum|g dy xhat|/n): the sums' errors, the xhat
and r roundings and the two subtractions, all relative to the magnitudes that cancel (not to dx,
which may be tiny after cancellation). Products that underflow add r 2^-147 and TINY.
dgamma = sum(dy xhat) over the m elements sharing a gamma: gamma(m+6) sum|dy xhat| + m 2^-149 + TINY;
dbeta = sum(dy): the reduce_sum bound gamma(m-1) sum|dy| + ulp/2.

Inference (batch_norm_infer): d, r (3 roundings), d r, times g, plus b: gamma(9) |g xhat| + u|b|
+ |g| 2^-149 + TINY. This bound admits the direct form ((x - mean) r) g + b but NOT the folded
x (r g) + (b - mean r g), whose error u |x r g| + u |mean r g| is unbounded relative to |xhat| when
x is close to the mean.
"""

from __future__ import annotations

import numpy as np

from .core import TINY, U, gamma, register, sum_bound

SUB = 2.0**-149  # the smallest subnormal: twice the error of a rounding in the subnormal range


def _groups_rows(a, rows, cols):
    return np.asarray(a, dtype=np.float64).reshape(rows, cols)


def _groups_channels(a, batch, channels, inner):
    """(batch, channels, inner) -> (channels, batch * inner), as the spec groups batch norm."""
    return np.asarray(a, dtype=np.float64).reshape(batch, channels, inner).transpose(1, 0, 2).reshape(
        channels, batch * inner)


def _ungroup_channels(a, batch, channels, inner):
    return a.reshape(channels, batch, inner).transpose(1, 0, 2).reshape(-1)


def _vec(v, n, default):
    return np.full(n, float(default)) if v is None else np.asarray(v, dtype=np.float64)


def _rho_r(rho):
    """Relative error of the computed r = 1/sqrt(V) when V is known to relative rho (see above)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(rho < 1, (1 - np.minimum(rho, 0.999)) ** -0.5 * (1 + gamma(4)) - 1, np.inf)


def _forward_bounds(xg, gg, bg, mean, var, eps):
    """(bound on y as a grouped array, bound on mean, bound on var) for groups xg (k, n)."""
    k, n = xg.shape
    if n == 0:
        return np.zeros((k, 0)), np.zeros(k), np.zeros(k)
    with np.errstate(all="ignore"):
        a = np.abs(xg).sum(axis=1)
        e_mu = gamma(n + 1) * a / n + SUB
        e_v = gamma(n + 3) * np.abs(var) + 2 * e_mu**2 + n * SUB
        e_var = gamma(n + 4) * np.abs(var) + 2 * e_mu**2 + n * SUB + TINY
        big_v = var + eps
        r = 1.0 / np.sqrt(big_v)
        rho_x = (1 + _rho_r(e_v / big_v)) * (1 + gamma(2)) - 1
        xhat = np.abs(xg - mean[:, None]) * r[:, None]
        e_xhat = xhat * rho_x[:, None] + (e_mu * r * (1 + rho_x))[:, None]
        e_y = np.abs(gg) * ((1 + gamma(3)) * e_xhat + gamma(3) * xhat) + U * np.abs(bg) + TINY
    return e_y, e_mu + TINY, e_var


def _backward_bounds(xg, gg, mean, var, dyg, eps):
    """(bound on dx, |dy xhat|) for groups xg (k, n), with the given mean and var."""
    k, n = xg.shape
    with np.errstate(all="ignore"):
        r = 1.0 / np.sqrt(var + eps)
        xhat = np.abs(xg - mean[:, None]) * r[:, None]
        gdy = np.abs(gg * dyg)
        if n:
            m = gdy + gdy.sum(axis=1, keepdims=True) / n + xhat * (gdy * xhat).sum(axis=1, keepdims=True) / n
        else:
            m = gdy
        e_dx = gamma(n + 18) * r[:, None] * m + r[:, None] * 4 * SUB + TINY
        dy_xhat = np.abs(dyg) * xhat
    return e_dx, dy_xhat


# -- layer norm ---------------------------------------------------------------------------------------
def _layer_norm_bound(ref, x, gamma_, beta, rows, cols, eps):
    _, mean, var = ref
    xg = _groups_rows(x, rows, cols)
    gg = np.broadcast_to(_vec(gamma_, cols, 1.0), (rows, cols))
    bg = np.broadcast_to(_vec(beta, cols, 0.0), (rows, cols))
    e_y, e_mean, e_var = _forward_bounds(xg, gg, bg, mean, var, eps)
    return e_y.reshape(-1), e_mean, e_var


def _layer_norm_bwd_bound(ref, x, gamma_, mean, var, dy, rows, cols, eps):
    xg, dyg = _groups_rows(x, rows, cols), _groups_rows(dy, rows, cols)
    gg = np.broadcast_to(_vec(gamma_, cols, 1.0), (rows, cols))
    e_dx, dy_xhat = _backward_bounds(xg, gg, np.asarray(mean, np.float64), np.asarray(var, np.float64), dyg, eps)
    e_dgamma = gamma(rows + 6) * dy_xhat.sum(axis=0) + rows * SUB + TINY
    e_dbeta = sum_bound(rows, np.abs(dyg).sum(axis=0), ref[2])
    return e_dx.reshape(-1), e_dgamma, e_dbeta


register("layer_norm",
          "per row of n = cols: mean gamma(n+1) sum|x|/n; var gamma(n+4) var + 2 e_mu^2; y |g|((1+gamma(3)) "
          "e_xhat + gamma(3)|xhat|) + u|b|, e_xhat = |xhat| rho_x + e_mu r (1+rho_x), rho_x from the variance's "
          "relative error e_v/(var+eps)",
          _layer_norm_bound)
register("layer_norm_bwd",
          "dx gamma(n+18) r (|g dy| + sum|g dy|/n + |xhat| sum|g dy xhat|/n); dgamma gamma(rows+6) sum|dy xhat|; "
          "dbeta gamma(rows-1) sum|dy| + ulp/2 (mean, var given)",
          _layer_norm_bwd_bound)


# -- batch norm ---------------------------------------------------------------------------------------
def _batch_norm_bound(ref, x, gamma_, beta, batch, channels, inner, eps):
    _, mean, var = ref
    xg = _groups_channels(x, batch, channels, inner)
    n = batch * inner
    gg = np.broadcast_to(_vec(gamma_, channels, 1.0)[:, None], (channels, n))
    bg = np.broadcast_to(_vec(beta, channels, 0.0)[:, None], (channels, n))
    e_y, e_mean, e_var = _forward_bounds(xg, gg, bg, mean, var, eps)
    return _ungroup_channels(e_y, batch, channels, inner), e_mean, e_var


def _batch_norm_bwd_bound(ref, x, gamma_, mean, var, dy, batch, channels, inner, eps):
    xg, dyg = _groups_channels(x, batch, channels, inner), _groups_channels(dy, batch, channels, inner)
    n = batch * inner
    gg = np.broadcast_to(_vec(gamma_, channels, 1.0)[:, None], (channels, n))
    e_dx, dy_xhat = _backward_bounds(xg, gg, np.asarray(mean, np.float64), np.asarray(var, np.float64), dyg, eps)
    e_dgamma = gamma(n + 6) * dy_xhat.sum(axis=1) + n * SUB + TINY
    e_dbeta = sum_bound(n, np.abs(dyg).sum(axis=1), ref[2])
    return _ungroup_channels(e_dx, batch, channels, inner), e_dgamma, e_dbeta


def _batch_norm_infer_bound(ref, x, mean, var, gamma_, beta, batch, channels, inner, eps):
    xg = _groups_channels(x, batch, channels, inner)
    with np.errstate(all="ignore"):
        r = 1.0 / np.sqrt(np.asarray(var, np.float64) + eps)
        xhat = np.abs(xg - np.asarray(mean, np.float64)[:, None]) * r[:, None]
        g = np.abs(_vec(gamma_, channels, 1.0))[:, None]
        b = np.abs(_vec(beta, channels, 0.0))[:, None]
        e = gamma(9) * g * xhat + U * b + g * SUB + TINY
    return _ungroup_channels(e, batch, channels, inner)


register("batch_norm",
          "per channel of n = batch*inner elements: the layer_norm bounds (mean gamma(n+1) sum|x|/n; var "
          "gamma(n+4) var + 2 e_mu^2; y |g|((1+gamma(3)) e_xhat + gamma(3)|xhat|) + u|b|)",
          _batch_norm_bound)
register("batch_norm_bwd",
          "per channel of n = batch*inner: dx gamma(n+18) r (|g dy| + sum|g dy|/n + |xhat| sum|g dy xhat|/n); "
          "dgamma gamma(n+6) sum|dy xhat|; dbeta gamma(n-1) sum|dy| + ulp/2 (mean, var given)",
          _batch_norm_bwd_bound)
register("batch_norm_infer",
          "direct form ((x - mean) r) g + b: |err| <= gamma(9) |g xhat| + u|b| + TINY",
          _batch_norm_infer_bound)


def _running_stat_update_bound(ref, running, stat, n, momentum, factor):
    keep, mom, fac = (float(np.float32(c)) for c in (1.0 - momentum, momentum, factor))
    with np.errstate(all="ignore"):
        kept = np.abs(keep * np.asarray(running, np.float64))
        new = np.abs(mom * fac * np.asarray(stat, np.float64))
    # fl(fl(running keep) + fl(mom fl(stat fac))): one rounding on the first product, two on the
    # second, one on the sum (relative to both magnitudes: no cancellation amplifies them).
    return 2.01 * U * kept + 3.01 * U * new + TINY


register("running_stat_update",
          "fl(fl(r k) + fl(m fl(s f))) with k = fl32(1 - momentum), m = fl32(momentum), f = fl32(factor): "
          "|err| <= 2.01u|k r| + 3.01u|m f s| + TINY",
          _running_stat_update_bound)
