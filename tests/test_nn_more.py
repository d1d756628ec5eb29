"""torch.nn coverage against PyTorch: activations, losses, normalizations, resampling, padding,
containers, Module methods and hooks.

Every comparison runs the same code under torch (the oracle) and torchlean with the same
parameters (copied from torchlean into torch through the state dict) and the same inputs, and
compares forward values and the gradients of inputs and parameters after a backward with the
same random cotangent. Shapes are small: the file runs in seconds.
"""

from __future__ import annotations

import numpy as np
import pytest

import torchlean as tl
from torchlean import nn
from torchlean.errors import ArgumentError, DTypeError, ShapeError, TorchLeanError
import torchlean.nn.functional as F

torch = pytest.importorskip("torch", reason="torch is the oracle of these tests; install torchlean[test]")
TF = torch.nn.functional

RTOL, ATOL = 2e-5, 2e-5


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def close(ours, theirs, what: str, rtol: float = RTOL, atol: float = ATOL) -> None:
    a = ours.numpy() if isinstance(ours, tl.Tensor) else np.asarray(ours)
    b = theirs.detach().numpy() if isinstance(theirs, torch.Tensor) else np.asarray(theirs)
    assert a.shape == b.shape, f"{what}: shape {a.shape} != torch's {b.shape}"
    np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=what)


def leaf_pair(arr: np.ndarray):
    return tl.tensor(arr, requires_grad=True), torch.tensor(arr, requires_grad=True)


def backward_pair(y, ty, seed: int = 1) -> None:
    g = rng(seed).standard_normal(ty.shape).astype(np.float32)
    if ty.ndim == 0:
        y.backward()
        ty.backward()
    else:
        y.backward(tl.tensor(g))
        ty.backward(torch.tensor(g))


def compare_fn(fn, tfn, arrays, what, grad=True, rtol=RTOL, atol=ATOL, consts=()):
    """fn(*tensors, *consts) vs tfn(*torch tensors, *consts): values and input gradients."""
    ours, theirs = zip(*(leaf_pair(a) for a in arrays))
    y, ty = fn(*ours, *consts), tfn(*theirs, *consts)
    close(y, ty, f"{what} forward", rtol, atol)
    if grad:
        backward_pair(y, ty)
        for i, (a, b) in enumerate(zip(ours, theirs)):
            close(a.grad, b.grad, f"{what} d/d input {i}", rtol, atol)


def copy_params(ours: nn.Module, theirs: "torch.nn.Module") -> None:
    sd = {k: torch.tensor(v.numpy()) for k, v in ours.state_dict().items()}
    theirs.load_state_dict(sd)


def compare_module(m, tm, arrays, what, rtol=RTOL, atol=ATOL, grad=True, copy=True):
    if copy:
        copy_params(m, tm)
    compare_fn(m, tm, arrays, what, grad, rtol, atol)
    if grad:
        tparams = dict(tm.named_parameters())
        for name, p in m.named_parameters():
            close(p.grad, tparams[name].grad, f"{what} d/d {name}", rtol, atol)


# -- activations --------------------------------------------------------------------------------
ACTIVATIONS = [
    ("SiLU", {}), ("LeakyReLU", {"negative_slope": 0.2}), ("ELU", {"alpha": 0.7}), ("SELU", {}),
    ("CELU", {"alpha": 1.3}), ("Softplus", {}), ("Softplus", {"beta": 2.0, "threshold": 1.0}), ("Mish", {}),
    ("Hardswish", {}), ("Hardsigmoid", {}), ("Hardtanh", {"min_val": -0.5, "max_val": 0.7}), ("ReLU6", {}),
    ("Softsign", {}), ("Tanhshrink", {}), ("LogSigmoid", {}), ("Softmin", {"dim": 1}), ("Softmax", {"dim": 0}),
    ("LogSoftmax", {"dim": 2}), ("GLU", {"dim": 1}), ("GELU", {"approximate": "tanh"}), ("GELU", {}), ("Tanh", {}),
    ("Sigmoid", {}), ("ReLU", {}), ("Threshold", {"threshold": 0.1, "value": -2.0}), ("Hardshrink", {}),
    ("Softshrink", {"lambd": 0.3}), ("PReLU", {}), ("PReLU", {"num_parameters": 4, "init": 0.1}),
]


@pytest.mark.parametrize("name,kwargs", ACTIVATIONS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(ACTIVATIONS)])
def test_activation_modules_match_torch(name, kwargs):
    x = (rng(3).standard_normal((2, 4, 3)) * 4).astype(np.float32)
    m, tm = getattr(nn, name)(**kwargs), getattr(torch.nn, name)(**kwargs)
    assert repr(m) == repr(tm)
    compare_module(m, tm, [x], name, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fn,kwargs", [("silu", {}), ("elu", {"alpha": 2.0}), ("leaky_relu", {"negative_slope": 0.3}),
                                       ("softplus", {"beta": 0.5, "threshold": 3.0}), ("mish", {}), ("relu6", {}),
                                       ("hardtanh", {}), ("logsigmoid", {}), ("softmax", {"dim": -1}),
                                       ("log_softmax", {"dim": 1}), ("glu", {}), ("celu", {}), ("selu", {})])
def test_functional_activations_match_torch(fn, kwargs):
    x = (rng(4).standard_normal((3, 6)) * 5).astype(np.float32)
    compare_fn(lambda t: getattr(F, fn)(t, **kwargs), lambda t: getattr(TF, fn)(t, **kwargs), [x], fn)


