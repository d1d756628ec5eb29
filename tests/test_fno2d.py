"""The 2-D FNO examples (issue 25): the data generators of torchlean/examples/fno2d_data.py against
known answers, ``nn.FNO2d``/``nn.FNO3d`` against the reference programs' modules written in torch
(same state-dict keys, shapes and dtypes; a reference state dict loads and gives the reference's
outputs), and the examples ``fno2d`` (Darcy) and ``fno2d_ns`` (Navier-Stokes) on tiny settings.
"""

from __future__ import annotations

import math
import types

import numpy as np
import pytest

import torchlean
from torchlean import data_cache
from torchlean.errors import ArgumentError
from torchlean.examples import fno2d, fno2d_data, fno2d_ns
from torchlean.nn import FNO2d, FNO3d

# -- Navier-Stokes -------------------------------------------------------------------------------


def test_grf_periodic_is_mean_free_deterministic_and_has_the_papers_spectrum():
    a = fno2d_data.grf_periodic(np.random.default_rng(3), 64, 32)
    b = fno2d_data.grf_periodic(np.random.default_rng(3), 64, 32)
    assert a.shape == (64, 32, 32) and a.tobytes() == b.tobytes()
    assert np.abs(a.mean(axis=(1, 2))).max() < 1e-12
    # fft2 of Re(ifft2(c)) is (c_k + conj(c_-k)) / 2 with E|c_k|^2 = 2 sqrt_eig^2, so
    # E|w^(k)|^2 = sqrt_eig^2 = n^4 * 2 sigma^2 (4 pi^2 |k|^2 + tau^2)^(-alpha), sigma^2 = tau^3
    spec = np.abs(np.fft.fft2(a)) ** 2
    for k in ((1, 0), (0, 2), (3, 1)):
        want = 32 ** 4 * 2 * 7.0 ** 3 * (4 * math.pi ** 2 * (k[0] ** 2 + k[1] ** 2) + 49) ** -2.5
        assert spec[:, k[0], k[1]].mean() == pytest.approx(want, rel=0.35)


def test_navier_stokes_shear_mode_follows_the_exact_forced_solution():
    # w = A(t) (sin + cos)(2 pi (x + y)) depends on x + y only: its advection vanishes and
    # dA/dt = -8 pi^2 nu A + 0.1 from A(0) = 0 (the forcing of the paper)
    n, nu = 16, 1e-3
    w = fno2d_data.navier_stokes(np.zeros((1, n, n)), fno2d_data.ns_forcing(n), nu, t_final=4.0, dt=1 / 64)
    shape = fno2d_data.ns_forcing(n) / 0.1
    lam = 8 * math.pi ** 2 * nu
    for t in range(4):
        amp = 0.1 / lam * (1 - math.exp(-lam * (t + 1)))
        np.testing.assert_allclose(w[0, ..., t], amp * shape, atol=1e-9 + 1e-6 * amp)


def test_navier_stokes_unforced_mode_decays_at_the_viscous_rate():
    n, nu = 16, 1e-2
    x = np.arange(n) / n
    w0 = np.broadcast_to(np.cos(2 * math.pi * 2 * x)[:, None], (n, n))[None].copy()  # k = (2, 0)
    w = fno2d_data.navier_stokes(w0, None, nu, t_final=2.0, dt=1 / 128)
    for t in range(2):
        np.testing.assert_allclose(w[0, ..., t], math.exp(-nu * 16 * math.pi ** 2 * (t + 1)) * w0[0], atol=1e-5)


def test_navier_stokes_unforced_keeps_the_mean_and_loses_energy():
    w0 = fno2d_data.grf_periodic(np.random.default_rng(0), 3, 32)
    w = fno2d_data.navier_stokes(w0, None, t_final=4.0, dt=1 / 128)
    assert w.shape == (3, 32, 32, 4)
    assert np.abs(w.mean(axis=(1, 2))).max() < 1e-12
    enstrophy = np.concatenate([(w0 ** 2).mean(axis=(1, 2))[:, None], (w ** 2).mean(axis=(1, 2))], axis=1)
    assert np.all(np.diff(enstrophy, axis=1) < 0), enstrophy


