"""Float64 reference of the fft family: N-D complex FFT, real-to-complex and complex-to-real FFTs
over the last k = 1, 2 or 3 axes of a batch of arrays.

Written as explicit DFT matrices applied axis by axis (never an FFT). The matrices come from the
spectral family's ``rfft1d_packed`` of the unit vectors (direct sums with exactly reduced angles),
extended to all n bins by the symmetry X_{n-k} = conj(X_k) of a real input's DFT.

Conventions (``scale`` multiplies the result; nothing else is normalized):

* ``fftn_c2c(x, batch, dims, inverse, scale)``: x (batch, *dims, 2) [re, im] ->
  y = scale * sum_t x_t exp(-+2 pi i k.t / n) per axis (forward: -, inverse: +), same shape.
* ``rfftn_r2c(x, batch, dims, scale)``: real x (batch, *dims) -> (batch, *dims[:-1], dims[-1]//2+1, 2),
  the bins 0..dims[-1]//2 of the forward transform along the last axis, all bins along the others.
* ``irfftn_c2r(spec, batch, dims, scale)``: (batch, *dims[:-1], dims[-1]//2+1, 2) -> real (batch, *dims):
  the unnormalized inverse C2C over the leading axes, then the unnormalized 1-D C2R along the last,
  x_t = sum_k c_k Re(Y_k e^{2 pi i k t/n}) (c_k = 1 at bin 0 and, even n, bin n/2, else 2), which
  ignores the imaginary parts of those two bins of Y, not of the input: NumPy's ``irfftn``, also for
  spectra that are not Hermitian along the leading axes (the FNO's truncated spectra).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from .spectral import irfft1d_packed, rfft1d_packed

__all__ = ["fftn_c2c", "rfftn_r2c", "irfftn_c2r"]


@lru_cache(maxsize=64)
def _dft(n: int, inverse: bool) -> np.ndarray:
    """Complex (n, n): F[k, t] = exp(-2 pi i k t / n) (conjugated for the inverse)."""
    half = rfft1d_packed(np.eye(n), n, n).reshape(n, n // 2 + 1, 2)  # row t: the bins of e_t
    full = np.empty((n, n), complex)
    full[:, : n // 2 + 1] = half[..., 0] + 1j * half[..., 1]
    k = np.arange(n // 2 + 1, n)
    full[:, k] = np.conj(full[:, n - k])
    f = full.T.copy()
    f.flags.writeable = False
    return np.conj(f) if inverse else f


def _along(z: np.ndarray, axis: int, f: np.ndarray) -> np.ndarray:
    return np.moveaxis(np.tensordot(f, z, axes=([1], [axis])), 0, axis)


def _complex(a: np.ndarray, shape: tuple) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64).reshape(shape + (2,))
    return a[..., 0] + 1j * a[..., 1]


def _packed(z: np.ndarray) -> np.ndarray:
    return np.stack([z.real, z.imag], axis=-1).reshape(-1)


def _c2c_axes(z: np.ndarray, dims, first_axis: int, inverse: bool) -> np.ndarray:
    for i, n in enumerate(dims):
        z = _along(z, first_axis + i, _dft(int(n), bool(inverse)))
    return z


def fftn_c2c(x, batch, dims, inverse, scale):
    dims = tuple(int(d) for d in dims)
    z = _c2c_axes(_complex(x, (batch,) + dims), dims, 1, inverse)
    return _packed(float(scale) * z)


def rfftn_r2c(x, batch, dims, scale):
    dims = tuple(int(d) for d in dims)
    lead, n = dims[:-1], dims[-1]
    bins = n // 2 + 1
    rows = batch * math.prod(lead)
    z = _complex(rfft1d_packed(np.asarray(x, np.float64).reshape(-1), rows, n), (batch,) + lead + (bins,))
    return _packed(float(scale) * _c2c_axes(z, lead, 1, False))


def irfftn_c2r(spec, batch, dims, scale):
    dims = tuple(int(d) for d in dims)
    lead, n = dims[:-1], dims[-1]
    bins = n // 2 + 1
    rows = batch * math.prod(lead)
    z = _c2c_axes(_complex(spec, (batch,) + lead + (bins,)), lead, 1, True)
    # irfft1d_packed is the 1/n-normalized C2R: times n for the unnormalized one
    return irfft1d_packed(_packed(z), rows, n) * (n * float(scale))
