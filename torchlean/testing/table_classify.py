"""Primitive-table entries of the classification: cross_entropy_rows, cross_entropy_reduce, gelu, gelu_tanh and
their backward passes."""

from __future__ import annotations

import numpy as np

from .. import spec
from .table_core import PrimitiveInfo, add, values

F32 = np.float32
U32_MAX = 2**32 - 1
_LS = (0.0, float(F32(0.1)), 1.0)  # label smoothing values as float32 (the runtime rounds them)


def f32(*v) -> np.ndarray:
    return np.array(v, dtype=F32)


def _targets(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """Mostly valid class indices; some ignored (>= cols), now and then 2**32 - 1."""
    t = rng.integers(0, cols + 2, rows).astype(np.int64) if cols else np.full(rows, 0, np.int64)
    if rows and rng.random() < 0.3:
        t[rng.integers(0, rows)] = U32_MAX
    return t


def _ls(rng: np.random.Generator) -> float:
    return float(F32(rng.choice(_LS))) if rng.random() < 0.7 else float(F32(rng.random()))


def _ce(rng, d, kind):
    rows, cols = d
    return [values(rng, rows * cols, kind), rows, cols, _targets(rng, rows, cols), _ls(rng)]


def _ce_bwd_args(x, rows, cols, t, ls, dloss):
    lse = spec.cross_entropy_rows(x.astype(np.float64), rows, cols, t, ls)[1].astype(F32)
    return [x, lse, dloss, rows, cols, t, ls]


def _ce_bwd(rng, d, kind):
    rows, cols = d
    x = values(rng, rows * cols, kind)
    t = _targets(rng, rows, cols)
    return _ce_bwd_args(x, rows, cols, t, _ls(rng), values(rng, rows, "normal"))


_INF, _NAN = np.inf, np.nan
# rows: ordinary; -inf logits around a finite max; a +inf logit; all -inf; a NaN; huge logits
# (1e30: lse - x_t would cancel to nothing in float32); one very negative logit at the target
_CE_SPECIAL_X = f32(1.0, 2.0, 3.0, -1.0,
                    -_INF, 0.5, -_INF, 2.0,
                    0.0, _INF, 1.0, 2.0,
                    -_INF, -_INF, -_INF, -_INF,
                    1.0, _NAN, 2.0, 0.0,
                    1e30, 1e30, -1e30, 3e38,
                    -3e38, 3e38, 0.0, 1.0)
_CE_SPECIAL_T = np.array([2, 0, 1, 0, 0, 0, 0], np.int64)
_CE_SPECIAL_T2 = np.array([1, 1, 3, 5, 2, 1, 2], np.int64)  # 5: ignored row (all -inf)

_ce_edges = [
    [np.zeros(0, F32), 0, 4, np.zeros(0, np.int64), 0.0],
    [np.zeros(0, F32), 3, 0, np.array([0, 1, U32_MAX], np.int64), 0.5],  # no classes: all ignored
    [f32(3.0, -2.0, 7.5), 3, 1, np.array([0, 0, 1], np.int64), 0.0],        # one class
    [f32(3.0, -2.0, 7.5), 3, 1, np.array([0, 0, 1], np.int64), float(F32(0.1))],
    [np.arange(24, dtype=F32) / 4, 6, 4, np.array([0, 3, 4, U32_MAX, 1, 2], np.int64), 1.0],
]
for _ls_v in _LS:
    _ce_edges.append([_CE_SPECIAL_X.copy(), 7, 4, _CE_SPECIAL_T.copy(), _ls_v])
    _ce_edges.append([_CE_SPECIAL_X.copy(), 7, 4, _CE_SPECIAL_T2.copy(), _ls_v])
# long rows (the block-per-row CUDA kernels, float4 and scalar) and rows of 1024 and 1000 columns
# (register-held / float4 warp kernels)
_rng = np.random.default_rng(5)
_ce_edges.append([(_rng.standard_normal(2 * 1500) * 4).astype(F32), 2, 1500, np.array([7, 1499], np.int64), 0.25])
_ce_edges.append([(_rng.standard_normal(3 * 1024) * 4).astype(F32), 3, 1024, np.array([0, 1023, 1024], np.int64), 0.0])
_ce_edges.append([(_rng.standard_normal(2 * 1000) * 4).astype(F32), 2, 1000, np.array([999, 5], np.int64),
                  float(F32(0.1))])
_ce_edges.append([(_rng.standard_normal(2 * 1501) * 4).astype(F32), 2, 1501, np.array([1500, 3], np.int64), 1.0])
# rows * cols >= 2**18: the CPU kernels' parallel path (one thread below); its own generator, so
# that the cases after it keep their values
_big = np.random.default_rng(1 << 18)
_BIG_X = (_big.standard_normal(300 * 877) * 4).astype(F32)
_BIG_T = _big.integers(0, 880, 300).astype(np.int64)
_ce_edges.append([_BIG_X.copy(), 300, 877, _BIG_T.copy(), float(F32(0.1))])

# All kinds, huge finite logits included: the row sums are of exp(x - m) <= 1 and of m - x_j in
# double, so no partial sum overflows (unlike the float32 sums that SUM_KINDS protects).
add(PrimitiveInfo("cross_entropy_rows", _ce, 2, edge_cases=_ce_edges, max_dim=24))

_ce_bwd_edges = [
    [np.zeros(0, F32), np.zeros(0, F32), np.zeros(0, F32), 0, 4, np.zeros(0, np.int64), 0.0],
    [np.zeros(0, F32), np.zeros(3, F32), f32(1, 2, 3), 3, 0, np.array([0, 1, 2], np.int64), 0.5],
    _ce_bwd_args(f32(3.0, -2.0, 7.5), 3, 1, np.array([0, 0, 1], np.int64), 0.0, f32(1.0, -2.0, 3.0)),
]
for _ls_v in _LS:
    for _t in (_CE_SPECIAL_T, _CE_SPECIAL_T2):
        _ce_bwd_edges.append(_ce_bwd_args(_CE_SPECIAL_X.copy(), 7, 4, _t.copy(), _ls_v,
                                          f32(1.0, -0.5, 2.0, 1.0, 3.0, -1.0, 0.25)))
_ce_bwd_edges.append(_ce_bwd_args((_rng.standard_normal(2 * 1500) * 4).astype(F32), 2, 1500,
                                  np.array([7, 1500], np.int64), 0.25, f32(0.5, 1.0)))
_ce_bwd_edges.append(_ce_bwd_args((_rng.standard_normal(3 * 1024) * 4).astype(F32), 3, 1024,
                                  np.array([0, 1023, 1024], np.int64), float(F32(0.1)), f32(1.0, 2.0, 3.0)))
_ce_bwd_edges.append(_ce_bwd_args((_rng.standard_normal(2 * 999) * 4).astype(F32), 2, 999,
                                  np.array([998, 0], np.int64), 1.0, f32(-1.0, 1.0)))
_ce_bwd_edges.append(_ce_bwd_args((_rng.standard_normal(3 * 1501) * 4).astype(F32), 3, 1501,
                                  np.array([1500, 1501, 0], np.int64), float(F32(0.1)), f32(2.0, 1.0, -1.0)))
_ce_bwd_edges.append(_ce_bwd_args(_BIG_X.copy(), 300, 877, _BIG_T.copy(), float(F32(0.1)),
                                  _big.standard_normal(300).astype(F32)))
add(PrimitiveInfo("cross_entropy_rows_bwd", _ce_bwd, 2, edge_cases=_ce_bwd_edges, max_dim=24))

# -- cross entropy, reduced ------------------------------------------------------------------
def _scale(rng, rows: int) -> float:
    """1 ('sum'), float32(1 / rows) ('mean'), or an arbitrary float32 now and then."""
    u = rng.random()
    if u < 0.4:
        return 1.0
    if u < 0.8:
        return float(F32(1.0 / max(rows, 1)))
    return float(F32(rng.uniform(-2.0, 2.0)))


def _ce_red(rng, d, kind):
    rows, cols = d
    return [values(rng, rows * cols, kind), rows, cols, _targets(rng, rows, cols), _ls(rng), _scale(rng, rows)]


def _ce_red_bwd(rng, d, kind):
    rows, cols = d
    x = values(rng, rows * cols, kind)
    t = _targets(rng, rows, cols)
    return _ce_bwd_args(x, rows, cols, t, _ls(rng), values(rng, 1, "normal")) + [_scale(rng, rows)]


_NAN_SCALE = float("nan")  # 'mean' over no counted row
# The rows edge cases with 'sum', 'mean' and NaN scales; then rows past the sum's 256 lanes
_ce_red_edges = [e + [1.0] for e in _ce_edges] + [e + [float(F32(1 / 3))] for e in _ce_edges[:6]]
_ce_red_edges += [[np.zeros(0, F32), 0, 4, np.zeros(0, np.int64), 0.0, _NAN_SCALE],
                  [f32(1.0, 2.0), 1, 2, np.array([5], np.int64), 0.0, _NAN_SCALE],  # all ignored
                  [f32(1.0, 2.0, 3.0, 4.0), 2, 2, np.array([0, 1], np.int64), 0.0, -0.5]]
_ce_red_edges.append([(_rng.standard_normal(1000 * 7) * 3).astype(F32), 1000, 7,
                      _rng.integers(0, 8, 1000).astype(np.int64), float(F32(0.1)), float(F32(1 / 1000))])
add(PrimitiveInfo("cross_entropy_reduce", _ce_red, 2, edge_cases=_ce_red_edges, max_dim=24))

_ce_red_bwd_edges = [e[:2] + [e[2][:1] if e[2].size else f32(1.5)] + e[3:] + [sc]
                     for e in _ce_bwd_edges for sc in (1.0, float(F32(0.125)))]
_ce_red_bwd_edges += [
    _ce_bwd_args(f32(1.0, 2.0, 3.0, 4.0), 2, 2, np.array([0, 1], np.int64), 0.0, f32(_INF)) + [0.5],
    _ce_bwd_args(f32(1.0, 2.0, 3.0, 4.0), 2, 2, np.array([0, 1], np.int64), 0.0, f32(1.0)) + [_NAN_SCALE],
    _ce_bwd_args(f32(1.0, 2.0, 3.0, 4.0), 2, 2, np.array([0, 5], np.int64), 0.0, f32(-0.0)) + [1.0],
]
add(PrimitiveInfo("cross_entropy_reduce_bwd", _ce_red_bwd, 2, edge_cases=_ce_red_bwd_edges, max_dim=24))


# -- GELU --------------------------------------------------------------------------------------
# 0, -0, +-inf, NaN, large |x|, tiny and subnormal x, the tail where 1 + erf cancels and where
# the result becomes subnormal (x ~ -13.2) or 0, the minimum of gelu (x ~ -0.75, where the
# derivative crosses 0), the float32 extremes
_GELU_X = f32(0.0, -0.0, _INF, -_INF, _NAN, 1e-30, -1e-30, 1e-45, -1e-45, 1e-38, 0.5, -0.5, 1.0, -1.0,
              -0.7517915, -0.7522528, 3.0, -3.0, 5.0, -5.0, 8.0, -8.0, -10.0, -12.0, -13.0, -13.2, -13.5,
              -14.0, -20.0, -40.0, 10.0, 40.0, 1e5, -1e5, 7e12, -7e12, 1e20, -1e20, 3.4e38, -3.4e38)


def _gelu_long(n):
    """n values over the interesting range with the specials spread through (the CPU kernels run
    on one thread below 2**18 elements, then in equal chunks on Numba's threads)."""
    x = np.linspace(-16, 6, n, dtype=F32)
    x[:: max(n // _GELU_X.size, 1)][:_GELU_X.size] = _GELU_X[: len(x[:: max(n // _GELU_X.size, 1)])]
    return x


_GELU_EDGES = [[np.zeros(0, F32)], [f32(1.5)], [_GELU_X.copy()], [np.linspace(-16, 6, 301, dtype=F32)],
               [_gelu_long(40001)], [_gelu_long((1 << 18) + 3)]]
for _n in ("gelu", "gelu_tanh"):
    add(PrimitiveInfo(_n, lambda rng, d, kind: [values(rng, d[0], kind)], 1, edge_cases=_GELU_EDGES, max_dim=64))
_GELU_BWD_EDGES = [[np.zeros(0, F32), np.zeros(0, F32)], [f32(1.5), f32(-2.0)],
                   [_GELU_X.copy(), np.resize(f32(1.0, -2.0, 0.5), _GELU_X.size)],
                   [np.linspace(-16, 6, 301, dtype=F32), np.ones(301, F32)],
                   [f32(1.0, _INF, -_INF, -20.0), f32(_INF, 0.0, 1.0, _NAN)],
                   [_gelu_long(40001), np.resize(f32(1.0, -2.0, 0.5, 3.0), 40001)],
                   [_gelu_long((1 << 18) + 3), np.resize(f32(1.0, -2.0, 0.5, 3.0), (1 << 18) + 3)]]
for _n in ("gelu_bwd", "gelu_tanh_bwd"):
    add(PrimitiveInfo(_n, lambda rng, d, kind: [values(rng, d[0], kind), values(rng, d[0], "normal")], 1,
                       edge_cases=_GELU_BWD_EDGES, max_dim=64))