def test_navier_stokes_converges_in_time_and_does_not_depend_on_blocks_or_threads(monkeypatch):
    rng = np.random.default_rng(1)
    w0 = fno2d_data.grf_periodic(rng, 5, 16)
    f = fno2d_data.ns_forcing(16)
    fine = fno2d_data.navier_stokes(w0, f, t_final=2.0, dt=1 / 1024)
    coarse = fno2d_data.navier_stokes(w0, f, t_final=2.0, dt=1 / 256)
    assert np.linalg.norm(coarse - fine) / np.linalg.norm(fine) < 1e-3
    for workers in (1, 2):
        again = fno2d_data.navier_stokes(w0, f, t_final=2.0, dt=1 / 256, workers=workers)
        assert again.tobytes() == coarse.tobytes()
    one = fno2d_data.navier_stokes(w0[2:3], f, t_final=2.0, dt=1 / 256)
    assert one.tobytes() == coarse[2:3].tobytes()
    with pytest.raises(ValueError, match="multiples of dt"):
        fno2d_data.navier_stokes(w0, f, t_final=2.0, dt=0.3)


# -- Darcy flow ----------------------------------------------------------------------------------

def test_darcy_constant_coefficient_gives_the_torsion_function():
    # -Delta u = 1 on the unit square, u = 0 on the boundary: u(1/2, 1/2) = 0.0736713...
    n = 65
    u = fno2d_data.darcy_solve(np.full((2, n, n), 1.0))
    assert u[0, n // 2, n // 2] == pytest.approx(0.0736713, rel=2e-3)
    np.testing.assert_allclose(u[0], u[0].T, atol=1e-12)
    np.testing.assert_allclose(u[0], u[0][::-1], atol=1e-12)
    u12 = fno2d_data.darcy_solve(np.full((1, n, n), 12.0))
    np.testing.assert_allclose(u12[0], u[0] / 12, rtol=1e-10, atol=1e-14)
    assert np.all(u[:, 0] == 0) and np.all(u[:, :, -1] == 0)


def test_darcy_solution_satisfies_the_flux_form_equation():
    rng = np.random.default_rng(2)
    a = fno2d_data.darcy_coefficient(fno2d_data.grf_cosine(rng, 2, 33))
    assert set(np.unique(a)) == {3.0, 12.0}
    u = fno2d_data.darcy_solve(a)
    h = 1 / 32
    for s in range(2):
        c, v = a[s], u[s]
        # the discrete -div(a grad u) at interior nodes, written out face by face
        flux = ((c[1:-1, 1:-1] + c[2:, 1:-1]) / 2 * (v[2:, 1:-1] - v[1:-1, 1:-1])
                - (c[1:-1, 1:-1] + c[:-2, 1:-1]) / 2 * (v[1:-1, 1:-1] - v[:-2, 1:-1])
                + (c[1:-1, 1:-1] + c[1:-1, 2:]) / 2 * (v[1:-1, 2:] - v[1:-1, 1:-1])
                - (c[1:-1, 1:-1] + c[1:-1, :-2]) / 2 * (v[1:-1, 1:-1] - v[1:-1, :-2])) / h ** 2
        np.testing.assert_allclose(-flux, 1.0, atol=1e-8)
        assert v[1:-1, 1:-1].min() > 0  # maximum principle: a positive source keeps u > 0 inside


def test_darcy_data_is_deterministic_and_subsampled_like_the_reference():
    a, u = fno2d_data.darcy_data(np.random.default_rng(7), 3, 41, 5)
    a2, u2 = fno2d_data.darcy_data(np.random.default_rng(7), 3, 41, 5, workers=2)
    assert a.shape == u.shape == (3, 9, 9)
    assert a.tobytes() == a2.tobytes() and u.tobytes() == u2.tobytes()
    with pytest.raises(ValueError, match="multiple of subsample"):
        fno2d_data.darcy_data(np.random.default_rng(7), 1, 42, 5)


# -- the modules against the reference programs' ----------------------------------------------

torch = pytest.importorskip("torch")


def _reference_modules():
    """fourier_2d.py's, fourier_2d_time.py's and fourier_3d.py's modules (their layout; forward as
    the reference's, with gelu between the Fourier layers)."""
    nn_, F_ = torch.nn, torch.nn.functional

    class SpectralConv2d(nn_.Module):
        def __init__(self, i, o, m1, m2):
            super().__init__()
            self.modes1, self.modes2 = m1, m2
            scale = 1 / (i * o)
            self.weights1 = nn_.Parameter(scale * torch.rand(i, o, m1, m2, dtype=torch.cfloat))
            self.weights2 = nn_.Parameter(scale * torch.rand(i, o, m1, m2, dtype=torch.cfloat))

        def forward(self, x):
            x_ft = torch.fft.rfft2(x)
            out = torch.zeros(x.shape[0], self.weights1.shape[1], x.size(-2), x.size(-1) // 2 + 1, dtype=torch.cfloat)
            m1, m2 = self.modes1, self.modes2
            out[:, :, :m1, :m2] = torch.einsum("bixy,ioxy->boxy", x_ft[:, :, :m1, :m2], self.weights1)
            out[:, :, -m1:, :m2] = torch.einsum("bixy,ioxy->boxy", x_ft[:, :, -m1:, :m2], self.weights2)
            return torch.fft.irfft2(out, s=(x.size(-2), x.size(-1)))

    class SpectralConv3d(nn_.Module):
        def __init__(self, i, o, m1, m2, m3):
            super().__init__()
            self.m = (m1, m2, m3)
            scale = 1 / (i * o)
            for k in range(1, 5):
                setattr(self, f"weights{k}", nn_.Parameter(scale * torch.rand(i, o, m1, m2, m3, dtype=torch.cfloat)))

        def forward(self, x):
            x_ft = torch.fft.rfftn(x, dim=[-3, -2, -1])
            out = torch.zeros(x.shape[0], self.weights1.shape[1], x.size(-3), x.size(-2), x.size(-1) // 2 + 1,
                              dtype=torch.cfloat)
            m1, m2, m3 = self.m
            corners = ((slice(None, m1), slice(None, m2)), (slice(-m1, None), slice(None, m2)),
                       (slice(None, m1), slice(-m2, None)), (slice(-m1, None), slice(-m2, None)))
            for k, (s1, s2) in enumerate(corners, 1):
                out[:, :, s1, s2, :m3] = torch.einsum("bixyz,ioxyz->boxyz", x_ft[:, :, s1, s2, :m3],
                                                      getattr(self, f"weights{k}"))
            return torch.fft.irfftn(out, s=(x.size(-3), x.size(-2), x.size(-1)))

    class FNO(nn_.Module):
        def __init__(self, dims, modes, width, fc0_in, padding, bn):
            super().__init__()
            self.dims, self.padding = dims, padding
            self.fc0 = nn_.Linear(fc0_in, width)
            conv = SpectralConv2d if dims == 2 else SpectralConv3d
            point = nn_.Conv2d if dims == 2 else nn_.Conv3d
            for i in range(4):
                setattr(self, f"conv{i}", conv(width, width, *modes))
            for i in range(4):
                setattr(self, f"w{i}", point(width, width, 1))
            if bn:
                for i in range(4):
                    setattr(self, f"bn{i}", (nn_.BatchNorm2d if dims == 2 else nn_.BatchNorm3d)(width))
            self.fc1 = nn_.Linear(width, 128)
            self.fc2 = nn_.Linear(128, 1)

        def forward(self, x):
            sizes = x.shape[1:1 + self.dims]
            axes = torch.meshgrid(*[torch.tensor(np.linspace(0, 1, s), dtype=torch.float) for s in sizes],
                                  indexing="ij")
            grid = torch.stack(axes, -1).expand(x.shape[0], *sizes, self.dims)
            x = self.fc0(torch.cat((x, grid), dim=-1))
            x = x.permute(0, self.dims + 1, *range(1, self.dims + 1))
            p = self.padding
            if p:
                x = F_.pad(x, [0, p, 0, p] if self.dims == 2 else [0, p])
            for i in range(4):
                x = getattr(self, f"conv{i}")(x) + getattr(self, f"w{i}")(x)
                if i < 3:
                    x = F_.gelu(x)
            if p:
                x = x[..., :-p, :-p] if self.dims == 2 else x[..., :-p]
            x = x.permute(0, *range(2, self.dims + 2), 1)
            return self.fc2(F_.gelu(self.fc1(x)))

    return FNO


CASES = {
    # name: (reference module args, torchlean module, input shape)
    "fourier_2d": ((2, (5, 4), 8, 3, 9, False), lambda: FNO2d(5, 4, 8), (2, 12, 10, 1)),
    "fourier_2d_time": ((2, (4, 4), 6, 12, 0, True), lambda: FNO2d(4, 4, 6, in_channels=10, padding=0,
                                                                     unused_batchnorm=True), (2, 12, 12, 10)),
    "fourier_3d": ((3, (3, 3, 2), 5, 13, 6, True), lambda: FNO3d(3, 3, 2, 5), (2, 8, 8, 5, 10)),
}


def _to_torchlean(v):
    a = v.detach().numpy()
    return torchlean.from_numpy(a.copy())


@pytest.mark.parametrize("name", list(CASES))
def test_state_dict_matches_the_reference_and_loads(name):
    ref_args, make, shape = CASES[name]
    torch.manual_seed(0)
    ref = _reference_modules()(*ref_args)
    ours = make()
    ref_sd, our_sd = ref.state_dict(), ours.state_dict()
    assert list(our_sd) == list(ref_sd)
    for k in ref_sd:
        assert tuple(our_sd[k].shape) == tuple(ref_sd[k].shape), k
        assert our_sd[k].is_complex() == ref_sd[k].is_complex(), k
    ours.load_state_dict({k: _to_torchlean(v) for k, v in ref_sd.items()})
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    want = ref(torch.from_numpy(x)).detach().numpy()
    got = ours(torchlean.tensor(x)).numpy()
    assert got.shape == want.shape == shape[:-1] + (1,)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * np.abs(want).max())


def test_torchlean_state_dict_loads_into_the_reference():
    ref = _reference_modules()(*CASES["fourier_2d"][0])
    ours = FNO2d(5, 4, 8)
    ref.load_state_dict({k: torch.from_numpy(np.array(v.detach().numpy())) for k, v in ours.state_dict().items()})
    x = np.random.default_rng(1).standard_normal((1, 9, 11, 1)).astype(np.float32)
    np.testing.assert_allclose(ours(torchlean.tensor(x)).numpy(), ref(torch.from_numpy(x)).detach().numpy(),
                               rtol=1e-4, atol=1e-5)


def test_fno_modules_reject_bad_arguments_by_name():
    with pytest.raises(ArgumentError, match="FNO2d: argument modes1"):
        FNO2d(0, 4, 8)
    with pytest.raises(ArgumentError, match="FNO3d: argument padding"):
        FNO3d(2, 2, 2, 4, padding=-1)
    with pytest.raises(ArgumentError, match=r"FNO2d: expected input of shape \(batch, x, y, channels\)"):
        FNO2d(2, 2, 4)(torchlean.randn(3, 8, 1))


# -- the examples ----------------------------------------------------------------------------------

def _train_tiny(ex, steps=None):
    cfg = dict(ex.default_config(), **ex.tiny_config())
    data = ex.make_data(cfg)
    model = ex.make_model(cfg)
    opt, sched = ex.make_optimizer(model, cfg)
    losses = []
    for step in range(steps or cfg["steps"]):
        opt.zero_grad()
        loss = ex.loss_fn(model, ex.get_batch(data, step, cfg, "cpu"))
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    return losses, ex.evaluate(model, data, cfg, "cpu")


@pytest.mark.parametrize("ex", [fno2d, fno2d_ns], ids=lambda e: e.NAME)
def test_example_learns_and_repeats_bitwise(ex):
    losses, metrics = _train_tiny(ex)
    assert all(math.isfinite(v) for v in losses)
    k = max(1, len(losses) // 4)
    assert np.mean(losses[-k:]) < np.mean(losses[:k]), losses
    assert 0 < metrics[ex.METRIC] < 1.5
    again, metrics2 = _train_tiny(ex, steps=3)
    assert again == losses[:3]


def test_darcy_example_data_is_normalized_like_the_reference():
    cfg = dict(fno2d.default_config(), **fno2d.tiny_config())
    data = fno2d.make_data(cfg)
    x = data["x_train"][..., 0].astype(np.float64)
    assert np.abs(x.mean(0)).max() < 1e-4
    std = x.std(0, ddof=1)
    assert np.all((np.abs(std - 1) < 1e-3) | (std < 1e-3))  # a point where every sample has the same a: 0
    assert data["y_mean"].shape == data["y_train"].shape[1:]


def test_data_cache_key_follows_the_generator_module(tmp_path):
    cfg = fno2d.default_config()
    base = data_cache.key_inputs(fno2d, cfg)
    assert base["data_modules_sha256"] == {fno2d_data.__name__: data_cache._source_digest(fno2d_data)}
    src = tmp_path / "gen.py"
    src.write_text("x = 1\n")
    fake = types.SimpleNamespace(**{k: getattr(fno2d, k) for k in ("NAME", "DATA_KEYS", "__file__")})
    fake.DATA_MODULES = (types.SimpleNamespace(__name__=fno2d_data.__name__, __file__=str(src)),)
    first = data_cache.key_inputs(fake, cfg)
    src.write_text("x = 2\n")
    assert data_cache.key_inputs(fake, cfg) != first
    fake.DATA_MODULES = (types.SimpleNamespace(__name__="gone", __file__=str(tmp_path / "missing.py")),)
    assert data_cache.key_inputs(fake, cfg) is None


def test_darcy_solve_in_processes_gives_the_same_bits():
    # grids from _PROCESS_MIN_GRID up are solved in worker processes (SuperLU keeps the GIL)
    n = fno2d_data._PROCESS_MIN_GRID + 1
    a = fno2d_data.darcy_coefficient(fno2d_data.grf_cosine(np.random.default_rng(3), 3, n))
    one = fno2d_data.darcy_solve(a, workers=1)
    assert np.array_equal(one, fno2d_data.darcy_solve(a, workers=2))
    assert np.all(one[:, 1:-1, 1:-1] > 0) and not one[:, 0].any()
