"""The classification toolkit: cross_entropy_rows, cross_entropy_reduce, gelu, gelu_tanh (primitives), cross_entropy,
nll_loss, gelu, embedding (front end), and dropout's cross-device mask.

The generic table tests (tests/test_primitives_parity.py) already run every primitive of this
family on random and edge inputs against spec + contract. Here:

* the contracts can fail (fake kernels are caught), and they cover the CUDA kernels' float32
  algorithms: a NumPy emulation of classify.cu, with every library call (expf, erfcf) pushed 3 ulp
  off its correctly rounded value in either direction, stays inside every bound;
* known answers for the conventions (ignored rows, label smoothing 0 / 1, infinities, NaN, the
  GELU limits and signed zeros, the tail where 1 + erf would cancel);
* every differentiable op against central finite differences of a float64 NumPy reference;
* agreement with torch.nn.functional (on CUDA, torch runs on CUDA), values and gradients;
* errors (each names the op and the argument), determinism of embedding's backward, and the same
  dropout mask on every device (DESIGN.md's Bernoulli rule).
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from scipy import special

import torchlean as tl
import torchlean.nn.functional as TF
from torchlean import contract, spec
from torchlean.kernels import cpu as cpu_backend
from torchlean.kernels.cpu import classify as cpu_classify  # the genuine kernels, whatever a test patches
from torchlean.errors import ArgumentError, DTypeError, IndexOutOfRangeError, ShapeError
from torchlean.runtime import Buffer, derive_key
from torchlean.runtime import primitives as P
from torchlean.runtime.determinism import deterministic_reductions, set_deterministic_reductions
from torchlean.spec import rng as spec_rng
from torchlean.testing.primitive_table import TABLE, run_case

from test_vjp import assert_vjp_matches_fd

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

F32 = np.float32
U = 2.0**-24
INF, NAN = np.inf, np.nan
NAMES = ["cross_entropy_rows", "cross_entropy_rows_bwd", "cross_entropy_reduce", "cross_entropy_reduce_bwd", "gelu",
         "gelu_bwd", "gelu_tanh", "gelu_tanh_bwd"]


def f32(*v) -> np.ndarray:
    return np.array(v, dtype=F32)


def up(a, device) -> Buffer:
    return Buffer.from_numpy(np.asarray(a, dtype=F32).reshape(-1), device)


def seeded(name: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(name.encode()))


# == contracts ======================================================================================
def _ce_naive_loss(x, rows, cols, targets, ls):
    """The primitive's formula taken literally in float32: lse - (1-ls) x_t - (ls/cols) sum x.
    For logits of 1e30 lse - x_t cancels to nothing."""
    loss, lse = cpu_classify.cross_entropy_rows(x, rows, cols, targets, ls)
    x2 = x.reshape(rows, cols)
    t = np.minimum(targets, cols - 1)
    naive = lse - F32(1 - ls) * x2[np.arange(rows), t] - F32(ls / cols) * x2.sum(axis=1, dtype=F32)
    return np.where(targets < cols, naive, 0).astype(F32), lse


def _ce_bwd_no_smoothing(x, lse, dloss, rows, cols, targets, ls):
    return cpu_classify.cross_entropy_rows_bwd(x, lse, dloss, rows, cols, targets, 0.0)


def _ce_reduce_unscaled(x, rows, cols, targets, ls, scale):
    """Forgets the scale ('mean' taken as 'sum')."""
    return cpu_classify.cross_entropy_reduce(x, rows, cols, targets, ls, 1.0)


def _ce_reduce_float32_sum(x, rows, cols, targets, ls, scale):
    """Sums the row losses in float32, one after the other: 2**24 + 1 + 1 + ... stays 2**24."""
    loss, lse = cpu_classify.cross_entropy_rows(x, rows, cols, targets, ls)
    acc = F32(0)
    for v in loss:
        acc = F32(acc + v)
    return f32(acc * F32(scale)), lse


def _ce_reduce_bwd_unscaled(x, lse, dloss, rows, cols, targets, ls, scale):
    return cpu_classify.cross_entropy_reduce_bwd(x, lse, dloss, rows, cols, targets, ls, 1.0)


# one row of loss ~2**24 (a huge target gap), then 4000 rows of loss log 2 ~ 0.69
_RED_X = np.concatenate([f32(2.0**24, 0.0), np.zeros(2 * 4000, F32)])
_RED_T = np.concatenate([[1], np.zeros(4000, np.int64)])


def _gelu_naive(x):  # 0.5 x (1 + erf(x / sqrt 2)) in float32: the tail cancels to 0
    x = x.astype(F32)
    return (F32(0.5) * x * (F32(1) + special.erf(x * F32(0.70710677)).astype(F32))).astype(F32)


def _gelu_tanh_naive(x):
    x = x.astype(F32)
    z = F32(0.7978846) * (x + F32(0.044715) * x * x * x)
    return (F32(0.5) * x * (F32(1) + np.tanh(z))).astype(F32)


_TAIL = np.linspace(-12, -3, 40).astype(F32)
_HUGE = f32(1e30, 1e30, -1e30, 1e30, 2e30, 1e30)
FAKE_KERNELS = [
    pytest.param("cross_entropy_rows", _ce_naive_loss, [_HUGE, 2, 3, np.array([0, 1]), 0.0], id="ce-lse-minus-xt"),
    pytest.param("cross_entropy_rows_bwd", _ce_bwd_no_smoothing,
                 [f32(1, 2, 3, 4, 0, -1),
                  spec.cross_entropy_rows(f32(1, 2, 3, 4, 0, -1), 2, 3, [0, 2], 0.2)[1].astype(F32),
                  f32(1, 1), 2, 3, np.array([0, 2]), float(F32(0.2))], id="ce_bwd-drops-smoothing"),
    pytest.param("cross_entropy_reduce", _ce_reduce_unscaled,
                 [f32(1, 2, 3, 4, 0, -1), 2, 3, np.array([0, 2]), 0.0, 0.5], id="ce_reduce-drops-scale"),
    pytest.param("cross_entropy_reduce", _ce_reduce_float32_sum, [_RED_X, 4001, 2, _RED_T, 0.0, 1.0],
                 id="ce_reduce-float32-running-sum"),
    pytest.param("cross_entropy_reduce_bwd", _ce_reduce_bwd_unscaled,
                 [f32(1, 2, 3, 4, 0, -1),
                  spec.cross_entropy_rows(f32(1, 2, 3, 4, 0, -1), 2, 3, [0, 2], 0.0)[1].astype(F32),
                  f32(1), 2, 3, np.array([0, 2]), 0.0, 0.25], id="ce_reduce_bwd-drops-scale"),
    pytest.param("gelu", _gelu_naive, [_TAIL], id="gelu-one-plus-erf"),
    pytest.param("gelu", lambda x: cpu_classify.gelu_tanh(x), [np.linspace(-3, 3, 31).astype(F32)],
                 id="gelu-is-tanh-form"),
    pytest.param("gelu_tanh", _gelu_tanh_naive, [_TAIL], id="gelu_tanh-one-plus-tanh"),
    pytest.param("gelu_bwd", lambda x, dy: dy * special.ndtr(x).astype(F32), [np.linspace(-3, 3, 31).astype(F32),
                 np.ones(31, F32)], id="gelu_bwd-drops-x-phi"),
    pytest.param("gelu_tanh_bwd", lambda x, dy: cpu_classify.gelu_bwd(x, dy),
                 [np.linspace(-3, 3, 31).astype(F32), np.ones(31, F32)], id="gelu_tanh_bwd-is-exact-form"),
]


@pytest.mark.parametrize("name, fake, args", FAKE_KERNELS)
def test_contract_catches_wrong_kernel(monkeypatch, name, fake, args):
    info = TABLE[name]
    assert run_case(info, args, "cpu")[0].ok, "the genuine kernel must pass the very case the fake fails"
    monkeypatch.setattr(cpu_backend, name, fake)
    verdict = run_case(info, args, "cpu")[0]
    assert not verdict.ok, f"the contract of {name} accepted a wrong kernel (ratio {verdict.ratio})"


# -- a float32 emulation of classify.cu, library calls 3 ulp off ------------------------------------
def _lib(v64, k):
    """float32(v) moved |k| ulps (k > 0: up): a library function within 3.5 ulp of the exact value,
    which (as expf and erfcf do) returns 0 where the result underflows and never changes sign."""
    v0 = np.asarray(v64, dtype=np.float64).astype(F32)
    v = v0
    for _ in range(abs(k)):
        v = np.nextafter(v, F32(np.inf if k > 0 else -np.inf)).astype(F32)
    return np.where((v0 == 0) | (np.sign(v) != np.sign(v0)), v0 * F32(0), v).astype(F32)


def _expf(a, k):
    return _lib(np.exp(np.asarray(a, np.float64)), k)


def _cu_gelu_cdf(x, k):
    a = (-x) * F32(0.70710677)
    return F32(0.5) * _lib(special.erfc(a.astype(np.float64)), k)


def _cu_gelu(x, k):
    y = x * _cu_gelu_cdf(x, k)
    return np.where(x == -INF, F32(-0.0), y).astype(F32)


def _cu_gelu_bwd(x, dy, k):
    d = _cu_gelu_cdf(x, k) + x * (_expf((F32(-0.5) * x) * x, k) * F32(0.3989423))
    d = np.where(x == INF, F32(1), np.where(x == -INF, F32(0), d)).astype(F32)
    return (dy * d).astype(F32)


def _cu_tanh_parts(x, k):
    z = F32(0.7978846) * (x + F32(0.044715) * (x * x * x))
    e = _expf(F32(-2) * np.abs(z), k)
    q = F32(1) / (F32(1) + e)
    return np.where(z >= 0, q, e * q).astype(F32), e, q


def _cu_gelu_tanh(x, k):
    s, _, _ = _cu_tanh_parts(x, k)
    return np.where(x == -INF, F32(-0.0), x * s).astype(F32)


def _cu_gelu_tanh_bwd(x, dy, k):
    s, e, q = _cu_tanh_parts(x, k)
    dz = F32(0.7978846) * (F32(1) + (F32(3) * F32(0.044715)) * (x * x))
    t2 = np.where(e > 0, ((F32(2) * x) * dz) * ((e * q) * q), F32(0))
    d = np.where(x == INF, F32(1), np.where(x == -INF, F32(0), s + t2)).astype(F32)
    return (dy * d).astype(F32)


def _cu_ce(x, rows, cols, targets, ls, k):
    loss, lse = np.zeros(rows, F32), np.full(rows, -INF, F32)
    ls = F32(ls)
    for r in range(rows if cols else 0):
        row = x[r * cols:(r + 1) * cols]
        m = np.fmax.reduce(row)
        t = int(targets[r])
        if np.isfinite(m):
            s = float(np.sum(_expf(row - m, k).astype(np.float64)))
            q = float(np.sum(np.float64(m) - row.astype(np.float64)))
            log_s = np.log(s)
            le, lo = np.float64(m) + log_s, log_s
            if t < cols:
                if ls < 1:
                    lo += (1.0 - np.float64(ls)) * (np.float64(m) - np.float64(row[t]))
                if ls > 0:
                    lo += np.float64(ls) / cols * q
        else:
            le = NAN if (np.isnan(row).any() or np.isnan(m)) else np.float64(m)
            lo = le
            if t < cols:
                if ls < 1:
                    lo -= (1.0 - np.float64(ls)) * np.float64(row[t])
                if ls > 0:
                    lo -= np.float64(ls) / cols * float(np.sum(row.astype(np.float64)))
        lse[r] = F32(le)
        loss[r] = F32(lo) if t < cols else F32(0)
    return loss, lse


def _cu_ce_bwd(x, lse, dloss, rows, cols, targets, ls, k):
    ls = F32(ls)
    b = ls / F32(cols) if cols else F32(0)
    ab = (F32(1) - ls) + b
    dx = np.zeros(rows * cols, F32).reshape(rows, cols)
    for r in range(rows):
        t = int(targets[r])
        if t >= cols:
            continue
        row = x[r * cols:(r + 1) * cols]
        c = np.where(np.arange(cols) == t, ab, b).astype(F32)
        dx[r] = dloss[r] * (_expf(row - lse[r], k) - c)
    return dx.reshape(-1)


def _cu_ce_reduce(x, rows, cols, targets, ls, scale, k):
    """The row losses as emulated, then tl_cross_entropy_reduce_sum_scale: 256 lanes in double, lanes in order."""
    loss, lse = _cu_ce(x, rows, cols, targets, ls, k)
    part = np.zeros(256)
    for r in range(rows):
        part[r % 256] += np.float64(loss[r])
    total = 0.0
    for v in part:
        total += v
    with np.errstate(all="ignore"):
        return f32(total * float(F32(scale))), lse


def _cu_ce_reduce_bwd(x, lse, dloss, rows, cols, targets, ls, scale, k):
    with np.errstate(all="ignore"):
        dl = np.full(rows, dloss[0] * F32(scale), F32)
    return _cu_ce_bwd(x, lse, dl, rows, cols, targets, ls, k)


_EMULATED = {"gelu": _cu_gelu, "gelu_bwd": _cu_gelu_bwd, "gelu_tanh": _cu_gelu_tanh,
             "gelu_tanh_bwd": _cu_gelu_tanh_bwd, "cross_entropy_rows": _cu_ce, "cross_entropy_rows_bwd": _cu_ce_bwd,
             "cross_entropy_reduce": _cu_ce_reduce, "cross_entropy_reduce_bwd": _cu_ce_reduce_bwd}


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("k", [-3, 3])
def test_contract_covers_cuda_float32_algorithm(name, k):
    """classify.cu's arithmetic, emulated in NumPy float32 with expf/erfcf 3 ulp off, meets every
    contract on the table's edge cases and on random inputs of every kind."""
    info = TABLE[name]
    rng = seeded(name + str(k))
    cases = [list(c) for c in info.edge_cases]
    for kind in info.kinds:
        for _ in range(6):
            cases.append(info.sample(rng, tuple(int(v) for v in rng.integers(0, 12, info.ndims)), kind))
    cases.append(info.sample(rng, (3, 200) if info.ndims == 2 else (2000,), "normal"))
    emulate = _EMULATED[name]
    for args in cases:
        sargs = [a.astype(np.float64) if isinstance(a, np.ndarray) and a.dtype == F32 else a for a in args]
        ref = info.spec(*sargs)
        out = emulate(*[a.copy() if isinstance(a, np.ndarray) else a for a in args], k)
        verdict = contract.compare(out, ref, info.contract.bound(ref, *sargs))
        assert verdict.ok, f"{name} (emulated CUDA, library {k:+d} ulp): {verdict.detail}; args {args}"


