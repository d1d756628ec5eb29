"""The models of ``benchmarks.scale``, written once for both frameworks.

Every builder takes ``fw``, a namespace holding the framework's modules (``torch``, ``nn``, ``F``,
``optim``) as PyTorch spells them, so the SAME source builds the torchlean model (``import
torchlean as torch`` ...) and its PyTorch twin. Some pieces differ by side, and ``fw`` carries them:

* ``fw.SpectralConv1d``: the channels-last layer of torchlean's FNO1d: ours is
  ``torchlean.nn.SpectralConv1dChannelsLast`` (the fused ``ops.spectral_conv1d``), torch's the
  reference rfft -> einsum over the kept modes -> irfft on the same layout
  (``torch_models.TorchSpectralConv1d``). Both hold ``weight_re``/``weight_im`` of shape (modes, in,
  out) and compute the same map.
* ``fw.selective_scan``: ours is ``torchlean.ops.selective_scan``; torch's is mamba_ssm's
  ``selective_scan_ref`` (a Python loop over time: what PyTorch eager runs without mamba_ssm's CUDA
  extension; ``torch_models.selective_scan_ref``). Same semantics and layouts.
* ``fw.FNO2d`` (case ``fno2d``): ours is ``torchlean.nn.FNO2d``; torch's is the reference
  ``fourier_2d.py`` model written in torch (``reference_fno2d``), with the same parameter names and
  shapes (complex ``weights1``/``weights2``), so one state dict loads into both.

Weights: ``init_weights`` overwrites every parameter with NumPy draws keyed by (seed, module,
parameter name), so both sides start from identical values (complex parameters: real and imaginary
parts uniform in [0, 1 / (in * out)), the reference's ``scale * torch.rand(..., dtype=cfloat)``).
Batches: ``make_batches`` (NumPy only).
"""

from __future__ import annotations

import math
import zlib
from types import SimpleNamespace
from typing import Any, Callable

import numpy as np

# name -> description, CPU scale-down ("small") and the realistic size ("full")
CASES: dict[str, dict[str, Any]] = {
    "gpt2": {
        "desc": "GPT-2 small, AdamW",
        "full": dict(n_layer=12, d=768, n_head=12, T=1024, batch=8, vocab=50304),
        "small": dict(n_layer=2, d=256, n_head=4, T=128, batch=2, vocab=50304),
    },
    "gpt_mini": {
        "desc": "GPT mini (char-level), AdamW",
        "full": dict(n_layer=6, d=384, n_head=6, T=256, batch=32, vocab=65),
        "small": dict(n_layer=2, d=192, n_head=6, T=128, batch=8, vocab=65),
    },
    "resnet18": {
        "desc": "ResNet-18 on 32x32, SGD momentum",
        "full": dict(width=64, batch=128, image=32, classes=10),
        "small": dict(width=16, batch=8, image=32, classes=10),
    },
    "dcgan": {
        "desc": "DCGAN 64x64, D + G step, two Adams",
        "full": dict(nz=100, ngf=64, ndf=64, nc=3, batch=64),
        "small": dict(nz=100, ngf=16, ndf=16, nc=3, batch=16),
    },
    "mlp": {
        "desc": "wide MLP, ReLU, Adam",
        "full": dict(width=4096, n_layer=8, batch=512),
        "small": dict(width=1024, n_layer=8, batch=128),
    },
    "fno1d": {
        "desc": "FNO1d (4 Fourier layers), Adam",
        "full": dict(width=64, modes=16, grid=1024, batch=20, n_layer=4),
        "small": dict(width=64, modes=16, grid=512, batch=10, n_layer=4),
    },
    "fno2d": {
        "desc": "FNO2d (fourier_2d.py, Darcy), Adam",
        "full": dict(width=32, modes=12, grid=85, padding=9, batch=20),
        "small": dict(width=32, modes=12, grid=43, padding=9, batch=10),
    },
    "mamba": {
        "desc": "Mamba block stack LM, AdamW",
        "full": dict(d=768, n_layer=4, T=1024, batch=4, d_state=16, vocab=256),
        "small": dict(d=128, n_layer=2, T=128, batch=2, d_state=16, vocab=256),
    },
    "lstm": {
        "desc": "LSTM word LM (2 layers), SGD",
        "full": dict(hidden=650, n_layer=2, T=35, batch=20, vocab=10000),
        "small": dict(hidden=200, n_layer=2, T=35, batch=20, vocab=10000),
    },
}


