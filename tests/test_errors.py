"""Bad input: a clear error of the torchlean family, naming the operation and the argument, and
no damage (no buffer allocated or freed by the failed call, inputs unchanged).

One table drives it: (description, call, expected exception class, substrings of the message).
Each call receives a fresh set of input buffers ``B``.
"""

from __future__ import annotations

import gc
import inspect
from types import SimpleNamespace
from unittest import mock

import numpy as np
import pytest

import torchlean.errors as errors
from torchlean.kernels import cpu as cpu_backend
from torchlean.errors import (
    ArgumentError,
    AxisError,
    BufferReleasedError,
    DeviceError,
    DTypeError,
    OutOfMemoryError,
    ShapeError,
    TorchLeanError,
)
from torchlean.runtime import Buffer, allocator_stats, cuda_unavailable_reason, full, zeros
from torchlean.runtime import primitives as P

F32 = np.float32
CUDA_REASON = cuda_unavailable_reason()
NEEDS_CUDA = [pytest.mark.cuda, pytest.mark.skipif(CUDA_REASON is not None, reason=f"CUDA unavailable: {CUDA_REASON}")]
NEEDS_NO_CUDA = [pytest.mark.skipif(CUDA_REASON is None, reason="CUDA is usable here, so 'cuda' is not refused")]


def make_inputs() -> SimpleNamespace:
    B = SimpleNamespace(
        a6=Buffer.from_numpy(np.arange(6, dtype=F32)),
        b6=Buffer.from_numpy(np.arange(6, dtype=F32) * -2),
        c5=Buffer.from_numpy(np.linspace(-1, 1, 5)),
        m12=Buffer.from_numpy(np.arange(12, dtype=F32).reshape(3, 4)),
        one=Buffer.from_numpy([7.0]),
        two=Buffer.from_numpy([1.0, 2.0]),
        r4=Buffer.from_numpy([1.0, -1.0, 0.5, 3.0]),
        dead=Buffer.from_numpy(np.ones(6, F32)),
    )
    assert B.dead.release() is True
    return B


def _out_of_memory(B):
    with mock.patch.object(cpu_backend, "reduce_sum", side_effect=MemoryError("simulated")):
        P.reduce_sum(B.a6)


def _mixed_devices(B):
    P.add(B.a6, Buffer.from_numpy(np.zeros(6, F32), "cuda"))