# == known answers ==================================================================================
def test_cross_entropy_rows_known_answers(device):
    # uniform logits: log C for every target and every smoothing; lse = x + log C
    for ls in (0.0, 0.3, 1.0):
        loss, lse = P.cross_entropy_rows(up(np.full(14, 5.0), device), 2, 7, [0, 6], ls)
        np.testing.assert_allclose(loss.to_numpy(), np.log(7.0), rtol=4 * U)
        np.testing.assert_allclose(lse.to_numpy(), 5.0 + np.log(7.0), rtol=4 * U)
    # one class: loss 0, lse = x
    loss, lse = P.cross_entropy_rows(up([3.0, -2.0], device), 2, 1, [0, 0], 0.1)
    np.testing.assert_array_equal(loss.to_numpy(), f32(0, 0))
    np.testing.assert_array_equal(lse.to_numpy(), f32(3, -2))
    # ignored rows (target >= cols, including 2**32 - 1): loss exactly +0, lse still computed
    loss, lse = P.cross_entropy_rows(up([1, 2, 3, 4, 5, 6], device), 2, 3, [3, 2**32 - 1], 0.5)
    assert loss.to_numpy().tolist() == [0.0, 0.0] and not np.signbit(loss.to_numpy()).any()
    np.testing.assert_allclose(lse.to_numpy(), [np.log(np.exp([1, 2, 3]).sum()), np.log(np.exp([4, 5, 6]).sum())],
                               rtol=4 * U)
    # ls = 1: the loss does not depend on the target: lse - mean(x)
    a = P.cross_entropy_rows(up([0, 1, 5], device), 1, 3, [0], 1.0)[0].to_numpy()
    b = P.cross_entropy_rows(up([0, 1, 5], device), 1, 3, [2], 1.0)[0].to_numpy()
    assert a == b
    np.testing.assert_allclose(a, np.log(np.exp([0, 1, 5]).sum()) - 2.0, rtol=8 * U)