def test_softmax_default_dim_is_torchs():
    x = rng(5).standard_normal((2, 3, 4)).astype(np.float32)
    close(nn.Softmax()(tl.tensor(x)), torch.nn.Softmax(dim=None)(torch.tensor(x)), "Softmax() on 3-D")


def test_prelu_functional_and_errors():
    x = rng(6).standard_normal((2, 3, 5)).astype(np.float32)
    w = np.array([0.1, -0.2, 0.3], np.float32)
    compare_fn(F.prelu, TF.prelu, [x, w], "prelu")
    with pytest.raises(ShapeError, match="^prelu: "):
        F.prelu(tl.tensor(x), tl.tensor(np.ones(4, np.float32)))
    with pytest.raises(ShapeError, match="^glu: "):
        F.glu(tl.tensor(np.ones((2, 3), np.float32)))


# -- losses -------------------------------------------------------------------------------------
def _targets(kind: str, shape, c=5, seed=7):
    r = rng(seed)
    if kind == "prob":
        p = r.random(shape).astype(np.float32)
        return p / p.sum(1, keepdims=True)
    return r.integers(0, c, size=shape).astype(np.int64)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("case", ["plain", "weight", "weight_ignore", "weight_smooth", "prob_weight_smooth", "nd_weight",
                                  "smooth_ignore"])
def test_cross_entropy_loss_matches_torch(case, reduction):
    r = rng(8)
    nd = case.startswith("nd")
    x = (r.standard_normal((4, 5, 3) if nd else (4, 5)) * 2).astype(np.float32)
    kw = {"reduction": reduction}
    w = (r.random(5) + 0.5).astype(np.float32)
    if "weight" in case:
        kw["weight"] = w
    if "smooth" in case:
        kw["label_smoothing"] = 0.2
    if "ignore" in case:
        kw["ignore_index"] = 2
    t = _targets("prob" if case.startswith("prob") else "idx", (4, 5) if case.startswith("prob") else
                 ((4, 3) if nd else (4,)))
    if "ignore" in case:
        t[0] = 2
    ours_kw = {k: (tl.tensor(v) if k == "weight" else v) for k, v in kw.items()}
    theirs_kw = {k: (torch.tensor(v) if k == "weight" else v) for k, v in kw.items()}
    m, tm = nn.CrossEntropyLoss(**ours_kw), torch.nn.CrossEntropyLoss(**theirs_kw)
    compare_fn(lambda a: m(a, tl.tensor(t)), lambda a: tm(a, torch.tensor(t)), [x], f"CE {case} {reduction}")
    if "weight" in case:
        assert list(m.state_dict()) == list(tm.state_dict()) == ["weight"]


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_loss_matches_torch(weighted, reduction):
    r = rng(9)
    x = r.standard_normal((6, 4)).astype(np.float32)
    t = r.integers(0, 4, size=6).astype(np.int64)
    t[1] = 3
    w = (r.random(4) + 0.5).astype(np.float32)
    kw = {"reduction": reduction, "ignore_index": 3}
    m = nn.NLLLoss(weight=tl.tensor(w) if weighted else None, **kw)
    tm = torch.nn.NLLLoss(weight=torch.tensor(w) if weighted else None, **kw)
    compare_fn(lambda a: m(F.log_softmax(a, 1), tl.tensor(t)), lambda a: tm(TF.log_softmax(a, 1), torch.tensor(t)),
               [x], f"NLL weighted={weighted} {reduction}")


LOSSES = [
    ("MSELoss", {}), ("L1Loss", {}), ("L1Loss", {"reduction": "sum"}), ("SmoothL1Loss", {"beta": 0.5}),
    ("SmoothL1Loss", {"beta": 0.0}), ("HuberLoss", {"delta": 0.7}), ("HuberLoss", {"reduction": "none"}),
    ("BCEWithLogitsLoss", {}), ("BCEWithLogitsLoss", {"pos_weight": "pw"}), ("BCEWithLogitsLoss", {"weight": "w"}),
    ("BCELoss", {}), ("BCELoss", {"weight": "w", "reduction": "sum"}), ("KLDivLoss", {"reduction": "batchmean"}),
    ("KLDivLoss", {"reduction": "sum", "log_target": True}), ("KLDivLoss", {"reduction": "none"}),
    ("SoftMarginLoss", {}), ("MSELoss", {"size_average": False}),
]


@pytest.mark.parametrize("name,kwargs", LOSSES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(LOSSES)])
def test_pointwise_losses_match_torch(name, kwargs):
    r = rng(10)
    x = r.standard_normal((3, 4)).astype(np.float32)
    t = r.standard_normal((3, 4)).astype(np.float32)
    if name == "BCELoss":
        x = (1 / (1 + np.exp(-x))).astype(np.float32)
        t = r.random((3, 4)).astype(np.float32)
    if name.startswith("BCEWithLogits"):
        t = r.random((3, 4)).astype(np.float32)
    if name == "KLDivLoss":
        x = np.log(r.dirichlet(np.ones(4), 3)).astype(np.float32)
        t = r.dirichlet(np.ones(4), 3).astype(np.float32)
        t[0, 1] = 0.0  # 0 log 0 = 0
        if kwargs.get("log_target"):
            t = np.log(r.dirichlet(np.ones(4), 3)).astype(np.float32)
    if name == "SoftMarginLoss":
        t = np.sign(t).astype(np.float32)
    consts = {"pw": (r.random(4) + 0.5).astype(np.float32), "w": (r.random(4) + 0.5).astype(np.float32)}
    ours_kw = {k: (tl.tensor(consts[v]) if v in ("pw", "w") else v) for k, v in kwargs.items()}
    theirs_kw = {k: (torch.tensor(consts[v]) if v in ("pw", "w") else v) for k, v in kwargs.items()}
    m, tm = getattr(nn, name)(**ours_kw), getattr(torch.nn, name)(**theirs_kw)
    compare_fn(lambda a: m(a, tl.tensor(t)), lambda a: tm(a, torch.tensor(t)), [x], name)
    assert list(m.state_dict()) == list(tm.state_dict())


