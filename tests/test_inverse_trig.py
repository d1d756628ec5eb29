"""torch.atan / asin / acos / asinh / acosh / atanh / atan2 (and the arc* aliases, the Tensor methods
and their in-place forms): values against PyTorch's float32 ones on random and edge inputs (the
domain's ends, out-of-domain NaN, infinities, signed zeros), VJPs against float64 central finite
differences and against PyTorch's gradients, edges included; atan2's broadcasting and its gradient
at the origin (0, as PyTorch's). Runs on every device (the ``device`` fixture)."""

from __future__ import annotations

import numpy as np
import pytest

import torchlean as tl
from torchlean.errors import DTypeError, ShapeError
from test_vjp import assert_vjp_matches_fd

torch = pytest.importorskip("torch")

UNARY = ["atan", "asin", "acos", "asinh", "acosh", "atanh"]
ALIASES = {"arctan": "atan", "arcsin": "asin", "arccos": "acos", "arcsinh": "asinh", "arccosh": "acosh",
           "arctanh": "atanh", "arctan2": "atan2"}
# where each function is smooth: the finite-difference checks draw from here
SMOOTH = {"atan": (-4.0, 4.0), "asin": (-0.9, 0.9), "acos": (-0.9, 0.9), "asinh": (-4.0, 4.0),
          "acosh": (1.2, 4.0), "atanh": (-0.9, 0.9)}
ONE_MINUS = float(np.nextafter(np.float32(1), np.float32(0)))
ONE_PLUS = float(np.nextafter(np.float32(1), np.float32(2)))
EDGES = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, ONE_MINUS, -ONE_MINUS, ONE_PLUS, -ONE_PLUS,
                  0.5, -0.5, 2.0, -2.0, 1e-30, -1e-30, 1e-45, -1e-45, 1e20, -1e20, 3.4e38, -3.4e38], np.float32)
REL = 12 * 2.0**-24  # the contract's bound (6 ulp); PyTorch's own float32 routine is within a few ulp too


def _inputs(rng: np.random.Generator) -> np.ndarray:
    """Random values inside every domain and outside, and the edges."""
    parts = [rng.uniform(-1.0, 1.0, 200), rng.uniform(1.0, 50.0, 100), rng.standard_normal(100) * 30.0,
             10.0 ** rng.uniform(-30, 30, 100) * rng.choice([-1.0, 1.0], 100), EDGES]
    return np.concatenate(parts).astype(np.float32)


def _same(ours, ref, rel: float = REL, what: str = "") -> None:
    """NaN where ref is NaN, the same infinities, the same signed zeros, finite values within rel."""
    ours = np.asarray(ours, np.float64)
    ref = np.asarray(ref, np.float64)
    assert ours.shape == ref.shape, what
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(ref), err_msg=f"{what}: NaN positions")
    inf = np.isinf(ref)
    np.testing.assert_array_equal(ours[inf], ref[inf], err_msg=f"{what}: infinities")
    zero = ref == 0
    np.testing.assert_array_equal(ours[zero], ref[zero], err_msg=f"{what}: zeros")
    np.testing.assert_array_equal(np.signbit(ours[zero]), np.signbit(ref[zero]), err_msg=f"{what}: signs of zero")
    fin = np.isfinite(ref) & ~zero
    assert np.all(np.isfinite(ours[fin])), what
    err = np.abs(ours[fin] - ref[fin])
    tol = rel * np.abs(ref[fin]) + 2.0**-126
    assert np.all(err <= tol), f"{what}: max err/tol {np.max(err / tol):.3g}"


@pytest.mark.parametrize("name", UNARY)
def test_values_match_torch(name, device):
    x = _inputs(np.random.default_rng(1))
    out = getattr(tl, name)(tl.tensor(x, device=device))
    assert out.dtype == tl.float32 and out.device.type == device
    _same(out.numpy(), getattr(torch, name)(torch.from_numpy(x)).numpy(), what=name)


def test_named_edges(device):
    x = tl.tensor([-0.0, 0.0, 1.0, -1.0, 2.0, np.inf, -np.inf], device=device)
    nan, inf, pi2 = np.nan, np.inf, np.float32(np.pi / 2)
    expect = {"atan": [-0.0, 0.0, np.pi / 4, -np.pi / 4, None, pi2, -pi2],
              "asin": [-0.0, 0.0, pi2, -pi2, nan, nan, nan],
              "acos": [pi2, pi2, 0.0, np.float32(np.pi), nan, nan, nan],
              "asinh": [-0.0, 0.0, None, None, None, inf, -inf],
              "acosh": [nan, nan, 0.0, nan, None, inf, nan],
              "atanh": [-0.0, 0.0, inf, -inf, nan, nan, nan]}
    for name, want in expect.items():
        got = getattr(tl, name)(x).numpy()
        for g, w in zip(got, want):
            if w is None:
                continue
            if np.isnan(w):
                assert np.isnan(g), (name, got)
            else:
                assert g == np.float32(w) and np.signbit(g) == np.signbit(w), (name, got)