def test_cross_entropy_rows_infinities_and_nan(device):
    x = f32(-INF, 0.5, -INF, 2.0,     # -inf logits off the target: ordinary
            -INF, 0.5, 1.0, 2.0,      # -inf at the target: p_t = 0, loss +inf
            0.0, INF, 1.0, 2.0,       # +inf off the target: loss +inf (PyTorch: NaN), lse +inf
            -INF, -INF, -INF, -INF,   # a row of -inf: lse -inf, loss NaN
            1.0, NAN, 2.0, 0.0)       # NaN: NaN
    loss, lse = (b.to_numpy() for b in P.cross_entropy_rows(up(x, device), 5, 4, [3, 0, 0, 1, 0], 0.0))
    np.testing.assert_allclose(loss[0], np.log(np.exp(0.5) + np.exp(2.0)) - 2.0, rtol=8 * U)
    assert loss[1] == INF and loss[2] == INF and np.isnan(loss[3]) and np.isnan(loss[4])
    assert lse[2] == INF and lse[3] == -INF and np.isnan(lse[4])
    # huge logits: no cancellation (lse - x_t in float32 would give 0)
    loss, _ = P.cross_entropy_rows(up([1e30, 1e30, -1e30], device), 1, 3, [0], 0.0)
    np.testing.assert_allclose(loss.to_numpy(), np.log(2.0), rtol=4 * U)


def test_cross_entropy_rows_bwd_rows_sum_to_zero_and_ignored_rows_are_zero(device):
    rng = seeded("ce-bwd-sum")
    x = (rng.standard_normal(4 * 9) * 3).astype(F32)
    t = np.array([0, 8, 9, 4])
    _, lse = P.cross_entropy_rows(up(x, device), 4, 9, t, 0.25)
    dx = P.cross_entropy_rows_bwd(up(x, device), lse, up([1, 2, 3, 4], device), 4, 9, t, 0.25).to_numpy()
    dx = dx.reshape(4, 9).astype(np.float64)
    np.testing.assert_allclose(dx.sum(axis=1), 0.0, atol=1e-6 * 4)
    assert (dx[2] == 0).all() and not np.signbit(dx[2]).any()


@pytest.mark.parametrize("rows, cols", [(128, 4), (300, 10), (3, 1500), (2, 20000), (1, 7)])
def test_cross_entropy_reduce_is_rows_then_fixed_order_sum(device, rows, cols):
    """The reduced primitive equals, bit for bit: its own rows (cross_entropy_rows), summed in
    double by 256 lanes in order and scaled once; and its backward equals cross_entropy_rows_bwd
    of the cotangent scaled in float32 and broadcast to every row (the composition it replaces).
    Row lengths reach every CUDA row path (warp, block, split)."""
    rng = seeded(f"ce-reduce-{rows}-{cols}")
    x = (rng.standard_normal(rows * cols) * 3).astype(F32)
    t = rng.integers(0, cols + 1, rows)
    for ls, scale in ((0.0, 1.0), (float(F32(0.1)), float(F32(1 / rows)))):
        out, lse = P.cross_entropy_reduce(up(x, device), rows, cols, t, ls, scale)
        loss_r, lse_r = P.cross_entropy_rows(up(x, device), rows, cols, t, ls)
        np.testing.assert_array_equal(lse.to_numpy(), lse_r.to_numpy())
        lanes = np.zeros(256)
        for r, v in enumerate(loss_r.to_numpy()):
            lanes[r % 256] += np.float64(v)
        assert out.to_numpy().tolist() == [float(F32(sum(lanes.tolist()) * scale))]
        dloss = f32(rng.standard_normal())
        dx = P.cross_entropy_reduce_bwd(up(x, device), lse, up(dloss, device), rows, cols, t, ls, scale)
        per_row = P.broadcast_to(P.scale(up(dloss, device), scale), (), (rows,), (0,))
        dx_ref = P.cross_entropy_rows_bwd(up(x, device), lse, per_row, rows, cols, t, ls)
        np.testing.assert_array_equal(dx.to_numpy(), dx_ref.to_numpy())