# -- floating-point operations of one training step (analytic) ------------------------------------
#
# Only GEMMs, convolutions, attention and FFTs are counted (element-wise work, norms, the selective
# scan's recurrence, optimizer updates and embeddings' gathers are left out). A layer whose weights
# train costs 3x its forward (forward, dX, dW); 2x where its input needs no gradient (no dX).

def _gemm(m: int, n: int, k: int) -> int:
    """Forward FLOPs of an (m, k) @ (k, n) product."""
    return 2 * m * n * k


def _conv(batch: int, out_hw: int, cin: int, cout: int, k: int, groups: int = 1) -> int:
    """Forward FLOPs of a square conv as a GEMM (transposed conv: pass its INPUT size as out_hw)."""
    return 2 * batch * out_hw * out_hw * (cin // groups) * k * k * cout


def _train(fwd: int, dx: bool = True) -> int:
    return fwd * (3 if dx else 2)


def flops_gpt(c: dict) -> int:
    # per block: qkv, proj, fc, mlp_proj GEMMs (24 d^2 per token) + causal QK^T and PV (half of 2 x 2 T^2 d);
    # tied lm_head; attention's backward (dQ, dK, dP, dV) is 2x its forward like a trained layer's
    B, T, d = c["batch"], c["T"], c["d"]
    block = _gemm(B * T, 12 * d, d) + 2 * _gemm(B * T, T, d) // 2
    return _train(c["n_layer"] * block + _gemm(B * T, c["vocab"], d))


def flops_resnet18(c: dict) -> int:
    # stem conv (input needs no gradient) + 4 stages of 2 BasicBlocks (two 3x3 convs, 1x1 shortcut on
    # downsampling), all as GEMMs, + fc
    B, w, hw = c["batch"], c["width"], c["image"]
    total, cin = _train(_conv(B, hw, 3, w, 3), dx=False), w
    for i, cout in enumerate((w, 2 * w, 4 * w, 8 * w)):
        hw = hw if i == 0 else hw // 2
        total += _train(_conv(B, hw, cin, cout, 3) + 3 * _conv(B, hw, cout, cout, 3))
        if cin != cout:
            total += _train(_conv(B, hw, cin, cout, 1))
        cin = cout
    return total + _train(_gemm(B, c["classes"], 8 * w))


def flops_dcgan(c: dict) -> int:
    # D runs forward + backward three times (real, fake.detach(): no dX into the images; fake: dX into
    # G); G forward once and backward once (no dX into the noise). Transposed convs counted at their input size.
    B, nz, g, f, nc = c["batch"], c["nz"], c["ngf"], c["ndf"], c["nc"]
    d_first = _conv(B, 32, nc, f, 4)
    d_rest = (_conv(B, 16, f, 2 * f, 4) + _conv(B, 8, 2 * f, 4 * f, 4) + _conv(B, 4, 4 * f, 8 * f, 4)
              + _conv(B, 1, 8 * f, 1, 4))
    g_first = _conv(B, 1, nz, 8 * g, 4)
    g_rest = (_conv(B, 4, 8 * g, 4 * g, 4) + _conv(B, 8, 4 * g, 2 * g, 4) + _conv(B, 16, 2 * g, g, 4)
              + _conv(B, 32, g, nc, 4))
    return (2 * _train(d_first, dx=False) + _train(d_first) + 3 * _train(d_rest)
            + _train(g_first, dx=False) + _train(g_rest))


def flops_mlp(c: dict) -> int:
    # n_layer square Linears; the first needs no dX
    B, w = c["batch"], c["width"]
    return _train(_gemm(B, w, w), dx=False) + (c["n_layer"] - 1) * _train(_gemm(B, w, w))


def flops_fno1d(c: dict) -> int:
    # lift (no dX), per layer: pointwise Linear + spectral conv (complex einsum over the kept modes,
    # 8 real FLOPs per complex multiply-add, 3x; an rfft and an irfft of length grid per (batch, channel)
    # at 5 N log2 N each, 2x: backward runs one FFT per forward FFT), then proj1, proj2
    B, N, w, m = c["batch"], c["grid"], c["width"], c["modes"]
    ffts = 2 * B * w * 5 * N * math.log2(N)
    layer = _train(_gemm(B * N, w, w)) + _train(8 * B * m * w * w) + 2 * int(ffts)
    return (_train(_gemm(B * N, w, 2), dx=False) + c["n_layer"] * layer
            + _train(_gemm(B * N, 128, w)) + _train(_gemm(B * N, 1, 128)))


def flops_fno2d(c: dict) -> int:
    # fc0 (no dX) on the s x s grid; per layer on the padded S x S grid: the 1x1 conv w_l (a GEMM) and
    # the spectral conv (complex einsum over both kept corners, 2 m1 m2 modes, 8 real FLOPs per complex
    # multiply-add, 3x; an rfft2 and an irfft2 of S x S per (batch, channel) at 5 N log2 N, N = S^2,
    # 2x); fc1, fc2 on the cropped grid
    B, s, w, m = c["batch"], c["grid"], c["width"], c["modes"]
    S = s + c["padding"]
    ffts = 2 * B * w * 5 * S * S * math.log2(S * S)
    layer = _train(_gemm(B * S * S, w, w)) + _train(8 * B * 2 * m * m * w * w) + 2 * int(ffts)
    return (_train(_gemm(B * s * s, w, 3), dx=False) + 4 * layer
            + _train(_gemm(B * s * s, 128, w)) + _train(_gemm(B * s * s, 1, 128)))


def flops_mamba(c: dict) -> int:
    # per block: in_proj, depthwise conv (K=4), x_proj, dt_proj, out_proj GEMMs (the selective scan is
    # element-wise and left out); tied lm_head
    B, T, d, N = c["batch"], c["T"], c["d"], c["d_state"]
    di, R, K = 2 * d, math.ceil(d / 16), 4
    M = B * T
    block = (_gemm(M, 2 * di, d) + 2 * M * K * di + _gemm(M, R + 2 * N, di) + _gemm(M, di, R)
             + _gemm(M, d, di))
    return _train(c["n_layer"] * block + _gemm(M, c["vocab"], d))


def flops_lstm(c: dict) -> int:
    # per layer and time step: the 4 gates' x W_ih^T + h W_hh^T; decoder Linear over all T * batch rows
    h, T, B = c["hidden"], c["T"], c["batch"]
    return _train(c["n_layer"] * T * _gemm(B, 4 * h, 2 * h) + _gemm(T * B, c["vocab"], h))


STEP_FLOPS: dict[str, Callable[[dict], int]] = {
    "gpt2": flops_gpt, "gpt_mini": flops_gpt, "resnet18": flops_resnet18, "dcgan": flops_dcgan, "mlp": flops_mlp,
    "fno1d": flops_fno1d, "fno2d": flops_fno2d, "mamba": flops_mamba, "lstm": flops_lstm}


def step_flops(name: str, cfg: dict) -> int:
    """Floating-point operations of one training step of case ``name`` at ``cfg`` (analytic, see above)."""
    return int(STEP_FLOPS[name](cfg))


def summary(name: str, cfg: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in cfg.items())


def np_rng(seed: int, stream: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(stream.encode())])


