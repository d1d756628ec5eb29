"""The attention family: flash attention primitives, the tape op and scaled_dot_product_attention.

The primitive table (torchlean.testing.table_attention) already runs every primitive against its
float64 spec and contract on every backend (random and edge cases: tile boundaries, n_q != n_k,
d in {16, 32, 64, 128, 24, 80}, each mask mode, causal, broadcast masks, blocked rows, NaN).
Here: known answers of the conventions, VJPs against finite differences, agreement with PyTorch,
the O(n d) memory of the CPU path, fake kernels that the contracts must reject, and errors.
"""

from __future__ import annotations

import tracemalloc

import zlib

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import torchlean as tl
import torchlean.nn.functional as F
from torchlean import contract, ops, spec
from torchlean.kernels import cpu as cpu_backend
from torchlean.errors import ArgumentError, ShapeError, TorchLeanError
from torchlean.runtime import Buffer
from torchlean.runtime import primitives as P
from torchlean.testing.primitive_table import TABLE, run_case
from torchlean.testing.table_attention import FWD_EDGES, bwd_args, fwd_args

from test_vjp import _report, _within, fd_grads

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
F32 = np.float32


def up(a, device):
    return None if a is None else Buffer.from_numpy(np.asarray(a, dtype=F32), device)


def fwd(device, q, k, v, mask, b, nq, nk, d, scale, causal=False, mode="none", layout=None):
    o, l_ = P.flash_attention_fwd(up(q, device), up(k, device), up(v, device), up(mask, device), b, nq, nk, d, scale,
                                  causal, mode, layout)
    return o.to_numpy().reshape(b, nq, d), l_.to_numpy().reshape(b, nq)


