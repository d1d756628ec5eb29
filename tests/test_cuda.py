"""What only a GPU can show: CPU/CUDA training parity, a 10,000-step leak test, out-of-memory
recovery, fast-mode atomics, kernel caching and device selection. Every test here but the TF32
switch carries the ``cuda`` marker and is skipped, with the reason, where CUDA is unavailable.
"""

from __future__ import annotations

import numpy as np
import pytest

import torchlean as tl
from torchlean.errors import ArgumentError, BufferReleasedError, DeviceError, OutOfMemoryError
from torchlean.runtime import (Buffer, allocator_stats, collect_allocator, deterministic, set_allow_tf32,
                               allow_tf32, zeros)
from torchlean.runtime import primitives as P
from torchlean.testing.training import tanh_mlp_sgd_step

F32 = np.float32
cuda = pytest.mark.cuda


def _mlp_losses(device: str, steps: int, seed: int = 3) -> list[float]:
    """Full-batch SGD on a 2-layer tanh MLP through the front end; identical inputs on every device."""
    rng = np.random.default_rng(seed)
    x_np = rng.uniform(-2, 2, (256, 8)).astype(F32)
    y_np = np.sin(x_np.sum(axis=1, keepdims=True)).astype(F32)
    init = [rng.normal(0, 0.4, s).astype(F32) for s in ((32, 8), (32,), (1, 32), (1,))]
    x, y = tl.tensor(x_np, device=device), tl.tensor(y_np, device=device)
    params = [tl.tensor(p, device=device, requires_grad=True) for p in init]
    losses = [tanh_mlp_sgd_step(x, y, params, 0.1).item() for _ in range(steps)]
    return losses


@cuda
def test_mlp_loss_curve_matches_cpu(cuda_device):
    cpu, gpu = _mlp_losses("cpu", 60), _mlp_losses(cuda_device, 60)
    assert cpu[-1] < 0.5 * cpu[0], "the MLP did not train"
    # Each step's ops meet their contracts on both devices; the curves then agree to float32
    # accumulation noise that 60 steps of SGD amplify only mildly.
    np.testing.assert_allclose(gpu, cpu, rtol=2e-5, atol=1e-7)


@cuda
def test_10000_steps_keep_live_bytes_flat(cuda_device):
    collect_allocator()
    start = allocator_stats(cuda_device)
    rng = np.random.default_rng(0)
    x = tl.tensor(rng.normal(size=(32, 16)).astype(F32), device=cuda_device)
    y = tl.tensor(rng.normal(size=(32, 1)).astype(F32), device=cuda_device)
    params = [tl.tensor(rng.normal(0, 0.3, s).astype(F32), device=cuda_device, requires_grad=True)
              for s in ((16, 16), (16,), (1, 16), (1,))]
    live = []
    for step in range(10_000):
        tanh_mlp_sgd_step(x, y, params, 0.01)
        if step in (9, 99, 999, 9_999):
            live.append(allocator_stats(cuda_device).live_bytes)
    assert live[1:] == live[:1] * 3, f"live bytes grew over the run: {live} (steps 10, 100, 1000, 10000)"
    del x, y, params
    collect_allocator()
    end = allocator_stats(cuda_device)
    assert end.live_bytes == start.live_bytes
    assert end.alloc_count - start.alloc_count == end.free_count - start.free_count


@cuda
def test_out_of_memory_is_clear_and_recoverable(cuda_device):
    held = []
    n = 2**32 - 1  # the largest buffer (16 GiB): a few exhaust any GPU
    with pytest.raises(OutOfMemoryError) as info:
        for _ in range(64):
            held.append(zeros(n, cuda_device))
    msg = str(info.value)
    for part in ("zeros", cuda_device if ":" in cuda_device else "cuda:0", "requested", "live", "peak", "device free"):
        assert part in msg, f"{part!r} missing from: {msg}"
    assert len(held) >= 1
    for b in held:
        b.release()
    collect_allocator(True)
    x = Buffer.from_numpy(np.arange(5, dtype=F32), cuda_device)
    assert P.reduce_sum(x).to_numpy()[0] == 10.0  # the process stays usable


@cuda
def test_release_frees_at_once_and_blocks_reuse(cuda_device):
    b = Buffer.from_numpy(np.ones(1 << 20, F32), cuda_device)
    live = allocator_stats(cuda_device).live_bytes
    assert b.release() is True and not b.release()
    assert allocator_stats(cuda_device).live_bytes == live - 4 * (1 << 20)
    assert allocator_stats(cuda_device).cached_bytes >= 4 * (1 << 20)  # kept for reuse
    with pytest.raises(BufferReleasedError):
        P.add(b, b)
    assert collect_allocator(True) >= 4 * (1 << 20)  # handed back to the driver
    assert allocator_stats(cuda_device).cached_bytes < 4 * (1 << 20)  # (a chunk split with live blocks stays)


