"""torchlean.utils.checkpoint: activation checkpointing that frees the checkpointed function's
activations between forward and backward, with PyTorch's gradients (and bitwise those of running
the function plainly), dropout replayed from the same random numbers, and the cases where it runs
the function plainly instead."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import torchlean as tl
import torchlean.nn as tnn
from torchlean.errors import AutogradError
from torchlean.utils.checkpoint import checkpoint, checkpoint_sequential

F32 = np.float32


def _block(seed=0, p=0.0):
    tl.manual_seed(seed)
    return tnn.Sequential(tnn.Linear(64, 256), tnn.GELU(), tnn.Dropout(p), tnn.Linear(256, 64), tnn.Tanh())


def _run(use, x0, p=0.0, segments=None):
    blocks = [_block(i, p) for i in range(4)]
    x = tl.tensor(x0, requires_grad=True)
    tl.manual_seed(123)
    h = x
    if segments:
        h = checkpoint_sequential(tnn.Sequential(*blocks), segments, h)
    else:
        for b in blocks:
            h = checkpoint(b, h) if use else b(h)
    held = tl.allocator_stats("cpu").live_bytes
    (h * h).sum().backward()
    grads = [x.grad.numpy()] + [q.grad.numpy() for b in blocks for q in b.parameters()]
    return h.detach().numpy(), grads, held


@pytest.mark.parametrize("p", [0.0, 0.3])
def test_same_bits_as_running_plainly_and_less_held(p):
    x0 = np.random.default_rng(1).standard_normal((128, 64)).astype(F32)
    y0, g0, held0 = _run(False, x0, p)
    y1, g1, held1 = _run(True, x0, p)
    np.testing.assert_array_equal(y1, y0)
    for a, b in zip(g1, g0):
        np.testing.assert_array_equal(a, b)
    # each block's (128, 256) activations (several of them) are not held until backward
    assert held0 - held1 >= 4 * 2 * 128 * 256 * 4


def test_checkpoint_sequential_same_bits():
    x0 = np.random.default_rng(2).standard_normal((16, 64)).astype(F32)
    y0, g0, _ = _run(False, x0)
    y1, g1, _ = _run(True, x0, segments=2)
    np.testing.assert_array_equal(y1, y0)
    for a, b in zip(g1, g0):
        np.testing.assert_array_equal(a, b)


def test_matches_torch_checkpoint():
    rng = np.random.default_rng(3)
    x0, w0 = rng.standard_normal((5, 4)).astype(F32), rng.standard_normal((3, 4)).astype(F32)
    x, w = tl.tensor(x0, requires_grad=True), tl.tensor(w0, requires_grad=True)
    tx, tw = torch.tensor(x0, requires_grad=True), torch.tensor(w0, requires_grad=True)
    out = checkpoint(lambda a, b: (a @ b.T).sin().sum(), x, w)
    tout = torch.utils.checkpoint.checkpoint(lambda a, b: (a @ b.T).sin().sum(), tx, tw, use_reentrant=False)
    out.backward()
    tout.backward()
    np.testing.assert_allclose(out.item(), tout.item(), rtol=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_plain_run_where_nothing_can_be_saved():
    lin = tnn.Linear(4, 2)
    x = tl.randn(3, 4)  # requires no grad: the node would have no parent, so run it plainly
    out = checkpoint(lin, x)
    assert out.grad_fn is not None and out.grad_fn.name() != "checkpoint"
    out.sum().backward()
    assert lin.weight.grad is not None
    ints = checkpoint(lambda a: (a > 0).long(), tl.randn(2, requires_grad=True))
    assert ints.grad_fn is None  # no float output: run plainly


def _reaches_checkpoint(t) -> bool:
    fns = [t.grad_fn]
    while fns:
        f = fns.pop()
        if f is not None and f.name() == "checkpoint":
            return True
        fns.extend(e for e, _ in (f.next_functions if f is not None else ()))
    return False


def test_several_float_outputs_nested_as_an_lstm_returns_them():
    """(out, (h, c)) of an LSTM: one checkpoint node for the three; values and gradients as the
    plain run's (within the last bits: backward then starts from all outputs at once)."""
    rng = np.random.default_rng(6)
    x0 = rng.standard_normal((5, 3, 8)).astype(F32)
    w_out, w_h, w_c = (rng.standard_normal(s).astype(F32) for s in ((5, 3, 16), (1, 3, 16), (1, 3, 16)))
    tl.manual_seed(0)
    lstm = tnn.LSTM(8, 16)
    res = []
    for use in (False, True):
        x = tl.tensor(x0, requires_grad=True)
        out, (h, c) = checkpoint(lstm, x) if use else lstm(x)
        if use:
            assert all(_reaches_checkpoint(t) for t in (out, h, c))
        loss = (out * tl.tensor(w_out)).sum() + (h * tl.tensor(w_h)).sum() + (c * tl.tensor(w_c)).sum()
        loss.backward()
        res.append([out.detach().numpy(), h.detach().numpy(), c.detach().numpy(), x.grad.numpy()]
                   + [q.grad.numpy().copy() for q in lstm.parameters()])
        for q in lstm.parameters():
            q.grad = None
    for a, b in zip(res[1], res[0]):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_autograd_grad_through_a_checkpoint_is_refused():
    x = tl.randn(3, requires_grad=True)
    y = checkpoint(lambda a: (a * a).sum(), x)
    with pytest.raises(AutogradError, match="checkpoint: torch.autograd.grad"):
        tl.autograd.grad(y, x)


def test_a_tuple_with_one_float_tensor_is_checkpointed():
    """A transformer layer's (hidden, None): the hidden state is the checkpoint's node, the rest
    comes from the first run, and the gradients are those of the plain run."""
    x0 = np.random.default_rng(5).standard_normal((4, 64)).astype(F32)
    block = _block(7)
    grads = []
    for use in (False, True):
        x = tl.tensor(x0, requires_grad=True)
        fn = lambda a: (block(a), None, tl.tensor([1, 2]))  # noqa: E731
        out = checkpoint(fn, x) if use else fn(x)
        assert isinstance(out, tuple) and out[1] is None and out[2].tolist() == [1, 2]
        if use:
            assert out[0].grad_fn.name() == "checkpoint"
        (out[0] * out[0]).sum().backward()
        grads.append(x.grad.numpy())
        for q in block.parameters():
            q.grad = None
    np.testing.assert_array_equal(grads[1], grads[0])
