"""Contracts of the 2-D and 3-D FNO spectral convolutions (spectral_conv{2,3}d_rfft_{fwd,bwd_x,bwd_w}).

The map is a chain of real-linear stages: one truncated transform per axis (d of them), the per-mode
complex mixing, one inverse per axis (d). Each stage computes fl(M v) with |fl(M v) - M v| <=
g_s |M| |v| (componentwise, any summation order), so the whole chain's error is at most
(prod_s (1 + g_s) - 1) times the chain evaluated on absolute values (Higham, sec. 3.5). The stage
factors, per axis of length n (the larger of the algorithms the backends use):

* FFT (pocketfft on the CPU, a full transform then a selection): gamma(K(n) + 4), K(n) the radix
  count of contract/spectral.py (+2 for the 1/n or c_k/N scalings applied in float32, +2 for the
  zero-padded inverse's copies); a prime factor above 128 (Bluestein) multiplies it by
  3 sqrt(n) (its normwise bound 3 sqrt(n) gamma ||v||_2 is at most 3 sqrt(n) gamma sum|v|);
* truncated DFT as a GEMM with a float32 basis (CUDA): at most 2n (analysis) or 4 m <= 2n + 4
  (synthesis) products per output, each basis entry rounded once: gamma(4 n + 4);
* the mixing: 2 cin (2 cout for bwd_x) real products per component, gamma(2 c + 2).

The chain on absolute values, A[b, i] = sum over the grid of |x[b, i]|: every kept mode's
component is at most 2^(d-1) A (a complex stage adds re and im moduli), the mixing multiplies by
|w_re| + |w_im|, and every inverse stage by 2 / n (c_k / n on the last axis), so per output
(b, o), at every grid point:

    |y| <= C[b, o] = 2^(2d-1) / N sum_i A[b, i] sum_modes c_k (|w_re| + |w_im|)[mode, i, o]

with N = n_1 ... n_d and c_k = 1 at bins 0 and n_d/2 of the last axis, else 2. bwd_x is the same
chain on |dy| with the weights transposed; bwd_w's element (mode, i, o) is at most
2^(2d-1) (c_k / N) sum_b A_x[b, i] A_dy[b, o], with the two spectra's d stages each and the batch sum
(gamma(2 batch + 2)). Each bound adds u |ref| (the final rounding) and subnormal slack.
"""

from __future__ import annotations

import math

import numpy as np

from .core import TINY, U, abs64, gamma, register
from .spectral import C_CHIRP, fft_error_terms

__all__ = ["stage_factor"]
_SUB = 2.0**-149


def stage_factor(n: int) -> float:
    """g_s of one axis of length n: the larger of the FFT's and the float32-basis GEMM's."""
    k, blue = fft_error_terms(n)
    g_fft = gamma(k + 4) * (C_CHIRP * math.sqrt(n) if blue else 1.0)
    return max(g_fft, gamma(4 * n + 4))


def _relative(ns, stages_per_axis: int, channels: int) -> float:
    r = 1.0
    for n in ns:
        r *= (1.0 + stage_factor(n)) ** stages_per_axis
    return r * (1.0 + gamma(2 * channels + 2)) - 1.0


def _ck(n_last: int, m_last: int) -> np.ndarray:
    k = np.arange(m_last)
    return np.where((k == 0) | (2 * k == n_last), 1.0, 2.0)


def _abs_sums(v, batch, c, ns) -> np.ndarray:
    return abs64(v).reshape(batch, c, math.prod(ns)).sum(axis=2)


