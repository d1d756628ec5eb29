"""Complex elementwise math, powers and reductions against torch 2.13 (CPU): values on random and edge
inputs (0, negative reals with +-0 imaginary parts, huge and tiny magnitudes, inf and nan), and
gradients (PyTorch's conjugate-Wirtinger z.grad) against torch's autograd and finite differences."""

from __future__ import annotations

import numpy as np
import pytest

import torchlean as tl
from torchlean.errors import DTypeError, NotSupportedError

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(25)
INF, NAN = float("inf"), float("nan")


def crand(*shape, scale=1.0):
    return ((RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)) * scale).astype(np.complex64)


def as_np(v):
    if isinstance(v, torch.Tensor):
        return v.detach().resolve_conj().numpy()
    return np.asarray(v.numpy() if hasattr(v, "numpy") else v)


def close(a, b, rtol=2e-5, atol=1e-6):
    a, b = as_np(a), as_np(b)
    assert a.shape == b.shape, (a.shape, b.shape)
    assert a.dtype == b.dtype, (a.dtype, b.dtype)
    np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, equal_nan=True)


# finite edge values: zero, the negative real axis on both sides of the cut, the imaginary axis,
# huge and tiny parts (|z|^2 would overflow / underflow in float32)
EDGE = np.array([0j, complex(0, -0.0), -4 + 0j, complex(-4, -0.0), 3j, -2j, 1e30 + 1e30j, -3e37 + 1e37j,
                 1e-30 + 1e-30j, -2e-39 + 0j, 1e-25 - 3e-26j, 0.5 + 0.25j], np.complex64)

UNARY = {
    "exp": (lambda z: tl.exp(z), lambda t: torch.exp(t)),
    "log": (lambda z: tl.log(z), lambda t: torch.log(t)),
    "log2": (lambda z: z.log2(), lambda t: t.log2()),
    "log10": (lambda z: tl.log10(z), lambda t: torch.log10(t)),
    "sqrt": (lambda z: tl.sqrt(z), lambda t: torch.sqrt(t)),
    "rsqrt": (lambda z: z.rsqrt(), lambda t: t.rsqrt()),
    "reciprocal": (lambda z: tl.reciprocal(z), lambda t: torch.reciprocal(t)),
    "square": (lambda z: tl.square(z), lambda t: torch.square(t)),
    "sin": (lambda z: tl.sin(z), lambda t: torch.sin(t)),
    "cos": (lambda z: z.cos(), lambda t: t.cos()),
    "tan": (lambda z: tl.tan(z), lambda t: torch.tan(t)),
    "sinh": (lambda z: tl.sinh(z), lambda t: torch.sinh(t)),
    "cosh": (lambda z: z.cosh(), lambda t: t.cosh()),
    "tanh": (lambda z: tl.tanh(z), lambda t: torch.tanh(t)),
    "sigmoid": (lambda z: tl.sigmoid(z), lambda t: torch.sigmoid(t)),
    "sgn": (lambda z: tl.sgn(z), lambda t: torch.sgn(t)),
    "abs": (lambda z: tl.abs(z), lambda t: torch.abs(t)),
    "abs_sq": (lambda z: z.abs() ** 2, lambda t: t.abs() ** 2),
    "pow_float": (lambda z: z ** 0.37, lambda t: t ** 0.37),
    "pow_neg_float": (lambda z: tl.pow(z, -1.6), lambda t: torch.pow(t, -1.6)),
    "pow_half": (lambda z: z ** 0.5, lambda t: t ** 0.5),
    "pow_int_float": (lambda z: z.pow(3.0), lambda t: t.pow(3.0)),
    "pow_complex": (lambda z: z ** (0.5 - 1.25j), lambda t: t ** (0.5 - 1.25j)),
    "rpow": (lambda z: 2 ** z, lambda t: 2 ** t),
    "rpow_complex": (lambda z: (1 - 2j) ** z, lambda t: (1 - 2j) ** t),
    "log1p": (lambda z: tl.log1p(z), lambda t: torch.log1p(t)),
    "expm1": (lambda z: z.expm1(), lambda t: t.expm1()),
    "asin": (lambda z: tl.asin(z), lambda t: torch.asin(t)),
    "acos": (lambda z: z.acos(), lambda t: t.acos()),
    "atan": (lambda z: tl.arctan(z), lambda t: torch.arctan(t)),
    "asinh": (lambda z: z.arcsinh(), lambda t: t.arcsinh()),
    "acosh": (lambda z: tl.acosh(z), lambda t: torch.acosh(t)),
    "atanh": (lambda z: tl.atanh(z), lambda t: torch.atanh(t)),
}

