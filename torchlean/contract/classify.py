"""Contracts of the classification: cross_entropy_rows, cross_entropy_reduce, gelu, gelu_tanh and their
backward passes.

Each bound is the worst case of the float32 kernels as written (kernels/cuda/classify.cu does its
arithmetic in float32 with the CUDA library functions expf/erfcf; the CPU cross entropy repeats it
with its own 1.7u expf; the CPU erf GELU and its backward run in float32 with their own erfc,
measured within 6u of scipy and at most 0.65 of these bounds over every 13th float32 in
[-14.5, 20] (a measured, not a proven, library error, like the 1.7u expf: see
kernels/cpu/classify.py); the CPU tanh GELU works in float64 with room to spare),
derived term by term below. Notation as in ``torchlean.contract``: u = 2**-24, LIB = 8u (one
library transcendental, 4 ulp; a result that underflows is 0), gamma(k). tests/test_classify.py
checks that a NumPy float32 emulation of classify.cu with every library call 3 ulp off stays inside.
"""

from __future__ import annotations

import numpy as np
from scipy import special

from .core import LIB, TINY, U, abs64, gamma, register
from ..spec.classify import GELU_TANH_C, INV_SQRT_2PI, SQRT_2_OVER_PI
from ..spec.classify import cross_entropy_rows as _spec_rows


def _clean(a):
    """A bound term that came out NaN or inf from infinite inputs times 0 says nothing: 0 there.
    (Outputs at such elements are inf/NaN and compared by value, or the term's factor is 0.)"""
    a = np.asarray(a, dtype=np.float64)
    return np.where(np.isfinite(a), a, 0.0)


# -- cross entropy ---------------------------------------------------------------------------
def _ce_terms(x, rows, cols, targets, ls):
    """Per-row quantities of the derivation, in float64, for rows whose maximum m is finite."""
    x2 = np.asarray(x, dtype=np.float64).reshape(rows, cols)
    t = np.asarray(targets, dtype=np.int64).reshape(-1)
    with np.errstate(all="ignore"):
        m = np.max(x2, axis=1)
        mf = np.where(np.isfinite(m), m, 0.0)
        d = mf[:, None] - x2                                   # >= 0: distances to the maximum
        e = np.exp(-d)
        s = np.sum(e, axis=1)                                  # S = sum exp(x - m) in [1, cols]
        p = e / s[:, None]
        w = np.sum(np.where(p > 0, p * d, 0.0), axis=1)        # W = sum_j p_j |x_j - m|
        log_s = np.log(s)
        valid = t < cols
        xt = x2[np.arange(rows), np.where(valid, t, 0)]
        a = np.where(valid & (ls < 1.0), (1.0 - ls) * np.abs(mf - xt), 0.0)  # (1 - ls)(m - x_t)
        b = np.sum(d, axis=1) * (ls / cols) if ls > 0.0 else np.zeros(rows)  # (ls/cols) sum(m - x)
    return mf, w, log_s, a, b, valid


def _ce_bound(ref, x, rows, cols, targets, ls):
    """The kernel: m = max_j x_j; S = sum_j expf(x_j - m) (x_j - m rounded: u|x_j - m|, amplified
    by exp into a relative u|x_j - m| on term j; expf: LIB; the sum in any order: gamma(cols-1));
    so S has relative error rho <= u W + LIB + gamma(cols-1) + u (rounding S), W = sum p_j |x_j - m|.
    log S is then off by rho (1 + rho) + LIB log S (the library log) + u log S.
      lse = m + log S: + u|lse| for the addition.
      loss = log S + (1 - ls)(m - x_t) + (ls/cols) sum_j (m - x_j): three non-negative terms, so
    no cancellation (the kernel never forms lse - x_t). a = (1-ls)(m - x_t): m - x_t, 1 - ls and
    the product round once each (3u) plus 1u for the double-to-float steps; b: each m - x_j rounds
    (u), the sum of cols non-negative terms in any order (gamma(cols)), ls/cols (2u: cols as a
    float, the division), the product (u); the two additions: gamma(2) (log S + a + b).
    Ignored rows have loss exactly 0. Rows whose maximum is not finite give inf/NaN, compared by value."""
    loss_ref, lse_ref = ref
    rows, cols = int(rows), int(cols)
    if rows == 0:
        return np.zeros(0), np.zeros(0)
    if cols == 0:
        return np.zeros(rows), np.zeros(rows)
    _, w, log_s, a, b, valid = _ce_terms(x, rows, cols, targets, float(ls))
    with np.errstate(all="ignore"):
        rho = U * w + LIB + gamma(cols - 1) + U
        e_log = _clean(rho * (1.0 + rho) + (LIB + U) * log_s)
        lse_b = e_log + U * _clean(abs64(lse_ref)) + TINY
        loss_b = (e_log + 4 * U * a + (gamma(cols) + 4 * U) * _clean(b)
                  + gamma(2) * _clean(log_s + a + b) + TINY)
    return np.where(valid, loss_b, 0.0), lse_b


