"""Examples cnn, gpt_adder, mamba (tiny settings: the loss falls, evaluate works, runs are bitwise
reproducible) and the Mamba block (against a float64 PyTorch transcription of mamba_simple's
reference path, forward and every parameter gradient)."""

from __future__ import annotations

import importlib
import math

import numpy as np
import pytest

import torchlean
from torchlean.errors import ArgumentError, ShapeError
from torchlean.nn.modules.mamba import CausalDepthwiseConv1d, Mamba

EXAMPLES = ["cnn", "gpt_adder", "mamba"]
API = ["NAME", "DESCRIPTION", "METRIC", "LOWER_IS_BETTER", "default_config", "cuda_config", "tiny_config",
       "make_data", "make_model", "make_optimizer", "get_batch", "loss_fn", "evaluate", "plot_predictions"]


def _load(name: str):
    return importlib.import_module(f"torchlean.examples.{name}")


def _cfg(ex) -> dict:
    cfg = ex.default_config()
    cfg.update(ex.tiny_config())
    return cfg


def _train(ex, cfg: dict, device: str, use_example_optimizer: bool = False):
    data = ex.make_data(cfg)
    model = ex.make_model(cfg).to(device)
    if use_example_optimizer:
        opt, sched = ex.make_optimizer(model, cfg)
    else:
        opt, sched = torchlean.optim.Adam(model.parameters(), lr=cfg["lr"]), None
    losses = []
    for step in range(cfg["steps"]):
        loss = ex.loss_fn(model, ex.get_batch(data, step, cfg, device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
        losses.append(loss.item())
    return model, data, losses


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_api(name):
    ex = _load(name)
    for attr in API:
        assert hasattr(ex, attr), f"{name} lacks {attr}"
    assert ex.NAME == name and isinstance(ex.DESCRIPTION, str) and isinstance(ex.LOWER_IS_BETTER, bool)
    cfg = ex.default_config()
    for key in ("steps", "batch_size", "lr", "seed"):
        assert key in cfg
    assert set(ex.cuda_config()) <= set(cfg) and set(ex.tiny_config()) <= set(cfg)


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_learns_and_is_deterministic(name, device):
    ex = _load(name)
    cfg = _cfg(ex)
    # Bitwise repeatability is promised in deterministic mode (fast mode may use float atomics on CUDA,
    # e.g. the embedding backward's scatter-add).
    was = torchlean.deterministic_reductions()
    torchlean.set_deterministic_reductions(True)
    try:
        _check_learns_and_repeats(ex, cfg, name, device)
    finally:
        torchlean.set_deterministic_reductions(was)


def _check_learns_and_repeats(ex, cfg, name, device):
    model, data, losses = _train(ex, cfg, device)
    assert all(math.isfinite(v) for v in losses)
    assert np.mean(losses[-3:]) < losses[0], f"{name}: loss did not fall: {losses}"
    res = ex.evaluate(model, data, cfg, device)
    assert ex.METRIC in res and 0.0 <= res[ex.METRIC] <= 1.0
    assert model.training                                  # evaluate() restores train mode
    _, _, again = _train(ex, cfg, device)
    assert again == losses                                 # bitwise: same seed, same data, same losses


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_data_and_batches_are_deterministic(name):
    ex = _load(name)
    cfg = _cfg(ex)
    d1, d2 = ex.make_data(cfg), ex.make_data(cfg)
    for k in d1:
        np.testing.assert_array_equal(d1[k], d2[k])
    b1, b2, b3 = (ex.get_batch(d1, s, cfg, "cpu") for s in (3, 3, 4))
    for k in b1:
        np.testing.assert_array_equal(b1[k].numpy(), b2[k].numpy())
    assert any(not np.array_equal(b1[k].numpy(), b3[k].numpy()) for k in b1)


def test_example_optimizers_run():
    for name in EXAMPLES:
        ex = _load(name)
        cfg = _cfg(ex)
        cfg["steps"] = 2
        _, _, losses = _train(ex, cfg, "cpu", use_example_optimizer=True)
        assert all(math.isfinite(v) for v in losses)


def test_plot_predictions(tmp_path):
    pytest.importorskip("matplotlib")
    for name in EXAMPLES:
        ex = _load(name)
        cfg = _cfg(ex)
        data, model = ex.make_data(cfg), ex.make_model(cfg)
        path = tmp_path / f"{name}.png"
        ex.plot_predictions(model, data, cfg, "cpu", str(path))
        assert path.stat().st_size > 0


# -- example data: known answers ----------------------------------------------------------------------
def test_gpt_adder_encoding():
    ex = _load("gpt_adder")
    seq = ex.encode(np.array([123, 999]), np.array([456, 1]), 3)
    assert "".join(ex.VOCAB[t] for t in seq[0]) == "123+456=9750"
    assert "".join(ex.VOCAB[t] for t in seq[1]) == "999+001=0001"
    assert ex.decode_answer(seq[:, 8:]).tolist() == [579, 1000]
    cfg = _cfg(ex)
    data = ex.make_data(cfg)
    batch = ex.get_batch(data, 0, cfg, "cpu")
    n = cfg["n_digits"]
    y = batch["y"].numpy()
    assert (y[:, :2 * n + 1] == ex.IGNORE).all() and (y[:, 2 * n + 1:] >= 0).all()
    # training problems never come from the held-out test set
    hi = 10 ** n
    for step in range(20):
        x = ex.get_batch(data, step, cfg, "cpu")["x"].numpy()
        keys = ex.decode_answer(x[:, n - 1::-1]) * hi + ex.decode_answer(x[:, 2 * n:n:-1])
        assert not np.isin(keys, data["test_keys"]).any()


def test_mamba_task_sequences():
    ex = _load("mamba")
    cfg = dict(ex.default_config(), seq_len=12, n_data=3, n_symbols=5)
    seq, ans = ex.make_sequences(np.random.default_rng(0), 50, cfg)
    assert seq.shape == (50, 15) and ans.shape == (50, 3)
    assert (seq[:, 12:] == ex.MARKER).all()
    ctx = seq[:, :12]
    for row, a in zip(ctx, ans):
        assert row[row != ex.NOISE].tolist() == a.tolist()          # the data tokens, in order
    assert ans.min() >= 2 and ans.max() < 7


def test_cnn_shapes_are_distinct_classes():
    ex = _load("cnn")
    x, y = ex.draw_shapes(np.random.default_rng(0), 200, 16, noise=0.0)
    assert x.shape == (200, 1, 16, 16) and x.dtype == np.float32 and set(y.tolist()) == {0, 1, 2, 3}
    # noiseless: the shape is the bright part, and it is not empty
    bright = x[:, 0] > x[:, 0].min(axis=(1, 2), keepdims=True) + 0.3
    assert bright.sum(axis=(1, 2)).min() >= 4


# -- the Mamba block ----------------------------------------------------------------------------------
def _torch_reference(sd: dict, h: np.ndarray, d_conv: int, dt_rank: int, d_state: int):
    """mamba_simple's reference path in float64 PyTorch (grouped conv, a sequential scan)."""
    torch = pytest.importorskip("torch")
    tf = torch.nn.functional
    W = {k: torch.tensor(v.numpy(), dtype=torch.float64, requires_grad=True) for k, v in sd.items()}
    x_in = torch.tensor(h, dtype=torch.float64)
    b, L, _ = x_in.shape
    xz = (x_in @ W["in_proj.weight"].T).transpose(1, 2)
    x, z = xz.chunk(2, dim=1)
    di = x.shape[1]
    x = tf.silu(tf.conv1d(x, W["conv1d.weight"], W["conv1d.bias"], padding=d_conv - 1, groups=di)[..., :L])
    x_dbl = x.transpose(1, 2).reshape(b * L, di) @ W["x_proj.weight"].T
    dt, B, C = torch.split(x_dbl, [dt_rank, d_state, d_state], dim=-1)
    dt = (W["dt_proj.weight"] @ dt.T).reshape(di, b, L).permute(1, 0, 2)
    B = B.reshape(b, L, d_state).permute(0, 2, 1)
    C = C.reshape(b, L, d_state).permute(0, 2, 1)
    A = -torch.exp(W["A_log"])
    delta = tf.softplus(dt + W["dt_proj.bias"][None, :, None])
    s = torch.zeros(b, di, d_state, dtype=torch.float64)
    ys = []
    for t in range(L):
        s = torch.exp(delta[:, :, t, None] * A) * s + delta[:, :, t, None] * B[:, None, :, t] * x[:, :, t, None]
        ys.append((s * C[:, None, :, t]).sum(-1))
    y = (torch.stack(ys, -1) + x * W["D"][None, :, None]) * tf.silu(z)
    return y.transpose(1, 2) @ W["out_proj.weight"].T, W


@pytest.mark.parametrize("d_model,d_state,d_conv,L", [(24, 8, 4, 11), (16, 4, 1, 5), (8, 3, 3, 1)])
def test_mamba_block_matches_reference(d_model, d_state, d_conv, L):
    torch = pytest.importorskip("torch")
    torchlean.manual_seed(0)
    m = Mamba(d_model, d_state=d_state, d_conv=d_conv)
    rng = np.random.default_rng(0)
    h = rng.standard_normal((3, L, d_model)).astype(np.float32)
    out = m(torchlean.tensor(h))
    ref, W = _torch_reference(m.state_dict(), h, d_conv, m.dt_rank, d_state)
    assert out.shape == (3, L, d_model)
    scale = float(np.abs(ref.detach().numpy()).max())
    assert np.abs(out.numpy() - ref.detach().numpy()).max() <= 1e-4 * scale + 1e-6
    g = rng.standard_normal(out.shape).astype(np.float32)
    (out * torchlean.tensor(g)).sum().backward()
    (ref * torch.tensor(g, dtype=torch.float64)).sum().backward()
    for name, p in m.named_parameters():
        want = W[name].grad.numpy()
        assert np.abs(p.grad.numpy() - want).max() <= 1e-4 * np.abs(want).max() + 1e-6, name


def test_mamba_parameters_follow_mamba_simple():
    torchlean.manual_seed(1)
    m = Mamba(32, d_state=16, d_conv=4, expand=2)
    shapes = {k: tuple(v.shape) for k, v in m.state_dict().items()}
    assert shapes == {"A_log": (64, 16), "D": (64,), "in_proj.weight": (128, 32), "conv1d.weight": (64, 1, 4),
                      "conv1d.bias": (64,), "x_proj.weight": (2 + 32, 64), "dt_proj.weight": (64, 2),
                      "dt_proj.bias": (64,), "out_proj.weight": (32, 64)}
    assert m.dt_rank == 2 and m.d_inner == 64
    np.testing.assert_allclose(np.exp(m.A_log.numpy()), np.tile(np.arange(1, 17), (64, 1)), rtol=1e-6)
    assert (m.D.numpy() == 1).all()
    dt = np.log1p(np.exp(m.dt_proj.bias.numpy().astype(np.float64)))     # softplus(bias) in [dt_min, dt_max]
    assert dt.min() >= 0.001 * (1 - 1e-4) and dt.max() <= 0.1 * (1 + 1e-4)
    assert np.abs(m.dt_proj.weight.numpy()).max() <= 2 ** -0.5
    assert Mamba(32, bias=True).in_proj.bias is not None
    assert Mamba(32, conv_bias=False).conv1d.bias is None


def test_causal_depthwise_conv_known_answer():
    conv = CausalDepthwiseConv1d(2, 3)
    with torchlean.no_grad():
        conv.weight.copy_(torchlean.tensor(np.array([[[1, 2, 3]], [[0, 0, 1]]], np.float32)))
        conv.bias.copy_(torchlean.tensor(np.array([0.5, 0.0], np.float32)))
    x = np.zeros((4, 1, 2), np.float32)
    x[:, 0, 0] = [1, 0, 0, 0]                       # an impulse at t = 0 in channel 0
    x[:, 0, 1] = [1, 2, 3, 4]
    y = conv(torchlean.tensor(x)).numpy()
    # channel 0: the impulse response reversed in time (w[k-1] at lag 0): 3, 2, 1, 0 (+ 0.5)
    np.testing.assert_array_equal(y[:, 0, 0], [3.5, 2.5, 1.5, 0.5])
    np.testing.assert_array_equal(y[:, 0, 1], [1, 2, 3, 4])   # weight (0, 0, 1): identity, causal


def test_mamba_errors():
    with pytest.raises(ShapeError, match="Mamba"):
        Mamba(8)(torchlean.zeros(2, 3, 7))
    with pytest.raises(ShapeError, match="Mamba"):
        Mamba(8)(torchlean.zeros(3, 8))
    with pytest.raises(ArgumentError, match="Mamba"):
        Mamba(8, dt_init="weird")
    with pytest.raises(ArgumentError, match="Mamba"):
        Mamba(0)
    with pytest.raises(ShapeError, match="CausalDepthwiseConv1d"):
        CausalDepthwiseConv1d(4, 3)(torchlean.zeros(5, 2, 3))
