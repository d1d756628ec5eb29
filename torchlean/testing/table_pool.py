"""Primitive-table entries of the pooling: max_pool, avg_pool, smooth_max_pool and their backward passes.

Random geometries: spatial rank 1-3 (now and then 4), sizes 0..7, kernel 1..3, stride 1..3,
padding 0..kernel (beyond PyTorch's kernel/2, so some windows lie entirely in padding), 0..3
planes. Edge cases: 1x1 windows, ties (-0/+0 and repeated maxima), NaN and +-inf in windows,
all -inf windows, all-padding windows, stride > kernel, rank 4 and rank 8, no planes.
"""

from __future__ import annotations

import numpy as np

from .. import spec
from .table_core import F32, KINDS, SUM_KINDS, PrimitiveInfo, add, values

_BETAS = (0.5, 1.0, 4.0, 30.0, -2.0, -0.25)


def _out(spatial, kernel, stride, padding):
    return tuple((n + 2 * p - k) // s + 1 for n, k, s, p in zip(spatial, kernel, stride, padding))


def geometry(rng: np.random.Generator, d: tuple) -> tuple[int, tuple, tuple, tuple, tuple]:
    """(planes, spatial, kernel, stride, padding), valid, small, drawn from the size draws d."""
    rank = 4 if d[0] % 7 == 6 else 1 + d[0] % 3
    cap = 2 + d[2] % 6 if rank <= 2 else 2 + d[2] % 3
    planes = d[1] % 4
    spatial, kernel, stride, padding = [], [], [], []
    for _ in range(rank):
        n = int(rng.integers(0 if rng.random() < 0.05 else 1, cap + 1))
        k = int(rng.integers(1, 4))
        s = int(rng.integers(1, 4))
        p = int(rng.integers(0, k // 2 + 1)) if rng.random() < 0.7 else int(rng.integers(0, k + 1))
        if n + 2 * p < k:
            p = (k - n + 1) // 2
        spatial.append(n)
        kernel.append(k)
        stride.append(s)
        padding.append(p)
    return planes, tuple(spatial), tuple(kernel), tuple(stride), tuple(padding)


def _sizes(g):
    planes, sp, kn, st, pd = g
    return planes * int(np.prod(sp)), planes * int(np.prod(_out(sp, kn, st, pd)))


def _forward(rng, d, kind):
    g = geometry(rng, d)
    n_in, _ = _sizes(g)
    return [values(rng, n_in, kind), *g]


def _max_bwd(rng, d, kind):
    g = geometry(rng, d)
    n_in, n_out = _sizes(g)
    # integer x makes ties (the first maximum wins); dy of the kind
    x = values(rng, n_in, "int" if rng.random() < 0.5 else "normal")
    return [x, values(rng, n_out, kind), *g]


def _avg_bwd(rng, d, kind):
    g = geometry(rng, d)
    return [values(rng, _sizes(g)[1], kind), *g]


def _beta(rng):
    return float(F32(_BETAS[int(rng.integers(0, len(_BETAS)))]))


def _smooth(rng, d, kind):
    return _forward(rng, d, kind) + [_beta(rng)]


def smooth_y(x, g, beta):
    """The forward output y (float32) that smooth_max_pool_bwd takes, from the spec."""
    return spec.smooth_max_pool(x.astype(np.float64), *g, beta).astype(F32)


def _smooth_bwd(rng, d, kind):
    g = geometry(rng, d)
    n_in, n_out = _sizes(g)
    beta = _beta(rng)
    x = values(rng, n_in, kind)
    with np.errstate(all="ignore"):
        y = smooth_y(x, g, beta)
    return [x, y, values(rng, n_out, "normal"), *g, beta]


# -- edge cases ---------------------------------------------------------------------------------
def f32(*v) -> np.ndarray:
    return np.array(v, dtype=F32)


NAN, INF = np.nan, np.inf
_EDGE_X = [
    # (x, planes, spatial, kernel, stride, padding)
    # 1x1 windows: the identity (stride 1) and a subsample (stride 2)
    (np.arange(12, dtype=F32) - 5, 2, (2, 3), (1, 1), (1, 1), (0, 0)),
    (np.arange(12, dtype=F32) - 5, 1, (3, 4), (1, 1), (2, 2), (0, 0)),
    # ties: -0 before +0 and +0 before -0, repeated maxima
    (f32(-0.0, 0.0, 0.0, -0.0, 2, 2, 1, 2), 1, (8,), (2,), (1,), (0,)),
    # NaN and +-inf in windows, an all -inf window, padding = kernel // 2
    (f32(1, NAN, 3, -INF, -INF, -INF, -INF, 5, NAN, 2, INF, 0, -INF, -INF, -INF, -INF), 1, (4, 4), (3, 3), (2, 2), (1, 1)),
    (f32(-INF, -INF, -INF, -INF, -INF, -INF), 1, (6,), (3,), (3,), (0,)),
    # windows entirely in padding (padding beyond kernel // 2, allowed at the primitive level)
    (f32(3, -1), 2, (1,), (1,), (1,), (2,)),
    (f32(4, -2, 7, 1, 0, 5), 1, (2, 3), (2, 2), (3, 1), (2, 1)),
    # stride > kernel: gaps between windows; odd sizes
    (np.arange(14, dtype=F32) * 0.5 - 3, 2, (7,), (2,), (3,), (1,)),
    # rank 3 and rank 4, odd sizes, mixed stride and padding
    (np.linspace(-3, 3, 2 * 3 * 5 * 4).astype(F32), 2, (3, 5, 4), (2, 3, 2), (1, 2, 2), (1, 1, 0)),
    (np.linspace(-2, 5, 2 * 3 * 2 * 3).astype(F32), 1, (2, 3, 2, 3), (2, 2, 1, 2), (1, 2, 1, 1), (1, 0, 0, 1)),
    # rank 8
    (np.linspace(-1, 1, 2 ** 8).astype(F32)[::-1].copy(), 1, (2,) * 8, (2, 1, 2, 1, 1, 2, 1, 2), (1,) * 8, (0, 1, 0, 0, 1, 0, 0, 0)),
    # no planes
    (np.zeros(0, F32), 0, (3, 3), (2, 2), (1, 1), (1, 1)),
    # 2-D without padding (the CPU's 2-D path): NaN, -0/+0 ties, -inf windows, overlapping windows,
    # stride > kernel (the large case for its parallel loops is _BIG_2D, max pool only)
    (f32(1, NAN, 3, -INF, -0.0, 0.0, -INF, 5, NAN, 2, INF, 0, -INF, -INF, -INF, -INF), 1, (4, 4), (2, 2), (2, 2), (0, 0)),
    (np.where(np.arange(3 * 7 * 9) % 5 == 0, F32(2), np.arange(3 * 7 * 9, dtype=F32) % 3 - F32(0.0)).astype(F32),
     3, (7, 9), (3, 2), (1, 2), (0, 0)),
    (np.linspace(-1, 1, 2 * 9 * 8).astype(F32), 2, (9, 8), (2, 2), (3, 3), (0, 0)),
]


def _dy(case, fill=None):
    x, planes, sp, kn, st, pd = case
    n_out = planes * int(np.prod(_out(sp, kn, st, pd)))
    if fill is not None:
        return np.full(n_out, fill, F32)
    return (np.arange(n_out, dtype=F32) % 7 - 3) * F32(0.75)


def _copy(a):
    return a.copy() if isinstance(a, np.ndarray) else a


_EDGE_FWD = [[_copy(x), *g] for x, *g in _EDGE_X]
_EDGE_MAX_BWD = [[_copy(x), _dy((x, *g)), *g] for x, *g in _EDGE_X] + [
    # every window picks the same winner: dy sums there (1 2 3 2 1 windows in a row of 5)
    [f32(0, 0, 9, 0, 0), f32(1, 2, 3, 4, 5), 1, (5,), (5,), (1,), (2,)],
    # many overlapping windows on one position with a rounding sum
    [f32(*([0] * 12 + [9] + [0] * 12)), np.full(25, 0.1, F32), 1, (5, 5), (5, 5), (1, 1), (2, 2)],
]
_EDGE_AVG_BWD = [[_dy((x, *g)), *g] for x, *g in _EDGE_X] + [
    [np.full(25, 0.1, F32), 1, (5, 5), (5, 5), (1, 1), (2, 2)],
]
_SMOOTH_X = [c for c in _EDGE_X]


def _smooth_edges(beta):
    return [[_copy(x), *g, beta] for x, *g in _SMOOTH_X]


def _smooth_bwd_edges(beta):
    cases = []
    for x, *g in _SMOOTH_X:
        with np.errstate(all="ignore"):
            y = smooth_y(x, tuple(g), beta)
        cases.append([_copy(x), y, _dy((x, *g)), *g, beta])
    return cases


# >= 2**20 window visits: the CPU max pool's parallel loops (one thread below); max pool only (the
# float64 specs of the other pools take seconds at this size)
_BIG_2D = (np.random.default_rng(3).integers(-4, 5, 4100 * 16 * 16).astype(F32), 4100, (16, 16), (2, 2), (2, 2),
           (0, 0))
add(PrimitiveInfo("max_pool", _forward, 3, edge_cases=_EDGE_FWD + [[_copy(_BIG_2D[0]), *_BIG_2D[1:]]], exact_on_int=True, max_dim=20, kinds=KINDS))
add(PrimitiveInfo("max_pool_bwd", _max_bwd, 3,
                   edge_cases=_EDGE_MAX_BWD + [[_copy(_BIG_2D[0]), _dy(_BIG_2D), *_BIG_2D[1:]]], exact_on_int=True, max_dim=20,
                   kinds=SUM_KINDS))
add(PrimitiveInfo("avg_pool", _forward, 3, edge_cases=_EDGE_FWD, max_dim=20, kinds=SUM_KINDS))
add(PrimitiveInfo("avg_pool_bwd", _avg_bwd, 3, edge_cases=_EDGE_AVG_BWD, max_dim=20, kinds=SUM_KINDS))
add(PrimitiveInfo("smooth_max_pool", _smooth, 3, edge_cases=_smooth_edges(2.0) + _smooth_edges(-0.5)
                   + [[f32(1e30, -1e30, 3.0, 7.0), 1, (4,), (2,), (1,), (1,), 1.0]], max_dim=20, kinds=SUM_KINDS))
add(PrimitiveInfo("smooth_max_pool_bwd", _smooth_bwd, 3, edge_cases=_smooth_bwd_edges(2.0) + _smooth_bwd_edges(-0.5),
                   max_dim=20, kinds=SUM_KINDS))