def _ce_bwd_bound(ref, x, lse, dloss, rows, cols, targets, ls):
    """dx_j = dl (p_j - c_j), p_j = expf(x_j - lse), c_j = ls/cols + (1 - ls)[j == t]:
    x_j - lse rounds (u|x_j - lse|, amplified by exp to a relative error of p_j), expf (LIB);
    c_j is built from 1 - ls, float(cols), ls/cols and one addition (3u c_j); p_j - c_j rounds
    (u|p_j - c_j|, the subtraction is otherwise exact); the product with dl (u|ref|)."""
    rows, cols = int(rows), int(cols)
    if rows * cols == 0:
        return np.zeros(rows * cols)
    ls = float(ls)
    x2 = np.asarray(x, dtype=np.float64).reshape(rows, cols)
    l2 = np.asarray(lse, dtype=np.float64).reshape(rows, 1)
    dl = abs64(dloss).reshape(rows, 1)
    t = np.asarray(targets, dtype=np.int64).reshape(-1)
    with np.errstate(all="ignore"):
        dist = np.abs(x2 - l2)
        p = np.exp(x2 - l2)
        c = (1.0 - ls) * (np.arange(cols)[None, :] == t[:, None]) + ls / cols
        inner = _clean(np.where(p > 0, p * (U * dist + LIB), 0.0)) + 3 * U * c + U * _clean(np.abs(p - c))
        b = _clean(dl * inner) + U * _clean(abs64(ref).reshape(rows, cols)) + TINY
    b[t >= cols] = 0.0
    return b.reshape(-1)


register("cross_entropy_rows",
          "(loss, lse) per row, no cancellation: |err lse| <= rho(1+rho) + 9u log S + u|lse|, "
          "|err loss| <= rho(1+rho) + 9u log S + 4u a + (gamma(n) + 4u) b + gamma(2)(log S + a + b), "
          "rho = u W + LIB + gamma(n-1) + u, S = sum exp(x - m), W = sum p|x - m|, a = (1-ls)(m - x_t), "
          "b = (ls/n) sum(m - x); ignored rows: loss exactly 0",
          _ce_bound)
register("cross_entropy_rows_bwd",
          "|err| <= |dl| (p (u|x - lse| + LIB) + 3u c + u|p - c|) + u|ref| + TINY, p = exp(x - lse), "
          "c = ls/n + (1-ls)[j = t]; ignored rows exactly 0",
          _ce_bwd_bound)


_U64 = 2.0**-53


def _ce_reduce_bound(ref, x, rows, cols, targets, ls, scale):
    """loss = fl32(fl64(sum_r l_r) * scale), l_r the float32 row losses of cross_entropy_rows (each
    within that primitive's bound b_r of the exact row loss): the double sum in any order adds
    gamma64(rows) sum |l_r|, the double product 2^-53 (folded in there), the final rounding u|ref|.
    So |err| <= |scale| (sum_r b_r + gamma64(rows + 1) sum_r (|loss_r| + b_r)) + u|ref| + TINY.
    lse: as cross_entropy_rows. Non-finite row losses make the result inf/NaN, compared by value."""
    rows, cols = int(rows), int(cols)
    ref_rows = _spec_rows(x, rows, cols, targets, ls)
    loss_b, lse_b = _ce_bound(ref_rows, x, rows, cols, targets, ls)
    k = (rows + 1) * _U64
    with np.errstate(all="ignore"):
        lr = _clean(np.abs(ref_rows[0]))
        total = float(np.sum(loss_b)) + k / (1.0 - k) * float(np.sum(lr + loss_b))
        b = _clean(abs(float(scale)) * total) + U * _clean(abs64(ref[0])) + TINY
    return np.atleast_1d(b), lse_b


def _ce_reduce_bwd_bound(ref, x, lse, dloss, rows, cols, targets, ls, scale):
    """cross_entropy_rows_bwd with dl = fl32(dloss * fl32 scale) on every row: that bound with the
    exact dloss * scale, plus u|ref| for rounding the product."""
    rows = int(rows)
    dl = np.full(rows, float(np.asarray(dloss, dtype=np.float64).reshape(-1)[0]) * float(scale))
    with np.errstate(all="ignore"):
        return _ce_bwd_bound(ref, x, lse, dl, rows, cols, targets, ls) + U * _clean(abs64(ref))


register("cross_entropy_reduce",
          "(scale sum_r loss_r, lse): |err loss| <= |scale| (sum_r b_r + gamma64(rows+1) sum_r (|loss_r| + b_r)) "
          "+ u|ref| + TINY, b_r the cross_entropy_rows bound of row r; lse as cross_entropy_rows",
          _ce_reduce_bound)
register("cross_entropy_reduce_bwd",
          "cross_entropy_rows_bwd's bound with dloss_r = dloss * scale, + u|ref| (the product rounds)",
          _ce_reduce_bwd_bound)


