"""The 2-D and 3-D FNO spectral convolutions: primitives, op, nn modules.

* The spec against numpy.fft's composition (rfft2/rfftn, corner einsums, irfft2/irfftn) in float64.
* Every primitive against the spec through the table (edge cases and random geometries), on each
  device; the CPU runs the truncated-DFT GEMM walk the CUDA backend runs, so the GPU's stage
  layout is checked here too.
* The op against torch autograd of the reference composition (values and gradients), the VJPs
  against finite differences, only the requested gradients computed.
* nn.SpectralConv2d/3d against the reference modules written in torch, with the same complex
  weights loaded from the reference's state dict.
* Non-finite inputs, empty batches, modes at the bounds, the contracts rejecting wrong kernels,
  error messages naming the call and the bound.
"""

from __future__ import annotations

import sys
import zlib

import numpy as np
import pytest
from test_vjp import _report, _within, fd_grads

import torchlean as tl
import torchlean.kernels.cpu.spectral_nd as CPU_ND
from torchlean import nn, ops
from torchlean import spec as S
from torchlean.errors import ArgumentError, ShapeError
from torchlean.runtime import Buffer
from torchlean.runtime import primitives as P
from torchlean.testing.primitive_table import TABLE, run_case

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

F32 = np.float32
NAMES = [f"spectral_conv{d}d_rfft_{k}" for d in (2, 3) for k in ("fwd", "bwd_x", "bwd_w")]


def rng_for(*key) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def up(a, device="cpu") -> Buffer:
    return Buffer.from_numpy(np.asarray(a, dtype=F32).reshape(-1), device)


# -- independent references: numpy.fft (float64) and torch (the reference programs' code) --------------
def _corners(d, ns, ms):
    """The reference's corner slices, in weights1.. order."""
    if d == 2:
        return [(slice(0, ms[0]), slice(0, ms[1])), (slice(ns[0] - ms[0], ns[0]), slice(0, ms[1]))]
    a, b, c = ms
    lo1, hi1 = slice(0, a), slice(ns[0] - a, ns[0])
    lo2, hi2 = slice(0, b), slice(ns[1] - b, ns[1])
    return [(lo1, lo2, slice(0, c)), (hi1, lo2, slice(0, c)), (lo1, hi2, slice(0, c)), (hi1, hi2, slice(0, c))]


def np_conv(x, w):
    """numpy.fft's composition, float64: x (B, Ci, *ns), w (corners, Ci, Co, *ms, 2)."""
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    d = x.ndim - 2
    ns, ms = x.shape[2:], w.shape[3:3 + d]
    wc = w[..., 0] + 1j * w[..., 1]
    axes = tuple(range(-d, 0))
    X = np.fft.rfftn(x, axes=axes)
    out = np.zeros((x.shape[0], w.shape[2]) + X.shape[2:], complex)
    for c, sl in enumerate(_corners(d, ns, ms)):
        idx = (slice(None), slice(None)) + sl
        out[idx] = np.einsum("bi...,io...->bo...", X[idx], wc[c])
    return np.fft.irfftn(out, s=ns, axes=axes)


def torch_conv(x, weights, ns, ms):
    """The reference programs' forward (SpectralConv2d/3d.forward) on torch tensors."""
    d = len(ns)
    X = torch.fft.rfftn(x, dim=tuple(range(-d, 0)))
    out = torch.zeros((x.shape[0], weights[0].shape[1]) + tuple(X.shape[2:]), dtype=X.dtype)
    eq = "bixy,ioxy->boxy" if d == 2 else "bixyz,ioxyz->boxyz"
    for w, sl in zip(weights, _corners(d, ns, ms)):
        idx = (slice(None), slice(None)) + sl
        out[idx] = torch.einsum(eq, X[idx], w)
    return torch.fft.irfftn(out, s=tuple(ns), dim=tuple(range(-d, 0)))


def _inputs(rng, batch, cin, cout, ns, ms):
    d = len(ns)
    x = rng.standard_normal((batch, cin) + tuple(ns)).astype(F32)
    w = rng.standard_normal((2 ** (d - 1), cin, cout) + tuple(ms) + (2,)).astype(F32)
    return x, w


