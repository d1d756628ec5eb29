"""CPU spectral family: real FFTs through SciPy's pocketfft (float32 in, complex64 computation: NumPy's
numpy.fft would compute in float64), and the FNO spectral convolution.

The packed layout (batch, n//2+1, 2) of [re, im] is exactly a complex64 array viewed as float32, so
rfft and irfft are one pocketfft call each plus views. pocketfft's c2r ignores the imaginary parts
of bin 0 and bin n/2 (even n), as the convention asks.

Spectral convolution, two routes (both within the contract, which admits either):

* "dft": the truncated DFT as GEMMs (gemm.py: on the backend's pool, the basis shared by the batch
  entries) with a cached float32 basis per (grid, modes): forward
  X[b] = Bf (2 modes, grid) @ x[b] (rows 2k, 2k+1 = cos, -sin, so each mode's [Re X | Im X] is one
  contiguous 2 width row), the mixing as one real batched matmul over the modes with the block
  matrices [[w_re, w_im], [-w_im, w_re]], and the inverse y[b] = Bi (grid, 2 modes) @ Y[b]
  (Bi holds c_k/grid cos and -c_k/grid sin, with the sin exactly 0 at bins 0 and grid/2: their
  imaginary parts are ignored). 4 batch grid width modes multiply-adds per transform: for few
  modes far cheaper than FFTs of the whole grid plus the zero-filled half spectrum.
* "fft": scipy.fft.rfft along the grid axis, a complex batched matmul over the retained modes, a
  zero-filled half spectrum, scipy.fft.irfft. Chosen for many modes (the GEMM grows with modes, the
  FFT does not) or when the basis would be large.

Backward (exact VJPs of the real-linear map): dx runs the same route with the transposed mixing
(dx = Bf^T (dY W^T), dY = Bi^T dy; in FFT form dx = irfft(rfft(dy) W^H): the c_k/grid factors
cancel), and the weight gradients are sum_b [Xr Xi]^T [dYr dYi] (one batched matmul over the
modes, the sum over the batch inside it in BLAS's fixed order) with dW_re = P00 + P11 and
dW_im = P01 - P10. ``CONV_ROUTE`` ("auto", "dft" or "fft") forces a route (tests and benchmarks).
"""

from __future__ import annotations

import math

import numpy as np
import scipy.fft as sfft

from ..caches import ByteLRU
from ..spectral_basis import make_bases
from .gemm import gemm
from .parallel import parts

__all__ = ["rfft1d_packed", "irfft1d_packed", "spectral_conv1d_rfft_fwd", "spectral_conv1d_rfft_bwd_x",
           "spectral_conv1d_rfft_bwd_wre", "spectral_conv1d_rfft_bwd_wim", "spectral_conv1d_rfft_bwd_w"]

F32, C64 = np.float32, np.complex64
CONV_ROUTE = "auto"
_BASIS_MAX_BYTES = 64 << 20
# The bases kept between calls: a model uses one or two (grid, modes) pairs, each a few MiB at
# most; reported as cached and dropped by collect_allocator(True) (kernels/caches.py).
_BASIS_CACHE_BYTES = 128 << 20
_basis_cache = ByteLRU("cpu", _BASIS_CACHE_BYTES, max_entries=32)
_PARALLEL_MIN = 1 << 16  # elements below which one pocketfft thread is faster than several