def rand(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(F32)


# -- known answers ---------------------------------------------------------------------------
def test_fully_blocked_rows_hard_zero_fill_uniform_add_zero(device):
    rng = np.random.default_rng(0)
    b, n, d = 1, 4, 16
    q, k, v = rand(rng, b, n, d), rand(rng, b, n, d), rand(rng, b, n, d)
    mask = np.ones((b, n, n), F32)
    mask[0, 2] = 0
    o, l_ = fwd(device, q, k, v, mask, b, n, n, d, 0.25, False, "hard")
    assert np.all(o[0, 2] == 0) and l_[0, 2] == -np.inf and np.all(np.isfinite(o[0, [0, 1, 3]]))
    o, l_ = fwd(device, q, k, v, mask, b, n, n, d, 0.25, False, "fill")
    np.testing.assert_allclose(o[0, 2], v[0].mean(axis=0), rtol=1e-5, atol=1e-6)  # uniform average
    np.testing.assert_allclose(l_[0, 2], -1000.0 + np.log(n), rtol=1e-6)
    addm = np.where(mask > 0, 0.0, -np.inf).astype(F32)
    o, l_ = fwd(device, q, k, v, addm, b, n, n, d, 0.25, False, "add")
    assert np.all(o[0, 2] == 0) and l_[0, 2] == -np.inf
    # zero gradients for the blocked row
    dout = rand(rng, b * n * d)
    args = [up(a, device) for a in (q, k, v, mask)]
    ob, lb = P.flash_attention_fwd(*args, b, n, n, d, 0.25, False, "hard", None)
    dq = P.flash_attention_bwd_q(*args, ob, lb, up(dout, device), b, n, n, d, 0.25, False, "hard", None)
    assert np.all(dq.to_numpy().reshape(b, n, d)[0, 2] == 0)


def test_causal_first_row_copies_v0_and_no_keys_give_zeros(device):
    rng = np.random.default_rng(1)
    q, k, v = rand(rng, 2, 5, 8), rand(rng, 2, 7, 8), rand(rng, 2, 7, 8)
    o, l_ = fwd(device, q, k, v, None, 2, 5, 7, 8, 0.3, True)
    np.testing.assert_allclose(o[:, 0], v[:, 0], rtol=1e-6)  # row 0 sees key 0 only
    o, l_ = fwd(device, q, np.zeros(0, F32), np.zeros(0, F32), None, 2, 5, 0, 8, 0.3, False)
    assert np.all(o == 0) and np.all(l_ == -np.inf)


def test_large_scale_stays_finite_and_nan_propagates_by_row(device):
    rng = np.random.default_rng(2)
    q, k, v = rand(rng, 1, 6, 16), rand(rng, 1, 9, 16), rand(rng, 1, 9, 16)
    o, l_ = fwd(device, q, k, v, None, 1, 6, 9, 16, 1000.0)
    assert np.all(np.isfinite(o)) and np.all(np.isfinite(l_))
    q[0, 3, 5] = np.nan
    o, l_ = fwd(device, q, k, v, None, 1, 6, 9, 16, 0.25)
    assert np.all(np.isnan(o[0, 3])) and np.isnan(l_[0, 3])
    assert np.all(np.isfinite(np.delete(o[0], 3, axis=0)))


def test_broadcast_mask_layout_equals_dense(device):
    rng = np.random.default_rng(3)
    n_, h, nq, nk, d = 2, 3, 9, 13, 8
    b = n_ * h
    q, k, v = rand(rng, b, nq, d), rand(rng, b, nk, d), rand(rng, b, nk, d)
    small = rng.standard_normal((n_, 1, 1, nk)).astype(F32)  # key padding, added
    dense = np.broadcast_to(small, (n_, h, nq, nk)).reshape(b, nq, nk).copy()
    o1, l1 = fwd(device, q, k, v, small, b, nq, nk, d, 0.3, False, "add", (h, nk, 0, 0, 1))
    o2, l2 = fwd(device, q, k, v, dense, b, nq, nk, d, 0.3, False, "add", None)
    np.testing.assert_array_equal(o1, o2)
    np.testing.assert_array_equal(l1, l2)


# -- a NaN or inf stays in its row: never reaches a row that blocks it, nor another batch entry -------
# n = 8 runs the CPU's Numba lanes (the batch entries side by side as SIMD lanes), n = 40 its BLAS tiles.
def _blocking_mask(rng, mode, b, n):
    """A (b, n, n) mask: lane 1 blocks keys 2 and 5 from every query but 0, and query 3 all keys."""
    allow = rng.random((b, n, n)) < 0.8
    allow[1, :, [2, 5]] = False
    allow[1, 0, [2, 5]] = True
    allow[1, 1, [0, 1]] = True
    allow[1, 3] = False
    if mode == "hard":
        return allow.astype(F32)
    return np.where(allow, rand(rng, *allow.shape, scale=2.0), -np.inf).astype(F32)


def _lanes_equal(a, b, lanes):
    a, b = np.asarray(a), np.asarray(b)
    return all(np.array_equal(a[i].view(np.uint32), b[i].view(np.uint32)) for i in lanes)


@pytest.mark.parametrize("n", [8, 40])
@pytest.mark.parametrize("mode", ["add", "hard"])
def test_non_finite_q_k_stay_in_their_rows(device, mode, n):
    rng = np.random.default_rng(30)
    b, d = 3, 8
    q, k, v = rand(rng, b, n, d), rand(rng, b, n, d), rand(rng, b, n, d)
    mask = _blocking_mask(rng, mode, b, n)
    bad_q, bad_k = q.copy(), k.copy()
    bad_k[1, 2, 0], bad_k[1, 5, 3], bad_q[1, 6, 2] = np.inf, np.nan, -np.inf  # lane 1 only
    fargs = fwd_args(bad_q.reshape(-1), bad_k.reshape(-1), v.reshape(-1), mask.reshape(-1), b, n, n, d, 1.0, False,
                     mode, None)
    verdict, (o, l_), _ = run_case(TABLE["flash_attention_fwd"], fargs, device)
    assert verdict.ok, verdict.detail
    o, l_ = o.reshape(b, n, d), l_.reshape(b, n)
    rows = [r for r in range(n) if r not in (0, 3, 6)]  # rows of lane 1 that block every non-finite score
    assert np.all(np.isfinite(o[1, rows])) and np.all(np.isfinite(l_[1, rows]))
    assert np.all(o[1, 3] == 0) and l_[1, 3] == -np.inf
    o2, l2 = fwd(device, q, k, v, mask, b, n, n, d, 1.0, False, mode)  # the same without the specials
    assert _lanes_equal(o, o2, (0, 2)) and _lanes_equal(l_, l2, (0, 2))


@pytest.mark.parametrize("n", [8, 40])
@pytest.mark.parametrize("mode", ["add", "hard"])
def test_non_finite_dout_row_reaches_only_the_keys_it_attends(device, mode, n):
    """dS of a blocked key is exactly 0 (the spec), not 0 * (dP - D): a NaN or inf in dout of one
    row must not reach dK of the keys that row blocks (nor dQ of other rows, nor other lanes)."""
    rng = np.random.default_rng(31)
    b, d = 3, 8
    q, k, v = rand(rng, b, n, d), rand(rng, b, n, d), rand(rng, b, n, d)
    fargs = fwd_args(q.reshape(-1), k.reshape(-1), v.reshape(-1), _blocking_mask(rng, mode, b, n).reshape(-1), b, n, n,
                     d, 1.0, False, mode, None)
    dout = rand(rng, b * n * d)
    bad = dout.copy()
    bad[(n + 1) * d + np.arange(2)] = [np.nan, np.inf]  # lane 1, query 1 (which blocks keys 2 and 5)
    bargs, clean = bwd_args(fargs, dout=bad), bwd_args(fargs, dout=dout)
    grads = {}
    for name in ("flash_attention_bwd_q", "flash_attention_bwd_k"):
        verdict, grads[name], _ = run_case(TABLE[name], bargs, device)
        assert verdict.ok, f"{name}: {verdict.detail}"
        ref = run_case(TABLE[name], clean, device)[1]
        assert _lanes_equal(grads[name].reshape(b, -1), ref.reshape(b, -1), (0, 2)), name
    dq, dk = grads["flash_attention_bwd_q"].reshape(b, n, d), grads["flash_attention_bwd_k"].reshape(b, n, d)
    assert np.all(np.isnan(dq[1, 1])) and np.all(np.isfinite(np.delete(dq[1], 1, axis=0)))
    assert np.all(np.isfinite(dk[1, [2, 5]]))


@pytest.mark.parametrize("n", [8, 40])
@pytest.mark.parametrize("mode", ["add", "hard"])
def test_nan_row_gives_no_dv_to_the_keys_it_blocks(device, mode, n):
    """A NaN query row has lse NaN; P = exp(S' - lse) is still exactly 0 on the keys it blocks (not
    exp(-inf - NaN)), so dV of those keys stays finite, as in the spec."""
    rng = np.random.default_rng(32)
    b, d = 3, 8
    q, k, v = rand(rng, b, n, d), rand(rng, b, n, d), rand(rng, b, n, d)
    q[1, 1, 0] = np.nan  # lane 1, query 1 (which blocks keys 2 and 5)
    fargs = fwd_args(q.reshape(-1), k.reshape(-1), v.reshape(-1), _blocking_mask(rng, mode, b, n).reshape(-1), b, n, n,
                     d, 1.0, False, mode, None)
    bargs = bwd_args(fargs, rng=rng)
    assert np.isnan(bargs[5].reshape(b, n)[1, 1])
    verdict, dv, _ = run_case(TABLE["flash_attention_bwd_v"], bargs, device)
    assert verdict.ok, verdict.detail
    assert np.all(np.isfinite(dv.reshape(b, n, d)[1, [2, 5]]))


# -- VJPs against float64 finite differences ---------------------------------------------------
def _ref_attention(mask, causal, mode, scale):
    def ref(q, k, v):
        b, nq, d = q.shape
        nk = k.shape[1]
        out, _ = spec.flash_attention_fwd(q.reshape(-1), k.reshape(-1), v.reshape(-1), mask, b, nq, nk, d, scale,
                                          causal, mode if mask is not None else "none", None)
        return out.reshape(b, nq, d)
    return ref


@pytest.mark.parametrize("mode, causal", [("none", False), ("none", True), ("fill", False), ("hard", False),
                                          ("add", False), ("hard", True), ("fill", True)])
def test_vjp_matches_finite_differences(mode, causal, device):
    # a seed of our own (hash() of a str changes from process to process)
    rng = np.random.default_rng(zlib.crc32(f"{mode}-{causal}".encode()))
    b, nq, nk, d = 2, 3, 4, 3
    q, k, v = rand(rng, b, nq, d), rand(rng, b, nk, d), rand(rng, b, nk, d)
    mask = None
    if mode != "none":
        allow = rng.random((b, nq, nk)) < 0.7
        allow[:, :, 0] = True
        mask = (allow.astype(F32) if mode != "add"
                else np.where(allow, rng.standard_normal((b, nq, nk)), -np.inf).astype(F32))
    scale = 0.7
    w = rand(rng, b, nq, d)
    ts = [tl.tensor(a, device=device, requires_grad=True) for a in (q, k, v)]
    tm = None if mask is None else tl.tensor(mask, device=device)
    out = ops.flash_attention(*ts, mask=tm, causal=causal, scale=scale, mask_mode="fill" if mode == "none" else mode)
    out.backward(tl.tensor(w, device=device))
    m64 = None if mask is None else mask.astype(np.float64).reshape(-1)
    fds = fd_grads(_ref_attention(m64, causal, mode, float(F32(scale))), [q, k, v], w)
    # A gradient that is 0 in exact arithmetic (a row whose only allowed key is key 0: softmax of
    # one score) comes out as the rounding of dP - D, a few float32 ulps of terms of size ~1:
    # the absolute floor is 1e-5 (up to 1.6e-6 seen over 300 seeds on CUDA's 3xTF32 kernels).
    floor = 1e-5
    for t, fd, name in zip(ts, fds, "qkv"):
        ours = t.grad.numpy()
        assert _within(ours, fd, floor), f"d{name} ({mode}, causal={causal}): {_report(ours, fd, floor)}"
        assert not _within(2 * fd, fd, floor) or np.abs(fd).max() < 1e-4


def test_separate_bwd_components_equal_fused(device):
    args = bwd_args(FWD_EDGES[13], rng=np.random.default_rng(0))
    bufs = [up(a, device) if isinstance(a, np.ndarray) else a for a in args]
    dk, dv = P.flash_attention_bwd_kv(*bufs)
    np.testing.assert_array_equal(P.flash_attention_bwd_k(*bufs).to_numpy(), dk.to_numpy())
    np.testing.assert_array_equal(P.flash_attention_bwd_v(*bufs).to_numpy(), dv.to_numpy())
    dq3, dk3, dv3 = P.flash_attention_bwd(*bufs)  # all three in one call: the same bits
    np.testing.assert_array_equal(dq3.to_numpy(), P.flash_attention_bwd_q(*bufs).to_numpy())
    np.testing.assert_array_equal(dk3.to_numpy(), dk.to_numpy())
    np.testing.assert_array_equal(dv3.to_numpy(), dv.to_numpy())


@pytest.mark.cuda
@pytest.mark.parametrize("edge", [6, 7, 8, 9, 10, 11, 13, 25])
def test_cuda_tf32_mode_meets_its_contract_and_changes_the_bits(cuda_device, edge):
    """With TF32 allowed the CUDA kernels take one TF32 product (attention_mma.cu): the results meet
    the contract's TF32 bounds (tf32=True) and are not the float32 mode's bits."""
    from torchlean.runtime import allow_tf32, set_allow_tf32
    from torchlean.testing.primitive_table import run_runtime, spec_args

    fargs = FWD_EDGES[edge]
    cases = [("flash_attention_fwd", fargs), ("flash_attention_bwd", bwd_args(fargs, rng=np.random.default_rng(4)))]
    before = allow_tf32()
    try:
        for name, args in cases:
            info = TABLE[name]
            set_allow_tf32(False)
            exact = run_runtime(info, args, cuda_device)
            set_allow_tf32(True)
            out = run_runtime(info, args, cuda_device)
            sargs = spec_args(args)
            ref = info.spec(*sargs)
            verdict = contract.compare(out, ref, info.contract.bound(ref, *sargs, tf32=True))
            assert verdict.ok, f"{name} (edge {edge}), TF32: {verdict.detail}"
            assert any(not np.array_equal(a, b) for a, b in zip(out, exact)), f"{name}: TF32 mode had no effect"
    finally:
        set_allow_tf32(before)


def test_vjp_takes_one_backward_call_when_q_k_v_all_need_grads(monkeypatch):
    calls = []
    for name in ("flash_attention_bwd", "flash_attention_bwd_q", "flash_attention_bwd_kv"):
        real = getattr(P, name)
        monkeypatch.setattr(P, name, lambda *a, _n=name, _r=real: calls.append(_n) or _r(*a))
    q, k, v = (tl.randn(2, 5, 8, requires_grad=True) for _ in range(3))
    tl.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
    assert calls == ["flash_attention_bwd"]
    calls.clear()
    k2, v2 = k.detach(), v.detach()
    tl.nn.functional.scaled_dot_product_attention(q, k2, v2).sum().backward()
    assert calls == ["flash_attention_bwd_q"]


# -- the CPU kernels' two paths for short sequences ------------------------------------------------
def _small_cases():
    """Cases of the Numba path (n_q, n_k <= SMALL_N, n_q n_k d <= SMALL_WORK), every mask mode,
    ragged lane blocks (batch 70 = 64 + 6; 8 x 8 transpose tiles with ragged edges: n d = 9 * 5)."""
    from torchlean.testing.table_attention import _case

    return [_case(40, 70, 8, 8, 16, causal=True), _case(41, 70, 9, 7, 5, "fill", causal=True),
            _case(42, 12, 16, 16, 16, "hard"), _case(43, 6, 9, 11, 8, "add", layout=(2 * 11, (3, 11, 0, 0, 1)))]


def test_cpu_small_path_is_taken_and_meets_contracts():
    from torchlean.kernels.cpu import attention as cpu_att

    assert cpu_att._small(256, 8, 8, 16) and cpu_att._small(70, 9, 7, 5)
    assert not cpu_att._small(2, 17, 17, 32) and not cpu_att._small(1, 33, 2, 4)  # both sides of the thresholds
    for fargs in _small_cases():
        assert cpu_att._small(*fargs[4:8])
        for name, args in [("flash_attention_fwd", fargs)] + [
                (n, bwd_args(fargs, rng=np.random.default_rng(1))) for n in ("flash_attention_bwd_q",
                                                                           "flash_attention_bwd_kv")]:
            verdict = run_case(TABLE[name], args, "cpu")[0]
            assert verdict.ok, f"{name}: {verdict.detail}"


def test_cpu_small_path_bits_independent_of_lanes_threads_and_path(monkeypatch):
    """Each lane computes the same float32 operations whatever its block, the vector width, the
    path (serial or prange) or the thread count: the bits must not change."""
    import numba

    from torchlean.kernels.cpu import attention as cpu_att

    def run_all():
        res = []
        for fargs in _small_cases():
            res += list(cpu_att.flash_attention_fwd(*fargs))
            bargs = bwd_args(fargs, rng=np.random.default_rng(2))
            res.append(cpu_att.flash_attention_bwd_q(*bargs))
            res += list(cpu_att.flash_attention_bwd_kv(*bargs))
        return res

    ref = run_all()
    threads = numba.get_num_threads()
    try:
        for lanes, par, t in [(8, 1 << 40, threads), (13, 1, 1), (64, 1, threads), (5, 1, threads)]:
            monkeypatch.setattr(cpu_att, "LANES", lanes)
            monkeypatch.setattr(cpu_att, "PAR_WORK", par)
            numba.set_num_threads(t)
            for a, b in zip(run_all(), ref):
                assert np.array_equal(a.view(np.uint32), b.view(np.uint32)) or \
                    np.array_equal(np.isnan(a), np.isnan(b)) and np.array_equal(a[~np.isnan(a)], b[~np.isnan(b)])
    finally:
        numba.set_num_threads(threads)


def test_cpu_small_path_one_pass_backward_equals_two_passes():
    """flash_attention_bwd's one Numba pass (P and dS computed once for dq, dk and dv) gives the
    bits of the separate dq and (dk, dv) passes."""
    from torchlean.kernels.cpu import attention as cpu_att

    for fargs in _small_cases():
        if fargs[5] != fargs[6]:  # the one-pass path takes n_q == n_k
            continue
        bargs = bwd_args(fargs, rng=np.random.default_rng(3))
        both = cpu_att.flash_attention_bwd(*bargs)
        sep = (cpu_att.flash_attention_bwd_q(*bargs), *cpu_att.flash_attention_bwd_kv(*bargs))
        for a, b in zip(both, sep):
            assert np.any(b != 0) and np.array_equal(a.view(np.uint32), b.view(np.uint32))


@pytest.mark.parametrize("batch, heads, n, d, mode, causal", [
    (70, 3, 9, 5, "none", True),     # 210 entries: ragged lane blocks and 8 x 8 tiles, the parallel path
    (3, 4, 8, 16, "hard", False),    # gpt_adder's shape, a per-head mask
    (5, 2, 7, 12, "fill", True),
    (2, 3, 6, 8, "add", False),
])
def test_cpu_packed_small_path_reads_qkv_in_place_same_bits(monkeypatch, batch, heads, n, d, mode, causal):
    """The packed primitives' Numba path reads q, k, v out of qkv and writes out and dqkv in place;
    it must give the bits of moving the heads by copies around the plain kernels, for any LANES,
    path and thread count."""
    import numba

    from torchlean.kernels.cpu import attention as cpu_att
    from torchlean.testing.table_attention import mask_values

    rng = np.random.default_rng(batch * heads + n)
    qkv = rng.standard_normal(batch * n * 3 * heads * d).astype(F32)
    dout = rng.standard_normal(batch * n * heads * d).astype(F32)
    if mode == "none":
        mask, layout = None, None
    else:  # (batch, heads, n, n), one mask per (batch, head)
        mask = mask_values(rng, batch * heads * n * n, mode, 0.75)
        layout = np.array([heads, heads * n * n, n * n, n, 1], np.int64)
    sc = 1.0 / np.sqrt(d)
    assert cpu_att._small(batch * heads, n, n, d)

    def by_copies():
        q, k, v = cpu_att._split_qkv(qkv, batch, heads, n, d)
        out, lse = cpu_att.flash_attention_fwd(q, k, v, mask, batch * heads, n, n, d, sc, causal, mode, layout)
        grads = cpu_att.flash_attention_bwd(q, k, v, mask, out, lse, cpu_att._heads_first(dout, batch, heads, n, d),
                                            batch * heads, n, n, d, sc, causal, mode, layout)
        dqkv = np.empty((batch, n, 3, heads, d), F32)
        for i, g in enumerate(grads):
            dqkv[:, :, i] = g.reshape(batch, heads, n, d).transpose(0, 2, 1, 3)
        return out.reshape(batch, heads, n, d).transpose(0, 2, 1, 3).reshape(-1), lse, dqkv.reshape(-1)

    ref = by_copies()
    assert all(np.any(r != 0) for r in ref)
    threads = numba.get_num_threads()
    try:
        for lanes, par, t in [(64, cpu_att.PAR_WORK, threads), (8, 1 << 40, threads), (13, 1, 1), (5, 1, threads)]:
            monkeypatch.setattr(cpu_att, "LANES", lanes)
            monkeypatch.setattr(cpu_att, "PAR_WORK", par)
            numba.set_num_threads(t)
            out, lse = cpu_att.flash_attention_packed_fwd(qkv, mask, batch, heads, n, d, sc, causal, mode, layout)
            dqkv = cpu_att.flash_attention_packed_bwd(qkv, mask, out, lse, dout, batch, heads, n, d, sc, causal, mode,
                                                      layout)
            for a, b in zip((out, lse, dqkv), ref):
                assert a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))
    finally:
        numba.set_num_threads(threads)


