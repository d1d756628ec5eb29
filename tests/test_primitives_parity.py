"""Every primitive against its float64 spec, within its contract, on every backend.

Generic tests iterate over ``TABLE`` (PyTorch OpInfo style; one test id per primitive) and are
written once for all backends (CuPy style: the ``device`` fixture). On CUDA each case is also run
on the CPU backend: both must meet the contract, and exact primitives must agree bit for bit.
Hand-written known answers pin the conventions of DESIGN.md, and fake kernels prove that the
contracts can fail.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from torchlean import contract, spec
from torchlean.kernels import cpu as cpu_backend
from torchlean.check import SAMPLES as CHECK_SAMPLES
from torchlean.check import random_cases
from torchlean.runtime import Buffer, canonical_device
from torchlean.runtime import primitives as P
from torchlean.testing.primitive_table import (IN_PLACE, TABLE, broadcast_dims, run_case, run_runtime, runtime_args, spec_args,
                                              values)

# IEEE specials (inf - inf, 0 * inf, overflow) are the point of many inputs here.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

F32 = np.float32
NAMES = list(P.__all__)
U32_MAX = 2**32 - 1


def f32(*v) -> np.ndarray:
    return np.array(v, dtype=F32)


def up(a, device) -> Buffer:
    return Buffer.from_numpy(np.asarray(a, dtype=F32), device)


def outputs(out) -> tuple:
    return out if isinstance(out, tuple) else (out,)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Bitwise equal float32 arrays, except that any NaN matches any NaN (payloads may differ)."""
    a, b = np.asarray(a, F32).reshape(-1), np.asarray(b, F32).reshape(-1)
    if a.shape != b.shape:
        return False
    an, bn = np.isnan(a), np.isnan(b)
    return bool(np.array_equal(an, bn) and np.array_equal(a.view(np.uint32)[~an], b.view(np.uint32)[~bn]))


def describe(args: list) -> str:
    parts = []
    for a in args:
        if isinstance(a, np.ndarray):
            head = np.array2string(a[:8], precision=4, separator=",")
            parts.append(f"{a.dtype}[{a.size}]{head}{'...' if a.size > 8 else ''}")
        else:
            parts.append(repr(a))
    return "(" + ", ".join(parts) + ")"


def check_case(info, args: list, device: str):
    """Run one case on ``device``; assert the contract; on a non-CPU device also check CPU parity."""
    verdict, out, ref = run_case(info, args, device)
    assert verdict.ok, (f"{info.name} on {device} breaks its contract ({info.contract.statement}): "
                        f"{verdict.detail}; args {describe(args)}")
    if device != "cpu":
        cpu_verdict, cpu_out, _ = run_case(info, args, "cpu")
        assert cpu_verdict.ok, f"{info.name} on cpu (parity run): {cpu_verdict.detail}; args {describe(args)}"
        if info.contract.exact:
            for i, (o, c) in enumerate(zip(outputs(out), outputs(cpu_out))):
                assert same_bits(o, c), f"{info.name}: output {i} on {device} differs in bits from cpu; args {describe(args)}"
    return out, ref


def table_entry(name: str):
    assert name in TABLE, f"primitive {name!r} has no entry in torchlean.testing.primitive_table.TABLE"
    return TABLE[name]


# -- (d) coverage: every primitive has a table entry, a spec, a contract and a CPU kernel ---------
@pytest.mark.parametrize("name", NAMES)
def test_primitive_is_covered(name):
    assert name in TABLE, f"{name}: no TABLE entry"
    assert TABLE[name].name == name
    assert callable(getattr(spec, name, None)), f"{name}: no spec function"
    assert name in contract.CONTRACTS and contract.CONTRACTS[name].name == name, f"{name}: no contract"
    assert callable(getattr(cpu_backend, name, None)), f"{name}: no CPU kernel"
    assert callable(getattr(P, name)), f"{name}: not a callable primitive"
    assert TABLE[name].edge_cases, f"{name}: no edge cases in the primitive table"


def test_table_and_contracts_name_only_primitives():
    assert set(TABLE) == set(NAMES), f"TABLE strays: {set(TABLE) ^ set(NAMES)}"
    assert set(contract.CONTRACTS) == set(NAMES), f"CONTRACTS strays: {set(contract.CONTRACTS) ^ set(NAMES)}"