# where float32 rounding of an ill-conditioned map makes a relative tolerance meaningless
_LOOSE = {"tan", "tanh", "pow_complex", "rpow_complex", "pow_neg_float"}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_values_on_random_inputs(name):
    f, g = UNARY[name]
    a = np.concatenate([crand(40), crand(10, scale=6.0), crand(10, scale=0.05)])
    tol = 1e-4 if name in _LOOSE else 2e-5
    close(f(tl.tensor(a)), g(torch.tensor(a)), rtol=tol, atol=tol)


@pytest.mark.parametrize("name", ["exp", "log", "log10", "sqrt", "rsqrt", "reciprocal", "sin", "cos", "sinh",
                                  "cosh", "tanh", "tan", "sgn", "abs", "square", "pow_float", "pow_half"])
def test_values_on_edge_inputs(name):
    f, g = UNARY[name]
    a = EDGE
    if name in ("exp", "sin", "cos", "sinh", "cosh", "tan", "tanh", "square"):
        a = a[np.abs(a) < 1e3]  # these overflow (exp) or lose all digits for huge arguments, in torch too
    if name in ("rsqrt", "reciprocal"):
        a = a[np.abs(a) > 1e-38]  # 1 / subnormal overflows: torch says -inf + nan j, we -inf - 0j
    if name == "sgn":
        a = a[(np.abs(a) > 1e-38) | (a == 0)]  # sgn(subnormal): torch -inf + nan j, we -1 + 0j
    out, ref = f(tl.tensor(a)), g(torch.tensor(a))
    close(out, ref, rtol=1e-5 if name.startswith("pow") else 3e-6, atol=0)


@pytest.mark.parametrize("name", ["sqrt", "log", "pow_half"])
def test_branch_cut_sides_follow_the_sign_of_zero(name):
    f, g = UNARY[name]
    a = np.array([complex(-4, 0.0), complex(-4, -0.0), complex(-1e-20, 0.0), complex(-1e-20, -0.0)], np.complex64)
    out, ref = as_np(f(tl.tensor(a))), as_np(g(torch.tensor(a)))
    np.testing.assert_allclose(out, ref, rtol=1e-6)
    assert np.array_equal(np.signbit(out.imag), np.signbit(ref.imag))


NONFINITE = np.array([complex(INF, 0), complex(-INF, 0), complex(INF, 1), complex(-INF, 1), complex(NAN, 0),
                      complex(0, NAN), complex(1, INF), complex(-2, -INF)], np.complex64)


@pytest.mark.parametrize("name,keep", [
    ("exp", [0, 1, 2, 3, 5]), ("log", range(8)), ("sqrt", range(8)), ("reciprocal", range(6)),
    ("tanh", [0, 1, 2, 3, 4]), ("abs", [0, 1, 2, 3, 4, 5, 6, 7]), ("sinh", [0, 1, 4, 5]), ("cosh", [0, 4, 5]),
    ("sin", [0, 1, 4]), ("cos", [0, 1, 4]),
])
def test_non_finite_inputs_match_torch(name, keep):
    f, g = UNARY[name]
    a = NONFINITE[list(keep)]
    close(f(tl.tensor(a)), g(torch.tensor(a)), rtol=1e-6, atol=0)


