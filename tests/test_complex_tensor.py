"""complex64 tensors against torch 2.13 (CPU): values, and gradients (``z.grad`` is PyTorch's
conjugate-Wirtinger gradient dL/dx + i dL/dy, the real view's gradient), plus finite differences."""

from __future__ import annotations

import numpy as np
import pytest

import torchlean as tl
from torchlean.errors import DTypeError, NotSupportedError, ShapeError

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(0)


def crand(*shape):
    return (RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)).astype(np.complex64)


def pair(arr, grad=True):
    """The same complex values as a torchlean and a torch leaf."""
    a = np.asarray(arr)
    t = torch.tensor(a, requires_grad=grad)
    x = tl.tensor(a, requires_grad=grad)
    return x, t


def close(a, b, tol=1e-5):
    a = a.numpy() if hasattr(a, "numpy") and not isinstance(a, np.ndarray) else np.asarray(a)
    b = b.detach().resolve_conj().numpy() if hasattr(b, "detach") else np.asarray(b)
    assert a.shape == b.shape, (a.shape, b.shape)
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


def test_dtype_names_and_predicates():
    assert tl.cfloat is tl.complex64
    z = tl.zeros(2, 3, dtype=tl.cfloat)
    assert z.dtype is tl.complex64 and tl.is_complex(z) and z.is_complex()
    x = tl.zeros(2)
    assert not tl.is_complex(x) and not x.is_complex()
    assert tl.is_tensor(x)
    with pytest.raises(AttributeError, match="complex64"):
        tl.complex128  # noqa: B018
    with pytest.raises(DTypeError, match="complex128"):
        tl.zeros(2, dtype="complex128")


def test_factories():
    assert tl.zeros(2, 3, dtype=tl.cfloat).numpy().dtype == np.complex64
    close(tl.ones((2, 2), dtype=tl.cfloat), torch.ones(2, 2, dtype=torch.cfloat))
    close(tl.full((2,), 1 + 2j), torch.full((2,), 1 + 2j))
    z = tl.empty(3, dtype=tl.cfloat, requires_grad=True)
    assert z.shape == (3,) and z.requires_grad and z.is_leaf
    for like in (tl.zeros_like, tl.ones_like, tl.empty_like):
        out = like(z)
        assert isinstance(out, tl.complex_tensor.ComplexTensor) and out.shape == (3,)
    assert tl.zeros_like(tl.zeros(2), dtype=tl.cfloat).is_complex()
    assert not tl.zeros_like(z, dtype=tl.float32).is_complex()
    data = [[1 + 2j, 3], [0, -1j]]
    close(tl.tensor(data), torch.tensor(data))
    a = crand(2, 3)
    close(tl.from_numpy(a), torch.from_numpy(a))
    close(tl.tensor(a.astype(np.complex128)), a)
    close(tl.tensor([1.0, 2.0], dtype=tl.cfloat), torch.tensor([1.0, 2.0], dtype=torch.cfloat))
    assert tl.tensor([1, 2]).dtype is tl.int64  # real data keeps the real path


def test_rand_randn_follow_the_generator_and_variance():
    tl.manual_seed(3)
    a = tl.randn(4000, dtype=tl.cfloat)
    tl.manual_seed(3)
    b = tl.randn(4000, dtype=tl.cfloat)
    assert np.array_equal(a.numpy(), b.numpy())
    v = a.numpy()
    assert abs(v.real.var() - 0.5) < 0.05 and abs(v.imag.var() - 0.5) < 0.05  # PyTorch: variance 1/2 each
    g = tl.Generator().manual_seed(1)
    u = tl.rand(2000, dtype=tl.cfloat, generator=g, requires_grad=True).numpy()
    assert u.real.min() >= 0 and u.real.max() < 1 and u.imag.min() >= 0 and 0.4 < u.imag.mean() < 0.6
    assert tl.randn_like(tl.zeros(3, dtype=tl.cfloat)).is_complex()


