"""In-place methods under autograd, against PyTorch: differentiable on a non-leaf and on a tensor
that does not require grad, refused on a leaf that requires grad while gradients are recorded,
plain rebinds under no_grad (where the optimizer's ``add_(g, alpha=...)`` stays one axpy)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import torchlean as tl
from torchlean.errors import AutogradError, TorchLeanError

W = [1.0, -2.0, 3.0, 0.5]
V = [0.5, 0.25, 2.0, -1.5]
C = [1.0, 2.0, 3.0, 4.0]

# each takes (lib, y, v) and updates y in place; y = w * 2 (a non-leaf) or a plain tensor
UPDATES = {
    "add_": lambda lib, y, v: y.add_(v),
    "add_alpha": lambda lib, y, v: y.add_(v, alpha=0.5),
    "add_scalar": lambda lib, y, v: y.add_(2.0),
    "sub_": lambda lib, y, v: y.sub_(v, alpha=2.0),
    "mul_": lambda lib, y, v: y.mul_(v),
    "mul_scalar": lambda lib, y, v: y.mul_(3.0),
    "div_": lambda lib, y, v: y.div_(v),
    "iadd": lambda lib, y, v: y.__iadd__(v),
    "isub": lambda lib, y, v: y.__isub__(v),
    "imul": lambda lib, y, v: y.__imul__(v),
    "itruediv": lambda lib, y, v: y.__itruediv__(v),
    "copy_": lambda lib, y, v: y.copy_(v),
    "copy_broadcast": lambda lib, y, v: y.copy_(v[:1]),
    "fill_": lambda lib, y, v: y.fill_(1.5),
    "zero_": lambda lib, y, v: y.zero_(),
    "clamp_": lambda lib, y, v: y.clamp_(-1.0, 3.0),
    "clamp_min_": lambda lib, y, v: y.clamp_min_(0.0),
    "pow_": lambda lib, y, v: y.pow_(2.0),
    "exp_": lambda lib, y, v: y.exp_(),
    "tanh_": lambda lib, y, v: y.tanh_(),
    "relu_": lambda lib, y, v: y.relu_(),
    "neg_": lambda lib, y, v: y.neg_(),
    "lerp_": lambda lib, y, v: y.lerp_(v, 0.25),
    "addcmul_": lambda lib, y, v: y.addcmul_(v, v, value=0.5),
    "setitem": lambda lib, y, v: y.__setitem__(slice(1, 3), v[:2] * 2.0) or y,
    "masked_fill_": lambda lib, y, v: y.masked_fill_(v > 0.3, -1.0),
    "index_add_": lambda lib, y, v: y.index_add_(0, lib.tensor([3, 0]), v[1:3]),
    "chain": lambda lib, y, v: y.mul_(0.5).add_(v).clamp_(max=1.75),  # (no value at the bound)
}


def _run(lib, name: str, base: str):
    w = lib.tensor(W, requires_grad=True)
    v = lib.tensor(V, requires_grad=True)
    y = w * 2.0 if base == "nonleaf" else lib.zeros(4)
    before = y + 1.0  # an earlier use: it keeps the old values (add saves nothing)
    out = UPDATES[name](lib, y, v)
    assert out is y
    state = (y.requires_grad, y.is_leaf, y.grad_fn is not None if lib is torch else y._node is not None)
    loss = (y * lib.tensor(C)).sum() + (before * before).sum() if before.requires_grad else (y * lib.tensor(C)).sum()
    if loss.requires_grad:
        loss.backward()
    grads = [None if t.grad is None else t.grad.numpy() for t in (w, v)]
    return y.detach().numpy(), grads, state


@pytest.mark.parametrize("base", ["nonleaf", "plain"])
@pytest.mark.parametrize("name", sorted(UPDATES))
def test_inplace_matches_torch_under_autograd(name, base):
    want, want_grads, want_state = _run(torch, name, base)
    got, got_grads, got_state = _run(tl, name, base)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert got_state == want_state
    for g, e in zip(got_grads, want_grads):
        assert (g is None) == (e is None), (got_grads, want_grads)
        if e is not None:
            np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", sorted(UPDATES))
def test_inplace_on_leaf_that_requires_grad_raises_as_torch(name):
    tw = torch.tensor(W, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        UPDATES[name](torch, tw, torch.tensor(V))
    w = tl.tensor(W, requires_grad=True)
    with pytest.raises(AutogradError, match="leaf tensor that requires grad.*in-place.*no_grad") as info:
        UPDATES[name](tl, w, tl.tensor(V))
    assert isinstance(info.value, RuntimeError) and isinstance(info.value, TorchLeanError)
    assert w.numpy().tolist() == W and w.is_leaf and w._node is None  # left as it was


@pytest.mark.parametrize("name", sorted(UPDATES))
def test_inplace_under_no_grad_rebinds_a_leaf(name):
    results = []
    for lib in (torch, tl):
        w = lib.tensor(W, requires_grad=True)
        with lib.no_grad():
            UPDATES[name](lib, w, lib.tensor(V, requires_grad=True))
        assert w.requires_grad and w.is_leaf
        results.append(w.detach().numpy())
        (w * 2.0).sum().backward()  # still a leaf of later graphs
        assert w.grad.numpy().tolist() == [2.0] * 4
    np.testing.assert_allclose(results[1], results[0], rtol=1e-6, atol=1e-6)


def test_random_fill_of_a_non_leaf_gives_its_history_zeros():
    for lib in (torch, tl):
        w = lib.tensor(W, requires_grad=True)
        y = w * 2.0
        y.uniform_()
        assert y.requires_grad and not y.is_leaf
        (y * 3.0).sum().backward()
        assert w.grad.numpy().tolist() == [0.0] * 4
    with pytest.raises(AutogradError, match="normal_: a leaf tensor"):
        tl.ones(2, requires_grad=True).normal_()


def test_inplace_accumulation_loop_matches_torch():
    """An accumulator updated in place on every step, and read by the loss in between."""
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((5, 3)).astype(np.float32)
    w0 = rng.standard_normal(3).astype(np.float32)

    def run(lib):
        w = lib.tensor(w0, requires_grad=True)
        h = lib.zeros(3)
        for i in range(5):  # (only updates that save no tensor: PyTorch refuses to backward otherwise)
            h.mul_(0.5)
            h += lib.tensor(xs[i]) * w
            h[0] = h[1] * 2.0
            h.sub_(0.125)
            total = h.sum() if i == 0 else total + h.sum()  # uses of every version of h
        total.backward()
        return h.detach().numpy(), w.grad.numpy()

    (hv, gv), (ht, gt) = run(tl), run(torch)
    np.testing.assert_allclose(hv, ht, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gv, gt, rtol=1e-5, atol=1e-6)


def test_optimizer_step_spelling_stays_one_axpy(monkeypatch):
    """``p.add_(g, alpha=-lr)`` under no_grad is the optimizers' step: one axpy, no other op."""
    from torchlean import _methods

    calls = []
    axpy = _methods.P.axpy
    monkeypatch.setattr(_methods.P, "axpy", lambda *a: calls.append(1) or axpy(*a))
    for name in ("add", "mul", "div"):
        monkeypatch.setattr(tl.ops, name, lambda *a, _n=name: pytest.fail(f"ops.{_n} ran on the fast path"))
    p = tl.tensor([1.0, 2.0], requires_grad=True)
    before = p._buf
    with tl.no_grad():
        p.add_(tl.tensor([0.5, 0.5]), alpha=-2.0)
    assert calls == [1] and p._buf is not before and p.numpy().tolist() == [0.0, 1.0]
    assert p.is_leaf and p.requires_grad


