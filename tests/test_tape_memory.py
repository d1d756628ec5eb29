"""What the tape keeps alive: the graph holds nodes, not tensors, and each node keeps only what its
VJP reads, so an activation that backward does not need is freed during forward (PyTorch's saved
tensors), and what a node saved is freed as soon as its backward has run."""

from __future__ import annotations

import gc
import weakref

import numpy as np

import torchlean as tl
from torchlean import autograd, ops
from torchlean.runtime import allocator_stats, reset_peak_bytes


def _live() -> int:
    return allocator_stats("cpu").live_bytes


def test_graph_does_not_hold_intermediate_tensors():
    w = tl.randn(64, 64, requires_grad=True)
    h = ops.add(w, w)  # add's VJP reads nothing: neither its inputs nor its output are saved
    ref = weakref.ref(h)
    loss = ops.add(h, h).sum()
    del h
    gc.collect()
    assert ref() is None  # only the program held h; the graph keeps its node
    loss.backward()
    np.testing.assert_array_equal(w.grad.numpy(), np.full((64, 64), 4.0, np.float32))


def test_add_chain_keeps_no_activations_during_forward():
    n = 1 << 16
    x = tl.randn(n, requires_grad=True)
    gc.collect()
    base = _live()
    h = x
    for _ in range(20):
        h = ops.add(h, x)  # each output dropped by the program when the next is made
    # live: the last output and at most one temporary; before, all 20 outputs stayed on the tape
    assert _live() - base <= 2 * 4 * n, (_live() - base) / (4 * n)
    h.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full(n, 21.0, np.float32))


def test_relu_chain_peak_is_one_saved_activation_per_layer():
    # relu saves its output, which the next relu takes as input: one buffer per layer, not two
    n, layers = 1 << 16, 12
    x = tl.randn(n, requires_grad=True)
    gc.collect()
    base = _live()
    reset_peak_bytes("cpu")
    h = x
    for _ in range(layers):
        h = ops.relu(ops.mul(h, 1.5))
    loss = h.sum()
    fwd_peak = allocator_stats("cpu").peak_bytes - base
    assert fwd_peak <= (layers + 2) * 4 * n, fwd_peak / (4 * n)
    loss.backward()
    xs = x.detach().numpy()
    np.testing.assert_array_equal(x.grad.numpy(), np.where(xs > 0, np.float32(1.5 ** layers), 0).astype(np.float32))


def test_relu_gradient_bits_from_output_match_input_rule():
    v = np.array([-2.0, -0.0, 0.0, 1e-38, 3.0, np.nan, -np.inf, np.inf], np.float32)
    x = tl.tensor(v, requires_grad=True)
    g = np.arange(1, 9, dtype=np.float32)
    (ops.relu(x) * tl.tensor(g)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.where(v > 0, g, 0).astype(np.float32))


def test_leaky_relu_keeps_its_output_not_its_input_and_the_bits_of_the_input_rule():
    # slope >= 0: y > 0 exactly where x > 0, so the VJP reads y and x is freed during forward (the
    # memory PyTorch's inplace=True saves); a negative slope keeps x
    v = np.array([-2.0, -0.0, 0.0, 1e-45, -1e-45, 3.0, np.nan, -np.inf, np.inf], np.float32)
    g = np.arange(1, 10, dtype=np.float32)
    for slope in (0.2, 0.0, -0.3):
        x = tl.tensor(v, requires_grad=True)
        h = ops.mul(x, 1.0)
        ref = weakref.ref(h._buf)
        y = ops.leaky_relu(h, slope)
        del h
        gc.collect()
        assert (ref() is None) == (slope >= 0), slope
        (y * tl.tensor(g)).sum().backward()
        want = np.where(v > 0, g, g * np.float32(slope)).astype(np.float32)
        np.testing.assert_array_equal(x.grad.numpy().view(np.uint32), want.view(np.uint32))


def test_saved_buffers_are_released_as_soon_as_their_node_has_run():
    x = tl.randn(1000, requires_grad=True)
    y = ops.exp(x)     # saves its output
    z = ops.mul(y, y)  # saves its operands (y)
    saved = weakref.ref(y._buf)
    loss = z.sum()
    del y, z
    alive_when_x_grad_came = []
    # x's gradient comes after exp's and mul's VJPs have run, before backward returns
    x.register_hook(lambda g: alive_when_x_grad_came.append(saved() is not None and not saved().released))
    loss.backward()
    assert alive_when_x_grad_came == [False]
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.exp(2 * x.detach().numpy()), rtol=1e-5)


def test_retain_grad_and_hooks_on_dropped_intermediates_still_run():
    x = tl.randn(5, requires_grad=True)
    y = ops.mul(x, 2.0)
    y.retain_grad()
    seen = []
    z = ops.add(y, 1.0)
    z.register_hook(lambda g: seen.append(g.numpy().copy()))
    loss = ops.mul(z, z).sum()
    zv = z.detach().numpy()
    del z
    loss.backward()
    np.testing.assert_array_equal(seen[0], 2 * zv)
    np.testing.assert_array_equal(y.grad.numpy(), 2 * zv)


def test_use_before_an_inplace_update_gets_the_old_versions_gradient():
    w = tl.randn(4, requires_grad=True)
    x = ops.mul(w, 1.0)
    a = ops.mul(x, x)      # reads x before the update
    x.mul_(3.0)            # x's new version: 3w
    loss = (a + x).sum()   # d/dw (w^2 + 3w) = 2w + 3
    loss.backward()
    np.testing.assert_allclose(w.grad.numpy(), 2 * w.detach().numpy() + 3, rtol=1e-6)


def test_node_edges_are_nodes_and_leaves():
    w = tl.randn(3, requires_grad=True)
    c = tl.randn(3)  # requires no grad: no edge
    h = ops.mul(w, c)
    y = ops.add(h, c)
    assert y._node.parents == (h._node, None)
    assert h._node.parents == (w, None)
    assert isinstance(y._node.parents[0], autograd.Node)