# -- (a) random inputs --------------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
@given(data=st.data())
def test_random_inputs_within_contract(name, device, data):
    info = table_entry(name)
    kind = data.draw(st.sampled_from(info.kinds), label="kind")
    dims = data.draw(st.tuples(*[st.integers(0, info.max_dim)] * info.ndims), label="dims")
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    check_case(info, info.sample(np.random.default_rng(seed), dims, kind), device)


# -- (b) edge cases -------------------------------------------------------------------------------
EDGE_CASES = [
    pytest.param(name, i, id=f"{name}-table{i}")
    for name in NAMES if name in TABLE for i in range(len(TABLE[name].edge_cases))
]


@pytest.mark.parametrize("name, i", EDGE_CASES)
def test_edge_case(name, i, device):
    info = table_entry(name)
    args = info.edge_cases[i]
    check_case(info, [a.copy() if isinstance(a, np.ndarray) else a for a in args], device)


# -- (b') check's own draws: the random cases `torchlean check --seed S` runs, for the seeds CI runs it
# with (.ci/run), every kind the table gives (wide values, NaN / inf, -inf additive masks, ...), so
# a case that check fails at one of these seeds fails the suite too, on every backend.
CHECK_SEEDS = (0, 1, 2)


@pytest.mark.parametrize("seed", CHECK_SEEDS)
@pytest.mark.parametrize("name", NAMES)
def test_check_random_cases_within_contract(name, seed, device):
    info = table_entry(name)
    for i, (kind, args) in enumerate(random_cases(name, CHECK_SAMPLES, seed)):
        try:
            check_case(info, args, device)
        except AssertionError as exc:
            raise AssertionError(f"torchlean check --seed {seed}, random case {i} ({kind}): {exc}") from None


# -- (c) integer inputs: sums are exact in any order, so the result must equal the spec --------
EXACT_ON_INT = [name for name in NAMES if name in TABLE and TABLE[name].exact_on_int]


def test_exact_on_int_list_is_not_empty():
    assert {"reduce_sum", "bmm", "scatter_add"} <= set(EXACT_ON_INT)


@pytest.mark.parametrize("name", EXACT_ON_INT)
@given(data=st.data())
def test_integer_inputs_equal_spec_exactly(name, device, data):
    info = TABLE[name]
    dims = data.draw(st.tuples(*[st.integers(0, info.max_dim)] * info.ndims), label="dims")
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    args = info.sample(np.random.default_rng(seed), dims, "int")
    out = run_runtime(info, args, device)
    ref = info.spec(*spec_args(args))
    assert np.array_equal(np.asarray(out, np.float64), ref), f"{name} on {device}: {out} != {ref}; args {describe(args)}"


def test_integer_sum_of_many_terms_is_exact(device):
    x = np.random.default_rng(7).integers(-8, 9, 100_003)
    assert P.reduce_sum(up(x, device)).to_numpy()[0] == float(sum(int(v) for v in x))
    m = x[:100_000].reshape(400, 250)
    assert np.array_equal(P.reduce_sum_axis0(up(m, device), 400, 250).to_numpy(), m.sum(axis=0))
    assert np.array_equal(P.reduce_sum_axis1(up(m, device), 400, 250).to_numpy(), m.sum(axis=1))
    a = x[:2 * 30 * 300].reshape(2, 30, 300)
    b = x[-2 * 300 * 20:].reshape(2, 300, 20)
    got = P.bmm(up(a, device), up(b, device), 2, 30, 300, 20).to_numpy().reshape(2, 30, 20)
    assert np.array_equal(got, np.einsum("tij,tjk->tik", a, b))


# -- generic: inputs are values, outputs are new buffers on the same device -------------------
@pytest.mark.parametrize("name", NAMES)
def test_inputs_unchanged_and_output_on_same_device(name, device):
    info = table_entry(name)
    args = info.sample(np.random.default_rng(1234), (3,) * info.ndims, "normal")
    rargs = runtime_args(args, device)
    written = IN_PLACE.get(name, ())
    as_list = [a if isinstance(a, list) else [a] for a in rargs]
    bufs = [b for i, a in enumerate(as_list) if i not in written for b in a if isinstance(b, Buffer)]
    before = [b.to_numpy() for b in bufs]
    if name in ("rand_uniform", "bernoulli_mask", "rand_normal"):
        rargs.append(device)
    outs = outputs(info.runtime(*rargs))
    after = [b.to_numpy() for b in bufs]
    for b, a in zip(before, after):
        assert same_bits(b, a), f"{name} modified an input buffer"
    if written:  # the outputs are exactly the written inputs, in order
        assert list(outs) == [b for i in written for b in as_list[i]] and all(
            x is y for x, y in zip(outs, (b for i in written for b in as_list[i]))), name
        return
    for o in outs:
        assert isinstance(o, Buffer) and o.device == canonical_device(device)
        assert all(o is not a for a in bufs), f"{name} returned one of its inputs instead of a new buffer"