def test_target_gradients_and_two_input_losses():
    r = rng(11)
    x, t = r.standard_normal((5,)).astype(np.float32), r.standard_normal((5,)).astype(np.float32)
    compare_fn(lambda a, b: F.smooth_l1_loss(a, b), lambda a, b: TF.smooth_l1_loss(a, b), [x, t], "smooth_l1 target")
    a, b = r.standard_normal((4, 6)).astype(np.float32), r.standard_normal((4, 6)).astype(np.float32)
    y = np.array([1, -1, 1, -1], np.float32)
    y6 = np.array([1, -1, 1, -1, 1, 1], np.float32)
    for m, tm, yy, aa, bb in ((nn.CosineEmbeddingLoss(margin=0.1), torch.nn.CosineEmbeddingLoss(margin=0.1), y, a, b),
                              (nn.MarginRankingLoss(margin=0.2), torch.nn.MarginRankingLoss(margin=0.2), y6, a[0], b[0])):
        compare_fn(lambda p, q: m(p, q, tl.tensor(yy)), lambda p, q: tm(p, q, torch.tensor(yy)), [aa, bb],
                   type(m).__name__)


def test_loss_errors_are_clear():
    x = tl.tensor(np.array([0.5, 1.5], np.float32))
    with pytest.raises(ArgumentError, match="^binary_cross_entropy: .*between 0 and 1"):
        F.binary_cross_entropy(x, tl.tensor(np.zeros(2, np.float32)))
    with pytest.raises(ArgumentError, match="reduction"):
        nn.L1Loss(reduction="avg")
    with pytest.raises(ShapeError, match="^cross_entropy: weight"):
        F.cross_entropy(tl.tensor(np.zeros((2, 3), np.float32)), tl.tensor(np.array([0, 1])),
                        weight=tl.tensor(np.ones(4, np.float32)))
    with pytest.raises(ShapeError, match="^l1_loss: "):
        F.l1_loss(tl.tensor(np.zeros(3, np.float32)), tl.tensor(np.zeros(2, np.float32)))


# -- normalization ------------------------------------------------------------------------------
NORMS = [
    ("GroupNorm", (2, 4), {}, (2, 4, 3, 3)), ("GroupNorm", (4, 4), {"affine": False}, (2, 4, 5)),
    ("RMSNorm", (6,), {}, (2, 3, 6)), ("RMSNorm", ((3, 6),), {"eps": 1e-3}, (2, 3, 6)),
    ("RMSNorm", (6,), {"elementwise_affine": False}, (4, 6)),
    ("InstanceNorm1d", (3,), {}, (2, 3, 7)), ("InstanceNorm2d", (3,), {"affine": True}, (2, 3, 4, 5)),
    ("InstanceNorm2d", (3,), {"affine": True}, (3, 4, 5)),
    ("LayerNorm", (5,), {"elementwise_affine": False}, (3, 5)), ("LayerNorm", (5,), {"bias": False}, (3, 5)),
]


@pytest.mark.parametrize("name,args,kwargs,shape", NORMS, ids=[f"{n[0]}-{i}" for i, n in enumerate(NORMS)])
def test_norm_modules_match_torch(name, args, kwargs, shape):
    r = rng(12)
    m, tm = getattr(nn, name)(*args, **kwargs), getattr(torch.nn, name)(*args, **kwargs)
    assert repr(m) == repr(tm)
    for p in m.parameters():  # non-trivial affine parameters
        with tl.no_grad():
            p.copy_(tl.tensor(r.standard_normal(p.shape).astype(np.float32)))
    x = (r.standard_normal(shape) * 3 + 1).astype(np.float32)
    compare_module(m, tm, [x], name, rtol=1e-4, atol=1e-4)


def test_instance_norm_running_stats_match_torch():
    r = rng(13)
    m = nn.InstanceNorm2d(3, affine=True, track_running_stats=True, momentum=0.3)
    tm = torch.nn.InstanceNorm2d(3, affine=True, track_running_stats=True, momentum=0.3)
    copy_params(m, tm)
    for step in range(2):
        x = (r.standard_normal((2, 3, 4, 4)) * 2 + step).astype(np.float32)
        for p in list(m.parameters()) + list(tm.parameters()):
            p.grad = None
        compare_module(m, tm, [x], f"InstanceNorm2d train step {step}", rtol=1e-4, atol=1e-4, copy=False)
    for k, v in tm.state_dict().items():
        close(m.state_dict()[k], v, f"InstanceNorm2d {k}", 1e-5, 1e-5)
    m.eval(), tm.eval()
    x = r.standard_normal((2, 3, 4, 4)).astype(np.float32)
    compare_module(m, tm, [x], "InstanceNorm2d eval", rtol=1e-4, atol=1e-4, copy=False)


