"""The fast-kernel family (issue 6 item 3, seed page FastKernels): Options, fast_matmul, the fused
primitives beyond the generic table tests, and the tape variants linear_fast, matmul_fast,
mse_loss_fast (VJPs against float64 finite differences, agreement with the normal ops and with
torch, front-end dispatch, device errors).

The primitives fast_gemm, mse_loss_fwd and mse_loss_bwd are also in the primitive table, so
tests/test_primitives_parity.py runs them (random kinds and edge cases, every backend) against
their spec and contract; here we show that those contracts catch the wrong kernels that matter
(fp64 computed in float32, a float32 accumulation of the MSE).
"""

from __future__ import annotations

import numpy as np
import pytest

import torchlean as tl
import torchlean.nn.functional as TF
from torchlean import contract, ops, spec
from torchlean.kernels import cpu as cpu_backend
from torchlean.errors import ArgumentError, DeviceError, ShapeError
from torchlean.runtime import Buffer
from torchlean.runtime import primitives as P
from torchlean.runtime.device import cuda_unavailable_reason
from torchlean.testing.primitive_table import TABLE, run_case

from test_vjp import _report, _within, fd_grads

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

F32 = np.float32
U = 2.0**-24
S = 2.0**-149


def gamma(k):
    return k * U / (1 - k * U)


@pytest.fixture
def on(device):
    """Options with use_gpu matching the test device, restored afterwards."""
    with tl.options(tl.Options(use_gpu=device != "cpu")):
        yield device


def up(a, device="cpu"):
    return Buffer.from_numpy(np.asarray(a, F32), device)


# -- Options -----------------------------------------------------------------------------------------
def test_options_defaults_and_validation():
    o = tl.Options()
    assert (o.fast_kernels, o.use_gpu, o.fast_gpu_matmul_precision) == (False, False, "fp32")
    assert tl.get_options() == tl.Options()  # off by default
    assert tl.Options(True, True, "fp64").fast_gpu_matmul_precision == "fp64"
    for kwargs, field in [({"fast_kernels": 1}, "fast_kernels"), ({"use_gpu": "yes"}, "use_gpu"),
                          ({"fast_gpu_matmul_precision": "fp16"}, "fast_gpu_matmul_precision"),
                          ({"fast_gpu_matmul_precision": None}, "fast_gpu_matmul_precision")]:
        with pytest.raises(ArgumentError, match=field) as exc:
            tl.Options(**kwargs)
        assert "Options" in str(exc.value) and "got" in str(exc.value)
    with pytest.raises(Exception):
        tl.Options().fast_kernels = True  # frozen


def test_set_options_returns_previous_and_context_manager_restores():
    first = tl.get_options()
    prev = tl.set_options(tl.Options(fast_kernels=True))
    try:
        assert prev == first and tl.get_options().fast_kernels
    finally:
        assert tl.set_options(prev).fast_kernels
    assert tl.get_options() == first
    with tl.options(fast_kernels=True, fast_gpu_matmul_precision="fp64") as o:
        assert tl.get_options() is o and o.fast_gpu_matmul_precision == "fp64" and not o.use_gpu
        with tl.options(tl.Options(use_gpu=True)):
            assert tl.get_options() == tl.Options(use_gpu=True)
        assert tl.get_options() is o
    assert tl.get_options() == first
    with pytest.raises(KeyError):
        with tl.options(fast_kernels=True):
            raise KeyError("inside")
    assert tl.get_options() == first  # restored after an exception too
    with pytest.raises(ArgumentError, match="unknown field"):
        with tl.options(fast=True):
            pass
    with pytest.raises(ArgumentError, match="set_options"):
        tl.set_options({"fast_kernels": True})
    assert tl.get_options() == first


# -- fast_matmul -------------------------------------------------------------------------------------
def _rel_err(got, a, b):
    """max |got - a@b| / (|a||b|) with the exact product in long double where NumPy has it."""
    ref = np.matmul(a.astype(np.longdouble), b.astype(np.longdouble))
    mag = np.matmul(np.abs(a).astype(np.longdouble), np.abs(b).astype(np.longdouble))
    return float(np.max(np.abs(got - ref) / np.where(mag > 0, mag, 1)))


def _ill_conditioned(rng, m, n, p):
    """Rows of a nearly orthogonal to columns of b: results ~1e-8 of |a||b|."""
    a = rng.standard_normal((m, n))
    b = rng.standard_normal((n, p))
    b -= a.T @ np.linalg.lstsq(a.T, b, rcond=None)[0] * (1 - 1e-8)  # project out most of a's row space
    return a, b


