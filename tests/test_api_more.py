"""Issue 22, the long tail of everyday PyTorch names: where/masked_fill/nonzero, torch.Size, the
small Tensor methods, the torch-level functions (normal, cross, cdist, isclose, fmod, mode,
histc ...), torch.autograd (grad, Function, functional.jacobian), utils.checkpoint,
testing.assert_close, distributions, linalg/special/fft, and the nn additions (Bilinear,
LocalResponseNorm, ChannelShuffle, EmbeddingBag, grid_sample, init, nn.utils). Each runs the same
way under PyTorch (the oracle) and torchlean: values, dtypes, shapes, gradients, errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import torchlean as tl
import torchlean.nn as tnn
import torchlean.nn.functional as F
from torchlean.errors import (ArgumentError, AutogradError, DTypeError, NotSupportedError, ShapeError,
                              TorchLeanError)

RNG = np.random.default_rng(2213)
DEV = "cpu"


@pytest.fixture(autouse=True)
def _on_device(device):
    global DEV
    DEV = device
    yield
    DEV = "cpu"


def arr(*shape, lo=-2.0, hi=2.0):
    return RNG.uniform(lo, hi, shape).astype(np.float32)


def pair(a, grad=True):
    a = np.asarray(a)
    g = grad and a.dtype.kind == "f"
    return tl.tensor(a, requires_grad=g, device=DEV), torch.tensor(a, requires_grad=g)


def close(ours, theirs, rtol=1e-5, atol=1e-6):
    o = ours.numpy() if isinstance(ours, tl.Tensor) else np.asarray(ours)
    t = theirs.detach().numpy() if isinstance(theirs, torch.Tensor) else np.asarray(theirs)
    assert o.shape == t.shape, f"shape {o.shape} != {t.shape}"
    np.testing.assert_allclose(o.astype(np.float64), t.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True)


def same_dtype(ours, theirs):
    assert str(ours.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1], (ours.dtype, theirs.dtype)


def grads_match(ours_inputs, theirs_inputs, ours_out, theirs_out, rtol=1e-5, atol=1e-5):
    w = arr(*theirs_out.shape)
    (ours_out * tl.tensor(w, device=ours_out.device)).sum().backward()
    (theirs_out * torch.tensor(w)).sum().backward()
    for o, t in zip(ours_inputs, theirs_inputs):
        assert (o.grad is None) == (t.grad is None)
        if t.grad is not None:
            close(o.grad, t.grad, rtol, atol)


# -- where / masked_fill / nonzero --------------------------------------------------------------
def test_where_broadcasts_and_differentiates_both_sides():
    c = RNG.random((3, 1, 4)) > 0.5
    (a, ta), (b, tb) = pair(arr(1, 5, 4)), pair(arr(3, 5, 1))
    out, tout = tl.where(tl.tensor(c, device=DEV), a, b), torch.where(torch.tensor(c), ta, tb)
    close(out, tout)
    grads_match([a, b], [ta, tb], out, tout)


def test_where_keeps_inf_and_nan_exactly():
    x = np.array([np.inf, -np.inf, np.nan, 1.0], np.float32)
    c = np.array([True, True, True, False])
    out = tl.where(tl.tensor(c, device=DEV), tl.tensor(x, device=DEV), 0.0)
    close(out, torch.where(torch.tensor(c), torch.tensor(x), 0.0))


@pytest.mark.parametrize("a,b", [(1, 2.5), (np.arange(4), 7), (np.arange(4), np.arange(4) * 2),
                                 (np.arange(4), 0.5), (np.array([True, False, True, True]), False)])
def test_where_promotes_like_pytorch(a, b):
    c = np.array([True, False, True, False])
    ta = torch.tensor(a) if isinstance(a, np.ndarray) else a
    tb = torch.tensor(b) if isinstance(b, np.ndarray) else b
    oa = tl.tensor(a, device=DEV) if isinstance(a, np.ndarray) else a
    ob = tl.tensor(b, device=DEV) if isinstance(b, np.ndarray) else b
    out, tout = tl.where(tl.tensor(c, device=DEV), oa, ob), torch.where(torch.tensor(c), ta, tb)
    same_dtype(out, tout)
    close(out, tout)


def test_where_method_one_arg_and_errors():
    x, tx = pair(arr(3, 4))
    close(x.where(x > 0, -1.0), tx.where(tx > 0, -1.0))
    m = np.array([[0, 1], [1, 1]])
    ours, theirs = tl.where(tl.tensor(m, device=DEV) > 0), torch.where(torch.tensor(m) > 0)
    assert len(ours) == len(theirs) == 2
    for o, t in zip(ours, theirs):
        same_dtype(o, t)
        close(o, t)
    with pytest.raises(DTypeError, match="^where: .*bool"):
        tl.where(tl.tensor([1.0, 0.0], device=DEV), x[0, :2], 0.0)
    with pytest.raises(ShapeError, match="^where: "):
        tl.where(tl.tensor([True, False, True], device=DEV), x, 0.0)


def test_masked_fill_broadcasts_mask_and_is_differentiable():
    x, tx = pair(arr(2, 3, 4))
    m = RNG.random((3, 1)) > 0.5
    out, tout = x.masked_fill(tl.tensor(m, device=DEV), float("-inf")), tx.masked_fill(torch.tensor(m), float("-inf"))
    close(out, tout)
    grads_match([x], [tx], out.softmax(-1).nan_to_num(), tout.softmax(-1).nan_to_num())
    assert not x.requires_grad or x.grad is not None


def test_masked_fill_tensor_value_gets_gradient_and_int_keeps_dtype():
    x, tx = pair(arr(3, 4))
    v, tv = pair(np.array(0.5, np.float32))
    m = RNG.random((3, 4)) > 0.5
    out, tout = tl.masked_fill(x, tl.tensor(m, device=DEV), v), torch.masked_fill(tx, torch.tensor(m), tv)
    close(out, tout)
    grads_match([x, v], [tx, tv], out, tout)
    i = np.arange(6).reshape(2, 3)
    oi = tl.tensor(i, device=DEV).masked_fill(tl.tensor(i % 2 == 0, device=DEV), 7.9)
    ti = torch.tensor(i).masked_fill(torch.tensor(i % 2 == 0), 7.9)
    same_dtype(oi, ti)
    close(oi, ti)
    with pytest.raises(ShapeError, match="^masked_fill: .*0-dimensional"):
        x.masked_fill(tl.tensor(m, device=DEV), tl.ones(2, device=DEV))
    with pytest.raises(DTypeError, match="^masked_fill: .*bool"):
        x.masked_fill(tl.ones(3, 4, device=DEV), 0.0)


def test_nonzero_and_argwhere():
    a = (RNG.random((3, 4)) > 0.5) * RNG.integers(1, 5, (3, 4))
    o, t = tl.tensor(a, device=DEV), torch.tensor(a)
    same_dtype(o.nonzero(), t.nonzero())
    close(o.nonzero(), t.nonzero())
    close(tl.argwhere(o), torch.argwhere(t))
    for x, y in zip(tl.nonzero(o, as_tuple=True), torch.nonzero(t, as_tuple=True)):
        close(x, y)
    close(tl.tensor(3.0, device=DEV).nonzero(), torch.tensor(3.0).nonzero())


# -- torch.Size and the small Tensor methods ---------------------------------------------------
def test_size_is_a_tuple_with_numel():
    x = tl.zeros(2, 3, 4, device=DEV)
    assert isinstance(x.shape, tl.Size) and isinstance(x.size(), tl.Size) and isinstance(x.shape, tuple)
    assert x.shape == (2, 3, 4) and x.shape.numel() == 24 and tl.Size([]).numel() == 1
    assert isinstance(x.shape[1:], tl.Size) and x.shape[1:] == (3, 4) and x.shape[-1] == 4
    assert repr(tl.Size([2, 3])) == repr(torch.Size([2, 3])).replace("torch", "torchlean")
    assert isinstance((x + 1).shape, tl.Size) and isinstance(x.reshape(6, 4).shape, tl.Size)
    assert tl.zeros(tl.Size([2, 3])).shape == (2, 3)
    with pytest.raises(ShapeError, match="^Size: "):
        tl.Size([2, 1.5])


def test_contiguous_stride_mT_type_as_get_device():
    x, tx = pair(arr(2, 3, 4))
    assert x.contiguous() is x and x.is_contiguous()
    assert x.stride() == tx.stride() and x.stride(1) == tx.stride(1) and x.stride(-1) == tx.stride(-1)
    assert tl.zeros(2, 0, 3).stride() == torch.zeros(2, 0, 3).stride()
    close(x.mT, tx.mT)
    grads_match([x], [tx], x.mT * 2, tx.mT * 2)
    i = tl.tensor([1, 2], device=DEV)
    assert x.type_as(i).dtype == tl.int64 and i.type_as(x).dtype == tl.float32
    assert tl.zeros(2).get_device() == torch.zeros(2).get_device() == -1
    assert x.pin_memory() is x
    with pytest.raises(ShapeError, match="^mT: "):
        tl.zeros(3).mT


def test_detach_unsqueeze_squeeze_in_place():
    x = tl.tensor(arr(2, 3), requires_grad=True, device=DEV)
    y = x * 2
    assert y.detach_() is y and not y.requires_grad and y.is_leaf
    z = tl.zeros(2, 1, 3, device=DEV)
    assert z.unsqueeze_(0) is z and z.shape == (1, 2, 1, 3)
    assert z.squeeze_(2).shape == (1, 2, 3) and z.squeeze_().shape == (2, 3)
    w = x * 1.0
    w.unsqueeze_(1)
    (w * tl.tensor(arr(2, 1, 3), device=DEV)).sum().backward()
    assert x.grad.shape == (2, 3)


@pytest.mark.parametrize("shape,dim,size,step", [((10,), 0, 3, 2), ((4, 7), 1, 2, 3), ((5, 3), 0, 5, 1), ((4, 6), -1, 1, 1)])
def test_unfold_windows(shape, dim, size, step):
    x, tx = pair(arr(*shape))
    out, tout = x.unfold(dim, size, step), tx.unfold(dim, size, step)
    close(out, tout)
    grads_match([x], [tx], out, tout)


def test_index_add_fill_copy_out_of_place_and_in_place():
    x, tx = pair(arr(5, 3))
    src, tsrc = pair(arr(3, 3))
    idx = np.array([4, 0, 4])
    i, ti = tl.tensor(idx, device=DEV), torch.tensor(idx)
    out, tout = x.index_add(0, i, src, alpha=2.0), tx.index_add(0, ti, tsrc, alpha=2.0)
    close(out, tout)
    grads_match([x, src], [tx, tsrc], out, tout)
    x2, tx2 = pair(arr(3, 5))
    cols = np.array([1, 3])
    out, tout = x2.index_fill(1, tl.tensor(cols, device=DEV), -1.0), tx2.index_fill(1, torch.tensor(cols), -1.0)
    close(out, tout)
    grads_match([x2], [tx2], out, tout)
    base, tbase = pair(arr(4, 2), grad=False)
    s, ts = pair(arr(2, 2), grad=False)
    base.index_copy_(0, tl.tensor([3, 1], device=DEV), s)
    tbase.index_copy_(0, torch.tensor([3, 1]), ts)
    close(base, tbase)
    y, ty = pair(arr(4, 2), grad=False)
    y.index_add_(0, tl.tensor([0, 0], device=DEV), s)
    ty.index_add_(0, torch.tensor([0, 0]), ts)
    close(y, ty)
    y.index_fill_(1, tl.tensor([0], device=DEV), 9.0)
    ty.index_fill_(1, torch.tensor([0]), 9.0)
    close(y, ty)
    with pytest.raises(TorchLeanError, match="^index_add: .*out of bounds"):
        x.index_add(0, tl.tensor([5], device=DEV), src[:1])


def test_bernoulli_and_random_in_place():
    tl.manual_seed(0)
    x = tl.zeros(2000, device=DEV)
    assert x.bernoulli_(0.3) is x
    v = x.numpy()
    assert set(np.unique(v)) <= {0.0, 1.0} and abs(v.mean() - 0.3) < 0.05
    p = tl.tensor(np.array([0.0, 1.0] * 500, np.float32), device=DEV)
    assert np.array_equal(tl.zeros(1000, device=DEV).bernoulli_(p).numpy(), p.numpy())
    r = tl.zeros(1000, dtype=tl.int64, device=DEV).random_(3, 7)
    assert r.dtype == tl.int64 and set(np.unique(r.numpy())) == {3, 4, 5, 6}
    f = tl.zeros(1000, device=DEV).random_(5)
    assert f.dtype == tl.float32 and set(np.unique(f.numpy())) == {0, 1, 2, 3, 4}
    with pytest.raises(ArgumentError, match="^random_: "):
        tl.zeros(3).random_(5, 2)


# -- torch-level functions --------------------------------------------------------------------
def test_aliases_and_small_functions():
    x, tx = pair(arr(3, 4))
    close(tl.concat([x, x], 1), torch.concat([tx, tx], 1))
    close(tl.concatenate([x, x], 0), torch.concatenate([tx, tx], 0))
    close(tl.t(x), torch.t(tx))
    close(tl.neg(x), torch.neg(tx))
    close(tl.negative(x), torch.negative(tx))
    close(x.negative(), tx.negative())
    close(tl.reciprocal(x), torch.reciprocal(tx), rtol=1e-5)
    close(tl.relu(x), torch.relu(tx))
    assert tl.numel(x) == torch.numel(tx) == 12
    close(tl.broadcast_to(x[0], (2, 4)), torch.broadcast_to(tx[0], (2, 4)))
    for o, t in zip(tl.broadcast_tensors(x[:, :1], x[:1]), torch.broadcast_tensors(tx[:, :1], tx[:1])):
        close(o, t)


@pytest.mark.parametrize("a,b", [(np.array([5.5, -5.5, 7.0, -7.25], np.float32), np.array([2.0, 2.0, -3.0, 1.5], np.float32)),
                                 (np.array([7, -7, 9]), np.array([3, 3, -4])), (np.array([7, -7, 9]), 2.5)])
def test_fmod_sign_of_dividend(a, b):
    ta, tb = torch.tensor(a), torch.tensor(b) if isinstance(b, np.ndarray) else b
    oa, ob = tl.tensor(a, device=DEV), tl.tensor(b, device=DEV) if isinstance(b, np.ndarray) else b
    out, tout = tl.fmod(oa, ob), torch.fmod(ta, tb)
    same_dtype(out, tout)
    close(out, tout)


def test_fmod_gradient():
    (a, ta), (b, tb) = pair(np.array([5.5, -5.5, 7.0], np.float32)), pair(np.array([2.0, 2.0, -3.0], np.float32))
    out, tout = a.fmod(b), ta.fmod(tb)
    grads_match([a, b], [ta, tb], out, tout)


def test_isclose_allclose_equal():
    a = np.array([1.0, np.nan, np.inf, 1.0, -np.inf], np.float32)
    b = np.array([1.0 + 1e-6, np.nan, np.inf, 1.1, np.inf], np.float32)
    for eq_nan in (False, True):
        close(tl.isclose(tl.tensor(a, device=DEV), tl.tensor(b, device=DEV), equal_nan=eq_nan),
              torch.isclose(torch.tensor(a), torch.tensor(b), equal_nan=eq_nan))
    assert tl.allclose(tl.ones(3, device=DEV), tl.ones(3, device=DEV) + 1e-7)
    assert not tl.allclose(tl.ones(3, device=DEV), tl.zeros(3, device=DEV))
    assert tl.equal(tl.tensor([1, 2], device=DEV), tl.tensor([1, 2], device=DEV))
    assert not tl.equal(tl.tensor([1, 2], device=DEV), tl.tensor([1, 2, 3], device=DEV))
    assert tl.ones(2, device=DEV).equal(tl.ones(2, device=DEV))


@pytest.mark.parametrize("dim", [None, 0, -1])
def test_cross(dim):
    (a, ta), (b, tb) = pair(arr(3, 3)), pair(arr(3, 3))
    out = tl.cross(a, b) if dim is None else tl.cross(a, b, dim=dim)
    tout = torch.linalg.cross(ta, tb, dim=0) if dim is None else torch.cross(ta, tb, dim=dim)
    close(out, tout, atol=1e-5)
    grads_match([a, b], [ta, tb], out, tout)
    close(tl.linalg.cross(a.detach(), b.detach()), torch.linalg.cross(ta.detach(), tb.detach()), atol=1e-5)


@pytest.mark.parametrize("p", [2.0, 1.0, 3.0, math.inf])
def test_cdist(p):
    (a, ta), (b, tb) = pair(arr(2, 4, 3)), pair(arr(2, 5, 3))
    out, tout = tl.cdist(a, b, p=p), torch.cdist(ta, tb, p=p)
    close(out, tout, rtol=1e-4, atol=1e-4)
    grads_match([a, b], [ta, tb], out, tout, rtol=1e-3, atol=1e-3)


def test_cdist_zero_distance_has_zero_gradient():
    v = arr(3, 2)
    (a, ta), (b, tb) = pair(v), pair(v.copy())
    out, tout = tl.cdist(a, b), torch.cdist(ta, tb)
    close(out, tout, atol=2e-3)
    grads_match([a, b], [ta, tb], out, tout, rtol=1e-3, atol=1e-3)
    assert np.all(np.isfinite(a.grad.numpy()))


def test_mode_and_histc():
    x = RNG.integers(0, 4, (3, 7))
    for dim, keep in ((1, False), (0, True)):
        o, t = tl.mode(tl.tensor(x, device=DEV), dim, keep), torch.mode(torch.tensor(x), dim, keep)
        close(o.values, t.values)
        close(o.indices, t.indices)
        same_dtype(o.values, t.values)
    v = arr(100)
    close(tl.histc(tl.tensor(v, device=DEV), bins=7, min=-1, max=1), torch.histc(torch.tensor(v), bins=7, min=-1, max=1))
    close(tl.tensor(v, device=DEV).histc(5), torch.tensor(v).histc(5))


def test_normal_overloads():
    tl.manual_seed(1)
    m, s = tl.zeros(4000, device=DEV) + 3.0, tl.ones(4000, device=DEV) * 2.0
    for y in (tl.normal(m, s), tl.normal(m, 2.0), tl.normal(3.0, s), tl.normal(3.0, 2.0, (4000,), device=DEV)):
        v = y.numpy()
        assert y.shape == (4000,) and abs(v.mean() - 3.0) < 0.15 and abs(v.std() - 2.0) < 0.15
    assert tl.normal(0.0, 1.0, size=(2, 3)).shape == (2, 3)
    with pytest.raises(ArgumentError, match="^normal: .*std >= 0"):
        tl.normal(0.0, -1.0, (3,))
    with pytest.raises(ArgumentError, match="^normal: .*size"):
        tl.normal(0.0, 1.0)


def test_seed_and_initial_seed():
    tl.manual_seed(123)
    assert tl.initial_seed() == 123
    s = tl.seed()
    assert isinstance(s, int) and tl.initial_seed() == s


def test_erfinv_is_a_clear_error():
    with pytest.raises(NotSupportedError, match="^erfinv: not supported"):
        tl.erfinv(tl.ones(2))
    with pytest.raises(TorchLeanError, match="^special.erfinv: not supported"):
        tl.special.erfinv(tl.ones(2))


def test_compile_and_printoptions():
    m = tnn.Linear(2, 2)
    assert tl.compile(m) is m and tl.compile(mode="max-autotune")(m) is m
    x = tl.tensor([1.23456789, 2.0])
    try:
        tl.set_printoptions(precision=2)
        assert "1.23," in repr(x) and "1.2346" not in repr(x)
        tl.set_printoptions(threshold=5, edgeitems=1)
        assert "..." in repr(tl.arange(10).float())
    finally:
        tl.set_printoptions(profile="default")
    assert "1.2346" in repr(x) and "..." not in repr(tl.arange(10).float())


# -- torch.autograd ------------------------------------------------------------------------
def test_autograd_grad_matches_torch_and_leaves_grad_alone():
    (x, tx), (w, tw) = pair(arr(3, 4)), pair(arr(4, 2))
    y, ty = (x @ w).tanh().sum(), (tx @ tw).tanh().sum()
    gx, gw = tl.autograd.grad(y, [x, w])
    tgx, tgw = torch.autograd.grad(ty, [tx, tw])
    close(gx, tgx)
    close(gw, tgw)
    assert x.grad is None and w.grad is None


def test_autograd_grad_of_intermediate_with_grad_outputs_and_unused():
    (x, tx), (u, tu) = pair(arr(5)), pair(arr(5))
    h, th = x * 3.0, tx * 3.0
    out, tout = h.sin(), th.sin()
    g = arr(5)
    (gh,) = tl.autograd.grad(out, h, grad_outputs=tl.tensor(g, device=DEV), retain_graph=True)
    (tgh,) = torch.autograd.grad(tout, th, grad_outputs=torch.tensor(g), retain_graph=True)
    close(gh, tgh)
    with pytest.raises(AutogradError, match="^autograd.grad: .*allow_unused"):
        tl.autograd.grad(out.sum(), [x, u], retain_graph=True)
    gx, gu = tl.autograd.grad(out.sum(), [x, u], allow_unused=True)
    tgx, tgu = torch.autograd.grad(tout.sum(), [tx, tu], allow_unused=True)
    close(gx, tgx)
    assert gu is None and tgu is None
    with pytest.raises(AutogradError, match="create_graph"):
        tl.autograd.grad((x * x).sum(), x, create_graph=True)


def _custom_fns(mod):
    class Cube(mod.autograd.Function):
        @staticmethod
        def forward(ctx, a, scale):
            ctx.save_for_backward(a)
            ctx.scale = scale
            return a * a * a * scale

        @staticmethod
        def backward(ctx, g):
            (a,) = ctx.saved_tensors
            return g * 3 * a * a * ctx.scale, None

    class SplitMul(mod.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            idx = (a > 0).long()
            ctx.mark_non_differentiable(idx)
            return a * b, a + b, idx

        @staticmethod
        def backward(ctx, g1, g2, g3):
            a, b = ctx.saved_tensors
            assert ctx.needs_input_grad == (True, True)
            return g1 * b + g2, g1 * a + g2

    return Cube, SplitMul


def test_custom_function_matches_torch():
    (x, tx), (y, ty) = pair(arr(3, 2)), pair(arr(3, 2))
    Cube, SplitMul = _custom_fns(tl)
    TCube, TSplitMul = _custom_fns(torch)
    out, tout = Cube.apply(x, 2.0), TCube.apply(tx, 2.0)
    close(out, tout)
    grads_match([x], [tx], out, tout)
    x.grad = None
    tx.grad = None
    p, s, i = SplitMul.apply(x, y)
    tp, ts, ti = TSplitMul.apply(tx, ty)
    close(i, ti)
    assert not i.requires_grad
    ((p * 2).sum() + (s * s).sum()).backward()
    ((tp * 2).sum() + (ts * ts).sum()).backward()
    close(x.grad, tx.grad)
    close(y.grad, ty.grad)


def test_custom_function_with_setup_context():
    class Double(tl.autograd.Function):
        @staticmethod
        def forward(a):
            return a * 2

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.n = 2

        @staticmethod
        def backward(ctx, g):
            return g * ctx.n

    x = tl.tensor(arr(4), requires_grad=True, device=DEV)
    Double.apply(x).sum().backward()
    close(x.grad, np.full(4, 2.0, np.float32))


def test_jacobian_and_detect_anomaly():
    from torchlean.autograd.functional import jacobian

    v = arr(3)
    j = jacobian(lambda a: a.sin() * a.sum(), tl.tensor(v, device=DEV))
    tj = torch.autograd.functional.jacobian(lambda a: a.sin() * a.sum(), torch.tensor(v))
    close(j, tj)
    w = arr(2, 3)
    j2 = tl.autograd.functional.jacobian(lambda a, b: a @ b, (tl.tensor(w, device=DEV), tl.tensor(v, device=DEV)))
    tj2 = torch.autograd.functional.jacobian(lambda a, b: a @ b, (torch.tensor(w), torch.tensor(v)))
    for o, t in zip(j2, tj2):
        close(o, t)
    with tl.autograd.detect_anomaly():
        tl.autograd.set_detect_anomaly(True)
    assert tl.autograd.set_detect_anomaly is not None


def test_checkpoint_gives_the_same_gradients():
    from torchlean.utils.checkpoint import checkpoint

    x, tx = pair(arr(3, 4))
    lin = tnn.Linear(4, 2)
    tlin = torch.nn.Linear(4, 2)
    with torch.no_grad():
        tlin.weight.copy_(torch.tensor(lin.weight.numpy()))
        tlin.bias.copy_(torch.tensor(lin.bias.numpy()))
    lin.to(DEV)
    out = checkpoint(lambda a: lin(a).tanh(), x, use_reentrant=False)
    tout = torch.utils.checkpoint.checkpoint(lambda a: tlin(a).tanh(), tx, use_reentrant=False)
    close(out, tout)
    grads_match([x], [tx], out, tout)


def test_assert_close():
    tl.testing.assert_close(tl.tensor([1.0, 2.0]), tl.tensor([1.0, 2.0 + 1e-6]))
    tl.testing.assert_close({"a": [tl.tensor([1, 2])]}, {"a": [tl.tensor([1, 2])]})
    with pytest.raises(AssertionError, match="not close"):
        tl.testing.assert_close(tl.tensor([1.0, 2.0]), tl.tensor([1.0, 2.1]))
    with pytest.raises(AssertionError, match="dtype"):
        tl.testing.assert_close(tl.tensor([1, 2]), tl.tensor([1.0, 2.0]))
    tl.testing.assert_close(tl.tensor([1, 2]), tl.tensor([1.0, 2.0]), check_dtype=False)


# -- distributions ------------------------------------------------------------------------
def test_normal_distribution():
    (mu, tmu), (sd, tsd) = pair(arr(4)), pair(arr(4, lo=0.5, hi=2.0))
    d, td = tl.distributions.Normal(mu, sd), torch.distributions.Normal(tmu, tsd)
    v = arr(4)
    lp, tlp = d.log_prob(tl.tensor(v, device=DEV)), td.log_prob(torch.tensor(v))
    close(lp, tlp)
    grads_match([mu, sd], [tmu, tsd], lp, tlp)
    close(d.entropy(), td.entropy())
    close(d.mean, td.mean)
    close(d.stddev, td.stddev)
    close(d.variance, td.variance)
    close(d.cdf(tl.tensor(v, device=DEV)), td.cdf(torch.tensor(v)), atol=1e-5)
    tl.manual_seed(3)
    s = tl.distributions.Normal(tl.zeros(2, device=DEV) + 1.0, tl.ones(2, device=DEV) * 0.5).sample((5000,))
    assert s.shape == (5000, 2) and not s.requires_grad
    assert np.allclose(s.numpy().mean(0), 1.0, atol=0.05) and np.allclose(s.numpy().std(0), 0.5, atol=0.05)
    mu.grad = None
    r = d.rsample((3,))
    assert r.shape == (3, 4) and r.requires_grad
    r.sum().backward()
    close(mu.grad, np.full(4, 3.0, np.float32))


@pytest.mark.parametrize("use_logits", [False, True])
def test_categorical_distribution(use_logits):
    raw = arr(2, 5, lo=0.1, hi=1.0) if not use_logits else arr(2, 5)
    x, tx = pair(raw)
    d = tl.distributions.Categorical(logits=x) if use_logits else tl.distributions.Categorical(probs=x)
    td = torch.distributions.Categorical(logits=tx) if use_logits else torch.distributions.Categorical(probs=tx)
    close(d.probs, td.probs)
    close(d.logits, td.logits, atol=1e-5)
    close(d.entropy(), td.entropy(), atol=1e-5)
    v = np.array([[1, 4], [0, 2], [3, 3]])
    lp, tlp = d.log_prob(tl.tensor(v, device=DEV)), td.log_prob(torch.tensor(v))
    close(lp, tlp, atol=1e-5)
    grads_match([x], [tx], lp, tlp, atol=1e-4)
    tl.manual_seed(4)
    s = d.sample((4000,))
    assert s.shape == (4000, 2) and s.dtype == tl.int64
    freq = np.stack([np.bincount(s.numpy()[:, b], minlength=5) / 4000 for b in range(2)])
    assert np.allclose(freq, td.probs.detach().numpy(), atol=0.04)


def test_categorical_zero_probability_entropy_is_finite():
    p = np.array([0.5, 0.5, 0.0], np.float32)
    close(tl.distributions.Categorical(probs=tl.tensor(p, device=DEV)).entropy(),
          torch.distributions.Categorical(probs=torch.tensor(p)).entropy())


# -- linalg, special, fft -------------------------------------------------------------------
@pytest.mark.parametrize("kw", [{}, {"ord": 1, "dim": 1}, {"dim": (0, 1)}, {"ord": "fro"}, {"ord": math.inf},
                                {"ord": -1}, {"ord": 3, "dim": 0}])
def test_linalg_norm(kw):
    x, tx = pair(arr(3, 4))
    out, tout = tl.linalg.norm(x, **kw), torch.linalg.norm(tx, **kw)
    close(out, tout, atol=1e-5)
    grads_match([x], [tx], out.reshape(-1), tout.reshape(-1), atol=1e-4)


def test_vector_and_matrix_norm():
    x, tx = pair(arr(2, 3, 4))
    close(tl.linalg.vector_norm(x), torch.linalg.vector_norm(tx))
    close(tl.linalg.vector_norm(x, 1, dim=(1, 2), keepdim=True), torch.linalg.vector_norm(tx, 1, dim=(1, 2), keepdim=True))
    close(tl.linalg.matrix_norm(x), torch.linalg.matrix_norm(tx))
    close(tl.linalg.matrix_norm(x, -math.inf, keepdim=True), torch.linalg.matrix_norm(tx, -math.inf, keepdim=True))
    with pytest.raises(NotSupportedError, match="^linalg.matrix_norm: ord='nuc'"):
        tl.linalg.matrix_norm(x, "nuc")


@pytest.mark.parametrize("name", ["inv", "solve", "svd", "qr", "eigh", "cholesky"])
def test_linalg_decompositions_are_clear_errors(name):
    with pytest.raises(NotSupportedError, match=f"^linalg.{name}: not supported yet"):
        getattr(tl.linalg, name)(tl.eye(3))


def test_special_and_fft():
    x, tx = pair(arr(5, lo=0.05, hi=0.95))
    close(tl.special.logit(x), torch.special.logit(tx), atol=1e-5)
    close(tl.special.logit(x, eps=0.2), torch.special.logit(tx, eps=0.2), atol=1e-5)
    close(tl.special.expit(x), torch.special.expit(tx))
    close(tl.special.erf(x), torch.special.erf(tx), atol=1e-6)
    close(tl.special.ndtr(x), torch.special.ndtr(tx), atol=1e-6)
    y = np.array([0.0, 0.5, -1.5], np.float32)
    close(tl.special.sinc(tl.tensor(y, device=DEV)), torch.special.sinc(torch.tensor(y)), atol=1e-6)
    a, b = np.array([0.0, 1.0, 2.0], np.float32), np.array([0.0, 2.0, 3.0], np.float32)
    close(tl.special.xlogy(tl.tensor(a, device=DEV), tl.tensor(b, device=DEV)),
          torch.special.xlogy(torch.tensor(a), torch.tensor(b)), atol=1e-6)
    # torch.fft itself is tested in tests/test_fft.py; here: it is there, and hfft says it is not
    close(tl.fft.rfft(x).real_view(), torch.view_as_real(torch.fft.rfft(tx)), atol=1e-5)
    close(tl.fft.irfft(tl.fft.rfft(x), n=5), tx, atol=1e-5)
    with pytest.raises(NotSupportedError, match="^fft.hfft: not supported"):
        tl.fft.hfft(tl.ones(4))


# -- nn ------------------------------------------------------------------------------------
def _copy_params(ours, theirs):
    with torch.no_grad():
        for (n, p), (tn, tp) in zip(ours.named_parameters(), theirs.named_parameters()):
            assert n == tn and tuple(p.shape) == tuple(tp.shape)
            tp.copy_(torch.tensor(p.numpy()))


def test_bilinear_module_and_functional():
    m, tm = tnn.Bilinear(3, 4, 5), torch.nn.Bilinear(3, 4, 5)
    _copy_params(m, tm)
    m.to(DEV)
    (a, ta), (b, tb) = pair(arr(2, 6, 3)), pair(arr(2, 6, 4))
    out, tout = m(a, b), tm(ta, tb)
    close(out, tout, atol=1e-5)
    grads_match([a, b, m.weight, m.bias], [ta, tb, tm.weight, tm.bias], out, tout, atol=1e-4)
    w = np.abs(m.weight.numpy())
    assert w.max() <= 1 / math.sqrt(3) + 1e-6


def test_local_response_norm_and_channel_shuffle():
    for size in (1, 2, 3, 4):
        x, tx = pair(arr(2, 6, 3, 3))
        out, tout = tnn.LocalResponseNorm(size, alpha=0.5)(x), torch.nn.LocalResponseNorm(size, alpha=0.5)(tx)
        close(out, tout, atol=1e-5)
        grads_match([x], [tx], out, tout, atol=1e-4)
    x, tx = pair(arr(2, 6, 2, 2))
    out, tout = tnn.ChannelShuffle(3)(x), torch.nn.ChannelShuffle(3)(tx)
    close(out, tout)
    grads_match([x], [tx], out, tout)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag(mode):
    m, tm = tnn.EmbeddingBag(10, 3, mode=mode), torch.nn.EmbeddingBag(10, 3, mode=mode)
    _copy_params(m, tm)
    m.to(DEV)
    inp, off = np.array([1, 2, 4, 5, 4, 3, 2, 9]), np.array([0, 4, 4, 6])
    out, tout = m(tl.tensor(inp, device=DEV), tl.tensor(off, device=DEV)), tm(torch.tensor(inp), torch.tensor(off))
    close(out, tout)
    grads_match([m.weight], [tm.weight], out, tout)
    two = np.array([[1, 2, 2], [3, 0, 9]])
    close(m(tl.tensor(two, device=DEV)), tm(torch.tensor(two)))


def test_grid_sample_and_affine_grid():
    theta, ttheta = pair(arr(2, 2, 3, lo=-0.8, hi=0.8))
    x, tx = pair(arr(2, 3, 5, 6))
    for ac in (False, True):
        g, tg = F.affine_grid(theta, (2, 3, 4, 5), align_corners=ac), torch.nn.functional.affine_grid(
            ttheta, (2, 3, 4, 5), align_corners=ac)
        close(g, tg, atol=1e-6)
        out = F.grid_sample(x, g, align_corners=ac)
        tout = torch.nn.functional.grid_sample(tx, tg, align_corners=ac)
        close(out, tout, atol=1e-5)
        grads_match([x, theta], [tx, ttheta], out, tout, rtol=1e-4, atol=1e-4)
        x.grad = theta.grad = tx.grad = ttheta.grad = None


def test_nn_clear_errors_and_exports():
    with pytest.raises(NotSupportedError, match="^CTCLoss: not supported"):
        tnn.CTCLoss()
    with pytest.raises(NotSupportedError, match="^ctc_loss: "):
        F.ctc_loss(None, None, None, None)
    assert tnn.DataParallel is tnn.parallel.DataParallel
    from torchlean.nn.modules.batchnorm import _BatchNorm

    assert isinstance(tnn.BatchNorm1d(3), _BatchNorm)
    x, tx = pair(arr(4), grad=False)
    F.relu_(x)
    torch.nn.functional.relu_(tx)
    close(x, tx)
    m = tnn.Linear(2, 2)
    assert m.type(tl.float32) is m
    with pytest.raises(DTypeError, match="^Module.type: .*float32"):
        m.type(tl.float64)


def test_init_eye_dirac_orthogonal_sparse():
    for shape in ((3, 5), (5, 3)):
        w, tw = tl.zeros(*shape), torch.zeros(*shape)
        close(tnn.init.eye_(w), torch.nn.init.eye_(tw))
    for shape, groups in (((4, 2, 3), 1), ((6, 3, 3, 3), 2), ((2, 2, 1, 3, 3), 1)):
        w, tw = tl.zeros(*shape), torch.zeros(*shape)
        close(tnn.init.dirac_(w, groups), torch.nn.init.dirac_(tw, groups))
    for shape in ((4, 6), (6, 4), (3, 2, 2)):
        q = tnn.init.orthogonal_(tl.zeros(*shape), gain=2.0).numpy().reshape(shape[0], -1)
        small = q @ q.T if shape[0] <= q.shape[1] else q.T @ q
        np.testing.assert_allclose(small, 4.0 * np.eye(small.shape[0]), atol=1e-5)
    s = tnn.init.sparse_(tl.zeros(10, 4), 0.3).numpy()
    assert np.all((s == 0).sum(0) >= 3)
    with pytest.raises(ShapeError, match="^eye_: "):
        tnn.init.eye_(tl.zeros(2, 2, 2))


def test_nn_utils_clip_value_and_vectors():
    m, tm = tnn.Linear(3, 2), torch.nn.Linear(3, 2)
    _copy_params(m, tm)
    x = arr(4, 3, lo=-10, hi=10)
    m(tl.tensor(x)).pow(2).sum().backward()
    tm(torch.tensor(x)).pow(2).sum().backward()
    tnn.utils.clip_grad_value_(m.parameters(), 0.5)
    torch.nn.utils.clip_grad_value_(tm.parameters(), 0.5)
    for p, tp in zip(m.parameters(), tm.parameters()):
        close(p.grad, tp.grad)
    v, tv = tnn.utils.parameters_to_vector(m.parameters()), torch.nn.utils.parameters_to_vector(tm.parameters())
    close(v, tv)
    new = arr(v.numel())
    tnn.utils.vector_to_parameters(tl.tensor(new), m.parameters())
    torch.nn.utils.vector_to_parameters(torch.tensor(new), tm.parameters())
    for p, tp in zip(m.parameters(), tm.parameters()):
        close(p, tp)


def test_weight_norm_and_spectral_norm():
    m, tm = tnn.Linear(4, 3), torch.nn.Linear(4, 3)
    _copy_params(m, tm)
    m, tm = tnn.utils.weight_norm(m), torch.nn.utils.weight_norm(tm)
    assert sorted(m.state_dict()) == sorted(tm.state_dict())
    close(m.weight_g, tm.weight_g)
    x = arr(2, 4)
    out, tout = m(tl.tensor(x)), tm(torch.tensor(x))
    close(out, tout, atol=1e-5)
    grads_match([m.weight_g, m.weight_v], [tm.weight_g, tm.weight_v], out, tout, atol=1e-4)
    s = tnn.utils.spectral_norm(tnn.Linear(5, 4), n_power_iterations=100)
    sigma = np.linalg.svd(s.weight.detach().numpy(), compute_uv=False)[0]
    assert abs(sigma - 1.0) < 1e-3
    assert sorted(s.state_dict()) == sorted(torch.nn.utils.spectral_norm(torch.nn.Linear(5, 4)).state_dict())