# -- PyTorch agreement -----------------------------------------------------------------------
def _torch_dev(device):
    return "cuda" if device == "cuda" and torch.cuda.is_available() else "cpu"


CASES = [
    dict(shape=(2, 3, 17, 8), s=11, mask=None, causal=False),
    dict(shape=(2, 3, 17, 8), s=17, mask=None, causal=True),
    dict(shape=(2, 3, 9, 16), s=13, mask=("bool", (9, 13)), causal=False),
    dict(shape=(2, 3, 9, 16), s=13, mask=("float", (2, 1, 9, 13)), causal=False),
    dict(shape=(2, 3, 9, 16), s=13, mask=("bool", (2, 1, 1, 13)), causal=False),
    dict(shape=(2, 3, 9, 16), s=13, mask=("float", (1, 3, 9, 13)), causal=False, scale=0.05),
    dict(shape=(4, 70, 24), s=66, mask=None, causal=False, scale=2.0),
    dict(shape=(2, 2, 2, 5, 8), s=6, mask=("bool", (2, 1, 2, 5, 6)), causal=False),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c['shape']}-{c['mask']}-{c['causal']}")
def test_front_end_matches_torch(case, device):
    rng = np.random.default_rng(7)
    shape, s = case["shape"], case["s"]
    lead, (l_, e) = shape[:-2], shape[-2:]
    q = rand(rng, *shape)
    k, v = rand(rng, *lead, s, e), rand(rng, *lead, s, e)
    mask = None
    if case["mask"] is not None:
        kind, mshape = case["mask"]
        mask = rng.random(mshape) < 0.7 if kind == "bool" else rand(rng, *mshape)
        if kind == "bool":
            mask[..., 0] = True
    scale = case.get("scale")
    w = rand(rng, *shape)
    ts = [tl.tensor(a, device=device, requires_grad=True) for a in (q, k, v)]
    out = F.scaled_dot_product_attention(*ts, attn_mask=None if mask is None else tl.tensor(mask, device=device),
                                         is_causal=case["causal"], scale=scale)
    out.backward(tl.tensor(w, device=device))
    tdev = _torch_dev(device)
    T = [torch.tensor(a, dtype=torch.float64, device=tdev, requires_grad=True) for a in (q, k, v)]
    tm = None if mask is None else torch.tensor(mask, device=tdev, dtype=torch.bool if mask.dtype == bool
                                                 else torch.float64)
    ref = TF.scaled_dot_product_attention(*T, attn_mask=tm, is_causal=case["causal"], scale=scale)
    ref.backward(torch.tensor(w, dtype=torch.float64, device=tdev))
    # float32 against float64: a few hundred u of the largest magnitudes involved
    tol = lambda r: 2e-5 * (np.abs(r) + np.abs(r).max()) + 1e-6  # noqa: E731
    r = ref.detach().cpu().numpy()
    assert out.shape == tuple(r.shape)
    assert np.all(np.abs(out.numpy() - r) <= tol(r))
    for t, tt, name in zip(ts, T, "qkv"):
        g = tt.grad.cpu().numpy()
        assert np.all(np.abs(t.grad.numpy() - g) <= tol(g)), f"grad {name}: {np.abs(t.grad.numpy() - g).max()}"
    # torch float32 agrees too (the test device's torch, TF32 off)
    T32 = [torch.tensor(a, device=tdev) for a in (q, k, v)]
    tm32 = None if tm is None else (tm if tm.dtype == torch.bool else tm.float())
    r32 = TF.scaled_dot_product_attention(*T32, attn_mask=tm32, is_causal=case["causal"], scale=scale).cpu().numpy()
    assert np.all(np.abs(out.numpy() - r32) <= tol(r))


