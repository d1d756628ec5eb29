"""Counter-based random numbers on the CPU, bit-identical to the CUDA kernels.

rand_normal needs log, cos and sin, which libm and CUDA do not round identically. So the sampler
uses only IEEE-754 operations that are correctly rounded on every device (+, -, *, /, sqrt,
floor, frexp), in one fixed order: the CUDA kernel performs the same sequence with the
``__dadd_rn``/``__dmul_rn`` intrinsics (which the compiler may not contract into FMAs), so both
devices produce the same float64 value before the final rounding to float32. The same constants
(below) are written in the .cu file as hexadecimal floats.
"""

from __future__ import annotations

import math

import numpy as np

_U64 = np.uint64
GOLDEN_GAMMA = _U64(0x9E3779B97F4A7C15)
MIX1 = _U64(0xBF58476D1CE4E5B9)
MIX2 = _U64(0x94D049BB133111EB)
_CHUNK = 1 << 16  # elements per pass: keeps the uint64/float64 temporaries in cache (whole-array passes would not)

# log(m) = 2 s (1 + z/3 + z^2/5 + ... + z^11/23), s = (m-1)/(m+1), z = s^2, m in [sqrt(1/2), sqrt(2))
LOG_SERIES = tuple(1.0 / (2 * k + 1) for k in range(12))
LN2 = math.log(2.0)
SQRT_HALF = math.sqrt(0.5)
TWO_PI = 2.0 * math.pi
# Taylor coefficients on [-pi/4, pi/4]: sin = t (1 - t^2/3! + ...), cos = 1 - t^2/2! + ...
SIN_SERIES = tuple((-1.0) ** k / math.factorial(2 * k + 1) for k in range(9))
COS_SERIES = tuple((-1.0) ** k / math.factorial(2 * k) for k in range(10))


def splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 of every element of a uint64 array (arithmetic wraps mod 2**64)."""
    z = x + GOLDEN_GAMMA
    z = (z ^ (z >> _U64(30))) * MIX1
    z = (z ^ (z >> _U64(27))) * MIX2
    return z ^ (z >> _U64(31))


def _hashes(key: int, start: int, count: int) -> np.ndarray:
    return splitmix64(np.arange(start, start + count, dtype=np.uint64) + _U64(key))


def rand_uniform(n: int, key: int) -> np.ndarray:
    out = np.empty(n, dtype=np.float32)
    for s in range(0, n, _CHUNK):
        c = min(_CHUNK, n - s)
        low = (_hashes(key, s, c) & _U64(0xFFFFFFFF)).astype(np.float32)
        # float32(u) * 2**-32 == float32(u / 2**32): scaling by a power of two commutes with rounding
        out[s:s + c] = low * np.float32(2.0**-32)
    return out


def bernoulli_mask(n: int, keep_prob: float, key: int) -> np.ndarray:
    if np.float32(keep_prob) >= 1:  # keep everything: a draw that rounds to 1.0f must not drop one
        return np.ones(n, np.float32)
    return (np.float32(keep_prob) > rand_uniform(n, key)).astype(np.float32)


def _horner(coeffs: tuple[float, ...], z: np.ndarray) -> np.ndarray:
    p = np.full_like(z, coeffs[-1])
    for c in reversed(coeffs[:-1]):
        p = p * z + c  # two separate, correctly rounded ufuncs: never an FMA
    return p


def log_unit(u: np.ndarray) -> np.ndarray:
    """Natural log for u in (0, 1], from correctly rounded operations only."""
    m, e = np.frexp(u)  # u = m * 2**e, m in [0.5, 1)
    small = m < SQRT_HALF
    m = np.where(small, m * 2.0, m)
    e = np.where(small, e - 1, e).astype(np.float64)
    s = (m - 1.0) / (m + 1.0)
    return e * LN2 + (2.0 * s) * _horner(LOG_SERIES, s * s)


def cos_sin_2pi(u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(cos 2 pi u, sin 2 pi u) for u in [0, 1), from correctly rounded operations only."""
    q = np.floor(u * 4.0 + 0.5)  # exact: u has at most 32 significant bits
    t = (u - q * 0.25) * TWO_PI  # u - q/4 is exact; t in [-pi/4, pi/4]
    t2 = t * t
    s = t * _horner(SIN_SERIES, t2)
    c = _horner(COS_SERIES, t2)
    quadrant = q.astype(np.int64) & 3
    cos = np.choose(quadrant, [c, -s, -c, s])
    sin = np.choose(quadrant, [s, c, -s, -c])
    return cos, sin


def rand_normal(n: int, key: int) -> np.ndarray:
    out = np.empty(n + (n & 1), dtype=np.float32)
    pairs = len(out) // 2
    for s in range(0, pairs, _CHUNK):
        c = min(_CHUNK, pairs - s)
        w = _hashes(key, s, c)
        u1 = ((w >> _U64(32)).astype(np.float64) + 1.0) * 2.0**-32
        u2 = (w & _U64(0xFFFFFFFF)).astype(np.float64) * 2.0**-32
        r = np.sqrt(-2.0 * log_unit(u1))
        cos, sin = cos_sin_2pi(u2)
        out[2 * s:2 * (s + c):2] = (r * cos).astype(np.float32)
        out[2 * s + 1:2 * (s + c):2] = (r * sin).astype(np.float32)
    return out[:n].copy() if n & 1 else out
