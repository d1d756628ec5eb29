"""The convolution family: conv, conv_bwd_input, conv_bwd_weight, conv_transpose and their ops.

* VJPs of conv1d/2d/3d, a rank-4 conv_nd and the transposed convs (bias, stride 2, padding,
  output_padding, unbatched, padding='same' with an even kernel) against float64 central finite
  differences of independent NumPy references (``test_vjp``'s fd_grads and tolerance). The
  references are written from PyTorch's definitions, not from our spec: the conv loops over
  output positions (one window times the weight each), the transposed conv scatters every input
  position's kernel-sized patch.
* Agreement with torch.nn.functional on the same inputs (on the ``device`` fixture's device; TF32
  off on CUDA) within 2x our contract bound (both are within the bound of the exact result).
* Known answers for the conventions (cross-correlation, zero padding, stride, transposed shapes,
  the NaN rule at the padding), the CPU's chunking and its stride-1 backward shortcut, empty
  sizes, determinism, contracts that catch wrong kernels, and errors naming op and argument.
Primitive-level parity against the spec on random and edge geometries lives in the primitive
table (torchlean/testing/table_conv.py, run by test_primitives_parity.py).
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
from torchlean import ops
from torchlean.kernels import cpu as cpu_backend
from torchlean.kernels.plans import conv_plan_of
from torchlean.contract import CONTRACTS
from torchlean.errors import ArgumentError, ShapeError
from torchlean.runtime import Buffer
from torchlean.runtime import primitives as P
from torchlean.testing.primitive_table import TABLE, run_case

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

F32 = np.float32
CPU_CONV = sys.modules["torchlean.kernels.cpu.conv"]
CPU_PARALLEL = sys.modules["torchlean.kernels.cpu.parallel"]  # the module (``cpu_backend.conv`` is the function)


# -- independent float64 references ----------------------------------------------------------
def np_conv(x, w, b=None, stride=1, padding=0):
    """PyTorch's conv by its definition: every output position is one window of the zero-padded
    input contracted with the whole weight. x (N, C, *S), w (O, C, *K)."""
    r = w.ndim - 2
    st = (stride,) * r if np.isscalar(stride) else tuple(stride)
    pd = (padding,) * r if np.isscalar(padding) else tuple(padding)
    xp = np.pad(np.asarray(x, np.float64), [(0, 0), (0, 0)] + [(p, p) for p in pd])
    k = w.shape[2:]
    out = tuple((xp.shape[2 + i] - k[i]) // st[i] + 1 for i in range(r))
    y = np.zeros((x.shape[0], w.shape[0]) + out)
    axes = (list(range(1, r + 2)), list(range(1, r + 2)))
    for pos in np.ndindex(*out):
        win = xp[(slice(None), slice(None)) + tuple(slice(q * s, q * s + kk) for q, s, kk in zip(pos, st, k))]
        y[(slice(None), slice(None)) + pos] = np.tensordot(win, np.asarray(w, np.float64), axes=axes)
    if b is not None:
        y += np.asarray(b, np.float64).reshape((1, -1) + (1,) * r)
    return y


def np_conv_transpose(x, w, b=None, stride=1, padding=0, output_padding=0):
    """PyTorch's conv_transpose by its definition: input position i adds x[:, :, i] times the
    kernel at i*stride, then `padding` is cropped from both ends. x (N, C_in, *S), w (C_in, C_out, *K)."""
    r = w.ndim - 2
    st = (stride,) * r if np.isscalar(stride) else tuple(stride)
    pd = (padding,) * r if np.isscalar(padding) else tuple(padding)
    op = (output_padding,) * r if np.isscalar(output_padding) else tuple(output_padding)
    k = w.shape[2:]
    sp = x.shape[2:]
    full = np.zeros((x.shape[0], w.shape[1]) + tuple((s - 1) * t + kk + o for s, t, kk, o in zip(sp, st, k, op)))
    for pos in np.ndindex(*sp):
        patch = np.tensordot(np.asarray(x, np.float64)[(slice(None), slice(None)) + pos], np.asarray(w, np.float64),
                             axes=([1], [0]))  # (N, C_out, *K)
        full[(slice(None), slice(None)) + tuple(slice(q * t, q * t + kk) for q, t, kk in zip(pos, st, k))] += patch
    out = tuple((s - 1) * t - 2 * p + kk + o for s, t, p, kk, o in zip(sp, st, pd, k, op))
    y = full[(slice(None), slice(None)) + tuple(slice(p, p + o) for p, o in zip(pd, out))]
    if b is not None:
        y = y + np.asarray(b, np.float64).reshape((1, -1) + (1,) * r)
    return y


def _unbatched(ref):
    return lambda x, *rest: ref(x[None], *rest)[0]


# -- VJP against finite differences ----------------------------------------------------------
def N(*shape):
    return shape


VJP_CASES = [
    # name, shapes (x, w, [b]), ours(x, w, b?), ref(x, w, b?)
    ("conv1d_bias_stride2_pad1", [N(2, 3, 7), N(4, 3, 3), N(4)],
     lambda x, w, b: TF.conv1d(x, w, b, stride=2, padding=1), lambda x, w, b: np_conv(x, w, b, 2, 1)),
    ("conv1d_pad_ge_half_kernel", [N(2, 2, 5), N(3, 2, 3)],
     lambda x, w: TF.conv1d(x, w, padding=2), lambda x, w: np_conv(x, w, None, 1, 2)),
    ("conv2d_bias_stride21", [N(2, 2, 5, 6), N(3, 2, 3, 2), N(3)],
     lambda x, w, b: TF.conv2d(x, w, b, stride=(2, 1), padding=1), lambda x, w, b: np_conv(x, w, b, (2, 1), 1)),
    ("conv2d_1x1", [N(2, 3, 4, 3), N(2, 3, 1, 1), N(2)],
     lambda x, w, b: TF.conv2d(x, w, b), lambda x, w, b: np_conv(x, w, b)),
    ("conv2d_unbatched_same", [N(2, 5, 5), N(3, 2, 3, 3)],
     lambda x, w: TF.conv2d(x, w, padding="same"), _unbatched(lambda x, w: np_conv(x, w, None, 1, 1))),
    ("conv2d_same_even_kernel", [N(1, 2, 5, 4), N(2, 2, 2, 3), N(2)],
     lambda x, w, b: TF.conv2d(x, w, b, padding="same"),
     lambda x, w, b: np_conv(x, w, b, 1, (1, 1))[:, :, 1:, :]),
    ("conv3d_bias", [N(1, 2, 4, 3, 5), N(2, 2, 2, 3, 2), N(2)],
     lambda x, w, b: TF.conv3d(x, w, b, stride=(1, 2, 2), padding=(1, 1, 0)),
     lambda x, w, b: np_conv(x, w, b, (1, 2, 2), (1, 1, 0))),
    ("conv_nd_rank4", [N(1, 2, 3, 3, 3, 3), N(2, 2, 2, 2, 2, 2), N(2)],
     lambda x, w, b: ops.conv_nd(x, w, b, stride=(1, 2, 1, 2), padding=(1, 0, 1, 0)),
     lambda x, w, b: np_conv(x, w, b, (1, 2, 1, 2), (1, 0, 1, 0))),
    ("conv_transpose1d_bias_s2_p1_op1", [N(2, 3, 4), N(3, 2, 3), N(2)],
     lambda x, w, b: TF.conv_transpose1d(x, w, b, stride=2, padding=1, output_padding=1),
     lambda x, w, b: np_conv_transpose(x, w, b, 2, 1, 1)),
    ("conv_transpose1d_unbatched", [N(2, 4), N(2, 3, 2)],
     lambda x, w: TF.conv_transpose1d(x, w), _unbatched(lambda x, w: np_conv_transpose(x, w))),
    ("conv_transpose2d_bias", [N(1, 2, 3, 4), N(2, 3, 3, 2), N(3)],
     lambda x, w, b: TF.conv_transpose2d(x, w, b, stride=(2, 3), padding=(1, 0), output_padding=(1, 2)),
     lambda x, w, b: np_conv_transpose(x, w, b, (2, 3), (1, 0), (1, 2))),
    ("conv_transpose3d_bias", [N(1, 2, 2, 3, 2), N(2, 2, 3, 2, 2), N(2)],
     lambda x, w, b: TF.conv_transpose3d(x, w, b, stride=(2, 1, 2), padding=(1, 0, 1), output_padding=(1, 0, 0)),
     lambda x, w, b: np_conv_transpose(x, w, b, (2, 1, 2), (1, 0, 1), (1, 0, 0))),
    ("conv_transpose_nd_rank4", [N(1, 1, 2, 2, 2, 2), N(1, 2, 2, 2, 2, 2), N(2)],
     lambda x, w, b: ops.conv_transpose_nd(x, w, b, stride=2, padding=(0, 1, 0, 1), output_padding=(1, 0, 0, 1)),
     lambda x, w, b: np_conv_transpose(x, w, b, 2, (0, 1, 0, 1), (1, 0, 0, 1))),
]


@pytest.mark.parametrize("name, shapes, ours, ref", VJP_CASES, ids=[c[0] for c in VJP_CASES])
def test_vjp_matches_finite_differences(name, shapes, ours, ref, device):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    xs = [rng.standard_normal(s).astype(F32) for s in shapes]
    ref_out = np.asarray(ref(*[x.astype(np.float64) for x in xs]))
    w = rng.standard_normal(ref_out.shape).astype(F32)
    assert_vjp_matches_fd(name, ours, ref, xs, ref_out, w, device)


def test_vjp_computes_only_the_gradients_asked_for():
    rng = np.random.default_rng(3)
    x = tl.tensor(rng.standard_normal((1, 2, 5, 5)).astype(F32), requires_grad=True)
    w = tl.tensor(rng.standard_normal((3, 2, 3, 3)).astype(F32))
    b = tl.tensor(rng.standard_normal(3).astype(F32))
    calls = []
    real = {n: getattr(cpu_backend, n) for n in ("conv_bwd_input", "conv_bwd_weight")}

    def spy(n):
        def f(*a):
            calls.append(n)
            return real[n](*a)
        return f

    mp = pytest.MonkeyPatch()
    try:
        for n in real:
            mp.setattr(cpu_backend, n, spy(n))
        TF.conv2d(x, w, b, padding=1).sum().backward()
    finally:
        mp.undo()
    assert calls == ["conv_bwd_input"] and w.grad is None and b.grad is None and x.grad is not None


# -- torch as a second oracle ----------------------------------------------------------------
TORCH_CASES = [
    # rank, N, C_in, C_out, spatial, kernel, stride, padding, output_padding (transposed only)
    (1, 3, 4, 5, (17,), (3,), (1,), (1,), None),
    (1, 2, 3, 2, (16,), (4,), (3,), (2,), None),
    (2, 2, 6, 4, (9, 8), (3, 3), (1, 1), (1, 1), None),
    (2, 2, 3, 5, (11, 7), (3, 2), (2, 3), (2, 1), None),
    (2, 3, 8, 4, (6, 5), (1, 1), (1, 1), (0, 0), None),
    (3, 1, 2, 3, (5, 6, 4), (3, 3, 2), (1, 2, 1), (1, 1, 0), None),
    (1, 2, 3, 2, (6,), (3,), (2,), (1,), (1,)),
    (2, 2, 4, 3, (4, 5), (3, 2), (2, 2), (1, 0), (1, 1)),
    (2, 1, 3, 2, (5, 3), (3, 3), (1, 1), (1, 1), (0, 0)),
    (3, 1, 2, 2, (3, 2, 3), (3, 2, 2), (2, 1, 2), (1, 0, 1), (1, 0, 0)),
]


def _gamma(k):
    u = 2.0**-24
    k = np.asarray(k, np.float64)
    return k * u / (1 - k * u)


@pytest.mark.parametrize("case", TORCH_CASES, ids=[f"{'T' if c[8] else ''}conv{c[0]}d-{c[4]}-s{c[6]}-p{c[7]}"
                                                    for c in TORCH_CASES])
def test_agrees_with_torch(case, device, request):
    torch = pytest.importorskip("torch")
    rank, n, ci, co, sp, kn, st, pd, opd = case
    transposed = opd is not None
    rng = np.random.default_rng(zlib.crc32(repr(case).encode()))
    x = rng.standard_normal((n, ci) + sp).astype(F32)
    w = rng.standard_normal(((ci, co) if transposed else (co, ci)) + kn).astype(F32)
    b = rng.standard_normal(co).astype(F32)
    dev = "cuda" if device == "cuda" else "cpu"
    if dev == "cuda":  # true float32 in cuDNN and cuBLAS, restored after the test
        saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
        request.addfinalizer(lambda: (setattr(torch.backends.cudnn, "allow_tf32", saved[0]),
                                      setattr(torch.backends.cuda.matmul, "allow_tf32", saved[1])))
    T = [torch.tensor(a, device=dev, requires_grad=True) for a in (x, w, b)]
    L = [tl.tensor(a, device=device, requires_grad=True) for a in (x, w, b)]
    name = f"conv{'_transpose' if transposed else ''}{rank}d"
    kw = dict(stride=st, padding=pd) | (dict(output_padding=opd) if transposed else {})
    yt = getattr(torch.nn.functional, name)(*T, **kw)
    yl = getattr(TF, name)(*L, **kw)
    g = rng.standard_normal(tuple(yt.shape)).astype(F32)
    yt.backward(torch.tensor(g, device=dev))
    yl.backward(tl.tensor(g, device=device))
    assert tuple(yl.shape) == tuple(yt.shape)
    # tolerance: twice the contract bound of the primitive that computed each result
    out = tuple(yt.shape[2:])
    if transposed:
        y_bound = CONTRACTS["conv_transpose"].bound(None, x, w, b, n, ci, co, sp, kn, st, pd, opd)
        dx_bound = CONTRACTS["conv"].bound(None, g, w, None, n, co, ci, out, kn, st, pd)
        dw_bound = CONTRACTS["conv_bwd_weight"].bound(None, g, x, n, co, ci, out, kn, st, pd)
    else:
        y_bound = CONTRACTS["conv"].bound(None, x, w, b, n, ci, co, sp, kn, st, pd)
        dx_bound = CONTRACTS["conv_bwd_input"].bound(None, g, w, n, ci, co, sp, kn, st, pd)
        dw_bound = CONTRACTS["conv_bwd_weight"].bound(None, x, g, n, ci, co, sp, kn, st, pd)
    g3 = np.abs(g.astype(np.float64)).reshape(n, co, -1)
    db_bound = _gamma(n * g3.shape[2]) * g3.sum(axis=(0, 2))
    for what, ours, theirs, bound in [("y", yl.numpy(), yt.detach().cpu().numpy(), y_bound),
                                      ("dx", L[0].grad.numpy(), T[0].grad.cpu().numpy(), dx_bound),
                                      ("dw", L[1].grad.numpy(), T[1].grad.cpu().numpy(), dw_bound),
                                      ("db", L[2].grad.numpy(), T[2].grad.cpu().numpy(), db_bound)]:
        err = np.abs(ours.astype(np.float64) - theirs).reshape(-1)
        tol = 2 * np.broadcast_to(np.asarray(bound, np.float64).reshape(-1), err.shape)
        assert np.all(err <= tol), f"{name} {what}: max err/tol {np.max(err / tol):.3g} (max err {err.max():.3g})"


# -- known answers: the conventions -------------------------------------------------------------
def _t(a, device, grad=False):
    return tl.tensor(np.asarray(a, F32), device=device, requires_grad=grad)


def test_conv1d_is_cross_correlation_with_zero_padding_and_stride(device):
    x = _t([[[1, 2, 3, 4, 5]]], device)
    w = _t([[[1, 0, -1]]], device)  # not flipped: y[i] = x[i] - x[i+2]
    assert TF.conv1d(x, w).numpy().tolist() == [[[-2, -2, -2]]]
    assert TF.conv1d(x, w, padding=1).numpy().tolist() == [[[-2, -2, -2, -2, 4]]]
    assert TF.conv1d(x, w, stride=2, padding=1).numpy().tolist() == [[[-2, -2, 4]]]
    assert TF.conv1d(x, w, _t([10], device), stride=3).numpy().tolist() == [[[8]]]
    assert TF.conv1d(x, w, padding="valid").shape == (1, 1, 3)


def test_conv2d_known_answer(device):
    x = _t(np.arange(16).reshape(1, 1, 4, 4), device)
    w = _t([[[[1, 2], [3, 4]]]], device)
    y = TF.conv2d(x, w, stride=2).numpy()
    # window at (0,0): 0*1 + 1*2 + 4*3 + 5*4 = 34; (0,2): 2+6+18+28... computed by hand
    img = np.arange(16).reshape(4, 4)
    expect = [[sum(img[i:i + 2, j:j + 2].ravel() * [1, 2, 3, 4]) for j in (0, 2)] for i in (0, 2)]
    assert y.tolist() == [[expect]]


def test_conv_transpose1d_known_answer(device):
    x = _t([[[1, 2]]], device)
    w = _t([[[1, 10, 100]]], device)
    assert TF.conv_transpose1d(x, w, stride=2).numpy().tolist() == [[[1, 10, 102, 20, 200]]]
    assert TF.conv_transpose1d(x, w, stride=2, padding=1).numpy().tolist() == [[[10, 102, 20]]]
    assert TF.conv_transpose1d(x, w, stride=2, padding=1, output_padding=1).numpy().tolist() == [[[10, 102, 20, 200]]]


def test_nan_convention_at_the_padding(device):
    """As PyTorch CPU: the forward multiplies padded zeros by the weights (0 * inf = NaN on the
    border), the input gradient sums only taps that land inside x (no NaN from the padding)."""
    x = _t(np.ones((1, 1, 5)), device, grad=True)
    w = _t([[[np.inf, 1, 1]]], device)
    y = TF.conv1d(x, w, padding=1)
    got = y.numpy()[0, 0]
    assert np.isnan(got[0]) and np.all(np.isposinf(got[1:]))
    y.backward(_t(np.ones((1, 1, 5)), device))
    g = x.grad.numpy()[0, 0]
    assert np.all(np.isposinf(g[:4])) and g[4] == 2.0, g


def test_shapes_and_empty_sizes(device):
    w = _t(np.ones((3, 2, 3, 3)), device, grad=True)
    x = _t(np.ones((0, 2, 5, 5)), device, grad=True)
    y = TF.conv2d(x, w, padding=1)
    assert y.shape == (0, 3, 5, 5)
    y.sum().backward()
    assert w.grad.numpy().tolist() == np.zeros((3, 2, 3, 3)).tolist() and x.grad.shape == (0, 2, 5, 5)
    # in_c = 0 at the primitive: no terms, the bias alone
    b = Buffer.from_numpy(np.array([1.5, -2.0], F32), device)
    got = P.conv(Buffer.from_numpy(np.zeros(0, F32), device), Buffer.from_numpy(np.zeros(0, F32), device), b,
                 2, 0, 2, (3,), (3,), (1,), (1,)).to_numpy()
    assert got.tolist() == [1.5] * 3 + [-2.0] * 3 + [1.5] * 3 + [-2.0] * 3
    assert TF.conv_transpose2d(_t(np.ones((2, 3, 3)), device), _t(np.ones((2, 4, 2, 2)), device), stride=2).shape == \
        (4, 6, 6)


def test_results_are_deterministic(device):
    rng = np.random.default_rng(5)
    args = [Buffer.from_numpy(rng.standard_normal(n).astype(F32), device) for n in (2 * 3 * 9 * 9, 4 * 3 * 9, 4)]
    dy = Buffer.from_numpy(rng.standard_normal(2 * 4 * 5 * 5).astype(F32), device)
    dims = (2, 3, 4, (9, 9), (3, 3), (2, 2), (1, 1))
    for fn, a in [(P.conv, (args[0], args[1], args[2])), (P.conv_bwd_input, (dy, args[1])),
                  (P.conv_bwd_weight, (args[0], dy))]:
        r1, r2 = fn(*a, *dims).to_numpy(), fn(*a, *dims).to_numpy()
        assert r1.tobytes() == r2.tobytes(), fn.__name__


# -- the CPU backend: chunks and shortcuts -------------------------------------------------------
@pytest.mark.parametrize("col_bytes, waste, min_macs", [(1, 1.1, 0), (3000, 1.1, 1 << 60), (8 << 20, 1e9, 0),
                                                       (3000, 1e9, 1 << 60), (8 << 20, 0.0, 0)])
def test_cpu_chunking_and_paths(monkeypatch, col_bytes, waste, min_macs):
    """Chunks of one image, of a few images and of the whole batch, with the last-axis unfold forced
    on wherever it applies (waste 1e9) or off (0), the batch cut into parts (min_macs 0) or not,
    must all meet the contracts."""
    rng = np.random.default_rng(col_bytes + int(waste))
    monkeypatch.setattr(CPU_CONV, "_ND_PART_MACS", min_macs)
    monkeypatch.setattr(CPU_CONV, "_PART_MACS", min_macs)
    geoms = [(5, 3, 4, (7, 6), (3, 2), (1, 1), (1, 1)), (5, 3, 4, (7, 6), (3, 3), (2, 1), (2, 1)),
             (4, 3, 2, (5, 5), (1, 1), (1, 1), (0, 0)), (2, 2, 3, (17, 16), (3, 3), (1, 2), (1, 1)),
             (2, 2, 3, (4, 5, 6), (3, 2, 3), (1, 1, 2), (1, 0, 2))]
    monkeypatch.setattr(CPU_CONV, "_COL_BYTES", col_bytes)
    monkeypatch.setattr(CPU_CONV, "_UNFOLD_MAX_WASTE", waste)
    for n, ci, co, sp, kn, st, pd in geoms:
        out = tuple((s + 2 * p - k) // t + 1 for s, k, t, p in zip(sp, kn, st, pd))
        x = rng.standard_normal(n * ci * math.prod(sp)).astype(F32)
        w = rng.standard_normal(co * ci * math.prod(kn)).astype(F32)
        dy = rng.standard_normal(n * co * math.prod(out)).astype(F32)
        b = rng.standard_normal(co).astype(F32)
        dims = [n, ci, co, sp, kn, st, pd]
        for name, args in [("conv", [x, w, b] + dims), ("conv_bwd_input", [dy, w] + dims),
                           ("conv_bwd_weight", [x, dy] + dims),
                           ("conv_transpose", [dy, w, rng.standard_normal(ci).astype(F32)] +
                            [n, co, ci, out, kn, st, pd, tuple(0 for _ in st)])]:
            if name == "conv_transpose" and any(t > 1 for t in st):
                continue  # the transposed output of `out` need not be `sp` at stride > 1
            verdict = run_case(TABLE[name], args, "cpu")[0]
            assert verdict.ok, f"{name} with chunks of {col_bytes} bytes: {verdict.detail}"


@pytest.mark.parametrize("plan", ["im2col", "unfold", "stack"])
def test_cpu_each_conv_layout_meets_the_contracts(monkeypatch, plan):
    """Force each GEMM layout of the CPU conv wherever it applies (the cost model picks one)."""
    real = CPU_CONV._plan

    def forced(kernel, stride, lo, hi, spatial, out, c, o_n):
        monkeypatch.setattr(CPU_CONV, "_UNFOLD_MAX_WASTE", 1e9)
        try:
            if plan == "unfold":
                ok = CPU_CONV._unfold_cost(kernel, stride, lo, hi, spatial, out, c, o_n) < math.inf
            elif plan == "stack":
                ok = CPU_CONV._unfold_cost(tuple(kernel) + (1,), tuple(stride) + (1,), tuple(lo) + (0,),
                                           tuple(hi) + (0,),
                                           tuple(spatial) + (1,), tuple(out) + (1,), c, o_n) < math.inf
            else:
                ok = True
        finally:
            monkeypatch.setattr(CPU_CONV, "_UNFOLD_MAX_WASTE", 1.5)
        return plan if ok else real(kernel, stride, lo, hi, spatial, out, c, o_n)

    monkeypatch.setattr(CPU_CONV, "_plan", forced)
    rng = np.random.default_rng(["im2col", "unfold", "stack"].index(plan))
    for n, ci, co, sp, kn, st, pd in [(3, 3, 4, (7, 6), (3, 2), (1, 1), (1, 1)), (2, 2, 3, (9,), (4,), (1,), (2,)),
                                      (2, 3, 2, (5, 4, 6), (3, 2, 3), (1, 1, 2), (1, 2, 0)),
                                      (2, 2, 3, (6, 5), (2, 3), (1, 1), (3, 0))]:
        out = tuple((s + 2 * p - k) // t + 1 for s, k, t, p in zip(sp, kn, st, pd))
        x = rng.standard_normal(n * ci * math.prod(sp)).astype(F32)
        w = rng.standard_normal(co * ci * math.prod(kn)).astype(F32)
        dy = rng.standard_normal(n * co * math.prod(out)).astype(F32)
        dims = [n, ci, co, sp, kn, st, pd]
        for name, args in [("conv", [x, w, rng.standard_normal(co).astype(F32)] + dims),
                           ("conv_bwd_input", [dy, w] + dims)]:
            verdict = run_case(TABLE[name], args, "cpu")[0]
            assert verdict.ok, f"{name} by {plan}: {verdict.detail}"


def test_cpu_images_in_parallel_are_repeatable(monkeypatch):
    """Parts of the batch: the same answers as one part (within the contract; BLAS edge tiles may
    round differently when a chunk holds other images) and bitwise repeatable for a fixed split;
    OpenBLAS is left at one thread (raising it again wakes its spinning threads), its former count
    kept for restore_process_settings()."""
    if CPU_PARALLEL.blas_threads() is None:
        pytest.skip("NumPy's BLAS is not an OpenBLAS whose thread count we can set")
    rng = np.random.default_rng(9)
    n, ci, co, sp, kn, st, pd = 5, 3, 4, (9, 8), (3, 3), (1, 1), (1, 1)
    x = rng.standard_normal(n * ci * math.prod(sp)).astype(F32)
    w = rng.standard_normal(co * ci * 9).astype(F32)
    dy = rng.standard_normal(n * co * math.prod(sp)).astype(F32)
    dims = (n, ci, co, sp, kn, st, pd)
    before = CPU_PARALLEL.blas_threads()
    plan = conv_plan_of(*dims)

    def run():
        return [cpu_backend.conv(x, w, None, plan), cpu_backend.conv_bwd_input(dy, w, plan),
                cpu_backend.conv_bwd_weight(x, dy, plan)]

    serial = run()
    monkeypatch.setattr(CPU_CONV, "_ND_PART_MACS", 0)
    monkeypatch.setattr(CPU_CONV, "_PART_MACS", 0)
    monkeypatch.setattr(CPU_PARALLEL, "threads", lambda: 3)
    par, again = run(), run()
    for name, a, b, s in zip(("conv", "conv_bwd_input", "conv_bwd_weight"), par, again, serial):
        assert a.tobytes() == b.tobytes(), f"{name}: parallel runs differ"
        np.testing.assert_allclose(a, s, rtol=1e-5, atol=1e-5, err_msg=name)
    assert CPU_PARALLEL.blas_threads() == 1
    assert CPU_PARALLEL.blas_found_threads() in (None, before) or before == 1


def _bwd_input_all_phases(dy, w, plan):
    batch, in_c, out_c, spatial, kernel, stride, padding, out = plan[:8]
    dx = np.empty((batch, in_c) + tuple(spatial), F32)
    CPU_CONV._bwd_input_by_phases(dx, dy.reshape((batch, out_c) + out), w.reshape((out_c, in_c) + tuple(kernel)),
                                  kernel, stride, padding, spatial, out)
    return dx.reshape(-1)


@pytest.mark.parametrize("geometry", [(2, 3, 2, (7, 8), (3, 2), (2, 3), (1, 1)),
                                      (1, 2, 3, (5, 6, 7), (3, 3, 2), (2, 1, 3), (1, 2, 0)),
                                      (2, 2, 2, (9, 4), (2, 1), (3, 2), (0, 0)),
                                      (1, 1, 2, (6, 6), (4, 4), (2, 2), (3, 1))])
def test_cpu_bwd_input_phase_split_at_any_stride(monkeypatch, geometry):
    """The phase split (used by default at stride 1 and in 1-D) is exact at every stride and rank:
    prod(stride) stride-1 convs, stride > kernel leaving phases no tap reaches, padding >= kernel."""
    n, ci, co, sp, kn, st, pd = geometry
    out = tuple((s + 2 * p - k) // t + 1 for s, k, t, p in zip(sp, kn, st, pd))
    rng = np.random.default_rng(len(sp) * 7 + st[0])
    args = [rng.standard_normal(n * co * math.prod(out)).astype(F32),
            rng.standard_normal(co * ci * math.prod(kn)).astype(F32), n, ci, co, sp, kn, st, pd]
    monkeypatch.setattr(cpu_backend, "conv_bwd_input", _bwd_input_all_phases)
    verdict = run_case(TABLE["conv_bwd_input"], args, "cpu")[0]
    assert verdict.ok, verdict.detail


@pytest.mark.parametrize("special", [1.0, np.inf, np.nan])
def test_cpu_weight_gradient_by_unfold_keeps_the_nan_rule(monkeypatch, special):
    """Rank >= 3 weight gradients by the last-axis unfold multiply zeros by x on padded rows; with an
    inf/NaN in x that would be a NaN the spec does not have, so those inputs must go by im2col."""
    monkeypatch.setattr(CPU_CONV, "_UNFOLD_MAX_WASTE", 1e9)
    rng = np.random.default_rng(4)
    dims = [2, 2, 2, (8, 8, 7), (3, 3, 2), (1, 1, 1), (1, 1, 0)]
    x = rng.standard_normal(2 * 2 * 8 * 8 * 7).astype(F32)
    x[5 * 56 + 7 * 7 + 3] = special  # in the last row: the wide layout meets it with zeros of no output
    dy = rng.standard_normal(2 * 2 * 8 * 8 * 6).astype(F32)
    verdict, out, ref = run_case(TABLE["conv_bwd_weight"], [x, dy] + dims, "cpu")
    assert verdict.ok, verdict.detail


def test_cpu_stride1_backward_shortcut_steps_aside_for_inf_weights():
    """conv_bwd_input at stride 1 is a conv of dy (zero-padded) on the CPU, but a padded 0 times an inf
    weight would make a NaN that the adjoint does not have: the col2im path must be taken."""
    w = np.ones(9, F32)
    w[0] = np.inf
    dy = np.ones(9, F32)
    dx = cpu_backend.conv_bwd_input(dy, w, conv_plan_of(1, 1, 1, (3, 3), (3, 3), (1, 1), (1, 1))).reshape(3, 3)
    assert not np.isnan(dx).any(), dx
    assert np.isposinf(dx[:2, :2]).all() and dx[2, 2] == 4.0 and dx[0, 2] == 4.0 and dx[2, 0] == 4.0


# -- the contracts catch wrong kernels -------------------------------------------------------------
def _flipped_conv(x, w, b, plan):
    """A true convolution (kernel flipped): the classic mix-up with cross-correlation."""
    wf = w.reshape((plan.out_c, plan.in_c, -1))[:, :, ::-1].copy().reshape(-1)
    return CPU_CONV.conv(x, wf, b, plan)


def _conv_without_bias(x, w, b, plan):
    return CPU_CONV.conv(x, w, None, plan)


def _bwd_input_forward_padding(dy, w, plan):
    """The stride-1 shortcut without its finite-weight guard (NaN from padded zeros times inf)."""
    batch, in_c, out_c, spatial, kernel, stride, padding, out = plan[:8]
    w3 = w.reshape(out_c, in_c, -1)
    wt = np.ascontiguousarray(w3[:, :, ::-1].transpose(1, 0, 2)).reshape(-1)
    pads = tuple(k - 1 - p for k, p in zip(kernel, padding))
    return CPU_CONV.conv(dy, wt, None, conv_plan_of(batch, out_c, in_c, out, kernel, stride, pads))


def _bwd_weight_fp16(x, dy, plan):
    return CPU_CONV.conv_bwd_weight(x.astype(np.float16).astype(F32), dy, plan)


def _transpose_channels_swapped(x, w, b, plan):
    """Reads the transposed layout (in_c, out_c, *kernel) as if it were conv's (out_c, in_c, *kernel)."""
    ws = np.ascontiguousarray(w.reshape(plan.in_c, plan.out_c, -1).transpose(1, 0, 2)).reshape(-1)
    return CPU_CONV.conv_transpose(x, ws, b, plan)


