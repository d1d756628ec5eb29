"""bmm, bmm_nt, bmm_tn through cuBLAS: one strided-batched GEMM each (cublasGemmStridedBatchedEx),
with the transposes as GEMM flags (no copies); TF32 only on request. A single product (batch 1,
every linear layer's) goes to cublasGemmEx instead: for the same product the strided-batched entry
point picks kernels up to 8% slower on Hopper (BENCHMARKS.md). ``gemm`` is the general row-major
form (leading dimensions, batch strides, beta) that other kernels (conv) build on."""

from __future__ import annotations

import threading

import cupy
import numpy as np
from cupy_backends.cuda.libs import cublas

from ...errors import ArgumentError
from ..flags import allow_tf32
from .launch import empty

__all__ = ["bmm", "bmm_nt", "bmm_tn"]  # primitives; gemm and handle are helpers for other backend modules

_ONE = np.ones(1, dtype=np.float32)
_ZERO = np.zeros(1, dtype=np.float32)
# Host addresses of the scalars, read once: ndarray.ctypes builds a new object per access.
_ONE_PTR, _ZERO_PTR = _ONE.ctypes.data, _ZERO.ctypes.data
_R_32F = 0                      # cudaDataType CUDA_R_32F
_COMPUTE_32F = 68               # cublasComputeType_t CUBLAS_COMPUTE_32F: true float32 FMAs
_COMPUTE_32F_FAST_TF32 = 77     # CUBLAS_COMPUTE_32F_FAST_TF32: tensor cores, TF32 inputs
_GEMM_DEFAULT = -1
_DEFAULT_MATH = 0                # cublasMath_t CUBLAS_DEFAULT_MATH
_INT_MAX = 2**31 - 1
_MAX_BATCH = 65535              # batches per cuBLAS call (larger batches are split into calls)


_own = threading.local()  # .table: device -> [our cuBLAS handle, the stream it is bound to]
_getdev = cupy.cuda.runtime.getDevice


def handle() -> int:
    """Our own cuBLAS handle for this thread and the current device, bound to the current stream.

    Made once with host pointer mode and the default math mode, which nothing else changes (CuPy's
    shared handle may be left in a TF32 math mode by other code, and ``get_cublas_handle`` binds
    the stream again on every call: both cost host time on every GEMM of a step). A handle is not
    shared between threads, as cuBLAS requires."""
    dev = _getdev()
    stream = cupy.cuda.get_current_stream().ptr
    table = getattr(_own, "table", None)
    if table is None:
        table = _own.table = {}
    entry = table.get(dev)
    if entry is None:
        h = cublas.create()
        cublas.setPointerMode(h, cublas.CUBLAS_POINTER_MODE_HOST)
        cublas.setMathMode(h, _DEFAULT_MATH)
        entry = table[dev] = [h, None]
    if entry[1] != stream:
        cublas.setStream(entry[0], stream)
        entry[1] = stream
    return entry[0]


def _gemm(a, b, batch, m, n, p, op_b, ld_b, op_a, ld_a, name):
    """Row-major C (batch, m, p) from cuBLAS's column-major view: C^T = op(B) op(A), B passed first."""
    if batch * m * p == 0:
        return empty(0)
    if n == 0:
        return cupy.zeros(batch * m * p, dtype=cupy.float32)
    if max(batch, m, n, p) > _INT_MAX:
        raise ArgumentError(f"{name}: cuBLAS takes dims below 2**31, got batch={batch}, m={m}, n={n}, p={p}")
    c = empty(batch * m * p)
    h = handle()
    compute = _COMPUTE_32F_FAST_TF32 if allow_tf32() else _COMPUTE_32F
    if batch == 1:
        cublas.gemmEx(h, op_b, op_a, p, m, n, _ONE_PTR, b.data.ptr, _R_32F, ld_b, a.data.ptr, _R_32F, ld_a,
                      _ZERO_PTR, c.data.ptr, _R_32F, p, compute, _GEMM_DEFAULT)
        return c
    cublas.gemmStridedBatchedEx(
        h, op_b, op_a, p, m, n,
        _ONE_PTR,
        b.data.ptr, _R_32F, ld_b, n * p,
        a.data.ptr, _R_32F, ld_a, m * n,
        _ZERO_PTR,
        c.data.ptr, _R_32F, p, m * p,
        batch, compute, _GEMM_DEFAULT)
    return c