def test_group_norm_errors():
    with pytest.raises(ShapeError, match="^GroupNorm: num_channels"):
        nn.GroupNorm(3, 4)
    with pytest.raises(ShapeError, match="^GroupNorm: expected"):
        nn.GroupNorm(2, 4)(tl.zeros(2, 6, 3))


# -- dropout ------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls,shape", [("Dropout1d", (4, 8, 5)), ("Dropout2d", (4, 8, 3, 3)), ("Dropout3d", (2, 8, 2, 2, 2)),
                                       ("Dropout2d", (4, 8, 5))])
def test_channel_dropout_zeroes_whole_channels_from_our_rng(cls, shape):
    x = tl.ones(*shape, requires_grad=True)
    m = getattr(nn, cls)(p=0.4)
    tl.manual_seed(5)
    y = m(x)
    tl.manual_seed(5)
    y2 = m(x)
    a = y.numpy().reshape(shape[0], shape[1], -1)
    assert np.array_equal(a, y2.numpy().reshape(a.shape)), "the same seed must drop the same channels"
    per_channel = np.unique(a, axis=2)
    assert per_channel.shape[2] == 1, "each channel is all kept or all dropped"
    assert set(np.unique(a).tolist()) <= {0.0, np.float32(1 / 0.6)}
    assert 0 < np.count_nonzero(a[..., 0] == 0) < a[..., 0].size
    y.sum().backward()
    assert np.array_equal(x.grad.numpy(), y.numpy()), "the gradient is the same mask"
    m.eval()
    assert m(x) is x


def test_alpha_dropout_keeps_moments():
    tl.manual_seed(0)
    x = tl.randn(20000)
    y = F.alpha_dropout(x, 0.3, training=True).numpy()
    assert abs(y.mean()) < 0.05 and abs(y.std() - 1) < 0.05
    assert nn.AlphaDropout(0.3).eval()(x) is x


def test_sdpa_dropout_uses_our_rng_and_is_differentiable():
    r = rng(14)
    q, k, v = (r.standard_normal((2, 3, 4, 8)).astype(np.float32) for _ in range(3))
    mask = np.tril(np.ones((4, 4), bool))
    ours = [tl.tensor(a, requires_grad=True) for a in (q, k, v)]
    y0 = F.scaled_dot_product_attention(*ours, attn_mask=tl.tensor(mask))
    close(y0, TF.scaled_dot_product_attention(*(torch.tensor(a) for a in (q, k, v)), attn_mask=torch.tensor(mask)),
          "sdpa no dropout", 1e-5, 1e-5)
    tl.manual_seed(3)
    y1 = F.scaled_dot_product_attention(*ours, dropout_p=0.5, is_causal=True)
    tl.manual_seed(3)
    y2 = F.scaled_dot_product_attention(*ours, dropout_p=0.5, is_causal=True)
    assert np.array_equal(y1.numpy(), y2.numpy())
    assert not np.allclose(y1.numpy(), F.scaled_dot_product_attention(*ours, is_causal=True).numpy())
    y1.sum().backward()
    assert all(t.grad is not None and np.isfinite(t.grad.numpy()).all() for t in ours)
    # p -> 1 drops everything; the expectation of dropout(weights) is the weights
    assert np.all(F.scaled_dot_product_attention(*ours, dropout_p=1.0).numpy() == 0)


# -- pooling and resampling ---------------------------------------------------------------------
@pytest.mark.parametrize("name,out,shape", [
    ("AdaptiveAvgPool1d", 3, (2, 3, 7)), ("AdaptiveAvgPool1d", 4, (2, 3, 8)), ("AdaptiveAvgPool2d", (3, 5), (2, 3, 7, 9)),
    ("AdaptiveAvgPool2d", 2, (2, 3, 8, 8)), ("AdaptiveAvgPool2d", (None, 2), (1, 2, 5, 6)),
    ("AdaptiveAvgPool2d", (4, 4), (3, 5, 7)), ("AdaptiveMaxPool2d", (3, 4), (2, 3, 7, 9)),
    ("AdaptiveMaxPool2d", 2, (2, 3, 8, 8)), ("AdaptiveMaxPool1d", 3, (2, 3, 8)),
])
def test_adaptive_pools_match_torch(name, out, shape):
    x = rng(15).standard_normal(shape).astype(np.float32)
    compare_module(getattr(nn, name)(out), getattr(torch.nn, name)(out), [x], f"{name}({out})")


@pytest.mark.parametrize("kwargs,shape", [
    ({"scale_factor": 2, "mode": "nearest"}, (1, 2, 3, 4)), ({"size": (5, 7), "mode": "nearest"}, (1, 2, 3, 4)),
    ({"size": (7, 3), "mode": "nearest"}, (1, 2, 9, 5)), ({"scale_factor": 1.5, "mode": "nearest"}, (1, 2, 4, 4)),
    ({"scale_factor": 2, "mode": "bilinear"}, (2, 2, 3, 4)),
    ({"scale_factor": 2, "mode": "bilinear", "align_corners": True}, (2, 2, 3, 4)),
    ({"size": (5, 7), "mode": "bilinear"}, (1, 2, 3, 4)), ({"size": (2, 3), "mode": "bilinear"}, (1, 2, 5, 7)),
    ({"size": (5, 7), "mode": "bilinear", "align_corners": True}, (1, 2, 3, 4)),
    ({"scale_factor": 1.7, "mode": "bilinear"}, (1, 1, 4, 5)), ({"size": 9, "mode": "linear"}, (2, 3, 4)),
    ({"scale_factor": 3, "mode": "nearest"}, (2, 3, 4)), ({"size": (5, 7), "mode": "nearest-exact"}, (1, 2, 3, 4)),
    ({"size": (2, 2), "mode": "area"}, (1, 2, 4, 6)), ({"scale_factor": 2, "mode": "trilinear"}, (1, 1, 2, 3, 2)),
])
def test_interpolate_matches_torch(kwargs, shape):
    x = rng(16).standard_normal(shape).astype(np.float32)
    compare_fn(lambda t: F.interpolate(t, **kwargs), lambda t: TF.interpolate(t, **kwargs), [x], str(kwargs))


