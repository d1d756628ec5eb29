"""The four benchmarked examples written in plain PyTorch (``torch.nn``): the same architectures,
parameter names and shapes (so ``torchlean.interop.state_dict_to_torch(model.state_dict())`` loads
with ``strict=True``), the same forward math, loss, optimizer and scheduler.

* ``fno1d``: ``TorchFNO1d``, the reference FNO code's ``SpectralConv1d`` (``torch.fft.rfft`` ->
  complex ``einsum`` on the lowest ``modes`` bins of a zero ``out_ft`` -> ``torch.fft.irfft``), in our
  channels-last layout: the grid is dim 1 and the reference's 1x1 ``Conv1d`` ``w{l}`` is a ``Linear``
  (``pointwise.{l}``); the complex weight (in, out, modes) is stored as two real tensors
  ``weight_re``/``weight_im`` (modes, in, out), combined with ``torch.complex`` in the forward.
* ``cnn``: ``TorchShapeCNN``: Conv2d/BatchNorm2d/ReLU/MaxPool2d x 2, Linear/ReLU/Linear.
* ``gpt_adder``: ``TorchGPT``: GPT-2 style pre-norm blocks, one qkv Linear and
  ``F.scaled_dot_product_attention(is_causal=True)`` (ours runs the same math as one
  ``F.flash_attention_packed`` call; PyTorch has no packed variant, this is its idiom).
* ``mamba``: ``TorchMambaLM`` over ``TorchMamba``, mamba_ssm's ``mamba_simple.Mamba`` reference
  ("slow") path: in_proj, depthwise ``nn.Conv1d(groups=d_inner, padding=d_conv - 1)`` cut to L, SiLU,
  x_proj, dt_proj weight, and ``selective_scan_ref`` (a Python loop over time of einsums, the code
  mamba_ssm runs when its CUDA extension is missing: what a PyTorch eager user without the
  extension gets; with the extension, mamba_ssm's fused CUDA scan is much faster than this loop).

``make_optimizer_like(our_optimizer, our_scheduler, torch_model)`` builds torch's optimizer of the
same class with the same hyperparameters (read from ours), and the same scheduler.
``check_twin(name)`` compares losses of ours and the twin from identical weights and batches.
"""

from __future__ import annotations

import importlib
import math
from typing import Any

import numpy as np
import torch
import torch.nn as tnn
import torch.nn.functional as TF

EXAMPLES = ("fno1d", "gpt_adder", "mamba", "cnn")


def example(name: str):
    return importlib.import_module(f"torchlean.examples.{name}")


