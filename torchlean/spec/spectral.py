"""Float64 reference of the spectral family: real FFT, its inverse, and the FNO spectral convolution.

Written as explicit real linear maps (direct DFT sums with exactly reduced angles), never with an
FFT, so that no kernel's algorithm is shared with its reference.

Conventions (DESIGN.md "FFT" and "spectral conv"):

* ``rfft1d_packed(x, batch, n)``: x (batch, n) row-major; out (batch, n//2+1, 2) holds [re, im] of
  the UNNORMALIZED DFT  X_k = sum_t x_t exp(-2 pi i k t / n)  for k = 0 .. n//2.
* ``irfft1d_packed(spec, batch, n)``: the normalized inverse of a Hermitian spectrum given by its
  half (batch, n//2+1, 2):

      x_t = (1/n) [ Re X_0 + 2 sum_{0<k<n/2} Re(X_k e^{2 pi i k t/n}) + (n even) Re(X_{n/2}) (-1)^t ]

  The imaginary parts of bin 0 and (even n) bin n/2 are IGNORED (as cuFFT C2R and numpy.fft.irfft
  do): a Hermitian spectrum has them 0, and they do not enter the formula.
* ``spectral_conv1d_rfft_fwd(x, w_re, w_im, grid, width, modes, batch=1)`` (the seed's order, batch
  trailing): x (batch, grid, width)
  (channels LAST); w_re, w_im (modes, width, width) indexed [k, i, o] (i = input channel, o = output
  channel). X = rfft of every channel along grid; for k < modes the row vector X[k, :] times the
  complex matrix W_k = w_re[k] + i w_im[k]:  Y[k, o] = sum_i X[k, i] W_k[i, o];  Y = 0 for
  k >= modes; y = irfft(Y) along grid (so Im Y at bin 0 and, for even grid, bin grid/2 are ignored).
  0 <= modes <= grid//2 + 1 (modes = 0 keeps no bin: y = 0).
* the backward functions are the exact VJPs (transposes) of the forward's real-linear map; the
  weight gradients sum over the batch.
"""

from __future__ import annotations

import numpy as np

__all__ = ["rfft1d_packed", "irfft1d_packed", "spectral_conv1d_rfft_fwd", "spectral_conv1d_rfft_bwd_x",
           "spectral_conv1d_rfft_bwd_wre", "spectral_conv1d_rfft_bwd_wim", "spectral_conv1d_rfft_bwd_w"]


def _angles(n: int, bins: int) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of 2 pi k t / n, (bins, n), with k t reduced modulo n exactly (integers)."""
    k = np.arange(bins, dtype=np.int64)[:, None]
    t = np.arange(n, dtype=np.int64)[None, :]
    r = (k * t) % n
    theta = 2.0 * np.pi * r / n
    c, s = np.cos(theta), np.sin(theta)
    # exact values at the multiples of a quarter turn (sin(pi) is 1.2e-16 in floating point)
    q = (4 * r) % n == 0
    quarter = (4 * r) // n
    c = np.where(q, np.choose(quarter % 4, [1.0, 0.0, -1.0, 0.0]), c)
    s = np.where(q, np.choose(quarter % 4, [0.0, 1.0, 0.0, -1.0]), s)
    return c, s


def _weights(n: int, bins: int) -> np.ndarray:
    """c_k: 1 for bin 0 and (even n) bin n/2, 2 for the interior bins (the Hermitian pair)."""
    k = np.arange(bins)
    return np.where((k == 0) | (2 * k == n), 1.0, 2.0)


def _forward_matrix(n: int, bins: int) -> np.ndarray:
    """Real (2 bins, n): rows 2k, 2k+1 give Re X_k = sum x cos, Im X_k = -sum x sin."""
    c, s = _angles(n, bins)
    m = np.empty((2 * bins, n))
    m[0::2], m[1::2] = c, -s
    return m


def _inverse_matrix(n: int, bins: int) -> np.ndarray:
    """Real (n, 2 bins): x_t = sum_k (c_k/n) (Re X_k cos - Im X_k sin); sin is exactly 0 at the
    bins whose imaginary part is ignored (k = 0, k = n/2)."""
    c, s = _angles(n, bins)
    wk = _weights(n, bins)[:, None] / n
    m = np.empty((n, 2 * bins))
    m[:, 0::2], m[:, 1::2] = (wk * c).T, (-wk * s).T
    return m


def rfft1d_packed(x, batch, n):
    x = np.asarray(x, dtype=np.float64).reshape(batch, n)
    bins = n // 2 + 1
    return (x @ _forward_matrix(n, bins).T).reshape(-1)


def irfft1d_packed(spec, batch, n):
    bins = n // 2 + 1
    s = np.asarray(spec, dtype=np.float64).reshape(batch, 2 * bins)
    return (s @ _inverse_matrix(n, bins).T).reshape(-1)


def _mixing(w_re, w_im, modes, width):
    """Real block matrices (modes, 2 width, 2 width): [Xr Xi] @ M_k = [Yr Yi] for the row vector
    X (complex, over input channels) times W_k = w_re[k] + i w_im[k]."""
    wr = np.asarray(w_re, dtype=np.float64).reshape(modes, width, width)
    wi = np.asarray(w_im, dtype=np.float64).reshape(modes, width, width)
    m = np.empty((modes, 2 * width, 2 * width))
    m[:, :width, :width], m[:, :width, width:] = wr, wi
    m[:, width:, :width], m[:, width:, width:] = -wi, wr
    return m


def _spectrum(x, batch, grid, width, modes):
    """(batch, modes, 2 width): [Re X[k, :], Im X[k, :]] of every channel's truncated DFT."""
    x3 = np.asarray(x, dtype=np.float64).reshape(batch, grid, width)
    f = _forward_matrix(grid, modes)  # (2 modes, grid)
    xs = np.einsum("ft,btc->bfc", f, x3)  # (batch, 2 modes, width)
    return np.concatenate([xs[:, 0::2, :], xs[:, 1::2, :]], axis=2)