def test_int_tensors_update_in_place_keeping_dtype():
    for dt in ("int64", "int32", "uint8"):
        t = torch.tensor([1, 5, 9], dtype=getattr(torch, dt))
        x = tl.tensor([1, 5, 9], dtype=getattr(tl, dt))
        for lib, a in ((torch, t), (tl, x)):
            a.add_(2)
            a.mul_(3)
            a.clamp_(0, 20)
            a[0] = 4
            a.copy_(a + 1)
        assert x.dtype == getattr(tl, dt) and x.numpy().tolist() == t.tolist()
    m = tl.tensor([True, False])
    m.copy_(tl.tensor([0, 3]))
    assert m.dtype == tl.bool and m.tolist() == [False, True]


def test_uses_of_older_versions_get_their_own_gradients():
    """Only older versions reach the loss; twice updated; backward twice with retain_graph."""
    def run(lib):
        w = lib.tensor(W, requires_grad=True)
        y = w * 3.0
        z = y + 1.0
        y.mul_(2.0)
        u = y * lib.tensor(C)
        y.sub_(w)
        loss = (z * z).sum() + u.sum()
        loss.backward(retain_graph=True)
        first = w.grad.numpy().copy()
        loss.backward()
        return first, w.grad.numpy()

    for got, want in zip(run(tl), run(torch)):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_autograd_grad_sees_the_versions_too():
    def run(lib):
        w = lib.tensor(W, requires_grad=True)
        y = w * 3.0
        z = y + 1.0
        y.mul_(2.0)
        return lib.autograd.grad((z * z).sum() + y.sum(), w)[0].numpy()

    np.testing.assert_allclose(run(tl), run(torch), rtol=1e-6)
