"""Contracts of the fft family: fftn_c2c, rfftn_r2c, irfftn_c2r (transforms over 1 to 3 axes).

An N-D transform is 1-D transforms applied axis by axis (pocketfft and cuFFT both work this way,
whatever they fuse). The 1-D bound of the spectral family (contract/spectral.py) holds per line,
relative to the sum of |v| over the line of the values it reads:

    |err| <= f(n) sum_t |v_t|,  f(n) = gamma(K(n))   (radix n),
                                f(n) = C_CHIRP sqrt(n) gamma(K_blue(n))   (Bluestein: the normwise
                                bound, with ||v||_2 <= sum |v|)

Errors of earlier axes pass through a later axis's exact DFT without growth (|DFT e| <= sum |e|), and
the values it reads are bounded by A, the sum of |x| over every transformed axis, so an error
c_{a-1} A after a-1 axes becomes c_a A with 1 + c_a = (1 + c_{a-1})(1 + f(n_a)). With the final
multiplication by ``scale`` (one rounding), per batch element:

    |err y| <= |scale| A [ (1 + u) prod_a (1 + f(n_a)) - 1 ] + TINY

* fftn_c2c: A = sum (|re| + |im|) over the element; f from the length of every axis.
* rfftn_r2c: A = sum |x|; the last axis's f is the real transform's (K counts its packing).
* irfftn_c2r: A = sum over the element's bins of c_k (|re| + |im|) (c_k = 1 at bin 0 and, even n,
  bin n/2 of the last axis, else 2: the C2R's Hermitian weights); the last axis's f is the inverse
  real transform's, K + 2. With one axis the imaginary parts of bins 0 and n/2 are ignored (as in
  irfft1d_packed); with more they are not: they reach the output through the leading axes.
* odd last length (rfftn_r2c, irfftn_c2r): every batch element gets the largest element's bound,
  as irfft1d_packed's does (cuFFT transforms real rows of odd length in pairs).
"""

from __future__ import annotations

import math

import numpy as np

from .core import TINY, U, abs64, gamma, register
from .spectral import C_CHIRP, fft_error_terms

__all__: list[str] = []


def _factor(n: int, extra: int = 0) -> float:
    k, blue = fft_error_terms(n)
    return C_CHIRP * math.sqrt(n) * gamma(k + extra) if blue else gamma(k + extra)


def _growth(factors) -> float:
    g = 1.0 + U
    for f in factors:
        g *= 1.0 + f
    return g - 1.0


def _finish(ref, per_batch: np.ndarray, per_elem: int, odd_last: bool) -> np.ndarray:
    if per_batch.size == 0 or per_elem == 0:
        return np.zeros(per_batch.size * per_elem)
    if odd_last and per_batch.size > 1:
        per_batch = np.full_like(per_batch, per_batch.max())
    return (np.repeat(per_batch, per_elem) + U * abs64(ref).reshape(-1) + TINY).reshape(-1)


def _dims(dims) -> tuple[int, ...]:
    return tuple(int(d) for d in dims)


def _abs_sums(x, batch: int, per: int) -> np.ndarray:
    """(batch,): sum of |x| over each batch element of ``per`` values."""
    return np.sum(np.abs(np.asarray(x, np.float64)).reshape(batch, per), axis=1)


def _c2c_bound(ref, x, batch, dims, inverse, scale):
    dims = _dims(dims)
    a = _abs_sums(x, batch, 2 * math.prod(dims))
    g = _growth(_factor(n) for n in dims)
    return _finish(ref, abs(float(scale)) * g * a, 2 * math.prod(dims), False)


def _r2c_bound(ref, x, batch, dims, scale):
    dims = _dims(dims)
    a = _abs_sums(x, batch, math.prod(dims))
    g = _growth([_factor(n) for n in dims[:-1]] + [_factor(dims[-1])])
    per_elem = math.prod(dims[:-1]) * (dims[-1] // 2 + 1) * 2
    return _finish(ref, abs(float(scale)) * g * a, per_elem, dims[-1] % 2 == 1)


def _c2r_bound(ref, spec_, batch, dims, scale):
    dims = _dims(dims)
    n = dims[-1]
    bins = n // 2 + 1
    s = np.abs(np.asarray(spec_, np.float64)).reshape((batch, math.prod(dims[:-1]), bins, 2)).copy()
    if len(dims) == 1:  # one axis: the C2R ignores these imaginary parts of the input itself
        s[:, :, 0, 1] = 0.0
        if n % 2 == 0:
            s[:, :, bins - 1, 1] = 0.0
    k = np.arange(bins)
    ck = np.where((k == 0) | (2 * k == n), 1.0, 2.0)
    a = np.sum((s[..., 0] + s[..., 1]) * ck, axis=(1, 2))
    g = _growth([_factor(m) for m in dims[:-1]] + [_factor(n, 2)])
    return _finish(ref, abs(float(scale)) * g * a, math.prod(dims), n % 2 == 1)


_WHY = ("per batch element: |scale| A [(1 + u) prod over the axes of (1 + f(n)) - 1] + u|y| + TINY, f(n) = gamma(K(n)) "
        "(K as rfft1d_packed's), or 3 sqrt(n) gamma(K_blue(n)) for n with a prime factor > 128; ")
register("fftn_c2c", _WHY + "A = sum over the element of |re| + |im|", _c2c_bound)
register("rfftn_r2c", _WHY + "A = sum over the element of |x|; odd last length: the largest element's bound for "
         "every element (cuFFT pairs real rows)", _r2c_bound)
register("irfftn_c2r", _WHY + "the last axis's K + 2; A = sum over the element's bins of c_k (|re| + |im|) (c_k = 1 at "
         "bins 0 and n/2 of the last axis, else 2; one axis: Im of those bins ignored); odd last length: the largest "
         "element's bound for every element", _c2r_bound)
