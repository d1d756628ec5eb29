"""Contracts of the spectral family: rfft1d_packed, irfft1d_packed, and the FNO spectral convolution
(spectral_conv1d_rfft_fwd and its VJPs).

FFT error (one transform of length n). Every output of a DFT is a combination of all n inputs. The
bound counts roundings per stage, for the two algorithm families the libraries use (pocketfft in
SciPy, cuFFT):

* mixed radix (every prime factor p of n at most RADIX_MAX = 128: pocketfft and cuFFT both use
  radix passes, generic O(p^2) ones for the larger primes). A pass of radix p computes each of
  its outputs from p values, each multiplied by a twiddle of modulus 1 (complex product: sqrt(2)
  gamma(2) plus the twiddle's own error), then summed (p - 1 complex additions); the values at
  every stage are partial DFTs, bounded by the sum of |x| over their inputs, and errors propagate
  through unit-modulus twiddles without growth (Higham, Accuracy and Stability, sec. 24.1, in the
  elementwise form). Per pass p + 4 roundings, plus 6 for the real-to-complex packing (a half-
  length complex FFT and a twiddled post-pass) and the first/last copies:

      |err X_k| <= gamma(K_radix(n)) sum_t |x_t|,   K_radix(n) = 6 + sum_{p | n} (p + 4)

  (p runs over the prime factors with multiplicity; a power of two gets 6 per level.)

* Bluestein (a prime factor above RADIX_MAX: pocketfft and cuFFT turn the DFT into a circular
  convolution of length m >= 2n - 1 with the chirp b_t = exp(i pi t^2 / n), done by two FFTs of
  length m and a pointwise product with the chirp's transform B). The analysis is normwise:
  the forward and inverse FFTs of length m each carry K_radix(m) roundings relative to the norms
  involved, the chirp products 2 more each, and max_j |B_j| <= C_CHIRP sqrt(n) (measured: the
  chirp's transform, zero-padded to the power of two m, peaks at 2.0 - 2.2 sqrt(n) for n from 101 to 10^5;
  we take 3). With Parseval this
  gives ||err||_2 <= gamma(K_blue) ||X||_2 = gamma(K_blue) sqrt(n) ||x||_2, and so for every bin

      |err X_k| <= C_CHIRP gamma(K_blue(n)) sqrt(n) ||x||_2,
      K_blue(n) = 2 K_radix(m) + 12 + (the radix passes of the small factors of n), m = 2^ceil(log2(2n-1))

  (the power of two m is the most expensive choice a library makes: 3- or 5-smooth m have fewer
  roundings). Since sqrt(n) ||x||_2 >= sum |x| and K_blue >= K_radix of every factorization a
  library might use instead, this bound also covers a direct radix pass for such primes.

irfft is the adjoint algorithm on the Hermitian spectrum scaled by 1/n: the same K (+2: the 1/n
scaling, applied to the input or to the output, and the copy), with sum_t |x_t| replaced by
(1/n) sum_k c_k |X_k| (c_k = 1 at bin 0 and at bin n/2 for even n, whose imaginary parts are
ignored, 2 elsewhere), and ||x||_2 sqrt(n) by the exact output's norm bound
(1/sqrt(n)) (sum_k c_k |X_k|^2)^(1/2) (Parseval).

Spectral convolution (per output (b, t, o)): the composition of three stages, evaluated in float64
on absolute values:

1. the truncated forward transform of each channel, X[k, i] for k < modes: either an FFT (bound
   above) or a DFT as a GEMM with a float32 cos/sin basis (gamma(grid + 1) sum_t |x_t|: grid
   products, the basis entries' own rounding). With A_i = sum_t |x[t, i]| >= |X[k, i]|, the error
   is E1_i = gamma(K1) A_i (or the Bluestein form, whichever K1 and form apply), K1 the larger of
   the two algorithms' counts: the contract admits both (the CPU and CUDA backends pick by size).
2. the per-mode complex mixing, 2 width real products per output component:
   |err Y[k, o]| <= sum_i (E1_i + gamma(2 width + 1) (A_i + E1_i)) (|w_re[k,i,o]| + |w_im[k,i,o]|)
   and |Y[k, o]| <= M[k, o] = sum_i (A_i + E1_i)(|w_re| + |w_im|) (each component).
3. the inverse transform of the half spectrum (zeros above modes), as an irfft of length grid or
   as a GEMM with a float32 basis (2 modes products): the propagated error
   (1/grid) sum_k c_k sqrt(2) E2[k, o] (the complex error of a component-wise bound times a unit
   phase) plus gamma(K3) (1/grid) sum_k c_k sqrt(2) M[k, o], K3 the larger of the FFT's and the
   GEMM's (2 modes + 2) counts (or the Bluestein form of the inverse).

spectral_conv1d_rfft_bwd_x is the same composition with dy for x and the conjugate-transposed
weights (dx = irfft(rfft(dy) W^H) exactly: the c_k / grid factors cancel). The weight gradients
dW[k, i, o] = (c_k / grid) sum_b conj(X_b[k, i]) G_b[k, o] (G = rfft(dy)) are bounded by the stage-1
errors of X and G and gamma(2 batch + 2) for the products and the sum over the batch, relative to
(c_k / grid) sum_b 2 (A_x + E) (A_g + E) per component. TINY-scale terms cover products that
underflow. The bounds are per element and order-independent (they hold for any summation order,
FMA or not, so one contract covers pocketfft, cuFFT, BLAS and cuBLAS).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from .core import TINY, U, abs64, gamma, register

__all__ = ["fft_error_terms", "RADIX_MAX", "C_CHIRP"]

RADIX_MAX = 128
C_CHIRP = 3.0
_SUB = 2.0**-149


def _factors(n: int) -> list[int]:
    fs, p = [], 2
    while p * p <= n:
        while n % p == 0:
            fs.append(p)
            n //= p
        p += 1
    if n > 1:
        fs.append(n)
    return fs


def _k_radix(n: int) -> int:
    return 6 + sum(p + 4 for p in _factors(n))


@lru_cache(maxsize=None)
def fft_error_terms(n: int) -> tuple[int, bool]:
    """(K, bluestein): the rounding count of a length-n FFT and whether the bound is normwise."""
    fs = _factors(n)
    if not fs or max(fs) <= RADIX_MAX:
        return _k_radix(n), False
    m = 1 << max(0, math.ceil(math.log2(2 * n - 1)))
    small = sum(p + 4 for p in fs if p <= RADIX_MAX)
    return 2 * _k_radix(m) + 12 + small, True


def _rows(a, rows, cols):
    return np.asarray(a, dtype=np.float64).reshape(rows, cols)


# -- rfft / irfft ----------------------------------------------------------------------------------------
def _rfft_row_bound(x2: np.ndarray, n: int) -> np.ndarray:
    """Per row (batch,): the bound on every bin's error."""
    k, blue = fft_error_terms(n)
    if blue:
        return C_CHIRP * gamma(k) * math.sqrt(n) * np.sqrt(np.sum(x2 * x2, axis=1))
    return gamma(k) * np.sum(np.abs(x2), axis=1)


