"""CUDA kernels of the recurrent cells (rnn.cu): one thread per (batch, hidden) element, one launch
per primitive; each output is written once and read nowhere else (no atomics: bitwise repeatable).
The LSTM recurrence of a layer-direction is rnn_seq.py's (rnn_seq.cu)."""

from __future__ import annotations

from .launch import BLOCK, I64, empty, grid_for, kernel

__all__ = ["lstm_cell_fwd", "lstm_cell_bwd", "gru_cell_fwd", "gru_cell_bwd"]

_FILE = "rnn.cu"


def _launch(name: str, n: int, args) -> None:
    if n:
        kernel(_FILE, name)((grid_for(n),), (BLOCK,), args)


def lstm_cell_fwd(gi, gh, c_prev, batch, hidden):
    n = batch * hidden
    h, c, act = empty(n), empty(n), empty(5 * n)
    _launch("tl_lstm_cell_fwd", n, (gi, gh, c_prev, I64(batch), I64(hidden), h, c, act))
    return h, c, act


def lstm_cell_bwd(act, c_prev, dh, dc, batch, hidden):
    n = batch * hidden
    dg, dcp = empty(4 * n), empty(n)
    _launch("tl_lstm_cell_bwd", n, (act, c_prev, dh, dc, I64(batch), I64(hidden), dg, dcp))
    return dg, dcp


def gru_cell_fwd(gi, gh, h_prev, batch, hidden):
    n = batch * hidden
    h, act = empty(n), empty(4 * n)
    _launch("tl_gru_cell_fwd", n, (gi, gh, h_prev, I64(batch), I64(hidden), h, act))
    return h, act


def gru_cell_bwd(act, h_prev, dh, batch, hidden):
    n = batch * hidden
    dgi, dgh, dhp = empty(3 * n), empty(3 * n), empty(n)
    _launch("tl_gru_cell_bwd", n, (act, h_prev, dh, I64(batch), I64(hidden), dgi, dgh, dhp))
    return dgi, dgh, dhp
