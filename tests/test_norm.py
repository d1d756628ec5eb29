"""Normalization: layer_norm, batch_norm (training and eval) and their backward passes.

The generic table tests (tests/test_primitives_parity.py) run every norm primitive against its
spec and contract on small random shapes; here:

* the launch-plan boundaries of both backends (row lengths around 128, 1024 and 4096 columns,
  many rows per group, planes vs columns layouts of batch norm, several CPU blocks) against spec
  and contract, and bitwise repeatability;
* the contracts reject wrong kernels (a variance with divisor n - 1, a missing term of the
  backward, the folded inference form, a one-pass float32 variance);
* the VJP of every op against float64 central finite differences (test_vjp's tolerance);
* agreement with torch.nn.functional.layer_norm / batch_norm (outputs, gradients and updated
  running statistics; torch runs on the GPU when we do);
* known answers (constant rows, empty batches, the seed's channel-first form) and errors.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

import torchlean as tl
import torchlean.nn.functional as TF
from torchlean import contract, ops, spec
from torchlean.kernels import cpu as cpu_backend
from torchlean.kernels.cpu import norm as cpu_norm
from torchlean.errors import ArgumentError, DTypeError, ShapeError
from torchlean.runtime import Buffer
from torchlean.runtime import primitives as P
from torchlean.testing.primitive_table import TABLE, run_case, spec_args

from test_vjp import _report, _within, fd_grads

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

F32 = np.float32
EPS6 = float(F32(1e-6))
EPS5 = float(F32(1e-5))


def rng_for(name: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(name.encode()))


def randn(rng, *shape, scale=1.0, shift=0.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale + shift).astype(F32)


def same_bits(a, b) -> bool:
    a, b = np.asarray(a, F32).reshape(-1), np.asarray(b, F32).reshape(-1)
    an, bn = np.isnan(a), np.isnan(b)
    return a.shape == b.shape and bool(np.array_equal(an, bn) and np.array_equal(a.view(np.uint32)[~an],
                                                                               b.view(np.uint32)[~bn]))


def check(name: str, args: list, device: str):
    """One case on device within the contract; on a GPU the CPU must meet it too."""
    info = TABLE[name]
    verdict, out, ref = run_case(info, args, device)
    assert verdict.ok, f"{name} on {device}: {verdict.detail}"
    if device != "cpu":
        cpu_verdict = run_case(info, args, "cpu")[0]
        assert cpu_verdict.ok, f"{name} on cpu (parity run): {cpu_verdict.detail}"
    return out, ref


def outputs(out) -> tuple:
    return out if isinstance(out, tuple) else (out,)


def ln_args(rng, rows, cols, affine=True, eps=EPS6, scale=1.0, shift=0.0):
    return [randn(rng, rows * cols, scale=scale, shift=shift), randn(rng, cols) if affine else None,
            randn(rng, cols) if affine else None, rows, cols, eps]


def ln_bwd_args(rng, rows, cols, affine=True, eps=EPS6):
    x = randn(rng, rows * cols)
    _, mean, var = spec.layer_norm(x.astype(np.float64), None, None, rows, cols, eps)
    return [x, randn(rng, cols) if affine else None, mean.astype(F32), var.astype(F32), randn(rng, rows * cols),
            rows, cols, eps]


def bn_args(rng, b, c, i, affine=True, eps=EPS5, shift=0.0):
    return [randn(rng, b * c * i, shift=shift), randn(rng, c) if affine else None,
            randn(rng, c) if affine else None, b, c, i, eps]


def bn_bwd_args(rng, b, c, i, affine=True, eps=EPS5):
    x = randn(rng, b * c * i)
    _, mean, var = spec.batch_norm(x.astype(np.float64), None, None, b, c, i, eps)
    return [x, randn(rng, c) if affine else None, mean.astype(F32), var.astype(F32), randn(rng, b * c * i),
            b, c, i, eps]


# -- launch plans: every path of both backends, against spec and contract ----------------------------
# (rows, cols): warp-per-row rows (cols <= 1024, float4 or not), block rows, the wide fallback of
# the backward (cols > 4096), and more rows than backward groups (2048), so groups walk several rows.
LN_SHAPES = [(1, 5), (3, 128), (5, 129), (4, 203), (7, 1024), (2, 1030), (3, 2048), (2, 2501), (2, 3000), (2, 4100),
             (2600, 8), (2100, 36), (600, 300)]


@pytest.mark.parametrize("rows, cols", LN_SHAPES, ids=[f"{r}x{c}" for r, c in LN_SHAPES])
def test_layer_norm_launch_plans(rows, cols, device):
    rng = rng_for(f"ln{rows}x{cols}")
    check("layer_norm", ln_args(rng, rows, cols, affine=cols % 2 == 0), device)
    check("layer_norm_bwd", ln_bwd_args(rng, rows, cols, affine=cols % 3 != 0), device)


# (batch, channels, inner): columns layout (inner < 64; BatchNorm1d's inner = 1 with many rows
# split into chunks), planes layout (inner >= 64, float4 or not, several plane chunks per channel).
BN_SHAPES = [(40, 3, 1), (3000, 2, 1), (5, 4, 7), (3, 2, 64), (6, 3, 101), (33, 2, 128), (2, 40, 200), (1, 3, 5000)]


@pytest.mark.parametrize("b, c, i", BN_SHAPES, ids=[f"{b}x{c}x{i}" for b, c, i in BN_SHAPES])
def test_batch_norm_launch_plans(b, c, i, device):
    rng = rng_for(f"bn{b}x{c}x{i}")
    check("batch_norm", bn_args(rng, b, c, i, affine=i % 2 == 1), device)
    check("batch_norm_bwd", bn_bwd_args(rng, b, c, i, affine=c != 2), device)
    x = randn(rng, b * c * i)
    check("batch_norm_infer", [x, randn(rng, c), np.abs(randn(rng, c)) + 0.1, randn(rng, c), None, b, c, i, EPS5],
          device)


def test_cpu_chunks_threads_and_paths(monkeypatch):
    """The CPU kernels accumulate each group (row, channel) on one thread in float64; layer_norm_bwd's
    column sums add partial sums over fixed chunks of rows. Small chunks must still meet the
    contracts, and the parallel path (any thread count) must give the serial path's bits."""
    import numba

    rng = rng_for("cpu-blocks")
    ln = ln_args(rng, 37, 24)
    ln[0][24:48] = 3.0            # a constant row
    ln[0][48:72] *= 1e25          # squares overflow in float32
    lnb = ln_bwd_args(rng, 37, 24)
    bn = bn_args(rng, 9, 3, 5)
    bn[0].reshape(9, 3, 5)[:, 1, :] = -2.0  # a constant channel
    bnb = bn_bwd_args(rng, 9, 3, 5)
    bni = [randn(rng, 9 * 3 * 5), randn(rng, 3), np.abs(randn(rng, 3)) + 0.1, randn(rng, 3), None, 9, 3, 5, EPS5]
    cases = [("layer_norm", ln, (0, 1, 2)), ("layer_norm_bwd", lnb, (0,)), ("batch_norm", bn, (0, 1, 2)),
             ("batch_norm_bwd", bnb, (0, 1, 2)), ("batch_norm_infer", bni, (0,))]
    whole = [outputs(check(name, args, "cpu")[0]) for name, args, _ in cases]
    monkeypatch.setattr(cpu_norm, "_CHUNK_ELEMS", 50)   # layer_norm_bwd: 19 chunks of 2 rows
    chunked = [outputs(check(name, args, "cpu")[0]) for name, args, _ in cases]
    for (name, args, row_local), before, after in zip(cases, whole, chunked):
        for k in row_local:
            assert same_bits(after[k], before[k]), f"{name}: output {k} depends on the chunking"
    monkeypatch.setattr(cpu_norm, "_MIN_WORK", 1)      # every call takes the parallel path
    threads = numba.get_num_threads()
    try:
        for t in sorted({1, threads}):
            numba.set_num_threads(t)
            for (name, args, _), ref in zip(cases, chunked):
                got = outputs(check(name, args, "cpu")[0])
                for k, (a, b) in enumerate(zip(got, ref)):
                    assert same_bits(a, b), f"{name}: output {k} differs between the serial and parallel paths"
    finally:
        numba.set_num_threads(threads)