def test_upsample_modules_match_torch():
    x = rng(17).standard_normal((1, 2, 3, 3)).astype(np.float32)
    for m, tm in ((nn.Upsample(scale_factor=2), torch.nn.Upsample(scale_factor=2)),
                  (nn.Upsample(size=(4, 5), mode="bilinear"), torch.nn.Upsample(size=(4, 5), mode="bilinear")),
                  (nn.UpsamplingBilinear2d(scale_factor=2), torch.nn.UpsamplingBilinear2d(scale_factor=2)),
                  (nn.UpsamplingNearest2d(size=5), torch.nn.UpsamplingNearest2d(size=5))):
        assert repr(m) == repr(tm)
        compare_module(m, tm, [x], repr(m))
    with pytest.raises(ArgumentError, match="^interpolate: mode 'bicubic'"):
        F.interpolate(tl.tensor(x), scale_factor=2, mode="bicubic")
    with pytest.raises(ArgumentError, match="^interpolate: give exactly one"):
        F.interpolate(tl.tensor(x))


@pytest.mark.parametrize("pad,mode,value,shape", [
    ((1, 2), "constant", 0.0, (2, 3, 4)), ((1, 2, 0, 3), "constant", -1.5, (2, 3, 4)),
    ((1, 1, 2, 0, 1, 1), "constant", 0.0, (2, 3, 4)), ((-1, 2), "constant", 0.0, (2, 3, 4)),
    ((2, 1), "reflect", None, (2, 3, 4)), ((1, 2, 2, 1), "reflect", None, (1, 2, 4, 5)),
    ((2, 3), "replicate", None, (2, 3, 4)), ((1, 2, 3, 0), "replicate", None, (1, 2, 4, 5)),
    ((1, 2), "circular", None, (2, 3, 4)), ((2, 1, 1, 3), "circular", None, (1, 2, 4, 5)),
    ((1, 1, 1, 1, 1, 1), "replicate", None, (1, 1, 2, 3, 2)),
])
def test_pad_matches_torch(pad, mode, value, shape):
    x = rng(18).standard_normal(shape).astype(np.float32)
    kw = {"mode": mode} if value is None else {"mode": mode, "value": value}
    compare_fn(lambda t: F.pad(t, pad, **kw), lambda t: TF.pad(t, pad, **kw), [x], f"pad {pad} {mode}")


def test_padding_modules_match_torch():
    x = rng(19).standard_normal((1, 2, 4, 5)).astype(np.float32)
    for name, args in (("ZeroPad2d", ((1, 2, 0, 1),)), ("ConstantPad2d", (2, 0.5)), ("ReflectionPad2d", (1,)),
                       ("ReplicationPad2d", ((1, 0, 2, 1),)), ("CircularPad2d", (1,)), ("ReflectionPad1d", ((2, 1),))):
        m, tm = getattr(nn, name)(*args), getattr(torch.nn, name)(*args)
        assert repr(m) == repr(tm)
        compare_module(m, tm, [x if not name.endswith("1d") else x[0]], name)
    with pytest.raises(ArgumentError, match="^pad: reflect padding"):
        F.pad(tl.tensor(x), (5, 5), mode="reflect")


def test_pixel_shuffle_unfold_fold_match_torch():
    r = rng(20)
    x = r.standard_normal((2, 8, 3, 4)).astype(np.float32)
    compare_module(nn.PixelShuffle(2), torch.nn.PixelShuffle(2), [x], "PixelShuffle")
    compare_module(nn.PixelUnshuffle(2), torch.nn.PixelUnshuffle(2), [r.standard_normal((2, 2, 4, 6)).astype(np.float32)],
                   "PixelUnshuffle")
    img = r.standard_normal((2, 3, 6, 7)).astype(np.float32)
    for kw in ({"kernel_size": 3}, {"kernel_size": (2, 3), "stride": 2, "padding": 1}, {"kernel_size": 2, "dilation": 2}):
        compare_module(nn.Unfold(**kw), torch.nn.Unfold(**kw), [img], f"Unfold {kw}")
        cols = TF.unfold(torch.tensor(img), **kw)
        c = r.standard_normal(tuple(cols.shape)).astype(np.float32)
        compare_module(nn.Fold((6, 7), **kw), torch.nn.Fold((6, 7), **kw), [c], f"Fold {kw}")