def test_cross_entropy_reduce_special_scales(device):
    x, t = f32(1, 2, 3, 4), np.array([0, 1])
    out, _ = P.cross_entropy_reduce(up(x, device), 2, 2, np.array([5, 2]), 0.0, float("nan"))
    assert np.isnan(out.to_numpy()[0])  # 'mean' over no counted row: NaN, as in PyTorch
    out, _ = P.cross_entropy_reduce(up(np.zeros(0), device), 0, 3, np.zeros(0, np.int64), 0.0, 1.0)
    assert out.to_numpy().tolist() == [0.0]  # an empty sum
    out, _ = P.cross_entropy_reduce(up(x, device), 2, 2, t, 0.0, -0.5)
    np.testing.assert_allclose(out.to_numpy(), -0.5 * 2 * (np.log1p(np.exp(-1.0)) + 1.0) + 0.5, rtol=8 * U)


def test_cpu_float32_gelu_within_contract_on_a_dense_grid():
    """The CPU GELUs (erf form) evaluate Phi in float32 with their own erfcx polynomial and
    expf: measured within 0.63 of the contract bounds over every 13th float32 in [-14.5, 20]
    (kernels/cpu/classify.py). Here a dense grid of 400k points over the range where the
    result is a normal float32, and small magnitudes down to 1e-30, must stay within 0.8."""
    x = np.concatenate([np.linspace(-14.5, 10.0, 300001, dtype=F32),
                        (10.0 ** np.linspace(-30, 1, 50000)).astype(F32) * F32(-1.0),
                        (10.0 ** np.linspace(-30, 1, 50000)).astype(F32)])
    dy = np.resize(f32(1.0, -2.0, 0.5, 3.0), x.size)
    x64, dy64 = x.astype(np.float64), dy.astype(np.float64)
    for name, args, args64 in (("gelu", (x,), (x64,)), ("gelu_bwd", (x, dy), (x64, dy64))):
        out = getattr(cpu_classify, name)(*args)
        ref = getattr(spec, name)(*args64)
        with np.errstate(all="ignore"):
            ratio = np.abs(out - ref) / contract.CONTRACTS[name].bound(ref, *args64)
        assert np.nanmax(ratio) < 0.8, f"{name}: err/bound {np.nanmax(ratio):.3f} at x = {x[np.nanargmax(ratio)]!r}"


def test_gelu_limits_and_signed_zeros(device):
    x = f32(INF, -INF, NAN, 0.0, -0.0, -1e-30, -200.0)
    for fwd, bwd in ((P.gelu, P.gelu_bwd), (P.gelu_tanh, P.gelu_tanh_bwd)):
        y = fwd(up(x, device)).to_numpy()
        assert y[0] == INF and y[1] == 0 and np.signbit(y[1]) and np.isnan(y[2])
        assert y[3] == 0 and not np.signbit(y[3]) and y[4] == 0 and np.signbit(y[4])
        assert y[6] == 0 and np.signbit(y[6])  # underflows to -0, never NaN
        np.testing.assert_allclose(y[5], -0.5e-30, rtol=4 * U)
        d = bwd(up(x, device), up(np.ones(7), device)).to_numpy()
        assert d[0] == 1 and d[1] == 0 and np.isnan(d[2]) and d[3] == 0.5 and d[4] == 0.5
    # the tail is accurate relative to the tiny result (1 + erf would give 0)
    x = f32(-5.0, -8.0, -10.0, -12.0)
    np.testing.assert_allclose(P.gelu(up(x, device)).to_numpy(), x * special.ndtr(x.astype(np.float64)), rtol=1e-5,
                               atol=2**-149)
    z = np.sqrt(2 / np.pi) * (x.astype(np.float64) + 0.044715 * x.astype(np.float64) ** 3)
    np.testing.assert_allclose(P.gelu_tanh(up(x, device)).to_numpy(), x * special.expit(2 * z), rtol=1e-5,
                               atol=2**-149)


# == finite differences ==============================================================================
def np_log_softmax(x, axis):
    m = np.max(x, axis=axis, keepdims=True)
    return x - m - np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True))


def ref_cross_entropy(x, t, reduction="mean", ls=0.0, ignore_index=-100):
    """float64 PyTorch semantics for class-index targets; x (C,), (N, C) or (N, C, d...)."""
    x = np.asarray(x, np.float64)
    t = np.asarray(t)
    if x.ndim == 1:
        x, t = x[None], t[None]
    lsm = np_log_softmax(x, 1)
    valid = t != ignore_index
    nll = -np.take_along_axis(lsm, np.where(valid, t, 0)[:, None], axis=1)[:, 0]
    per = np.where(valid, (1 - ls) * nll + ls * (-lsm.mean(axis=1)), 0.0)
    if reduction == "none":
        return per.reshape(np.shape(t)) if np.ndim(t) else per[0]
    return per.sum() if reduction == "sum" else per.sum() / valid.sum()


