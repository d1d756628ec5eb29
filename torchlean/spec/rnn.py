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

The whole recurrence of one LSTM layer-direction, one primitive (a GPU runs it as one fused launch
per step instead of a GEMM and a cell each):

    lstm_recurrence_fwd(gi (T, B, 4H), h0, c0 (B, H), w_hh (4H, H), b_hh (4H) or None, T, B, H, reverse)
        -> (y (T + 1, B, H), cs (T, B, H), act (T, B, 5H))
        steps t = 0 .. T-1 (T-1 .. 0 when reverse), from (h0, c0): gh = h_prev w_hh^T + b_hh (the sum,
        then the bias), then lstm_cell_fwd(gi_t, gh, c_prev); y row t = h_t, y row T = c of the last
        step processed (c0 when T = 0), cs row t = c_t, act row t = the cell's act
    lstm_recurrence_bwd(act, cs, c0, w_hh, gy (T + 1, B, H), T, B, H, reverse) -> (dgates (T, B, 4H), dh0, dc0)
        the VJP for the cotangent gy of y, walking the steps backwards: dh_t = gy_t + dgates_next w_hh
        (the product, then the sum; gy_t alone at the first step walked), dc from gy row T on, then
        lstm_cell_bwd(act_t, c_prev, dh_t, dc); dh0 = dgates of the first step processed times w_hh,
        dc0 the last dc. The gradients of gi, w_hh (dgates^T h_prev) and b_hh (column sums) are the
        caller's GEMM and reduction, from dgates.

The order of operations is the kernels' (so IEEE specials meet the same NaN and inf); sigmoid is
1 / (1 + exp(-x)) in float64, the kernels use the same split form as the ``sigmoid`` primitive.
"""

from __future__ import annotations

import numpy as np

__all__ = ["lstm_cell_fwd", "lstm_cell_bwd", "gru_cell_fwd", "gru_cell_bwd", "lstm_recurrence_fwd",
           "lstm_recurrence_bwd"]


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


def recurrence_order(steps, reverse):
    """The time indices in the order the forward processes them."""
    return range(steps - 1, -1, -1) if reverse else range(steps)


def _matmul(a, b):
    # einsum, not BLAS: inf * 0 is NaN in every term, as in the kernels
    with np.errstate(all="ignore"):
        return np.einsum("ik,kj->ij", a, b, optimize=False)


def lstm_recurrence_fwd(gi, h0, c0, w_hh, b_hh, steps, batch, hidden, reverse):
    T, B, H = steps, batch, hidden
    n = B * H
    gi = np.asarray(gi, dtype=np.float64).reshape(T, 4 * n)
    W = np.asarray(w_hh, dtype=np.float64).reshape(4 * H, H)
    h = np.asarray(h0, dtype=np.float64).reshape(-1)
    c = np.asarray(c0, dtype=np.float64).reshape(-1)
    y, cs, act = np.zeros((T + 1, n)), np.zeros((T, n)), np.zeros((T, 5 * n))
    for t in recurrence_order(T, reverse):
        gh = _matmul(h.reshape(B, H), W.T)
        if b_hh is not None:
            with np.errstate(all="ignore"):
                gh = gh + np.asarray(b_hh, dtype=np.float64).reshape(1, 4 * H)
        h, c, act[t] = lstm_cell_fwd(gi[t], gh.reshape(-1), c, B, H)
        y[t], cs[t] = h, c
    y[T] = c
    return y.reshape(-1), cs.reshape(-1), act.reshape(-1)


def lstm_recurrence_bwd(act, cs, c0, w_hh, gy, steps, batch, hidden, reverse):
    T, B, H = steps, batch, hidden
    n = B * H
    act = np.asarray(act, dtype=np.float64).reshape(T, 5 * n)
    cs = np.asarray(cs, dtype=np.float64).reshape(T, n)
    c0 = np.asarray(c0, dtype=np.float64).reshape(-1)
    W = np.asarray(w_hh, dtype=np.float64).reshape(4 * H, H)
    gy = np.asarray(gy, dtype=np.float64).reshape(T + 1, n)
    order = list(recurrence_order(T, reverse))
    dgates = np.zeros((T, 4 * n))
    dc, dg_next = gy[T].copy(), None
    for s in range(T - 1, -1, -1):
        t = order[s]
        c_prev = cs[order[s - 1]] if s > 0 else c0
        dh = gy[t]
        if dg_next is not None:
            with np.errstate(all="ignore"):
                dh = dh + _matmul(dg_next.reshape(B, 4 * H), W).reshape(-1)
        dgates[t], dc = lstm_cell_bwd(act[t], c_prev, dh, dc, B, H)
        dg_next = dgates[t]
    dh0 = _matmul(dg_next.reshape(B, 4 * H), W).reshape(-1) if dg_next is not None else np.zeros(n)
    return dgates.reshape(-1), dh0, dc
