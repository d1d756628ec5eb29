"""Plans (one checked, hashable description of a primitive call) and the one memo mechanism
(``torchlean.kernels.caches.memo``): validation messages, hashing, statistics, bounds, clearing."""

from __future__ import annotations

import numpy as np
import pytest

import torchlean as tl
import torchlean.nn.functional as TF
from torchlean.errors import ArgumentError, ShapeError
from torchlean.kernels import caches
from torchlean.kernels.plans import ConvPlan, ConvTransposePlan, PoolPlan, conv_plan_of
from torchlean.runtime import Buffer
from torchlean.runtime import primitives as P
from torchlean.runtime.primitives_conv import conv_plan, conv_transpose_plan
from torchlean.runtime.primitives_pool import pool_plan

F32 = np.float32


# -- validation: built once, with the primitives' own messages ----------------------------------------
@pytest.mark.parametrize("args, message", [
    ((1, 2, 3, (4,), (5,), (1,), (0,)),
     "conv: the output would be empty along spatial axis 0: (spatial + 2 padding - kernel) // stride + 1 "
     "= (4 + 2*0 - 5) // 1 + 1 = 0 (spatial [4], kernel [5], stride [1], padding [0])"),
    ((1, 2, 3, (4, 4), (3,), (1, 1), (0, 0)),
     "conv: argument kernel must have one entry per spatial axis (2), got 1: [3]"),
    ((1, 2, 3, (4,), (3,), (0,), (0,)), "conv: stride[0] must be >= 1, got 0 (stride [0])"),
    ((1, 2, 3, (2,) * 9, (1,) * 9, (1,) * 9, (0,) * 9), "conv: spatial must have 1 to 8 axes, got 9"),
])
def test_conv_plan_refuses_with_the_primitive_message(args, message):
    with pytest.raises(ShapeError) as plan_err:
        conv_plan("conv", *args)
    assert str(plan_err.value).startswith(message)
    x = Buffer.from_numpy(np.zeros(8, F32), "cpu")
    with pytest.raises(ShapeError) as prim_err:  # the primitive called with raw dims says the same
        P.conv(x, x, None, *args)
    assert str(prim_err.value) == str(plan_err.value)


def test_conv_plan_refuses_a_bool_even_after_the_same_geometry_in_ints():
    """Raw dims are checked on every call (no memo keyed by them): True == 1 must not pass as 1."""
    x = Buffer.from_numpy(np.ones(2 * 4, F32), "cpu")
    w = Buffer.from_numpy(np.ones(3 * 2 * 3, F32), "cpu")
    P.conv(x, w, None, 1, 2, 3, (4,), (3,), (1,), (0,))
    with pytest.raises(Exception, match="conv: .*batch"):
        P.conv(x, w, None, True, 2, 3, (4,), (3,), (1,), (0,))
    with pytest.raises(Exception, match="conv_bwd_weight: .*stride"):
        conv_plan("conv_bwd_weight", 1, 2, 3, (4,), (3,), (True,), (0,))


def test_conv_transpose_plan_refuses_output_padding_not_below_stride():
    with pytest.raises(ShapeError,
                       match=r"conv_transpose: output_padding\[0\] = 2 must be smaller than stride\[0\] = 2"):
        conv_transpose_plan("conv_transpose", 1, 2, 3, (4,), (3,), (2,), (0,), (2,))


def test_pool_plan_refuses_with_the_primitive_message():
    with pytest.raises(ShapeError, match=r"max_pool: axis 0: kernel 5 is larger than the padded input \(spatial 3 \+ "
                                         r"2 \* padding 0 = 3\), so there is no output position"):
        pool_plan("max_pool", 2, (3,), (5,), (1,), (0,))
    with pytest.raises(ShapeError, match=r"avg_pool: stride\[1\] must be >= 1, got 0"):
        pool_plan("avg_pool", 2, (3, 3), (1, 1), (1, 0), (0, 0))


