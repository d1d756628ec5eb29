"""The FNO2d training step's data movement (issue 25): the reference's crop ``x[..., :-p, :-p]``, its
``F.pad(x, [0, p, 0, p])`` and its grid are pure copies, so they must cost one strided copy per
axis and nothing on the host per step: no flat index array of the whole activation (a gather
forward and a scatter backward, rebuilt and uploaded every step), no zero pieces and permutes.
Values and gradients stay PyTorch's bit for bit (a move never rounds), and the ``fno2d`` case of
``benchmarks.scale`` trains ours and the reference twin to the same losses."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import torchlean as tl
import torchlean.nn.functional as F
from torchlean.nn.modules import fno_nd
from torchlean.runtime import primitives as P

F32 = np.float32
INDEXED = ("gather_vec", "gather_rows", "scatter_add", "scatter_add_rows")


def _spy(monkeypatch, names):
    calls = []
    for name in names:
        real = getattr(P, name)
        monkeypatch.setattr(P, name, lambda *a, _n=name, _r=real, **k: calls.append(_n) or _r(*a, **k))
    return calls


def _against_torch(fn, a, device, rng):
    x = tl.tensor(a, device=device, requires_grad=True)
    t = torch.tensor(a, requires_grad=True)
    y, r = fn(x, tl), fn(t, torch)
    assert y.shape == tuple(r.shape)
    assert y.detach().cpu().numpy().tobytes() == r.detach().numpy().tobytes()
    w = rng.standard_normal(tuple(r.shape)).astype(F32)
    (y * tl.tensor(w, device=device)).sum().backward()
    (r * torch.tensor(w)).sum().backward()
    assert x.grad.cpu().numpy().tobytes() == t.grad.numpy().tobytes()


SLICES = {
    "crop_last_two": lambda z, lib: z[..., :-3, :-2],
    "crop_mid_and_last": lambda z, lib: z[:, 1:3, :, 2:5],
    "int_and_slices": lambda z, lib: z[1, 1:3, ..., 2],
    "dim0_and_last": lambda z, lib: z[1:3, ..., 4:],
    "empty_piece": lambda z, lib: z[..., 2:2, 1:4],
    "int_last_two": lambda z, lib: z[..., 3, 1],
}


@pytest.mark.parametrize("name", sorted(SLICES))
def test_multi_axis_basic_slices_match_torch_bitwise(name, device):
    rng = np.random.default_rng(11)
    a = rng.standard_normal((4, 3, 6, 7)).astype(F32)
    a[0, 0, 0, :4] = [np.nan, np.inf, -np.inf, -0.0]
    _against_torch(SLICES[name], a, device, rng)


def test_crop_is_narrow_blocks_without_host_indices(monkeypatch):
    calls = _spy(monkeypatch, INDEXED + ("narrow_block", "narrow_block_bwd"))
    x = tl.randn(2, 4, 12, 12, requires_grad=True)
    (x[..., :-3, :-3] * 2).sum().backward()
    assert [c for c in calls if c in INDEXED] == []
    assert calls.count("narrow_block") == 2 and calls.count("narrow_block_bwd") == 2


PADS = {
    "fno2d_end": [0, 3, 0, 3],
    "both_sides_last": [2, 1],
    "three_dims": [1, 0, 0, 2, 1, 1],
    "crop_then_pad": [2, -1, 0, 1],
}


@pytest.mark.parametrize("name", sorted(PADS))
def test_zero_pad_matches_torch_bitwise(name, device):
    rng = np.random.default_rng(5)
    a = rng.standard_normal((2, 3, 5, 6)).astype(F32)
    a[0, 0, 0, :2] = [-0.0, np.nan]
    _against_torch(lambda z, lib: (F if lib is tl else torch.nn.functional).pad(z, PADS[name]), a, device, rng)


def test_zero_pad_is_one_placement_per_axis(monkeypatch):
    calls = _spy(monkeypatch, ("narrow_block", "narrow_block_bwd", "concat1d", "permute"))
    x = tl.randn(2, 3, 5, 6, requires_grad=True)
    (F.pad(x, [0, 4, 0, 4]) * 3).sum().backward()
    assert calls.count("narrow_block_bwd") == 2 and calls.count("narrow_block") == 2
    assert "concat1d" not in calls and "permute" not in calls


def test_nonzero_and_integer_pads_keep_their_values():
    x = tl.tensor([[1.0, -2.0]])
    assert F.pad(x, [1, 2], value=7.5).tolist() == [[7.5, 1.0, -2.0, 7.5, 7.5]]
    assert F.pad(tl.tensor([[1, 2]]), [1, 0]).tolist() == [[0, 1, 2]]
    assert F.pad(tl.zeros(0, 3), [1, 1]).shape == (0, 5)
    neg = F.pad(tl.ones(1, 2), [1, 0], value=-0.0).numpy()
    assert np.signbit(neg[0, 0]) and neg[0, 1] == 1.0


def test_fno2d_builds_its_grid_once_per_shape(monkeypatch):
    built = []
    real = fno_nd._grid
    monkeypatch.setattr(fno_nd, "_grid", lambda *a: built.append(a[:2]) or real(*a))
    tl.manual_seed(0)
    model = fno_nd.FNO2d(3, 3, 4, padding=2)
    x = tl.randn(2, 7, 6, 1)
    first = model(x).numpy()
    again = model(x).numpy()
    assert first.tobytes() == again.tobytes()
    assert built == [(2, (7, 6))]
    model(tl.randn(3, 7, 6, 1))
    assert built == [(2, (7, 6)), (3, (7, 6))]
    grid = real(2, (3, 4), "cpu").numpy()
    assert grid.shape == (2, 3, 4, 2)
    assert np.array_equal(grid[0, :, 0, 0], np.linspace(0, 1, 3, dtype=F32))
    assert np.array_equal(grid[1, 0, :, 1], np.linspace(0, 1, 4, dtype=F32))


def test_fno2d_step_has_no_host_indices_or_pad_pieces(monkeypatch):
    calls = _spy(monkeypatch, INDEXED + ("concat1d", "concat_block"))
    tl.manual_seed(0)
    model = fno_nd.FNO2d(3, 3, 4, padding=3)
    model(tl.randn(2, 6, 6, 1)).sum().backward()
    assert [c for c in calls if c in INDEXED] == []
    # the grid channels only: cat((x, grid), dim=-1), one join along the last dim
    assert calls.count("concat_block") == 1 and calls.count("concat1d") == 0


def test_scale_case_fno2d_trains_like_the_reference_twin():
    from benchmarks import scale_models as SM

    cfg = dict(width=6, modes=3, grid=10, padding=3, batch=3)
    batches = SM.make_batches("fno2d", cfg, 3)
    losses, names = {}, {}
    for side in ("ours", "torch"):
        fw = SM.framework(side)
        modules, opts, step = SM.build("fno2d", cfg, fw, "cpu")
        names[side] = [n for n, _ in modules["model"].named_parameters()]
        losses[side] = [float(step(modules, opts, {k: fw.torch.from_numpy(v) for k, v in b.items()}).item())
                        for b in batches]
    assert names["ours"] == names["torch"]
    np.testing.assert_allclose(losses["ours"], losses["torch"], rtol=2e-5)
    assert losses["ours"][-1] < losses["ours"][0]
    flops = SM.step_flops("fno2d", cfg)
    doubled = SM.step_flops("fno2d", {**cfg, "batch": 2 * cfg["batch"]})
    assert flops > 0 and doubled == pytest.approx(2 * flops, rel=1e-6)


def test_scale_case_fno2d_flops_match_torch_flop_counter():
    """The analytic FLOPs of the fno2d case against FlopCounterMode on the torch twin: GEMMs and
    1x1 convs exactly; torch counts a complex einsum at 2 FLOPs per multiply-add (ours: 8 real
    FLOPs) and no FFTs."""
    from torch.utils.flop_counter import FlopCounterMode

    from benchmarks import scale_models as SM

    cfg = dict(width=8, modes=4, grid=12, padding=5, batch=3)
    modules, opts, step = SM.build("fno2d", cfg, SM.framework("torch"), "cpu")
    batch = {k: torch.from_numpy(v) for k, v in SM.make_batches("fno2d", cfg, 1)[0].items()}
    with FlopCounterMode(display=False) as counter:
        step(modules, opts, batch)
    counts = {str(op): n for op, n in counter.get_flop_counts()["Global"].items()}
    einsum = sum(n for op, n in counts.items() if "bmm" in op)
    B, w, m = cfg["batch"], cfg["width"], cfg["modes"]
    S = cfg["grid"] + cfg["padding"]
    ffts = 2 * 4 * int(2 * B * w * 5 * S * S * math.log2(S * S))
    assert einsum == 4 * 3 * 2 * B * 2 * m * m * w * w
    assert SM.step_flops("fno2d", cfg) == sum(counts.values()) - einsum + 4 * einsum + ffts


@pytest.mark.parametrize("dims", [(640, 94, 0, 85, 94), (6016, 94, 0, 85, 1), (200, 94, 9, 80, 8), (9000, 4, 1, 0, 3)],
                         ids=["crop_rows", "crop_last", "pad_offset", "empty"])
def test_cpu_narrow_block_splits_over_threads_with_the_same_bits(monkeypatch, dims):
    """A large narrow_block / narrow_block_bwd deals its rows to the CPU threads (the FNO2d crop
    and pad copy a whole activation four times a step); the bits are NumPy's copy's."""
    from torchlean.kernels.cpu import layout, parallel

    monkeypatch.setattr(parallel, "threads", lambda: 4)
    split = []
    real = layout._rows_par
    monkeypatch.setattr(layout, "_rows_par", lambda *a: split.append(a[-1]) or real(*a))
    outer, size, start, length, inner = dims
    rng = np.random.default_rng(2)
    x = rng.standard_normal(outer * size * inner).astype(F32)
    x[:3] = [-0.0, np.nan, np.inf]
    dy = rng.standard_normal(outer * length * inner).astype(F32)
    a, b = start * inner, (start + length) * inner
    want = x.reshape(outer, -1)[:, a:b].copy().reshape(-1)
    want_bwd = np.zeros((outer, size * inner), F32)
    want_bwd[:, a:b] = dy.reshape(outer, b - a)
    assert layout.narrow_block(x, outer, size, start, length, inner).tobytes() == want.tobytes()
    assert layout.narrow_block_bwd(dy, outer, size, start, length, inner).tobytes() == want_bwd.tobytes()
    assert len(split) == (2 if length else 1) and min(split) > 1  # parts per call
