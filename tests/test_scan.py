"""Selective scans: selective_scan_diag[_var]_{fwd,bwd}, their tape ops and the mamba front end.

The generic table tests (tests/test_primitives_parity.py) run the four primitives on random small
shapes and the table's edge cases against spec and contract; here:

* closed forms (geometric series, prefix sums, A = 0), a long sequence with few channels (several
  chunks on CUDA) against the spec, var and diag forms agreeing when the coefficients are constant;
* the contracts accept a float32 emulation of the CUDA chunked scan (mantissa/exponent chunk
  products, carries, rescan) and reject wrong kernels (a dropped or off-by-one chunk carry, the
  wrong coefficient, a backward with A[t] for A[t+1], dh0 without A);
* the VJP of every tape op against float64 central finite differences (test_vjp's tolerance),
  and of the front end in all eight tensor arguments;
* ``selective_scan`` against a float64 NumPy port of mamba_ssm's selective_scan_ref (in
  torchlean.spec.scan) and a torch float64 port (on the test device), outputs and gradients,
  for variable and fixed B/C, with and without D, z, delta_bias, delta_softplus, last state;
* errors: shape mismatches, complex and grouped forms, bad dims.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

import torchlean as tl
from torchlean import ops, spec
from torchlean.kernels import cpu as cpu_backend
from torchlean.errors import ArgumentError, DTypeError, ShapeError
from torchlean.runtime import Buffer
from torchlean.runtime import primitives as P
from torchlean.spec import scan as spec_scan
from torchlean.testing.primitive_table import TABLE, run_case

from test_vjp import assert_vjp_matches_fd

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

F32 = np.float32


def rng_for(name: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(name.encode()))


def up(a, device) -> Buffer:
    return Buffer.from_numpy(np.asarray(a, dtype=F32), device)


def check(name: str, args: list, device: str):
    info = TABLE[name]
    verdict, out, ref = run_case(info, args, device)
    assert verdict.ok, f"{name} on {device}: {verdict.detail}"
    if device != "cpu":
        assert run_case(info, args, "cpu")[0].ok, f"{name} on cpu (parity run)"
    return out, ref


def fwd_args(rng, L, S, var=False, a_lo=-1.0, a_hi=1.0):
    n = L * S
    A = rng.uniform(a_lo, a_hi, n if var else S).astype(F32)
    B = rng.standard_normal(n if var else S).astype(F32)
    return [A, B, rng.standard_normal(n).astype(F32), rng.standard_normal(S).astype(F32), L, S]


def bwd_args(rng, fwd, var=False):
    A, B, X, h0, L, S = fwd
    f = spec.selective_scan_diag_var_fwd if var else spec.selective_scan_diag_fwd
    H = f(*(a.astype(np.float64) for a in (A, B, X, h0)), L, S).astype(F32)
    return [A, B, X, h0, H, rng.standard_normal(L * S).astype(F32), L, S]


# -- closed forms ---------------------------------------------------------------------------------------
def test_geometric_series(device):
    L, a, b, x, h0 = 30, 0.5, 2.0, 3.0, 1.0
    H = P.selective_scan_diag_fwd(up([a], device), up([b], device), up(np.full(L, x), device), up([h0], device),
                                  L, 1).to_numpy()
    t = np.arange(L) + 1.0
    expect = a**t * h0 + b * x * (1 - a**t) / (1 - a)
    np.testing.assert_allclose(H, expect, rtol=4 * L * 2.0**-24)


def test_a_one_is_a_prefix_sum_exactly(device):
    rng = rng_for("prefix")
    L, S = 1000, 3
    X = rng.integers(-8, 9, L * S).astype(F32)
    H = P.selective_scan_diag_fwd(up(np.ones(S), device), up([1, 2, -1], device), up(X, device), up([5, 0, -3], device),
                                  L, S).to_numpy().reshape(L, S)
    expect = np.cumsum(X.reshape(L, S).astype(np.float64) * [1, 2, -1], axis=0) + [5, 0, -3]
    np.testing.assert_array_equal(H, expect)  # integers below 2^24: exact in any order


def test_a_zero_gives_b_x(device):
    rng = rng_for("zero")
    L, S = 17, 5
    B, X = rng.standard_normal(S).astype(F32), rng.standard_normal(L * S).astype(F32)
    H = P.selective_scan_diag_fwd(up(np.zeros(S), device), up(B, device), up(X, device), up(np.full(S, 9.0), device),
                                  L, S).to_numpy().reshape(L, S)
    np.testing.assert_array_equal(H, X.reshape(L, S) * B)  # 0 * h + B X: one rounding, as the float32 product


@pytest.mark.parametrize("var", [False, True])
def test_long_sequence_few_channels(var, device):
    rng = rng_for(f"long{var}")
    args = fwd_args(rng, 5000, 3, var, a_lo=0.9, a_hi=1.0)  # slow decay: carries matter across chunks
    out, ref = check("selective_scan_diag_var_fwd" if var else "selective_scan_diag_fwd", args, device)
    check("selective_scan_diag_var_bwd" if var else "selective_scan_diag_bwd", bwd_args(rng, args, var), device)


def test_var_and_diag_agree_for_constant_coefficients(device):
    rng = rng_for("agree")
    A, B, X, h0, L, S = fwd_args(rng, 300, 7)
    At, Bt = np.tile(A, L), np.tile(B, L)
    hd = P.selective_scan_diag_fwd(up(A, device), up(B, device), up(X, device), up(h0, device), L, S).to_numpy()
    hv = P.selective_scan_diag_var_fwd(up(At, device), up(Bt, device), up(X, device), up(h0, device), L, S).to_numpy()
    np.testing.assert_array_equal(hd, hv)
    dH = rng.standard_normal(L * S).astype(F32)
    H = up(hd, device)
    gd = [o.to_numpy() for o in P.selective_scan_diag_bwd(up(A, device), up(B, device), up(X, device), up(h0, device),
                                                          H, up(dH, device), L, S)]
    gv = [o.to_numpy() for o in P.selective_scan_diag_var_bwd(up(At, device), up(Bt, device), up(X, device),
                                                              up(h0, device), H, up(dH, device), L, S)]
    np.testing.assert_array_equal(gd[2], gv[2])
    np.testing.assert_array_equal(gd[3], gv[3])
    for k in (0, 1):  # the diag sums over time equal the sums of the var form's per-token terms
        np.testing.assert_allclose(gd[k], gv[k].reshape(L, S).astype(np.float64).sum(axis=0), rtol=1e-4, atol=1e-4)


def test_empty_and_one_step(device):
    for L, S in ((0, 3), (4, 0), (0, 0)):
        A, B, X, h0 = np.ones(S, F32), np.ones(S, F32), np.zeros(L * S, F32), np.ones(S, F32)
        H = P.selective_scan_diag_fwd(up(A, device), up(B, device), up(X, device), up(h0, device), L, S)
        assert H.size == 0
        dA, dB, dX, dh0 = (o.to_numpy() for o in P.selective_scan_diag_bwd(
            up(A, device), up(B, device), up(X, device), up(h0, device), H, up(X, device), L, S))
        assert dX.size == 0 and dA.tolist() == dB.tolist() == dh0.tolist() == [0.0] * S
    H = P.selective_scan_diag_fwd(up([2], device), up([3], device), up([4], device), up([5], device), 1, 1).to_numpy()
    assert H.tolist() == [22.0]


def test_growth_overflows_to_inf_and_nan_propagates(device):
    H = P.selective_scan_diag_fwd(up([1e30, -1e30], device), up([1, 1], device), up(np.ones(6), device),
                                  up([1, 1], device), 3, 2).to_numpy().reshape(3, 2)
    assert H[1, 0] == H[2, 0] == np.inf and H[1, 1] == np.inf and H[2, 1] == -np.inf  # (-1e30)^2 h0: +inf, then -inf
    H = P.selective_scan_diag_fwd(up([0.5, 0.5], device), up([1, 1], device), up([1, np.nan, 1, 1, 1, 1], device),
                                  up([0, 0], device), 3, 2).to_numpy().reshape(3, 2)
    assert np.isnan(H[:, 1]).all() and np.isfinite(H[:, 0]).all()


# -- contracts against chunked orders and wrong kernels -------------------------------------------------
def _rows(a, L, S, var):
    return a.reshape(L, S) if var else np.broadcast_to(a, (L, S))


def _mul(m, e, a):
    ma, ea = np.frexp(a)
    m, ep = np.frexp((m * ma).astype(F32))
    return m.astype(F32), e + ea + ep


def _apply(m, e, l, h):
    with np.errstate(all="ignore"):
        return np.where(h == 0, l, np.ldexp((h * m).astype(F32), e).astype(F32) + l).astype(F32)


def _carries(Pm, Pe, Lc, start, reverse, threads=None):
    """Pass 2 of scan.cu: tl_selective_scan_carry_seq (threads None) or tl_selective_scan_carry_block
    with `threads` runs."""
    C, S = Pm.shape
    order = list(range(C - 1, -1, -1)) if reverse else list(range(C))
    cin = np.zeros((C, S), F32)
    h = np.zeros(S, F32) if reverse else start.copy()
    if threads is None:
        for c in order:
            cin[c] = h
            h = _apply(Pm[c], Pe[c], Lc[c], h)
        return cin
    K = -(-C // threads)
    runs = [order[r * K:(r + 1) * K] for r in range(threads)]
    aggs = []
    for run in runs:  # each thread composes its run
        M, E, Lr = np.ones(S, F32), np.zeros(S, np.int64), np.zeros(S, F32)
        for c in run:
            Lr = _apply(Pm[c], Pe[c], Lc[c], Lr)
            M, ep = np.frexp((M * Pm[c]).astype(F32))
            M, E = M.astype(F32), E + Pe[c] + ep
        aggs.append((M, E, Lr))
    starts = []
    for r, (M, E, Lr) in enumerate(aggs):  # thread 0 walks the runs
        starts.append(h)
        if runs[r]:
            h = _apply(M, E, Lr, h)
    for run, h in zip(runs, starts):  # each thread rescans its run
        for c in run:
            cin[c] = h
            h = _apply(Pm[c], Pe[c], Lc[c], h)
    return cin


def chunked_fwd(A, B, X, h0, L, S, var, T=64, bug=None, threads=None):
    """A float32 NumPy emulation of the CUDA forward's three passes (scan.cu), with optional bugs."""
    a, b, x = _rows(A, L, S, var), _rows(B, L, S, var), X.reshape(L, S)
    C = -(-L // T)
    Pm, Pe, Lc = np.ones((C, S), F32), np.zeros((C, S), np.int64), np.zeros((C, S), F32)
    with np.errstate(all="ignore"):
        for c in range(C):
            m, e, l = np.ones(S, F32), np.zeros(S, np.int64), np.zeros(S, F32)
            for t in range(c * T, min(L, c * T + T)):
                l = a[t] * l + b[t] * x[t]
                m, e = _mul(m, e, a[t])
            Pm[c], Pe[c], Lc[c] = m, e, l
        cin = _carries(Pm, Pe, Lc, h0, False, threads)
        if bug == "drop_carry":
            cin[1:] = 0
        elif bug == "off_by_one_carry":
            cin[2:] = cin[1:-1].copy()
        H = np.empty((L, S), F32)
        for c in range(C):
            h = h0 if c == 0 else cin[c]
            for t in range(c * T, min(L, c * T + T)):
                h = a[t] * h + b[t] * x[t]
                H[t] = h
    return H.reshape(-1)


def chunked_bwd(A, B, X, h0, H, dH, L, S, var, T=64, threads=None):
    """A float32 NumPy emulation of the CUDA backward (scan.cu: bwd_agg, carries in reverse, bwd_apply,
    partials added in chunk order)."""
    a, b, x, dh = _rows(A, L, S, var), _rows(B, L, S, var), X.reshape(L, S), dH.reshape(L, S)
    Hp = np.vstack([h0[None], H.reshape(L, S)[:-1]]) if L else np.zeros((0, S), F32)
    C = -(-L // T)
    Pm, Pe, Lc = np.ones((C, S), F32), np.zeros((C, S), np.int64), np.zeros((C, S), F32)
    with np.errstate(all="ignore"):
        for c in range(C):
            m, e, l = np.ones(S, F32), np.zeros(S, np.int64), np.zeros(S, F32)
            for t in range(min(L, c * T + T) - 1, c * T - 1, -1):
                if t == L - 1:
                    l = dh[t].copy()
                else:
                    l = a[t + 1] * l + dh[t]
                    m, e = _mul(m, e, a[t + 1])
            Pm[c], Pe[c], Lc[c] = m, e, l
        cin = _carries(Pm, Pe, Lc, h0, True, threads)
        dX = np.empty((L, S), F32)
        dA, dB = (np.empty((L, S), F32), np.empty((L, S), F32)) if var else (np.zeros((C, S)), np.zeros((C, S)))
        dh0 = np.zeros(S, F32)
        for c in range(C):
            g = np.zeros(S, F32) if c == C - 1 else cin[c]
            for t in range(min(L, c * T + T) - 1, c * T - 1, -1):
                g = dh[t].copy() if t == L - 1 else dh[t] + a[t + 1] * g
                dX[t] = g * b[t]
                pa, pb = g * Hp[t], g * x[t]
                if var:
                    dA[t], dB[t] = pa, pb
                else:
                    dA[c] += pa.astype(np.float64)
                    dB[c] += pb.astype(np.float64)
            if c == 0:
                dh0 = a[0] * g
    if not var:
        dA, dB = dA.sum(axis=0).astype(F32), dB.sum(axis=0).astype(F32)  # chunk order
    return dA.reshape(-1), dB.reshape(-1), dX.reshape(-1), dh0.astype(F32)


@pytest.mark.parametrize("threads", [None, 4], ids=["carry-seq", "carry-block"])
@pytest.mark.parametrize("var", [False, True])
def test_contract_accepts_the_chunked_backward(monkeypatch, var, threads):
    name = "selective_scan_diag_var_bwd" if var else "selective_scan_diag_bwd"
    rng = rng_for(f"chunked-bwd{var}")
    args = bwd_args(rng, fwd_args(rng, 500, 4, var, a_lo=-1.05, a_hi=1.05), var)
    monkeypatch.setattr(cpu_backend, name, lambda *a: chunked_bwd(*a, var, T=29, threads=threads))
    verdict = run_case(TABLE[name], args, "cpu")[0]
    assert verdict.ok, verdict.detail


@pytest.mark.parametrize("threads", [None, 5], ids=["carry-seq", "carry-block"])
@pytest.mark.parametrize("var", [False, True])
def test_contract_accepts_the_chunked_order(monkeypatch, var, threads):
    name = "selective_scan_diag_var_fwd" if var else "selective_scan_diag_fwd"
    rng = rng_for(f"chunked{var}")
    args = fwd_args(rng, 1000, 4, var, a_lo=-1.05, a_hi=1.05)
    monkeypatch.setattr(cpu_backend, name,
                        lambda A, B, X, h0, L, S: chunked_fwd(A, B, X, h0, L, S, var, T=37, threads=threads))
    verdict = run_case(TABLE[name], args, "cpu")[0]
    assert verdict.ok, verdict.detail


def _bwd_a_t_for_a_t_plus_1(A, B, X, h0, H, dH, L, S):
    """The var backward with the adjoint stepping by A[t] instead of A[t+1]."""
    a, dh = A.reshape(L, S), dH.reshape(L, S)
    g = np.zeros((L, S), F32)
    for t in range(L - 1, -1, -1):
        g[t] = dh[t] if t == L - 1 else dh[t] + a[t] * g[t + 1]
    hp = np.vstack([h0[None], H.reshape(L, S)[:-1]])
    return (g * hp).reshape(-1), (g * X.reshape(L, S)).reshape(-1), (g * B.reshape(L, S)).reshape(-1), a[0] * g[0]


def _diag_bwd_dh0_without_a(A, B, X, h0, H, dH, L, S, genuine=cpu_backend.selective_scan_diag_bwd):
    dA, dB, dX, dh0 = genuine(A, B, X, h0, H, dH, L, S)
    return dA, dB, dX, (dh0 / A).astype(F32)


_R = np.random.default_rng(3)
_LONG = fwd_args(_R, 600, 3, a_lo=0.95, a_hi=1.0)
_LONG_VAR = fwd_args(_R, 600, 3, var=True, a_lo=0.95, a_hi=1.0)
_SHORT_VAR = fwd_args(_R, 20, 3, var=True, a_lo=0.5, a_hi=1.5)
WRONG = [
    pytest.param("selective_scan_diag_fwd", lambda A, B, X, h0, L, S: chunked_fwd(A, B, X, h0, L, S, False, bug="drop_carry"),
                 _LONG, id="fwd-drops-chunk-carry"),
    pytest.param("selective_scan_diag_fwd",
                 lambda A, B, X, h0, L, S: chunked_fwd(A, B, X, h0, L, S, False, bug="off_by_one_carry"),
                 _LONG, id="fwd-off-by-one-carry"),
    pytest.param("selective_scan_diag_var_fwd",
                 lambda A, B, X, h0, L, S: chunked_fwd(A, B, X, h0, L, S, True, bug="off_by_one_carry"),
                 _LONG_VAR, id="var-fwd-off-by-one-carry"),
    pytest.param("selective_scan_diag_var_fwd",  # the coefficient of the previous token
                 lambda A, B, X, h0, L, S, genuine=cpu_backend.selective_scan_diag_var_fwd: genuine(
                     np.concatenate([A[:S], A[:-S]]), B, X, h0, L, S), _SHORT_VAR, id="var-fwd-wrong-A"),
    pytest.param("selective_scan_diag_var_bwd", _bwd_a_t_for_a_t_plus_1, None, id="var-bwd-A[t]-for-A[t+1]"),
    pytest.param("selective_scan_diag_bwd", _diag_bwd_dh0_without_a, None, id="bwd-dh0-without-A"),
]


@pytest.mark.parametrize("name, fake, args", WRONG)
def test_contract_catches_wrong_kernel(monkeypatch, name, fake, args):
    info = TABLE[name]
    if args is None:
        var = "var" in name
        args = bwd_args(np.random.default_rng(4), fwd_args(np.random.default_rng(4), 30, 3, var, 0.5, 1.5), var)
    assert run_case(info, args, "cpu")[0].ok, "the genuine kernel must pass the very case the fake fails"
    monkeypatch.setattr(cpu_backend, name, fake)
    verdict = run_case(info, args, "cpu")[0]
    assert not verdict.ok, f"the contract of {name} accepted a wrong kernel (ratio {verdict.ratio})"


def test_repeatable_bitwise(device):
    rng = rng_for("repeat")
    args = fwd_args(rng, 700, 5)
    b = bwd_args(rng, args)
    outs = [[o.to_numpy() for o in P.selective_scan_diag_bwd(*[up(a, device) if isinstance(a, np.ndarray) else a
                                                                 for a in b])] for _ in range(2)]
    for x, y in zip(*outs):
        np.testing.assert_array_equal(x, y)


# -- VJPs against finite differences --------------------------------------------------------------------
@pytest.mark.parametrize("var", [False, True])
def test_scan_ops_vjp(var, device):
    rng = rng_for(f"vjp{var}")
    L, S = 5, 3
    A, B, X, h0, _, _ = fwd_args(rng, L, S, var, a_lo=-1.2, a_hi=1.2)
    shape_c = (L, S) if var else (S,)
    xs = [A.reshape(shape_c), B.reshape(shape_c), X.reshape(L, S), h0]
    f = spec.selective_scan_diag_var_fwd if var else spec.selective_scan_diag_fwd

    def ref(a, b, x, h):
        return f(a.reshape(-1), b.reshape(-1), x.reshape(-1), h, L, S).reshape(L, S)

    ours = ops.selective_scan_diag_var if var else ops.selective_scan_diag
    w = rng.standard_normal((L, S)).astype(F32)
    assert_vjp_matches_fd("selective_scan_diag" + ("_var" if var else ""), ours, ref, xs, ref(*xs), w, device)


def mamba_inputs(rng, batch=1, dim=2, L=3, N=2, var_b=True, var_c=True):
    return dict(
        u=rng.standard_normal((batch, dim, L)).astype(F32),
        delta=rng.uniform(0.1, 0.8, (batch, dim, L)).astype(F32),
        A=(-rng.uniform(0.2, 1.5, (dim, N))).astype(F32),
        B=rng.standard_normal((batch, N, L) if var_b else (dim, N)).astype(F32),
        C=rng.standard_normal((batch, N, L) if var_c else (dim, N)).astype(F32),
        D=rng.standard_normal(dim).astype(F32),
        z=rng.standard_normal((batch, dim, L)).astype(F32),
        delta_bias=rng.uniform(-0.3, 0.3, dim).astype(F32),
    )


_NAMES = ["u", "delta", "A", "B", "C", "D", "z", "delta_bias"]


@pytest.mark.parametrize("var_bc", [True, False], ids=["variable-BC", "fixed-BC"])
def test_selective_scan_vjp(var_bc, device):
    rng = rng_for(f"mamba-vjp{var_bc}")
    inp = mamba_inputs(rng, var_b=var_bc, var_c=var_bc)
    xs = [inp[k] for k in _NAMES]

    def ref(*a):
        return spec_scan.selective_scan_ref(*a[:7], delta_bias=a[7], delta_softplus=True)

    def ours(*t):
        return ops.selective_scan(*t[:7], delta_bias=t[7], delta_softplus=True)

    w = rng.standard_normal(inp["u"].shape).astype(F32)
    assert_vjp_matches_fd("selective_scan", ours, ref, xs, ref(*xs), w, device)


def test_selective_scan_last_state_vjp(device):
    rng = rng_for("mamba-last")
    inp = mamba_inputs(rng, L=4)
    xs = [inp[k] for k in ("u", "delta", "A", "B")]  # the last state does not depend on C
    c = inp["C"]

    def ref(*a):
        return spec_scan.selective_scan_ref(*a, c, return_last_state=True)[1]

    def ours(*t):
        return ops.selective_scan(*t, tl.tensor(c, device=t[0].device), return_last_state=True)[1]

    w = rng.standard_normal((1, 2, 2)).astype(F32)
    assert_vjp_matches_fd("selective_scan last state", ours, ref, xs, ref(*xs), w, device)


# -- the front end against the NumPy and torch ports of selective_scan_ref ------------------------------
def torch_selective_scan_ref(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False,
                             return_last_state=False):
    """mamba_ssm's selective_scan_ref (real A, B/C 2-D or 3-D), in whatever dtype/device it is given."""
    import torch
    import torch.nn.functional as F

    if delta_bias is not None:
        delta = delta + delta_bias[..., None]
    if delta_softplus:
        delta = F.softplus(delta)
    batch, dim, dstate = u.shape[0], A.shape[0], A.shape[1]
    x = A.new_zeros((batch, dim, dstate))
    ys = []
    delta_a = torch.exp(torch.einsum("bdl,dn->bdln", delta, A))
    if B.dim() == 2:
        delta_b_u = torch.einsum("bdl,dn,bdl->bdln", delta, B, u)
    else:
        delta_b_u = torch.einsum("bdl,bnl,bdl->bdln", delta, B, u)
    for i in range(u.shape[2]):
        x = delta_a[:, :, i] * x + delta_b_u[:, :, i]
        y = torch.einsum("bdn,dn->bd", x, C) if C.dim() == 2 else torch.einsum("bdn,bn->bd", x, C[:, :, i])
        ys.append(y)
    y = torch.stack(ys, dim=2)
    out = y if D is None else y + u * D[:, None]
    if z is not None:
        out = out * F.silu(z)
    return out if not return_last_state else (out, x)


VARIANTS = [
    pytest.param(True, True, dict(), id="varBC-plain"),
    pytest.param(True, True, dict(D=1, z=1, delta_bias=1, delta_softplus=True, return_last_state=True), id="varBC-all"),
    pytest.param(False, False, dict(D=1, delta_softplus=True), id="fixedBC-D-softplus"),
    pytest.param(False, True, dict(z=1, delta_bias=1, return_last_state=True), id="fixedB-varC-z-bias-last"),
    pytest.param(True, False, dict(D=1, z=1), id="varB-fixedC-D-z"),
]


def _tol_close(ours, ref, what):
    ref = np.asarray(ref, np.float64)
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    np.testing.assert_allclose(np.asarray(ours, np.float64), ref, rtol=2e-5, atol=2e-5 * scale + 1e-30,
                               err_msg=what)


@pytest.mark.parametrize("var_b, var_c, opts", VARIANTS)
def test_selective_scan_matches_references(var_b, var_c, opts, device):
    import torch

    rng = rng_for(f"mamba-ref{var_b}{var_c}{sorted(opts)}")
    inp = mamba_inputs(rng, batch=2, dim=5, L=40, N=3, var_b=var_b, var_c=var_c)
    kw = {k: inp[k] for k in ("D", "z", "delta_bias") if opts.get(k)}
    flags = {k: opts[k] for k in ("delta_softplus", "return_last_state") if k in opts}
    main = [inp[k] for k in ("u", "delta", "A", "B", "C")]
    ref_np = spec_scan.selective_scan_ref(*main, **kw, **flags)
    tdev = "cuda" if device.startswith("cuda") else "cpu"
    T = {k: torch.tensor(v, dtype=torch.float64, device=tdev, requires_grad=True)
         for k, v in list(zip(("u", "delta", "A", "B", "C"), main)) + list(kw.items())}
    ref_t = torch_selective_scan_ref(*(T[k] for k in ("u", "delta", "A", "B", "C")),
                                     **{k: T[k] for k in kw}, **flags)
    ts = {k: tl.tensor(v, device=device, requires_grad=True) for k, v in list(zip(("u", "delta", "A", "B", "C"), main))
          + list(kw.items())}
    got = ops.selective_scan(*(ts[k] for k in ("u", "delta", "A", "B", "C")), **{k: ts[k] for k in kw}, **flags)
    outs = got if isinstance(got, tuple) else (got,)
    refs_np = ref_np if isinstance(ref_np, tuple) else (ref_np,)
    refs_t = ref_t if isinstance(ref_t, tuple) else (ref_t,)
    assert len(outs) == len(refs_np) == len(refs_t)
    for o, rn, rt in zip(outs, refs_np, refs_t):
        assert tuple(o.shape) == rn.shape
        _tol_close(o.numpy(), rn, "vs NumPy float64 port")
        _tol_close(o.numpy(), rt.detach().cpu().numpy(), "vs torch float64 port")
    # gradients against torch float64 autograd, with one cotangent per output
    ws = [rng.standard_normal(rn.shape) for rn in refs_np]
    sum(float(0) + (rt * torch.tensor(w, device=tdev)).sum() for rt, w in zip(refs_t, ws)).backward()
    loss = None
    for o, w in zip(outs, ws):
        term = (o * tl.tensor(w.astype(F32), device=device)).sum()
        loss = term if loss is None else loss + term
    loss.backward()
    for k in ts:
        _tol_close(ts[k].grad.numpy(), T[k].grad.cpu().numpy(), f"d/d{k} vs torch float64 autograd")


def test_selective_scan_empty_sequence(device):
    inp = mamba_inputs(np.random.default_rng(0), batch=2, dim=3, L=0, N=2)
    out, last = ops.selective_scan(*(tl.tensor(inp[k], device=device) for k in ("u", "delta", "A", "B", "C")),
                                   return_last_state=True)
    assert tuple(out.shape) == (2, 3, 0) and tuple(last.shape) == (2, 3, 2)
    assert not last.numpy().any()


# -- errors ---------------------------------------------------------------------------------------------
def test_primitive_errors():
    b = up(np.ones(6), "cpu")
    s3 = up(np.ones(3), "cpu")
    with pytest.raises(ShapeError, match=r"selective_scan_diag_fwd: argument X must hold 6"):
        P.selective_scan_diag_fwd(s3, s3, s3, s3, 2, 3)
    with pytest.raises(ShapeError, match=r"selective_scan_diag_var_fwd: argument A must hold 6"):
        P.selective_scan_diag_var_fwd(s3, b, b, s3, 2, 3)
    with pytest.raises(ShapeError, match=r"selective_scan_diag_bwd: argument dH must hold 6"):
        P.selective_scan_diag_bwd(s3, s3, b, s3, b, s3, 2, 3)
    with pytest.raises(ShapeError, match=r"selective_scan_diag_fwd: argument seq_len"):
        P.selective_scan_diag_fwd(s3, s3, b, s3, -2, 3)
    with pytest.raises(ShapeError, match=r"seq_len\*state"):
        P.selective_scan_diag_fwd(s3, s3, b, s3, 2**31, 3)
    with pytest.raises(DTypeError, match=r"selective_scan_diag_fwd: argument h0 must be a Buffer"):
        P.selective_scan_diag_fwd(s3, s3, b, np.ones(3), 2, 3)


def test_front_end_errors():
    rng = np.random.default_rng(1)
    inp = mamba_inputs(rng, batch=2, dim=3, L=4, N=2)
    t = {k: tl.tensor(v) for k, v in inp.items()}
    main = [t[k] for k in ("u", "delta", "A", "B", "C")]
    with pytest.raises(ShapeError, match=r"selective_scan: argument delta must have shape \(2, 3, 4\)"):
        ops.selective_scan(main[0], tl.tensor(np.ones((2, 3, 5), F32)), *main[2:])
    with pytest.raises(ShapeError, match=r"selective_scan: argument A must have shape \(dim, N\)"):
        ops.selective_scan(main[0], main[1], tl.tensor(np.ones((4, 2), F32)), *main[3:])
    with pytest.raises(ShapeError, match=r"selective_scan: argument C must have shape"):
        ops.selective_scan(*main[:4], tl.tensor(np.ones((2, 3, 4), F32)))
    with pytest.raises(ShapeError, match=r"selective_scan: argument D must have shape \(3,\)"):
        ops.selective_scan(*main, D=tl.tensor(np.ones(2, F32)))
    with pytest.raises(ShapeError, match=r"selective_scan: argument u must have shape \(batch, dim, L\)"):
        ops.selective_scan(tl.tensor(np.ones((3, 4), F32)), *main[1:])
    with pytest.raises(ArgumentError, match=r"grouped form .*not supported"):
        ops.selective_scan(*main[:3], tl.tensor(np.ones((2, 1, 2, 4), F32)), main[4])
    with pytest.raises(ArgumentError, match=r"argument A is complex.*not supported"):
        ops.selective_scan(*main[:2], np.ones((3, 2), np.complex64), *main[3:])
    with pytest.raises(ShapeError, match=r"selective_scan_diag: argument h0 must have shape \(3,\)"):
        ops.selective_scan_diag(tl.tensor(np.ones(3, F32)), tl.tensor(np.ones(3, F32)), tl.tensor(np.ones((2, 3), F32)),
                                tl.tensor(np.ones(2, F32)))


def test_scan_ops_not_in_functional():
    import torchlean.nn.functional as TF

    assert "selective_scan" in ops.__all__
    assert not hasattr(TF, "selective_scan_diag")


@pytest.mark.parametrize("var_b, var_c", [(True, True), (False, True), (True, False)])
def test_selective_scan_recomputed_in_backward_gives_the_same_bits(monkeypatch, var_b, var_c, device):
    """Above _RECOMPUTE_BYTES per (L, b, d, N) tensor the scan keeps none of them for backward
    (autograd.recompute): the loss, every gradient and the bits are those of the recorded graph,
    one node stands for the scan, and the tape no longer holds the (L, b, d, N) tensors."""
    from torchlean.ops import scan as scan_ops

    rng = rng_for(f"mamba-recompute{var_b}{var_c}")
    inp = mamba_inputs(rng, var_b=var_b, var_c=var_c)

    def run():
        ts = {k: tl.tensor(v, requires_grad=True, device=device) for k, v in inp.items()}
        out = ops.selective_scan(ts["u"], ts["delta"], ts["A"], ts["B"], ts["C"], ts["D"], ts["z"],
                                 delta_bias=ts["delta_bias"], delta_softplus=True)
        held = tl.allocator_stats(device).live_bytes
        (out * out).sum().backward()
        return out.detach().cpu().numpy(), {k: t.grad.cpu().numpy() for k, t in ts.items()}, held, out

    y0, g0, held0, _ = run()
    monkeypatch.setattr(scan_ops, "_RECOMPUTE_BYTES", 0)
    y1, g1, held1, out1 = run()
    np.testing.assert_array_equal(y1, y0)
    for k in g0:
        np.testing.assert_array_equal(g1[k], g0[k], err_msg=k)
    L, (batch, dim), N = inp["u"].shape[2], inp["u"].shape[:2], inp["A"].shape[1]
    assert held0 - held1 >= 3 * 4 * L * batch * dim * N  # at least a_bar, the input terms and H
