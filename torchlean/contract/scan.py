"""Contracts of the selective-scan family: selective_scan_diag[_var]_{fwd,bwd}.

Forward. Unrolled, h_t = sum_{s<=t} (prod_{r=s+1..t} a_r) b_s x_s + (prod_{r=0..t} a_r) h0: a sum
of t + 2 terms, each a product. A kernel may associate the recurrence in any order: the CPU runs
it sequentially (h = fl(fl(a h) + fl(b x))); the CUDA kernel composes affine maps per chunk
((a2, b2) o (a1, b1) = (a2 a1, a2 b1 + b2), chunk products kept as a float mantissa and an
integer exponent so that they never overflow or underflow), combines the chunk maps, then
rescans each chunk from its carry-in. Counting roundings per term (Higham-style): 1 for b x, at
most one per factor a_r of its product (each a_r is multiplied in exactly once, into a running
value or into a chunk product), at most one per addition on the way (<= t + 1), and at most 3
per chunk boundary crossed plus 6 for the two levels of chunk-map combination (chunks are at
least 4 steps long, so boundaries add < t). Every term therefore carries at most 3t + 16
roundings, so in any of these orders

    |H_t - ref_t| <= gamma(3t + 16) * habs_t + tiny_t                       (t = 0, 1, ...)

where habs is the same scan on absolute values (|a|, |b x|, |h0|), evaluated in float64 by an
O(n) loop (an upper bound of sum |term|), and tiny_t = |a_t| tiny_{t-1} + 8 * 2^-149 covers
roundings in the subnormal range (absolute error <= 2^-150 each, at most 16 per step, amplified
by the later factors like any other error). This is tight enough to catch a kernel that drops or
misplaces a chunk carry (an O(1) relative change of h when |a| is near 1) or uses the wrong
coefficient. Once habs has exceeded half the float32 range at or before t, intermediate values of
some order may overflow where the float64 reference does not: nothing is promised there (bound
inf; a NaN output against a finite reference still fails).

Backward (given H and dH, both exact inputs). The adjoint g_t = dH_t + a_{t+1} g_{t+1} is the
same kind of scan run backwards (inputs dH, no product rounding, at most 3(L-1-t) + 16 roundings
per term): e_g,t = gamma(3(L-1-t) + 16) gabs_t + tiny'_t, gabs the scan of |a_{t+1}|, |dH|.
A product fl(g' c) with |g' - g| <= e adds |c| (e (1 + u) + u gabs) + 2^-149. So

    dX_t  = g_t B_t:        |B_t| (e_g,t (1 + u) + u gabs_t) + 2^-149
    dh0   = a_0 g_0:        |a_0| (e_g,0 (1 + u) + u gabs_0) + 2^-149
    var:  dA_t = g_t Hp_t, dB_t = g_t X_t: the product bound with c = Hp_t (H_{t-1}, h0 at t = 0), X_t
    diag: dA = sum_t g_t Hp_t, dB = sum_t g_t X_t in any order (per-chunk partials included):
          (1 + gamma(L)) sum_t |c_t| e_g,t + gamma(L + 1) sum_t |c_t| gabs_t + L 2^-149
"""

from __future__ import annotations

import numpy as np

from .core import F32_MAX, U, gamma, register

__all__: list[str] = []

SUB = 2.0**-149
_STEP_TINY = 8 * SUB
_OVER = F32_MAX / 2


def _rows(a, seq_len, state, var):
    a = np.abs(np.asarray(a, dtype=np.float64).reshape(-1))
    return a.reshape(seq_len, state) if var else np.broadcast_to(a, (seq_len, state))


def _gammas(counts):
    u_k = np.asarray(counts, dtype=np.float64) * U
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(u_k < 0.5, u_k / (1.0 - u_k), np.inf)


def _forward_bound(A, B, X, h0, seq_len, state, var):
    """(L, S) bound on |H - ref| (see the module docstring)."""
    a = _rows(A, seq_len, state, var)
    bx = _rows(B, seq_len, state, var) * np.abs(np.asarray(X, np.float64).reshape(seq_len, state))
    habs = np.empty((seq_len, state))
    tiny = np.empty((seq_len, state))
    h = np.abs(np.asarray(h0, np.float64).reshape(-1))
    s = np.zeros(state)
    with np.errstate(all="ignore"):
        for t in range(seq_len):
            h = a[t] * h + bx[t]
            s = a[t] * s + _STEP_TINY
            habs[t], tiny[t] = h, s
        over = np.maximum.accumulate(np.where(np.isnan(habs), np.inf, habs), axis=0) >= _OVER if seq_len else habs > 0
        g = _gammas(3 * np.arange(seq_len) + 16)[:, None]
        bound = g * habs + tiny
    return np.where(over, np.inf, bound)