CASES = [
    # -- buffer sizes against dims --
    ("bmm: b smaller than batch*n*p", lambda B: P.bmm(B.a6, B.b6, 1, 2, 3, 3), ShapeError, ["bmm", "argument b", "9", "6"]),
    ("bmm: a smaller than batch*m*n", lambda B: P.bmm(B.a6, B.m12, 1, 3, 4, 3), ShapeError, ["bmm", "argument a", "12", "6"]),
    ("reduce_sum_axis0: size != rows*cols", lambda B: P.reduce_sum_axis0(B.a6, 2, 4), ShapeError, ["reduce_sum_axis0", "8", "6"]),
    ("softmax_rows: size != rows*cols", lambda B: P.softmax_rows(B.m12, 4, 4), ShapeError, ["softmax_rows", "16", "12"]),
    ("concat1d: b size != m", lambda B: P.concat1d(B.a6, B.c5, 6, 4), ShapeError, ["concat1d", "argument b", "4", "5"]),
    ("gather_rows: mat size != rows*cols", lambda B: P.gather_rows(B.a6, 2, 2, [0], 1), ShapeError,
     ["gather_rows", "argument mat", "4", "6"]),
    ("scatter_add: values size != k", lambda B: P.scatter_add(B.a6, B.c5, 6, [0, 1], 2), ShapeError,
     ["scatter_add", "argument values", "2", "5"]),
    ("broadcast_vec_to_rows: vec size != cols", lambda B: P.broadcast_vec_to_rows(B.c5, 2, 6), ShapeError,
     ["broadcast_vec_to_rows", "argument vec", "6", "5"]),
    ("broadcast_to: x size != prod(in_dims)", lambda B: P.broadcast_to(B.c5, (2, 3), (2, 3), (1, 2)), ShapeError,
     ["broadcast_to", "argument x", "6", "5"]),
    # -- dims as uint32 --
    ("rows = 2**32", lambda B: P.reduce_sum_axis0(B.a6, 2**32, 1), ShapeError, ["reduce_sum_axis0", "rows", "4294967296"]),
    ("bmm batch = 2**32", lambda B: P.bmm(B.a6, B.b6, 2**32, 1, 1, 1), ShapeError, ["bmm", "batch", "4294967296"]),
    ("negative cols", lambda B: P.softmax_rows(B.a6, 6, -1), ShapeError, ["softmax_rows", "cols", "-1"]),
    ("negative m", lambda B: P.bmm(B.a6, B.b6, 1, -2, 3, 2), ShapeError, ["bmm", "argument m", "-2"]),
    ("negative slice start", lambda B: P.slice1d(B.a6, 6, -1, 2), ShapeError, ["slice1d", "start", "-1"]),
    ("float rows", lambda B: P.reduce_sum_axis1(B.a6, 2.0, 3), ShapeError, ["reduce_sum_axis1", "rows", "2.0"]),
    ("string rows", lambda B: P.transpose2d(B.a6, "2", 3), ShapeError, ["transpose2d", "rows", "'2'"]),
    ("bool rows", lambda B: P.transpose2d(B.a6, True, 6), ShapeError, ["transpose2d", "rows", "True"]),
    ("rows*cols >= 2**32", lambda B: P.reduce_sum_axis0(B.a6, 2**16, 2**16), ShapeError,
     ["reduce_sum_axis0", "rows*cols", "4294967296"]),
    ("concat1d: n = 2**32 - 1 for a 6-element a", lambda B: P.concat1d(B.a6, B.b6, 2**32 - 1, 6), ShapeError,
     ["concat1d", "argument a", "4294967295"]),
    ("negative entry of dims", lambda B: P.reduce_sum_axis(B.a6, (2, -3), 0), ShapeError, ["reduce_sum_axis", "dims[1]", "-3"]),
    ("dims not a sequence", lambda B: P.swap_adjacent_at_depth(B.a6, 6, 0), ShapeError, ["swap_adjacent_at_depth", "dims"]),
    ("dims a string", lambda B: P.reduce_sum_axis(B.a6, "23", 0), ShapeError, ["reduce_sum_axis", "dims", "'23'"]),
    ("dims product >= 2**32", lambda B: P.reduce_sum_axis(B.a6, (2**16, 2**16), 0), ShapeError,
     ["reduce_sum_axis", "dims", "2**32"]),
    ("zeros with negative n", lambda B: zeros(-1), ShapeError, ["zeros", "argument n", "-1"]),
    ("full with n = 2**32", lambda B: full(2**32, 1.0), ShapeError, ["full", "argument n"]),
    # -- sizes of elementwise operands --
    ("add: 6 vs 5", lambda B: P.add(B.a6, B.c5), ShapeError, ["add", "6", "5"]),
    ("mul: 5 vs 6", lambda B: P.mul(B.c5, B.a6), ShapeError, ["mul", "5", "6"]),
    ("relu_bwd: 6 vs 5", lambda B: P.relu_bwd(B.a6, B.c5), ShapeError, ["relu_bwd", "6", "5"]),
    ("max_bwd: dy 5", lambda B: P.max_bwd(B.a6, B.b6, B.c5), ShapeError, ["max_bwd", "6, 6, 5"]),
    ("clamp_bwd: 6 vs 5", lambda B: P.clamp_bwd(B.a6, B.c5, 0.0, 1.0), ShapeError, ["clamp_bwd", "6", "5"]),
    ("leaky_relu_bwd: 6 vs 5", lambda B: P.leaky_relu_bwd(B.a6, B.c5, 0.01), ShapeError, ["leaky_relu_bwd", "6", "5"]),
    ("axpy: 6 vs 5", lambda B: P.axpy(B.a6, B.c5, 2.0), ShapeError, ["axpy", "6", "5"]),
    ("softmax_rows_bwd: dy size", lambda B: P.softmax_rows_bwd(B.a6, B.c5, 2, 3), ShapeError,
     ["softmax_rows_bwd", "argument dy", "6", "5"]),
    # -- released buffers --
    ("add of a released buffer", lambda B: P.add(B.dead, B.a6), BufferReleasedError, ["add", "release"]),
    ("bmm of a released buffer", lambda B: P.bmm(B.a6, B.dead, 1, 2, 3, 2), BufferReleasedError, ["bmm", "release"]),
    ("to_numpy of a released buffer", lambda B: B.dead.to_numpy(), BufferReleasedError, ["Buffer", "release"]),
    # -- broadcasts --
    ("broadcast_to: 3 -> 4", lambda B: P.broadcast_to(B.a6, (2, 3), (2, 4), (1, 2)), ShapeError,
     ["broadcast_to", "cannot broadcast", "[2, 3]", "[2, 4]"]),
    ("reduce_from_broadcast: 3 -> 4", lambda B: P.reduce_from_broadcast(B.a6, (2, 4), (2, 3), (1, 2)), ShapeError,
     ["reduce_from_broadcast", "cannot broadcast"]),
    ("axis_map shorter than out_dims", lambda B: P.broadcast_to(B.a6, (2, 3), (2, 3), (1,)), ShapeError,
     ["broadcast_to", "axis_map", "one entry per output axis"]),
    ("axis_map names a missing input axis", lambda B: P.reduce_from_broadcast(B.a6, (2, 3), (2, 3), (1, 3)), ShapeError,
     ["reduce_from_broadcast", "axis_map[1]"]),
    ("axis_map maps an input axis twice", lambda B: P.broadcast_to(B.a6, (6,), (6, 6), (1, 1)), ShapeError,
     ["broadcast_to", "twice"]),
    ("input axis of size 6 not mapped", lambda B: P.reduce_from_broadcast(B.a6, (6,), (6,), (0,)), ShapeError,
     ["reduce_from_broadcast", "not mapped"]),
    ("negative in_dims", lambda B: P.broadcast_to(B.a6, (-6,), (6,), (1,)), ShapeError, ["broadcast_to", "in_dims[0]"]),
    ("negative out_dims", lambda B: P.broadcast_to(B.a6, (6,), (-6,), (1,)), ShapeError, ["broadcast_to", "out_dims[0]"]),
    # -- axes, slices --
    ("reduce_sum_axis: axis = rank", lambda B: P.reduce_sum_axis(B.a6, (2, 3), 2), AxisError,
     ["reduce_sum_axis", "axis 2", "rank 2"]),
    ("reduce_sum_axis: axis of a rank-0 buffer", lambda B: P.reduce_sum_axis(B.one, (), 0), AxisError,
     ["reduce_sum_axis", "axis 0", "rank 0"]),
    ("reduce_sum_axis: negative axis", lambda B: P.reduce_sum_axis(B.a6, (2, 3), -1), ShapeError,
     ["reduce_sum_axis", "axis", "-1"]),
    ("slice1d: start + length > n", lambda B: P.slice1d(B.a6, 6, 4, 3), ShapeError, ["slice1d", "4 + 3", "n = 6"]),
    ("slice1d: start past the end", lambda B: P.slice1d(B.a6, 6, 7, 0), ShapeError, ["slice1d", "n = 6"]),
    # -- indices --
    ("index = 2**32", lambda B: P.gather_vec(B.a6, 6, [0, 2**32], 2), ArgumentError, ["gather_vec", "indices", "4294967296"]),
    ("negative index", lambda B: P.gather_rows(B.m12, 3, 4, [-1], 1), ArgumentError, ["gather_rows", "indices", "-1"]),
    ("index beyond int64", lambda B: P.scatter_add(B.a6, B.two, 6, [2**70, 0], 2), ArgumentError,
     ["scatter_add", "indices", str(2**70)]),
    ("uint64 index 2**63", lambda B: P.gather_vec(B.a6, 6, np.array([2**63], np.uint64), 1), ArgumentError,
     ["gather_vec", str(2**63)]),
    ("negative index of scatter_add_rows", lambda B: P.scatter_add_rows(B.m12, B.m12, 3, 4, np.array([0, -5, 1]), 3),
     ArgumentError, ["scatter_add_rows", "-5"]),
    ("float indices", lambda B: P.gather_vec(B.a6, 6, [0.5], 1), ArgumentError, ["gather_vec", "indices", "integers"]),
    ("bool indices", lambda B: P.gather_vec(B.a6, 6, [True], 1), ArgumentError, ["gather_vec", "indices", "integers"]),
    ("2-D indices", lambda B: P.gather_vec(B.a6, 6, [[0]], 1), ShapeError, ["gather_vec", "one-dimensional"]),
    ("len(indices) != k", lambda B: P.gather_rows(B.m12, 3, 4, [0, 1], 3), ShapeError,
     ["gather_rows", "2 entries", "k = 3"]),
    ("len(indices) != k (scatter)", lambda B: P.scatter_add_rows(B.m12, B.m12, 3, 4, [0, 1], 3), ShapeError,
     ["scatter_add_rows", "2 entries", "k = 3"]),
    ("k = 2**32", lambda B: P.gather_vec(B.a6, 6, [0], 2**32), ShapeError, ["gather_vec", "argument k"]),
    ("scatter_add_row: i = -1", lambda B: P.scatter_add_row(B.m12, B.r4, 3, 4, -1), ShapeError,
     ["scatter_add_row", "argument i", "-1"]),
    # -- devices --
    ("device 'tpu'", lambda B: Buffer.from_numpy(np.ones(3), "tpu"), DeviceError, ["Buffer.from_numpy", "'tpu'"]),
    ("device 'cuda:x'", lambda B: zeros(3, "cuda:x"), DeviceError, ["zeros", "cuda:x"]),
    ("device 'gpu'", lambda B: P.rand_uniform(3, 1, "gpu"), DeviceError, ["rand_uniform", "gpu"]),
    ("device 'cuda:-1'", lambda B: full(3, 1.0, "cuda:-1"), DeviceError, ["full", "cuda:-1"]),
    ("device 0", lambda B: P.rand_normal(3, 1, 0), DeviceError, ["rand_normal", "0"]),
    ("allocator_stats of 'mps'", lambda B: allocator_stats("mps"), DeviceError, ["allocator_stats", "mps"]),
    pytest.param("'cuda' where unavailable", lambda B: zeros(3, "cuda"), DeviceError,
                 ["zeros", "cuda:0", "not available", str(CUDA_REASON)], marks=NEEDS_NO_CUDA, id="cuda unavailable"),
    pytest.param("'cuda:1' where unavailable", lambda B: Buffer.from_numpy([1.0], "cuda:1"), DeviceError,
                 ["Buffer.from_numpy", "cuda:1", str(CUDA_REASON)], marks=NEEDS_NO_CUDA, id="cuda:1 unavailable"),
    pytest.param("mixed devices", _mixed_devices, DeviceError, ["add", "one device", "cpu", "cuda"],
                 marks=NEEDS_CUDA, id="mixed devices"),
    # -- scalars and other types --
    ("scale by a string", lambda B: P.scale(B.a6, "2"), ArgumentError, ["scale", "argument c", "'2'"]),
    ("clamp with lo = None", lambda B: P.clamp(B.a6, None, 1.0), ArgumentError, ["clamp", "argument lo"]),
    ("clamp_bwd with hi a list", lambda B: P.clamp_bwd(B.a6, B.b6, 0.0, [1.0]), ArgumentError, ["clamp_bwd", "argument hi"]),
    ("leaky_relu without its slope", lambda B: P.leaky_relu(B.a6), ArgumentError, ["leaky_relu", "slope"]),
    ("axpy by a complex", lambda B: P.axpy(B.a6, B.b6, 1j), ArgumentError, ["axpy", "argument c"]),
    ("add_scalar of a bool", lambda B: P.add_scalar(B.a6, True), ArgumentError, ["add_scalar", "argument c", "True"]),
    ("bernoulli keep_prob a string", lambda B: P.bernoulli_mask(4, "0.5", 1), ArgumentError, ["bernoulli_mask", "keep_prob"]),
    ("full with a string value", lambda B: full(3, "1"), ArgumentError, ["full", "argument value"]),
    ("scale by an int beyond float range", lambda B: P.scale(B.a6, 10**400), ArgumentError, ["scale", "argument c"]),
    ("scale without its scalar", lambda B: P.scale(B.a6), ArgumentError, ["scale", "c"]),
    ("clamp with one bound", lambda B: P.clamp(B.a6, 0.0), ArgumentError, ["clamp", "lo", "hi"]),
    ("add of a NumPy array", lambda B: P.add(np.ones(6, F32), B.b6), DTypeError, ["add", "argument a", "Buffer", "ndarray"]),
    ("reduce_sum of a list", lambda B: P.reduce_sum([1.0, 2.0]), DTypeError, ["reduce_sum", "Buffer", "list"]),
    ("from_numpy of strings", lambda B: Buffer.from_numpy(["a", "b"]), ArgumentError, ["Buffer.from_numpy", "dtype"]),
    ("from_numpy of complex", lambda B: Buffer.from_numpy(np.array([1 + 2j])), ArgumentError, ["Buffer.from_numpy", "complex"]),
    ("from_numpy of ragged lists", lambda B: Buffer.from_numpy([[1.0], [1.0, 2.0]]), ArgumentError, ["Buffer.from_numpy"]),
    # -- allocation failure --
    ("backend MemoryError", _out_of_memory, OutOfMemoryError, ["reduce_sum", "out of memory", "cpu", "live", "peak"]),
]

