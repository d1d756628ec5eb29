"""Float64 specs of the convolution: conv, conv_bwd_input, conv_bwd_weight, conv_transpose.

Layout: channels-first, row-major, any spatial rank r (1..8). x is (batch, in_c, *spatial),
w is (out_c, in_c / G, *kernel) (PyTorch's layout; conv_transpose's w is (in_c, out_c / G, *kernel)),
b is (out_c,) or None; G groups (default 1), dilation d per axis (default 1).
out_i = (spatial_i + 2 padding_i - d_i (kernel_i - 1) - 1) // stride_i + 1.

    conv:            y[n,o,p]  = b[o] + sum_{c,k} w[o,c,k] * xpad[n, g C' + c, p*stride + k*d]
                     (C' = in_c / G input channels per group, g = o // (out_c / G) the group of o)
    conv_bwd_input:  dx[n,c,i] = sum over the (o, k, p) with p*stride - padding + k*d = i, 0 <= p < out,
                                 o in c's group, of w[o,c',k] * dy[n,o,p]   (the adjoint of conv in x)
    conv_bwd_weight: dw[o,c,k] = sum_{n,p} dy[n,o,p] * xpad[n, g C' + c, p*stride + k*d]
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


def _dil(dilation, r):
    return (1,) * r if dilation is None else tuple(dilation)


def out_dims(spatial, kernel, stride, padding, dilation=None) -> tuple[int, ...]:
    """The forward output size per axis, (spatial + 2 padding - dilation (kernel - 1) - 1) // stride + 1."""
    return tuple((s + 2 * p - d * (k - 1) - 1) // st + 1
                 for s, k, st, p, d in zip(spatial, kernel, stride, padding, _dil(dilation, len(spatial))))


def transpose_out_dims(spatial, kernel, stride, padding, output_padding, dilation=None) -> tuple[int, ...]:
    """The transposed conv's output size per axis, (spatial - 1) stride - 2 padding + dilation (kernel - 1)
    + output_padding + 1."""
    return tuple((s - 1) * st - 2 * p + d * (k - 1) + op + 1
                 for s, k, st, p, op, d in zip(spatial, kernel, stride, padding, output_padding,
                                               _dil(dilation, len(spatial))))


def _taps(k, stride, out, dilation):
    """The index expression p*stride + k*dilation over p in [0, out), per axis, as slices."""
    return tuple(slice(ki * d, ki * d + (o - 1) * s + 1, s) for ki, s, o, d in zip(k, stride, out, dilation))


def _grouped(a, g):
    """(batch, C, ...) as (batch, g, C / g, ...)."""
    return a.reshape((a.shape[0], g, a.shape[1] // g) + a.shape[2:])


def _padded(x, batch, c, spatial, padding):
    xp = np.zeros((batch, c) + tuple(s + 2 * p for s, p in zip(spatial, padding)))
    xp[(slice(None), slice(None)) + tuple(slice(p, p + s) for s, p in zip(spatial, padding))] = \
        _f(x).reshape((batch, c) + tuple(spatial))
    return xp


def conv(x, w, b, batch, in_c, out_c, spatial, kernel, stride, padding, dilation=None, groups=1):
    dil = _dil(dilation, len(spatial))
    out = out_dims(spatial, kernel, stride, padding, dil)
    xp = _grouped(_padded(x, batch, in_c, spatial, padding), groups)          # (batch, G, C', *padded)
    wk = _f(w).reshape((groups, out_c // groups, in_c // groups) + tuple(kernel))  # (G, O', C', *kernel)
    y = np.zeros((batch, groups, out_c // groups) + out)
    with np.errstate(invalid="ignore", over="ignore"):
        for k in np.ndindex(*kernel):
            xs = xp[(slice(None),) * 3 + _taps(k, stride, out, dil)]  # (batch, G, C', *out)
            y += np.einsum("ngc...,goc->ngo...", xs, wk[(slice(None),) * 3 + k])
        y = y.reshape((batch, out_c) + out)
        if b is not None:
            y += _f(b).reshape((1, out_c) + (1,) * len(out))
    return y.reshape(-1)


def conv_bwd_input(dy, w, batch, in_c, out_c, spatial, kernel, stride, padding, dilation=None, groups=1):
    dil = _dil(dilation, len(spatial))
    out = out_dims(spatial, kernel, stride, padding, dil)
    g = _f(dy).reshape((batch, groups, out_c // groups) + out)
    wk = _f(w).reshape((groups, out_c // groups, in_c // groups) + tuple(kernel))
    dxp = np.zeros((batch, groups, in_c // groups) + tuple(s + 2 * p for s, p in zip(spatial, padding)))
    with np.errstate(invalid="ignore", over="ignore"):
        for k in np.ndindex(*kernel):
            dxp[(slice(None),) * 3 + _taps(k, stride, out, dil)] += \
                np.einsum("ngo...,goc->ngc...", g, wk[(slice(None),) * 3 + k])
    # the taps that landed in the padding are dropped whole (they are no term of any dx)
    dx = dxp[(slice(None),) * 3 + tuple(slice(p, p + s) for s, p in zip(spatial, padding))]
    return np.ascontiguousarray(dx).reshape(-1)


def conv_bwd_weight(x, dy, batch, in_c, out_c, spatial, kernel, stride, padding, dilation=None, groups=1):
    dil = _dil(dilation, len(spatial))
    out = out_dims(spatial, kernel, stride, padding, dil)
    xp = _grouped(_padded(x, batch, in_c, spatial, padding), groups)
    g = _f(dy).reshape(batch, groups, out_c // groups, int(np.prod(out)))
    dw = np.zeros((groups, out_c // groups, in_c // groups) + tuple(kernel))
    with np.errstate(invalid="ignore", over="ignore"):
        for k in np.ndindex(*kernel):
            xs = xp[(slice(None),) * 3 + _taps(k, stride, out, dil)].reshape(batch, groups, in_c // groups,
                                                                                 g.shape[3])
            dw[(slice(None),) * 3 + k] = np.einsum("ngop,ngcp->goc", g, xs)
    return dw.reshape(-1)


def conv_transpose(x, w, b, batch, in_c, out_c, spatial, kernel, stride, padding, output_padding, dilation=None,
                   groups=1):
    """x (batch, in_c, *spatial), w (in_c, out_c / groups, *kernel): y (batch, out_c, *out) with
    out = transpose_out_dims(...): conv_bwd_input of a conv from out_c to in_c channels over out."""
    out = transpose_out_dims(spatial, kernel, stride, padding, output_padding, dilation)
    y = conv_bwd_input(x, w, batch, out_c, in_c, out, kernel, stride, padding, dilation, groups)
    if b is not None:
        with np.errstate(invalid="ignore", over="ignore"):
            y = (y.reshape((batch, out_c, int(np.prod(out)))) + _f(b).reshape(1, out_c, 1)).reshape(-1)
    return y
