"""Primitives of the recurrent cells (checked, then dispatched like those in ``primitives``).

One step's element-wise math of an LSTM or GRU, fused (the GEMMs of the step stay on the GEMM
primitives); and the whole recurrence of one LSTM layer-direction, each step's GEMM h W_hh^T with its
cell (``lstm_recurrence_fwd`` / ``_bwd``: one call for T steps, which a GPU runs as one fused launch
per step). Layout (batch, k * hidden) row-major, gates in PyTorch's order (LSTM i, f, g, o; GRU
r, z, n); the formulas are in torchlean.spec.rnn. The forwards return the activations the
backwards need (``act``), so a backward recomputes nothing.
"""

from __future__ import annotations

from typing import Any

from .buffer import Buffer, check_buffer, same_device, wrap
from .checks import check_flag, check_product, check_u32
from .oom import run_allocating

__all__ = ["lstm_cell_fwd", "lstm_cell_bwd", "gru_cell_fwd", "gru_cell_bwd", "lstm_recurrence_fwd",
           "lstm_recurrence_bwd"]


def _dims(op: str, batch: Any, hidden: Any, widest: int) -> tuple[int, int, int]:
    b, h = check_u32(op, "batch", batch), check_u32(op, "hidden", hidden)
    check_product(op, f"batch*{widest}*hidden", b, widest, h)
    return b, h, b * h


def _run(op: str, ctx, out_elems: int, *args) -> tuple[Buffer, ...]:
    out = run_allocating(op, ctx, out_elems, getattr(ctx.backend, op), *args)
    return tuple(wrap(ctx, o) for o in out)


def lstm_cell_fwd(gi: Buffer, gh: Buffer, c_prev: Buffer, batch: int, hidden: int) -> tuple[Buffer, Buffer, Buffer]:
    """(h, c, act) of one LSTM step from the gate pre-activations gi, gh (batch, 4 hidden; added
    here) and c_prev (batch, hidden); act (batch, 5 hidden) = [i, f, g, o, tanh(c)]."""
    op = "lstm_cell_fwd"
    B, H, n = _dims(op, batch, hidden, 5)
    check_buffer(op, "gi", gi, 4 * n)
    check_buffer(op, "gh", gh, 4 * n)
    check_buffer(op, "c_prev", c_prev, n)
    ctx = same_device(op, gi=gi, gh=gh, c_prev=c_prev)
    return _run(op, ctx, 7 * n, gi._data, gh._data, c_prev._data, B, H)  # type: ignore[return-value]


def lstm_cell_bwd(act: Buffer, c_prev: Buffer, dh: Buffer, dc: Buffer, batch: int,
                  hidden: int) -> tuple[Buffer, Buffer]:
    """(dgates (batch, 4 hidden), dc_prev (batch, hidden)): the VJP of lstm_cell_fwd given its act, for
    the cotangents dh, dc of h and c (dgates is the gradient of gi and of gh alike)."""
    op = "lstm_cell_bwd"
    B, H, n = _dims(op, batch, hidden, 5)
    check_buffer(op, "act", act, 5 * n)
    for name, b in (("c_prev", c_prev), ("dh", dh), ("dc", dc)):
        check_buffer(op, name, b, n)
    ctx = same_device(op, act=act, c_prev=c_prev, dh=dh, dc=dc)
    return _run(op, ctx, 5 * n, act._data, c_prev._data, dh._data, dc._data, B, H)  # type: ignore[return-value]


def gru_cell_fwd(gi: Buffer, gh: Buffer, h_prev: Buffer, batch: int, hidden: int) -> tuple[Buffer, Buffer]:
    """(h, act) of one GRU step from gi = x W_ih^T + b_ih, gh = h_prev W_hh^T + b_hh (batch, 3 hidden)
    and h_prev (batch, hidden); act (batch, 4 hidden) = [r, z, n, gh_n]."""
    op = "gru_cell_fwd"
    B, H, n = _dims(op, batch, hidden, 4)
    check_buffer(op, "gi", gi, 3 * n)
    check_buffer(op, "gh", gh, 3 * n)
    check_buffer(op, "h_prev", h_prev, n)
    ctx = same_device(op, gi=gi, gh=gh, h_prev=h_prev)
    return _run(op, ctx, 5 * n, gi._data, gh._data, h_prev._data, B, H)  # type: ignore[return-value]