# -- hand-written known answers: the conventions of DESIGN.md ----------------------------------
def test_reduce_max_axis0_ties_nan_and_empty(device):
    nan = np.nan
    b = up([[1, nan, nan, -5],
            [3, 2, nan, -5],
            [3, -1, nan, -7]], device)
    got = P.reduce_max_axis0(b, 3, 4).to_numpy()
    np.testing.assert_array_equal(got, f32(3, 2, nan, -5))  # NaN loses to a number; all-NaN stays NaN
    got1 = P.reduce_max_axis1(b, 3, 4).to_numpy()
    np.testing.assert_array_equal(got1, f32(1, 3, 3))
    assert np.array_equal(P.reduce_max_axis0(up([], device), 0, 3).to_numpy(), f32(0, 0, 0))  # empty axis: 0
    assert np.array_equal(P.reduce_max_axis1(up([], device), 2, 0).to_numpy(), f32(0, 0))
    assert P.reduce_max_axis0(up([-7.0, -3.0], device), 2, 1).to_numpy()[0] == -3.0  # not a 0 initial value


def test_elementwise_max_min_nan_lose(device):
    a, b = up([1, np.nan, np.nan, -2], device), up([np.nan, 2, np.nan, -3], device)
    np.testing.assert_array_equal(P.max(a, b).to_numpy(), f32(1, 2, np.nan, -2))
    np.testing.assert_array_equal(P.min(a, b).to_numpy(), f32(1, 2, np.nan, -3))


def test_gather_out_of_bounds_reads_zero(device):
    vec = up([10, 20, 30], device)
    got = P.gather_vec(vec, 3, np.array([2, 3, 0, U32_MAX, 1]), 5).to_numpy()
    np.testing.assert_array_equal(got, f32(30, 0, 10, 0, 20))
    mat = up([[1, 2], [3, 4]], device)
    got = P.gather_rows(mat, 2, 2, [1, 2, U32_MAX, 0], 4).to_numpy()
    np.testing.assert_array_equal(got, f32(3, 4, 0, 0, 0, 0, 1, 2))


def test_scatter_add_out_of_bounds_ignored_and_repeats_accumulate(device):
    x = up([1, 1, 1], device)
    got = P.scatter_add(x, up([10, 20, 30, 40, 50], device), 3, [0, 3, 0, U32_MAX, 2], 5).to_numpy()
    np.testing.assert_array_equal(got, f32(41, 1, 51))
    np.testing.assert_array_equal(x.to_numpy(), f32(1, 1, 1))  # a copy, never in place
    mat = up(np.zeros((2, 2)), device)
    got = P.scatter_add_rows(mat, up([[1, 2], [3, 4], [5, 6], [7, 8]], device), 2, 2, [1, 2, 1, U32_MAX], 4).to_numpy()
    np.testing.assert_array_equal(got, f32(0, 0, 6, 8))
    m = up([[1, 2], [3, 4]], device)
    for i in (2, U32_MAX):
        np.testing.assert_array_equal(P.scatter_add_row(m, up([5, 5], device), 2, 2, i).to_numpy(), f32(1, 2, 3, 4))
    np.testing.assert_array_equal(P.scatter_add_row(m, up([5, 6], device), 2, 2, 1).to_numpy(), f32(1, 2, 8, 10))


def test_max_min_bwd_tie_splits_half(device):
    a, b, dy = up([2, 3, 1, np.nan], device), up([2, 1, 5, 4], device), up([4, 4, 4, 4], device)
    da, db = (o.to_numpy() for o in P.max_bwd(a, b, dy))
    np.testing.assert_array_equal(da, f32(2, 4, 0, 0))
    np.testing.assert_array_equal(db, f32(2, 0, 4, 4))  # a NaN loses: the number gets it all
    da, db = (o.to_numpy() for o in P.min_bwd(a, b, dy))
    np.testing.assert_array_equal(da, f32(2, 0, 4, 0))
    np.testing.assert_array_equal(db, f32(2, 4, 0, 4))


