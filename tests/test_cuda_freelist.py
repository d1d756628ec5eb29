"""The CUDA free list (kernels/cuda/freelist.py): a dying Buffer's array is reused by the next
allocation of its length only when nothing else can see it. Every test carries the ``cuda`` marker."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from torchlean.runtime import Buffer, allocator_stats, collect_allocator
from torchlean.runtime import primitives as P

F32 = np.float32
pytestmark = pytest.mark.cuda


@pytest.fixture
def freelist(cuda_device):
    from torchlean.kernels.cuda import freelist as fl

    collect_allocator(True)  # empty lists: every test starts from nothing held
    gc.disable()             # no unrelated Buffer dies mid-test
    try:
        yield fl
    finally:
        gc.enable()
        collect_allocator(True)


def _ptr(b: Buffer) -> int:
    return b._data.data.ptr  # (Buffer.data would mark the buffer shared: never recycled)


def _buf(values, device):
    return Buffer.from_numpy(np.asarray(values, F32), device)


def test_a_dead_buffer_is_reused_with_fresh_values(cuda_device, freelist):
    x, y = _buf(np.arange(1000), cuda_device), _buf(np.ones(1000), cuda_device)
    a = P.add(x, y)
    ptr = _ptr(a)
    del a
    assert freelist.held_bytes(0) == 4000
    b = P.mul(x, y)  # same length: the array comes back, overwritten
    assert _ptr(b) == ptr and freelist.held_bytes(0) == 0
    np.testing.assert_array_equal(b.to_numpy(), np.arange(1000, dtype=F32))


def test_release_recycles_and_the_released_buffer_stays_dead(cuda_device, freelist):
    from torchlean.errors import BufferReleasedError

    x = _buf(np.arange(64), cuda_device)
    a = P.scale(x, 2.0)
    ptr = _ptr(a)
    assert a.release()
    b = P.scale(x, 3.0)
    assert _ptr(b) == ptr
    with pytest.raises(BufferReleasedError):
        P.add(a, b)
    np.testing.assert_array_equal(b.to_numpy(), 3 * np.arange(64, dtype=F32))


@pytest.mark.parametrize("holder", ["data", "view", "dlpack", "source_of_view"])
def test_an_array_someone_else_sees_is_never_reused(cuda_device, freelist, holder):
    x = _buf(np.arange(256), cuda_device)
    a = P.scale(x, 2.0)
    ptr = _ptr(a)
    if holder == "data":
        kept = a.data                  # a user's reference to the array
    elif holder == "view":
        kept = a.data[8:64]            # a CuPy view of it
    elif holder == "dlpack":
        kept = a.data.__dlpack__()     # an exported capsule
    else:
        kept = P.slice1d(a, 256, 0, 128)  # a view Buffer (16-byte aligned run)
        assert kept.data.base is not None
    del a
    assert freelist.held_bytes(0) == 0
    b = P.scale(x, 5.0)
    assert _ptr(b) != ptr
    if holder in ("data", "view"):
        np.testing.assert_array_equal(kept.get()[:8], 2 * np.arange(8, dtype=F32) + (0 if holder == "data" else 16))
    if holder == "source_of_view":
        np.testing.assert_array_equal(kept.to_numpy(), 2 * np.arange(128, dtype=F32))
        del kept
        gc.collect()
        # the view Buffer is not counted and never recycled; its source array dies with it
        assert freelist.held_bytes(0) == 0


def test_imported_memory_is_not_kept(cuda_device, freelist):
    import cupy

    from torchlean.runtime.device import get_context

    foreign = cupy.from_dlpack(cupy.arange(32, dtype=cupy.float32))  # memory owned by its exporter
    assert type(foreign.data.mem) is not cupy.cuda.memory.PooledMemory
    b = Buffer(foreign, get_context(cuda_device))
    del foreign, b
    assert freelist.held_bytes(0) == 0


def test_another_stream_gets_its_own_list(cuda_device, freelist):
    import cupy

    x = _buf(np.arange(512), cuda_device)
    a = P.scale(x, 2.0)
    ptr = _ptr(a)
    del a                                  # freed on the default stream
    with cupy.cuda.Stream(non_blocking=True):
        b = P.scale(x, 3.0)                # not handed out on another stream
        assert _ptr(b) != ptr
        np.testing.assert_array_equal(b.to_numpy(), 3 * np.arange(512, dtype=F32))
    c = P.scale(x, 4.0)
    assert _ptr(c) == ptr


def test_limits_and_flush(cuda_device, freelist, monkeypatch):
    monkeypatch.setattr(freelist, "_LIMIT", 10_000)
    x = _buf(np.zeros(2000), cuda_device)
    bufs = [P.scale(x, 1.0) for _ in range(3)]   # 8000 bytes each: only the first fits
    del bufs
    assert freelist.held_bytes(0) == 8000
    stats = allocator_stats(cuda_device)
    assert stats.cached_bytes >= 8000
    assert collect_allocator(True) >= 8000 and freelist.held_bytes(0) == 0
    monkeypatch.setattr(freelist, "_MAX_ARRAY", 1000)
    del x
    assert freelist.held_bytes(0) == 0           # 8000 bytes > _MAX_ARRAY


def _steady_step(freelist, model, x):
    """(hits, misses, losses): the free list's counts over the 4th Adam step of model on x."""
    import torchlean as tl

    opt = tl.optim.Adam(model.parameters(), lr=1e-3)
    losses = []

    def step():
        loss = (model(x) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())

    for _ in range(3):
        step()
    hits0, misses0 = freelist.hits_and_misses()
    step()
    hits, misses = (a - b for a, b in zip(freelist.hits_and_misses(), (hits0, misses0)))
    return hits, misses, losses