def test_front_end_fully_masked_row_gives_zero_like_torch(device):
    rng = np.random.default_rng(8)
    q, k, v = rand(rng, 1, 3, 4), rand(rng, 1, 5, 4), rand(rng, 1, 5, 4)
    m = np.ones((3, 5), bool)
    m[1] = False
    out = F.scaled_dot_product_attention(*(tl.tensor(a, device=device) for a in (q, k, v)),
                                         attn_mask=tl.tensor(m, device=device)).numpy()
    ref = TF.scaled_dot_product_attention(*(torch.tensor(a) for a in (q, k, v)), attn_mask=torch.tensor(m)).numpy()
    assert np.all(out[0, 1] == 0) and np.all(ref[0, 1] == 0)


# -- memory: the CPU path never holds an (n, n) matrix -----------------------------------------
def test_cpu_memory_is_O_n_d():
    rng = np.random.default_rng(9)
    n, d = 4096, 64
    q, k, v, g = (rand(rng, 1, n, d) for _ in range(4))
    args = [Buffer.from_numpy(a.reshape(-1), "cpu") for a in (q, k, v)]
    gb = Buffer.from_numpy(g.reshape(-1), "cpu")

    def run():
        out, lse = P.flash_attention_fwd(*args, None, 1, n, n, d, 0.125, False, "none", None)
        P.flash_attention_bwd_q(*args, None, out, lse, gb, 1, n, n, d, 0.125, False, "none", None)
        P.flash_attention_bwd_kv(*args, None, out, lse, gb, 1, n, n, d, 0.125, False, "none", None)

    run()  # the first call imports modules and loads compiled kernels: not the kernels' memory
    nbytes = n * d * 4
    tracemalloc.start()  # NumPy's allocations
    try:
        tracemalloc.reset_peak()
        rss0 = _reset_peak_rss()  # the Numba kernels' scratch (not traced): the process's peak
        run()
        _, peak = tracemalloc.get_traced_memory()
        rss_peak = _peak_rss() - rss0 if rss0 is not None else 0
    finally:
        tracemalloc.stop()
    for what, got in (("NumPy", peak), ("process", rss_peak)):
        assert got < 16 * nbytes, \
            f"{what} peak {got / 2**20:.1f} MiB; an n x n float32 matrix is {n * n * 4 / 2**20:.0f} MiB"