def test_integer_input_computes_in_float32(device):
    x = tl.tensor([0, 1, 2, -3], device=device)
    for name in UNARY:
        out = getattr(tl, name)(x)
        assert out.dtype == tl.float32
        _same(out.numpy(), getattr(torch, name)(torch.tensor([0, 1, 2, -3])).numpy(), what=name)
    out = tl.atan2(x, tl.tensor([1, 0, -1, 0], device=device))
    assert out.dtype == tl.float32
    _same(out.numpy(), torch.atan2(torch.tensor([0, 1, 2, -3]), torch.tensor([1, 0, -1, 0])).numpy())


@pytest.mark.parametrize("name", UNARY)
def test_vjp_matches_finite_differences(name, device):
    rng = np.random.default_rng(2)
    x = rng.uniform(*SMOOTH[name], (3, 4)).astype(np.float32)
    w = rng.standard_normal((3, 4)).astype(np.float32)
    np_fn = getattr(np, "arc" + name[1:])
    assert_vjp_matches_fd(name, getattr(tl, name), np_fn, [x], np_fn(x.astype(np.float64)), w, device)


@pytest.mark.parametrize("name", UNARY)
def test_gradients_match_torch_including_edges(name, device):
    """Random points and the edges: +-inf at asin/acos's and atanh's ends, acosh's rsqrt(x^2 - 1)
    (finite below -1, NaN inside (-1, 1)), 0 at infinities, NaN at NaN."""
    x = _inputs(np.random.default_rng(3))
    w = np.random.default_rng(4).standard_normal(x.size).astype(np.float32)
    t = tl.tensor(x, device=device, requires_grad=True)
    getattr(tl, name)(t).backward(tl.tensor(w, device=device))
    r = torch.from_numpy(x).requires_grad_()
    getattr(torch, name)(r).backward(torch.from_numpy(w))
    # PyTorch's rsqrt is one rounding where ours is 1/sqrt (two): allow a few ulp more
    _same(t.grad.numpy(), r.grad.numpy(), rel=24 * 2.0**-24, what=f"d{name}")


def test_atan2_values_match_torch_on_every_pair_of_specials(device):
    s = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-45, -3.4e38, 0.5], np.float32)
    a, b = np.repeat(s, s.size), np.tile(s, s.size)
    out = tl.atan2(tl.tensor(a, device=device), tl.tensor(b, device=device)).numpy()
    _same(out, torch.atan2(torch.from_numpy(a), torch.from_numpy(b)).numpy(), what="atan2 specials")
    rng = np.random.default_rng(5)
    a, b = (rng.standard_normal(500) * 10.0 ** rng.uniform(-5, 5, 500)).astype(np.float32), \
        rng.standard_normal(500).astype(np.float32)
    out = tl.atan2(tl.tensor(a, device=device), tl.tensor(b, device=device)).numpy()
    _same(out, torch.atan2(torch.from_numpy(a), torch.from_numpy(b)).numpy(), what="atan2 random")


def test_atan2_vjp_matches_finite_differences(device):
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((2, 3)).astype(np.float32), rng.standard_normal((2, 3)).astype(np.float32)
    w = rng.standard_normal((2, 3)).astype(np.float32)
    assert_vjp_matches_fd("atan2", tl.atan2, np.arctan2, [a, b], np.arctan2(a.astype(np.float64), b), w, device)


def test_atan2_gradient_matches_torch_at_the_origin_and_edges(device):
    """PyTorch takes 1/(a^2 + b^2) as 0 where a^2 + b^2 is 0 (the origin, or both squares
    underflowing): the gradient there is a signed 0, not NaN; a nonzero subnormal sum gives inf."""
    a = np.array([0.0, -0.0, 0.0, 1e-30, 1e-20, 3e-23, 1.0, 0.0, np.inf, 1e20, np.nan, 2.0], np.float32)
    b = np.array([0.0, 0.0, -0.0, 1e-30, 1e-20, 0.0, 0.0, -1.0, np.inf, 1.0, 1.0, -3.0], np.float32)
    g = np.array([1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, -0.5], np.float32)
    ta, tb = (tl.tensor(v, device=device, requires_grad=True) for v in (a, b))
    tl.atan2(ta, tb).backward(tl.tensor(g, device=device))
    ra, rb = (torch.from_numpy(v).requires_grad_() for v in (a, b))
    torch.atan2(ra, rb).backward(torch.from_numpy(g))
    _same(ta.grad.numpy(), ra.grad.numpy(), rel=4 * 2.0**-24, what="d atan2 / d input")
    _same(tb.grad.numpy(), rb.grad.numpy(), rel=4 * 2.0**-24, what="d atan2 / d other")
    assert ta.grad.numpy()[0] == 0.0 and tb.grad.numpy()[0] == 0.0  # the origin: no NaN


