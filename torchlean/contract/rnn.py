"""Contracts of the recurrent-cell family: lstm_cell_{fwd,bwd}, gru_cell_{fwd,bwd},
lstm_recurrence_{fwd,bwd}.

Each output is a short fixed expression of +, -, * and the library sigmoid / tanh (no sums of a
variable number of terms), so the bound is a running first-order error analysis evaluated in
float64 alongside the spec: every intermediate value v of the spec carries an error bound e
(inputs: e = 0, they are exact float32 values), propagated exactly as

    x y:      E = |x| e_y + |y| e_x + e_x e_y,   e = E + u (|x y| + E) + 2^-149   (rounding; subnormal)
    x +- y:   E = e_x + e_y,                      e = E + u (|x +- y| + E)
    sigmoid:  e = d e_x + 16u (|s| + d e_x) + TINY,   d = max of s' over [x - e_x, x + e_x]
    tanh:     e = d e_x + 8u (|t| + d e_x) + TINY,    d = max of tanh' over that interval

(16u and 8u are the ``sigmoid`` and ``tanh`` primitives' own contracts: the kernels use the same
functions). This holds for any kernel that evaluates the spec's expression tree with one float32
rounding per operation, in any association of a product of two factors; it is tight enough to
catch a wrong gate order, a missing bias term or a dropped 1 - x (each an O(1) change).
"""

from __future__ import annotations

import numpy as np

from ..spec import rnn as rnn_spec
from .core import TINY, U, gamma, register

__all__: list[str] = []

SUB = 2.0**-149


def _v(a, batch, k, hidden):
    return np.asarray(a, dtype=np.float64).reshape(batch, k, hidden)


def _mul(x, y):
    (a, ea), (b, eb) = x, y
    with np.errstate(all="ignore"):
        v = a * b
        E = np.abs(a) * eb + np.abs(b) * ea + ea * eb
        return v, E + U * (np.abs(v) + E) + SUB


def _add(x, y, sign=1.0):
    (a, ea), (b, eb) = x, y
    with np.errstate(all="ignore"):
        v = a + sign * b
        E = ea + eb
        return v, E + U * (np.abs(v) + E)


def _sig(x):
    a, ea = x
    with np.errstate(all="ignore"):
        e = np.exp(-np.abs(a))
        s = np.where(a >= 0, 1.0, e) / (1.0 + e)
        m = np.maximum(np.abs(a) - ea, 0.0)
        em = np.exp(-m)
        d = em / (1.0 + em) ** 2
        de = d * ea
        return s, de + 16 * U * (np.abs(s) + de) + TINY


def _tanh(x):
    a, ea = x
    with np.errstate(all="ignore"):
        t = np.tanh(a)
        d = 1.0 - np.tanh(np.maximum(np.abs(a) - ea, 0.0)) ** 2
        de = d * ea
        return t, de + 8 * U * (np.abs(t) + de) + TINY


def _exact(a):
    a = np.asarray(a, dtype=np.float64)
    return a, np.zeros_like(a)


_ONE = (1.0, 0.0)


def _flat(*es):
    return tuple(np.stack(e, axis=1).reshape(-1) if isinstance(e, list) else np.asarray(e).reshape(-1) for e in es)


def _lstm_fwd_cell(a, c_prev):
    """(h, c, [i, f, g, o, tc]) as (value, error) pairs from the gate pre-activations a (4 pairs)."""
    i, f, g, o = _sig(a[0]), _sig(a[1]), _tanh(a[2]), _sig(a[3])
    c = _add(_mul(f, c_prev), _mul(i, g))
    tc = _tanh(c)
    return _mul(o, tc), c, [i, f, g, o, tc]


def _lstm_fwd_bound(ref, gi, gh, c_prev, batch, hidden):
    a, b = _v(gi, batch, 4, hidden), _v(gh, batch, 4, hidden)
    h, c, act = _lstm_fwd_cell([_add(_exact(a[:, k]), _exact(b[:, k])) for k in range(4)],
                               _exact(_v(c_prev, batch, 1, hidden)[:, 0]))
    return _flat(h[1], c[1], [e[1] for e in act])