_R = np.random.default_rng(17)
_X = _R.standard_normal(2 * 3 * 36).astype(F32)
_W = _R.standard_normal(4 * 3 * 9).astype(F32)
_B = _R.standard_normal(4).astype(F32)
_DY = _R.standard_normal(2 * 4 * 36).astype(F32)
_D = [2, 3, 4, (6, 6), (3, 3), (1, 1), (1, 1)]
_WINF = np.ones(2 * 9, F32)
_WINF[0] = np.inf
FAKES = [
    pytest.param("conv", _flipped_conv, [_X, _W, _B] + _D, id="conv-flipped-kernel"),
    pytest.param("conv", _conv_without_bias, [_X, _W, _B] + _D, id="conv-drops-bias"),
    pytest.param("conv_bwd_input", _bwd_input_forward_padding, [np.ones(16, F32), _WINF, 1, 2, 1, (4, 4), (3, 3),
                                                                (1, 1), (1, 1)], id="bwd_input-nan-from-padding"),
    pytest.param("conv_bwd_weight", _bwd_weight_fp16, [_X, _DY] + _D, id="bwd_weight-fp16-input"),
    pytest.param("conv_transpose", _transpose_channels_swapped, [_X, _R.standard_normal(3 * 3 * 9).astype(F32), _B[:3],
                                                                 2, 3, 3, (6, 6), (3, 3), (2, 2), (1, 1), (1, 1)],
                 id="conv_transpose-channels-swapped"),
]