def _host_cases():
    rng = np.random.default_rng(5)
    yield rng.standard_normal((37, 53)), rng.standard_normal((53, 29))
    yield 10.0 ** rng.uniform(-8, 8, (16, 300)), rng.standard_normal((300, 8)) * 1e3
    yield _ill_conditioned(rng, 8, 200, 12)


def _check_fast_matmul(use_gpu):
    for a, b in _host_cases():
        got = tl.fast_matmul(a, b, use_gpu=use_gpu, precision="fp64")
        assert got.dtype == np.float64 and got.shape == (a.shape[0], b.shape[1])
        assert _rel_err(got, a, b) <= 1e-9, _rel_err(got, a, b)
        np.testing.assert_allclose(got, a @ b, rtol=0, atol=1e-9 * float(np.max(np.abs(a) @ np.abs(b))))
        got32 = tl.fast_matmul(a, b, use_gpu=use_gpu, precision="fp32")
        a32, b32 = a.astype(F32).astype(np.float64), b.astype(F32).astype(np.float64)
        k = a.shape[1]
        tol = gamma(k + 1) * (np.abs(a32) @ np.abs(b32)) + (k + 1) * S
        exact32 = np.matmul(a32.astype(np.longdouble), b32.astype(np.longdouble))
        assert np.all(np.abs(got32 - exact32) <= tol)  # fp32: the float32 contract on the rounded inputs
        assert np.all(got32 == got32.astype(F32))      # ... and float32 values
    a, b = _ill_conditioned(np.random.default_rng(9), 4, 256, 4)
    assert _rel_err(tl.fast_matmul(a, b, use_gpu=use_gpu, precision="fp32"), a, b) > 1e3 * _rel_err(
        tl.fast_matmul(a, b, use_gpu=use_gpu, precision="fp64"), a, b)  # fp32 really is float32


def test_fast_matmul_cpu_fp64_agrees_with_numpy_and_fp32_within_contract():
    _check_fast_matmul(False)


@pytest.mark.cuda
def test_fast_matmul_gpu_fp64_agrees_with_numpy_and_fp32_within_contract(cuda_device):
    _check_fast_matmul(True)
    a = np.array([[1e300, 1.0]]), np.array([[1e-300], [1.0]])  # float64 range: not via float32
    assert tl.fast_matmul(*a, use_gpu=True, precision="fp64")[0, 0] == pytest.approx(2.0, rel=1e-15)
    # the seed's default GPU matmul alias is that FP64 path
    assert tl.gpu_matmul_fp64(*a)[0, 0] == pytest.approx(2.0, rel=1e-15)
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((33, 17)), rng.standard_normal((17, 5))
    assert np.array_equal(tl.gpu_matmul_fp64(x, y), tl.fast_matmul(x, y, use_gpu=True, precision="fp64"))
    assert np.abs(tl.gpu_matmul_fp64(x, y) - x @ y).max() <= 17 * 2.3e-16 * (np.abs(x) @ np.abs(y)).max()


@pytest.mark.parametrize("use_gpu", [False, pytest.param(True, marks=pytest.mark.cuda)])
def test_fast_matmul_empty_and_nonfinite(use_gpu):
    if use_gpu and cuda_unavailable_reason() is not None:
        pytest.skip(f"CUDA unavailable: {cuda_unavailable_reason()}")
    for prec in ("fp32", "fp64"):
        assert tl.fast_matmul(np.zeros((0, 3)), np.zeros((3, 2)), use_gpu, prec).shape == (0, 2)
        z = tl.fast_matmul(np.ones((2, 0)), np.ones((0, 3)), use_gpu, prec)
        assert z.shape == (2, 3) and np.all(z == 0)
        got = tl.fast_matmul(np.array([[1.0, np.nan], [1.0, 2.0]]), np.array([[1.0], [np.inf]]), use_gpu, prec)
        assert np.isnan(got[0, 0]) and got[1, 0] == np.inf
    assert tl.fast_matmul(np.array([[1e300]]), np.array([[1e-300]]), use_gpu, "fp64")[0, 0] == pytest.approx(1.0)
    assert np.isnan(tl.fast_matmul(np.array([[1e300]]), np.array([[1e-300]]), use_gpu, "fp32")[0, 0])  # inf * 0