def ref_cross_entropy_probs(x, p, reduction="mean", ls=0.0):
    x, p = np.asarray(x, np.float64), np.asarray(p, np.float64)
    cdim = 0 if x.ndim == 1 else 1
    c = x.shape[cdim]
    p = p * (1 - ls) + ls / c
    per = -(p * np_log_softmax(x, cdim)).sum(axis=cdim)
    if reduction == "none":
        return per
    return per.sum() if reduction == "sum" else per.sum() / (x.size // c)


def ref_nll(x, t, reduction="mean", ignore_index=-100):
    x, t = np.asarray(x, np.float64), np.asarray(t)
    if x.ndim == 1:
        x, t = x[None], t[None]
    valid = t != ignore_index
    per = np.where(valid, -np.take_along_axis(x, np.where(valid, t, 0)[:, None], axis=1)[:, 0], 0.0)
    if reduction == "none":
        return per.reshape(np.shape(t)) if np.ndim(t) else per[0]
    return per.sum() if reduction == "sum" else per.sum() / valid.sum()


def ref_gelu(x):
    return 0.5 * x * (1 + special.erf(x / np.sqrt(2)))


def ref_gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


T2 = np.array([1, 4, -100, 0, 4])          # (5,) targets of a (5, 5) input, one ignored
T4 = np.array([[[0, 2], [1, 1]], [[2, -100], [0, 1]]])  # (2, 2, 2) targets of a (2, 3, 2, 2) input
IDX = np.array([[0, 3, 3], [5, 3, 1], [1, 1, 3]])       # repeated indices into 6 embeddings


def _ce_case(name, shape, t, reduction, ls, scale=2.0):
    return pytest.param(name, lambda rng: [(rng.standard_normal(shape) * scale).astype(F32)],
                        lambda x: TF.cross_entropy(x, tl.tensor(t), reduction=reduction, label_smoothing=ls),
                        lambda x: ref_cross_entropy(x, t, reduction, ls), id=name)


def _embed_ref(w, pad=None):
    w0 = np.array(w, np.float64, copy=True)

    def ref(wv):
        out = wv[IDX]
        if pad is not None:  # padding rows are read but get no gradient: constants for the FD
            out = np.where((IDX == pad)[..., None], w0[IDX], out)
        return out
    return ref


FD_CASES = [
    _ce_case("ce_mean", (5, 5), T2, "mean", 0.0),
    _ce_case("ce_sum_ls", (5, 5), T2, "sum", 0.1),
    _ce_case("ce_none_ls1", (5, 5), T2, "none", 1.0),
    _ce_case("ce_mean_ls", (5, 5), T2, "mean", 0.3),
    _ce_case("ce_nd_mean", (2, 3, 2, 2), T4, "mean", 0.1),
    _ce_case("ce_nd_none", (2, 3, 2, 2), T4, "none", 0.0),
    _ce_case("ce_1d", (6,), np.array(4), "mean", 0.2),
    pytest.param("ce_probs", lambda rng: [(rng.standard_normal((4, 5)) * 2).astype(F32),
                                          rng.dirichlet(np.ones(5), 4).astype(F32)],
                 lambda x, p: TF.cross_entropy(x, p, label_smoothing=0.15),
                 lambda x, p: ref_cross_entropy_probs(x, p, "mean", 0.15), id="ce_probs"),
    pytest.param("ce_probs_nd_none", lambda rng: [(rng.standard_normal((2, 3, 4)) * 2).astype(F32),
                                                  rng.uniform(0, 1, (2, 3, 4)).astype(F32)],
                 lambda x, p: TF.cross_entropy(x, p, reduction="none"),
                 lambda x, p: ref_cross_entropy_probs(x, p, "none"), id="ce_probs_nd_none"),
    pytest.param("nll_mean", lambda rng: [rng.standard_normal((5, 5)).astype(F32)],
                 lambda x: TF.nll_loss(x, tl.tensor(T2)), lambda x: ref_nll(x, T2), id="nll_mean"),
    pytest.param("nll_nd_sum", lambda rng: [rng.standard_normal((2, 3, 2, 2)).astype(F32)],
                 lambda x: TF.nll_loss(x, T4, reduction="sum"), lambda x: ref_nll(x, T4, "sum"), id="nll_nd_sum"),
    pytest.param("nll_none", lambda rng: [rng.standard_normal((5, 5)).astype(F32)],
                 lambda x: TF.nll_loss(x, T2, reduction="none"), lambda x: ref_nll(x, T2, "none"), id="nll_none"),
    pytest.param("log_softmax_then_nll", lambda rng: [(rng.standard_normal((5, 5)) * 2).astype(F32)],
                 lambda x: TF.nll_loss(TF.log_softmax(x, 1), T2), lambda x: ref_cross_entropy(x, T2), id="lsm_nll"),
    pytest.param("gelu", lambda rng: [(rng.standard_normal((4, 6)) * 2.5).astype(F32)], TF.gelu, ref_gelu, id="gelu"),
    pytest.param("gelu_tanh", lambda rng: [(rng.standard_normal((4, 6)) * 2.5).astype(F32)],
                 lambda x: TF.gelu(x, approximate="tanh"), ref_gelu_tanh, id="gelu_tanh"),
    pytest.param("embedding", lambda rng: [rng.standard_normal((6, 4)).astype(F32)],
                 lambda w: TF.embedding(tl.tensor(IDX), w), lambda w: w[IDX], id="embedding"),
    pytest.param("embedding_padding", lambda rng: [rng.standard_normal((6, 4)).astype(F32)],
                 lambda w: TF.embedding(IDX, w, padding_idx=3), None, id="embedding_padding"),
]


@pytest.mark.parametrize("name, inputs, ours, ref", FD_CASES)
def test_vjp_matches_finite_differences(name, inputs, ours, ref, device):
    rng = seeded(name)
    xs = inputs(rng)
    if ref is None:  # embedding with padding_idx = 3: the padding rows are constants of the reference
        ref = _embed_ref(xs[0], pad=3)
    ref_out = np.asarray(ref(*[x.astype(np.float64) for x in xs]), np.float64)
    w = rng.standard_normal(ref_out.shape).astype(F32)
    assert_vjp_matches_fd(name, ours, ref, xs, ref_out, w, device)


def test_reduced_cross_entropy_is_one_primitive_call_each_way(monkeypatch):
    """'mean' and 'sum' run cross_entropy_reduce forward and cross_entropy_reduce_bwd backward, and
    nothing else (no reduce_sum, scale or broadcast around the row primitive)."""
    calls = []
    for name in ("cross_entropy_reduce", "cross_entropy_reduce_bwd", "cross_entropy_rows", "reduce_sum",
                 "scale", "broadcast_to"):
        real = getattr(P, name)
        monkeypatch.setattr(P, name, lambda *a, _n=name, _f=real: (calls.append(_n), _f(*a))[1])
    for reduction in ("mean", "sum"):
        calls.clear()
        x = tl.tensor(np.arange(12, dtype=F32).reshape(3, 4) / 4, requires_grad=True)
        TF.cross_entropy(x, [0, 3, 1], reduction=reduction).backward()
        assert calls == ["cross_entropy_reduce", "cross_entropy_reduce_bwd"], (reduction, calls)


def test_cross_entropy_is_one_node_on_2d_input():
    x = tl.tensor(np.ones((3, 4), F32), requires_grad=True)
    y = TF.cross_entropy(x, [0, 1, 2])
    assert y._node.name == "cross_entropy" and y._node.parents[0] is x
    g = TF.gelu(x)
    assert g._node.name == "gelu" and g._node.parents[0] is x


def test_embedding_padding_row_gets_no_gradient(device):
    w = tl.tensor(np.arange(12, dtype=F32).reshape(4, 3), device=device, requires_grad=True)
    e = TF.embedding(tl.tensor([[0, 2], [2, 1]]), w, padding_idx=-2)  # -2 is row 2
    assert e.shape == (2, 2, 3)
    np.testing.assert_array_equal(e.numpy()[0, 1], f32(6, 7, 8))  # the padding row is still read
    e.sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), f32([1, 1, 1], [1, 1, 1], [0, 0, 0], [0, 0, 0]).reshape(4, 3))


