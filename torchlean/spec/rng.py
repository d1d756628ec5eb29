"""Reference of the counter-based random numbers, in exact integer arithmetic.

    splitmix64(x) = mix(x + 0x9E3779B97F4A7C15)           (all arithmetic mod 2**64)
    mix(z): z = (z ^ z >> 30) * 0xBF58476D1CE4E5B9; z = (z ^ z >> 27) * 0x94D049BB133111EB; z ^ z >> 31
    key = splitmix64(seed + counter)
    rand_uniform[i]  = float32(low32(splitmix64(key + i)) / 2**32)
    bernoulli_mask[i] = 1 if float32(keep_prob) > rand_uniform[i] else 0, and 1 everywhere when
                        float32(keep_prob) >= 1 (keep probability 1 keeps every element; 0 keeps none)
    rand_normal: pair j uses w = splitmix64(key + j); u1 = (high32(w) + 1) / 2**32 in (0, 1],
                 u2 = low32(w) / 2**32; r = sqrt(-2 ln u1); out[2j] = r cos(2 pi u2),
                 out[2j + 1] = r sin(2 pi u2)  (Box-Muller; here with libm, float64)

Note: float32 rounding can turn u / 2**32 for u >= 2**32 - 128 into 1.0, so rand_uniform is
in [0, 1]; 1.0 comes with probability 2**-25. We keep the formula exactly, as the contract
is bit equality across devices.
"""

from __future__ import annotations

import numpy as np

__all__ = ["splitmix64", "derive_key", "rand_uniform", "bernoulli_mask", "rand_normal"]

MASK64 = (1 << 64) - 1
GOLDEN_GAMMA = 0x9E3779B97F4A7C15
MIX1 = 0xBF58476D1CE4E5B9
MIX2 = 0x94D049BB133111EB


def splitmix64(x: int) -> int:
    z = (x + GOLDEN_GAMMA) & MASK64
    z = ((z ^ (z >> 30)) * MIX1) & MASK64
    z = ((z ^ (z >> 27)) * MIX2) & MASK64
    return z ^ (z >> 31)


def derive_key(seed: int, counter: int) -> int:
    return splitmix64((seed + counter) & MASK64)


def rand_uniform(n: int, key: int) -> np.ndarray:
    u = [splitmix64((key + i) & MASK64) & 0xFFFFFFFF for i in range(n)]
    return (np.array(u, dtype=np.float64) / 2.0**32).astype(np.float32)


def bernoulli_mask(n: int, keep_prob: float, key: int) -> np.ndarray:
    p = np.float32(keep_prob)
    if p >= 1:  # the endpoint keeps every element, although rand_uniform can return 1.0
        return np.ones(n, np.float32)
    return (p > rand_uniform(n, key)).astype(np.float32)


def rand_normal(n: int, key: int) -> np.ndarray:
    """float64 values of the Box-Muller transform (the contract allows 1 ulp after rounding)."""
    out = np.empty(n + (n & 1), dtype=np.float64)
    for j in range(len(out) // 2):
        w = splitmix64((key + j) & MASK64)
        u1 = ((w >> 32) + 1) / 2.0**32
        u2 = (w & 0xFFFFFFFF) / 2.0**32
        r = np.sqrt(-2.0 * np.log(u1))
        out[2 * j] = r * np.cos(2.0 * np.pi * u2)
        out[2 * j + 1] = r * np.sin(2.0 * np.pi * u2)
    return out[:n]