GEOMS = [  # batch, cin, cout, ns, ms
    (2, 3, 2, (8, 8), (3, 5)),       # even sizes, the Nyquist column kept
    (1, 2, 3, (7, 9), (3, 5)),       # odd sizes at the bounds (2 m1 = h - 1, m2 = w//2 + 1)
    (3, 2, 2, (6, 5), (3, 1)),       # the corners meet (2 m1 = h); one column
    (2, 2, 3, (4, 6, 6), (2, 3, 4)),
    (1, 3, 2, (5, 3, 7), (2, 1, 4)),
]
IDS = [f"b{g[0]}c{g[1]}-{g[2]}n{'x'.join(map(str, g[3]))}m{'x'.join(map(str, g[4]))}" for g in GEOMS]


@pytest.mark.parametrize("geom", GEOMS, ids=IDS)
def test_spec_matches_numpy_fft(geom):
    batch, cin, cout, ns, ms = geom
    x, w = _inputs(rng_for("spec", geom), *geom)
    f = getattr(S, f"spectral_conv{len(ns)}d_rfft_fwd")
    got = f(x.reshape(-1), w.reshape(-1), batch, cin, cout, *ns, *ms)
    np.testing.assert_allclose(got, np_conv(x, w).reshape(-1), atol=1e-12)


@pytest.mark.parametrize("geom", GEOMS, ids=IDS)
def test_spec_vjps_are_transposes(geom):
    """<dy, J v> = <J^T dy, v> for the x and w maps (both are linear)."""
    batch, cin, cout, ns, ms = geom
    d = len(ns)
    rng = rng_for("adj", geom)
    x, w = _inputs(rng, *geom)
    dy = rng.standard_normal((batch, cout) + ns)
    vx, vw = rng.standard_normal(x.shape), rng.standard_normal(w.shape)
    dims = (batch, cin, cout, *ns, *ms)
    fwd = getattr(S, f"spectral_conv{d}d_rfft_fwd")
    dx = getattr(S, f"spectral_conv{d}d_rfft_bwd_x")(x.ravel(), w.ravel(), dy.ravel(), *dims)
    dw = getattr(S, f"spectral_conv{d}d_rfft_bwd_w")(x.ravel(), w.ravel(), dy.ravel(), *dims)
    assert np.isclose(np.dot(dy.ravel(), fwd(vx.ravel(), w.ravel(), *dims)), np.dot(dx, vx.ravel()), rtol=1e-10)
    assert np.isclose(np.dot(dy.ravel(), fwd(x.ravel(), vw.ravel(), *dims)), np.dot(dw, vw.ravel()), rtol=1e-10)


# -- primitives against the spec (the table) ------------------------------------------------------------
def _table_cases(name, n_random=12):
    info = TABLE[name]
    return info, info.edge_cases + [info.sample(np.random.default_rng(s), (s, 2 * s + 1, s + 2, s), "normal")
                                    for s in range(n_random)]


@pytest.mark.parametrize("name", NAMES)
def test_primitives_meet_their_contracts(name, device):
    info, cases = _table_cases(name)
    for args in cases:
        verdict, _, _ = run_case(info, [a.copy() if isinstance(a, np.ndarray) else a for a in args], device)
        assert verdict.ok, f"{name} on {device}: {verdict.detail}"


def test_results_are_deterministic(device):
    geom = (2, 3, 2, (8, 8), (3, 5))
    x, w = _inputs(rng_for("det"), *geom)
    dy = rng_for("det-dy").standard_normal((2, 2, 8, 8)).astype(F32)
    args = [up(x, device), up(w, device), up(dy, device), 2, 3, 2, 8, 8, 3, 5]
    runs = [[P.spectral_conv2d_rfft_fwd(*args[:2], *args[3:]).to_numpy(), P.spectral_conv2d_rfft_bwd_x(*args).to_numpy(),
             P.spectral_conv2d_rfft_bwd_w(*args).to_numpy()] for _ in range(2)]
    for a, b in zip(*runs):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))