def _adjoint_bound(A, dH, seq_len, state, var):
    """(e_g, gabs), both (L, S): the bound on the adjoint and its absolute scan."""
    a = _rows(A, seq_len, state, var)
    d = np.abs(np.asarray(dH, np.float64).reshape(seq_len, state))
    gabs = np.empty((seq_len, state))
    tiny = np.empty((seq_len, state))
    with np.errstate(all="ignore"):
        for t in range(seq_len - 1, -1, -1):
            if t == seq_len - 1:
                g, s = d[t].copy(), np.full(state, _STEP_TINY)
            else:
                g = a[t + 1] * g + d[t]
                s = a[t + 1] * s + _STEP_TINY
            gabs[t], tiny[t] = g, s
        if seq_len:
            running = np.maximum.accumulate(np.where(np.isnan(gabs), np.inf, gabs)[::-1], axis=0)[::-1]
            over = running >= _OVER
        else:
            over = np.zeros((0, state), bool)
        gm = _gammas(3 * (seq_len - 1 - np.arange(seq_len)) + 16)[:, None]
        e = np.where(over, np.inf, gm * gabs + tiny)
    return e, gabs


def _product(c, e, gabs):
    with np.errstate(all="ignore"):
        return c * (e * (1 + U) + U * gabs) + SUB


def _backward_bound(A, B, X, h0, H, dH, seq_len, state, var):
    e, gabs = _adjoint_bound(A, dH, seq_len, state, var)
    b = _rows(B, seq_len, state, var)
    x = np.abs(np.asarray(X, np.float64).reshape(seq_len, state))
    hp = np.empty((seq_len, state))
    if seq_len:
        hp[0] = np.abs(np.asarray(h0, np.float64).reshape(-1))
        hp[1:] = np.abs(np.asarray(H, np.float64).reshape(seq_len, state))[:-1]
    a0 = _rows(A, seq_len, state, var)[0] if seq_len else np.zeros(state)
    with np.errstate(all="ignore"):
        d_x = _product(b, e, gabs)
        d_h0 = _product(a0, e[0], gabs[0]) if seq_len else np.zeros(state)
        if var:
            d_a, d_b = _product(hp, e, gabs), _product(x, e, gabs)
        else:
            def red(c):
                return ((1 + gamma(seq_len)) * np.sum(c * e, axis=0)
                        + gamma(seq_len + 1) * np.sum(c * gabs, axis=0) + seq_len * SUB)
            d_a, d_b = red(hp), red(x)
    return d_a.reshape(-1), d_b.reshape(-1), d_x.reshape(-1), d_h0.reshape(-1)


_FWD = ("any association of the scan (sequential or chunked): |err_t| <= gamma(3t + 16) habs_t + tiny_t, habs the "
        "scan on |a|, |b x|, |h0| (inf once habs passed float32 range)")
_BWD = ("adjoint g within gamma(3(L-1-t) + 16) gabs_t + tiny_t; dX, dh0 (and var dA, dB) one more product; diag dA, "
        "dB sums over t in any order: (1 + gamma(L)) sum|c| e_g + gamma(L+1) sum|c| gabs")

register("selective_scan_diag_fwd", _FWD,
          lambda ref, A, B, X, h0, L, S: _forward_bound(A, B, X, h0, L, S, False).reshape(-1))
register("selective_scan_diag_var_fwd", _FWD,
          lambda ref, A, B, X, h0, L, S: _forward_bound(A, B, X, h0, L, S, True).reshape(-1))
register("selective_scan_diag_bwd", _BWD,
          lambda ref, A, B, X, h0, H, dH, L, S: _backward_bound(A, B, X, h0, H, dH, L, S, False))
register("selective_scan_diag_var_bwd", _BWD,
          lambda ref, A, B, X, h0, H, dH, L, S: _backward_bound(A, B, X, h0, H, dH, L, S, True))