_N, _T = 0, 1  # cublasOperation_t


def bmm(a, b, batch, m, n, p):
    # a (m, n) row-major is a^T (n x m, ld n) column-major; b likewise (p x n, ld p).
    return _gemm(a, b, batch, m, n, p, _N, p, _N, n, "bmm")


def bmm_nt(a, b, batch, m, n, p):
    # b stored (p, n) row-major is (n x p, ld n) column-major; op T gives the (p x n) that C^T = b a^T needs.
    return _gemm(a, b, batch, m, n, p, _T, n, _N, n, "bmm_nt")


def bmm_tn(a, b, batch, m, n, p):
    # a stored (n, m) row-major is (m x n, ld m) column-major: op T gives the needed (n x m).
    return _gemm(a, b, batch, m, n, p, _N, p, _T, m, "bmm_tn")


def gemm(a, b, c, m, n, k, lda, ldb, ldc, trans_a=False, trans_b=False, batch=1,
         stride_a=0, stride_b=0, stride_c=0, beta=0.0, name="gemm"):
    """In place, row-major: C_i (m, n) = op(A_i) (m, k) @ op(B_i) (k, n) + beta C_i for i < batch.

    a, b, c are CuPy float32 arrays (views: their first element is that of A_0, B_0, C_0). A_i
    starts at a[i * stride_a] and is stored row-major with row stride lda: (m, k), or (k, m) read
    transposed when trans_a; likewise B_i (k, n) or (n, k) with ldb; C_i is (m, n) with ldc. A
    stride of 0 reuses one matrix for every i. beta is 0.0 (C is only written) or 1.0 (added to).
    Needs k >= 1 (the caller fills C for an empty sum); m, n, k and the leading dims below 2**31.
    Returns c.
    """
    if batch == 0 or m == 0 or n == 0:
        return c
    if k == 0:
        raise ArgumentError(f"{name}: gemm needs k >= 1 (an empty sum is the caller's)")
    if max(m, n, k, lda, ldb, ldc) > _INT_MAX:
        raise ArgumentError(f"{name}: cuBLAS takes dims below 2**31, got m={m}, n={n}, k={k}, "
                            f"lda={lda}, ldb={ldb}, ldc={ldc}")
    h = handle()
    compute = _COMPUTE_32F_FAST_TF32 if allow_tf32() else _COMPUTE_32F
    beta_ptr = _ONE_PTR if beta else _ZERO_PTR
    # Column-major view: C_i^T (n, m) = op(B_i)^T op(A_i)^T, so B goes first; a row-major matrix
    # with row stride ld is its transpose, column-major with leading dim ld.
    op_b, op_a = (_T if trans_b else _N), (_T if trans_a else _N)
    pa, pb, pc = a.data.ptr, b.data.ptr, c.data.ptr
    if batch == 1:
        cublas.gemmEx(h, op_b, op_a, n, m, k, _ONE_PTR, pb, _R_32F, ldb, pa, _R_32F, lda, beta_ptr, pc, _R_32F,
                      ldc, compute, _GEMM_DEFAULT)
        return c
    for i0 in range(0, batch, _MAX_BATCH):
        nb = min(_MAX_BATCH, batch - i0)
        cublas.gemmStridedBatchedEx(
            h, op_b, op_a, n, m, k,
            _ONE_PTR,
            pb + 4 * i0 * stride_b, _R_32F, ldb, stride_b,
            pa + 4 * i0 * stride_a, _R_32F, lda, stride_a,
            beta_ptr,
            pc + 4 * i0 * stride_c, _R_32F, ldc, stride_c,
            nb, compute, _GEMM_DEFAULT)
    return c