# -- the op against torch autograd of the reference composition ------------------------------------------
@pytest.mark.parametrize("geom", GEOMS, ids=IDS)
def test_op_matches_torch_reference_values_and_gradients(geom, device):
    batch, cin, cout, ns, ms = geom
    d = len(ns)
    rng = rng_for("torch", geom)
    x, w = _inputs(rng, *geom)
    g = rng.standard_normal((batch, cout) + ns).astype(F32)
    tx = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    tw = torch.tensor(w, dtype=torch.float64, requires_grad=True)
    ty = torch_conv(tx, [torch.view_as_complex(tw[c]) for c in range(2 ** (d - 1))], ns, ms)
    ty.backward(torch.tensor(g, dtype=torch.float64))
    lx = tl.tensor(x, device=device, requires_grad=True)
    lw = tl.tensor(w, device=device, requires_grad=True)
    ly = getattr(ops, f"spectral_conv{d}d")(lx, lw)
    ly.backward(tl.tensor(g, device=device))
    for what, ours, ref in (("y", ly.numpy(), ty.detach().numpy()), ("dx", lx.grad.numpy(), tx.grad.numpy()),
                            ("dw", lw.grad.numpy(), tw.grad.numpy())):
        scale = max(1.0, float(np.abs(ref).max()))
        assert ours.shape == ref.shape, what
        assert np.abs(ours - ref).max() <= 2e-5 * scale, f"{what}: {np.abs(ours - ref).max()} (scale {scale})"


VJP_GEOMS = [(1, 2, 2, (4, 6), (2, 3)), (2, 1, 2, (5, 5), (2, 2)), (1, 1, 2, (4, 3, 4), (1, 1, 3))]


@pytest.mark.parametrize("geom", VJP_GEOMS, ids=[str(g) for g in VJP_GEOMS])
def test_op_vjp_matches_finite_differences(geom, device):
    batch, cin, cout, ns, ms = geom
    d = len(ns)
    rng = rng_for("fd", geom)
    x, w = _inputs(rng, *geom)
    g = rng.standard_normal((batch, cout) + ns).astype(F32)
    fds = fd_grads(np_conv, [x, w], g)
    lx = tl.tensor(x, device=device, requires_grad=True)
    lw = tl.tensor(w, device=device, requires_grad=True)
    getattr(ops, f"spectral_conv{d}d")(lx, lw).backward(tl.tensor(g, device=device))
    for what, ours, fd in (("dx", lx.grad.numpy(), fds[0]), ("dw", lw.grad.numpy(), fds[1])):
        assert _within(ours, fd), f"{what}: " + _report(ours, fd)


def test_unbatched_input(device):
    x, w = _inputs(rng_for("unb"), 1, 2, 3, (6, 6), (2, 3))
    y1 = ops.spectral_conv2d(tl.tensor(x[0], device=device), tl.tensor(w, device=device))
    y = ops.spectral_conv2d(tl.tensor(x, device=device), tl.tensor(w, device=device))
    assert tuple(y1.shape) == (3, 6, 6)
    np.testing.assert_array_equal(y1.numpy(), y.numpy()[0])


def test_only_requested_gradients_are_computed():
    x, w = _inputs(rng_for("only"), 2, 2, 2, (6, 6), (2, 3))
    calls = []
    cpu = sys.modules["torchlean.kernels.cpu"]
    names = ("spectral_conv2d_rfft_bwd_x", "spectral_conv2d_rfft_bwd_w")
    mp = pytest.MonkeyPatch()
    try:
        for n in names:
            mp.setattr(cpu, n, lambda *a, n=n, f=getattr(cpu, n): (calls.append(n), f(*a))[1])
        lx = tl.tensor(x, requires_grad=True)
        ops.spectral_conv2d(lx, tl.tensor(w)).sum().backward()
        assert calls == ["spectral_conv2d_rfft_bwd_x"] and lx.grad is not None
        calls.clear()
        lw = tl.tensor(w, requires_grad=True)
        ops.spectral_conv2d(tl.tensor(x), lw).sum().backward()
        assert calls == ["spectral_conv2d_rfft_bwd_w"] and lw.grad is not None
    finally:
        mp.undo()


