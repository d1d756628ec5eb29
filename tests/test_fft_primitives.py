"""The fft family's primitives (fftn_c2c, rfftn_r2c, irfftn_c2r) and their ops' VJPs.

* Parity against the float64 spec through the primitive table (random and edge cases) on every
  device, within the contracts; contracts that reject wrong kernels.
* The spec itself against numpy.fft (an independent reference), irfftn_c2r included for spectra
  that are not Hermitian along the leading axes (NumPy's irfftn semantics).
* The ops' VJPs against float64 central differences of numpy.fft references, for 1, 2 and 3 axes,
  odd and even lengths, lengths 1, and scales other than 1.
* Errors name the primitive and the argument.
"""

from __future__ import annotations

import math
import sys
import zlib

import numpy as np
import pytest

import torchlean as tl
from torchlean import spec
from torchlean.errors import ArgumentError, ShapeError
from torchlean.ops import fft as F
from torchlean.runtime import Buffer
from torchlean.runtime import primitives as P
from torchlean.testing.primitive_table import TABLE, run_case

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
F32 = np.float32
NAMES = ("fftn_c2c", "rfftn_r2c", "irfftn_c2r")


def rng_for(*key) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def up(a, device="cpu") -> Buffer:
    return Buffer.from_numpy(np.asarray(a, dtype=F32).reshape(-1), device)


def _cplx(a):
    a = np.asarray(a, np.float64)
    return a[..., 0] + 1j * a[..., 1]


# -- parity through the table --------------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_table_edge_cases(name, device):
    info = TABLE[name]
    for args in info.edge_cases:
        verdict, _, _ = run_case(info, [a.copy() if isinstance(a, np.ndarray) else a for a in args], device)
        assert verdict.ok, f"{name} {args[1:]}: {verdict.detail}"


@pytest.mark.parametrize("name", NAMES)
def test_table_random_cases(name, device):
    info = TABLE[name]
    for seed in range(40):
        rng = rng_for(name, seed)
        dims = tuple(int(v) for v in rng.integers(0, info.max_dim + 1, size=info.ndims))
        for kind in info.kinds:
            args = info.sample(rng, dims, kind)
            verdict, _, _ = run_case(info, args, device)
            assert verdict.ok, f"{name} {kind} {args[1:]}: {verdict.detail}"


# -- the spec against numpy.fft ------------------------------------------------------------------------
@pytest.mark.parametrize("dims", [(1,), (6,), (7,), (4, 5), (3, 1, 6), (2, 3, 7)])
def test_spec_is_numpy(dims):
    rng = rng_for("spec", dims)
    b, ax = 2, tuple(range(1, 1 + len(dims)))
    z = rng.standard_normal((b,) + dims + (2,))
    for inverse in (False, True):
        ref = (np.fft.ifftn(_cplx(z), axes=ax) * math.prod(dims) if inverse else np.fft.fftn(_cplx(z), axes=ax)) * 0.5
        got = _cplx(spec.fftn_c2c(z.reshape(-1), b, dims, inverse, 0.5).reshape(z.shape))
        np.testing.assert_allclose(got, ref, atol=1e-12)
    x = rng.standard_normal((b,) + dims)
    X = np.fft.rfftn(x, axes=ax)
    np.testing.assert_allclose(_cplx(spec.rfftn_r2c(x.reshape(-1), b, dims, 1.0).reshape(X.shape + (2,))), X,
                               atol=1e-12)
    s = rng.standard_normal(X.shape + (2,))  # not Hermitian along the leading axes
    ref = np.fft.irfftn(_cplx(s), s=dims, axes=ax) * math.prod(dims) * 3.0
    np.testing.assert_allclose(spec.irfftn_c2r(s.reshape(-1), b, dims, 3.0).reshape(ref.shape), ref, atol=1e-11)


def test_irfftn_is_numpy_for_non_hermitian_spectra(device):
    rng = rng_for("nonherm")
    dims = (4, 3, 6)
    s = rng.standard_normal((2, 4, 3, 4, 2)).astype(F32)
    s[:, 1:, :, 0, 1] += 5.0  # large imaginary parts of the last axis's bin 0 away from the leading origin
    got = P.irfftn_c2r(up(s, device), 2, dims, 1.0).to_numpy().reshape((2,) + dims)
    ref = np.fft.irfftn(_cplx(s), s=dims, axes=(1, 2, 3)) * math.prod(dims)
    np.testing.assert_allclose(got, ref, atol=2e-4 * np.abs(ref).max())


