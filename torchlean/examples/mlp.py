"""mlp: a multilayer perceptron regresses a smooth function of three variables.

Data (generated from the seed, nothing downloaded): inputs x uniform in [-1, 1]^3 and targets

    y = sin(3 x1) cos(2 x2) + 0.1 x3 + noise,    noise ~ N(0, noise_std^2)  (training set only),

so the best reachable test MSE is about 0 (the test targets are noise free) and a model that
ignores its inputs scores Var(y) ~ 0.25. Model: Linear -> Tanh -> ... -> Linear(hidden, 1).
Loss: MSE; metric: test MSE (lower is better).

A user's starting point: copy this file and change ``target_function`` and the sizes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import torchlean
from torchlean import nn, optim

NAME = "mlp"
DESCRIPTION = "MLP regression of y = sin(3 x1) cos(2 x2) + 0.1 x3 on [-1, 1]^3 (test MSE)"
METRIC = "test_mse"
LOWER_IS_BETTER = True
# the config keys make_data reads: torchlean train caches the data keyed by them (torchlean/data_cache.py)
DATA_KEYS = ("seed", "n_train", "n_test", "noise_std")


def default_config() -> dict:
    """About 10 s on 2 idle cores (1.7 ms per step); test MSE about 6e-5 (Var(y) = 0.21)."""
    return {"steps": 6000, "batch_size": 256, "lr": 3e-3, "seed": 0, "n_train": 8192, "n_test": 1024,
            "hidden": 128, "depth": 3, "noise_std": 0.01}


def cuda_config() -> dict:
    return {"steps": 20000, "batch_size": 1024, "hidden": 256, "n_train": 65536, "n_test": 8192}


def tiny_config() -> dict:
    return {"steps": 40, "batch_size": 64, "lr": 1e-2, "n_train": 256, "n_test": 64, "hidden": 16, "depth": 2}


def target_function(x: np.ndarray) -> np.ndarray:
    """y = sin(3 x1) cos(2 x2) + 0.1 x3 for x (n, 3): (n, 1)."""
    return (np.sin(3 * x[:, 0]) * np.cos(2 * x[:, 1]) + 0.1 * x[:, 2])[:, None]


def make_data(cfg: dict) -> dict:
    rng = np.random.default_rng([int(cfg["seed"]), 1001])
    n_train, n_test = int(cfg["n_train"]), int(cfg["n_test"])
    x = rng.uniform(-1.0, 1.0, size=(n_train + n_test, 3))
    y = target_function(x)
    y[:n_train] += float(cfg.get("noise_std", 0.0)) * rng.standard_normal((n_train, 1))
    x, y = x.astype(np.float32), y.astype(np.float32)
    return {"x_train": x[:n_train], "y_train": y[:n_train], "x_test": x[n_train:], "y_test": y[n_train:]}


def make_model(cfg: dict) -> nn.Module:
    """depth hidden layers of width ``hidden`` with Tanh, then a linear read-out."""
    torchlean.manual_seed(int(cfg["seed"]))
    hidden, depth = int(cfg["hidden"]), int(cfg["depth"])
    layers: list[nn.Module] = []
    width_in = 3
    for _ in range(depth):
        layers += [nn.Linear(width_in, hidden), nn.Tanh()]
        width_in = hidden
    layers.append(nn.Linear(width_in, 1))
    return nn.Sequential(*layers)


def make_optimizer(model: nn.Module, cfg: dict) -> tuple[Any, Any]:
    """Adam with cosine annealing over cfg["steps"] (the scheduler is stepped once per step)."""
    opt = optim.Adam(model.parameters(), lr=float(cfg["lr"]))
    return opt, optim.lr_scheduler.CosineAnnealingLR(opt, max(1, int(cfg["steps"])))


def get_batch(data: dict, step: int, cfg: dict, device: str) -> dict:
    """Epoch-wise shuffled minibatch, a function of (seed, step) only."""
    n = len(data["x_train"])
    bs = min(int(cfg["batch_size"]), n)
    epoch, i = divmod(int(step), n // bs)
    idx = np.random.default_rng([int(cfg["seed"]), 1002, epoch]).permutation(n)[i * bs:(i + 1) * bs]
    return {"x": torchlean.tensor(data["x_train"][idx], device=device),
            "y": torchlean.tensor(data["y_train"][idx], device=device)}


def loss_fn(model: nn.Module, batch: dict) -> torchlean.Tensor:
    return nn.functional.mse_loss(model(batch["x"]), batch["y"])


def evaluate(model: nn.Module, data: dict, cfg: dict, device: str) -> dict:
    model.eval()
    try:
        with torchlean.no_grad():
            pred = model(torchlean.tensor(data["x_test"], device=device)).numpy().astype(np.float64)
    finally:
        model.train()
    y = data["y_test"].astype(np.float64)
    mse = float(np.mean((pred - y) ** 2))
    return {METRIC: mse, "test_baseline_mse": float(np.var(y)), "test_r2": 1.0 - mse / float(np.var(y))}
