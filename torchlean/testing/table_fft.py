"""Primitive-table entries of the fft family: fftn_c2c, rfftn_r2c, irfftn_c2r.

Every output reads every input of its batch element, so the entries draw SUM_KINDS: finite values
only, for the reason table_spectral gives (which bins an FFT turns into NaN is the library's
algorithm, not a contract). Random geometries: 1 to 3 axes of lengths 1 to 9 (even and odd, 1
included), batch 0 to 3, and a scale among 1, 1/N, 1/sqrt(N) (the three norms) and an arbitrary
one. The edge cases bring length-1 axes, a Bluestein length (a prime above 128), deltas, spectra
that are not Hermitian along the leading axes (irfftn_c2r must still be NumPy's irfftn), and empty
batches.
"""

from __future__ import annotations

import math

import numpy as np

from .table_core import F32, SUM_KINDS, PrimitiveInfo, add, values


def _geometry(rng, d):
    batch = d[0] % 4
    k = 1 + d[1] % 3
    dims = tuple(int(v) for v in rng.integers(1, 10, size=k))
    n = math.prod(dims)
    scale = [1.0, 1.0 / n, 1.0 / math.sqrt(n), 0.37][d[2] % 4]
    return batch, dims, float(np.float32(scale))


def _half(batch, dims):
    return batch * math.prod(dims[:-1]) * (dims[-1] // 2 + 1) * 2


def _c2c(rng, d, kind):
    batch, dims, scale = _geometry(rng, d)
    return [values(rng, batch * math.prod(dims) * 2, kind), batch, dims, bool(d[3] % 2), scale]


def _r2c(rng, d, kind):
    batch, dims, scale = _geometry(rng, d)
    return [values(rng, batch * math.prod(dims), kind), batch, dims, scale]


def _c2r(rng, d, kind):
    batch, dims, scale = _geometry(rng, d)
    return [values(rng, _half(batch, dims), kind), batch, dims, scale]


def _mix(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n).astype(F32)


add(PrimitiveInfo("fftn_c2c", _c2c, 4, kinds=SUM_KINDS, max_dim=40, edge_cases=[
    [np.array([1, 0, 2, 0, 3, 0, 4, 0], F32), 1, (4,), False, 1.0],  # [10, -2+2i, -2, -2-2i]
    [np.array([1, 0, 2, 0, 3, 0, 4, 0], F32), 1, (4,), True, 0.25],  # the inverse with 1/n
    [np.zeros(0, F32), 0, (3, 4), False, 1.0],                        # no batch
    [_mix(2 * 1 * 5 * 1 * 2, 1), 2, (1, 5, 1), True, 1.0],            # length-1 axes
    [_mix(2 * 131 * 2, 2), 1, (2, 131), False, 1.0],                 # Bluestein length
    [np.eye(12, dtype=F32)[::2].reshape(-1), 3, (2, 3, 2), False, 1.0],  # deltas on a 3-D grid
    [_mix(3 * 6 * 2, 3), 3, (6,), True, 1.0 / 6],
]))
add(PrimitiveInfo("rfftn_r2c", _r2c, 3, kinds=SUM_KINDS, max_dim=40, edge_cases=[
    [np.arange(1, 5, dtype=F32), 1, (4,), 1.0],
    [np.zeros(0, F32), 0, (2, 5), 1.0],
    [np.array([3.5, -1.0], F32), 2, (1,), 1.0],                 # n = 1: X_0 = x_0
    [_mix(3 * 4 * 1, 4), 1, (3, 4, 1), 0.5],                    # last length 1
    [_mix(2 * 131, 5), 1, (2, 131), 1.0],                       # Bluestein length
    [_mix(2 * 7 * 9, 6), 2, (7, 9), float(np.float32(1 / math.sqrt(63)))],  # odd, odd
    [np.eye(8, dtype=F32).reshape(-1), 2, (4, 8), 1.0],
]))
add(PrimitiveInfo("irfftn_c2r", _c2r, 3, kinds=SUM_KINDS, max_dim=40, edge_cases=[
    [np.array([1, 5, 2, 3, 3, 7], F32), 1, (4,), 1.0],           # Im of bins 0 and 2 ignored (one axis)
    [np.array([1, 5, 2, 3, 3, 7], F32), 1, (5,), 0.2],           # odd n: only Im of bin 0
    [_mix(3 * 3 * 2, 7), 1, (3, 4), 1.0 / 12],                   # not Hermitian along the leading axis
    [_mix(2 * 2 * 3 * 2, 8), 2, (2, 3, 1), 1.0],                 # last length 1: Re of the leading C2C
    [np.zeros(0, F32), 0, (4, 6), 1.0],
    [_mix(2 * 66 * 2, 9), 1, (2, 131), 1.0],                     # Bluestein length
    [_mix(5 * 4 * 5 * 2, 10), 1, (5, 4, 8), float(np.float32(1 / 160))],
]))