# -- edge cases ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_input_reaches_only_its_sample(bad, device):
    """A NaN or inf in sample 0 spreads over all of sample 0's output (every output sums over the
    whole grid) and leaves sample 1 finite and equal to its own result."""
    x, w = _inputs(rng_for("nan"), 2, 2, 3, (8, 6), (2, 3))
    clean = ops.spectral_conv2d(tl.tensor(x[1:], device=device), tl.tensor(w, device=device)).numpy()
    x[0, 1, 3, 2] = bad
    y = ops.spectral_conv2d(tl.tensor(x, device=device), tl.tensor(w, device=device)).numpy()
    assert not np.isfinite(y[0]).any()
    assert np.isfinite(y[1]).all()
    np.testing.assert_allclose(y[1], clean[0], atol=1e-5)


def test_empty_batch_and_channels(device):
    w = tl.tensor(np.ones((2, 2, 3, 2, 3, 2), F32), device=device, requires_grad=True)
    x = tl.tensor(np.zeros((0, 2, 6, 6), F32), device=device, requires_grad=True)
    y = ops.spectral_conv2d(x, w)
    assert tuple(y.shape) == (0, 3, 6, 6)
    y.sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), np.zeros(w.shape, F32))
    # no input channels: y = 0
    y0 = P.spectral_conv3d_rfft_fwd(up(np.zeros(0), device), up(np.zeros(0), device), 2, 0, 3, 4, 4, 4, 1, 1, 1)
    np.testing.assert_array_equal(y0.to_numpy(), np.zeros(2 * 3 * 64, F32))


@pytest.mark.parametrize("ns", [(2, 1), (2, 2), (3, 1)])
def test_tiny_grids(ns, device):
    """The smallest grids: a 1-wide last axis (only the mean column) and 2 rows (one per corner)."""
    x, w = _inputs(rng_for("tiny", ns), 2, 1, 2, ns, (1, 1))
    y = ops.spectral_conv2d(tl.tensor(x, device=device), tl.tensor(w, device=device)).numpy()
    np.testing.assert_allclose(y, np_conv(x, w), atol=1e-6)


# -- nn modules against the reference modules ------------------------------------------------------------
class RefSpectralConv2d(torch.nn.Module):
    """The reference fourier_2d.py SpectralConv2d, as its authors wrote it (torch)."""

    def __init__(self, in_channels, out_channels, modes1, modes2):
        super().__init__()
        self.modes1, self.modes2 = modes1, modes2
        self.scale = 1 / (in_channels * out_channels)
        self.weights1 = torch.nn.Parameter(self.scale * torch.rand(in_channels, out_channels, modes1, modes2,
                                                                   dtype=torch.cfloat))
        self.weights2 = torch.nn.Parameter(self.scale * torch.rand(in_channels, out_channels, modes1, modes2,
                                                                   dtype=torch.cfloat))

    def forward(self, x):
        return torch_conv(x, [self.weights1, self.weights2], tuple(x.shape[-2:]), (self.modes1, self.modes2))


class RefSpectralConv3d(torch.nn.Module):
    def __init__(self, in_channels, out_channels, modes1, modes2, modes3):
        super().__init__()
        self.ms = (modes1, modes2, modes3)
        scale = 1 / (in_channels * out_channels)
        for k in range(1, 5):
            setattr(self, f"weights{k}", torch.nn.Parameter(
                scale * torch.rand(in_channels, out_channels, modes1, modes2, modes3, dtype=torch.cfloat)))

    def forward(self, x):
        return torch_conv(x, [self.weights1, self.weights2, self.weights3, self.weights4], tuple(x.shape[-3:]),
                          self.ms)


