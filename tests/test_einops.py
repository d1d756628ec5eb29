"""einops on torchlean tensors: ``rearrange``/``reduce``/``repeat``/``einsum``/``pack`` compared with einops
on NumPy arrays (values and dtypes), gradients compared with einops on PyTorch tensors, and the
layers (``torchlean.nn.einops_layers``) against ``einops.layers.torch`` with copied weights.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import torchlean as tl
from torchlean import nn

einops = pytest.importorskip("einops", reason="einops is in torchlean[test]; these tests need it installed")
torch = pytest.importorskip("torch", reason="torch is the oracle of the gradient tests; install torchlean[test]")

from einops import pack, parse_shape, rearrange, reduce, repeat, unpack  # noqa: E402

RNG = np.random.default_rng(0)
X = RNG.standard_normal((2, 3, 4, 6)).astype(np.float32)
I = RNG.integers(-5, 6, size=(2, 3, 4)).astype(np.int64)  # noqa: E741

REARRANGE = [
    ("b c h w -> b h w c", {}),
    ("b c h w -> (b c) (h w)", {}),
    ("b c h (w p) -> b (c p) h w", {"p": 2}),
    ("b c (h1 h2) w -> b h1 (c h2 w)", {"h1": 2}),
    ("b ... w -> w ... b", {}),
    ("b c h w -> c (w b) h", {}),
    ("b c h w -> b c 1 h w 1", {}),
]


def _same(ours, ref) -> None:
    assert isinstance(ours, tl.Tensor)
    assert ours.shape == ref.shape
    np.testing.assert_allclose(ours.numpy(), ref, rtol=1e-6, atol=1e-6)


def test_backend_is_found_for_torchlean_tensors():
    from einops._backends import get_backend

    assert get_backend(tl.zeros(2)).framework_name == "torchlean"
    assert get_backend(nn.Parameter(tl.zeros(2))).framework_name == "torchlean"


@pytest.mark.parametrize("pattern, lengths", REARRANGE)
def test_rearrange_matches_numpy(pattern, lengths):
    _same(rearrange(tl.tensor(X), pattern, **lengths), rearrange(X, pattern, **lengths))


def test_rearrange_list_of_tensors_and_int_dtype():
    parts = [tl.tensor(x) for x in X]
    _same(rearrange(parts, "n c h w -> c (n h) w"), rearrange(list(X), "n c h w -> c (n h) w"))
    out = rearrange(tl.tensor(I), "a b c -> c (a b)")
    assert out.dtype == tl.int64
    np.testing.assert_array_equal(out.numpy(), rearrange(I, "a b c -> c (a b)"))


@pytest.mark.parametrize("reduction", ["sum", "mean", "max", "min", "prod"])
@pytest.mark.parametrize("pattern", ["b c h w -> b c", "b c (h h2) w -> b h w", "b c h w -> ", "b c h w -> c 1 w"])
def test_reduce_matches_numpy(pattern, reduction):
    kw = {"h2": 2} if "h2" in pattern else {}
    _same(reduce(tl.tensor(X), pattern, reduction, **kw), reduce(X, pattern, reduction, **kw))


def test_reduce_integer_and_bool_tensors():
    for reduction in ("sum", "max", "min"):
        out = reduce(tl.tensor(I), "a b c -> a", reduction)
        assert out.dtype == tl.int64
        np.testing.assert_array_equal(out.numpy(), reduce(I, "a b c -> a", reduction))
    b = I > 0
    for reduction in ("any", "all"):
        out = reduce(tl.tensor(b), "a b c -> b", reduction)
        assert out.dtype == tl.bool
        np.testing.assert_array_equal(out.numpy(), reduce(b, "a b c -> b", reduction))
    for x in (I, tl.tensor(I)):  # as einops on NumPy and PyTorch: no mean of an integer tensor
        with pytest.raises(NotImplementedError, match="reduce_mean"):
            reduce(x, "a b c -> a", "mean")


@pytest.mark.parametrize("pattern, lengths", [("b c h w -> b c h w r", {"r": 3}), ("b c h w -> b (c r) h w", {"r": 2}),
                                              ("b c h w -> (r b) c (h s) w", {"r": 2, "s": 3}),
                                              ("h w -> h w", {}), ("h w -> (h 2) (w 3)", {})])
def test_repeat_matches_numpy(pattern, lengths):
    x = X[0, 0] if pattern.startswith("h w") else X
    _same(repeat(tl.tensor(x), pattern, **lengths), repeat(x, pattern, **lengths))


def test_einsum_pack_unpack_parse_shape():
    a, b = X[0], RNG.standard_normal((3, 6, 5)).astype(np.float32)
    _same(einops.einsum(tl.tensor(a), tl.tensor(b), "c h w, c w k -> h k"), einops.einsum(a, b, "c h w, c w k -> h k"))
    p, ps = pack([tl.tensor(X), tl.tensor(X[:, 0])], "b * w")
    rp, rps = pack([X, X[:, 0]], "b * w")
    _same(p, rp)
    assert ps == rps
    for ours, ref in zip(unpack(p, ps, "b * w"), unpack(rp, rps, "b * w")):
        _same(ours, ref)
    assert parse_shape(tl.tensor(X), "b c _ w") == {"b": 2, "c": 3, "w": 6}


@pytest.mark.parametrize("op", ["rearrange", "reduce_mean", "reduce_max", "repeat", "einsum"])
def test_gradients_match_einops_on_pytorch(op):
    g_shape = {"rearrange": (6, 2, 12), "reduce_mean": (2, 4), "reduce_max": (3, 6), "repeat": (2, 3, 4, 6, 2),
               "einsum": (2, 6, 6)}[op]
    g = RNG.standard_normal(g_shape).astype(np.float32)

    def run(lib, x):
        if op == "rearrange":
            y = rearrange(x, "b c h w -> w b (c h)")
        elif op == "reduce_mean":
            y = reduce(x, "b c h w -> b h", "mean")
        elif op == "reduce_max":
            y = reduce(x, "b c h w -> c w", "max")
        elif op == "repeat":
            y = repeat(x, "b c h w -> b c h w r", r=2)
        else:
            y = einops.einsum(x, x, "b c h w, b c h v -> b w v")
        (y * lib.tensor(g)).sum().backward()
        return y

    xt = torch.tensor(X, requires_grad=True)
    xo = tl.tensor(X, requires_grad=True)
    yt, yo = run(torch, xt), run(tl, xo)
    np.testing.assert_allclose(yo.numpy(), yt.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(xo.grad.numpy(), xt.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_layers_match_einops_layers_torch():
    from einops.layers.torch import EinMix as TEinMix
    from einops.layers.torch import Rearrange as TRearrange
    from einops.layers.torch import Reduce as TReduce

    from torchlean.nn.einops_layers import EinMix, Rearrange, Reduce

    torch.manual_seed(0)
    theirs = torch.nn.Sequential(TRearrange("b c (h p) w -> b h (c p w)", p=2), TReduce("b h f -> b f", "max"),
                                 TEinMix("b (f g) -> b g k", weight_shape="f k", bias_shape="k", f=12, k=5))
    ours = nn.Sequential(Rearrange("b c (h p) w -> b h (c p w)", p=2), Reduce("b h f -> b f", "max"),
                         EinMix("b (f g) -> b g k", weight_shape="f k", bias_shape="k", f=12, k=5))
    assert [(n, tuple(p.shape)) for n, p in ours.named_parameters()] == \
        [(n, tuple(p.shape)) for n, p in theirs.named_parameters()]
    ours.load_state_dict(theirs.state_dict())
    xt, xo = torch.tensor(X, requires_grad=True), tl.tensor(X, requires_grad=True)
    yt, yo = theirs(xt), ours(xo)
    np.testing.assert_allclose(yo.numpy(), yt.detach().numpy(), rtol=1e-5, atol=1e-5)
    yt.sum().backward()
    yo.sum().backward()
    np.testing.assert_allclose(xo.grad.numpy(), xt.grad.numpy(), rtol=1e-5, atol=1e-5)
    for (n, p), (_, pt) in zip(ours.named_parameters(), theirs.named_parameters()):
        np.testing.assert_allclose(p.grad.numpy(), pt.grad.numpy(), rtol=1e-5, atol=1e-5, err_msg=n)
    assert repr(ours[0]) == "Rearrange('b c (h p) w -> b h (c p w)', p=2)"


def test_einops_imported_before_torchlean():
    code = ("from einops import rearrange\nimport torchlean as torch\n"
            "print(rearrange(torch.arange(6).reshape(2, 3), 'a b -> b a').shape)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "(3, 2)"