def test_a_training_loop_allocates_from_the_list(cuda_device, freelist):
    import torchlean as tl
    from torchlean import nn

    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 1)).to(cuda_device)
    x = tl.tensor(np.random.default_rng(0).normal(size=(64, 16)).astype(F32), device=cuda_device)
    hits, misses, losses = _steady_step(freelist, model, x)
    assert hits > 0 and misses <= hits // 4, f"a steady step: {hits} arrays from the list, {misses} from CuPy"
    assert losses[-1] < losses[0]


def test_workspaces_given_back_are_reused_by_dtype(cuda_device, freelist):
    import cupy

    a = freelist.empty_as(100, "d")
    ptr = a.data.ptr
    freelist.give_back(a)
    del a
    assert freelist.held_bytes(0) == 800
    assert freelist.empty(200).data.ptr != ptr           # float32 of the same bytes: another list
    assert freelist.empty_as(100, "I").dtype == cupy.uint32
    b = freelist.empty_as(100, "d")
    assert b.data.ptr == ptr and b.dtype == cupy.float64 and freelist.held_bytes(0) == 0


def test_only_whole_workspaces_are_taken(cuda_device, freelist):
    """give_back is the caller's declaration that nothing else holds the array; a view of another
    array is never taken (its memory is its base's)."""
    w = freelist.empty(256)
    freelist.give_back(w[10:])
    assert freelist.held_bytes(0) == 0
    freelist.give_back(w)
    assert freelist.held_bytes(0) == 1024


def test_a_buffer_whose_array_was_taken_is_never_recycled(cuda_device, freelist):
    """Ownership is state, not a reference count: once a caller took ``Buffer.data`` the array
    is theirs too, even after they drop their reference."""
    x = _buf(np.arange(64), cuda_device)
    a = P.scale(x, 2.0)
    _ = a.data
    del _
    del a
    assert freelist.held_bytes(0) == 0


def test_a_conv_batchnorm_step_takes_its_workspaces_from_the_list(cuda_device, freelist):
    """im2col columns, partial sums, batch norm coefficients, max-pool winners: given back by the
    launchers, so a steady conv step gets (nearly) every array from the list."""
    import torchlean as tl
    from torchlean import nn

    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU()).to(cuda_device)
    x = tl.tensor(np.random.default_rng(1).normal(size=(16, 3, 12, 12)).astype(F32), device=cuda_device)
    hits, misses, losses = _steady_step(freelist, model, x)
    assert hits > 0 and misses <= hits // 10, f"a steady step: {hits} arrays from the list, {misses} from CuPy"
    assert losses[-1] < losses[0]
