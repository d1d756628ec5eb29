"""float32 GEMMs of the CPU backend: OpenBLAS's cblas_sgemm at one thread, called from Numba, the
output split into blocks that run on Numba's threads.

Why not np.matmul with OpenBLAS's own threads: they spin-wait after each call and at barriers, and
then fight Numba's threads (and any other process) for the cores; conv.py sets OpenBLAS to one
thread for good (see _single_threaded_blas). Why not our own Python threads (conv's worker pool):
a thread that needs the GIL to start its half waits for the caller to release it, and waking it
costs 20-30 us on the 2-core machine, most of a 60 us half. Here the blocks run inside one Numba
parallel region (the threads of every other Numba kernel of the backend: nothing else spins), each
calling cblas_sgemm through its address without the GIL; an OpenMP region starts in ~1.5 us when
the team is awake, ~5 us after a few ms idle. Measured on 2 cores at (512 x 64) @ (64 x 256):
np.matmul on one thread 169 us, here in two blocks 94 us (OpenBLAS's own two threads 100 us,
PyTorch's MKL on two threads 91 us).

The bits do not depend on the split (so not on the thread count either): every block is an ordinary
GEMM over the full inner dimension, and OpenBLAS computes each output element as the same chain over
k whichever block (or edge kernel) holds it. Blocks have at least _BLOCK_MACS multiply-adds, above
the size where OpenBLAS switches to its small-matrix kernels (1e6 on AVX-512 machines), and a single
row or column (which OpenBLAS hands to a GEMV, whose vector tails do depend on where a block starts)
is never split. tests check products split into 1-5 blocks against the one-call product bitwise.

Where NumPy's BLAS is not an OpenBLAS whose cblas_sgemm we can find, or Numba's threading layer
is its workqueue (a region costs 50-100 us there), every GEMM is one np.matmul.
"""

from __future__ import annotations

import ctypes

import numpy as np
from numba import get_num_threads, njit, prange

from .cblas import NO_TRANS as _NO_TRANS, TRANS as _TRANS, sgemm as _sgemm
from .conv import _blas_one_thread, _numpy_openblas

__all__ = ["gemm", "blocks"]

F32 = np.float32
_BLOCK_MACS = 1 << 20   # multiply-adds per block at least (~10 us): below, one call on the caller's thread
_MIN_SPLIT = 32         # rows (or columns) per block at least: OpenBLAS's kernels lose efficiency below


def _find_sgemm():
    """(address of cblas_sgemm, a zero of its integer type) in the OpenBLAS NumPy calls, or None."""
    lib = _numpy_openblas()
    if lib is None:
        return None
    for name, itype in (("scipy_cblas_sgemm64_", np.int64), ("cblas_sgemm64_", np.int64), ("cblas_sgemm", np.int32)):
        if hasattr(lib, name):
            return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value, itype(0)
    return None


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
    t_a = _TRANS if ta else _NO_TRANS
    t_b = _TRANS if tb else _NO_TRANS
    if m >= n:  # rows lo:hi of op(A): rows of A, or columns of the stored A^T
        lo, hi = (m * blk) // nblocks, (m * (blk + 1)) // nblocks
        _sgemm(fn, iz, t_a, t_b, hi - lo, n, k, pa + 4 * lo * (1 if ta else lda), lda, pb, ldb, pc + 4 * lo * n, n)
    else:       # columns lo:hi of op(B): columns of B, or rows of the stored B^T
        lo, hi = (n * blk) // nblocks, (n * (blk + 1)) // nblocks
        _sgemm(fn, iz, t_a, t_b, m, hi - lo, k, pa, lda, pb + 4 * lo * (ldb if tb else 1), ldb, pc + 4 * lo, n)


@njit(cache=True, nogil=True)
def _gemm_serial(fn, iz, a, b, c, batch, m, n, k, ta, tb):
    for i in range(batch):
        _item(fn, iz, a, b, c, m, n, k, ta, tb, 1, i)


@njit(cache=True, nogil=True, parallel=True)
def _gemm_par(fn, iz, a, b, c, batch, m, n, k, ta, tb, nblocks):
    for i in prange(batch * nblocks):
        _item(fn, iz, a, b, c, m, n, k, ta, tb, nblocks, i)


_STATE: dict = {}


def _ready():
    """(sgemm address, BLAS integer zero), or None where every GEMM is np.matmul (see above)."""
    st = _STATE.get("sgemm", False)
    if st is False:
        st = _find_sgemm()
        if st is not None:
            import numba

            from .fast import _mse_sum_par  # any parallel kernel: the layer is chosen at the first run
            _mse_sum_par(np.zeros(1, F32), np.zeros(1, F32), np.zeros(1))
            if numba.threading_layer() == "workqueue":
                st = None
        _STATE["sgemm"] = st
    return st


def blocks(m: int, n: int, k: int) -> int:
    """How many blocks one (m x k) @ (k x n) product is split into: one per thread, as long as each
    has at least _BLOCK_MACS multiply-adds and _MIN_SPLIT rows (or columns)."""
    macs = m * n * k
    if macs < 2 * _BLOCK_MACS or min(m, n) == 1:  # a single row or column: OpenBLAS runs a GEMV,
        return 1                                   # whose bits depend on where a block starts
    return max(1, min(get_num_threads(), macs // _BLOCK_MACS, max(m, n) // _MIN_SPLIT))


def gemm(a, b, batch: int, m: int, n: int, k: int, trans_a: bool, trans_b: bool, nblocks: int | None = None):
    """c[i] = op(a[i]) @ op(b[i]) for i < batch, as a new flat float32 array: a holds batch (m, k)
    matrices (trans_a: (k, m), read transposed), b batch (k, n) (trans_b: (n, k)), all flat and
    C-contiguous. nblocks overrides the split (tests)."""
    c = np.empty(batch * m * n, F32)
    if c.size == 0:
        return c
    st = _ready()
    if k == 0 or st is None or st[1].itemsize == 4 and max(m, n, k) >= 1 << 31:
        a3 = a.reshape(batch, k, m).transpose(0, 2, 1) if trans_a else a.reshape(batch, m, k)
        b3 = b.reshape(batch, n, k).transpose(0, 2, 1) if trans_b else b.reshape(batch, k, n)
        _blas_one_thread()
        np.matmul(a3, b3, out=c.reshape(batch, m, n))
        return c
    fn, iz = st
    _blas_one_thread()
    if nblocks is None:  # one entry: split it; several: the entries are the work items
        nblocks = blocks(m, n, k) if batch == 1 else 1
    if nblocks > 1 or batch > 1 and batch * m * n * k >= 2 * _BLOCK_MACS:
        _gemm_par(fn, iz, a, b, c, batch, m, n, k, trans_a, trans_b, nblocks)
    else:
        _gemm_serial(fn, iz, a, b, c, batch, m, n, k, trans_a, trans_b)
    return c
