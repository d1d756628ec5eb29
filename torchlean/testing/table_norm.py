"""Primitive-table entries of the normalization: layer_norm, batch_norm (training and inference) and their backward passes.

Every entry accumulates, so it draws SUM_KINDS (no float32 values near the overflow threshold in
random draws; explicit edge cases below bring huge, tiny, constant, NaN and empty groups). The
backward entries take mean and var from the float64 forward rounded to float32, as the tape
passes them.
"""

from __future__ import annotations

import numpy as np

from ..spec import norm as spec_norm
from .table_core import SUM_KINDS, PrimitiveInfo, add, values

F32 = np.float32
_EPS = [float(F32(e)) for e in (1e-5, 1e-6, 1e-3, 0.5)]
EPS6 = float(F32(1e-6))


def f32(*v) -> np.ndarray:
    return np.array(v, dtype=F32)


def _eps(rng) -> float:
    return _EPS[int(rng.integers(0, len(_EPS)))]


def _maybe(rng, n: int, kind: str):
    """A per-column / per-channel vector of the kind, or None (no affine) one time in four."""
    return values(rng, n, kind) if rng.random() < 0.75 else None


def _stats32(mean, var):
    return np.asarray(mean).astype(F32), np.asarray(var).astype(F32)


# -- layer norm -----------------------------------------------------------------------------------------
def _layer_norm(rng, d, kind):
    rows, cols = d
    return [values(rng, rows * cols, kind), _maybe(rng, cols, kind), _maybe(rng, cols, kind), rows, cols, _eps(rng)]


def _layer_norm_bwd(rng, d, kind):
    rows, cols = d
    x = values(rng, rows * cols, kind)
    eps = _eps(rng)
    _, mean, var = spec_norm.layer_norm(x.astype(np.float64), None, None, rows, cols, eps)
    mean, var = _stats32(mean, var)
    return [x, _maybe(rng, cols, kind), mean, var, values(rng, rows * cols, kind), rows, cols, eps]


def _ln_bwd_case(x, gamma, dy, rows, cols, eps=EPS6):
    _, mean, var = spec_norm.layer_norm(np.asarray(x, np.float64), None, None, rows, cols, eps)
    mean, var = _stats32(mean, var)
    return [np.asarray(x, F32).reshape(-1), gamma, mean, var, np.asarray(dy, F32).reshape(-1), rows, cols, eps]


_CONST = f32(2, 2, 2, 2, -1.5, -1.5, -1.5, -1.5, 0, 0, 0, 0)
_G4, _B4 = f32(1.5, -2, 0.5, 3), f32(0.25, -1, 2, 0)
_HUGE = f32(1e38, -1e38, 3e38, -2e38,   # finite float32 sums
            3e38, 3e38, -1e38, 1e38,    # the float32 row sum overflows
            3.4e38, -3.4e38, -3.4e38, 0,  # x - mean overflows in float32
            1e30, 1e30, -1e30, 5)       # squares overflow in float32
_TINY = f32(1e-30, 2e-30, -1e-30, 0, 1e-45, 2e-45, 0, 3e-45, 1e-38, -1e-38, 2e-38, 0)
_SPECIAL = f32(1, np.nan, 2, 0, np.inf, 1, 2, 3, -np.inf, np.inf, 0, 1, 1, 2, 3, 4)

add(PrimitiveInfo(
    "layer_norm", _layer_norm, 2, kinds=SUM_KINDS, max_dim=16,
    edge_cases=[
        [np.zeros(0, F32), None, None, 0, 4, EPS6],          # no rows
        [np.zeros(0, F32), _G4, _B4, 0, 4, EPS6],
        [np.zeros(0, F32), None, None, 3, 0, EPS6],          # empty rows: mean, var NaN
        [np.zeros(0, F32), np.zeros(0, F32), np.zeros(0, F32), 3, 0, EPS6],
        [_CONST, _G4, _B4, 3, 4, EPS6],                      # constant rows: var 0, y = beta
        [_CONST, None, None, 3, 4, 0.0],                     # ... and eps 0: 0/0 = NaN
        [_HUGE, _G4, _B4, 4, 4, EPS6],
        [_HUGE, None, None, 4, 4, 0.0],
        [_TINY, None, None, 3, 4, 0.0],                      # variance below float32's range
        [_TINY, _G4, _B4, 3, 4, EPS6],
        [_SPECIAL, _G4, None, 4, 4, EPS6],                   # NaN and inf rows
        [f32(3, -1, 7, 0.5, 2), f32(2), f32(-1), 5, 1, EPS6],  # one column: var 0, y = beta
        [f32(1e4, 1e4 + 1e-3, 1e4 + 2e-3, 1e4 - 1e-3), None, None, 1, 4, 0.0],  # |mean| >> std
        [np.arange(64, dtype=F32), None, f32(*range(32)), 2, 32, 0.5],
    ]))

