"""Examples ``fno1d`` and ``mlp`` and the FNO modules (``SpectralConv1d``, ``FNO1d``).

Each example runs its tiny_config for a few Adam steps: the loss falls, evaluate() returns the
metric, and two runs with the same seed give bitwise identical losses. The Burgers solver is
checked against known answers (the heat equation limit, conservation of the mean, convergence
in time), and the modules against the reference FNO's shapes, initialization and errors.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import torchlean
from torchlean.errors import ArgumentError, ShapeError
from torchlean.examples import fno1d, mlp
from torchlean.nn.modules.fno import FNO1d, SpectralConv1d, SpectralConv1dChannelsLast

EXAMPLES = [fno1d, mlp]
API = ["NAME", "DESCRIPTION", "METRIC", "LOWER_IS_BETTER", "default_config", "cuda_config", "tiny_config",
       "make_data", "make_model", "make_optimizer", "get_batch", "loss_fn", "evaluate"]


def _cfg(ex):
    cfg = ex.default_config()
    cfg.update(ex.tiny_config())
    return cfg


def _train(ex, device="cpu", steps=None):
    cfg = _cfg(ex)
    data = ex.make_data(cfg)
    model = ex.make_model(cfg).to(device)
    opt, sched = ex.make_optimizer(model, cfg)
    losses = []
    for step in range(steps or cfg["steps"]):
        batch = ex.get_batch(data, step, cfg, device)
        opt.zero_grad()
        loss = ex.loss_fn(model, batch)
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
        losses.append(loss.item())
    return cfg, data, model, losses


@pytest.mark.parametrize("ex", EXAMPLES, ids=lambda e: e.NAME)
def test_example_api(ex):
    for name in API:
        assert hasattr(ex, name), f"{ex.NAME}: missing {name}"
    assert ex.NAME == ex.__name__.rsplit(".", 1)[1]
    for cfg_fn in (ex.default_config, ex.cuda_config, ex.tiny_config):
        assert isinstance(cfg_fn(), dict)
    cfg = ex.default_config()
    for key in ("steps", "batch_size", "lr", "seed"):
        assert key in cfg
    full = dict(cfg, **ex.cuda_config())
    assert set(full) >= set(cfg)


@pytest.mark.parametrize("ex", EXAMPLES, ids=lambda e: e.NAME)
def test_example_learns_and_is_deterministic(ex, device):
    cfg, data, model, losses = _train(ex, device)
    assert all(math.isfinite(v) for v in losses)
    assert np.mean(losses[-3:]) < losses[0], losses
    metrics = ex.evaluate(model, data, cfg, device)
    assert isinstance(metrics[ex.METRIC], float) and math.isfinite(metrics[ex.METRIC])
    assert model.training
    _, _, _, again = _train(ex, device)
    assert again == losses  # bitwise: Python floats from the same float32 values


@pytest.mark.parametrize("ex", EXAMPLES, ids=lambda e: e.NAME)
def test_example_data_and_batches_deterministic(ex):
    cfg = _cfg(ex)
    a, b = ex.make_data(cfg), ex.make_data(cfg)
    for k in a:
        assert np.array_equal(a[k], b[k])
        if isinstance(a[k], np.ndarray):
            assert a[k].dtype == np.float32
    other = ex.make_data(dict(cfg, seed=cfg["seed"] + 1))
    assert not np.array_equal(a["x_train"], other["x_train"])
    b1 = ex.get_batch(a, 3, cfg, "cpu")
    b2 = ex.get_batch(a, 3, cfg, "cpu")
    for k in b1:
        assert np.array_equal(b1[k].numpy(), b2[k].numpy())
    assert not np.array_equal(ex.get_batch(a, 4, cfg, "cpu")["x"].numpy(), b1["x"].numpy())
    # one epoch visits every training sample once
    n, bs = len(a["x_train"]), cfg["batch_size"]
    assert n % bs == 0
    seen = np.concatenate([ex.get_batch(a, s, cfg, "cpu")["x"].numpy() for s in range(n // bs)])
    assert np.array_equal(np.unique(seen.reshape(n, -1), axis=0), np.unique(a["x_train"].reshape(n, -1), axis=0))


def test_fno1d_plot(tmp_path):
    pytest.importorskip("matplotlib")
    cfg, data, model, _ = _train(fno1d, steps=2)
    path = tmp_path / "pred.png"
    fno1d.plot_predictions(model, data, cfg, "cpu", str(path))
    assert path.stat().st_size > 1000


# -- the Burgers data -----------------------------------------------------------------------

def test_grf_statistics():
    n, m = 64, 4000
    u = fno1d.grf_1d(np.random.default_rng(0), m, n)
    assert u.shape == (m, n)
    assert np.abs(u.mean(axis=1)).max() < 1e-12  # mean free
    # pointwise variance = sum_k 2 * 625 / (4 pi^2 k^2 + 25)^2 (cos^2 + sin^2 = 1)
    k = np.arange(1, n // 2)
    var = np.sum(2 * 625 / (4 * np.pi ** 2 * k ** 2 + 25) ** 2)
    assert abs(u.var() / var - 1) < 0.05
    # the same seed gives the same field at every resolution (the coarse grid samples the fine one
    # up to the truncated modes, whose std is tiny)
    fine = fno1d.grf_1d(np.random.default_rng(1), 3, 256)
    coarse = fno1d.grf_1d(np.random.default_rng(1), 3, 64)
    assert np.abs(fine[:, ::4] - coarse).max() < 0.03  # modes >= 32 have std < 0.6 / 32^2


def test_burgers_heat_limit_and_mean():
    # a single sine mode of tiny amplitude: the nonlinear term is negligible (O(amplitude^2)) and
    # the solution is the heat equation's exp(-nu (2 pi)^2 t) sin(2 pi x)
    n = 64
    x = np.arange(n) / n
    amp = 1e-6
    u0 = amp * np.sin(2 * np.pi * x)[None, :]
    u1 = fno1d.burgers_solve(u0, nu=0.1, t_final=1.0, time_steps=20)
    exact = amp * np.exp(-0.1 * (2 * np.pi) ** 2) * np.sin(2 * np.pi * x)
    assert np.abs(u1 - exact).max() < 1e-6 * np.abs(exact).max() + 1e-15
    # Burgers conserves the mean (u^2/2 is a flux), also with the nonlinearity active
    u0 = fno1d.grf_1d(np.random.default_rng(2), 4, n) + 0.3
    u1 = fno1d.burgers_solve(u0, time_steps=40)
    assert np.allclose(u1.mean(axis=1), u0.mean(axis=1), atol=1e-12)


def test_burgers_nonlinear_converges_in_time():
    u0 = fno1d.grf_1d(np.random.default_rng(3), 4, 128) * 3  # strong nonlinearity
    ref = fno1d.burgers_solve(u0, time_steps=400)
    coarse = fno1d.burgers_solve(u0, time_steps=50)
    mid = fno1d.burgers_solve(u0, time_steps=100)
    e1, e2 = np.abs(coarse - ref).max(), np.abs(mid - ref).max()
    assert e2 < e1 / 8  # fourth order: halving h divides the error by about 16
    assert e2 < 1e-4 * np.abs(ref).max()
    # the nonlinearity matters (the map is not the heat semigroup)
    lin = np.fft.irfft(np.fft.rfft(u0) * np.exp(-0.1 * (2 * np.pi * np.arange(65)) ** 2), 128)
    assert np.abs(ref - lin).max() > 1e-3 * np.abs(ref).max()


def test_fno1d_data_shapes():
    cfg = _cfg(fno1d)
    d = fno1d.make_data(cfg)
    assert d["x_train"].shape == (cfg["n_train"], cfg["grid"], 2)
    assert d["y_train"].shape == (cfg["n_train"], cfg["grid"], 1)
    assert d["x_test"].shape == (cfg["n_test"], cfg["grid"], 2)
    assert np.allclose(d["x_train"][0, :, 1], np.arange(cfg["grid"]) / cfg["grid"])


# -- the modules ------------------------------------------------------------------------------

def test_spectral_conv1d_channels_last_module(device):
    torchlean.manual_seed(0)
    m = SpectralConv1dChannelsLast(6, 6, 5).to(device)
    assert dict((k, tuple(v.shape)) for k, v in m.named_parameters()) == {"weight_re": (5, 6, 6),
                                                                          "weight_im": (5, 6, 6)}
    for p in (m.weight_re, m.weight_im):
        w = p.numpy()
        assert w.min() >= 0 and w.max() < 1 / 36 and w.max() > 0.5 / 36
    x = torchlean.randn(3, 16, 6, device=device)
    y = m(x)
    assert y.shape == (3, 16, 6)
    # against numpy: keep the lowest 5 modes, multiply by (re + i im)[k, in, out]
    X = np.fft.rfft(x.numpy().astype(np.float64), axis=1)
    W = m.weight_re.numpy().astype(np.float64) + 1j * m.weight_im.numpy().astype(np.float64)
    Y = np.zeros_like(X)
    Y[:, :5] = np.einsum("bki,kio->bko", X[:, :5], W)
    assert np.allclose(y.numpy(), np.fft.irfft(Y, 16, axis=1), atol=1e-5)
    y.sum().backward()
    assert m.weight_re.grad is not None and m.weight_im.grad is not None
    assert "modes=5" in repr(m)


def test_spectral_conv1d_channels_last_errors():
    with pytest.raises(ArgumentError, match="SpectralConv1dChannelsLast.*out_channels"):
        SpectralConv1dChannelsLast(4, 6, 3)
    with pytest.raises(ArgumentError, match="SpectralConv1dChannelsLast.*modes"):
        SpectralConv1dChannelsLast(4, 4, 0)
    m = SpectralConv1dChannelsLast(4, 4, 9)
    with pytest.raises(ArgumentError, match="modes"):
        m(torchlean.randn(2, 8, 4))  # grid 8 has 5 modes
    with pytest.raises(ShapeError):
        m(torchlean.randn(2, 16, 3))


class _TorchReferenceSpectralConv1d:
    """fourier_1d.py's SpectralConv1d, written in torch as the reference writes it."""

    @staticmethod
    def build(torch, cin, cout, modes):
        class SpectralConv1dRef(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.in_channels, self.out_channels, self.modes1 = cin, cout, modes
                self.scale = 1 / (cin * cout)
                self.weights1 = torch.nn.Parameter(self.scale * torch.rand(cin, cout, modes, dtype=torch.cfloat))

            def forward(self, x):
                x_ft = torch.fft.rfft(x)
                out_ft = torch.zeros(x.shape[0], self.out_channels, x.size(-1) // 2 + 1, device=x.device,
                                     dtype=torch.cfloat)
                out_ft[:, :, :self.modes1] = torch.einsum("bix,iox->box", x_ft[:, :, :self.modes1], self.weights1)
                return torch.fft.irfft(out_ft, n=x.size(-1))
        return SpectralConv1dRef()


@pytest.mark.parametrize("cin,cout,grid,modes", [(6, 6, 32, 9), (6, 6, 31, 16), (3, 5, 20, 11), (4, 2, 16, 3)])
def test_spectral_conv1d_is_the_reference_layer(device, cin, cout, grid, modes):
    """nn.SpectralConv1d has fourier_1d.py's signature, layout (channels first) and complex weights1:
    a torch state dict loads as it is, and output and gradients match torch's (fused path when
    in == out, the rfft-einsum-irfft composition otherwise)."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    ref = _TorchReferenceSpectralConv1d.build(torch, cin, cout, modes)
    m = SpectralConv1d(cin, cout, modes).to(device)
    assert [(k, tuple(v.shape), str(v.dtype)) for k, v in m.state_dict().items()] == [
        ("weights1", (cin, cout, modes), "torchlean.complex64")]
    w = m.weights1.numpy()
    assert w.real.min() >= 0 and w.real.max() < 1 / (cin * cout) and w.imag.max() > 0  # the reference's draw
    m.load_state_dict(ref.state_dict())
    x = np.random.default_rng(1).standard_normal((3, cin, grid)).astype(np.float32)
    g = np.random.default_rng(2).standard_normal((3, cout, grid)).astype(np.float32)
    tx = torch.tensor(x, requires_grad=True)
    ty = ref(tx)
    (ty * torch.tensor(g)).sum().backward()
    lx = torchlean.tensor(x, device=device, requires_grad=True)
    ly = m(lx)
    (ly * torchlean.tensor(g, device=device)).sum().backward()
    assert ly.shape == (3, cout, grid)
    scale = float(ty.detach().abs().max())
    np.testing.assert_allclose(ly.numpy(), ty.detach().numpy(), rtol=0, atol=2e-6 * scale)
    np.testing.assert_allclose(lx.grad.numpy(), tx.grad.numpy(), rtol=0, atol=2e-6 * float(tx.grad.abs().max()))
    dw_ref = ref.weights1.grad.numpy()
    np.testing.assert_allclose(m.weights1.grad.numpy(), dw_ref, rtol=0, atol=2e-6 * float(np.abs(dw_ref).max()))


def test_spectral_conv1d_errors():
    m = SpectralConv1d(4, 4, 9)
    with pytest.raises(ArgumentError, match="SpectralConv1d: modes1=9 exceeds the 5 frequencies"):
        m(torchlean.randn(2, 4, 8))
    with pytest.raises(ShapeError, match=r"SpectralConv1d: x must be .*\(batch, in_channels=4, grid\)"):
        m(torchlean.randn(2, 16, 4 + 1))
    with pytest.raises(ShapeError, match="SpectralConv1d"):
        m(torchlean.randn(4, 16))
    with pytest.raises(ArgumentError, match="SpectralConv1d.*modes1"):
        SpectralConv1d(4, 4, 0)


def test_fno1d_module(device):
    torchlean.manual_seed(0)
    m = FNO1d(modes=4, width=8, in_channels=2, out_channels=3, n_layers=3).to(device)
    names = {k: tuple(v.shape) for k, v in m.named_parameters()}
    assert names["lift.weight"] == (8, 2) and names["proj1.weight"] == (128, 8)
    assert names["proj2.weight"] == (3, 128) and names["spectral.2.weight_re"] == (4, 8, 8)
    assert names["pointwise.2.weight"] == (8, 8)
    assert len(names) == 2 + 3 * 4 + 4
    x = torchlean.randn(2, 16, 2, device=device)
    y = m(x)
    assert y.shape == (2, 16, 3)
    assert m(x[0]).shape == (16, 3)  # unbatched
    assert np.allclose(m(x[0]).numpy(), y.numpy()[0], atol=1e-5)
    # forward by hand: GELU after every block but the last
    F = torchlean.nn.functional
    v = m.lift(x)
    for i in range(3):
        v = m.spectral[i](v) + m.pointwise[i](v)
        if i < 2:
            v = F.gelu(v)
    ref = m.proj2(F.gelu(m.proj1(v)))
    assert np.array_equal(ref.numpy(), y.numpy())
    y.sum().backward()
    assert all(p.grad is not None for p in m.parameters())
    with pytest.raises(ArgumentError, match="FNO1d.*width"):
        FNO1d(4, 0)