@pytest.mark.parametrize("d", [2, 3])
def test_module_loads_reference_state_dict_and_matches(d, device):
    torch.manual_seed(0)
    if d == 2:
        ref, ours, shape = RefSpectralConv2d(3, 4, 3, 4), nn.SpectralConv2d(3, 4, 3, 4), (2, 3, 8, 9)
    else:
        ref, ours, shape = RefSpectralConv3d(2, 3, 2, 2, 3), nn.SpectralConv3d(2, 3, 2, 2, 3), (2, 2, 6, 5, 6)
    sd = ours.state_dict()
    assert sorted(sd) == sorted(ref.state_dict()) and all(
        tuple(sd[k].shape) == tuple(v.shape) for k, v in ref.state_dict().items())
    ours.load_state_dict(ref.state_dict())
    ours.to(device)
    x = rng_for("mod", d).standard_normal(shape).astype(F32)
    tx = torch.tensor(x, requires_grad=True)
    ty = ref(tx)
    g = rng_for("mod-g", d).standard_normal(tuple(ty.shape)).astype(F32)
    ty.backward(torch.tensor(g))
    lx = tl.tensor(x, device=device, requires_grad=True)
    ly = ours(lx)
    ly.backward(tl.tensor(g, device=device))
    np.testing.assert_allclose(ly.numpy(), ty.detach().numpy(), atol=2e-6)
    np.testing.assert_allclose(lx.grad.numpy(), tx.grad.numpy(), atol=2e-6)
    for k in range(1, 2 ** (d - 1) + 1):
        # the real view's gradient is PyTorch's complex gradient (dL/dRe + i dL/dIm)
        got = getattr(ours, f"weights{k}").real_view().grad.numpy()
        want = torch.view_as_real(getattr(ref, f"weights{k}").grad).numpy()
        np.testing.assert_allclose(got, want, atol=2e-5 * max(1.0, float(np.abs(want).max())))


def test_module_init_follows_the_reference():
    m = nn.SpectralConv2d(4, 5, 3, 2)
    assert [type(p).__name__ for p in m.parameters()] == ["ComplexParameter", "ComplexParameter"]
    for k in ("weights1", "weights2"):
        r = getattr(m, k).real_view().numpy()
        assert r.shape == (4, 5, 3, 2, 2) and r.min() >= 0 and r.max() < 1 / 20 and r.max() > 0.5 / 20
    m3 = nn.SpectralConv3d(2, 2, 1, 2, 3)
    assert sorted(dict(m3.named_parameters())) == ["weights1", "weights2", "weights3", "weights4"]
    assert "modes3=3" in repr(m3)