def _status_kib(key: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key + ":"))


def _reset_peak_rss():
    """Reset the process's peak RSS to its RSS now (Linux: write 5 to clear_refs); its RSS in bytes,
    or None where that cannot be done."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return _status_kib("VmRSS") * 1024
    except (OSError, StopIteration):
        return None


def _peak_rss() -> int:
    return _status_kib("VmHWM") * 1024


# -- fake kernels: the contracts must reject them ----------------------------------------------
def _genuine(name):
    return getattr(cpu_backend, name)


def _causal_off_by_one(q, k, v, mask, batch, n_q, n_k, d, scale, causal, mode, layout, genuine=_genuine(
        "flash_attention_fwd")):
    """Ignores the causal flag."""
    out, lse = genuine(q, k, v, mask, batch, n_q, n_k, d, scale, False, mode, layout)
    return out, lse


def _lse_off(*args, genuine=_genuine("flash_attention_fwd")):
    out, lse = genuine(*args)
    return out, lse + np.float32(1e-3)


def _drop_tile(*args, genuine=_genuine("flash_attention_fwd")):
    q, k, v, mask, batch, n_q, n_k, d, scale, causal, mode, layout = args
    keep = n_k - 64
    kk = k.reshape(batch, n_k, d)[:, :keep].reshape(-1).copy()
    vv = v.reshape(batch, n_k, d)[:, :keep].reshape(-1).copy()
    return genuine(q, kk, vv, None, batch, n_q, keep, d, scale, causal, "none", None)


def _dq_wrong_sign_on_tile(*args, genuine=_genuine("flash_attention_bwd_q")):
    dq = genuine(*args).copy()
    dq[:16] = -dq[:16]
    return dq


_NOMASK = fwd_args(*(np.random.default_rng(5).standard_normal(s).astype(F32) for s in (130 * 16, 130 * 16, 130 * 16)),
                   None, 1, 130, 130, 16, 0.25, False, "none", None)
_CAUSAL = fwd_args(*_NOMASK[:4], 1, 130, 130, 16, 0.25, True, "none", None)
FAKES = [
    pytest.param("flash_attention_fwd", _drop_tile, _NOMASK, id="fwd-drops-a-key-tile"),
    pytest.param("flash_attention_fwd", _causal_off_by_one, _CAUSAL, id="fwd-ignores-causal"),
    pytest.param("flash_attention_fwd", _lse_off, _NOMASK, id="fwd-lse-off"),
    pytest.param("flash_attention_bwd_q", _dq_wrong_sign_on_tile, bwd_args(_NOMASK), id="bwd_q-wrong-sign"),
]


def _causal_shifted(q, k, v, mask, batch, n_q, n_k, d, scale, causal, mode, layout, genuine=_genuine(
        "flash_attention_fwd")):
    """A causal mask off by one (j <= i + 1), as an additive mask."""
    j, i = np.arange(n_k)[None, :], np.arange(n_q)[:, None]
    m = np.where(j <= i + 1, 0.0, -np.inf).astype(F32).reshape(-1)
    return genuine(q, k, v, m, batch, n_q, n_k, d, scale, False, "add", (1, 0, 0, n_k, 1))


FAKES.append(pytest.param("flash_attention_fwd", _causal_shifted, _CAUSAL, id="fwd-causal-off-by-one"))


@pytest.mark.parametrize("name, fake, args", FAKES)
def test_contract_catches_wrong_kernel(monkeypatch, name, fake, args):
    info = TABLE[name]
    assert run_case(info, args, "cpu")[0].ok
    monkeypatch.setattr(cpu_backend, name, fake)
    verdict = run_case(info, args, "cpu")[0]
    assert not verdict.ok, f"the contract of {name} accepted a wrong kernel (ratio {verdict.ratio})"


def test_contract_statements_exist():
    for n in ("flash_attention_fwd", "flash_attention_bwd_q", "flash_attention_bwd_k", "flash_attention_bwd_v",
              "flash_attention_bwd_kv", "flash_attention_bwd"):
        assert contract.CONTRACTS[n].statement


# -- errors ----------------------------------------------------------------------------------
def test_primitive_errors():
    b = Buffer.from_numpy(np.zeros(12, F32), "cpu")
    with pytest.raises(ShapeError, match="flash_attention_fwd.*q"):
        P.flash_attention_fwd(Buffer.from_numpy(np.zeros(5, F32), "cpu"), b, b, None, 1, 3, 3, 4, 1.0)
    with pytest.raises(ArgumentError, match="mask_mode"):
        P.flash_attention_fwd(b, b, b, None, 1, 3, 3, 4, 1.0, False, "soft")
    with pytest.raises(ArgumentError, match="mask must be None"):
        P.flash_attention_fwd(b, b, b, b, 1, 3, 3, 4, 1.0, False, "none")
    with pytest.raises(ShapeError, match="mask"):
        P.flash_attention_fwd(b, b, b, Buffer.from_numpy(np.zeros(4, F32), "cpu"), 1, 3, 3, 4, 1.0, False, "hard")
    with pytest.raises(ShapeError, match="heads"):
        P.flash_attention_fwd(b, b, b, b, 1, 3, 3, 4, 1.0, False, "hard", (2, 0, 0, 3, 1))
    with pytest.raises(ArgumentError, match="causal"):
        P.flash_attention_fwd(b, b, b, None, 1, 3, 3, 4, 1.0, 1)
    with pytest.raises(ShapeError, match="n_q"):
        P.flash_attention_fwd(b, b, b, None, 1, -3, 3, 4, 1.0)


def test_front_end_errors():
    q = tl.tensor(np.zeros((2, 3, 4), F32))
    k = tl.tensor(np.zeros((2, 5, 4), F32))
    # (dropout_p > 0 is supported: PyTorch's math path composed in nn.functional, tests/test_nn_more.py)
    with pytest.raises(ArgumentError, match="dropout_p"):
        F.scaled_dot_product_attention(q, k, k, dropout_p=1.5)
    with pytest.raises(ArgumentError, match="enable_gqa"):
        F.scaled_dot_product_attention(q, k, k, enable_gqa=True)
    with pytest.raises(ArgumentError, match="is_causal"):
        F.scaled_dot_product_attention(q, k, k, attn_mask=tl.tensor(np.ones((3, 5), bool)), is_causal=True)
    with pytest.raises(ShapeError, match="broadcast"):
        F.scaled_dot_product_attention(q, k, k, attn_mask=tl.tensor(np.ones((4, 5), bool)))
    with pytest.raises(ShapeError, match="scaled_dot_product_attention"):
        F.scaled_dot_product_attention(q, tl.tensor(np.zeros((2, 5, 3), F32)), k)
    with pytest.raises(ShapeError, match="leading"):
        F.scaled_dot_product_attention(q, tl.tensor(np.zeros((1, 5, 4), F32)), tl.tensor(np.zeros((1, 5, 4), F32)))
    with pytest.raises(ArgumentError, match="Ev"):
        F.scaled_dot_product_attention(q, k, tl.tensor(np.zeros((2, 5, 6), F32)))
    with pytest.raises(TorchLeanError):
        F.scaled_dot_product_attention(tl.tensor(np.zeros(4, F32)), k, k)
    m = tl.tensor(np.zeros((3, 5), F32), requires_grad=True)
    with pytest.raises(ArgumentError, match="attn_mask"):
        F.scaled_dot_product_attention(q, k, k, attn_mask=m)
    assert "scaled_dot_product_attention" in dir(F)
