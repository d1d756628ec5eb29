"""Contracts of the pooling: max_pool, avg_pool, smooth_max_pool and their backward passes.

Notation as in ``torchlean.contract``: u = 2**-24, gamma(k) = k u / (1 - k u), LIB = 8u (one float32
library exp or log), ulp(r) the float32 spacing at |r|. K = prod(kernel). Bounds are evaluated in
float64 from the spec's own quantities (the window table, the spec pools applied to |inputs|).
"""

from __future__ import annotations

import numpy as np

from .. import spec
from ..spec.pool import window_table
from .core import LIB, TINY, U, abs64, register, ulp32, zero_bound

__all__: list[str] = []

_F32_EXACT_INT = 2.0**24  # integers up to 2**24 are exact in float32: float32(K) == K


def _gamma(k):
    """gamma(k) = k u / (1 - k u) elementwise (0 for k <= 0)."""
    k = np.maximum(np.asarray(k, dtype=np.float64), 0.0)
    with np.errstate(divide="ignore"):
        return np.where(k * U < 0.5, k * U / (1.0 - k * U), np.inf)


def _kf_term(kprod: int, ref):
    """float32(K) is rounded (relative u) only when K > 2**24."""
    return U * abs64(ref) if kprod > _F32_EXACT_INT else 0.0


# -- max pool: a selection -----------------------------------------------------------------------
# Forward: the value of one input element (the winner), or -inf: no arithmetic at all.
register("max_pool", "exact (a selection: the first NaN, else the first strict maximum; -inf for an "
          "all-padding window)", zero_bound, exact=True)


def _max_pool_bwd_bound(ref, x, dy, planes, spatial, kernel, stride, padding):
    # dx[q] is the sum of dy over the c(q) windows whose winner is q, added one by one in a fixed
    # order: Higham's gamma(c-1) sum|dy| for any order; c <= 1 is exact (0 + dy, or nothing).
    count = spec.max_pool_bwd(x, np.ones_like(np.asarray(dy, dtype=np.float64)), planes, spatial, kernel,
                              stride, padding)
    abs_sum = spec.max_pool_bwd(x, abs64(dy), planes, spatial, kernel, stride, padding)
    return _gamma(np.rint(count) - 1) * abs_sum


register("max_pool_bwd", "dx[q] = sum of dy over the c(q) windows won by q: exact when c <= 1, else "
          "|err| <= gamma(c-1) sum|dy| (any order)", _max_pool_bwd_bound)


# -- avg pool: a sum, then one division by float32(K) -----------------------------------------
def _avg_pool_bound(ref, x, planes, spatial, kernel, stride, padding):
    # acc = sum of the (at most K) in-bounds values: |acc - S| <= gamma(K-1) sum|x| (any order);
    # then fl(acc / float32(K)): the sum error divided by K (times 1 + 2u for the division and a
    # rounded K, hence gamma(K) instead of gamma(K-1)), at most one ulp for the division's rounding
    # (an ulp rather than a half: the rounded quotient may sit across a binade), and u|ref| when
    # float32(K) itself is rounded (K > 2**24).
    kprod = int(np.prod(kernel))
    abs_mean = spec.avg_pool(abs64(x), planes, spatial, kernel, stride, padding)  # sum|x| / K
    return _gamma(kprod) * abs_mean + ulp32(ref) + _kf_term(kprod, ref)


register("avg_pool", "sum of the window, then / float32(K): |err| <= gamma(K) sum|x| / K + ulp(ref) "
          "(+ u|ref| when K > 2**24)", _avg_pool_bound)


def _avg_pool_bwd_bound(ref, dy, planes, spatial, kernel, stride, padding):
    # dx[q] = (sum of dy over the c(q) windows containing q) / float32(K): the same argument as the
    # forward with c(q) terms.
    kprod = int(np.prod(kernel))
    ones = np.ones_like(np.asarray(dy, dtype=np.float64))
    count = np.rint(spec.avg_pool_bwd(ones, planes, spatial, kernel, stride, padding) * kprod)
    abs_mean = spec.avg_pool_bwd(abs64(dy), planes, spatial, kernel, stride, padding)  # sum|dy| / K
    return _gamma(count) * abs_mean + ulp32(ref) * (count > 0) + _kf_term(kprod, ref)


register("avg_pool_bwd", "sum of dy over the c(q) windows containing q, then / float32(K): |err| <= "
          "gamma(c) sum|dy| / K + ulp(ref) (+ u|ref| when K > 2**24)", _avg_pool_bwd_bound)


# -- smooth max pool ------------------------------------------------------------------------------
def _window_values(x, planes, spatial, kernel, stride, padding):
    """(planes, n_out, K) window values (0 at padding: smooth max counts padding as v = 0), mask."""
    table = window_table(spatial, kernel, stride, padding)
    n = int(np.prod(spatial))
    xp = np.asarray(x, dtype=np.float64).reshape(planes, n)
    valid = table >= 0
    vals = xp[:, np.where(valid, table, 0)] if n else np.zeros((planes,) + table.shape)
    return np.where(valid, vals, 0.0), valid, table