def test_known_answers(device):
    y = P.fftn_c2c(up([1, 0, 2, 0, 3, 0, 4, 0], device), 1, (4,), False, 1.0).to_numpy().reshape(4, 2)
    np.testing.assert_array_equal(y, np.array([[10, 0], [-2, 2], [-2, 0], [-2, -2]], F32))
    back = P.fftn_c2c(up(y, device), 1, (4,), True, 0.25).to_numpy().reshape(4, 2)
    np.testing.assert_array_equal(back[:, 0], [1, 2, 3, 4])
    r = P.rfftn_r2c(up([1, 2, 3, 4], device), 1, (2, 2), 1.0).to_numpy().reshape(2, 2, 2)
    np.testing.assert_array_equal(r[..., 0], [[10, -2], [-4, 0]])
    one = P.irfftn_c2r(up([8, 9, 1, 2], device), 1, (2, 1), 0.5).to_numpy()
    np.testing.assert_array_equal(one, [4.5, 3.5])  # Re of the leading inverse, halved


def test_results_are_new_buffers():
    x = up(np.arange(8))
    for out in (P.fftn_c2c(x, 4, (1,), False, 1.0), P.fftn_c2c(x, 4, (1,), True, 1.0), P.rfftn_r2c(x, 8, (1,), 1.0)):
        assert not np.shares_memory(out._data, x._data)
    assert not np.shares_memory(P.irfftn_c2r(x, 4, (1,), 1.0)._data, x._data)


# -- contracts reject wrong kernels ---------------------------------------------------------------------
def _c2c_wrong_sign(x, batch, dims, inverse, scale):
    return sys.modules["torchlean.kernels.cpu.fft"].fftn_c2c(x, batch, dims, not inverse, scale)


def _r2c_unscaled(x, batch, dims, scale):
    return sys.modules["torchlean.kernels.cpu.fft"].rfftn_r2c(x, batch, dims, 1.0)


