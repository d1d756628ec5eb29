"""matmul / bmm / linear on the bmm primitive (strided batched GEMM)."""

from __future__ import annotations

from typing import Any

from .. import autograd
from ..errors import ShapeError
from ..runtime import primitives as P
from ..runtime.buffer import Buffer
from ._base import Tensor, broadcast_shapes, fbuf, new, numel, operand, same_device, tensor_arg
from .shape import expand, reshape


def bmm(a: Tensor, b: Tensor) -> Tensor:
    """(batch, m, n) @ (batch, n, p) -> (batch, m, p). VJP: dA = g B^T, dB = A^T g."""
    tensor_arg("bmm", "input", a)
    tensor_arg("bmm", "mat2", b)
    if a.ndim != 3 or b.ndim != 3 or a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1]:
        raise ShapeError(f"bmm: expected (batch, m, n) and (batch, n, p), got {a.shape} and {b.shape}")
    same_device("bmm", a, b)
    batch, m, n = a.shape
    p = b.shape[2]
    ab, bb = fbuf("bmm", a), fbuf("bmm", b)
    out = new(P.bmm(ab, bb, batch, m, n, p), (batch, m, p))

    def vjp(g: Buffer):
        # The transposes are GEMM flags (bmm_nt, bmm_tn): no transposed copies are made.
        da = P.bmm_nt(g, bb, batch, m, p, n) if a.requires_grad else None
        db = P.bmm_tn(ab, g, batch, n, m, p) if b.requires_grad else None
        return da, db

    return autograd.record("bmm", out, (a, b), vjp)


def matmul(a: Any, b: Any) -> Tensor:
    """PyTorch matmul: 1-D operands are promoted and squeezed back, batch dims broadcast."""
    like = a if isinstance(a, Tensor) else b
    if not isinstance(like, Tensor):
        tensor_arg("matmul", "input", a)
    a, b = operand("matmul", a, like), operand("matmul", b, like)
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(f"matmul: both operands need at least one dimension, got shapes {a.shape} and {b.shape}")
    a2 = reshape(a, (1, a.shape[0])) if a.ndim == 1 else a
    b2 = reshape(b, (b.shape[0], 1)) if b.ndim == 1 else b
    m, n = a2.shape[-2:]
    n2, p = b2.shape[-2:]
    if n != n2:
        raise ShapeError(f"matmul: shapes {a.shape} and {b.shape} cannot be multiplied ({n} != {n2})")
    batch_shape = broadcast_shapes("matmul", a2.shape[:-2], b2.shape[:-2])
    if a2.shape[:-2] != batch_shape:
        a2 = expand(a2, batch_shape + (m, n))
    if b2.shape[:-2] != batch_shape:
        b2 = expand(b2, batch_shape + (n, p))
    batch = numel(batch_shape)
    out = bmm(reshape(a2, (batch, m, n)), reshape(b2, (batch, n, p)))
    out_shape = batch_shape + ((m,) if a.ndim > 1 else ()) + ((p,) if b.ndim > 1 else ())
    return reshape(out, out_shape)


def linear_args(op: str, x: Any, weight: Any, bias: Any) -> None:
    """The DTypeError of a linear call whose input, weight or bias is not a Tensor."""
    tensor_arg(op, "input", x)
    tensor_arg(op, "weight", weight)
    if bias is not None:
        tensor_arg(op, "bias", bias)


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """y = x W^T + b (PyTorch layout: weight (out, in)); x may have any leading dims.

    One tape node over three GEMM-flag primitives: forward bmm_nt, or with a bias the float32
    fast_gemm that adds it in the GEMM's epilogue (fl(x W^T) + b, as a separate add would round it), backward
    dx = g W (bmm), dW = g^T x (bmm_tn), db = column sums of g. No transposed copies.
    """
    if not isinstance(x, Tensor) or not isinstance(weight, Tensor) or not (bias is None or isinstance(bias, Tensor)):
        linear_args("linear", x, weight, bias)
    if weight.ndim != 2 or x.ndim == 0 or x.shape[-1] != weight.shape[1]:
        raise ShapeError(f"linear: input {x.shape} does not fit weight {weight.shape} (expected (..., {weight.shape[-1] if weight.ndim else '?'}))")
    if bias is not None and bias.shape != (weight.shape[0],):
        raise ShapeError(f"linear: bias shape {bias.shape} does not match weight {weight.shape} (expected ({weight.shape[0]},))")
    parents = (x, weight) if bias is None else (x, weight, bias)
    dev = x.device
    if weight.device != dev or (bias is not None and bias.device != dev):  # (one call less per layer)
        same_device("linear", *parents)
    n_out, n_in = weight.shape
    rows = numel(x.shape[:-1])
    xb, wb = fbuf("linear", x), fbuf("linear", weight)
    if bias is None:
        yb = P.bmm_nt(xb, wb, 1, rows, n_in, n_out)
    else:  # the bias row added in the GEMM's epilogue (cuBLAS beta = 1): no broadcast buffer, no add
        yb = P.fast_gemm(xb, wb, fbuf("linear", bias), rows, n_in, n_out, 0, 1, 0)
    out = new(yb, x.shape[:-1] + (n_out,))

    def vjp(g: Buffer):
        if bias is not None and x.requires_grad and weight.requires_grad and bias.requires_grad:
            return P.linear_bwd(g, xb, wb, rows, n_in, n_out)  # the three products in one call
        dx = P.bmm(g, wb, 1, rows, n_out, n_in) if x.requires_grad else None
        dw = P.bmm_tn(g, xb, 1, n_out, rows, n_in) if weight.requires_grad else None
        if bias is None:
            return dx, dw
        return dx, dw, (P.reduce_sum_axis0(g, rows, n_out) if bias.requires_grad else None)

    return autograd.record("linear", out, parents, vjp)
