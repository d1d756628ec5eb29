"""float32 GEMMs of the CPU backend: OpenBLAS's cblas_sgemm at one thread, called from Numba, the
output split into blocks that run on Numba's threads.

Why the split is ours and not OpenBLAS's or a Python thread pool's: parallel.py (one pool, Numba's
threads; OpenBLAS at one thread). Each block calls cblas_sgemm through its address without the GIL.

The bits do not depend on the split (so not on the thread count either): every block is an ordinary
GEMM over the full inner dimension, and OpenBLAS computes each output element as the same chain over
k whichever block (or edge kernel) holds it. Blocks have at least BLOCK_MACS multiply-adds, above
the size where OpenBLAS switches to its small-matrix kernels (1e6 on AVX-512 machines), and a single
row or column (which OpenBLAS hands to a GEMV, whose vector tails do depend on where a block starts)
is never split. tests check products split into 1-5 blocks against the one-call product bitwise.

Where parallel.sgemm_address() is None (another BLAS, or Numba's workqueue layer), every GEMM is
one np.matmul.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from . import parallel
from .cblas import NO_TRANS, TRANS, sgemm

__all__ = ["gemm", "blocks", "BLOCK_MACS"]

F32 = np.float32
BLOCK_MACS = 1 << 20    # multiply-adds per block at least: below, one call on the caller's thread
_MIN_SPLIT = 32         # rows (or columns) per block at least: OpenBLAS's kernels lose efficiency below


@njit(inline="always", nogil=True)
def _item(fn, iz, a, b, c, m, n, k, ta, tb, nblocks, i):
    """Work item i: block i % nblocks of batch entry i // nblocks, rows of C if m >= n, else
    columns. a (batch, m, k) or its transposes (batch, k, m), b likewise, c (batch, m, n), all
    flat and contiguous."""
    e, blk = i // nblocks, i % nblocks
    lda = m if ta else k
    ldb = k if tb else n
    pa = a.ctypes.data + 4 * e * m * k
    pb = b.ctypes.data + 4 * e * k * n
    pc = c.ctypes.data + 4 * e * m * n
    t_a = TRANS if ta else NO_TRANS
    t_b = TRANS if tb else NO_TRANS
    if m >= n:  # rows lo:hi of op(A): rows of A, or columns of the stored A^T
        lo, hi = (m * blk) // nblocks, (m * (blk + 1)) // nblocks
        sgemm(fn, iz, t_a, t_b, hi - lo, n, k, pa + 4 * lo * (1 if ta else lda), lda, pb, ldb, pc + 4 * lo * n, n)
    else:       # columns lo:hi of op(B): columns of B, or rows of the stored B^T
        lo, hi = (n * blk) // nblocks, (n * (blk + 1)) // nblocks
        sgemm(fn, iz, t_a, t_b, m, hi - lo, k, pa, lda, pb + 4 * lo * (ldb if tb else 1), ldb, pc + 4 * lo, n)


@njit(cache=True, nogil=True)
def _gemm_serial(fn, iz, a, b, c, batch, m, n, k, ta, tb):
    for i in range(batch):
        _item(fn, iz, a, b, c, m, n, k, ta, tb, 1, i)


@njit(cache=True, nogil=True, parallel=True)
def _gemm_par(fn, iz, a, b, c, batch, m, n, k, ta, tb, nblocks):
    for i in prange(batch * nblocks):
        _item(fn, iz, a, b, c, m, n, k, ta, tb, nblocks, i)


def blocks(m: int, n: int, k: int) -> int:
    """How many blocks one (m x k) @ (k x n) product is split into: one per thread, as long as each
    has at least BLOCK_MACS multiply-adds and _MIN_SPLIT rows (or columns)."""
    if min(m, n) == 1:  # a single row or column: OpenBLAS runs a GEMV, whose bits depend on where a block starts
        return 1
    return parallel.parts(m * n * k, max(m, n) // _MIN_SPLIT, BLOCK_MACS)


def gemm(a, b, batch: int, m: int, n: int, k: int, trans_a: bool, trans_b: bool, nblocks: int | None = None):
    """c[i] = op(a[i]) @ op(b[i]) for i < batch, as a new flat float32 array: a holds batch (m, k)
    matrices (trans_a: (k, m), read transposed), b batch (k, n) (trans_b: (n, k)), all flat and
    C-contiguous. nblocks overrides the split (tests)."""
    c = np.empty(batch * m * n, F32)
    if c.size == 0:
        return c
    st = parallel.sgemm_address()
    if k == 0 or st is None or st[1].itemsize == 4 and max(m, n, k) >= 1 << 31:
        a3 = a.reshape(batch, k, m).transpose(0, 2, 1) if trans_a else a.reshape(batch, m, k)
        b3 = b.reshape(batch, n, k).transpose(0, 2, 1) if trans_b else b.reshape(batch, k, n)
        parallel.blas_one_thread()
        np.matmul(a3, b3, out=c.reshape(batch, m, n))
        return c
    fn, iz = st
    parallel.blas_one_thread()
    if nblocks is None:  # one entry: split it; several: the entries are the work items
        nblocks = blocks(m, n, k) if batch == 1 else 1
    if nblocks > 1 or batch > 1 and batch * m * n * k >= 2 * BLOCK_MACS:
        _gemm_par(fn, iz, a, b, c, batch, m, n, k, trans_a, trans_b, nblocks)
    else:
        _gemm_serial(fn, iz, a, b, c, batch, m, n, k, trans_a, trans_b)
    return c