def _c2r_hermitian_leading(spec_, batch, dims, scale):
    """irfftn taken as cuFFT-style full Hermitian extension: drops the leading imaginary parts of bin 0."""
    s = spec_.reshape(batch, -1, dims[-1] // 2 + 1, 2).copy()
    s[:, :, 0, 1] = 0
    return sys.modules["torchlean.kernels.cpu.fft"].irfftn_c2r(s.reshape(-1), batch, dims, scale)


_R = np.random.default_rng(3)
FAKES = [
    ("fftn_c2c", _c2c_wrong_sign, [_R.standard_normal(2 * 12 * 2).astype(F32), 2, (3, 4), False, 1.0]),
    ("rfftn_r2c", _r2c_unscaled, [_R.standard_normal(2 * 12).astype(F32), 2, (3, 4), 0.5]),
    ("irfftn_c2r", _c2r_hermitian_leading, [_R.standard_normal(4 * 3 * 2).astype(F32), 1, (4, 4), 1.0]),
]


@pytest.mark.parametrize("name, fake, args", FAKES, ids=[f[1].__name__ for f in FAKES])
def test_contract_catches_wrong_kernel(monkeypatch, name, fake, args):
    cpu = sys.modules["torchlean.kernels.cpu"]
    monkeypatch.setattr(cpu, name, fake)
    verdict, _, _ = run_case(TABLE[name], args, "cpu")
    assert not verdict.ok, f"the contract of {name} accepted a wrong kernel ({fake.__name__})"


# -- VJPs of the ops against central differences ----------------------------------------------------------
def _np_c2c(z2, k, inverse, scale):
    ax = tuple(range(z2.ndim - 1 - k, z2.ndim - 1))
    z = _cplx(z2)
    y = np.fft.ifftn(z, axes=ax) * math.prod(z.shape[a] for a in ax) if inverse else np.fft.fftn(z, axes=ax)
    y = y * scale
    return np.stack([y.real, y.imag], -1)


def _np_r2c(x, k, scale):
    y = np.fft.rfftn(x, axes=tuple(range(x.ndim - k, x.ndim))) * scale
    return np.stack([y.real, y.imag], -1)


def _np_c2r(s2, k, n, scale):
    ax = tuple(range(s2.ndim - 1 - k, s2.ndim - 1))
    shape = tuple(s2.shape[a] for a in ax[:-1]) + (n,)
    return np.fft.irfftn(_cplx(s2), s=shape, axes=ax) * math.prod(shape) * scale


def _fd(f, x, w, h=1e-3):
    g = np.zeros(x.size)
    flat = x.reshape(-1)
    for i in range(x.size):
        e = np.zeros(x.size)
        e[i] = h
        g[i] = (np.sum(f((flat + e).reshape(x.shape)) * w) - np.sum(f((flat - e).reshape(x.shape)) * w)) / (2 * h)
    return g.reshape(x.shape)


def _tape_grad(op, x, w, device):
    t = tl.tensor(x.astype(F32), device=device, requires_grad=True)
    (op(t) * tl.tensor(w.astype(F32), device=device)).sum().backward()
    return t.grad.numpy()


SIGNALS = [(1,), (5,), (6,), (3, 4), (4, 1, 5), (2, 3, 4), (1, 1)]


@pytest.mark.parametrize("dims", SIGNALS)
@pytest.mark.parametrize("scale", [1.0, 0.3])
def test_vjp_matches_fd(dims, scale, device):
    rng = rng_for("vjp", dims, scale)
    k, lead = len(dims), (2,)
    tol = dict(atol=2e-4 * math.prod(dims), rtol=1e-4)
    for inverse in (False, True):
        z = rng.standard_normal(lead + dims + (2,))
        w = rng.standard_normal(z.shape)
        got = _tape_grad(lambda t: F.fftn_c2c(t, k, inverse, scale), z, w, device)
        np.testing.assert_allclose(got, _fd(lambda a: _np_c2c(a, k, inverse, scale), z, w), **tol)
    x = rng.standard_normal(lead + dims)
    w = rng.standard_normal(lead + dims[:-1] + (dims[-1] // 2 + 1, 2))
    got = _tape_grad(lambda t: F.rfftn_r2c(t, k, scale), x, w, device)
    np.testing.assert_allclose(got, _fd(lambda a: _np_r2c(a, k, scale), x, w), **tol)
    s = rng.standard_normal(w.shape)
    wy = rng.standard_normal(lead + dims)
    got = _tape_grad(lambda t: F.irfftn_c2r(t, k, dims[-1], scale), s, wy, device)
    np.testing.assert_allclose(got, _fd(lambda a: _np_c2r(a, k, dims[-1], scale), s, wy), **tol)


def test_c2r_gradient_is_exactly_zero_on_ignored_imaginary_parts():
    dims = (4, 3, 6)
    s = tl.tensor(rng_for("zero").standard_normal((4, 3, 4, 2)).astype(F32), requires_grad=True)
    (F.irfftn_c2r(s, 3, 6, 1.0) * tl.tensor(rng_for("w").standard_normal(dims).astype(F32))).sum().backward()
    g = s.grad.numpy()
    for i in (0, 2):          # leading length 4: indices 0 and 2
        for k in (0, 3):      # last length 6: bins 0 and 3
            assert g[i, 0, k, 1] == 0.0
    assert np.abs(g[1, 0, 0, 1]) > 0 and np.abs(g[0, 1, 0, 1]) > 0  # these do reach the output


# -- errors ------------------------------------------------------------------------------------------------
def _buf(n):
    return Buffer.from_numpy(np.zeros(n, F32))


@pytest.mark.parametrize("call, exc, words", [
    (lambda: P.fftn_c2c(_buf(15), 2, (4,), False, 1.0), ShapeError, ["fftn_c2c", "argument x", "16"]),
    (lambda: P.fftn_c2c(_buf(8), 1, (), False, 1.0), ArgumentError, ["fftn_c2c", "dims", "1, 2 or 3"]),
    (lambda: P.fftn_c2c(_buf(8), 1, (1, 1, 1, 4), False, 1.0), ArgumentError, ["dims", "1, 2 or 3"]),
    (lambda: P.fftn_c2c(_buf(0), 1, (0, 4), False, 1.0), ArgumentError, ["dims", ">= 1"]),
    (lambda: P.fftn_c2c(_buf(8), 1, (4,), 1, 1.0), ArgumentError, ["inverse", "bool"]),
    (lambda: P.rfftn_r2c(_buf(8), 1, (4,), "x"), ArgumentError, ["rfftn_r2c", "scale"]),
    (lambda: P.rfftn_r2c(_buf(8), -1, (4,), 1.0), ShapeError, ["rfftn_r2c", "batch"]),
    (lambda: P.irfftn_c2r(_buf(8), 1, (3, 4), 1.0), ShapeError, ["irfftn_c2r", "spec", "18"]),
    (lambda: F.irfftn_c2r(tl.zeros(3, 2), 1, 6, 1.0), ShapeError, ["irfftn_c2r", "4 bins"]),
    (lambda: F.fftn_c2c(tl.zeros(3, 3), 1, False, 1.0), ShapeError, ["fftn_c2c", "(..., 2)"]),
    (lambda: F.rfftn_r2c(tl.zeros(3, 3), 4, 1.0), ArgumentError, ["rfftn_r2c", "k"]),
])
def test_primitive_and_op_errors(call, exc, words):
    with pytest.raises(exc) as info:
        call()
    for w in words:
        assert w in str(info.value), f"{w!r} not in {info.value}"
