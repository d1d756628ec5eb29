"""The spectral family: rfft1d_packed, irfft1d_packed, the FNO spectral convolution and their VJPs.

* Known answers for the conventions (unnormalized rfft, 1/n inverse, ignored imaginary parts of
  bins 0 and n/2, the [k, in, out] weight layout), round trips for even, odd and Bluestein lengths,
  identity weights and low-pass filters.
* Agreement with torch.fft (float32, same device) and with a float64 PyTorch composition of the
  spectral convolution (rfft along grid, einsum, irfft), within the contracts.
* VJPs against float64 central finite differences of independent NumPy references (numpy.fft,
  never our spec): the ops on the tape, and every backward primitive directly (bwd_x, bwd_wre,
  bwd_wim, the fused bwd_w), for even and odd grids, modes = 1 and modes = grid//2 + 1, batch 1 and 3.
* The CPU's two convolution routes (DFT as GEMM, FFT) both meet the contracts; contracts reject
  wrong kernels; errors name the primitive and the argument.
Random and edge-case parity against the spec lives in torchlean/testing/table_spectral.py.
"""

from __future__ import annotations

import sys
import zlib

import numpy as np
import pytest
from test_vjp import _report, _within, assert_vjp_matches_fd, fd_grads

import torchlean as tl
import torchlean.kernels.cpu.spectral as CPU_SPECTRAL
from torchlean import ops
from torchlean.contract import CONTRACTS, compare
from torchlean.errors import ArgumentError, ShapeError
from torchlean.runtime import Buffer
from torchlean.runtime import primitives as P
from torchlean.testing.primitive_table import TABLE, run_case

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

F32 = np.float32
CONV = "spectral_conv1d_rfft_fwd"


def up(a, device) -> Buffer:
    return Buffer.from_numpy(np.asarray(a, dtype=F32).reshape(-1), device)


def rng_for(*key) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


# -- independent float64 references (numpy.fft) --------------------------------------------------------
def np_rfft(x):
    X = np.fft.rfft(np.asarray(x, np.float64), axis=-1)
    return np.stack([X.real, X.imag], axis=-1)


def np_irfft(s, n):
    s = np.asarray(s, np.float64)
    return np.fft.irfft(s[..., 0] + 1j * s[..., 1], n=n, axis=-1)


def np_spectral_conv(x, wr, wi, modes):
    """x (batch, grid, width): rfft along grid, X[k] @ (wr + i wi)[k] for k < modes, irfft."""
    x = np.asarray(x, np.float64)
    grid = x.shape[-2]
    X = np.fft.rfft(x, axis=-2)
    Y = np.zeros_like(X)
    Y[..., :modes, :] = np.einsum("...ki,kio->...ko", X[..., :modes, :],
                                  np.asarray(wr, np.float64) + 1j * np.asarray(wi, np.float64))
    return np.fft.irfft(Y, n=grid, axis=-2)


def _bound(name, ref, *args):
    sargs = [np.asarray(a, np.float64).reshape(-1) if isinstance(a, np.ndarray) else a for a in args]
    return CONTRACTS[name].bound(np.asarray(ref, np.float64).reshape(-1), *sargs)


def assert_within(name, got, ref, tol, what=""):
    v = compare(np.asarray(got).reshape(-1), np.asarray(ref, np.float64).reshape(-1), np.asarray(tol).reshape(-1))
    assert v.ok, f"{name}{what}: {v.detail}"
    return v.ratio


# -- known answers -------------------------------------------------------------------------------------
def test_rfft_known_answer(device):
    out = P.rfft1d_packed(up([1, 2, 3, 4], device), 1, 4).to_numpy().reshape(3, 2)
    np.testing.assert_array_equal(out, np.array([[10, 0], [-2, 2], [-2, 0]], F32))  # bin 1 == -2+2i exactly
    odd = P.rfft1d_packed(up([1, 1, 1], device), 1, 3).to_numpy().reshape(2, 2)
    assert odd[0, 0] == 3 and abs(odd[1]).max() < 1e-6  # a constant has only the mean bin
    one = P.rfft1d_packed(up([2.5, -1], device), 2, 1).to_numpy()
    np.testing.assert_array_equal(one, np.array([2.5, 0, -1, 0], F32))


