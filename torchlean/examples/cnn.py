"""cnn: classify procedurally drawn shapes (circle, square, triangle, cross) with a small CNN.

Data: grayscale ``image_size`` x ``image_size`` images drawn with NumPy from ``cfg["seed"]``: one
filled shape per image at a random position, size and brightness, on a random background level,
plus Gaussian pixel noise. Nothing is downloaded; the same seed gives the same images.

Model: two blocks of Conv2d(3x3, padding 1) -> BatchNorm2d -> ReLU -> MaxPool2d(2), then
Linear -> ReLU -> Linear to the class logits; loss: cross entropy; metric: test accuracy.
"""

from __future__ import annotations

import numpy as np

import torchlean
from torchlean import nn
import torchlean.nn.functional as F

NAME = "cnn"
DESCRIPTION = "small CNN classifying procedurally drawn shapes (circle/square/triangle/cross)"
METRIC = "test_accuracy"
LOWER_IS_BETTER = False
# the config keys make_data reads: torchlean train caches the data keyed by them (torchlean/data_cache.py)
DATA_KEYS = ("seed", "image_size", "n_train", "n_test", "noise")
CLASSES = ("circle", "square", "triangle", "cross")


def default_config() -> dict:
    return {"steps": 1000, "batch_size": 64, "lr": 3e-3, "seed": 0, "image_size": 16, "n_train": 10000,
            "n_test": 1000, "channels": (16, 32), "hidden": 64, "noise": 0.25, "eval_batch": 500}


def cuda_config() -> dict:
    return {"steps": 3000, "batch_size": 128, "image_size": 28, "n_train": 20000, "n_test": 2000,
            "channels": (32, 64), "hidden": 128}


def tiny_config() -> dict:
    return {"steps": 6, "batch_size": 8, "image_size": 8, "n_train": 64, "n_test": 32, "channels": (4, 8),
            "hidden": 16, "eval_batch": 16}


# -- data ---------------------------------------------------------------------------------------------
def draw_shapes(rng: np.random.Generator, n: int, size: int, noise: float) -> tuple[np.ndarray, np.ndarray]:
    """n images (n, 1, size, size) float32 and their labels (n,) int64 (indices into CLASSES)."""
    labels = rng.integers(0, len(CLASSES), n)
    r = rng.uniform(0.2, 0.4, (n, 1, 1)) * size                       # half-size of the shape
    cx = rng.uniform(0, 1, (n, 1, 1)) * (size - 2 * r) + r - 0.5       # centre: the shape stays inside
    cy = rng.uniform(0, 1, (n, 1, 1)) * (size - 2 * r) + r - 0.5
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float64)
    mask = np.empty((n, size, size), dtype=bool)
    for k in range(len(CLASSES)):  # each image's own shape only
        sel = labels == k
        mask[sel] = _shape_mask(k, xx[None] - cx[sel], yy[None] - cy[sel], r[sel])
    level = rng.uniform(0.6, 1.0, (n, 1, 1))
    background = rng.uniform(-0.2, 0.2, (n, 1, 1))
    img = background + level * mask + noise * rng.standard_normal((n, size, size))
    return img[:, None].astype(np.float32), labels.astype(np.int64)


def _shape_mask(k: int, dx: np.ndarray, dy: np.ndarray, r: np.ndarray) -> np.ndarray:
    """The pixels inside shape CLASSES[k] of half-size r, at offsets (dx, dy) from its centre."""
    if k == 0:  # circle
        return dx ** 2 + dy ** 2 <= r ** 2
    if k == 1:  # square
        return (np.abs(dx) <= 0.8 * r) & (np.abs(dy) <= 0.8 * r)
    if k == 2:  # triangle, apex up, base at cy + r
        return (dy <= r) & (np.abs(dx) <= (dy + r) / 2)
    t = np.maximum(0.5, 0.25 * r)  # cross
    return ((np.abs(dx) <= t) & (np.abs(dy) <= r)) | ((np.abs(dy) <= t) & (np.abs(dx) <= r))


