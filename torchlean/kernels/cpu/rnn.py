"""CPU kernels of the recurrent cells (Numba; one pass over (batch, k * hidden) rows, float32).

Each element's expression is the spec's, evaluated in float32 in the spec's order with one rounding
per operation (no fastmath, no FMA contraction); sigmoid is the ``sigmoid`` primitive's split form
exp(-|x|) then 1 / (1 + e) or e / (1 + e), tanh is the library tanhf. Rows (batch entries) go to
Numba's threads when the step is large enough (``parts``); results never depend on the split.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .parallel import parts

F32 = np.float32
_ONE = np.float32(1.0)
_PARALLEL_ELEMS = 1 << 16   # below this many elements per step one thread does it all

__all__ = ["lstm_cell_fwd", "lstm_cell_bwd", "gru_cell_fwd", "gru_cell_bwd"]


@njit(cache=True, error_model="numpy", inline="always")
def _sig(x):
    e = np.exp(-np.abs(x))
    num = _ONE if x >= 0 else e
    return num / (_ONE + e)


@njit(cache=True, error_model="numpy", boundscheck=False)
def _lstm_fwd_rows(gi, gh, cp, H, r0, r1, h, c, act):
    for b in range(r0, r1):
        g0, a0, s = b * 4 * H, b * 5 * H, b * H
        for j in range(H):
            i = _sig(gi[g0 + j] + gh[g0 + j])
            f = _sig(gi[g0 + H + j] + gh[g0 + H + j])
            g = np.tanh(gi[g0 + 2 * H + j] + gh[g0 + 2 * H + j])
            o = _sig(gi[g0 + 3 * H + j] + gh[g0 + 3 * H + j])
            cn = f * cp[s + j] + i * g
            tc = np.tanh(cn)
            c[s + j] = cn
            h[s + j] = o * tc
            act[a0 + j] = i
            act[a0 + H + j] = f
            act[a0 + 2 * H + j] = g
            act[a0 + 3 * H + j] = o
            act[a0 + 4 * H + j] = tc


@njit(cache=True, error_model="numpy", boundscheck=False)
def _lstm_bwd_rows(act, cp, dh, dc, H, r0, r1, dg, dcp):
    for b in range(r0, r1):
        g0, a0, s = b * 4 * H, b * 5 * H, b * H
        for j in range(H):
            i, f, g = act[a0 + j], act[a0 + H + j], act[a0 + 2 * H + j]
            o, tc = act[a0 + 3 * H + j], act[a0 + 4 * H + j]
            d, dcj = dh[s + j], dc[s + j]
            dcs = dcj + (d * o) * (_ONE - tc * tc)
            do = d * tc
            dg[g0 + j] = (dcs * g) * (i * (_ONE - i))
            dg[g0 + H + j] = (dcs * cp[s + j]) * (f * (_ONE - f))
            dg[g0 + 2 * H + j] = (dcs * i) * (_ONE - g * g)
            dg[g0 + 3 * H + j] = do * (o * (_ONE - o))
            dcp[s + j] = dcs * f


@njit(cache=True, error_model="numpy", boundscheck=False)
def _gru_fwd_rows(gi, gh, hp, H, r0, r1, h, act):
    for b in range(r0, r1):
        g0, a0, s = b * 3 * H, b * 4 * H, b * H
        for j in range(H):
            r = _sig(gi[g0 + j] + gh[g0 + j])
            z = _sig(gi[g0 + H + j] + gh[g0 + H + j])
            ghn = gh[g0 + 2 * H + j]
            n = np.tanh(gi[g0 + 2 * H + j] + r * ghn)
            h[s + j] = n + z * (hp[s + j] - n)
            act[a0 + j] = r
            act[a0 + H + j] = z
            act[a0 + 2 * H + j] = n
            act[a0 + 3 * H + j] = ghn


@njit(cache=True, error_model="numpy", boundscheck=False)
def _gru_bwd_rows(act, hp, dh, H, r0, r1, dgi, dgh, dhp):
    for b in range(r0, r1):
        g0, a0, s = b * 3 * H, b * 4 * H, b * H
        for j in range(H):
            r, z, n, ghn = act[a0 + j], act[a0 + H + j], act[a0 + 2 * H + j], act[a0 + 3 * H + j]
            d = dh[s + j]
            dnp = (d * (_ONE - z)) * (_ONE - n * n)
            dz = (d * (hp[s + j] - n)) * (z * (_ONE - z))
            dr = (dnp * ghn) * (r * (_ONE - r))
            dgi[g0 + j] = dr
            dgi[g0 + H + j] = dz
            dgi[g0 + 2 * H + j] = dnp
            dgh[g0 + j] = dr
            dgh[g0 + H + j] = dz
            dgh[g0 + 2 * H + j] = dnp * r
            dhp[s + j] = d * z


@njit(cache=True, error_model="numpy", parallel=True)
def _lstm_fwd_par(gi, gh, cp, B, H, nparts, h, c, act):
    step = (B + nparts - 1) // nparts
    for p in prange(nparts):
        _lstm_fwd_rows(gi, gh, cp, H, p * step, min(B, (p + 1) * step), h, c, act)


@njit(cache=True, error_model="numpy", parallel=True)
def _lstm_bwd_par(act, cp, dh, dc, B, H, nparts, dg, dcp):
    step = (B + nparts - 1) // nparts
    for p in prange(nparts):
        _lstm_bwd_rows(act, cp, dh, dc, H, p * step, min(B, (p + 1) * step), dg, dcp)


@njit(cache=True, error_model="numpy", parallel=True)
def _gru_fwd_par(gi, gh, hp, B, H, nparts, h, act):
    step = (B + nparts - 1) // nparts
    for p in prange(nparts):
        _gru_fwd_rows(gi, gh, hp, H, p * step, min(B, (p + 1) * step), h, act)


@njit(cache=True, error_model="numpy", parallel=True)
def _gru_bwd_par(act, hp, dh, B, H, nparts, dgi, dgh, dhp):
    step = (B + nparts - 1) // nparts
    for p in prange(nparts):
        _gru_bwd_rows(act, hp, dh, H, p * step, min(B, (p + 1) * step), dgi, dgh, dhp)


def _parts(batch: int, hidden: int) -> int:
    return parts(batch * hidden, batch, _PARALLEL_ELEMS)


def lstm_cell_fwd(gi, gh, c_prev, batch, hidden):
    n = batch * hidden
    h, c, act = np.empty(n, F32), np.empty(n, F32), np.empty(5 * n, F32)
    k = _parts(batch, hidden)
    if k > 1:
        _lstm_fwd_par(gi, gh, c_prev, batch, hidden, k, h, c, act)
    else:
        _lstm_fwd_rows(gi, gh, c_prev, hidden, 0, batch, h, c, act)
    return h, c, act


def lstm_cell_bwd(act, c_prev, dh, dc, batch, hidden):
    n = batch * hidden
    dg, dcp = np.empty(4 * n, F32), np.empty(n, F32)
    k = _parts(batch, hidden)
    if k > 1:
        _lstm_bwd_par(act, c_prev, dh, dc, batch, hidden, k, dg, dcp)
    else:
        _lstm_bwd_rows(act, c_prev, dh, dc, hidden, 0, batch, dg, dcp)
    return dg, dcp


def gru_cell_fwd(gi, gh, h_prev, batch, hidden):
    n = batch * hidden
    h, act = np.empty(n, F32), np.empty(4 * n, F32)
    k = _parts(batch, hidden)
    if k > 1:
        _gru_fwd_par(gi, gh, h_prev, batch, hidden, k, h, act)
    else:
        _gru_fwd_rows(gi, gh, h_prev, hidden, 0, batch, h, act)
    return h, act


def gru_cell_bwd(act, h_prev, dh, batch, hidden):
    n = batch * hidden
    dgi, dgh, dhp = np.empty(3 * n, F32), np.empty(3 * n, F32), np.empty(n, F32)
    k = _parts(batch, hidden)
    if k > 1:
        _gru_bwd_par(act, h_prev, dh, batch, hidden, k, dgi, dgh, dhp)
    else:
        _gru_bwd_rows(act, h_prev, dh, hidden, 0, batch, dgi, dgh, dhp)
    return dgi, dgh, dhp
