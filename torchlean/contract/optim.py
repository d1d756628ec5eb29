"""Contracts of the fused optimizer steps: adam_step and sgd_step (and their multi-tensor forms:
the one-tensor bound on each tensor).

Notation (per element, all in float64): u = 2^-24, gamma(k) = k u / (1 - k u), S = 2^-149 (the
smallest subnormal: twice the error of one rounding that underflows; every quantity gets a few S
for its roundings in the subnormal range). Hyperparameters are host doubles; the kernel rounds
each coefficient it derives from them (wd, 1 - lr wd, 1 - beta1, beta2, 1 - beta2,
sqrt(1 - beta2^t), eps, -lr / (1 - beta1^t)) to float32 once: relative error u each. A fused
multiply-add rounds once; every other operation once. Error bounds are running-error bounds over
the ABSOLUTE values of the terms (what cancels is never assumed small), so they hold for every
input, and they are tight for the honest kernel (a handful of roundings), while a kernel that
drops a term, rounds a hyperparameter before deriving the bias corrections, or swaps beta1 and
(1 - beta1) misses them by orders of magnitude.

adam_step (mode Adam: g1 = g + wd p; AdamW: p1 = p (1 - lr wd), g1 = g):
* g1: wd's rounding and the fma: |e_g| <= gamma(2) G + S with G = |g| + |wd p| (0 for AdamW).
  p1 (AdamW): the coefficient's rounding and the product: |e_p1| <= gamma(2) |p (1 - lr wd)| + S.
* m' = lerp(m, g1, w), w = 1 - beta1, in torch's two forms: w < 1/2: m + w (g1 - m) (the
  difference rounds, w rounds, the fma rounds): |e_m| <= w (e_g + gamma(2) (G + |m|)) + u M + 2S,
  M = |m| + w (G + |m|); w >= 1/2: g1 + (w - 1)(g1 - m) (w - 1 rounds once more):
  |e_m| <= e_g + (1 - w)(e_g + gamma(3)(G + |m|)) + u M + 2S, M = G + (1 - w)(G + |m|).
* v' = beta2 v + (1 - beta2) g1^2 as fma(fl(w2 g1), g1, fl(v beta2)): with A = beta2 |v|,
  B = (1 - beta2) G^2: |e_v| <= gamma(3) (A + B) + 2.01 (1 - beta2) G e_g + 3S. (v >= 0 is the
  precondition of a second moment; A + B is then v' itself: relative error gamma(3) + g1's.)
* D = sqrt(v') / sqrt(bc2) + eps (exact D from the spec's v'): the sqrt of a value off by e_v is
  off by e_s0 = min(e_v / sqrt(v'), sqrt(e_v)), then rounds: e_s = e_s0 + u (sqrt(v') + e_s0);
  the divisor rounds and the quotient rounds: e_q = (e_s (1 + gamma(2)) + gamma(2) sqrt(v')) / sqrt(bc2);
  eps rounds and the sum rounds: e_D = e_q (1 + u) + u eps + u D. rho = e_D / D (infinite when
  rho >= 1: nothing is promised when the denominator is lost to rounding, e.g. eps = 0 and v = 0).
* update r = fl(fl(c m') / D') with c = -lr / bc1: the numerator is off by
  e_N = |c| (e_m + gamma(2) (|m'| + e_m)) (c's rounding, the product); then
  |e_r| <= (e_N + |c m'| rho) / (D (1 - rho)) + u (|r| + that) + S.
* p' = fl(p1 + r): |e_p| <= e_p1 + e_r + u (|p'| + e_p1 + e_r) + S.

sgd_step: g1 as above (exact when wd = 0); buf' = g1 on the first step, else
fma(g1, 1 - dampening, fl(buf momentum)): with A = momentum |buf|, B = |1 - dampening| G:
|e_b| <= gamma(3) (A + B) + |1 - dampening| e_g + 2S; the direction d = buf' or, nesterov,
fma(buf', momentum, g1): |e_d| <= e_g + momentum (e_b + u Babs) + u (G + momentum Babs) + S
(Babs = A + B, or G on the first step); p' = fma(d, -lr, p): |e_p| <= lr (e_d + u Dabs) + u |p'| + S
(Dabs the absolute form of d).

norm2_many: the kernels square each float32 x in double (exact: 48 significant bits, and no
square of a float32 can overflow or underflow in double) and add the n >= 0 terms in double in a
fixed tree; with nonnegative terms the sum's relative error is at most gamma64(n - 1) in ANY order
(u64 = 2^-53, gamma64(k) = k u64 / (1 - k u64)); the double sqrt adds u64 (and halves the sum's
relative error), so r' = r (1 + e), |e| <= gamma64(n + 1), r = sqrt(sum x^2). The spec's own
float64 sum and sqrt are off from r by as much again. Then r' is rounded to float32 once:
|out - r'| <= u |r'| (or 2^-150 where r' is subnormal; a finite r beyond the float32 range rounds to
inf, which ``compare`` accepts). So |out - ref| <= u (1 + 4 gamma64(n + 1)) |ref| + 3 gamma64(n + 1) |ref|
+ 2^-150: about an ulp. (A kernel that sums in float32 misses it by far: gamma(n) u-units, and
overflow of squares above ~1.8e19.) Infinite or NaN inputs give inf or NaN exactly as IEEE double.

scale_many: x * coef[0], one float32 rounding per element (mul's contract): |err| <= ulp(ref)/2.
"""