@cuda
def test_fast_scatter_add_meets_contract_and_deterministic_is_bitwise(cuda_device):
    k = 65_536
    vals = np.random.default_rng(1).normal(size=k).astype(F32)
    idx = np.zeros(k, np.int64)
    x, v = zeros(1, cuda_device), Buffer.from_numpy(vals, cuda_device)
    ref = float(np.sum(vals.astype(np.float64)))
    bound = k * 2.0**-24 * float(np.abs(vals).sum())
    for on in (False, True):
        with deterministic(on):
            outs = {float(P.scatter_add(x, v, 1, idx, k).to_numpy()[0]) for _ in range(100)}
        assert all(abs(o - ref) <= bound for o in outs)
        if on:
            assert len(outs) == 1
        print(f"scatter_add 65536 -> 1 slot, 100 runs, deterministic={on}: {len(outs)} distinct results")


@cuda
def test_kernels_are_compiled_once(cuda_device):
    from torchlean.kernels.cuda import launch as kernels

    P.add(zeros(4, cuda_device), zeros(4, cuda_device))
    assert kernels.kernel("elementwise.cu", "tl_add") is kernels.kernel("elementwise.cu", "tl_add")
    assert kernels.module(0, "elementwise.cu") is kernels.module(0, "elementwise.cu")
    assert list(kernels._cache_dir().glob("elementwise-sm*.cubin")), "compiled cubin not cached on disk"


@cuda
def test_missing_device_index_is_a_clear_error(cuda_device):
    import cupy

    count = cupy.cuda.runtime.getDeviceCount()
    with pytest.raises(DeviceError, match=f"cuda:{count}.*{count} device"):
        zeros(1, f"cuda:{count}")


@cuda
def test_tf32_changes_only_on_request(cuda_device):
    rng = np.random.default_rng(0)
    a = Buffer.from_numpy(rng.normal(size=256 * 256).astype(F32), cuda_device)
    b = Buffer.from_numpy(rng.normal(size=256 * 256).astype(F32), cuda_device)
    exact = (a.to_numpy().reshape(256, 256).astype(np.float64) @ b.to_numpy().reshape(256, 256)).reshape(-1)
    off = P.bmm(a, b, 1, 256, 256, 256).to_numpy()
    prev = allow_tf32()  # (set_allow_tf32 returns the value now in force, not the previous one)
    set_allow_tf32(True)
    try:
        on = P.bmm(a, b, 1, 256, 256, 256).to_numpy()
    finally:
        set_allow_tf32(prev)
    err_off, err_on = np.abs(off - exact).max(), np.abs(on - exact).max()
    assert err_off < 1e-3 < err_on, (err_off, err_on)  # TF32 keeps 10 mantissa bits: ~1e-2 here


def test_tf32_switch_is_checked():
    assert allow_tf32() is False  # off unless the user opts in
    assert set_allow_tf32(True) is True and allow_tf32() is True
    assert set_allow_tf32(False) is False
    with pytest.raises(ArgumentError, match="set_allow_tf32"):
        set_allow_tf32("yes")


@cuda
def test_index_uploads_are_exact_reused_and_snapshots(cuda_device):
    from torchlean.kernels.cuda import staging

    rng = np.random.default_rng(4)
    for n in (1, 7, 1024, 1025, 70000):  # the ring's slots grow past 1024; above _MAX_RECENT nothing is kept
        host = rng.integers(0, 2**32, n, dtype=np.int64)
        dev = staging.upload_u32(host)
        assert dev.dtype == np.uint32 and np.array_equal(dev.get(), host.astype(np.uint32))
    idx = rng.integers(0, 50, 300, dtype=np.int64)
    a = staging.upload_u32(idx)
    assert staging.upload_u32(idx.copy()) is a  # the same values: the device copy is reused
    idx[5] = 49 - idx[5]  # a changed array is uploaded again; the first upload keeps its values
    b = staging.upload_u32(idx)
    assert b is not a and np.array_equal(b.get(), idx.astype(np.uint32))
    assert a.get()[5] == 49 - idx[5]
    assert staging.upload_u32(np.zeros(0, np.int64)).size == 0
    table = rng.integers(-2**62, 2**62, 5000, dtype=np.int64)  # pointer tables: int64, never kept
    t = staging.upload_i64(table)
    assert t.dtype == np.int64 and np.array_equal(t.get(), table)
    # an upload evicted from the recent list goes back to the free list, unless someone holds it
    held = staging.upload_u32(np.arange(10))
    ptrs = [staging.upload_u32(np.arange(10) + 1000 + k).data.ptr for k in range(12)]
    assert len(set(ptrs)) < len(ptrs)  # dropped, evicted uploads were reused
    assert held.data.ptr not in ptrs and np.array_equal(held.get(), np.arange(10))