def test_one_hot_normalize_cosine_embedding():
    r = rng(21)
    idx = np.array([[0, 2], [3, 1]], np.int64)
    oh = F.one_hot(tl.tensor(idx), 5)
    assert oh.dtype == np.int64
    assert np.array_equal(oh.numpy(), TF.one_hot(torch.tensor(idx), 5).numpy())
    assert F.one_hot(tl.tensor(idx)).shape == (2, 2, 4)
    with pytest.raises(DTypeError, match="^one_hot: "):
        F.one_hot(tl.tensor(np.zeros(2, np.float32)))
    x = r.standard_normal((3, 4, 2)).astype(np.float32)
    for kw in ({}, {"p": 1.0, "dim": 2}, {"dim": -1}):
        compare_fn(lambda t: F.normalize(t, **kw), lambda t: TF.normalize(t, **kw), [x], f"normalize {kw}")
    with pytest.raises(ArgumentError, match="^normalize: only p=1 and p=2"):
        F.normalize(tl.tensor(x), p=3)
    a, b = r.standard_normal((3, 5)).astype(np.float32), r.standard_normal((3, 5)).astype(np.float32)
    compare_fn(F.cosine_similarity, TF.cosine_similarity, [a, b], "cosine_similarity")
    compare_fn(lambda p, q: F.cosine_similarity(p, q, dim=0), lambda p, q: TF.cosine_similarity(p, q, dim=0), [a, b[:1]],
               "cosine_similarity broadcast")
    compare_module(nn.PairwiseDistance(), torch.nn.PairwiseDistance(), [a, b], "PairwiseDistance")
    w = r.standard_normal((6, 3)).astype(np.float32)
    ids = np.array([[1, 0, 5], [0, 0, 2]], np.int64)
    compare_fn(lambda t: F.embedding(tl.tensor(ids), t, padding_idx=0),
               lambda t: TF.embedding(torch.tensor(ids), t, padding_idx=0), [w], "embedding padding_idx")


# -- containers ---------------------------------------------------------------------------------
def _keys(m):
    return [k for k, _ in m.named_parameters()]


def test_flatten_unflatten_identity():
    x = rng(22).standard_normal((2, 3, 4)).astype(np.float32)
    for m, tm in ((nn.Flatten(), torch.nn.Flatten()), (nn.Flatten(0, 1), torch.nn.Flatten(0, 1)),
                  (nn.Unflatten(2, (2, 2)), torch.nn.Unflatten(2, (2, 2))), (nn.Identity(3, k=1), torch.nn.Identity(3, k=1)),
                  (nn.Unflatten(-1, (2, -1)), torch.nn.Unflatten(-1, (2, -1)))):
        assert repr(m) == repr(tm)
        compare_module(m, tm, [x], repr(m))


def test_sequential_and_modulelist_behave_like_torch():
    def build(lib):
        return lib.Sequential(lib.Linear(2, 3), lib.ReLU(), lib.Linear(3, 4), lib.Tanh())

    s, ts = build(nn), build(torch.nn)
    assert len(s) == len(ts) == 4
    assert type(s[-1]).__name__ == "Tanh" and type(s[1:3]).__name__ == "Sequential"
    assert _keys(s[2:]) == [k for k, _ in ts[2:].named_parameters()]
    s.insert(1, nn.Identity()), ts.insert(1, torch.nn.Identity())
    del s[0], ts[0]
    s.append(nn.Linear(4, 1)), ts.append(torch.nn.Linear(4, 1))
    s.extend([nn.Sigmoid()]), ts.extend([torch.nn.Sigmoid()])
    assert _keys(s) == [k for k, _ in ts.named_parameters()]
    assert repr(s) == repr(ts)
    ml, tml = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)]), torch.nn.ModuleList([torch.nn.Linear(2, 2) for _ in range(3)])
    ml.insert(1, nn.ReLU()), tml.insert(1, torch.nn.ReLU())
    ml += [nn.Tanh()]
    tml += [torch.nn.Tanh()]
    del ml[1], tml[1]
    assert repr(ml) == repr(tml)
    assert _keys(ml) == [k for k, _ in tml.named_parameters()]
    assert len(ml[::2]) == len(tml[::2]) and type(ml[-2]).__name__ == type(tml[-2]).__name__
    assert [type(m).__name__ for m in ml] == [type(m).__name__ for m in tml]


def test_module_and_parameter_dicts_and_lists_match_torch():
    def build(lib):
        class M(lib.Module):
            def __init__(self):
                super().__init__()
                self.heads = lib.ModuleDict({"a": lib.Linear(2, 2), "b": lib.Linear(2, 1)})
                self.scales = lib.ParameterList([lib.Parameter(torch_or_tl(lib).ones(2)) for _ in range(2)])
                self.table = lib.ParameterDict({"x": lib.Parameter(torch_or_tl(lib).zeros(3))})
                self.table["y"] = lib.Parameter(torch_or_tl(lib).ones(1))
                self.scales.append(lib.Parameter(torch_or_tl(lib).ones(3)))
        return M()

    def torch_or_tl(lib):
        return torch if lib is torch.nn else tl

    m, tm = build(nn), build(torch.nn)
    assert list(m.state_dict()) == list(tm.state_dict())
    assert len(m.scales) == 3 and m.scales[-1].shape == (3,) and "y" in m.table and len(m.heads) == 2
    assert list(m.heads.keys()) == ["a", "b"] and m.heads.pop("b") is not None and list(m.heads) == ["a"]


# -- Module methods -----------------------------------------------------------------------------
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(3, 4), nn.ReLU())
        self.head = nn.Linear(4, 2)
        self.shared = self.head
        self.register_buffer("steps", tl.zeros(1))
        self.register_buffer("cache", tl.zeros(2), persistent=False)

    def forward(self, x):
        return self.head(self.body(x))


class TNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU())
        self.head = torch.nn.Linear(4, 2)
        self.shared = self.head
        self.register_buffer("steps", torch.zeros(1))
        self.register_buffer("cache", torch.zeros(2), persistent=False)

    def forward(self, x):
        return self.head(self.body(x))


