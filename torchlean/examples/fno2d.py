"""fno2d: a 2-D Fourier Neural Operator learns the solution operator of Darcy flow.

The task (Li et al., "Fourier Neural Operator for Parametric PDEs", ICLR 2021, section 5.2, and
the reference program ``fourier_2d.py``): learn a -> u for

    -div(a(x) grad u(x)) = 1 on the unit square,   u = 0 on the boundary,

with a piecewise constant permeability a = 12 where a Gaussian random field (alpha 2, tau 3) is
>= 0, else 3. The data are generated here from the seed by ``fno2d_data`` (five-point finite
differences on a ``solve_grid`` grid, subsampled by ``subsample``; the paper: 421 and 5, giving
85 x 85) and kept in the data cache of ``torchlean train`` (torchlean/data_cache.py).

As in the reference: a and u are normalized point-wise by their training-set mean and standard
deviation (``UnitGaussianNormalizer``); the model is ``torchlean.nn.FNO2d(modes, modes, width)``
(input a(x, y) with the grid appended, the domain padded by 9); the loss is the relative L2
error ||pred - u|| / ||u|| of the decoded prediction, per sample (``LpLoss``); the metric is its
mean over the test set. Two differences in form, none in the optimization: the loss is the mean
over the batch where the reference sums, and the weight decay is divided by the batch size to
match (Adam is invariant to the scale of the loss, up to its eps, but the reference's weight
decay is added to the gradient of the sum); the learning rate schedule is stepped per training
step, so StepLR's ``step_size`` counts steps (the reference's 100 epochs of 50 batches: 5000).

Navier-Stokes, the second data set of the 2-D FNO, is the example ``fno2d_ns``.
``cuda_config()`` (``torchlean train fno2d --config cuda``) is the reference setup.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import torchlean
from torchlean import nn, optim
from torchlean.nn.modules.fno_nd import FNO2d

from . import fno2d_data

NAME = "fno2d"
DESCRIPTION = "2-D Fourier Neural Operator on Darcy flow (piecewise constant permeability): a -> u"
METRIC = "test_rel_l2"
LOWER_IS_BETTER = True
# the config keys make_data reads; the data cache keys the data by them and by the generator's source
DATA_KEYS = ("seed", "n_train", "n_test", "solve_grid", "subsample")
DATA_MODULES = (fno2d_data,)

_EPS = 1e-5  # the reference normalizer's eps


def default_config() -> dict:
    """CPU defaults: 32 x 32 (solved on 63 x 63), 200 training pairs, 300 steps: a couple of
    minutes on a 2-core machine (figures: BENCHMARKS.md)."""
    return {
        "steps": 300, "batch_size": 10, "lr": 3e-3, "seed": 0, "weight_decay": 1e-4 / 10,
        "scheduler": "step", "step_size": 100, "gamma": 0.5,
        "n_train": 200, "n_test": 50, "solve_grid": 63, "subsample": 2,
        "modes": 8, "width": 16, "padding": 9,
    }


def cuda_config() -> dict:
    """The reference fourier_2d.py: 1000 training and 100 test pairs at 85 x 85 (solved on
    421 x 421, one sparse solve per pair, spread over the host's cores), width 32,
    12 modes, batch 20, Adam lr 1e-3 and weight decay 1e-4 (on the batch's summed loss),
    StepLR(100 epochs, 0.5), 500 epochs."""
    return {
        "steps": 25000, "batch_size": 20, "lr": 1e-3, "weight_decay": 1e-4 / 20, "scheduler": "step",
        "step_size": 5000, "gamma": 0.5, "n_train": 1000, "n_test": 100, "solve_grid": 421, "subsample": 5,
        "modes": 12, "width": 32, "padding": 9,
    }


def tiny_config() -> dict:
    return {
        "steps": 30, "batch_size": 4, "lr": 5e-3, "step_size": 20, "n_train": 16, "n_test": 8,
        "solve_grid": 17, "subsample": 2, "modes": 3, "width": 8,
    }


# -- data --------------------------------------------------------------------------------

def _normalizer(train: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The reference's UnitGaussianNormalizer: the training set's point-wise mean and (unbiased)
    standard deviation, float32 like its torch tensors."""
    train = train.astype(np.float32)
    return train.mean(0), train.std(0, ddof=1)


def make_data(cfg: dict) -> dict:
    """x_* (n, s, s, 1): the normalized coefficient; y_* (n, s, s): the solution u (physical
    units); y_mean, y_std (s, s): the solution's normalizer. float32, deterministic in the seed."""
    n_train, n_test = int(cfg["n_train"]), int(cfg["n_test"])
    rng = np.random.default_rng([int(cfg["seed"]), 6101])
    a, u = fno2d_data.darcy_data(rng, n_train + n_test, int(cfg["solve_grid"]), int(cfg["subsample"]))
    a, u = a.astype(np.float32), u.astype(np.float32)
    a_mean, a_std = _normalizer(a[:n_train])
    x = ((a - a_mean) / (a_std + np.float32(_EPS)))[..., None]
    y_mean, y_std = _normalizer(u[:n_train])
    return {"x_train": x[:n_train], "y_train": u[:n_train], "x_test": x[n_train:], "y_test": u[n_train:],
            "y_mean": y_mean, "y_std": y_std}


# -- model, optimizer, batches, loss, metric ----------------------------------------------

def make_model(cfg: dict) -> nn.Module:
    torchlean.manual_seed(int(cfg["seed"]))
    return FNO2d(int(cfg["modes"]), int(cfg["modes"]), int(cfg["width"]), padding=int(cfg.get("padding", 9)))


def make_optimizer(model: nn.Module, cfg: dict) -> tuple[Any, Any]:
    """Adam; StepLR(step_size, gamma) stepped once per training step (cfg["scheduler"] == "step",
    the reference's), else cosine annealing over cfg["steps"]."""
    opt = optim.Adam(model.parameters(), lr=float(cfg["lr"]), weight_decay=float(cfg.get("weight_decay", 0.0)))
    if cfg.get("scheduler", "step") == "step":
        sched = optim.lr_scheduler.StepLR(opt, int(cfg["step_size"]), float(cfg.get("gamma", 0.5)))
    else:
        sched = optim.lr_scheduler.CosineAnnealingLR(opt, max(1, int(cfg["steps"])))
    return opt, sched


def epoch_indices(n: int, batch_size: int, seed: int, step: int) -> np.ndarray:
    """The samples of training step ``step``: every sample once per epoch, in an order drawn from
    (seed, epoch) only, so a resumed run sees the batches of an uninterrupted one."""
    batch_size = min(batch_size, n)
    epoch, i = divmod(step, n // batch_size)
    perm = np.random.default_rng([seed, 6002, epoch]).permutation(n)
    return perm[i * batch_size:(i + 1) * batch_size]


def _decoder(data: dict, device: str) -> tuple[torchlean.Tensor, torchlean.Tensor]:
    return (torchlean.tensor(data["y_std"] + np.float32(_EPS), device=device),
            torchlean.tensor(data["y_mean"], device=device))


def get_batch(data: dict, step: int, cfg: dict, device: str) -> dict:
    idx = epoch_indices(len(data["x_train"]), int(cfg["batch_size"]), int(cfg["seed"]), int(step))
    scale, shift = _decoder(data, device)
    return {"x": torchlean.tensor(data["x_train"][idx], device=device),
            "y": torchlean.tensor(data["y_train"][idx], device=device), "scale": scale, "shift": shift}


def relative_l2(pred: torchlean.Tensor, target: torchlean.Tensor) -> torchlean.Tensor:
    """The reference's LpLoss (p = 2), averaged over the batch: mean of ||pred - y|| / ||y||."""
    b = pred.shape[0]
    diff = torchlean.norm(pred.reshape(b, -1) - target.reshape(b, -1), 2, 1)
    return (diff / torchlean.norm(target.reshape(b, -1), 2, 1)).mean()


def loss_fn(model: nn.Module, batch: dict) -> torchlean.Tensor:
    out = model(batch["x"])[..., 0] * batch["scale"] + batch["shift"]
    return relative_l2(out, batch["y"])


def _predict(model: nn.Module, data: dict, x: np.ndarray, device: str, chunk: int = 50) -> np.ndarray:
    """The decoded predictions u for inputs x (n, s, s)."""
    scale, shift = _decoder(data, device)
    outs = []
    model.eval()
    try:
        with torchlean.no_grad():
            for s in range(0, len(x), chunk):
                out = model(torchlean.tensor(x[s:s + chunk], device=device))[..., 0] * scale + shift
                outs.append(out.numpy())
    finally:
        model.train()
    return np.concatenate(outs, axis=0)


def evaluate(model: nn.Module, data: dict, cfg: dict, device: str) -> dict:
    """The reference's test metric: the relative L2 error of each test sample, averaged."""
    pred = _predict(model, data, data["x_test"], device).astype(np.float64)
    y = data["y_test"].astype(np.float64)
    n = len(y)
    err = np.linalg.norm((pred - y).reshape(n, -1), axis=1) / np.linalg.norm(y.reshape(n, -1), axis=1)
    return {METRIC: float(err.mean()), "test_rel_l2_max": float(err.max())}


def plot_predictions(model: nn.Module, data: dict, cfg: dict, device: str, path: str) -> None:
    """Coefficient, true and predicted solution and the error for three test samples (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    k = min(3, len(data["x_test"]))
    pred = _predict(model, data, data["x_test"][:k], device)
    fig, axes = plt.subplots(k, 4, figsize=(13, 3.2 * k), squeeze=False)
    for j in range(k):
        y = data["y_test"][j]
        err = np.linalg.norm(pred[j] - y) / np.linalg.norm(y)
        panels = (("coefficient a (normalized)", data["x_test"][j, ..., 0]), ("true u", y),
                  ("FNO u", pred[j]), (f"error (rel L2 {err:.3g})", pred[j] - y))
        for ax, (title, img) in zip(axes[j], panels):
            im = ax.imshow(img, origin="lower")
            ax.set_title(title, fontsize=9)
            ax.set_xticks([])
            ax.set_yticks([])
            fig.colorbar(im, ax=ax, fraction=0.046)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