@pytest.mark.parametrize("name", ["log1p", "expm1", "asin", "acos", "atan", "asinh", "acosh", "atanh"])
def test_inverse_functions_log1p_expm1_near_their_delicate_points(name):
    """Small arguments (log1p, expm1, asin, atan, asinh, atanh keep their digits), the branch points
    +-1 and +-i approached off the cuts, and large arguments, against torch."""
    f, g = UNARY[name]
    a = np.array([1e-4 + 2e-5j, -3e-6 - 1e-6j, 1e-20 + 1e-21j, 0.999 + 1e-3j, -1.001 - 2e-3j, 1e-3 + 0.999j,
                  -2e-3 - 1.002j, 2.5 + 0.5j, -0.5 + 3j, 100 - 200j, 3e5 + 4e5j], np.complex64)
    if name == "expm1":
        a = a[np.abs(a) < 80]  # e^x overflows beyond, in torch too
    out, ref = f(tl.tensor(a)), g(torch.tensor(a))
    np.testing.assert_allclose(as_np(out), as_np(ref), rtol=3e-6, atol=0)


def test_inverse_functions_route_real_tensors_to_the_real_primitives():
    x = np.array([0.25, -0.5, 0.75], np.float32)
    for name in ("asin", "acos", "atan", "asinh", "atanh", "log1p", "expm1", "arcsin", "arctanh"):
        out = getattr(tl, name)(tl.tensor(x))
        assert out.dtype is tl.float32
        np.testing.assert_allclose(out.numpy(), getattr(torch, name)(torch.tensor(x)).numpy(), rtol=2e-6)


def test_non_finite_predicates_and_nan_to_num():
    a = np.array([1 + 1j, complex(INF, 0), complex(0, -INF), complex(NAN, 1), complex(1, NAN), 0j], np.complex64)
    z, t = tl.tensor(a), torch.tensor(a)
    for fn in ("isnan", "isinf", "isfinite"):
        out = getattr(tl, fn)(z)
        assert out.dtype is tl.bool
        np.testing.assert_array_equal(out.numpy(), getattr(torch, fn)(t).numpy())
        np.testing.assert_array_equal(getattr(z, fn)().numpy(), getattr(t, fn)().numpy())
    close(tl.nan_to_num(z), torch.nan_to_num(t), rtol=0, atol=0)
    close(z.nan_to_num(nan=2.0, posinf=5.0, neginf=-5.0), t.nan_to_num(nan=2.0, posinf=5.0, neginf=-5.0), 0, 0)


def _grads(fn_tl, fn_torch, *arrays, tol=2e-4):
    """Values, and the gradients of L = sum(Re(out * w)) (or sum(out * w) for a real out), against torch."""
    xs = [tl.tensor(a, requires_grad=True) for a in arrays]
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    out, ref = fn_tl(*xs), fn_torch(*ts)
    close(out, ref, tol, tol)
    if ref.is_complex():
        w = crand(*ref.shape)
        (out * tl.tensor(w)).real.sum().backward()
        (ref * torch.tensor(w)).real.sum().backward()
    else:
        w = RNG.standard_normal(ref.shape).astype(np.float32)
        (out * tl.tensor(w)).sum().backward()
        (ref * torch.tensor(w)).sum().backward()
    for x, t in zip(xs, ts):
        close(x.grad, t.grad, tol, tol)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_gradients_match_torch(name):
    f, g = UNARY[name]
    a = crand(3, 5)
    a[0, :3] = [-2 + 0j, 3j, -1e-3 + 2e-3j]  # the negative real axis (upper side), the imaginary axis
    _grads(f, g, a)


def test_gradient_on_the_lower_side_of_the_cut():
    a = np.array([complex(-4, -0.0), complex(-0.5, -0.0)], np.complex64)
    for name in ("sqrt", "log", "pow_float"):
        _grads(*UNARY[name], a)


def test_gradients_at_zero_are_finite_where_torch_is():
    a = np.array([0j, 1 + 2j], np.complex64)
    for name in ("sgn", "abs", "exp", "sin", "tanh", "square"):
        _grads(*UNARY[name], a)


def test_gradients_for_huge_and_tiny_magnitudes():
    a = np.array([1e30 + 2e30j, -3e-30 + 1e-30j, 2e-25 - 1e-25j], np.complex64)
    for name in ("abs", "sgn", "log", "sqrt"):
        f, g = UNARY[name]
        z, t = tl.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
        w = crand(3)
        out, ref = f(z), g(t)
        close(out, ref, 1e-5, 0)
        loss = (out * tl.tensor(w)).real.sum() if ref.is_complex() else (out * tl.tensor(w.real.copy())).sum()
        loss_t = (ref * torch.tensor(w)).real.sum() if ref.is_complex() else (ref * torch.tensor(w.real.copy())).sum()
        loss.backward()
        loss_t.backward()
        gz, gt = as_np(z.grad), as_np(t.grad)
        assert np.all(np.isfinite(gz)), name
        np.testing.assert_allclose(gz, gt, rtol=1e-4, atol=0)


