"""Float64 reference of the 2-D and 3-D FNO spectral convolutions (the reference ``fourier_2d.py`` /
``fourier_3d.py`` ``SpectralConv2d`` / ``SpectralConv3d``), written with direct DFT matrices (never an
FFT) whose angles are reduced exactly, as ``spec/spectral.py`` is.

Layout (channels FIRST, as the reference programs):

* ``spectral_conv2d_rfft_fwd(x, w, batch, cin, cout, h, wd, m1, m2)``: x (batch, cin, h, wd);
  w (2, cin, cout, m1, m2, 2): the reference's complex ``weights1``, ``weights2`` (cin, cout, m1, m2)
  stacked, each as its real view ([re, im] last). X = rfft2(x); the kept modes are the rows
  kh in [0, m1) (corner 0, weights1) and [h - m1, h) (corner 1, weights2, index kh - (h - m1)) and
  the columns kw in [0, m2); there Y[b, o] = sum_i X[b, i] W[i, o]; Y = 0 elsewhere;
  y = irfft2(Y, s=(h, wd)) in NumPy's sense: the C2C inverse along h (1/h), then the C2R along wd
  (1/wd) which ignores the imaginary parts of bin 0 and (even wd) bin wd/2 AFTER the h inverse.
  Constraints: 1 <= m1, 2 m1 <= h (the two row corners never overlap), 1 <= m2 <= wd//2 + 1.
* ``spectral_conv3d_rfft_fwd(x, w, batch, cin, cout, d1, d2, d3, m1, m2, m3)``: x (batch, cin, d1, d2,
  d3); w (4, cin, cout, m1, m2, m3, 2) = weights1 .. weights4 of the reference, at the corners
  [:m1, :m2], [-m1:, :m2], [:m1, -m2:], [-m1:, -m2:] (of axes d1, d2; axis d3 keeps [:m3]);
  y = irfftn(Y, s=(d1, d2, d3)) (C2C inverses along d1, d2, then the C2R along d3).
  Constraints: 2 m1 <= d1, 2 m2 <= d2, 1 <= m3 <= d3//2 + 1, all m >= 1.
* ``*_bwd_x(x, w, dy, ...)``, ``*_bwd_w(x, w, dy, ...)``: the exact VJPs (real transposes) of the
  forward's real-linear maps; dw (same layout as w) sums over the batch.

As complex maps: X = E x (E_kt = exp(-2 pi i f_k t / n) per axis, f_k the kept frequencies),
Y = X W per mode, y = Re(T Y) with T_tk = (1/N) c_k exp(+2 pi i f_k t / n) per axis (c_k = 1 but on
the last axis: 1 at bins 0 and n/2, 2 between). Then dY = T^H dy, dX = dY conj(W)^T,
dx = Re(E^H dX), dW = sum_b conj(X) dY.
"""

from __future__ import annotations

import numpy as np

__all__ = ["spectral_conv2d_rfft_fwd", "spectral_conv2d_rfft_bwd_x", "spectral_conv2d_rfft_bwd_w",
           "spectral_conv3d_rfft_fwd", "spectral_conv3d_rfft_bwd_x", "spectral_conv3d_rfft_bwd_w"]


def kept_frequencies(n: int, m: int, last: bool) -> np.ndarray:
    """The kept frequencies of an axis of length n: [0, m) on the last (real) axis, else [0, m)
    followed by [n - m, n) (the two corners)."""
    low = np.arange(m, dtype=np.int64)
    return low if last else np.concatenate([low, np.arange(n - m, n, dtype=np.int64)])


