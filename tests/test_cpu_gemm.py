"""The CPU backend's GEMMs (torchlean/kernels/cpu/gemm.py): cblas_sgemm from Numba, split into blocks
over Numba's threads. The split must never change a bit: every block count gives the one-call
product exactly, for every transpose combination, batched or not; and that is NumPy's product
(NumPy itself calls sgemm, except for a single row or column, where it calls sgemv: another order;
see numpy_product for the orientation and thread count)."""

import importlib

import numpy as np
import pytest

G = importlib.import_module("torchlean.kernels.cpu.gemm")
layout = importlib.import_module("torchlean.kernels.cpu.layout")
P = importlib.import_module("torchlean.kernels.cpu.parallel")

SHAPES = [(512, 64, 192), (512, 256, 64), (64, 512, 256), (7, 3, 5), (300, 129, 513), (1, 700, 900),
          (900, 700, 1), (2048, 33, 17), (33, 1000, 1500)]


def _operands(rng, batch, m, n, k, ta, tb):
    a = rng.standard_normal(batch * m * k).astype(np.float32)
    b = rng.standard_normal(batch * k * n).astype(np.float32)
    a3 = a.reshape(batch, k, m).transpose(0, 2, 1) if ta else a.reshape(batch, m, k)
    b3 = b.reshape(batch, n, k).transpose(0, 2, 1) if tb else b.reshape(batch, k, n)
    return a, b, numpy_product(a3, b3, G._swapped(ta, tb, m, n, 1)).reshape(-1)


def numpy_product(a3, b3, swapped):
    """NumPy's product in the orientation gemm computes it, with OpenBLAS at one thread as the
    backend runs it (on AVX2 kernels its bits depend on its thread count): (B A^T)^T where gemm
    runs A B^T with few rows swapped (gemm._swapped), whose bits equal A B^T's on AVX-512 kernels
    but not on AVX2 ones."""
    P.blas_one_thread()
    if swapped:
        return np.matmul(b3.transpose(0, 2, 1), a3.transpose(0, 2, 1)).transpose(0, 2, 1)
    return np.matmul(a3, b3)


def _block_counts(m, n, k, counts):
    """The counts gemm may split (m x k) @ (k x n) into: blocks of at least BLOCK_MACS (smaller ones
    may take OpenBLAS's small-matrix kernels, another order), never a single row or column (GEMV)."""
    return [nb for nb in counts if nb in (None, 1) or min(m, n) > 1 and m * n * k >= nb * G.BLOCK_MACS]


def test_the_fast_path_is_live_here():
    # The machines we measure on (NumPy's OpenBLAS, Numba's OpenMP layer) must take the cblas path:
    # otherwise every test below only compares np.matmul with itself.
    assert P.sgemm_address() is not None


@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_any_block_count_gives_numpys_bits(m, n, k, ta, tb):
    rng = np.random.default_rng(m * 7 + n * 3 + k)
    a, b, ref = _operands(rng, 1, m, n, k, ta, tb)
    if min(m, n) == 1:
        ref = G.gemm(a, b, 1, m, n, k, ta, tb, nblocks=1)
    for nb in _block_counts(m, n, k, (None, 1, 2, 3, 5)):
        out = G.gemm(a, b, 1, m, n, k, ta, tb, nblocks=nb)
        assert out.dtype == np.float32 and out.shape == (m * n,)
        assert np.array_equal(out, ref), (nb, float(np.abs(out - ref).max()))


@pytest.mark.parametrize("batch,m,n,k", [(256, 8, 8, 16), (4, 512, 64, 64), (3, 100, 50, 200), (2, 1, 1, 1)])
@pytest.mark.parametrize("ta,tb", [(False, False), (True, True), (False, True)])
def test_batched_entries_give_numpys_bits(batch, m, n, k, ta, tb):
    rng = np.random.default_rng(batch + m)
    a, b, ref = _operands(rng, batch, m, n, k, ta, tb)
    if min(m, n) == 1:
        ref = G.gemm(a, b, batch, m, n, k, ta, tb, nblocks=1)
    for nb in _block_counts(m, n, k, (None, 1, 2)):
        assert np.array_equal(G.gemm(a, b, batch, m, n, k, ta, tb, nblocks=nb), ref)


def test_empty_and_zero_inner_dimension():
    z = np.zeros(0, np.float32)
    assert G.gemm(z, np.ones(12, np.float32), 1, 0, 4, 3, False, False).shape == (0,)
    out = G.gemm(z, z, 2, 3, 4, 0, False, False)
    assert out.shape == (24,) and not out.any()


def test_nan_inf_propagate_like_numpy():
    rng = np.random.default_rng(5)
    a, b, _ = _operands(rng, 1, 256, 96, 128, False, True)
    a[3], a[700], b[11] = np.nan, np.inf, -np.inf
    with np.errstate(all="ignore"):
        ref = np.matmul(a.reshape(256, 128), b.reshape(96, 128).T).reshape(-1)
        out = G.gemm(a, b, 1, 256, 96, 128, False, True, nblocks=2)
    assert np.array_equal(out, ref, equal_nan=True)


def test_blocks_follow_size_and_threads(monkeypatch):
    monkeypatch.setattr(P, "threads", lambda: 4)
    assert G.blocks(16, 16, 16) == 1                   # below 2 blocks' worth of work
    assert G.blocks(512, 256, 64) == 4                 # 8M multiply-adds: one block per thread
    assert G.blocks(40, 40, 4096) == 1                 # too few rows and columns to split
    assert G.blocks(1, 4096, 4096) == 1                # a GEMV
    monkeypatch.setattr(P, "threads", lambda: 1)
    assert G.blocks(512, 256, 64) == 1


def test_bmm_outer_product_path_matches_numpy():
    rng = np.random.default_rng(9)
    a = rng.standard_normal(3 * 5).astype(np.float32)
    b = rng.standard_normal(3 * 4).astype(np.float32)
    ref = np.matmul(a.reshape(3, 5, 1), b.reshape(3, 1, 4)).reshape(-1)
    assert np.array_equal(layout.bmm(a, b, 3, 5, 1, 4), ref)
    assert np.array_equal(layout.bmm_tn(a, b, 3, 5, 1, 4), ref)
    assert np.array_equal(layout.bmm_nt(a, b, 3, 5, 1, 4), ref)


@pytest.mark.parametrize("q", [1, 24, 48])
def test_row_blocks_start_on_multiples_of_the_quantum(q):
    for rows in (2, 47, 48, 49, 97, 128, 700, 1025):
        for nblocks in (1, 2, 3, 5, 16):
            bounds = [G.row_bounds(rows, b, nblocks, q) for b in range(nblocks)]
            assert bounds[0][0] == 0 and bounds[-1][1] == rows
            assert all(hi0 == lo1 for (_, hi0), (lo1, _) in zip(bounds, bounds[1:]))  # contiguous, in order
            assert all(lo % max(q, 2) == 0 and lo <= hi for lo, hi in bounds)
            assert all(hi - lo != 1 for lo, hi in bounds)  # never one row (OpenBLAS would run a GEMV: other bits)


def test_this_machines_quantum_is_known_or_the_safe_default():
    q = P.sgemm_row_quantum()
    assert q in (1, 24) if P.openblas_core() in ("Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids") else q == 48
