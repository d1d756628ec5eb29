"""CPU kernels of the recurrent cells (Numba; one pass over (batch, k * hidden) rows, float32).

Each element's expression is the spec's, evaluated in float32 in the spec's order with one rounding
per operation (no fastmath, no FMA contraction); sigmoid is the ``sigmoid`` primitive's split form
exp(-|x|) then 1 / (1 + e) or e / (1 + e), tanh is the library tanhf. Contiguous ranges of the
(batch, hidden) elements go to Numba's threads when the step is large enough (``parts``): the forward
cells (three to five library transcendentals an element) split from a few thousand elements, a
language model's step (batch 20, hidden 650) included; the backward ones (a few multiply-adds an
element) from more. Every element is computed alone, so results never depend on the split.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .parallel import parts

F32 = np.float32
_ONE = np.float32(1.0)
_FWD_MIN_ELEMS = 2048       # elements per part at least, forward cells (~50 ns an element)
_BWD_MIN_ELEMS = 8192       # backward cells (a few ns an element)
_ITEM = 512                 # elements per indivisible item (parts at most n / _ITEM)

__all__ = ["lstm_cell_fwd", "lstm_cell_bwd", "gru_cell_fwd", "gru_cell_bwd"]


@njit(cache=True, error_model="numpy", inline="always")
def _sig(x):
    e = np.exp(-np.abs(x))
    num = _ONE if x >= 0 else e
    return num / (_ONE + e)


# Each kernel computes the elements r0:r1 of the step's (batch, hidden) elements, flat (row b holds
# b H to b H + H - 1), whole rows or not.
@njit(cache=True, error_model="numpy", boundscheck=False)
def _lstm_fwd_rows(gi, gh, cp, H, r0, r1, h, c, act):
    if r1 <= r0:
        return
    for b in range(r0 // H, (r1 - 1) // H + 1):
        g0, a0, s = b * 4 * H, b * 5 * H, b * H
        for j in range(max(r0 - s, 0), min(r1 - s, H)):
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
    if r1 <= r0:
        return
    for b in range(r0 // H, (r1 - 1) // H + 1):
        g0, a0, s = b * 4 * H, b * 5 * H, b * H
        for j in range(max(r0 - s, 0), min(r1 - s, H)):
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
    if r1 <= r0:
        return
    for b in range(r0 // H, (r1 - 1) // H + 1):
        g0, a0, s = b * 3 * H, b * 4 * H, b * H
        for j in range(max(r0 - s, 0), min(r1 - s, H)):
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
    if r1 <= r0:
        return
    for b in range(r0 // H, (r1 - 1) // H + 1):
        g0, a0, s = b * 3 * H, b * 4 * H, b * H
        for j in range(max(r0 - s, 0), min(r1 - s, H)):
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
    n = B * H
    for p in prange(nparts):
        _lstm_fwd_rows(gi, gh, cp, H, (n * p) // nparts, (n * (p + 1)) // nparts, h, c, act)


@njit(cache=True, error_model="numpy", parallel=True)
def _lstm_bwd_par(act, cp, dh, dc, B, H, nparts, dg, dcp):
    n = B * H
    for p in prange(nparts):
        _lstm_bwd_rows(act, cp, dh, dc, H, (n * p) // nparts, (n * (p + 1)) // nparts, dg, dcp)


@njit(cache=True, error_model="numpy", parallel=True)
def _gru_fwd_par(gi, gh, hp, B, H, nparts, h, act):
    n = B * H
    for p in prange(nparts):
        _gru_fwd_rows(gi, gh, hp, H, (n * p) // nparts, (n * (p + 1)) // nparts, h, act)


@njit(cache=True, error_model="numpy", parallel=True)
def _gru_bwd_par(act, hp, dh, B, H, nparts, dgi, dgh, dhp):
    n = B * H
    for p in prange(nparts):
        _gru_bwd_rows(act, hp, dh, H, (n * p) // nparts, (n * (p + 1)) // nparts, dgi, dgh, dhp)


def _parts(batch: int, hidden: int, min_elems: int) -> int:
    n = batch * hidden
    return parts(n, n // _ITEM, min_elems)


def lstm_cell_fwd(gi, gh, c_prev, batch, hidden):
    n = batch * hidden
    h, c, act = np.empty(n, F32), np.empty(n, F32), np.empty(5 * n, F32)
    k = _parts(batch, hidden, _FWD_MIN_ELEMS)
    if k > 1:
        _lstm_fwd_par(gi, gh, c_prev, batch, hidden, k, h, c, act)
    else:
        _lstm_fwd_rows(gi, gh, c_prev, hidden, 0, n, h, c, act)
    return h, c, act


def lstm_cell_bwd(act, c_prev, dh, dc, batch, hidden):
    n = batch * hidden
    dg, dcp = np.empty(4 * n, F32), np.empty(n, F32)
    k = _parts(batch, hidden, _BWD_MIN_ELEMS)
    if k > 1:
        _lstm_bwd_par(act, c_prev, dh, dc, batch, hidden, k, dg, dcp)
    else:
        _lstm_bwd_rows(act, c_prev, dh, dc, hidden, 0, n, dg, dcp)
    return dg, dcp


def gru_cell_fwd(gi, gh, h_prev, batch, hidden):
    n = batch * hidden
    h, act = np.empty(n, F32), np.empty(4 * n, F32)
    k = _parts(batch, hidden, _FWD_MIN_ELEMS)
    if k > 1:
        _gru_fwd_par(gi, gh, h_prev, batch, hidden, k, h, act)
    else:
        _gru_fwd_rows(gi, gh, h_prev, hidden, 0, n, h, act)
    return h, act


def gru_cell_bwd(act, h_prev, dh, batch, hidden):
    n = batch * hidden
    dgi, dgh, dhp = np.empty(3 * n, F32), np.empty(3 * n, F32), np.empty(n, F32)
    k = _parts(batch, hidden, _BWD_MIN_ELEMS)
    if k > 1:
        _gru_bwd_par(act, h_prev, dh, batch, hidden, k, dgi, dgh, dhp)
    else:
        _gru_bwd_rows(act, h_prev, dh, hidden, 0, n, dgi, dgh, dhp)
    return dgi, dgh, dhp