def test_views_parts_and_functions():
    a = crand(3, 4)
    z, t = pair(a)
    r = tl.view_as_real(z)
    assert r.shape == (3, 4, 2) and r is z.real_view()
    close(r, torch.view_as_real(t))
    assert tl.view_as_complex(r).real_view() is r
    with pytest.raises(ShapeError, match="last dimension of size 2"):
        tl.view_as_complex(tl.zeros(3, 3))
    close(z.real, t.real)
    close(z.imag, t.imag)
    close(tl.real(z), torch.real(t))
    close(z.conj(), t.conj().resolve_conj())
    close(tl.conj(z), torch.conj(t).resolve_conj())
    close(z.abs(), t.abs())
    close(tl.angle(z), torch.angle(t))
    re, im = tl.tensor(a.real.copy()), tl.tensor(a.imag.copy())
    close(tl.complex(re, im), torch.complex(torch.tensor(a.real), torch.tensor(a.imag)))
    ab, an = tl.tensor(np.abs(a)), tl.tensor(np.angle(a))
    close(tl.polar(ab, an), torch.polar(torch.tensor(np.abs(a)), torch.tensor(np.angle(a))))


def _grad_check(fn_tl, fn_torch, *arrays, real_args=(), tol=1e-4):
    """Values and gradients of a real loss (sum of |out|^2-weighted parts) against torch."""
    pairs = [pair(a) for a in arrays]
    rpairs = [(tl.tensor(b, requires_grad=True), torch.tensor(b, requires_grad=True)) for b in real_args]
    out_tl = fn_tl(*[p[0] for p in pairs], *[p[0] for p in rpairs])
    out_t = fn_torch(*[p[1] for p in pairs], *[p[1] for p in rpairs])
    close(out_tl, out_t, tol)
    w = crand(*out_t.shape) if out_t.is_complex() else RNG.standard_normal(out_t.shape).astype(np.float32)
    if out_t.is_complex():  # L = sum(Re(out * w)): exercises both parts of the gradient
        loss_tl = (out_tl * tl.tensor(w)).real.sum()
        loss_t = (out_t * torch.tensor(w)).real.sum()
    else:
        loss_tl = (out_tl * tl.tensor(w)).sum()
        loss_t = (out_t * torch.tensor(w)).sum()
    loss_tl.backward()
    loss_t.backward()
    for a, b in [*pairs, *rpairs]:
        close(a.grad, b.grad, tol)


@pytest.mark.parametrize("name,fn", [
    ("add", lambda a, b: a + b), ("sub", lambda a, b: a - b), ("mul", lambda a, b: a * b),
    ("div", lambda a, b: a / b), ("rsub_scalar", lambda a, b: (2 - 1j) - a * b),
    ("scalar_ops", lambda a, b: (a * 1j + 2.5) / (1 + 2j) - b * 3),
    ("rdiv", lambda a, b: 1.5 / b + a), ("neg", lambda a, b: -a + b), ("pow", lambda a, b: a ** 3 + b ** -1),
])
def test_arithmetic_grads(name, fn):
    _grad_check(fn, fn, crand(2, 3), crand(3))


def test_mixed_real_operands_grads():
    fn = lambda z, x: z * x + x / (z + 3) - (x - z) + 2 * z  # noqa: E731
    _grad_check(fn, fn, crand(2, 3), real_args=(RNG.standard_normal((3,)).astype(np.float32),))


@pytest.mark.parametrize("name,fn", [
    ("abs", lambda z: z.abs()), ("angle", lambda z: z.angle()), ("conj", lambda z: z.conj() * 1),
    ("real", lambda z: z.real * 1), ("imag", lambda z: z.imag * 1),
    ("sum", lambda z: z.sum(1)), ("sum_all", lambda z: z.sum()), ("mean", lambda z: z.mean(dim=0, keepdim=True)),
    ("mean_neg", lambda z: z.mean(-1)),
])
def test_unary_grads(name, fn):
    _grad_check(fn, fn, crand(3, 4))


def test_abs_and_angle_grad_at_zero_is_zero_like_torch():
    a = np.array([0j, 1 + 1j], np.complex64)
    z, t = pair(a)
    (z.abs().sum() + z.angle().sum()).backward()
    (t.abs().sum() + t.angle().sum()).backward()
    close(z.grad, t.grad)
    assert np.all(np.isfinite(z.grad.numpy()))