def _chain_bound(ref, v, w, batch, c_in, c_out, ns, ms, transpose: bool):
    """Per output element: rel * C + u|ref| + slack, for y (transpose=False: v = x) or dx (v = dy)."""
    d = len(ns)
    n_out = batch * c_out * math.prod(ns)
    if n_out == 0:
        return np.zeros(0)
    cin, cout = (c_out, c_in) if transpose else (c_in, c_out)
    nc = 2 ** (d - 1)
    wa = abs64(w).reshape((nc, cin, cout, math.prod(ms[:-1]), ms[-1], 2)).sum(axis=-1)
    wsum = np.einsum("ciolk,k->io", wa, _ck(ns[-1], ms[-1]))  # (cin, cout)
    if transpose:
        wsum = wsum.T  # (cout, cin): dx[b, i] from dy[b, o]
    a = _abs_sums(v, batch, c_in, ns)  # (batch, c_in)
    chain = 2.0 ** (2 * d - 1) / math.prod(ns) * (a @ wsum)  # (batch, c_out)
    rel = _relative(ns, 2, c_in)
    per = rel * chain + c_in * nc * math.prod(ms) * _SUB
    return (np.repeat(per.reshape(-1), math.prod(ns)) + U * abs64(ref) + TINY).reshape(-1)


def _bwd_w_bound(ref, x, dy, batch, cin, cout, ns, ms):
    d = len(ns)
    nc = 2 ** (d - 1)
    n_w = nc * cin * cout * math.prod(ms) * 2
    if batch * cin * cout == 0:
        return np.full(n_w, TINY)
    s = _abs_sums(x, batch, cin, ns).T @ _abs_sums(dy, batch, cout, ns)  # (cin, cout)
    rel = 1.0
    for n in ns:
        rel *= (1.0 + stage_factor(n)) ** 2
    rel = rel * (1.0 + gamma(2 * batch + 2)) - 1.0
    per = rel * 2.0 ** (2 * d - 1) / math.prod(ns) * s  # (cin, cout), times c_k below
    full = per[None, :, :, None, None, None] * _ck(ns[-1], ms[-1])[None, None, None, None, :, None]
    full = np.broadcast_to(full, (nc, cin, cout, math.prod(ms[:-1]), ms[-1], 2))
    return (full + batch * _SUB).reshape(-1) + U * abs64(ref) + TINY


def _split(d, args):
    """(batch, cin, cout, ns, ms) from the trailing dims of a call."""
    b, ci, co = args[:3]
    return b, ci, co, tuple(args[3:3 + d]), tuple(args[3 + d:3 + 2 * d])


def _register(d: int) -> None:
    name = f"spectral_conv{d}d_rfft"

    def fwd(ref, x, w, *dims):
        b, ci, co, ns, ms = _split(d, dims)
        return _chain_bound(ref, x, w, b, ci, co, ns, ms, transpose=False)

    def bwd_x(ref, x, w, dy, *dims):
        b, ci, co, ns, ms = _split(d, dims)
        return _chain_bound(ref, dy, w, b, co, ci, ns, ms, transpose=True)

    def bwd_w(ref, x, w, dy, *dims):
        b, ci, co, ns, ms = _split(d, dims)
        return _bwd_w_bound(ref, x, dy, b, ci, co, ns, ms)

    register(f"{name}_fwd", "per output (b, o, grid point): (prod over the 2d stages (1 + g(n)) "
             "(1 + gamma(2 cin + 2)) - 1) 2^(2d-1)/N sum_i A[b,i] sum_modes c_k (|w_re| + |w_im|), g(n) = max(gamma(K(n) + 4) (x 3 sqrt(n) for "
             "Bluestein n), gamma(4n + 4)), A = sum over the grid of |x|; + u|y| + TINY", fwd)
    register(f"{name}_bwd_x", f"as {name}_fwd, on |dy| with the weights transposed (cout for cin)", bwd_x)
    register(f"{name}_bwd_w", "per element: (prod over 2d stages (1 + g(n)) (1 + gamma(2 batch + 2)) - 1) 2^(2d-1) "
             "(c_k/N) sum_b A_x[b,i] A_dy[b,o] + batch 2^-149 + u|ref| + TINY", bwd_w)


_register(2)
_register(3)
