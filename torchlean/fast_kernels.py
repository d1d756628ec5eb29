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

import contextlib
import dataclasses
from dataclasses import dataclass
from typing import Any, Iterator, Literal

import numpy as np

from .errors import ArgumentError, DeviceError, ShapeError

__all__ = ["GpuMatmulPrecision", "PRECISIONS", "Options", "get_options", "set_options", "options", "fast_matmul",
           "gpu_matmul_fp64", "matmul"]

GpuMatmulPrecision = Literal["fp32", "fp64"]
PRECISIONS = ("fp32", "fp64")


def check_precision(op: str, precision: Any, name: str = "precision") -> str:
    if isinstance(precision, str) and precision in PRECISIONS:
        return precision
    raise ArgumentError(f"{op}: {name} must be 'fp32' or 'fp64', got {precision!r}")


def _check_bool(op: str, name: str, value: Any) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise ArgumentError(f"{op}: {name} must be a bool, got {value!r} ({type(value).__name__})")


@dataclass(frozen=True)
class Options:
    """The seed's Torch.Options: fast_kernels (route linear, mse_loss and 2-D matmul to the fused
    variants), use_gpu (where those expect their tensors) and fast_gpu_matmul_precision ("fp32" or
    "fp64")."""

    fast_kernels: bool = False
    use_gpu: bool = False
    fast_gpu_matmul_precision: str = "fp32"

    def __post_init__(self) -> None:
        object.__setattr__(self, "fast_kernels", _check_bool("Options", "fast_kernels", self.fast_kernels))
        object.__setattr__(self, "use_gpu", _check_bool("Options", "use_gpu", self.use_gpu))
        check_precision("Options", self.fast_gpu_matmul_precision, "fast_gpu_matmul_precision")


_state = {"options": Options()}


def get_options() -> Options:
    """The Options in force (process-global)."""
    return _state["options"]


def set_options(opts: Options) -> Options:
    """Put ``opts`` in force; returns the previous Options."""
    if not isinstance(opts, Options):
        raise ArgumentError(f"set_options: expected a torchlean.Options, got {type(opts).__name__}")
    prev = _state["options"]
    _state["options"] = opts
    return prev


@contextlib.contextmanager
def options(opts: Options | None = None, **fields: Any) -> Iterator[Options]:
    """``with options(fast_kernels=True): ...``: ``opts`` (default: the Options in force) with
    ``fields`` replaced, in force for the block; the previous Options come back afterwards, also
    when the block raises."""
    base = get_options() if opts is None else opts
    if not isinstance(base, Options):
        raise ArgumentError(f"options: expected a torchlean.Options, got {type(base).__name__}")
    known = {f.name for f in dataclasses.fields(Options)}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ArgumentError(f"options: unknown field(s) {', '.join(unknown)}; the fields are {', '.join(sorted(known))}")
    new = dataclasses.replace(base, **fields) if fields else base
    prev = set_options(new)
    try:
        yield new
    finally:
        set_options(prev)


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
    from .runtime.device import cuda_unavailable_reason, get_context

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
    use_gpu = _check_bool(op, "use_gpu", use_gpu)
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
        from .kernels.cuda import fast as cuda_fast
        import cupy

        with cupy.cuda.Device(ctx.backend.device):
            return cuda_fast.matmul_f64(a, b)
    from .runtime import primitives as P
    from .runtime.buffer import Buffer

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
    from . import ops
    from .tensor import Tensor

    opts = _state["options"]
    if opts.fast_kernels and isinstance(a, Tensor) and isinstance(b, Tensor) and a.ndim == 2 and b.ndim == 2:
        return ops.matmul_fast(a, b, opts.fast_gpu_matmul_precision)
    return ops.matmul(a, b)
