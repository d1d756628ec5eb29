"""Differentiable ops of the fft family on float32 real views (complex values as [re, im] pairs in a
last axis of size 2): one tape node each, over the last k = 1, 2 or 3 signal axes.

* ``fftn_c2c(x, k, inverse, scale)``: x (..., *dims, 2) -> same shape, scale times the forward
  (inverse=False) or inverse DFT over dims. The real transpose of a complex linear map is its
  conjugate transpose, and the DFT matrix is symmetric, so the VJP is the opposite transform with
  the same scale: dx = fftn_c2c(g, not inverse, scale).
* ``rfftn_r2c(x, k, scale)``: real x (..., *dims) -> (..., *dims[:-1], dims[-1]//2+1, 2).
  y = scale A x with A the half-spectrum rows of the DFT; dx = Re(A^H g) scale
    = scale Re sum_{k} g_k e^{+2 pi i k.t/n} = irfftn_c2r(g / c, scale),
  since irfftn_c2r(Y)_t = sum_k c_k Re(Y_k e^{2 pi i k.t/n}) (c_k = 1 at the last axis's bin 0 and,
  even n, bin n/2, else 2): dividing g by c_k per bin undoes its Hermitian weights.
* ``irfftn_c2r(spec, k, n, scale)``: (..., *lead, n//2+1, 2) -> real (..., *lead, n), NumPy's irfftn
  times scale: y_t = scale sum_k c_k Re(X_k e^{i phi}), phi = 2 pi k.t/n. Its transpose:
  dRe X_k = scale c_k sum_t g_t cos phi, dIm X_k = -scale c_k sum_t g_t sin phi, that is
  c_k rfftn_r2c(g, scale)_k. sin phi vanishes for every t exactly at the bins whose every leading
  index is 0 or (even length) half the length and whose last index is 0 or n/2: those imaginary
  parts never reach y, and their gradient is set to exactly 0 (the others, bin 0 of the last axis
  with a nonzero leading index included, do reach y through the leading axes' C2C).

The ops check shapes; the front end (torchlean/fft.py) moves the transformed dims last, pads or
trims, and picks the scale of the norm.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from .. import autograd
from ..errors import ArgumentError, DTypeError, ShapeError
from ..runtime import primitives as P
from ..runtime.buffer import Buffer
from ._base import Tensor, fbuf, new

__all__ = ["fftn_c2c", "rfftn_r2c", "irfftn_c2r"]
FUNCTIONAL: list[str] = []


def _input(op: str, name: str, x: Any) -> Tensor:
    if not isinstance(x, Tensor):
        raise DTypeError(f"{op}: argument {name} must be a float32 Tensor, got {type(x).__name__}")
    return x if x._buf is not None else x.float()


def _k(op: str, k: Any, rank: int) -> int:
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or not 1 <= int(k) <= 3:
        raise ArgumentError(f"{op}: argument k (the number of transformed axes) must be 1, 2 or 3, got {k!r}")
    if int(k) > rank:
        raise ShapeError(f"{op}: expected at least {int(k)} signal axes, got a tensor of {rank}")
    return int(k)


def _scale(op: str, scale: Any) -> float:
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise ArgumentError(f"{op}: argument scale must be a real number, got {scale!r}")
    return float(scale)


def _signal(op: str, shape: tuple, k: int) -> tuple[int, tuple[int, ...]]:
    """(batch, dims) of the last k axes of ``shape``; every dim >= 1."""
    dims = tuple(shape[len(shape) - k:])
    if min(dims) < 1:
        raise ShapeError(f"{op}: every transformed axis must have length >= 1, got {dims}")
    return math.prod(shape[: len(shape) - k]), dims


def _rows_of(vec: np.ndarray, rows: int, device: str) -> Buffer:
    """A per-row factor vector, repeated over ``rows`` rows, on ``device``."""
    b = Buffer.from_numpy(vec.reshape(-1).astype(np.float32), device)
    if rows == 1:
        return b
    out = P.broadcast_vec_to_rows(b, rows, vec.size)
    b.release()
    return out


def _weighted(g: Buffer, vec: np.ndarray, rows: int, device: str) -> Buffer:
    w = _rows_of(vec, rows, device)
    out = P.mul(g, w)
    w.release()
    return out


def _ck(n: int) -> np.ndarray:
    k = np.arange(n // 2 + 1)
    return np.where((k == 0) | (2 * k == n), 1.0, 2.0)


def _c2r_grad_weights(dims: tuple[int, ...]) -> np.ndarray:
    """(*dims[:-1], n//2+1, 2): c_k on both parts, 0 on the imaginary parts that never reach y."""
    lead, n = dims[:-1], dims[-1]
    ck = _ck(n)
    w = np.empty(lead + (ck.size, 2))
    w[..., 0] = ck
    w[..., 1] = ck
    edge = np.ones(lead + (ck.size,), bool)
    for axis, m in enumerate(lead):
        idx = np.arange(m)
        on = (idx == 0) | (2 * idx == m)
        edge &= on.reshape((1,) * axis + (m,) + (1,) * (len(lead) - axis))
    last = np.arange(ck.size)
    edge &= (last == 0) | (2 * last == n)
    w[..., 1][edge] = 0.0
    return w


def fftn_c2c(x: Tensor, k: int, inverse: bool, scale: float) -> Tensor:
    """scale times the (inverse) DFT over the last k signal axes of x (..., *dims, 2)."""
    op = "fftn_c2c"
    x = _input(op, "x", x)
    if x.ndim < 1 or x.shape[-1] != 2:
        raise ShapeError(f"{op}: expected x of shape (..., 2) ([re, im] pairs), got {tuple(x.shape)}")
    k = _k(op, k, x.ndim - 1)
    s = _scale(op, scale)
    inv = bool(inverse)
    batch, dims = _signal(op, tuple(x.shape[:-1]), k)
    out = new(P.fftn_c2c(fbuf(op, x), batch, dims, inv, s), tuple(x.shape))

    def vjp(g: Buffer):
        return (P.fftn_c2c(g, batch, dims, not inv, s),)

    return autograd.record(op, out, (x,), vjp)


def rfftn_r2c(x: Tensor, k: int, scale: float) -> Tensor:
    """scale times the DFT of real x over its last k axes, the last one's bins 0..n//2."""
    op = "rfftn_r2c"
    x = _input(op, "x", x)
    k = _k(op, k, x.ndim)
    s = _scale(op, scale)
    batch, dims = _signal(op, tuple(x.shape), k)
    bins = dims[-1] // 2 + 1
    out_shape = tuple(x.shape[:-1]) + (bins, 2)
    out = new(P.rfftn_r2c(fbuf(op, x), batch, dims, s), out_shape)

    def vjp(g: Buffer):
        rows = batch * math.prod(dims[:-1])
        inv_c = np.repeat(1.0 / _ck(dims[-1]), 2)
        z = _weighted(g, inv_c, rows, x.device)
        dx = P.irfftn_c2r(z, batch, dims, s)
        z.release()
        return (dx,)

    return autograd.record(op, out, (x,), vjp)


def irfftn_c2r(spec: Tensor, k: int, n: int, scale: float) -> Tensor:
    """NumPy's irfftn over the last k signal axes of spec (..., *lead, n//2+1, 2), the last one of
    length n, times scale (unnormalized otherwise): (..., *lead, n)."""
    op = "irfftn_c2r"
    spec = _input(op, "spec", spec)
    if spec.ndim < 1 or spec.shape[-1] != 2:
        raise ShapeError(f"{op}: expected spec of shape (..., 2) ([re, im] pairs), got {tuple(spec.shape)}")
    k = _k(op, k, spec.ndim - 1)
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or int(n) < 1:
        raise ArgumentError(f"{op}: argument n (the last axis's output length) must be an int >= 1, got {n!r}")
    n = int(n)
    s = _scale(op, scale)
    cshape = tuple(spec.shape[:-1])
    if cshape[-1] != n // 2 + 1:
        raise ShapeError(f"{op}: expected a last signal axis of n//2 + 1 = {n // 2 + 1} bins for n = {n}, "
                         f"got shape {tuple(spec.shape)}")
    batch, half = _signal(op, cshape, k)
    dims = half[:-1] + (n,)
    out = new(P.irfftn_c2r(fbuf(op, spec), batch, dims, s), cshape[:-1] + (n,))

    def vjp(g: Buffer):
        G = P.rfftn_r2c(g, batch, dims, s)
        ds = _weighted(G, _c2r_grad_weights(dims), batch, spec.device)
        G.release()
        return (ds,)

    return autograd.record(op, out, (spec,), vjp)