# -- GELU -------------------------------------------------------------------------------------
def _mills_x(x):
    """S(x) = |x| phi(x) / Phi(x): the relative sensitivity of Phi(x) to a relative change of x
    (about x^2 + 1 for x -> -inf, below 0.5 for x >= 0), via erfcx so that nothing underflows."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(all="ignore"):
        return _clean(np.abs(x) * np.sqrt(2.0 / np.pi) / special.erfcx(-x / np.sqrt(2.0)))


def _gelu_phi_rel(x):
    """Relative error of the kernel's Phi(x) = 0.5 erfcf(-x * (1/sqrt 2)): the argument rounds
    twice (the constant and the product, 1.5u relative), amplified by S(x); erfcf: LIB."""
    return LIB + 2 * U * _mills_x(x)


def _gelu_bound(ref, x):
    """y = x * Phi(x): Phi's error, then the product (u). Tiny results (x -> -inf) are relative
    to themselves: Phi is evaluated as 0.5 erfc(-x/sqrt 2), never as 1 + erf(x/sqrt 2)."""
    return abs64(ref) * (_gelu_phi_rel(x) + U) + TINY


def _gelu_bwd_bound(ref, x, dy):
    """dx = dy (Phi(x) + x phi(x)), phi(x) = expf(-0.5 x x) / sqrt(2 pi): x x and the halving
    round (u x^2 / 2 absolute in the exponent, so relative in phi), expf (LIB), the constant
    and the products (3u); the sum Phi + x phi rounds (u|d|) and may cancel (near x = -0.75),
    so the bound is relative to both terms; then the product with dy (u|ref|)."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(all="ignore"):
        cdf = special.ndtr(x)
        xphi = _clean(np.abs(x) * np.exp(-0.5 * x * x) * INV_SQRT_2PI)
        d = _clean(np.abs(cdf + x * np.exp(-0.5 * x * x) * INV_SQRT_2PI))
        inner = cdf * _gelu_phi_rel(x) + xphi * (LIB + 4 * U + U * 0.5 * x * x) + U * d
    return _clean(abs64(dy) * _clean(inner)) + U * _clean(abs64(ref)) + TINY


def _gelu_tanh_parts(x):
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(all="ignore"):
        z = SQRT_2_OVER_PI * (x + GELU_TANH_C * x**3)
        s, sm = special.expit(2.0 * z), special.expit(-2.0 * z)
    return x, _clean(np.abs(z)), s, sm


def _gelu_tanh_bound(ref, x):
    """y = x sigmoid(2z), z = k (x + c x^3): x and c x^3 have one sign, so z is within 6u
    relative (x*x*x, c*, +, k*, the two constants); sigmoid(2z) = 1/(1+e) or e/(1+e) with
    e = expf(-|2z|): relative sensitivity 2|z|(1 - s) to z, LIB for expf, 2u for 1 + e and the
    division; then the product with x (u)."""
    _, az, s, sm = _gelu_tanh_parts(x)
    return abs64(ref) * (LIB + 4 * U + 12 * U * az * sm) + TINY


def _gelu_tanh_bwd_bound(ref, x, dy):
    """dx = dy (s + 2 x z' s (1 - s)), z' = k (1 + 3 c x^2), with s (1 - s) = e q^2, q = 1/(1+e),
    e = expf(-|2z|), so no 1 - s is ever formed: s as in the forward; the second term carries
    e's full relative error (12u|z| + LIB), q twice (2u each), z' (4u) and three products (3u);
    the sum may cancel (near x = -0.75): relative to both terms, plus u|d|; then dy (u|ref|)."""
    x, az, s, sm = _gelu_tanh_parts(x)
    with np.errstate(all="ignore"):
        dz = SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_TANH_C * x * x)
        t2 = _clean(np.abs(2.0 * x * dz * s * sm))
        d = _clean(np.abs(s + 2.0 * x * dz * s * sm))
        inner = s * (LIB + 4 * U + 12 * U * az * sm) + t2 * (LIB + 12 * U + 12 * U * az) + U * d
    return _clean(abs64(dy) * _clean(inner)) + U * _clean(abs64(ref)) + TINY


register("gelu", "x Phi(x), Phi = 0.5 erfc(-x/sqrt 2): |err| <= |ref| (LIB + u + 2u S(x)) + TINY, "
          "S(x) = |x| phi(x) / Phi(x) (argument rounding amplified; ~x^2 for x -> -inf)", _gelu_bound)
register("gelu_bwd", "dy (Phi + x phi): |err| <= |dy| (Phi (LIB + 2u S) + |x phi| (LIB + 4u + u x^2/2) "
          "+ u|Phi + x phi|) + u|ref| + TINY", _gelu_bwd_bound)
register("gelu_tanh", "x sigmoid(2z): |err| <= |ref| (LIB + 4u + 12u |z| (1 - s)) + TINY",
          _gelu_tanh_bound)
register("gelu_tanh_bwd", "dy (s + 2x z' s(1-s)): |err| <= |dy| (s (LIB + 4u + 12u|z|(1-s)) "
          "+ |2x z' s(1-s)| (LIB + 12u + 12u|z|) + u|d|) + u|ref| + TINY", _gelu_tanh_bwd_bound)