def _lstm_bwd_cell(act, c_prev, dh, dc):
    """(dgates (4 pairs), dc_prev) from (value, error) pairs."""
    i, f, g, o, tc = act
    dcs = _add(dc, _mul(_mul(dh, o), _add(_ONE, _mul(tc, tc), -1.0)))
    d_o = _mul(dh, tc)

    def dsig(s):
        return _mul(s, _add(_ONE, s, -1.0))

    dgates = [_mul(_mul(dcs, g), dsig(i)), _mul(_mul(dcs, c_prev), dsig(f)),
              _mul(_mul(dcs, i), _add(_ONE, _mul(g, g), -1.0)), _mul(d_o, dsig(o))]
    return dgates, _mul(dcs, f)


def _lstm_bwd_bound(ref, act, c_prev, dh, dc, batch, hidden):
    a = _v(act, batch, 5, hidden)
    c_prev, dh, dc = (_exact(_v(v, batch, 1, hidden)[:, 0]) for v in (c_prev, dh, dc))
    dgates, dcp = _lstm_bwd_cell([_exact(a[:, k]) for k in range(5)], c_prev, dh, dc)
    return _flat([d[1] for d in dgates], dcp[1])


def _product(x, ex, w, k):
    """(value, error) of the float32 product x w ((B, K) by (K, N)) of an inexact x: its error carried
    through |w| exactly, plus the any-order GEMM bound with k terms on the magnitudes x may have."""
    with np.errstate(all="ignore"):
        aw = np.abs(w)
        E = np.einsum("bk,kn->bn", ex, aw, optimize=False)
        mag = np.einsum("bk,kn->bn", np.abs(x) + ex, aw, optimize=False)
        return np.einsum("bk,kn->bn", x, w, optimize=False), E + gamma(k) * mag + k * SUB


def _clean(e):
    """A NaN error (an inf or NaN met a zero on its way) bounds nothing: inf."""
    return np.where(np.isnan(e), np.inf, e)


def _lstm_recurrence_fwd_bound(ref, gi, h0, c0, w_hh, b_hh, steps, batch, hidden, reverse):
    T, B, H = steps, batch, hidden
    gi = np.asarray(gi, dtype=np.float64).reshape(T, B, 4, H)
    W = np.asarray(w_hh, dtype=np.float64).reshape(4 * H, H)
    h = (np.asarray(h0, dtype=np.float64).reshape(B, H), np.zeros((B, H)))
    c = (np.asarray(c0, dtype=np.float64).reshape(B, H), np.zeros((B, H)))
    ey, ecs, eact = np.zeros((T + 1, B, H)), np.zeros((T, B, H)), np.zeros((T, B, 5, H))
    for t in rnn_spec.recurrence_order(T, reverse):
        # the sum of H products, then the bias: H + 1 terms, the bias exact (its magnitude joins the sum's)
        v, e = _product(h[0], h[1], W.T, H + 1)
        if b_hh is not None:
            bias = np.asarray(b_hh, dtype=np.float64).reshape(1, 4 * H)
            with np.errstate(all="ignore"):
                v, e = v + bias, e + gamma(H + 1) * np.abs(bias)
        v, e = v.reshape(B, 4, H), _clean(e).reshape(B, 4, H)
        h, c, act = _lstm_fwd_cell([_add(_exact(gi[t, :, k]), (v[:, k], e[:, k])) for k in range(4)], c)
        h, c = (h[0], _clean(h[1])), (c[0], _clean(c[1]))
        ey[t], ecs[t] = h[1], c[1]
        eact[t] = np.stack([_clean(a[1]) for a in act], axis=1)
    ey[T] = c[1]
    return ey.reshape(-1), ecs.reshape(-1), eact.reshape(-1)


