"""Pending views (ops/pending.py): split/narrow along a later dim, view and transpose/permute of a
computed float tensor are held back until something reads them; attention reads the heads of a
packed projection in place. Whatever runs, values and gradients equal the eager ops' bit for bit
(and PyTorch's within attention's contract), and the program sees a plain tensor's behaviour:
grad modes, in-place updates of the source, retain_grad, requires_grad_, errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import torchlean as tl
import torchlean.nn.functional as F
from torchlean.errors import ShapeError
from torchlean.ops.pending import PendingView
from torchlean.runtime import primitives as P

F32 = np.float32
B, T, C, H = 2, 12, 24, 3


def _data(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((B, T, C)).astype(F32)
    w = (0.3 * rng.standard_normal((3 * C, C))).astype(F32)
    g = rng.standard_normal((B, T, C)).astype(F32)
    return x, w, g


def _gpt_heads(qkv, eager):
    """nanoGPT's attention; ``eager`` materializes the heads first (what the runtime did before)."""
    q, k, v = qkv.split(C, dim=2)
    q = q.view(B, T, H, C // H).transpose(1, 2)
    k = k.view(B, T, H, C // H).transpose(1, 2)
    v = v.view(B, T, H, C // H).transpose(1, 2)
    if eager:
        q, k, v = q + 0, k + 0, v + 0
    return q, k, v


def _timm_heads(qkv, eager):
    """timm's ViT attention: reshape to (B, N, 3, H, d), permute, unbind."""
    q, k, v = qkv.reshape(B, T, 3, H, C // H).permute(2, 0, 3, 1, 4).unbind(0)
    if eager:
        q, k, v = q + 0, k + 0, v + 0
    return q, k, v


def _timm_indexed_heads(qkv, eager):
    """Older timm and many ViTs: the same permute, then qkv[0], qkv[1], qkv[2]."""
    t = qkv.reshape(B, T, 3, H, C // H).permute(2, 0, 3, 1, 4)
    q, k, v = t[0], t[1], t[2]
    if eager:
        q, k, v = q + 0, k + 0, v + 0
    return q, k, v


def _attention_step(lib, heads, device, eager, mask=None, causal=True):
    x, w, g = _data()
    xt = lib.tensor(x, device=device, requires_grad=True)
    wt = lib.tensor(w, device=device, requires_grad=True)
    qkv = lib.nn.functional.linear(xt, wt)
    q, k, v = heads(qkv, eager)
    y = lib.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
    y = y.transpose(1, 2).contiguous().view(B, T, C)
    (y * lib.tensor(g, device=device)).sum().backward()
    return y, xt.grad, wt.grad


def _np(t):
    return t.detach().cpu().numpy()


@pytest.mark.parametrize("heads", [_gpt_heads, _timm_heads, _timm_indexed_heads], ids=["nanogpt", "timm", "indexed"])
def test_attention_reads_the_packed_projection_with_the_eager_bits(heads, device, monkeypatch):
    calls = []
    for name in ("flash_attention_packed_fwd", "flash_attention_packed_bwd", "flash_attention_fwd", "narrow_block",
                 "swap_adjacent_at_depth", "permute", "concat_block"):
        real = getattr(P, name)
        monkeypatch.setattr(P, name, lambda *a, _n=name, _r=real: calls.append(_n) or _r(*a))
    lazy = _attention_step(tl, heads, device, eager=False)
    assert sorted(calls) == ["flash_attention_packed_bwd", "flash_attention_packed_fwd"]  # no layout copies
    calls.clear()
    eager = _attention_step(tl, heads, device, eager=True)
    assert "flash_attention_fwd" in calls and "flash_attention_packed_fwd" not in calls
    for a, b in zip(lazy, eager):
        assert np.array_equal(_np(a).view(np.uint32), _np(b).view(np.uint32))
    ref = _attention_step(torch, heads, "cpu", eager=False)
    for a, b in zip(lazy, ref):
        np.testing.assert_allclose(_np(a), _np(b), rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("masked", ["bool", "float"])
def test_attention_with_a_mask_over_pending_heads(masked, device):
    rng = np.random.default_rng(3)
    allow = rng.random((T, T)) < 0.6
    allow[:, 0] = True
    m = allow if masked == "bool" else np.where(allow, rng.standard_normal((T, T)), -np.inf).astype(F32)
    lazy = _attention_step(tl, _gpt_heads, device, False, tl.tensor(m, device=device), causal=False)
    eager = _attention_step(tl, _gpt_heads, device, True, tl.tensor(m, device=device), causal=False)
    for a, b in zip(lazy, eager):
        assert np.array_equal(_np(a).view(np.uint32), _np(b).view(np.uint32))


def test_a_bad_mask_names_the_users_call():
    x, w, _ = _data()
    q, k, v = _gpt_heads(F.linear(tl.tensor(x), tl.tensor(w)), eager=False)
    with pytest.raises(ShapeError, match="scaled_dot_product_attention"):
        F.scaled_dot_product_attention(q, k, v, attn_mask=tl.ones(5, 7, dtype=tl.bool))


def test_the_output_used_as_heads_equals_the_eager_output(device):
    x, w, g = _data(1)
    outs = []
    for eager in (False, True):
        qkv = F.linear(tl.tensor(x, device=device, requires_grad=True), tl.tensor(w, device=device))
        y = F.scaled_dot_product_attention(*_gpt_heads(qkv, eager))
        assert tuple(y.shape) == (B, H, T, C // H)
        outs.append(_np(y * 2))  # read as (B, H, T, d): the heads move now
    assert np.array_equal(outs[0], outs[1])


def test_views_stay_pending_until_read_and_run_no_kernel_when_dropped(monkeypatch):
    x, w, _ = _data()
    qkv = F.linear(tl.tensor(x, requires_grad=True), tl.tensor(w))
    calls = []
    for name in ("narrow_block", "swap_adjacent_at_depth", "permute"):
        real = getattr(P, name)
        monkeypatch.setattr(P, name, lambda *a, _n=name, _r=real: calls.append(_n) or _r(*a))
    q, k, v = _gpt_heads(qkv, eager=False)
    assert type(q) is PendingView and q.shape == (B, H, T, C // H) and q.requires_grad and q.dtype == tl.float32
    assert calls == []
    del k, v
    got = q.numpy()  # reading it runs the eager steps: narrow, then the transpose
    assert calls == ["narrow_block", "swap_adjacent_at_depth"] and type(q) is tl.Tensor
    want = qkv.numpy()[:, :, :C].reshape(B, T, H, C // H).transpose(0, 2, 1, 3)
    assert np.array_equal(got, want)


def test_an_int_index_of_a_pending_view_stays_pending_with_the_row_values():
    a = np.arange(2 * 3 * 4, dtype=F32).reshape(2, 3, 4)
    y = tl.tensor(a) * 1.0
    t = y.permute(2, 0, 1)
    rows = [t[1], t[-1]]
    assert all(type(r) is PendingView for r in rows)
    assert np.array_equal(rows[0].numpy(), a.transpose(2, 0, 1)[1])
    assert np.array_equal(rows[1].numpy(), a.transpose(2, 0, 1)[-1])


def test_a_transpose_back_is_a_reshape_of_the_source():
    qkv = F.linear(tl.tensor(_data()[0], requires_grad=True), tl.tensor(_data()[1]))
    y = qkv.view(B, T, 3, C).transpose(1, 2).transpose(1, 2)
    assert type(y) is tl.Tensor and y._buf is qkv._buf  # no copy at all


def test_the_source_updated_in_place_later_leaves_the_view_as_it_was():
    x = tl.tensor(np.arange(2 * 3 * 4, dtype=F32).reshape(2, 3, 4))
    y = x * 1.0  # a computed tensor: views of it are pending
    piece = y.narrow(2, 1, 2)
    flipped = y.transpose(0, 2)
    assert type(piece) is PendingView and type(flipped) is PendingView
    before = y.numpy().copy()
    y.add_(100.0)
    assert np.array_equal(piece.numpy(), before[:, :, 1:3])
    assert np.array_equal(flipped.numpy(), before.transpose(2, 1, 0))


def test_grad_modes_are_those_of_each_step():
    x = tl.tensor(np.ones((2, 3, 4), F32), requires_grad=True)
    y = x * 2.0
    p = y.transpose(0, 1)
    with tl.no_grad():
        q = p.transpose(1, 2)  # a step under another mode: computed now, as eager ops would be
        assert type(q) is tl.Tensor and not q.requires_grad
    assert p.requires_grad and not p.is_leaf  # p itself was computed then, under its own mode
    with tl.no_grad():
        r = y.narrow(2, 0, 2)
    assert not r.requires_grad
    s = r.transpose(0, 1)  # extended with grad on: r's step had it off, so s is computed now
    assert type(s) is tl.Tensor and not s.requires_grad


def test_retain_grad_and_hooks_on_pending_heads_reach_them(device):
    x, w, g = _data(2)
    qkv = F.linear(tl.tensor(x, device=device, requires_grad=True), tl.tensor(w, device=device))
    q, k, v = _gpt_heads(qkv, eager=False)
    q.retain_grad()
    seen = []
    k.register_hook(lambda grad: seen.append(grad.shape))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    (y * y).sum().backward()
    assert q.grad is not None and q.grad.shape == q.shape and seen == [k.shape]


def test_requires_grad_on_a_pending_view_of_constant_data(device):
    x, w, _ = _data(4)
    qkv = F.linear(tl.tensor(x, device=device), tl.tensor(w, device=device))  # no grad anywhere
    q, k, v = _gpt_heads(qkv, eager=False)
    q.requires_grad_()
    y = F.scaled_dot_product_attention(q, k, v)
    y.sum().backward()
    assert q.grad is not None and q.is_leaf and k.grad is None


def test_leaves_that_require_grad_are_never_pending():
    w = tl.tensor(np.ones((2, 3, 4), F32), requires_grad=True)
    assert type(w.transpose(0, 1)) is tl.Tensor and type(w.narrow(2, 0, 1)) is tl.Tensor
    p = tl.nn.Parameter(tl.ones(2, 3, 4))
    assert type(p.split(2, dim=2)[0]) is tl.Tensor


def test_heads_of_different_sources_take_the_plain_path(device):
    x, w, g = _data(5)
    a = F.linear(tl.tensor(x, device=device, requires_grad=True), tl.tensor(w, device=device))
    b = a * 1.0
    qa, _, va = _gpt_heads(a, eager=False)
    _, kb, _ = _gpt_heads(b, eager=False)
    y = F.scaled_dot_product_attention(qa, kb, va)
    z = F.scaled_dot_product_attention(*(t + 0 for t in (qa, kb, va)))
    assert np.array_equal(y.numpy(), z.numpy())
