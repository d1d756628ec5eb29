"""torchlean.fft against torch.fft (torch 2.13, CPU, the oracle): values and gradients of every
transform for odd and even lengths, length 1, empty batches, dims in any order and position, n/s
padding and trimming, and all norms; fftshift/ifftshift, fftfreq/rfftfreq; errors naming the call.

Gradients: the same real loss sum(view_as_real(y) * W) (or sum(y * W) for real y) on both sides,
compared on the input's gradient (the real view's gradient for complex inputs: PyTorch's z.grad).
"""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest

import torchlean as tl
from torchlean.complex_tensor import ComplexTensor
from torchlean.errors import ArgumentError, AxisError, DTypeError, NotSupportedError

torch = pytest.importorskip("torch")
F32 = np.float32
C2C = ("fft", "ifft", "fft2", "ifft2", "fftn", "ifftn")
NORMS = (None, "backward", "ortho", "forward")


def rng_for(*key) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def _inputs(kind, shape, device, rng):
    """(ours, torch's, leaf to read the gradient from on each side)."""
    if kind == "real":
        a = rng.standard_normal(shape).astype(F32)
        ours = tl.tensor(a, device=device, requires_grad=True)
        theirs = torch.tensor(a, requires_grad=True)
        return ours, theirs, ours, theirs
    a = rng.standard_normal(tuple(shape) + (2,)).astype(F32)
    rv = tl.tensor(a, device=device, requires_grad=True)
    trv = torch.tensor(a, requires_grad=True)
    return ComplexTensor.from_real_view(rv), torch.view_as_complex(trv), rv, trv


def _values(y):
    return y.real_view().numpy() if isinstance(y, ComplexTensor) else y.numpy()


def _torch_values(y):
    return (torch.view_as_real(y.resolve_conj()) if y.is_complex() else y).detach().numpy()


def _close(ours, theirs, what, n_sum):
    # float32 FFTs of different libraries: errors grow like log n times the input's size
    tol = 3e-6 * max(1.0, math.log2(max(n_sum, 2))) * max(1.0, float(np.abs(theirs).max(initial=0)))
    assert ours.shape == theirs.shape, f"{what}: shape {ours.shape} vs torch {theirs.shape}"
    if ours.size:
        err = float(np.abs(ours.astype(np.float64) - theirs).max())
        assert err <= tol, f"{what}: max error {err:.3g} > {tol:.3g}"


def check(name, kind, shape, device, **kw):
    rng = rng_for(name, kind, shape, sorted(kw.items(), key=str))
    x, tx, leaf, tleaf = _inputs(kind, shape, device, rng)
    y = getattr(tl.fft, name)(x, **kw)
    ty = getattr(torch.fft, name)(tx, **kw)
    tv = _torch_values(ty)
    n_sum = max(1, int(np.prod(shape)))
    _close(_values(y), tv, f"fft.{name}({kind} {shape}, {kw}) values", n_sum)
    w = rng.standard_normal(tv.shape).astype(F32)
    ry = y.real_view() if isinstance(y, ComplexTensor) else y
    (ry * tl.tensor(w, device=device)).sum().backward()
    tr = torch.view_as_real(ty.resolve_conj()) if ty.is_complex() else ty
    (tr * torch.tensor(w)).sum().backward()
    _close(leaf.grad.numpy(), tleaf.grad.numpy(), f"fft.{name}({kind} {shape}, {kw}) gradient", n_sum)


# -- one-dimensional ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["fft", "ifft"])
@pytest.mark.parametrize("kind", ["real", "complex"])
@pytest.mark.parametrize("shape, n, dim", [((8,), None, -1), ((7,), None, 0), ((1,), None, -1), ((3, 5), 8, -1),
                                           ((3, 5), 2, 0), ((4, 6, 3), None, 1), ((2, 9), 1, 1)])
@pytest.mark.parametrize("norm", NORMS)
def test_fft_ifft(name, kind, shape, n, dim, norm, device):
    check(name, kind, shape, device, n=n, dim=dim, norm=norm)


@pytest.mark.parametrize("shape, n, dim", [((8,), None, -1), ((7,), None, 0), ((1,), None, -1), ((3, 5), 8, -1),
                                           ((3, 5), 2, 0), ((4, 6, 3), None, 1), ((2, 9), 1, 1), ((5, 2), 3, 0)])