def _synthesis(ys, batch, grid, width, modes):
    """y (batch, grid, width) from [Re Y[k, :], Im Y[k, :]] (batch, modes, 2 width)."""
    inv = _inverse_matrix(grid, modes)  # (grid, 2 modes)
    inter = np.empty((batch, 2 * modes, width))
    inter[:, 0::2, :], inter[:, 1::2, :] = ys[:, :, :width], ys[:, :, width:]
    return np.einsum("tf,bfc->btc", inv, inter)


def _adjoint_synthesis(dy, batch, grid, width, modes):
    """The transpose of _synthesis: (batch, modes, 2 width) from dy (batch, grid, width)."""
    inv = _inverse_matrix(grid, modes)
    d3 = np.asarray(dy, dtype=np.float64).reshape(batch, grid, width)
    inter = np.einsum("tf,btc->bfc", inv, d3)
    return np.concatenate([inter[:, 0::2, :], inter[:, 1::2, :]], axis=2)


def _adjoint_spectrum(dxs, batch, grid, width, modes):
    """The transpose of _spectrum: dx (batch, grid, width) from (batch, modes, 2 width)."""
    f = _forward_matrix(grid, modes)
    inter = np.empty((batch, 2 * modes, width))
    inter[:, 0::2, :], inter[:, 1::2, :] = dxs[:, :, :width], dxs[:, :, width:]
    return np.einsum("ft,bfc->btc", f, inter)


def spectral_conv1d_rfft_fwd(x, w_re, w_im, grid, width, modes, batch=1):
    xs = _spectrum(x, batch, grid, width, modes)
    ys = np.einsum("bki,kio->bko", xs, _mixing(w_re, w_im, modes, width))
    return _synthesis(ys, batch, grid, width, modes).reshape(-1)


def spectral_conv1d_rfft_bwd_x(x, w_re, w_im, dy, grid, width, modes, batch=1):
    dys = _adjoint_synthesis(dy, batch, grid, width, modes)
    dxs = np.einsum("bko,kio->bki", dys, _mixing(w_re, w_im, modes, width))
    return _adjoint_spectrum(dxs, batch, grid, width, modes).reshape(-1)


def _dmixing(x, dy, batch, grid, width, modes):
    """Gradient of the block matrices M_k: sum over the batch of [Xr Xi]^T [dYr dYi]."""
    xs = _spectrum(x, batch, grid, width, modes)
    dys = _adjoint_synthesis(dy, batch, grid, width, modes)
    return np.einsum("bki,bko->kio", xs, dys)


def spectral_conv1d_rfft_bwd_wre(x, w_re, w_im, dy, grid, width, modes, batch=1):
    dm = _dmixing(x, dy, batch, grid, width, modes)
    # w_re appears in the blocks (0, 0) and (1, 1)
    return (dm[:, :width, :width] + dm[:, width:, width:]).reshape(-1)


def spectral_conv1d_rfft_bwd_wim(x, w_re, w_im, dy, grid, width, modes, batch=1):
    dm = _dmixing(x, dy, batch, grid, width, modes)
    # w_im appears in block (0, 1) and, negated, in block (1, 0)
    return (dm[:, :width, width:] - dm[:, width:, :width]).reshape(-1)


def spectral_conv1d_rfft_bwd_w(x, w_re, w_im, dy, grid, width, modes, batch=1):
    return (spectral_conv1d_rfft_bwd_wre(x, w_re, w_im, dy, grid, width, modes, batch),
            spectral_conv1d_rfft_bwd_wim(x, w_re, w_im, dy, grid, width, modes, batch))