from __future__ import annotations

import numpy as np

from .core import U, gamma, register, ulp32

S = 2.0**-149

__all__: list[str] = []


def _a(x):
    return np.abs(np.asarray(x, dtype=np.float64).reshape(-1))


def _adam_bound(ref, p, g, m, v, n, lr, beta1, beta2, eps, weight_decay, step, decoupled):
    p_ref, m_ref, v_ref = (np.asarray(r, dtype=np.float64).reshape(-1) for r in ref)
    P, G0, M0, V0 = _a(p), _a(g), _a(m), _a(v)
    lr, b1, b2, eps, wd = float(lr), float(beta1), float(beta2), float(eps), float(weight_decay)
    with np.errstate(all="ignore"):
        if wd != 0.0 and decoupled:
            P1 = P * abs(1.0 - lr * wd)
            e_p1 = gamma(2) * P1 + S
            G, e_g = G0, 0.0
        elif wd != 0.0:
            P1, e_p1 = P, 0.0
            G = G0 + abs(wd) * P
            e_g = gamma(2) * G + S
        else:
            P1, e_p1, G, e_g = P, 0.0, G0, 0.0
        w = 1.0 - b1
        if w < 0.5:
            Mabs = M0 + w * (G + M0)
            e_m = w * (e_g + gamma(2) * (G + M0)) + U * Mabs + 2 * S
        else:
            Mabs = G + (1.0 - w) * (G + M0)
            e_m = e_g + (1.0 - w) * (e_g + gamma(3) * (G + M0)) + U * Mabs + 2 * S
        w2 = 1.0 - b2
        A, B = b2 * V0, w2 * G * G
        e_v = gamma(3) * (A + B) + 2.01 * w2 * G * e_g + 3 * S
        bc1 = 1.0 - b1 ** float(step)
        bc2 = 1.0 - b2 ** float(step)
        sv = np.sqrt(np.maximum(v_ref, 0.0))
        e_s0 = np.minimum(np.where(sv > 0, e_v / np.where(sv > 0, sv, 1.0), np.inf), np.sqrt(e_v))
        e_s = e_s0 + U * (sv + e_s0)
        rb = np.sqrt(bc2)
        e_q = (e_s * (1 + gamma(2)) + gamma(2) * sv) / rb
        D = sv / rb + eps
        e_D = e_q * (1 + U) + U * eps + U * D
        rho = np.where(D > 0, e_D / np.where(D > 0, D, 1.0), np.inf)
        c = abs(lr / bc1)
        m_abs = np.abs(m_ref)
        e_N = c * (e_m + gamma(2) * (m_abs + e_m))
        r = c * m_abs / D
        ok = rho < 1
        e_r0 = np.where(ok, (e_N + c * m_abs * rho) / (D * (1 - np.where(ok, rho, 0.0))), np.inf)
        e_r = e_r0 + U * (r + e_r0) + S
        e_p = e_p1 + e_r + U * (np.abs(p_ref) + e_p1 + e_r) + S
    return e_p, e_m, e_v