@pytest.mark.parametrize("norm", NORMS)
def test_rfft(shape, n, dim, norm, device):
    check("rfft", "real", shape, device, n=n, dim=dim, norm=norm)


@pytest.mark.parametrize("kind", ["real", "complex"])
@pytest.mark.parametrize("shape, n, dim", [((5,), None, -1), ((5,), 9, -1), ((4,), 7, 0), ((3, 4), None, 0),
                                           ((3, 4), 2, -1), ((2, 1), 1, 1), ((2, 3, 4), 10, 1), ((6,), 1, 0)])
@pytest.mark.parametrize("norm", NORMS)
def test_irfft(kind, shape, n, dim, norm, device):
    check("irfft", kind, shape, device, n=n, dim=dim, norm=norm)


# -- two and more dimensions -------------------------------------------------------------------------------
ND_CASES = [
    ((4, 6), None, None), ((3, 5, 7), None, None), ((3, 5, 7), (4, 4), None), ((3, 5, 7), None, (0, 2)),
    ((3, 5, 7), None, (2, 0)), ((3, 5, 7), (2, 9), (-1, 0)), ((3, 5, 7), (6, 2, 5), (1, 2, 0)),
    ((2, 3, 4, 5), None, None), ((2, 3, 2, 3, 2), None, None), ((2, 3, 4, 5), (3, -1), None),
    ((1, 1, 4), None, None), ((5, 4), (1, 1), None), ((2, 3, 4), None, (1,)),
]


@pytest.mark.parametrize("name", ["fftn", "ifftn", "rfftn", "irfftn"])
@pytest.mark.parametrize("shape, s, dim", ND_CASES)
@pytest.mark.parametrize("norm", [None, "ortho", "forward"])
def test_nd(name, shape, s, dim, norm, device):
    kw = {"norm": norm}
    if s is not None:
        kw["s"] = s
    if dim is not None:
        kw["dim"] = dim
    kinds = ("real",) if name == "rfftn" else ("real", "complex")
    for kind in kinds:
        check(name, kind, shape, device, **kw)


@pytest.mark.parametrize("name", ["fft2", "ifft2", "rfft2", "irfft2"])
@pytest.mark.parametrize("shape, s, dim", [((4, 6), None, (-2, -1)), ((3, 5, 7), None, (0, 2)),
                                           ((3, 5, 7), (4, 8), (2, 1)), ((3, 5, 7), (1, 3), (-2, -1))])
@pytest.mark.parametrize("norm", NORMS)
def test_2d(name, shape, s, dim, norm, device):
    kind = "real" if name == "rfft2" else "complex"
    check(name, kind, shape, device, s=s, dim=dim, norm=norm)


def test_defaults_of_fft2_and_fftn(device):
    check("fft2", "complex", (2, 3, 4), device)
    check("fftn", "complex", (2, 3, 4), device)
    check("irfftn", "complex", (2, 3, 4), device)
    check("rfft2", "real", (2, 3, 4), device)


@pytest.mark.parametrize("name", ["fft", "rfft", "fftn", "irfftn"])
def test_empty_batch(name, device):
    """torch's CPU backend (oneMKL) refuses an empty batch; NumPy's definition gives an empty result."""
    x = tl.zeros(0, 6, device=device)
    y = getattr(tl.fft, name)(x, dim=-1) if name in ("fft", "rfft") else getattr(tl.fft, name)(x, dim=(1,))
    ref = getattr(np.fft, name)(np.zeros((0, 6)), axis=-1) if name in ("fft", "rfft") else \
        getattr(np.fft, name)(np.zeros((0, 6)), axes=(1,))
    assert tuple(y.shape) == ref.shape


def test_complex_input_round_trip_and_result_type(device):
    x = tl.tensor(rng_for("rt").standard_normal((3, 8)).astype(F32), device=device)
    z = tl.fft.fft(x)
    assert isinstance(z, ComplexTensor) and tuple(z.shape) == (3, 8) and z.real_view().dtype is tl.float32
    back = tl.fft.ifft(z)
    np.testing.assert_allclose(back.real_view().numpy()[..., 0], x.numpy(), atol=1e-5)
    r = tl.fft.irfft(tl.fft.rfft(x), n=8)
    assert isinstance(r, tl.Tensor)
    np.testing.assert_allclose(r.numpy(), x.numpy(), atol=1e-5)