def test_irfft_scales_by_one_over_n_and_ignores_edge_imaginary_parts(device):
    # even n = 4: Im of bin 0 and bin 2 are ignored; odd n = 5: only Im of bin 0
    spec = [1, 5, 2, 3, 3, 7]
    got4 = P.irfft1d_packed(up(spec, device), 1, 4).to_numpy()
    np.testing.assert_allclose(got4, np.fft.irfft([1, 2 + 3j, 3], n=4), atol=1e-6)
    np.testing.assert_array_equal(got4, P.irfft1d_packed(up([1, 0, 2, 3, 3, 0], device), 1, 4).to_numpy())
    got5 = P.irfft1d_packed(up(spec, device), 1, 5).to_numpy()
    np.testing.assert_allclose(got5, np.fft.irfft([1, 2 + 3j, 3 + 7j], n=5), atol=1e-6)
    np.testing.assert_array_equal(P.irfft1d_packed(up([8, 0], device), 1, 1).to_numpy(), [8.0])
    np.testing.assert_array_equal(P.irfft1d_packed(up([4, 9, 0, 0, 0, 0], device), 1, 4).to_numpy(), [1, 1, 1, 1])


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 17, 64, 1009])
def test_round_trip(n, device):
    rng = rng_for("rt", n)
    batch = 3
    x = rng.standard_normal((batch, n)).astype(F32)
    X = P.rfft1d_packed(up(x, device), batch, n)
    back = P.irfft1d_packed(X, batch, n).to_numpy().reshape(batch, n)
    # the rfft's error E (its contract) propagates through the exact inverse as (1/n) sum_k c_k sqrt(2) E,
    # at most 2 sqrt(2) E; then the inverse's own contract on |X| + E
    Xe = np_rfft(x)
    e1 = _bound("rfft1d_packed", Xe, x, batch, n).reshape(batch, -1)[:, :1]
    spec_mag = np.abs(Xe) + e1[:, :, None]
    tol = 2 * np.sqrt(2) * e1 + _bound("irfft1d_packed", x, spec_mag.astype(np.float64), batch, n).reshape(batch, n)
    assert_within("round trip", back, x, tol, f" n={n}")
    # and much closer than the bound in practice
    assert np.abs(back - x).max() <= 1e-5 * max(1.0, float(np.abs(x).max())) * max(1, np.log2(n))


