"""The recurrent layers join their T per-step buffers (outputs forward; gate gradients and previous
states backward) with one copy of each step: the elements moved by concatenation grow as T, not
T log T (a balanced tree of concat1d) or T^2 (a chain)."""

from __future__ import annotations

import numpy as np
import pytest

import torchlean as tl
import torchlean.nn as tnn
import torchlean.ops.rnn as rnn_ops
from torchlean.runtime.device import get_context

T, B, I, H = 32, 3, 5, 8  # T a power of two: the tree copied every step log2(T) = 5 times
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def _moved_elements(monkeypatch, mode: str) -> int:
    """Elements written by concat1d kernels and by the layer's join during one forward and backward."""
    moved = [0]
    backend = get_context("cpu").backend
    concat = backend.concat1d

    def counting_concat(a, b, n, m):
        moved[0] += n + m
        return concat(a, b, n, m)

    monkeypatch.setattr(backend, "concat1d", counting_concat)
    join = getattr(rnn_ops, "stack_buffers", None)
    if join is not None:
        def counting_join(op, bufs, shape, axis, device):
            out = join(op, bufs, shape, axis, device)
            moved[0] += out.size
            return out

        monkeypatch.setattr(rnn_ops, "stack_buffers", counting_join)
    tl.manual_seed(0)
    m = getattr(tnn, mode)(I, H)
    rng = np.random.default_rng(0)
    x = tl.tensor(rng.standard_normal((T, B, I)).astype(np.float32), requires_grad=True)
    y = m(x)[0]
    (y * y).sum().backward()
    assert x.grad is not None and m.weight_hh_l0.grad is not None
    return moved[0]


@pytest.mark.parametrize("mode", ["LSTM", "GRU", "RNN"])
def test_each_step_is_copied_a_bounded_number_of_times(monkeypatch, mode):
    n, g = B * H, B * GATES[mode] * H
    # Per step: its output (and c_n), its gate gradients (twice for the GRU: input and hidden
    # parts), its previous state for dW_hh, and the autograd's join of the output's gradient pieces.
    per_step = 2 * n + g * (2 if mode == "GRU" else 1) + n
    moved = _moved_elements(monkeypatch, mode)
    # Twice that as slack for the autograd's own joins; the tree moved every step 5 times.
    assert moved <= 2 * (T + 1) * per_step, f"{mode}: {moved} elements moved by joins, at most {2 * (T + 1) * per_step} expected"