def test_sqrt_bwd_is_zero_at_and_below_zero(device):
    got = P.sqrt_bwd(up([0.0, -0.0, -1.0, 4.0, np.nan], device), up([1, 1, 1, 1, 1], device)).to_numpy()
    np.testing.assert_array_equal(got, f32(0, 0, 0, 0.25, 0))


def test_clamp_bwd_is_zero_at_the_bounds(device):
    got = P.clamp_bwd(up([-1, 1, 0, -2, 2, 0.999], device), up([3] * 6, device), -1.0, 1.0).to_numpy()
    np.testing.assert_array_equal(got, f32(0, 0, 3, 0, 0, 3))


def test_relu_bwd_and_abs_bwd_at_zero(device):
    x, dy = up([0.0, -0.0, 1.0, -1.0], device), up([5, 5, 5, 5], device)
    np.testing.assert_array_equal(P.relu_bwd(x, dy).to_numpy(), f32(0, 0, 5, 0))
    np.testing.assert_array_equal(P.abs_bwd(x, dy).to_numpy(), f32(0, 0, 5, -5))


def test_empty_reductions(device):
    empty = up([], device)
    assert np.isnan(P.reduce_mean(empty).to_numpy()).tolist() == [True]
    np.testing.assert_array_equal(P.reduce_sum(empty).to_numpy(), f32(0))
    assert P.reduce_sum_axis0(empty, 0, 2).to_numpy().tolist() == [0.0, 0.0]
    assert P.reduce_sum_axis(empty, (2, 0, 3), 1).to_numpy().tolist() == [0.0] * 6


def test_softmax_rows_sum_to_one(device):
    rows, cols = 16, 50
    x = np.random.default_rng(3).standard_normal(rows * cols).astype(F32) * 10
    y = P.softmax_rows(up(x, device), rows, cols).to_numpy().reshape(rows, cols).astype(np.float64)
    assert (y >= 0).all() and (y <= 1).all()
    np.testing.assert_allclose(y.sum(axis=1), 1.0, rtol=0, atol=1e-5)
    assert y.argmax(axis=1).tolist() == x.reshape(rows, cols).argmax(axis=1).tolist()
    np.testing.assert_array_equal(P.softmax_rows(up([7, 7, 7, 7], device), 1, 4).to_numpy(), f32(0.25, 0.25, 0.25, 0.25))


def test_log_softmax_with_huge_value_is_finite(device):
    got = P.log_softmax_rows(up([1000.0, 0.0, 1.0, -1000.0], device), 1, 4).to_numpy()
    assert np.isfinite(got).all(), got
    np.testing.assert_allclose(got, [0.0, -1000.0, -999.0, -2000.0], rtol=1e-6)
    # and softmax of the same row neither overflows nor divides inf by inf
    np.testing.assert_array_equal(P.softmax_rows(up([1000.0, 0.0], device), 1, 2).to_numpy(), f32(1, 0))


def test_swap_adjacent_at_depth(device):
    x = np.arange(24, dtype=F32)
    for depth in (2, 3, 17, U32_MAX):  # depth + 1 is not an axis of a rank-3 buffer: identity
        np.testing.assert_array_equal(P.swap_adjacent_at_depth(up(x, device), (2, 3, 4), depth).to_numpy(), x)
    np.testing.assert_array_equal(P.swap_adjacent_at_depth(up(x[:6], device), (2, 3), 0).to_numpy(),
                                  f32(0, 3, 1, 4, 2, 5))
    got = P.swap_adjacent_at_depth(up(x, device), (2, 3, 4), 1).to_numpy()
    # out[i, k, j] = x[i, j, k] with x[i, j, k] = 12 i + 4 j + k
    assert got.tolist() == [12 * i + 4 * j + k for i in range(2) for k in range(4) for j in range(3)]


