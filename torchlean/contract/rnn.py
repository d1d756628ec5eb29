"""Contracts of the recurrent-cell family: lstm_cell_{fwd,bwd}, gru_cell_{fwd,bwd}.

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

from .core import TINY, U, register

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


def _lstm_fwd_bound(ref, gi, gh, c_prev, batch, hidden):
    a, b = _v(gi, batch, 4, hidden), _v(gh, batch, 4, hidden)
    gates = [_add(_exact(a[:, k]), _exact(b[:, k])) for k in range(4)]
    i, f, g, o = _sig(gates[0]), _sig(gates[1]), _tanh(gates[2]), _sig(gates[3])
    c = _add(_mul(f, _exact(_v(c_prev, batch, 1, hidden)[:, 0])), _mul(i, g))
    tc = _tanh(c)
    h = _mul(o, tc)
    return _flat(h[1], c[1], [i[1], f[1], g[1], o[1], tc[1]])


def _lstm_bwd_bound(ref, act, c_prev, dh, dc, batch, hidden):
    a = _v(act, batch, 5, hidden)
    i, f, g, o, tc = (_exact(a[:, k]) for k in range(5))
    c_prev, dh, dc = (_exact(_v(v, batch, 1, hidden)[:, 0]) for v in (c_prev, dh, dc))
    dcs = _add(dc, _mul(_mul(dh, o), _add(_ONE, _mul(tc, tc), -1.0)))
    d_o = _mul(dh, tc)

    def dsig(s):
        return _mul(s, _add(_ONE, s, -1.0))

    dgates = [_mul(_mul(dcs, g), dsig(i))[1], _mul(_mul(dcs, c_prev), dsig(f))[1],
              _mul(_mul(dcs, i), _add(_ONE, _mul(g, g), -1.0))[1], _mul(d_o, dsig(o))[1]]
    return _flat(dgates, _mul(dcs, f)[1])


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
