"""torch (CPU, float32) as a second oracle, independent of our float64 spec.

For the same float32 inputs, torchlean and torch must give the same forward values and the same
gradients within a tolerance derived from torchlean's contracts (torchlean/contract.py):

* If both implementations are within a bound B of the exact result, they are within 2B of each
  other. We assume torch obeys the same class of bound as our contract for each primitive (true
  for IEEE add/sub/mul/div/sqrt and for SLEEF's <= 1-ulp exp/log/tanh), so the tolerance is
  2 * (contract bound), evaluated in float64 on torch's float64 result.
* Ops whose contract is "exact" (selections, moves, sign scaling: abs, relu, clamp, max/min,
  transposes, gathers) or "correctly rounded" (add, sub, mul, div, sqrt: one IEEE rounding that
  both libraries perform) must agree BIT FOR BIT: any tolerance there would hide bugs.
* Transcendentals: the contract allows 8u relative (4 ulp) per library call, so 2 * 8u; fused
  forms add theirs (sigmoid 16u, softplus 24u). Gradients of elementwise ops add the forward
  error propagated through the backward formula; every one of them is bounded by ~64u*(|grad| +
  |cotangent|) (e.g. tanh: u y^2 |dy| + 3u|ref| from tanh_bwd plus 16u y^2|dy| from y), so we use
  2 * 64u * (|grad| + |w|).
* Sums (reductions, matmul, broadcasting VJPs): the contract is gamma(k) * sum|terms| for any
  summation order; sum|terms| is computed exactly by running the same torch op in float64 on
  |inputs| (every term of a multilinear op is a product of inputs, so |term| = product of |.|).
  Tolerance: 2 * gamma(k) * sum|terms| plus a few u for the roundings around the sum.

u = 2**-24. Shapes and values come from Hypothesis (profile from tests/conftest.py).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, mutually_broadcastable_shapes

torch = pytest.importorskip("torch", reason="torch is the second oracle of this module; install torchlean[test]")

import torchlean as tl  # noqa: E402
from torchlean import ops  # noqa: E402
from torchlean.contract import CONTRACTS  # noqa: E402
import torchlean.nn.functional as TF  # noqa: E402

F = torch.nn.functional
U = 2.0**-24
TINY = 2.0**-126
F32 = np.float32


def gamma(k: int) -> float:
    return k * U / (1 - k * U)


# -- helpers -------------------------------------------------------------------------------------
def tt(a: np.ndarray, grad: bool = True) -> "torch.Tensor":
    """A float32 torch leaf holding exactly the values of ``a``."""
    return torch.tensor(np.asarray(a, F32), dtype=torch.float32, requires_grad=grad)


def ours_and_grads(fn, xs, w):
    ts = [tl.tensor(x, requires_grad=True) for x in xs]
    y = fn(*ts)
    y.backward(tl.tensor(w))
    return y.numpy(), [t.grad.numpy() for t in ts]


def torch_and_grads(fn, xs, w, dtype=torch.float32):
    ts = [torch.tensor(np.asarray(x), dtype=dtype, requires_grad=True) for x in xs]
    y = fn(*ts)
    y.backward(torch.tensor(np.asarray(w), dtype=dtype))
    return y.detach().numpy(), [t.grad.numpy() for t in ts]


def assert_bitwise(ours, theirs, what):
    ours, theirs = np.asarray(ours), np.asarray(theirs)
    assert ours.shape == theirs.shape, f"{what}: shape {ours.shape} vs torch {theirs.shape}"
    np.testing.assert_array_equal(ours, theirs.astype(ours.dtype), err_msg=what)


def assert_within(ours, theirs, tol, what):
    ours = np.asarray(ours, np.float64)
    theirs = np.asarray(theirs, np.float64)
    assert ours.shape == theirs.shape, f"{what}: shape {ours.shape} vs torch {theirs.shape}"
    tol = np.broadcast_to(np.asarray(tol, np.float64), ours.shape)
    err = np.abs(ours - theirs)
    bad = ~(err <= tol)
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {err.size} outside tolerance; worst err/tol "
                           f"{float(np.max(err / np.maximum(tol, 1e-300))):.3g}\nours={ours}\ntorch={theirs}\ntol={tol}")


def values(seed: int, shape, kind: str = "normal") -> np.ndarray:
    rng = np.random.default_rng(seed)
    if kind == "normal":
        return rng.standard_normal(shape).astype(F32)
    if kind == "positive":
        return rng.uniform(0.25, 3.0, shape).astype(F32)
    if kind == "nonzero":
        return (rng.uniform(0.25, 3.0, shape) * rng.choice([-1.0, 1.0], shape)).astype(F32)
    if kind == "wide":
        return rng.uniform(-4.0, 4.0, shape).astype(F32)
    raise ValueError(kind)


seeds = st.integers(0, 2**32 - 1)
shapes = array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=5)

# -- elementwise -----------------------------------------------------------------------------------
# (ours, torch, input kind, forward factor, gradient factor); factor None = bit for bit,
# else tolerance factor * u * |ref| (forward) or factor * u * (|ref| + |w|) (gradient), see top.
UNARY = {
    "neg": (ops.neg, torch.neg, "normal", None, None),
    "abs": (ops.abs, torch.abs, "normal", None, None),
    "relu": (ops.relu, torch.relu, "normal", None, None),
    "clamp": (lambda x: ops.clamp(x, -0.5, 0.8), lambda x: torch.clamp(x, -0.5, 0.8), "normal", None, None),
    # torch's 0-d sqrt is not always correctly rounded (seen 1 ulp off for x = 1.6575094, where
    # torchlean matches float32(sqrt(float64 x))): allow 1 ulp (2u relative) on each side
    "sqrt": (ops.sqrt, torch.sqrt, "positive", 2 * 2, 2 * 64),
    "exp": (ops.exp, torch.exp, "wide", 2 * 8, 2 * 64),
    "log": (ops.log, torch.log, "positive", 2 * 8, 2 * 64),
    "reciprocal": (ops.reciprocal, torch.reciprocal, "nonzero", 2 * 2, 2 * 64),
    "sigmoid": (ops.sigmoid, torch.sigmoid, "wide", 2 * 16, 2 * 64),
    "tanh": (ops.tanh, torch.tanh, "wide", 2 * 8, 2 * 64),
    "softplus": (ops.softplus, F.softplus, "wide", 2 * 24, 2 * 64),
    "pow2": (lambda x: x ** 2, lambda x: x ** 2, "normal", None, None),
    # scalar variants
    "x_plus_c": (lambda x: x + 1.7, lambda x: x + 1.7, "normal", None, None),
    "c_minus_x": (lambda x: 2.5 - x, lambda x: 2.5 - x, "normal", None, None),
    "x_times_c": (lambda x: x * -1.3, lambda x: x * -1.3, "normal", None, None),
    # x / c is x * float32(1/c) in torchlean (documented): two roundings, 2 u each side
    "x_div_c": (lambda x: x / 3.0, lambda x: x / 3.0, "normal", 2 * 2, 2 * 2),
    # c / x is c * reciprocal(x): two roundings
    "c_div_x": (lambda x: 2.0 / x, lambda x: 2.0 / x, "nonzero", 2 * 2, 2 * 64),
}


def _forward_tol(factor, ref64):
    return factor * U * np.abs(ref64) + TINY


@pytest.mark.parametrize("name", sorted(UNARY))
@given(shape=shapes, seed=seeds)
def test_unary_matches_torch(name, shape, seed):
    ours_fn, torch_fn, kind, kf, kg = UNARY[name]
    x = values(seed, shape, kind)
    w = values(seed + 1, shape)
    y, (g,) = ours_and_grads(ours_fn, [x], w)
    ty, (tg,) = torch_and_grads(torch_fn, [x], w)
    if kf is None:
        assert_bitwise(y, ty, f"{name} forward")
    else:
        ref64, _ = torch_and_grads(torch_fn, [x], w, torch.float64)
        assert_within(y, ty, _forward_tol(kf, ref64), f"{name} forward")
    if kg is None:
        assert_bitwise(g, tg, f"{name} gradient")
    else:
        _, (gref,) = torch_and_grads(torch_fn, [x], w, torch.float64)
        assert_within(g, tg, kg * U * (np.abs(gref) + np.abs(w)) + TINY, f"{name} gradient")


def test_unary_forward_factors_are_the_contracts():
    """The factors above are 2x the contract's relative constant for the primitive behind each op."""
    x = np.array([0.5, 1.0, 2.0])
    for prim, factor in (("exp", 16), ("log", 16), ("tanh", 16), ("sigmoid", 32), ("softplus", 48)):
        ref = np.ones(3)
        bound = CONTRACTS[prim].bound(ref, x)
        np.testing.assert_allclose(np.asarray(bound) * 2, factor * U * ref + 2 * TINY)
    for prim in ("abs", "relu", "clamp", "max", "min"):
        assert CONTRACTS[prim].exact


