"""Grouped and dilated convolutions (PyTorch's ``groups`` and ``dilation``), padding='same' with
dilation, and the modules' ``padding_mode``.

* nn.Conv1d/2d/3d and nn.ConvTranspose1d/2d/3d against torch with copied weights: outputs and the
  gradients of input, weight and bias, for groups in {1, 2, depthwise}, dilation in {1, 2}, with
  strides, paddings, padding='same' and the padding modes (on the ``device`` fixture's device).
* VJPs against float64 finite differences of independent NumPy references written from PyTorch's
  definitions (one dilated window of the group's channels per output position).
* The CPU's depthwise 1-D kernel (Mamba's conv): the spec's bound and NaN rule, the same bits for
  any split over threads, and the same results as the general grouped route.
* Errors naming the call for groups that do not divide the channels, and the geometry checks.
Primitive-level parity against the spec lives in the primitive table (table_conv.py).
"""

from __future__ import annotations

import math
import sys
import zlib

import numpy as np
import pytest
from test_vjp import assert_vjp_matches_fd

import torchlean as tl
import torchlean.nn.functional as TF
from torchlean import spec
from torchlean.contract import CONTRACTS
from torchlean.errors import ArgumentError, ShapeError
from torchlean.kernels import cpu as cpu_backend
from torchlean.kernels.plans import conv_plan_of
from torchlean.runtime import Buffer
from torchlean.runtime import primitives as P

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

F32 = np.float32
CPU_PARALLEL = sys.modules["torchlean.kernels.cpu.parallel"]
CPU_GROUPS = sys.modules["torchlean.kernels.cpu.conv_groups"]


def _torch_f32(request, device):
    if device == "cuda":  # true float32 in cuDNN and cuBLAS, restored after the test
        saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
        request.addfinalizer(lambda: (setattr(torch.backends.cudnn, "allow_tf32", saved[0]),
                                      setattr(torch.backends.cuda.matmul, "allow_tf32", saved[1])))
    return "cuda" if device == "cuda" else "cpu"


def _close(what, ours, theirs, scale):
    err = np.abs(np.asarray(ours, np.float64) - np.asarray(theirs, np.float64))
    tol = 1e-5 * scale + 1e-5 * np.abs(np.asarray(theirs, np.float64))
    assert ours.shape == theirs.shape, f"{what}: shape {ours.shape} != {theirs.shape}"
    assert np.all(err <= tol), f"{what}: max err {err.max():.3g} (tol at worst {tol.min():.3g})"


# (module, in_c, out_c, kernel, kwargs, input shape)
MODULE_CASES = [
    ("Conv1d", 4, 6, 3, dict(groups=2), (2, 4, 11)),
    ("Conv1d", 6, 6, 4, dict(groups=6, padding=3), (2, 6, 9)),                   # Mamba's depthwise conv
    ("Conv1d", 4, 8, 3, dict(groups=4, dilation=2, stride=2, padding=1), (3, 4, 13)),  # channel multiplier 2
    ("Conv1d", 3, 5, 3, dict(dilation=2, padding="same"), (2, 3, 10)),
    ("Conv1d", 4, 4, 4, dict(groups=4, dilation=3, padding="same"), (2, 4, 12)),  # odd total: asymmetric
    ("Conv1d", 4, 4, 2, dict(groups=2, padding="valid", dilation=2), (4, 9)),      # unbatched
    ("Conv1d", 4, 4, 3, dict(groups=4, padding=2, padding_mode="reflect"), (2, 4, 8)),
    ("Conv1d", 2, 4, 3, dict(dilation=2, padding="same", padding_mode="circular"), (2, 2, 7)),
    ("Conv2d", 4, 6, 3, dict(groups=2, dilation=2, padding=2), (2, 4, 9, 8)),
    ("Conv2d", 6, 6, 3, dict(groups=6, stride=2, padding=1), (2, 6, 9, 7)),     # MobileNet's depthwise
    ("Conv2d", 4, 4, (2, 3), dict(groups=2, dilation=(2, 1), padding="same", bias=False), (1, 4, 6, 7)),
    ("Conv2d", 3, 4, 3, dict(dilation=(1, 2), stride=(2, 1), padding=(0, 2)), (2, 3, 8, 9)),
    ("Conv2d", 4, 4, 3, dict(groups=2, padding=1, padding_mode="replicate"), (2, 4, 6, 5)),
    ("Conv3d", 4, 4, 2, dict(groups=2, dilation=2, padding=1), (1, 4, 5, 6, 5)),
    ("Conv3d", 3, 3, 3, dict(groups=3, stride=(1, 2, 1), padding="valid"), (2, 3, 4, 5, 4)),
    ("ConvTranspose1d", 4, 6, 3, dict(groups=2, stride=2, padding=1, output_padding=1), (2, 4, 7)),
    ("ConvTranspose1d", 4, 4, 4, dict(groups=4, dilation=2, padding=2), (2, 4, 6)),
    ("ConvTranspose1d", 2, 4, 3, dict(dilation=3, stride=2, output_padding=1), (2, 5)),  # unbatched
    ("ConvTranspose2d", 4, 6, 3, dict(groups=2, stride=2, padding=1, output_padding=1, dilation=2),
     (2, 4, 5, 4)),
    ("ConvTranspose2d", 6, 6, (3, 2), dict(groups=6, stride=(1, 2)), (1, 6, 4, 5)),
    ("ConvTranspose3d", 4, 2, 2, dict(groups=2, dilation=(1, 2, 1), stride=2, output_padding=(1, 0, 1)),
     (1, 4, 3, 3, 2)),
]