@pytest.mark.parametrize("name, fake, args", FAKES)
def test_contract_catches_wrong_kernel(monkeypatch, name, fake, args):
    info = TABLE[name]
    assert run_case(info, args, "cpu")[0].ok, "the genuine kernel must pass the very case the fake fails"
    monkeypatch.setattr(cpu_backend, name, fake)
    verdict = run_case(info, args, "cpu")[0]
    assert not verdict.ok, f"the contract of {name} accepted a wrong kernel (ratio {verdict.ratio})"


# -- errors ------------------------------------------------------------------------------------
def _x(*shape):
    return tl.tensor(np.ones(shape, F32))


@pytest.mark.parametrize("call, exc, words", [
    (lambda: TF.conv2d(_x(1, 2, 4, 4), _x(3, 2, 3, 3), dilation=2), ShapeError,
     ["conv2d", "too small", "dilation (2, 2)"]),
    (lambda: TF.conv2d(_x(1, 2, 5, 5), _x(3, 1, 3, 3), groups=2), ShapeError,
     ["conv2d", "output channels (3)", "divisible by groups=2"]),
    (lambda: TF.conv_transpose2d(_x(1, 2, 5, 5), _x(2, 3, 3, 3), dilation=(1, 0)), ArgumentError,
     ["conv_transpose2d", "dilation", ">= 1"]),
    (lambda: TF.conv_transpose1d(_x(1, 2, 5), _x(2, 1, 3), groups=3), ShapeError,
     ["conv_transpose1d", "divisible by groups=3"]),
    (lambda: TF.conv2d(_x(1, 3, 5, 5), _x(4, 2, 3, 3)), ShapeError, ["conv2d", "3 channels", "weight.shape[1] = 2"]),
    (lambda: TF.conv_transpose2d(_x(1, 3, 5, 5), _x(2, 4, 3, 3)), ShapeError, ["conv_transpose2d", "weight.shape[0]"]),
    (lambda: TF.conv2d(_x(1, 2, 5, 5), _x(4, 2, 3)), ShapeError, ["conv2d", "weight", "4 dims"]),
    (lambda: TF.conv1d(_x(2, 5, 5, 5), _x(4, 2, 3)), ShapeError, ["conv1d", "input", "2-D", "3-D"]),
    (lambda: TF.conv3d(_x(1, 2, 4, 4, 4), _x(3, 2, 3, 3, 3), _x(4)), ShapeError, ["conv3d", "bias", "(3,)"]),
    (lambda: TF.conv2d(_x(1, 2, 5, 5), _x(3, 2, 3, 3), padding="same", stride=2), ArgumentError,
     ["conv2d", "same", "strided"]),
    (lambda: TF.conv2d(_x(1, 2, 5, 5), _x(3, 2, 3, 3), padding="full"), ArgumentError, ["conv2d", "padding"]),
    (lambda: TF.conv2d(_x(1, 2, 5, 5), _x(3, 2, 3, 3), padding=-1), ArgumentError, ["conv2d", "padding", ">= 0"]),
    (lambda: TF.conv2d(_x(1, 2, 5, 5), _x(3, 2, 3, 3), stride=0), ArgumentError, ["conv2d", "stride", ">= 1"]),
    (lambda: TF.conv2d(_x(1, 2, 5, 5), _x(3, 2, 3, 3), stride=(1, 2, 3)), ArgumentError,
     ["conv2d", "stride", "2 ints"]),
    (lambda: TF.conv2d(_x(1, 2, 2, 5), _x(3, 2, 3, 3)), ShapeError, ["conv2d", "too small", "(2, 5)"]),
    (lambda: TF.conv_transpose1d(_x(1, 2, 5), _x(2, 1, 3), stride=2, output_padding=2), ArgumentError,
     ["conv_transpose1d", "output_padding", "smaller than stride"]),
    (lambda: TF.conv_transpose1d(_x(1, 2, 1), _x(2, 1, 1), padding=1), ShapeError, ["conv_transpose1d", "empty"]),
    (lambda: TF.conv_transpose1d(_x(1, 2, 5), _x(2, 1, 3), padding="same"), ArgumentError,
     ["conv_transpose1d", "padding"]),
], ids=lambda v: None)
def test_front_end_errors(call, exc, words):
    with pytest.raises(exc) as info:
        call()
    for word in words:
        assert word in str(info.value), f"{word!r} not in {str(info.value)!r}"


