"""CPU kernels of the recurrent cells (Numba; one pass over (batch, k * hidden) rows, float32).

Each element's expression is the spec's, evaluated in float32 in the spec's order with one rounding
per operation (no fastmath, no FMA contraction). The transcendentals are branch-free float32 code
built on ``classify.exp32`` (within 1.7u of exp), so that the loops vectorize:

* sigmoid: the ``sigmoid`` primitive's split form, e = exp32(-|x|) then 1 / (1 + e) or e / (1 + e):
  within 1.7u e/(1+e) + 2u of the result for x >= 0 and 1.7u + 1.7u e/(1+e) + 2u for x < 0
  (below 4.6u; the cells' contract allows the primitive's 16u). NaN gives NaN, +-inf exactly 1 / 0.
* tanh: |x| < 0.55, x + x (x^2 P(x^2)) with P a degree-4 least-squares fit of (tanh x - x) / x^3
  (measured within 1.25u; tiny x gives x, -0 gives -0); otherwise sign(x) (1 - e) / (1 + e) with
  e = exp32(-2|x|): 1 - e loses at most a factor e / (1 - e) <= 0.5 of e's 1.7u there, so within
  0.85u + 0.43u + 3u (below 4.3u; the contract allows the primitive's 8u). NaN gives NaN, +-inf
  and large |x| exactly +-1.

Every loop below is one short expression over a contiguous run of one row (one or two inputs, one
output), so LLVM vectorizes it. Contiguous ranges of the (batch, hidden) elements go to Numba's
threads when the step is large enough (``parts``). Every element is computed alone by the same code
whichever thread runs it, so results never depend on the split.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .classify import exp32
from .gemm import gemm
from .parallel import parts

F32 = np.float32
_ONE = np.float32(1.0)
_ZERO = np.float32(0.0)
_MTWO = np.float32(-2.0)
_TANH_POLY = np.float32(0.55)  # below it the polynomial; above, 1 - e cancels by at most a third
_T0 = np.float32(-0.33333316445350647)
_T1 = np.float32(0.13332566618919373)
_T2 = np.float32(-0.05385240912437439)
_T3 = np.float32(0.021078459918498993)
_T4 = np.float32(-0.006290855817496777)
_FWD_MIN_ELEMS = 2048       # elements per part at least, forward cells (~4 ns an element)
_BWD_MIN_ELEMS = 32768      # backward cells (under 1 ns an element)
_ITEM = 512                 # elements per indivisible item (parts at most n / _ITEM)

__all__ = ["lstm_cell_fwd", "lstm_cell_bwd", "gru_cell_fwd", "gru_cell_bwd", "lstm_recurrence_fwd",
           "lstm_recurrence_bwd"]


@njit(cache=True, error_model="numpy", inline="always")
def _sig(x):
    e = exp32(-np.abs(x))
    num = _ONE if x >= _ZERO else e
    return num / (_ONE + e)


@njit(cache=True, error_model="numpy", inline="always")
def _tanh(x):
    ax = np.abs(x)
    x2 = x * x
    p = (((_T4 * x2 + _T3) * x2 + _T2) * x2 + _T1) * x2 + _T0
    small = x + x * (x2 * p)
    e = exp32(_MTWO * ax)
    big = (_ONE - e) / (_ONE + e)
    big = big if x >= _ZERO else -big
    y = small if ax < _TANH_POLY else big
    return y if x != _ZERO else x  # keeps -0 (x + x x^2 P gives +0 there: P < 0)


# Row loops over equal-length contiguous slices (indexing slices from 0 rather than arrays at an
# offset lets Numba drop its negative-index wraparound, so the loops vectorize cleanly).
@njit(cache=True, error_model="numpy", inline="always", boundscheck=False)
def _sig_sum(a, b, dst):
    for j in range(dst.size):
        dst[j] = _sig(a[j] + b[j])


@njit(cache=True, error_model="numpy", inline="always", boundscheck=False)
def _tanh_sum(a, b, dst):
    for j in range(dst.size):
        dst[j] = _tanh(a[j] + b[j])


@njit(cache=True, error_model="numpy", inline="always", boundscheck=False)
def _tanh_of(a, dst):
    for j in range(dst.size):
        dst[j] = _tanh(a[j])


# Each kernel computes the elements r0:r1 of the step's (batch, hidden) elements, flat (row b holds
# b H to b H + H - 1), whole rows or not.
@njit(cache=True, error_model="numpy", boundscheck=False)
def _lstm_fwd_rows(gi, gh, cp, H, r0, r1, h, c, act):
    if r1 <= r0:
        return
    for b in range(r0 // H, (r1 - 1) // H + 1):
        g0, a0, s = b * 4 * H, b * 5 * H, b * H
        j0, j1 = max(r0 - s, 0), min(r1 - s, H)
        n, gj, aj = j1 - j0, g0 + j0, a0 + j0
        ai, af, ag = act[aj:aj + n], act[aj + H:aj + H + n], act[aj + 2 * H:aj + 2 * H + n]
        ao, at = act[aj + 3 * H:aj + 3 * H + n], act[aj + 4 * H:aj + 4 * H + n]
        hr, cr, cpr = h[s + j0:s + j1], c[s + j0:s + j1], cp[s + j0:s + j1]
        _sig_sum(gi[gj:gj + n], gh[gj:gj + n], ai)
        _sig_sum(gi[gj + H:gj + H + n], gh[gj + H:gj + H + n], af)
        _tanh_sum(gi[gj + 2 * H:gj + 2 * H + n], gh[gj + 2 * H:gj + 2 * H + n], ag)
        _sig_sum(gi[gj + 3 * H:gj + 3 * H + n], gh[gj + 3 * H:gj + 3 * H + n], ao)
        for j in range(n):
            cr[j] = af[j] * cpr[j] + ai[j] * ag[j]
        _tanh_of(cr, at)
        for j in range(n):
            hr[j] = ao[j] * at[j]


@njit(cache=True, error_model="numpy", boundscheck=False)
def _lstm_bwd_rows(act, cp, dh, dc, H, r0, r1, dg, dcp):
    if r1 <= r0:
        return
    for b in range(r0 // H, (r1 - 1) // H + 1):
        g0, a0, s = b * 4 * H, b * 5 * H, b * H
        j0, j1 = max(r0 - s, 0), min(r1 - s, H)
        n, gj, aj = j1 - j0, g0 + j0, a0 + j0
        ai, af, ag = act[aj:aj + n], act[aj + H:aj + H + n], act[aj + 2 * H:aj + 2 * H + n]
        ao, at = act[aj + 3 * H:aj + 3 * H + n], act[aj + 4 * H:aj + 4 * H + n]
        di, df = dg[gj:gj + n], dg[gj + H:gj + H + n]
        dgg, do_ = dg[gj + 2 * H:gj + 2 * H + n], dg[gj + 3 * H:gj + 3 * H + n]
        cpr, dhr, dcr, dcpr = cp[s + j0:s + j1], dh[s + j0:s + j1], dc[s + j0:s + j1], dcp[s + j0:s + j1]
        for j in range(n):
            i, f, g, o, tc = ai[j], af[j], ag[j], ao[j], at[j]
            d = dhr[j]
            dcs = dcr[j] + (d * o) * (_ONE - tc * tc)
            di[j] = (dcs * g) * (i * (_ONE - i))
            df[j] = (dcs * cpr[j]) * (f * (_ONE - f))
            dgg[j] = (dcs * i) * (_ONE - g * g)
            do_[j] = (d * tc) * (o * (_ONE - o))
            dcpr[j] = dcs * f


@njit(cache=True, error_model="numpy", boundscheck=False)
def _gru_fwd_rows(gi, gh, hp, H, r0, r1, h, act):
    if r1 <= r0:
        return
    for b in range(r0 // H, (r1 - 1) // H + 1):
        g0, a0, s = b * 3 * H, b * 4 * H, b * H
        j0, j1 = max(r0 - s, 0), min(r1 - s, H)
        n, gj, aj = j1 - j0, g0 + j0, a0 + j0
        ar, az = act[aj:aj + n], act[aj + H:aj + H + n]
        an, ah = act[aj + 2 * H:aj + 2 * H + n], act[aj + 3 * H:aj + 3 * H + n]
        hr, hpr = h[s + j0:s + j1], hp[s + j0:s + j1]
        gin, ghn = gi[gj + 2 * H:gj + 2 * H + n], gh[gj + 2 * H:gj + 2 * H + n]
        _sig_sum(gi[gj:gj + n], gh[gj:gj + n], ar)
        _sig_sum(gi[gj + H:gj + H + n], gh[gj + H:gj + H + n], az)
        for j in range(n):
            ah[j] = ghn[j]
        for j in range(n):  # n's argument, parked in h (an in-place tanh would not vectorize)
            hr[j] = gin[j] + ar[j] * ghn[j]
        _tanh_of(hr, an)
        for j in range(n):
            hr[j] = an[j] + az[j] * (hpr[j] - an[j])


@njit(cache=True, error_model="numpy", boundscheck=False)
def _gru_bwd_rows(act, hp, dh, H, r0, r1, dgi, dgh, dhp):
    if r1 <= r0:
        return
    for b in range(r0 // H, (r1 - 1) // H + 1):
        g0, a0, s = b * 3 * H, b * 4 * H, b * H
        j0, j1 = max(r0 - s, 0), min(r1 - s, H)
        n, gj, aj = j1 - j0, g0 + j0, a0 + j0
        ar, az = act[aj:aj + n], act[aj + H:aj + H + n]
        an, ah = act[aj + 2 * H:aj + 2 * H + n], act[aj + 3 * H:aj + 3 * H + n]
        ir, iz, inn = dgi[gj:gj + n], dgi[gj + H:gj + H + n], dgi[gj + 2 * H:gj + 2 * H + n]
        hr, hz, hn = dgh[gj:gj + n], dgh[gj + H:gj + H + n], dgh[gj + 2 * H:gj + 2 * H + n]
        hpr, dhr, dhpr = hp[s + j0:s + j1], dh[s + j0:s + j1], dhp[s + j0:s + j1]
        for j in range(n):
            r, z, nn, ghn = ar[j], az[j], an[j], ah[j]
            d = dhr[j]
            dnp = (d * (_ONE - z)) * (_ONE - nn * nn)
            dz = (d * (hpr[j] - nn)) * (z * (_ONE - z))
            dr = (dnp * ghn) * (r * (_ONE - r))
            ir[j] = dr
            iz[j] = dz
            inn[j] = dnp
            hr[j] = dr
            hz[j] = dz
            hn[j] = dnp * r
            dhpr[j] = d * z


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


def _lstm_fwd_into(gi, gh, c_prev, batch, hidden, h, c, act):
    n = batch * hidden
    k = _parts(batch, hidden, _FWD_MIN_ELEMS)
    if k > 1:
        _lstm_fwd_par(gi, gh, c_prev, batch, hidden, k, h, c, act)
    else:
        _lstm_fwd_rows(gi, gh, c_prev, hidden, 0, n, h, c, act)


def _lstm_bwd_into(act, c_prev, dh, dc, batch, hidden, dg, dcp):
    n = batch * hidden
    k = _parts(batch, hidden, _BWD_MIN_ELEMS)
    if k > 1:
        _lstm_bwd_par(act, c_prev, dh, dc, batch, hidden, k, dg, dcp)
    else:
        _lstm_bwd_rows(act, c_prev, dh, dc, hidden, 0, n, dg, dcp)


def lstm_cell_fwd(gi, gh, c_prev, batch, hidden):
    n = batch * hidden
    h, c, act = np.empty(n, F32), np.empty(n, F32), np.empty(5 * n, F32)
    _lstm_fwd_into(gi, gh, c_prev, batch, hidden, h, c, act)
    return h, c, act


def lstm_cell_bwd(act, c_prev, dh, dc, batch, hidden):
    n = batch * hidden
    dg, dcp = np.empty(4 * n, F32), np.empty(n, F32)
    _lstm_bwd_into(act, c_prev, dh, dc, batch, hidden, dg, dcp)
    return dg, dcp


# The recurrence: per step the GEMM (gemm.py, bias in its epilogue) and the cell writing straight
# into the step's rows of the outputs (no per-step buffers to join afterwards).
def _order(steps, reverse):
    return range(steps - 1, -1, -1) if reverse else range(steps)


def lstm_recurrence_fwd(gi, h0, c0, w_hh, b_hh, steps, batch, hidden, reverse):
    T, B, H = steps, batch, hidden
    n, G = B * H, 4 * hidden
    y, cs, act = np.empty((T + 1) * n, F32), np.empty(T * n, F32), np.empty(5 * T * n, F32)
    h, c = h0, c0
    for t in _order(T, reverse):
        gh = gemm(h, w_hh, 1, B, G, H, False, True, bias=b_hh)
        h, c_prev, c = y[t * n:(t + 1) * n], c, cs[t * n:(t + 1) * n]
        _lstm_fwd_into(gi[t * G * B:(t + 1) * G * B], gh, c_prev, B, H, h, c, act[t * 5 * n:(t + 1) * 5 * n])
    y[T * n:] = c
    return y, cs, act


def lstm_recurrence_bwd(act, cs, c0, w_hh, gy, steps, batch, hidden, reverse):
    T, B, H = steps, batch, hidden
    n, G = B * H, 4 * hidden
    order = list(_order(T, reverse))
    dgates = np.empty(T * G * B, F32)
    dc, dc_next = gy[T * n:].copy(), np.empty(n, F32)
    dg = None
    for s in range(T - 1, -1, -1):
        t = order[s]
        dh = gy[t * n:(t + 1) * n]
        if dg is not None:  # the product, then the sum with gy (as the spec)
            dh = np.add(gemm(dg, w_hh, 1, B, H, G, False, False), dh)
        c_prev = cs[order[s - 1] * n:(order[s - 1] + 1) * n] if s > 0 else c0
        dg = dgates[t * G * B:(t + 1) * G * B]
        _lstm_bwd_into(act[t * 5 * n:(t + 1) * 5 * n], c_prev, dh, dc, B, H, dg, dc_next)
        dc, dc_next = dc_next, dc
    dh0 = gemm(dg, w_hh, 1, B, H, G, False, False) if dg is not None else np.zeros(n, F32)
    return dgates, dh0, dc


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
