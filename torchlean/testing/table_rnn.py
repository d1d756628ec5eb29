"""Primitive-table entries of the recurrent cells (lstm/gru cell forward and backward) and of the LSTM
recurrence (lstm_recurrence forward and backward).

Dims are (batch, hidden). The backward entries take act from the float64 forward rounded to
float32, as the tape passes the forward's act (so i, f, o lie in [0, 1] and g, tanh(c), n in
[-1, 1], as they always do). Random draws are SUM_KINDS: finite values (huge products of three
"special" values would overflow float32 where float64 does not, which is IEEE, not a defect).
Edge cases: empty sizes, saturated gates (+-inf, +-100), NaN and inf in the state and the
cotangents, subnormal values, a wide step (the parallel CPU path).
"""

from __future__ import annotations

import numpy as np

from ..spec import rnn as spec_rnn
from .table_core import SUM_KINDS, PrimitiveInfo, add, values

F32 = np.float32


def _lstm_fwd_args(rng, B, H, kind):
    n = B * H
    return [values(rng, 4 * n, kind), values(rng, 4 * n, kind), values(rng, n, kind), B, H]


def _gru_fwd_args(rng, B, H, kind):
    n = B * H
    return [values(rng, 3 * n, kind), values(rng, 3 * n, kind), values(rng, n, kind), B, H]


def _act(fwd, args):
    with np.errstate(all="ignore"):
        out = fwd(*(a.astype(np.float64) if isinstance(a, np.ndarray) else a for a in args))
    return out[-1].astype(F32)


def _lstm_bwd_args(rng, B, H, kind, fwd_args=None):
    fwd_args = fwd_args or _lstm_fwd_args(rng, B, H, kind)
    n = B * H
    return [_act(spec_rnn.lstm_cell_fwd, fwd_args), fwd_args[2], values(rng, n, kind), values(rng, n, kind), B, H]


def _gru_bwd_args(rng, B, H, kind, fwd_args=None):
    fwd_args = fwd_args or _gru_fwd_args(rng, B, H, kind)
    return [_act(spec_rnn.gru_cell_fwd, fwd_args), fwd_args[2], values(rng, B * H, kind), B, H]


def _fill(n, pool, rng):
    return rng.choice(np.asarray(pool, F32), n).astype(F32)


_SAT = [np.inf, -np.inf, 100.0, -100.0, 0.0, -0.0, 1e-45, -1e-38, 20.0, -20.0]


def _edge_lstm_fwd():
    rng = np.random.default_rng(3)
    cases = [[np.zeros(0, F32), np.zeros(0, F32), np.zeros(0, F32), 0, 3],
             [np.zeros(0, F32), np.zeros(0, F32), np.zeros(0, F32), 2, 0]]
    # saturated gates (sigmoid 0 / 1, tanh +-1) with ordinary states, and both gates inputs at once
    cases.append([_fill(4 * 6 * 5, _SAT, rng), np.zeros(120, F32), rng.standard_normal(30).astype(F32), 6, 5])
    cases.append([_fill(4 * 6 * 5, _SAT, rng), _fill(120, [1.0, -1.0, 0.0, 50.0], rng),
                  rng.standard_normal(30).astype(F32) * 1e3, 6, 5])
    # NaN in a gate or the state; inf in the state (forget gate open: inf, closed: 0 * inf = NaN)
    gi = rng.standard_normal(4 * 2 * 3).astype(F32)
    gi[0], gi[7] = np.nan, np.inf
    cases.append([gi, np.zeros(24, F32), np.array([1, np.nan, np.inf, -np.inf, 0, 2], F32), 2, 3])
    gi = np.zeros(4 * 1 * 4, F32)
    gi[4:8] = [np.inf, -np.inf, 30.0, -30.0]
    cases.append([gi, np.zeros(16, F32), np.array([np.inf, np.inf, -np.inf, 1e-45], F32), 1, 4])
    # subnormal values and a wide step (several CPU parts)
    cases.append([np.full(8, 1e-40, F32), np.full(8, -1e-41, F32), np.full(2, 1e-39, F32), 1, 2])
    cases.append(_lstm_fwd_args(rng, 64, 1100, "normal"))
    return cases


