"""The tape: accumulation, graph shapes, retain_graph, no_grad/enable_grad, detach, retain_grad,
requires_grad rules, in-place updates, workspace release and a leak test.

Expected gradients here are worked out by hand (calculus on small integer-valued inputs whose
float32 arithmetic is exact), never copied from a run of the implementation.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import torchlean as tl
from torchlean import autograd, ops
from torchlean.errors import AutogradError, BufferReleasedError, DTypeError, ShapeError, TorchLeanError

F32 = np.float32


def T(data, grad=True):
    return tl.tensor(np.asarray(data, F32), requires_grad=grad)


def live_bytes() -> int:
    return tl.allocator_stats("cpu").live_bytes


def graph_nodes(root):
    """Every node reachable from ``root`` (before backward retires them)."""
    seen, out, stack = set(), [], [root._node]
    while stack:  # the graph's edges are nodes (and leaf tensors, which end a path)
        n = stack.pop()
        if n is None or id(n) in seen or not isinstance(n, autograd.Node):
            continue
        seen.add(id(n))
        out.append(n)
        stack.extend(n.parents)
    return out


# -- accumulation and graph shapes ------------------------------------------------------------------
def test_x_plus_x_has_gradient_two():
    x = T([1.0, -2.0, 3.0])
    (x + x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0, 2.0])


def test_x_times_x_has_gradient_two_x():
    x = T([1.0, -2.0, 3.0])
    (x * x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, -4.0, 6.0])


def test_shared_subexpression():
    # y = x^2; z = y * y + y  ->  dz/dx = (2y + 1) * 2x = (2x^2 + 1) 2x
    x = T([1.0, 2.0, -1.0])
    y = x * x
    z = y * y + y
    z.sum().backward()
    xv = np.array([1.0, 2.0, -1.0])
    np.testing.assert_array_equal(x.grad.numpy(), ((2 * xv**2 + 1) * 2 * xv).astype(F32))


def test_diamond_graph():
    # a = 3x; b = a + 1; c = a * 2; d = b * c  ->  dd/dx = 3 (c + 2 b) = 3 (6x + 6x + 2) = 36x + 6
    x = T([0.5, 1.0, -2.0])
    a = x * 3.0
    b = a + 1.0
    c = a * 2.0
    d = b * c
    d.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.array([24.0, 42.0, -66.0], F32))


def _count_primitive(monkeypatch, name):
    from torchlean.runtime import primitives as P

    calls = []
    orig = getattr(P, name)
    monkeypatch.setattr(P, name, lambda *a: calls.append(1) or orig(*a))
    return calls


def test_slices_of_one_tensor_join_by_concatenation(monkeypatch):
    # x[0], x[1], x[2] used with weights 1, 2, 3: dx rows are 1, 2, 3 (joined, not padded and added)
    x = T(np.arange(12.0).reshape(3, 4))
    adds = _count_primitive(monkeypatch, "add")
    concats = _count_primitive(monkeypatch, "concat1d")
    (x[0].sum() + (x[1] * 2.0).sum() + (x[2] * 3.0).sum()).backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.repeat(np.array([[1.0], [2.0], [3.0]], F32), 4, axis=1))
    assert len(concats) == 2  # three runs: two joins
    assert len(adds) == 2     # the two adds of the forward's sum; none for the gradient


def test_slice_gradients_with_gaps_overlaps_and_a_full_gradient():
    # d/dx of sum(x[1:2]) + 2 sum(x[1:3]) + 4 sum(x[3:4]) + 8 sum(x): rows 8, 11, 10, 12, 8
    x = T(np.ones((5, 2)))
    loss = x[1:2].sum() + (x[1:3] * 2.0).sum() + (x[3:4] * 4.0).sum() + (x * 8.0).sum()
    loss.backward()
    expect = np.array([8.0, 11.0, 10.0, 12.0, 8.0], F32)[:, None] * np.ones((1, 2), F32)
    np.testing.assert_array_equal(x.grad.numpy(), expect)
    y = T(np.ones((3, 2)))
    (y[2] * 5.0).sum().backward()  # one slice alone: zeros before it
    np.testing.assert_array_equal(y.grad.numpy(), np.array([[0, 0], [0, 0], [5, 5]], F32))


def test_slice_gradient_keeps_negative_zero():
    x = T([[1.0], [2.0]])
    (x[0] * -0.0).sum().backward()  # d/dx0 = -0 exactly; padding would have added +0 to it
    g = x.grad.numpy()
    assert g[0, 0] == 0.0 and np.signbit(g[0, 0]) and not np.signbit(g[1, 0])


def test_two_leaves_and_an_unused_leaf():
    x, y, unused = T([2.0]), T([3.0]), T([5.0])
    (x * y + x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [4.0])
    np.testing.assert_array_equal(y.grad.numpy(), [2.0])
    assert unused.grad is None


def test_gradient_accumulates_across_backward_calls():
    x = T([1.0, 2.0])
    (x * 3.0).sum().backward()
    (x * x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [3.0 + 2.0, 3.0 + 4.0])


def test_retain_graph_allows_second_backward():
    x = T([1.0, 2.0])
    y = (x * x).sum()
    y.backward(retain_graph=True)
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0])
    y.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [4.0, 8.0])


def test_second_backward_without_retain_graph_raises():
    x = T([1.0, 2.0])
    y = (x * x).sum()
    y.backward()
    with pytest.raises(AutogradError, match="retain_graph"):
        y.backward()
    # the first gradient is left as it was
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0])


def test_backward_through_a_freed_subgraph_raises():
    x = T([1.0, 2.0])
    h = x * 2.0
    h.sum().backward()
    with pytest.raises(AutogradError, match="retain_graph"):
        (h * 3.0).sum().backward()


def test_backward_on_non_scalar_needs_gradient():
    x = T([1.0, 2.0])
    y = x * 2.0
    with pytest.raises(AutogradError, match="one-element"):
        y.backward()
    assert isinstance(AutogradError("x"), TorchLeanError)


def test_backward_on_one_element_non_scalar_is_implicit():
    x = T([[3.0]])
    (x * x).backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[6.0]])


def test_backward_with_explicit_gradient():
    x = T([1.0, 2.0, 3.0])
    y = x * x
    y.backward(tl.tensor([1.0, 0.5, -2.0]))
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0, -12.0])


def test_backward_with_wrong_gradient_shape_or_type():
    x = T([1.0, 2.0, 3.0])
    y = x * 2.0
    with pytest.raises(ShapeError, match="backward"):
        y.backward(tl.tensor([1.0, 2.0]))
    with pytest.raises(AutogradError, match="backward"):
        y.backward(np.ones(3, F32))
    with pytest.raises(DTypeError):
        y.backward(tl.tensor([1, 2, 3]))


def test_backward_on_tensor_without_graph_raises():
    with pytest.raises(AutogradError, match="does not require grad"):
        tl.tensor([1.0]).sum().backward()


def test_backward_on_leaf_with_gradient():
    x = T([1.0, 2.0])
    x.backward(tl.tensor([3.0, 4.0]))
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 4.0])


def test_deep_graph_does_not_hit_recursion_limit():
    x = T([1.0, 2.0])
    y = x
    for _ in range(10_000):
        y = y + x
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [10_001.0, 10_001.0])


def test_deep_chain_of_unary_ops():
    x = T([0.5])
    y = x
    for _ in range(10_000):
        y = y * 1.0
    y = y * 3.0
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [3.0])


# -- grad mode -------------------------------------------------------------------------------------------
def test_no_grad_records_nothing():
    x = T([1.0, 2.0])
    with tl.no_grad():
        assert not tl.is_grad_enabled()
        y = x * x + 1.0
    assert tl.is_grad_enabled()
    assert not y.requires_grad
    assert y._node is None and y.is_leaf
    with pytest.raises(AutogradError):
        y.sum().backward()


def test_no_grad_as_decorator_and_restores_on_exception():
    @tl.no_grad()
    def f(t):
        assert not tl.is_grad_enabled()
        return t * 2.0

    x = T([1.0])
    assert not f(x).requires_grad
    assert tl.is_grad_enabled()
    with pytest.raises(RuntimeError):
        with tl.no_grad():
            raise RuntimeError("boom")
    assert tl.is_grad_enabled()


def test_enable_grad_inside_no_grad():
    x = T([1.0, 2.0])
    with tl.no_grad():
        with tl.enable_grad():
            assert tl.is_grad_enabled()
            y = x * x
        assert not tl.is_grad_enabled()
        z = x * x
    assert y.requires_grad and not z.requires_grad
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0])


def test_set_grad_enabled():
    x = T([1.0])
    with tl.set_grad_enabled(False):
        assert not (x * 2.0).requires_grad
    assert tl.is_grad_enabled()
    with tl.set_grad_enabled(True):
        assert (x * 2.0).requires_grad


def test_grad_mode_is_per_thread():
    seen = []
    with tl.no_grad():
        th = threading.Thread(target=lambda: seen.append(tl.is_grad_enabled()))
        th.start()
        th.join()
    assert seen == [True]


def test_no_grad_releases_workspace_at_once():
    n = 1000
    a, b = T(np.arange(n)), T(np.ones(n))
    base = live_bytes()
    with tl.no_grad():
        loss = ops.mse_loss(a, b)
    # only the 4-byte result stays alive: the difference (the node's workspace) was released
    assert live_bytes() - base == 4
    del loss
    assert live_bytes() == base
    with tl.no_grad():
        dropped = ops.dropout(a, 0.5, generator=tl.Generator(0))
    assert live_bytes() - base == 4 * n  # the output only; the mask workspace went at once
    del dropped
    loss = ops.mse_loss(a, b)  # recorded: the node keeps the n-element difference
    assert live_bytes() - base == 4 + 4 * n
    (ws,) = loss._node.workspace
    assert ws.size == n and not ws.released
    loss.backward()
    assert ws.released
    assert live_bytes() - base == 4 + 2 * 4 * n  # result + a.grad and b.grad, nothing else


# -- detach / retain_grad / requires_grad -------------------------------------------------------------------
def test_detach_cuts_the_graph():
    x = T([1.0, 2.0])
    y = x * 3.0
    d = y.detach()
    assert not d.requires_grad and d.is_leaf
    np.testing.assert_array_equal(d.numpy(), y.numpy())
    (y * d).sum().backward()  # d is a constant: d(y*d)/dx = 3 d
    np.testing.assert_array_equal(x.grad.numpy(), [9.0, 18.0])


def test_detach_then_requires_grad_is_a_new_leaf():
    x = T([2.0])
    leaf = (x * x).detach().requires_grad_()
    (leaf * 5.0).sum().backward()
    np.testing.assert_array_equal(leaf.grad.numpy(), [5.0])
    assert x.grad is None


def test_retain_grad_on_non_leaf():
    x = T([1.0, 2.0])
    h = x * 3.0
    h.retain_grad()
    k = x * 1.0  # not retained
    (h * h + k).sum().backward()
    np.testing.assert_array_equal(h.grad.numpy(), [6.0, 12.0])  # 2h
    np.testing.assert_array_equal(x.grad.numpy(), [19.0, 37.0])  # 2h*3 + 1
    assert k.grad is None


def test_requires_grad_propagation():
    a, b = T([1.0]), T([2.0], grad=False)
    assert a.is_leaf and a.requires_grad
    assert not b.requires_grad
    assert (a + b).requires_grad and not (a + b).is_leaf
    assert not (b * 2.0).requires_grad and (b * 2.0).is_leaf
    assert (b + a).requires_grad
    i = tl.tensor([0])
    assert not i.requires_grad
    with pytest.raises(DTypeError):
        i.requires_grad_()
    assert (a[i]).requires_grad  # indexing with an int tensor keeps the float side's grad
    nonleaf = a * 2.0
    with pytest.raises(AutogradError):
        nonleaf.requires_grad_(False)
    assert b.requires_grad_() is b and b.requires_grad


def test_gradient_only_flows_to_leaves_requiring_it():
    a, b = T([2.0]), T([3.0], grad=False)
    (a * b).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), [3.0])
    assert b.grad is None


def test_bmm_vjp_skips_inputs_without_grad():
    a = T(np.ones((1, 2, 2)))
    b = T(np.eye(2)[None], grad=False)
    ops.bmm(a, b).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), np.ones((1, 2, 2), F32))


# -- in-place updates ----------------------------------------------------------------------------------
INPLACE = {
    "sub_tensor": lambda p: p.sub_(tl.tensor([1.0, 1.0])),
    "sub_scalar": lambda p: p.sub_(1.0),
    "add_tensor": lambda p: p.add_(tl.tensor([1.0, 1.0])),
    "add_scalar": lambda p: p.add_(2.0),
    "add_alpha": lambda p: p.add_(tl.tensor([1.0, 1.0]), alpha=0.5),
    "add_scalar_alpha": lambda p: p.add_(2.0, alpha=-0.5),
    "mul_": lambda p: p.mul_(2.0),
    "div_": lambda p: p.div_(2.0),
    "zero_": lambda p: p.zero_(),
    "fill_": lambda p: p.fill_(7.0),
    "copy_": lambda p: p.copy_(tl.tensor([5.0, 6.0])),
}
EXPECTED = {"sub_tensor": [1.0, 3.0], "sub_scalar": [1.0, 3.0], "add_tensor": [3.0, 5.0], "add_scalar": [4.0, 6.0],
            "add_alpha": [2.5, 4.5], "add_scalar_alpha": [1.0, 3.0], "mul_": [4.0, 8.0], "div_": [1.0, 2.0], "zero_": [0.0, 0.0],
            "fill_": [7.0, 7.0], "copy_": [5.0, 6.0]}


@pytest.mark.parametrize("name", sorted(INPLACE))
def test_inplace_allowed_under_no_grad(name):
    p = T([2.0, 4.0])
    with tl.no_grad():
        out = INPLACE[name](p)
    assert out is p
    np.testing.assert_array_equal(p.numpy(), EXPECTED[name])
    assert p.requires_grad and p.is_leaf


@pytest.mark.parametrize("name", sorted(INPLACE))
def test_inplace_on_leaf_requiring_grad_raises_outside_no_grad(name):
    p = T([2.0, 4.0])
    with pytest.raises(AutogradError, match="no_grad"):
        INPLACE[name](p)
    np.testing.assert_array_equal(p.numpy(), [2.0, 4.0])  # untouched


def test_inplace_operators():
    p = T([2.0, 4.0])
    with tl.no_grad():
        p -= tl.tensor([1.0, 2.0])
        p += 1.0
        p *= 3.0
        p /= 2.0
    np.testing.assert_array_equal(p.numpy(), [3.0, 4.5])
    with pytest.raises(AutogradError, match="no_grad"):
        p -= tl.tensor([1.0, 1.0])
    np.testing.assert_array_equal(p.numpy(), [3.0, 4.5])


def test_isub_python_scalar():
    # ``p -= 0.5`` (and p.sub_(0.5), p.add_(c, alpha=a)) is the common SGD spelling with a number
    p = T([2.0, 4.0])
    with tl.no_grad():
        p -= 0.5
    np.testing.assert_array_equal(p.numpy(), [1.5, 3.5])


def test_inplace_on_plain_tensor_outside_no_grad_is_fine():
    q = tl.tensor([1.0, 2.0])
    q.add_(tl.tensor([1.0, 1.0]))
    q.mul_(2.0)
    np.testing.assert_array_equal(q.numpy(), [4.0, 6.0])


def test_inplace_shape_mismatch():
    q = tl.tensor([1.0, 2.0])
    with pytest.raises(ShapeError):
        q.add_(tl.tensor([[1.0, 1.0], [1.0, 1.0]]))


def test_sgd_step_after_backward_keeps_graph_values():
    # the update under no_grad replaces the parameter's buffer; the graph already used kept its own
    w = T([2.0])
    loss = (w * w).sum()
    loss.backward()
    with tl.no_grad():
        w.sub_(w.grad * 0.25)
    np.testing.assert_array_equal(w.numpy(), [1.0])
    np.testing.assert_array_equal(loss.numpy(), 4.0)


# -- workspace release and leaks --------------------------------------------------------------------------
def test_backward_retires_every_node_and_releases_workspaces():
    x, t = T(np.arange(6).reshape(2, 3)), T(np.ones((2, 3)), grad=False)
    h = ops.tanh(ops.linear(x, T(np.eye(3)), T(np.zeros(3))))
    d = ops.dropout(h, 0.5, generator=tl.Generator(3))
    loss = ops.mse_loss(ops.softmax(h, 0), t) + ops.mse_loss(d, t, "sum")
    nodes = graph_nodes(loss)
    assert len(nodes) >= 7 and not any(n.retired for n in nodes)
    workspaces = [w for n in nodes for w in n.workspace]
    assert len(workspaces) == 3  # one difference per mse_loss, dropout's scaled mask
    loss.backward()
    assert all(n.retired for n in nodes)
    assert all(n.vjp is None and n.parents == () and n.workspace == () for n in nodes)
    for w in workspaces:
        assert w.released
        with pytest.raises(BufferReleasedError):
            w.to_numpy()
        assert w.release() is False


def test_retain_graph_keeps_workspaces_until_last_backward():
    a, b = T([1.0, 2.0]), T([0.0, 0.0], grad=False)
    loss = ops.mse_loss(a, b, "sum")
    (ws,) = loss._node.workspace
    loss.backward(retain_graph=True)
    assert not ws.released
    loss.backward()
    assert ws.released
    np.testing.assert_array_equal(a.grad.numpy(), [4.0, 8.0])


def test_training_loop_does_not_leak():
    rng = np.random.default_rng(0)
    params = [T(rng.standard_normal((8, 3)) * 0.5), T(np.zeros(8)), T(rng.standard_normal((1, 8)) * 0.5),
              T(np.zeros(1))]
    x = tl.tensor(rng.standard_normal((16, 3)).astype(F32))
    y = tl.tensor(rng.standard_normal((16, 1)).astype(F32))
    live = []
    losses = []
    for _ in range(200):
        out = ops.linear(ops.tanh(ops.linear(x, params[0], params[1])), params[2], params[3])
        loss = ops.mse_loss(out, y)
        loss.backward()
        losses.append(loss.item())
        with tl.no_grad():
            for p in params:
                p.sub_(p.grad * 0.05)
                p.grad = None
        del out, loss
        live.append(live_bytes())
    assert losses[-1] < losses[0]
    # flat after the first steps: no buffer survives a step (node workspaces, grads, old params)
    assert max(live[5:]) == min(live[5:]) == live[5], (live[:10], live[-10:])
    assert max(live) <= live[5]


def test_grad_fn_names_the_op_and_its_edges():
    """PyTorch programs test ``x.grad_fn is None`` (a leaf, or made without grad) and walk
    ``grad_fn.next_functions``; ours names our ops."""
    x = tl.tensor([1.0, 2.0, 3.0], requires_grad=True)
    c = tl.tensor([1.0, 1.0, 1.0])
    assert x.grad_fn is None and c.grad_fn is None
    y = (x * 2 + c).sum()
    assert y.grad_fn is not None and y.grad_fn.name() == "sum" and "sum" in repr(y.grad_fn)
    (add_fn, idx), = y.grad_fn.next_functions
    assert idx == 0 and add_fn.name() == "add"
    edges = add_fn.next_functions
    assert [e is None for e, _ in edges] == [False, True]  # x * 2 needs a gradient, c does not
    (acc, _), = edges[0][0].next_functions
    assert acc.name() == "AccumulateGrad" and acc.variable is x
    assert y.grad_fn == y.grad_fn and hash(y.grad_fn) == hash(y.grad_fn)
    with tl.no_grad():
        assert (x * 2).grad_fn is None
    assert (x * 2).detach().grad_fn is None
    y.backward()
    assert y.grad_fn.name() == "sum" and y.grad_fn.next_functions == ()


def test_recompute_keeps_only_the_inputs_and_gives_the_same_gradients():
    """autograd.recompute: one node over the inputs; backward runs fn again and walks that graph,
    so the gradients are bitwise those of the graph recorded directly."""
    rng = np.random.default_rng(4)
    a0, b0 = rng.standard_normal((3, 4)).astype(F32), rng.standard_normal((4, 5)).astype(F32)

    def fn(a, b):
        return ops.tanh(a @ b).exp()

    grads = []
    for use in (False, True):
        a, b = tl.tensor(a0, requires_grad=True), tl.tensor(b0)  # b needs no gradient
        y = autograd.recompute("f", fn, [a, b]) if use else fn(a, b)
        if use:
            assert y.grad_fn.name() == "f" and len(y.grad_fn.next_functions) == 2
        (y * y).sum().backward()
        grads.append((y.detach().numpy(), a.grad.numpy()))
        assert b.grad is None
    np.testing.assert_array_equal(grads[1][0], grads[0][0])
    np.testing.assert_array_equal(grads[1][1], grads[0][1])
    with tl.no_grad():
        assert autograd.recompute("f", fn, [tl.tensor(a0, requires_grad=True), tl.tensor(b0)]).grad_fn is None