# -- hashing and equality ------------------------------------------------------------------------------
def test_plans_are_hashable_values():
    a = conv_plan("conv", 2, 3, 4, (6, 6), (3, 3), (1, 1), (1, 1))
    b = conv_plan("conv_bwd_input", 2, 3, 4, [6, 6], (3, 3), (1, 1), (1, 1))  # a list is read as its ints
    c = conv_plan("conv", 2, 3, 4, (6, 6), (3, 3), (2, 2), (1, 1))
    assert isinstance(a, ConvPlan) and a == b and hash(a) == hash(b) and a != c
    assert a.out == (6, 6) and (a.n_x, a.n_w, a.n_y) == (2 * 3 * 36, 4 * 3 * 9, 2 * 4 * 36) and a.fits
    assert {a: 1, b: 2, c: 3} == {a: 2, c: 3}
    with pytest.raises(AttributeError):
        a.batch = 3  # frozen
    t = conv_transpose_plan("conv_transpose", 2, 3, 4, (5, 5), (3, 3), (2, 2), (1, 1), (1, 0))
    assert isinstance(t, ConvTransposePlan) and t.out == (10, 9) and hash(t) == hash(
        conv_transpose_plan("conv_transpose", 2, 3, 4, (5, 5), (3, 3), (2, 2), (1, 1), (1, 0)))
    # the transposed conv is the input gradient of its adjoint conv: out_c -> in_c over `out`
    assert t.adjoint == conv_plan_of(2, 4, 3, (10, 9), (3, 3), (2, 2), (1, 1)) and t.adjoint.out == t.spatial
    p = pool_plan("max_pool", 6, (4, 6), (2, 2), (2, 2), (0, 0))
    assert isinstance(p, PoolPlan) and p == pool_plan("avg_pool", 6, (4, 6), (2, 2), (2, 2), (0, 0))
    assert (p.out, p.n_in, p.n_out) == ((2, 3), 6 * 24, 6 * 6)


def test_too_large_sizes_are_not_refused_by_the_plan_but_by_the_buffer_checks():
    """A plan whose sizes pass 2**32 is built (fits False): the primitive's full checks raise, in
    their usual order, naming the operand."""
    plan = conv_plan("conv", 2**16, 2**16, 1, (2,), (1,), (1,), (0,))
    assert not plan.fits
    x = Buffer.from_numpy(np.zeros(4, F32), "cpu")
    with pytest.raises(ShapeError, match=r"conv: batch\*in_c\*prod\(spatial\)"):
        P.conv(x, x, None, 2**16, 2**16, 1, (2,), (1,), (1,), (0,))


# -- the memo ------------------------------------------------------------------------------------------
def test_a_repeated_conv_hits_the_memo_and_clearing_empties_it():
    rng = np.random.default_rng(0)
    x = tl.tensor(rng.standard_normal((2, 3, 7, 7)).astype(F32))
    w = tl.tensor(rng.standard_normal((4, 3, 3, 3)).astype(F32))
    first = TF.conv2d(x, w, padding=1, stride=2).numpy()
    before = caches.stats()["ops.conv.geometry"]
    again = TF.conv2d(x, w, padding=1, stride=2).numpy()
    after = caches.stats()["ops.conv.geometry"]
    assert after["hits"] == before["hits"] + 1 and after["misses"] == before["misses"]
    assert after["entries"] >= 1 and after["maxsize"] == 1024
    np.testing.assert_array_equal(first, again)
    caches.clear_memos()
    assert all(s["entries"] == 0 and s["hits"] == 0 for s in caches.stats().values())
    np.testing.assert_array_equal(TF.conv2d(x, w, padding=1, stride=2).numpy(), first)  # rebuilt: the same bits
    assert caches.stats()["ops.conv.geometry"]["misses"] == 1


def test_memo_is_bounded_counts_evictions_and_keeps_no_exception():
    calls = []

    @caches.memo("test_plans.square", 2)
    def square(v: int) -> int:
        calls.append(v)
        if v < 0:
            raise ArgumentError(f"square: v must be >= 0, got {v}")
        return v * v

    assert [square(1), square(2), square(1)] == [1, 4, 1]
    assert caches.stats()["test_plans.square"] == {"hits": 1, "misses": 2, "entries": 2, "maxsize": 2,
                                                   "evictions": 0}
    for _ in range(2):  # an error is raised again, never remembered, and is no eviction
        with pytest.raises(ArgumentError, match="square: v must be >= 0, got -1"):
            square(-1)
    square(3)  # evicts 2, the least recently used
    assert caches.stats()["test_plans.square"] == {"hits": 1, "misses": 5, "entries": 2, "maxsize": 2,
                                                   "evictions": 1}
    calls.clear()
    square(2)
    assert calls == [2]
    assert caches.stats()["test_plans.square"]["evictions"] == 2


def test_a_memo_holding_memory_counts_into_its_backend_and_is_collected():
    @caches.memo("test_plans.arrays", 8, backend="test_plans_backend", entry_bytes=64)
    def block(n: int) -> np.ndarray:
        return np.zeros(16, F32) + n

    block(1), block(2)
    assert caches.held_bytes("test_plans_backend") == 128
    assert caches.clear("test_plans_backend") == 128
    assert caches.stats()["test_plans.arrays"]["entries"] == 0 and caches.held_bytes("test_plans_backend") == 0
