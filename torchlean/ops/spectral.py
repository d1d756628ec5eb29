"""Differentiable ops of the spectral family: rfft1d_packed, irfft1d_packed and spectral_conv1d.

* ``rfft1d_packed(x)``: the unnormalized real FFT of the last axis, any leading axes, output
  (..., n//2+1, 2) = [re, im]. VJP (the adjoint of X_k = sum_t x_t e^{-2 pi i k t/n}):
  dx_t = sum_k Re(g_k e^{2 pi i k t/n}) over k = 0..n//2 = n irfft(g / c)_t, c_k = 1 at bin 0 and
  (even n) bin n/2, 2 elsewhere (irfft doubles the interior bins and scales by 1/n; the factor is
  applied to g before the inverse). The imaginary parts of g at bin 0 and bin n/2 get no weight
  (sin vanishes there), exactly as irfft ignores them.
* ``irfft1d_packed(spec, n)``: the normalized inverse of a half spectrum (..., n//2+1, 2) -> (..., n).
  VJP: dRe X_k = (c_k/n) Re G_k, dIm X_k = (c_k/n) Im G_k with G = rfft(g); the ignored imaginary
  parts (bin 0, bin n/2 for even n) get gradient exactly 0.
* ``spectral_conv1d(x, w_re, w_im, modes)``: the FNO spectral convolution on x (batch, grid, width)
  or (grid, width) (channels LAST), w_re, w_im (modes, width, width) indexed [k, in, out]:
  y = irfft(Y) along grid, Y[k, o] = sum_i rfft(x)[k, i] (w_re[k, i, o] + i w_im[k, i, o]) for
  k < modes, 0 above. One tape node; VJP: dx = spectral_conv1d_rfft_bwd_x, (dw_re, dw_im) from the
  fused spectral_conv1d_rfft_bwd_w (one pass for both).

PyTorch has no functions with these names or layouts (torch.fft returns complex tensors), so
FUNCTIONAL is empty: nothing here claims a torch signature.
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
from ._base import Tensor, fbuf, new, same_device

__all__ = ["rfft1d_packed", "irfft1d_packed", "spectral_conv1d"]
FUNCTIONAL: list[str] = []


def _input(op: str, name: str, x: Any) -> Tensor:
    if not isinstance(x, Tensor):
        raise DTypeError(f"{op}: argument {name} must be a Tensor, got {type(x).__name__}")
    return x if x._buf is not None else x.float()


def _length(op: str, n: Any) -> int:
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or int(n) < 1:
        raise ArgumentError(f"{op}: argument n must be an int >= 1, got {n!r}")
    return int(n)


def _bin_weights(n: int, batch: int, device: str, inverse_of_c: bool) -> Buffer:
    """(batch, n//2+1, 2) per-bin factors: n / c_k (rfft's VJP) or c_k / n with 0 on the ignored
    imaginary parts (irfft's VJP)."""
    bins = n // 2 + 1
    k = np.arange(bins)
    ck = np.where((k == 0) | (2 * k == n), 1.0, 2.0)
    v = np.empty((bins, 2))
    if inverse_of_c:
        v[:, 0] = v[:, 1] = n / ck
    else:
        v[:, 0] = v[:, 1] = ck / n
        v[0, 1] = 0.0
        if n % 2 == 0:
            v[bins - 1, 1] = 0.0
    vec = Buffer.from_numpy(v.reshape(-1).astype(np.float32), device)
    if batch == 1:
        return vec
    out = P.broadcast_vec_to_rows(vec, batch, 2 * bins)
    vec.release()
    return out


def rfft1d_packed(x: Tensor) -> Tensor:
    """Unnormalized real FFT of the last axis: (..., n) -> (..., n//2+1, 2) = [re, im]."""
    op = "rfft1d_packed"
    x = _input(op, "x", x)
    if x.ndim == 0 or x.shape[-1] < 1:
        raise ShapeError(f"{op}: expected a last axis of length >= 1, got shape {x.shape}")
    n = x.shape[-1]
    lead = tuple(x.shape[:-1])
    batch = math.prod(lead)
    bins = n // 2 + 1
    out = new(P.rfft1d_packed(fbuf(op, x), batch, n), lead + (bins, 2))

    def vjp(g: Buffer):
        w = _bin_weights(n, batch, x.device, inverse_of_c=True)
        z = P.mul(g, w)
        w.release()
        dx = P.irfft1d_packed(z, batch, n)
        z.release()
        return (dx,)

    return autograd.record(op, out, (x,), vjp)


def irfft1d_packed(spec: Tensor, n: int) -> Tensor:
    """Normalized inverse real FFT: (..., n//2+1, 2) -> (..., n); Im of bins 0 and n/2 ignored."""
    op = "irfft1d_packed"
    spec = _input(op, "spec", spec)
    n = _length(op, n)
    bins = n // 2 + 1
    if spec.ndim < 2 or tuple(spec.shape[-2:]) != (bins, 2):
        raise ShapeError(f"{op}: expected spec of shape (..., {bins}, 2) for n = {n}, got {spec.shape}")
    lead = tuple(spec.shape[:-2])
    batch = math.prod(lead)
    out = new(P.irfft1d_packed(fbuf(op, spec), batch, n), lead + (n,))

    def vjp(g: Buffer):
        G = P.rfft1d_packed(g, batch, n)
        w = _bin_weights(n, batch, spec.device, inverse_of_c=False)
        ds = P.mul(G, w)
        G.release()
        w.release()
        return (ds,)

    return autograd.record(op, out, (spec,), vjp)


def spectral_conv1d(x: Tensor, w_re: Tensor, w_im: Tensor, modes: int) -> Tensor:
    """FNO spectral convolution along the grid axis of x (batch, grid, width) or (grid, width)."""
    op = "spectral_conv1d"
    x = _input(op, "x", x)
    w_re = _input(op, "w_re", w_re)
    w_im = _input(op, "w_im", w_im)
    if x.ndim not in (2, 3):
        raise ShapeError(f"{op}: expected x of shape (batch, grid, width) or (grid, width), got {x.shape}")
    if isinstance(modes, bool) or not isinstance(modes, numbers.Integral):
        raise ArgumentError(f"{op}: argument modes must be an int, got {modes!r}")
    modes = int(modes)
    unbatched = x.ndim == 2
    batch = 1 if unbatched else x.shape[0]
    grid, width = x.shape[-2:]
    if not 0 <= modes <= grid // 2 + 1:
        raise ArgumentError(f"{op}: argument modes must be in [0, grid//2 + 1] = [0, {grid // 2 + 1}] for grid = "
                            f"{grid}, got {modes}")
    for name, w in (("w_re", w_re), ("w_im", w_im)):
        if tuple(w.shape) != (modes, width, width):
            raise ShapeError(f"{op}: argument {name} must have shape (modes, width, width) = "
                             f"{(modes, width, width)}, got {w.shape}")
    same_device(op, x, w_re, w_im)
    xb, wrb, wib = fbuf(op, x), fbuf(op, w_re), fbuf(op, w_im)
    dims = (grid, width, modes, batch)
    out = new(P.spectral_conv1d_rfft_fwd(xb, wrb, wib, *dims), tuple(x.shape))

    def vjp(g: Buffer):
        dx = P.spectral_conv1d_rfft_bwd_x(xb, wrb, wib, g, *dims) if x.requires_grad else None
        dwr = dwi = None
        if w_re.requires_grad or w_im.requires_grad:
            dwr, dwi = P.spectral_conv1d_rfft_bwd_w(xb, wrb, wib, g, *dims)
            if not w_re.requires_grad:
                dwr.release()
                dwr = None
            if not w_im.requires_grad:
                dwi.release()
                dwi = None
        return dx, dwr, dwi

    return autograd.record(op, out, (x, w_re, w_im), vjp)