def _rfft_bound(ref, x, batch, n):
    bins = n // 2 + 1
    if batch * n == 0:
        return np.zeros(batch * bins * 2)
    x2 = _rows(x, batch, n)
    row = _pair_rows(_rfft_row_bound(x2, n), n)
    return (np.repeat(row, 2 * bins) + TINY).reshape(-1)


def _pair_rows(row: np.ndarray, n: int) -> np.ndarray:
    """Odd n: every row gets the batch's largest row bound. cuFFT transforms real rows of odd length
    in pairs through one complex transform, so a row's error follows its partner's magnitude
    (measured on the H200: irfft of (2, 39) rows 10^6 apart gave the small row an error 170x its
    own row bound, and 10^-3 of its partner's)."""
    if n % 2 == 1 and row.size > 1:
        return np.full_like(row, row.max())
    return row


def _half_spectrum_magnitudes(s3: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row: (sum_k c_k |X_k|, sum_k c_k |X_k|^2) of a (rows, bins, 2) half spectrum, with the
    imaginary parts of bin 0 and (even n) bin n/2 ignored."""
    bins = n // 2 + 1
    re, im = s3[..., 0], s3[..., 1].copy()
    im[..., 0] = 0.0
    if n % 2 == 0:
        im[..., bins - 1] = 0.0
    ck = np.where((np.arange(bins) == 0) | (2 * np.arange(bins) == n), 1.0, 2.0)
    mod2 = re * re + im * im
    return np.sum(ck * np.sqrt(mod2), axis=-1), np.sum(ck * mod2, axis=-1)


def _irfft_bound(ref, spec_, batch, n):
    bins = n // 2 + 1
    if batch * n == 0:
        return np.zeros(batch * n)
    s3 = np.asarray(spec_, dtype=np.float64).reshape(batch, bins, 2)
    l1, l2sq = _half_spectrum_magnitudes(np.abs(s3), n)
    k, blue = fft_error_terms(n)
    if blue:
        row = C_CHIRP * gamma(k + 2) * np.sqrt(l2sq) / math.sqrt(n)
    else:
        row = gamma(k + 2) * l1 / n
    return (np.repeat(_pair_rows(row, n), n) + TINY).reshape(-1)


register("rfft1d_packed",
          "per bin (re and im): gamma(K(n)) sum_t |x_t|, K(n) = 6 + sum over the prime factors p of n of (p + 4); "
          "for n with a prime factor > 128 (Bluestein) 3 gamma(K_blue) sqrt(n) ||x||_2 instead, K_blue = "
          "2 K(2^ceil(log2(2n-1))) + 12 + the small factors' passes; odd n: the batch's largest row bound for every "
          "row (cuFFT pairs real rows); + TINY", _rfft_bound)
register("irfft1d_packed",
          "per output: gamma(K(n) + 2) (1/n) sum_k c_k |X_k| (c_k = 1 at bins 0 and n/2, else 2; Im of bins 0, n/2 "
          "ignored); Bluestein n: 3 gamma(K_blue + 2) n^(-1/2) (sum_k c_k |X_k|^2)^(1/2); odd n: the batch's largest row "
          "bound for every row (cuFFT pairs real rows); + TINY", _irfft_bound)


# -- spectral convolution --------------------------------------------------------------------------------
def _ck(grid: int, modes: int) -> np.ndarray:
    k = np.arange(modes)
    return np.where((k == 0) | (2 * k == grid), 1.0, 2.0)


def _stage1(x3: np.ndarray, grid: int) -> tuple[np.ndarray, np.ndarray]:
    """(A, E) per (batch, channel): A = sum_t |x| bounds |X[k]| (each component), E bounds the error
    of every retained bin, for an FFT or a float32-basis DFT GEMM (the larger)."""
    a = np.sum(np.abs(x3), axis=1)
    k_fft, blue = fft_error_terms(grid)
    if blue:
        e_fft = C_CHIRP * gamma(k_fft) * math.sqrt(grid) * np.sqrt(np.sum(x3 * x3, axis=1))
    else:
        e_fft = gamma(k_fft) * a
    e = np.maximum(e_fft, gamma(grid + 1) * a)
    return a, e


def _stage3_factor(grid: int, modes: int) -> float:
    """The inverse transform's factor on (1/grid) sum_k c_k |Y_k|: FFT or GEMM, the larger. The
    Bluestein form C gamma(K) n^(-1/2) (sum c_k |Y_k|^2)^(1/2) is at most C sqrt(n) gamma(K) times
    (1/n) sum c_k |Y_k| (a 2-norm is at most the 1-norm)."""
    k_fft, blue = fft_error_terms(grid)
    g_fft = (C_CHIRP * math.sqrt(grid) if blue else 1.0) * gamma(k_fft + 2)
    return max(g_fft, gamma(2 * modes + 2))


def _conv_chain(x3, wr, wi, grid, width, modes):
    """Bound (batch, width_out) per output element of y = irfft(rfft(x) W), from |x|, |w|."""
    a, e1 = _stage1(x3, grid)  # (batch, width)
    wabs = np.abs(wr) + np.abs(wi)  # (modes, w_in, w_out)
    g2 = gamma(2 * width + 1)
    mag = np.einsum("bi,kio->bko", a + e1, wabs)  # |Y| per component
    e2 = np.einsum("bi,kio->bko", e1, wabs) + g2 * mag + width * _SUB
    ck = _ck(grid, modes)[None, :, None]
    g3 = _stage3_factor(grid, modes)
    root2 = math.sqrt(2.0)
    out = (np.sum(ck * root2 * e2, axis=1) + g3 * np.sum(ck * root2 * (mag + e2), axis=1)) / grid
    return out  # (batch, width)


def _w3(w, modes, width):
    return np.asarray(w, dtype=np.float64).reshape(modes, width, width)


def _fwd_bound(ref, x, w_re, w_im, grid, width, modes, batch=1):
    if batch * grid * width == 0:
        return np.zeros(batch * grid * width)
    x3 = np.asarray(x, dtype=np.float64).reshape(batch, grid, width)
    per = _conv_chain(x3, _w3(w_re, modes, width), _w3(w_im, modes, width), grid, width, modes)
    return (np.broadcast_to(per[:, None, :], (batch, grid, width)) + U * abs64(ref).reshape(batch, grid, width)
            + TINY).reshape(-1)


def _bwd_x_bound(ref, x, w_re, w_im, dy, grid, width, modes, batch=1):
    if batch * grid * width == 0:
        return np.zeros(batch * grid * width)
    d3 = np.asarray(dy, dtype=np.float64).reshape(batch, grid, width)
    wr_t = np.swapaxes(_w3(w_re, modes, width), 1, 2)
    wi_t = np.swapaxes(_w3(w_im, modes, width), 1, 2)
    per = _conv_chain(d3, wr_t, wi_t, grid, width, modes)
    return (np.broadcast_to(per[:, None, :], (batch, grid, width)) + U * abs64(ref).reshape(batch, grid, width)
            + TINY).reshape(-1)


def _bwd_w_core(x, dy, batch, grid, width, modes):
    n_w = modes * width * width
    if batch * grid * width == 0:
        return np.zeros(n_w)
    x3 = np.asarray(x, dtype=np.float64).reshape(batch, grid, width)
    d3 = np.asarray(dy, dtype=np.float64).reshape(batch, grid, width)
    ax, ex = _stage1(x3, grid)
    ag, eg = _stage1(d3, grid)
    ck = _ck(grid, modes)[:, None, None] / grid
    # per component: sum_b (Xr Gr + Xi Gi): 2 batch products, each factor carrying its stage-1 error
    mag = 2 * np.einsum("bi,bo->io", ax + ex, ag + eg)[None]
    prop = 2 * (np.einsum("bi,bo->io", ex, ag + eg) + np.einsum("bi,bo->io", ax, eg))[None]
    out = ck * (prop + gamma(2 * batch + 3) * mag) + batch * _SUB
    return np.broadcast_to(out, (modes, width, width)).reshape(-1)


def _bwd_wre_bound(ref, x, w_re, w_im, dy, grid, width, modes, batch=1):
    return _bwd_w_core(x, dy, batch, grid, width, modes) + U * abs64(ref) + TINY


def _bwd_wim_bound(ref, x, w_re, w_im, dy, grid, width, modes, batch=1):
    return _bwd_w_core(x, dy, batch, grid, width, modes) + U * abs64(ref) + TINY


def _bwd_w_bound(ref, x, w_re, w_im, dy, grid, width, modes, batch=1):
    core = _bwd_w_core(x, dy, batch, grid, width, modes)
    return core + U * abs64(ref[0]) + TINY, core + U * abs64(ref[1]) + TINY


_CONV = ("per output: the float64 chain on |x|, |w| of (1) the truncated transform, gamma(max(K(grid), grid + 1)) "
         "sum_t |x| per channel (FFT or float32-basis GEMM; Bluestein form for large prime factors), (2) the mixing, "
         "gamma(2 width + 1) over sum_i (|X| + err)(|w_re| + |w_im|), (3) the inverse, sqrt(2) (1/grid) sum_k c_k "
         "(propagated error + gamma(max(K(grid) + 2, 2 modes + 2)) |Y|); + u|y| + TINY")
register("spectral_conv1d_rfft_fwd", _CONV, _fwd_bound)
register("spectral_conv1d_rfft_bwd_x", "as spectral_conv1d_rfft_fwd, on |dy| with the transposed weights "
          "(dx = irfft(rfft(dy) W^H))", _bwd_x_bound)
_BWD_W = ("per element: (c_k/grid) (2 sum_b [E_x (A_g + E_g) + A_x E_g] + gamma(2 batch + 3) 2 sum_b (A_x + E_x)(A_g + "
          "E_g)), A = sum_t |.| per channel, E its stage-1 transform error bound; + batch 2^-149 + u|ref| + TINY")
register("spectral_conv1d_rfft_bwd_wre", _BWD_W, _bwd_wre_bound)
register("spectral_conv1d_rfft_bwd_wim", _BWD_W, _bwd_wim_bound)
register("spectral_conv1d_rfft_bwd_w", "(dw_re, dw_im), each as spectral_conv1d_rfft_bwd_wre", _bwd_w_bound)
