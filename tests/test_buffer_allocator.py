"""Buffer: copies in and out, explicit ownership, and the allocator counters that watch it.

The counters are process-wide per device, so every check reads them before and after and
asserts the exact delta. The ``counting`` fixture collects stray garbage first and keeps the
cyclic garbage collector off inside the test, so that no unrelated buffer dies mid-measurement.
"""

from __future__ import annotations

import gc
import pickle

import numpy as np
import pytest

from torchlean.errors import BufferReleasedError
from torchlean.runtime import (
    AllocatorStats,
    Buffer,
    WithWorkspace,
    allocator_stats,
    canonical_device,
    collect_allocator,
    cuda_unavailable_reason,
    format_allocator_stats,
    full,
    release_many_then,
    release_then,
    reset_peak_bytes,
    zeros,
)
from torchlean.runtime import primitives as P

F32 = np.float32


@pytest.fixture
def counting():
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def delta(before: AllocatorStats, after: AllocatorStats) -> dict:
    return {"live": after.live_bytes - before.live_bytes, "allocs": after.alloc_count - before.alloc_count,
            "frees": after.free_count - before.free_count}


# -- copies in and out --------------------------------------------------------------------------
def test_from_numpy_copies_the_source(device):
    src = np.arange(5, dtype=F32)
    b = Buffer.from_numpy(src, device)
    src[:] = -1
    assert b.to_numpy().tolist() == [0, 1, 2, 3, 4]


def test_to_numpy_returns_a_fresh_copy(device):
    b = Buffer.from_numpy([1.0, 2.0, 3.0], device)
    out = b.to_numpy()
    out[:] = 99
    again = b.to_numpy()
    assert again.tolist() == [1.0, 2.0, 3.0]
    assert again is not b.to_numpy() and not np.shares_memory(again, b.to_numpy())
    assert isinstance(again, np.ndarray) and again.dtype == F32 and again.shape == (3,)


def test_from_numpy_flattens_row_major_and_converts_to_float32(device):
    a = np.arange(12, dtype=np.float64).reshape(3, 4)
    assert Buffer.from_numpy(a, device).to_numpy().tolist() == list(range(12))
    nc = a[:, ::2]  # not contiguous
    assert Buffer.from_numpy(nc, device).to_numpy().tolist() == [0, 2, 4, 6, 8, 10]
    assert Buffer.from_numpy(a.T, device).to_numpy().tolist() == a.T.reshape(-1).tolist()
    assert Buffer.from_numpy(np.array([0.1]), device).to_numpy()[0] == F32(0.1)
    assert Buffer.from_numpy(np.array([True, False]), device).to_numpy().tolist() == [1.0, 0.0]
    assert Buffer.from_numpy(np.array([-3, 2**24 + 1], np.int64), device).to_numpy().tolist() == [-3.0, float(F32(2**24 + 1))]
    assert Buffer.from_numpy([[1, 2], [3, 4]], device).to_numpy().tolist() == [1, 2, 3, 4]
    assert Buffer.from_numpy(F32(2.5), device).to_numpy().tolist() == [2.5]  # a 0-d array is one element


def test_size_device_nbytes(device):
    b = Buffer.from_numpy(np.zeros((4, 5)), device)
    assert b.size == 20 == len(b)
    assert b.nbytes == 80
    assert b.device == canonical_device(device)
    assert not b.released
    assert "size=20" in repr(b)
    e = Buffer.from_numpy(np.zeros(0), device)
    assert (e.size, e.nbytes) == (0, 0)


