"""fno2d_ns: a 2-D Fourier Neural Operator rolls the 2-D Navier-Stokes equations forward in time.

The task (Li et al., "Fourier Neural Operator for Parametric PDEs", ICLR 2021, section 5.3, and
the reference program ``fourier_2d_time.py``): the vorticity w on the unit torus,

    w_t + u . grad w = nu Delta w + f,   div u = 0,   nu = 1e-3,
    f = 0.1 (sin 2 pi (x + y) + cos 2 pi (x + y)),

from a Gaussian random initial vorticity (alpha 2.5, tau 7); the model sees w at t = 1..t_in and
predicts t_in + 1, one unit of time per call, fed back autoregressively for t_out steps (the
reference: 10 -> 10 on 64 x 64). Generated here from the seed by ``fno2d_data.navier_stokes``
(the paper's pseudo-spectral Crank-Nicolson scheme, time step ``dt``; see that module) and kept in
the data cache of ``torchlean train``.

Model: ``torchlean.nn.FNO2d(modes, modes, width, in_channels=t_in, padding=0,
unused_batchnorm=True)``, the reference's layout (periodic data: no padding). Loss, as the
reference's: the relative L2 error of each predicted step (LpLoss), over the t_out steps of the
rollout; here averaged over steps and batch where the reference sums, with the weight decay
divided by the same factor (batch x t_out), which leaves Adam's steps as the reference's. Metric:
``test_rel_l2``, the relative L2 error of the whole predicted trajectory (t_out fields) per test
sample, averaged (the reference's ``test_l2_full``), and ``test_rel_l2_step``, the per-step error
averaged over steps and samples (its ``test_l2_step``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

import torchlean
from torchlean import nn

from . import fno2d, fno2d_data

NAME = "fno2d_ns"
DESCRIPTION = "2-D Fourier Neural Operator on Navier-Stokes (vorticity, nu = 1e-3): 10 steps -> next 10, autoregressive"
METRIC = "test_rel_l2"
LOWER_IS_BETTER = True
DATA_KEYS = ("seed", "n_train", "n_test", "grid", "solve_grid", "t_in", "t_out", "dt")
DATA_MODULES = (fno2d_data,)

make_optimizer = fno2d.make_optimizer


def default_config() -> dict:
    """CPU defaults: 32 x 32, 100 training trajectories, 100 steps: a couple of minutes on a
    2-core machine (figures: BENCHMARKS.md)."""
    return {
        "steps": 100, "batch_size": 10, "lr": 3e-3, "seed": 0, "weight_decay": 1e-4 / 100,
        "scheduler": "step", "step_size": 35, "gamma": 0.5,
        "n_train": 100, "n_test": 20, "grid": 32, "solve_grid": 32, "t_in": 10, "t_out": 10, "dt": 1 / 256,
        "modes": 8, "width": 12,
    }


def cuda_config() -> dict:
    """The reference fourier_2d_time.py at nu = 1e-3: 1000 training and 200 test trajectories on
    64 x 64, 10 -> 10 steps, width 20, 12 modes, batch 20, Adam lr 1e-3 and weight decay 1e-4
    (on the reference's summed loss), StepLR(100 epochs, 0.5), 500 epochs. The trajectories are
    solved on the host's cores and kept by the data cache."""
    return {
        "steps": 25000, "batch_size": 20, "lr": 1e-3, "weight_decay": 1e-4 / 200, "scheduler": "step",
        "step_size": 5000, "gamma": 0.5, "n_train": 1000, "n_test": 200, "grid": 64, "solve_grid": 64,
        "t_in": 10, "t_out": 10, "dt": 1 / 256, "modes": 12, "width": 20,
    }


def tiny_config() -> dict:
    return {
        "steps": 20, "batch_size": 4, "lr": 5e-3, "step_size": 10, "n_train": 8, "n_test": 4, "grid": 8,
        "solve_grid": 16, "t_in": 3, "t_out": 2, "dt": 1 / 32, "modes": 3, "width": 6,
    }


def make_data(cfg: dict) -> dict:
    """x_* (n, grid, grid, t_in): w at t = 1..t_in; y_* (n, grid, grid, t_out): w at the next
    t_out unit times. float32, deterministic in the seed."""
    n_train, n_test = int(cfg["n_train"]), int(cfg["n_test"])
    grid, solve_grid = int(cfg["grid"]), int(cfg["solve_grid"])
    t_in, t_out = int(cfg["t_in"]), int(cfg["t_out"])
    if solve_grid % grid:
        raise ValueError(f"fno2d_ns: solve_grid ({solve_grid}) must be a multiple of grid ({grid})")
    rng = np.random.default_rng([int(cfg["seed"]), 6201])
    w0 = fno2d_data.grf_periodic(rng, n_train + n_test, solve_grid)
    w = fno2d_data.navier_stokes(w0, fno2d_data.ns_forcing(solve_grid), fno2d_data.NU, float(t_in + t_out),
                                 float(cfg["dt"]))
    sub = solve_grid // grid
    w = w[:, ::sub, ::sub].astype(np.float32)
    x, y = w[..., :t_in], w[..., t_in:]
    return {"x_train": x[:n_train], "y_train": y[:n_train], "x_test": x[n_train:], "y_test": y[n_train:]}


def make_model(cfg: dict) -> nn.Module:
    torchlean.manual_seed(int(cfg["seed"]))
    return fno2d.FNO2d(int(cfg["modes"]), int(cfg["modes"]), int(cfg["width"]), in_channels=int(cfg["t_in"]),
                       padding=0, unused_batchnorm=True)


def get_batch(data: dict, step: int, cfg: dict, device: str) -> dict:
    idx = fno2d.epoch_indices(len(data["x_train"]), int(cfg["batch_size"]), int(cfg["seed"]), int(step))
    return {"x": torchlean.tensor(data["x_train"][idx], device=device),
            "y": torchlean.tensor(data["y_train"][idx], device=device)}


def rollout(model: nn.Module, x: torchlean.Tensor, steps: int) -> list[torchlean.Tensor]:
    """The reference's autoregressive loop: each prediction (b, s, s, 1) replaces the oldest input."""
    preds = []
    for _ in range(steps):
        im = model(x)
        preds.append(im)
        x = torchlean.cat((x[..., 1:], im), dim=-1)
    return preds


def loss_fn(model: nn.Module, batch: dict) -> torchlean.Tensor:
    y = batch["y"]
    t_out = y.shape[-1]
    loss = 0
    for t, im in enumerate(rollout(model, batch["x"], t_out)):
        loss = loss + fno2d.relative_l2(im, y[..., t:t + 1])
    return loss / t_out


def _predict(model: nn.Module, x: np.ndarray, steps: int, device: str, chunk: int = 50) -> np.ndarray:
    outs = []
    model.eval()
    try:
        with torchlean.no_grad():
            for s in range(0, len(x), chunk):
                preds = rollout(model, torchlean.tensor(x[s:s + chunk], device=device), steps)
                outs.append(torchlean.cat(preds, dim=-1).numpy())
    finally:
        model.train()
    return np.concatenate(outs, axis=0)


def evaluate(model: nn.Module, data: dict, cfg: dict, device: str) -> dict:
    y = data["y_test"].astype(np.float64)
    pred = _predict(model, data["x_test"], y.shape[-1], device).astype(np.float64)
    n = len(y)
    full = np.linalg.norm((pred - y).reshape(n, -1), axis=1) / np.linalg.norm(y.reshape(n, -1), axis=1)
    step = np.linalg.norm(pred - y, axis=(1, 2)) / np.linalg.norm(y, axis=(1, 2))  # (n, t_out)
    return {METRIC: float(full.mean()), "test_rel_l2_step": float(step.mean()),
            "test_rel_l2_last_step": float(step[:, -1].mean())}


def plot_predictions(model: nn.Module, data: dict, cfg: dict, device: str, path: str) -> None:
    """True and predicted vorticity at the first and last predicted times of two test samples (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    k = min(2, len(data["x_test"]))
    y = data["y_test"][:k]
    pred = _predict(model, data["x_test"][:k], y.shape[-1], device)
    t_in = data["x_test"].shape[-1]
    fig, axes = plt.subplots(k, 4, figsize=(13, 3.2 * k), squeeze=False)
    for j in range(k):
        for col, (t, src, what) in enumerate(((0, y, "true"), (0, pred, "FNO"), (-1, y, "true"), (-1, pred, "FNO"))):
            ax = axes[j][col]
            im = ax.imshow(src[j, ..., t], origin="lower", cmap="RdBu_r")
            ax.set_title(f"sample {j}: {what} w(t={t_in + 1 if t == 0 else t_in + y.shape[-1]})", fontsize=9)
            ax.set_xticks([])
            ax.set_yticks([])
            fig.colorbar(im, ax=ax, fraction=0.046)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