BINARY = {
    "add": (ops.add, torch.add, "normal"),
    "sub": (ops.sub, torch.sub, "normal"),
    "mul": (ops.mul, torch.mul, "normal"),
    "div": (ops.div, torch.div, "nonzero"),
    "maximum": (ops.maximum, torch.maximum, "normal"),
    "minimum": (ops.minimum, torch.minimum, "normal"),
}


@pytest.mark.parametrize("name", sorted(BINARY))
@given(shapes=mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=4), seed=seeds)
def test_binary_broadcast_matches_torch(name, shapes, seed):
    ours_fn, torch_fn, kind = BINARY[name]
    sa, sb = shapes.input_shapes
    a = values(seed, sa)
    b = values(seed + 1, sb, kind)
    w = values(seed + 2, shapes.result_shape)
    y, (ga, gb) = ours_and_grads(ours_fn, [a, b], w)
    ty, (tga, tgb) = torch_and_grads(torch_fn, [a, b], w)
    # forward: exact (max/min) or one correctly rounded operation (add/sub/mul/div): bit for bit
    assert_bitwise(y, ty, f"{name} forward")
    # gradients: per-element terms (at most 3 roundings each, e.g. -w * (a/b) / b) summed over the
    # broadcast axes: 2 * (gamma(k) + 4u) * sum|terms|, sum|terms| from float64 torch on |inputs|.
    k = max(1, math.prod(shapes.result_shape) // max(1, min(math.prod(sa), math.prod(sb))))
    _, mags = torch_and_grads(lambda p, q: torch_fn(p.abs(), q.abs()), [a, b], np.abs(w), torch.float64)
    for g, tg, mag, label in ((ga, tga, mags[0], "a"), (gb, tgb, mags[1], "b")):
        tol = 2 * (gamma(k) + 4 * U) * np.abs(mag) + TINY
        if name in ("maximum", "minimum"):
            mag_w = np.abs(w).sum()  # the selected cotangents
            tol = 2 * gamma(k) * mag_w + TINY
        assert_within(g, tg, tol, f"{name} d{label}")


# -- reductions ------------------------------------------------------------------------------------
@st.composite
def shape_and_dims(draw):
    shape = draw(array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=5))
    dims = draw(st.one_of(st.none(), st.lists(st.integers(0, len(shape) - 1), min_size=1, max_size=len(shape),
                                             unique=True)))
    neg = draw(st.booleans())
    if dims is not None and neg:
        dims = [d - len(shape) for d in dims]
    return shape, dims, draw(st.booleans())


