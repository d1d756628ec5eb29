"""gpt_adder: a small decoder-only GPT learns multi-digit addition as a character sequence.

Each problem is the string ``a+b=c`` over the 12 characters ``0123456789+=`` with a and b written
with ``n_digits`` digits (zero-padded) and the sum c with n_digits + 1 digits written *reversed*
(least significant digit first, so that each answer digit depends only on digits already seen and
the carry): 123 + 456 = 579 is ``123+456=9750``. The model reads the sequence left to right and is
trained to predict the next character, with the loss only on the answer characters (cross entropy
with ``ignore_index``). Problems are drawn uniformly; a held-out test set of ``n_test`` problems is
never used for training. Metric: exact-match accuracy of the whole answer on the test set under
greedy decoding (the model feeds back its own digits).

Model (GPT-2 style, pre-norm): token + learned positional embeddings, ``n_layers`` blocks of
LayerNorm -> causal self-attention (one qkv Linear, ``F.flash_attention_packed(is_causal=True)``,
output Linear) and LayerNorm -> MLP (Linear, GELU, Linear), both with residuals, then a final
LayerNorm and a Linear head.
"""

from __future__ import annotations

import numpy as np

import torchlean
from torchlean import nn
import torchlean.nn.functional as F

NAME = "gpt_adder"
DESCRIPTION = "small GPT learning multi-digit addition (reversed answer digits), exact-match accuracy"
METRIC = "test_exact_match"
LOWER_IS_BETTER = False
# the config keys make_data reads: torchlean train caches the data keyed by them (torchlean/data_cache.py)
DATA_KEYS = ("seed", "n_digits", "n_test")

VOCAB = "0123456789+="
PLUS, EQUALS = 10, 11
IGNORE = -100


def default_config() -> dict:
    return {"steps": 500, "batch_size": 64, "lr": 2e-3, "weight_decay": 0.01, "seed": 0, "n_digits": 2,
            "d_model": 64, "n_heads": 4, "n_layers": 2, "emb_std": 0.02, "n_test": 1000, "eval_batch": 500}


def cuda_config() -> dict:
    return {"steps": 4000, "batch_size": 256, "n_digits": 3, "d_model": 128, "n_layers": 4, "lr": 1e-3}


def tiny_config() -> dict:
    return {"steps": 8, "batch_size": 16, "n_digits": 2, "d_model": 16, "n_heads": 2, "n_layers": 1,
            "n_test": 20, "lr": 3e-3}


# -- data ---------------------------------------------------------------------------------------------
def seq_len(n_digits: int) -> int:
    return 3 * n_digits + 3                     # a, '+', b, '=', n_digits + 1 answer digits


def digits(v: np.ndarray, n: int) -> np.ndarray:
    """(len(v), n) decimal digits of v, most significant first."""
    return (v[:, None] // 10 ** np.arange(n - 1, -1, -1)) % 10


def encode(a: np.ndarray, b: np.ndarray, n: int) -> np.ndarray:
    """Token sequences (len(a), 3n + 3) int64 for the problems a + b (answer reversed)."""
    m = len(a)
    c = digits(a + b, n + 1)[:, ::-1]
    return np.concatenate([digits(a, n), np.full((m, 1), PLUS), digits(b, n), np.full((m, 1), EQUALS), c],
                          axis=1).astype(np.int64)


def decode_answer(tokens: np.ndarray) -> np.ndarray:
    """The integers written (reversed) by answer tokens (m, n + 1)."""
    return (tokens * 10 ** np.arange(tokens.shape[1])).sum(axis=1)


def make_data(cfg: dict) -> dict:
    n = cfg["n_digits"]
    rng = np.random.default_rng([cfg["seed"], 1])
    hi = 10 ** n
    keys = rng.choice(hi * hi, size=min(cfg["n_test"], hi * hi // 2), replace=False)
    a, b = keys // hi, keys % hi
    return {"test_a": a, "test_b": b, "test_keys": np.sort(keys), "test_seq": encode(a, b, n)}


def sample_problems(data: dict, rng: np.random.Generator, m: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """m random problems, none from the held-out test set."""
    hi = 10 ** n
    keys = rng.integers(0, hi * hi, m)
    bad = np.isin(keys, data["test_keys"])
    while bad.any():
        keys[bad] = rng.integers(0, hi * hi, int(bad.sum()))
        bad = np.isin(keys, data["test_keys"])
    return keys // hi, keys % hi


# -- model --------------------------------------------------------------------------------------------
class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x):
        # (b, t, 3d) -> (b, t, d): the same bits as PyTorch's idiom
        #   qkv = self.qkv(x).reshape(b, t, 3, h, d // h).permute(2, 0, 3, 1, 4)
        #   y = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], is_causal=True)
        #   y = y.permute(0, 2, 1, 3).reshape(b, t, d)
        # but the kernels read q, k, v and write y in these layouts: no head-moving copies.
        y = F.flash_attention_packed(self.qkv(x), self.n_heads, is_causal=True)
        return self.proj(y)


class Block(nn.Module):
    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, context: int, d_model: int, n_heads: int, n_layers: int,
                 emb_std: float = 0.02) -> None:
        super().__init__()
        self.tok_emb = nn.Embedding(vocab, d_model)
        self.pos_emb = nn.Embedding(context, d_model)
        self.blocks = nn.ModuleList([Block(d_model, n_heads) for _ in range(n_layers)])
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)
        for emb in (self.tok_emb, self.pos_emb):      # GPT-2's embedding init (PyTorch's default is N(0, 1))
            nn.init.normal_(emb.weight, std=emb_std)

    def forward(self, idx):
        """Logits (b, t, vocab) for the int64 token tensor idx (b, t)."""
        t = idx.shape[1]
        x = self.tok_emb(idx) + self.pos_emb(np.arange(t))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def make_model(cfg: dict) -> nn.Module:
    torchlean.manual_seed(cfg["seed"])
    return GPT(len(VOCAB), seq_len(cfg["n_digits"]) - 1, cfg["d_model"], cfg["n_heads"], cfg["n_layers"],
               cfg["emb_std"])


def make_optimizer(model, cfg: dict):
    opt = torchlean.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=cfg["weight_decay"])
    sched = torchlean.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=cfg["steps"])
    return opt, sched


