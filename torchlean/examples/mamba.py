"""mamba: the selective-copying task of the Mamba paper (Gu & Dao 2023, section 4.1.1), small.

Each sequence has ``seq_len`` context positions holding the noise token (0) except for ``n_data``
data tokens (drawn from ``n_symbols`` symbols, ids 2..n_symbols+1) at random positions, followed by
``n_data`` marker tokens (1). At the marker positions the model must output the data tokens in the
order they appeared. Because the data positions vary, a time-invariant (LTI) convolution cannot
solve it: the model has to select by content, which is what Mamba's input-dependent dt, B, C allow.

Model: Embedding -> ``n_layers`` residual blocks x + Mamba(LayerNorm(x)) (``torchlean.nn.Mamba``,
mamba_simple's block over ``torchlean.ops.selective_scan``) -> LayerNorm -> Linear head. Loss: cross
entropy on the marker positions only. Metric: token accuracy on the marker positions of held-out
sequences (``test_exact_match``: every token of a sequence right).
"""

from __future__ import annotations

import numpy as np

import torchlean
from torchlean import nn
import torchlean.nn.functional as F
from torchlean.nn.modules.mamba import Mamba

NAME = "mamba"
DESCRIPTION = "Mamba blocks (selective scan) on the selective-copying task, output-token accuracy"
METRIC = "test_accuracy"
LOWER_IS_BETTER = False
# the config keys make_data reads: torchlean train caches the data keyed by them (torchlean/data_cache.py)
DATA_KEYS = ("seed", "n_test", "seq_len", "n_data", "n_symbols")
NOISE, MARKER = 0, 1


def default_config() -> dict:
    return {"steps": 800, "batch_size": 32, "lr": 1e-2, "weight_decay": 0.0, "seed": 0, "seq_len": 32,
            "n_data": 4, "n_symbols": 8, "d_model": 32, "d_state": 16, "d_conv": 4, "expand": 2, "n_layers": 2,
            "n_test": 500, "eval_batch": 250}


def cuda_config() -> dict:
    return {"steps": 4000, "batch_size": 64, "seq_len": 256, "n_data": 16, "n_symbols": 16, "d_model": 64,
            "n_layers": 2}


def tiny_config() -> dict:
    return {"steps": 8, "batch_size": 8, "seq_len": 8, "n_data": 2, "n_symbols": 4, "d_model": 8, "d_state": 4,
            "n_layers": 1, "n_test": 16, "eval_batch": 8, "lr": 1e-2}


# -- data ---------------------------------------------------------------------------------------------
def make_sequences(rng: np.random.Generator, m: int, cfg: dict) -> tuple[np.ndarray, np.ndarray]:
    """m sequences (m, seq_len + n_data) int64 and their answers (m, n_data)."""
    L, k = cfg["seq_len"], cfg["n_data"]
    data = rng.integers(2, 2 + cfg["n_symbols"], (m, k))
    pos = np.sort(np.argsort(rng.random((m, L)), axis=1)[:, :k], axis=1)    # k distinct positions, in order
    seq = np.full((m, L + k), NOISE, dtype=np.int64)
    np.put_along_axis(seq, pos, data, axis=1)
    seq[:, L:] = MARKER
    return seq, data.astype(np.int64)


def make_data(cfg: dict) -> dict:
    seq, ans = make_sequences(np.random.default_rng([cfg["seed"], 1]), cfg["n_test"], cfg)
    return {"test_seq": seq, "test_answer": ans}


# -- model --------------------------------------------------------------------------------------------
class MambaLM(nn.Module):
    def __init__(self, vocab: int, d_model: int, n_layers: int, d_state: int, d_conv: int, expand: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, d_model)
        self.norms = nn.ModuleList([nn.LayerNorm(d_model) for _ in range(n_layers)])
        self.layers = nn.ModuleList([Mamba(d_model, d_state=d_state, d_conv=d_conv, expand=expand)
                                     for _ in range(n_layers)])
        self.norm_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, idx, last: int | None = None):
        """Logits (b, t, vocab) for tokens idx (b, t); only for the final ``last`` positions if given."""
        x = self.embedding(idx)
        for norm, layer in zip(self.norms, self.layers):
            x = x + layer(norm(x))
        if last is not None:
            x = x[:, x.shape[1] - last:]
        return self.head(self.norm_f(x))


def make_model(cfg: dict) -> nn.Module:
    torchlean.manual_seed(cfg["seed"])
    return MambaLM(2 + cfg["n_symbols"], cfg["d_model"], cfg["n_layers"], cfg["d_state"], cfg["d_conv"],
                   cfg["expand"])


def make_optimizer(model, cfg: dict):
    opt = torchlean.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=cfg["weight_decay"])
    sched = torchlean.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=cfg["steps"])
    return opt, sched


def get_batch(data: dict, step: int, cfg: dict, device: str) -> dict:
    seq, ans = make_sequences(np.random.default_rng([cfg["seed"], 2, step]), cfg["batch_size"], cfg)
    return {"x": torchlean.tensor(seq, device=device), "y": torchlean.tensor(ans, device=device)}


def loss_fn(model, batch: dict):
    k = batch["y"].shape[1]
    logits = model(batch["x"], last=k)                                     # (b, k, vocab)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch["y"].reshape(-1))


def predict(model, seq: np.ndarray, cfg: dict, device: str) -> np.ndarray:
    was_training = model.training
    model.eval()
    out = []
    with torchlean.no_grad():
        for i in range(0, len(seq), cfg["eval_batch"]):
            logits = model(torchlean.tensor(seq[i:i + cfg["eval_batch"]], device=device), last=cfg["n_data"])
            out.append(logits.numpy().argmax(axis=-1))
    model.train(was_training)
    return np.concatenate(out)


def evaluate(model, data: dict, cfg: dict, device: str) -> dict:
    pred = predict(model, data["test_seq"], cfg, device)
    ok = pred == data["test_answer"]
    return {METRIC: float(ok.mean()), "test_exact_match": float(ok.all(axis=1).mean())}


def plot_predictions(model, data, cfg, device, path) -> None:
    """A few test sequences as token strips: context, the answer and the model's output."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    k = min(6, len(data["test_seq"]))
    pred = predict(model, data["test_seq"][:k], cfg, device)
    fig, axes = plt.subplots(k, 1, figsize=(8, 0.7 * k + 0.4))
    for i, ax in enumerate(np.atleast_1d(axes)):
        ax.imshow(data["test_seq"][i][None], cmap="tab20", aspect="auto", vmin=0, vmax=19)
        ok = (pred[i] == data["test_answer"][i]).all()
        ax.set_title(f"answer {data['test_answer'][i].tolist()}  model {pred[i].tolist()}", fontsize=7,
                     color="black" if ok else "red")
        ax.set_yticks([])
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