@pytest.mark.parametrize("which", ["sum", "mean"])
@given(sd=shape_and_dims(), seed=seeds)
def test_sum_mean_match_torch(which, sd, seed):
    shape, dims, keepdim = sd
    x = values(seed, shape)
    dim_arg = None if dims is None else (dims[0] if len(dims) == 1 else tuple(dims))

    def ours_fn(t):
        return getattr(t, which)(dim_arg, keepdim=keepdim)

    def torch_fn(t):
        if dim_arg is None:
            r = getattr(t, which)()
            return r.reshape([1] * t.ndim) if keepdim else r
        return getattr(t, which)(dim=dim_arg, keepdim=keepdim)

    ref_shape = torch_fn(torch.zeros(shape)).shape
    w = values(seed + 1, tuple(ref_shape))
    y, (g,) = ours_and_grads(ours_fn, [x], w)
    ty, (tg,) = torch_and_grads(torch_fn, [x], w)
    # k terms per output; contract reduce_sum(_axis): gamma(k-1) sum|x| + ulp/2 (mean: /n, 2 ulp)
    k = x.size // max(1, ty.size)
    mag, _ = torch_and_grads(lambda t: torch_fn(t.abs()), [x], w, torch.float64)
    assert_within(y, ty, 2 * (gamma(k) * np.abs(mag) + 2 * U * np.abs(ty)) + TINY, f"{which} forward")
    if which == "sum":
        assert_bitwise(g, tg, "sum gradient (a broadcast: exact)")
    else:
        # w * (1/k): one rounding each side, plus float32(1/k) in torchlean
        assert_within(g, tg, 2 * 2 * U * np.abs(tg) + TINY, "mean gradient")