def _buf(n):
    return Buffer.from_numpy(np.ones(n, F32), "cpu")


@pytest.mark.parametrize("call, words", [
    (lambda: P.conv(_buf(25), _buf(9), None, 1, 1, 1, (5, 5), (3, 3), (1, 1), (1,)), ["conv", "padding", "one entry"]),
    (lambda: P.conv(_buf(25), _buf(9), None, 1, 1, 1, (5, 5), (3, 3), (0, 1), (1, 1)), ["conv", "stride[0]", ">= 1"]),
    (lambda: P.conv(_buf(25), _buf(0), None, 1, 1, 1, (5, 5), (0, 3), (1, 1), (1, 1)), ["conv", "kernel[0]", ">= 1"]),
    (lambda: P.conv(_buf(1), _buf(1), None, 1, 1, 1, (), (), (), ()), ["conv", "spatial", "1 to 8"]),
    (lambda: P.conv(_buf(1), _buf(1), None, 1, 1, 1, (1,) * 9, (1,) * 9, (1,) * 9, (0,) * 9), ["conv", "1 to 8"]),
    (lambda: P.conv(_buf(10), _buf(9), None, 1, 1, 1, (2, 5), (3, 3), (1, 1), (0, 0)),
     ["conv", "spatial axis 0", "empty"]),
    (lambda: P.conv(_buf(24), _buf(9), None, 1, 1, 1, (5, 5), (3, 3), (1, 1), (1, 1)), ["conv", "x", "25"]),
    (lambda: P.conv(_buf(25), _buf(9), _buf(2), 1, 1, 1, (5, 5), (3, 3), (1, 1), (1, 1)), ["conv", "b", "1 elements"]),
    (lambda: P.conv_bwd_input(_buf(24), _buf(9), 1, 1, 1, (5, 5), (3, 3), (1, 1), (1, 1)), ["conv_bwd_input", "dy"]),
    (lambda: P.conv_bwd_weight(_buf(25), _buf(9), 1, 1, 1, (5, 5), (3, 3), (1, 1), (1, 1)), ["conv_bwd_weight", "dy"]),
    (lambda: P.conv_transpose(_buf(5), _buf(3), None, 1, 1, 1, (5,), (3,), (2,), (0,), (2,)),
     ["conv_transpose", "output_padding[0]", "stride[0]"]),
    (lambda: P.conv_transpose(_buf(1), _buf(1), None, 1, 1, 1, (1,), (1,), (1,), (1,), (0,)),
     ["conv_transpose", "spatial axis 0", "empty"]),
    (lambda: P.conv(_buf(25), _buf(9), None, 1, 1, -1, (5, 5), (3, 3), (1, 1), (1, 1)), ["conv", "out_c"]),
], ids=lambda v: None)
def test_primitive_errors(call, words):
    with pytest.raises(ShapeError) as info:
        call()
    for word in words:
        assert word in str(info.value), f"{word!r} not in {str(info.value)!r}"