def test_fast_matmul_errors():
    a, b = np.ones((2, 3)), np.ones((3, 4))
    cases = [
        (lambda: tl.fast_matmul(a.astype(F32), b), ArgumentError, "dtype float64"),
        (lambda: tl.fast_matmul(a, b.astype(np.int64)), ArgumentError, "dtype float64"),
        (lambda: tl.fast_matmul(a.tolist(), b), ArgumentError, "numpy.ndarray"),
        (lambda: tl.fast_matmul(np.ones(3), b), ShapeError, "2-D"),
        (lambda: tl.fast_matmul(a, np.ones((1, 3, 4))), ShapeError, "2-D"),
        (lambda: tl.fast_matmul(a, np.ones((4, 3))), ShapeError, "cannot be multiplied"),
        (lambda: tl.fast_matmul(a, b, precision="fp16"), ArgumentError, "precision"),
        (lambda: tl.fast_matmul(a, b, use_gpu="cuda"), ArgumentError, "use_gpu"),
    ]
    for fn, cls, text in cases:
        with pytest.raises(cls, match=text) as exc:
            fn()
        assert "fast_matmul" in str(exc.value)


def test_fast_matmul_use_gpu_without_gpu_is_a_device_error():
    if cuda_unavailable_reason() is None:
        pytest.skip("a GPU is present: the no-GPU error cannot be shown here")
    for prec in ("fp32", "fp64"):
        with pytest.raises(DeviceError) as exc:
            tl.fast_matmul(np.ones((2, 2)), np.ones((2, 2)), use_gpu=True, precision=prec)
        msg = str(exc.value)
        assert "fast_matmul" in msg and "use_gpu=True" in msg and "CUDA is not available" in msg
        assert "use_gpu=False" in msg  # says what to do instead
    with pytest.raises(DeviceError, match="gpu_matmul_fp64: use_gpu=True but CUDA is not available"):
        tl.gpu_matmul_fp64(np.ones((2, 2)), np.ones((2, 2)))  # the seed's GPU alias never falls back
    with pytest.raises(ArgumentError, match="gpu_matmul_fp64: b must have dtype float64"):
        tl.gpu_matmul_fp64(np.ones((2, 2)), np.ones((2, 2), F32))


# -- the contracts catch wrong kernels -------------------------------------------------------------
def _gemm_fp64_in_fp32(a, b, bias, m, k, n, ta, tb, fp64, genuine=cpu_backend.fast_gemm):
    return genuine(a, b, bias, m, k, n, ta, tb, 0)


def _mse_fwd_f32(x, t, n, mean):
    d = (x - t).astype(F32)
    s = F32(0)
    for v in d * d:  # a float32 running sum
        s = F32(s + v)
    return np.array([s / F32(n) if mean else s], F32)


def _mse_bwd_no_mean(x, t, g, n, mean, genuine=cpu_backend.mse_loss_bwd):
    return genuine(x, t, g, n, 0)


def _edge(name, i):
    return TABLE[name].edge_cases[i]


FAKES = [
    pytest.param("fast_gemm", _gemm_fp64_in_fp32, _edge("fast_gemm", 7), id="fast_gemm-fp64-computed-in-fp32"),
    pytest.param("fast_gemm", _gemm_fp64_in_fp32, _edge("fast_gemm", 9), id="fast_gemm-fp64-in-fp32-tenths"),
    pytest.param("fast_gemm", lambda a, b, bias, m, k, n, ta, tb, f, g=cpu_backend.fast_gemm:
                 g(a, b, None, m, k, n, ta, tb, f), _edge("fast_gemm", 1), id="fast_gemm-drops-bias"),
    pytest.param("fast_gemm", lambda a, b, bias, m, k, n, ta, tb, f, g=cpu_backend.fast_gemm:
                 g(a, b, bias, m, k, n, 0, tb, f), [np.arange(6, dtype=F32), np.arange(6, dtype=F32) - 3, None,
                                                   2, 3, 2, 1, 0, 1], id="fast_gemm-ignores-trans_a"),
    pytest.param("mse_loss_fwd", _mse_fwd_f32, _edge("mse_loss_fwd", 3), id="mse_fwd-float32-sum"),
    pytest.param("mse_loss_fwd", _mse_fwd_f32, _edge("mse_loss_fwd", 4), id="mse_fwd-float32-mean"),
    pytest.param("mse_loss_bwd", _mse_bwd_no_mean, _edge("mse_loss_bwd", 2), id="mse_bwd-missing-1/n"),
]


@pytest.mark.parametrize("name, fake, args", FAKES)
def test_contract_catches_wrong_kernel(monkeypatch, name, fake, args):
    info = TABLE[name]
    assert run_case(info, args, "cpu")[0].ok, "the genuine kernel must pass the case the fake fails"
    monkeypatch.setattr(cpu_backend, name, fake)
    verdict = run_case(info, args, "cpu")[0]
    assert not verdict.ok, f"the contract of {name} accepted a wrong kernel (ratio {verdict.ratio})"