# -- matmul / bmm / linear ----------------------------------------------------------------------------
@st.composite
def matmul_shapes(draw):
    m, n, p = (draw(st.integers(1, 5)) for _ in range(3))
    batch = draw(mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=2, max_side=3))
    a_vec, b_vec = draw(st.booleans()), draw(st.booleans())
    sa = (n,) if a_vec else batch.input_shapes[0] + (m, n)
    sb = (n,) if b_vec else batch.input_shapes[1] + (n, p)
    return sa, sb


def _linear_tol(fn, xs, w, k):
    """2 gamma(k) * sum|terms| for a multilinear op: forward and every gradient."""
    mag_y, mag_g = torch_and_grads(lambda *ts: fn(*[t.abs() for t in ts]), [np.abs(x) for x in xs],
                                   np.abs(w), torch.float64)
    return (2 * gamma(k) * np.abs(mag_y) + TINY,
            [2 * gamma(k) * np.abs(mg) + TINY for mg in mag_g])


@given(sab=matmul_shapes(), seed=seeds)
def test_matmul_matches_torch(sab, seed):
    sa, sb = sab
    a, b = values(seed, sa), values(seed + 1, sb)
    out_shape = tuple(torch.matmul(torch.zeros(sa), torch.zeros(sb)).shape)
    w = values(seed + 2, out_shape)
    y, grads = ours_and_grads(ops.matmul, [a, b], w)
    ty, tgrads = torch_and_grads(torch.matmul, [a, b], w)
    k = a.size + b.size  # an upper bound on the number of terms summed into any output or gradient
    tol_y, tol_g = _linear_tol(torch.matmul, [a, b], w, k)
    assert_within(y, ty, tol_y, "matmul forward")
    for g, tg, tol, label in zip(grads, tgrads, tol_g, "ab"):
        assert_within(g, tg, tol, f"matmul d{label}")


@given(dims=st.tuples(*[st.integers(1, 5)] * 4), seed=seeds)
def test_bmm_matches_torch(dims, seed):
    batch, m, n, p = dims
    a, b = values(seed, (batch, m, n)), values(seed + 1, (batch, n, p))
    w = values(seed + 2, (batch, m, p))
    y, grads = ours_and_grads(ops.bmm, [a, b], w)
    ty, tgrads = torch_and_grads(torch.bmm, [a, b], w)
    tol_y, tol_g = _linear_tol(torch.bmm, [a, b], w, max(n, m, p))
    assert_within(y, ty, tol_y, "bmm forward")
    for g, tg, tol, label in zip(grads, tgrads, tol_g, "ab"):
        assert_within(g, tg, tol, f"bmm d{label}")