# -- weights and batches (NumPy) ------------------------------------------------------------------

def draw(seed: int, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """The initial value of parameter ``name`` (a function of seed, name and shape only)."""
    rng = np_rng(seed, name)
    leaf = name.rsplit(".", 1)[-1]
    if leaf == "A_log":                                   # Mamba: A = -(1 .. N) per channel
        return np.log(np.tile(np.arange(1, shape[1] + 1, dtype=np.float64), (shape[0], 1)))
    if leaf in ("weight_re", "weight_im"):                # FNO reference: uniform [0, 1/(in*out))
        return rng.uniform(0.0, 1.0 / (shape[1] * shape[2]), size=shape)
    if name.startswith(("G.", "D.")):                    # DCGAN's weights_init: N(0, 0.02) convs, N(1, 0.02) BN
        if "bias" in leaf:
            return np.zeros(shape)
        return rng.normal(1.0 if len(shape) == 1 else 0.0, 0.02, size=shape)
    if "bias" in leaf:
        return rng.uniform(-0.05, 0.05, size=shape)
    if len(shape) == 1:                                   # norm weights, Mamba's D
        return np.ones(shape)
    fan_in = int(np.prod(shape[1:]))
    if leaf == "weight" and ("wte" in name or "wpe" in name or "embedding" in name):
        return rng.normal(0.0, 0.02, size=shape)
    bound = 1.0 / math.sqrt(fan_in)
    return rng.uniform(-bound, bound, size=shape)


def init_weights(fw: SimpleNamespace, modules: dict[str, Any], seed: int) -> None:
    torch = fw.torch
    with torch.no_grad():
        for mname, m in modules.items():
            for pname, p in m.named_parameters():
                if p.is_complex():          # the reference FNO's cfloat weights: re, im uniform [0, 1/(in*out))
                    shape = tuple(p.shape)
                    v = np_rng(seed, f"{mname}.{pname}").uniform(0.0, 1.0 / (shape[0] * shape[1]), shape + (2,))
                    p.copy_(torch.view_as_complex(torch.from_numpy(v.astype(np.float32))).to(p.device))
                    continue
                v = draw(seed, f"{mname}.{pname}", tuple(p.shape)).astype(np.float32)
                p.copy_(torch.from_numpy(v).to(p.device))


def make_batches(name: str, cfg: dict, n: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    rng = np_rng(seed, f"batches/{name}")
    out = []
    for _ in range(n):
        if name in ("gpt2", "gpt_mini", "mamba"):
            tok = rng.integers(0, cfg["vocab"], size=(cfg["batch"], cfg["T"] + 1)).astype(np.int64)
            out.append({"x": tok[:, :-1].copy(), "y": tok[:, 1:].copy()})
        elif name == "lstm":
            tok = rng.integers(0, cfg["vocab"], size=(cfg["T"] + 1, cfg["batch"])).astype(np.int64)
            out.append({"x": tok[:-1].copy(), "y": tok[1:].copy()})
        elif name == "resnet18":
            out.append({"x": rng.standard_normal((cfg["batch"], 3, cfg["image"], cfg["image"])).astype(np.float32),
                        "y": rng.integers(0, cfg["classes"], size=cfg["batch"]).astype(np.int64)})
        elif name == "dcgan":
            real = np.tanh(rng.standard_normal((cfg["batch"], cfg["nc"], 64, 64))).astype(np.float32)
            out.append({"real": real, "noise": rng.standard_normal((cfg["batch"], cfg["nz"], 1, 1)).astype(np.float32)})
        elif name == "mlp":
            w = cfg["width"]
            out.append({"x": rng.standard_normal((cfg["batch"], w)).astype(np.float32),
                        "y": rng.standard_normal((cfg["batch"], w)).astype(np.float32)})
        elif name == "fno1d":
            g = cfg["grid"]
            u0 = rng.standard_normal((cfg["batch"], g, 1)).astype(np.float32)
            xs = np.broadcast_to(np.linspace(0, 1, g, dtype=np.float32)[None, :, None], (cfg["batch"], g, 1))
            out.append({"x": np.concatenate([u0, xs], axis=2).astype(np.float32),
                        "y": np.roll(u0, 3, axis=1).astype(np.float32)})
        elif name == "fno2d":
            # x: a normalized coefficient field (batch, s, s, 1); y: a positive smooth solution-like field
            s = cfg["grid"]
            x = rng.standard_normal((cfg["batch"], s, s, 1)).astype(np.float32)
            t = np.linspace(0.0, 1.0, s)
            bump = np.sin(np.pi * t)[:, None] * np.sin(np.pi * t)[None, :]
            y = bump[None] * (1.0 + 0.1 * rng.standard_normal((cfg["batch"], s, s)))
            out.append({"x": x, "y": y.astype(np.float32)})
        else:
            raise KeyError(name)
    return out


# -- models (one source, both frameworks) ---------------------------------------------------------

def gpt(fw, c):
    nn, F = fw.nn, fw.F

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            d = c["d"]
            self.ln_1 = nn.LayerNorm(d)
            self.c_attn = nn.Linear(d, 3 * d)
            self.c_proj = nn.Linear(d, d)
            self.ln_2 = nn.LayerNorm(d)
            self.c_fc = nn.Linear(d, 4 * d)
            self.mlp_proj = nn.Linear(4 * d, d)

        def forward(self, x):
            B, T, C = x.shape
            h = c["n_head"]
            q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
            q = q.view(B, T, h, C // h).transpose(1, 2)
            k = k.view(B, T, h, C // h).transpose(1, 2)
            v = v.view(B, T, h, C // h).transpose(1, 2)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            y = y.transpose(1, 2).contiguous().view(B, T, C)
            x = x + self.c_proj(y)
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(c["vocab"], c["d"])
            self.wpe = nn.Embedding(c["T"], c["d"])
            self.h = nn.ModuleList([Block() for _ in range(c["n_layer"])])
            self.ln_f = nn.LayerNorm(c["d"])
            self.lm_head = nn.Linear(c["d"], c["vocab"], bias=False)
            self.lm_head.weight = self.wte.weight

        def forward(self, idx):
            pos = fw.torch.arange(idx.shape[1], device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for blk in self.h:
                x = blk(x)
            return self.lm_head(self.ln_f(x))

    model = GPT()
    return {"model": model}, lambda ms: [fw.optim.AdamW(ms["model"].parameters(), lr=3e-4, betas=(0.9, 0.95),
                                                        weight_decay=0.1)], _lm_step(fw)


def _lm_step(fw):
    F = fw.F

    def step(ms, opts, b):
        logits = ms["model"](b["x"])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), b["y"].reshape(-1))
        opts[0].zero_grad()
        loss.backward()
        opts[0].step()
        return loss
    return step


def resnet18(fw, c):
    nn, F = fw.nn, fw.F

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.shortcut = nn.Sequential()
            if stride != 1 or cin != cout:
                self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            out = F.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return F.relu(out + self.shortcut(x))

    class ResNet(nn.Module):
        def __init__(self):
            super().__init__()
            w = c["width"]
            self.conv1 = nn.Conv2d(3, w, 3, 1, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(w)
            layers, cin = [], w
            for i, cout in enumerate((w, 2 * w, 4 * w, 8 * w)):
                stride = 1 if i == 0 else 2
                layers.append(nn.Sequential(BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)))
                cin = cout
            self.layers = nn.Sequential(*layers)
            self.fc = nn.Linear(8 * w, c["classes"])

        def forward(self, x):
            out = self.layers(F.relu(self.bn1(self.conv1(x))))
            out = F.adaptive_avg_pool2d(out, 1).flatten(1)
            return self.fc(out)

    def step(ms, opts, b):
        loss = F.cross_entropy(ms["model"](b["x"]), b["y"])
        opts[0].zero_grad()
        loss.backward()
        opts[0].step()
        return loss

    return {"model": ResNet()}, lambda ms: [fw.optim.SGD(ms["model"].parameters(), lr=0.05, momentum=0.9,
                                                         weight_decay=5e-4)], step


def dcgan(fw, c):
    nn, torch = fw.nn, fw.torch
    nz, ngf, ndf, nc = c["nz"], c["ngf"], c["ndf"], c["nc"]

    class Generator(nn.Module):
        def __init__(self):
            super().__init__()
            self.main = nn.Sequential(
                nn.ConvTranspose2d(nz, ngf * 8, 4, 1, 0, bias=False), nn.BatchNorm2d(ngf * 8), nn.ReLU(True),
                nn.ConvTranspose2d(ngf * 8, ngf * 4, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf * 4), nn.ReLU(True),
                nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf * 2), nn.ReLU(True),
                nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf), nn.ReLU(True),
                nn.ConvTranspose2d(ngf, nc, 4, 2, 1, bias=False), nn.Tanh())

        def forward(self, x):
            return self.main(x)

    class Discriminator(nn.Module):
        def __init__(self):
            super().__init__()
            self.main = nn.Sequential(
                nn.Conv2d(nc, ndf, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True),
                nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 2), nn.LeakyReLU(0.2, inplace=True),
                nn.Conv2d(ndf * 2, ndf * 4, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 4),
                nn.LeakyReLU(0.2, inplace=True),
                nn.Conv2d(ndf * 4, ndf * 8, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 8),
                nn.LeakyReLU(0.2, inplace=True),
                nn.Conv2d(ndf * 8, 1, 4, 1, 0, bias=False), nn.Sigmoid())

        def forward(self, x):
            return self.main(x).view(-1)

    crit = nn.BCELoss()

    def step(ms, opts, b):
        G, D = ms["G"], ms["D"]
        optD, optG = opts
        real = b["real"]
        n = real.shape[0]
        ones = torch.ones(n, device=real.device)
        zeros = torch.zeros(n, device=real.device)
        D.zero_grad()
        errD_real = crit(D(real), ones)
        errD_real.backward()
        fake = G(b["noise"])
        errD_fake = crit(D(fake.detach()), zeros)
        errD_fake.backward()
        optD.step()
        G.zero_grad()
        errG = crit(D(fake), ones)
        errG.backward()
        optG.step()
        return errD_real + errD_fake + errG

    def opts(ms):
        return [fw.optim.Adam(ms["D"].parameters(), lr=2e-4, betas=(0.5, 0.999)),
                fw.optim.Adam(ms["G"].parameters(), lr=2e-4, betas=(0.5, 0.999))]

    return {"G": Generator(), "D": Discriminator()}, opts, step


def mlp(fw, c):
    nn, F = fw.nn, fw.F
    w = c["width"]
    layers = []
    for i in range(c["n_layer"]):
        layers.append(nn.Linear(w, w))
        if i < c["n_layer"] - 1:
            layers.append(nn.ReLU())
    model = nn.Sequential(*layers)

    def step(ms, opts, b):
        loss = F.mse_loss(ms["model"](b["x"]), b["y"])
        opts[0].zero_grad()
        loss.backward()
        opts[0].step()
        return loss

    return {"model": model}, lambda ms: [fw.optim.Adam(ms["model"].parameters(), lr=1e-4)], step


def fno1d(fw, c):
    nn, F = fw.nn, fw.F
    width, modes = c["width"], c["modes"]

    class FNO1d(nn.Module):
        def __init__(self):
            super().__init__()
            self.lift = nn.Linear(2, width)
            self.spectral = nn.ModuleList([fw.SpectralConv1d(width, width, modes) for _ in range(c["n_layer"])])
            self.pointwise = nn.ModuleList([nn.Linear(width, width) for _ in range(c["n_layer"])])
            self.proj1 = nn.Linear(width, 128)
            self.proj2 = nn.Linear(128, 1)

        def forward(self, x):
            v = self.lift(x)
            for i, (spec, point) in enumerate(zip(self.spectral, self.pointwise)):
                v = spec(v) + point(v)
                if i < c["n_layer"] - 1:
                    v = F.gelu(v)
            return self.proj2(F.gelu(self.proj1(v)))

    def step(ms, opts, b):
        loss = F.mse_loss(ms["model"](b["x"]), b["y"])
        opts[0].zero_grad()
        loss.backward()
        opts[0].step()
        return loss

    return {"model": FNO1d()}, lambda ms: [fw.optim.Adam(ms["model"].parameters(), lr=1e-3)], step


def reference_fno2d(fw, c):
    """The reference ``fourier_2d.py`` FNO2d (rfft2 -> complex einsum on both corners -> irfft2, 1x1
    Conv2d w_l, gelu, padding, get_grid rebuilt on the host each forward), written against ``fw``."""
    nn, F, torch = fw.nn, fw.F, fw.torch

    class SpectralConv2d(nn.Module):
        def __init__(self, cin, cout, m1, m2):
            super().__init__()
            self.out_channels, self.modes1, self.modes2 = cout, m1, m2
            scale = 1 / (cin * cout)
            self.weights1 = nn.Parameter(scale * torch.rand(cin, cout, m1, m2, dtype=torch.cfloat))
            self.weights2 = nn.Parameter(scale * torch.rand(cin, cout, m1, m2, dtype=torch.cfloat))

        def forward(self, x):
            m1, m2 = self.modes1, self.modes2
            x_ft = torch.fft.rfft2(x)
            out_ft = torch.zeros(x.shape[0], self.out_channels, x.size(-2), x.size(-1) // 2 + 1,
                                 dtype=torch.cfloat, device=x.device)
            out_ft[:, :, :m1, :m2] = torch.einsum("bixy,ioxy->boxy", x_ft[:, :, :m1, :m2], self.weights1)
            out_ft[:, :, -m1:, :m2] = torch.einsum("bixy,ioxy->boxy", x_ft[:, :, -m1:, :m2], self.weights2)
            return torch.fft.irfft2(out_ft, s=(x.size(-2), x.size(-1)))

    class FNO2d(nn.Module):
        def __init__(self, modes1, modes2, width, padding):
            super().__init__()
            self.padding = padding
            self.fc0 = nn.Linear(3, width)
            for i in range(4):
                setattr(self, f"conv{i}", SpectralConv2d(width, width, modes1, modes2))
            for i in range(4):
                setattr(self, f"w{i}", nn.Conv2d(width, width, 1))
            self.fc1 = nn.Linear(width, 128)
            self.fc2 = nn.Linear(128, 1)

        def forward(self, x):
            b, sx, sy = x.shape[0], x.shape[1], x.shape[2]
            gridx = torch.tensor(np.linspace(0, 1, sx), dtype=torch.float).reshape(1, sx, 1, 1).repeat([b, 1, sy, 1])
            gridy = torch.tensor(np.linspace(0, 1, sy), dtype=torch.float).reshape(1, 1, sy, 1).repeat([b, sx, 1, 1])
            x = torch.cat((x, torch.cat((gridx, gridy), dim=-1).to(x.device)), dim=-1)
            x = self.fc0(x).permute(0, 3, 1, 2)
            x = F.pad(x, [0, self.padding, 0, self.padding])
            for i in range(4):
                x = getattr(self, f"conv{i}")(x) + getattr(self, f"w{i}")(x)
                if i < 3:
                    x = F.gelu(x)
            x = x[..., :-self.padding, :-self.padding].permute(0, 2, 3, 1)
            return self.fc2(F.gelu(self.fc1(x)))

    return FNO2d(c["modes"], c["modes"], c["width"], c["padding"])


def fno2d(fw, c):
    """Ours: ``torchlean.nn.FNO2d``; torch's: the reference (``reference_fno2d``); same parameter names.
    Loss: the reference's training loss, LpLoss (relative L2 per sample, averaged) of the decoded
    prediction (y_normalizer.decode: * (std + eps) + mean, constants kept on the device)."""
    torch = fw.torch
    s = c["grid"]
    model = fw.FNO2d(c["modes"], c["modes"], c["width"], padding=c["padding"]) if fw.side == "ours" \
        else reference_fno2d(fw, c)
    rng = np_rng(0, "fno2d/normalizer")
    std = (0.1 + rng.uniform(0.0, 0.1, (s, s)) + 1e-5).astype(np.float32)
    mean = rng.uniform(0.0, 0.1, (s, s)).astype(np.float32)
    consts: dict[str, Any] = {}

    def step(ms, opts, b):
        x, y = b["x"], b["y"]
        if "std" not in consts:
            consts["std"] = torch.from_numpy(std).to(x.device)
            consts["mean"] = torch.from_numpy(mean).to(x.device)
        n = x.shape[0]
        out = ms["model"](x).reshape(n, s, s) * consts["std"] + consts["mean"]
        diff = torch.norm(out.reshape(n, -1) - y.reshape(n, -1), 2, 1)
        loss = torch.mean(diff / torch.norm(y.reshape(n, -1), 2, 1))
        opts[0].zero_grad()
        loss.backward()
        opts[0].step()
        return loss

    return {"model": model}, lambda ms: [fw.optim.Adam(ms["model"].parameters(), lr=1e-3, weight_decay=1e-4)], step


def mamba(fw, c):
    nn, F, torch = fw.nn, fw.F, fw.torch
    d, N = c["d"], c["d_state"]
    di, R, K = 2 * d, math.ceil(d / 16), 4

    class RMSNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(d))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * self.weight

    class MambaBlock(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = RMSNorm()
            self.in_proj = nn.Linear(d, 2 * di, bias=False)
            self.conv1d = nn.Conv1d(di, di, K, groups=di, padding=K - 1, bias=True)
            self.x_proj = nn.Linear(di, R + 2 * N, bias=False)
            self.dt_proj = nn.Linear(R, di, bias=True)
            self.A_log = nn.Parameter(torch.zeros(di, N))
            self.D = nn.Parameter(torch.ones(di))
            self.out_proj = nn.Linear(di, d, bias=False)

        def forward(self, h):
            B_, L, _ = h.shape
            xz = self.in_proj(self.norm(h))                             # (b, L, 2 di)
            x, z = xz.split(di, dim=2)
            x = F.silu(self.conv1d(x.transpose(1, 2))[:, :, :L])       # (b, di, L)
            dbc = self.x_proj(x.transpose(1, 2))                        # (b, L, R + 2N)
            dt, Bm, Cm = dbc.split([R, N, N], dim=2)
            delta = F.linear(dt, self.dt_proj.weight).transpose(1, 2)   # (b, di, L)
            A = -torch.exp(self.A_log)
            y = fw.selective_scan(x.contiguous(), delta.contiguous(), A, Bm.transpose(1, 2).contiguous(),
                                  Cm.transpose(1, 2).contiguous(), self.D, z.transpose(1, 2).contiguous(),
                                  delta_bias=self.dt_proj.bias, delta_softplus=True)
            return h + self.out_proj(y.transpose(1, 2))

    class MambaLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = nn.Embedding(c["vocab"], d)
            self.layers = nn.ModuleList([MambaBlock() for _ in range(c["n_layer"])])
            self.norm_f = RMSNorm()
            self.lm_head = nn.Linear(d, c["vocab"], bias=False)
            self.lm_head.weight = self.embedding.weight

        def forward(self, idx):
            x = self.embedding(idx)
            for layer in self.layers:
                x = layer(x)
            return self.lm_head(self.norm_f(x))

    return {"model": MambaLM()}, lambda ms: [fw.optim.AdamW(ms["model"].parameters(), lr=1e-3,
                                                            weight_decay=0.01)], _lm_step(fw)


def lstm(fw, c):
    nn, F = fw.nn, fw.F
    h = c["hidden"]

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = nn.Embedding(c["vocab"], h)
            self.rnn = nn.LSTM(h, h, c["n_layer"])
            self.decoder = nn.Linear(h, c["vocab"])

        def forward(self, x):                                          # x (T, batch)
            out, _ = self.rnn(self.embedding(x))
            return self.decoder(out)

    def step(ms, opts, b):
        logits = ms["model"](b["x"])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), b["y"].reshape(-1))
        opts[0].zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(ms["model"].parameters(), 0.25)
        opts[0].step()
        return loss

    return {"model": LM()}, lambda ms: [fw.optim.SGD(ms["model"].parameters(), lr=1.0)], step