def test_results_are_bitwise_repeatable(device):
    rng = rng_for("repeat")
    cases = [("layer_norm", ln_args(rng, 300, 1024)), ("layer_norm_bwd", ln_bwd_args(rng, 2500, 40)),
             ("layer_norm_bwd", ln_bwd_args(rng, 40, 1000)), ("batch_norm", bn_args(rng, 8, 3, 300)),
             ("batch_norm_bwd", bn_bwd_args(rng, 700, 3, 1))]
    from torchlean.runtime.determinism import set_deterministic_reductions, deterministic_reductions

    before = deterministic_reductions()
    try:
        for mode in (False, True):
            set_deterministic_reductions(mode)
            for name, args in cases:
                info = TABLE[name]
                runs = [run_case(info, args, device)[1] for _ in range(2)]
                for a, b in zip(*runs):
                    assert same_bits(a, b), f"{name} on {device} (deterministic={mode}) is not repeatable"
    finally:
        set_deterministic_reductions(before)


# -- the contracts reject wrong kernels -------------------------------------------------------------------
def _ln_divisor_n_minus_1(x, gamma, beta, rows, cols, eps):
    x2 = x.reshape(rows, cols).astype(np.float64)
    mu = x2.mean(axis=1)
    var = ((x2 - mu[:, None]) ** 2).sum(axis=1) / (cols - 1)
    y = (x2 - mu[:, None]) / np.sqrt(var[:, None] + eps) * gamma + beta
    return y.reshape(-1).astype(F32), mu.astype(F32), var.astype(F32)


def _ln_one_pass_float32(x, gamma, beta, rows, cols, eps):
    x2 = x.reshape(rows, cols)
    mu = x2.mean(axis=1, dtype=F32)
    var = np.maximum((x2 * x2).mean(axis=1, dtype=F32) - mu * mu, F32(0))
    y = (x2 - mu[:, None]) / np.sqrt(var[:, None] + F32(eps)) * gamma + beta
    return y.reshape(-1).astype(F32), mu, var.astype(F32)


def _ln_bwd_without_xhat_term(x, gamma, mean, var, dy, rows, cols, eps):
    dx, dg, db = cpu_norm.layer_norm_bwd(x, gamma, mean, var, dy, rows, cols, eps)
    r = (1.0 / np.sqrt(var.astype(np.float64) + eps))[:, None]
    gdy = dy.reshape(rows, cols) * (1 if gamma is None else gamma)
    wrong = r * (gdy - gdy.mean(axis=1, keepdims=True))
    return wrong.reshape(-1).astype(F32), dg, db


def _bn_bwd_dgamma_without_xhat(x, gamma, mean, var, dy, batch, channels, inner, eps):
    dx, dg, db = cpu_norm.batch_norm_bwd(x, gamma, mean, var, dy, batch, channels, inner, eps)
    return dx, db.copy(), db