@pytest.mark.parametrize("bias", [True, False])
@given(dims=st.tuples(st.integers(1, 4), st.integers(1, 5), st.integers(1, 5)), lead3=st.booleans(), seed=seeds)
def test_linear_matches_torch(bias, dims, lead3, seed):
    rows, fin, fout = dims
    xshape = (2, rows, fin) if lead3 else (rows, fin)
    xs = [values(seed, xshape), values(seed + 1, (fout, fin))] + ([values(seed + 2, (fout,))] if bias else [])
    w = values(seed + 3, xshape[:-1] + (fout,))
    y, grads = ours_and_grads(TF.linear, xs, w)
    ty, tgrads = torch_and_grads(F.linear, xs, w)
    k = sum(x.size for x in xs) + 1  # bias adds one more term
    tol_y, tol_g = _linear_tol(F.linear, xs, w, k)
    assert_within(y, ty, tol_y, "linear forward")
    for i, (g, tg, tol) in enumerate(zip(grads, tgrads, tol_g)):
        assert_within(g, tg, tol, f"linear grad {i}")


# -- softmax / log_softmax / mse_loss ------------------------------------------------------------------
@pytest.mark.parametrize("which", ["softmax", "log_softmax"])
@given(shape=array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=6), dim_seed=st.integers(0, 10), seed=seeds)
def test_softmax_matches_torch(which, shape, dim_seed, seed):
    dim = dim_seed % len(shape) - (len(shape) if dim_seed % 2 else 0)
    x = values(seed, shape, "wide")
    w = values(seed + 1, shape)
    ours_fn = lambda t: getattr(TF, which)(t, dim=dim)  # noqa: E731
    torch_fn = lambda t: getattr(F, which)(t, dim=dim)  # noqa: E731
    y, (g,) = ours_and_grads(ours_fn, [x], w)
    ty, (tg,) = torch_and_grads(torch_fn, [x], w)
    ref64, (gref,) = torch_and_grads(torch_fn, [x], w, torch.float64)
    # forward: 2 * the contract bound of softmax_rows / log_softmax_rows (rows = the other axes)
    xm = np.moveaxis(x, dim, -1)
    rows, cols = xm.size // xm.shape[-1], xm.shape[-1]
    prim = "softmax_rows" if which == "softmax" else "log_softmax_rows"
    bound = CONTRACTS[prim].bound(np.moveaxis(ref64, dim, -1).reshape(-1), xm.reshape(-1), rows, cols)
    tol_y = np.moveaxis(2 * np.asarray(bound).reshape(xm.shape), -1, dim)
    assert_within(y, ty, tol_y, f"{which} forward")
    # gradient: softmax dx = y (w - sum w y); log_softmax dx = w - e^y sum w. The forward's relative
    # error (<= ~64u for |x| <= 4 by the bound above) and gamma(cols) on the row sum propagate:
    # |err| <= (64u + gamma(cols)) * (|y| (|w| + sum|w y|)) resp. (|w| + e^y sum|w|), doubled.
    wm = np.moveaxis(np.abs(w.astype(np.float64)), dim, -1)
    if which == "softmax":
        ym = np.moveaxis(ref64, dim, -1)
        scale = np.abs(ym) * (wm + np.sum(wm * np.abs(ym), -1, keepdims=True))
    else:
        ym = np.moveaxis(ref64, dim, -1)
        scale = wm + np.exp(ym) * np.sum(wm, -1, keepdims=True)
    tol_g = 2 * (64 * U + gamma(cols)) * np.moveaxis(scale, -1, dim) + TINY
    assert_within(g, tg, tol_g, f"{which} gradient")


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@given(shape=array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=5), seed=seeds)
def test_mse_loss_matches_torch(reduction, shape, seed):
    a, b = values(seed, shape), values(seed + 1, shape)
    out_shape = shape if reduction == "none" else ()
    w = values(seed + 2, out_shape)
    y, grads = ours_and_grads(lambda p, q: TF.mse_loss(p, q, reduction=reduction), [a, b], w)
    ty, tgrads = torch_and_grads(lambda p, q: F.mse_loss(p, q, reduction=reduction), [a, b], w)
    # forward: d = a - b (1 rounding), d*d (1), sum/mean of n terms: 2 (gamma(n) + 4u) sum d^2
    d2 = (a.astype(np.float64) - b) ** 2
    n = a.size
    mag = d2 if reduction == "none" else (d2.sum() / (n if reduction == "mean" else 1))
    assert_within(y, ty, 2 * (gamma(n) + 4 * U) * mag + TINY, f"mse_loss({reduction}) forward")
    # gradient: coef * d * w, three roundings each side (and float32(2/n))
    for g, tg, label in zip(grads, tgrads, ("input", "target")):
        assert_within(g, tg, 2 * 4 * U * np.abs(tg) + TINY, f"mse_loss({reduction}) d{label}")


