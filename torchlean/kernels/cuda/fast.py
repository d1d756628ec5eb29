"""The fast-kernel family on CuPy arrays: fast_gemm (cuBLAS SGEMM / DGEMM), mse_loss_fwd/bwd (fast.cu).

* fast_gemm, fp32: with a bias and an output of at least 2^22 elements, ONE cuBLASLt matmul
  adding it in the epilogue (cublaslt.py: fl(fl(A B) + b), the output written once); otherwise,
  ONE SGEMM (linalg.gemm: the transposes are cuBLAS flags, no copies; TF32 only when
  ``set_allow_tf32(True)``, like bmm), then the bias added in place on its fresh output
  (tl_fast_gemm_add_bias_rows, the same fl(fl(A B) + b)). Linear with a bias is this: bmm_nt +
  broadcast + add moved the (m, n) output six times in three launches; this moves it once through
  cuBLASLt, three times in two launches otherwise.
* fast_gemm, fp64: a and b widened to float64 (tl_fast_gemm_widen_f64, subnormals kept), ONE cublasDgemm into a float64
  (m, n) scratch (FP64 tensor cores on Hopper), then one epilogue kernel adds the bias in double
  and rounds to float32 once (tl_fast_gemm_fp64_epilogue).
* mse_loss_fwd: ONE launch of tl_mse_loss_fwd, a fixed-order float64 reduction (reduce.cu's tl_reduce_sum
  pattern: block partials, the last block adds them in block order; no float atomics); the grid
  depends on n alone, so the result is bitwise repeatable with or without deterministic mode.
* mse_loss_bwd: ONE elementwise launch (tl_mse_loss_bwd), float4 when the arrays are 16-byte aligned.

``matmul_f64(a, b)`` (not a primitive): DGEMM of host float64 arrays for ``torchlean.fast_matmul``.
"""

from __future__ import annotations

import cupy
import numpy as np

from ...errors import ArgumentError
from . import cublaslt
from .launch import BLOCK, F32, I64, StreamPartials, empty, grid_for, kernel

__all__ = ["fast_gemm", "linear_bwd", "mse_loss_fwd", "mse_loss_bwd"]

_FILE = "fast.cu"
_MAX_BLOCKS = 1024        # fixed (not per device): the sum's order depends on n alone
_PER_THREAD = 32          # elements per thread before another block is worth it
_INT_MAX = 2**31 - 1
# Outputs from which the bias goes into cuBLASLt's epilogue: below, the bias pass it saves (two
# moves of the output) costs less than the ctypes call's extra host time, and for short, wide
# products (rows 64-512) cuBLASLt's heuristic picked slower kernels than cublasGemmEx's on the H100.
_LT_MIN_OUT = 1 << 22
_N, _T = 0, 1             # cublasOperation_t
_ONE64 = np.ones(1, dtype=np.float64)
_ZERO64 = np.zeros(1, dtype=np.float64)
_ONE64_PTR, _ZERO64_PTR = _ONE64.ctypes.data, _ZERO64.ctypes.data  # read once (ndarray.ctypes is slow)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _aligned(*arrays) -> bool:
    return all(x.data.ptr % 16 == 0 for x in arrays)


def _dgemm(a64, b64, m, k, n, trans_a, trans_b, name):
    """Row-major float64 C (m, n) = op(a64) op(b64) through one cublasDgemm (k >= 1, m n >= 1)."""
    from cupy_backends.cuda.libs import cublas

    lda = m if trans_a else k
    ldb = k if trans_b else n
    if max(m, n, k, lda, ldb) > _INT_MAX:
        raise ArgumentError(f"{name}: cuBLAS takes dims below 2**31, got m={m}, k={k}, n={n}")
    c = cupy.empty(m * n, dtype=cupy.float64)
    # Column-major view: C^T (n, m) = op(B)^T op(A)^T, so B goes first (as linalg.gemm).
    cublas.dgemm(_linalg().handle(), _T if trans_b else _N, _T if trans_a else _N, n, m, k,
                 _ONE64_PTR, b64.data.ptr, ldb, a64.data.ptr, lda,
                 _ZERO64_PTR, c.data.ptr, n)
    return c


def _linalg():
    # Imported on first use (linalg loads cuBLAS, which this module's import must not), then a global.
    global _LINALG
    if _LINALG is None:
        from . import linalg
        _LINALG = linalg
    return _LINALG


_LINALG = None