CASE_PARAMS = [pytest.param(*c, id=c[0]) if isinstance(c[0], str) else c for c in CASES]


@pytest.mark.parametrize("description, call, exc_class, needles", CASE_PARAMS)
def test_bad_input_raises_clear_error_and_corrupts_nothing(description, call, exc_class, needles):
    B = make_inputs()
    buffers = vars(B)
    contents = {k: (b.released, None if b.released else b.to_numpy()) for k, b in buffers.items()}
    gc.collect()
    gc.disable()  # a collection of unrelated garbage inside the window would move the counters
    try:
        before = allocator_stats("cpu")
        with pytest.raises(exc_class) as raised:
            call(B)
        after = allocator_stats("cpu")
    finally:
        gc.enable()
    err = raised.value
    assert isinstance(err, TorchLeanError), f"{description}: {type(err).__name__} is not a TorchLeanError"
    message = str(err)
    missing = [s for s in needles if s not in message]
    assert not missing, f"{description}: message {message!r} lacks {missing}"
    assert (after.live_bytes, after.alloc_count, after.free_count) == \
           (before.live_bytes, before.alloc_count, before.free_count), f"{description}: the failed call moved the allocator"
    for k, b in buffers.items():
        released, data = contents[k]
        assert b.released == released, f"{description}: input {k} changed ownership"
        if not released:
            assert np.array_equal(b.to_numpy(), data, equal_nan=True), f"{description}: input {k} was modified"