def _sgd_bound(ref, p, g, buf, n, lr, momentum, dampening, weight_decay, nesterov, first):
    p_ref = np.asarray(ref[0], dtype=np.float64).reshape(-1)  # (buf's bound does not depend on buf')
    P, G0 = _a(p), _a(g)
    lr, mom, damp, wd = abs(float(lr)), abs(float(momentum)), float(dampening), float(weight_decay)
    with np.errstate(all="ignore"):
        if wd != 0.0:
            G = G0 + abs(wd) * P
            e_g = gamma(2) * G + S
        else:
            G, e_g = G0, 0.0
        if first:
            Babs, e_b = G, e_g
        else:
            keep = abs(1.0 - damp)
            A, B = mom * _a(buf), keep * G
            Babs = A + B
            e_b = gamma(3) * Babs + keep * e_g + 2 * S
        if nesterov:
            Dabs = G + mom * Babs
            e_d = e_g + mom * (e_b + U * Babs) + U * Dabs + S
        else:
            Dabs, e_d = Babs, e_b
        e_p = lr * (e_d + U * Dabs) + U * (np.abs(p_ref) + lr * (e_d + U * Dabs)) + S
    return e_p, e_b


register("adam_step", "PyTorch's Adam/AdamW step, a fixed handful of roundings per element (float32 "
          "coefficients from double hyperparameters, fma where torch fuses): running-error bounds over |terms| "
          "for p, m, v (see contract/optim.py); v >= 0 assumed", _adam_bound)
register("sgd_step", "PyTorch's SGD step (weight decay, momentum, dampening, nesterov), fma where torch "
          "fuses: running-error bounds over |terms| for p and buf (see contract/optim.py)", _sgd_bound)


def _adam_many_bound(ref, ps, gs, ms, vs, lr, beta1, beta2, eps, weight_decay, step, decoupled):
    t = len(ps)
    per = [_adam_bound((ref[i], ref[t + i], ref[2 * t + i]), p, g, m, v, np.size(p), lr, beta1, beta2, eps,
                       weight_decay, step, decoupled) for i, (p, g, m, v) in enumerate(zip(ps, gs, ms, vs))]
    return tuple(b[k] for k in range(3) for b in per)


register("adam_step_many", "adam_step on each of T tensors (one launch on CUDA): adam_step's bound per tensor "
          "(the kernels run the same per-element arithmetic, so the bits equal T adam_step calls)", _adam_many_bound)
register("adam_step_many_inplace", "adam_step_many's values, written over ps, ms and vs: its bound "
          "(the same kernels with the outputs pointed at the inputs, so the same bits)", _adam_many_bound)


def _sgd_many_bound(ref, ps, gs, bufs, lr, momentum, dampening, weight_decay, nesterov, first):
    """sgd_step's bound per tensor, for the new ps and bufs, or the new ps alone when ref holds only
    those (sgd_step_many_inplace without bufs)."""
    t = len(ps)
    per = [_sgd_bound((ref[i],), p, g, None if bufs is None else bufs[i], np.size(p), lr, momentum, dampening,
                      weight_decay, nesterov, first) for i, (p, g) in enumerate(zip(ps, gs))]
    return tuple(b[k] for k in range(len(ref) // t if t else 0) for b in per)


register("sgd_step_many", "sgd_step on each of T tensors (one launch on CUDA): sgd_step's bound per tensor "
          "(the kernels run the same per-element arithmetic, so the bits equal T sgd_step calls)", _sgd_many_bound)
register("sgd_step_many_inplace", "sgd_step_many's values, written over ps and bufs (ps alone when bufs is None): "
          "its bound (the same kernels with the outputs pointed at the inputs, so the same bits)", _sgd_many_bound)


U64 = 2.0**-53


def _gamma64(k: float) -> float:
    return k * U64 / (1.0 - k * U64)


def _norm2_many_bound(ref, xs):
    """Per tensor: u (1 + 4 g) |ref| + 3 g |ref| + 2^-150, g = gamma64(n + 1) (see the docstring)."""
    r = np.abs(np.asarray(ref, dtype=np.float64).reshape(-1))
    g = np.array([_gamma64(np.size(x) + 1) for x in xs], dtype=np.float64)
    with np.errstate(all="ignore"):
        return U * (1.0 + 4.0 * g) * r + 3.0 * g * r + 2.0**-150


def _scale_many_bound(ref, xs, coef):
    return tuple(0.5 * ulp32(r) for r in ref)


register("norm2_many", "per tensor sqrt(sum x^2), squares and sums in double (any order), one float32 rounding: "
          "|err| <= u (1 + 4 g) |ref| + 3 g |ref| + 2^-150, g = gamma64(n + 1) (see contract/optim.py)",
          _norm2_many_bound)
register("scale_many", "x * coef[0] per element, correctly rounded (mul's contract): |err| <= ulp(ref)/2",
          _scale_many_bound)