# -- primitives: known answers, errors, determinism ------------------------------------------------
@pytest.mark.parametrize("fp64", [0, 1])
def test_fast_gemm_known_answers_for_every_layout(device, fp64):
    rng = np.random.default_rng(2)
    m, k, n = 5, 7, 3
    A = rng.integers(-8, 9, (m, k)).astype(F32)
    B = rng.integers(-8, 9, (k, n)).astype(F32)
    bias = rng.integers(-8, 9, n).astype(F32)
    want = (A.astype(np.float64) @ B + bias).reshape(-1)
    for ta in (0, 1):
        for tb in (0, 1):
            a = (A.T if ta else A).copy().reshape(-1)
            b = (B.T if tb else B).copy().reshape(-1)
            ab, bb, cb = up(a, device), up(b, device), up(bias, device)
            got = P.fast_gemm(ab, bb, cb, m, k, n, ta, tb, fp64).to_numpy()
            assert np.array_equal(got, want), (ta, tb)
            got = P.fast_gemm(ab, bb, None, m, k, n, ta, tb, fp64).to_numpy()
            assert np.array_equal(got, want - np.tile(bias, m)), (ta, tb)
            del ab, bb, cb


def test_fast_gemm_fp64_is_one_rounding_of_the_exact_product(device):
    # The exact dot product 1 + 2^-30 - 1 ... (cancellation) is representable only in float64.
    a = up([1.0, 2.0**-30, -1.0], device)
    b = up([1.0, 1.0, 1.0], device)
    assert P.fast_gemm(a, b, None, 1, 3, 1, 0, 0, 1).to_numpy()[0] == F32(2.0**-30)
    x = np.full(4096, 0.1, F32)
    got = P.fast_gemm(up(x, device), up(x, device), None, 1, 4096, 1, 0, 0, 1).to_numpy()[0]
    assert got == F32(4096 * float(F32(0.1)) ** 2)  # correctly rounded


def test_primitive_argument_errors():
    a, b = up(np.ones(6)), up(np.ones(6))
    with pytest.raises(ArgumentError, match="fast_gemm: argument fp64 must be 0 or 1"):
        P.fast_gemm(a, b, None, 2, 3, 2, 0, 0, 2)
    with pytest.raises(ArgumentError, match="trans_a"):
        P.fast_gemm(a, b, None, 2, 3, 2, "yes", 0, 0)
    with pytest.raises(ShapeError, match="bias"):
        P.fast_gemm(a, b, up(np.ones(3)), 2, 3, 2, 0, 0, 0)
    with pytest.raises(ShapeError, match="argument a"):
        P.fast_gemm(a, b, None, 3, 3, 2, 0, 0, 0)
    with pytest.raises(ShapeError, match="argument m"):
        P.fast_gemm(a, b, None, -1, 3, 2, 0, 0, 0)
    with pytest.raises(ShapeError, match="mse_loss_bwd: argument g"):
        P.mse_loss_bwd(a, b, up([1.0, 2.0]), 6, 1)
    with pytest.raises(ShapeError, match="mse_loss_fwd: argument target"):
        P.mse_loss_fwd(a, up(np.ones(5)), 6, 1)
    with pytest.raises(ArgumentError, match="mean"):
        P.mse_loss_fwd(a, b, 6, 3)


def test_mse_loss_fwd_is_repeatable_and_independent_of_thread_count():
    import numba

    rng = np.random.default_rng(4)
    n = 300_001
    x, t = up(rng.standard_normal(n)), up(rng.standard_normal(n))
    first = P.mse_loss_fwd(x, t, n, 1).to_numpy()
    threads = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        one = P.mse_loss_fwd(x, t, n, 1).to_numpy()
    finally:
        numba.set_num_threads(threads)
    assert first.tobytes() == one.tobytes() == P.mse_loss_fwd(x, t, n, 1).to_numpy().tobytes()
    ref = spec.mse_loss_fwd(x.to_numpy().astype(np.float64), t.to_numpy().astype(np.float64), n, 1)
    assert contract.compare(first, ref, contract.CONTRACTS["mse_loss_fwd"].bound(ref, None, None, n, 1)).ok


# -- tape variants: VJPs against float64 finite differences ----------------------------------------
def _vjp_case(device, fn, ref, xs, seed=0):
    rng = np.random.default_rng(seed)
    ts = [tl.tensor(x, requires_grad=True, device=device) for x in xs]
    y = fn(*ts)
    w = (rng.standard_normal(y.shape) if y.ndim else np.array(rng.standard_normal())).astype(F32)
    y.backward(tl.tensor(w, device=device))
    ours = [t.grad.numpy() for t in ts]
    fd = fd_grads(ref, xs, w)
    for i, (o, f) in enumerate(zip(ours, fd)):
        assert _within(o, f), f"input {i}: {_report(o, f)}"
        assert not _within(2 * f, f) and not _within(-f, f)  # the check discriminates