def _workers(elems: int) -> int:
    """pocketfft's threads for a transform of ``elems`` elements: scipy.fft runs its own (it cannot
    run inside a Numba region), as many as the one policy would give a Numba kernel."""
    return parts(elems, elems, _PARALLEL_MIN // 2)


def _as_complex(a: np.ndarray, rows: int, bins: int) -> np.ndarray:
    """A packed (rows, bins, 2) float32 array as complex64 (rows, bins), without a copy when aligned."""
    a = np.ascontiguousarray(a, dtype=F32)
    if a.ctypes.data % 8:
        a = a.copy()
    return a.view(C64).reshape(rows, bins)


def rfft1d_packed(x, batch, n):
    if batch == 0:
        return np.zeros(0, F32)
    out = sfft.rfft(x.reshape(batch, n), axis=1, workers=_workers(batch * n))
    return np.ascontiguousarray(out, dtype=C64).view(F32).reshape(-1)


def irfft1d_packed(spec, batch, n):
    bins = n // 2 + 1
    if batch == 0:
        return np.zeros(0, F32)
    c = _as_complex(spec, batch, bins)
    out = sfft.irfft(c, n=n, axis=1, workers=_workers(batch * n))
    return np.ascontiguousarray(out, dtype=F32).reshape(-1)


# -- spectral convolution --------------------------------------------------------------------------------
def _bases(grid: int, modes: int) -> tuple[np.ndarray, np.ndarray]:
    """``make_bases(grid, modes)``, kept in the basis cache (read-only arrays)."""
    key = (grid, modes)
    hit = _basis_cache.get(key)
    if hit is None:
        hit = tuple(np.array(b) for b in make_bases(grid, modes))  # writeable copies: Numba's one typing
        _basis_cache.put(key, hit, hit[0].nbytes + hit[1].nbytes)
    return hit


def _route(grid: int, modes: int) -> str:
    if CONV_ROUTE != "auto":
        return CONV_ROUTE
    if 2 * 2 * modes * grid * 4 > _BASIS_MAX_BYTES:
        return "fft"
    # GEMM: 8 modes flops per point and channel; pocketfft pair + spectrum handling: ~ 30 log2(grid)
    # so the GEMM route wins while modes stays below a multiple of log2(grid)
    return "dft" if modes <= 6 * max(1, math.ceil(math.log2(max(grid, 2)))) + 4 else "fft"


def _blocks(w_re, w_im, modes, width):
    """(modes, 2 width, 2 width): [[w_re, w_im], [-w_im, w_re]]."""
    wr = w_re.reshape(modes, width, width)
    wi = w_im.reshape(modes, width, width)
    wb = np.empty((modes, 2 * width, 2 * width), F32)
    wb[:, :width, :width], wb[:, :width, width:] = wr, wi
    np.negative(wi, out=wb[:, width:, :width])
    wb[:, width:, width:] = wr
    return wb


def _dft_analysis(basis, stored_t, v3, batch, modes, width):
    """(modes, batch, 2 width) from v3 (batch, grid, width) and the (2 modes, grid) basis, given as
    ``basis`` itself or (stored_t) as its (grid, 2 modes) transpose: one batched GEMM with a shared
    basis on the pool (gemm.py)."""
    grid = v3.shape[1]
    s = gemm(basis, np.ascontiguousarray(v3).reshape(-1), batch, 2 * modes, width, grid, stored_t, False, shared_a=True)
    return s.reshape(batch, modes, 2 * width).transpose(1, 0, 2)


def _dft_synthesis(basis, stored_t, s, batch, grid, modes, width):
    """(batch, grid, width) from s (modes, batch, 2 width) and the (grid, 2 modes) basis (or, stored_t,
    its (2 modes, grid) transpose)."""
    inter = np.ascontiguousarray(s.transpose(1, 0, 2)).reshape(-1)  # (batch, 2 modes, width)
    return gemm(basis, inter, batch, grid, width, 2 * modes, stored_t, False, shared_a=True)


def _mix(s, wb, modes, batch, width, adjoint):
    """Per mode (batch, 2 width) @ wb[k] (wb[k]^T for the adjoint): one batched GEMM."""
    return gemm(np.ascontiguousarray(s).reshape(-1), wb.reshape(-1), modes, batch, 2 * width, 2 * width, False,
                adjoint).reshape(modes, batch, 2 * width)


def _fft_spectrum(v3, modes, workers):
    """(modes, batch, width) complex64: the retained bins of every channel's rfft along grid."""
    return np.ascontiguousarray(sfft.rfft(v3, axis=1, workers=workers)[:, :modes].transpose(1, 0, 2))


def _fft_synthesis(spec_mbw, batch, grid, width, workers):
    modes = spec_mbw.shape[0]
    full = np.zeros((batch, grid // 2 + 1, width), C64)
    full[:, :modes] = spec_mbw.transpose(1, 0, 2)
    return sfft.irfft(full, n=grid, axis=1, workers=workers)


def _conv(v, w_re, w_im, batch, grid, width, modes, adjoint):
    """The forward map (adjoint=False) or its transpose (adjoint=True) applied to v."""
    n = batch * grid * width
    if n == 0 or modes == 0:  # modes = 0 keeps no bin
        return np.zeros(n, F32)
    v3 = v.reshape(batch, grid, width)
    if _route(grid, modes) == "dft":
        bf, bi = _bases(grid, modes)
        wb = _blocks(w_re, w_im, modes, width)
        if not adjoint:
            s = _dft_analysis(bf, False, v3, batch, modes, width)
            out = _dft_synthesis(bi, False, _mix(s, wb, modes, batch, width, False), batch, grid, modes, width)
        else:
            s = _dft_analysis(bi, True, v3, batch, modes, width)
            out = _dft_synthesis(bf, True, _mix(s, wb, modes, batch, width, True), batch, grid, modes, width)
    else:
        workers = _workers(n)
        wc = (w_re.reshape(modes, width, width) + 1j * w_im.reshape(modes, width, width)).astype(C64)
        if adjoint:
            wc = np.conj(wc).transpose(0, 2, 1)
        ys = np.matmul(_fft_spectrum(v3, modes, workers), wc)
        out = _fft_synthesis(ys, batch, grid, width, workers)
    return np.ascontiguousarray(out, dtype=F32).reshape(-1)


def spectral_conv1d_rfft_fwd(x, w_re, w_im, grid, width, modes, batch=1):
    return _conv(x, w_re, w_im, batch, grid, width, modes, adjoint=False)


def spectral_conv1d_rfft_bwd_x(x, w_re, w_im, dy, grid, width, modes, batch=1):
    return _conv(dy, w_re, w_im, batch, grid, width, modes, adjoint=True)


def spectral_conv1d_rfft_bwd_w(x, w_re, w_im, dy, grid, width, modes, batch=1):
    n_w = modes * width * width
    if batch * grid * width == 0 or n_w == 0:
        return np.zeros(n_w, F32), np.zeros(n_w, F32)
    x3, d3 = x.reshape(batch, grid, width), dy.reshape(batch, grid, width)
    if _route(grid, modes) == "dft":
        bf, bi = _bases(grid, modes)
        xs = _dft_analysis(bf, False, x3, batch, modes, width)  # (modes, batch, 2 width)
        gs = _dft_analysis(bi, True, d3, batch, modes, width)   # (c_k/grid) rfft(dy), same layout
        p = gemm(np.ascontiguousarray(xs).reshape(-1), np.ascontiguousarray(gs).reshape(-1), modes, 2 * width,
                 2 * width, batch, True, False).reshape(modes, 2 * width, 2 * width)  # xs^T gs per mode
        dwr = p[:, :width, :width] + p[:, width:, width:]
        dwi = p[:, :width, width:] - p[:, width:, :width]
    else:
        workers = _workers(batch * grid * width)
        xs = _fft_spectrum(x3, modes, workers)               # (modes, batch, width)
        gs = _fft_spectrum(d3, modes, workers)
        k = np.arange(modes)
        ck = (np.where((k == 0) | (2 * k == grid), 1.0, 2.0) / grid).astype(F32)
        p = np.matmul(np.conj(xs).transpose(0, 2, 1), gs) * ck[:, None, None]
        dwr, dwi = p.real, p.imag
    return (np.ascontiguousarray(dwr, dtype=F32).reshape(-1), np.ascontiguousarray(dwi, dtype=F32).reshape(-1))


def spectral_conv1d_rfft_bwd_wre(x, w_re, w_im, dy, grid, width, modes, batch=1):
    return spectral_conv1d_rfft_bwd_w(x, w_re, w_im, dy, grid, width, modes, batch)[0]


def spectral_conv1d_rfft_bwd_wim(x, w_re, w_im, dy, grid, width, modes, batch=1):
    return spectral_conv1d_rfft_bwd_w(x, w_re, w_im, dy, grid, width, modes, batch)[1]