def test_module_traversal_and_lookup_match_torch():
    m, tm = Net(), TNet()
    names = lambda mod, **kw: [n for n, _ in mod.named_modules(**kw)]  # noqa: E731
    assert names(m) == names(tm)
    assert names(m, remove_duplicate=False) == names(tm, remove_duplicate=False)
    assert names(m, prefix="net") == names(tm, prefix="net")
    assert [n for n, _ in m.named_children()] == [n for n, _ in tm.named_children()]
    assert len(list(m.modules())) == len(list(tm.modules())) and len(list(m.children())) == 2
    assert m.get_submodule("body.0") is m.body[0] and m.get_submodule("") is m
    assert m.get_parameter("body.0.weight") is m.body[0].weight and m.get_buffer("steps") is m.steps
    with pytest.raises(AttributeError, match="get_submodule"):
        m.get_submodule("body.7")
    assert list(m.state_dict()) == list(tm.state_dict())
    seen = []
    assert m.apply(lambda mod: seen.append(type(mod).__name__)) is m
    assert seen == ["Linear", "ReLU", "Sequential", "Linear", "Net"]
    assert repr(m).replace("Net", "TNet") == repr(tm)


def test_load_state_dict_missing_unexpected_and_dtype_conversions():
    m, tm = Net(), TNet()
    sd = {k: v for k, v in tm.state_dict().items() if k != "head.bias"}
    sd["extra"] = torch.zeros(1)
    res, tres = m.load_state_dict(sd, strict=False), tm.load_state_dict(sd, strict=False)
    assert res.missing_keys == tres.missing_keys and res.unexpected_keys == tres.unexpected_keys
    close(m.body[0].weight, tm.body[0].weight, "loaded weight")
    with pytest.raises(TorchLeanError, match="missing keys \\['head.bias'\\]"):
        m.load_state_dict(sd)
    assert m.float() is m
    for what in ("half", "double", "bfloat16"):
        with pytest.raises(DTypeError, match=f"^Module.{what}\\(\\): torchlean computes in float32"):
            getattr(m, what)()


def test_zero_grad_requires_grad_and_train_modes():
    m = Net()
    m(tl.ones(2, 3)).sum().backward()
    m.zero_grad(set_to_none=False)
    assert all(np.all(p.grad.numpy() == 0) for p in m.parameters())
    m.zero_grad()
    assert all(p.grad is None for p in m.parameters())
    m.requires_grad_(False)
    assert not any(p.requires_grad for p in m.parameters())
    m.eval()
    assert not m.body[0].training
    m.train()
    assert m.body[1].training


def test_forward_hooks_match_torch():
    lin, tlin = nn.Linear(3, 2), torch.nn.Linear(3, 2)
    copy_params(lin, tlin)

    def run(mod, T):
        calls = []
        h1 = mod.register_forward_pre_hook(lambda m, args: (args[0] * 2,))
        h2 = mod.register_forward_hook(lambda m, args, out: out + 1)
        mod.register_forward_hook(lambda m, args, kwargs, out: calls.append(("kw", sorted(kwargs))), with_kwargs=True)
        mod.register_forward_hook(lambda m, args, out: calls.append("first"), prepend=True)
        mod.register_forward_pre_hook(lambda m, args, kwargs: ((args[0] + 1,), kwargs), with_kwargs=True)
        x = T.ones(1, 3)
        y1 = mod(x)
        h1.remove()
        with h2:
            pass
        return calls, y1, mod(x)

    calls, y1, y2 = run(lin, tl)
    tcalls, ty1, ty2 = run(tlin, torch)
    assert calls == tcalls == ["first", ("kw", []), "first", ("kw", [])]
    close(y1, ty1, "pre-hook doubled input, hook added 1")
    close(y2, ty2, "after removing hooks")


def test_forward_hook_always_call_runs_when_forward_raises():
    m = nn.Linear(3, 2)
    seen = []
    m.register_forward_hook(lambda mod, args, out: seen.append(out), always_call=True)
    with pytest.raises(TorchLeanError):
        m(tl.ones(2, 5))
    assert seen == [None]


def test_full_backward_hooks_match_torch():
    def run(lib, T):
        T.manual_seed(0)
        lin = lib.Linear(3, 2)
        got = {}

        def hook(mod, gin, gout):
            got["gin"], got["gout"] = [None if g is None else g.numpy().copy() for g in gin], [g.numpy().copy() for g in gout]
            return None if gin[0] is None else (gin[0] * 3,)

        def pre(mod, gout):
            got["pre"] = gout[0].numpy().copy()

        lin.register_full_backward_hook(hook)
        lin.register_full_backward_pre_hook(pre)
        return lin, got

    lin, got = run(nn, tl)
    tlin, tgot = run(torch.nn, torch)
    copy_params(lin, tlin)
    x = rng(23).standard_normal((4, 3)).astype(np.float32)
    a, ta = leaf_pair(x)
    y, ty = lin(a), tlin(ta)
    backward_pair(y, ty)
    for k in ("gin", "gout"):
        for u, v in zip(got[k], tgot[k]):
            np.testing.assert_allclose(u, v, rtol=1e-5, atol=1e-6, err_msg=k)
    np.testing.assert_allclose(got["pre"], tgot["pre"], rtol=1e-6)
    close(a.grad, ta.grad, "replaced grad_input")
    close(lin.weight.grad, tlin.weight.grad, "weight grad with hooks")
    # an input that needs no gradient: the hook still runs, with grad_input (None,)
    got.clear()
    lin(tl.tensor(x)).sum().backward()
    assert got["gin"] == [None] and got["gout"][0].shape == (4, 2)


