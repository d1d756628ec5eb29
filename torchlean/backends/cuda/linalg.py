"""bmm through cuBLAS: one strided-batched GEMM (cublasGemmStridedBatchedEx), TF32 only on request."""

from __future__ import annotations

import cupy
import numpy as np
from cupy_backends.cuda.libs import cublas

from ...errors import ArgumentError
from ...runtime.precision import allow_tf32
from .kernels import empty

__all__ = ["bmm"]

_ONE = np.ones(1, dtype=np.float32)
_ZERO = np.zeros(1, dtype=np.float32)
_R_32F = 0                      # cudaDataType CUDA_R_32F
_COMPUTE_32F = 68               # cublasComputeType_t CUBLAS_COMPUTE_32F: true float32 FMAs
_COMPUTE_32F_FAST_TF32 = 77     # CUBLAS_COMPUTE_32F_FAST_TF32: tensor cores, TF32 inputs
_GEMM_DEFAULT = -1
_DEFAULT_MATH = 0                # cublasMath_t CUBLAS_DEFAULT_MATH
_INT_MAX = 2**31 - 1


def bmm(a, b, batch, m, n, p):
    if batch * m * p == 0:
        return empty(0)
    if n == 0:
        return cupy.zeros(batch * m * p, dtype=cupy.float32)
    if max(batch, m, n, p) > _INT_MAX:
        raise ArgumentError(f"bmm: cuBLAS takes dims below 2**31, got batch={batch}, m={m}, n={n}, p={p}")
    c = empty(batch * m * p)
    handle = cupy.cuda.device.get_cublas_handle()
    cublas.setPointerMode(handle, cublas.CUBLAS_POINTER_MODE_HOST)
    cublas.setMathMode(handle, _DEFAULT_MATH)  # a TF32 math mode left by other code would override 32F
    # Row-major C = A B is column-major C^T = B^T A^T: pass B first, with the dims swapped.
    cublas.gemmStridedBatchedEx(
        handle, cublas.CUBLAS_OP_N, cublas.CUBLAS_OP_N, p, m, n,
        _ONE.ctypes.data,
        b.data.ptr, _R_32F, p, n * p,
        a.data.ptr, _R_32F, n, m * n,
        _ZERO.ctypes.data,
        c.data.ptr, _R_32F, p, m * p,
        batch, _COMPUTE_32F_FAST_TF32 if allow_tf32() else _COMPUTE_32F, _GEMM_DEFAULT)
    return c