# == PyTorch ========================================================================================
torch = pytest.importorskip("torch", reason="torch is the second oracle here; install torchlean[test]")
TFN = torch.nn.functional


def _torch_device(device: str) -> str:
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here: the comparison would not run torch on the GPU")
    return device


def _both(fn_ours, fn_torch, xs, device, grad_w=None):
    """(ours value, torch value, ours grads, torch grads) for float inputs xs (numpy float32)."""
    tdev = _torch_device(device)
    ts = [tl.tensor(x, device=device, requires_grad=True) for x in xs]
    tt = [torch.tensor(x, device=tdev, requires_grad=True) for x in xs]
    y, yt = fn_ours(*ts), fn_torch(*tt)
    w = np.ones(y.shape, F32) if grad_w is None else grad_w
    y.backward(tl.tensor(w, device=device))
    yt.backward(torch.tensor(w, device=tdev))
    return (y.numpy(), yt.detach().cpu().numpy(), [t.grad.numpy() for t in ts],
            [t.grad.detach().cpu().numpy() for t in tt])


def assert_close(ours, theirs, tol, what):
    ours, theirs = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
    assert ours.shape == theirs.shape, f"{what}: shape {ours.shape} vs torch {theirs.shape}"
    err = np.abs(ours - theirs)
    tol = np.broadcast_to(np.asarray(tol, np.float64), err.shape)
    assert (err <= tol).all(), f"{what}: worst err/tol {float(np.max(err / np.maximum(tol, 1e-300))):.3g}\n" \
                               f"ours={ours}\ntorch={theirs}"


# Tolerances. Both sides are float32 computations of the same value: ours within the contract
# (a few u relative to the loss, see contract/classify.py), PyTorch's log_softmax within about
# 4u (|x_j - m| + log S) per row and gamma(N) over the reduction. So the loss may differ by
# 16u (max|x - m| + log C + |loss|) per row (summed for 'sum', averaged for 'mean'), and
# dx = dl (p - c) by 16u |dl| (1 + max|x - m|) (exp's argument rounding). A wrong smoothing,
# ignore rule or reduction changes the values by ~1e-2, far outside.
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("ls", [0.0, 0.1, 1.0])
def test_cross_entropy_matches_torch(device, reduction, ls):
    rng = seeded(f"torch-ce-{reduction}-{ls}")
    for shape, t in (((6, 7), np.array([0, 6, -100, 3, 3, 1])),
                     ((3, 5, 2, 3), rng.integers(0, 5, (3, 2, 3))),
                     ((9,), np.array(2))):
        x = (rng.standard_normal(shape) * 3).astype(F32)
        if t.ndim and t.size > 4:
            t.reshape(-1)[4] = -100
        ours, theirs, g, gt = _both(
            lambda a: TF.cross_entropy(a, tl.tensor(t), reduction=reduction, label_smoothing=ls),
            lambda a: TFN.cross_entropy(a, torch.tensor(t, device=a.device), reduction=reduction, label_smoothing=ls),
            [x], device)
        spread = float(np.max(np.abs(x))) * 2 + np.log(shape[1] if len(shape) > 1 else shape[0])
        rows = np.size(t)
        scale = rows if reduction == "sum" else 1.0
        assert_close(ours, theirs, 16 * U * (spread + np.abs(theirs)) * scale,
                     f"cross_entropy {shape} {reduction} ls={ls}")
        dl = 1.0 / max(np.count_nonzero(t != -100), 1) if reduction == "mean" else 1.0
        assert_close(g[0], gt[0], 16 * U * dl * (1 + spread), f"cross_entropy grad {shape} {reduction} ls={ls}")


def test_cross_entropy_probability_targets_match_torch(device):
    rng = seeded("torch-ce-probs")
    x = (rng.standard_normal((4, 6)) * 2).astype(F32)
    p = rng.dirichlet(np.ones(6), 4).astype(F32)
    for reduction in ("mean", "sum", "none"):
        ours, theirs, g, gt = _both(lambda a, b: TF.cross_entropy(a, b, reduction=reduction, label_smoothing=0.2),
                                    lambda a, b: TFN.cross_entropy(a, b, reduction=reduction, label_smoothing=0.2),
                                    [x, p], device)
        assert_close(ours, theirs, 64 * U * (1 + np.abs(theirs)) * 6, f"probs {reduction}")
        for k in range(2):
            assert_close(g[k], gt[k], 64 * U * (1 + np.abs(gt[k])) * 6, f"probs grad {k} {reduction}")


def test_nll_loss_matches_torch(device):
    rng = seeded("torch-nll")
    for shape, t in (((5, 4), np.array([3, -100, 0, 1, 1])), ((2, 4, 3), np.array([[0, 3, -100], [2, 2, 1]]))):
        x = rng.standard_normal(shape).astype(F32)
        for reduction in ("mean", "sum", "none"):
            ours, theirs, g, gt = _both(lambda a: TF.nll_loss(a, t, reduction=reduction),
                                        lambda a: TFN.nll_loss(a, torch.tensor(t, device=a.device),
                                                               reduction=reduction),
                                        [x], device)
            assert_close(ours, theirs, 4 * U * np.abs(x).sum(), f"nll_loss {shape} {reduction}")
            assert_close(g[0], gt[0], 2 * U * np.abs(gt[0]), f"nll_loss grad {shape} {reduction}")


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_matches_torch(device, approximate):
    x = np.concatenate([np.linspace(-6, 6, 241), [-30.0, 30.0, 1e-30, 0.0]]).astype(F32)
    w = seeded("gelu-w" + approximate).standard_normal(x.shape).astype(F32)
    ours, theirs, g, gt = _both(lambda a: TF.gelu(a, approximate=approximate),
                                lambda a: TFN.gelu(a, approximate=approximate), [x], device, grad_w=w)
    # PyTorch evaluates 1 + erf / 1 + tanh: absolute error ~ u|x| in the tail where we are relative
    ax = np.abs(x.astype(np.float64))
    assert_close(ours, theirs, 16 * U * (np.abs(theirs) + ax), f"gelu {approximate}")
    assert_close(g[0], gt[0], 16 * U * np.abs(w) * (1 + ax * ax), f"gelu grad {approximate}")