def _lstm_recurrence_bwd_bound(ref, act, cs, c0, w_hh, gy, steps, batch, hidden, reverse):
    T, B, H = steps, batch, hidden
    act = np.asarray(act, dtype=np.float64).reshape(T, B, 5, H)
    cs = np.asarray(cs, dtype=np.float64).reshape(T, B, H)
    c0 = np.asarray(c0, dtype=np.float64).reshape(B, H)
    W = np.asarray(w_hh, dtype=np.float64).reshape(4 * H, H)
    gy = np.asarray(gy, dtype=np.float64).reshape(T + 1, B, H)
    order = list(rnn_spec.recurrence_order(T, reverse))
    edg = np.zeros((T, B, 4, H))
    dc, dg = _exact(gy[T]), None
    for s in range(T - 1, -1, -1):
        t = order[s]
        dh = _exact(gy[t])
        if dg is not None:  # the product, then the sum with gy
            dh = _add(dh, _product(dg[0], dg[1], W, 4 * H))
        c_prev = _exact(cs[order[s - 1]] if s > 0 else c0)
        dgates, dc = _lstm_bwd_cell([_exact(act[t, :, k]) for k in range(5)], c_prev, dh, dc)
        dc = (dc[0], _clean(dc[1]))
        dg = (np.concatenate([d[0] for d in dgates], axis=1), _clean(np.concatenate([d[1] for d in dgates], axis=1)))
        edg[t] = dg[1].reshape(B, 4, H)
    edh0 = _clean(_product(dg[0], dg[1], W, 4 * H)[1]) if dg is not None else np.zeros((B, H))
    return edg.reshape(-1), edh0.reshape(-1), dc[1].reshape(-1)


def _gru_fwd_bound(ref, gi, gh, h_prev, batch, hidden):
    a, b = _v(gi, batch, 3, hidden), _v(gh, batch, 3, hidden)
    r = _sig(_add(_exact(a[:, 0]), _exact(b[:, 0])))
    z = _sig(_add(_exact(a[:, 1]), _exact(b[:, 1])))
    n = _tanh(_add(_exact(a[:, 2]), _mul(r, _exact(b[:, 2]))))
    hp = _exact(_v(h_prev, batch, 1, hidden)[:, 0])
    h = _add(n, _mul(z, _add(hp, n, -1.0)))
    return _flat(h[1], [r[1], z[1], n[1], np.zeros_like(r[1])])


def _gru_bwd_bound(ref, act, h_prev, dh, batch, hidden):
    a = _v(act, batch, 4, hidden)
    r, z, n, ghn = (_exact(a[:, k]) for k in range(4))
    hp, dh = (_exact(_v(v, batch, 1, hidden)[:, 0]) for v in (h_prev, dh))

    def dsig(s):
        return _mul(s, _add(_ONE, s, -1.0))

    dnp = _mul(_mul(dh, _add(_ONE, z, -1.0)), _add(_ONE, _mul(n, n), -1.0))
    dz = _mul(_mul(dh, _add(hp, n, -1.0)), dsig(z))
    dr = _mul(_mul(dnp, ghn), dsig(r))
    return _flat([dr[1], dz[1], dnp[1]], [dr[1], dz[1], _mul(dnp, r)[1]], _mul(dh, z)[1])


_STATEMENT = ("first-order error propagation through the cell's expression: one rounding per +, -, * "
              "(u relative + 2^-149), the sigmoid / tanh primitives' 16u / 8u, input errors through the "
              "derivative's maximum over the error interval")
register("lstm_cell_fwd", _STATEMENT, _lstm_fwd_bound)
register("lstm_cell_bwd", _STATEMENT, _lstm_bwd_bound)
register("gru_cell_fwd", _STATEMENT, _gru_fwd_bound)
register("gru_cell_bwd", _STATEMENT, _gru_bwd_bound)
_RECURRENCE = ("the cells' error propagation step after step, with the per-step GEMM's any-order bound "
               "gamma(k) sum |h||w| + k 2^-149 (k = hidden + 1 forward, 4 hidden backward) on the magnitudes the "
               "inexact state may have, and the state's error carried through |w| exactly")
register("lstm_recurrence_fwd", _RECURRENCE, _lstm_recurrence_fwd_bound)
register("lstm_recurrence_bwd", _RECURRENCE, _lstm_recurrence_bwd_bound)