add(PrimitiveInfo(
    "layer_norm_bwd", _layer_norm_bwd, 2, kinds=SUM_KINDS, max_dim=16,
    edge_cases=[
        _ln_bwd_case(np.zeros(0), _G4, np.zeros(0), 0, 4),   # no rows: dgamma = dbeta = 0
        _ln_bwd_case(np.zeros(0), None, np.zeros(0), 3, 0),  # empty rows
        _ln_bwd_case(_CONST, _G4, np.arange(12) - 5.0, 3, 4),  # var 0: r = 1/sqrt(eps)
        _ln_bwd_case(_CONST[:4], None, f32(1, 2, 3, 4), 1, 4, 0.0),  # var 0, eps 0: NaN
        _ln_bwd_case(_SPECIAL, _G4, np.ones(16), 4, 4),      # NaN and inf rows
        _ln_bwd_case(np.arange(12.0), _G4, f32(1, np.nan, 0, 0, np.inf, 0, 0, 0, 1, 1, 1, 1), 3, 4),
        _ln_bwd_case(f32(3, -1, 7, 0.5, 2), f32(2), f32(1, 2, 3, 4, 5), 5, 1),  # one column
        _ln_bwd_case(_TINY, None, np.ones(12), 3, 4),
    ]))


# -- batch norm -----------------------------------------------------------------------------------------
def _batch_norm(rng, d, kind):
    b, c, i = d
    return [values(rng, b * c * i, kind), _maybe(rng, c, kind), _maybe(rng, c, kind), b, c, i, _eps(rng)]


def _batch_norm_bwd(rng, d, kind):
    b, c, i = d
    x = values(rng, b * c * i, kind)
    eps = _eps(rng)
    _, mean, var = spec_norm.batch_norm(x.astype(np.float64), None, None, b, c, i, eps)
    mean, var = _stats32(mean, var)
    return [x, _maybe(rng, c, kind), mean, var, values(rng, b * c * i, kind), b, c, i, eps]


def _batch_norm_infer(rng, d, kind):
    b, c, i = d
    return [values(rng, b * c * i, kind), values(rng, c, kind), values(rng, c, kind, positive=True),
            _maybe(rng, c, kind), _maybe(rng, c, kind), b, c, i, _eps(rng)]


def _bn_bwd_case(x, gamma, dy, b, c, i, eps=EPS6):
    _, mean, var = spec_norm.batch_norm(np.asarray(x, np.float64).reshape(-1), None, None, b, c, i, eps)
    mean, var = _stats32(mean, var)
    return [np.asarray(x, F32).reshape(-1), gamma, mean, var, np.asarray(dy, F32).reshape(-1), b, c, i, eps]


_G3, _B3 = f32(2, -0.5, 1), f32(1, 0, -3)
# (batch 2, channels 3, inner 2): a constant channel, a NaN channel, an inf channel
_BN_SPECIAL = f32(4, 4, 1, np.nan, np.inf, 0,
                  4, 4, 2, 3, 1, 2)
_BN_HUGE = f32(3e38, 3e38, 1e30, -1e30, 1e-30, 2e-30,
               -1e38, 1e38, 1e30, 5, -1e-30, 0)