# -- the exception family -------------------------------------------------------------------------
HIERARCHY = {
    errors.ShapeError: (ValueError,),
    errors.AxisError: (errors.ShapeError, ValueError, IndexError),
    errors.ArgumentError: (ValueError,),
    errors.IndexOutOfRangeError: (errors.ArgumentError, ValueError, IndexError),
    errors.DTypeError: (TypeError,),
    errors.DeviceError: (RuntimeError,),
    errors.BufferReleasedError: (RuntimeError,),
    errors.ContractError: (AssertionError,),
    errors.OutOfMemoryError: (MemoryError,),
    errors.AutogradError: (RuntimeError,),
    errors.NotPicklableError: (TypeError,),
    errors.WorkerError: (RuntimeError,),
    errors.NotSupportedError: (NotImplementedError,),
    errors.NotSupportedAttributeError: (errors.NotSupportedError, NotImplementedError, AttributeError),
}


@pytest.mark.parametrize("cls", list(HIERARCHY), ids=lambda c: c.__name__)
def test_error_class_derives_from_family_and_builtin(cls):
    assert issubclass(cls, TorchLeanError)
    for base in HIERARCHY[cls]:
        assert issubclass(cls, base), f"{cls.__name__} should derive from {base.__name__}"
    with pytest.raises(TorchLeanError):
        raise cls("x")


