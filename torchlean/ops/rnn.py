"""Differentiable recurrent layers: PyTorch's RNN (tanh / relu), LSTM and GRU, one layer-direction
per tape node.

A layer-direction is x (T, B, I) -> out (T, B, H):

* the input projection of every step at once, ``linear(x, W_ih, b_ih)``: one GEMM, its own node;
* the recurrence, one node. The LSTM's is one primitive (``_lstm_recurrence``:
  ``lstm_recurrence_fwd`` / ``_bwd`` run every step's GEMM ``h W_hh^T + b_hh`` and cell, so a GPU
  issues one fused launch per step, not three). The GRU's and the plain RNN's (``_recurrence``)
  run per step the GEMM (fast_gemm, bias in the epilogue) and the fused cell (``gru_cell_fwd``;
  the plain RNN is ``add`` then ``tanh`` / ``relu``, already fused enough); their VJP runs
  backpropagation through time with the cell backwards (``gru_cell_bwd`` / ``tanh_bwd`` /
  ``relu_bwd``) and ``dh W_hh`` per step. Then, for all three, the weight gradients of all steps at
  once: dW_hh = dG^T H_prev (one GEMM), db_hh = the column sums of dG.

The LSTM node's output is (T + 1, B, H): the outputs, then c_n (one node, one output tensor; the
layer slices it). h_n is the output row of the last step processed (T - 1, or 0 when reversed).
``rnn`` stacks layers and directions as torch's ``_VF.rnn_tanh`` / ``_VF.lstm`` / ``_VF.gru`` do,
with dropout (our counter RNG) on the outputs of every layer but the last.
"""

from __future__ import annotations

from typing import Any, Sequence

from .. import autograd
from ..runtime import primitives as P
from ..runtime.arrays import stack_buffers
from ..runtime.buffer import Buffer
from ._base import Tensor, fbuf, new
from .linalg import linear
from .nn import dropout
from .shape import cat, reshape, slice0

__all__ = ["rnn_layer", "rnn"]
FUNCTIONAL: list[str] = []

GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


def _join(bufs: list[Buffer], size: int) -> Buffer:
    """The buffers (each ``size`` long) end to end in one new buffer: every piece copied once (a
    move: exact). A chain or tree of concat1d would copy each piece up to T or log2(T) times."""
    return stack_buffers("rnn", bufs, (size,), 0, bufs[0].device)


def _weight_grads(dG: Buffer, hp: Any, w_hh: Tensor, b_hh: Tensor | None, rows: int, G: int, H: int) -> list:
    """[dW_hh, db_hh] (those asked for) from every step's gate gradients dG (rows, G) and the states
    they multiplied, hp (rows, H), a Buffer or a function making it (only called when needed)."""
    grads: list[Any] = [P.fast_gemm(dG, hp() if callable(hp) else hp, None, G, rows, H, 1, 0, 0)
                        if w_hh.requires_grad else None]
    if b_hh is not None:
        grads.append(P.reduce_sum_axis0(dG, rows, G) if b_hh.requires_grad else None)
    return grads


def _lstm_recurrence(gi: Tensor, h0: Tensor, c0: Tensor, w_hh: Tensor, b_hh: Tensor | None, reverse: bool) -> Tensor:
    T, B, G = gi.shape
    H = h0.shape[-1]
    n = B * H
    wb, h0b, c0b = fbuf("LSTM", w_hh), fbuf("LSTM", h0), fbuf("LSTM", c0)
    bb = None if b_hh is None else fbuf("LSTM", b_hh)
    y, cs, act = P.lstm_recurrence_fwd(fbuf("LSTM", gi), h0b, c0b, wb, bb, T, B, H, int(reverse))
    parents = tuple(p for p in (gi, h0, c0, w_hh, b_hh) if p is not None)

    def h_prev() -> Buffer:
        """Every step's h_prev by time index: h0 then y's rows 0..T-2 (y's rows 1..T-1 then h0 when
        reversed)."""
        rest = P.slice1d(y, (T + 1) * n, n if reverse else 0, (T - 1) * n)
        return P.concat1d(rest, h0b, (T - 1) * n, n) if reverse else P.concat1d(h0b, rest, n, (T - 1) * n)

    def vjp(g: Buffer):
        dG, dh0, dc0 = P.lstm_recurrence_bwd(act, cs, c0b, wb, g, T, B, H, int(reverse))
        grads: list[Any] = [dG if gi.requires_grad else None, dh0 if h0.requires_grad else None,
                            dc0 if c0.requires_grad else None]
        return tuple(grads + _weight_grads(dG, h_prev if T else dG, w_hh, b_hh, T * B, G, H))

    return autograd.record("lstm_recurrence", new(y, (T + 1, B, H)), parents, vjp, workspace=[cs, act])