def _bn_infer_folded(x, mean, var, gamma, beta, batch, channels, inner, eps):
    r = (1.0 / np.sqrt(var.astype(np.float64) + eps)).astype(F32)
    scale = r * gamma
    shift = beta - mean * scale
    return (x.reshape(batch, channels, inner) * scale[None, :, None] + shift[None, :, None]).reshape(-1)


_R = np.random.default_rng(5)
WRONG_KERNELS = [
    pytest.param("layer_norm", _ln_divisor_n_minus_1, ln_args(_R, 4, 16), id="layer_norm-var-divisor-n-1"),
    pytest.param("layer_norm", _ln_one_pass_float32, ln_args(_R, 4, 16, shift=300.0), id="layer_norm-one-pass-f32"),
    pytest.param("layer_norm_bwd", _ln_bwd_without_xhat_term, ln_bwd_args(_R, 4, 16), id="layer_norm_bwd-no-xhat-term"),
    pytest.param("batch_norm_bwd", _bn_bwd_dgamma_without_xhat, bn_bwd_args(_R, 3, 2, 5), id="batch_norm_bwd-dgamma=dbeta"),
    pytest.param("batch_norm_infer", _bn_infer_folded,
                 [(1000 + _R.standard_normal(12) * 0.01).astype(F32), np.full(3, 1000, F32), np.full(3, 1e-4, F32),
                  np.ones(3, F32), np.zeros(3, F32), 2, 3, 2, 0.0], id="batch_norm_infer-folded"),
]


@pytest.mark.parametrize("name, fake, args", WRONG_KERNELS)
def test_contract_catches_wrong_kernel(monkeypatch, name, fake, args):
    info = TABLE[name]
    assert run_case(info, args, "cpu")[0].ok, "the genuine kernel must pass the very case the fake fails"
    monkeypatch.setattr(cpu_backend, name, fake)  # the fakes call the genuine cpu_norm kernels
    verdict = run_case(info, args, "cpu")[0]
    assert not verdict.ok, f"the contract of {name} accepted a wrong kernel (ratio {verdict.ratio})"


def test_batch_norm_variance_divisor_n_minus_1_is_caught(monkeypatch):
    args = bn_args(np.random.default_rng(9), 4, 3, 4)

    def fake(x, gamma, beta, batch, channels, inner, eps):
        y, mean, var = spec.batch_norm(x.astype(np.float64), gamma, beta, batch, channels, inner, eps)
        n = batch * inner
        return y.astype(F32), mean.astype(F32), (var * n / (n - 1)).astype(F32)

    assert run_case(TABLE["batch_norm"], args, "cpu")[0].ok
    monkeypatch.setattr(cpu_backend, "batch_norm", fake)
    assert not run_case(TABLE["batch_norm"], args, "cpu")[0].ok


# -- VJP against float64 finite differences ----------------------------------------------------------------
def np_layer_norm(x, w, b, k, eps):
    axes = tuple(range(x.ndim - k, x.ndim))
    mu = x.mean(axis=axes, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mu) / np.sqrt(var + eps)
    return y * (1.0 if w is None else w) + (0.0 if b is None else b)


def _channel(v, ndim):
    return v.reshape((1, -1) + (1,) * (ndim - 2))


def np_batch_norm(x, w, b, eps):
    axes = (0,) + tuple(range(2, x.ndim))
    mu = x.mean(axis=axes, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mu) / np.sqrt(var + eps)
    return y * (1.0 if w is None else _channel(w, x.ndim)) + (0.0 if b is None else _channel(b, x.ndim))


def np_batch_norm_eval(x, rm, rv, w, b, eps):
    y = (x - _channel(rm, x.ndim)) / np.sqrt(_channel(rv, x.ndim) + eps)
    return y * _channel(w, x.ndim) + _channel(b, x.ndim)


RM = np.array([0.3, -0.2, 0.1], F32)
RV = np.array([0.8, 1.5, 0.6], F32)


def _eval(x, w, b):
    return TF.batch_norm(x, tl.tensor(RM, device=x.device), tl.tensor(RV, device=x.device), w, b,
                         training=False, eps=EPS5)


VJP_CASES = [
    # name, shapes of the inputs, ours, float64 reference
    ("ln_affine", [(4, 6), (6,), (6,)], lambda x, w, b: tl.ops.layer_norm(x, 6, w, b),
     lambda x, w, b: np_layer_norm(x, w, b, 1, EPS6)),
    ("ln_no_affine", [(5, 7)], lambda x: tl.ops.layer_norm(x, (7,)), lambda x: np_layer_norm(x, None, None, 1, EPS6)),
    ("ln_multi_dim", [(2, 3, 4), (3, 4), (3, 4)], lambda x, w, b: tl.ops.layer_norm(x, (3, 4), w, b, eps=1e-5),
     lambda x, w, b: np_layer_norm(x, w, b, 2, EPS5)),
    ("ln_weight_only", [(3, 5), (5,)], lambda x, w: tl.ops.layer_norm(x, [5], weight=w),
     lambda x, w: np_layer_norm(x, w, None, 1, EPS6)),
    ("ln_bias_only_1d", [(6,), (6,)], lambda x, b: tl.ops.layer_norm(x, 6, bias=b),
     lambda x, b: np_layer_norm(x, None, b, 1, EPS6)),
    ("bn_train_NC", [(5, 3), (3,), (3,)], lambda x, w, b: TF.batch_norm(x, None, None, w, b, training=True),
     lambda x, w, b: np_batch_norm(x, w, b, EPS5)),
    ("bn_train_NCL", [(3, 2, 4), (2,), (2,)], lambda x, w, b: TF.batch_norm(x, None, None, w, b, training=True),
     lambda x, w, b: np_batch_norm(x, w, b, EPS5)),
    ("bn_train_NCHW", [(2, 3, 2, 3), (3,), (3,)],
     lambda x, w, b: TF.batch_norm(x, None, None, w, b, True, 0.1, 1e-3),
     lambda x, w, b: np_batch_norm(x, w, b, float(F32(1e-3)))),
    ("bn_train_rank5_no_affine", [(2, 2, 2, 2, 3)], lambda x: TF.batch_norm(x, None, None, training=True),
     lambda x: np_batch_norm(x, None, None, EPS5)),
    ("bn_eval_NCL", [(3, 3, 4), (3,), (3,)], _eval, lambda x, w, b: np_batch_norm_eval(x, RM, RV, w, b, EPS5)),
    ("bn_eval_NC", [(4, 3), (3,), (3,)], _eval, lambda x, w, b: np_batch_norm_eval(x, RM, RV, w, b, EPS5)),
    ("bn_channel_first", [(3, 2, 3), (3,), (3,)], lambda x, w, b: ops.batch_norm_channel_first(x, w, b),
     lambda x, w, b: np_batch_norm(x[None], w, b, EPS6)[0]),
]


