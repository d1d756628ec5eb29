"""Narrowing along a later dim (``split``/``chunk``/``narrow``/``x[:, a:b]``/``x[:, i]``) as one strided
copy (narrow_block; tests/test_narrow_block.py has the rest): the same values and gradients as PyTorch,
bit for bit (a move never rounds), on every key shape."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import torchlean as tl
from torchlean.runtime import primitives as P

KEYS = {
    "split_last": lambda z: z.split(8, dim=2)[1],
    "chunk_last": lambda z: z.chunk(3, dim=-1)[2],
    "narrow_mid": lambda z: z.narrow(1, 1, 3),
    "int_mid": lambda z: z[:, -1],
    "slice_last": lambda z: z[:, :, 8:16],
    "slice_mid": lambda z: z[:, 1:4],
    "odd_split": lambda z: z.split([5, 19], dim=2)[1],   # rows of gcd(5, 19, 24) = 1: flat positions
    "empty": lambda z: z[:, 2:2],
    "int_last": lambda z: z[:, :, 7],
}


@pytest.mark.parametrize("name", sorted(KEYS))
def test_values_and_gradients_match_torch(name):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((4, 5, 24)).astype(np.float32)
    a[0, 0, :3] = [np.nan, np.inf, -0.0]
    x, t = tl.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    y, r = KEYS[name](x), KEYS[name](t)
    assert y.shape == tuple(r.shape)
    assert np.array_equal(y.detach().numpy(), r.detach().numpy(), equal_nan=True)
    w = rng.standard_normal(tuple(r.shape)).astype(np.float32)
    (y * tl.tensor(w)).sum().backward()
    (r * torch.tensor(w)).sum().backward()
    assert np.array_equal(x.grad.numpy(), t.grad.numpy())


def test_a_qkv_split_moves_rows_not_positions(monkeypatch):
    """The fused-projection split gathers B*T*3 rows of d elements, never B*T*3d positions."""
    calls = []
    real = P.gather_vec
    monkeypatch.setattr(P, "gather_vec", lambda *a: calls.append(1) or real(*a))
    x = tl.randn(2, 16, 3 * 32, requires_grad=True)
    q, k, v = x.split(32, dim=2)
    (q * 1 + k * 2 + v * 3).sum().backward()
    assert calls == [] and np.array_equal(x.grad.numpy()[..., 32:64], np.full((2, 16, 32), 2, np.float32))


def test_integer_tensors_keep_their_path():
    x = tl.arange(24).reshape(2, 12)
    assert x[:, 4:8].tolist() == [[4, 5, 6, 7], [16, 17, 18, 19]]
    assert x.split(6, dim=1)[1].dtype == tl.int64
