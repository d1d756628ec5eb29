"""CPU fft family: N-D FFTs through SciPy's pocketfft in single precision (complex64 computation; the
contract's error bound holds for it, see tests/test_fft_primitives.py), the scale applied once at the end.

The packed [re, im] layout is a complex64 array viewed as float32, so each primitive is one
pocketfft call plus views. Unnormalized transforms in both directions: forward with
norm="backward", inverse with norm="forward" (pocketfft then multiplies by nothing).
irfftn_c2r is scipy.fft.irfftn, which is NumPy's definition (C2C inverse over the leading axes, then
the C2R along the last, ignoring the imaginary parts of that axis's bins 0 and n/2).
Every result is a new array.
"""

from __future__ import annotations

import numpy as np
import scipy.fft as sfft

from .parallel import parts

__all__ = ["fftn_c2c", "rfftn_r2c", "irfftn_c2r"]

F32, C64 = np.float32, np.complex64
_PARALLEL_MIN = 1 << 15  # elements per pocketfft thread, as spectral.py's transforms use


def _workers(elems: int) -> int:
    """pocketfft's threads, sized by the CPU's one parallel policy (parallel.parts)."""
    return parts(elems, elems, _PARALLEL_MIN)


def _complex(a: np.ndarray, shape: tuple) -> np.ndarray:
    """A packed (..., 2) float32 array as complex64 of ``shape``, without a copy when aligned."""
    a = np.ascontiguousarray(a, dtype=F32)
    if a.ctypes.data % 8:
        a = a.copy()
    return a.view(C64).reshape(shape)


def _finish(y: np.ndarray, source: np.ndarray, scale: float, real: bool) -> np.ndarray:
    """The flat float32 result, scaled in place (one rounding): always a new array, never the input."""
    out = np.ascontiguousarray(y, dtype=F32 if real else C64)
    if np.may_share_memory(out, source):
        out = out.copy()
    flat = out.reshape(-1) if real else out.view(F32).reshape(-1)
    if scale != 1.0:  # on the float32 view: re and im each times scale (inf * 0 never enters)
        flat *= F32(scale)
    return flat


def _axes(dims: tuple) -> tuple[int, ...]:
    return tuple(range(1, 1 + len(dims)))


def fftn_c2c(x, batch, dims, inverse, scale):
    n = batch * int(np.prod(dims))
    if n == 0:
        return np.zeros(0, F32)
    z = _complex(x, (batch,) + tuple(dims))
    f = sfft.ifftn if inverse else sfft.fftn
    y = f(z, axes=_axes(dims), norm="forward" if inverse else "backward", workers=_workers(n))
    return _finish(y, x, scale, real=False)


def rfftn_r2c(x, batch, dims, scale):
    n = batch * int(np.prod(dims))
    if n == 0:
        return np.zeros(0, F32)
    y = sfft.rfftn(x.reshape((batch,) + tuple(dims)), axes=_axes(dims), workers=_workers(n))
    return _finish(y, x, scale, real=False)


def irfftn_c2r(spec, batch, dims, scale):
    n = batch * int(np.prod(dims))
    if n == 0:
        return np.zeros(0, F32)
    z = _complex(spec, (batch,) + tuple(dims[:-1]) + (dims[-1] // 2 + 1,))
    y = sfft.irfftn(z, s=tuple(dims), axes=_axes(dims), norm="forward", workers=_workers(n))
    return _finish(y, spec, scale, real=True)