def _module_id(case):
    name, ci, co, k, kw, shape = case
    return f"{name}-{ci}to{co}-k{k}-" + "-".join(f"{a}{v}" for a, v in kw.items())


@pytest.mark.parametrize("case", MODULE_CASES, ids=[_module_id(c) for c in MODULE_CASES])
def test_modules_agree_with_torch(case, device, request):
    name, ci, co, k, kw, shape = case
    dev = _torch_f32(request, device)
    torch.manual_seed(zlib.crc32(repr(case).encode()))
    ref = getattr(torch.nn, name)(ci, co, k, **kw).to(dev)
    ours = getattr(tl.nn, name)(ci, co, k, **kw).to(device)
    assert tuple(ours.weight.shape) == tuple(ref.weight.shape)
    params = [("weight", ours.weight, ref.weight)] + ([("bias", ours.bias, ref.bias)] if ref.bias is not None else [])
    ours.load_state_dict({k: tl.tensor(v.detach().cpu().numpy(), device=device) for k, v in ref.state_dict().items()})
    rng = np.random.default_rng(zlib.crc32(repr(case).encode()))
    x = rng.standard_normal(shape).astype(F32)
    xt = torch.tensor(x, device=dev, requires_grad=True)
    xl = tl.tensor(x, device=device, requires_grad=True)
    yt, yl = ref(xt), ours(xl)
    g = rng.standard_normal(tuple(yt.shape)).astype(F32)
    yt.backward(torch.tensor(g, device=dev))
    yl.backward(tl.tensor(g, device=device))
    scale = float(np.abs(yt.detach().cpu().numpy()).max()) + 1.0
    _close("output", yl.numpy(), yt.detach().cpu().numpy(), scale)
    gscale = float(np.abs(g).max()) * math.prod(shape) ** 0.5 + 1.0
    _close("input grad", xl.grad.numpy(), xt.grad.cpu().numpy(), gscale)
    for what, p_ours, p_ref in params:
        _close(f"{what} grad", p_ours.grad.numpy(), p_ref.grad.cpu().numpy(), gscale)


def test_functional_forms_agree_with_torch():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 6, 10)).astype(F32)
    w = rng.standard_normal((9, 2, 3)).astype(F32)
    b = rng.standard_normal(9).astype(F32)
    got = TF.conv1d(tl.tensor(x), tl.tensor(w), tl.tensor(b), 1, "same", 2, 3).numpy()
    want = torch.nn.functional.conv1d(torch.tensor(x), torch.tensor(w), torch.tensor(b), 1, "same", 2, 3).numpy()
    _close("conv1d", got, want, 10.0)
    wt = rng.standard_normal((6, 3, 2, 2)).astype(F32)
    x2 = rng.standard_normal((1, 6, 3, 4)).astype(F32)
    got = TF.conv_transpose2d(tl.tensor(x2), tl.tensor(wt), None, 2, 1, 1, 2, (2, 1)).numpy()
    want = torch.nn.functional.conv_transpose2d(torch.tensor(x2), torch.tensor(wt), None, 2, 1, 1, 2, (2, 1)).numpy()
    _close("conv_transpose2d", got, want, 10.0)