@pytest.mark.parametrize("name, shapes, ours, ref", VJP_CASES, ids=[c[0] for c in VJP_CASES])
def test_vjp_matches_finite_differences(name, shapes, ours, ref, device):
    rng = rng_for(name)
    xs = [randn(rng, *s, scale=1.5, shift=0.5) for s in shapes]
    ref_out = np.asarray(ref(*[x.astype(np.float64) for x in xs]))
    w = randn(rng, *ref_out.shape)
    ts = [tl.tensor(x, device=device, requires_grad=True) for x in xs]
    y = ours(*ts)
    assert tuple(y.shape) == ref_out.shape and y.requires_grad
    assert _within(y.numpy(), ref_out), f"{name} forward: " + _report(y.numpy(), ref_out)
    y.backward(tl.tensor(w, device=device))
    for k, (t, fd) in enumerate(zip(ts, fd_grads(ref, xs, w))):
        assert t.grad is not None, f"{name}: input {k} got no gradient"
        assert not _within(2.0 * fd, fd) and not _within(-fd, fd), f"{name}: input {k}: gradient too small to judge"
        assert _within(t.grad.numpy(), fd), f"{name} d/dinput{k}: " + _report(t.grad.numpy(), fd)


# -- agreement with PyTorch -----------------------------------------------------------------------------------
torch = pytest.importorskip("torch")
TF_T = torch.nn.functional


def torch_device(device: str) -> str:
    return "cuda" if device.startswith("cuda") and torch.cuda.is_available() else "cpu"


def tt(a, device, grad=True):
    return torch.tensor(np.asarray(a, F32), device=device, requires_grad=grad)


def assert_close(ours, theirs, tol, what):
    ours, theirs = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
    assert ours.shape == theirs.shape, f"{what}: shape {ours.shape} vs torch {theirs.shape}"
    err = np.abs(ours - theirs)
    tol = np.broadcast_to(tol, err.shape)
    assert np.all(err <= tol), f"{what}: max err/tol {np.max(err / tol):.3g} at {np.argmax(err / tol)}"


def _twice(bound):
    """Two implementations each within the contract bound B of the exact value are within 2B."""
    return 2 * np.asarray(bound, np.float64)


# Not a var = 0 case (one normalized element): torch's backward folds (x - mean) r into x r - mean r
# and returns dweight ~1e-5 where the exact value, and ours, is 0 (see test_layer_norm_known_answers).
@pytest.mark.parametrize("shape, k", [((4, 10), 1), ((2, 3, 8), 2), ((3, 1024), 1), ((2, 5, 3), 2)])
def test_layer_norm_matches_torch(shape, k, device):
    rng = rng_for(f"ln-torch{shape}")
    x, w, b = randn(rng, *shape), randn(rng, *shape[-k:]), randn(rng, *shape[-k:])
    g = randn(rng, *shape)
    ns = shape[-k:]
    ts = [tl.tensor(a, device=device, requires_grad=True) for a in (x, w, b)]
    y = tl.ops.layer_norm(ts[0], ns, ts[1], ts[2], eps=1e-5)
    y.backward(tl.tensor(g, device=device))
    td = torch_device(device)
    tts = [tt(a, td) for a in (x, w, b)]
    ty = TF_T.layer_norm(tts[0], ns, tts[1], tts[2], eps=1e-5)
    ty.backward(tt(g, td, grad=False))

    rows, cols = x.size // int(np.prod(ns)), int(np.prod(ns))
    fargs = spec_args([x.reshape(-1), w.reshape(-1), b.reshape(-1), rows, cols, EPS5])
    ref = spec.layer_norm(*fargs)
    y_tol = _twice(contract.CONTRACTS["layer_norm"].bound(ref, *fargs)[0]).reshape(shape)
    assert_close(y.numpy(), ty.detach().cpu().numpy(), y_tol, "layer_norm forward")
    bargs = spec_args([x.reshape(-1), w.reshape(-1), ref[1].astype(F32), ref[2].astype(F32), g.reshape(-1), rows,
                       cols, EPS5])
    bref = spec.layer_norm_bwd(*bargs)
    # 4B: each side within B of the exact VJP at its own float32 statistics, which differ by
    # the forward's statistics error (of the same order as the backward's own bound)
    tols = [4 * np.asarray(t, np.float64) for t in contract.CONTRACTS["layer_norm_bwd"].bound(bref, *bargs)]
    for t_ours, t_theirs, tol, what in zip(ts, tts, tols, ("dx", "dweight", "dbias")):
        assert_close(t_ours.grad.numpy(), t_theirs.grad.cpu().numpy(), tol.reshape(t_ours.shape), f"layer_norm {what}")


