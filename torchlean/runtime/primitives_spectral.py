"""Primitives of the spectral family: real FFT, its inverse, and the FNO spectral convolution with its
VJPs (checked, then dispatched like those in ``primitives``).

* ``rfft1d_packed(x, batch, n)``: x (batch, n) -> (batch, n//2+1, 2) = [re, im] of the unnormalized
  DFT bins k = 0 .. n//2. n >= 1 (even or odd); batch may be 0.
* ``irfft1d_packed(spec, batch, n)``: (batch, n//2+1, 2) -> (batch, n), the normalized inverse
  x_t = (1/n) [Re X_0 + 2 sum_{0<k<n/2} Re(X_k e^{2 pi i k t/n}) + (n even) Re(X_{n/2}) (-1)^t]:
  the imaginary parts of bin 0 and (even n) bin n/2 are ignored.
* ``spectral_conv1d_rfft_fwd(x, w_re, w_im, grid, width, modes, batch=1)`` (the seed's positional
  arguments; the batch is a trailing extension): x (batch, grid, width) (channels last), w_re, w_im
  (modes, width, width) indexed [k, in, out]: y = irfft(Y) along grid with
  Y[k, o] = sum_i X[k, i] (w_re[k, i, o] + i w_im[k, i, o]) for k < modes, 0 above, X = rfft(x)
  along grid. 0 <= modes <= grid//2 + 1; modes = 0 keeps no bin (y and every gradient are zeros).
* ``spectral_conv1d_rfft_bwd_x / _bwd_wre / _bwd_wim(x, w_re, w_im, dy, grid, width, modes, batch=1)``: the exact VJPs
  (weight gradients summed over the batch); ``spectral_conv1d_rfft_bwd_w`` returns (dw_re, dw_im)
  from one pass (the tape uses it).
"""

from __future__ import annotations

from typing import Any

from ..errors import ArgumentError
from .buffer import Buffer, check_buffer, same_device, wrap
from .checks import check_product, check_u32
from .oom import run_allocating

__all__ = ["rfft1d_packed", "irfft1d_packed", "spectral_conv1d_rfft_fwd", "spectral_conv1d_rfft_bwd_x",
           "spectral_conv1d_rfft_bwd_wre", "spectral_conv1d_rfft_bwd_wim", "spectral_conv1d_rfft_bwd_w"]


def _fft_dims(op: str, batch: Any, n: Any) -> tuple[int, int, int]:
    b, n_ = check_u32(op, "batch", batch), check_u32(op, "n", n)
    if n_ < 1:
        raise ArgumentError(f"{op}: argument n (the transform length) must be >= 1, got {n_}")
    bins = n_ // 2 + 1
    check_product(op, "batch*(n//2+1)*2", b, bins, 2)
    return b, n_, bins


def rfft1d_packed(x: Buffer, batch: int, n: int) -> Buffer:
    """(batch, n//2+1, 2): [re, im] of the unnormalized DFT of each row of x (batch, n), bins 0..n//2."""
    op = "rfft1d_packed"
    b, n_, bins = _fft_dims(op, batch, n)
    check_buffer(op, "x", x, check_product(op, "batch*n", b, n_))
    ctx = x._ctx
    return wrap(ctx, run_allocating(op, ctx, b * bins * 2, ctx.backend.rfft1d_packed, x._data, b, n_))


def irfft1d_packed(spec: Buffer, batch: int, n: int) -> Buffer:
    """(batch, n): the inverse real FFT scaled by 1/n of a half spectrum spec (batch, n//2+1, 2);
    the imaginary parts of bin 0 and (even n) bin n/2 are ignored."""
    op = "irfft1d_packed"
    b, n_, bins = _fft_dims(op, batch, n)
    check_buffer(op, "spec", spec, b * bins * 2)
    n_out = check_product(op, "batch*n", b, n_)
    ctx = spec._ctx
    return wrap(ctx, run_allocating(op, ctx, n_out, ctx.backend.irfft1d_packed, spec._data, b, n_))


def _conv_dims(op: str, grid: Any, width: Any, modes: Any, batch: Any) -> tuple[int, int, int, int, int, int]:
    b, g = check_u32(op, "batch", batch), check_u32(op, "grid", grid)
    w, m = check_u32(op, "width", width), check_u32(op, "modes", modes)
    if g < 1:
        raise ArgumentError(f"{op}: argument grid (the transform length) must be >= 1, got {g}")
    if m > g // 2 + 1:
        raise ArgumentError(f"{op}: argument modes must be in [0, grid//2 + 1] = [0, {g // 2 + 1}] for grid = {g}, "
                            f"got {m}")
    n_x = check_product(op, "batch*grid*width", b, g, w)
    n_w = check_product(op, "modes*width*width", m, w, w)
    return b, g, w, m, n_x, n_w


