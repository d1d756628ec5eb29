"""torch.nn.utils.rnn.pad_sequence and torch.inference_mode against PyTorch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import torchlean as tl
from torchlean.errors import ArgumentError, ShapeError
from torchlean.nn.utils.rnn import pack_padded_sequence, pad_sequence, unpad_sequence


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("side", ["right", "left"])
def test_pad_sequence_matches_torch_and_keeps_dtype(batch_first, side):
    rng = np.random.default_rng(0)
    ints = [rng.integers(0, 50, n) for n in (3, 5, 1)]
    ours = pad_sequence([tl.tensor(a) for a in ints], batch_first=batch_first, padding_value=7, padding_side=side)
    theirs = torch.nn.utils.rnn.pad_sequence([torch.tensor(a) for a in ints], batch_first=batch_first,
                                             padding_value=7, padding_side=side)
    assert ours.dtype == tl.int64
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_pad_sequence_gradients_and_unpad():
    rng = np.random.default_rng(1)
    data = [rng.standard_normal((n, 3)).astype(np.float32) for n in (2, 4)]
    ours = [tl.tensor(d, requires_grad=True) for d in data]
    theirs = [torch.tensor(d, requires_grad=True) for d in data]
    w = rng.standard_normal((4, 2, 3)).astype(np.float32)
    (pad_sequence(ours) * tl.tensor(w)).sum().backward()
    (torch.nn.utils.rnn.pad_sequence(theirs) * torch.tensor(w)).sum().backward()
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(a.grad.numpy(), b.grad.numpy())
    back = unpad_sequence(pad_sequence(ours, batch_first=True), [2, 4], batch_first=True)
    for a, d in zip(back, data):
        np.testing.assert_array_equal(a.detach().numpy(), d)


def test_pad_sequence_errors_and_packed_sequences_refused():
    with pytest.raises(ShapeError, match="trailing shape"):
        pad_sequence([tl.zeros(2, 3), tl.zeros(2, 4)])
    with pytest.raises(ArgumentError, match="empty"):
        pad_sequence([])
    with pytest.raises(ArgumentError, match="PackedSequence is not supported"):
        pack_padded_sequence(tl.zeros(3, 2, 1), [3, 2])
    import torchlean.nn.utils.rnn as path  # the module path programs import
    assert path is tl.nn.utils.rnn


def test_inference_mode_like_torch():
    x = tl.ones(2, requires_grad=True)
    with tl.inference_mode():
        assert not (x * 2).requires_grad and tl.is_inference_mode_enabled()
    assert (x * 2).requires_grad and not tl.is_inference_mode_enabled()
    with tl.inference_mode(False):
        assert (x * 2).requires_grad

    @tl.inference_mode()
    def f():
        return (x * 2).requires_grad

    @tl.inference_mode
    def g():
        return (x * 2).requires_grad

    assert f() is False and g() is False