BN_TORCH_SHAPES = [(8, 3), (4, 3, 5), (2, 3, 4, 5), (2, 2, 3, 2, 2), (4, 16, 7, 7), (2, 4, 10, 10)]


@pytest.mark.parametrize("shape", BN_TORCH_SHAPES, ids=[str(s) for s in BN_TORCH_SHAPES])
def test_batch_norm_training_matches_torch(shape, device):
    rng = rng_for(f"bn-torch{shape}")
    c = shape[1]
    x, w, b, g = randn(rng, *shape, shift=0.7), randn(rng, c), randn(rng, c), randn(rng, *shape)
    rm0, rv0 = randn(rng, c), np.abs(randn(rng, c)) + 0.5
    td = torch_device(device)
    rm, rv = tl.tensor(rm0, device=device), tl.tensor(rv0, device=device)
    trm, trv = tt(rm0, td, False), tt(rv0, td, False)
    ts = [tl.tensor(a, device=device, requires_grad=True) for a in (x, w, b)]
    tts = [tt(a, td) for a in (x, w, b)]
    for step in range(2):  # the running statistics move twice
        y = TF.batch_norm(ts[0], rm, rv, ts[1], ts[2], training=True, momentum=0.3)
        ty = TF_T.batch_norm(tts[0], trm, trv, tts[1], tts[2], training=True, momentum=0.3)
    y.backward(tl.tensor(g, device=device))
    ty.backward(tt(g, td, grad=False))

    batch, inner = shape[0], int(np.prod(shape[2:]))
    fargs = spec_args([x.reshape(-1), w, b, batch, c, inner, EPS5])
    ref = spec.batch_norm(*fargs)
    y_tol = _twice(contract.CONTRACTS["batch_norm"].bound(ref, *fargs)[0]).reshape(shape)
    assert_close(y.numpy(), ty.detach().cpu().numpy(), y_tol, "batch_norm forward")
    bargs = spec_args([x.reshape(-1), w, ref[1].astype(F32), ref[2].astype(F32), g.reshape(-1), batch, c, inner, EPS5])
    bref = spec.batch_norm_bwd(*bargs)
    tols = [4 * np.asarray(t, np.float64) for t in contract.CONTRACTS["batch_norm_bwd"].bound(bref, *bargs)]
    for t_ours, t_theirs, tol, what in zip(ts, tts, tols, ("dx", "dweight", "dbias")):
        assert_close(t_ours.grad.numpy(), t_theirs.grad.cpu().numpy(), tol.reshape(t_ours.shape), f"batch_norm {what}")
    # running statistics after two identical updates, from the exact batch statistics
    n = batch * inner
    m, v = ref[1], ref[2] * n / (n - 1)
    exp_rm = 0.7 * (0.7 * rm0 + 0.3 * m) + 0.3 * m
    exp_rv = 0.7 * (0.7 * rv0 + 0.3 * v) + 0.3 * v
    stat_tol = 1e-6 * (np.abs(exp_rm) + np.abs(exp_rv) + 1)
    for ours, theirs, exp, what in ((rm, trm, exp_rm, "running_mean"), (rv, trv, exp_rv, "running_var")):
        assert_close(ours.numpy(), exp, stat_tol, f"{what} vs exact")
        assert_close(ours.numpy(), theirs.cpu().numpy(), 2 * stat_tol, f"{what} vs torch")


@pytest.mark.parametrize("shape", [(6, 3), (2, 3, 4, 5)], ids=str)
def test_batch_norm_eval_matches_torch(shape, device):
    rng = rng_for(f"bn-eval{shape}")
    c = shape[1]
    x, w, b, g = randn(rng, *shape), randn(rng, c), randn(rng, c), randn(rng, *shape)
    rm0, rv0 = randn(rng, c), np.abs(randn(rng, c)) + 0.5
    td = torch_device(device)
    rm, rv = tl.tensor(rm0, device=device), tl.tensor(rv0, device=device)
    ts = [tl.tensor(a, device=device, requires_grad=True) for a in (x, w, b)]
    tts = [tt(a, td) for a in (x, w, b)]
    y = TF.batch_norm(ts[0], rm, rv, ts[1], ts[2])  # training=False is the default, as in torch
    ty = TF_T.batch_norm(tts[0], tt(rm0, td, False), tt(rv0, td, False), tts[1], tts[2])
    y.backward(tl.tensor(g, device=device))
    ty.backward(tt(g, td, grad=False))
    batch, inner = shape[0], int(np.prod(shape[2:]))
    fargs = spec_args([x.reshape(-1), rm0, rv0, w, b, batch, c, inner, EPS5])
    ref = spec.batch_norm_infer(*fargs)
    # torch folds eval mode into y = x s + t (s = r g, t = b - mean s), which our contract rejects
    # (its error scales with |x s| + |mean s|, not with |xhat|): ours within B, torch within
    # about 4u (|x s| + |mean s| + |b|) of the exact value.
    s_ = (w / np.sqrt(rv0.astype(np.float64) + EPS5)).reshape((1, c) + (1,) * (len(shape) - 2))
    folded = 4 * 2.0**-24 * (np.abs(x * s_) + np.abs(_channel(rm0, len(shape)) * s_) + np.abs(_channel(b, len(shape))))
    tol = np.asarray(contract.CONTRACTS["batch_norm_infer"].bound(ref, *fargs)).reshape(shape) + folded
    assert_close(y.numpy(), ty.detach().cpu().numpy(), tol, "batch_norm eval forward")
    np.testing.assert_array_equal(rm.numpy(), rm0)  # eval mode leaves the running statistics alone
    for t_ours, t_theirs, what in zip(ts, tts, ("dx", "dweight", "dbias")):
        theirs = t_theirs.grad.cpu().numpy()
        assert_close(t_ours.grad.numpy(), theirs, 1e-5 * (np.abs(theirs) + np.abs(theirs).max()) + 1e-6,
                     f"batch_norm eval {what}")