BUILDERS: dict[str, Callable] = {"gpt2": gpt, "gpt_mini": gpt, "resnet18": resnet18, "dcgan": dcgan, "mlp": mlp,
                                 "fno1d": fno1d, "fno2d": fno2d, "mamba": mamba, "lstm": lstm}


def framework(side: str) -> SimpleNamespace:
    """The framework namespace a builder takes: torchlean's (``side="ours"``) or PyTorch's."""
    if side == "ours":
        import torchlean as torch
        import torchlean.nn as nn
        import torchlean.nn.functional as F
        import torchlean.optim as optim
        from torchlean import ops

        return SimpleNamespace(side=side, torch=torch, nn=nn, F=F, optim=optim, SpectralConv1d=nn.SpectralConv1dChannelsLast,
                               selective_scan=ops.selective_scan, FNO2d=nn.FNO2d)
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    import torch.optim as optim

    from . import torch_models as TM

    return SimpleNamespace(side=side, torch=torch, nn=nn, F=F, optim=optim, SpectralConv1d=TM.TorchSpectralConv1d,
                           selective_scan=TM.selective_scan_ref, FNO2d=None)


def build(name: str, cfg: dict, fw: SimpleNamespace, device: str, seed: int = 0):
    """(modules, optimizers, step): the modules on ``device`` with the NumPy weights, their optimizers,
    and ``step(modules, optimizers, batch_tensors) -> loss`` (one full training step)."""
    modules, make_opts, step = BUILDERS[name](fw, cfg)
    for m in modules.values():
        m.to(device)
        m.train()
    init_weights(fw, modules, seed)
    return modules, make_opts(modules), step