def test_tensor_exponents_both_sides():
    a, b = crand(2, 3), crand(3)
    _grads(lambda z, w: z ** w, lambda z, w: z ** w, a, b)
    _grads(lambda z, w: tl.pow(z, w), lambda z, w: torch.pow(z, w), a, b)
    x = np.abs(RNG.standard_normal((2, 3))).astype(np.float32) + 0.1
    _grads(lambda x, w: x ** w, lambda x, w: x ** w, x, b)  # a real base, a complex exponent
    _grads(lambda z, p: z ** p, lambda z, p: z ** p, a, RNG.standard_normal(3).astype(np.float32))
    _grads(lambda x: x ** (0.5 + 1j), lambda x: x ** (0.5 + 1j), x)
    _grads(lambda x: 1j ** x, lambda x: 1j ** x, RNG.standard_normal(4).astype(np.float32))
    _grads(lambda z: tl.pow(3.0, z), lambda z: torch.pow(3.0, z), a)
    _grads(lambda x: tl.pow(x, 2 - 1j), lambda x: torch.pow(x, 2 - 1j), x)


def test_zero_base_powers():
    a = np.array([0j, 1 + 1j], np.complex64)
    for p in (0.0, 0.3, 2.5, 1 + 1j, 2):
        close(tl.tensor(a) ** p, torch.tensor(a) ** p, 1e-5, 1e-6)


@pytest.mark.parametrize("name,fn", [
    ("prod_dim", lambda m: m.prod(1)), ("prod_dim_keep", lambda m: m.prod(dim=0, keepdim=True)),
    ("prod_all", lambda m: m.prod()), ("prod_neg", lambda m: m.prod(-1)),
    ("var", lambda m: m.var()), ("var_dim", lambda m: m.var(1)), ("std_dim", lambda m: m.std(0, keepdim=True)),
    ("var_corr", lambda m: m.var(dim=1, correction=0)), ("std_all", lambda m: m.std()),
    ("norm", lambda m: m.norm()), ("norm_dim", lambda m: m.norm(dim=1)),
    ("norm_p1", lambda m: m.norm(p=1, dim=0)), ("norm_p3", lambda m: m.norm(3)),
    ("abs_sum", lambda m: m.abs().square().sum(0)),
])
def test_reductions_match_torch(name, fn):
    a = crand(3, 5)
    a[1, 2] = 0  # a zero factor: prod's gradient must stay exact
    _grads(fn, fn, a)


def test_functional_reductions_and_vector_norm():
    a = crand(4, 3)
    _grads(lambda z: tl.prod(z, 0), lambda z: torch.prod(z, 0), a)
    _grads(lambda z: tl.var(z, 0), lambda z: torch.var(z, 0), a)
    _grads(lambda z: tl.std(z), lambda z: torch.std(z), a)
    _grads(lambda z: tl.norm(z, dim=0, keepdim=True), lambda z: torch.norm(z, dim=0, keepdim=True), a)
    for kw in ({}, {"dim": 1}, {"ord": 1, "dim": 0, "keepdim": True}, {"ord": float("inf")}, {"ord": 3, "dim": -1}):
        _grads(lambda z: tl.linalg.vector_norm(z, **kw), lambda z: torch.linalg.vector_norm(z, **kw), a)
    v, m = tl.var_mean(tl.tensor(a), 1)
    vt, mt = torch.var_mean(torch.tensor(a), 1)
    close(v, vt)
    close(m, mt)


def test_odd_lengths_and_empty_prod():
    a = crand(7, 1)
    _grads(lambda z: z.prod(0), lambda z: z.prod(0), a)
    close(tl.tensor(np.zeros((0, 2), np.complex64)).prod(0), torch.tensor(np.zeros((0, 2), np.complex64)).prod(0))