add(PrimitiveInfo(
    "batch_norm", _batch_norm, 3, kinds=SUM_KINDS, max_dim=6,
    edge_cases=[
        [np.zeros(0, F32), _G3, _B3, 0, 3, 4, EPS6],         # no batch: mean, var NaN
        [np.zeros(0, F32), None, None, 2, 3, 0, EPS6],       # no spatial elements
        [np.zeros(0, F32), np.zeros(0, F32), None, 2, 0, 3, EPS6],  # no channels
        [f32(1, -2, 3), _G3, _B3, 1, 3, 1, EPS6],            # one element per channel: y = beta
        [_BN_SPECIAL, _G3, _B3, 2, 3, 2, EPS6],
        [_BN_HUGE, None, None, 2, 3, 2, 0.0],
        [_BN_HUGE, _G3, _B3, 2, 3, 2, EPS6],
        [np.arange(2 * 3 * 5, dtype=F32), None, _B3, 2, 3, 5, 0.5],
        [np.arange(24, dtype=F32) % 5, _G3, _B3, 8, 3, 1, EPS6],  # BatchNorm1d layout (N, C)
    ]))

add(PrimitiveInfo(
    "batch_norm_bwd", _batch_norm_bwd, 3, kinds=SUM_KINDS, max_dim=6,
    edge_cases=[
        _bn_bwd_case(np.zeros(0), _G3, np.zeros(0), 0, 3, 4),   # dgamma = dbeta = 0
        _bn_bwd_case(np.zeros(0), None, np.zeros(0), 2, 3, 0),
        _bn_bwd_case(f32(1, -2, 3), _G3, f32(1, 2, 3), 1, 3, 1),  # one element per channel
        _bn_bwd_case(_BN_SPECIAL, _G3, np.arange(12.0), 2, 3, 2),
        _bn_bwd_case(np.arange(12.0), None, f32(1, np.nan, 0, 0, 0, 0, np.inf, 1, 2, 3, 4, 5), 2, 3, 2),
        _bn_bwd_case(np.arange(24.0) % 5, _G3, np.arange(24.0) - 12, 8, 3, 1),
    ]))

add(PrimitiveInfo(
    "batch_norm_infer", _batch_norm_infer, 3, kinds=SUM_KINDS, max_dim=6,
    edge_cases=[
        [np.zeros(0, F32), f32(0, 1, 2), f32(1, 1, 1), _G3, _B3, 0, 3, 4, EPS6],
        [np.zeros(0, F32), np.zeros(0, F32), np.zeros(0, F32), None, None, 2, 0, 3, EPS6],
        [f32(1, 2, 3, 4, 5, 6), f32(1, np.nan, 0), f32(0, 1, np.inf), _G3, _B3, 2, 3, 1, EPS6],
        [f32(1, 2, 3, 4, 5, 6), f32(1, 2, 3), f32(0, 0, 0), None, None, 1, 3, 2, 0.0],  # var 0, eps 0
        [f32(1, 2, 3, 4, 5, 6), np.zeros(3, F32), f32(4, 1, 0.25), _G3, None, 2, 3, 1, EPS6],  # the VJP's form
        [_BN_HUGE, f32(0, 1, -1), f32(1e30, 1, 1e-30), _G3, _B3, 2, 3, 2, EPS6],
    ]))


# -- running statistics ---------------------------------------------------------------------------------
_MOMENTA = [0.1, 0.01, 0.5, 1.0, 0.0]


def _running_stat_update(rng, d, kind):
    n = d[0]
    factor = 1.0 if rng.random() < 0.5 else n / max(n - 1, 1)  # the mean's and the variance's calls
    return [values(rng, n, kind), values(rng, n, kind), n, _MOMENTA[int(rng.integers(0, len(_MOMENTA)))], factor]


add(PrimitiveInfo(
    "running_stat_update", _running_stat_update, 1, kinds=SUM_KINDS, max_dim=64,
    edge_cases=[
        [np.zeros(0, F32), np.zeros(0, F32), 0, 0.1, 1.0],
        [f32(1, np.nan, np.inf, -2), f32(np.inf, 3, 1, np.nan), 4, 0.1, 4 / 3],
        [f32(1e-38, -1e-39, 3e38), f32(1e-40, 5e-39, 3e38), 3, 0.1, 1.0],   # subnormal products; no overflow
        [f32(0.3, -7.5), f32(2.25, 1e20), 2, 0.1, 64 / 63],
    ]))