@pytest.mark.parametrize("n", [1, 2, 7, 16, 100, 131, 1009])
def test_agrees_with_torch_fft(n, device):
    torch = pytest.importorskip("torch")
    dev = "cuda" if device == "cuda" else "cpu"
    rng = rng_for("torch", n)
    batch = 4
    x = rng.standard_normal((batch, n)).astype(F32)
    s = rng.standard_normal((batch, n // 2 + 1, 2)).astype(F32)
    ours = P.rfft1d_packed(up(x, device), batch, n).to_numpy()
    theirs = torch.view_as_real(torch.fft.rfft(torch.tensor(x, device=dev))).cpu().numpy()
    tol = _bound("rfft1d_packed", np_rfft(x), x, batch, n)
    # both are within the bound of the exact result: twice the bound between them
    assert_within("rfft vs torch", ours, theirs, 2 * tol)
    ours_i = P.irfft1d_packed(up(s, device), batch, n).to_numpy()
    theirs_i = torch.fft.irfft(torch.view_as_complex(torch.tensor(s, device=dev)), n=n).cpu().numpy()
    assert_within("irfft vs torch", ours_i, theirs_i, 2 * _bound("irfft1d_packed", np_irfft(s, n), s, batch, n))


# -- spectral convolution: known answers ------------------------------------------------------------
def _conv_inputs(rng, batch, grid, width, modes):
    return (rng.standard_normal((batch, grid, width)).astype(F32),
            rng.standard_normal((modes, width, width)).astype(F32),
            rng.standard_normal((modes, width, width)).astype(F32))


def _run_conv(x, wr, wi, modes, device):
    batch, grid, width = x.shape
    return P.spectral_conv1d_rfft_fwd(up(x, device), up(wr, device), up(wi, device), grid, width, modes,
                                      batch).to_numpy().reshape(x.shape)


@pytest.mark.parametrize("grid", [1, 2, 7, 8, 33])
def test_identity_weights_reproduce_x(grid, device):
    rng = rng_for("id", grid)
    width, modes = 3, grid // 2 + 1
    x = rng.standard_normal((2, grid, width)).astype(F32)
    wr = np.broadcast_to(np.eye(width, dtype=F32), (modes, width, width)).copy()
    wi = np.zeros_like(wr)
    y = _run_conv(x, wr, wi, modes, device)
    tol = _bound(CONV, x, x, wr, wi, grid, width, modes, 2)
    assert_within("identity", y, x, tol, f" grid={grid}")
    assert np.abs(y - x).max() < 1e-5


@pytest.mark.parametrize("grid, modes", [(16, 1), (16, 4), (15, 3), (64, 9)])
def test_identity_weights_with_fewer_modes_are_a_low_pass(grid, modes, device):
    rng = rng_for("lp", grid, modes)
    width = 2
    x = rng.standard_normal((3, grid, width)).astype(F32)
    wr = np.broadcast_to(np.eye(width, dtype=F32), (modes, width, width)).copy()
    wi = np.zeros_like(wr)
    X = np.fft.rfft(x.astype(np.float64), axis=1)
    X[:, modes:] = 0
    lp = np.fft.irfft(X, n=grid, axis=1)
    y = _run_conv(x, wr, wi, modes, device)
    assert_within("low pass", y, lp, _bound(CONV, lp, x, wr, wi, grid, width, modes, 3))
    if modes == 1:
        np.testing.assert_allclose(y, np.broadcast_to(x.mean(axis=1, keepdims=True), x.shape), atol=1e-5)


def test_weight_layout_is_in_then_out(device):
    """Y[k, o] = sum_i X[k, i] W[k, i, o]: a weight that maps input channel 0 to output channel 1
    (W[k, 0, 1] = 1) copies channel 0 into channel 1 and leaves channel 0 of y zero."""
    x = rng_for("layout").standard_normal((1, 8, 2)).astype(F32)
    wr = np.zeros((5, 2, 2), F32)
    wr[:, 0, 1] = 1
    y = _run_conv(x, wr, np.zeros_like(wr), 5, device)
    np.testing.assert_allclose(y[0, :, 1], x[0, :, 0], atol=1e-5)
    np.testing.assert_array_equal(y[0, :, 0], np.zeros(8, F32))
    # multiplying by i shifts every bin's phase: for grid 4 and modes 2, i X_1 e^{...} is a quarter turn
    wi = np.zeros((2, 1, 1), F32)
    wi[1] = 1
    y2 = _run_conv(np.array([[[0], [1], [0], [0]]], F32), np.zeros((2, 1, 1), F32), wi, 2, device)
    # X_1 of delta at t=1 is -i; i X_1 = 1: y = (2/4) Re(e^{2 pi i t/4}) = [0.5, 0, -0.5, 0]
    np.testing.assert_allclose(y2.reshape(-1), [0.5, 0, -0.5, 0], atol=1e-7)


@pytest.mark.parametrize("shape", [(4, 32, 5, 7), (2, 33, 3, 17), (1, 10, 4, 6), (3, 131, 2, 5)])
def test_spectral_conv_agrees_with_torch_float64(shape, device):
    torch = pytest.importorskip("torch")
    batch, grid, width, modes = shape
    x, wr, wi = _conv_inputs(rng_for("tconv", shape), batch, grid, width, modes)
    dev = "cuda" if device == "cuda" else "cpu"
    X = torch.fft.rfft(torch.tensor(x, dtype=torch.float64, device=dev), dim=1)
    Wc = torch.complex(torch.tensor(wr, dtype=torch.float64, device=dev), torch.tensor(wi, dtype=torch.float64, device=dev))
    Y = torch.zeros_like(X)
    Y[:, :modes] = torch.einsum("bki,kio->bko", X[:, :modes], Wc)
    ref = torch.fft.irfft(Y, n=grid, dim=1).cpu().numpy()
    y = _run_conv(x, wr, wi, modes, device)
    assert_within("spectral conv vs torch float64", y, ref, _bound(CONV, ref, x, wr, wi, *shape[1:], shape[0]))
    np.testing.assert_allclose(ref, np_spectral_conv(x, wr, wi, modes), atol=1e-10)


# -- VJPs against finite differences ---------------------------------------------------------------
VJP_SHAPES = [  # batch, grid, width, modes
    (1, 8, 2, 5),   # even grid, modes = grid//2 + 1 (Nyquist bin kept)
    (3, 8, 2, 1),   # modes = 1 (bin 0 only), batch > 1
    (2, 7, 3, 4),   # odd grid at the limit (no Nyquist bin)
    (3, 9, 2, 2),
    (1, 2, 2, 2),   # tiny grid: bins 0 and 1 (= Nyquist)
]


@pytest.mark.parametrize("shape", VJP_SHAPES, ids=[f"b{s[0]}g{s[1]}w{s[2]}m{s[3]}" for s in VJP_SHAPES])
def test_spectral_conv_vjp_matches_fd(shape, device):
    batch, grid, width, modes = shape
    rng = rng_for("vjp", shape)
    xs = list(_conv_inputs(rng, batch, grid, width, modes))
    ref = lambda x, wr, wi: np_spectral_conv(x, wr, wi, modes)  # noqa: E731
    ref_out = ref(*[a.astype(np.float64) for a in xs])
    w = rng.standard_normal(ref_out.shape).astype(F32)
    ours = lambda x, wr, wi: ops.spectral_conv1d(x, wr, wi, modes)  # noqa: E731
    if any(0 < k and 2 * k != grid for k in range(modes)):
        assert_vjp_matches_fd(f"spectral_conv1d{shape}", ours, ref, xs, ref_out, w, device)
        return
    # every retained bin is an edge bin (0, or grid/2): Im W cannot change y and its gradient is
    # exactly 0, which the shared helper would call "too small to check"
    ts = [tl.tensor(a, device=device, requires_grad=True) for a in xs]
    y = ours(*ts)
    assert _within(y.numpy(), ref_out), _report(y.numpy(), ref_out)
    y.backward(tl.tensor(w, device=device))
    fds = fd_grads(ref, xs, w)
    for k in (0, 1):
        assert not _within(2.0 * fds[k], fds[k]) and _within(ts[k].grad.numpy(), fds[k]), _report(ts[k].grad.numpy(), fds[k])
    assert np.all(np.abs(fds[2]) < 1e-8) and np.all(ts[2].grad.numpy() == 0)


def test_spectral_conv_unbatched_vjp(device):
    rng = rng_for("unbatched")
    xs = [rng.standard_normal((6, 2)).astype(F32), rng.standard_normal((4, 2, 2)).astype(F32),
          rng.standard_normal((4, 2, 2)).astype(F32)]
    ref = lambda x, wr, wi: np_spectral_conv(x[None], wr, wi, 4)[0]  # noqa: E731
    ref_out = ref(*[a.astype(np.float64) for a in xs])
    w = rng.standard_normal(ref_out.shape).astype(F32)
    assert_vjp_matches_fd("spectral_conv1d unbatched", lambda x, wr, wi: ops.spectral_conv1d(x, wr, wi, 4), ref, xs,
                          ref_out, w, device)


@pytest.mark.parametrize("shape", VJP_SHAPES, ids=[f"b{s[0]}g{s[1]}w{s[2]}m{s[3]}" for s in VJP_SHAPES])
def test_backward_primitives_match_fd(shape, device):
    """Each backward primitive on its own: bwd_x, bwd_wre, bwd_wim and the fused bwd_w."""
    batch, grid, width, modes = shape
    rng = rng_for("prim-vjp", shape)
    x, wr, wi = _conv_inputs(rng, batch, grid, width, modes)
    dy = rng.standard_normal(x.shape).astype(F32)
    fd_x, fd_wr, fd_wi = fd_grads(lambda a, b, c: np_spectral_conv(a, b, c, modes), [x, wr, wi], dy)
    args = [up(x, device), up(wr, device), up(wi, device), up(dy, device), grid, width, modes, batch]
    got = {
        "bwd_x": (P.spectral_conv1d_rfft_bwd_x(*args).to_numpy().reshape(x.shape), fd_x),
        "bwd_wre": (P.spectral_conv1d_rfft_bwd_wre(*args).to_numpy().reshape(wr.shape), fd_wr),
        "bwd_wim": (P.spectral_conv1d_rfft_bwd_wim(*args).to_numpy().reshape(wi.shape), fd_wi),
    }
    fused = P.spectral_conv1d_rfft_bwd_w(*args)
    got["bwd_w[0]"] = (fused[0].to_numpy().reshape(wr.shape), fd_wr)
    got["bwd_w[1]"] = (fused[1].to_numpy().reshape(wi.shape), fd_wi)
    for what, (ours, fd) in got.items():
        assert _within(ours, fd), f"{what} {shape}: " + _report(ours, fd)
    # edge bins: Im W at bin 0 (and at the Nyquist bin) cannot change y, so its gradient is 0
    assert np.all(got["bwd_wim"][0][0] == 0)
    if grid % 2 == 0 and modes == grid // 2 + 1:
        assert np.all(np.abs(got["bwd_wim"][0][modes - 1]) <= 1e-6)


@pytest.mark.parametrize("n", [1, 2, 5, 8, 17])
def test_fft_ops_vjp_match_fd(n, device):
    rng = rng_for("fftvjp", n)
    x = rng.standard_normal((2, n)).astype(F32)
    ref_out = np_rfft(x.astype(np.float64))
    g = rng.standard_normal(ref_out.shape).astype(F32)
    if n > 2:  # n <= 2: every bin's Im is structurally 0 and the rest is checked below
        assert_vjp_matches_fd(f"rfft n={n}", ops.rfft1d_packed, np_rfft, [x], ref_out, g, device)
    s = rng.standard_normal((2, n // 2 + 1, 2)).astype(F32)
    ref = lambda a: np_irfft(a, n)  # noqa: E731
    out = ref(s.astype(np.float64))
    gy = rng.standard_normal(out.shape).astype(F32)
    t = tl.tensor(s, device=device, requires_grad=True)
    y = ops.irfft1d_packed(t, n)
    assert _within(y.numpy(), out)
    y.backward(tl.tensor(gy, device=device))
    (fd,) = fd_grads(ref, [s], gy)
    assert _within(t.grad.numpy(), fd), f"irfft n={n}: " + _report(t.grad.numpy(), fd)
    assert np.all(t.grad.numpy()[:, 0, 1] == 0)  # the ignored Im X_0 gets exactly 0
    if n % 2 == 0:
        assert np.all(t.grad.numpy()[:, -1, 1] == 0)
    # rfft's gradient for tiny n as well, directly
    tx = tl.tensor(x, device=device, requires_grad=True)
    ops.rfft1d_packed(tx).backward(tl.tensor(g, device=device))
    (fdx,) = fd_grads(np_rfft, [x], g)
    assert _within(tx.grad.numpy(), fdx), f"rfft n={n}: " + _report(tx.grad.numpy(), fdx)


def test_fft_ops_leading_axes(device):
    x = rng_for("lead").standard_normal((2, 3, 6)).astype(F32)
    X = ops.rfft1d_packed(tl.tensor(x, device=device))
    assert X.shape == (2, 3, 4, 2)
    y = ops.irfft1d_packed(X, 6)
    assert y.shape == (2, 3, 6)
    np.testing.assert_allclose(y.numpy(), x, atol=1e-5)


def test_only_requested_gradients_are_computed():
    rng = rng_for("only")
    x = tl.tensor(rng.standard_normal((2, 8, 2)).astype(F32), requires_grad=True)
    wr = tl.tensor(rng.standard_normal((3, 2, 2)).astype(F32))
    wi = tl.tensor(rng.standard_normal((3, 2, 2)).astype(F32), requires_grad=True)
    calls = []
    cpu = sys.modules["torchlean.kernels.cpu"]
    real = {n: getattr(cpu, n) for n in ("spectral_conv1d_rfft_bwd_x", "spectral_conv1d_rfft_bwd_w")}
    mp = pytest.MonkeyPatch()
    try:
        for n, f in real.items():
            mp.setattr(cpu, n, lambda *a, n=n, f=f: (calls.append(n), f(*a))[1])
        ops.spectral_conv1d(x, wr, wi, 3).sum().backward()
    finally:
        mp.undo()
    assert sorted(calls) == sorted(real) and wr.grad is None and wi.grad is not None and x.grad is not None


# -- the CPU's two routes, determinism, contracts that fail ------------------------------------------
@pytest.mark.parametrize("route", ["dft", "fft"])
def test_cpu_conv_routes_meet_the_contracts(monkeypatch, route):
    monkeypatch.setattr(CPU_SPECTRAL, "CONV_ROUTE", route)
    for name in ("spectral_conv1d_rfft_fwd", "spectral_conv1d_rfft_bwd_x", "spectral_conv1d_rfft_bwd_w"):
        info = TABLE[name]
        for args in info.edge_cases + [info.sample(np.random.default_rng(s), (s, 20 + s, s, s), "normal")
                                       for s in range(6)]:
            verdict, _, _ = run_case(info, [a.copy() if isinstance(a, np.ndarray) else a for a in args], "cpu")
            assert verdict.ok, f"{name} ({route}): {verdict.detail}"


def test_cpu_routes_agree_at_benchmark_like_size(monkeypatch):
    x, wr, wi = _conv_inputs(rng_for("routes"), 2, 256, 8, 16)
    outs = {}
    for route in ("dft", "fft"):
        monkeypatch.setattr(CPU_SPECTRAL, "CONV_ROUTE", route)
        outs[route] = _run_conv(x, wr, wi, 16, "cpu")
    ref = np_spectral_conv(x, wr, wi, 16)
    for route, y in outs.items():
        assert_within(f"route {route}", y, ref, _bound(CONV, ref, x, wr, wi, 256, 8, 16, 2))
        assert np.abs(y - ref).max() < 1e-4 * np.abs(ref).max()


def test_cpu_dft_route_splits_over_threads_without_changing_bits(monkeypatch):
    """The DFT route's GEMMs (analysis and synthesis with the basis shared by the batch, the
    per-mode mixing, the weight gradient) run on the pool: 1 and 2 threads give the same bits."""
    import numba

    from torchlean.kernels.cpu import gemm, parallel
    if parallel.max_threads() < 2:
        pytest.skip("Numba's pool has one thread (NUMBA_NUM_THREADS=1 or the workqueue layer)")
    monkeypatch.setattr(CPU_SPECTRAL, "CONV_ROUTE", "dft")
    x, wr, wi = _conv_inputs(rng_for("threads"), 8, 1024, 32, 12)  # 6.3 M multiply-adds per analysis: split
    dy = rng_for("threads-dy").standard_normal(x.shape).astype(F32)
    splits = []
    real_plan = gemm.plan
    monkeypatch.setattr(gemm, "plan", lambda *a: (lambda r: (splits.append(r), r)[1])(real_plan(*a)))

    def run():
        args = (x.ravel(), wr.ravel(), wi.ravel())
        return [CPU_SPECTRAL.spectral_conv1d_rfft_fwd(*args, 1024, 32, 12, 8),
                CPU_SPECTRAL.spectral_conv1d_rfft_bwd_x(*args, dy.ravel(), 1024, 32, 12, 8),
                *CPU_SPECTRAL.spectral_conv1d_rfft_bwd_w(*args, dy.ravel(), 1024, 32, 12, 8)]
    threads = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = run()
        numba.set_num_threads(2)
        two = run()
    finally:
        numba.set_num_threads(threads)
    assert splits  # the GEMMs went through gemm.py's plan
    for a, b in zip(one, two):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))


def test_results_are_deterministic(device):
    x, wr, wi = _conv_inputs(rng_for("det"), 3, 40, 4, 9)
    dy = rng_for("det-dy").standard_normal(x.shape).astype(F32)
    args = [up(x, device), up(wr, device), up(wi, device), up(dy, device), 40, 4, 9, 3]
    a = [P.spectral_conv1d_rfft_bwd_x(*args).to_numpy(), *[b.to_numpy() for b in P.spectral_conv1d_rfft_bwd_w(*args)]]
    b = [P.spectral_conv1d_rfft_bwd_x(*args).to_numpy(), *[b.to_numpy() for b in P.spectral_conv1d_rfft_bwd_w(*args)]]
    for u, v in zip(a, b):
        assert np.array_equal(u.view(np.uint32), v.view(np.uint32))


def _irfft_keeping_edge_imag(spec, batch, n):
    s = spec.reshape(batch, n // 2 + 1, 2).astype(np.float64)
    full = np.zeros((batch, n), complex)
    full[:, : n // 2 + 1] = s[..., 0] + 1j * s[..., 1]
    for k in range(1, (n + 1) // 2):
        full[:, n - k] = np.conj(full[:, k])
    return np.fft.ifft(full, axis=1).real.astype(F32).reshape(-1) + \
        (s[:, 0, 1:2] * 0.5).astype(F32).repeat(n, 1).reshape(-1)


def _conv_conj(x, wr, wi, *dims):
    return CPU_SPECTRAL.spectral_conv1d_rfft_fwd(x, wr, -wi, *dims)


def _conv_drop_last_mode(x, wr, wi, grid, width, modes, batch):
    if modes == 1:
        return np.zeros(batch * grid * width, F32)
    n = (modes - 1) * width * width
    return CPU_SPECTRAL.spectral_conv1d_rfft_fwd(x, wr[:n], wi[:n], grid, width, modes - 1, batch)


def _bwd_w_swapped(x, wr, wi, dy, *dims):
    a, b = CPU_SPECTRAL.spectral_conv1d_rfft_bwd_w(x, wr, wi, dy, *dims)
    return b, a


def _rfft_unscaled_wrong_sign(x, batch, n):
    out = CPU_SPECTRAL.rfft1d_packed(x, batch, n).reshape(-1, 2).copy()
    out[:, 1] *= -1
    return out.reshape(-1)


_R = np.random.default_rng(5)
_X = _R.standard_normal(2 * 8 * 3).astype(F32)
_W = _R.standard_normal(5 * 9).astype(F32)
_WI = _R.standard_normal(5 * 9).astype(F32)
_DY = _R.standard_normal(2 * 8 * 3).astype(F32)
FAKES = [
    ("irfft1d_packed", _irfft_keeping_edge_imag, [np.array([1, 5, 2, 3, 3, 7], F32), 1, 4]),
    ("rfft1d_packed", _rfft_unscaled_wrong_sign, [_R.standard_normal(16).astype(F32), 2, 8]),
    ("spectral_conv1d_rfft_fwd", _conv_conj, [_X, _W, _WI, 8, 3, 5, 2]),
    ("spectral_conv1d_rfft_fwd", _conv_drop_last_mode, [_X, _W, _WI, 8, 3, 5, 2]),
    ("spectral_conv1d_rfft_bwd_w", _bwd_w_swapped, [_X, _W, _WI, _DY, 8, 3, 5, 2]),
]


@pytest.mark.parametrize("name, fake, args", FAKES, ids=[f[1].__name__ for f in FAKES])
def test_contract_catches_wrong_kernel(monkeypatch, name, fake, args):
    cpu = sys.modules["torchlean.kernels.cpu"]
    monkeypatch.setattr(cpu, name, fake)
    verdict, _, _ = run_case(TABLE[name], args, "cpu")
    assert not verdict.ok, f"the contract of {name} accepted a wrong kernel ({fake.__name__})"


# -- errors ------------------------------------------------------------------------------------------
def _buf(n):
    return Buffer.from_numpy(np.zeros(n, F32))


@pytest.mark.parametrize("call, exc, words", [
        (lambda: P.spectral_conv1d_rfft_fwd(_buf(16), _buf(24), _buf(24), 8, 2, 6, 1), ArgumentError, ["modes", "got 6"]),
    (lambda: P.spectral_conv1d_rfft_fwd(_buf(15), _buf(20), _buf(20), 8, 2, 5, 1), ShapeError, ["argument x", "16"]),
    (lambda: P.spectral_conv1d_rfft_fwd(_buf(16), _buf(20), _buf(19), 8, 2, 5, 1), ShapeError, ["w_im", "20"]),
    (lambda: P.spectral_conv1d_rfft_bwd_x(_buf(16), _buf(20), _buf(20), _buf(3), 8, 2, 5, 1), ShapeError, ["dy"]),
    (lambda: P.spectral_conv1d_rfft_bwd_w(_buf(16), _buf(20), _buf(20), _buf(16), 0, 2, 1, 1), ArgumentError,
     ["spectral_conv1d_rfft_bwd_w", "grid", ">= 1"]),
    (lambda: P.spectral_conv1d_rfft_bwd_wre(_buf(16), _buf(20), _buf(20), _buf(16), 8, 2, 5, -1), ShapeError,
     ["batch"]),
    (lambda: P.rfft1d_packed(_buf(0), 0, 0), ArgumentError, ["rfft1d_packed", "n", ">= 1"]),
    (lambda: P.rfft1d_packed(_buf(7), 2, 4), ShapeError, ["argument x", "8"]),
    (lambda: P.irfft1d_packed(_buf(8), 2, 4), ShapeError, ["irfft1d_packed", "spec", "12"]),
    (lambda: P.irfft1d_packed(_buf(8), 2, 2**32), ShapeError, ["n"]),
])
def test_primitive_errors(call, exc, words):
    with pytest.raises(exc) as info:
        call()
    for w in words:
        assert w in str(info.value), f"{w!r} not in {info.value}"


def _t(*shape):
    return tl.tensor(np.zeros(shape, F32))


@pytest.mark.parametrize("call, exc, words", [
    (lambda: ops.spectral_conv1d(_t(8, 2), _t(5, 2, 2), _t(5, 2, 2), 6), ArgumentError, ["modes", "[0, 5]"]),
    (lambda: ops.spectral_conv1d(_t(8, 2), _t(0, 2, 2), _t(0, 2, 2), -1), ArgumentError, ["modes"]),
    (lambda: ops.spectral_conv1d(_t(8, 2), _t(3, 2, 3), _t(3, 2, 2), 3), ShapeError, ["w_re", "(3, 2, 2)"]),
    (lambda: ops.spectral_conv1d(_t(8), _t(3, 1, 1), _t(3, 1, 1), 3), ShapeError, ["spectral_conv1d", "x"]),
    (lambda: ops.spectral_conv1d(_t(8, 2), _t(3, 2, 2), _t(3, 2, 2), 2.5), ArgumentError, ["modes"]),
    (lambda: ops.irfft1d_packed(_t(2, 3, 2), 6), ShapeError, ["irfft1d_packed", "(..., 4, 2)"]),
    (lambda: ops.irfft1d_packed(_t(2, 3, 2), 0), ArgumentError, ["n"]),
    (lambda: ops.rfft1d_packed(_t(3, 0)), ShapeError, ["rfft1d_packed"]),
])
def test_front_end_errors(call, exc, words):
    with pytest.raises(exc) as info:
        call()
    for w in words:
        assert w in str(info.value), f"{w!r} not in {info.value}"


def test_empty_sizes(device):
    assert P.rfft1d_packed(up([], device), 0, 6).size == 0
    assert P.irfft1d_packed(up([], device), 0, 6).size == 0
    y = P.spectral_conv1d_rfft_fwd(up([], device), up(np.ones(12), device), up(np.ones(12), device), 6, 2, 3, 0)
    assert y.size == 0
    dwr, dwi = P.spectral_conv1d_rfft_bwd_w(up([], device), up(np.ones(12), device), up(np.ones(12), device),
                                            up([], device), 6, 2, 3, 0)
    np.testing.assert_array_equal(dwr.to_numpy(), np.zeros(12, F32))
    np.testing.assert_array_equal(dwi.to_numpy(), np.zeros(12, F32))


# -- the seed's signature and modes = 0 ----------------------------------------------------------------
def test_seed_positional_signature(device):
    """Code written against the seed's page: (x, w_re, w_im[, dy], grid, width, modes), one sample; the
    batch is a trailing keyword."""
    rng = rng_for("seed-sig")
    x, wr, wi = _conv_inputs(rng, 1, 8, 3, 4)
    dy = rng.standard_normal(x.shape).astype(F32)
    bx, bwr, bwi, bdy = (up(a, device) for a in (x, wr, wi, dy))
    y = P.spectral_conv1d_rfft_fwd(bx, bwr, bwi, 8, 3, 4).to_numpy().reshape(x.shape)
    ref = np_spectral_conv(x, wr, wi, 4)
    assert_within("seed signature", y, ref, _bound(CONV, ref, x, wr, wi, 8, 3, 4))
    fd_x, fd_wr, fd_wi = fd_grads(lambda a, b, c: np_spectral_conv(a, b, c, 4), [x, wr, wi], dy)
    assert _within(P.spectral_conv1d_rfft_bwd_x(bx, bwr, bwi, bdy, 8, 3, 4).to_numpy(), fd_x.reshape(-1))
    assert _within(P.spectral_conv1d_rfft_bwd_wre(bx, bwr, bwi, bdy, 8, 3, 4).to_numpy(), fd_wr.reshape(-1))
    assert _within(P.spectral_conv1d_rfft_bwd_wim(bx, bwr, bwi, bdy, 8, 3, 4).to_numpy(), fd_wi.reshape(-1))
    # a batch of 2 by keyword (the GEMMs group differently, so within the contract, not bitwise)
    x2 = np.concatenate([x, 2 * x])
    y2 = P.spectral_conv1d_rfft_fwd(up(x2, device), bwr, bwi, 8, 3, 4, batch=2).to_numpy().reshape(x2.shape)
    ref2 = np_spectral_conv(x2, wr, wi, 4)
    assert_within("seed signature, batch=2", y2, ref2, _bound(CONV, ref2, x2, wr, wi, 8, 3, 4, 2))
    with pytest.raises(ShapeError, match="argument x"):  # a batch of 2 without saying so is a size error
        P.spectral_conv1d_rfft_fwd(up(x2, device), bwr, bwi, 8, 3, 4)


@pytest.mark.parametrize("batch, grid, width", [(1, 8, 3), (3, 7, 2)])
def test_zero_modes_give_zeros(batch, grid, width, device):
    rng = rng_for("modes0", batch, grid)
    x = rng.standard_normal((batch, grid, width)).astype(F32)
    x[0, 0, 0] = np.inf  # nothing of x is kept, not even its non-finite values
    dy = rng.standard_normal(x.shape).astype(F32)
    none = up(np.zeros(0, F32), device)
    bx, bdy = up(x, device), up(dy, device)
    y = P.spectral_conv1d_rfft_fwd(bx, none, none, grid, width, 0, batch).to_numpy()
    dx = P.spectral_conv1d_rfft_bwd_x(bx, none, none, bdy, grid, width, 0, batch).to_numpy()
    dwr, dwi = P.spectral_conv1d_rfft_bwd_w(bx, none, none, bdy, grid, width, 0, batch)
    for got in (y, dx):
        np.testing.assert_array_equal(got, np.zeros(batch * grid * width, F32))
    assert dwr.size == dwi.size == 0
    # the op: output and gradients zeros, the weights (0, width, width)
    xt = tl.tensor(np.nan_to_num(x), device=device, requires_grad=True)
    wt = tl.zeros(0, width, width, device=device, requires_grad=True)
    out = ops.spectral_conv1d(xt, wt, wt, 0)
    np.testing.assert_array_equal(out.numpy(), np.zeros(x.shape, F32))
    out.sum().backward()
    np.testing.assert_array_equal(xt.grad.numpy(), np.zeros(x.shape, F32))
    assert tuple(wt.grad.shape) == (0, width, width)