def _smooth_max_pool_bound(ref, x, planes, spatial, kernel, stride, padding, beta):
    """The kernel: b_j = fl(beta v_j); m = max b_j; t_j = fl(b_j - m); acc = sum expf(t_j) (the
    padding block as fl(float32(npad) * expf(-m))); y = fl(fl(m + logf(acc)) / beta).

    Against Y = LSE(beta v) / beta (LSE over the window, padding included):
    - A = u max|beta v_j|: LSE is 1-Lipschitz in the max norm, so rounding beta v moves it <= A;
    - acc = S (1 + rho), S = sum exp(beta v_j - M) >= 1: each term carries expm1(u|t_j|) from the
      rounded t_j, LIB from expf and 2u from the padding block's product and float32(npad), and
      the float sum of positive terms gamma(K-1) relative: rho <= (W + LIB + 2u)(1 + gamma(K)) +
      gamma(K) + K 2**-149 (underflowing terms), W = sum_j w_j expm1(1.01 u |t_j|), w = softmax
      weights (as for softmax_rows: large |t_j| come with tiny weights);
    - logf: |L - log S| <= rho / (1 - rho) + LIB (log S + rho / (1 - rho)) =: eL;
    - m + L rounds by u (|M| + A + log S + eL), the division by beta by u |y|.
    So |y - Y| <= Z (1 + 4u) / |beta| + 2u |Y| + TINY, Z = A + eL + u (|M| + A + log S + eL): relative
    to |y|, plus an absolute term ~ (gamma(K) + 2 LIB + u |M|) / |beta|.
    """
    vals, valid, table = _window_values(x, planes, spatial, kernel, stride, padding)
    kprod = table.shape[1]
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        bv = beta * vals
        M = np.max(np.where(np.isnan(bv), -np.inf, bv), axis=2, keepdims=True)
        t = np.where(bv == M, 0.0, bv - M)
        E = np.exp(t)
        S = np.sum(E, axis=2)
        W = np.sum(E * np.expm1(1.01 * U * np.abs(t)), axis=2) / S
        A = U * np.max(np.abs(bv), axis=2)
        g = float(_gamma(kprod))
        rho = (W + LIB + 2 * U) * (1 + g) + g + kprod * 2.0**-149
        lse = np.log(S)
        r1 = rho / (1 - rho)
        eL = r1 + LIB * (lse + r1)
        Z = A + eL + U * (np.abs(M[:, :, 0]) + A + lse + eL)
        return (Z * (1 + 4 * U) / abs(beta)).reshape(-1) + 2 * U * abs64(ref) + TINY


register("smooth_max_pool", "y = (m + log sum exp(beta v - m)) / beta: |err| <= Z (1 + 4u) / |beta| + 2u|y| "
          "+ TINY, Z = u max|beta v| + eL + u(|m| + u max|beta v| + log S + eL), eL = the log of the "
          "sum's relative error rho = (W + LIB + 2u)(1 + gamma(K)) + gamma(K) plus LIB log S",
          _smooth_max_pool_bound)


def _smooth_max_pool_bwd_bound(ref, x, y, dy, planes, spatial, kernel, stride, padding, beta):
    """Per term (q in window w): a = fl(beta x_q), b = fl(beta y_w), d = fl(a - b) (0 when a == b),
    term = fl(dy_w expf(d)). Against T = dy_w exp(beta x_q - beta y_w):
    |d - D| <= delta = u (|beta x| + |beta y|)(1 + u) + u |D| (1 + 2u), so the term's relative error
    is f = (1 + u)(1 + LIB) exp(delta) - 1 (exp of a perturbed argument, expf, the product); the c(q)
    terms are summed in float: gamma(c-1) sum |T| (1 + f). Plus 2**-146 |dy_w| per term for expf
    results in the subnormal range, where a relative LIB does not hold.
    """
    vals, valid, table = _window_values(x, planes, spatial, kernel, stride, padding)
    n_out = table.shape[0]
    n = int(np.prod(spatial))
    yv = np.asarray(y, dtype=np.float64).reshape(planes, n_out, 1)
    g = np.asarray(dy, dtype=np.float64).reshape(planes, n_out, 1)
    with np.errstate(invalid="ignore", over="ignore"):
        bx, by = beta * vals, beta * yv
        D = np.where(bx == by, 0.0, bx - by)
        T = np.abs(g * np.exp(D))
        delta = U * (np.abs(bx) + np.abs(by)) * (1 + U) + U * np.abs(D) * (1 + 2 * U)
        f = (1 + U) * (1 + LIB) * np.exp(delta) - 1
        per_term = T * f + np.abs(g) * 2.0**-146
        abs_terms = T * (1 + f)
    mask = np.broadcast_to(valid, per_term.shape)
    b1 = np.zeros((planes, n))
    b2 = np.zeros((planes, n))
    cnt = np.zeros(n)
    np.add.at(cnt, table[valid], 1.0)
    for pl in range(planes):
        np.add.at(b1[pl], table[valid], per_term[pl][mask[pl]])
        np.add.at(b2[pl], table[valid], abs_terms[pl][mask[pl]])
    with np.errstate(invalid="ignore"):
        return (b1 + _gamma(cnt - 1)[None, :] * b2 + TINY * (cnt > 0)[None, :]).reshape(-1)


register("smooth_max_pool_bwd", "dx[q] = sum over the c windows w containing q of dy_w exp(beta x_q - beta y_w): "
          "|err| <= sum |T_w| f_w + gamma(c-1) sum |T_w| (1 + f_w) + TINY, f_w = (1+u)(1+LIB) exp(delta_w) - 1, "
          "delta_w = u(|beta x_q| + |beta y_w|)(1+u) + u|beta x_q - beta y_w|(1+2u)", _smooth_max_pool_bwd_bound)