@cuda
def test_float_uploads_through_pinned_slots_are_exact_and_snapshots(cuda_device):
    """Buffer.from_numpy stages float32 data through the pinned ring (up to _F32_MAX bytes, cupy.asarray
    above): every value arrives, including -0, NaN and inf bits, across more uploads than slots, and
    the host array may change as soon as the call returns."""
    from torchlean.kernels.cuda import staging

    rng = np.random.default_rng(6)
    sizes = [1, 5, 1000, 100_003, staging._F32_MAX // 4, staging._F32_MAX // 4 + 1]
    held = []
    for k in range(3 * staging._NSTAGE):
        n = sizes[k % len(sizes)]
        host = rng.standard_normal(n).astype(F32)
        host[: min(n, 3)] = np.array([-0.0, np.nan, np.inf], F32)[: min(n, 3)]
        want = host.copy()
        buf = Buffer.from_numpy(host, cuda_device)
        host[:] = 7.0  # the upload already owns its values
        held.append((buf, want))
    for buf, want in held:
        assert np.array_equal(buf.to_numpy().view(np.uint32), want.view(np.uint32))
    assert Buffer.from_numpy(np.zeros(0, F32), cuda_device).size == 0


def _check_table_reuse(monkeypatch, call, gs, written, draw):
    """The pointer-table cache of a multi-tensor step: ``call(in_place, g)`` runs its out-of-place
    or in-place primitive with gradients g; ``written`` are the buffers the in-place one writes.
    Two out-of-place calls build two tables (new outputs); in place, with gradients alternating
    between two sets of arrays (a training loop's free list, ``draw()`` makes one), a table per
    set, then none, and every step computes what the out-of-place primitive computes."""
    from torchlean.kernels.cuda import optim as cuda_optim

    built = []
    table = cuda_optim._table
    monkeypatch.setattr(cuda_optim, "_table", lambda *a: built.append(1) or table(*a))
    ref = call(False, gs)
    again = call(False, gs)  # new outputs: a new table
    for x, y in zip(ref, again):
        np.testing.assert_array_equal(x.to_numpy(), y.to_numpy())
    assert len(built) == 2
    ga, gb = draw(), draw()
    inplace_built = []
    for k in range(6):
        g = (ga, gb)[k % 2]
        want = call(False, g)
        n0 = len(built)
        call(True, g)
        inplace_built.append(len(built) - n0)
        for got, w in zip(written, want):
            np.testing.assert_array_equal(got.to_numpy().view(np.uint32), w.to_numpy().view(np.uint32))
    assert inplace_built == [1, 1, 0, 0, 0, 0]


@cuda
def test_adam_pointer_table_is_reused_only_when_unchanged(cuda_device, monkeypatch):
    from torchlean.kernels.cuda import optim as cuda_optim

    rng = np.random.default_rng(5)
    sizes = (5, 64, 3)

    def bufs(abs_=False):
        return [Buffer.from_numpy((np.abs if abs_ else np.asarray)(rng.normal(size=n)).astype(F32), cuda_device)
                for n in sizes]

    ps, gs, ms, vs = bufs(), bufs(), bufs(), bufs(True)
    coef = (1e-3, 0.9, 0.999, 1e-8, 0.0, 2, False)  # lr, beta1, beta2, eps, weight_decay, step, decoupled
    _check_table_reuse(monkeypatch, lambda in_place, g: (P.adam_step_many_inplace if in_place else P.adam_step_many)(
        ps, g, ms, vs, *coef), gs, (*ps, *ms, *vs), bufs)
    # bounded: the oldest tables go (back to the free list)
    for _ in range(cuda_optim._TABLES_KEPT + 3):
        P.adam_step_many_inplace(ps, bufs(), ms, vs, *coef)
    assert all(len(kept) <= cuda_optim._TABLES_KEPT for kept in cuda_optim._tables.values())


@cuda
def test_sgd_pointer_table_is_reused_only_when_unchanged(cuda_device, monkeypatch):
    # tl_sgd_step_many shares adam's table cache (5 pointer rows instead of 7)
    rng = np.random.default_rng(6)
    sizes = (5, 64, 3)

    def bufs():
        return [Buffer.from_numpy(rng.normal(size=n).astype(F32), cuda_device) for n in sizes]

    ps, gs, bs = bufs(), bufs(), bufs()
    coef = (0.1, 0.9, 0.0, 0.01, True, False)  # lr, momentum, dampening, weight_decay, nesterov, first
    _check_table_reuse(monkeypatch, lambda in_place, g: (P.sgd_step_many_inplace if in_place else P.sgd_step_many)(
        ps, g, bs, *coef), gs, (*ps, *bs), bufs)
    # plain SGD in place (no buffers kept): p alone is written, the gradients are untouched
    plain = (0.1, 0.0, 0.0, 0.01, False, True)
    want = P.sgd_step_many(ps, gs, None, *plain)
    g_before = [g.to_numpy() for g in gs]
    assert P.sgd_step_many_inplace(ps, gs, None, *plain) == tuple(ps)
    for got, w in zip(ps, want):
        np.testing.assert_array_equal(got.to_numpy().view(np.uint32), w.to_numpy().view(np.uint32))
    for g, before in zip(gs, g_before):
        np.testing.assert_array_equal(g.to_numpy().view(np.uint32), before.view(np.uint32))