def _linear_ref(x, w, b=None):
    y = np.asarray(x, np.float64) @ np.asarray(w, np.float64).T
    return y if b is None else y + b


@pytest.mark.parametrize("precision", ["fp32", "fp64"])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_fast_vjp(on, precision, bias):
    rng = np.random.default_rng(11)
    xs = [rng.standard_normal((2, 3, 4)).astype(F32), rng.standard_normal((5, 4)).astype(F32)]
    if bias:
        xs.append(rng.standard_normal(5).astype(F32))
    _vjp_case(on, lambda *t: ops.linear_fast(*t, precision=precision), _linear_ref, xs)


@pytest.mark.parametrize("precision", ["fp32", "fp64"])
def test_matmul_fast_vjp(on, precision):
    rng = np.random.default_rng(12)
    xs = [rng.standard_normal((3, 5)).astype(F32), rng.standard_normal((5, 4)).astype(F32)]
    _vjp_case(on, lambda a, b: ops.matmul_fast(a, b, precision), lambda a, b: a @ b, xs)


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_mse_loss_fast_vjp(on, reduction):
    rng = np.random.default_rng(13)
    xs = [rng.standard_normal((3, 4)).astype(F32), rng.standard_normal((3, 4)).astype(F32)]
    red = np.mean if reduction == "mean" else np.sum
    _vjp_case(on, lambda a, b: ops.mse_loss_fast(a, b, reduction), lambda a, b: red((a - b) ** 2), xs)


# -- agreement with the normal ops -------------------------------------------------------------------
@pytest.mark.parametrize("precision", ["fp32", "fp64"])
def test_linear_fast_matches_linear_within_contracts(on, precision):
    rng = np.random.default_rng(21)
    x, w, b = rng.standard_normal((6, 33)), rng.standard_normal((7, 33)), rng.standard_normal(7)
    x, w, b = x.astype(F32), w.astype(F32), b.astype(F32)
    outs = []
    for fn in (ops.linear, lambda *t: ops.linear_fast(*t, precision=precision)):
        ts = [tl.tensor(v, requires_grad=True, device=on) for v in (x, w, b)]
        y = fn(*ts)
        g = np.cos(np.arange(42, dtype=F32)).reshape(6, 7)
        y.backward(tl.tensor(g, device=on))
        outs.append([y.numpy()] + [t.grad.numpy() for t in ts])
    x64, w64, b64 = x.astype(np.float64), w.astype(np.float64), b.astype(np.float64)
    mag = np.abs(x64) @ np.abs(w64).T + np.abs(b64)
    # both within gamma(k+1) mag of the exact result (bmm_nt plus the bias add; fast_gemm's contract)
    np.testing.assert_array_less(np.abs(outs[0][0] - outs[1][0]), 2 * gamma(34) * mag + 1e-30)
    gmag = np.abs(g.astype(np.float64))
    for i, m in enumerate([gmag @ np.abs(w64), gmag.T @ np.abs(x64), gmag.sum(0)]):
        np.testing.assert_array_less(np.abs(outs[0][i + 1] - outs[1][i + 1]), 2 * gamma(8) * m + 1e-30)


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_mse_loss_fast_matches_mse_loss(on, reduction):
    rng = np.random.default_rng(22)
    a, t = rng.standard_normal((9, 11)).astype(F32), rng.standard_normal((9, 11)).astype(F32)
    res = []
    for fn in (ops.mse_loss, ops.mse_loss_fast):
        at, tt = tl.tensor(a, requires_grad=True, device=on), tl.tensor(t, requires_grad=True, device=on)
        loss = fn(at, tt, reduction)
        loss.backward(tl.tensor(np.float32(0.7), device=on))
        res.append((loss.item(), at.grad.numpy(), tt.grad.numpy()))
    exact = np.sum((a.astype(np.float64) - t) ** 2) / (a.size if reduction == "mean" else 1)
    assert abs(res[1][0] - exact) <= 0.5 * np.spacing(F32(exact))  # correctly rounded here
    assert abs(res[0][0] - exact) <= (gamma(a.size) + 4 * U) * exact  # the normal op's bound
    # the backward is the same operations in the same order: the same bits
    assert np.array_equal(res[0][1], res[1][1]) and np.array_equal(res[0][2], res[1][2])


def test_mse_loss_fast_keeps_no_workspace_and_none_is_the_normal_op():
    a, t = tl.randn(4, 5, requires_grad=True), tl.randn(4, 5)
    loss = ops.mse_loss_fast(a, t)
    assert loss._node.name == "mse_loss_fast" and loss._node.workspace == ()
    assert ops.mse_loss_fast(a, t, "none")._node.name == "mse_loss"
    assert ops.mse_loss_fast(a, [[0.0] * 5] * 4).shape == ()  # array-like targets as mse_loss


