"""float32 GEMMs of the CPU backend: OpenBLAS's cblas_sgemm at one thread, called from Numba, the
work split into items that run on Numba's threads.

Why the split is ours and not OpenBLAS's or a Python thread pool's: parallel.py (one pool, Numba's
threads; OpenBLAS at one thread). Each item calls cblas_sgemm through its address without the GIL.
The items run as a task (tasks.py), on the pool or one after another on the caller's thread: one
body, compiled once as a cached callback, for both (a parallel region of its own would compile the
item's code again, seconds on a cold start).

The work items of ``batch`` products (m x k) @ (k x n) (``plan``):

* inner parts (``inner_parts``): where the outputs are small and the inner dimension long (a weight
  gradient over many rows, the LM head's g W), each product is the sum of ``ks`` partial products
  over consecutive ranges of k, each into its own scratch, then added in part order
  (((p0 + p1) + p2) + ...) per element. ``ks`` is a function of the shape alone, so the bits do not
  depend on the thread count; they may differ from NumPy's one-call product (another association of
  the sum over k: bmm's contract holds for any order).
* blocks (``blocks``): each (partial) product split into row blocks, as many as the threads need
  beside the batch entries and inner parts. Blocks never change a bit: every block is an ordinary
  GEMM over the same inner range whose boundaries fall on multiples of
  ``parallel.sgemm_row_quantum()`` rows, and OpenBLAS computes each output element as the same
  chain over k whichever such block holds it. Where the boundaries may fall depends on the kernels
  OpenBLAS picked: its AVX2 (Haswell, Zen) sgemm handles rows in groups of 24 and the rows of a
  partial group by other kernels, in another order, so there a boundary off a multiple of 24
  changes bits; on AVX-512 (SkylakeX) kernels any row will do; elsewhere 48. And on AVX2 the bits
  of a row depend on the number of columns in the call, so columns are never split (a product with few rows is split
  only when it runs swapped, by rows of B A^T). Blocks have at least BLOCK_MACS multiply-adds,
  above the size where OpenBLAS switches to its small-matrix kernels (1e6 on AVX-512 machines),
  and a single row or column (which OpenBLAS hands to a GEMV, whose vector tails do depend on where
  a block starts) is never split, over k neither. tests check products split into 1-5 blocks
  against the one-block product bitwise, and thread counts 1 and 2.

A product with a single row or column (m == 1 or n == 1: a linear layer with one output, its
weight gradient, a matrix-vector product) is ours instead (``_gemv``): OpenBLAS's GEMV is one
thread, and splitting it would change bits. Each output is a float64 dot product of its row (or
column) with the vector, over k in fixed parts of the shape alone (``_gemv_parts``) added in part
order and rounded once; rows (or column chunks) and parts are spread over the pool, and no bit
depends on the thread count. Below GEMV_MIN_MACS multiply-adds OpenBLAS keeps them (one thread, cheap).

fast_gemm's bias is added by the items themselves (after their block's sgemm, or in the sum of the
inner parts): fl(fl(A B) + bias), one pass over the output on every thread.

Where parallel.sgemm_address() is None (another BLAS, or Numba's workqueue layer), every GEMM is
one np.matmul.
"""

from __future__ import annotations

import numpy as np
from numba import carray, njit, prange

from . import parallel, tasks
from .cblas import NO_TRANS, TRANS, sgemm

__all__ = ["gemm", "blocks", "inner_parts", "plan", "BLOCK_MACS"]

F32 = np.float32
BLOCK_MACS = 1 << 20    # multiply-adds per item at least: below, one call on the caller's thread
_MIN_ROWS = 32          # rows per block at least, on average: OpenBLAS's kernels lose efficiency below
K_PART = 1024           # inner length of a partial product at least
K_PARTS_MAX = 16        # partial products per product at most
K_SPLIT_OUT = 1 << 18   # output elements (all entries) at most for inner parts: their scratch stays small
_NO_BIAS = np.zeros(1, F32)