def test_dot_vdot_inner_outer():
    a, b = crand(5), crand(5)
    for name in ("dot", "vdot", "inner", "outer"):
        _grads(getattr(tl, name), getattr(torch, name), a, b)
        _grads(lambda x, y: getattr(x, name)(y), lambda x, y: getattr(x, name)(y), a, b)
    _grads(tl.inner, torch.inner, crand(2, 4), crand(3, 4))
    x = RNG.standard_normal(5).astype(np.float32)
    close(tl.dot(tl.tensor(x), tl.tensor(a)), torch.dot(torch.tensor(x).to(torch.cfloat), torch.tensor(a)))
    close(tl.vdot(tl.tensor(a), tl.tensor(x)), torch.vdot(torch.tensor(a), torch.tensor(x).to(torch.cfloat)))


def test_conj_resolution_is_identity():
    z, t = tl.tensor(crand(3)), torch.tensor(crand(3))
    assert tl.resolve_neg(z) is z and z.resolve_neg() is z and tl.resolve_conj(z) is z
    assert not z.is_conj() and not z.is_neg()
    close(tl.conj_physical(tl.tensor(t.numpy())), torch.conj_physical(t))
    x = tl.ones(2)
    assert tl.resolve_neg(x) is x


def _fd(fn, a, eps=1e-2):
    """Autograd of L = sum(Re(fn(z) * w)) against central differences in the real view."""
    w = crand(*as_np(fn(tl.tensor(a))).shape)

    def loss(v):
        out = fn(tl.tensor(v))
        return float(((out * tl.tensor(w)).real if isinstance(out, tl.complex_tensor.ComplexTensor)
                      else out * tl.tensor(w.real.copy())).sum().item())
    z = tl.tensor(a, requires_grad=True)
    out = fn(z)
    ((out * tl.tensor(w)).real if isinstance(out, tl.complex_tensor.ComplexTensor)
     else out * tl.tensor(w.real.copy())).sum().backward()
    fd = np.zeros_like(a)
    for idx in np.ndindex(a.shape):
        for unit in (1, 1j):
            p, m = a.copy(), a.copy()
            p[idx] += eps * unit
            m[idx] -= eps * unit
            fd[idx] += (loss(p) - loss(m)) / (2 * eps) * unit
    np.testing.assert_allclose(z.grad.numpy(), fd, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("fn", [
    lambda z: tl.log(z) * tl.sqrt(z), lambda z: tl.tanh(z) + tl.sin(z) * tl.cosh(z), lambda z: z ** 0.7,
    lambda z: tl.sigmoid(z).prod(), lambda z: tl.sgn(z) + tl.reciprocal(z), lambda z: tl.std(z),
])
def test_finite_differences(fn):
    _fd(fn, crand(2, 2) + (1 + 1j))


def test_real_sinh_cosh():
    x = np.array([-30.0, -2.0, -1e-4, 0.0, 1e-6, 0.5, 20.0], np.float32)
    for name in ("sinh", "cosh"):
        a, t = tl.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        out, ref = getattr(tl, name)(a), getattr(torch, name)(t)
        close(out, ref, 2e-6, 0)
        out.sum().backward()
        ref.sum().backward()
        close(a.grad, t.grad, 2e-6, 1e-7)  # d cosh = (e^x - e^-x) / 2 cancels near 0


def test_what_stays_unsupported_says_so():
    z = tl.tensor(crand(3))
    with pytest.raises(NotSupportedError, match=r"^sign: complex tensors are not supported by sign .*sgn"):
        tl.sign(z)
    with pytest.raises(NotSupportedError, match=r"^sign: .*use sgn"):
        z.sign()
    with pytest.raises(NotSupportedError, match=r"^erf: complex tensors are not supported by erf"):
        tl.erf(z)  # (torch has no complex erf either)
    with pytest.raises(NotSupportedError, match=r"ComplexTensor\.erf: not supported on complex tensors"):
        z.erf()
    with pytest.raises(DTypeError, match=r"^pow: expected a number or a Tensor for exponent, got str"):
        tl.pow(z, "2")
    with pytest.raises(DTypeError, match=r"^prod: dtype"):
        z.prod(dtype=tl.float32)