def test_broadcast_to_known_answers(device):
    x = up([1, 2, 3], device)
    np.testing.assert_array_equal(P.broadcast_to(x, (3,), (2, 3), (0, 1)).to_numpy(), f32(1, 2, 3, 1, 2, 3))
    np.testing.assert_array_equal(P.broadcast_to(x, (3,), (3, 2), (1, 0)).to_numpy(), f32(1, 1, 2, 2, 3, 3))
    # a permuted mapping: out[j0, j1] = x[j1, j0]
    x6 = up(np.arange(6), device)
    np.testing.assert_array_equal(P.broadcast_to(x6, (2, 3), (3, 2), (2, 1)).to_numpy(), f32(0, 3, 1, 4, 2, 5))
    np.testing.assert_array_equal(P.reduce_from_broadcast(x6, (3,), (2, 3), (0, 1)).to_numpy(), f32(3, 5, 7))
    np.testing.assert_array_equal(P.reduce_from_broadcast(x6, (2, 1), (2, 3), (1, 2)).to_numpy(), f32(3, 12))


def test_broadcast_to_accepts_high_rank_axis_map(device):
    # Rank 13 is a valid (if unusual) rank; axis_map entries are axis numbers, not sizes, so their
    # product (13! > 2**32) must not be limited like the product of dims.
    ones13 = (1,) * 13
    amap = tuple(range(1, 14))
    got = P.broadcast_to(up([4.0], device), ones13, ones13, amap).to_numpy()
    np.testing.assert_array_equal(got, f32(4.0))
    got = P.reduce_from_broadcast(up([4.0], device), ones13, ones13, amap).to_numpy()
    np.testing.assert_array_equal(got, f32(4.0))


@given(seed=st.integers(0, 2**32 - 1), d0=st.integers(0, 30), d1=st.integers(0, 30))
def test_broadcast_and_reduce_are_adjoint(device, seed, d0, d1):
    """<broadcast_to(x), d> == <x, reduce_from_broadcast(d)>, exactly on small integers."""
    rng = np.random.default_rng(seed)
    ind, outd, amap = broadcast_dims(rng, (d0, d1))
    x = values(rng, math.prod(ind), "int")
    d = values(rng, math.prod(outd), "int")
    bx = P.broadcast_to(up(x, device), ind, outd, amap).to_numpy().astype(np.float64)
    rd = P.reduce_from_broadcast(up(d, device), ind, outd, amap).to_numpy().astype(np.float64)
    assert bx.size == d.size and rd.size == x.size
    assert float(bx @ d.astype(np.float64)) == float(x.astype(np.float64) @ rd), (ind, outd, amap)


# -- the contracts can fail: fake kernels must be caught ---------------------------------------
def _ulps_up(a, k):
    for _ in range(k):
        a = np.nextafter(a, F32(np.inf))
    return a


def _scatter_add_dropping_repeats(x, values, n, indices, k):
    out = x.copy()
    ok = indices < n
    out[indices[ok]] += values[ok]  # the classic fancy-index bug: repeated indices add only once
    return out


def _softmax_unnormalized(x, rows, cols):
    x2 = x.reshape(rows, cols)
    return np.exp(x2 - x2.max(axis=1, keepdims=True)).reshape(-1)


def _bmm_half_precision(a, b, batch, m, n, p):
    a16, b16 = a.astype(np.float16).astype(F32), b.astype(np.float16).astype(F32)
    return np.matmul(a16.reshape(batch, m, n), b16.reshape(batch, n, p)).reshape(-1)


def _rand_uniform_off_by_one_key(n, key, genuine=cpu_backend.rand_uniform):
    return genuine(n, (key + 1) % 2**64)


_RNG = np.random.default_rng(11)
_X64 = _RNG.standard_normal(64).astype(F32) + 3
_REPEATS = np.array([0, 1, 1, 2, 2, 2, 5], np.int64)
FAKE_KERNELS = [
    pytest.param("add", lambda a, b: _ulps_up(np.add(a, b), 4), [_X64, _X64[::-1].copy()], id="add-4ulp"),
    pytest.param("reduce_sum", lambda x: np.array([np.add.reduce(x[1:])], F32), [_X64], id="reduce_sum-drops-one"),
    pytest.param("softmax_rows", _softmax_unnormalized, [_X64, 8, 8], id="softmax-unnormalized"),
    pytest.param("scatter_add", _scatter_add_dropping_repeats,
                 [np.zeros(6, F32), f32(1, 2, 3, 4, 5, 6, 7), 6, _REPEATS, 7], id="scatter_add-drops-repeats"),
    pytest.param("transpose2d", lambda b, rows, cols: b.copy(), [_X64[:6].copy(), 2, 3], id="transpose-no-op"),
    pytest.param("sqrt_bwd", lambda x, dy: dy / (F32(2) * np.sqrt(x)), [f32(0, 1, 4), f32(1, 1, 1)],
                 id="sqrt_bwd-inf-at-0"),
    pytest.param("bmm", _bmm_half_precision, [_X64[:24].copy(), _X64[24:48].copy(), 2, 3, 4, 3], id="bmm-fp16"),
    pytest.param("rand_uniform", _rand_uniform_off_by_one_key, [32, 99], id="rand_uniform-key-off-by-one"),
    pytest.param("reduce_max_axis0", lambda b, rows, cols: np.max(b.reshape(rows, cols), axis=0),
                 [f32(np.nan, 1, 2, 3), 2, 2], id="reduce_max-nan-propagates"),
]


