"""fno1d: a Fourier Neural Operator learns the solution operator of Burgers' equation.

The task (Li et al., "Fourier Neural Operator for Parametric PDEs", ICLR 2021, section 5.1):
learn the map u0 -> u(., t=1) for the viscous Burgers equation on the periodic interval [0, 1),

    u_t + u u_x = nu u_xx,    nu = 0.1,

with initial conditions drawn from the Gaussian random field N(0, 625 (-Delta + 25 I)^(-2))
(mean-free, as in the paper's data generator). Everything is generated here, on the fly, from the
seed (nothing is downloaded; ``torchlean train`` keeps the generated pairs in its data cache,
torchlean/data_cache.py):

* ``grf_1d``: u0 = sum_{k>=1} sqrt(2) 25 / (4 pi^2 k^2 + 25) (xi_k cos 2 pi k x + eta_k sin 2 pi k x),
  xi, eta ~ N(0, 1): the covariance's eigenfunctions sqrt(2) cos, sqrt(2) sin of -Delta with the
  square roots of its eigenvalues 625 / (4 pi^2 k^2 + 25)^2.
* ``burgers_solve``: a pseudo-spectral solver in float64 NumPy, vectorized over samples: FFT in
  space, 2/3-rule dealiasing of the nonlinear term (u^2/2)_x, ETDRK4 in time (Cox & Matthews 2002,
  with the contour-integral coefficients of Kassam & Trefethen 2005), which integrates the stiff
  diffusion exactly. ``solve_grid`` points, subsampled to ``grid`` for the model.

The model (``torchlean.nn.FNO1d``) sees two input channels (u0(x), x) on ``grid`` points and
predicts u(x, 1). Training loss and test metric: the relative L2 error
||pred - true|| / ||true|| per sample, averaged (the paper's ``LpLoss``). With nu = 0.1 the
solution at t = 1 is about 60 times smaller than u0, so the model is trained on targets divided by
``data["y_scale"]`` (their RMS over the training set) and ``evaluate`` scales its predictions back:
the relative error does not change under the scaling, the optimization is better conditioned.

A user's starting point: copy this file, change ``make_data`` and the sizes in ``default_config``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import torchlean
from torchlean import nn, optim
from torchlean.nn.modules.fno import FNO1d

NAME = "fno1d"
DESCRIPTION = "Fourier Neural Operator on Burgers' equation (nu = 0.1, GRF initial data): u0 -> u(t=1)"
METRIC = "test_rel_l2"
LOWER_IS_BETTER = True
# the config keys make_data reads: torchlean train caches the data keyed by them (torchlean/data_cache.py)
DATA_KEYS = ("seed", "n_train", "n_test", "grid", "solve_grid", "time_steps")

NU = 0.1
T_FINAL = 1.0
MAX_MODES = 512


def default_config() -> dict:
    """CPU defaults: about 1 s of data generation and 25-40 s of training on 2 idle cores (about
    24 ms per step), test relative L2 about 0.003."""
    return {
        "steps": 1000, "batch_size": 20, "lr": 2e-3, "seed": 0, "weight_decay": 1e-4,
        "n_train": 1000, "n_test": 200, "grid": 128, "solve_grid": 128, "time_steps": 100,
        "modes": 16, "width": 32, "n_layers": 4,
    }


def cuda_config() -> dict:
    """The paper's setup: resolution 1024, width 64, 500 epochs of 1000 samples (batch 20),
    lr 1e-3 halved every 100 epochs (the solver takes about 4 s of one core's time at 1024 points,
    spread over the host's cores; ``torchlean train`` then keeps the data in its cache)."""
    return {
        "steps": 25000, "batch_size": 20, "lr": 1e-3, "weight_decay": 1e-4, "scheduler": "step",
        "step_size": 5000, "gamma": 0.5, "n_train": 1000, "n_test": 200, "grid": 1024, "solve_grid": 1024,
        "time_steps": 100, "modes": 16, "width": 64, "n_layers": 4,
    }


def tiny_config() -> dict:
    return {
        "steps": 40, "batch_size": 4, "lr": 5e-3, "n_train": 16, "n_test": 8, "grid": 32, "solve_grid": 32,
        "time_steps": 50, "modes": 6, "width": 8, "n_layers": 2,
    }


# -- data: a Gaussian random field and a pseudo-spectral Burgers solver ---------------------

def grf_1d(rng: np.random.Generator, n_samples: int, n: int) -> np.ndarray:
    """n_samples draws of N(0, 625 (-Delta + 25 I)^(-2)) on [0, 1) periodic, mean free, at n points
    x_j = j / n: float64 (n_samples, n)."""
    # the same MAX_MODES coefficients are drawn at every resolution, so a seed gives the same fields
    # at every n (truncated below the Nyquist bin; the std of mode 512 is 2.4e-6 of mode 1's)
    xi = rng.standard_normal((n_samples, MAX_MODES))
    eta = rng.standard_normal((n_samples, MAX_MODES))
    k = np.arange(1, min(n // 2, MAX_MODES + 1))  # skip the mean and the Nyquist bin
    xi, eta = xi[:, :k.size], eta[:, :k.size]
    std = math.sqrt(2.0) * 25.0 / (4.0 * math.pi ** 2 * k ** 2 + 25.0)
    spec = np.zeros((n_samples, n // 2 + 1), dtype=np.complex128)
    # rfft of cos(2 pi k x) is n/2 at bin k, of sin(2 pi k x) is -i n/2
    spec[:, 1:k.size + 1] = (n / 2) * std * (xi - 1j * eta)
    return np.fft.irfft(spec, n, axis=-1)


def _etdrk4_coefficients(lin: np.ndarray, h: float, contour_points: int = 32) -> tuple[np.ndarray, ...]:
    """E, E2, Q, f1, f2, f3 of ETDRK4 for the diagonal linear operator ``lin`` and step h, by the
    contour integrals of Kassam & Trefethen (2005), which avoid the cancellation near L h = 0."""
    r = np.exp(1j * math.pi * (np.arange(1, contour_points + 1) - 0.5) / contour_points)
    lr = h * lin[:, None] + r[None, :]
    e = np.exp(lr)
    q = h * np.real(np.mean((np.exp(lr / 2) - 1) / lr, axis=1))
    f1 = h * np.real(np.mean((-4 - lr + e * (4 - 3 * lr + lr ** 2)) / lr ** 3, axis=1))
    f2 = h * np.real(np.mean((2 + lr + e * (lr - 2)) / lr ** 3, axis=1))
    f3 = h * np.real(np.mean((-4 - 3 * lr - lr ** 2 + e * (4 - lr)) / lr ** 3, axis=1))
    return np.exp(h * lin), np.exp(h * lin / 2), q, f1, f2, f3


def burgers_solve(u0: np.ndarray, nu: float = NU, t_final: float = T_FINAL, time_steps: int = 100,
                  workers: int | None = None) -> np.ndarray:
    """u(., t_final) for u_t + (u^2 / 2)_x = nu u_xx on [0, 1) periodic; u0 (n_samples, n) float64.

    ETDRK4 with ``time_steps`` equal steps, FFT in space, nonlinear term dealiased by the 2/3 rule.
    The samples are independent: they are solved in blocks small enough for the CPU's cache, on
    ``workers`` threads (default: torchlean's CPU thread count, ``torchlean.get_num_threads()``;
    NumPy's FFTs and array arithmetic release the GIL). Every sample goes through the same operations whatever the blocking, so the result does
    not depend on the block size or the number of workers (bit for bit).
    """
    u0 = np.asarray(u0, dtype=np.float64)
    n = u0.shape[-1]
    rows = u0.reshape(-1, n)
    wave = 2.0 * math.pi * np.arange(n // 2 + 1)  # d/dx -> i * wave
    lin = -nu * wave ** 2
    h = t_final / time_steps
    coef = _etdrk4_coefficients(lin, h)
    keep = np.arange(n // 2 + 1) < n / 3.0  # 2/3 rule: zero bins k >= n/3
    g = -0.5j * wave * keep  # N(v) = -(1/2) i k FFT(u^2), dealiased
    block = max(1, _BLOCK_BYTES // (16 * (n // 2 + 1)))  # rows whose spectra fit the block budget
    starts = range(0, len(rows), block)
    out = np.empty_like(rows)

    def solve(s: int) -> None:
        out[s:s + block] = _etdrk4_solve(rows[s:s + block], n, g, coef, time_steps)

    workers = torchlean.get_num_threads() if workers is None else int(workers)  # the CPU backend's thread count
    workers = min(len(starts), max(1, workers))
    if workers > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(solve, starts))
    else:
        for s in starts:
            solve(s)
    return out.reshape(u0.shape)


# about 8 spectra of this size are live per block: 256 KiB each keeps a block in a core's L2 cache
_BLOCK_BYTES = 1 << 18


def _etdrk4_solve(u0: np.ndarray, n: int, g: np.ndarray, coef: tuple[np.ndarray, ...], time_steps: int) -> np.ndarray:
    E, E2, Q, f1, f2, f3 = coef

    def nonlinear(v: np.ndarray) -> np.ndarray:
        u = np.fft.irfft(v, n, axis=-1)
        return g * np.fft.rfft(u * u, axis=-1)

    v = np.fft.rfft(u0, axis=-1)
    for _ in range(time_steps):
        nv = nonlinear(v)
        a = E2 * v + Q * nv
        na = nonlinear(a)
        b = E2 * v + Q * na
        nb = nonlinear(b)
        c = E2 * a + Q * (2 * nb - nv)
        nc = nonlinear(c)
        v = E * v + nv * f1 + 2 * (na + nb) * f2 + nc * f3
    return np.fft.irfft(v, n, axis=-1)


def make_data(cfg: dict) -> dict:
    """Pairs u0 -> u(t=1), generated from cfg["seed"]: x_train (n_train, grid, 2) = (u0, x),
    y_train (n_train, grid, 1), same for test; float32. Deterministic."""
    n_train, n_test, grid = int(cfg["n_train"]), int(cfg["n_test"]), int(cfg["grid"])
    solve_grid = int(cfg.get("solve_grid", grid))
    if solve_grid % grid:
        raise ValueError(f"fno1d: solve_grid ({solve_grid}) must be a multiple of grid ({grid})")
    rng = np.random.default_rng([int(cfg["seed"]), 6001])
    u0 = grf_1d(rng, n_train + n_test, solve_grid)
    u1 = burgers_solve(u0, NU, T_FINAL, int(cfg.get("time_steps", 100)))
    sub = solve_grid // grid
    u0, u1 = u0[:, ::sub], u1[:, ::sub]
    xs = np.broadcast_to(np.arange(grid) / grid, u0.shape)
    inputs = np.stack([u0, xs], axis=-1).astype(np.float32)
    targets = u1[..., None].astype(np.float32)
    # u(t=1) is about 60x smaller than u0 (nu = 0.1 damps it): the model learns u(t=1) / y_scale,
    # of unit size, and predictions are scaled back (the relative L2 error is scale invariant)
    y_scale = float(np.sqrt(np.mean(targets[:n_train].astype(np.float64) ** 2)))
    return {"x_train": inputs[:n_train], "y_train": targets[:n_train],
            "x_test": inputs[n_train:], "y_test": targets[n_train:], "y_scale": y_scale}


# -- model, optimizer, batches, loss, metric ----------------------------------------------

def make_model(cfg: dict) -> nn.Module:
    torchlean.manual_seed(int(cfg["seed"]))
    return FNO1d(int(cfg["modes"]), int(cfg["width"]), in_channels=2, out_channels=1,
                 n_layers=int(cfg.get("n_layers", 4)))


def make_optimizer(model: nn.Module, cfg: dict) -> tuple[Any, Any]:
    """Adam; the scheduler is stepped once per training step: cosine annealing over cfg["steps"]
    (default) or, with cfg["scheduler"] == "step", StepLR(step_size, gamma) as in the paper."""
    opt = optim.Adam(model.parameters(), lr=float(cfg["lr"]), weight_decay=float(cfg.get("weight_decay", 0.0)))
    if cfg.get("scheduler", "cosine") == "step":
        sched = optim.lr_scheduler.StepLR(opt, int(cfg["step_size"]), float(cfg.get("gamma", 0.5)))
    else:
        sched = optim.lr_scheduler.CosineAnnealingLR(opt, max(1, int(cfg["steps"])))
    return opt, sched


def _indices(n: int, batch_size: int, seed: int, step: int) -> np.ndarray:
    """Epoch-wise shuffling (every sample once per epoch), a function of (seed, step) only."""
    batch_size = min(batch_size, n)
    per_epoch = n // batch_size
    epoch, i = divmod(step, per_epoch)
    perm = np.random.default_rng([seed, 6002, epoch]).permutation(n)
    return perm[i * batch_size:(i + 1) * batch_size]


def get_batch(data: dict, step: int, cfg: dict, device: str) -> dict:
    idx = _indices(len(data["x_train"]), int(cfg["batch_size"]), int(cfg["seed"]), int(step))
    return {"x": torchlean.tensor(data["x_train"][idx], device=device),
            "y": torchlean.tensor(data["y_train"][idx] / np.float32(data["y_scale"]), device=device)}


def relative_l2(pred: torchlean.Tensor, target: torchlean.Tensor) -> torchlean.Tensor:
    """mean over samples of ||pred - target||_2 / ||target||_2 (norms over all but the first axis)."""
    b = pred.shape[0]
    diff = (pred - target).reshape(b, -1)
    t = target.reshape(b, -1)
    return ((diff * diff).sum(1).sqrt() / (t * t).sum(1).sqrt()).mean()


def loss_fn(model: nn.Module, batch: dict) -> torchlean.Tensor:
    return relative_l2(model(batch["x"]), batch["y"])


def _predict(model: nn.Module, x: np.ndarray, y_scale: float, device: str, chunk: int = 100) -> np.ndarray:
    """u(t=1) predicted for inputs x, in physical units."""
    outs = []
    for s in range(0, len(x), chunk):
        outs.append(model(torchlean.tensor(x[s:s + chunk], device=device)).numpy())
    return np.concatenate(outs, axis=0) * np.float32(y_scale)


def evaluate(model: nn.Module, data: dict, cfg: dict, device: str) -> dict:
    """Relative L2 error on the test set (float64 norms of the float32 predictions)."""
    model.eval()
    try:
        with torchlean.no_grad():
            pred = _predict(model, data["x_test"], data["y_scale"], device).astype(np.float64)
    finally:
        model.train()
    y = data["y_test"].astype(np.float64)
    n = len(y)
    err = np.linalg.norm((pred - y).reshape(n, -1), axis=1) / np.linalg.norm(y.reshape(n, -1), axis=1)
    mse = float(np.mean((pred - y) ** 2))
    return {METRIC: float(err.mean()), "test_rel_l2_max": float(err.max()), "test_mse": mse}


def plot_predictions(model: nn.Module, data: dict, cfg: dict, device: str, path: str) -> None:
    """Predicted against true u(x, 1) for four test samples, with u0 for reference (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    k = min(4, len(data["x_test"]))
    model.eval()
    try:
        with torchlean.no_grad():
            pred = _predict(model, data["x_test"][:k], data["y_scale"], device)
    finally:
        model.train()
    fig, axes = plt.subplots(1, k, figsize=(4 * k, 3.2), squeeze=False)
    for j, ax in enumerate(axes[0]):
        x = data["x_test"][j, :, 1]
        ax.plot(x, data["x_test"][j, :, 0], color="0.7", lw=1, label="u0")
        ax.plot(x, data["y_test"][j, :, 0], "k-", lw=1.5, label="true u(t=1)")
        ax.plot(x, pred[j, :, 0], "r--", lw=1.5, label="FNO")
        err = np.linalg.norm(pred[j] - data["y_test"][j]) / np.linalg.norm(data["y_test"][j])
        ax.set_title(f"test sample {j}: rel L2 {err:.3g}")
        ax.set_xlabel("x")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
