"""The CPU flash attention's tile path (kernels/cpu/attention_tiles.py): sequences beyond the lane
kernels run as (TQ, TK) tiles on Numba's threads with OpenBLAS's sgemm called from inside the
region. Here: the path is taken and splits over the threads, its bits do not depend on the thread
count nor on the backward's plan (fused or two passes), it meets the contracts with masks, causal,
NaN / infinity and sizes that are not multiples of the tiles, reads a packed qkv in place with the
bits of the unpacked call, and the NumPy fallback still serves where no sgemm is found."""

from __future__ import annotations

import numba
import numpy as np
import pytest

from torchlean.kernels.cpu import attention as cpu_att
from torchlean.kernels.cpu import attention_tiles as tiles
from torchlean.kernels.cpu import parallel
from torchlean.testing.primitive_table import TABLE, run_case
from torchlean.testing.table_attention import bwd_args, fwd_args, mask_values

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
F32 = np.float32
needs_sgemm = pytest.mark.skipif(not tiles.available(1), reason="no OpenBLAS sgemm callable from Numba here")


def _case(seed, batch, n_q, n_k, d, mode="none", causal=False, specials=False):
    """Tile-path arguments; specials: NaN / +inf / -inf in a few q and k rows of entry 1 and (add)
    a mask row of -inf everywhere."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((batch, n_q, d)).astype(F32)
    k = rng.standard_normal((batch, n_k, d)).astype(F32)
    v = rng.standard_normal((batch, n_k, d)).astype(F32)
    mask = mask_values(rng, batch * n_q * n_k, mode)
    if specials:
        q[1, 70, 3], q[1, n_q - 1, 0] = np.nan, -np.inf
        k[1, 5, 1], k[1, n_k - 2, 2] = np.inf, np.nan
        if mode != "none":
            m = mask.reshape(batch, n_q, n_k)
            m[0, 3, :] = -np.inf if mode == "add" else 0.0  # a fully blocked row
            m[1, 100, :] = -np.inf if mode == "add" else 0.0
    return fwd_args(q.reshape(-1), k.reshape(-1), v.reshape(-1), None if mask is None else mask, batch, n_q, n_k, d,
                    1.0 / np.sqrt(d), causal, mode, None)


# sizes not multiples of TQ = 64 / TK = 256, n_q != n_k, several key tiles, each mask mode and causal
CASES = [
    _case(1, 3, 130, 300, 24, "none", False),
    _case(2, 2, 300, 300, 64, "none", True),
    _case(3, 3, 257, 130, 32, "hard", True),
    _case(4, 2, 190, 520, 16, "add", False),
    _case(5, 2, 150, 150, 40, "fill", True),
    _case(6, 2, 200, 280, 16, "add", True, specials=True),
    _case(7, 2, 160, 270, 8, "hard", False, specials=True),
    _case(8, 2, 140, 140, 8, "none", False, specials=True),
]


def _bits(a):
    a = np.asarray(a)
    return a.view(np.uint32)


def _same(a, b):
    """Bitwise, NaN payloads aside."""
    a, b = np.asarray(a), np.asarray(b)
    return np.array_equal(np.isnan(a), np.isnan(b)) and np.array_equal(_bits(np.where(np.isnan(a), 0, a)),
                                                                       _bits(np.where(np.isnan(b), 0, b)))


def _all_outputs(fargs):
    out, lse = cpu_att.flash_attention_fwd(*fargs)
    bargs = bwd_args(fargs, rng=np.random.default_rng(3))
    return [out, lse, *cpu_att.flash_attention_bwd(*bargs), cpu_att.flash_attention_bwd_q(*bargs),
            *cpu_att.flash_attention_bwd_kv(*bargs)]


@needs_sgemm
def test_tile_path_is_taken_and_split_over_the_threads(monkeypatch):
    fargs = CASES[1]
    assert not cpu_att._small(*fargs[4:8])
    seen = []
    for name in ("_fwd", "_bwd"):
        real = getattr(tiles, name)
        monkeypatch.setattr(tiles, name, lambda *a, _real=real, _name=name: (seen.append((_name, a[-1])), _real(*a)))
    threads = numba.get_num_threads()
    try:
        numba.set_num_threads(2)
        _all_outputs(fargs)
    finally:
        numba.set_num_threads(threads)
    assert {n for n, _ in seen} == {"_fwd", "_bwd"}
    assert all(parts == 2 for _, parts in seen), seen  # every region ran in two parts


@needs_sgemm
@pytest.mark.parametrize("i", range(len(CASES)))
def test_bits_do_not_depend_on_the_thread_count(i):
    fargs = CASES[i]
    threads = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = _all_outputs(fargs)
        numba.set_num_threads(2)
        two = _all_outputs(fargs)
    finally:
        numba.set_num_threads(threads)
    for a, b in zip(one, two):
        assert _same(a, b)


@needs_sgemm
def test_fused_backward_gives_the_bits_of_the_two_passes(monkeypatch):
    for fargs in CASES:
        bargs = bwd_args(fargs, rng=np.random.default_rng(4))
        fused = cpu_att.flash_attention_bwd(*bargs)
        monkeypatch.setattr(tiles, "FUSED_SLACK", 0.0)  # never fused: dq and (dk, dv) passes
        two = cpu_att.flash_attention_bwd(*bargs)
        monkeypatch.undo()
        for a, b in zip(fused, two):
            assert _same(a, b)


@needs_sgemm
@pytest.mark.parametrize("i", range(len(CASES)))
def test_meets_the_contracts(i):
    fargs = CASES[i]
    verdict, (o, l_), _ = run_case(TABLE["flash_attention_fwd"], fargs, "cpu")
    assert verdict.ok, verdict.detail
    bargs = bwd_args(fargs, rng=np.random.default_rng(5))
    for name in ("flash_attention_bwd", "flash_attention_bwd_q", "flash_attention_bwd_kv"):
        if fargs[0][0] != fargs[0][0] or not np.all(np.isfinite(bargs[0])) or not np.all(np.isfinite(bargs[1])):
            break  # (no contract for NaN in the backward: see table_attention's BWD_EDGES)
        verdict, _, _ = run_case(TABLE[name], bargs, "cpu")
        assert verdict.ok, (name, verdict.detail)


@needs_sgemm
def test_nan_inf_rows_and_blocked_rows():
    """On the tile path: a fully blocked row gives 0 and lse -inf, a NaN in q makes its row NaN,
    the specials of entry 1 leave entry 0 bit for bit, and the causal first row copies v_0."""
    fargs = CASES[5]  # add, causal, specials in entry 1, blocked rows (0, 3) and (1, 100)
    b, n_q, n_k, d = fargs[4:8]
    o, l_ = cpu_att.flash_attention_fwd(*fargs)
    o, l_ = o.reshape(b, n_q, d), l_.reshape(b, n_q)
    assert np.all(o[0, 3] == 0) and l_[0, 3] == -np.inf and np.all(o[1, 100] == 0) and l_[1, 100] == -np.inf
    assert np.all(np.isnan(o[1, 70])) and np.isnan(l_[1, 70])
    clean = list(fargs)
    for i in (0, 1):  # entry 1's q and k made finite
        a = clean[i].reshape(b, -1, d).copy()
        a[1] = np.nan_to_num(a[1], nan=0.5, posinf=0.5, neginf=0.5)
        clean[i] = a.reshape(-1)
    oc, lc = cpu_att.flash_attention_fwd(*clean)
    assert _same(o[0], oc.reshape(b, n_q, d)[0]) and _same(l_[0], lc.reshape(b, n_q)[0])
    assert np.all(np.isfinite(oc)) and not np.all(np.isfinite(o[1]))
    fargs_c = CASES[1]  # causal, no mask: row 0 sees key 0 only
    oh, _ = cpu_att.flash_attention_fwd(*fargs_c)
    b, n_q, n_k, d = fargs_c[4:8]
    np.testing.assert_array_equal(oh.reshape(b, n_q, d)[:, 0], fargs_c[2].reshape(b, n_k, d)[:, 0])


@needs_sgemm
@pytest.mark.parametrize("heads, n, d, mode, causal", [(3, 130, 32, "none", True), (2, 300, 24, "hard", False),
                                                       (4, 100, 16, "add", True)])
def test_packed_reads_qkv_in_place_with_the_bits_of_the_unpacked_call(heads, n, d, mode, causal):
    rng = np.random.default_rng(11)
    batch = 2
    qkv = rng.standard_normal((batch, n, 3, heads, d)).astype(F32)
    mask = mask_values(rng, batch * heads * n * n, mode)
    layout = None if mode == "none" else (1, n * n, 0, n, 1)
    sc = float(F32(0.2))
    out, lse = cpu_att.flash_attention_packed_fwd(qkv.reshape(-1), mask, batch, heads, n, d, sc, causal, mode, layout)
    q, k, v = (np.ascontiguousarray(qkv[:, :, i].transpose(0, 2, 1, 3)).reshape(-1) for i in range(3))
    out2, lse2 = cpu_att.flash_attention_fwd(q, k, v, mask, batch * heads, n, n, d, sc, causal, mode, layout)
    assert _same(out, out2.reshape(batch, heads, n, d).transpose(0, 2, 1, 3).reshape(-1)) and _same(lse, lse2)
    g = rng.standard_normal(batch * n * heads * d).astype(F32)
    dqkv = cpu_att.flash_attention_packed_bwd(qkv.reshape(-1), mask, out, lse, g, batch, heads, n, d, sc, causal,
                                              mode, layout)
    g2 = np.ascontiguousarray(g.reshape(batch, n, heads, d).transpose(0, 2, 1, 3)).reshape(-1)
    grads = cpu_att.flash_attention_bwd(q, k, v, mask, out2, lse2, g2, batch * heads, n, n, d, sc, causal, mode,
                                        layout)
    d5 = dqkv.reshape(batch, n, 3, heads, d)
    for i, gr in enumerate(grads):
        assert _same(d5[:, :, i], gr.reshape(batch, heads, n, d).transpose(0, 2, 1, 3))


def test_numpy_fallback_without_sgemm_meets_the_contracts(monkeypatch):
    monkeypatch.setattr(parallel, "sgemm_address", lambda: None)
    assert not tiles.available(16)
    called = []
    monkeypatch.setattr(tiles, "fwd", lambda *a: called.append(1))
    monkeypatch.setattr(tiles, "bwd", lambda *a: called.append(1))
    for fargs in (CASES[2], CASES[3]):
        verdict, _, _ = run_case(TABLE["flash_attention_fwd"], fargs, "cpu")
        assert verdict.ok, verdict.detail
        verdict, _, _ = run_case(TABLE["flash_attention_bwd"], bwd_args(fargs, rng=np.random.default_rng(6)), "cpu")
        assert verdict.ok, verdict.detail
    assert not called


def test_benchmark_cli_prints_one_row_per_case(capsys):
    from benchmarks import attention_cpu

    attention_cpu.main(["--sizes", "1,2,160,16", "--threads", "1", "--reps", "1"])
    rows = capsys.readouterr().out.strip().splitlines()
    assert "ours/torch" in rows[0] and len(rows) == 3, rows
    for row, causal in zip(rows[1:], ("False", "True")):
        cells = row.split()
        assert cells[:3] == ["1,2,160,16", causal, "1"], row
        assert all(float(c) > 0 for c in cells[3:]), row
    with pytest.raises(SystemExit):
        attention_cpu.main(["--sizes", "1,2,160"])