def _recurrence(mode: str, gi: Tensor, h0: Tensor, w_hh: Tensor, b_hh: Tensor | None, reverse: bool) -> Tensor:
    """The GRU's and the plain RNN's recurrence: per step the GEMM and the cell, as primitives."""
    T, B, G = gi.shape
    H = h0.shape[-1]
    gru = mode == "GRU"
    gib, wb = fbuf(mode, gi), fbuf(mode, w_hh)
    bb = None if b_hh is None else fbuf(mode, b_hh)
    h = h0b = fbuf(mode, h0)
    step = B * G
    order = range(T - 1, -1, -1) if reverse else range(T)
    hs: list[Any] = [None] * T
    hprev: list[Any] = [None] * T
    acts: list[Any] = [None] * T
    for t in order:
        git = P.slice1d(gib, T * step, t * step, step)
        gh = P.fast_gemm(h, wb, bb, B, H, G, 0, 1, 0)
        if gru:
            hn, act = P.gru_cell_fwd(git, gh, h, B, H)
        else:
            pre = P.add(git, gh)
            hn = P.tanh(pre) if mode == "RNN_TANH" else P.relu(pre)
            act = pre  # relu_bwd reads the pre-activation; tanh_bwd the output
        if act is not gh:
            gh.release()
        hprev[t], hs[t], acts[t] = h, hn, act
        h = hn
    n = B * H
    out = _join(hs, n)
    work = [b for b in hs + acts if b is not None and b is not out and b is not h0b]
    parents = tuple(p for p in (gi, h0, w_hh, b_hh) if p is not None)

    def vjp(g: Buffer):
        dh: Buffer | None = None
        dgi: list[Any] = [None] * T
        dgh: list[Any] = [None] * T
        for t in reversed(order):
            gt = P.slice1d(g, g.size, t * n, n)
            dht = gt if dh is None else P.add(gt, dh)
            if gru:
                dgi[t], dgh[t], direct = P.gru_cell_bwd(acts[t], hprev[t], dht, B, H)
                back = P.fast_gemm(dgh[t], wb, None, B, G, H, 0, 0, 0)
                dh = P.add(direct, back)
                direct.release()
                back.release()
            else:
                dpre = P.tanh_bwd(hs[t], dht) if mode == "RNN_TANH" else P.relu_bwd(acts[t], dht)
                dgi[t] = dgh[t] = dpre
                dh = P.fast_gemm(dpre, wb, None, B, G, H, 0, 0, 0)
        dGI = _join(dgi, step)
        dGH = dGI if not gru else _join(dgh, step)
        grads: list[Any] = [dGI if gi.requires_grad else None, dh if h0.requires_grad else None]
        return tuple(grads + _weight_grads(dGH, lambda: _join(hprev, n), w_hh, b_hh, T * B, G, H))

    return autograd.record(f"{mode.lower()}_recurrence", new(out, (T, B, H)), parents, vjp, workspace=work)


def rnn_layer(mode: str, x: Tensor, h0: Tensor, c0: Tensor | None, w_ih: Tensor, w_hh: Tensor,
              b_ih: Tensor | None, b_hh: Tensor | None, reverse: bool = False) -> tuple[Tensor, Tensor, Tensor | None]:
    """(out (T, B, H), h_n (B, H), c_n (B, H) or None) of one layer-direction over x (T, B, I) from
    h0 (and c0 for the LSTM); shapes are the caller's to check (nn.RNN/LSTM/GRU do)."""
    T, B = x.shape[0], x.shape[1]
    H = h0.shape[-1]
    gi = linear(x, w_ih, b_ih)
    if mode == "LSTM":
        packed = _lstm_recurrence(gi, h0, c0, w_hh, b_hh, reverse)  # type: ignore[arg-type]
    else:
        packed = _recurrence(mode, gi, h0, w_hh, b_hh, reverse)
    out = slice0(packed, 0, T) if mode == "LSTM" else packed
    h_n = reshape(slice0(out, 0 if reverse else T - 1, 1), (B, H))
    c_n = reshape(slice0(packed, T, 1), (B, H)) if mode == "LSTM" else None
    return out, h_n, c_n


def rnn(mode: str, x: Tensor, h0: Tensor, c0: Tensor | None, weights: Sequence[Sequence[Tensor | None]],
        num_layers: int, bidirectional: bool, dropout_p: float, training: bool) -> tuple[Tensor, Tensor, Tensor | None]:
    """The stacked layers: x (T, B, I), h0 and c0 (layers * directions, B, H), ``weights`` one
    (W_ih, W_hh, b_ih, b_hh) per layer-direction in PyTorch's order. Returns (out (T, B, D H),
    h_n, c_n (layers * directions, B, H); c_n None but for the LSTM)."""
    D = 2 if bidirectional else 1
    hs: list[Tensor] = []
    cs: list[Tensor] = []
    layer_in = x
    for layer in range(num_layers):
        outs = []
        for d in range(D):
            k = layer * D + d
            w_ih, w_hh, b_ih, b_hh = weights[k]
            hk = reshape(slice0(h0, k, 1), h0.shape[1:])
            ck = reshape(slice0(c0, k, 1), c0.shape[1:]) if c0 is not None else None
            out, h_n, c_n = rnn_layer(mode, layer_in, hk, ck, w_ih, w_hh, b_ih, b_hh, reverse=d == 1)
            outs.append(out)
            hs.append(h_n)
            if c_n is not None:
                cs.append(c_n)
        layer_in = outs[0] if D == 1 else cat(outs, 2)
        if dropout_p > 0.0 and training and layer < num_layers - 1:
            layer_in = dropout(layer_in, dropout_p, True)
    h_all = reshape(cat(hs, 0), (num_layers * D,) + tuple(h0.shape[1:]))
    c_all = reshape(cat(cs, 0), (num_layers * D,) + tuple(h0.shape[1:])) if cs else None
    return layer_in, h_all, c_all