def _phase(n: int, freqs: np.ndarray, sign: float) -> np.ndarray:
    """(len(freqs), n) complex: exp(sign 2 pi i f t / n) with f t reduced modulo n exactly and exact
    values at quarter turns."""
    r = (freqs[:, None] * np.arange(n, dtype=np.int64)[None, :]) % n
    theta = 2.0 * np.pi * r / n
    c, s = np.cos(theta), np.sin(theta)
    q = (4 * r) % n == 0
    quarter = ((4 * r) // n) % 4
    c = np.where(q, np.choose(quarter, [1.0, 0.0, -1.0, 0.0]), c)
    s = np.where(q, np.choose(quarter, [0.0, 1.0, 0.0, -1.0]), s)
    return c + sign * 1j * s


def _c_last(n: int, m: int) -> np.ndarray:
    k = np.arange(m)
    return np.where((k == 0) | (2 * k == n), 1.0, 2.0)


def _apply(v: np.ndarray, mats: list[np.ndarray]) -> np.ndarray:
    """v (P, Q, a_1 .. a_d) with mats[j] (b_j, a_j): the product along every trailing axis."""
    for j, m in enumerate(mats):
        v = np.moveaxis(np.tensordot(v, m, axes=([2 + j], [1])), -1, 2 + j)
    return v


def _forward_mats(ns, ms, sign=-1.0):
    d = len(ns)
    return [_phase(n, kept_frequencies(n, m, j == d - 1), sign) for j, (n, m) in enumerate(zip(ns, ms))]


def _synthesis_mats(ns, ms):
    """T per axis as (n, K) complex: (1/n) exp(+i theta), times c_k on the last axis."""
    d = len(ns)
    mats = []
    for j, (n, m) in enumerate(zip(ns, ms)):
        t = _phase(n, kept_frequencies(n, m, j == d - 1), +1.0).T / n
        if j == d - 1:
            t = t * _c_last(n, m)[None, :]
        mats.append(t)
    return mats


def _full_weights(w, cin, cout, ms) -> np.ndarray:
    """(cin, cout, K_1 .. K_d) complex from the stacked corners (2^(d-1), cin, cout, m.., 2)."""
    d = len(ms)
    nc = 2 ** (d - 1)
    w = np.asarray(w, dtype=np.float64).reshape((nc, cin, cout) + tuple(ms) + (2,))
    wc = w[..., 0] + 1j * w[..., 1]
    full = np.zeros((cin, cout) + tuple(2 * m for m in ms[:-1]) + (ms[-1],), complex)
    for c in range(nc):
        idx = tuple(slice(m, 2 * m) if (c >> a) & 1 else slice(0, m) for a, m in enumerate(ms[:-1]))
        full[(slice(None), slice(None)) + idx] = wc[c]
    return full


def _fold_weights(full, ms) -> np.ndarray:
    """The inverse of _full_weights: (2^(d-1), cin, cout, m.., 2) flat."""
    d = len(ms)
    parts = []
    for c in range(2 ** (d - 1)):
        idx = tuple(slice(m, 2 * m) if (c >> a) & 1 else slice(0, m) for a, m in enumerate(ms[:-1]))
        parts.append(full[(slice(None), slice(None)) + idx])
    stacked = np.stack(parts)
    return np.stack([stacked.real, stacked.imag], axis=-1).reshape(-1)


def _spectrum(x, batch, cin, ns, ms):
    x = np.asarray(x, dtype=np.float64).reshape((batch, cin) + tuple(ns))
    return _apply(x.astype(complex), _forward_mats(ns, ms))


def _dspectrum(dy, batch, cout, ns, ms):
    """dY = T^H dy (batch, cout, K..)."""
    dy = np.asarray(dy, dtype=np.float64).reshape((batch, cout) + tuple(ns))
    return _apply(dy.astype(complex), [np.conj(t.T) for t in _synthesis_mats(ns, ms)])


def _fwd(x, w, batch, cin, cout, ns, ms):
    X = _spectrum(x, batch, cin, ns, ms)
    Y = np.einsum("bi...,io...->bo...", X, _full_weights(w, cin, cout, ms))
    return _apply(Y, _synthesis_mats(ns, ms)).real.reshape(-1)


def _bwd_x(x, w, dy, batch, cin, cout, ns, ms):
    dY = _dspectrum(dy, batch, cout, ns, ms)
    dX = np.einsum("bo...,io...->bi...", dY, np.conj(_full_weights(w, cin, cout, ms)))
    return _apply(dX, [np.conj(e.T) for e in _forward_mats(ns, ms)]).real.reshape(-1)


def _bwd_w(x, w, dy, batch, cin, cout, ns, ms):
    X = _spectrum(x, batch, cin, ns, ms)
    dY = _dspectrum(dy, batch, cout, ns, ms)
    return _fold_weights(np.einsum("bi...,bo...->io...", np.conj(X), dY), ms)


def spectral_conv2d_rfft_fwd(x, w, batch, cin, cout, h, wd, m1, m2):
    return _fwd(x, w, batch, cin, cout, (h, wd), (m1, m2))


def spectral_conv2d_rfft_bwd_x(x, w, dy, batch, cin, cout, h, wd, m1, m2):
    return _bwd_x(x, w, dy, batch, cin, cout, (h, wd), (m1, m2))


def spectral_conv2d_rfft_bwd_w(x, w, dy, batch, cin, cout, h, wd, m1, m2):
    return _bwd_w(x, w, dy, batch, cin, cout, (h, wd), (m1, m2))


def spectral_conv3d_rfft_fwd(x, w, batch, cin, cout, d1, d2, d3, m1, m2, m3):
    return _fwd(x, w, batch, cin, cout, (d1, d2, d3), (m1, m2, m3))


def spectral_conv3d_rfft_bwd_x(x, w, dy, batch, cin, cout, d1, d2, d3, m1, m2, m3):
    return _bwd_x(x, w, dy, batch, cin, cout, (d1, d2, d3), (m1, m2, m3))


def spectral_conv3d_rfft_bwd_w(x, w, dy, batch, cin, cout, d1, d2, d3, m1, m2, m3):
    return _bwd_w(x, w, dy, batch, cin, cout, (d1, d2, d3), (m1, m2, m3))