def test_zeros_and_full(device):
    z = zeros(7, device)
    assert z.to_numpy().tolist() == [0.0] * 7 and z.to_numpy().dtype == F32
    f = full(3, 0.1, device)
    assert f.to_numpy().tolist() == [float(F32(0.1))] * 3  # rounded to float32, not float64 0.1
    assert float(F32(0.1)) != 0.1
    assert full(2, 1e40, device).to_numpy().tolist() == [np.inf, np.inf]  # beyond float32: inf
    assert np.isnan(full(2, float("nan"), device).to_numpy()).all()
    assert full(0, 3.0, device).size == 0 and zeros(0, device).size == 0
    assert full(2, np.float64(-2.5), device).to_numpy().tolist() == [-2.5, -2.5]
    assert full(2, 7, device).to_numpy().tolist() == [7.0, 7.0]


def test_buffers_cannot_be_pickled():
    with pytest.raises(TypeError, match="to_numpy"):
        pickle.dumps(Buffer.from_numpy([1.0]))


# -- release semantics ----------------------------------------------------------------------------
def test_release_semantics(device, counting):
    b = Buffer.from_numpy(np.ones(10), device)
    before = allocator_stats(device)
    assert b.release() is True
    assert b.released and "released" in repr(b)
    assert b.release() is False
    after = allocator_stats(device)
    assert delta(before, after) == {"live": -40, "allocs": 0, "frees": 1}  # freed once, not twice
    assert b.size == 10 and b.nbytes == 40  # metadata survives; data does not
    with pytest.raises(BufferReleasedError):
        b.to_numpy()
    with pytest.raises(BufferReleasedError):
        b.data
    with pytest.raises(BufferReleasedError):
        P.relu(b)
    del b
    assert delta(after, allocator_stats(device)) == {"live": 0, "allocs": 0, "frees": 0}  # no second free at __del__


def test_release_then(device, counting):
    ws, keep = Buffer.from_numpy(np.ones(8), device), Buffer.from_numpy(np.ones(3), device)
    before = allocator_stats(device)
    sentinel = object()
    assert release_then(ws, sentinel) is sentinel
    assert ws.released and not keep.released
    assert release_then(keep, keep) is keep and keep.released
    assert delta(before, allocator_stats(device)) == {"live": -44, "allocs": 0, "frees": 2}


def test_release_many_then(device, counting):
    ws = [Buffer.from_numpy(np.ones(n), device) for n in (1, 2, 3)]
    keep = Buffer.from_numpy(np.ones(5), device)
    ws[1].release()
    before = allocator_stats(device)
    assert release_many_then(ws, keep) is keep
    assert all(w.released for w in ws) and not keep.released
    assert delta(before, allocator_stats(device)) == {"live": -16, "allocs": 0, "frees": 2}
    assert release_many_then((w for w in []), 5) == 5  # any iterable, even an empty generator


def test_with_workspace(device, counting):
    value = Buffer.from_numpy(np.ones(4), device)
    scratch = (Buffer.from_numpy(np.ones(2), device), Buffer.from_numpy(np.ones(6), device))
    ww = WithWorkspace(value, scratch)
    assert ww.value is value and ww.workspace == scratch
    before = allocator_stats(device)
    assert ww.release_workspace() is value
    assert all(s.released for s in scratch) and not value.released
    assert delta(before, allocator_stats(device)) == {"live": -32, "allocs": 0, "frees": 2}

    v2, s2 = Buffer.from_numpy(np.ones(3), device), Buffer.from_numpy(np.ones(1), device)
    before = allocator_stats(device)
    assert WithWorkspace(v2, (s2,)).release_all("kept") == "kept"
    assert v2.released and s2.released
    assert delta(before, allocator_stats(device)) == {"live": -16, "allocs": 0, "frees": 2}
    v3 = Buffer.from_numpy(np.ones(1), device)
    assert WithWorkspace(v3).workspace == () and WithWorkspace(v3).release_all() is None and v3.released


# -- allocator counters ---------------------------------------------------------------------------
def test_counters_move_exactly(device, counting):
    before = allocator_stats(device)
    a = Buffer.from_numpy(np.ones(100), device)
    b = zeros(50, device)
    c = P.add(a, a)
    mid = allocator_stats(device)
    assert delta(before, mid) == {"live": 1000, "allocs": 3, "frees": 0}
    assert mid.peak_bytes >= mid.live_bytes
    for buf in (a, b, c):
        buf.release()
    assert delta(before, allocator_stats(device)) == {"live": 0, "allocs": 3, "frees": 3}


