"""Primitive table entries of the fast-kernel family: fast_gemm, mse_loss_fwd, mse_loss_bwd.

fast_gemm draws its layout and precision with the values: trans_a, trans_b, fp64 and whether a
bias is present all come from the seed, so the generic random test covers the 16 combinations.
Edge cases: k = 0 (bias or zeros), m or n = 1, m n = 0, a NaN, and cancellation-heavy data where
the exact result is ~1e-3 of sum |a||b|: a GEMM that accumulates in float32 passes the fp32
contract there but misses the fp64 one by orders of magnitude.
"""

from __future__ import annotations

import numpy as np

from .table_core import F32, SUM_KINDS, PrimitiveInfo, add, values


def _gemm(rng, d, kind):
    m, k, n = d
    ta, tb, f64, has_bias = (int(v) for v in rng.integers(0, 2, 4))
    bias = values(rng, n, kind) if has_bias else None
    return [values(rng, m * k, kind), values(rng, k * n, kind), bias, m, k, n, ta, tb, f64]


def f32(*v):
    return np.array(v, dtype=F32)


def _cancelling(m: int, k: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """a (m, k), b (k, n), bias (n,) whose products nearly cancel: pairs +-x_j y_j of large terms plus a
    small remainder, in an order that makes a float32 running sum lose the remainder's low bits."""
    rng = np.random.default_rng(seed)
    big = (rng.uniform(1e3, 1e4, (m, k // 2))).astype(F32)
    a = np.empty((m, k), F32)
    a[:, 0::2] = big
    a[:, 1::2] = big
    b = np.empty((k, n), F32)
    col = rng.uniform(0.5, 2.0, (k // 2, n)).astype(F32)
    b[0::2] = col
    # the odd rows: -col perturbed by a tiny amount, so each pair leaves ~1e-3 of its size
    b[1::2] = (-col * F32(1 - 1e-3)).astype(F32)
    bias = rng.uniform(-1, 1, n).astype(F32) * F32(1e-2)
    return a.reshape(-1), b.reshape(-1), bias


_A, _B, _BIAS = _cancelling(3, 64, 5, 1)
_Z0 = np.zeros(0, F32)
add(PrimitiveInfo(
    "fast_gemm", _gemm, 3,
    edge_cases=[
        [_Z0, _Z0, None, 3, 0, 4, 0, 0, 0],                      # k = 0: zeros
        [_Z0, _Z0, f32(1, -2, 3.5, 0), 3, 0, 4, 0, 1, 1],          # k = 0: the bias on every row
        [_Z0, np.arange(6, dtype=F32), f32(1, 2), 0, 3, 2, 1, 0, 0],  # m = 0
        [np.arange(5, dtype=F32), np.arange(5, dtype=F32) - 2, f32(0.5), 1, 5, 1, 0, 0, 1],  # m = n = 1
        [np.arange(5, dtype=F32), np.arange(10, dtype=F32) - 2, None, 1, 5, 2, 1, 1, 0],  # m = 1, both transposed
        [f32(1, np.nan, 2, 3), f32(1, 2, 3, 4, 5, 6), f32(0, 1, 2), 2, 2, 3, 0, 0, 0],  # a NaN spreads along its row
        [f32(1, np.nan, 2, 3), f32(1, 2, 3, 4, 5, 6), None, 2, 2, 3, 0, 0, 1],
        [_A, _B, _BIAS, 3, 64, 5, 0, 0, 1],                         # cancellation: fp64 must be ~exact
        [_A, _B, _BIAS, 3, 64, 5, 0, 0, 0],                         # the same within the fp32 contract
        [np.ones(64 * 64, F32) * F32(0.1), np.ones(64 * 64, F32) * F32(0.1), np.full(64, 1e-3, F32),
         64, 64, 64, 0, 1, 1],
        [f32(3e38, 3e38), f32(3e38, 1.0), f32(3e38), 1, 2, 1, 0, 0, 1],  # beyond float32: rounds to inf
    ],
    exact_on_int=True, kinds=SUM_KINDS))


def _linear_bwd(rng, d, kind):
    rows, n_in, n_out = d
    return [values(rng, rows * n_out, kind), values(rng, rows * n_in, kind), values(rng, n_out * n_in, kind),
            rows, n_in, n_out]


add(PrimitiveInfo(
    "linear_bwd", _linear_bwd, 3,
    edge_cases=[
        [_Z0, _Z0, np.arange(6, dtype=F32), 0, 3, 2],           # no rows: dx empty, dw and db zeros
        [_Z0, np.arange(6, dtype=F32), _Z0, 2, 3, 0],           # no outputs: dx zeros
        [f32(1, np.nan, 2, 3), f32(1, 2, 3, 4, 5, 6), f32(1, 2, 3, 4, 5, 6), 2, 3, 2],  # a NaN spreads
        # 100 rows: the CUDA column sum of db takes its one-launch tile path
        [np.linspace(-1, 1, 100 * 3, dtype=F32), np.linspace(-2, 2, 100 * 4, dtype=F32),
         np.linspace(0, 1, 12, dtype=F32), 100, 4, 3],
    ],
    kinds=SUM_KINDS))


def _mse_fwd(rng, d, kind):
    n = d[0]
    return [values(rng, n, kind), values(rng, n, kind), n, int(rng.integers(0, 2))]


def _mse_bwd(rng, d, kind):
    n = d[0]
    return [values(rng, n, kind), values(rng, n, kind), values(rng, 1, "normal"), n, int(rng.integers(0, 2))]


add(PrimitiveInfo(
    "mse_loss_fwd", _mse_fwd, 1,
    edge_cases=[
        [_Z0, _Z0, 0, 0],                                     # sum of nothing: 0
        [_Z0, _Z0, 0, 1],                                     # mean of nothing: NaN
        [f32(1.5), f32(-0.5), 1, 1],
        [np.full(1000, 0.1, F32), np.zeros(1000, F32), 1000, 0],  # float32 accumulation would drift
        [np.full(4099, 1e-3, F32), np.full(4099, 2e-3, F32), 4099, 1],
        [f32(1.0, np.nan, 2.0), f32(0.0, 0.0, 0.0), 3, 1],
        [f32(1.0, np.inf, 2.0), f32(0.0, 0.0, 0.0), 3, 0],
        [f32(1e-30, -1e-30, 1e-45), f32(0, 0, 0), 3, 0],       # squares far below float32's range
        [f32(3e38, -3e38), f32(-3e38, 3e38), 2, 1],           # differences beyond float32: fine in float64
        [f32(1e20, 1.0), f32(0.0, 0.0), 2, 0],                # a square beyond float32: inf after rounding
    ],
    max_dim=200, kinds=SUM_KINDS))
add(PrimitiveInfo(
    "mse_loss_bwd", _mse_bwd, 1,
    edge_cases=[
        [_Z0, _Z0, f32(1.0), 0, 1],
        [_Z0, _Z0, f32(1.0), 0, 0],
        [f32(1.5, -2.0, 0.0), f32(-0.5, -2.0, 1e-45), f32(3.0), 3, 1],
        [f32(1.0, 2.0, np.nan), f32(0.0, 0.0, 0.0), f32(1.0), 3, 0],
        [f32(1.0, 2.0), f32(0.0, 0.0), f32(np.nan), 2, 1],
        [np.arange(7, dtype=F32), np.zeros(7, F32), f32(1e-40), 7, 1],   # products in the subnormal range
        [np.arange(7, dtype=F32), np.ones(7, F32), f32(-2.0), 7, 0],
    ],
    max_dim=200, kinds=SUM_KINDS))
