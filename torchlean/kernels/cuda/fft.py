"""CUDA fft family: N-D FFTs through CuPy's cupy.fft (cuFFT plans, cached by CuPy's plan cache).

* Axes of length 1 are left out of every transform (their DFT is the identity), so cuFFT never sees
  a length-1 transform.
* fftn_c2c: cupy.fft.fftn / ifftn on the complex64 view, unnormalized (norm "backward" forward,
  "forward" inverse).
* rfftn_r2c: cupy.fft.rfftn (one N-D R2C plan) when every axis is longer than 1; otherwise the R2C
  along the last axis (or a widening copy for length 1) and the C2C over the remaining leading axes.
* irfftn_c2r: NumPy's definition as a composition, never cuFFT's N-D C2R (whose treatment of a
  spectrum that is not Hermitian along the leading axes is not specified): the unnormalized inverse
  C2C over the leading axes, the imaginary parts of the last axis's bin 0 and (even n) bin n/2 set
  to 0 (the definition ignores them; cuFFT's C2R does not promise to), then the 1-D C2R.
* The scale and the copy into a free-list array are one elementwise pass: the result is a new
  array of the free list, no view of CuPy's FFT outputs, never an input.
"""

from __future__ import annotations

import cupy
import numpy as np

from .launch import empty

__all__ = ["fftn_c2c", "rfftn_r2c", "irfftn_c2r"]

_F32 = np.float32


def _complex(a, shape: tuple):
    """The packed float32 array as complex64 of ``shape`` (a copy only when misaligned for complex64)."""
    if a.data.ptr % 8:
        a = a.copy()
    return a.view(cupy.complex64).reshape(shape)


def _axes(dims: tuple, first: int = 1) -> tuple[int, ...]:
    return tuple(first + i for i, n in enumerate(dims) if n > 1)


def _finish(y, scale: float):
    """scale * y, flat float32 ([re, im] pairs for complex y), written into a new free-list array."""
    y = cupy.ascontiguousarray(y)
    flat = (y.view(cupy.float32) if y.dtype == cupy.complex64 else y).reshape(-1)
    out = empty(flat.size)
    if scale == 1.0:
        cupy.copyto(out, flat)
    else:
        cupy.multiply(flat, _F32(scale), out=out)
    return out


def fftn_c2c(x, batch, dims, inverse, scale):
    dims = tuple(dims)
    if batch * int(np.prod(dims)) == 0:
        return empty(0)
    z = _complex(x, (batch,) + dims)
    axes = _axes(dims)
    if axes:
        f = cupy.fft.ifftn if inverse else cupy.fft.fftn
        z = f(z, axes=axes, norm="forward" if inverse else "backward")
    return _finish(z, scale)


def rfftn_r2c(x, batch, dims, scale):
    dims = tuple(dims)
    if batch * int(np.prod(dims)) == 0:
        return empty(0)
    xr = x.reshape((batch,) + dims)
    if min(dims) > 1:
        return _finish(cupy.fft.rfftn(xr, axes=tuple(range(1, 1 + len(dims)))), scale)
    z = xr.astype(cupy.complex64) if dims[-1] == 1 else cupy.fft.rfft(xr, axis=-1)
    lead = _axes(dims[:-1])
    if lead:
        z = cupy.fft.fftn(z, axes=lead)
    return _finish(z, scale)


def irfftn_c2r(spec, batch, dims, scale):
    dims = tuple(dims)
    if batch * int(np.prod(dims)) == 0:
        return empty(0)
    n = dims[-1]
    z = _complex(spec, (batch,) + dims[:-1] + (n // 2 + 1,))
    lead = _axes(dims[:-1])
    y = cupy.fft.ifftn(z, axes=lead, norm="forward") if lead else z.copy()  # a new array, ours to edit
    y = cupy.ascontiguousarray(y)
    y[..., 0].imag = 0
    if n % 2 == 0:
        y[..., n // 2].imag = 0
    r = y.real if n == 1 else cupy.fft.irfft(y, n=n, axis=-1, norm="forward")
    return _finish(r, scale)