def test_every_error_class_is_in_the_hierarchy_table():
    defined = {obj for _, obj in inspect.getmembers(errors, inspect.isclass)
               if issubclass(obj, Exception) and obj.__module__ == errors.__name__}
    assert defined - {TorchLeanError} == set(HIERARCHY)
    assert issubclass(TorchLeanError, Exception) and not issubclass(TorchLeanError, (ValueError, RuntimeError))


def test_release_returns_true_then_false():
    b = Buffer.from_numpy([1.0, 2.0])
    assert b.release() is True
    assert b.release() is False
    with pytest.raises(BufferReleasedError):
        b.to_numpy()


# -- integer indices are read exactly: what fits is kept, what does not is refused (issue 20) ------
def test_int64_limits_are_kept_exactly_and_uint64_that_fits_is_accepted():
    import torchlean as tl
    import torchlean.nn.functional as F

    t = tl.tensor([2**63 - 1, -(2**63)])
    assert t.tolist() == [2**63 - 1, -(2**63)]
    assert tl.tensor(np.array([2**63 - 1], np.uint64)).tolist() == [2**63 - 1]
    w = tl.tensor(np.arange(6, dtype=np.float32).reshape(3, 2))
    idx = np.array([2, 0], np.uint64)
    assert F.embedding(idx, w).tolist() == [[4.0, 5.0], [0.0, 1.0]]
    assert w.index_select(0, idx).tolist() == [[4.0, 5.0], [0.0, 1.0]]
    assert w[idx].tolist() == [[4.0, 5.0], [0.0, 1.0]]
    logits = tl.tensor(np.zeros((2, 3), np.float32))
    np.testing.assert_allclose(F.cross_entropy(logits, np.array([1, 2], np.uint64)).item(), np.log(3), rtol=1e-6)
    assert tl.arange(3).tolist() == [0, 1, 2] and tl.arange(0.0, 1.0, 0.5).tolist() == [0.0, 0.5]
    assert tl.arange(5, 0, -2).tolist() == [5, 3, 1]


