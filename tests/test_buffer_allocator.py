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


@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_copy_to_is_an_independent_copy_on_the_target(device, target):
    if target == "cuda" and cuda_unavailable_reason() is not None:
        pytest.skip(cuda_unavailable_reason())
    vals = np.array([1.5, -0.0, np.inf, np.nan], F32)
    b = Buffer.from_numpy(vals, device)
    c = b.copy_to(target)
    assert c.device == canonical_device(target) and c is not b
    assert np.array_equal(c.to_numpy().view(np.uint32), vals.view(np.uint32))
    b.release()  # the copy owns its memory
    assert np.array_equal(c.to_numpy().view(np.uint32), vals.view(np.uint32))
    with pytest.raises(BufferReleasedError):
        b.copy_to(target)


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
    assert b.size == 0 and b.nbytes == 0 and len(b) == 0  # the seed's ABI: a released buffer holds nothing
    with pytest.raises(BufferReleasedError, match="40-byte"):  # the error still says what it was
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
    if cuda_unavailable_reason() is not None:  # only the CPU, whose caches the first call emptied
        assert allocator_stats("cpu").cached_bytes == 0
        assert collect_allocator(True) == 0


# -- caches the runtime keeps: bounded, counted as cached, emptied by collect_allocator(True) ------
def test_byte_lru_is_bounded_by_bytes_and_entries():
    from torchlean.kernels import caches

    c = caches.ByteLRU("test-backend", max_bytes=100, max_entries=3)
    try:
        for i in range(3):
            c.put(i, f"v{i}", 30)
        assert len(c) == 3 and c.nbytes() == 90 and caches.held_bytes("test-backend") == 90
        assert c.get(0) == "v0"  # now the most recently used
        c.put(3, "v3", 30)  # over 3 entries: 1, the least recently used, goes
        assert c.get(1) is None and c.get(0) == "v0" and c.nbytes() == 90
        c.put(4, "v4", 70)  # over 100 bytes: evicts until it fits
        assert c.nbytes() <= 100 and c.get(4) == "v4"
        assert c.put(5, "huge", 101) == "huge" and c.get(5) is None  # never kept
        held = c.nbytes()
        assert caches.clear("test-backend") == held
        assert c.nbytes() == 0 and len(c) == 0 and caches.held_bytes("test-backend") == 0
    finally:
        caches._registry.pop("test-backend", None)


def _spectral_forward(device: str, grid: int, modes: int) -> None:
    import torchlean as tl
    from torchlean import nn

    layer = nn.SpectralConv1dChannelsLast(4, 4, modes, device=device)
    with tl.no_grad():
        layer(tl.ones(2, grid, 4, device=device))


def test_spectral_basis_cache_is_counted_and_collected(device, monkeypatch):
    from torchlean.kernels.cpu import spectral as cpu_spectral

    monkeypatch.setattr(cpu_spectral, "CONV_ROUTE", "dft")
    if device == "cuda":
        from torchlean.kernels.cuda import spectral as cuda_spectral

        monkeypatch.setattr(cuda_spectral, "CONV_ROUTE", "dft")
    grid, modes = 512, 24
    basis = 2 * (2 * modes * grid * 4)  # Bf and Bi, float32
    collect_allocator(True)
    before = allocator_stats(device).cached_bytes
    assert before < basis and (device != "cpu" or before == 0)
    _spectral_forward(device, grid, modes)
    held = allocator_stats(device).cached_bytes
    assert held >= basis  # the kept basis is visible (it used to be reported as 0 bytes)
    assert collect_allocator(True) >= basis
    after = allocator_stats(device).cached_bytes
    assert after < basis and (device != "cpu" or after == 0)


def test_spectral_basis_cache_is_bounded_by_bytes(monkeypatch):
    from torchlean.kernels.cpu import spectral

    collect_allocator(True)
    monkeypatch.setattr(spectral._basis_cache, "max_bytes", 1 << 20)
    for grid in (1024, 2048, 4096):  # 256 KiB, 512 KiB and 1 MiB of bases (Bf and Bi) at 16 modes
        spectral._bases(grid, 16)
        assert spectral._basis_cache.nbytes() <= 1 << 20
    assert spectral._basis_cache.get((4096, 16)) is not None  # the newest stays
    assert spectral._basis_cache.get((1024, 16)) is None  # the oldest made room
    collect_allocator(True)


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
    for field in ("live_bytes", "peak_bytes", "alloc_count", "free_count", "device_free_bytes", "device_total_bytes",
                  "host_free_bytes", "host_total_bytes"):
        assert isinstance(getattr(s, field), int) and getattr(s, field) >= 0, field
    assert s.alloc_count >= s.free_count
    assert s.device_free_bytes <= s.device_total_bytes
    assert 0 < s.host_free_bytes <= s.host_total_bytes  # host memory is known on Linux
    line = format_allocator_stats(s)
    if device == "cpu":  # the seed's CPU stub: no device memory; host memory under its own name
        assert s.device_free_bytes == s.device_total_bytes == 0
        assert "device free" not in line and "host free" in line
    else:
        assert s.device_total_bytes > 0 and "device free" in line


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


@pytest.mark.cuda
def test_cuda_caches_are_counted_and_emptied_by_a_forced_collect(cuda_device):
    from torchlean.kernels import caches
    from torchlean.kernels.cuda import staging

    k = 3 << 20  # 12 MiB of uint32 indices: more than a pinned staging slot may grow to
    vec = Buffer.from_numpy(np.arange(16, dtype=F32), cuda_device)
    idx = np.arange(k, dtype=np.int64) % 16
    got = P.gather_vec(vec, 16, idx, k).to_numpy()
    assert np.array_equal(got, (idx % 16).astype(F32))
    P.gather_vec(vec, 16, idx[:1000], 1000)  # a small upload: kept, and staged through a slot
    _spectral_forward(cuda_device, 256, 8)
    slots = [s for ring in staging._stages.values() for s in ring.slots if s is not None]
    assert slots and max(s.cap for s in slots) <= staging._F32_MAX  # big uploads no longer grow a slot
    held = caches.held_bytes("cuda")
    assert held > 0 and allocator_stats(cuda_device).cached_bytes >= caches.held_bytes("cuda", 0)
    assert collect_allocator(True) >= held
    assert caches.held_bytes("cuda") == 0
    assert not staging._stages and not staging._recent