def _edge_gru_fwd():
    rng = np.random.default_rng(4)
    cases = [[np.zeros(0, F32), np.zeros(0, F32), np.zeros(0, F32), 0, 3],
             [np.zeros(0, F32), np.zeros(0, F32), np.zeros(0, F32), 2, 0]]
    cases.append([_fill(3 * 6 * 5, _SAT, rng), np.zeros(90, F32), rng.standard_normal(30).astype(F32), 6, 5])
    cases.append([_fill(90, _SAT, rng), _fill(90, [1.0, -1.0, 0.0, 50.0], rng),
                  rng.standard_normal(30).astype(F32) * 1e3, 6, 5])
    gi = rng.standard_normal(3 * 2 * 3).astype(F32)
    gi[0], gi[4] = np.nan, np.inf
    cases.append([gi, np.zeros(18, F32), np.array([1, np.nan, np.inf, -np.inf, 0, 2], F32), 2, 3])
    cases.append([np.full(6, 1e-40, F32), np.full(6, -1e-41, F32), np.full(2, 1e-39, F32), 1, 2])
    cases.append(_gru_fwd_args(rng, 64, 1100, "normal"))
    return cases


def _edge_lstm_bwd():
    rng = np.random.default_rng(5)
    out = []
    for fa in _edge_lstm_fwd():
        B, H = fa[3], fa[4]
        out.append(_lstm_bwd_args(rng, B, H, "normal", fa))
    a = _lstm_bwd_args(rng, 2, 3, "normal")
    a[2] = np.array([np.nan, 1, np.inf, 0, -np.inf, 2], F32)
    a[3] = np.array([1, np.inf, 0, np.nan, 1e-45, 0], F32)
    out.append(a)
    a = _lstm_bwd_args(rng, 2, 3, "normal")
    a[2], a[3] = np.zeros(6, F32), np.zeros(6, F32)
    out.append(a)
    return out


def _edge_gru_bwd():
    rng = np.random.default_rng(6)
    out = []
    for fa in _edge_gru_fwd():
        out.append(_gru_bwd_args(rng, fa[3], fa[4], "normal", fa))
    a = _gru_bwd_args(rng, 2, 3, "normal")
    a[2] = np.array([np.nan, 1, np.inf, 0, -np.inf, 1e-45], F32)
    out.append(a)
    return out


add(PrimitiveInfo("lstm_cell_fwd", lambda rng, d, kind: _lstm_fwd_args(rng, d[0], d[1], kind), 2,
                  edge_cases=_edge_lstm_fwd(), kinds=SUM_KINDS))
add(PrimitiveInfo("lstm_cell_bwd", lambda rng, d, kind: _lstm_bwd_args(rng, d[0], d[1], kind), 2,
                  edge_cases=_edge_lstm_bwd(), kinds=SUM_KINDS))
add(PrimitiveInfo("gru_cell_fwd", lambda rng, d, kind: _gru_fwd_args(rng, d[0], d[1], kind), 2,
                  edge_cases=_edge_gru_fwd(), kinds=SUM_KINDS))
add(PrimitiveInfo("gru_cell_bwd", lambda rng, d, kind: _gru_bwd_args(rng, d[0], d[1], kind), 2,
                  edge_cases=_edge_gru_bwd(), kinds=SUM_KINDS))


# -- the LSTM recurrence: dims (steps, batch, hidden) ------------------------------------------
def _rec_fwd_args(rng, T, B, H, kind, bias=None, reverse=None):
    n = B * H
    bias = rng.random() < 0.5 if bias is None else bias
    reverse = int(rng.integers(0, 2)) if reverse is None else reverse
    return [values(rng, 4 * T * n, kind), values(rng, n, kind), values(rng, n, kind),
            values(rng, 4 * H * H, kind), values(rng, 4 * H, kind) if bias else None, T, B, H, reverse]


