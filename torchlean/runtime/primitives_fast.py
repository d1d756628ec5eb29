"""Primitives of the fast-kernel family (seed page NN.Runtime.Autograd.Engine.FastKernels).

* ``fast_gemm(a, b, bias, m, k, n, trans_a, trans_b, fp64)``: out (m, n) = op(a) (m, k) @ op(b)
  (k, n), plus bias (n,) on every row when bias is not None. Row-major; trans_a means a is stored
  (k, m), trans_b means b is stored (n, k): the transposes are GEMM flags, nothing is copied.
  fp64 = 0: a float32 GEMM (cuBLAS SGEMM, or TF32 when ``set_allow_tf32(True)``, like bmm; NumPy's
  float32 BLAS on the CPU) with the bias fused into it (cuBLAS beta = 1). fp64 = 1: the inputs are
  widened to float64, multiplied by a float64 GEMM (cuBLAS DGEMM: on Hopper FP64 tensor cores,
  about as fast as SGEMM; NumPy's float64 BLAS on the CPU), the bias added in float64, and the
  result rounded to float32 once: within an ulp of the exact product where bmm is gamma(k) |A||B|
  away. k = 0 gives the bias (or zeros) on every row.
* ``mse_loss_fwd(input, target, n, mean)`` -> (1,): sum (input - target)^2, divided by n when
  mean, with the differences, squares and sum in float64 in a fixed order (bitwise repeatable on
  each device), rounded once. One pass over the inputs; no difference or square buffers.
* ``mse_loss_bwd(input, target, g, n, mean)`` -> (n,): fl(fl(fl(input - target) * g[0]) * c), c =
  float32(2 / n) for mean (2 for sum, or for n = 0): in one pass, the same operations in the same
  order as mse_loss's three-primitive VJP, so the bits are those of the normal op.

Flags (trans_a, trans_b, fp64, mean) are 0/1 ints (bools accepted). Inputs are never modified;
outputs are new Buffers.
"""

from __future__ import annotations

from typing import Any

from .buffer import Buffer, check_buffer, same_device, wrap
from .checks import check_flag, check_product, check_u32
from .device import DeviceContext
from .oom import run_allocating

__all__ = ["fast_gemm", "linear_bwd", "mse_loss_fwd", "mse_loss_bwd"]


def fast_gemm(a: Buffer, b: Buffer, bias: Buffer | None, m: int, k: int, n: int, trans_a: int, trans_b: int,
              fp64: int) -> Buffer:
    """op(a) (m, k) @ op(b) (k, n) (+ bias on every row): (m, n); fp64 = 1 computes in float64."""
    op = "fast_gemm"
    m_, k_, n_ = check_u32(op, "m", m), check_u32(op, "k", k), check_u32(op, "n", n)
    ta, tb, f64 = check_flag(op, "trans_a", trans_a), check_flag(op, "trans_b", trans_b), check_flag(op, "fp64", fp64)
    check_buffer(op, "a", a, check_product(op, "m*k", m_, k_))
    check_buffer(op, "b", b, check_product(op, "k*n", k_, n_))
    ctx = a._ctx
    if bias is None:
        if b._ctx is not ctx:  # (keywords build a dict: only for the error)
            same_device(op, a=a, b=b)
    else:
        check_buffer(op, "bias", bias, n_)
        if b._ctx is not ctx or bias._ctx is not ctx:
            same_device(op, a=a, b=b, bias=bias)
    n_out = check_product(op, "m*n", m_, n_)
    # (no local alias of bias's array: when the caller's bias Buffer dies as this frame is
    # cleared, the free list must see its array held by nobody; tests/ownership_audit.py)
    return wrap(ctx, run_allocating(op, ctx, n_out, ctx.backend.fast_gemm, a._data, b._data,
                                    None if bias is None else bias._data, m_, k_, n_, ta, tb, f64))


def linear_bwd(g: Buffer, x: Buffer, w: Buffer, rows: int, n_in: int, n_out: int) -> tuple[Buffer, Buffer, Buffer]:
    """(dx, dw, db) of y = x w^T + b for the cotangent g (rows, n_out), x (rows, n_in), w (n_out, n_in):
    dx = g w (rows, n_in), dw = g^T x (n_out, n_in), db = the column sums of g (n_out,). One call for
    the three products of a linear layer's backward (bmm, bmm_tn and reduce_sum_axis0, the same bounds)."""
    op = "linear_bwd"
    r, i, o = check_u32(op, "rows", rows), check_u32(op, "n_in", n_in), check_u32(op, "n_out", n_out)
    check_buffer(op, "g", g, check_product(op, "rows*n_out", r, o))
    check_buffer(op, "x", x, check_product(op, "rows*n_in", r, i))
    check_buffer(op, "w", w, check_product(op, "n_out*n_in", o, i))
    ctx = g._ctx
    if x._ctx is not ctx or w._ctx is not ctx:  # (keywords build a dict: only for the error)
        same_device(op, g=g, x=x, w=w)
    dx, dw, db = run_allocating(op, ctx, r * i + o * i + o, ctx.backend.linear_bwd, g._data, x._data, w._data, r, i, o)
    return wrap(ctx, dx), wrap(ctx, dw), wrap(ctx, db)


def _pair(op: str, input: Buffer, target: Buffer, n: Any):
    n_ = check_u32(op, "n", n)
    check_buffer(op, "input", input, n_)
    check_buffer(op, "target", target, n_)
    return n_


def mse_loss_fwd(input: Buffer, target: Buffer, n: int, mean: int) -> Buffer:
    """sum (input - target)^2 (/ n when mean; the mean of nothing is NaN) in float64, rounded once: (1,)."""
    op = "mse_loss_fwd"
    n_ = _pair(op, input, target, n)
    mn = check_flag(op, "mean", mean)
    ctx = same_device(op, input=input, target=target)
    return wrap(ctx, run_allocating(op, ctx, 1, ctx.backend.mse_loss_fwd, input._data, target._data, n_, mn))


def mse_loss_bwd(input: Buffer, target: Buffer, g: Buffer, n: int, mean: int) -> Buffer:
    """g[0] * 2 (input - target) (/ n when mean) as fl(fl(fl(input - target) g[0]) fl32(2/n)): (n,)."""
    op = "mse_loss_bwd"
    n_ = _pair(op, input, target, n)
    check_buffer(op, "g", g, 1)
    mn = check_flag(op, "mean", mean)
    ctx = same_device(op, input=input, target=target, g=g)
    return wrap(ctx, run_allocating(op, ctx, n_, ctx.backend.mse_loss_bwd, input._data, target._data, g._data, n_, mn))


def matmul_f64_host(a: Any, b: Any, ctx: DeviceContext) -> Any:
    """float64 host (m, k) @ (k, n) by one float64 GEMM on a CUDA device (``ctx``): the FP64 path of
    ``torchlean.fast_matmul``. Not a Buffer primitive (no table entry): host arrays in, a host array
    out; the caller has checked shapes and dtypes."""
    import cupy

    from ..kernels.cuda import fast as cuda_fast

    with cupy.cuda.Device(ctx.backend.device):
        return cuda_fast.matmul_f64(a, b)