def test_shape_ops():
    a = crand(2, 3, 4)
    z, t = pair(a, grad=False)
    close(z.reshape(6, 4), t.reshape(6, 4))
    close(z.view(-1), t.view(-1))
    close(z.permute(2, 0, 1), t.permute(2, 0, 1))
    close(z.transpose(0, -1), t.transpose(0, -1))
    close(z.unsqueeze(-1), t.unsqueeze(-1))
    close(z.unsqueeze(0).squeeze(0), t)
    close(z.flatten(1), t.flatten(1))
    close(z[:, :1].expand(2, 3, 4), t[:, :1].expand(2, 3, 4))
    close(z.repeat(2, 1, 1), t.repeat(2, 1, 1))
    close(z.contiguous().clone().detach(), t)
    close(tl.cat([z, z], dim=-1), torch.cat([t, t], dim=-1))
    close(tl.stack([z, z], dim=1), torch.stack([t, t], dim=1))
    close(z.to("cpu").cpu(), t)
    close(z.mT, t.mT)
    close(tl.sum(z, dim=(0, 2)), torch.sum(t, dim=(0, 2)))
    close(tl.reshape(z, (4, 6)), torch.reshape(t, (4, 6)))
    assert len(z) == 2 and len(list(z)) == 2
    np.testing.assert_array_equal(np.asarray(z), a)
    assert z[0, 0, 0].item() == complex(a[0, 0, 0])
    assert z.tolist() == t.tolist()
    assert "j" in repr(z)


def test_getitem_fno_pattern_and_grads():
    a = crand(2, 3, 8, 5)
    fn = lambda x: tl.cat([x[:, :, :2, :3], x[:, :, -2:, :3]], dim=2)  # noqa: E731
    fn_t = lambda x: torch.cat([x[:, :, :2, :3], x[:, :, -2:, :3]], dim=2)  # noqa: E731
    _grad_check(fn, fn_t, a)
    z, t = pair(a, grad=False)
    close(z[..., 1], t[..., 1])
    close(z[None, 0, ..., ::2], t[None, 0, ..., ::2])


def test_setitem_fno_pattern_grads():
    a, w = crand(2, 3, 6, 4), crand(3, 5, 2, 3)

    def fno(tlib):
        def f(x, wt):
            out = tlib.zeros(2, 5, 6, 4, dtype=tlib.cfloat)
            out[:, :, :2, :3] = tlib.einsum("bixy,ioxy->boxy", x[:, :, :2, :3], wt)
            out[:, :, -2:, :3] = tlib.einsum("bixy,ioxy->boxy", x[:, :, -2:, :3], wt)
            return out
        return f
    _grad_check(fno(tl), fno(torch), a, w)


def test_setitem_scalar_and_real_values():
    z, t = pair(crand(3, 2), grad=False)
    z[0] = 1 + 1j
    t[0] = 1 + 1j
    z[1, 1] = tl.tensor(2.0)
    t[1, 1] = torch.tensor(2.0)
    close(z, t)


@pytest.mark.parametrize("eq,shapes,cplx", [
    ("bixy,ioxy->boxy", [(2, 3, 4, 2), (3, 5, 4, 2)], (True, True)),
    ("ij,jk->ik", [(3, 4), (4, 2)], (True, False)),
    ("ij,jk->ik", [(3, 4), (4, 2)], (False, True)),
])
def test_einsum_grads(eq, shapes, cplx):
    arrays = [crand(*s) for s, c in zip(shapes, cplx) if c]
    reals = [RNG.standard_normal(s).astype(np.float32) for s, c in zip(shapes, cplx) if not c]

    def run(lib):
        def f(*xs):
            it_c, it_r = iter(xs[:len(arrays)]), iter(xs[len(arrays):])
            ops = [next(it_c) if c else next(it_r) for c in cplx]
            if lib is torch:  # torch's einsum wants one dtype: the real operand as complex (its grad stays real)
                ops = [o if o.is_complex() else o.to(torch.cfloat) for o in ops]
            return lib.einsum(eq, *ops)
        return f
    _grad_check(run(tl), run(torch), *arrays, real_args=reals)


def test_matmul_grads():
    f = lambda a, b: a @ b + a.matmul(b) * 2  # noqa: E731
    _grad_check(f, f, crand(2, 3, 4), crand(4, 5))
    x = tl.tensor(RNG.standard_normal((2, 3)).astype(np.float32))
    z = tl.tensor(crand(3, 2))
    close(x @ z, torch.tensor(x.numpy()).to(torch.cfloat) @ torch.tensor(z.numpy()))
    close(tl.matmul(x, z), torch.tensor(x.numpy()).to(torch.cfloat) @ torch.tensor(z.numpy()))


