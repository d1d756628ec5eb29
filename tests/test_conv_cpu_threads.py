"""The CPU convolutions on Numba's real threads: the bits do not depend on the thread count at CNN
sizes (a DCGAN-like strided 4x4 layer, a ResNet-like 3x3 one, a transposed conv), and the 2-D
layouts (blocks of images x tiles of rows: the conv's, the input gradient's, the weight gradient's)
follow from the sizes alone."""

from __future__ import annotations

import math
import sys

import numba
import numpy as np
import pytest

import torchlean.kernels.cpu  # noqa: F401  (the backend's modules, by name below)
from torchlean.kernels import cpu as cpu_backend
from torchlean.kernels.plans import conv_plan_of, conv_transpose_plan_of
from torchlean.testing.primitive_table import TABLE, run_case

CPU_CONV = sys.modules["torchlean.kernels.cpu.conv"]
CPU_PARALLEL = sys.modules["torchlean.kernels.cpu.parallel"]
F32 = np.float32

# (batch, in_c, out_c, spatial, kernel, stride, padding): DCGAN's discriminator layers (4x4, stride
# 2, padding 1; a small output plane, the weight gradient's hardest case) and ResNet's 3x3 layers
# (stride 1 and 2), at reduced batch and channels so that the test stays quick
_GEOMS = [
    (16, 32, 48, (8, 8), (4, 4), (2, 2), (1, 1)),
    (8, 3, 16, (32, 32), (4, 4), (2, 2), (1, 1)),
    (12, 16, 16, (16, 16), (3, 3), (1, 1), (1, 1)),
    (12, 32, 64, (8, 8), (3, 3), (2, 2), (1, 1)),
    (24, 64, 64, (4, 4), (3, 3), (1, 1), (1, 1)),
]


def _threads_available():
    if CPU_PARALLEL.max_threads() < 2:
        pytest.skip("Numba runs one thread here (NUMBA_NUM_THREADS=1 or the workqueue layer)")


def _run_all(dims, x, w, b, dy, tw, tb):
    plan = conv_plan_of(*dims)
    n, ci, co, sp, kn, st, pd = dims
    tplan = conv_transpose_plan_of(n, co, ci, plan.out, kn, st, pd, tuple(0 for _ in st))
    return [cpu_backend.conv(x, w, b, plan), cpu_backend.conv_bwd_input(dy, w, plan),
            cpu_backend.conv_bwd_weight(x, dy, plan), cpu_backend.conv_transpose(dy, w, tb, tplan)]