# -- known answers ------------------------------------------------------------------------------------------
def test_layer_norm_known_answers(device):
    x = tl.tensor([[2.0, 2.0, 2.0, 2.0], [1.0, 2.0, 3.0, 4.0]], device=device)
    w, b = tl.tensor([1.0, 2.0, 3.0, 4.0], device=device), tl.tensor([0.5, -1.0, 0.0, 7.0], device=device)
    y = tl.ops.layer_norm(x, 4, w, b).numpy()
    np.testing.assert_array_equal(y[0], [0.5, -1.0, 0.0, 7.0])  # a constant row gives beta exactly
    std = np.sqrt(1.25 + 1e-6)
    np.testing.assert_allclose(y[1], np.array([-1.5, -0.5, 0.5, 1.5]) / std * [1, 2, 3, 4] + [0.5, -1, 0, 7], rtol=1e-6)
    # default eps is 1e-6 (the seed's), not PyTorch's 1e-5: visible on a tiny variance
    t = tl.tensor([[0.0, 1e-3]], device=device)
    np.testing.assert_allclose(tl.ops.layer_norm(t, 2).numpy(), [[-0.5e-3 / np.sqrt(0.25e-6 + 1e-6),
                                                               0.5e-3 / np.sqrt(0.25e-6 + 1e-6)]], rtol=1e-5)
    # NaN stays in its row
    y = tl.ops.layer_norm(tl.tensor([[1.0, np.nan], [1.0, 3.0]], device=device), 2).numpy()
    assert np.isnan(y[0]).all() and np.isfinite(y[1]).all()
    # no rows: an empty result
    assert tl.ops.layer_norm(tl.zeros(0, 5, device=device), 5).shape == (0, 5)
    # one normalized element: y = bias and the weight's gradient is exactly 0
    x1 = tl.tensor([[1.3], [-0.2]], device=device, requires_grad=True)
    w1, b1 = tl.tensor([1.5], device=device, requires_grad=True), tl.tensor([0.25], device=device, requires_grad=True)
    y1 = tl.ops.layer_norm(x1, 1, w1, b1)
    np.testing.assert_array_equal(y1.numpy(), [[0.25], [0.25]])
    y1.backward(tl.tensor([[2.0], [-3.0]], device=device))
    assert w1.grad.numpy().tolist() == [0.0] and x1.grad.numpy().tolist() == [[0.0], [0.0]]
    assert b1.grad.numpy().tolist() == [-1.0]


def test_layer_norm_primitive_empty_rows_give_nan_statistics(device):
    y, mean, var = P.layer_norm(Buffer.from_numpy(np.zeros(0, F32), device), None, None, 3, 0, EPS6)
    assert y.size == 0 and np.isnan(mean.to_numpy()).all() and np.isnan(var.to_numpy()).all()
    dx, dg, db = P.layer_norm_bwd(*[Buffer.from_numpy(a, device) for a in (np.zeros(0, F32),)], None,
                                  Buffer.from_numpy(np.zeros(0, F32), device), Buffer.from_numpy(np.zeros(0, F32), device),
                                  Buffer.from_numpy(np.zeros(0, F32), device), 0, 4, EPS6)
    assert dx.size == 0 and dg.to_numpy().tolist() == [0.0] * 4 and db.to_numpy().tolist() == [0.0] * 4


def test_batch_norm_known_answers(device):
    # channel 0: values 1..4 (mean 2.5, biased var 1.25); channel 1 constant: y = beta
    x = np.array([[1.0, 5.0], [2.0, 5.0], [3.0, 5.0], [4.0, 5.0]], F32)
    rm, rv = tl.zeros(2, device=device), tl.ones(2, device=device)
    y = TF.batch_norm(tl.tensor(x, device=device), rm, rv, tl.tensor([2.0, 3.0], device=device),
                      tl.tensor([0.0, -1.0], device=device), training=True, momentum=0.5).numpy()
    np.testing.assert_allclose(y[:, 0], (x[:, 0] - 2.5) / np.sqrt(1.25 + 1e-5) * 2, rtol=1e-6)
    np.testing.assert_array_equal(y[:, 1], [-1.0] * 4)
    np.testing.assert_allclose(rm.numpy(), [1.25, 2.5], rtol=1e-7)
    # running_var takes the unbiased variance: 1.25 * 4/3 for channel 0, 0 for channel 1
    np.testing.assert_allclose(rv.numpy(), [0.5 + 0.5 * 1.25 * 4 / 3, 0.5], rtol=1e-6)
    # an empty batch leaves the running statistics alone (as torch)
    out = TF.batch_norm(tl.zeros(0, 2, 3, device=device), rm, rv, training=True)
    assert out.shape == (0, 2, 3)
    np.testing.assert_allclose(rm.numpy(), [1.25, 2.5], rtol=1e-7)


