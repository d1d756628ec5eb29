"""Contracts of the convolution: conv, conv_bwd_input, conv_bwd_weight, conv_transpose.

Every output element of these primitives is a sum of products (plus the bias), so each bound is
Higham's order-independent one, as for bmm: for an element that is a sum of k terms (each a
product of two float32 inputs, or the bias),

    |err| <= gamma(k) * (the same sum over |terms|) + k * 2**-149,

which holds for every summation order and blocking (BLAS, im2col, col2im, tree or atomic sums,
FMA or not); the last term covers products that underflow into subnormals (each loses at most
half of 2**-149). The sum over |terms| is the spec evaluated on absolute values, and k is:

    conv:            in_c / groups * prod(kernel) (+ 1 with a bias); a padded position is a term whose x is 0
    conv_bwd_input:  out_c times the number of (kernel offset, output position) taps that reach
                     that dx element (counted by the spec on all-ones inputs)
    conv_bwd_weight: batch * prod(out)
    conv_transpose:  as conv_bwd_input (in_c times the taps), plus 1 with a bias

Terms that are exact zeros (a padded 0 times a finite weight) add no rounding, so an
implementation may include them in its sums (the stride-1 backward as a conv does) and stay
within the per-element count. Integer-valued inputs give exact sums in any order; the tests
also require those to equal the spec bit for bit.
"""

from __future__ import annotations

import math

import numpy as np

from .. import spec
from ..spec.conv import out_dims  # the module (``spec.conv`` is the function of that name)
from .core import U, abs64, gamma, register

_SUB = 2.0**-149


def _gamma(k) -> np.ndarray:
    """gamma(k) = k u / (1 - k u), elementwise over an array of term counts."""
    ku = np.asarray(k, dtype=np.float64) * U
    with np.errstate(divide="ignore"):
        return np.where(ku < 0.5, ku / (1.0 - ku), np.inf)


def _opt_abs(b):
    return None if b is None else abs64(b)


def _conv(ref, x, w, b, batch, in_c, out_c, spatial, kernel, stride, padding, dilation=None, groups=1):
    k = in_c // groups * math.prod(kernel) + (b is not None)
    mag = spec.conv(abs64(x), abs64(w), _opt_abs(b), batch, in_c, out_c, spatial, kernel, stride, padding,
                    dilation, groups)
    return gamma(k) * mag + k * _SUB


def _conv_bwd_input(ref, dy, w, batch, in_c, out_c, spatial, kernel, stride, padding, dilation=None, groups=1):
    dims = (batch, in_c, out_c, spatial, kernel, stride, padding, dilation, groups)
    count = spec.conv_bwd_input(np.ones(np.size(dy)), np.ones(np.size(w)), *dims)
    mag = spec.conv_bwd_input(abs64(dy), abs64(w), *dims)
    return _gamma(count) * mag + count * _SUB


def _conv_bwd_weight(ref, x, dy, batch, in_c, out_c, spatial, kernel, stride, padding, dilation=None, groups=1):
    k = batch * math.prod(out_dims(spatial, kernel, stride, padding, dilation))
    mag = spec.conv_bwd_weight(abs64(x), abs64(dy), batch, in_c, out_c, spatial, kernel, stride, padding, dilation,
                               groups)
    return gamma(k) * mag + k * _SUB


def _conv_transpose(ref, x, w, b, batch, in_c, out_c, spatial, kernel, stride, padding, output_padding,
                    dilation=None, groups=1):
    dims = (batch, in_c, out_c, spatial, kernel, stride, padding, output_padding, dilation, groups)
    count = spec.conv_transpose(np.ones(np.size(x)), np.ones(np.size(w)), None, *dims) + (b is not None)
    mag = spec.conv_transpose(abs64(x), abs64(w), _opt_abs(b), *dims)
    return _gamma(count) * mag + count * _SUB


register("conv", "per output: gamma(k) (|w| * |x| + |b|) + k 2**-149, k = in_c / groups prod(kernel) (+1 with a bias); "
          "any order", _conv)
register("conv_bwd_input", "per dx element: gamma(k) (|w|^T * |dy|) + k 2**-149, k = out_c times the taps that "
          "reach it; any order", _conv_bwd_input)
register("conv_bwd_weight", "per dw element: gamma(k) (|dy| * |x|) + k 2**-149, k = batch prod(out); any order",
          _conv_bwd_weight)
register("conv_transpose", "per output: gamma(k) (|w|^T * |x| + |b|) + k 2**-149, k = in_c times the taps that "
          "reach it (+1 with a bias), as conv_bwd_input; any order", _conv_transpose)