# -- fno1d ------------------------------------------------------------------------------------------
class TorchSpectralConv1d(tnn.Module):
    def __init__(self, in_channels: int, out_channels: int, modes: int) -> None:
        super().__init__()
        self.in_channels, self.out_channels, self.modes = in_channels, out_channels, modes
        scale = 1.0 / (in_channels * out_channels)
        self.weight_re = tnn.Parameter(scale * torch.rand(modes, in_channels, out_channels))
        self.weight_im = tnn.Parameter(scale * torch.rand(modes, in_channels, out_channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (batch, grid, in) -> (batch, grid, out), as the reference's forward with the grid on dim 1."""
        b, n, _ = x.shape
        x_ft = torch.fft.rfft(x, dim=1)                                            # (b, n//2+1, in) complex
        w = torch.complex(self.weight_re, self.weight_im)                          # (modes, in, out)
        out_ft = torch.zeros(b, n // 2 + 1, self.out_channels, dtype=torch.cfloat, device=x.device)
        out_ft[:, :self.modes] = torch.einsum("bki,kio->bko", x_ft[:, :self.modes], w)
        return torch.fft.irfft(out_ft, n=n, dim=1)


class TorchFNO1d(tnn.Module):
    def __init__(self, modes: int, width: int, in_channels: int = 2, out_channels: int = 1, n_layers: int = 4) -> None:
        super().__init__()
        self.n_layers = n_layers
        self.lift = tnn.Linear(in_channels, width)
        self.spectral = tnn.ModuleList([TorchSpectralConv1d(width, width, modes) for _ in range(n_layers)])
        self.pointwise = tnn.ModuleList([tnn.Linear(width, width) for _ in range(n_layers)])
        self.proj1 = tnn.Linear(width, 128)
        self.proj2 = tnn.Linear(128, out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        v = self.lift(x)
        for i, (spec, point) in enumerate(zip(self.spectral, self.pointwise)):
            v = spec(v) + point(v)
            if i < self.n_layers - 1:
                v = TF.gelu(v)
        return self.proj2(TF.gelu(self.proj1(v)))


def _fno_loss(model, batch):
    pred, y = model(batch["x"]), batch["y"]
    b = pred.shape[0]
    diff = (pred - y).reshape(b, -1)
    t = y.reshape(b, -1)
    return ((diff * diff).sum(1).sqrt() / (t * t).sum(1).sqrt()).mean()


# -- cnn --------------------------------------------------------------------------------------------
class TorchShapeCNN(tnn.Module):
    def __init__(self, image_size: int, channels: tuple[int, int], hidden: int, classes: int) -> None:
        super().__init__()
        c1, c2 = channels
        self.features = tnn.Sequential(
            tnn.Conv2d(1, c1, 3, padding=1), tnn.BatchNorm2d(c1), tnn.ReLU(), tnn.MaxPool2d(2),
            tnn.Conv2d(c1, c2, 3, padding=1), tnn.BatchNorm2d(c2), tnn.ReLU(), tnn.MaxPool2d(2))
        side = image_size // 4
        self.head = tnn.Sequential(tnn.Linear(c2 * side * side, hidden), tnn.ReLU(), tnn.Linear(hidden, classes))

    def forward(self, x):
        return self.head(torch.flatten(self.features(x), 1))


def _cnn_loss(model, batch):
    return TF.cross_entropy(model(batch["x"]), batch["y"])


# -- gpt_adder --------------------------------------------------------------------------------------
class TorchCausalSelfAttention(tnn.Module):
    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.qkv = tnn.Linear(d_model, 3 * d_model)
        self.proj = tnn.Linear(d_model, d_model)

    def forward(self, x):
        b, t, d = x.shape
        h = self.n_heads
        qkv = self.qkv(x).reshape(b, t, 3, h, d // h).permute(2, 0, 3, 1, 4)     # (3, b, h, t, d/h)
        y = TF.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], is_causal=True)
        return self.proj(y.permute(0, 2, 1, 3).reshape(b, t, d))


class TorchBlock(tnn.Module):
    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.ln1 = tnn.LayerNorm(d_model)
        self.attn = TorchCausalSelfAttention(d_model, n_heads)
        self.ln2 = tnn.LayerNorm(d_model)
        self.mlp = tnn.Sequential(tnn.Linear(d_model, 4 * d_model), tnn.GELU(), tnn.Linear(4 * d_model, d_model))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TorchGPT(tnn.Module):
    def __init__(self, vocab: int, context: int, d_model: int, n_heads: int, n_layers: int) -> None:
        super().__init__()
        self.tok_emb = tnn.Embedding(vocab, d_model)
        self.pos_emb = tnn.Embedding(context, d_model)
        self.blocks = tnn.ModuleList([TorchBlock(d_model, n_heads) for _ in range(n_layers)])
        self.ln_f = tnn.LayerNorm(d_model)
        self.head = tnn.Linear(d_model, vocab)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok_emb(idx) + self.pos_emb(torch.arange(t, device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def _gpt_loss(model, batch):
    logits = model(batch["x"])
    return TF.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch["y"].reshape(-1), ignore_index=-100)


# -- mamba ------------------------------------------------------------------------------------------
def selective_scan_ref(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False):
    """mamba_ssm.ops.selective_scan_interface.selective_scan_ref for real A and variable B, C
    (batch, N, L): a Python loop over time, what mamba_simple runs without the CUDA extension."""
    dtype_in = u.dtype
    u = u.float()
    delta = delta.float()
    if delta_bias is not None:
        delta = delta + delta_bias[..., None].float()
    if delta_softplus:
        delta = TF.softplus(delta)
    batch, dim, dstate = u.shape[0], A.shape[0], A.shape[1]
    B = B.float()
    C = C.float()
    x = A.new_zeros((batch, dim, dstate))
    ys = []
    deltaA = torch.exp(torch.einsum("bdl,dn->bdln", delta, A))
    deltaB_u = torch.einsum("bdl,bnl,bdl->bdln", delta, B, u)
    for i in range(u.shape[2]):
        x = deltaA[:, :, i] * x + deltaB_u[:, :, i]
        y = torch.einsum("bdn,bn->bd", x, C[:, :, i])
        ys.append(y)
    y = torch.stack(ys, dim=2)                                                   # (batch, dim, L)
    out = y if D is None else y + u * D[:, None]
    if z is not None:
        out = out * TF.silu(z)
    return out.to(dtype=dtype_in)


class TorchMamba(tnn.Module):
    """mamba_simple.Mamba's parameters and its reference forward path (no inference cache)."""

    def __init__(self, d_model: int, d_state: int = 16, d_conv: int = 4, expand: int = 2, bias: bool = False,
                 conv_bias: bool = True) -> None:
        super().__init__()
        self.d_model, self.d_state, self.d_conv, self.expand = d_model, d_state, d_conv, expand
        self.d_inner = expand * d_model
        self.dt_rank = math.ceil(d_model / 16)
        self.in_proj = tnn.Linear(d_model, 2 * self.d_inner, bias=bias)
        self.conv1d = tnn.Conv1d(self.d_inner, self.d_inner, d_conv, groups=self.d_inner, padding=d_conv - 1,
                                 bias=conv_bias)
        self.act = tnn.SiLU()
        self.x_proj = tnn.Linear(self.d_inner, self.dt_rank + 2 * d_state, bias=False)
        self.dt_proj = tnn.Linear(self.dt_rank, self.d_inner, bias=True)
        a = torch.arange(1, d_state + 1, dtype=torch.float32).repeat(self.d_inner, 1)
        self.A_log = tnn.Parameter(torch.log(a))
        self.D = tnn.Parameter(torch.ones(self.d_inner))
        self.out_proj = tnn.Linear(self.d_inner, d_model, bias=bias)

    def forward(self, hidden_states):
        b, seqlen, _ = hidden_states.shape
        # mamba_simple: xz = rearrange(in_proj.weight @ rearrange(h, "b l d -> d (b l)"), "d (b l) -> b d l")
        xz = (self.in_proj.weight @ hidden_states.reshape(b * seqlen, -1).t()).reshape(-1, b, seqlen).permute(1, 0, 2)
        if self.in_proj.bias is not None:
            xz = xz + self.in_proj.bias[:, None]
        A = -torch.exp(self.A_log.float())
        x, z = xz.chunk(2, dim=1)
        x = self.act(self.conv1d(x)[..., :seqlen])
        x_dbl = self.x_proj(x.permute(0, 2, 1).reshape(b * seqlen, -1))             # (b l, r + 2n)
        dt, B, C = torch.split(x_dbl, [self.dt_rank, self.d_state, self.d_state], dim=-1)
        dt = self.dt_proj.weight @ dt.t()                                          # (d, b l)
        dt = dt.reshape(-1, b, seqlen).permute(1, 0, 2)                            # (b, d, l)
        B = B.reshape(b, seqlen, -1).permute(0, 2, 1).contiguous()                 # (b, n, l)
        C = C.reshape(b, seqlen, -1).permute(0, 2, 1).contiguous()
        y = selective_scan_ref(x, dt, A, B, C, self.D.float(), z=z, delta_bias=self.dt_proj.bias.float(),
                               delta_softplus=True)
        return self.out_proj(y.permute(0, 2, 1))


class TorchMambaLM(tnn.Module):
    def __init__(self, vocab: int, d_model: int, n_layers: int, d_state: int, d_conv: int, expand: int) -> None:
        super().__init__()
        self.embedding = tnn.Embedding(vocab, d_model)
        self.norms = tnn.ModuleList([tnn.LayerNorm(d_model) for _ in range(n_layers)])
        self.layers = tnn.ModuleList([TorchMamba(d_model, d_state, d_conv, expand) for _ in range(n_layers)])
        self.norm_f = tnn.LayerNorm(d_model)
        self.head = tnn.Linear(d_model, vocab)

    def forward(self, idx, last: int | None = None):
        x = self.embedding(idx)
        for norm, layer in zip(self.norms, self.layers):
            x = x + layer(norm(x))
        if last is not None:
            x = x[:, x.shape[1] - last:]
        return self.head(self.norm_f(x))


def _mamba_loss(model, batch):
    k = batch["y"].shape[1]
    logits = model(batch["x"], last=k)
    return TF.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch["y"].reshape(-1))


# -- construction -----------------------------------------------------------------------------------
def config(name: str, kind: str = "default") -> dict:
    """The example's default_config, merged with cuda_config (kind "cuda") or tiny_config ("tiny")."""
    ex = example(name)
    cfg = ex.default_config()
    if kind == "cuda":
        cfg.update(ex.cuda_config())
    elif kind == "tiny":
        cfg.update(ex.tiny_config())
    elif kind != "default":
        raise ValueError(f"unknown config kind {kind!r} (default, cuda, tiny)")
    return cfg


def make_torch_model(name: str, cfg: dict) -> tnn.Module:
    """The twin of ``example(name).make_model(cfg)`` (PyTorch's own initialization: load our weights)."""
    if name == "fno1d":
        return TorchFNO1d(int(cfg["modes"]), int(cfg["width"]), 2, 1, int(cfg.get("n_layers", 4)))
    if name == "cnn":
        ex = example(name)
        return TorchShapeCNN(cfg["image_size"], tuple(cfg["channels"]), cfg["hidden"], len(ex.CLASSES))
    if name == "gpt_adder":
        ex = example(name)
        return TorchGPT(len(ex.VOCAB), ex.seq_len(cfg["n_digits"]) - 1, cfg["d_model"], cfg["n_heads"],
                        cfg["n_layers"])
    if name == "mamba":
        return TorchMambaLM(2 + cfg["n_symbols"], cfg["d_model"], cfg["n_layers"], cfg["d_state"], cfg["d_conv"],
                            cfg["expand"])
    raise ValueError(f"no torch twin for {name!r}")


LOSSES = {"fno1d": _fno_loss, "cnn": _cnn_loss, "gpt_adder": _gpt_loss, "mamba": _mamba_loss}


def torch_loss(name: str, model, batch: dict):
    return LOSSES[name](model, batch)


def make_optimizer_like(opt: Any, sched: Any, model: tnn.Module) -> tuple[Any, Any]:
    """torch's optimizer of our optimizer's class with its hyperparameters (defaults of its single
    param group), and the same scheduler class and arguments."""
    import torchlean.optim as topt

    g = opt.param_groups[0]
    if len(opt.param_groups) != 1:
        raise ValueError("only single-group optimizers are mirrored")
    cls = type(opt).__name__
    if cls == "AdamW":
        t_opt = torch.optim.AdamW(model.parameters(), lr=g["lr"], betas=tuple(g["betas"]), eps=g["eps"],
                                  weight_decay=g["weight_decay"])
    elif cls == "Adam":
        t_opt = torch.optim.Adam(model.parameters(), lr=g["lr"], betas=tuple(g["betas"]), eps=g["eps"],
                                 weight_decay=g["weight_decay"],
                                 decoupled_weight_decay=bool(g.get("decoupled_weight_decay", False)))
    elif cls == "SGD":
        t_opt = torch.optim.SGD(model.parameters(), lr=g["lr"], momentum=g["momentum"], dampening=g["dampening"],
                                weight_decay=g["weight_decay"], nesterov=g["nesterov"])
    else:
        raise ValueError(f"no torch mirror for optimizer {cls}")
    # our scheduler already set group["lr"] = initial lr; torch's does the same from initial_lr
    t_sched = None
    if sched is not None:
        if isinstance(sched, topt.lr_scheduler.CosineAnnealingLR):
            t_sched = torch.optim.lr_scheduler.CosineAnnealingLR(t_opt, T_max=sched.T_max, eta_min=sched.eta_min)
        elif isinstance(sched, topt.lr_scheduler.StepLR):
            t_sched = torch.optim.lr_scheduler.StepLR(t_opt, step_size=sched.step_size, gamma=sched.gamma)
        else:
            raise ValueError(f"no torch mirror for scheduler {type(sched).__name__}")
    return t_opt, t_sched


def state_dict_arrays(model) -> dict[str, np.ndarray]:
    """Our model's state dict as host NumPy arrays (copies)."""
    return {k: np.array(v.numpy(), copy=True) for k, v in model.state_dict().items()}


def load_into(t_model: tnn.Module, arrays: dict[str, np.ndarray]) -> None:
    """Load our (NumPy) state dict into the twin, strictly."""
    sd = {k: torch.from_numpy(np.array(v, copy=True)) for k, v in arrays.items()}
    t_model.load_state_dict(sd, strict=True)


def batch_arrays(name: str, data: dict, step: int, cfg: dict) -> dict[str, np.ndarray]:
    """The example's batch for ``step`` as host NumPy arrays (get_batch on the CPU)."""
    b = example(name).get_batch(data, step, cfg, "cpu")
    return {k: np.array(v.numpy(), copy=True) for k, v in b.items()}


def torch_batch(arrays: dict[str, np.ndarray], device: str = "cpu") -> dict[str, torch.Tensor]:
    return {k: torch.from_numpy(v).to(device) for k, v in arrays.items()}


def our_batch(arrays: dict[str, np.ndarray], device: str = "cpu") -> dict:
    import torchlean

    return {k: torchlean.tensor(v, device=device) for k, v in arrays.items()}


# -- the equivalence check --------------------------------------------------------------------------
def check_twin(name: str, kind: str = "tiny", steps: int = 3, device: str = "cpu",
               cfg: dict | None = None) -> dict[str, Any]:
    """Build our model and the twin from the same weights; compare the first loss and the losses of
    ``steps`` optimizer steps on the same batches. Returns {"losses": [(ours, torch)], "rel": [...],
    "strict_load": True}."""
    import torchlean

    ex = example(name)
    cfg = dict(cfg) if cfg is not None else config(name, kind)
    data = ex.make_data(cfg)
    model = ex.make_model(cfg).to(device)
    opt, sched = ex.make_optimizer(model, cfg)
    t_model = make_torch_model(name, cfg)
    load_into(t_model, state_dict_arrays(model))
    t_model.to(device)
    t_opt, t_sched = make_optimizer_like(opt, sched, t_model)
    losses, rel = [], []
    for step in range(steps + 1):
        arrays = batch_arrays(name, data, step, cfg)
        loss = ex.loss_fn(model, our_batch(arrays, device))
        t_loss = torch_loss(name, t_model, torch_batch(arrays, device))
        a, b = float(loss.item()), float(t_loss.item())
        losses.append((a, b))
        rel.append(abs(a - b) / max(abs(b), 1e-30))
        if step == steps:
            break
        opt.zero_grad()
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
        t_opt.zero_grad()
        t_loss.backward()
        t_opt.step()
        if t_sched is not None:
            t_sched.step()
    del torchlean
    return {"example": name, "config": kind, "losses": losses, "rel": rel, "strict_load": True}


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python3 -m benchmarks.torch_models",
                                 description="check that each PyTorch twin matches the torchlean example")
    ap.add_argument("--config", default="tiny", choices=("tiny", "default", "cuda"))
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--only", action="append")
    args = ap.parse_args(argv)
    worst = 0.0
    for name in EXAMPLES:
        if args.only and not any(o in name for o in args.only):
            continue
        r = check_twin(name, args.config, args.steps, args.device)
        worst = max(worst, r["rel"][0])
        print(f"{name:10s} first loss ours {r['losses'][0][0]:.7g} torch {r['losses'][0][1]:.7g} "
              f"rel {r['rel'][0]:.2e}; after {args.steps} steps: "
              + ", ".join(f"{a:.6g}/{b:.6g} ({e:.1e})" for (a, b), e in zip(r["losses"][1:], r["rel"][1:])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