# -- the CPU's 2-D per-image GEMM path (rank 2, >= _FAST_MIN_P output positions per image) --------
_FAST_GEOMS = [
    # (batch, in_c, out_c, spatial, kernel, stride, padding): "same" 3x3 (the span copy), the CNN's
    # second layer, stride 2 and odd sizes, asymmetric kernel/stride, padding >= kernel, 1x1, and
    # below the threshold (P < 16: the older wide-GEMM paths) right next to it
    (3, 2, 4, (8, 8), (3, 3), (1, 1), (1, 1)),
    (5, 16, 8, (8, 8), (3, 3), (1, 1), (1, 1)),
    (3, 3, 2, (9, 11), (3, 3), (2, 2), (1, 1)),
    (2, 2, 3, (7, 13), (2, 3), (1, 2), (0, 2)),
    (2, 2, 3, (5, 6), (2, 2), (1, 1), (3, 2)),
    (2, 3, 2, (6, 5), (1, 1), (1, 1), (0, 0)),
    (2, 2, 3, (4, 4), (1, 1), (1, 1), (0, 0)),  # P = 16: the fast path
    # stride 1 keeping the row pitch (ow == w: the masked shifted-row im2col / gathered col2im)
    # with fewer output rows than input rows, output rows wholly in the padding, and padding
    # wider than the kernel (the largest col2im margins)
    (2, 3, 2, (7, 6), (5, 3), (1, 1), (1, 1)),
    (2, 2, 3, (5, 6), (1, 1), (1, 1), (2, 0)),
    (3, 2, 3, (4, 5), (3, 5), (1, 1), (3, 2)),
    (2, 2, 3, (5, 5), (3, 3), (1, 1), (1, 0)),  # P = 15: the older paths
]