# -- shape and index ops: exact, bit for bit -------------------------------------------------------------
SHAPE_OPS = {
    "transpose_2d": ((3, 4), lambda t: t.transpose(0, 1)),
    "transpose_3d_0_2": ((2, 3, 4), lambda t: t.transpose(0, 2)),
    "transpose_3d_neg": ((2, 3, 4), lambda t: t.transpose(-1, -2)),
    "permute": ((2, 3, 4, 2), lambda t: t.permute(3, 1, 0, 2)),
    "permute_list": ((2, 3, 4), lambda t: t.permute((2, 0, 1))),
    "T_2d": ((3, 5), lambda t: t.T),
    "reshape": ((2, 3, 4), lambda t: t.reshape(4, -1)),
    "view": ((2, 3, 4), lambda t: t.view(6, 4)),
    "flatten": ((2, 3, 4), lambda t: t.flatten(1)),
    "unsqueeze_squeeze": ((3, 4), lambda t: t.unsqueeze(0).squeeze(0).unsqueeze(-1)),
    "expand": ((3, 1), lambda t: t.expand((2, 3, 4))),
    "getitem_int": ((4, 3), lambda t: t[2]),
    "getitem_neg_int": ((4, 3), lambda t: t[-3]),
    "getitem_slice": ((5, 3), lambda t: t[1:4]),
    "getitem_step": ((6, 3), lambda t: t[::2]),
    "getitem_tuple": ((4, 5), lambda t: t[1:, ::2]),
    "getitem_column": ((4, 5), lambda t: t[:, 3]),
    "getitem_int_array": ((4, 3), lambda t: t[np.array([2, 0, 2])]),
    "getitem_bool_mask": ((3, 4), None),
    "index_select_0": ((4, 3), None),
    "index_select_1": ((3, 4), None),
}


def _mask_index(t):
    mask = np.array([[True, False, True, True], [False, False, True, False], [True, True, False, False]])
    return t[tl.tensor(mask)] if isinstance(t, tl.Tensor) else t[torch.tensor(mask)]


def _index_select(dim):
    idx = [3, 0, 3, 1]
    return lambda t: (t.index_select(dim, tl.tensor(idx)) if isinstance(t, tl.Tensor)
                      else t.index_select(dim, torch.tensor(idx)))


@pytest.mark.parametrize("name", sorted(SHAPE_OPS))
def test_shape_and_index_ops_match_torch_exactly(name):
    shape, fn = SHAPE_OPS[name]
    fn = {"getitem_bool_mask": _mask_index, "index_select_0": _index_select(0),
          "index_select_1": _index_select(1)}.get(name, fn)
    rng = np.random.default_rng(7)
    x = rng.standard_normal(shape).astype(F32)
    out_shape = tuple(fn(torch.zeros(shape)).shape)
    w = rng.standard_normal(out_shape).astype(F32)
    y, (g,) = ours_and_grads(fn, [x], w)
    ty, (tg,) = torch_and_grads(fn, [x], w)
    # moves are exact; gradients of repeated indices add at most 2 terms (one correctly rounded add)
    assert_bitwise(y, ty, f"{name} forward")
    assert_bitwise(g, tg, f"{name} gradient")


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cat_matches_torch_exactly(dim):
    rng = np.random.default_rng(3)
    shapes = {0: [(2, 3), (1, 3), (3, 3)], 1: [(2, 3), (2, 1), (2, 2)], -1: [(2, 2), (2, 3), (2, 1)]}[dim]
    xs = [rng.standard_normal(s).astype(F32) for s in shapes]
    out_shape = tuple(torch.cat([torch.zeros(s) for s in shapes], dim).shape)
    w = rng.standard_normal(out_shape).astype(F32)
    y, grads = ours_and_grads(lambda *ts: ops.cat(list(ts), dim), xs, w)
    ty, tgrads = torch_and_grads(lambda *ts: torch.cat(list(ts), dim), xs, w)
    assert_bitwise(y, ty, "cat forward")
    for g, tg in zip(grads, tgrads):
        assert_bitwise(g, tg, "cat gradient")