def test_uint64_index_that_would_wrap_to_minus_one_never_reads_the_last_row():
    """2**64 - 1 converted blindly to int64 is -1, a valid index of the last row: every index path
    must refuse it rather than read (or, in cross_entropy, ignore with ignore_index=-1) that row."""
    import torchlean as tl
    import torchlean.nn.functional as F
    from torchlean import ops

    bad = np.array([2**64 - 1], np.uint64)
    w = tl.tensor(np.arange(6, dtype=np.float32).reshape(3, 2))
    calls = [lambda: F.embedding(bad, w), lambda: w.index_select(0, bad), lambda: w[bad],
             lambda: ops.gather_rows(w, bad), lambda: F.cross_entropy(w, bad.repeat(3), ignore_index=-1),
             lambda: F.nll_loss(w, bad.repeat(3), ignore_index=-1)]
    for call in calls:
        with pytest.raises(errors.IndexOutOfRangeError, match="18446744073709551615"):
            call()


def test_modules_of_empty_sizes_still_build():
    """Zero sizes are sizes (as in PyTorch): nn.Linear(0, 2) builds, its initializers are no-ops."""
    import torchlean as tl
    from torchlean import nn

    m = nn.Linear(0, 2)
    assert m.weight.shape == (2, 0) and m(tl.zeros(3, 0)).shape == (3, 2)
