"""Fast kernels and their options (seed pages FastKernels and Torch.Options).

``Options(fast_kernels, use_gpu, fast_gpu_matmul_precision)`` is process-global, like the TF32
switch: ``set_options(opts)`` returns the previous value, ``get_options()`` reads it, and
``with options(fast_kernels=True): ...`` sets it for a block and restores it afterwards.

* ``fast_kernels=True`` routes ``torchlean.nn.functional.linear`` (hence ``nn.Linear``),
  ``nn.functional.mse_loss`` (reductions "mean" and "sum"), and ``Tensor.__matmul__`` /
  ``torchlean.matmul`` / ``Tensor.matmul`` for two 2-D tensors to the fused tape variants
  ``linear_fast``, ``mse_loss_fast`` and ``matmul_fast`` (torchlean.ops.fast), with
  ``fast_gpu_matmul_precision`` as their GEMM precision. Off by default: nothing changes then.
* ``use_gpu`` says where the fast variants expect their tensors: on CUDA (True) or on the CPU
  (False). Tensors never move silently: a tensor on the other device is a ``DeviceError``.
* ``fast_gpu_matmul_precision``: "fp32" (SGEMM over float32 buffers: bmm's precision) or "fp64"
  (inputs widened to float64, DGEMM, one rounding to float32; on an H200 DGEMM runs on FP64
  tensor cores at about SGEMM's speed).

``fast_matmul(a, b, use_gpu=False, precision="fp32")`` multiplies float64 host arrays (the seed's
FastMatmul over Lean Floats): "fp32" rounds them to float32 buffers and runs one SGEMM (on the
current CUDA device, or NumPy's float32 BLAS), "fp64" runs DGEMM on the float64 data itself (cuBLAS,
or NumPy's float64 BLAS on the CPU) and agrees with NumPy float64 to ~1e-16 n relative to |a||b|.
``gpu_matmul_fp64(a, b)`` is the seed's default GPU matmul alias: that FP64 path on the GPU.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import ops
from .errors import ArgumentError, DeviceError, ShapeError
from .ops.fast_options import (PRECISIONS, GpuMatmulPrecision, Options, check_bool, check_precision,  # noqa: F401
                               get_options, options, set_options, state)
from .runtime import primitives as P
from .runtime.buffer import Buffer
from .runtime.device import cuda_unavailable_reason, get_context
from .runtime.primitives_fast import matmul_f64_host
from .tensor import Tensor

__all__ = ["GpuMatmulPrecision", "PRECISIONS", "Options", "get_options", "set_options", "options", "fast_matmul",
           "gpu_matmul_fp64", "matmul"]

# -- fast_matmul over float64 host arrays --------------------------------------------------------
def _host_matrix(op: str, name: str, x: Any) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise ArgumentError(f"{op}: {name} must be a numpy.ndarray of float64, got {type(x).__name__}")
    if x.dtype != np.float64:
        raise ArgumentError(f"{op}: {name} must have dtype float64, got {x.dtype}")
    if x.ndim != 2:
        raise ShapeError(f"{op}: {name} must be 2-D, got shape {x.shape} (rank {x.ndim})")
    return x


def _cuda_context(op: str):
    reason = cuda_unavailable_reason()
    if reason is not None:
        raise DeviceError(f"{op}: use_gpu=True but CUDA is not available ({reason}); "
                          "pass use_gpu=False to compute on the CPU (there is no silent CPU fallback)")
    return get_context("cuda", op)


def fast_matmul(a: np.ndarray, b: np.ndarray, use_gpu: bool = False, precision: str = "fp32") -> np.ndarray:
    """a (m, n) @ b (n, p) for float64 host arrays, as a new float64 (m, p) array.

    precision "fp64": one float64 GEMM of the float64 data (cuBLAS DGEMM on the current CUDA device
    when use_gpu, else NumPy's float64 BLAS): within ~n 1.1e-16 |a||b| of the exact product.
    precision "fp32": a and b rounded to float32 buffers (on CUDA when use_gpu, else the CPU) and
    multiplied by one float32 GEMM (fast_gemm, fp64 = 0), the result widened back: within
    fast_gemm's fp32 contract of the product of the rounded inputs. Values beyond float32's range
    become +-inf there. NaN and inf follow IEEE in both.
    use_gpu=True without a usable GPU raises DeviceError (no silent fallback to the CPU).
    """
    return _fast_matmul("fast_matmul", a, b, use_gpu, precision)


def _fast_matmul(op: str, a: Any, b: Any, use_gpu: Any, precision: Any) -> np.ndarray:
    a = _host_matrix(op, "a", a)
    b = _host_matrix(op, "b", b)
    use_gpu = check_bool(op, "use_gpu", use_gpu)
    precision = check_precision(op, precision)
    m, n = a.shape
    n2, p = b.shape
    if n != n2:
        raise ShapeError(f"{op}: a {a.shape} and b {b.shape} cannot be multiplied ({n} != {n2})")
    ctx = _cuda_context(op) if use_gpu else None
    if precision == "fp64":
        if ctx is None:
            with np.errstate(all="ignore"):
                return np.matmul(a, b) if n else np.zeros((m, p))
        return matmul_f64_host(a, b, ctx)
    device = "cpu" if ctx is None else ctx.name
    with np.errstate(over="ignore"):
        a32, b32 = a.astype(np.float32), b.astype(np.float32)
    ab, bb = Buffer.from_numpy(a32.reshape(-1), device), Buffer.from_numpy(b32.reshape(-1), device)
    out = P.fast_gemm(ab, bb, None, m, n, p, 0, 0, 0)
    result = out.to_numpy().astype(np.float64).reshape(m, p)
    for buf in (ab, bb, out):
        buf.release()
    return result


def gpu_matmul_fp64(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The seed's default GPU matmul alias: the FP64 cuBLAS path for float64 host matrices,
    ``fast_matmul(a, b, use_gpu=True, precision="fp64")`` (DGEMM on the current CUDA device).
    Without a usable GPU it raises DeviceError: it never falls back to the CPU."""
    return _fast_matmul("gpu_matmul_fp64", a, b, True, "fp64")


# -- the front end's matmul: routed to matmul_fast when fast kernels are on -----------------------
def matmul(a: Any, b: Any) -> Any:
    """PyTorch matmul; with ``Options.fast_kernels`` on, two 2-D tensors go to ``matmul_fast`` at
    ``Options.fast_gpu_matmul_precision``."""
    opts = state["options"]
    if opts.fast_kernels and isinstance(a, Tensor) and isinstance(b, Tensor) and a.ndim == 2 and b.ndim == 2:
        return ops.matmul_fast(a, b, opts.fast_gpu_matmul_precision)
    return ops.matmul(a, b)