# -- VJPs against finite differences of independent references -----------------------------------
def np_conv_gd(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    """PyTorch's grouped, dilated conv by its definition: output (n, o, *pos) is the zero-padded
    input's dilated window at pos*stride over the channels of o's group, contracted with w[o]."""
    r = w.ndim - 2
    st, pd, dl = ((v,) * r if np.isscalar(v) else tuple(v) for v in (stride, padding, dilation))
    xp = np.pad(np.asarray(x, np.float64), [(0, 0), (0, 0)] + [(p, p) for p in pd])
    k = w.shape[2:]
    out = tuple((xp.shape[2 + i] - dl[i] * (k[i] - 1) - 1) // st[i] + 1 for i in range(r))
    og, cg = w.shape[0] // groups, w.shape[1]
    y = np.zeros((x.shape[0], w.shape[0]) + out)
    for o in range(w.shape[0]):
        grp = o // og
        for pos in np.ndindex(*out):
            win = xp[(slice(None), slice(grp * cg, (grp + 1) * cg)) +
                     tuple(slice(q * s, q * s + d * (kk - 1) + 1, d) for q, s, d, kk in zip(pos, st, dl, k))]
            y[(slice(None), o) + pos] = np.tensordot(win, np.asarray(w[o], np.float64), axes=r + 1)
    return y if b is None else y + np.asarray(b, np.float64).reshape((1, -1) + (1,) * r)


def np_conv_transpose_gd(x, w, b=None, stride=1, padding=0, output_padding=0, dilation=1, groups=1):
    """PyTorch's grouped, dilated transposed conv by its definition: each input position scatters
    its value times the dilated kernel of the group's output channels; then the padding is cut."""
    r = w.ndim - 2
    st, pd, op, dl = ((v,) * r if np.isscalar(v) else tuple(v) for v in (stride, padding, output_padding, dilation))
    n, ci = x.shape[:2]
    k = w.shape[2:]
    cg, og = ci // groups, w.shape[1]
    full = tuple((s - 1) * t + d * (kk - 1) + 1 + o for s, t, d, kk, o in zip(x.shape[2:], st, dl, k, op))
    y = np.zeros((n, og * groups) + full)
    for c in range(ci):
        grp = c // cg
        for pos in np.ndindex(*x.shape[2:]):
            tgt = tuple(slice(q * s, q * s + d * (kk - 1) + 1, d) for q, s, d, kk in zip(pos, st, dl, k))
            y[(slice(None), slice(grp * og, (grp + 1) * og)) + tgt] += \
                np.asarray(x[(slice(None), c) + pos], np.float64).reshape((n,) + (1,) * (r + 1)) * w[c]
    y = y[(slice(None), slice(None)) + tuple(slice(p, f - p) for p, f in zip(pd, full))]
    return y if b is None else y + np.asarray(b, np.float64).reshape((1, -1) + (1,) * r)


def N(*shape):
    return shape


VJP_CASES = [
    ("conv1d_depthwise_k4_causal", [N(2, 3, 6), N(3, 1, 4), N(3)],
     lambda x, w, b: TF.conv1d(x, w, b, padding=3, groups=3), lambda x, w, b: np_conv_gd(x, w, b, 1, 3, 1, 3)),
    ("conv1d_groups2_dil2_s2", [N(2, 4, 9), N(4, 2, 3), N(4)],
     lambda x, w, b: TF.conv1d(x, w, b, stride=2, padding=1, dilation=2, groups=2),
     lambda x, w, b: np_conv_gd(x, w, b, 2, 1, 2, 2)),
    ("conv2d_depthwise_dil", [N(1, 2, 5, 6), N(4, 1, 2, 3)],
     lambda x, w: TF.conv2d(x, w, padding=(1, 2), dilation=(2, 1), groups=2),
     lambda x, w: np_conv_gd(x, w, None, 1, (1, 2), (2, 1), 2)),
    ("conv3d_groups2", [N(1, 4, 3, 4, 3), N(2, 2, 2, 2, 2), N(2)],
     lambda x, w, b: TF.conv3d(x, w, b, padding=1, dilation=(1, 2, 1), groups=2),
     lambda x, w, b: np_conv_gd(x, w, b, 1, 1, (1, 2, 1), 2)),
    ("conv_transpose1d_groups2_dil2", [N(2, 4, 4), N(4, 1, 3), N(2)],
     lambda x, w, b: TF.conv_transpose1d(x, w, b, stride=2, padding=1, output_padding=1, groups=2, dilation=2),
     lambda x, w, b: np_conv_transpose_gd(x, w, b, 2, 1, 1, 2, 2)),
    ("conv_transpose2d_depthwise", [N(1, 2, 3, 3), N(2, 1, 2, 2), N(2)],
     lambda x, w, b: TF.conv_transpose2d(x, w, b, stride=(2, 1), groups=2, dilation=(1, 2)),
     lambda x, w, b: np_conv_transpose_gd(x, w, b, (2, 1), 0, 0, (1, 2), 2)),
]


@pytest.mark.parametrize("name, shapes, ours, ref", VJP_CASES, ids=[c[0] for c in VJP_CASES])
def test_vjp_matches_finite_differences(name, shapes, ours, ref, device):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    xs = [rng.standard_normal(s).astype(F32) for s in shapes]
    ref_out = np.asarray(ref(*[x.astype(np.float64) for x in xs]))
    w = rng.standard_normal(ref_out.shape).astype(F32)
    assert_vjp_matches_fd(name, ours, ref, xs, ref_out, w, device)


def test_references_agree_with_torch():
    """The finite-difference references above are PyTorch's definitions (checked once, in float64)."""
    rng = np.random.default_rng(2)
    x, w, b = rng.standard_normal((2, 4, 7, 6)), rng.standard_normal((6, 2, 3, 2)), rng.standard_normal(6)
    want = torch.nn.functional.conv2d(*map(torch.tensor, (x, w, b)), stride=(2, 1), padding=(2, 1),
                                      dilation=(2, 3), groups=2).numpy()
    np.testing.assert_allclose(np_conv_gd(x, w, b, (2, 1), (2, 1), (2, 3), 2), want, atol=1e-12)
    wt = rng.standard_normal((4, 3, 2, 3))
    want = torch.nn.functional.conv_transpose2d(*map(torch.tensor, (x, wt, b)), stride=(2, 3), padding=(1, 2),
                                                output_padding=(1, 0), groups=2, dilation=(3, 1)).numpy()
    np.testing.assert_allclose(np_conv_transpose_gd(x, wt, b, (2, 3), (1, 2), (1, 0), (3, 1), 2), want, atol=1e-12)


# -- the CPU's depthwise 1-D kernel ---------------------------------------------------------------
DEPTHWISE = [(2, 8, (40,), (4,), (1,), (3,), (1,)), (3, 5, (17,), (3,), (2,), (2,), (3,)),
             (1, 4, (6,), (5,), (3,), (4,), (1,)), (2, 3, (9,), (2,), (4,), (0,), (2,))]


def _dw_data(geom, seed):
    n, c, sp, kn, st, pd, dl = geom
    plan = conv_plan_of(n, c, c, sp, kn, st, pd, dl, c)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(plan.n_x).astype(F32)
    w = rng.standard_normal(plan.n_w).astype(F32)
    b = rng.standard_normal(c).astype(F32)
    dy = rng.standard_normal(plan.n_y).astype(F32)
    return plan, x, w, b, dy


@pytest.mark.parametrize("geom", DEPTHWISE, ids=str)
def test_cpu_depthwise_1d_meets_the_contracts_and_matches_the_grouped_route(monkeypatch, geom):
    plan, x, w, b, dy = _dw_data(geom, 1)
    assert CPU_GROUPS.depthwise_1d(plan)
    n, c, sp, kn, st, pd, dl = geom
    dims = (n, c, c, sp, kn, st, pd, dl, c)
    results = {"conv": cpu_backend.conv(x, w, b, plan), "conv_bwd_input": cpu_backend.conv_bwd_input(dy, w, plan),
               "conv_bwd_weight": cpu_backend.conv_bwd_weight(x, dy, plan)}
    args = {"conv": (x, w, b), "conv_bwd_input": (dy, w), "conv_bwd_weight": (x, dy)}
    for name, got in results.items():
        ref = getattr(spec, name)(*args[name], *dims)
        bound = CONTRACTS[name].bound(ref, *args[name], *dims)
        assert np.all(np.abs(got - ref) <= bound), name
    monkeypatch.setattr(CPU_GROUPS, "depthwise_1d", lambda plan: False)  # the general gather + GEMM route
    np.testing.assert_allclose(cpu_backend.conv(x, w, b, plan), results["conv"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(cpu_backend.conv_bwd_input(dy, w, plan), results["conv_bwd_input"], rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_allclose(cpu_backend.conv_bwd_weight(x, dy, plan), results["conv_bwd_weight"], rtol=1e-4,
                               atol=1e-4)


def test_cpu_depthwise_1d_same_bits_for_any_split(monkeypatch):
    plan, x, w, b, dy = _dw_data((4, 16, (300,), (4,), (1,), (3,), (1,)), 2)
    one = [cpu_backend.conv(x, w, b, plan), cpu_backend.conv_bwd_input(dy, w, plan),
           cpu_backend.conv_bwd_weight(x, dy, plan)]
    for t in (2, 3, 7):
        monkeypatch.setattr(CPU_PARALLEL, "parts", lambda work, items, min_work, t=t: min(t, items))
        got = [cpu_backend.conv(x, w, b, plan), cpu_backend.conv_bwd_input(dy, w, plan),
               cpu_backend.conv_bwd_weight(x, dy, plan)]
        for a, e in zip(got, one):
            assert a.tobytes() == e.tobytes()


@pytest.mark.parametrize("route", ["depthwise", "general"])
def test_cpu_grouped_kernels_keep_the_nan_rule(monkeypatch, route):
    """An inf weight next to the padding: NaN in conv (a padded 0 times inf), none in conv_bwd_input
    (a tap in the padding is no term), as the spec says."""
    if route == "general":
        monkeypatch.setattr(CPU_GROUPS, "depthwise_1d", lambda plan: False)
    dims = (1, 2, 2, (5,), (3,), (1,), (2,), (2,), 2)
    plan = conv_plan_of(*dims)
    x, w, dy = np.ones(plan.n_x, F32), np.ones(plan.n_w, F32), np.ones(plan.n_y, F32)
    w[0] = np.inf
    y = cpu_backend.conv(x, w, None, plan)
    ref = spec.conv(x, w, None, *dims)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(ref))
    assert np.isnan(y).any()
    dx = cpu_backend.conv_bwd_input(dy, w, plan)
    ref = spec.conv_bwd_input(dy, w, *dims)
    np.testing.assert_array_equal(dx, ref.astype(F32))
    assert not np.isnan(dx).any()


def test_mamba_style_causal_depthwise_conv():
    """Mamba's block: Conv1d(d, d, 4, groups=d, padding=3), cut to the first L outputs."""
    torch.manual_seed(0)
    d, L = 8, 12
    ref = torch.nn.Conv1d(d, d, 4, groups=d, padding=3)
    ours = tl.nn.Conv1d(d, d, 4, groups=d, padding=3)
    ours.load_state_dict({k: tl.tensor(v.detach().numpy()) for k, v in ref.state_dict().items()})
    x = np.random.default_rng(0).standard_normal((2, L, d)).astype(F32)
    want = ref(torch.tensor(x).transpose(1, 2))[..., :L].transpose(1, 2).detach().numpy()
    got = ours(tl.tensor(x).transpose(1, 2))[..., :L].transpose(1, 2).numpy()
    _close("mamba conv", got, want, 5.0)


# -- errors ---------------------------------------------------------------------------------------
def _x(*shape):
    return tl.tensor(np.ones(shape, F32))


@pytest.mark.parametrize("call, exc, words", [
    (lambda: tl.nn.Conv1d(4, 6, 3, groups=4), ArgumentError, ["Conv1d", "out_channels (6)", "divisible by groups (4)"]),
    (lambda: tl.nn.Conv2d(3, 6, 3, groups=2), ArgumentError, ["Conv2d", "in_channels (3)", "divisible by groups (2)"]),
    (lambda: tl.nn.Conv1d(4, 4, 3, groups=0), ArgumentError, ["Conv1d", "groups", "positive"]),
    (lambda: tl.nn.ConvTranspose1d(4, 4, 3, groups=True), ArgumentError, ["ConvTranspose1d", "groups", "positive"]),
    (lambda: tl.nn.Conv1d(4, 4, 3, dilation=0), ArgumentError, ["Conv1d", "dilation"]),
    (lambda: tl.nn.Conv1d(4, 4, 3, padding_mode="mirror"), ArgumentError, ["Conv1d", "padding_mode", "'mirror'"]),
    (lambda: tl.nn.ConvTranspose2d(4, 4, 3, padding_mode="reflect"), ArgumentError,
     ["ConvTranspose2d", "padding_mode='zeros'"]),
    (lambda: tl.nn.Conv1d(4, 4, 3, stride=2, padding="same"), ArgumentError, ["Conv1d", "same", "strided"]),
    (lambda: TF.conv1d(_x(2, 4, 8), _x(4, 1, 3), groups=2), ShapeError,
     ["conv1d", "groups=2", "weight.shape[1] * groups = 2", "got 4"]),
    (lambda: TF.conv1d(_x(2, 4, 8), _x(3, 2, 3), groups=2), ShapeError,
     ["conv1d", "output channels (3)", "divisible by groups=2"]),
    (lambda: TF.conv2d(_x(1, 4, 5, 5), _x(4, 2, 3, 3), groups=-2), ArgumentError, ["conv2d", "groups", "positive"]),
    (lambda: TF.conv1d(_x(1, 2, 4), _x(2, 2, 3), dilation=2), ShapeError, ["conv1d", "too small", "dilation (2,)"]),
    (lambda: TF.conv_transpose1d(_x(1, 4, 5), _x(4, 2, 3), groups=3), ShapeError,
     ["conv_transpose1d", "divisible by groups=3"]),
    (lambda: TF.conv_transpose1d(_x(1, 2, 5), _x(2, 1, 3), stride=1, output_padding=1, dilation=2), ArgumentError,
     ["conv_transpose1d", "output_padding", "not supported", "below the dilation"]),
], ids=lambda v: None)
def test_errors_name_the_call(call, exc, words):
    with pytest.raises(exc) as info:
        call()
    for word in words:
        assert word in str(info.value), f"{word!r} not in {str(info.value)!r}"


def _buf(n):
    return Buffer.from_numpy(np.ones(n, F32), "cpu")


@pytest.mark.parametrize("call, words", [
    (lambda: P.conv(_buf(16), _buf(12), None, 1, 4, 6, (4,), (3,), (1,), (1,), (1,), 4),
     ["conv: out_c = 6 must be divisible by groups = 4"]),
    (lambda: P.conv_bwd_input(_buf(8), _buf(6), 1, 3, 2, (4,), (3,), (1,), (1,), (1,), 2),
     ["conv_bwd_input: in_c = 3 must be divisible by groups = 2"]),
    (lambda: P.conv_bwd_weight(_buf(8), _buf(8), 1, 2, 2, (4,), (3,), (1,), (1,), (1,), 0),
     ["conv_bwd_weight: groups must be >= 1, got 0"]),
    (lambda: P.conv(_buf(8), _buf(6), None, 1, 2, 2, (4,), (3,), (1,), (0,), (2,), 2),
     ["conv: the output would be empty", "dilation (kernel - 1)", "dilation [2]"]),
    (lambda: P.conv(_buf(8), _buf(6), None, 1, 2, 2, (4,), (3,), (1,), (1,), (0,), 2),
     ["conv: dilation[0] must be >= 1"]),
    (lambda: P.conv(_buf(8), _buf(12), None, 1, 2, 2, (4,), (3,), (1,), (1,), (1,), 2),
     ["conv", "w"]),  # the weight has in_c / groups = 1 channel per output: 6 elements, not 12
    (lambda: P.conv_transpose(_buf(8), _buf(24), None, 1, 2, 4, (4,), (3,), (1,), (1,), (0,), (1,), 2),
     ["conv_transpose", "w"]),
], ids=lambda v: None)
def test_primitive_errors_name_the_primitive(call, words):
    with pytest.raises(ShapeError) as info:
        call()
    for word in words:
        assert word in str(info.value), f"{word!r} not in {str(info.value)!r}"


def test_primitives_with_defaults_are_the_plain_conv():
    """dilation=None/1 and groups=1 leave a plan plain (the original kernels, the same bits)."""
    plan = conv_plan_of(2, 3, 4, (6, 5), (3, 2), (1, 2), (1, 0))
    assert plan.plain and plan.dilation == (1, 1) and plan.groups == 1
    assert plan == conv_plan_of(2, 3, 4, (6, 5), (3, 2), (1, 2), (1, 0), (1, 1), 1)
    assert not conv_plan_of(2, 4, 4, (6,), (3,), (1,), (1,), None, 2).plain
    assert not conv_plan_of(2, 4, 4, (6,), (3,), (1,), (1,), (2,), 1).plain
