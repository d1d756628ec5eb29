"""Primitives of the fft family (checked, then dispatched like those in ``primitives``): FFTs over
the last k = 1, 2 or 3 axes of a contiguous float32 (batch, *dims) array, complex values packed as
[re, im] pairs (NumPy's complex64 viewed as float32).

* ``fftn_c2c(x, batch, dims, inverse, scale)``: x (batch, *dims, 2) -> same shape,
  y = scale * sum_t x_t exp(-+2 pi i k.t/n) (inverse: +). No implicit 1/n: the caller passes its
  norm's scale.
* ``rfftn_r2c(x, batch, dims, scale)``: real (batch, *dims) -> (batch, *dims[:-1], dims[-1]//2+1, 2).
* ``irfftn_c2r(spec, batch, dims, scale)``: (batch, *dims[:-1], dims[-1]//2+1, 2) -> real (batch, *dims):
  the unnormalized inverse C2C over the leading axes, then the 1-D C2R along the last (the
  imaginary parts of its bin 0 and, even n, bin n/2 are ignored), times scale: NumPy's irfftn.
Every dim is >= 1; batch may be 0. The results are new buffers.
"""

from __future__ import annotations

from typing import Any

from ..errors import ArgumentError
from .buffer import Buffer, check_buffer, wrap
from .checks import check_product, check_scalar, check_u32, check_u32_tuple
from .oom import run_allocating

__all__ = ["fftn_c2c", "rfftn_r2c", "irfftn_c2r"]


def _dims(op: str, batch: Any, dims: Any) -> tuple[int, tuple[int, ...]]:
    b = check_u32(op, "batch", batch)
    d = check_u32_tuple(op, "dims", dims)
    if not 1 <= len(d) <= 3:
        raise ArgumentError(f"{op}: argument dims must hold 1, 2 or 3 transform lengths, got {list(d)}")
    if min(d) < 1:
        raise ArgumentError(f"{op}: argument dims (the transform lengths) must all be >= 1, got {list(d)}")
    return b, d


def _half(op: str, b: int, d: tuple[int, ...]) -> int:
    """Elements of the packed half spectrum (batch, *dims[:-1], dims[-1]//2+1, 2)."""
    return check_product(op, "batch*prod(dims[:-1])*(dims[-1]//2+1)*2", b, *d[:-1], d[-1] // 2 + 1, 2)


def fftn_c2c(x: Buffer, batch: int, dims: Any, inverse: bool, scale: float) -> Buffer:
    """(batch, *dims, 2): scale times the forward (inverse=False) or inverse DFT over the dims."""
    op = "fftn_c2c"
    b, d = _dims(op, batch, dims)
    if not isinstance(inverse, bool):
        raise ArgumentError(f"{op}: argument inverse must be a bool, got {inverse!r}")
    s = check_scalar(op, "scale", scale)
    n = check_product(op, "batch*prod(dims)*2", b, *d, 2)
    check_buffer(op, "x", x, n)
    ctx = x._ctx
    return wrap(ctx, run_allocating(op, ctx, n, ctx.backend.fftn_c2c, x._data, b, d, inverse, s))


def rfftn_r2c(x: Buffer, batch: int, dims: Any, scale: float) -> Buffer:
    """(batch, *dims[:-1], dims[-1]//2+1, 2): scale times the forward DFT of real x (batch, *dims),
    bins 0..dims[-1]//2 along the last axis."""
    op = "rfftn_r2c"
    b, d = _dims(op, batch, dims)
    s = check_scalar(op, "scale", scale)
    check_buffer(op, "x", x, check_product(op, "batch*prod(dims)", b, *d))
    ctx = x._ctx
    return wrap(ctx, run_allocating(op, ctx, _half(op, b, d), ctx.backend.rfftn_r2c, x._data, b, d, s))


def irfftn_c2r(spec: Buffer, batch: int, dims: Any, scale: float) -> Buffer:
    """(batch, *dims): scale times the unnormalized inverse of a half spectrum (NumPy's irfftn)."""
    op = "irfftn_c2r"
    b, d = _dims(op, batch, dims)
    s = check_scalar(op, "scale", scale)
    check_buffer(op, "spec", spec, _half(op, b, d))
    n = check_product(op, "batch*prod(dims)", b, *d)
    ctx = spec._ctx
    return wrap(ctx, run_allocating(op, ctx, n, ctx.backend.irfftn_c2r, spec._data, b, d, s))