def get_batch(data: dict, step: int, cfg: dict, device: str) -> dict:
    n = cfg["n_digits"]
    rng = np.random.default_rng([cfg["seed"], 2, step])
    seq = encode(*sample_problems(data, rng, cfg["batch_size"], n), n)
    target = seq[:, 1:].copy()
    target[:, :2 * n + 1] = IGNORE                 # loss only where the next character is an answer digit
    return {"x": torchlean.tensor(seq[:, :-1], device=device), "y": torchlean.tensor(target, device=device)}


def loss_fn(model, batch: dict):
    logits = model(batch["x"])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch["y"].reshape(-1), ignore_index=IGNORE)


def generate(model, prompts: np.ndarray, n_new: int, device: str) -> np.ndarray:
    """Greedy decoding: append n_new argmax tokens to int64 prompts (m, p); returns the new tokens."""
    seq = prompts
    for _ in range(n_new):
        logits = model(torchlean.tensor(seq, device=device))
        nxt = logits[:, -1].numpy().argmax(axis=-1)
        seq = np.concatenate([seq, nxt[:, None]], axis=1)
    return seq[:, prompts.shape[1]:]


def evaluate(model, data: dict, cfg: dict, device: str) -> dict:
    n = cfg["n_digits"]
    seq = data["test_seq"]
    was_training = model.training
    model.eval()
    answers = []
    with torchlean.no_grad():
        for i in range(0, len(seq), cfg["eval_batch"]):
            answers.append(generate(model, seq[i:i + cfg["eval_batch"], :2 * n + 2], n + 1, device))
    model.train(was_training)
    ans = np.concatenate(answers)
    truth = seq[:, 2 * n + 2:]
    return {METRIC: float(np.mean((ans == truth).all(axis=1))), "test_digit_accuracy": float(np.mean(ans == truth))}


def plot_predictions(model, data, cfg, device, path) -> None:
    """A text figure of a few test problems with the model's answers (red when wrong)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n, k = cfg["n_digits"], min(12, len(data["test_a"]))
    was_training = model.training
    model.eval()
    with torchlean.no_grad():
        ans = decode_answer(generate(model, data["test_seq"][:k, :2 * n + 2], n + 1, device))
    model.train(was_training)
    fig, ax = plt.subplots(figsize=(4, 0.3 * k + 0.6))
    ax.axis("off")
    for i in range(k):
        a, b = int(data["test_a"][i]), int(data["test_b"][i])
        ok = ans[i] == a + b
        ax.text(0.05, 1 - (i + 1) / (k + 1), f"{a} + {b} = {int(ans[i])}" + ("" if ok else f"  (true {a + b})"),
                family="monospace", color="black" if ok else "red", transform=ax.transAxes)
    fig.savefig(path, dpi=100)
    plt.close(fig)