# -- shifts and frequencies --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["fftshift", "ifftshift"])
@pytest.mark.parametrize("shape, dim", [((7,), None), ((4, 5), None), ((4, 5, 3), (0, 2)), ((4, 5), -1), ((6, 3), 0)])
def test_shifts(name, shape, dim, device):
    for kind in ("real", "complex"):
        rng = rng_for(name, shape, dim, kind)
        x, tx, leaf, tleaf = _inputs(kind, shape, device, rng)
        y = getattr(tl.fft, name)(x, dim=dim)
        ty = getattr(torch.fft, name)(tx, dim=dim)
        assert type(y) is type(x)
        np.testing.assert_array_equal(_values(y), _torch_values(ty))
        w = rng.standard_normal(_torch_values(ty).shape).astype(F32)
        ((y.real_view() if kind == "complex" else y) * tl.tensor(w, device=device)).sum().backward()
        ((torch.view_as_real(ty.resolve_conj()) if kind == "complex" else ty) * torch.tensor(w)).sum().backward()
        np.testing.assert_array_equal(leaf.grad.numpy(), tleaf.grad.numpy())


@pytest.mark.parametrize("n", [0, 1, 2, 7, 10, 33])
@pytest.mark.parametrize("d", [1.0, 0.1, 3.0])
def test_frequencies(n, d, device):
    for name in ("fftfreq", "rfftfreq"):
        ours = getattr(tl.fft, name)(n, d, device=device)
        theirs = getattr(torch.fft, name)(n, d).numpy()
        assert ours.dtype is tl.float32 and str(ours.device).startswith(device)
        np.testing.assert_array_equal(ours.numpy(), theirs)
    assert tl.fft.fftfreq(4, requires_grad=True).requires_grad


# -- errors ------------------------------------------------------------------------------------------------
def _z(*shape):
    return ComplexTensor.from_real_view(tl.zeros(*shape, 2))


@pytest.mark.parametrize("call, exc, words", [
    (lambda: tl.fft.rfft(_z(4)), DTypeError, ["fft.rfft: expected a real tensor, got complex64"]),
    (lambda: tl.fft.rfftn(_z(4, 4)), DTypeError, ["fft.rfftn", "real tensor", "complex64"]),
    (lambda: tl.fft.rfft2(_z(4, 4)), DTypeError, ["fft.rfft2", "complex64"]),
    (lambda: tl.fft.fft(np.zeros(4)), DTypeError, ["fft.fft", "Tensor", "ndarray"]),
    (lambda: tl.fft.fft(tl.zeros(4), dim=1), AxisError, ["fft.fft", "out of range", "got 1"]),
    (lambda: tl.fft.fftn(tl.zeros(4, 3), dim=(0, -2)), ArgumentError, ["fft.fftn", "unique"]),
    (lambda: tl.fft.fft(tl.zeros(4), n=0), ArgumentError, ["fft.fft", "number of data points (0)"]),
    (lambda: tl.fft.irfft(_z(1)), ArgumentError, ["fft.irfft", "number of data points (0)"]),
    (lambda: tl.fft.fft(tl.zeros(0)), ArgumentError, ["fft.fft", "number of data points (0)"]),
    (lambda: tl.fft.fft(tl.zeros(4), norm="none"), ArgumentError, ["fft.fft", "normalization", "'none'"]),
    (lambda: tl.fft.fftn(tl.zeros(4, 3), s=(2, 2), dim=(0,)), ArgumentError, ["fft.fftn", "same length"]),
    (lambda: tl.fft.fft2(tl.zeros(4)), AxisError, ["fft.fft2", "out of range"]),
    (lambda: tl.fft.rfftn(tl.zeros(4), dim=()), ArgumentError, ["fft.rfftn", "at least one"]),
    (lambda: tl.fft.fft(tl.zeros(4), dim=1.5), ArgumentError, ["fft.fft", "dim"]),
    (lambda: tl.fft.fftfreq(-1), ArgumentError, ["fft.fftfreq", "n"]),
    (lambda: tl.fft.hfft(_z(4)), NotSupportedError, ["fft.hfft", "not supported"]),
    (lambda: tl.fft.ihfft(tl.zeros(4)), NotSupportedError, ["fft.ihfft", "not supported"]),
])
def test_errors(call, exc, words):
    with pytest.raises(exc) as info:
        call()
    for w in words:
        assert w in str(info.value), f"{w!r} not in {info.value}"
