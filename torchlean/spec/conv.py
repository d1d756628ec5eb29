"""Float64 specs of the convolution: conv, conv_bwd_input, conv_bwd_weight, conv_transpose.

Layout: channels-first, row-major, any spatial rank r (1..8). x is (batch, in_c, *spatial),
w is (out_c, in_c, *kernel) (PyTorch's layout; conv_transpose's w is (in_c, out_c, *kernel)),
b is (out_c,) or None. out_i = (spatial_i + 2 padding_i - kernel_i) // stride_i + 1.

    conv:            y[n,o,p]  = b[o] + sum_{c,k} w[o,c,k] * xpad[n,c, p*stride + k]
    conv_bwd_input:  dx[n,c,i] = sum over the (o, k, p) with p*stride - padding + k = i, 0 <= p < out,
                                 of w[o,c,k] * dy[n,o,p]            (the adjoint of conv in x)
    conv_bwd_weight: dw[o,c,k] = sum_{n,p} dy[n,o,p] * xpad[n,c, p*stride + k]
    conv_transpose:  conv_bwd_input with the roles of the channels swapped, plus the bias.

NaN/inf convention (PyTorch CPU's, checked): zero padding is made of *values* 0, so in conv and
conv_bwd_weight a padded position multiplies its weight (or dy) by 0 and inf * 0 = NaN reaches
the output. conv_bwd_input and conv_transpose sum only the terms that exist: a tap that would
land in the padding is no term at all (an inf weight there does not make NaN).

The algorithm is a loop over kernel offsets, each a contraction over channels of one strided
slice of the zero-padded input (einsum in float64): no im2col, no GEMM layout, so it shares
nothing with the backends' kernels.
"""

from __future__ import annotations

import numpy as np

__all__ = ["conv", "conv_bwd_input", "conv_bwd_weight", "conv_transpose"]

F64 = np.float64


def _f(x):
    return np.asarray(x, dtype=F64)


def out_dims(spatial, kernel, stride, padding) -> tuple[int, ...]:
    """The forward output size per axis, (spatial + 2 padding - kernel) // stride + 1."""
    return tuple((s + 2 * p - k) // st + 1 for s, k, st, p in zip(spatial, kernel, stride, padding))


def transpose_out_dims(spatial, kernel, stride, padding, output_padding) -> tuple[int, ...]:
    """The transposed conv's output size per axis, (spatial - 1) stride - 2 padding + kernel + output_padding."""
    return tuple((s - 1) * st - 2 * p + k + op
                 for s, k, st, p, op in zip(spatial, kernel, stride, padding, output_padding))


def _taps(k, stride, out):
    """The index expression p*stride + k over p in [0, out), per axis, as slices."""
    return tuple(slice(ki, ki + (o - 1) * s + 1, s) for ki, s, o in zip(k, stride, out))


def _padded(x, batch, c, spatial, padding):
    xp = np.zeros((batch, c) + tuple(s + 2 * p for s, p in zip(spatial, padding)))
    xp[(slice(None), slice(None)) + tuple(slice(p, p + s) for s, p in zip(spatial, padding))] = \
        _f(x).reshape((batch, c) + tuple(spatial))
    return xp


def conv(x, w, b, batch, in_c, out_c, spatial, kernel, stride, padding):
    out = out_dims(spatial, kernel, stride, padding)
    xp = _padded(x, batch, in_c, spatial, padding)
    wk = _f(w).reshape((out_c, in_c) + tuple(kernel))
    y = np.zeros((batch, out_c) + out)
    with np.errstate(invalid="ignore", over="ignore"):
        for k in np.ndindex(*kernel):
            xs = xp[(slice(None), slice(None)) + _taps(k, stride, out)]  # (batch, in_c, *out)
            y += np.einsum("nc...,oc->no...", xs, wk[(slice(None), slice(None)) + k])
        if b is not None:
            y += _f(b).reshape((1, out_c) + (1,) * len(out))
    return y.reshape(-1)


def conv_bwd_input(dy, w, batch, in_c, out_c, spatial, kernel, stride, padding):
    out = out_dims(spatial, kernel, stride, padding)
    g = _f(dy).reshape((batch, out_c) + out)
    wk = _f(w).reshape((out_c, in_c) + tuple(kernel))
    dxp = np.zeros((batch, in_c) + tuple(s + 2 * p for s, p in zip(spatial, padding)))
    with np.errstate(invalid="ignore", over="ignore"):
        for k in np.ndindex(*kernel):
            dxp[(slice(None), slice(None)) + _taps(k, stride, out)] += \
                np.einsum("no...,oc->nc...", g, wk[(slice(None), slice(None)) + k])
    # the taps that landed in the padding are dropped whole (they are no term of any dx)
    dx = dxp[(slice(None), slice(None)) + tuple(slice(p, p + s) for s, p in zip(spatial, padding))]
    return np.ascontiguousarray(dx).reshape(-1)


def conv_bwd_weight(x, dy, batch, in_c, out_c, spatial, kernel, stride, padding):
    out = out_dims(spatial, kernel, stride, padding)
    xp = _padded(x, batch, in_c, spatial, padding)
    g = _f(dy).reshape(batch, out_c, int(np.prod(out)))
    dw = np.zeros((out_c, in_c) + tuple(kernel))
    with np.errstate(invalid="ignore", over="ignore"):
        for k in np.ndindex(*kernel):
            xs = xp[(slice(None), slice(None)) + _taps(k, stride, out)].reshape(batch, in_c, g.shape[2])
            dw[(slice(None), slice(None)) + k] = np.einsum("nop,ncp->oc", g, xs)
    return dw.reshape(-1)


def conv_transpose(x, w, b, batch, in_c, out_c, spatial, kernel, stride, padding, output_padding):
    """x (batch, in_c, *spatial), w (in_c, out_c, *kernel): y (batch, out_c, *out) with
    out = transpose_out_dims(...): conv_bwd_input of a conv from out_c to in_c channels over out."""
    out = transpose_out_dims(spatial, kernel, stride, padding, output_padding)
    y = conv_bwd_input(x, w, batch, out_c, in_c, out, kernel, stride, padding)
    if b is not None:
        with np.errstate(invalid="ignore", over="ignore"):
            y = (y.reshape((batch, out_c, int(np.prod(out)))) + _f(b).reshape(1, out_c, 1)).reshape(-1)
    return y