def test_multi_output_primitive_counts_each_buffer(device, counting):
    a = Buffer.from_numpy(np.ones(10), device)
    before = allocator_stats(device)
    da, db = P.max_bwd(a, a, a)
    assert delta(before, allocator_stats(device)) == {"live": 80, "allocs": 2, "frees": 0}
    del da, db
    assert delta(before, allocator_stats(device)) == {"live": 0, "allocs": 2, "frees": 2}


def test_dropped_buffer_counts_as_freed(device, counting):
    before = allocator_stats(device)
    b = Buffer.from_numpy(np.ones(256), device)
    del b
    gc.collect()
    assert delta(before, allocator_stats(device)) == {"live": 0, "allocs": 1, "frees": 1}


def test_buffer_in_a_reference_cycle_is_freed_by_collect_allocator(device, counting):
    before = allocator_stats(device)
    cycle = [Buffer.from_numpy(np.ones(64), device)]
    cycle.append(cycle)
    del cycle
    assert delta(before, allocator_stats(device))["live"] == 256  # unreachable, not yet finalized
    freed = collect_allocator()
    assert isinstance(freed, int) and freed >= 0
    assert delta(before, allocator_stats(device)) == {"live": 0, "allocs": 1, "frees": 1}


def test_collect_allocator_returns_int():
    for force in (False, True):
        n = collect_allocator(force)
        assert isinstance(n, int) and not isinstance(n, bool) and n >= 0
    if cuda_unavailable_reason() is not None:  # only the CPU, which caches nothing
        assert collect_allocator(True) == 0


def test_peak_and_reset_peak_bytes(device, counting):
    reset_peak_bytes(device)
    s0 = allocator_stats(device)
    assert s0.peak_bytes == s0.live_bytes
    big = Buffer.from_numpy(np.ones(1000), device)
    small = Buffer.from_numpy(np.ones(10), device)
    s1 = allocator_stats(device)
    assert s1.peak_bytes == s0.live_bytes + 4040
    big.release()
    s2 = allocator_stats(device)
    assert s2.live_bytes == s0.live_bytes + 40 and s2.peak_bytes == s1.peak_bytes  # peak stays
    reset_peak_bytes(device)
    assert allocator_stats(device).peak_bytes == s2.live_bytes
    small.release()
    assert allocator_stats(device).peak_bytes == s2.live_bytes


def test_allocator_stats_fields(device):
    s = allocator_stats(device)
    assert isinstance(s, AllocatorStats) and s.device == canonical_device(device)
    for field in ("live_bytes", "peak_bytes", "alloc_count", "free_count", "device_free_bytes", "device_total_bytes"):
        assert isinstance(getattr(s, field), int) and getattr(s, field) >= 0, field
    assert s.alloc_count >= s.free_count
    assert s.device_free_bytes <= s.device_total_bytes
    if device == "cpu":
        assert s.device_total_bytes > 0  # host memory is known on Linux


def test_format_allocator_stats_is_one_line():
    s = allocator_stats("cpu")
    line = format_allocator_stats(s)
    assert isinstance(line, str) and "\n" not in line
    assert "live" in line and "peak" in line and "cpu" in line
    made = AllocatorStats("cuda:0", 3 * 2**20, 5 * 2**20, 10, 4, 2**30, 2**31, cached_bytes=2**20)
    other = format_allocator_stats(made)
    assert "\n" not in other and "cuda:0" in other
    between = other[other.index("live"):other.index("peak")]
    assert "3" in between and "5" not in between and "5" in other[other.index("peak"):]
    assert other != format_allocator_stats(AllocatorStats("cuda:0", 0, 0, 0, 0, 0, 0))