def gru_cell_bwd(act: Buffer, h_prev: Buffer, dh: Buffer, batch: int, hidden: int) -> tuple[Buffer, Buffer, Buffer]:
    """(dgi, dgh (batch, 3 hidden), dh_prev (batch, hidden)): the VJP of gru_cell_fwd given its act for
    the cotangent dh; dh_prev is the direct term dh z (the caller adds dgh W_hh)."""
    op = "gru_cell_bwd"
    B, H, n = _dims(op, batch, hidden, 4)
    check_buffer(op, "act", act, 4 * n)
    check_buffer(op, "h_prev", h_prev, n)
    check_buffer(op, "dh", dh, n)
    ctx = same_device(op, act=act, h_prev=h_prev, dh=dh)
    return _run(op, ctx, 7 * n, act._data, h_prev._data, dh._data, B, H)  # type: ignore[return-value]


def _recurrence_dims(op: str, steps: Any, batch: Any, hidden: Any, reverse: Any) -> tuple[int, int, int, int, int]:
    T, (B, H, n) = check_u32(op, "steps", steps), _dims(op, batch, hidden, 5)
    check_product(op, "(steps+1)*batch*5*hidden", T + 1, B, 5, H)
    check_product(op, "4*hidden*hidden", 4, H, H)
    return T, B, H, n, check_flag(op, "reverse", reverse)


def lstm_recurrence_fwd(gi: Buffer, h0: Buffer, c0: Buffer, w_hh: Buffer, b_hh: Buffer | None, steps: int,
                        batch: int, hidden: int, reverse: int) -> tuple[Buffer, Buffer, Buffer]:
    """(y (steps + 1, batch, hidden), cs (steps, batch, hidden), act (steps, batch, 5 hidden)) of one LSTM
    layer-direction: from (h0, c0), each step t (backwards in time when ``reverse``) computes
    gh = h W_hh^T + b_hh and lstm_cell_fwd(gi_t, gh, c). y holds h of every step by time index, then c
    of the last step processed; cs the c of every step; act every step's act. gi (steps, batch,
    4 hidden) is x W_ih^T + b_ih of every step; w_hh (4 hidden, hidden); b_hh (4 hidden) or None."""
    op = "lstm_recurrence_fwd"
    T, B, H, n, rev = _recurrence_dims(op, steps, batch, hidden, reverse)
    check_buffer(op, "gi", gi, 4 * T * n)
    check_buffer(op, "h0", h0, n)
    check_buffer(op, "c0", c0, n)
    check_buffer(op, "w_hh", w_hh, 4 * H * H)
    if b_hh is None:
        ctx = same_device(op, gi=gi, h0=h0, c0=c0, w_hh=w_hh)
    else:
        check_buffer(op, "b_hh", b_hh, 4 * H)
        ctx = same_device(op, gi=gi, h0=h0, c0=c0, w_hh=w_hh, b_hh=b_hh)
    return _run(op, ctx, (7 * T + 1) * n, gi._data, h0._data, c0._data, w_hh._data,  # type: ignore[return-value]
                None if b_hh is None else b_hh._data, T, B, H, rev)


def lstm_recurrence_bwd(act: Buffer, cs: Buffer, c0: Buffer, w_hh: Buffer, gy: Buffer, steps: int, batch: int,
                        hidden: int, reverse: int) -> tuple[Buffer, Buffer, Buffer]:
    """(dgates (steps, batch, 4 hidden), dh0, dc0 (batch, hidden)): the VJP of lstm_recurrence_fwd, given
    its act and cs, for the cotangent gy of its y. dgates is the gradient of gi and of every step's
    gh; the caller forms W_hh's (dgates^T h_prev) and b_hh's (column sums)."""
    op = "lstm_recurrence_bwd"
    T, B, H, n, rev = _recurrence_dims(op, steps, batch, hidden, reverse)
    check_buffer(op, "act", act, 5 * T * n)
    check_buffer(op, "cs", cs, T * n)
    check_buffer(op, "c0", c0, n)
    check_buffer(op, "w_hh", w_hh, 4 * H * H)
    check_buffer(op, "gy", gy, (T + 1) * n)
    ctx = same_device(op, act=act, cs=cs, c0=c0, w_hh=w_hh, gy=gy)
    return _run(op, ctx, (4 * T + 2) * n, act._data, cs._data, c0._data, w_hh._data,  # type: ignore[return-value]
                gy._data, T, B, H, rev)
