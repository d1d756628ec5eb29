"""The CPU layout moves split over Numba's threads (kernels/cpu/layout.py, parallel.parts): axis
swaps and permutations, concat1d and broadcast_to's repeat loop give NumPy's bits (NaN payloads,
-0.0, infinities included) on 1 and 2 threads, on any part count, below and above the split
threshold; large calls start a parallel region, small ones do not."""

from __future__ import annotations

import numba
import numpy as np
import pytest

from torchlean.kernels.cpu import layout as L
from torchlean.kernels.cpu import parallel as PAR

F32 = np.float32
N_SMALL = 2 * L.MIN_WORK - 128  # the largest call of (.., 2, 64) blocks below the threshold
N_LARGE = 2 * L.MIN_WORK + 128 * 3  # just above, in (.., 2, 64) and (3, .., 64) blocks


def _bits(a):
    return np.asarray(a).view(np.uint32)


def _edge(n, seed):
    """Random floats with ~5% specials (+-0.0, +-inf, subnormals) and ~2% NaNs of random sign and payload."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * 10).astype(F32)
    m = rng.random(n) < 0.05
    x[m] = rng.choice(np.array([0.0, -0.0, np.inf, -np.inf, 1e-45, -1e-40], F32), int(m.sum()))
    m = rng.random(n) < 0.02
    payload = rng.integers(1, 1 << 22, int(m.sum()), dtype=np.uint32) | np.uint32(0x7F800000)
    x[m] = (payload | (rng.integers(0, 2, int(m.sum()), dtype=np.uint32) << np.uint32(31))).view(F32)
    return x


@pytest.fixture
def threads():
    saved = numba.get_num_threads()
    yield
    numba.set_num_threads(saved)


SWAPS = [  # dims, depth
    ((32, 256, 6, 64), 1), ((32, 6, 256, 64), 1), ((2, 3, 4, 5), 0), ((2, 3, 4, 5), 2), ((7, 11, 13, 16), 1),
    ((5, 130, 7, 9, 8), 2), ((2, 3, 4, 5), 3), ((3, 0, 4, 64), 1), ((0, 5, 64), 0), ((4, 1, 9, 64), 1),
    ((8, 2048, 2, 1), 1), ((L.MIN_WORK // 64, 2, 64), 0), ((N_SMALL // 128, 2, 64), 0), ((N_LARGE // 128, 2, 64), 0),
    ((3, N_LARGE // 192, 64), 0), ((1, 1, 1), 0), ((9,), 0),
]
PERMS = [  # dims, perm
    ((4, 128, 3, 6, 64), (2, 0, 3, 1, 4)), ((4, 6, 128, 64), (0, 2, 1, 3)), ((2, 3, 4, 5, 6), (4, 3, 2, 1, 0)),
    ((64, 64, 16), (1, 0, 2)), ((3, 5, 7, 8), (2, 0, 1, 3)), ((2, 0, 64), (1, 0, 2)), ((16, 1, 40, 32), (2, 1, 0, 3)),
    ((6, 7, 64), (0, 1, 2)),
]


def _swap_ref(x, dims, depth):
    if depth + 1 >= len(dims):
        return x.copy()
    return np.ascontiguousarray(np.swapaxes(x.reshape(dims), depth, depth + 1)).reshape(-1)


@pytest.mark.parametrize("dims,depth", SWAPS)
def test_swap_bits_on_one_and_two_threads(dims, depth, threads):
    x = _edge(int(np.prod(dims)), sum(dims) + depth)
    want = _bits(_swap_ref(x, dims, depth))
    for t in (1, min(2, PAR.max_threads())):
        numba.set_num_threads(t)
        got = L.swap_adjacent_at_depth(x, dims, depth)
        assert got.dtype == F32 and got.shape == (x.size,)
        assert np.array_equal(_bits(got), want), f"{dims} depth {depth} on {t} threads"


@pytest.mark.parametrize("dims,perm", PERMS)
def test_permute_bits_on_one_and_two_threads(dims, perm, threads):
    x = _edge(int(np.prod(dims)), sum(dims))
    want = _bits(np.ascontiguousarray(x.reshape(dims).transpose(perm)).reshape(-1))
    for t in (1, min(2, PAR.max_threads())):
        numba.set_num_threads(t)
        assert np.array_equal(_bits(L.permute(x, dims, perm)), want), f"{dims} {perm} on {t} threads"


@pytest.mark.parametrize("t", [1, 2, 3, 7, 16, 1000])
def test_split_moves_give_the_same_bits_on_any_part_count(t):
    """The parts a 16-core machine would cut (and more parts than runs: some parts empty)."""
    for dims, perm in PERMS:
        x = _edge(int(np.prod(dims)), 3)
        got = L._permute_split(x, dims, perm, t)
        want = np.ascontiguousarray(x.reshape(dims).transpose(perm)).reshape(-1)
        if got is not None:
            assert np.array_equal(_bits(got), _bits(want)), f"{dims} {perm} on {t} parts"
    for n, m in ((0, 5), (5, 0), (1000, 24), (7, 7)):
        a, b = _edge(n, n), _edge(m, m + 1)
        out = np.empty(n + m, F32)
        L._concat_par(a, b, out, t)
        assert np.array_equal(_bits(out), _bits(np.concatenate([a, b]))), f"concat {n}+{m} on {t} parts"
    x2 = _edge(3 * 40, 4).reshape(3, 40)
    o3 = np.empty((3, 17, 40), F32)
    L._repeat_mid_par(x2, o3, t)
    assert np.array_equal(_bits(o3), _bits(np.broadcast_to(x2[:, None, :], (3, 17, 40))))


@pytest.mark.parametrize("n,m", [(0, 0), (0, N_LARGE), (N_LARGE, 0), (N_SMALL // 2, N_SMALL // 2), (N_LARGE, 1), (3, N_LARGE)])
def test_concat1d_bits(n, m, threads):
    a, b = _edge(n, 1), _edge(m, 2)
    want = _bits(np.concatenate([a, b]))
    for t in (1, min(2, PAR.max_threads())):
        numba.set_num_threads(t)
        assert np.array_equal(_bits(L.concat1d(a, b, n, m)), want), f"{n}+{m} on {t} threads"


@pytest.mark.parametrize("in_dims,out_dims,axis_map", [
    ((384,), (N_LARGE // 384 + 1, 384), (0, 1)), ((384,), (N_SMALL // 384, 384), (0, 1)),
    ((4, 1, 64), (4, N_LARGE // 256, 64), (1, 2, 3)), ((8, 1), (8, N_LARGE), (1, 2)), ((0, 1, 64), (0, 50, 64), (1, 2, 3)),
])
def test_broadcast_to_bits(in_dims, out_dims, axis_map, threads):
    x = _edge(int(np.prod(in_dims)), 5)
    shape = [1 if a == 0 else in_dims[a - 1] for a in axis_map]
    want = _bits(np.ascontiguousarray(np.broadcast_to(x.reshape(shape), out_dims)).reshape(-1))
    for t in (1, min(2, PAR.max_threads())):
        numba.set_num_threads(t)
        assert np.array_equal(_bits(L.broadcast_to(x, in_dims, out_dims, axis_map)), want), f"{out_dims} on {t} threads"


def test_large_moves_split_small_ones_stay_on_numpy(monkeypatch, threads):
    """From 2 * MIN_WORK elements (runs of >= MIN_RUN) swaps, permutes, concat1d and broadcast_to's
    repeat run in parallel.parts() parts; below, or with one-element runs, no region starts."""
    calls = []
    for kernel in ("_runs_par", "_concat_par", "_repeat_mid_par"):
        real = getattr(L, kernel)
        monkeypatch.setattr(L, kernel, lambda *a, _real=real, _k=kernel: (calls.append((_k, a[-1])), _real(*a))[1])
    monkeypatch.setattr(PAR, "threads", lambda: 16)
    small, large = _edge(N_SMALL, 1), _edge(16 * L.MIN_WORK, 2)
    for x in (small, large):
        n = x.size
        L.swap_adjacent_at_depth(x, (n // 128, 2, 64), 0)
        L.permute(x, (2, n // 128, 64), (1, 0, 2))
        L.concat1d(x, x[:64], n, 64)
        L.broadcast_to(x[:64], (64,), (n // 64, 64), (0, 1))
        L.swap_adjacent_at_depth(x, (n // 2, 2), 0)  # one-element runs: NumPy's transpose
        L.transpose2d(x, n // 64, 64)
    assert calls == [("_runs_par", 16), ("_runs_par", 16), ("_concat_par", 16), ("_repeat_mid_par", 16)]


def test_gpt_head_permutes_through_the_primitives(threads):
    """The runtime's swap_adjacent_at_depth (the (B, T, H, hd) <-> (B, H, T, hd) head permutes)
    reaches the split kernel and gives NumPy's bits."""
    from torchlean.runtime import primitives as P
    from torchlean.runtime.buffer import Buffer

    numba.set_num_threads(min(2, PAR.max_threads()))
    dims = (4, 64, 6, 64)
    x = _edge(int(np.prod(dims)), 7)
    got = P.swap_adjacent_at_depth(Buffer.from_numpy(x), dims, 1).to_numpy()
    assert np.array_equal(_bits(got), _bits(_swap_ref(x, dims, 1)))
    back = P.swap_adjacent_at_depth(Buffer.from_numpy(got), (4, 6, 64, 64), 1).to_numpy()
    assert np.array_equal(_bits(back), _bits(x))
