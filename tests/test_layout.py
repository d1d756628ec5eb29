"""The CPU layout kernels' paths (backends/cpu/layout.py): bmm / bmm_nt / bmm_tn as the outer
product for n == 1 and as one single-threaded GEMM on 2-D views (batch 1) or 3-D (batch > 1);
broadcast_to / reduce_from_broadcast as Numba loops when the broadcast axes form one block, on
one thread or several, and NumPy otherwise. Each path is checked against the spec within the
contract, exactly where the result is exact (copies, sums of small integers), and for bitwise
repeatability."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from torchlean.backends.cpu import layout as cpu_layout
from torchlean.testing.primitive_table import TABLE, run_case, run_runtime, values

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

F32 = np.float32
BMM_DIMS = [
    (3, 5, 1, 4),          # n == 1: outer products
    (1, 7, 1, 300),        # n == 1, batch 1
    (1, 512, 128, 64),     # batch 1: a 2-D GEMM
    (1, 3, 128, 1200),     # batch 1, wide
    (4, 128, 64, 128),     # batch 4: one 3-D matmul
    (3, 1, 9, 1),          # dot products
]


@pytest.mark.parametrize("name", ["bmm", "bmm_nt", "bmm_tn"])
@pytest.mark.parametrize("dims", BMM_DIMS, ids=lambda d: "x".join(map(str, d)))
@pytest.mark.parametrize("kind", ["normal", "int"])
def test_bmm_paths_within_contract(name, dims, kind, device):
    batch, m, n, p = dims
    rng = np.random.default_rng(zlib.crc32(repr((name, dims, kind)).encode()))
    args = [values(rng, batch * m * n, kind), values(rng, batch * n * p, kind), batch, m, n, p]
    info = TABLE[name]
    verdict, out, ref = run_case(info, args, device)
    assert verdict.ok, f"{name}{dims} {kind} on {device}: {verdict.detail}"
    if kind == "int":  # small integers: every partial sum is exact, so any order gives the spec's value
        assert np.array_equal(np.asarray(out, np.float64), np.asarray(ref, np.float64))
    again = run_runtime(info, args, device)
    assert np.array_equal(np.asarray(out).view(np.uint32), np.asarray(again).view(np.uint32))


@pytest.mark.parametrize("name", ["bmm", "bmm_nt", "bmm_tn"])
def test_bmm_outer_product_specials(name, device):
    """n == 1 is a plain product: inf * 0 is NaN, signs of zeros follow IEEE, as in a GEMM."""
    a = np.array([np.inf, -0.0, 2.0, np.nan, 0.0, -3.0], F32)
    b = np.array([0.0, -1.0, np.inf, 1e-30, -0.0], F32)
    verdict, _, _ = run_case(TABLE[name], [a, np.tile(b, 2), 2, 3, 1, 5], device)
    assert verdict.ok, f"{name} on {device}: {verdict.detail}"


# -- broadcast_to / reduce_from_broadcast: the one-block kernels and the NumPy fallback ------------
assert cpu_layout._RED_BLOCK == 256  # the first cases span several blocks
BCAST_CASES = [
    # (in_dims, out_dims, axis_map)
    ((600, 1), (600, 22), (1, 2)),                       # inner block, C == 1, several row blocks
    ((1200, 1, 8), (1200, 5, 8), (1, 2, 3)),             # middle block, 1 < C < 16
    ((300, 1, 40), (300, 3, 40), (1, 2, 3)),             # middle block, C >= 16
    ((6, 5, 1, 3), (6, 5, 4, 3), (1, 2, 3, 4)),          # middle block, one thread
    ((64, 16), (3, 2, 64, 16), (0, 0, 1, 2)),            # leading block (A == 1)
    ((5, 1), (5, 3), (1, 2)),                            # tiny, one thread
    ((7,), (2, 1, 3, 7), (0, 0, 0, 1)),                  # size-1 axes inside the block
    ((64, 1), (32, 64, 36), (0, 1, 2)),                  # two blocks (R K R): NumPy fallback
    ((3, 4), (4, 5, 3), (2, 0, 1)),                      # a permutation: NumPy fallback
    ((2, 3), (2, 3), (1, 2)),                            # nothing broadcast
    ((0, 1), (0, 4), (1, 2)),                            # empty
    ((), (3, 2, 0), (0, 0, 0)),                          # no terms: the sum is 0
    ((1, 4), (0, 4), (1, 2)),                            # no terms along a summed axis
]


@pytest.mark.parametrize("case", BCAST_CASES, ids=lambda c: f"{c[0]}->{c[1]}")
@pytest.mark.parametrize("kind", ["normal", "int", "special_sum"])
def test_broadcast_and_reduce_paths(case, kind, device):
    ind, outd, amap = case
    rng = np.random.default_rng(zlib.crc32(repr((case, kind)).encode()))
    for name, n in (("broadcast_to", int(np.prod(ind))), ("reduce_from_broadcast", int(np.prod(outd)))):
        args = [values(rng, n, kind), ind, outd, amap]
        verdict, out, ref = run_case(TABLE[name], args, device)
        assert verdict.ok, f"{name}{case} {kind} on {device}: {verdict.detail}"
        if kind == "int" or name == "broadcast_to":  # copies, or sums of small integers: exact
            assert np.array_equal(np.asarray(out, np.float64), np.asarray(ref, np.float64), equal_nan=True)
        again = run_runtime(TABLE[name], args, device)
        assert np.array_equal(np.asarray(out).view(np.uint32), np.asarray(again).view(np.uint32))


def test_reduce_from_broadcast_single_term_keeps_negative_zero():
    """On the CPU a sum of one term is that term (-0 stays -0), as the spec and add.reduce give. The
    CUDA kernel starts its sums at +0 (+0 + -0 = +0): the same value, so within the contract, and
    not checked bitwise here."""
    device = "cpu"
    d = np.array([-0.0, 1.0, -0.0, -0.0], F32)
    out = run_runtime(TABLE["reduce_from_broadcast"], [d, (4, 1), (4, 1), (1, 2)], device)
    assert np.array_equal(np.signbit(np.asarray(out)), np.signbit(d))
    out = run_runtime(TABLE["reduce_from_broadcast"], [d, (2, 1), (2, 2), (1, 2)], device)
    assert np.asarray(out).tolist() == [1.0, 0.0] and np.signbit(np.asarray(out))[1]