def test_running_statistics_are_not_recorded(device):
    x = tl.tensor(np.arange(12, dtype=F32).reshape(4, 3), device=device, requires_grad=True)
    rm, rv = tl.zeros(3, device=device), tl.ones(3, device=device)
    old = rm.buffer
    y = TF.batch_norm(x, rm, rv, training=True)
    assert not rm.requires_grad and rm.is_leaf and rm.buffer is not old  # rebound, never written
    assert old.to_numpy().tolist() == [0.0, 0.0, 0.0]
    y.sum().backward()
    assert rm.grad is None
    with tl.no_grad():  # eval under no_grad records nothing and keeps no workspace
        z = TF.batch_norm(x, rm, rv)
    assert not z.requires_grad


def test_batch_norm_channel_first_is_batch_one(device):
    rng = rng_for("chw")
    x, w, b = randn(rng, 3, 4, 5), randn(rng, 3), randn(rng, 3)
    ours = ops.batch_norm_channel_first(tl.tensor(x, device=device), tl.tensor(w, device=device),
                                        tl.tensor(b, device=device)).numpy()
    same = TF.batch_norm(tl.tensor(x[None], device=device), None, None, tl.tensor(w, device=device),
                         tl.tensor(b, device=device), training=True, eps=1e-6).numpy()[0]
    assert same_bits(ours, same)
    # the seed's reading: per channel, the same math as layer norm over the channel's H*W values
    ln = tl.ops.layer_norm(tl.tensor(x.reshape(3, 20), device=device), 20).numpy().reshape(3, 4, 5)
    np.testing.assert_allclose(ours, ln * w[:, None, None] + b[:, None, None], rtol=1e-5, atol=1e-5)


# -- errors --------------------------------------------------------------------------------------------------
def _x(*shape):
    return tl.tensor(np.ones(shape, F32))


ERRORS = [
    ("ln-shape", lambda: tl.ops.layer_norm(_x(2, 3), 4), ShapeError, ["layer_norm", "normalized_shape"]),
    ("ln-shape-rank", lambda: tl.ops.layer_norm(_x(3), (2, 3)), ShapeError, ["layer_norm", "normalized_shape"]),
    ("ln-empty-shape", lambda: tl.ops.layer_norm(_x(3), ()), ShapeError, ["layer_norm", "normalized_shape"]),
    ("ln-weight", lambda: tl.ops.layer_norm(_x(2, 3), 3, _x(4)), ShapeError, ["layer_norm", "weight"]),
    ("ln-bias", lambda: tl.ops.layer_norm(_x(2, 3), 3, None, _x(3, 1)), ShapeError, ["layer_norm", "bias"]),
    ("ln-weight-type", lambda: tl.ops.layer_norm(_x(2, 3), 3, [1, 2, 3]), DTypeError, ["layer_norm", "weight"]),
    ("ln-eps-negative", lambda: tl.ops.layer_norm(_x(2, 3), 3, eps=-1e-5), ArgumentError, ["layer_norm", "eps"]),
    ("ln-eps-nan", lambda: tl.ops.layer_norm(_x(2, 3), 3, eps=float("nan")), ArgumentError, ["layer_norm", "eps"]),
    ("bn-rank", lambda: TF.batch_norm(_x(3), None, None, training=True), ShapeError, ["batch_norm", "input"]),
    ("bn-weight", lambda: TF.batch_norm(_x(2, 3), None, None, _x(2), training=True), ShapeError,
     ["batch_norm", "weight"]),
    ("bn-running-mean", lambda: TF.batch_norm(_x(2, 3), _x(4), _x(3)), ShapeError, ["batch_norm", "running_mean"]),
    ("bn-eval-needs-stats", lambda: TF.batch_norm(_x(2, 3), None, _x(3)), ArgumentError,
     ["batch_norm", "running_mean", "training=False"]),
    ("bn-one-value", lambda: TF.batch_norm(_x(1, 3), None, None, training=True), ArgumentError,
     ["batch_norm", "more than 1 value"]),
    ("bn-momentum", lambda: TF.batch_norm(_x(2, 3), _x(3), _x(3), training=True, momentum=None), ArgumentError,
     ["batch_norm", "momentum"]),
    ("bn-eps", lambda: TF.batch_norm(_x(2, 3), _x(3), _x(3), eps=-1.0), ArgumentError, ["batch_norm_infer", "eps"]),
    ("cf-weight", lambda: ops.batch_norm_channel_first(_x(3, 2, 2), _x(2)), ShapeError,
     ["batch_norm_channel_first", "weight"]),
    ("prim-ln-gamma", lambda: P.layer_norm(_x(6).buffer, _x(2).buffer, None, 2, 3, EPS6), ShapeError,
     ["layer_norm", "gamma"]),
    ("prim-ln-x", lambda: P.layer_norm(_x(5).buffer, None, None, 2, 3, EPS6), ShapeError, ["layer_norm", "x"]),
    ("prim-ln-bwd-mean", lambda: P.layer_norm_bwd(_x(6).buffer, None, _x(3).buffer, _x(2).buffer, _x(6).buffer,
                                                  2, 3, EPS6), ShapeError, ["layer_norm_bwd", "mean"]),
    ("prim-bn-var", lambda: P.batch_norm_bwd(_x(6).buffer, None, _x(3).buffer, _x(2).buffer, _x(6).buffer,
                                             2, 3, 1, EPS6), ShapeError, ["batch_norm_bwd", "var"]),
    ("prim-bn-dims", lambda: P.batch_norm(_x(6).buffer, None, None, 2, -3, 1, EPS6), ShapeError,
     ["batch_norm", "channels"]),
    ("prim-infer-beta", lambda: P.batch_norm_infer(_x(6).buffer, _x(3).buffer, _x(3).buffer, None, _x(4).buffer,
                                                   2, 3, 1, EPS6), ShapeError, ["batch_norm_infer", "beta"]),
    ("prim-infer-eps", lambda: P.batch_norm_infer(_x(6).buffer, _x(3).buffer, _x(3).buffer, None, None,
                                                  2, 3, 1, float("inf")), ArgumentError, ["batch_norm_infer", "eps"]),
    ("prim-gamma-type", lambda: P.batch_norm(_x(6).buffer, np.ones(3, F32), None, 2, 3, 1, EPS6), DTypeError,
     ["batch_norm", "gamma"]),
    ("prim-running-stat", lambda: P.running_stat_update(_x(3).buffer, _x(2).buffer, 3, 0.1, 1.0), ShapeError,
     ["running_stat_update", "stat"]),
    ("prim-running-momentum", lambda: P.running_stat_update(_x(3).buffer, _x(3).buffer, 3, "0.1", 1.0), ArgumentError,
     ["running_stat_update", "momentum"]),
]