def test_fp64_linear_is_much_closer_to_float64_than_fp32_at_k_4096():
    rng = np.random.default_rng(31)
    k = 4096
    x = rng.standard_normal((4, k)).astype(F32)
    w = rng.standard_normal((6, k)).astype(F32)
    b = rng.standard_normal(6).astype(F32)
    ref = x.astype(np.float64) @ w.astype(np.float64).T + b
    ys = {prec: ops.linear_fast(tl.tensor(x), tl.tensor(w), tl.tensor(b), precision=prec).numpy()
          for prec in ("fp32", "fp64")}
    # fp64: the exact value rounded once (float64's own error, ~1e-12 relative here, is far below
    # half an ulp): equal to float32(ref) everywhere. fp32: a float32 sum of 4096 terms, several ulps off.
    assert np.array_equal(ys["fp64"], ref.astype(F32))
    ulps32 = np.abs(ys["fp32"] - ref) / np.spacing(np.abs(ref).astype(F32))
    assert np.mean(ys["fp32"] != ref.astype(F32)) > 0.5 and ulps32.max() > 2.0, ulps32


# -- torch as a second oracle ----------------------------------------------------------------------
def test_linear_fast_and_mse_loss_fast_match_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(41)
    x, w, b = (rng.standard_normal(s).astype(F32) for s in ((5, 16), (3, 16), (3,)))
    tgt = rng.standard_normal((5, 3)).astype(F32)
    ts = [tl.tensor(v, requires_grad=True) for v in (x, w, b)]
    loss = ops.mse_loss_fast(ops.linear_fast(*ts), tl.tensor(tgt))
    loss.backward()
    tt = [torch.tensor(v, requires_grad=True) for v in (x, w, b)]
    tloss = torch.nn.functional.mse_loss(torch.nn.functional.linear(*tt), torch.tensor(tgt))
    tloss.backward()
    assert abs(loss.item() - tloss.item()) <= 1e-5 * abs(tloss.item())
    for o, t in zip(ts, tt):
        np.testing.assert_allclose(o.grad.numpy(), t.grad.numpy(), rtol=2e-5, atol=1e-6)


# -- front-end dispatch ------------------------------------------------------------------------------
def test_front_end_dispatch_on_and_off():
    a, b = tl.randn(3, 4, requires_grad=True), tl.randn(4, 2, requires_grad=True)
    w = tl.randn(2, 4, requires_grad=True)
    a3 = tl.randn(2, 3, 4, requires_grad=True)
    off = {"@": (a @ b)._node.name, "tl.matmul": tl.matmul(a, b)._node.name, "F.linear": TF.linear(a, w)._node.name,
           "mse": TF.mse_loss(a, a.detach())._node.name}
    assert off["F.linear"] == "linear" and off["mse"] == "mse_loss"
    assert "fast" not in "".join(off.values()), off  # off by default: the normal ops
    with tl.options(fast_kernels=True, fast_gpu_matmul_precision="fp64"):
        assert (a @ b)._node.name == "matmul_fast"
        assert tl.matmul(a, b)._node.name == "matmul_fast" and a.matmul(b)._node.name == "matmul_fast"
        assert TF.linear(a, w)._node.name == "linear_fast"
        assert tl.nn.Linear(4, 2)(a)._node.name == "linear_fast"
        assert TF.mse_loss(a, a.detach())._node.name == "mse_loss_fast"
        assert TF.mse_loss(a, a.detach(), reduction="sum")._node.name == "mse_loss_fast"
        assert TF.mse_loss(a, a.detach(), reduction="none")._node.name == "mse_loss"
        assert "fast" not in (a3 @ b)._node.name  # batched: the normal matmul
        assert "fast" not in (a @ tl.randn(4, requires_grad=True))._node.name  # 1-D: the normal matmul
        # fp64 precision reaches the kernel: the fp64 result is the rounded exact product
        x = tl.tensor([[1.0, 2.0**-30, -1.0]])
        assert (x @ tl.tensor([[1.0], [1.0], [1.0]])).numpy()[0, 0] == F32(2.0**-30)
    assert tl.get_options().fast_kernels is False