def make_data(cfg: dict) -> dict:
    rng = np.random.default_rng([cfg["seed"], 1])
    size, noise = cfg["image_size"], cfg["noise"]
    x_train, y_train = draw_shapes(rng, cfg["n_train"], size, noise)
    x_test, y_test = draw_shapes(rng, cfg["n_test"], size, noise)
    return {"x_train": x_train, "y_train": y_train, "x_test": x_test, "y_test": y_test}


# -- model --------------------------------------------------------------------------------------------
class ShapeCNN(nn.Module):
    def __init__(self, image_size: int, channels: tuple[int, int], hidden: int, classes: int) -> None:
        super().__init__()
        c1, c2 = channels
        self.features = nn.Sequential(
            nn.Conv2d(1, c1, 3, padding=1), nn.BatchNorm2d(c1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(c1, c2, 3, padding=1), nn.BatchNorm2d(c2), nn.ReLU(), nn.MaxPool2d(2))
        side = image_size // 4
        self.head = nn.Sequential(nn.Linear(c2 * side * side, hidden), nn.ReLU(), nn.Linear(hidden, classes))

    def forward(self, x):
        h = self.features(x)
        return self.head(torchlean.flatten(h, 1))


def make_model(cfg: dict) -> nn.Module:
    torchlean.manual_seed(cfg["seed"])
    return ShapeCNN(cfg["image_size"], tuple(cfg["channels"]), cfg["hidden"], len(CLASSES))


def make_optimizer(model, cfg: dict):
    opt = torchlean.optim.Adam(model.parameters(), lr=cfg["lr"])
    sched = torchlean.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=cfg["steps"])
    return opt, sched


def get_batch(data: dict, step: int, cfg: dict, device: str) -> dict:
    rng = np.random.default_rng([cfg["seed"], 2, step])
    idx = rng.integers(0, len(data["y_train"]), cfg["batch_size"])
    return {"x": torchlean.tensor(data["x_train"][idx], device=device),
            "y": torchlean.tensor(data["y_train"][idx], device=device)}


def loss_fn(model, batch: dict):
    return F.cross_entropy(model(batch["x"]), batch["y"])


def predict(model, x: np.ndarray, cfg: dict, device: str) -> np.ndarray:
    """Class indices for images x (n, 1, s, s), in batches, under no_grad and eval mode."""
    was_training = model.training
    model.eval()
    out = []
    with torchlean.no_grad():
        for i in range(0, len(x), cfg["eval_batch"]):
            logits = model(torchlean.tensor(x[i:i + cfg["eval_batch"]], device=device))
            out.append(logits.numpy().argmax(axis=1))
    model.train(was_training)
    return np.concatenate(out) if out else np.zeros(0, np.int64)


def evaluate(model, data: dict, cfg: dict, device: str) -> dict:
    pred = predict(model, data["x_test"], cfg, device)
    y = data["y_test"]
    res = {METRIC: float(np.mean(pred == y))}
    for k, name in enumerate(CLASSES):
        sel = y == k
        if sel.any():
            res[f"accuracy_{name}"] = float(np.mean(pred[sel] == k))
    return res


def plot_predictions(model, data, cfg, device, path) -> None:
    """A grid of test images titled with predicted / true class (red when wrong)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = min(16, len(data["y_test"]))
    pred = predict(model, data["x_test"][:n], cfg, device)
    fig, axes = plt.subplots(2, (n + 1) // 2, figsize=(1.6 * ((n + 1) // 2), 3.6))
    for ax, k in zip(np.ravel(axes), range(n)):
        ax.imshow(data["x_test"][k, 0], cmap="gray")
        ok = pred[k] == data["y_test"][k]
        ax.set_title(f"{CLASSES[pred[k]]}\n({CLASSES[data['y_test'][k]]})", fontsize=7,
                     color="black" if ok else "red")
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
