"""Float64 reference of the recurrent-cell family: the element-wise math of one LSTM or GRU step.

Layout: (batch, k * hidden) row-major, gates in PyTorch's order (LSTM i, f, g, o; GRU r, z, n).
The GEMMs of a step (x W_ih^T + b_ih for all steps at once, h W_hh^T + b_hh per step) stay on the
GEMM primitives; these primitives take their results.

    lstm_cell_fwd(gi, gh, c_prev) -> (h, c, act)       a = gi + gh
        i, f, o = sigmoid(a_i, a_f, a_o), g = tanh(a_g), c = f c_prev + i g, h = o tanh(c)
        act (batch, 5 hidden) = [i, f, g, o, tanh(c)]: what the backward needs, nothing recomputed
    lstm_cell_bwd(act, c_prev, dh, dc) -> (dgates, dc_prev)       (dgates = dgi = dgh)
        dcs = dc + (dh o) (1 - tc^2);  do = dh tc,  di = dcs g,  df = dcs c_prev,  dg = dcs i
        dgates = [di i (1 - i), df f (1 - f), dg (1 - g^2), do o (1 - o)],  dc_prev = dcs f
    gru_cell_fwd(gi, gh, h_prev) -> (h, act)
        r = sigmoid(gi_r + gh_r), z = sigmoid(gi_z + gh_z), n = tanh(gi_n + r gh_n),
        h = n + z (h_prev - n)       (PyTorch's fused GRU form)
        act (batch, 4 hidden) = [r, z, n, gh_n]
    gru_cell_bwd(act, h_prev, dh) -> (dgi, dgh, dh_prev)     (dh_prev: the direct term dh z only;
        the caller adds dgh W_hh)
        dn = dh (1 - z), dz = dh (h_prev - n), dnp = dn (1 - n^2), dr = dnp gh_n
        dgi = [dr r (1 - r), dz z (1 - z), dnp],  dgh = [dgi_r, dgi_z, dnp r],  dh_prev = dh z

The order of operations is the kernels' (so IEEE specials meet the same NaN and inf); sigmoid is
1 / (1 + exp(-x)) in float64, the kernels use the same split form as the ``sigmoid`` primitive.
"""

from __future__ import annotations

import numpy as np

__all__ = ["lstm_cell_fwd", "lstm_cell_bwd", "gru_cell_fwd", "gru_cell_bwd"]


def _rows(a, batch, k, hidden):
    return np.asarray(a, dtype=np.float64).reshape(batch, k, hidden)


def _sigmoid(x):
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0, e) / (1.0 + e)


def lstm_cell_fwd(gi, gh, c_prev, batch, hidden):
    with np.errstate(all="ignore"):
        a = _rows(gi, batch, 4, hidden) + _rows(gh, batch, 4, hidden)
        c_prev = _rows(c_prev, batch, 1, hidden)[:, 0]
        i, f, g, o = _sigmoid(a[:, 0]), _sigmoid(a[:, 1]), np.tanh(a[:, 2]), _sigmoid(a[:, 3])
        c = f * c_prev + i * g
        tc = np.tanh(c)
        h = o * tc
        act = np.stack([i, f, g, o, tc], axis=1)
    return h.reshape(-1), c.reshape(-1), act.reshape(-1)


def lstm_cell_bwd(act, c_prev, dh, dc, batch, hidden):
    with np.errstate(all="ignore"):
        a = _rows(act, batch, 5, hidden)
        i, f, g, o, tc = (a[:, k] for k in range(5))
        c_prev, dh, dc = (_rows(v, batch, 1, hidden)[:, 0] for v in (c_prev, dh, dc))
        dcs = dc + (dh * o) * (1.0 - tc * tc)
        d_o = dh * tc
        dgates = np.stack([(dcs * g) * (i * (1.0 - i)), (dcs * c_prev) * (f * (1.0 - f)),
                           (dcs * i) * (1.0 - g * g), d_o * (o * (1.0 - o))], axis=1)
        dc_prev = dcs * f
    return dgates.reshape(-1), dc_prev.reshape(-1)


def gru_cell_fwd(gi, gh, h_prev, batch, hidden):
    with np.errstate(all="ignore"):
        a, b = _rows(gi, batch, 3, hidden), _rows(gh, batch, 3, hidden)
        h_prev = _rows(h_prev, batch, 1, hidden)[:, 0]
        r = _sigmoid(a[:, 0] + b[:, 0])
        z = _sigmoid(a[:, 1] + b[:, 1])
        n = np.tanh(a[:, 2] + r * b[:, 2])
        h = n + z * (h_prev - n)
        act = np.stack([r, z, n, b[:, 2]], axis=1)
    return h.reshape(-1), act.reshape(-1)


def gru_cell_bwd(act, h_prev, dh, batch, hidden):
    with np.errstate(all="ignore"):
        a = _rows(act, batch, 4, hidden)
        r, z, n, ghn = (a[:, k] for k in range(4))
        h_prev, dh = (_rows(v, batch, 1, hidden)[:, 0] for v in (h_prev, dh))
        dnp = (dh * (1.0 - z)) * (1.0 - n * n)
        dz = (dh * (h_prev - n)) * (z * (1.0 - z))
        dr = (dnp * ghn) * (r * (1.0 - r))
        dgi = np.stack([dr, dz, dnp], axis=1)
        dgh = np.stack([dr, dz, dnp * r], axis=1)
        dh_prev = dh * z
    return dgi.reshape(-1), dgh.reshape(-1), dh_prev.reshape(-1)
