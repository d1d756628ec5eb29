"""Fast tape variants (seed page FastKernels: Tape.linearFast, Tape.matmulFast, Tape.mseLossFast).

Each is ONE tape node whose forward and backward are single fused primitives:

* ``linear_fast(x, weight, bias=None, precision="fp32")``: y = x W^T + b as one fast_gemm with the
  bias fused in (the normal linear is bmm_nt, a broadcast and an add); backward dx = g W,
  dW = g^T x (fast_gemm with GEMM flags, no transposed copies), db = column sums of g, at the same
  precision as the forward.
* ``matmul_fast(a, b, precision="fp32")``: 2-D only (as the seed); backward dA = g b^T, dB = a^T g.
* ``mse_loss_fast(input, target, reduction="mean")``: one reduction pass (float64 accumulation, no
  difference buffer kept for the backward: the node keeps no workspace) and a one-pass backward
  whose bits equal mse_loss's; "none" is the normal mse_loss.

precision "fp32" is bmm's float32 GEMM; "fp64" computes every GEMM in float64 and rounds once
(torchlean.contract.fast). The tensors stay where they are: the process-global
``torchlean.Options.use_gpu`` says where they are expected, and a tensor on the other device is a
DeviceError (no silent device change). With ``Options.fast_kernels`` on, the front end
(nn.functional.linear / mse_loss, ``@`` on 2-D tensors) routes here.
"""

from __future__ import annotations

from .. import autograd
from ..errors import ArgumentError, DeviceError, ShapeError
from ..runtime import primitives as P
from ..runtime.buffer import Buffer
from ._base import Tensor, fbuf, new, numel, operand, same_device
from .fast_options import check_precision, get_options

__all__ = ["linear_fast", "matmul_fast", "mse_loss_fast"]
FUNCTIONAL: list[str] = []


def _check_device(op: str, *ts: Tensor) -> str:
    dev = same_device(op, *ts)
    use_gpu = get_options().use_gpu
    on_gpu = dev != "cpu"
    if use_gpu and not on_gpu:
        raise DeviceError(f"{op}: torchlean.Options has use_gpu=True but the tensors are on {dev}; move them with "
                          ".to('cuda') or set use_gpu=False (fast kernels never move tensors silently)")
    if on_gpu and not use_gpu:
        raise DeviceError(f"{op}: the tensors are on {dev} but torchlean.Options has use_gpu=False; set "
                          "use_gpu=True (torchlean.set_options / torchlean.options) or move them to the cpu "
                          "(fast kernels never move tensors silently)")
    return dev


def linear_fast(x: Tensor, weight: Tensor, bias: Tensor | None = None, precision: str = "fp32") -> Tensor:
    """y = x W^T + b (PyTorch layout: weight (out, in)); x may have any leading dims. One fast_gemm
    with the bias fused; backward: dx = g W, dW = g^T x (fast_gemm flags), db = sum of g's rows."""
    op = "linear_fast"
    f64 = int(check_precision(op, precision) == "fp64")
    if not isinstance(x, Tensor) or not isinstance(weight, Tensor) or (bias is not None and not isinstance(bias, Tensor)):
        raise ArgumentError(f"{op}: expected tensors for x, weight and bias, got {type(x).__name__}, "
                            f"{type(weight).__name__}, {type(bias).__name__}")
    if weight.ndim != 2 or x.ndim == 0 or x.shape[-1] != weight.shape[1]:
        raise ShapeError(f"{op}: input {x.shape} does not fit weight {weight.shape} "
                         f"(expected (..., {weight.shape[-1] if weight.ndim else '?'}))")
    if bias is not None and bias.shape != (weight.shape[0],):
        raise ShapeError(f"{op}: bias shape {bias.shape} does not match weight {weight.shape} "
                         f"(expected ({weight.shape[0]},))")
    parents = (x, weight) if bias is None else (x, weight, bias)
    _check_device(op, *parents)
    n_out, n_in = weight.shape
    rows = numel(x.shape[:-1])
    xb, wb = fbuf(op, x), fbuf(op, weight)
    bb = None if bias is None else fbuf(op, bias)
    out = new(P.fast_gemm(xb, wb, bb, rows, n_in, n_out, 0, 1, f64), x.shape[:-1] + (n_out,))

    def vjp(g: Buffer):
        dx = P.fast_gemm(g, wb, None, rows, n_out, n_in, 0, 0, f64) if x.requires_grad else None
        dw = P.fast_gemm(g, xb, None, n_out, rows, n_in, 1, 0, f64) if weight.requires_grad else None
        if bias is None:
            return dx, dw
        return dx, dw, (P.reduce_sum_axis0(g, rows, n_out) if bias.requires_grad else None)

    return autograd.record(op, out, parents, vjp)


def matmul_fast(a: Tensor, b: Tensor, precision: str = "fp32") -> Tensor:
    """(m, n) @ (n, p) -> (m, p), 2-D tensors only (the seed's Tape.matmulFast). One fast_gemm;
    backward dA = g b^T, dB = a^T g as GEMM flags (no transposed copies)."""
    op = "matmul_fast"
    f64 = int(check_precision(op, precision) == "fp64")
    if not isinstance(a, Tensor) or not isinstance(b, Tensor):
        raise ArgumentError(f"{op}: expected two tensors, got {type(a).__name__} and {type(b).__name__}")
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ShapeError(f"{op}: expected 2-D tensors (m, n) and (n, p), got shapes {a.shape} and {b.shape}")
    _check_device(op, a, b)
    (m, n), p = a.shape, b.shape[1]
    ab, bb = fbuf(op, a), fbuf(op, b)
    out = new(P.fast_gemm(ab, bb, None, m, n, p, 0, 0, f64), (m, p))

    def vjp(g: Buffer):
        da = P.fast_gemm(g, bb, None, m, p, n, 0, 1, f64) if a.requires_grad else None
        db = P.fast_gemm(ab, g, None, n, m, p, 1, 0, f64) if b.requires_grad else None
        return da, db

    return autograd.record(op, out, (a, b), vjp)


def mse_loss_fast(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    """mean (or sum) of (input - target)^2 in one float64 reduction pass, rounded once; the VJP is
    one elementwise pass (g 2 (input - target) / n, the bits of mse_loss's); the target's gradient
    is its negation. reduction "none" is the normal ``mse_loss``."""
    op = "mse_loss_fast"
    if not isinstance(input, Tensor):
        raise ArgumentError(f"{op}: input must be a tensor, got {type(input).__name__}")
    if reduction not in ("mean", "sum", "none"):
        raise ArgumentError(f"{op}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    target = operand(op, target, input)
    if input.shape != target.shape:
        raise ShapeError(f"{op}: input shape {input.shape} and target shape {target.shape} differ")
    _check_device(op, input, target)
    if reduction == "none":
        from .nn import mse_loss

        return mse_loss(input, target, "none")
    n = input.numel()
    mean = int(reduction == "mean")
    ib, tb = fbuf(op, input), fbuf(op, target)
    out = new(P.mse_loss_fwd(ib, tb, n, mean), ())

    def vjp(g: Buffer):
        d = P.mse_loss_bwd(ib, tb, g, n, mean)
        return d, (P.scale(d, -1.0) if target.requires_grad else None)

    return autograd.record(op, out, (input, target), vjp)