def _fast_case(rng, geom):
    n, ci, co, sp, kn, st, pd = geom
    out = tuple((s + 2 * p - k) // t + 1 for s, k, t, p in zip(sp, kn, st, pd))
    x = rng.standard_normal(n * ci * math.prod(sp)).astype(F32)
    w = rng.standard_normal(co * ci * math.prod(kn)).astype(F32)
    dy = rng.standard_normal(n * co * math.prod(out)).astype(F32)
    return x, w, dy, rng.standard_normal(co).astype(F32), list(geom), out


@pytest.mark.parametrize("col_bytes, block_cols, tile_rows, partial_bytes",
                         [(8 << 20, 1024, 128, 64 << 20), (1, 1, 1, 1), (3000, 40, 4, 3000)])
@pytest.mark.parametrize("geom", _FAST_GEOMS)
def test_cpu_fast_2d_path_meets_the_contracts(monkeypatch, geom, col_bytes, block_cols, tile_rows, partial_bytes):
    """conv (with and without a bias), conv_bwd_input and conv_bwd_weight on both sides of
    _FAST_MIN_P, with chunks of one image or a few, weight-gradient blocks of one image, a few or
    the batch, tiles of one channel or all, partial sums in one round or one per block."""
    assert CPU_CONV._fast_2d(geom[3], tuple((s + 2 * p - k) // t + 1 for s, k, t, p in zip(*geom[3:]))) == \
        (geom is not _FAST_GEOMS[-1])
    monkeypatch.setattr(CPU_CONV, "_COL_BYTES", col_bytes)
    monkeypatch.setattr(CPU_CONV, "_DW_BLOCK_COLS", block_cols)
    monkeypatch.setattr(CPU_CONV, "_DW_TILE_ROWS", tile_rows)
    monkeypatch.setattr(CPU_CONV, "_DW_PARTIAL_BYTES", partial_bytes)
    x, w, dy, b, dims, _ = _fast_case(np.random.default_rng(_FAST_GEOMS.index(geom)), geom)
    for name, args in [("conv", [x, w, b] + dims), ("conv", [x, w, None] + dims), ("conv_bwd_input", [dy, w] + dims),
                       ("conv_bwd_weight", [x, dy] + dims)]:
        verdict = run_case(TABLE[name], args, "cpu")[0]
        assert verdict.ok, f"{name} {geom}: {verdict.detail}"


@pytest.mark.parametrize("special", [np.inf, -np.inf, np.nan])
def test_cpu_fast_2d_path_keeps_the_nan_rule(special):
    """inf/NaN in x, w or dy on the 2-D path: col2im drops taps in the padding whole (no 0 * inf
    term), im2col's padded zeros meet the weights as the spec's padded terms do."""
    rng = np.random.default_rng(11)
    for geom in (_FAST_GEOMS[0], _FAST_GEOMS[2]):
        x, w, dy, b, dims, _ = _fast_case(rng, geom)
        for arr in (x, w, dy):
            arr[rng.integers(arr.size)] = special
        for name, args in [("conv", [x, w, b] + dims), ("conv_bwd_input", [dy, w] + dims),
                           ("conv_bwd_weight", [x, dy] + dims)]:
            verdict = run_case(TABLE[name], args, "cpu")[0]
            assert verdict.ok, f"{name} {geom} with {special}: {verdict.detail}"


def test_cpu_fast_2d_path_same_bits_for_any_thread_count(monkeypatch):
    """The 2-D path gives the same bits serially and with the batch split over 2 or 3 threads (each
    image its own GEMM; the weight gradient's blocks, tiles and rounds fixed by the sizes)."""
    if CPU_PARALLEL.blas_threads() is None:
        pytest.skip("NumPy's BLAS is not an OpenBLAS whose thread count we can set")
    x, w, dy, b, dims, _ = _fast_case(np.random.default_rng(12), (7, 5, 6, (9, 8), (3, 3), (1, 1), (1, 1)))
    monkeypatch.setattr(CPU_CONV, "_DW_BLOCK_COLS", 2 * 72)  # blocks of 2 images (P = 72)
    monkeypatch.setattr(CPU_CONV, "_DW_TILE_ROWS", 18)       # tiles of 2 channels
    monkeypatch.setattr(CPU_CONV, "_DW_PARTIAL_BYTES", 2 * 4 * 45 * 6)  # rounds of 2 blocks

    def run():
        plan = conv_plan_of(*dims)
        return [cpu_backend.conv(x, w, b, plan).tobytes(), cpu_backend.conv_bwd_input(dy, w, plan).tobytes(),
                cpu_backend.conv_bwd_weight(x, dy, plan).tobytes()]

    monkeypatch.setattr(CPU_CONV, "_PART_MACS", 1 << 60)
    serial = run()
    monkeypatch.setattr(CPU_CONV, "_PART_MACS", 0)
    for t in (2, 3):
        monkeypatch.setattr(CPU_PARALLEL, "threads", lambda t=t: t)
        assert run() == serial, f"{t} threads"


_OMP_GEOMS = [
    # the cnn example's two layers (64 images), batches of 1, 3 and 7, stride 2, padding wider than
    # the kernel, 1x1 with many input channels (several channel tiles of the weight gradient) and
    # shapes with a GEMM dimension of 1 (one output channel; one input channel with a 1x1 kernel):
    # NumPy calls a GEMV or its own loop there, so those products keep np.matmul
    (64, 1, 16, (16, 16), (3, 3), (1, 1), (1, 1)),
    (64, 16, 32, (8, 8), (3, 3), (1, 1), (1, 1)),
    (1, 3, 4, (9, 8), (3, 3), (1, 1), (1, 1)),
    (3, 3, 2, (9, 11), (3, 3), (2, 2), (1, 1)),
    (7, 5, 6, (9, 8), (3, 3), (1, 1), (1, 1)),
    (7, 40, 6, (6, 7), (1, 1), (1, 1), (0, 0)),
    (3, 2, 3, (5, 6), (2, 2), (1, 1), (3, 2)),
    (3, 4, 1, (8, 8), (3, 3), (2, 1), (1, 0)),
    (2, 1, 3, (6, 6), (1, 1), (1, 1), (0, 0)),
]


@pytest.mark.parametrize("col_bytes, block_cols, tile_rows", [(8 << 20, 1024, 128), (3000, 100, 9)])
def test_cpu_fast_2d_path_on_numba_threads_gives_the_matmul_bits(monkeypatch, col_bytes, block_cols, tile_rows):
    """The 2-D path's parts on Numba's threads, each GEMM a cblas_sgemm from Numba, give the same
    bits in one part or split into 2-4, with chunks of one image or the whole part and
    weight-gradient blocks and tiles of several sizes; and the values of the np.matmul path
    (parallel.sgemm_address() None), to float32 rounding. (Their bits too on AVX-512 OpenBLAS; on
    AVX2 kernels a GEMM's bits depend on how its columns are sliced, and a one-row product is a
    GEMV in NumPy, so the two paths may differ in the last bits.)"""
    if CPU_PARALLEL.sgemm_address() is None:
        pytest.skip("no cblas_sgemm from Numba here (another BLAS, or Numba's workqueue layer)")
    monkeypatch.setattr(CPU_CONV, "_COL_BYTES", col_bytes)
    monkeypatch.setattr(CPU_CONV, "_DW_BLOCK_COLS", block_cols)
    monkeypatch.setattr(CPU_CONV, "_DW_TILE_ROWS", tile_rows)
    calls = []
    names = {id(task): name for name, pair in (("conv", CPU_CONV._FW_TASKS), ("dx", CPU_CONV._DX_TASKS),
                                                ("dw", CPU_CONV._DW_TASKS)) for task in pair}
    real_run = CPU_CONV.tasks.run

    def spy(task, args, t, on_pool=None):  # which 2-D region ran, on the pool (t > 1) or the caller's thread
        if id(task) in names:  # other kernels' tasks (a GEMM on the np.matmul-free path) pass through
            calls.append(f"{names[id(task)]}_{'par' if t > 1 else 'ser'}")
        return real_run(task, args, t, on_pool)
    monkeypatch.setattr(CPU_CONV.tasks, "run", spy)

    def run(x, w, b, dy, dims):
        plan = conv_plan_of(*dims)
        return [cpu_backend.conv(x, w, b, plan).tobytes(), cpu_backend.conv(x, w, None, plan).tobytes(),
                cpu_backend.conv_bwd_input(dy, w, plan).tobytes(), cpu_backend.conv_bwd_weight(x, dy, plan).tobytes()]

    for i, geom in enumerate(_OMP_GEOMS):
        x, w, dy, b, dims, _ = _fast_case(np.random.default_rng(100 + i), geom)
        x[3], w[1] = np.inf, np.nan if i == 4 else w[1]  # inf/NaN reach both paths alike
        before = len(calls)
        with monkeypatch.context() as m:
            m.setattr(CPU_PARALLEL, "sgemm_address", lambda: None)
            by_matmul = run(x, w, b, dy, dims)
        assert len(calls) == before, "the np.matmul path took the Numba kernels"
        want = run(x, w, b, dy, dims)
        for what, a, e in zip(("conv", "conv without bias", "conv_bwd_input", "conv_bwd_weight"), want, by_matmul):
            a, e = np.frombuffer(a, F32), np.frombuffer(e, F32)
            scale = float(np.max(np.abs(e[np.isfinite(e)]), initial=1.0))
            np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-5 * scale, equal_nan=True, err_msg=f"{what} {geom}")
        for t in (1, 2, 3, 4):
            with monkeypatch.context() as m:
                m.setattr(CPU_PARALLEL, "threads", lambda t=t: t)
                m.setattr(CPU_CONV, "_PART_MACS", 1)
                got = run(x, w, b, dy, dims)
            for what, a, e in zip(("conv", "conv without bias", "conv_bwd_input", "conv_bwd_weight"), got, want):
                assert a == e, f"{what} {geom} in {t} parts"
    used = set(calls)
    assert {"conv_ser", "conv_par", "dx_ser", "dx_par", "dw_ser", "dw_par"} <= used, used


def test_cpu_fast_2d_path_parts_follow_size_and_threads(monkeypatch):
    """One part per Numba thread (parallel.threads()), at most one per image (or group) and one per
    _PART_MACS multiply-adds: the cnn's layers (2.4-19M) in two parts on 2 threads, a few images
    of a small layer in one; 16 threads take 16 parts of a large batch."""
    def parts(images, macs):
        return CPU_PARALLEL.parts(macs, images, CPU_CONV._PART_MACS)

    monkeypatch.setattr(CPU_PARALLEL, "threads", lambda: 2)
    assert parts(64, 2_600_000) == 2 and parts(64, 19_000_000) == 2
    assert parts(8, 290_000) == 1 and parts(1, 1 << 30) == 1
    monkeypatch.setattr(CPU_PARALLEL, "threads", lambda: 8)
    assert parts(64, 3 * CPU_CONV._PART_MACS) == 3 and parts(5, 1 << 30) == 5
    monkeypatch.setattr(CPU_PARALLEL, "threads", lambda: 16)
    assert parts(64, 19_000_000) == 16 and parts(64, 4 * CPU_CONV._PART_MACS) == 4


def _im2col_reference(x, n, c, h, w, kh, kw, sh, sw, ph, pw, oh, ow, bias_row):
    """The column matrix by definition (float64 loops, then float32)."""
    xs = x.reshape(n, c, h, w)
    col = np.zeros((n, c * kh * kw + bias_row, oh * ow))
    for i in range(n):
        for ci in range(c):
            for ky in range(kh):
                for kx in range(kw):
                    for a in range(oh):
                        for b in range(ow):
                            iy, ix = a * sh + ky - ph, b * sw + kx - pw
                            if 0 <= iy < h and 0 <= ix < w:
                                col[i, (ci * kh + ky) * kw + kx, a * ow + b] = xs[i, ci, iy, ix]
        if bias_row:
            col[i, -1] = 1.0
    return col.astype(F32).reshape(-1)


@pytest.mark.parametrize("geom", _FAST_GEOMS[:-1])
def test_cpu_im2col_col2im_known_answers(geom):
    """_block_cols (a block's im2col) copies exactly (NaN, inf, -0 included; the masked shifted rows
    of the stride-1 same-pitch case and the per-row copies of the others), and _col2im2d is its
    adjoint in the per-image and the block layouts: each dx element is, from +0, the sum of its taps
    in row-major order (checked exactly against that sum in float32), whatever the margin's contents."""
    n, ci, _, (h, w), (kh, kw), (sh, sw), (ph, pw) = geom
    oh, ow = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    rng = np.random.default_rng(sum(geom[3]) + kh)
    x = rng.standard_normal(n * ci * h * w).astype(F32)
    x[rng.integers(x.size, size=3)] = [np.nan, np.inf, -0.0]
    for bias_row in (0, 1):  # a block of the n images: columns (image, position)
        col = np.full(n * (ci * kh * kw + bias_row) * oh * ow, 7.0, F32)
        CPU_CONV._block_cols(x, 0, n, col, ci, h, w, kh, kw, sh, sw, ph, pw, oh, ow, bias_row)
        ref = _im2col_reference(x, n, ci, h, w, kh, kw, sh, sw, ph, pw, oh, ow, bias_row)
        ref = np.ascontiguousarray(ref.reshape(n, -1, oh * ow).transpose(1, 0, 2)).reshape(-1)
        assert col.tobytes() == ref.tobytes(), f"im2col {geom} bias_row={bias_row}"
    dcol = rng.integers(-8, 9, n * ci * kh * kw * oh * ow).astype(F32)  # integers: exact sums
    dcol[rng.integers(dcol.size)] = -0.0
    margin = CPU_CONV._col2im_margin(h, w, kh, kw, ph, pw, oh, ow)
    buf = np.full(dcol.size + 2 * margin, np.nan, F32)  # the margins must never be used
    buf[margin:margin + dcol.size] = dcol
    dx = np.full(n * ci * h * w, 7.0, F32)
    p_n = oh * ow  # per-image layout (n, C*K, P), then a block's (C*K, (image, position))
    CPU_CONV._col2im2d(buf, dx, 0, n, 0, ci, ci, h, w, kh, kw, sh, sw, ph, pw, oh, ow, ci * kh * kw * p_n, p_n, margin)
    blk = np.full(dcol.size + 2 * margin, np.nan, F32)
    blk[margin:margin + dcol.size] = dcol.reshape(n, -1, p_n).transpose(1, 0, 2).reshape(-1)
    dx_blk = np.full(n * ci * h * w, 7.0, F32)
    CPU_CONV._col2im2d(blk, dx_blk, 0, n, 0, ci, ci, h, w, kh, kw, sh, sw, ph, pw, oh, ow, p_n, n * p_n, margin)
    assert dx_blk.tobytes() == dx.tobytes(), f"col2im {geom} block layout"
    want = np.zeros((n, ci, h, w), F32)
    d6 = dcol.reshape(n, ci, kh, kw, oh, ow)
    for ky in range(kh):
        for kx in range(kw):
            for a in range(oh):
                for b in range(ow):
                    iy, ix = a * sh + ky - ph, b * sw + kx - pw
                    if 0 <= iy < h and 0 <= ix < w:
                        want[:, :, iy, ix] += d6[:, :, ky, kx, a, b]
    assert dx.tobytes() == want.reshape(-1).tobytes(), f"col2im {geom}"


@pytest.mark.parametrize("geom", [(8, 4, 6, (40,), (3,), (1,), (1,)), (8, 3, 4, (9, 8), (3, 3), (1, 1), (1, 1)),
                                  (8, 2, 3, (5, 6, 7), (3, 2, 3), (1, 1, 2), (1, 0, 2))])
def test_cpu_conv_runs_on_numbas_threads_only(monkeypatch, geom):
    """Every rank, cut into as many parts as there are images, starts no Python thread of its own
    (one pool: Numba's, kernels/cpu/parallel.py). Rank 2 gives the bits of one part (a GEMM per
    image); the other ranks agree within rounding (a chunk's wide GEMM may round its edge tiles
    differently when it holds other images, and the weight gradient adds the parts' sums in order)."""
    import threading

    x, w, dy, b, dims, _ = _fast_case(np.random.default_rng(31), geom)

    def run():
        plan = conv_plan_of(*dims)
        return [cpu_backend.conv(x, w, b, plan), cpu_backend.conv_bwd_input(dy, w, plan),
                cpu_backend.conv_bwd_weight(x, dy, plan)]

    one = run()
    before = set(threading.enumerate())
    monkeypatch.setattr(CPU_CONV, "_ND_PART_MACS", 0)
    monkeypatch.setattr(CPU_CONV, "_PART_MACS", 0)
    monkeypatch.setattr(CPU_PARALLEL, "threads", lambda: 8)
    cut = run()
    assert set(threading.enumerate()) <= before, "a conv started threads of its own"
    for name, a, e in zip(("conv", "conv_bwd_input", "conv_bwd_weight"), cut, one):
        if len(geom[3]) != 2:
            np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-5, err_msg=name)
        else:
            assert a.tobytes() == e.tobytes(), f"{name} {geom}"


# -- reduce_from_broadcast over (A, K, C) summed over A and C: the conv bias gradient's CPU kernel --
@pytest.mark.parametrize("dims", [(3, 4, 5), (2, 3, 16), (5, 2, 17), (7, 3, 64), (3, 2, 2 * 2048 + 5), (4, 9, 300),
                                  (2, 1, 1, 3, 1, 40), (0, 3, 20), (3, 2, 0), (64, 4, 1)])
@pytest.mark.parametrize("threads", [1, 2])
def test_cpu_reduce_over_outer_blocks_meets_the_contract(monkeypatch, dims, threads):
    """The lane-sum kernel (rows of C <= _LANES summed in order; longer ones in lanes, in chunks
    of _CHUNK; several rows per group; the groups dealt to 1 or 2 threads, MIN_WORK forced low so
    that small inputs split too): within the contract, exact on integers, bitwise repeatable, the
    same bits on any number of threads."""
    import numba

    layout = sys.modules["torchlean.kernels.cpu.layout"]
    monkeypatch.setattr(layout, "MIN_WORK", 1)
    old = numba.get_num_threads()
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    try:
        _check_outer_blocks(dims)
    finally:
        numba.set_num_threads(old)


def _check_outer_blocks(dims):
    rng = np.random.default_rng(math.prod(dims) + len(dims))
    kept = [i for i, d in enumerate(dims) if i not in (0, len(dims) - 1) and (d != 1 or len(dims) == 3)]
    in_dims = tuple(dims[i] for i in kept)
    amap = tuple(kept.index(i) + 1 if i in kept else 0 for i in range(len(dims)))
    for d in (rng.standard_normal(math.prod(dims)).astype(F32), rng.integers(-50, 50, math.prod(dims)).astype(F32)):
        verdict = run_case(TABLE["reduce_from_broadcast"], [d, in_dims, dims, amap], "cpu")[0]
        assert verdict.ok, f"{dims}: {verdict.detail}"
        out = cpu_backend.reduce_from_broadcast(d, in_dims, dims, amap)
        assert out.tobytes() == cpu_backend.reduce_from_broadcast(d, in_dims, dims, amap).tobytes()
    ints = d.astype(np.float64).reshape(dims).sum(axis=tuple(i for i in range(len(dims)) if i not in kept))
    np.testing.assert_array_equal(out, ints.reshape(-1).astype(F32))
    # and the bits of one thread, whatever the split
    import numba

    if numba.get_num_threads() > 1:
        d = rng.standard_normal(math.prod(dims)).astype(F32)
        many = cpu_backend.reduce_from_broadcast(d, in_dims, dims, amap)
        numba.set_num_threads(1)
        assert many.tobytes() == cpu_backend.reduce_from_broadcast(d, in_dims, dims, amap).tobytes()


# -- the checked-once caches: odd argument types keep their own result or error ------------------
# ops.conv caches its shape/argument checks and the primitives their dim checks per plain-int key.
# True == 1 and np.int64(1) == 1 hash alike: a bool must still be refused, a NumPy int or a list
# still accepted with the same bits, and an error never cached. Each call runs after the plain
# call that fills the caches. The messages are those of the code before the caches.
def _rand(*shape, grad=False):
    return tl.tensor(np.random.default_rng(sum(shape)).standard_normal(shape).astype(F32), requires_grad=grad)


@pytest.mark.parametrize("kw", [dict(stride=np.int64(1)), dict(stride=[1, 1]), dict(stride=(np.int64(1), 1)),
                                dict(padding=[1]), dict(padding=np.int32(1)), dict(dilation=np.int64(1)),
                                dict(dilation=(1, 1)), dict(groups=np.int64(1))], ids=str)
def test_cached_conv_checks_give_odd_int_types_the_same_bits(kw):
    x, w, b = _rand(2, 3, 6, 6), _rand(4, 3, 3, 3, grad=True), _rand(4, grad=True)
    args = dict(stride=1, padding=1)
    ref = TF.conv2d(x, w, b, **args)
    ref.sum().backward()
    ref_grads = w.grad.numpy().tobytes(), b.grad.numpy().tobytes()
    w.grad = b.grad = None
    y = TF.conv2d(x, w, b, **{**args, **kw})
    y.sum().backward()
    assert y.shape == ref.shape and y.numpy().tobytes() == ref.numpy().tobytes()
    assert (w.grad.numpy().tobytes(), b.grad.numpy().tobytes()) == ref_grads
    dims = [2, 3, 4, (6, 6), (3, 3), (1, 1), (1, 1)]
    xb, wb, yb = x.buffer, w.buffer, ref.buffer
    for odd in ([np.int64(2)] + dims[1:], dims[:3] + [[6, 6]] + dims[4:], dims[:3] + [(np.int64(6), 6)] + dims[4:]):
        assert P.conv(xb, wb, None, *odd).to_numpy().tobytes() == P.conv(xb, wb, None, *dims).to_numpy().tobytes()
        assert P.conv_bwd_input(yb, wb, *odd).to_numpy().tobytes() == \
            P.conv_bwd_input(yb, wb, *dims).to_numpy().tobytes()
        assert P.conv_bwd_weight(xb, yb, *odd).to_numpy().tobytes() == \
            P.conv_bwd_weight(xb, yb, *dims).to_numpy().tobytes()


_x4 = lambda: _x(1, 2, 5, 5)  # noqa: E731


@pytest.mark.parametrize("call, exc, message", [
    (lambda: TF.conv2d(_x4(), _x(3, 2, 3, 3), None, True, 1), ArgumentError,
     "conv2d: stride must be an int or a sequence of 2 ints, got True"),
    (lambda: TF.conv2d(_x4(), _x(3, 2, 3, 3), None, 1, (True, 1)), ArgumentError,
     "conv2d: padding must be an int or a sequence of 2 ints, got (True, 1)"),
    (lambda: TF.conv2d(_x4(), _x(3, 2, 3, 3), None, 1, 1, True), ArgumentError,
     "conv2d: dilation must be an int or a sequence of 2 ints, got True"),
    (lambda: TF.conv2d(_x4(), _x(3, 2, 3, 3), None, 1, 1, 1, True), ArgumentError,
     "conv2d: groups must be a positive int, got True"),
    (lambda: tl.nn.Conv2d(2, 3, 3, stride=True)(_x4()), ArgumentError,  # refused when the module is built
     "Conv2d: stride must be an int or 2 ints, got True"),
    (lambda: TF.conv_transpose2d(_x4(), _x(2, 3, 3, 3), None, 2, 0, True), ArgumentError,
     "conv_transpose2d: output_padding must be an int or a sequence of 2 ints, got True"),
    (lambda: P.conv(_buf(50), _buf(54), None, True, 2, 3, (5, 5), (3, 3), (1, 1), (1, 1)), ShapeError,
     "conv: argument batch must be an unsigned 32-bit integer, got True (bool)"),
    (lambda: P.conv(_buf(50), _buf(54), None, 1, 2, 3, (5, 5), (3, 3), (True, True), (1, 1)), ShapeError,
     "conv: argument stride[0] must be an unsigned 32-bit integer, got True (bool)"),
    (lambda: P.conv_bwd_input(_buf(27), _buf(54), 1, 2, 3, (5, 5), (3, 3), (1, 1), (False, 0)), ShapeError,
     "conv_bwd_input: argument padding[0] must be an unsigned 32-bit integer, got False (bool)"),
    (lambda: P.conv_bwd_weight(_buf(25), _buf(75), 1, True, 3, (5, 5), (3, 3), (1, 1), (1, 1)), ShapeError,
     "conv_bwd_weight: argument in_c must be an unsigned 32-bit integer, got True (bool)"),
    (lambda: P.conv_transpose(_buf(50), _buf(54), None, 1, 2, 3, (5, 5), (3, 3), (2, 2), (0, 0), (True, 0)),
     ShapeError, "conv_transpose: argument output_padding[0] must be an unsigned 32-bit integer, got True (bool)"),
], ids=lambda v: None)
def test_cached_conv_checks_still_refuse_bools(call, exc, message):
    # fill the caches with the plain-int twins first
    TF.conv2d(_x4(), _x(3, 2, 3, 3), None, 1, 1, 1, 1)
    tl.nn.Conv2d(2, 3, 3, stride=1)(_x4())
    TF.conv_transpose2d(_x4(), _x(2, 3, 3, 3), None, 2, 0, 1)
    P.conv(_buf(50), _buf(54), None, 1, 2, 3, (5, 5), (3, 3), (1, 1), (1, 1))
    P.conv_bwd_input(_buf(27), _buf(54), 1, 2, 3, (5, 5), (3, 3), (1, 1), (0, 0))
    P.conv_bwd_weight(_buf(25), _buf(75), 1, 1, 3, (5, 5), (3, 3), (1, 1), (1, 1))
    P.conv_transpose(_buf(50), _buf(54), None, 1, 2, 3, (5, 5), (3, 3), (2, 2), (0, 0), (1, 0))
    for _ in range(2):  # and errors are not cached: the second call checks again
        with pytest.raises(exc) as info:
            call()
        assert str(info.value) == message


def test_cached_conv_checks_never_cache_errors():
    x, w = _x(1, 2, 5, 5), _x(3, 2, 3, 3)
    for _ in range(2):
        with pytest.raises(ShapeError, match="too small"):
            TF.conv2d(_x(1, 2, 2, 2), w)
        assert TF.conv2d(x, w).shape == (1, 3, 3, 3)
        with pytest.raises(ShapeError, match="conv: argument x must hold 50 elements"):
            P.conv(_buf(49), _buf(54), None, 1, 2, 3, (5, 5), (3, 3), (1, 1), (0, 0))
        assert P.conv(_buf(50), _buf(54), None, 1, 2, 3, (5, 5), (3, 3), (1, 1), (0, 0)).size == 27


# -- cost set by the tensors, never by stride or padding values (issue 20) --------------------------
def _loop_conv(x, w, b, st, pd, transposed, out):
    """float64 y, and (dx, dw) for the cotangent g, by loops over (input position, tap) pairs: the
    conv pairs output j with input j*st - pd + k; the transposed conv pairs input i with output
    i*st - pd + k. Only pairs inside both tensors are terms. Sizes are tiny, so this is cheap
    whatever the stride and padding."""
    import itertools

    r = x.ndim - 2
    kern = w.shape[2:]
    small = x.shape[2:]  # the side whose positions are enumerated (conv: output side below)
    y = np.zeros((x.shape[0], w.shape[1] if transposed else w.shape[0]) + tuple(out))
    y += b[None, :, *([None] * r)]

    def pairs():
        src = small if transposed else out
        for i in itertools.product(*(range(n) for n in src)):
            for k in itertools.product(*(range(n) for n in kern)):
                q = tuple(a * s - p + kk for a, s, p, kk in zip(i, st, pd, k))
                lim = out if transposed else small
                if all(0 <= v < n for v, n in zip(q, lim)):
                    yield i, k, q

    if transposed:  # w (C_in, C_out, *k): y[:, o, q] += x[:, c, i] w[c, o, k]
        for i, k, q in pairs():
            y[(slice(None), slice(None)) + q] += x[(slice(None), slice(None)) + i] @ w[(slice(None), slice(None)) + k]
    else:  # w (C_out, C_in, *k): y[:, o, j] += w[o, c, k] x[:, c, j*st - pd + k]
        for j, k, q in pairs():
            y[(slice(None), slice(None)) + j] += x[(slice(None), slice(None)) + q] @ w[(slice(None), slice(None)) + k].T

    def grads(g):
        dx, dw = np.zeros_like(x), np.zeros_like(w)
        for a, k, q in pairs():
            if transposed:
                xi, gi = (slice(None), slice(None)) + a, (slice(None), slice(None)) + q
            else:
                xi, gi = (slice(None), slice(None)) + q, (slice(None), slice(None)) + a
            wi = (slice(None), slice(None)) + k
            if transposed:
                dx[xi] += g[gi] @ w[wi].T
                dw[wi] += x[xi].T @ g[gi]
            else:
                dx[xi] += g[gi] @ w[wi]
                dw[wi] += g[gi].T @ x[xi]
        return dx, dw

    return y, grads


HUGE_GEOMETRIES = [
    # (transposed, spatial, kernel, stride, padding): outputs of a few positions
    (False, (10,), (3,), (2**31,), (0,)),                  # conv: one window, stride 2**31
    (False, (2,), (3,), (2**31,), (2**28,)),               # ... and a padding of 2**28
    (False, (3, 4), (2, 3), (2**31 - 1, 5), (2**30 - 1, 1)),
    (True, (2,), (6,), (2**31,), (2**30,)),                # the transposed conv: 6 outputs
    (True, (2,), (3,), (10**8,), (49999999,)),
    (True, (2, 3), (3, 2), (10**9, 3), (499999999, 1)),
    (True, (3,), (2,), (2**32 - 1,), (2**32 - 2,)),        # stride at the uint32 limit
]


def _huge_case(transposed, spatial, kernel, stride, padding, device="cpu", seed=0):
    rng = np.random.default_rng(seed)
    ci, co = 2, 3
    x = rng.integers(-3, 4, (2, ci) + spatial).astype(F32)  # integer values: every sum is exact
    w = rng.integers(-3, 4, ((ci, co) if transposed else (co, ci)) + kernel).astype(F32)
    b = rng.integers(-3, 4, co).astype(F32)
    xt, wt, bt = (tl.tensor(a, requires_grad=True, device=device) for a in (x, w, b))
    fn = ops.conv_transpose_nd if transposed else ops.conv_nd
    y = fn(xt, wt, bt, stride, padding)
    g = rng.integers(-3, 4, y.shape).astype(F32)
    (y * tl.tensor(g, device=device)).sum().backward()
    ref, grads = _loop_conv(x.astype(np.float64), w.astype(np.float64), b.astype(np.float64), stride, padding,
                            transposed, y.shape[2:])
    return y, xt, wt, bt, g, ref, grads


@pytest.mark.parametrize("geometry", HUGE_GEOMETRIES, ids=str)
def test_conv_with_huge_stride_or_padding_is_exact_and_costs_what_the_tensors_cost(geometry, device):
    """Issue 20: conv, conv_transpose and their backward passes take time and memory set by the
    tensors, never by the stride or padding values (the transposed conv with stride 2**31 and a
    6-element output ran for minutes; a padding of 2**28 made a 2**29-long padded row). Exact
    answers (integer data) and a peak of host memory far below one padded row (on CUDA the host
    side is measured; the launchers size their workspaces by columns, never by the padding)."""
    import tracemalloc

    _huge_case(*geometry, device)  # once untraced: imports and JIT compilation are no part of the cost
    tracemalloc.start()
    try:
        y, xt, wt, bt, g, ref, grads = _huge_case(*geometry, device)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, f"peak host memory {peak} bytes"
    assert y.shape[2:] == ref.shape[2:] and math.prod(y.shape) <= 2 * 3 * 36
    np.testing.assert_array_equal(y.numpy(), ref)
    dx, dw = grads(g.astype(np.float64))
    np.testing.assert_array_equal(xt.grad.numpy(), dx)
    np.testing.assert_array_equal(wt.grad.numpy(), dw)
    np.testing.assert_array_equal(bt.grad.numpy(), g.sum(axis=tuple(i for i in range(g.ndim) if i != 1)))


def test_conv_bwd_input_visits_only_the_phases_that_hold_taps(monkeypatch):
    """The phase split visited every phase modulo the stride (a Python loop of 2**31 turns for one
    output); phases at or beyond the kernel hold no taps, so only min(stride, kernel) are visited."""
    calls = []
    real = CPU_CONV._phase
    monkeypatch.setattr(CPU_CONV, "_phase", lambda *a: calls.append(a) or real(*a))
    rng = np.random.default_rng(3)
    # stride 2**16 + 1 > kernel 3, padding < kernel (so the geometry is not gathered first)
    dy = rng.standard_normal(1 * 2 * 1).astype(F32)
    w = rng.standard_normal(2 * 2 * 3).astype(F32)
    dx = cpu_backend.conv_bwd_input(dy, w, conv_plan_of(1, 2, 2, (5,), (3,), (2**16 + 1,), (1,)))
    assert len(calls) <= 3
    ref = np.zeros((2, 5))
    for c in range(2):
        for k in range(3):
            if 0 <= k - 1 < 5:
                ref[c, k - 1] += sum(w.reshape(2, 2, 3)[o, c, k] * dy[o] for o in range(2))
    np.testing.assert_allclose(dx.reshape(2, 5), ref, rtol=1e-6)


@pytest.mark.parametrize("special", [np.inf, np.nan])
def test_gathered_geometry_keeps_the_padding_rules(special):
    """Axes gathered first (stride > kernel, padding >= kernel) keep the conventions: the forward
    reads the padding as the value 0 (0 * inf = NaN), the input gradient drops taps in the padding."""
    x = tl.tensor(np.arange(1, 6, dtype=F32).reshape(1, 1, 5), requires_grad=True)
    w = tl.tensor(np.array([[[1.0, special]]], F32), requires_grad=True)
    y = ops.conv_nd(x, w, None, 4, 3)  # windows [-3, -2], [1, 2], [5, 6]
    y.sum().backward()
    assert np.isnan(y.numpy()[0, 0, [0, 2]]).all()  # all-padding windows: 0 * special
    assert y.numpy()[0, 0, 1] == 2.0 + 3.0 * special or np.isnan(special)
    dx = x.grad.numpy()[0, 0]
    assert dx[0] == 0 and dx[3] == 0 and dx[4] == 0 and dx[1] == 1.0
    assert dx[2] == special or (np.isnan(special) and np.isnan(dx[2]))
    np.testing.assert_array_equal(w.grad.numpy(), [[[2.0, 3.0]]])


@pytest.mark.parametrize("call, match", [
    (lambda: TF.conv1d(tl.ones(1, 1, 3), tl.ones(1, 1, 2), stride=2**32), r"^conv1d: stride"),
    (lambda: TF.conv2d(tl.ones(1, 1, 3, 3), tl.ones(1, 1, 2, 2), padding=(0, 2**32)), r"^conv2d: padding"),
    (lambda: TF.conv_transpose1d(tl.ones(1, 1, 3), tl.ones(1, 1, 2), stride=2**32), r"^conv_transpose1d: stride"),
    (lambda: TF.conv_transpose1d(tl.ones(1, 1, 3), tl.ones(1, 1, 2), stride=2**32 - 1, output_padding=2**32),
     r"^conv_transpose1d: output_padding"),
    (lambda: ops.conv_nd(tl.ones(1, 1, 3), tl.ones(1, 1, 2), None, 1, 2**40), r"^conv_nd: padding"),
])
def test_stride_and_padding_beyond_uint32_name_the_users_call(call, match):
    """Values that do not fit the seed's uint32 dims are refused by the front end, naming the call
    (they reached the primitive, whose error named 'conv:')."""
    with pytest.raises(ArgumentError, match=match):
        call()
