"""Issue 22: the math, reduction, shape/index, product, factory and sorting functions, each run the
same way under PyTorch (the oracle) and torchlean: values (float32 tolerance), shapes, index
results, gradients through backward, edge cases (empty dims, negative dims, non-finite values) and
the errors of wrong calls."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import torchlean as tl
from torchlean.errors import ArgumentError, AutogradError, DTypeError, IndexOutOfRangeError, ShapeError, TorchLeanError

RNG = np.random.default_rng(22)
DEV = "cpu"  # where pair() puts torchlean's inputs: every test runs once per device (conftest's ``device``)


@pytest.fixture(autouse=True)
def _on_device(device):
    global DEV
    DEV = device
    yield
    DEV = "cpu"


def arr(*shape, lo=-2.0, hi=2.0):
    return RNG.uniform(lo, hi, shape).astype(np.float32)


def pair(a: np.ndarray, grad: bool = True):
    return tl.tensor(a, requires_grad=grad, device=DEV), torch.tensor(a, requires_grad=grad)


def close(ours, theirs, rtol=1e-5, atol=1e-6):
    o = ours.numpy() if isinstance(ours, tl.Tensor) else np.asarray(ours)
    t = theirs.detach().numpy() if isinstance(theirs, torch.Tensor) else np.asarray(theirs)
    assert o.shape == t.shape, f"shape {o.shape} != {t.shape}"
    np.testing.assert_allclose(o.astype(np.float64), t.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True)


def check_fn(fn_ours, fn_torch, *arrays, grad=True, rtol=1e-5, atol=1e-6, seed_grad=None):
    """Forward values and, for float outputs, the gradients of sum(w * out) wrt every input."""
    ins = [pair(a, grad) for a in arrays]
    o = fn_ours(*[p[0] for p in ins])
    t = fn_torch(*[p[1] for p in ins])
    close(o, t, rtol, atol)
    if grad:
        w = RNG.standard_normal(t.shape).astype(np.float32) if seed_grad is None else seed_grad
        (o * tl.tensor(w, device=DEV)).sum().backward()
        (t * torch.tensor(w)).sum().backward()
        for (a_o, a_t) in ins:
            assert (a_o.grad is None) == (a_t.grad is None)
            if a_t.grad is not None:
                close(a_o.grad, a_t.grad, rtol=1e-4, atol=1e-5)


# -- element-wise -----------------------------------------------------------------------------
UNARY = [
    ("sin", lambda m, x: m.sin(x), None), ("cos", lambda m, x: m.cos(x), None), ("tan", lambda m, x: m.tan(x), None),
    ("erf", lambda m, x: m.erf(x), None), ("erfc", lambda m, x: m.erfc(x), None),
    ("log1p", lambda m, x: m.log1p(x), (-0.9, 3.0)), ("expm1", lambda m, x: m.expm1(x), None),
    ("log2", lambda m, x: m.log2(x), (0.1, 3.0)), ("log10", lambda m, x: m.log10(x), (0.1, 3.0)),
    ("rsqrt", lambda m, x: m.rsqrt(x), (0.2, 3.0)), ("square", lambda m, x: m.square(x), None),
    ("exp2", lambda m, x: m.exp2(x), None),
    ("floor", lambda m, x: m.floor(x), None), ("ceil", lambda m, x: m.ceil(x), None),
    ("trunc", lambda m, x: m.trunc(x), None), ("frac", lambda m, x: m.frac(x), None),
    ("sign", lambda m, x: m.sign(x), None), ("round", lambda m, x: m.round(x), None),
    ("round_dec", lambda m, x: m.round(x, decimals=2), None),
    ("pow_2.5", lambda m, x: m.pow(x, 2.5), (0.1, 3.0)), ("pow_-1.5", lambda m, x: x ** -1.5, (0.2, 3.0)),
    ("pow_3", lambda m, x: x ** 3, None), ("pow_0", lambda m, x: m.pow(x, 0), None),
    ("rpow", lambda m, x: m.pow(2.0, x), None), ("clamp_min", lambda m, x: m.clamp_min(x, 0.3), None),
    ("clamp_max", lambda m, x: x.clamp_max(-0.2), None), ("nan_to_num", lambda m, x: m.nan_to_num(x), None),
]


@pytest.mark.parametrize("name,fn,rng", UNARY, ids=[u[0] for u in UNARY])
def test_unary_values_and_gradients(name, fn, rng):
    lo, hi = rng or (-2.0, 2.0)
    a = arr(3, 5, lo=lo, hi=hi)
    if name.startswith("round"):
        a[0, :3] = [0.5, 1.5, -2.5]  # ties go to even
    check_fn(lambda x: fn(tl, x), lambda x: fn(torch, x), a)


def test_tensor_exponent_and_fused_helpers():
    a, b, c = arr(2, 3, lo=0.5, hi=2.0), arr(2, 3), arr(3, lo=0.5, hi=2.0)
    check_fn(lambda x, y: x ** y, lambda x, y: x ** y, a, b)
    check_fn(lambda x, y, w: tl.lerp(x, y, w), lambda x, y, w: torch.lerp(x, y, w), a, b, c)
    check_fn(lambda x, y, z: tl.addcmul(x, y, z, value=0.5), lambda x, y, z: torch.addcmul(x, y, z, value=0.5), b, a, c)
    check_fn(lambda x, y, z: x.addcdiv(y, z, value=2), lambda x, y, z: x.addcdiv(y, z, value=2), b, a, c)
    check_fn(lambda x, y: tl.hypot(x, y), lambda x, y: torch.hypot(x, y), a, b)
    check_fn(lambda x: tl.lerp(x, 1.0, 0.25), lambda x: torch.lerp(x, torch.ones_like(x), 0.25), b)


def test_non_finite_values():
    v = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5, -2.5, 3.4e38], np.float32)
    x, t = tl.tensor(v), torch.tensor(v)
    for fn in ("isnan", "isinf", "isfinite", "isposinf", "isneginf"):
        o, r = getattr(tl, fn)(x), getattr(torch, fn)(t)
        assert o.dtype == tl.bool and np.array_equal(o.numpy(), r.numpy()), fn
    for kw in ({}, {"nan": 1.0, "posinf": 2.0, "neginf": -3.0}):
        close(tl.nan_to_num(x, **kw), torch.nan_to_num(t, **kw), rtol=0, atol=0)
    for fn in ("sin", "cos", "erf", "log1p", "expm1", "floor", "ceil", "round", "trunc", "sign", "frac"):
        close(getattr(tl, fn)(x), getattr(torch, fn)(t), rtol=1e-6, atol=0)
    close(tl.pow(x, 2.0), torch.pow(t, 2.0), rtol=1e-6, atol=0)
    close(x.clamp_min(0.0), t.clamp_min(0.0), rtol=0, atol=0)
    # the gradient of nan_to_num passes only where x is finite
    xg = tl.tensor(v, requires_grad=True)
    tg = torch.tensor(v, requires_grad=True)
    tl.nan_to_num(xg).sum().backward()
    torch.nan_to_num(tg).sum().backward()
    close(xg.grad, tg.grad, rtol=0, atol=0)


def test_integer_tensors_keep_integers():
    i = tl.tensor([[1, -2], [3, 4]])
    assert tl.isnan(i).dtype == tl.bool and not tl.isnan(i).any().item()
    assert tl.floor(i).dtype == i.dtype and np.array_equal(tl.sign(i).numpy(), np.sign(i.numpy()))


# -- reductions with dim ------------------------------------------------------------------------
@pytest.mark.parametrize("dim,keepdim", [(0, False), (1, True), (-1, False), (-2, True)])
def test_max_min_with_dim(dim, keepdim):
    a = arr(4, 5)
    for fn in ("max", "min"):
        x, t = pair(a)
        o, r = getattr(x, fn)(dim, keepdim), getattr(t, fn)(dim, keepdim)
        close(o.values, r.values, 0, 0)
        assert np.array_equal(o.indices.numpy(), r.indices.numpy()) and o.indices.dtype == tl.int64
        values, indices = getattr(tl, fn)(x, dim=dim, keepdim=keepdim)  # a namedtuple unpacks
        assert values.shape == r.values.shape and indices.shape == r.indices.shape
        w = RNG.standard_normal(r.values.shape).astype(np.float32)
        (o.values * tl.tensor(w, device=DEV)).sum().backward()
        (r.values * torch.tensor(w)).sum().backward()
        close(x.grad, t.grad, 0, 0)
    for fn in ("argmax", "argmin"):
        assert np.array_equal(getattr(tl, fn)(tl.tensor(a), dim, keepdim).numpy(),
                              getattr(torch, fn)(torch.tensor(a), dim, keepdim).numpy())
    assert getattr(tl, "argmax")(tl.tensor(a)).item() == torch.argmax(torch.tensor(a)).item()


def test_max_min_forms_ties_and_nan():
    a = np.array([[1.0, 3.0, 3.0], [np.nan, 2.0, 5.0]], np.float32)
    x, t = pair(a)
    close(tl.max(x), torch.max(t), 0, 0)
    assert np.array_equal(x.argmax(1).numpy(), t.argmax(1).numpy())  # NaN wins, the first max wins
    b = np.array([[1.0, 3.0, 3.0], [0.0, 2.0, 5.0]], np.float32)
    check_fn(lambda x: x.amax(1), lambda x: x.amax(1), b)  # ties split the gradient
    check_fn(lambda x: x.amin((0, 1), keepdim=True), lambda x: x.amin((0, 1), keepdim=True), b)
    check_fn(lambda x: x.max(), lambda x: x.max(), b)
    check_fn(lambda x, y: tl.max(x, y), lambda x, y: torch.max(x, y), arr(2, 3), arr(3))


REDUCTIONS = [
    ("sum_tuple", lambda m, x: x.sum((0, 2)), 1e-5),
    ("mean_tuple_keep", lambda m, x: x.mean(dim=(-1, 0), keepdim=True), 1e-5),
    ("norm", lambda m, x: x.norm(), 1e-5), ("norm_dim", lambda m, x: m.norm(x, dim=1), 1e-5),
    ("norm_p1", lambda m, x: x.norm(p=1, dim=-1, keepdim=True), 1e-5),
    ("norm_inf", lambda m, x: x.norm(p=float("inf"), dim=0), 1e-5),
    ("norm_p3", lambda m, x: x.norm(p=3, dim=(1, 2)), 1e-4),
    ("var", lambda m, x: x.var(), 1e-5), ("var_dim", lambda m, x: x.var(1, keepdim=True), 1e-5),
    ("var_biased", lambda m, x: m.var(x, dim=0, unbiased=False), 1e-5),
    ("var_corr", lambda m, x: m.var(x, dim=(0, 2), correction=0), 1e-5),
    ("std", lambda m, x: x.std(-1), 1e-5), ("logsumexp", lambda m, x: m.logsumexp(x, dim=1), 1e-5),
    ("logsumexp2", lambda m, x: x.logsumexp((0, -1), keepdim=True), 1e-5),
    ("prod", lambda m, x: x.prod(), 1e-4), ("prod_dim", lambda m, x: x.prod(1), 1e-5),
    ("prod_keep", lambda m, x: m.prod(x, -1, keepdim=True), 1e-5),
    ("cumsum", lambda m, x: x.cumsum(1), 1e-5), ("cumsum_neg", lambda m, x: m.cumsum(x, dim=-1), 1e-5),
    ("cumprod", lambda m, x: x.cumprod(dim=2), 1e-5), ("cumprod0", lambda m, x: m.cumprod(x, 0), 1e-5),
    ("median_dim", lambda m, x: x.median(1).values, 1e-6),
]


@pytest.mark.parametrize("name,fn,rtol", REDUCTIONS, ids=[r[0] for r in REDUCTIONS])
def test_reductions(name, fn, rtol):
    a = arr(3, 5, 4, lo=0.5, hi=1.5) if name.startswith("prod") else arr(3, 5, 4)
    check_fn(lambda x: fn(tl, x), lambda x: fn(torch, x), a, rtol=rtol, atol=1e-5)


def test_prod_and_cumprod_with_zeros_have_exact_gradients():
    a = arr(2, 5)
    a[0, 1] = 0.0
    a[1, 2] = a[1, 4] = 0.0
    check_fn(lambda x: x.prod(1), lambda x: x.prod(1), a)
    check_fn(lambda x: x.cumprod(1), lambda x: x.cumprod(1), a)


def test_reductions_edge_cases():
    e = tl.zeros(0, 3)
    te = torch.zeros(0, 3)
    close(e.prod(0), te.prod(0))
    close(e.cumsum(0), te.cumsum(0))
    close(tl.logsumexp(tl.tensor([[-np.inf, -np.inf], [np.inf, 1.0]]), 1),
          torch.logsumexp(torch.tensor([[-np.inf, -np.inf], [np.inf, 1.0]]), 1))
    b = tl.tensor([[True, False], [True, True]])
    tb = torch.tensor([[True, False], [True, True]])
    for fn in ("all", "any"):
        assert getattr(b, fn)().item() == getattr(tb, fn)().item()
        o = getattr(b, fn)(1)
        assert o.dtype == tl.bool and np.array_equal(o.numpy(), getattr(tb, fn)(1).numpy())
    assert np.array_equal(tl.tensor([1, 2, 3]).cumsum(0).numpy(), [1, 3, 6])
    with pytest.raises(IndexOutOfRangeError, match="max"):
        tl.zeros(0, 3).max(0)
    with pytest.raises(TorchLeanError, match="amax"):
        tl.zeros(2, 0).amax(1)


# -- products and einsum ------------------------------------------------------------------------
def test_matrix_products():
    a, b, c, v = arr(3, 4), arr(4, 5), arr(3, 5), arr(4)
    check_fn(lambda x, y: tl.mm(x, y), lambda x, y: torch.mm(x, y), a, b)
    check_fn(lambda i, x, y: tl.addmm(i, x, y, beta=0.5, alpha=2.0),
             lambda i, x, y: torch.addmm(i, x, y, beta=0.5, alpha=2.0), c, a, b)
    check_fn(lambda i, x, y: tl.addmm(i, x, y),  # input broadcast
            
             lambda i, x, y: torch.addmm(i, x, y), arr(5), a, b)
    p, q, r = arr(2, 3, 4), arr(2, 4, 5), arr(2, 3, 5)
    check_fn(lambda i, x, y: tl.baddbmm(i, x, y, alpha=0.5), lambda i, x, y: torch.baddbmm(i, x, y, alpha=0.5), r, p, q)
    check_fn(lambda i, x, y: tl.addbmm(i, x, y), lambda i, x, y: torch.addbmm(i, x, y), c, p, q)
    check_fn(lambda x, y: tl.outer(x, y), lambda x, y: torch.outer(x, y), v, arr(3))
    check_fn(lambda x, y: tl.dot(x, y), lambda x, y: torch.dot(x, y), v, arr(4))
    check_fn(lambda x, y: x.mv(y), lambda x, y: x.mv(y), a, v)
    check_fn(lambda x, y: tl.tensordot(x, y, dims=([1, 2], [0, 1])),
             lambda x, y: torch.tensordot(x, y, dims=([1, 2], [0, 1])), arr(2, 3, 4), arr(3, 4, 5))
    check_fn(lambda x, y: x @ y, lambda x, y: x @ y, arr(2, 1, 3, 4), arr(5, 4, 2))  # matmul broadcasting


EINSUM = [
    ("ij,jk->ik", [(3, 4), (4, 5)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("ij->ji", [(3, 4)]),
    ("ij->", [(3, 4)]), ("i,i->", [(5,), (5,)]), ("i,j->ij", [(3,), (4,)]), ("bhld,bhmd->bhlm", [(2, 2, 3, 4), (2, 2, 5, 4)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (4, 5)]), ("ij,jk,kl->il", [(3, 40), (40, 2), (2, 50)]),
    ("bld,dn->bln", [(2, 3, 4), (4, 6)]), ("ijk,ikl", [(2, 3, 4), (2, 4, 5)]), ("abc,cd,bd->a", [(2, 3, 4), (4, 5), (3, 5)]),
    ("bdl,bdn->bdln", [(2, 3, 4), (2, 3, 5)]), ("b...,b...->b", [(2, 3, 4), (2, 3, 4)]),
]


@pytest.mark.parametrize("eq,shapes", EINSUM, ids=[e[0] for e in EINSUM])
def test_einsum(eq, shapes):
    check_fn(lambda *xs: tl.einsum(eq, *xs), lambda *xs: torch.einsum(eq, *xs), *[arr(*s) for s in shapes],
             rtol=1e-4, atol=1e-5)


def test_einsum_errors():
    x = tl.ones(3, 3)
    with pytest.raises(ArgumentError, match="einsum: .*repeats within operand"):
        tl.einsum("ii->i", x)
    with pytest.raises(ShapeError, match="einsum"):
        tl.einsum("ij,jk->ik", x, tl.ones(4, 2))
    with pytest.raises(ArgumentError, match="einsum: the equation names 2 operands"):
        tl.einsum("ij,jk->ik", x)
    with pytest.raises(ArgumentError, match="output index 'z'"):
        tl.einsum("ij->z", x)


# -- shape and index ----------------------------------------------------------------------------
SHAPE_FNS = [
    ("stack", lambda m, x: m.stack([x, x * 2], dim=1)), ("stack_neg", lambda m, x: m.stack([x, x], -1)),
    ("split", lambda m, x: m.cat(x.split(2, dim=1), 0)), ("split_sizes", lambda m, x: x.split([1, 3], 1)[1]),
    ("chunk", lambda m, x: x.chunk(3, -1)[1]), ("unbind", lambda m, x: x.unbind(1)[3]),
    ("narrow", lambda m, x: x.narrow(1, 1, 2)), ("narrow0", lambda m, x: m.narrow(x, 0, 1, 2)),
    ("tril", lambda m, x: x.tril()), ("triu_1", lambda m, x: m.triu(x, diagonal=1)), ("tril_-1", lambda m, x: x.tril(-1)),
    ("flip", lambda m, x: x.flip(0, 1) if m is torch else x.flip((0, 1))), ("flip1", lambda m, x: m.flip(x, [-1])),
    ("roll", lambda m, x: x.roll(1, 1)), ("roll2", lambda m, x: m.roll(x, (1, -2), (0, 1))), ("roll_flat", lambda m, x: x.roll(3)),
    ("repeat", lambda m, x: x.repeat(2, 1, 3)), ("repeat_interleave", lambda m, x: x.repeat_interleave(2, dim=0)),
    ("repeat_interleave_flat", lambda m, x: m.repeat_interleave(x, 2)),
    ("expand_as", lambda m, x: x[:1].expand_as(x)), ("view_as", lambda m, x: x.view_as(x.t())),
    ("diag", lambda m, x: m.diag(x)), ("diag_k", lambda m, x: x.diag(1)), ("diag_vec", lambda m, x: m.diag(x[0], -1)),
    ("diagonal", lambda m, x: x.diagonal()), ("movedim", lambda m, x: x.reshape(3, 2, 2).movedim(0, -1)),
    ("swapaxes", lambda m, x: x.swapaxes(0, 1)), ("flatten", lambda m, x: x.reshape(3, 2, 2).flatten(1, 2)),
    ("unflatten", lambda m, x: x.unflatten(1, (2, 2))), ("tile", lambda m, x: x.tile((2,))),
    ("hstack", lambda m, x: m.hstack([x, x])), ("vstack", lambda m, x: m.vstack([x, x[0]])),
]


@pytest.mark.parametrize("name,fn", SHAPE_FNS, ids=[s[0] for s in SHAPE_FNS])
def test_shape_functions(name, fn):
    check_fn(lambda x: fn(tl, x), lambda x: fn(torch, x), arr(3, 4), rtol=0, atol=0)


def test_split_chunk_unbind_shapes_and_errors():
    x, t = tl.zeros(5, 7), torch.zeros(5, 7)
    assert [p.shape for p in x.split(3, 1)] == [tuple(p.shape) for p in t.split(3, 1)]
    assert [p.shape for p in x.chunk(3)] == [tuple(p.shape) for p in t.chunk(3)]
    assert [p.shape for p in tl.zeros(6, 2).chunk(4)] == [tuple(p.shape) for p in torch.zeros(6, 2).chunk(4)]
    assert len(x.unbind(-1)) == 7 and x.unbind(-1)[0].shape == (5,)
    with pytest.raises(ShapeError, match="split: sizes"):
        x.split([2, 2], 0)
    with pytest.raises(IndexOutOfRangeError, match="narrow"):
        x.narrow(0, 4, 3)
    with pytest.raises(ShapeError, match="stack: expects tensors of one shape"):
        tl.stack([tl.zeros(2), tl.zeros(3)])
    with pytest.raises(ShapeError, match="tril"):
        tl.tril(tl.zeros(3))
    i = tl.tensor([[1, 2], [3, 4]])
    assert tl.stack([i, i]).dtype == tl.int64 and np.array_equal(i.flip(0).numpy(), [[3, 4], [1, 2]])
    assert i.tril().dtype == tl.int64 and np.array_equal(i.tril().numpy(), [[1, 0], [3, 4]])


def test_tril_triu_zero_non_finite_values():
    v = np.array([[1.0, np.inf], [np.nan, 2.0]], np.float32)
    close(tl.tril(tl.tensor(v)), torch.tril(torch.tensor(v)), 0, 0)
    close(tl.triu(tl.tensor(v)), torch.triu(torch.tensor(v)), 0, 0)


def test_gather_scatter_take_along_dim():
    a = arr(3, 4)
    idx = np.array([[0, 1, 3], [2, 2, 0], [1, 0, 1]], np.int64)
    check_fn(lambda x: x.gather(1, tl.tensor(idx)), lambda x: x.gather(1, torch.tensor(idx)), a)
    check_fn(lambda x: tl.gather(x, 0, tl.tensor(idx[:2, :3] % 3)), lambda x: torch.gather(x, 0, torch.tensor(idx[:2, :3] % 3)), a)
    check_fn(lambda x: tl.take_along_dim(x, tl.tensor(idx), dim=1), lambda x: torch.take_along_dim(x, torch.tensor(idx), dim=1), a)
    si = np.array([[0, 1, 3], [2, 0, 1]], np.int64)  # distinct positions per row (torch's order is undefined)
    check_fn(lambda x, s: x.scatter(1, tl.tensor(si), s), lambda x, s: x.scatter(1, torch.tensor(si), s), a, arr(2, 3))
    check_fn(lambda x: x.scatter(1, tl.tensor(si), 7.0), lambda x: x.scatter(1, torch.tensor(si), 7.0), a)
    rep = np.array([[0, 0, 3], [1, 1, 1]], np.int64)
    check_fn(lambda x, s: x.scatter_add(1, tl.tensor(rep), s), lambda x, s: x.scatter_add(1, torch.tensor(rep), s), a, arr(2, 3))
    check_fn(lambda x: x.masked_select(tl.tensor(a > 0)), lambda x: x.masked_select(torch.tensor(a > 0)), a)
    check_fn(lambda x: x.index_select(1, tl.tensor([3, 0])), lambda x: x.index_select(1, torch.tensor([3, 0])), a)
    with pytest.raises(IndexOutOfRangeError, match="gather: index 4"):
        tl.tensor(a).gather(1, tl.tensor([[4]]))
    with pytest.raises(DTypeError, match="gather: index must be an integer"):
        tl.tensor(a).gather(1, tl.tensor([[1.0]]))


def test_in_place_scatter_and_scatter_add():
    x, t = tl.zeros(3, 4), torch.zeros(3, 4)
    x.scatter_(1, tl.tensor([[1], [2], [0]]), 5.0)
    t.scatter_(1, torch.tensor([[1], [2], [0]]), 5.0)
    x.scatter_add_(0, tl.tensor([[0, 1, 2, 0]]), tl.ones(1, 4))
    t.scatter_add_(0, torch.tensor([[0, 1, 2, 0]]), torch.ones(1, 4))
    close(x, t, 0, 0)


def test_setitem_values_and_gradients():
    a, v = arr(4, 5), arr(2)

    def run(m, x, val):
        y = x * 1.0
        y[1] = 0.5
        y[:, 1:3] = val
        y[y > 1.0] = 0.0
        y[2, -1] = val[0]
        y[[0, 3], 0] = val
        return y * 2.0

    check_fn(lambda x, val: run(tl, x, val), lambda x, val: run(torch, x, val), a, v)


def test_setitem_on_int_and_leaf_errors():
    i = tl.tensor([1, 2, 3])
    i[1] = 7
    i[i > 5] = 0
    assert np.array_equal(i.numpy(), [1, 0, 3]) and i.dtype == tl.int64
    leaf = tl.ones(3, requires_grad=True)
    with pytest.raises(AutogradError, match="in-place"):
        leaf[0] = 2.0
    with pytest.raises(AutogradError, match="in-place"):
        leaf.clamp_(0, 1)
    with tl.no_grad():
        leaf[0] = 2.0
        leaf.mul_(2.0)
    assert leaf.numpy().tolist() == [4.0, 2.0, 2.0]
    with pytest.raises(ShapeError, match="setitem"):
        tl.zeros(3)[:2] = tl.ones(3)


def test_in_place_methods_are_differentiable_on_non_leaves():
    a = arr(3, 4)

    def run(m, x):
        y = x * 1.0
        y.clamp_(-0.5, 0.5)
        y.sin_()
        y.pow_(2)
        y.addcmul_(x, x, value=0.1)
        y.tril_()
        return y

    check_fn(lambda x: run(tl, x), lambda x: run(torch, x), a)
    z = tl.ones(2, 2)
    z.normal_(mean=1.0, std=0.0)
    z.uniform_(2.0, 2.0)
    assert np.all(z.numpy() == 2.0)


# -- factories, random draws, sorting ------------------------------------------------------------
def test_factories():
    close(tl.linspace(-1, 2, 7), torch.linspace(-1, 2, 7))
    close(tl.linspace(0, 1, 1), torch.linspace(0, 1, 1))
    close(tl.logspace(0, 2, 3), torch.logspace(0, 2, 3), rtol=1e-6)
    close(tl.eye(3), torch.eye(3))
    close(tl.eye(2, 4), torch.eye(2, 4))
    for ind in ("ij", "xy"):
        ours = tl.meshgrid(tl.tensor([0.0, 1.0, 2.0]), tl.tensor([1.0, 2.0]), indexing=ind)
        theirs = torch.meshgrid(torch.tensor([0.0, 1.0, 2.0]), torch.tensor([1.0, 2.0]), indexing=ind)
        for o, t in zip(ours, theirs):
            close(o, t)
    x = tl.ones(2, 3)
    for fn in ("rand_like", "randn_like"):
        assert getattr(tl, fn)(x).shape == (2, 3)


def test_random_draws_are_seeded_and_valid():
    tl.manual_seed(5)
    p1 = tl.randperm(10)
    tl.manual_seed(5)
    assert np.array_equal(tl.randperm(10).numpy(), p1.numpy())
    assert sorted(p1.numpy().tolist()) == list(range(10)) and p1.dtype == tl.int64
    w = tl.tensor([[0.5, 1.0, 3.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    s = tl.multinomial(w, 3)
    assert s.shape == (2, 3) and s.dtype == tl.int64 and set(s.numpy()[0].tolist()) == {0, 1, 2}
    assert len(set(s.numpy()[1].tolist())) == 3  # without replacement: distinct
    sr = tl.multinomial(tl.tensor([0.0, 1.0, 0.0]), 5, replacement=True)
    assert sr.numpy().tolist() == [1] * 5
    draws = tl.multinomial(tl.tensor([1.0, 3.0]), 4000, replacement=True).numpy()
    assert 0.70 < draws.mean() < 0.80
    with pytest.raises(ArgumentError, match="multinomial: cannot draw 5"):
        tl.multinomial(tl.tensor([1.0, 1.0]), 5)


def test_sort_argsort_topk_unique():
    a = arr(3, 6)
    a[0, :3] = 1.0  # ties: a stable order
    a[1, 2] = np.nan
    for desc in (False, True):
        o, r = tl.sort(tl.tensor(a), 1, descending=desc), torch.sort(torch.tensor(a), dim=1, descending=desc, stable=True)
        close(o.values, r.values, 0, 0)
        assert np.array_equal(o.indices.numpy(), r.indices.numpy())
        assert np.array_equal(tl.tensor(a).argsort(0, descending=desc).numpy(),
                              torch.tensor(a).argsort(dim=0, descending=desc, stable=True).numpy())
    b = arr(3, 6)
    check_fn(lambda x: x.sort(dim=0).values, lambda x: x.sort(dim=0).values, b)
    check_fn(lambda x: x.topk(2).values, lambda x: x.topk(2).values, b)
    check_fn(lambda x: tl.topk(x, 3, dim=0, largest=False).values, lambda x: torch.topk(x, 3, dim=0, largest=False).values, b)
    assert np.array_equal(tl.tensor(b).topk(2).indices.numpy(), torch.tensor(b).topk(2).indices.numpy())
    u = np.array([3, 1, 3, 2, 1, 1])
    o = tl.unique(tl.tensor(u), return_inverse=True, return_counts=True)
    r = torch.unique(torch.tensor(u), return_inverse=True, return_counts=True)
    for x, y in zip(o, r):
        assert np.array_equal(x.numpy(), y.numpy())
    with pytest.raises(ArgumentError, match="topk: k=7"):
        tl.tensor(b).topk(7)


def test_wrong_calls_raise_clear_errors():
    x = tl.ones(2, 3)
    with pytest.raises(DTypeError, match="sin: expected a Tensor for input, got numpy.ndarray"):
        tl.sin(np.ones(3))
    with pytest.raises(TorchLeanError, match="norm"):
        x.norm(p="nuc")
    with pytest.raises(ShapeError, match="mm: expected two 2-D"):
        tl.mm(tl.ones(3), x)
    with pytest.raises(TorchLeanError, match="max: dim 2 out of range"):
        x.max(2)
    with pytest.raises(ArgumentError, match="round: decimals"):
        tl.round(x, decimals=1.5)
    with pytest.raises(DTypeError, match="float_power"):
        tl.float_power(x, 2)