def test_embedding_matches_torch(device):
    rng = seeded("torch-embedding")
    w = rng.standard_normal((7, 5)).astype(F32)
    idx = rng.integers(0, 7, (4, 6))
    gw = rng.standard_normal((4, 6, 5)).astype(F32)
    ours, theirs, g, gt = _both(lambda a: TF.embedding(tl.tensor(idx), a, padding_idx=2),
                                lambda a: TFN.embedding(torch.tensor(idx, device=a.device), a, padding_idx=2),
                                [w], device, grad_w=gw)
    np.testing.assert_array_equal(ours, theirs)  # a gather: bit for bit
    hits = np.bincount(idx.reshape(-1), minlength=7).max()
    sums = np.zeros((7, 5))
    np.add.at(sums, idx.reshape(-1), np.abs(gw.reshape(-1, 5)))
    assert_close(g[0], gt[0], 2 * hits * U * sums, "embedding grad")
    assert (g[0][2] == 0).all()


# == errors =========================================================================================
def _raises(exc, fn, *needles):
    with pytest.raises(exc) as info:
        fn()
    msg = str(info.value)
    for n in needles:
        assert n in msg, f"message {msg!r} lacks {n!r}"


def test_front_end_errors():
    x = tl.tensor(np.zeros((3, 4), F32), requires_grad=True)
    t = tl.tensor([0, 1, 2])
    # weight= and the legacy size_average / reduce flags work as in PyTorch (tests/test_nn_more.py)
    assert TF.cross_entropy(x, t, weight=tl.ones(4)).item() == pytest.approx(TF.cross_entropy(x, t).item())
    assert TF.cross_entropy(x, t, reduce=False).shape == (3,)
    _raises(ShapeError, lambda: TF.cross_entropy(x, t, weight=tl.ones(5)), "cross_entropy", "weight")
    _raises(ArgumentError, lambda: TF.cross_entropy(x, t, reduction="avg"), "cross_entropy", "reduction")
    _raises(ArgumentError, lambda: TF.cross_entropy(x, t, label_smoothing=1.5), "cross_entropy", "label_smoothing")
    _raises(ArgumentError, lambda: TF.cross_entropy(x, t, label_smoothing=-0.1), "label_smoothing")
    _raises(IndexOutOfRangeError, lambda: TF.cross_entropy(x, [0, 4, 1]), "cross_entropy", "target 4")
    _raises(IndexOutOfRangeError, lambda: TF.cross_entropy(x, [0, -1, 1]), "target -1")
    _raises(IndexOutOfRangeError, lambda: TF.cross_entropy(x, [0, -100, 7], ignore_index=-100), "target 7")
    _raises(ShapeError, lambda: TF.cross_entropy(x, [0, 1]), "cross_entropy", "target", "(3,)")
    _raises(ShapeError, lambda: TF.cross_entropy(x, np.zeros((3, 5), F32)), "cross_entropy", "probability")
    _raises(ShapeError, lambda: TF.cross_entropy(tl.tensor(1.0), [0]), "cross_entropy", "0-d")
    _raises(DTypeError, lambda: TF.cross_entropy(x, np.array([True, False, True])), "cross_entropy", "target")
    _raises(ShapeError, lambda: TF.nll_loss(x, t, weight=tl.ones(3)), "nll_loss", "weight")
    _raises(DTypeError, lambda: TF.nll_loss(x, np.zeros(3, F32)), "nll_loss", "target")
    _raises(IndexOutOfRangeError, lambda: TF.nll_loss(x, [0, 9, 1]), "nll_loss", "target 9")
    _raises(ArgumentError, lambda: TF.gelu(x, approximate="sigmoid"), "gelu", "approximate")
    w = tl.tensor(np.zeros((5, 2), F32), requires_grad=True)
    _raises(ArgumentError, lambda: TF.embedding(t, w, max_norm=1.0), "embedding", "max_norm")
    _raises(ArgumentError, lambda: TF.embedding(t, w, scale_grad_by_freq=True), "embedding", "scale_grad_by_freq")
    _raises(ArgumentError, lambda: TF.embedding(t, w, sparse=True), "embedding", "sparse")
    _raises(ArgumentError, lambda: TF.embedding(t, w, padding_idx=5), "embedding", "padding_idx")
    _raises(IndexOutOfRangeError, lambda: TF.embedding([0, 5], w), "embedding", "index 5")
    _raises(IndexOutOfRangeError, lambda: TF.embedding([-1], w), "embedding", "index -1")
    _raises(DTypeError, lambda: TF.embedding(tl.tensor([0.0, 1.0]), w), "embedding")
    _raises(ShapeError, lambda: TF.embedding(t, tl.tensor(np.zeros(5, F32))), "embedding", "2-D")


def test_primitive_errors():
    x = up(np.zeros(6), "cpu")
    _raises(ArgumentError, lambda: P.cross_entropy_rows(x, 2, 3, [0, 1], 1.5), "cross_entropy_rows", "label_smoothing")
    _raises(ArgumentError, lambda: P.cross_entropy_rows(x, 2, 3, [0, 1], float("nan")), "label_smoothing")
    _raises(ShapeError, lambda: P.cross_entropy_rows(x, 2, 3, [0, 1, 2], 0.0), "cross_entropy_rows", "targets")
    _raises(ShapeError, lambda: P.cross_entropy_rows(x, 2, 4, [0, 1], 0.0), "cross_entropy_rows", "x")
    _raises(ArgumentError, lambda: P.cross_entropy_rows(x, 2, 3, [0, -1], 0.0), "cross_entropy_rows", "targets", "-1")
    _raises(ArgumentError, lambda: P.cross_entropy_rows(x, 2, 3, [0, 2**32], 0.0), "targets")
    _raises(ShapeError, lambda: P.cross_entropy_rows(x, -2, 3, [0, 1], 0.0), "cross_entropy_rows", "rows")
    lse, dl = up([0, 0], "cpu"), up([1, 1], "cpu")
    _raises(ShapeError, lambda: P.cross_entropy_rows_bwd(x, up([0], "cpu"), dl, 2, 3, [0, 1], 0.0),
            "cross_entropy_rows_bwd", "lse")
    _raises(ShapeError, lambda: P.cross_entropy_rows_bwd(x, lse, up([1], "cpu"), 2, 3, [0, 1], 0.0), "dloss")
    _raises(ArgumentError, lambda: P.cross_entropy_rows_bwd(x, lse, dl, 2, 3, [0, 1], 2.0), "label_smoothing")
    _raises(ArgumentError, lambda: P.cross_entropy_reduce(x, 2, 3, [0, 1], 0.0, "half"), "cross_entropy_reduce",
            "scale")
    _raises(ShapeError, lambda: P.cross_entropy_reduce(x, 2, 3, [0], 0.0, 1.0), "cross_entropy_reduce", "targets")
    _raises(ShapeError, lambda: P.cross_entropy_reduce_bwd(x, lse, dl, 2, 3, [0, 1], 0.0, 1.0),
            "cross_entropy_reduce_bwd", "dloss")
    _raises(ShapeError, lambda: P.cross_entropy_reduce_bwd(x, up([0], "cpu"), up([1], "cpu"), 2, 3, [0, 1], 0.0, 1.0),
            "cross_entropy_reduce_bwd", "lse")
    _raises(ShapeError, lambda: P.gelu_bwd(x, up([1.0], "cpu")), "gelu_bwd", "dy")
    _raises(ShapeError, lambda: P.gelu_tanh_bwd(x, up([1.0], "cpu")), "gelu_tanh_bwd")