def test_tensor_register_hook_matches_torch():
    def run(T):
        x = T.tensor(np.array([1.0, -2.0, 3.0], np.float32), requires_grad=True)
        seen = []
        handle = x.register_hook(lambda g: seen.append(g.numpy().copy()))
        y = x * 2
        y.register_hook(lambda g: g * 10)  # replaces the gradient flowing on from y
        (y * y).sum().backward()
        first = x.grad.numpy().copy()
        handle.remove()
        x.grad = None
        (x * 3).sum().backward()
        return seen, first, x.grad.numpy()

    ours, theirs = run(tl), run(torch)
    assert len(ours[0]) == len(theirs[0]) == 1
    for a, b in zip((ours[0][0], ours[1], ours[2]), (theirs[0][0], theirs[1], theirs[2])):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    with pytest.raises(TorchLeanError, match="^register_hook: cannot register a hook on a tensor that does not"):
        tl.ones(2).register_hook(lambda g: g)


def test_unsupported_arguments_raise_clear_errors():
    x = tl.zeros(1, 2, 4, 4)
    cases = [
        (ArgumentError, "^adaptive_max_pool2d: return_indices=True", lambda: F.adaptive_max_pool2d(x, 2, True)),
        (ArgumentError, "^interpolate: antialias=True", lambda: F.interpolate(x, scale_factor=2, mode="bilinear",
                                                                          antialias=True)),
        (ArgumentError, "^interpolate: align_corners only", lambda: F.interpolate(x, scale_factor=2, align_corners=True)),
        (ShapeError, "^interpolate: mode 'bilinear' expects a 4-D", lambda: F.interpolate(tl.zeros(1, 2, 3), size=4,
                                                                                          mode="bilinear")),
        (ArgumentError, "^pad: mode must be", lambda: F.pad(x, (1, 1), mode="wrap")),
        (ArgumentError, "^pad: value is only meaningful", lambda: F.pad(x, (1, 1), mode="reflect", value=2.0)),
        (ArgumentError, "^feature_alpha_dropout: not supported", lambda: F.feature_alpha_dropout(x, 0.5, True)),
        (ArgumentError, "^register_backward_hook: .*register_full_backward_hook",
         lambda: nn.Linear(2, 2).register_backward_hook(lambda *a: None)),
        (ShapeError, "^pixel_shuffle: ", lambda: F.pixel_shuffle(tl.zeros(1, 3, 2, 2), 2)),
        (ShapeError, "^fold: ", lambda: F.fold(tl.zeros(1, 4, 5), (3, 3), 2)),
        (DTypeError, "^silu: expected a Tensor for input, got numpy.ndarray", lambda: F.silu(np.ones(3))),
        (ShapeError, "^rms_norm: normalized_shape", lambda: F.rms_norm(tl.zeros(2, 3), (4,))),
        (ArgumentError, "^scaled_dot_product_attention: dropout_p must be in", lambda: F.scaled_dot_product_attention(
            tl.zeros(1, 2, 4), tl.zeros(1, 2, 4), tl.zeros(1, 2, 4), dropout_p=2.0)),
    ]
    for exc, pattern, fn in cases:
        with pytest.raises(exc, match=pattern):
            fn()


def test_more_losses_match_torch():
    r = rng(24)
    x, t = r.standard_normal((4, 3)).astype(np.float32), r.standard_normal((4, 3)).astype(np.float32)
    var = (r.random((4, 1)) + 0.1).astype(np.float32)
    var[0] = 1e-9  # clamped at eps, the gradient still flows
    compare_fn(lambda a, v: nn.GaussianNLLLoss(full=True)(a, tl.tensor(t), v),
               lambda a, v: torch.nn.GaussianNLLLoss(full=True)(a, torch.tensor(t), v), [x, var], "GaussianNLLLoss",
               rtol=1e-4, atol=1e-4)
    counts = r.integers(0, 5, (4, 3)).astype(np.float32)
    for kw in ({}, {"log_input": False, "full": True}):
        xin = x if kw.get("log_input", True) else np.abs(x) + 0.1
        compare_fn(lambda a: nn.PoissonNLLLoss(**kw)(a, tl.tensor(counts)),
                   lambda a: torch.nn.PoissonNLLLoss(**kw)(a, torch.tensor(counts)), [xin], f"PoissonNLLLoss {kw}")
    a, p, n = (r.standard_normal((5, 4)).astype(np.float32) for _ in range(3))
    for kw in ({}, {"swap": True, "margin": 2.0}, {"p": 1}):
        compare_fn(nn.TripletMarginLoss(**kw), torch.nn.TripletMarginLoss(**kw), [a, p, n], f"TripletMarginLoss {kw}")
    y = np.where(r.random((4, 3)) < 0.5, 1.0, -1.0).astype(np.float32)
    compare_fn(lambda u: nn.HingeEmbeddingLoss(margin=0.5)(u, tl.tensor(y)),
               lambda u: torch.nn.HingeEmbeddingLoss(margin=0.5)(u, torch.tensor(y)), [x], "HingeEmbeddingLoss")
    img = r.standard_normal((2, 3, 2, 2)).astype(np.float32)
    compare_module(nn.Softmax2d(), torch.nn.Softmax2d(), [img], "Softmax2d")