@njit(inline="always", nogil=True)
def _item(fn, iz, a, b, c, m, n, k, ta, tb, ks, nblocks, i, bias, has_bias, swap, scratch, a_step, q):
    """Work item i: block i % nblocks of inner part (i // nblocks) % ks of batch entry
    i // (nblocks ks); rows of C if m >= n, else columns. a (batch, m, k) or its transposes (batch,
    k, m), b likewise, all flat and contiguous; c (batch, m, n) when ks == 1, else the partial
    products (batch, ks, m, n). The bias (ks == 1 only) is added to the block's outputs. swap
    (A B^T with few rows, ks == 1): see _swapped. a_step: a's entries apart (m k, or 0: one A for
    every entry). q: the rows whose multiples a block starts on (parallel.sgemm_row_quantum)."""
    blk = i % nblocks
    s = (i // nblocks) % ks
    e = i // (nblocks * ks)
    k0, k1 = (k * s) // ks, (k * (s + 1)) // ks
    lda = m if ta else k
    ldb = k if tb else n
    pa = a.ctypes.data + 4 * (e * a_step + k0 * (m if ta else 1))
    pb = b.ctypes.data + 4 * (e * k * n + k0 * (1 if tb else n))
    pc = c.ctypes.data + 4 * (e * ks + s) * m * n
    t_a = TRANS if ta else NO_TRANS
    t_b = TRANS if tb else NO_TRANS
    if swap:  # columns lo:hi of A B^T as rows lo:hi of B A^T into the scratch, then transposed in
        lo, hi = row_bounds(n, blk, nblocks, q)
        if hi > lo:
            ps = scratch.ctypes.data + 4 * e * n * m
            sgemm(fn, iz, NO_TRANS, TRANS, hi - lo, m, k, pb + 4 * lo * k, k, pa, k, ps + 4 * lo * m, m)
            o, sc = c[e * m * n:], scratch[e * n * m:]
            for r in range(m):
                for j in range(lo, hi):
                    o[r * n + j] = sc[j * m + r] + bias[j] if has_bias else sc[j * m + r]
    else:     # rows lo:hi of op(A): rows of A, or columns of the stored A^T
        lo, hi = row_bounds(m, blk, nblocks, q)
        if hi > lo:
            sgemm(fn, iz, t_a, t_b, hi - lo, n, k1 - k0, pa + 4 * lo * (1 if ta else lda), lda, pb, ldb,
                  pc + 4 * lo * n, n)
            if has_bias:
                o = c[(e * ks + s) * m * n:]
                for r in range(lo, hi):
                    for j in range(n):
                        o[r * n + j] += bias[j]


@njit(inline="always", nogil=True)
def row_bounds(rows, blk, nblocks, q):
    """Rows lo:hi of block blk of nblocks: boundaries on multiples of q, at least 2 (empty blocks
    where there are fewer multiples than blocks), and never a block of one row (OpenBLAS's GEMV)."""
    q = max(q, 2)
    placed = rows - 1 if rows % q == 1 else rows
    units = (placed + q - 1) // q
    lo = min(placed, q * ((units * blk) // nblocks))
    hi = rows if blk == nblocks - 1 else min(placed, q * ((units * (blk + 1)) // nblocks))
    return lo, hi


# The items run as a task (tasks.py), on the pool or on the caller's thread: the body compiles once,
# as a cached callback, where a parallel wrapper and a serial loop of their own would each compile
# _item again (seconds on a cold start); one task per BLAS integer type (tasks.blas_task). Words:
# fn, m, n, k, ta, tb, ks, nblocks, has_bias, swap, a_step, q, then (address, size) of a, b, c, bias,
# scratch.
@njit(inline="always", nogil=True)
def _gemm_body(i, p, iz):
    w = carray(p, 22)
    _item(w[0], iz, tasks.as_f32(w[12], w[13]), tasks.as_f32(w[14], w[15]), tasks.as_f32(w[16], w[17]), w[1], w[2],
          w[3], w[4] != 0, w[5] != 0, w[6], w[7], i, tasks.as_f32(w[18], w[19]), w[8] != 0, w[9] != 0,
          tasks.as_f32(w[20], w[21]), w[10], w[11])


_I32, _I64 = np.int32(0), np.int64(0)


def _gemm_task32(i, p):
    _gemm_body(i, p, _I32)


def _gemm_task64(i, p):
    _gemm_body(i, p, _I64)


_GEMM_TASKS = (tasks.Task(_gemm_task32), tasks.Task(_gemm_task64))




_SUM_CHUNK = 1 << 14  # output elements per task of the partial-product sum


@njit(inline="always", nogil=True)
def _sum_chunk(part, c, ks, mn, n, q, bias, has_bias):
    """c[q-th chunk] = ((p0 + p1) + ...) (+ bias), the parts (batch, ks, m, n) in part order."""
    nq = (mn + _SUM_CHUNK - 1) // _SUM_CHUNK
    e, lo = q // nq, (q % nq) * _SUM_CHUNK
    hi = min(mn, lo + _SUM_CHUNK)
    out = c[e * mn + lo:e * mn + hi]
    base = part[e * ks * mn + lo:e * ks * mn + hi]
    out[:] = base
    for s in range(1, ks):
        p = part[(e * ks + s) * mn + lo:(e * ks + s) * mn + hi]
        for j in range(hi - lo):
            out[j] += p[j]
    if has_bias:
        for j in range(hi - lo):
            out[j] += bias[(lo + j) % n]


@njit(cache=True, nogil=True)
def _sum_serial(part, c, batch, ks, mn, n, bias, has_bias):
    for q in range(batch * ((mn + _SUM_CHUNK - 1) // _SUM_CHUNK)):
        _sum_chunk(part, c, ks, mn, n, q, bias, has_bias)


@njit(cache=True, nogil=True, parallel=True)
def _sum_par(part, c, batch, ks, mn, n, bias, has_bias):
    for q in prange(batch * ((mn + _SUM_CHUNK - 1) // _SUM_CHUNK)):
        _sum_chunk(part, c, ks, mn, n, q, bias, has_bias)


# -- single row or column ---------------------------------------------------------------------------
GEMV_MIN_MACS = 1 << 18   # below, OpenBLAS's GEMV on the caller's thread
_GEMV_ROWS = 256          # output rows per task of the dot form
_GEMV_COLS = 512          # output columns per task of the axpy form
_GEMV_K_PART = 4096       # inner length per part of the axpy form at least
_GEMV_K_PARTS = 16


def _gemv_parts(k: int) -> int:
    """Parts over k of the axpy form: a function of k alone (the bits depend on it)."""
    return max(1, min(_GEMV_K_PARTS, k // _GEMV_K_PART))


@njit(cache=True, nogil=True, parallel=True, error_model="numpy", fastmath={"reassoc"})
def _gemv_dot(x, v, out, rows, k):
    """out[i] = sum_k x[i, k] v[k], x (rows, k) row-major: per row a float64 sum whose
    order the compiled loop fixes (reassoc lets it keep SIMD lanes), independent of the split."""
    tasks = (rows + _GEMV_ROWS - 1) // _GEMV_ROWS
    for t in prange(tasks):
        for i in range(t * _GEMV_ROWS, min(rows, (t + 1) * _GEMV_ROWS)):
            xr = x[i * k:(i + 1) * k]
            acc = 0.0
            for j in range(k):
                acc += np.float64(xr[j]) * np.float64(v[j])
            out[i] = np.float32(acc)


@njit(cache=True, nogil=True, parallel=True, error_model="numpy")
def _gemv_axpy(x, v, out, k, cols, kparts):
    """out[j] = sum_k v[k] x[k, j], x (k, cols) row-major: kparts float64 partial
    sums over consecutive ranges of k (each in k order), added in part order, rounded once."""
    q = (cols + _GEMV_COLS - 1) // _GEMV_COLS
    part = np.zeros((kparts, cols))
    for t in prange(kparts * q):
        p, c = t // q, t % q
        c0, c1 = c * _GEMV_COLS, min(cols, (c + 1) * _GEMV_COLS)
        acc = part[p, c0:c1]
        for r in range((k * p) // kparts, (k * (p + 1)) // kparts):
            vr = np.float64(v[r])
            xr = x[r * cols + c0:r * cols + c1]
            for j in range(c1 - c0):
                acc[j] += vr * np.float64(xr[j])
    for j in prange(cols):
        s = part[0, j]
        for p in range(1, kparts):
            s += part[p, j]
        out[j] = np.float32(s)


def _gemv(a, b, m, n, k, trans_a, trans_b, bias):
    """op(a) (m, k) @ op(b) (k, n) (+ bias) with m == 1 or n == 1 (one product), as a new flat
    float32 array; the bias is added to the rounded products, fl(fl(A B) + bias), as the items do."""
    c = np.empty(m * n, F32)
    if n == 1:   # y = op(A) v: A (m, k) rows are dot products; A stored (k, m) is an axpy over its rows
        if trans_a:
            _gemv_axpy(a, b, c, k, m, _gemv_parts(k))
        else:
            _gemv_dot(a, b, c, m, k)
    elif trans_b:  # y = u op(B): B stored (n, k) rows are dot products; stored (k, n) an axpy
        _gemv_dot(b, a, c, n, k)
    else:
        _gemv_axpy(b, a, c, k, n, _gemv_parts(k))
    if bias is not None:
        c += bias
    return c


_SWAP_ROWS = 64  # A B^T with at most this many rows (and 4x as many columns) is computed as (B A^T)^T


def _swapped(ta: bool, tb: bool, m: int, n: int, ks: int) -> bool:
    """Whether A B^T (A (m, k), B stored (n, k)) runs as B A^T into a scratch, transposed back: with
    few rows OpenBLAS packs the large stored B transposed, well below its speed on B A^T (an LSTM
    step's h W_hh^T). A function of the shape alone, and the np.matmul path takes the same
    orientation, so the bits do not depend on the path or the thread count. (On AVX-512 kernels
    they are also those of NumPy's A B^T; on AVX2 ones they may differ in the last bits.)"""
    return tb and not ta and ks == 1 and 1 < m <= _SWAP_ROWS and n >= 4 * m


def inner_parts(batch: int, m: int, n: int, k: int) -> int:
    """How many partial products over k each of ``batch`` (m x k) @ (k x n) products is the sum of:
    a function of the shape alone (the bits depend on it, so never on the thread count). More than
    one only for small outputs (batch m n <= K_SPLIT_OUT) over a long k, parts of at least K_PART
    and BLOCK_MACS multiply-adds; never for a single row or column (a GEMV)."""
    if min(m, n) == 1 or batch * m * n > K_SPLIT_OUT:
        return 1
    return max(1, min(K_PARTS_MAX, k // K_PART, (m * n * k) // BLOCK_MACS))


def blocks(m: int, n: int, k: int, rows: int | None = None) -> int:
    """How many row blocks one (m x k) @ (k x n) product is split into (``rows``: the rows split,
    m unless the product runs swapped): one per thread, as long as each has at least BLOCK_MACS
    multiply-adds and, on average, _MIN_ROWS rows and a multiple of parallel.sgemm_row_quantum()."""
    if min(m, n) == 1:  # a single row or column: OpenBLAS runs a GEMV, whose bits depend on where a block starts
        return 1
    rows = m if rows is None else rows
    return parallel.parts(m * n * k, min(rows // _MIN_ROWS, rows // parallel.sgemm_row_quantum()), BLOCK_MACS)


def plan(batch: int, m: int, n: int, k: int, swap: bool = False) -> tuple[int, int]:
    """(inner parts, blocks per part) of ``batch`` products: the inner parts from the shape
    (``inner_parts``), then blocks until batch entries x parts x blocks reach the thread count."""
    ks = inner_parts(batch, m, n, k)
    items = batch * ks
    want = -(-parallel.threads() // items)  # blocks per (entry, part) to give every thread one item
    return ks, (min(want, blocks(m, n, k // ks, n if swap else m)) if want > 1 else 1)


def gemm(a, b, batch: int, m: int, n: int, k: int, trans_a: bool, trans_b: bool, nblocks: int | None = None,
         bias=None, kparts: int | None = None, shared_a: bool = False):
    """c[i] = op(a[i]) @ op(b[i]) (+ bias on every row) for i < batch, as a new flat float32 array:
    a holds batch (m, k) matrices (trans_a: (k, m), read transposed), or one for every entry
    (shared_a), b batch (k, n) (trans_b: (n, k)), all flat and C-contiguous; bias (n,) or None.
    nblocks and kparts override the split (tests)."""
    c = np.empty(batch * m * n, F32)
    if c.size == 0:
        return c
    a, b = a.reshape(-1), b.reshape(-1)  # flat: one compiled signature of the kernels below for every caller
    st = parallel.sgemm_address()
    if k == 0 or st is None or st[1].itemsize == 4 and max(m, n, k) >= 1 << 31:
        na = 1 if shared_a else batch
        a3 = a.reshape(na, k, m).transpose(0, 2, 1) if trans_a else a.reshape(na, m, k)
        b3 = b.reshape(batch, n, k).transpose(0, 2, 1) if trans_b else b.reshape(batch, k, n)
        parallel.blas_one_thread()
        if _swapped(trans_a, trans_b, m, n, 1):  # the orientation the items use: the same bits on every path
            c.reshape(batch, m, n)[...] = np.matmul(b3.transpose(0, 2, 1), a3.transpose(0, 2, 1)).transpose(0, 2, 1)
        else:
            np.matmul(a3, b3, out=c.reshape(batch, m, n))
        if bias is not None:
            c.reshape(batch, m, n)[...] += bias
        return c
    if batch == 1 and min(m, n) == 1 and m * n * k >= GEMV_MIN_MACS:
        with np.errstate(all="ignore"):
            return _gemv(a, b, m, n, k, trans_a, trans_b, bias)
    fn, iz = st
    parallel.blas_one_thread()
    ks = inner_parts(batch, m, n, k) if kparts is None else kparts
    swap = _swapped(trans_a, trans_b, m, n, ks)
    _, nb = plan(batch, m, n, k, swap)
    if nblocks is not None:
        nb = nblocks
    has_bias = bias is not None
    bv = np.ascontiguousarray(bias, dtype=F32) if has_bias else _NO_BIAS  # read through its address
    dest = c if ks == 1 else np.empty(batch * ks * m * n, F32)
    scratch = np.empty(batch * m * n, F32) if swap else _NO_BIAS
    a_step = 0 if shared_a else m * k
    par = nb > 1 or batch * ks > 1 and batch * m * n * k >= 2 * BLOCK_MACS
    words = tasks.pack_f32([fn, m, n, k, trans_a, trans_b, ks, nb, has_bias and ks == 1, swap, a_step,
                            parallel.sgemm_row_quantum()], a, b, dest, bv, scratch)
    tasks.run(tasks.blas_task(_GEMM_TASKS, iz), words, batch * ks * nb, on_pool=par)
    if ks > 1:
        chunks = batch * (-(-(m * n) // _SUM_CHUNK))
        (_sum_par if chunks > 1 and parallel.threads() > 1 else _sum_serial)(dest, c, batch, ks, m * n, n, bv,
                                                                              has_bias)
    return c