def test_check_reports_wrong_and_raising_kernels_and_exits_nonzero(monkeypatch, capsys):
    """`torchlean check` (what CI runs) fails the row of a kernel outside its contract and of one
    that raises, goes on with the other rows, and exits 1."""
    from torchlean import check, cli

    monkeypatch.setattr(check, "TABLE", {n: TABLE[n] for n in ("add", "relu", "mul")})
    assert cli.main(["check", "--device", "cpu", "--samples", "8"]) == 0

    def boom(x):
        raise ValueError("kernel exploded")

    monkeypatch.setattr(cpu_backend, "add", lambda a, b: _ulps_up(np.add(a, b), 4))
    monkeypatch.setattr(cpu_backend, "relu", boom)
    capsys.readouterr()
    assert cli.main(["check", "--device", "cpu", "--samples", "8"]) == 1
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.strip()}
    assert "FAIL" in rows["add"] and "outside the bound" in rows["add"]
    assert "FAIL edge case 0 raised ValueError: kernel exploded" in rows["relu"]
    assert rows["mul"].endswith("PASS")


@pytest.mark.parametrize("name, fake, args", FAKE_KERNELS)
def test_contract_catches_wrong_kernel(monkeypatch, name, fake, args):
    info = TABLE[name]
    assert run_case(info, args, "cpu")[0].ok, "the genuine kernel must pass the very case the fake fails"
    monkeypatch.setattr(cpu_backend, name, fake)
    verdict = run_case(info, args, "cpu")[0]
    assert not verdict.ok, f"the contract of {name} accepted a wrong kernel (ratio {verdict.ratio})"


@pytest.mark.parametrize("n", [3, 67])  # NumPy's scalar and SIMD loops disagree on zeros: both lengths
def test_max_min_signed_zeros_follow_ieee_2019(n, device):
    a = np.resize(f32(-0.0, 0.0, -0.0), n)
    b = np.resize(f32(0.0, -0.0, -0.0), n)
    hi = P.max(up(a, device), up(b, device)).to_numpy()
    lo = P.min(up(a, device), up(b, device)).to_numpy()
    assert np.all(hi == 0) and np.all(lo == 0)
    assert np.signbit(hi).tolist() == np.resize([False, False, True], n).tolist()  # -0 only if both are
    assert np.signbit(lo).tolist() == np.resize([True, True, True], n).tolist()    # -0 if either is


@pytest.mark.parametrize("name, args", [
    ("reduce_sum_axis0", (8192, 384)),   # a bias gradient's shape: the chunked column kernel, float4 rows
    ("reduce_sum_axis0", (4096, 65)),    # rows not a multiple of 4 floats: scalar reads
    ("reduce_max_axis0", (2048, 130)),
    ("reduce_sum_axis", ((3, 2048, 40), 1)),
    ("reduce_sum_axis0", (512, 4096)),   # a short axis: the one-launch tile kernel
])
def test_long_column_reductions_within_contract(name, args, device):
    """Column reductions over long axes with few outputs (tl_reduce_cols_chunk on CUDA: row chunks
    added in order) on mixed magnitudes, signed zeros, infinities and NaN."""
    rng = np.random.default_rng(5)
    dims = args[0] if isinstance(args[0], tuple) else args
    n = math.prod(dims)
    x = (rng.standard_normal(n) * 10.0 ** rng.integers(-6, 7, n)).astype(np.float32)
    x[rng.integers(0, n, 16)] = np.array([np.nan, np.inf, -np.inf, -0.0] * 4, np.float32)
    verdict = run_case(TABLE[name], [x, *args], device)[0]
    assert verdict.ok, verdict.detail