def test_running_stat_update_matches_the_composition_bitwise(device):
    """One call gives the bits of scale(running, 1 - m), scale(var, n/(n-1)) and axpy, which batch
    norm used before: checkpoints and CPU/CUDA agreement do not move."""
    rng = rng_for("running")
    n = 4 * 4 * 7
    for momentum in (0.1, 0.01, 0.3):
        running = Buffer.from_numpy(rng.standard_normal(37).astype(F32), device)
        stat = Buffer.from_numpy((rng.standard_normal(37) * 3).astype(F32) ** 2, device)
        for factor in (1.0, n / (n - 1)):
            composed = P.axpy(P.scale(running, 1.0 - momentum), P.scale(stat, factor) if factor != 1.0 else stat,
                              momentum)
            fused = P.running_stat_update(running, stat, 37, momentum, factor)
            assert same_bits(fused.to_numpy(), composed.to_numpy()), (device, momentum, factor)


def test_batch_norm_training_updates_running_stats_in_one_call_each(monkeypatch):
    calls = []
    real = P.running_stat_update
    monkeypatch.setattr(P, "running_stat_update", lambda *a: calls.append(a[3:]) or real(*a))
    bn = tl.nn.BatchNorm2d(3, momentum=0.2)
    bn(tl.randn(4, 3, 5, 5))
    assert calls == [(0.2, 1.0), (0.2, 100 / 99)]


@pytest.mark.parametrize("name, call, exc, needles", ERRORS, ids=[e[0] for e in ERRORS])
def test_errors_name_op_and_argument(name, call, exc, needles):
    with pytest.raises(exc) as info:
        call()
    msg = str(info.value)
    for needle in needles:
        assert needle in msg, f"{name}: {needle!r} not in {msg!r}"


# -- the fast paths of the front end: odd argument types keep their own result or error --------------------
# layer_norm takes a tuple of plain ints without its ABC checks and batch_norm a float momentum
# without its type checks: a bool must still be refused, a NumPy number or a list still accepted
# with the same bits. The messages are those of the code before the fast paths.
def test_layer_norm_shape_fast_path_keeps_odd_types():
    rng = np.random.default_rng(0)
    x = tl.tensor(rng.standard_normal((3, 4)).astype(F32), requires_grad=True)
    ref = tl.ops.layer_norm(x, (4,))
    ref.sum().backward()
    ref_grad, x.grad = x.grad.numpy().tobytes(), None
    for shape in (4, [4], np.int64(4), (np.int64(4),), np.array([4])):
        y = tl.ops.layer_norm(x, shape)
        y.sum().backward()
        assert y.numpy().tobytes() == ref.numpy().tobytes() and x.grad.numpy().tobytes() == ref_grad
        x.grad = None
    for bad in ((True,), (4, True), (-4,), (4.0,)):
        with pytest.raises(ShapeError) as info:
            tl.ops.layer_norm(x, bad)
        assert str(info.value) == f"layer_norm: normalized_shape must hold non-negative ints, got {bad!r}"


def test_batch_norm_momentum_fast_path_keeps_odd_types():
    x = tl.tensor(np.random.default_rng(1).standard_normal((4, 3)).astype(F32))
    stats = {}
    for momentum in (0.25, np.float32(0.25), np.float64(0.25), 1):
        rm, rv = tl.zeros(3), tl.ones(3)
        y = TF.batch_norm(x, rm, rv, training=True, momentum=momentum)
        stats[repr(momentum)] = (y.numpy().tobytes(), rm.numpy().tobytes(), rv.numpy().tobytes())
    assert stats["0.25"] == stats[repr(np.float32(0.25))] == stats[repr(np.float64(0.25))]
    for bad in (True, "0.1", None):
        with pytest.raises(ArgumentError) as info:
            TF.batch_norm(x, tl.zeros(3), tl.ones(3), training=True, momentum=bad)
        assert str(info.value) == f"batch_norm: argument momentum must be a real number, got {bad!r}"


def test_functional_layer_norm_has_pytorchs_default_eps():
    """nn.functional.layer_norm is PyTorch's name, so its default eps is PyTorch's 1e-5 (a program
    that leaves it out gets torch's numbers); ops.layer_norm keeps the seed's 1e-6."""
    import torch  # (the test extra)
    x = np.array([[0.0, 1e-3, 2e-3, -1e-3]], np.float32)
    ours = TF.layer_norm(tl.tensor(x), (4,)).numpy()
    theirs = torch.nn.functional.layer_norm(torch.tensor(x), (4,)).numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
    seed = tl.ops.layer_norm(tl.tensor(x), (4,)).numpy()
    assert not np.allclose(seed, theirs, rtol=1e-3)  # a tiny variance shows the eps