def _fd_vjp(fn, a, eps=1e-2):
    """Finite-difference gradient of L = sum(Re(fn(z) * w)) in the real view, against autograd."""
    w = crand(*fn(tl.tensor(a)).shape)
    loss = lambda v: float((fn(tl.tensor(v)) * tl.tensor(w)).real.sum().item())  # noqa: E731
    z = tl.tensor(a, requires_grad=True)
    (fn(z) * tl.tensor(w)).real.sum().backward()
    g = z.grad.numpy()
    fd = np.zeros_like(a)
    for idx in np.ndindex(a.shape):
        for unit in (1, 1j):
            p, m = a.copy(), a.copy()
            p[idx] += eps * unit
            m[idx] -= eps * unit
            d = (loss(p) - loss(m)) / (2 * eps)
            fd[idx] += d * unit
    np.testing.assert_allclose(g, fd, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("fn", [
    lambda z: tl.einsum("ij,jk->ik", z, z.T), lambda z: z * z.conj() + z, lambda z: z / (z + 4),
    lambda z: z.abs() * 1.0 + 0j * 0, lambda z: _set_rows(z),
])
def test_finite_difference_vjp(fn):
    _fd_vjp(fn, crand(2, 2))


def _set_rows(z):
    out = tl.zeros(3, 2, dtype=tl.cfloat)
    out[1:] = z * 2
    return out


def test_inplace_under_no_grad():
    z, t = pair(crand(2, 3), grad=False)
    with tl.no_grad():
        z.mul_(1 + 2j).add_(1).sub_(tl.tensor([1.0, 2.0, 3.0])).div_(2j)
    with torch.no_grad():
        t.mul_(1 + 2j).add_(1).sub_(torch.tensor([1.0, 2.0, 3.0])).div_(2j)
    close(z, t)
    p = tl.zeros(2, dtype=tl.cfloat, requires_grad=True)
    with pytest.raises(tl.TorchLeanError, match="mul_"):
        p.mul_(2)


def test_comparisons():
    z = tl.tensor([1 + 1j, 2j])
    assert tl.allclose(z, tl.tensor([1 + 1j, 2j + 1e-9]))
    assert tl.equal(z, tl.tensor([1 + 1j, 2j])) and not tl.equal(z, tl.tensor([1 + 1j, 2]))
    assert (z == tl.tensor([1 + 1j, 0])).tolist() == [True, False]


def test_real_ops_refuse_complex_naming_the_op():
    z = tl.zeros(2, 3, dtype=tl.cfloat)
    with pytest.raises(NotSupportedError, match=r"^relu: complex tensors are not supported by relu"):
        tl.relu(z)
    with pytest.raises(NotSupportedError, match=r"^linear: complex tensors are not supported by linear"):
        tl.nn.functional.linear(z, tl.zeros(2, 3))
    with pytest.raises(NotSupportedError, match=r"^erf: complex tensors are not supported by erf"):
        tl.erf(z)
    with pytest.raises(NotSupportedError, match="complex tensors are not supported"):
        tl.maximum(tl.zeros(3), z)
    with pytest.raises(NotSupportedError, match=r"ComplexTensor\.relu: not supported on complex tensors"):
        z.relu()
    with pytest.raises(DTypeError, match="expected a number or a Tensor for exponent"):
        tl.pow(z, "0.5")
    with pytest.raises(tl.AutogradError, match="complex output"):
        (z * 1).backward()


def test_real_tensor_with_complex_scalar_gives_complex():
    fn = lambda x: x * 1j + (2 - 1j) / (x + 3) - 1j * x + (x - 1j)  # noqa: E731
    a = RNG.standard_normal((4,)).astype(np.float32)
    x, t = tl.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    out, out_t = fn(x), fn(t)
    close(out, out_t)
    (out * tl.tensor(crand(4))).real.sum().backward()


def test_real_tensor_to_cfloat_and_is_tensor():
    a = RNG.standard_normal((3,)).astype(np.float32)
    x, t = tl.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    z, zt = x.to(tl.cfloat), t.to(torch.cfloat)
    close(z, zt)
    (z * tl.tensor(crand(3))).real.sum().backward()
    assert x.grad.shape == (3,)
    assert tl.is_tensor(z) and not tl.is_tensor(a)


def test_functions_without_a_complex_form_name_themselves():
    with pytest.raises(DTypeError, match=r"^arange: dtype torchlean.complex64 is not supported by arange"):
        tl.arange(3, dtype=tl.cfloat)