def _train(fast: bool, steps: int = 5):
    tl.manual_seed(0)
    model = tl.nn.Sequential(tl.nn.Linear(6, 16), tl.nn.Tanh(), tl.nn.Linear(16, 3))
    opt = tl.optim.SGD(model.parameters(), lr=0.1)
    rng = np.random.default_rng(3)
    x, y = tl.tensor(rng.standard_normal((32, 6)).astype(F32)), tl.tensor(rng.standard_normal((32, 3)).astype(F32))
    losses = []
    with tl.options(fast_kernels=fast):
        for _ in range(steps):
            opt.zero_grad()
            loss = TF.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return losses, [p.detach().numpy() for p in model.parameters()]


def test_nn_linear_training_with_fast_kernels_equals_without():
    slow, p_slow = _train(False)
    fast, p_fast = _train(True)
    assert fast[-1] < fast[0]
    # fp32 GEMMs in both (k <= 32 terms): the runs may differ in the last bits only
    np.testing.assert_allclose(fast, slow, rtol=1e-5)
    for a, b in zip(p_fast, p_slow):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


# -- errors ------------------------------------------------------------------------------------------
def test_tape_variant_errors():
    a, b = tl.randn(2, 3), tl.randn(3, 4)
    with pytest.raises(ShapeError, match="matmul_fast: expected 2-D"):
        ops.matmul_fast(tl.randn(2, 2, 3), b)
    with pytest.raises(ShapeError, match="matmul_fast"):
        ops.matmul_fast(a, tl.randn(4, 3))
    with pytest.raises(ArgumentError, match="matmul_fast: precision"):
        ops.matmul_fast(a, b, "half")
    with pytest.raises(ShapeError, match="linear_fast: input"):
        ops.linear_fast(a, tl.randn(4, 4))
    with pytest.raises(ShapeError, match="linear_fast: bias"):
        ops.linear_fast(a, tl.randn(4, 3), tl.randn(3))
    with pytest.raises(ArgumentError, match="linear_fast: precision"):
        ops.linear_fast(a, tl.randn(4, 3), precision="bf16")
    with pytest.raises(ShapeError, match="mse_loss_fast: input shape"):
        ops.mse_loss_fast(a, b)
    with pytest.raises(ArgumentError, match="mse_loss_fast: reduction"):
        ops.mse_loss_fast(a, a, "max")


def test_use_gpu_with_cpu_tensors_is_a_device_error():
    a, b = tl.randn(2, 3), tl.randn(3, 4)
    with tl.options(use_gpu=True):
        for name, fn in [("matmul_fast", lambda: ops.matmul_fast(a, b)),
                         ("linear_fast", lambda: ops.linear_fast(a, b.t())),
                         ("mse_loss_fast", lambda: ops.mse_loss_fast(a, a))]:
            with pytest.raises(DeviceError) as exc:
                fn()
            msg = str(exc.value)
            assert name in msg and "use_gpu=True" in msg and "cpu" in msg
        with tl.options(fast_kernels=True), pytest.raises(DeviceError, match="linear_fast"):
            TF.linear(a, b.t())  # the front end routes, then says why it cannot run


@pytest.mark.cuda
def test_cuda_tensors_without_use_gpu_is_a_device_error(cuda_device):
    a = tl.randn(2, 3, device=cuda_device)
    with tl.options(use_gpu=False):
        with pytest.raises(DeviceError, match="use_gpu=False"):
            ops.matmul_fast(a, a.t())
        with pytest.raises(DeviceError, match="mse_loss_fast"):
            ops.mse_loss_fast(a, a)
    with tl.options(use_gpu=True):
        with pytest.raises(DeviceError, match="one device"):
            ops.matmul_fast(a, tl.randn(3, 2))


# -- linear_bwd ------------------------------------------------------------------------------------
@pytest.mark.parametrize("rows, n_in, n_out", [(7, 5, 3), (300, 16, 33), (9000, 4, 2)])
def test_linear_bwd_is_the_three_products_bitwise(device, rows, n_in, n_out):
    """One call, the bits of bmm, bmm_tn and reduce_sum_axis0 (both sides of the CUDA column-sum
    paths: 300 rows take the one-launch tile, 9000 the partials)."""
    rng = np.random.default_rng(rows)
    g, x, w = (up(rng.standard_normal(n).astype(np.float32), device)
               for n in (rows * n_out, rows * n_in, n_out * n_in))
    dx, dw, db = P.linear_bwd(g, x, w, rows, n_in, n_out)
    for got, want in ((dx, P.bmm(g, w, 1, rows, n_out, n_in)), (dw, P.bmm_tn(g, x, 1, n_out, rows, n_in)),
                      (db, P.reduce_sum_axis0(g, rows, n_out))):
        assert np.array_equal(got.to_numpy().view(np.uint32), want.to_numpy().view(np.uint32))


