"""The CPU layout kernels' paths (kernels/cpu/layout.py): bmm / bmm_nt / bmm_tn as the outer
product for n == 1 and as one single-threaded GEMM on 2-D views (batch 1) or 3-D (batch > 1);
broadcast_to / reduce_from_broadcast as Numba loops when the broadcast axes form one block, on
one thread or several, and NumPy otherwise. Each path is checked against the spec within the
contract, exactly where the result is exact (copies, sums of small integers), and for bitwise
repeatability."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from torchlean.kernels.cpu import layout as cpu_layout
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


# -- views: slice1d and concat1d without a copy ----------------------------------------------------
def _shares(a, b) -> bool:
    """Whether two backend arrays share memory (NumPy or CuPy)."""
    if isinstance(a, np.ndarray):
        return np.shares_memory(a, b)
    import cupy

    return cupy.shares_memory(a, b)


@pytest.mark.parametrize("shape", [(5, 8, 1), (7, 9, 1), (4, 16, 1), (3, 1, 1), (6, 3, 1), (4, 5, 16), (2, 6, 17),
                                   (3, 13, 33), (2, 2, 3), (3, 9, 5), (1, 1, 20)])
def test_sum_mid_block_adds_left_to_right_on_every_path(shape):
    """Every branch of the CPU mid-axis sum (row sums four at a time, four rows per pass, short rows)
    gives the bits of d[:, 0] + d[:, 1] + ... + d[:, B-1] in float32, NaN, inf and -0 included."""
    rng = np.random.default_rng(sum(shape))
    d = (rng.standard_normal(shape) * 10.0 ** rng.integers(-4, 5, shape)).astype(np.float32)
    flat = d.reshape(-1)
    flat[rng.random(flat.size) < 0.05] = -0.0
    flat[rng.random(flat.size) < 0.02] = np.inf
    flat[rng.random(flat.size) < 0.02] = np.nan
    want = d[:, 0].copy()
    for b in range(1, shape[1]):
        want += d[:, b]
    got = np.empty((shape[0], shape[2]), np.float32)
    with np.errstate(all="ignore"):
        cpu_layout._sum_mid_block(d, got)
    same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
    assert same.all()


def test_aligned_slices_are_views_and_uncounted(device):
    from torchlean.runtime import Buffer, allocator_stats
    from torchlean.runtime import primitives as P

    src = np.arange(40, dtype=np.float32)
    b = Buffer.from_numpy(src, device)
    live = allocator_stats(device).live_bytes
    v = P.slice1d(b, 40, 8, 12)
    assert np.array_equal(v.to_numpy(), src[8:20])
    assert _shares(v.data, b.data) and v._shared and b._shared
    assert allocator_stats(device).live_bytes == live  # the view's memory is b's
    c = P.slice1d(b, 40, 3, 5)  # not 16-byte aligned: a copy
    assert np.array_equal(c.to_numpy(), src[3:8]) and not _shares(c.data, b.data)
    assert allocator_stats(device).live_bytes == live + 20
    del c
    del v  # dropping a view frees nothing
    assert allocator_stats(device).live_bytes == live
    e = P.slice1d(b, 40, 4, 0)
    assert e.size == 0


def test_concat_of_adjacent_views_is_a_view(device):
    from torchlean.runtime import Buffer
    from torchlean.runtime import primitives as P

    src = np.arange(48, dtype=np.float32)
    b = Buffer.from_numpy(src, device)
    q, k, v = (P.slice1d(b, 48, 16 * i, 16) for i in range(3))
    qk = P.concat1d(q, k, 16, 16)
    qkv = P.concat1d(qk, v, 32, 16)
    assert np.array_equal(qkv.to_numpy(), src) and _shares(qkv.data, b.data)
    kq = P.concat1d(k, q, 16, 16)  # out of order: a copy
    assert np.array_equal(kq.to_numpy(), np.concatenate([src[16:32], src[:16]])) and not _shares(kq.data, b.data)
    other = Buffer.from_numpy(src[:16], device)
    mixed = P.concat1d(q, other, 16, 16)  # different allocations: a copy
    assert np.array_equal(mixed.to_numpy(), np.concatenate([src[:16], src[:16]]))
    assert not _shares(mixed.data, b.data)


def test_qkv_gradient_joins_without_a_copy(device, monkeypatch):
    # The attention pattern q, k, v = qkv[0], qkv[1], qkv[2]: flash_attention_bwd writes dq | dk | dv
    # side by side, so the slices' gradients join as a view (no concat1d kernel), with the same values.
    import torchlean as tl
    import torchlean.nn.functional as F
    from torchlean.runtime import primitives as P

    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 2, 4, 8, 16)).astype(np.float32)
    g = rng.standard_normal((2, 4, 8, 16)).astype(np.float32)

    def grad():
        qkv = tl.tensor(x, device=device, requires_grad=True)
        y = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], is_causal=True)
        (y * tl.tensor(g, device=device)).sum().backward()
        return qkv.grad.numpy()

    ctx = tl.tensor(x[:1], device=device)._buf._ctx
    calls = []
    real = ctx.backend.concat1d
    monkeypatch.setattr(ctx.backend, "concat1d", lambda *a: calls.append(1) or real(*a))
    packed = grad()
    assert not calls
    real_union = ctx.backend.adjacent_union
    monkeypatch.setattr(ctx.backend, "adjacent_union", lambda a, b: None)  # force the copies
    copied = grad()
    assert len(calls) == 2
    monkeypatch.setattr(ctx.backend, "adjacent_union", real_union)
    assert np.array_equal(packed, copied)


# -- check_axis_map's cache (primitives.py): odd argument types keep their own result or error --------------
def test_cached_axis_map_checks_keep_odd_types():
    from torchlean.errors import ShapeError
    from torchlean.runtime import Buffer
    from torchlean.runtime import primitives as P

    g = Buffer.from_numpy(np.arange(12, dtype=F32))
    ref = P.reduce_from_broadcast(g, (3,), (2, 3, 2), (0, 1, 0)).to_numpy().tobytes()  # fills the cache
    for odd in (([3], [2, 3, 2], [0, 1, 0]), ((np.int64(3),), (2, 3, 2), (0, np.int64(1), 0))):
        assert P.reduce_from_broadcast(g, *odd).to_numpy().tobytes() == ref
    for _ in range(2):  # errors are never cached
        with pytest.raises(ShapeError) as info:
            P.reduce_from_broadcast(g, (3,), (2, 3, 2), (0, True, 0))
        assert str(info.value) == ("reduce_from_broadcast: argument axis_map[1] must be an unsigned 32-bit "
                                   "integer, got True (bool)")
        with pytest.raises(ShapeError, match="input axis 0 .size 3. of in_dims .3. is not mapped"):
            P.reduce_from_broadcast(g, (3,), (2, 3, 2), (0, 0, 0))