# -- a 2-layer MLP, and a training loop ---------------------------------------------------------------
def _mlp_data(seed=0, n=16, fin=3, hidden=8):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (n, fin)).astype(F32)
    y = (np.sin(2 * x[:, :1]) + 0.5 * x[:, 1:2] * x[:, 2:3]).astype(F32)
    params = [(rng.standard_normal((hidden, fin)) * 0.7).astype(F32), (rng.standard_normal(hidden) * 0.1).astype(F32),
              (rng.standard_normal((1, hidden)) * 0.5).astype(F32), np.zeros(1, F32)]
    return x, y, params


def _loss(lib, fn_ns, x, y, p):
    h = lib.tanh(fn_ns.linear(x, p[0], p[1]))
    return fn_ns.mse_loss(fn_ns.linear(h, p[2], p[3]), y)


def test_mlp_forward_backward_matches_torch():
    x, y, params = _mlp_data()
    ours_p = [tl.tensor(p, requires_grad=True) for p in params]
    loss = _loss(tl, TF, tl.tensor(x), tl.tensor(y), ours_p)
    loss.backward()
    th_p = [tt(p) for p in params]
    tloss = _loss(torch, F, tt(x, False), tt(y, False), th_p)
    tloss.backward()
    # ~7 contract-bounded ops in a chain (two GEMMs with k <= 16 terms: gamma(16) ~ 1e-6 relative
    # to the magnitudes; tanh 8u; a mean of 16 terms): both sides within ~3e-6 of the exact values
    # relative to the magnitudes, so 1e-5 of each tensor's largest entry (plus 1e-5 relative).
    np.testing.assert_allclose(loss.item(), tloss.item(), rtol=1e-5)
    for i, (p, tp) in enumerate(zip(ours_p, th_p)):
        g, tg = p.grad.numpy(), tp.grad.numpy()
        assert_within(g, tg, 1e-5 * (np.abs(tg) + np.abs(tg).max()) + TINY, f"mlp grad {i}")


def test_sgd_training_loss_curve_matches_torch():
    x, y, params = _mlp_data(seed=1, n=32, hidden=16)
    lr = 0.2
    ours_p = [tl.tensor(p, requires_grad=True) for p in params]
    th_p = [tt(p) for p in params]
    xs, ys = tl.tensor(x), tl.tensor(y)
    txs, tys = tt(x, False), tt(y, False)
    ours_curve, torch_curve = [], []
    for _ in range(20):
        loss = _loss(tl, TF, xs, ys, ours_p)
        loss.backward()
        ours_curve.append(loss.item())
        with tl.no_grad():
            for p in ours_p:
                p.sub_(p.grad * lr)
                p.grad = None
        tloss = _loss(torch, F, txs, tys, th_p)
        tloss.backward()
        torch_curve.append(tloss.item())
        with torch.no_grad():
            for p in th_p:
                p.sub_(p.grad * lr)
                p.grad = None
    ours_curve, torch_curve = np.array(ours_curve), np.array(torch_curve)
    assert torch_curve[-1] < 0.8 * torch_curve[0], "the toy problem should actually train"
    # per-step differences ~1e-6 relative (see the MLP test) compound mildly over 20 steps at this lr
    np.testing.assert_allclose(ours_curve, torch_curve, rtol=1e-4)
    for p, tp in zip(ours_p, th_p):
        np.testing.assert_allclose(p.numpy(), tp.detach().numpy(), rtol=1e-4, atol=1e-5)