def test_linear_vjp_uses_one_linear_bwd_call(monkeypatch):
    calls = []
    for name in ("linear_bwd", "bmm", "bmm_tn", "reduce_sum_axis0"):
        real = getattr(P, name)
        monkeypatch.setattr(P, name, lambda *a, _n=name, _r=real: calls.append(_n) or _r(*a))
    lin = tl.nn.Linear(4, 3)
    x = tl.randn(5, 4, requires_grad=True)
    lin(x).sum().backward()
    assert calls == ["linear_bwd"]
    calls.clear()
    lin(tl.randn(5, 4)).sum().backward()  # the input needs no gradient: dW and db alone
    assert calls == ["bmm_tn", "reduce_sum_axis0"]


def test_linear_bwd_errors():
    b6 = up(np.zeros(6, np.float32))
    with pytest.raises(ShapeError, match="linear_bwd.*w"):
        P.linear_bwd(b6, b6, up(np.zeros(5, np.float32)), 2, 3, 3)
    with pytest.raises(ShapeError, match="linear_bwd.*n_in"):
        P.linear_bwd(b6, b6, b6, 2, -3, 3)


@pytest.mark.cuda
def test_cuda_fast_gemm_adds_the_bias_in_cublaslt_and_repeats_bitwise(cuda_device, monkeypatch):
    """On CUDA a large linear's product and bias are one cuBLASLt call (the bias in the epilogue):
    it must load wherever CuPy's cuBLAS does, meet fast_gemm's contract on every layout, with
    non-finite values, and repeat bitwise; where it has no algorithm the plain path (SGEMM, then
    the bias kernel) gives the same values within the contract. Small outputs take the plain path."""
    from torchlean.kernels.cuda import cublaslt

    assert cublaslt.available()
    calls = []
    real = cublaslt.matmul_bias
    monkeypatch.setattr(cublaslt, "matmul_bias", lambda *a: calls.append(a[3:]) or real(*a))
    rng = np.random.default_rng(11)
    P.fast_gemm(up(np.ones(6, F32), cuda_device), up(np.ones(9, F32), cuda_device), up(np.ones(3, F32), cuda_device),
                2, 3, 3, 0, 1, 0)
    assert calls == []
    m, k, n = 2048, 48, 2048  # 2^22 outputs: the smallest that goes to cuBLASLt
    for ta in (0, 1):
        for tb in (0, 1):
            a = rng.standard_normal(m * k).astype(F32)
            b = rng.standard_normal(k * n).astype(F32)
            bias = rng.standard_normal(n).astype(F32)
            a[5], b[7], bias[3] = np.inf, np.nan, -np.inf
            args = [a, b, bias, m, k, n, ta, tb, 0]
            verdict = run_case(TABLE["fast_gemm"], args, cuda_device)[0]
            assert verdict.ok, verdict.detail
            ab, bb, cb = up(a, cuda_device), up(b, cuda_device), up(bias, cuda_device)
            first = P.fast_gemm(ab, bb, cb, m, k, n, ta, tb, 0).to_numpy()
            again = P.fast_gemm(ab, bb, cb, m, k, n, ta, tb, 0).to_numpy()
            assert np.array_equal(first.view(np.uint32), again.view(np.uint32))
            with monkeypatch.context() as mp:
                mp.setattr(cublaslt, "matmul_bias", lambda *a: None)
                plain = P.fast_gemm(ab, bb, cb, m, k, n, ta, tb, 0).to_numpy()
            assert np.array_equal(np.isnan(plain), np.isnan(first))
            fin = np.isfinite(first)
            np.testing.assert_allclose(plain[fin], first[fin], rtol=1e-4, atol=1e-4)
    assert len(calls) == 12  # run_case, first and again on each layout


@pytest.mark.cuda
def test_cuda_cublaslt_plans_stay_bounded(cuda_device, monkeypatch):
    """A program of ever new shapes does not grow the plan cache past its bound: the plans are
    destroyed and made again, and the products stay right."""
    from torchlean.kernels.cuda import cublaslt

    monkeypatch.setattr(cublaslt, "_MAX_PLANS", 2)
    rng = np.random.default_rng(12)
    m = n = 2048
    for k in (8, 16, 24, 8):
        a = rng.integers(-4, 5, m * k).astype(F32)
        b = rng.integers(-4, 5, n * k).astype(F32)
        bias = rng.integers(-4, 5, n).astype(F32)
        got = P.fast_gemm(up(a, cuda_device), up(b, cuda_device), up(bias, cuda_device), m, k, n, 0, 1, 0).to_numpy()
        want = (a.reshape(m, k).astype(np.float64) @ b.reshape(n, k).T.astype(np.float64) + bias).reshape(-1)
        assert np.array_equal(got, want)  # small integers: every sum is exact
        assert len(cublaslt._plans) <= 2