def test_atan2_broadcasts_and_sums_gradients_back(device):
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((3, 1)).astype(np.float32), rng.standard_normal((4,)).astype(np.float32)
    ta, tb = (tl.tensor(v, device=device, requires_grad=True) for v in (a, b))
    out = tl.atan2(ta, tb)
    assert tuple(out.shape) == (3, 4)
    out.sum().backward()
    ra, rb = (torch.from_numpy(v).requires_grad_() for v in (a, b))
    ref = torch.atan2(ra, rb)
    ref.sum().backward()
    _same(out.numpy(), ref.detach().numpy())
    assert tuple(ta.grad.shape) == (3, 1) and tuple(tb.grad.shape) == (4,)
    np.testing.assert_allclose(ta.grad.numpy(), ra.grad.numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(tb.grad.numpy(), rb.grad.numpy(), rtol=1e-5, atol=1e-7)
    zero_d = tl.atan2(tl.tensor(1.0, device=device), tl.tensor([1.0, -1.0], device=device))
    _same(zero_d.numpy(), torch.atan2(torch.tensor(1.0), torch.tensor([1.0, -1.0])).numpy())


def test_atan2_errors_name_the_call(device):
    x = tl.ones(2, device=device)
    with pytest.raises(DTypeError, match=r"^atan2: expected a Tensor for other, got float"):
        tl.atan2(x, 2.0)
    with pytest.raises(DTypeError, match=r"^atan2: expected a Tensor for input, got"):
        tl.atan2(np.ones(2, np.float32), x)
    with pytest.raises(ShapeError, match=r"^atan2: shapes \(2,\) and \(3,\) are not broadcastable"):
        tl.atan2(x, tl.ones(3, device=device))


@pytest.mark.parametrize("name", UNARY)
def test_unary_errors_name_the_call(name):
    with pytest.raises(DTypeError, match=rf"^{name}: expected a Tensor for input, got list"):
        getattr(tl, name)([0.5])


def test_aliases_and_methods(device):
    x = np.array([-0.75, 0.25, 0.5], np.float32)
    y = np.array([1.0, -2.0, 0.0], np.float32)
    for alias, name in ALIASES.items():
        assert getattr(tl, alias) is getattr(tl, name)
        args = (tl.tensor(x + 1.5 if name == "acosh" else x, device=device),) + \
            ((tl.tensor(y, device=device),) if name == "atan2" else ())
        want = getattr(tl, name)(*args).numpy()
        for method in (name, alias):
            np.testing.assert_array_equal(getattr(args[0], method)(*args[1:]).numpy(), want)


@pytest.mark.parametrize("method", [n + "_" for n in UNARY + ["atan2"] + list(ALIASES)])
def test_in_place_forms(method, device):
    name = ALIASES.get(method[:-1], method[:-1])
    x = np.array([[-0.75, 0.25, 0.5], [0.0, -0.0, 0.9]], np.float32) + (1.5 if name == "acosh" else 0.0)
    other = (np.array([1.0, -2.0, 0.0], np.float32),) if name == "atan2" else ()
    ref = getattr(torch, name)(torch.from_numpy(x), *(torch.from_numpy(o) for o in other)).numpy()
    t = tl.tensor(x, device=device)
    out = getattr(t, method)(*(tl.tensor(o, device=device) for o in other))  # other broadcasts to t's shape
    assert out is t
    _same(t.numpy(), ref, what=method)
    # on a non-leaf the gradient flows through the in-place update: the out-of-place one's
    # (PyTorch 2.13 has no derivative for in-place asinh/acosh/atanh, so it is the reference)
    leaf = tl.tensor(x, device=device, requires_grad=True)
    h = leaf * 1.0
    getattr(h, method)(*(tl.tensor(o, device=device) for o in other))
    h.sum().backward()
    r = torch.from_numpy(x).requires_grad_()
    getattr(torch, name)(r * 1.0, *(torch.from_numpy(o) for o in other)).sum().backward()
    _same(leaf.grad.numpy(), r.grad.numpy(), rel=24 * 2.0**-24, what=f"{method} gradient")