# == determinism and random masks ===================================================================
def test_cpu_scatter_add_rows_accumulates_in_index_order_and_gather_zero_fills():
    """The CPU scatters add in index order in float32 (order matters here: 1e8 + 1 - 1e8 = 0 but
    1e8 - 1e8 + 1 = 1), out-of-bounds rows are ignored; gather_rows zero-fills them."""
    from torchlean.kernels.cpu import index as cpu_index

    mat = np.zeros(2 * 3, F32)
    vals = np.array([[1e8, 2, 3], [1, 1, 1], [-1e8, 5, 6], [7, 7, 7], [1, 0.5, 0.25]], F32).reshape(-1)
    idx = np.array([0, 0, 0, 2**32 - 1, 1], np.int64)
    out = cpu_index.scatter_add_rows(mat, vals, 2, 3, idx, 5).reshape(2, 3)
    ref = np.zeros((2, 3), F32)
    for r, i in enumerate(idx):
        if i < 2:
            ref[i] = ref[i] + vals.reshape(5, 3)[r]
    assert np.array_equal(out, ref) and out[0, 0] == 0.0
    v = cpu_index.scatter_add(np.zeros(2, F32), f32(1e8, 1, -1e8, 4), 2, np.array([1, 1, 1, 7], np.int64), 4)
    assert v.tolist() == [0.0, 0.0]
    g = cpu_index.gather_rows(np.arange(6, dtype=F32), 2, 3, np.array([1, 2**32 - 1, 0, 5], np.int64), 4)
    assert g.tolist() == [3, 4, 5, 0, 0, 0, 0, 1, 2, 0, 0, 0]


def test_embedding_backward_is_deterministic(device):
    """Deterministic reductions on: 100 backward passes of an embedding with many repeated indices
    (fast mode on CUDA would add with atomics) give bitwise identical weight gradients."""
    rng = seeded("embedding-determinism")
    idx = rng.integers(0, 8, 3000)  # ~375 hits per row
    w = tl.tensor(rng.standard_normal((8, 16)).astype(F32), device=device, requires_grad=True)
    g = tl.tensor(rng.standard_normal((3000, 16)).astype(F32), device=device)
    prev = deterministic_reductions()
    try:
        assert set_deterministic_reductions(True)
        grads = []
        for _ in range(100):
            w.grad = None
            TF.embedding(idx, w).backward(g)
            grads.append(w.grad.numpy())
    finally:
        set_deterministic_reductions(prev)
    first = grads[0].view(np.uint32)
    assert all(np.array_equal(first, gr.view(np.uint32)) for gr in grads[1:])
    ref = np.zeros((8, 16))
    np.add.at(ref, idx, g.numpy().astype(np.float64))
    np.testing.assert_allclose(grads[0], ref, rtol=0, atol=3000 * U * np.abs(g.numpy()).sum(axis=0).max())


def test_dropout_mask_is_the_same_on_every_device_and_follows_design(device):
    """Same seed, same mask on cpu and on ``device``; the mask is DESIGN.md's rule
    m[i] = 1 if float32(keep) > rand_uniform(n, key)[i], key = splitmix64(seed + counter)."""
    n, p, seed = 17 * 241, 0.3, 1234
    x = (np.arange(n, dtype=F32) % 13 + 1).reshape(17, 241)
    outs = {}
    for dev in ("cpu", device):
        outs[dev] = TF.dropout(tl.tensor(x, device=dev), p, generator=tl.Generator(seed)).numpy()
    assert np.array_equal(outs["cpu"].view(np.uint32), outs[device].view(np.uint32))
    keep = F32(1 - p)
    u = spec_rng.rand_uniform(n, derive_key(seed, 0))
    mask = (np.float64(keep) > u).astype(F32).reshape(x.shape)
    np.testing.assert_array_equal(outs[device] != 0, mask != 0)
    np.testing.assert_array_equal(outs[device], x * (mask * F32(1.0 / (1.0 - p))))  # scale(mask, 1/keep)
    assert 0.25 < 1 - mask.mean() < 0.35
    # the default generator: manual_seed gives the same mask again
    tl.manual_seed(seed)
    a = TF.dropout(tl.tensor(x, device=device), p).numpy()
    tl.manual_seed(seed)
    b = TF.dropout(tl.tensor(x, device="cpu"), p).numpy()
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32)) and np.array_equal(a, outs[device])


def test_cpu_row_fmax_in_lanes_is_numpys_fmax_reduce():
    """cross entropy's row maximum (16 lanes, then the lanes in order, then the tail) equals
    np.fmax.reduce for every length around the lane count, with NaN, +-inf and +-0 anywhere: NaN only
    for a row of NaN, and the same value otherwise (equal zeros may differ in sign: no output reads it)."""
    from torchlean.kernels.cpu import classify as cpu_classify

    rng = np.random.default_rng(11)
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, -3e38], np.float32)
    lanes = np.empty(16, np.float32)
    for n in list(range(0, 40)) + [63, 64, 65, 1000]:
        for trial in range(6):
            x = rng.standard_normal(n).astype(np.float32)
            if trial % 2:
                pick = rng.random(n) < 0.5
                x[pick] = specials[rng.integers(0, specials.size, int(pick.sum()))]
            if trial == 4:
                x[:] = np.nan
            got = cpu_classify._fmax_row(x, n, lanes)
            want = np.fmax.reduce(x) if n else np.float32(np.nan)
            assert (np.isnan(got) and np.isnan(want)) or got == want, (n, trial, got, want)
