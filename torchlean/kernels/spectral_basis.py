"""The DFT bases of the spectral convolution, built on the host for both backends.

``make_bases(grid, modes)`` -> (Bf (2 modes, grid), Bi (grid, 2 modes)), float32 and read-only:
the forward real DFT of the lowest ``modes`` frequencies (cos, -sin rows) and its inverse (the
weights ck of a real spectrum folded in). The angles are float64, reduced exactly modulo the grid,
with exact values at quarter turns, and rounded to float32 once: both backends use these very bits.
"""

from __future__ import annotations

import numpy as np

F32 = np.float32


def make_bases(grid: int, modes: int) -> tuple[np.ndarray, np.ndarray]:
    """(Bf (2 modes, grid), Bi (grid, 2 modes)) float32, from float64 angles reduced exactly."""
    k = np.arange(modes, dtype=np.int64)[:, None]
    t = np.arange(grid, dtype=np.int64)[None, :]
    r = (k * t) % grid
    theta = 2.0 * np.pi * r / grid
    c, s = np.cos(theta), np.sin(theta)
    q = (4 * r) % grid == 0  # exact values at quarter turns (sin(pi) = 0, not 1.2e-16)
    quarter = ((4 * r) // grid) % 4
    c = np.where(q, np.choose(quarter, [1.0, 0.0, -1.0, 0.0]), c)
    s = np.where(q, np.choose(quarter, [0.0, 1.0, 0.0, -1.0]), s)
    ck = np.where((k == 0) | (2 * k == grid), 1.0, 2.0) / grid
    bf = np.empty((2 * modes, grid), F32)
    bf[0::2], bf[1::2] = c, -s
    bi = np.empty((grid, 2 * modes), F32)
    bi[:, 0::2], bi[:, 1::2] = (ck * c).T, (-ck * s).T
    bf.flags.writeable = bi.flags.writeable = False
    return bf, bi