def _case(rng, dims):
    n, ci, co, sp, kn, st, pd = dims
    out = tuple((s + 2 * p - k) // t + 1 for s, k, t, p in zip(sp, kn, st, pd))
    x = rng.standard_normal(n * ci * math.prod(sp)).astype(F32)
    w = rng.standard_normal(co * ci * math.prod(kn)).astype(F32)
    dy = rng.standard_normal(n * co * math.prod(out)).astype(F32)
    return x, w, rng.standard_normal(co).astype(F32), dy, None, rng.standard_normal(ci).astype(F32)


@pytest.mark.parametrize("dims", _GEOMS)
def test_one_and_two_threads_give_the_same_bits(monkeypatch, dims):
    """conv, conv_bwd_input, conv_bwd_weight and conv_transpose with numba.set_num_threads(1) and 2:
    bit for bit. The region thresholds are lowered so that these small layers really split."""
    _threads_available()
    monkeypatch.setattr(CPU_CONV, "_PART_MACS", 1)
    monkeypatch.setattr(CPU_CONV, "_ND_PART_MACS", 1)
    args = _case(np.random.default_rng(sum(dims[3]) + dims[1]), dims)
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = _run_all(dims, *args)
        numba.set_num_threads(2)
        two = _run_all(dims, *args)
    finally:
        numba.set_num_threads(before)
    for name, a, e in zip(("conv", "conv_bwd_input", "conv_bwd_weight", "conv_transpose"), two, one):
        assert a.tobytes() == e.tobytes(), f"{name} {dims}: 2 threads differ from 1"


@pytest.mark.parametrize("dims", [_GEOMS[0], _GEOMS[2], _GEOMS[4]])
def test_weight_gradient_rounds_continue_one_chain(monkeypatch, dims):
    """Partial sums reduced in rounds (one block per round, or a few) give the bits of one round:
    each element is one left-to-right chain over the blocks. And it meets the contract."""
    n, ci, co, sp, kn, st, pd = dims
    monkeypatch.setattr(CPU_CONV, "_DW_BLOCK_COLS", 1)  # one image per block: as many partials as images
    x, _, _, dy, _, _ = _case(np.random.default_rng(7), dims)
    plan = conv_plan_of(*dims)
    whole = cpu_backend.conv_bwd_weight(x, dy, plan)
    for per_round in (1, 3):
        monkeypatch.setattr(CPU_CONV, "_DW_PARTIAL_BYTES", per_round * 4 * ci * math.prod(kn) * co)
        assert cpu_backend.conv_bwd_weight(x, dy, plan).tobytes() == whole.tobytes(), f"rounds of {per_round}"
    verdict = run_case(TABLE["conv_bwd_weight"], [x, dy] + list(dims), "cpu")[0]
    assert verdict.ok, verdict.detail


# one block of the whole batch and 128+ output channels: the items' GEMMs write dW themselves
_DIRECT_GEOMS = [(16, 24, 128, (8, 8), (4, 4), (2, 2), (1, 1)), (8, 32, 160, (4, 4), (3, 3), (1, 1), (1, 1))]


@pytest.mark.parametrize("dims", _DIRECT_GEOMS)
def test_weight_gradient_of_one_block_written_directly(monkeypatch, dims):
    """Where the batch is one block and out_c >= _DW_DIRECT_MIN_O no partial sums are made (the
    items' sgemm writes its columns of dW): the same bits on 1 and 2 threads and on the np.matmul
    path (an inf among the inputs included), and the table's cases at these sizes within the
    contract."""
    n, ci, co, sp, kn, st, pd = dims
    plan = conv_plan_of(*dims)
    g, n_blocks, n_tiles, _ = CPU_CONV._dw_layout(n, ci, math.prod(kn), math.prod(plan.out), co)
    assert n_blocks == 1 and n_tiles > 1 and co >= CPU_CONV._DW_DIRECT_MIN_O
    x, _, _, dy, _, _ = _case(np.random.default_rng(5), dims)
    x[7] = np.inf
    made = []
    real_empty = CPU_CONV.np.empty
    monkeypatch.setattr(CPU_CONV.np, "empty", lambda shape, *a, **k: made.append(shape) or real_empty(shape, *a, **k))
    got = cpu_backend.conv_bwd_weight(x, dy, plan)
    monkeypatch.undo()
    assert (1, co * ci * math.prod(kn)) not in made and all(
        not (isinstance(m, tuple) and len(m) == 2 and m[1] == co * ci * math.prod(kn)) for m in made), made
    with monkeypatch.context() as m:
        m.setattr(CPU_PARALLEL, "sgemm_address", lambda: None)
        assert cpu_backend.conv_bwd_weight(x, dy, plan).tobytes() == got.tobytes()
    if CPU_PARALLEL.max_threads() >= 2:
        with monkeypatch.context() as m:
            m.setattr(CPU_PARALLEL, "threads", lambda: 1)
            m.setattr(CPU_CONV, "_PART_MACS", 1)
            assert cpu_backend.conv_bwd_weight(x, dy, plan).tobytes() == got.tobytes()
    verdict = run_case(TABLE["conv_bwd_weight"], [x, dy] + list(dims), "cpu")[0]
    assert verdict.ok, verdict.detail


def test_weight_gradient_layout_follows_the_sizes_and_feeds_many_threads(monkeypatch):
    """At DCGAN's and ResNet-18's sizes the weight gradient has items for 16+ threads and few
    partial sums (long GEMMs), and the layout is the same whatever parallel.threads() says."""
    # (batch, in_c, K, P, out_c): DCGAN's 256->512 and 64->128 layers, ResNet's 512@4x4 and 64@32x32
    sizes = [(64, 256, 16, 16, 512), (64, 64, 16, 256, 128), (128, 512, 9, 16, 512), (128, 64, 9, 1024, 64)]
    layouts = {}
    for threads in (1, 2, 16):
        monkeypatch.setattr(CPU_PARALLEL, "threads", lambda t=threads: t)
        layouts[threads] = [CPU_CONV._dw_layout(*size) for size in sizes]
    assert layouts[1] == layouts[2] == layouts[16]
    for (batch, _, _, p_n, _), (g, n_blocks, n_tiles, _) in zip(sizes, layouts[1]):
        assert n_blocks * n_tiles >= 16 and g * p_n >= 1024 and n_blocks == -(-batch // g)
    g, n_blocks, n_tiles, _ = layouts[1][0]  # DCGAN's 256->512 layer: one block of the whole batch
    assert (g, n_blocks) == (64, 1) and n_tiles >= 16


# (batch, in_c, out_c, spatial, kernel, stride, padding): a DCGAN-like 4x4 stride-2 layer onto a 4x4
# plane and a ResNet-like 3x3 layer at 4x4, sized so that the conv and the input gradient make
# several blocks of images and several tiles of rows (with the tile minimums lowered below)
_BLOCK_GEOMS = [
    (32, 64, 128, (8, 8), (4, 4), (2, 2), (1, 1)),
    (20, 64, 96, (4, 4), (3, 3), (1, 1), (1, 1)),
]


@pytest.mark.parametrize("dims", _BLOCK_GEOMS)
def test_conv_and_input_gradient_blocks_give_the_same_bits_on_1_and_2_threads(monkeypatch, dims):
    """conv, conv_bwd_input and conv_transpose in blocks x tiles (every item its own GEMM), split into
    as many parts as there are items: 1 and 2 Numba threads (and 16 parts dealt to them) give the
    bits of the serial run, and the layout really has several blocks and tiles."""
    _threads_available()
    monkeypatch.setattr(CPU_CONV, "_PART_MACS", 1)
    monkeypatch.setattr(CPU_CONV, "_FW_TILE_ROWS", 32)
    n, ci, co, sp, kn, st, pd = dims
    out = tuple((s + 2 * p - k) // t + 1 for s, k, t, p in zip(sp, kn, st, pd))
    p_n, k_n = math.prod(out), math.prod(kn)
    g, n_blocks, tile, n_tiles = CPU_CONV._fw_layout(n, p_n, co)
    assert n_blocks > 1 and n_tiles > 1 and g * p_n >= CPU_CONV._BLOCK_COLS and tile % 16 == 0
    g, n_blocks, n_tiles = CPU_CONV._dx_layout(n, ci, k_n, p_n)
    assert n_blocks > 1 and n_tiles > 1
    args = _case(np.random.default_rng(sum(dims[3]) + dims[2]), dims)
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = _run_all(dims, *args)
        numba.set_num_threads(2)
        two = _run_all(dims, *args)
        with monkeypatch.context() as m:
            m.setattr(CPU_PARALLEL, "threads", lambda: 16)
            sixteen = _run_all(dims, *args)
        with monkeypatch.context() as m:  # the same items through np.matmul on the calling thread
            m.setattr(CPU_PARALLEL, "sgemm_address", lambda: None)
            numpy_items = _run_all(dims, *args)
    finally:
        numba.set_num_threads(before)
    names = ("conv", "conv_bwd_input", "conv_bwd_weight", "conv_transpose")
    for name, a, b, c, e in zip(names, two, sixteen, numpy_items, one):
        assert a.tobytes() == e.tobytes(), f"{name} {dims}: 2 threads differ from 1"
        assert b.tobytes() == e.tobytes(), f"{name} {dims}: 16 parts differ from 1"
        assert c.tobytes() == e.tobytes(), f"{name} {dims}: np.matmul's items differ from cblas_sgemm's"
    x, w, b, dy = args[:4]
    for name, args_ in (("conv", [x, w, b] + list(dims)), ("conv_bwd_input", [dy, w] + list(dims))):
        verdict = run_case(TABLE[name], args_, "cpu")[0]
        assert verdict.ok, f"{name} {dims}: {verdict.detail}"


def test_conv_and_input_gradient_layouts_follow_the_sizes_and_feed_many_threads(monkeypatch):
    """At ResNet-18's and DCGAN's small planes the conv and the input gradient have items for 16
    threads, blocks of at least _BLOCK_COLS columns (one GEMM packs the weight for many images), tiles
    of the conv's output channels at multiples of 16 rows, and the same layout whatever
    parallel.threads() says."""
    # (batch, in_c, K, P, out_c): ResNet's 512@4x4 (batch 32 and 128) and 256@8x8, DCGAN's 256->512
    # and 128->256 layers, the generator's 512->256 transposed conv (its adjoint: 256 <- 512 at 4x4)
    sizes = [(32, 512, 9, 16, 512), (128, 512, 9, 16, 512), (32, 256, 9, 64, 256), (64, 256, 16, 16, 512),
             (64, 128, 16, 64, 256), (64, 256, 16, 16, 512)]
    layouts = {}
    for threads in (1, 2, 16):
        monkeypatch.setattr(CPU_PARALLEL, "threads", lambda t=threads: t)
        layouts[threads] = [(CPU_CONV._fw_layout(b, p, o), CPU_CONV._dx_layout(b, c, k, p)) for b, c, k, p, o in sizes]
    assert layouts[1] == layouts[2] == layouts[16]
    for (batch, _, _, p_n, out_c), ((g, n_blocks, tile, n_tiles), (g2, n_blocks2, n_tiles2)) in zip(sizes, layouts[1]):
        assert n_blocks * n_tiles >= 16 and n_blocks2 * n_tiles2 >= 16
        assert g * p_n >= CPU_CONV._BLOCK_COLS and g > 1 and n_blocks == -(-batch // g)
        assert (g2, n_blocks2) == (g, n_blocks)
        assert tile % 16 == 0 and (n_tiles - 1) * tile < out_c <= n_tiles * tile


def test_transposed_conv_from_one_pixel_takes_the_blocks(monkeypatch):
    """A transposed conv from a 1x1 input (DCGAN's first generator layer: its adjoint conv has one
    output position) runs the input gradient's blocks (images as GEMM columns), not the per-phase
    convs: it meets the contracts and gives the same bits on 1 and 2 threads."""
    _threads_available()
    if CPU_PARALLEL.sgemm_address() is None:
        pytest.skip("no cblas_sgemm from Numba here (another BLAS, or Numba's workqueue layer)")
    dims = (24, 40, 32, (4, 4), (4, 4), (1, 1), (0, 0))  # the adjoint conv: 40 channels at 4x4 <- 32 at 1x1
    n, ci, co, sp, kn, st, pd = dims
    assert CPU_CONV._blocked_dx(n, ci, co, sp, kn, (1, 1))
    calls = []
    real_run = CPU_CONV.tasks.run
    dx_tasks = {id(t) for t in CPU_CONV._DX_TASKS}
    monkeypatch.setattr(CPU_CONV.tasks, "run",
                        lambda task, args, t: (calls.append(id(task) in dx_tasks), real_run(task, args, t))[1])
    monkeypatch.setattr(CPU_CONV, "_PART_MACS", 1)
    x, w, b, dy, tw, tb = _case(np.random.default_rng(5), dims)
    tplan = conv_transpose_plan_of(n, co, ci, (1, 1), kn, st, pd, (0, 0))
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = [cpu_backend.conv_bwd_input(dy, w, conv_plan_of(*dims)), cpu_backend.conv_transpose(dy, w, tb, tplan)]
        numba.set_num_threads(2)
        two = [cpu_backend.conv_bwd_input(dy, w, conv_plan_of(*dims)), cpu_backend.conv_transpose(dy, w, tb, tplan)]
    finally:
        numba.set_num_threads(before)
    assert calls == [True] * 4  # the input gradient's blocks, each time
    assert [a.tobytes() for a in two] == [a.tobytes() for a in one]
    for name, args in (("conv_bwd_input", [dy, w] + list(dims)),
                       ("conv_transpose", [dy, w, tb, n, co, ci, (1, 1), kn, st, pd, (0, 0)])):
        verdict = run_case(TABLE[name], args, "cpu")[0]
        assert verdict.ok, f"{name}: {verdict.detail}"


@pytest.mark.parametrize("dims", [(20, 32, 32, (47, 47), (1, 1), (1, 1), (0, 0)),   # FNO2d's w0..w3, scaled
                                  (3, 5, 7, (6, 5, 4), (1, 1, 1), (1, 1, 1), (0, 0, 0)),
                                  (1, 1, 4, (300,), (1,), (1,), (0,)),
                                  (2, 64, 1, (9, 9), (1, 1), (1, 1), (0, 0))])
def test_pointwise_convs_are_batched_gemms_within_the_contract(dims):
    """1x1 (any rank), stride 1, no padding: the pointwise route (one GEMM per image with the weight
    shared, the weight gradient summed in image order) against the float64 spec, same bits on 1 and 2
    threads, non-finite inputs propagating as the spec's do."""
    assert CPU_CONV._pointwise(conv_plan_of(*dims))
    rng = np.random.default_rng(sum(dims[:3]))
    x, w, b, dy, _, _ = _case(rng, dims)
    x[3], w[-1] = np.inf, np.nan  # an inf input and a NaN weight: the spec's sums carry them
    plan = conv_plan_of(*dims)
    outs = []
    old = numba.get_num_threads()
    try:
        for t in ((1, 2) if CPU_PARALLEL.max_threads() >= 2 else (1,)):
            numba.set_num_threads(t)
            outs.append([cpu_backend.conv(x, w, b, plan), cpu_backend.conv_bwd_input(dy, w, plan),
                         cpu_backend.conv_bwd_weight(x, dy, plan)])
    finally:
        numba.set_num_threads(old)
    for a, c in zip(outs[0], outs[-1]):
        assert np.array_equal(a.view(np.uint32), c.view(np.uint32))
    n, ci, co, sp = dims[:4]
    p = math.prod(sp)
    x3, g3, w2 = (x.astype(np.float64).reshape(n, ci, p), dy.astype(np.float64).reshape(n, co, p),
                  w.astype(np.float64).reshape(co, ci))
    with np.errstate(all="ignore"):
        refs = [(np.einsum("oc,ncp->nop", w2, x3) + b.astype(np.float64)[:, None]).reshape(-1),
                np.einsum("oc,nop->ncp", w2, g3).reshape(-1), np.einsum("nop,ncp->oc", g3, x3).reshape(-1)]
    for got, ref in zip(outs[0], refs):
        assert np.array_equal(np.isnan(got), np.isnan(ref)) and np.array_equal(np.isinf(got), np.isinf(ref))
        fin = np.isfinite(ref)
        scale = np.abs(ref[fin]).max() if fin.any() else 1.0
        np.testing.assert_allclose(got[fin], ref[fin], rtol=0, atol=1e-5 * scale)
