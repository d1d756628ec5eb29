"""Pooling: max_pool, avg_pool, smooth_max_pool (primitives, tape ops, PyTorch-named front end).

- Table cases (torchlean/testing/table_pool.py: edge cases and random geometries of rank 1-4 and 8)
  on every backend against spec + contract; on CUDA the max and avg pools (forward and backward)
  must also equal the CPU bit for bit: both backends add the same float32 terms in the same order.
- Known answers for the conventions (DESIGN.md): ties go to the first maximum (-0 before +0
  included), a NaN propagates and its first occurrence gets the gradient, an all -inf window
  picks its first position, padding is -inf for max, counted for avg and counts as 0 for smooth.
- The VJP of every tape op against float64 central finite differences of an independent NumPy
  reference (sliding windows over a padded copy), for ranks 1-4, strides > 1, padding and 1x1.
- torch.nn.functional.max_pool*/avg_pool* on the same inputs (on cuda when torch has it): forward
  bit for bit (max) or within 2x the contract (avg), gradients within 2x the contract.
- smooth max pool tends to max pool for large beta; errors name the op and the argument; backward
  passes are bitwise repeatable (100 runs, deterministic reductions on); fake kernels are caught.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view

import torchlean as tl
import torchlean.nn.functional as TF
from torchlean import ops, spec
from torchlean.kernels import cpu as cpu_backend
from torchlean.kernels.plans import pool_plan_of
from torchlean.contract import CONTRACTS
from torchlean.errors import ArgumentError, BufferReleasedError, DTypeError, ShapeError
from torchlean.runtime import Buffer
from torchlean.runtime import primitives as P
from torchlean.runtime.determinism import deterministic_reductions, set_deterministic_reductions
from torchlean.testing.primitive_table import TABLE, run_case, run_runtime
from torchlean.testing.table_pool import smooth_y

from test_vjp import _report, _within, fd_grads

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

F32 = np.float32
NAN, INF = np.nan, np.inf
POOLS = ["max_pool", "max_pool_bwd", "avg_pool", "avg_pool_bwd", "smooth_max_pool", "smooth_max_pool_bwd"]
SAME_BITS_AS_CPU = {"max_pool", "max_pool_bwd", "avg_pool", "avg_pool_bwd"}


def f32(*v) -> np.ndarray:
    return np.array(v, dtype=F32)


def up(a, device) -> Buffer:
    return Buffer.from_numpy(np.asarray(a, dtype=F32).reshape(-1), device)


def bits(a) -> np.ndarray:
    """float32 bits with every NaN mapped to one pattern (payloads may differ)."""
    a = np.asarray(a, F32).reshape(-1).copy()
    a[np.isnan(a)] = np.nan
    return a.view(np.uint32)


# -- table cases --------------------------------------------------------------------------------------
def _check_table_case(name, args, device):
    info = TABLE[name]
    verdict, out, _ = run_case(info, args, device)
    assert verdict.ok, f"{name} on {device}: {verdict.detail}"
    if device != "cpu" and name in SAME_BITS_AS_CPU:
        cpu_out = run_runtime(info, args, "cpu")
        assert np.array_equal(bits(out), bits(cpu_out)), f"{name}: {device} and cpu differ in bits"


@pytest.mark.parametrize("name", POOLS)
def test_table_edge_cases(name, device):
    for args in TABLE[name].edge_cases:
        _check_table_case(name, [a.copy() if isinstance(a, np.ndarray) else a for a in args], device)


@pytest.mark.parametrize("name", POOLS)
def test_table_random_cases(name, device):
    info = TABLE[name]
    for seed in range(40):
        rng = np.random.default_rng(seed)
        dims = tuple(int(v) for v in rng.integers(0, 20, info.ndims))
        _check_table_case(name, info.sample(rng, dims, info.kinds[seed % len(info.kinds)]), device)


def test_table_covers_the_required_geometries():
    ranks, strided, half_pad, one_by_one = set(), False, False, False
    for args in TABLE["max_pool"].edge_cases:
        _, _, sp, kn, st, pd = args
        ranks.add(len(sp))
        strided |= any(s > 1 for s in st)
        half_pad |= any(p == k // 2 and p > 0 for k, p in zip(kn, pd))
        one_by_one |= all(k == 1 for k in kn)
    assert {1, 2, 3} <= ranks and max(ranks) >= 4 and strided and half_pad and one_by_one


# -- known answers: the conventions --------------------------------------------------------------------
def test_max_pool_ties_go_to_the_first_maximum(device):
    x = f32(-0.0, 0.0, 0.0, -0.0, 2, 2, 1, 2)
    y = P.max_pool(up(x, device), 1, (8,), (2,), (2,), (0,)).to_numpy()
    np.testing.assert_array_equal(y, f32(0, 0, 2, 2))
    assert np.signbit(y).tolist() == [True, False, False, False]  # -0 before +0 wins, +0 before -0 wins
    dx = P.max_pool_bwd(up(x, device), up([1, 2, 3, 4], device), 1, (8,), (2,), (2,), (0,)).to_numpy()
    np.testing.assert_array_equal(dx, f32(1, 0, 2, 0, 3, 0, 0, 4))


def test_max_pool_nan_propagates_and_the_first_nan_gets_the_gradient(device):
    x = f32(1, NAN, 5, NAN, -INF, -INF, -INF, -INF)
    y = P.max_pool(up(x, device), 1, (8,), (4,), (4,), (0,)).to_numpy()
    assert np.isnan(y[0]) and y[1] == -INF
    dx = P.max_pool_bwd(up(x, device), up([3, 7], device), 1, (8,), (4,), (4,), (0,)).to_numpy()
    # the first NaN wins (PyTorch's CPU kernel gives it to the last NaN); an all -inf window: the first
    np.testing.assert_array_equal(dx, f32(0, 3, 0, 0, 7, 0, 0, 0))


def test_max_pool_padding_is_minus_inf_and_all_padding_windows_have_no_winner(device):
    x = f32(-3, -5)
    y = P.max_pool(up(x, device), 1, (2,), (1,), (1,), (2,)).to_numpy()
    np.testing.assert_array_equal(y, f32(-INF, -INF, -3, -5, -INF, -INF))
    y3 = P.max_pool(up(x, device), 1, (2,), (3,), (1,), (1,)).to_numpy()
    np.testing.assert_array_equal(y3, f32(-3, -3))  # padding never wins over -3
    dx = P.max_pool_bwd(up(x, device), up([1, 2, 3, 4, 5, 6], device), 1, (2,), (1,), (1,), (2,)).to_numpy()
    np.testing.assert_array_equal(dx, f32(3, 4))


def test_avg_pool_counts_padding(device):
    x = np.arange(1, 10, dtype=F32).reshape(3, 3)
    y = P.avg_pool(up(x, device), 1, (3, 3), (2, 2), (2, 2), (1, 1)).to_numpy()
    # windows: [1], [2,3], [4,7], [5,6,8,9] each / 4
    np.testing.assert_array_equal(y, f32(1, 5, 11, 28) / F32(4))
    dx = P.avg_pool_bwd(up([4, 8, 12, 16], device), 1, (3, 3), (2, 2), (2, 2), (1, 1)).to_numpy()
    np.testing.assert_array_equal(dx, f32(1, 2, 2, 3, 4, 4, 3, 4, 4))


def test_smooth_max_pool_padding_counts_as_zero(device):
    x = f32(-5, -5)
    beta = 2.0
    y = P.smooth_max_pool(up(x, device), 1, (2,), (2,), (1,), (1,), beta).to_numpy()
    exact = np.log(np.exp(0.0) + np.exp(beta * -5.0)) / beta  # window [pad, -5]
    # log of a sum near 1: float32 resolves it to ~u absolute (the contract's absolute term)
    np.testing.assert_allclose(y, [exact, np.log(2 * np.exp(-10.0)) / beta, exact], rtol=1e-6, atol=1e-7)
    # an all-padding window: log(K) / beta
    y0 = P.smooth_max_pool(up(x, device), 1, (2,), (1,), (1,), (1,), beta).to_numpy()
    assert y0[0] == 0.0 and y0[-1] == 0.0


def test_smooth_max_pool_infinities_do_not_make_nan(device):
    x = f32(INF, 1, -INF, -INF, 2, INF)
    y = P.smooth_max_pool(up(x, device), 1, (6,), (2,), (2,), (0,), 1.0).to_numpy()
    assert y[0] == INF and y[1] == -INF and y[2] == INF
    ymin = P.smooth_max_pool(up(x, device), 1, (6,), (2,), (2,), (0,), -1.0).to_numpy()  # a smooth min
    assert ymin[1] == -INF and np.isfinite(ymin[0]) and abs(ymin[0] - 1.0) < 1e-6
    yn = P.smooth_max_pool(up(f32(NAN, 1, 2, 3), device), 1, (4,), (2,), (2,), (0,), 1.0).to_numpy()
    assert np.isnan(yn[0]) and np.isfinite(yn[1])


@pytest.mark.parametrize("beta", [1e3, 1e4])
def test_smooth_max_pool_tends_to_max_pool(device, beta):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 9, 8)).astype(F32)
    t = tl.tensor(x, device=device)
    sm = TF.smooth_max_pool2d(t, 3, beta=beta, stride=2).numpy()
    mx = TF.max_pool2d(t, 3, stride=2).numpy()
    # max <= smooth max <= max + log(K) / beta (exactly; float32 adds a few ulps)
    assert np.all(sm >= mx - 1e-6) and np.all(sm <= mx + np.log(9) / beta + 1e-6)
    smin = TF.smooth_max_pool2d(t, 3, beta=-beta, stride=2).numpy()
    mn = -TF.max_pool2d(-t, 3, stride=2).numpy()
    assert np.all(smin <= mn + 1e-6) and np.all(smin >= mn - np.log(9) / beta - 1e-6)


# -- VJP against float64 finite differences ---------------------------------------------------------------
def np_pool(x, kernel, stride, padding, kind, beta=None):
    """Independent float64 reference: sliding windows over a padded copy of x (..., *spatial)."""
    r = len(kernel)
    lead = x.ndim - r
    pad_val = -np.inf if kind == "max" else 0.0
    xp = np.pad(x, [(0, 0)] * lead + [(p, p) for p in padding], constant_values=pad_val)
    win = sliding_window_view(xp, kernel, axis=tuple(range(lead, x.ndim)))
    win = win[(slice(None),) * lead + tuple(slice(None, None, s) for s in stride)]
    axes = tuple(range(-r, 0))
    if kind == "max":
        return win.max(axis=axes)
    if kind == "avg":
        return win.sum(axis=axes) / math.prod(kernel)
    m = (beta * win).max(axis=axes, keepdims=True)
    return (m + np.log(np.exp(beta * win - m).sum(axis=axes, keepdims=True))).reshape(m.shape[:x.ndim]) / beta


def distinct(shape, seed):
    """Values with pairwise gaps >= 0.05 (max pool away from ties), random order."""
    n = math.prod(shape)
    rng = np.random.default_rng(seed)
    return (rng.permutation(n) * 0.05 - n * 0.025 + rng.uniform(0, 0.01, n)).astype(F32).reshape(shape)


VJP_CASES = [
    # (name, x shape, kernel, stride, padding, beta)
    ("rank1", (2, 3, 9), (3,), (2,), (1,), 2.0),
    ("rank1_unbatched", (3, 7), (2,), (1,), (1,), 1.5),
    ("rank2_3x3_s2_p1", (2, 2, 7, 6), (3, 3), (2, 2), (1, 1), 3.0),
    ("rank2_1x1", (1, 2, 3, 4), (1, 1), (1, 1), (0, 0), 2.0),
    ("rank2_overlap_odd", (1, 2, 5, 5), (2, 3), (1, 2), (1, 1), -2.0),
    ("rank3", (1, 2, 4, 5, 3), (2, 3, 2), (2, 1, 1), (1, 1, 0), 2.5),
    ("rank4", (1, 1, 3, 4, 3, 3), (2, 2, 1, 2), (1, 2, 1, 1), (1, 0, 0, 1), 1.0),
]


@pytest.mark.parametrize("kind", ["max", "avg", "smooth"])
@pytest.mark.parametrize("case", VJP_CASES, ids=[c[0] for c in VJP_CASES])
def test_vjp_matches_finite_differences(kind, case, device):
    name, shape, kernel, stride, padding, beta = case
    seed = len(name) * 7 + len(kind)
    x = distinct(shape, seed) if kind == "max" else np.random.default_rng(seed).standard_normal(shape).astype(F32)
    ref = (lambda v: np_pool(v, kernel, stride, padding, kind, beta))
    ref_out = ref(x.astype(np.float64))
    w = np.random.default_rng(seed + 1).standard_normal(ref_out.shape).astype(F32)
    t = tl.tensor(x, device=device, requires_grad=True)
    if kind == "max":
        y = ops.max_pool_nd(t, kernel, stride, padding)
    elif kind == "avg":
        y = ops.avg_pool_nd(t, kernel, stride, padding)
    else:
        y = ops.smooth_max_pool_nd(t, kernel, beta, stride, padding)
    assert tuple(y.shape) == ref_out.shape
    assert _within(y.numpy(), ref_out), f"{kind} {name} forward: " + _report(y.numpy(), ref_out)
    y.backward(tl.tensor(w, device=device))
    (fd,) = fd_grads(ref, [x], w)
    g = t.grad.numpy()
    assert not _within(2.0 * fd, fd) and not _within(-fd, fd), f"{kind} {name}: gradient too small to discriminate"
    assert _within(g, fd), f"{kind} {name} gradient: " + _report(g, fd)


def test_pool_nodes_keep_no_workspace():
    t = tl.tensor(distinct((1, 2, 4, 4), 3), requires_grad=True)
    for y in (TF.max_pool2d(t, 2), TF.avg_pool2d(t, 2), TF.smooth_max_pool2d(t, 2, beta=2.0)):
        assert y._node is not None and y._node.workspace == ()


# -- agreement with PyTorch -----------------------------------------------------------------------------------
torch = pytest.importorskip("torch", reason="torch is the second oracle of these tests")


def _torch_device(device: str) -> str:
    return "cuda" if device != "cpu" and torch.cuda.is_available() else "cpu"


TORCH_CASES = [
    # (fn name, x shape, kwargs)
    ("max_pool1d", (2, 3, 11), dict(kernel_size=3, stride=2, padding=1)),
    ("max_pool1d", (3, 8), dict(kernel_size=2)),
    ("max_pool2d", (2, 3, 9, 10), dict(kernel_size=3, stride=2, padding=1)),
    ("max_pool2d", (2, 2, 7, 7), dict(kernel_size=(2, 3), stride=(1, 2), padding=(1, 1))),
    ("max_pool2d", (1, 2, 5, 6), dict(kernel_size=1, stride=2)),
    ("max_pool2d", (3, 6, 6), dict(kernel_size=2)),
    ("max_pool3d", (1, 2, 5, 6, 7), dict(kernel_size=(3, 2, 3), stride=(2, 1, 2), padding=(1, 1, 1))),
    ("avg_pool1d", (2, 3, 11), dict(kernel_size=3, stride=2, padding=1)),
    ("avg_pool2d", (2, 3, 9, 10), dict(kernel_size=3, stride=2, padding=1)),
    ("avg_pool2d", (2, 2, 7, 8), dict(kernel_size=(2, 4), stride=(3, 1), padding=(1, 2))),
    ("avg_pool2d", (3, 6, 6), dict(kernel_size=2, count_include_pad=False)),
    ("avg_pool3d", (1, 2, 5, 6, 7), dict(kernel_size=(3, 2, 3), stride=(2, 1, 2), padding=(1, 1, 1))),
]


def _prim_geometry(shape, r, kw):
    k = kw["kernel_size"]
    k = (k,) * r if isinstance(k, int) else tuple(k)
    s = kw.get("stride", k)
    s = (s,) * r if isinstance(s, int) else tuple(s)
    p = kw.get("padding", 0)
    p = (p,) * r if isinstance(p, int) else tuple(p)
    return math.prod(shape[:len(shape) - r]), tuple(shape[len(shape) - r:]), k, s, p


@pytest.mark.parametrize("fn, shape, kw", TORCH_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(TORCH_CASES)])
@pytest.mark.parametrize("values", ["normal", "ties"])
def test_matches_torch(fn, shape, kw, values, device):
    rng = np.random.default_rng(len(shape) * 31 + len(kw))
    x = (rng.integers(-3, 4, shape) if values == "ties" else rng.standard_normal(shape)).astype(F32)
    r = int(fn[-2])
    ours_t = tl.tensor(x, device=device, requires_grad=True)
    y = getattr(TF, fn)(ours_t, **kw)
    w = rng.standard_normal(y.shape).astype(F32)
    y.backward(tl.tensor(w, device=device))
    tdev = _torch_device(device)
    xt = torch.tensor(x, device=tdev, requires_grad=True)
    yt = getattr(torch.nn.functional, fn)(xt, **kw)
    yt.backward(torch.tensor(w, device=tdev))
    ty, tg = yt.detach().cpu().numpy(), xt.grad.cpu().numpy()
    assert y.shape == tuple(ty.shape)
    planes, sp, k, s, p = _prim_geometry(shape, r, kw)
    if fn.startswith("max"):
        np.testing.assert_array_equal(y.numpy(), ty)  # a selection: bit for bit, ties included
        name, args = "max_pool_bwd", (x.astype(np.float64).reshape(-1), w.astype(np.float64).reshape(-1))
    else:
        tol = 2 * CONTRACTS["avg_pool"].bound(ty.reshape(-1), x.astype(np.float64).reshape(-1), planes, sp, k, s, p)
        assert np.all(np.abs(y.numpy().reshape(-1) - ty.reshape(-1)) <= tol), f"{fn} forward"
        name, args = "avg_pool_bwd", (w.astype(np.float64).reshape(-1),)
    tol = 2 * CONTRACTS[name].bound(tg.reshape(-1).astype(np.float64), *args, planes, sp, k, s, p)
    err = np.abs(ours_t.grad.numpy().reshape(-1).astype(np.float64) - tg.reshape(-1))
    assert np.all(err <= tol), f"{fn} gradient: worst err {err.max()} (tol there {tol[np.argmax(err)]})"


# -- front end: PyTorch's rules and options -----------------------------------------------------------------
def test_front_end_defaults_and_unbatched():
    x = tl.tensor(distinct((2, 3, 6, 6), 1))
    assert TF.max_pool2d(x, 2).shape == (2, 3, 3, 3)  # stride defaults to kernel_size
    assert TF.max_pool2d(x, 3, stride=[]).shape == (2, 3, 2, 2)  # PyTorch: an empty stride is kernel_size
    assert TF.avg_pool2d(x[0], (2, 3), stride=1).shape == (3, 5, 4)  # unbatched (C, H, W)
    assert TF.max_pool1d(x[0, 0], 2).shape == (6, 3)
    assert TF.max_pool3d(x, 2).shape == (2, 1, 3, 3)  # a 4-D input is an unbatched 3-D pool
    assert TF.avg_pool2d(x, 2, count_include_pad=False).shape == (2, 3, 3, 3)  # no padding: the same op
    assert TF.max_pool2d(x, 2, dilation=(1, 1)).shape == (2, 3, 3, 3)
    assert TF.smooth_max_pool1d(x[0, 0], 2, 1.0).shape == (6, 3)
    assert TF.smooth_max_pool3d(x, 2, beta=1.0, padding=1).shape == (2, 2, 4, 4)


@pytest.mark.parametrize("call, err, words", [
    (lambda x: TF.max_pool2d(x, 3, padding=2), ArgumentError, ["max_pool2d", "padding", "half"]),
    (lambda x: TF.avg_pool2d(x, 2, padding=(0, 2)), ArgumentError, ["avg_pool2d", "padding"]),
    (lambda x: TF.max_pool2d(x, 2, dilation=2), ArgumentError, ["max_pool2d", "dilation", "not supported"]),
    (lambda x: TF.max_pool2d(x, 2, ceil_mode=True), ArgumentError, ["ceil_mode", "not supported"]),
    (lambda x: TF.max_pool2d(x, 2, return_indices=True), ArgumentError, ["return_indices", "not supported"]),
    (lambda x: TF.avg_pool2d(x, 2, padding=1, count_include_pad=False), ArgumentError,
     ["count_include_pad", "not supported"]),
    (lambda x: TF.avg_pool2d(x, 2, divisor_override=3), ArgumentError, ["divisor_override", "not supported"]),
    (lambda x: TF.max_pool2d(x, 0), ArgumentError, ["max_pool2d", "kernel_size"]),
    (lambda x: TF.max_pool2d(x, 2, stride=0), ArgumentError, ["max_pool2d", "stride"]),
    (lambda x: TF.max_pool2d(x, (2, 2, 2)), ArgumentError, ["max_pool2d", "kernel_size"]),
    (lambda x: TF.max_pool2d(x, 2.5), ArgumentError, ["kernel_size"]),
    (lambda x: TF.avg_pool2d(x, 2, padding=-1), ArgumentError, ["padding"]),
    (lambda x: TF.max_pool2d(x[0, 0, 0], 2), ShapeError, ["max_pool2d", "shape"]),
    (lambda x: TF.max_pool1d(x, 2), ShapeError, ["max_pool1d", "3-D"]),
    (lambda x: TF.max_pool2d(x, 7), ShapeError, ["max_pool2d", "kernel_size"]),
    (lambda x: TF.smooth_max_pool2d(x, 2, beta=0.0), ArgumentError, ["smooth_max_pool2d", "beta"]),
    (lambda x: TF.smooth_max_pool2d(x, 2, beta=float("inf")), ArgumentError, ["beta"]),
    (lambda x: TF.smooth_max_pool2d(x, 2, beta=float("nan")), ArgumentError, ["beta"]),
    (lambda x: TF.smooth_max_pool2d(x, 2, beta=1e-50), ArgumentError, ["beta"]),  # rounds to float32 0
    (lambda x: ops.max_pool_nd(x, 2), ArgumentError, ["max_pool_nd", "kernel_size"]),
    (lambda x: ops.avg_pool_nd(x, (1,) * 9), ArgumentError, ["avg_pool_nd", "kernel_size"]),
    (lambda x: TF.max_pool2d(np.zeros((2, 2, 4, 4)), 2), DTypeError, ["max_pool2d", "Tensor"]),
])
def test_front_end_errors(call, err, words):
    x = tl.tensor(np.zeros((1, 2, 6, 6), F32))
    with pytest.raises(err) as info:
        call(x)
    for word in words:
        assert word in str(info.value), f"{word!r} not in {str(info.value)!r}"


def test_max_pool_nd_accepts_any_padding_and_rank_5():
    x = tl.tensor(distinct((1, 2, 2, 2, 2, 2, 2), 4), requires_grad=True)
    y = ops.max_pool_nd(x, (1, 1, 1, 1, 1), padding=1)  # all-padding windows at the corners give -inf
    assert y.shape == (1, 2, 4, 4, 4, 4, 4) and np.isinf(y.numpy()).sum() == 2 * (4 ** 5 - 2 ** 5)
    y2 = ops.max_pool_nd(x, (2, 2, 2, 2, 2))
    np.testing.assert_array_equal(y2.numpy().reshape(2), x.numpy().reshape(2, -1).max(axis=1))
    y2.backward(tl.ones_like(y2))
    assert x.grad.numpy().sum() == 2.0


# -- primitive argument checks ---------------------------------------------------------------------------------
@pytest.mark.parametrize("args, err, words", [
    (((3, 3), (2, 2), (1, 1), (0,)), ShapeError, ["max_pool", "padding", "one entry per spatial axis"]),
    (((), (), (), ()), ShapeError, ["max_pool", "spatial", "1 to 8"]),
    (((1,) * 9, (1,) * 9, (1,) * 9, (0,) * 9), ShapeError, ["1 to 8"]),
    (((3, 3), (0, 2), (1, 1), (0, 0)), ShapeError, ["kernel[0]", ">= 1"]),
    (((3, 3), (2, 2), (1, 0), (0, 0)), ShapeError, ["stride[1]", ">= 1"]),
    (((3, 3), (2, 5), (1, 1), (0, 0)), ShapeError, ["axis 1", "kernel 5"]),
    (((3, 3), (2, 2), (1, 1), (0, -1)), ShapeError, ["padding[1]"]),
    (((3, 3), (2, 2), (1, 1), "ab"), ShapeError, ["padding"]),
])
def test_primitive_geometry_errors(args, err, words):
    with pytest.raises(err) as info:
        P.max_pool(up(np.zeros(9), "cpu"), 1, *args)
    for word in words:
        assert word in str(info.value), f"{word!r} not in {str(info.value)!r}"


def test_primitive_buffer_and_scalar_errors():
    x = up(np.zeros(18), "cpu")
    with pytest.raises(ShapeError, match="max_pool: argument x must hold 9 elements"):
        P.max_pool(x, 1, (3, 3), (2, 2), (1, 1), (0, 0))
    with pytest.raises(ShapeError, match="max_pool_bwd: argument dy must hold 8 elements"):
        P.max_pool_bwd(x, up(np.zeros(3), "cpu"), 2, (3, 3), (2, 2), (1, 1), (0, 0))
    with pytest.raises(ShapeError, match="smooth_max_pool_bwd: argument y"):
        P.smooth_max_pool_bwd(x, up(np.zeros(3), "cpu"), up(np.zeros(8), "cpu"), 2, (3, 3), (2, 2), (1, 1), (0, 0), 1.0)
    for beta in (0.0, float("inf"), float("nan"), 1e-50, 1e39):
        with pytest.raises(ArgumentError, match="smooth_max_pool: beta"):
            P.smooth_max_pool(x, 2, (3, 3), (2, 2), (1, 1), (0, 0), beta)
    with pytest.raises(ArgumentError, match="beta"):
        P.smooth_max_pool(x, 2, (3, 3), (2, 2), (1, 1), (0, 0), "2")
    with pytest.raises(ShapeError, match="planes"):
        P.avg_pool(x, -1, (3, 3), (2, 2), (1, 1), (0, 0))
    x.release()
    with pytest.raises(BufferReleasedError):
        P.avg_pool(x, 2, (3, 3), (2, 2), (1, 1), (0, 0))


# -- determinism ------------------------------------------------------------------------------------------------
def test_backward_is_bitwise_repeatable(device):
    prev = deterministic_reductions()
    set_deterministic_reductions(True)
    try:
        rng = np.random.default_rng(9)
        planes, sp, k, s, p = 6, (23, 21), (3, 3), (2, 2), (1, 1)
        out = tuple((n + 2 * pp - kk) // ss + 1 for n, kk, ss, pp in zip(sp, k, s, p))
        x = rng.integers(-4, 5, planes * math.prod(sp)).astype(F32)  # ties: winners matter
        dy = rng.standard_normal(planes * math.prod(out)).astype(F32)
        xb, dyb = up(x, device), up(dy, device)
        y = P.smooth_max_pool(xb, planes, sp, k, s, p, 1.5)
        runs = {
            "max_pool_bwd": lambda: P.max_pool_bwd(xb, dyb, planes, sp, k, s, p),
            "avg_pool_bwd": lambda: P.avg_pool_bwd(dyb, planes, sp, k, s, p),
            "smooth_max_pool_bwd": lambda: P.smooth_max_pool_bwd(xb, y, dyb, planes, sp, k, s, p, 1.5),
        }
        for name, run in runs.items():
            first = bits(run().to_numpy())
            for _ in range(99):
                assert np.array_equal(bits(run().to_numpy()), first), f"{name} on {device} is not repeatable"
    finally:
        set_deterministic_reductions(prev)


# -- the contracts can fail: fake kernels are caught ------------------------------------------------------------
def _last_max_winners(x, planes, sp, k, s, p):
    table = spec.pool.window_table(sp, k, s, p)
    xp = x.reshape(planes, -1)
    win = np.full((planes, table.shape[0]), -1)
    for pl in range(planes):
        for o, row in enumerate(table):
            best = None
            for q in row[row >= 0]:
                if best is None or xp[pl, q] >= xp[pl, best]:
                    best = q
            win[pl, o] = -1 if best is None else best
    return win


def _fake_max_bwd_last_tie(x, dy, plan):
    planes, sp, k, s, p = plan[:5]
    win = _last_max_winners(x, planes, sp, k, s, p)
    dx = np.zeros((planes, x.size // max(planes, 1)), F32)
    for pl in range(planes):
        for o, q in enumerate(win[pl]):
            if q >= 0:
                dx[pl, q] += dy.reshape(planes, -1)[pl, o]
    return dx.reshape(-1)


def _fake_max_fmax(x, plan):
    planes, sp, k, s, p = plan[:5]
    table = spec.pool.window_table(sp, k, s, p)
    vals = np.where(table >= 0, x.reshape(planes, -1)[:, np.maximum(table, 0)], -np.inf)
    return np.fmax.reduce(vals, axis=2).astype(F32).reshape(-1)


def _fake_avg_valid_count(x, plan):
    planes, sp, k, s, p = plan[:5]
    table = spec.pool.window_table(sp, k, s, p)
    vals = np.where(table >= 0, x.reshape(planes, -1)[:, np.maximum(table, 0)], 0.0)
    return (vals.sum(axis=2) / np.maximum((table >= 0).sum(axis=1), 1)).astype(F32).reshape(-1)


def _fake_smooth_ignoring_padding(x, plan, beta):
    planes, sp, k, s, p = plan[:5]
    table = spec.pool.window_table(sp, k, s, p)
    v = np.where(table >= 0, beta * x.reshape(planes, -1).astype(np.float64)[:, np.maximum(table, 0)], -np.inf)
    m = v.max(axis=2, keepdims=True)
    return ((m[..., 0] + np.log(np.exp(v - m).sum(axis=2))) / beta).astype(F32).reshape(-1)


def _ulps_up(a, n):
    for _ in range(n):
        a = np.nextafter(a, F32(np.inf))
    return a


_X = f32(1, 4, 4, -2, 0.5, 3, 3, 3, -1, 2, 0, 7)
_G2 = (2, (2, 3), (2, 2), (1, 1), (1, 1))  # planes 2, spatial (2, 3), kernel 2x2, stride 1, padding 1
_DY = np.linspace(-1, 1, 2 * 12).astype(F32)
FAKES = [
    pytest.param("max_pool_bwd", _fake_max_bwd_last_tie, [_X, _DY, *_G2], id="max_bwd-last-tie-wins"),
    pytest.param("max_pool", _fake_max_fmax, [f32(1, NAN, 2, 3), 1, (4,), (2,), (2,), (0,)], id="max-ignores-nan"),
    pytest.param("avg_pool", _fake_avg_valid_count, [_X, *_G2], id="avg-count-exclude-pad"),
    pytest.param("avg_pool", lambda x, *g: _ulps_up(cpu_backend.pool.avg_pool(x, *g), 8), [_X, *_G2], id="avg-8ulp"),
    pytest.param("avg_pool_bwd", lambda dy, *g: _ulps_up(cpu_backend.pool.avg_pool_bwd(dy, *g), 3), [_DY, *_G2],
                 id="avg_bwd-3ulp"),
    pytest.param("smooth_max_pool", _fake_smooth_ignoring_padding, [_X, *_G2, 2.0], id="smooth-ignores-padding"),
    pytest.param("smooth_max_pool", lambda x, *g: _ulps_up(cpu_backend.pool.smooth_max_pool(x, *g), 8),
                 [_X, *_G2, 2.0], id="smooth-8ulp"),
    pytest.param("smooth_max_pool_bwd", lambda x, y, dy, *g: cpu_backend.pool.smooth_max_pool_bwd(x, y * F32(1.001), dy, *g),
                 [_X, smooth_y(_X, _G2, 2.0), _DY, *_G2, 2.0], id="smooth_bwd-perturbed-y"),
    pytest.param("smooth_max_pool_bwd", lambda x, y, dy, *g: _ulps_up(cpu_backend.pool.smooth_max_pool_bwd(x, y, dy, *g), 64),
                 [_X, smooth_y(_X, _G2, 2.0), _DY, *_G2, 2.0], id="smooth_bwd-64ulp"),
]


@pytest.mark.parametrize("name, fake, args", FAKES)
def test_contract_catches_wrong_kernel(monkeypatch, name, fake, args):
    info = TABLE[name]
    assert run_case(info, args, "cpu")[0].ok, "the genuine kernel must pass the very case the fake fails"
    monkeypatch.setattr(cpu_backend, name, fake)
    verdict = run_case(info, args, "cpu")[0]
    assert not verdict.ok, f"the contract of {name} accepted a wrong kernel (ratio {verdict.ratio})"


# -- the CPU's 2x2 / stride 2 kernels (the CNN's pool) -----------------------------------------------
@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("spatial", [(4, 6), (5, 7), (2, 2), (3, 2), (8, 16), (7, 10), (6, 5), (5, 34), (16, 16)])
def test_cpu_max_pool_2x2_stride_2(monkeypatch, spatial, parallel):
    """The 2x2 / stride 2 kernels (even w: _max22e_rows / _max22e_bwd, the pair passes; odd w:
    _max22_rows / _max22_bwd), serial and in Numba's threads (below and above _PARALLEL_WORK forced
    to 0): exact against the spec with NaN, +-inf, -0/+0 ties and repeated maxima, odd sizes
    leaving a last row / column outside every window (their dx is +0), and the same bits as the
    generic kernels."""
    cpu_pool = __import__("sys").modules["torchlean.kernels.cpu.pool"]
    if parallel:
        monkeypatch.setattr(cpu_pool, "_PARALLEL_WORK", 0)
    rng = np.random.default_rng(sum(spatial))
    planes = 6
    x = rng.integers(-2, 3, planes * math.prod(spatial)).astype(F32)
    specials = np.array([NAN, INF, -INF, -0.0, 0.0], F32)
    idx = rng.choice(x.size, size=x.size // 3, replace=False)
    x[idx] = specials[rng.integers(0, 5, idx.size)]
    x[: math.prod(spatial)] = -INF  # an all -inf plane
    out = tuple((s - 2) // 2 + 1 for s in spatial)
    dy = rng.standard_normal(planes * math.prod(out)).astype(F32)
    dy[::5] = -0.0
    geo = (planes, spatial, (2, 2), (2, 2), (0, 0))
    for name, args in [("max_pool", [x, *geo]), ("max_pool_bwd", [x, dy, *geo])]:
        verdict = run_case(TABLE[name], args, "cpu")[0]
        assert verdict.ok, f"{name} {spatial}: {verdict.detail}"
    plan = pool_plan_of(*geo)
    assert cpu_backend.max_pool_bwd(x, dy, plan).tobytes() == cpu_pool._bwd(0, x, cpu_pool._EMPTY, dy, *geo).tobytes()
    assert cpu_backend.max_pool(x, plan).tobytes() == cpu_pool._fwd(0, x, *geo).tobytes()


@pytest.mark.parametrize("spatial", [(4, 6), (7, 10), (3, 2), (16, 16), (9, 8)])
def test_cpu_max_pool_2x2_pair_passes_match_the_window_kernels(spatial):
    """The even-w pair passes give the bits of the per-window kernels they replace, on every plane
    range (a task of the parallel split starts at any plane), the first NaN of a window winning
    and -0/+0 ties keeping the first; dx entries outside the planes are left alone."""
    cpu_pool = __import__("sys").modules["torchlean.kernels.cpu.pool"]
    h, w = spatial
    oh, ow = h // 2, w // 2
    rng = np.random.default_rng(h * w)
    planes = 5
    x = rng.integers(-2, 3, planes * h * w).astype(F32)
    specials = np.array([NAN, -NAN, INF, -INF, -0.0, 0.0], F32)
    idx = rng.choice(x.size, size=x.size // 2, replace=False)
    x[idx] = specials[rng.integers(0, 6, idx.size)]
    dy = rng.standard_normal(planes * oh * ow).astype(F32)
    dy[::3] = -0.0
    for p0, p1 in [(0, planes), (1, 4), (4, 5), (2, 2)]:
        y0, y1 = np.full(planes * oh * ow, 7, F32), np.full(planes * oh * ow, 7, F32)
        cpu_pool._max22_rows(x, y0, p0, p1, h, w, oh, ow)
        cpu_pool._max22e_rows(x, y1, p0, p1, h, w, oh, ow)
        assert y0.tobytes() == y1.tobytes(), (spatial, p0, p1)
        d0, d1 = np.full(x.size, 7, F32), np.full(x.size, 7, F32)
        cpu_pool._max22_bwd(x, dy, d0, p0, p1, h, w, oh, ow)
        cpu_pool._max22e_bwd(x, dy, d1, p0, p1, h, w, oh, ow)
        assert d0.tobytes() == d1.tobytes(), (spatial, p0, p1)


# -- the checked-once caches: odd argument types keep their own result or error --------------------------------
# ops.pool caches its argument and shape checks and the pool primitives their geometry checks per
# plain-int key. True == 1 and np.int64(2) == 2 hash alike: a bool must still be refused, a NumPy int
# or a list still accepted with the same bits, and an error never cached. Each call runs after the
# plain call that fills the caches; the messages are those of the code before the caches.
@pytest.mark.parametrize("fn", ["max_pool2d", "avg_pool2d"])
@pytest.mark.parametrize("kw", [dict(kernel_size=np.int64(2)), dict(kernel_size=[2, 2]), dict(stride=[2]),
                                dict(stride=(np.int64(2), 2)), dict(padding=np.int32(0)), dict(padding=[0, 0])],
                         ids=str)
def test_cached_pool_checks_give_odd_int_types_the_same_bits(fn, kw):
    x = tl.tensor(np.random.default_rng(0).standard_normal((2, 3, 6, 6)).astype(F32), requires_grad=True)
    args = dict(kernel_size=2, stride=2, padding=0)
    ref = getattr(TF, fn)(x, **args)
    ref.sum().backward()
    ref_grad, x.grad = x.grad.numpy().tobytes(), None
    y = getattr(TF, fn)(x, **{**args, **kw})
    y.sum().backward()
    assert y.shape == ref.shape and y.numpy().tobytes() == ref.numpy().tobytes()
    assert x.grad.numpy().tobytes() == ref_grad
    dims = [6, (6, 6), (2, 2), (2, 2), (0, 0)]
    xb, yb = x.buffer, ref.buffer
    for odd in ([np.int64(6)] + dims[1:], dims[:1] + [[6, 6]] + dims[2:], dims[:2] + [(np.int64(2), 2)] + dims[3:]):
        assert P.max_pool(xb, *odd).to_numpy().tobytes() == P.max_pool(xb, *dims).to_numpy().tobytes()
        assert P.max_pool_bwd(xb, yb, *odd).to_numpy().tobytes() == P.max_pool_bwd(xb, yb, *dims).to_numpy().tobytes()


@pytest.mark.parametrize("call, exc, message", [
    (lambda x: TF.max_pool2d(x, True), ArgumentError,
     "max_pool2d: kernel_size must be an int or a tuple of 2 ints, got True"),
    (lambda x: TF.max_pool2d(x, 2, (True, 2)), ArgumentError,
     "max_pool2d: stride must be an int or a tuple of 2 ints, got (True, 2)"),
    (lambda x: TF.max_pool2d(x, 2, dilation=True), ArgumentError, "max_pool2d: dilation=True is not supported yet"),
    (lambda x: TF.avg_pool2d(x, 2, padding=True), ArgumentError,
     "avg_pool2d: padding must be an int or a tuple of 2 ints, got True"),
    (lambda x: tl.nn.MaxPool2d(True)(x), ArgumentError,
     "max_pool2d: kernel_size must be an int or a tuple of 2 ints, got True"),
    (lambda x: P.max_pool(x.buffer, True, (5, 5), (2, 2), (2, 2), (0, 0)), ShapeError,
     "max_pool: argument planes must be an unsigned 32-bit integer, got True (bool)"),
    (lambda x: P.max_pool(x.buffer, 2, (5, 5), (True, 2), (2, 2), (0, 0)), ShapeError,
     "max_pool: argument kernel[0] must be an unsigned 32-bit integer, got True (bool)"),
    (lambda x: P.max_pool_bwd(x.buffer, up(np.zeros(8), "cpu"), 2, (5, 5), (2, 2), (2, True), (0, 0)), ShapeError,
     "max_pool_bwd: argument stride[1] must be an unsigned 32-bit integer, got True (bool)"),
    (lambda x: P.avg_pool(x.buffer, 2, (5, 5), (2, 2), (2, 2), (False, 0)), ShapeError,
     "avg_pool: argument padding[0] must be an unsigned 32-bit integer, got False (bool)"),
], ids=lambda v: None)
def test_cached_pool_checks_still_refuse_bools(call, exc, message):
    x = tl.tensor(np.zeros((1, 2, 5, 5), F32))
    # fill the caches with the plain-int twins first
    TF.max_pool2d(x, 1, (1, 2))
    TF.avg_pool2d(x, 2, padding=1)
    tl.nn.MaxPool2d(1)(x)
    P.max_pool(up(np.zeros(25), "cpu"), 1, (5, 5), (2, 2), (2, 2), (0, 0))
    P.max_pool(x.buffer, 2, (5, 5), (1, 2), (2, 2), (0, 0))
    P.max_pool_bwd(x.buffer, up(np.zeros(16), "cpu"), 2, (5, 5), (2, 2), (2, 1), (0, 0))
    P.avg_pool(x.buffer, 2, (5, 5), (2, 2), (2, 2), (0, 0))
    for _ in range(2):  # and errors are not cached: the second call checks again
        with pytest.raises(exc) as info:
            call(x)
        assert str(info.value) == message


def test_cached_pool_checks_never_cache_errors():
    for _ in range(2):
        with pytest.raises(ShapeError, match="max_pool2d"):
            TF.max_pool2d(tl.tensor(np.zeros((1, 2, 1, 5), F32)), 2)
        assert TF.max_pool2d(tl.tensor(np.zeros((1, 2, 4, 4), F32)), 2).shape == (1, 2, 2, 2)
        with pytest.raises(ShapeError, match="max_pool: argument x must hold 50 elements"):
            P.max_pool(up(np.zeros(49), "cpu"), 2, (5, 5), (2, 2), (2, 2), (0, 0))
        assert P.max_pool(up(np.zeros(50), "cpu"), 2, (5, 5), (2, 2), (2, 2), (0, 0)).size == 8