def _bias_rows(bias, m, n):
    # Our gather kernel, not a CuPy assignment: CuPy's kernels flush subnormals (-ftz=true).
    from .layout import broadcast_vec_to_rows

    return broadcast_vec_to_rows(bias, m, n)


def _widen(x):
    """float32 -> float64 with subnormals kept (CuPy's astype runs with flush-to-zero)."""
    y = cupy.empty(x.size, dtype=cupy.float64)
    if x.size:
        kernel(_FILE, "tl_fast_gemm_widen_f64")((grid_for(x.size),), (BLOCK,), (x, I64(x.size), y))
    return y


def fast_gemm(a, b, bias, m, k, n, trans_a, trans_b, fp64):
    if m * n == 0:
        return empty(0)
    if k == 0:
        return cupy.zeros(m * n, dtype=cupy.float32) if bias is None else _bias_rows(bias, m, n)
    if not fp64:
        if bias is not None and m * n >= _LT_MIN_OUT:
            out = cublaslt.matmul_bias(a, b, bias, m, k, n, bool(trans_a), bool(trans_b))
            if out is not None:
                return out
        out = _linalg().gemm(a, b, empty(m * n), m, n, k, m if trans_a else k, k if trans_b else n, n,
                             trans_a=bool(trans_a), trans_b=bool(trans_b), name="fast_gemm")
        if bias is not None:
            kernel(_FILE, "tl_fast_gemm_add_bias_rows")((grid_for(m * n),), (BLOCK,), (out, bias, I64(m), I64(n)))
        return out
    c64 = _dgemm(_widen(a), _widen(b), m, k, n, trans_a, trans_b, "fast_gemm")
    out = empty(m * n)
    has = bias is not None
    kernel(_FILE, "tl_fast_gemm_fp64_epilogue")((grid_for(m * n),), (BLOCK,), (
        c64, bias if has else out, np.int32(has), I64(m), I64(n), out))
    return out


def linear_bwd(g, x, w, rows, n_in, n_out):
    """dx = g w (bmm), dw = g^T x (bmm_tn), db = column sums of g (reduce_sum_axis0): the kernels of
    those primitives, so the same bits, in one call."""
    from .reduce import reduce_sum_axis0

    lin = _linalg()
    return lin.bmm(g, w, 1, rows, n_out, n_in), lin.bmm_tn(g, x, 1, n_out, rows, n_in), reduce_sum_axis0(g, rows, n_out)


# per (device, stream): block partials and the zeroed completion counter tl_mse_loss_fwd resets
_workspace = StreamPartials(_MAX_BLOCKS).get


def mse_loss_fwd(input, target, n, mean):
    out = empty(1)
    blocks = min(_MAX_BLOCKS, max(1, _cdiv(n, BLOCK * _PER_THREAD)))
    if blocks > 1:
        ws = _workspace()
        partials, counter = ws.partials, ws.counter
    else:
        partials = counter = out  # one block writes out directly: the workspace is never touched
    div = (float(n) if n else float("nan")) if mean else 1.0
    kernel(_FILE, "tl_mse_loss_fwd")((blocks,), (BLOCK,), (
        input, target, I64(n), np.int32(_aligned(input, target)), partials, counter, out, np.float64(div)))
    return out


def mse_coefficient(n: int, mean: int) -> float:
    """c of mse_loss_bwd: float32(2 / n) for mean (as mse_loss's scale by 2/n), 2 for sum or n = 0."""
    return float(np.float32(2.0 / n)) if (mean and n) else 2.0


def mse_loss_bwd(input, target, g, n, mean):
    out = empty(n)
    if n == 0:
        return out
    vec = _aligned(input, target, out)
    kernel(_FILE, "tl_mse_loss_bwd")((grid_for(_cdiv(n, 4) if vec else n),), (BLOCK,), (
        input, target, g, I64(n), F32(mse_coefficient(n, mean)), np.int32(vec), out))
    return out


def matmul_f64(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Host float64 (m, k) @ (k, n) by cuBLAS DGEMM on the current device: float64 all the way."""
    m, k = a.shape
    n = b.shape[1]
    if m * n == 0 or k == 0:
        return np.zeros((m, n), dtype=np.float64)
    da = cupy.asarray(np.ascontiguousarray(a, dtype=np.float64)).reshape(-1)
    db = cupy.asarray(np.ascontiguousarray(b, dtype=np.float64)).reshape(-1)
    return _dgemm(da, db, m, k, n, 0, 0, "fast_matmul").get().reshape(m, n)