def test_module_trains_with_an_optimizer():
    torch.manual_seed(1)
    m = nn.SpectralConv2d(2, 2, 2, 2)
    opt = tl.optim.Adam(m.parameters(), lr=1e-2)
    x = tl.tensor(rng_for("train").standard_normal((4, 2, 8, 8)).astype(F32))
    target = tl.tensor(rng_for("train-t").standard_normal((4, 2, 8, 8)).astype(F32) * 0.1)
    losses = []
    for _ in range(20):
        opt.zero_grad()
        loss = ((m(x) - target) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(float(loss.item()))
    assert losses[-1] < 0.9 * losses[0]


# -- contracts reject wrong kernels; errors -----------------------------------------------------------------
def _swapped_corners(x, w, *dims):
    nc = w.size // 2
    return CPU_ND.spectral_conv2d_rfft_fwd(x, np.concatenate([w[nc:], w[:nc]]), *dims)


def _conj_weights(x, w, *dims):
    w2 = w.reshape(-1, 2).copy()
    w2[:, 1] *= -1
    return CPU_ND.spectral_conv3d_rfft_fwd(x, w2.reshape(-1), *dims)


def _bwd_w_one_corner(x, w, dy, *dims):
    dw = CPU_ND.spectral_conv2d_rfft_bwd_w(x, w, dy, *dims).copy()
    dw[dw.size // 2:] = 0
    return dw


def _bwd_x_without_conj(x, w, dy, *dims):
    w2 = w.reshape(-1, 2).copy()
    w2[:, 1] *= -1
    return CPU_ND.spectral_conv2d_rfft_bwd_x(x, w2.reshape(-1), dy, *dims)


_R = np.random.default_rng(7)
_X2, _W2 = _inputs(_R, 2, 2, 3, (8, 8), (3, 4))
_DY2 = _R.standard_normal(2 * 3 * 64).astype(F32)
_X3, _W3 = _inputs(_R, 1, 2, 2, (4, 6, 6), (2, 2, 3))
FAKES = [
    ("spectral_conv2d_rfft_fwd", _swapped_corners, [_X2.ravel(), _W2.ravel(), 2, 2, 3, 8, 8, 3, 4]),
    ("spectral_conv3d_rfft_fwd", _conj_weights, [_X3.ravel(), _W3.ravel(), 1, 2, 2, 4, 6, 6, 2, 2, 3]),
    ("spectral_conv2d_rfft_bwd_w", _bwd_w_one_corner, [_X2.ravel(), _W2.ravel(), _DY2, 2, 2, 3, 8, 8, 3, 4]),
    ("spectral_conv2d_rfft_bwd_x", _bwd_x_without_conj, [_X2.ravel(), _W2.ravel(), _DY2, 2, 2, 3, 8, 8, 3, 4]),
]


@pytest.mark.parametrize("name, fake, args", FAKES, ids=[f[1].__name__ for f in FAKES])
def test_contract_catches_wrong_kernel(monkeypatch, name, fake, args):
    monkeypatch.setattr(sys.modules["torchlean.kernels.cpu"], name, fake)
    verdict, _, _ = run_case(TABLE[name], args, "cpu")
    assert not verdict.ok, f"the contract of {name} accepted a wrong kernel ({fake.__name__})"


def _z(n):
    return Buffer.from_numpy(np.zeros(n, F32))


@pytest.mark.parametrize("call, exc, words", [
    (lambda: P.spectral_conv2d_rfft_fwd(_z(64), _z(2 * 9 * 2), 1, 1, 1, 8, 8, 5, 3), ArgumentError,
     ["spectral_conv2d_rfft_fwd", "m1", "[1, 4]", "overlap", "got 5"]),
    (lambda: P.spectral_conv2d_rfft_fwd(_z(64), _z(2 * 6 * 2), 1, 1, 1, 8, 8, 1, 6), ArgumentError,
     ["spectral_conv2d_rfft_fwd", "m2", "[1, 5]", "got 6"]),
    (lambda: P.spectral_conv2d_rfft_fwd(_z(64), _z(0), 1, 1, 1, 8, 8, 0, 3), ArgumentError, ["m1", "got 0"]),
    (lambda: P.spectral_conv3d_rfft_bwd_w(_z(64), _z(64), _z(64), 1, 1, 1, 4, 4, 4, 1, 3, 1), ArgumentError,
     ["spectral_conv3d_rfft_bwd_w", "m2", "d2", "[1, 2]"]),
    (lambda: P.spectral_conv2d_rfft_fwd(_z(63), _z(2 * 4 * 2), 1, 1, 1, 8, 8, 2, 2), ShapeError, ["argument x", "64"]),
    (lambda: P.spectral_conv2d_rfft_bwd_x(_z(64), _z(16), _z(3), 1, 1, 1, 8, 8, 2, 2), ShapeError, ["dy"]),
    (lambda: P.spectral_conv2d_rfft_bwd_x(_z(64), _z(15), _z(64), 1, 1, 1, 8, 8, 2, 2), ShapeError, ["argument w"]),
    (lambda: P.spectral_conv3d_rfft_fwd(_z(0), _z(8), 1, 1, 1, 0, 2, 2, 1, 1, 1), ArgumentError, ["d1", ">= 1"]),
])
def test_primitive_errors(call, exc, words):
    with pytest.raises(exc) as info:
        call()
    for w in words:
        assert w in str(info.value), f"{w!r} not in {info.value}"


def _t(*shape):
    return tl.tensor(np.zeros(shape, F32))


@pytest.mark.parametrize("call, exc, words", [
    (lambda: ops.spectral_conv2d(_t(1, 2, 8, 8), _t(2, 2, 2, 5, 2, 2)), ArgumentError,
     ["spectral_conv2d", "m1", "[1, 4]", "overlap", "got 5"]),
    (lambda: ops.spectral_conv2d(_t(1, 2, 8, 8), _t(2, 2, 2, 2, 6, 2)), ArgumentError, ["m2", "[1, 5]", "got 6"]),
    (lambda: ops.spectral_conv2d(_t(1, 3, 8, 8), _t(2, 2, 2, 2, 2, 2)), ShapeError, ["input channels", "3"]),
    (lambda: ops.spectral_conv2d(_t(8, 8), _t(2, 1, 1, 2, 2, 2)), ShapeError, ["spectral_conv2d", "x"]),
    (lambda: ops.spectral_conv2d(_t(1, 1, 8, 8), _t(1, 1, 1, 2, 2, 2)), ShapeError, ["w", "(2, cin, cout, m1, m2, 2)"]),
    (lambda: ops.spectral_conv3d(_t(1, 1, 4, 4, 4), _t(2, 1, 1, 1, 1, 1, 2)), ShapeError, ["spectral_conv3d", "(4,"]),
    (lambda: ops.spectral_conv3d(np.zeros((1, 1, 4, 4, 4)), _t(4, 1, 1, 1, 1, 1, 2)), Exception, ["x", "Tensor"]),
    (lambda: nn.SpectralConv2d(2, 2, 0, 3), ArgumentError, ["SpectralConv2d", "modes1"]),
])
def test_front_end_errors(call, exc, words):
    with pytest.raises(exc) as info:
        call()
    for w in words:
        assert w in str(info.value), f"{w!r} not in {info.value}"


# -- the CPU kernels on the backend's pool: bits do not depend on the thread count or the split ----------
BIG = [(4, 12, 12, (128, 96), (8, 12)), (2, 8, 8, (32, 24, 40), (4, 6, 8))]  # every stage splits at 2 threads


def _cpu_outputs(geom):
    batch, cin, cout, ns, ms = geom
    d = len(ns)
    x, w = _inputs(rng_for("bits", geom), *geom)
    dy = rng_for("bits-dy", geom).standard_normal((batch, cout) + ns).astype(F32)
    dims = (batch, cin, cout, *ns, *ms)
    return [getattr(CPU_ND, f"spectral_conv{d}d_rfft_fwd")(x.ravel(), w.ravel(), *dims),
            getattr(CPU_ND, f"spectral_conv{d}d_rfft_bwd_x")(x.ravel(), w.ravel(), dy.ravel(), *dims),
            getattr(CPU_ND, f"spectral_conv{d}d_rfft_bwd_w")(x.ravel(), w.ravel(), dy.ravel(), *dims)]


@pytest.mark.parametrize("geom", BIG, ids=["2d", "3d"])
def test_cpu_bits_do_not_depend_on_the_thread_count(monkeypatch, geom):
    """Every stage (the GEMMs, the mixing) splits at 2 threads, and the bits are those of 1 thread."""
    import numba

    from torchlean.kernels.cpu import gemm, parallel, spectral_mix
    if parallel.max_threads() < 2:
        pytest.skip("Numba's pool has one thread (NUMBA_NUM_THREADS=1 or the workqueue layer)")
    seen = {"mix": [], "gemm": []}
    for name, key in (("_mix_par", "mix"), ("_grad_par", "mix")):
        real = getattr(spectral_mix, name)
        monkeypatch.setattr(spectral_mix, name, lambda k, *a, _r=real, _k=key: (seen[_k].append(k), _r(k, *a))[1])
    real_plan = gemm.plan
    monkeypatch.setattr(gemm, "plan", lambda *a: (lambda r: (seen["gemm"].append(r[1]), r)[1])(real_plan(*a)))
    threads = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = _cpu_outputs(geom)
        assert seen["mix"] == [] and set(seen["gemm"]) == {1}
        numba.set_num_threads(2)
        two = _cpu_outputs(geom)
    finally:
        numba.set_num_threads(threads)
    # at 2 threads the mixing ran in parts and the GEMMs in blocks
    assert set(seen["mix"]) == {2} and 2 in seen["gemm"], seen
    for a, b in zip(one, two):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))


@pytest.mark.parametrize("geom", [(3, 5, 4, (12, 10), (3, 4)), (2, 3, 4, (6, 8, 10), (2, 3, 4))], ids=["2d", "3d"])
def test_cpu_mixing_bits_do_not_depend_on_its_split(monkeypatch, geom):
    """The mixing kernels in 1, 3 and 7 parts (more parts than threads is allowed) give the same bits."""
    from torchlean.kernels.cpu import spectral_mix
    runs = []
    for k in (1, 3, 7):
        monkeypatch.setattr(spectral_mix, "parts", lambda work, items, min_work, _k=k: _k)
        runs.append(_cpu_outputs(geom))
    for other in runs[1:]:
        for a, b in zip(runs[0], other):
            assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