def _rec_bwd_args(rng, T, B, H, kind, fwd_args=None):
    """act and cs from the float64 forward rounded to float32 (as the tape passes the forward's)."""
    fa = fwd_args or _rec_fwd_args(rng, T, B, H, kind)
    T, B, H, reverse = fa[5], fa[6], fa[7], fa[8]
    with np.errstate(all="ignore"):
        _, cs, act = spec_rnn.lstm_recurrence_fwd(*(a.astype(np.float64) if isinstance(a, np.ndarray) else a
                                                    for a in fa))
    return [act.astype(F32), cs.astype(F32), fa[2], fa[3], values(rng, (T + 1) * B * H, kind), T, B, H, reverse]


def _edge_rec_fwd():
    rng = np.random.default_rng(7)
    cases = [_rec_fwd_args(rng, 0, 2, 3, "normal"), _rec_fwd_args(rng, 3, 0, 3, "normal"),
             _rec_fwd_args(rng, 3, 2, 0, "normal", bias=True), _rec_fwd_args(rng, 0, 0, 0, "normal")]
    # NaN in a gate of one step (it reaches every unit of the later steps through W_hh), inf in c0
    a = _rec_fwd_args(rng, 3, 2, 3, "normal", bias=True, reverse=0)
    a[0][30], a[2][1] = np.nan, np.inf
    cases.append(a)
    a = _rec_fwd_args(rng, 3, 2, 3, "normal", reverse=1)
    a[0][:24] = _fill(24, _SAT, rng)
    cases.append(a)
    # inf and 0 in W_hh (inf * 0 = NaN where the state is 0), subnormal states
    a = _rec_fwd_args(rng, 2, 1, 2, "normal", bias=False, reverse=0)
    a[3][:] = [np.inf, 0, 1, 1, 0, 0, -1, 1, 0, 0, 1, 0, 1, 0, 0, 2]
    a[1][:] = [0.0, 1e-45]
    cases.append(a)
    # a long sequence, both directions; a step wide enough for the parallel CPU cell
    cases += [_rec_fwd_args(rng, 35, 3, 7, "normal", True, 0), _rec_fwd_args(rng, 35, 3, 7, "normal", True, 1),
              _rec_fwd_args(rng, 2, 16, 300, "normal", True, 1)]
    return cases


def _edge_rec_bwd():
    rng = np.random.default_rng(8)
    out = []
    for fa in _edge_rec_fwd():
        out.append(_rec_bwd_args(rng, 0, 0, 0, "normal", fa))
    a = _rec_bwd_args(rng, 3, 2, 3, "normal")
    a[4][[0, 7, 20]] = [np.nan, np.inf, -np.inf]
    out.append(a)
    a = _rec_bwd_args(rng, 4, 2, 3, "normal")
    a[4][:] = 0.0
    out.append(a)
    return out


# No "wide" draws: magnitudes of 1e15 compound through W_hh from step to step (the backward's dgates
# times W_hh times the next gy ...) past float32's range where float64 stays finite, and an
# overflowed inf times a saturated gate's 0 is NaN: IEEE, not a kernel defect (as SUM_KINDS leaves
# out huge specials). Wide values within one step are the cells' table entries.
REC_KINDS = tuple(k for k in SUM_KINDS if k != "wide")
add(PrimitiveInfo("lstm_recurrence_fwd", lambda rng, d, kind: _rec_fwd_args(rng, d[0], d[1], d[2], kind), 3,
                  edge_cases=_edge_rec_fwd(), kinds=REC_KINDS, max_dim=6))
add(PrimitiveInfo("lstm_recurrence_bwd", lambda rng, d, kind: _rec_bwd_args(rng, d[0], d[1], d[2], kind), 3,
                  edge_cases=_edge_rec_bwd(), kinds=REC_KINDS, max_dim=6))