def _conv_inputs(op: str, x: Buffer, w_re: Buffer, w_im: Buffer, n_x: int, n_w: int, **more: Buffer):
    check_buffer(op, "x", x, n_x)
    check_buffer(op, "w_re", w_re, n_w)
    check_buffer(op, "w_im", w_im, n_w)
    for k, v in more.items():
        check_buffer(op, k, v, n_x)
    return same_device(op, x=x, w_re=w_re, w_im=w_im, **more)


def spectral_conv1d_rfft_fwd(x: Buffer, w_re: Buffer, w_im: Buffer, grid: int, width: int, modes: int,
                             batch: int = 1) -> Buffer:
    """y (batch, grid, width) = irfft(Y) along grid, Y[k, o] = sum_i rfft(x)[k, i] (w_re + i w_im)[k, i, o]
    for k < modes, 0 above (the row vector of input channels times the (in, out) complex matrix)."""
    op = "spectral_conv1d_rfft_fwd"
    b, g, w, m, n_x, n_w = _conv_dims(op, grid, width, modes, batch)
    ctx = _conv_inputs(op, x, w_re, w_im, n_x, n_w)
    return wrap(ctx, run_allocating(op, ctx, n_x, ctx.backend.spectral_conv1d_rfft_fwd, x._data, w_re._data, w_im._data,
                           g, w, m, b))


def spectral_conv1d_rfft_bwd_x(x: Buffer, w_re: Buffer, w_im: Buffer, dy: Buffer, grid: int, width: int, modes: int,
                               batch: int = 1) -> Buffer:
    """dx (batch, grid, width): the VJP of spectral_conv1d_rfft_fwd wrt x (= irfft(rfft(dy) W^H))."""
    op = "spectral_conv1d_rfft_bwd_x"
    b, g, w, m, n_x, n_w = _conv_dims(op, grid, width, modes, batch)
    ctx = _conv_inputs(op, x, w_re, w_im, n_x, n_w, dy=dy)
    return wrap(ctx, run_allocating(op, ctx, n_x, ctx.backend.spectral_conv1d_rfft_bwd_x, x._data, w_re._data, w_im._data,
                           dy._data, g, w, m, b))


def _bwd_w_single(name: str, x: Buffer, w_re: Buffer, w_im: Buffer, dy: Buffer, grid: int, width: int, modes: int,
        batch: int = 1) -> Buffer:
    b, g, w, m, n_x, n_w = _conv_dims(name, grid, width, modes, batch)
    ctx = _conv_inputs(name, x, w_re, w_im, n_x, n_w, dy=dy)
    return wrap(ctx, run_allocating(name, ctx, n_w, getattr(ctx.backend, name), x._data, w_re._data, w_im._data,
                           dy._data, g, w, m, b))


def spectral_conv1d_rfft_bwd_wre(x: Buffer, w_re: Buffer, w_im: Buffer, dy: Buffer, grid: int, width: int,
        modes: int, batch: int = 1) -> Buffer:
    """dw_re (modes, width, width): the VJP wrt w_re, summed over the batch."""
    return _bwd_w_single("spectral_conv1d_rfft_bwd_wre", x, w_re, w_im, dy, grid, width, modes, batch)


def spectral_conv1d_rfft_bwd_wim(x: Buffer, w_re: Buffer, w_im: Buffer, dy: Buffer, grid: int, width: int,
        modes: int, batch: int = 1) -> Buffer:
    """dw_im (modes, width, width): the VJP wrt w_im, summed over the batch."""
    return _bwd_w_single("spectral_conv1d_rfft_bwd_wim", x, w_re, w_im, dy, grid, width, modes, batch)


def spectral_conv1d_rfft_bwd_w(x: Buffer, w_re: Buffer, w_im: Buffer, dy: Buffer, grid: int, width: int, modes: int,
                               batch: int = 1) -> tuple[Buffer, Buffer]:
    """(dw_re, dw_im) from one pass (the transforms of x and dy are shared)."""
    op = "spectral_conv1d_rfft_bwd_w"
    b, g, w, m, n_x, n_w = _conv_dims(op, grid, width, modes, batch)
    ctx = _conv_inputs(op, x, w_re, w_im, n_x, n_w, dy=dy)
    dwr, dwi = run_allocating(op, ctx, 2 * n_w, ctx.backend.spectral_conv1d_rfft_bwd_w, x._data, w_re._data, w_im._data,
                    dy._data, g, w, m, b)
    return wrap(ctx, dwr), wrap(ctx, dwi)
