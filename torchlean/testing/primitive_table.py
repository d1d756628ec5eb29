"""One entry per primitive (PyTorch OpInfo style): how to draw its inputs and its edge cases.

An argument list mixes float32 arrays (passed as Buffers to the runtime and as float64 arrays to
the spec), int64 arrays (host indices, passed unchanged) and Python ints, floats and tuples (dims
and scalars, passed unchanged; floats are already float32 values). ``run_case`` runs one argument
list through a device and the spec and judges it with the primitive's contract.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import numpy as np

from .. import contract, spec
from ..runtime import primitives as prim
from ..runtime.buffer import Buffer
from .table_core import (ACCUMULATING, F32, IN_PLACE, KINDS, SPECIALS, SUM_KINDS, TABLE, PrimitiveInfo, add,  # noqa: F401
                         scalar, values)

# The families register their entries when imported; the check lists the core's entries first.
from . import (table_attention, table_classify, table_conv, table_fast, table_norm, table_optim,  # noqa: E402
               table_pool, table_rnn, table_scan, table_spectral)
from . import table_fft  # noqa: E402,F401  (the fft family)
from . import table_spectral_nd  # noqa: E402,F401  (2-D/3-D spectral convolutions)

_FAMILY_ENTRIES = dict(TABLE)
TABLE.clear()

# -- elementwise -------------------------------------------------------------------------
_POSITIVE = {"sqrt", "log"}
_UNARY = ["abs", "sqrt", "exp", "log", "inv", "relu", "copy", "sigmoid", "tanh", "softplus", "safe_log",
          "sin", "cos", "erf", "log1p", "expm1", "floor", "ceil", "round", "trunc", "sign"]
_UNARY_BWD = ["abs_bwd", "sqrt_bwd", "relu_bwd", "softplus_bwd", "safe_log_bwd"]
_BINARY = ["max", "min", "div", "add", "sub", "mul"]

_EDGE_1 = [[np.zeros(0, F32)], [np.array([1.5], F32)], [SPECIALS.copy()]]
for _n in _UNARY:
    _pos = _n in _POSITIVE
    add(PrimitiveInfo(
        _n, lambda rng, d, kind, pos=_pos: [values(rng, d[0], kind, pos)], 1,
        edge_cases=_EDGE_1 + [[np.array([-0.0, 0.0, -2.0, 1e-30, 88.0, 89.0, -104.0, -110.0], F32)]],
        max_dim=64))
for _n in _UNARY_BWD:
    add(PrimitiveInfo(
        _n, lambda rng, d, kind: [values(rng, d[0], kind), values(rng, d[0], "normal")], 1,
        edge_cases=[[np.zeros(0, F32), np.zeros(0, F32)],
                    [np.array([0.0, -0.0, 1.0, -1.0, np.nan, np.inf, -np.inf], F32), np.ones(7, F32)]],
        max_dim=64))
# backward kernels that take the forward *output* y: draw y from the forward's range
add(PrimitiveInfo("sigmoid_bwd", lambda rng, d, kind: [rng.random(d[0]).astype(F32), values(rng, d[0], kind)], 1,
                   edge_cases=[[np.array([0.0, 0.5, 1.0], F32), np.array([1.0, -2.0, 3.0], F32)]], max_dim=64))
add(PrimitiveInfo("tanh_bwd", lambda rng, d, kind: [rng.uniform(-1, 1, d[0]).astype(F32), values(rng, d[0], kind)], 1,
                   edge_cases=[[np.array([-1.0, 0.0, 0.999, 1.0], F32), np.array([1.0, -2.0, 3.0, 4.0], F32)]],
                   max_dim=64))
for _n in _BINARY:
    add(PrimitiveInfo(
        _n, lambda rng, d, kind: [values(rng, d[0], kind), values(rng, d[0], kind)], 1,
        edge_cases=[[np.zeros(0, F32), np.zeros(0, F32)],
                    [SPECIALS.copy(), SPECIALS[::-1].copy()],
                    [np.array([1.0, 2.0, np.nan, 3.0], F32), np.array([1.0, np.nan, 5.0, -3.0], F32)]],
        max_dim=64))
# -- inverse trigonometric and hyperbolic functions -----------------------------------------
# "normal" draws land mostly inside the domain ([-1, 1]; >= 1 for acosh) and a few outside it (NaN);
# the other kinds are the shared ones. Edge cases: the domain's ends, just inside and outside them,
# signed zeros, subnormals, infinities and NaN.
_DOMAIN = {"asin": (-1.2, 1.2), "acos": (-1.2, 1.2), "atanh": (-1.2, 1.2), "acosh": (0.8, 30.0)}


def _inv_trig_args(rng, d, kind, lo_hi=None):
    if kind == "normal" and lo_hi is not None:
        return [rng.uniform(*lo_hi, d[0]).astype(F32)]
    return [values(rng, d[0], kind)]


_ONE_MINUS, _ONE_PLUS = float(np.nextafter(F32(1), F32(0))), float(np.nextafter(F32(1), F32(2)))
_INV_TRIG_EDGES = [[np.zeros(0, F32)], [SPECIALS.copy()],
                   [np.array([-0.0, 0.0, 1.0, -1.0, _ONE_MINUS, -_ONE_MINUS, _ONE_PLUS, -_ONE_PLUS, 1e-30, -1e-45,
                              0.5, -0.5, 1e20, -1e20, 3.4e38, 1.0 + 2.0**-10], F32)]]
for _n in ("atan", "asin", "acos", "asinh", "acosh", "atanh"):
    add(PrimitiveInfo(_n, lambda rng, d, kind, r=_DOMAIN.get(_n): _inv_trig_args(rng, d, kind, r), 1,
                      edge_cases=_INV_TRIG_EDGES, max_dim=64))
_ATAN2_EDGE = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-45, 3.4e38], F32)
add(PrimitiveInfo(
    "atan2", lambda rng, d, kind: [values(rng, d[0], kind), values(rng, d[0], kind)], 1,
    edge_cases=[[np.zeros(0, F32), np.zeros(0, F32)],
                # every pair of the specials: the quadrants, signed zeros, infinities, NaN
                [np.repeat(_ATAN2_EDGE, _ATAN2_EDGE.size), np.tile(_ATAN2_EDGE, _ATAN2_EDGE.size)],
                [SPECIALS.copy(), SPECIALS[::-1].copy()]],
    max_dim=64))
for _n in ("max_bwd", "min_bwd"):
    add(PrimitiveInfo(
        _n, lambda rng, d, kind: [values(rng, d[0], "int"), values(rng, d[0], "int"), values(rng, d[0], kind)], 1,
        edge_cases=[[np.array([1.0, 2.0, 2.0, np.nan, 1.0, np.nan], F32),
                     np.array([1.0, 1.0, 3.0, 1.0, np.nan, np.nan], F32), np.full(6, 3.0, F32)]],
        max_dim=64))
add(PrimitiveInfo("scale", lambda rng, d, kind: [values(rng, d[0], kind), scalar(rng, kind)], 1,
                   edge_cases=[[SPECIALS.copy(), 0.0], [SPECIALS.copy(), -3.0]], max_dim=64))
add(PrimitiveInfo("pow_scalar", lambda rng, d, kind: [values(rng, d[0], kind), scalar(rng, kind)], 1,
                   edge_cases=[[SPECIALS.copy(), 2.0], [SPECIALS.copy(), 0.5], [SPECIALS.copy(), -1.0],
                               [SPECIALS.copy(), 0.0], [SPECIALS.copy(), 3.0], [np.zeros(0, F32), 1.0],
                               [np.array([0.5, 1.5, 2.5, -0.5, -2.5], F32), -2.5]], max_dim=64))
add(PrimitiveInfo("add_scalar", lambda rng, d, kind: [values(rng, d[0], kind), scalar(rng, kind)], 1,
                   edge_cases=[[SPECIALS.copy(), 1.0], [np.zeros(0, F32), 1.0]], max_dim=64))
add(PrimitiveInfo("axpy", lambda rng, d, kind: [values(rng, d[0], kind), values(rng, d[0], kind), scalar(rng, kind)], 1,
                   edge_cases=[[SPECIALS.copy(), SPECIALS[::-1].copy(), 0.5]], max_dim=64))


def _clamp_args(rng, d, kind, bwd=False):
    lo, hi = sorted([scalar(rng, "normal"), scalar(rng, "normal")])
    x = values(rng, d[0], kind)
    if d[0]:
        x[rng.integers(0, d[0])] = lo  # make the boundaries appear: clamp' is 0 there
    return [x, values(rng, d[0], "normal"), lo, hi] if bwd else [x, lo, hi]


add(PrimitiveInfo("clamp", _clamp_args, 1, edge_cases=[[SPECIALS.copy(), -1.0, 1.0], [np.array([5.0], F32), 2.0, 1.0]],
                   max_dim=64))
# leaky_relu's slope: PyTorch's default, then random; a 0 in x checks the side taken at the kink
def _leaky_args(rng, d, kind, bwd=False):
    x = values(rng, d[0], kind)
    if d[0]:
        x[rng.integers(0, d[0])] = 0.0
    slope = 0.01 if rng.random() < 0.5 else scalar(rng, "normal")
    return [x, values(rng, d[0], "normal"), slope] if bwd else [x, slope]


add(PrimitiveInfo("leaky_relu", _leaky_args, 1, edge_cases=[[SPECIALS.copy(), 0.01], [SPECIALS.copy(), -2.0]],
                   max_dim=64))
add(PrimitiveInfo("leaky_relu_bwd", lambda rng, d, kind: _leaky_args(rng, d, kind, True), 1,
                   edge_cases=[[SPECIALS.copy(), SPECIALS[::-1].copy(), 0.01],
                               [np.array([-1.0, 0.0, -0.0, 1.0, np.nan], F32), np.ones(5, F32), 0.2]], max_dim=64))
add(PrimitiveInfo("clamp_bwd", lambda rng, d, kind: _clamp_args(rng, d, kind, True), 1,
                   edge_cases=[[np.array([-1.0, 0.0, 1.0, np.nan], F32), np.ones(4, F32), -1.0, 1.0]], max_dim=64))

# -- reductions --------------------------------------------------------------------------
add(PrimitiveInfo("reduce_sum", lambda rng, d, kind: [values(rng, d[0], kind)], 1,
                   edge_cases=[[np.zeros(0, F32)], [np.array([np.nan, 1.0], F32)], [np.array([np.inf, 1.0], F32)],
                               [np.full(1000, 0.1, F32)]],
                   exact_on_int=True, max_dim=200))
add(PrimitiveInfo("reduce_mean", lambda rng, d, kind: [values(rng, d[0], kind)], 1,
                   edge_cases=[[np.zeros(0, F32)], [np.array([3.0], F32)], [np.full(1000, 0.1, F32)]], max_dim=200))
_EDGE_RNG = np.random.default_rng(20261121)
# Both sides of the CUDA column paths (reduce.py): fewer than 64 rows (one pass), 64..8192 rows (one
# tl_reduce_cols_tile_* launch; 70 columns end in a partial tile), more than 8192 (partials, then a finish).
_COLUMN_SHAPES = [(40, 33), (100, 5), (200, 70), (9000, 3)]
for _n in ("reduce_sum_axis0", "reduce_sum_axis1", "reduce_max_axis0", "reduce_max_axis1"):
    add(PrimitiveInfo(
        _n, lambda rng, d, kind: [values(rng, d[0] * d[1], kind), d[0], d[1]], 2,
        edge_cases=[[np.zeros(0, F32), 0, 3], [np.zeros(0, F32), 3, 0],
                    [np.array([np.nan, 1.0, np.nan, np.nan], F32), 2, 2],
                    [np.array([2.0, 2.0, -1.0, 2.0], F32), 2, 2]]
                   + [[_EDGE_RNG.standard_normal(r * c).astype(F32), r, c] for r, c in _COLUMN_SHAPES],
        exact_on_int=_n.startswith("reduce_sum")))


def _nd_dims(rng, d, min_rank=0):
    rank = min_rank + d[0] % (5 - min_rank)
    return tuple(int(v) for v in rng.integers(0 if d[1] % 4 == 0 else 1, 5, rank))


def _reduce_sum_axis(rng, d, kind):
    dims = _nd_dims(rng, d, min_rank=1)
    return [values(rng, int(np.prod(dims)), kind), dims, int(rng.integers(0, len(dims)))]


add(PrimitiveInfo("reduce_sum_axis", _reduce_sum_axis, 2,
                   edge_cases=[[np.zeros(0, F32), (2, 0, 3), 1], [np.arange(24, dtype=F32), (2, 3, 4), 2]],
                   exact_on_int=True))

# -- layout ------------------------------------------------------------------------------
add(PrimitiveInfo("concat1d", lambda rng, d, kind: [values(rng, d[0], kind), values(rng, d[1], kind), d[0], d[1]], 2,
                   edge_cases=[[np.zeros(0, F32), np.zeros(0, F32), 0, 0]], max_dim=20))


def _slice1d(rng, d, kind):
    n = d[0]
    start = int(rng.integers(0, n + 1))
    return [values(rng, n, kind), n, start, int(rng.integers(0, n - start + 1))]


add(PrimitiveInfo("slice1d", _slice1d, 1, edge_cases=[[np.arange(5, dtype=F32), 5, 5, 0]], max_dim=20))


def _narrow_block(rng, d, kind, bwd=False):
    """(outer, size, inner) drawn from d; a start and length inside size. Backward draws dy of the
    narrowed shape."""
    outer, size, inner = d
    start = int(rng.integers(0, size + 1))
    length = int(rng.integers(0, size - start + 1))
    return [values(rng, outer * (length if bwd else size) * inner, kind), outer, size, start, length, inner]


_NARROW_EDGES = [  # (outer, size, start, length, inner)
    (3, 4, 1, 0, 2),      # length 0
    (0, 4, 1, 2, 3),      # outer 0
    (2, 5, 0, 5, 3),      # full width
    (2, 4, 4, 0, 1),      # start at the end
    (4, 3, 1, 1, 4),      # float4-sized rows (w, s, off multiples of 4)
    (2, 8, 3, 4, 1),      # inner 1, unaligned start
    (1, 13, 5, 8, 1),     # one row
    (2, 2, 0, 1, 0),      # inner 0
    (66000, 3, 1, 1, 4),  # more rows than CUDA's grid y (65535), float4 rows
    (65537, 3, 2, 1, 1),  # more rows than grid y, one float per row
]
add(PrimitiveInfo("narrow_block", _narrow_block, 3, max_dim=7, exact_on_int=True, edge_cases=[
    [np.resize(SPECIALS, o * n * i), o, n, s, ln, i] for o, n, s, ln, i in _NARROW_EDGES]))
add(PrimitiveInfo("narrow_block_bwd", lambda rng, d, kind: _narrow_block(rng, d, kind, True), 3, max_dim=7,
                   exact_on_int=True, edge_cases=[
    [np.resize(SPECIALS, o * ln * i), o, n, s, ln, i] for o, n, s, ln, i in _NARROW_EDGES]))



def _concat_block(rng, d, kind):
    """(outer, size_a + size_b, inner) drawn from d, split at a random point."""
    outer, size, inner = d
    size_a = int(rng.integers(0, size + 1))
    size_b = size - size_a
    return [values(rng, outer * size_a * inner, kind), values(rng, outer * size_b * inner, kind), outer, size_a,
            size_b, inner]


_CONCAT_EDGES = [  # (outer, size_a, size_b, inner)
    (3, 0, 4, 2),         # a empty
    (3, 4, 0, 2),         # b empty
    (0, 2, 3, 3),         # outer 0
    (2, 1, 1, 0),         # inner 0
    (4, 1, 3, 4),         # float4-sized rows
    (2, 3, 5, 1),         # odd widths
    (1, 7, 6, 1),         # one row
    (66000, 1, 1, 4),     # more rows than CUDA's grid y (65535), float4 rows
    (65537, 2, 1, 1),     # more rows than grid y, one float per row
]
add(PrimitiveInfo("concat_block", _concat_block, 3, max_dim=7, exact_on_int=True, edge_cases=[
    [np.resize(SPECIALS, o * na * i), np.resize(SPECIALS[::-1], o * nb * i), o, na, nb, i]
    for o, na, nb, i in _CONCAT_EDGES]))

add(PrimitiveInfo("broadcast_vec_to_rows", lambda rng, d, kind: [values(rng, d[1], kind), d[0], d[1]], 2))
add(PrimitiveInfo("broadcast_vec_to_cols", lambda rng, d, kind: [values(rng, d[0], kind), d[0], d[1]], 2))
add(PrimitiveInfo("transpose2d", lambda rng, d, kind: [values(rng, d[0] * d[1], kind), d[0], d[1]], 2))


def broadcast_dims(rng: np.random.Generator, d: tuple) -> tuple[tuple, tuple, tuple]:
    """A random valid (in_dims, out_dims, axis_map): some output axes inserted, some size-1 input axes
    stretched, sometimes a permuted mapping or an unmapped size-1 input axis."""
    out_rank = d[0] % 5
    out_dims = tuple(int(v) for v in rng.integers(1 if d[1] % 3 else 0, 4, out_rank))
    mapped = sorted(rng.choice(out_rank, int(rng.integers(0, out_rank + 1)), replace=False).tolist()) if out_rank else []
    in_axes = list(range(len(mapped)))
    if len(in_axes) > 1 and rng.random() < 0.3:
        rng.shuffle(in_axes)
    in_dims = [0] * len(mapped)
    axis_map = [0] * out_rank
    for j, a in zip(mapped, in_axes):
        axis_map[j] = a + 1
        in_dims[a] = 1 if rng.random() < 0.3 else out_dims[j]
    if rng.random() < 0.2:  # an unmapped size-1 input axis
        in_dims.append(1)
    return tuple(in_dims), out_dims, tuple(axis_map)


def _broadcast_to(rng, d, kind):
    ind, outd, amap = broadcast_dims(rng, d)
    return [values(rng, int(np.prod(ind)), kind), ind, outd, amap]


def _reduce_from_broadcast(rng, d, kind):
    ind, outd, amap = broadcast_dims(rng, d)
    return [values(rng, int(np.prod(outd)), kind), ind, outd, amap]


add(PrimitiveInfo("broadcast_to", _broadcast_to, 2,
                   edge_cases=[[np.array([7.0], F32), (), (2, 3), (0, 0)],
                               [np.arange(6, dtype=F32), (2, 3), (3, 2), (2, 1)]], max_dim=30))
add(PrimitiveInfo("reduce_from_broadcast", _reduce_from_broadcast, 2,
                   edge_cases=[[np.arange(6, dtype=F32), (), (2, 3), (0, 0)],
                               [np.arange(24, dtype=F32), (3, 1), (2, 3, 4), (0, 1, 2)],
                               # per-channel sums (A, B, C) -> B: one CUDA launch when C >= 32 and A*C <= 2**18
                               # (float4 rows when C % 4 == 0), passes otherwise
                               [_EDGE_RNG.standard_normal(5 * 3 * 37).astype(F32), (3,), (5, 3, 37), (0, 1, 0)],
                               [_EDGE_RNG.standard_normal(3 * 2 * 64).astype(F32), (2,), (3, 2, 64), (0, 1, 0)],
                               [_EDGE_RNG.standard_normal(600 * 2 * 500).astype(F32), (2,), (600, 2, 500), (0, 1, 0)]],
                   exact_on_int=True, max_dim=30))


def _swap(rng, d, kind):
    dims = _nd_dims(rng, d)
    return [values(rng, int(np.prod(dims)), kind), dims, int(rng.integers(0, len(dims) + 2))]


add(PrimitiveInfo("swap_adjacent_at_depth", _swap, 2,
                   edge_cases=[[np.arange(24, dtype=F32), (2, 3, 4), 1], [np.arange(6, dtype=F32), (2, 3), 5]],
                   max_dim=30))


def _permute(rng, d, kind):
    dims = _nd_dims(rng, d)
    return [values(rng, int(np.prod(dims)), kind), dims, tuple(int(p) for p in rng.permutation(len(dims)))]


add(PrimitiveInfo("permute", _permute, 2,
                   edge_cases=[[np.arange(120, dtype=F32), (2, 3, 1, 4, 5), (2, 0, 3, 1, 4)],
                               [np.arange(6, dtype=F32), (2, 3), (0, 1)], [np.zeros(0, F32), (2, 0, 3), (2, 1, 0)],
                               [np.arange(5, dtype=F32), (5,), (0,)], [np.ones(1, F32), (), ()]],
                   max_dim=30))


def _bmm(rng, d, kind):
    batch, m, n, p = d
    return [values(rng, batch * m * n, kind), values(rng, batch * n * p, kind), batch, m, n, p]


add(PrimitiveInfo("bmm", _bmm, 4,
                   edge_cases=[[np.zeros(0, F32), np.zeros(0, F32), 2, 3, 0, 4],
                               [np.ones(64 * 64, F32), np.ones(64 * 64, F32), 1, 64, 64, 64]],
                   exact_on_int=True))
for _name in ("bmm_nt", "bmm_tn"):  # same sizes as bmm (both operands hold batch*m*n and batch*n*p)
    add(PrimitiveInfo(_name, _bmm, 4,
                       edge_cases=[[np.zeros(0, F32), np.zeros(0, F32), 2, 3, 0, 4],
                                   [np.arange(24, dtype=F32), np.arange(24, dtype=F32) - 12, 2, 3, 4, 3]],
                       exact_on_int=True))


# -- indexing ----------------------------------------------------------------------------
def indices(rng: np.random.Generator, k: int, limit: int) -> np.ndarray:
    """k indices in [0, limit + 3): some out of bounds, and now and then 2**32 - 1."""
    idx = rng.integers(0, limit + 3, k).astype(np.int64)
    if k and rng.random() < 0.3:
        idx[rng.integers(0, k)] = 2**32 - 1
    return idx


add(PrimitiveInfo("gather_vec", lambda rng, d, kind: [values(rng, d[0], kind), d[0], indices(rng, d[1], d[0]), d[1]], 2,
                   edge_cases=[[np.zeros(0, F32), 0, np.array([0, 5], np.int64), 2]]))
add(PrimitiveInfo("gather_rows", lambda rng, d, kind: [values(rng, d[0] * d[1], kind), d[0], d[1],
                                                         indices(rng, d[2], d[0]), d[2]], 3))
add(PrimitiveInfo("scatter_add", lambda rng, d, kind: [values(rng, d[0], kind), values(rng, d[1], kind), d[0],
                                                         indices(rng, d[1], d[0]), d[1]], 2,
                   edge_cases=[[np.zeros(1, F32), np.full(4096, 0.1, F32), 1, np.zeros(4096, np.int64), 4096]],
                   exact_on_int=True, max_dim=40))


def _scatter_add_row(rng, d, kind):
    rows, cols = d
    return [values(rng, rows * cols, kind), values(rng, cols, kind), rows, cols, int(rng.integers(0, rows + 2))]


add(PrimitiveInfo("scatter_add_row", _scatter_add_row, 2))
add(PrimitiveInfo("scatter_add_rows", lambda rng, d, kind: [values(rng, d[0] * d[1], kind),
                                                              values(rng, d[2] * d[1], kind), d[0], d[1],
                                                              indices(rng, d[2], d[0]), d[2]], 3,
                   exact_on_int=True))


# -- fused rows --------------------------------------------------------------------------
_ROW_EDGES = [[np.zeros(0, F32), 0, 4], [np.zeros(0, F32), 3, 0],
              [np.array([1.0, 1.0, 1.0, 1000.0, -1000.0, 0.0, -np.inf, 0.0, np.nan, 1.0, 2.0, 3.0], F32), 4, 3]]
add(PrimitiveInfo("softmax_rows", lambda rng, d, kind: [values(rng, d[0] * d[1], kind), d[0], d[1]], 2,
                   edge_cases=_ROW_EDGES, max_dim=40))
add(PrimitiveInfo("log_softmax_rows", lambda rng, d, kind: [values(rng, d[0] * d[1], kind), d[0], d[1]], 2,
                   edge_cases=_ROW_EDGES, max_dim=40))


def _softmax_bwd(rng, d, kind, log=False):
    rows, cols = d
    x = rng.standard_normal((rows, cols)) * 3
    y = spec.log_softmax_rows(x.reshape(-1), rows, cols) if log else spec.softmax_rows(x.reshape(-1), rows, cols)
    return [y.astype(F32), values(rng, rows * cols, kind), rows, cols]


add(PrimitiveInfo("softmax_rows_bwd", _softmax_bwd, 2, max_dim=40))
add(PrimitiveInfo("log_softmax_rows_bwd", lambda rng, d, kind: _softmax_bwd(rng, d, kind, True), 2, max_dim=40))

# -- random numbers ----------------------------------------------------------------------
add(PrimitiveInfo("rand_uniform", lambda rng, d, kind: [d[0], int(rng.integers(0, 2**63)) * 2 + int(rng.integers(0, 2))], 1,
                   edge_cases=[[0, 0], [64, 0x0123456789ABCDEF], [5, 2**64 - 1]], max_dim=500))
add(PrimitiveInfo("bernoulli_mask", lambda rng, d, kind: [d[0], float(F32(rng.random())), int(rng.integers(0, 2**63))], 1,
                   edge_cases=[[64, 0.35, 0x0123456789ABCDEF], [10, 0.0, 1], [10, 1.0, 1], [10, 2.0, 1],
                               [4, 1.0, 0x25114ED53327345A]],  # its first draw is 1.0f: still kept
                   max_dim=500))
add(PrimitiveInfo("rand_normal", lambda rng, d, kind: [d[0], int(rng.integers(0, 2**63))], 1,
                   edge_cases=[[0, 0], [1, 5], [7, 2**64 - 1]], max_dim=500))


# -- edge cases for entries whose samplers above have none (empty, size 1, extremes, NaN, out of range)
U32_MAX = 2**32 - 1


def f32(*v) -> np.ndarray:
    return np.array(v, dtype=F32)


_SPECIALS = f32(np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, 3.4e38, -3.4e38)
_MORE_EDGE_CASES = {
    "broadcast_vec_to_rows": [[np.zeros(0, F32), 3, 0], [np.zeros(4, F32) + 1, 0, 4], [_SPECIALS.copy(), 2, 8]],
    "broadcast_vec_to_cols": [[np.zeros(0, F32), 0, 3], [np.zeros(4, F32) + 1, 4, 0], [_SPECIALS.copy(), 8, 2]],
    "transpose2d": [[np.zeros(0, F32), 0, 5], [np.zeros(0, F32), 5, 0], [_SPECIALS.copy(), 1, 8], [_SPECIALS.copy(), 2, 4]],
    "gather_rows": [[np.zeros(0, F32), 0, 3, np.array([0, 1, U32_MAX], np.int64), 3],
                    [_SPECIALS.copy(), 4, 2, np.array([3, 4, U32_MAX, 0, 3], np.int64), 5],
                    [np.zeros(0, F32), 4, 0, np.array([1, 9], np.int64), 2]],
    "scatter_add_row": [[_SPECIALS.copy(), f32(1.0, -1.0, np.inf, 0.5), 2, 4, 2],
                        [_SPECIALS.copy(), f32(1.0, -1.0, np.inf, 0.5), 2, 4, U32_MAX],
                        [np.ones(8, F32), f32(np.inf, -np.inf, np.nan, 1e-45), 2, 4, 1],
                        [np.zeros(0, F32), np.zeros(0, F32), 3, 0, 1]],
    "scatter_add_rows": [[np.zeros(4, F32), f32(1, np.inf, 2, np.nan, 3, -np.inf), 2, 2, np.array([1, 2, U32_MAX], np.int64), 3],
                         [np.zeros(0, F32), np.zeros(0, F32), 0, 3, np.zeros(0, np.int64), 0],
                         [np.zeros(2, F32), np.full(2 * 4096, 0.1, F32), 1, 2, np.zeros(4096, np.int64), 4096]],
    "softmax_rows_bwd": [[np.zeros(0, F32), np.zeros(0, F32), 0, 3], [np.zeros(0, F32), np.zeros(0, F32), 3, 0],
                         [np.ones(3, F32), f32(2.0, -1.0, 5.0), 3, 1], [f32(0.25, 0.75), f32(np.nan, 1.0), 1, 2]],
    "log_softmax_rows_bwd": [[np.zeros(0, F32), np.zeros(0, F32), 0, 3], [np.zeros(0, F32), np.zeros(0, F32), 3, 0],
                             [np.zeros(3, F32), f32(2.0, -1.0, 5.0), 3, 1],
                             [f32(-np.inf, 0.0), f32(1.0, 1.0), 1, 2]],
}
for _n, _cases in _MORE_EDGE_CASES.items():
    TABLE[_n].edge_cases.extend(_cases)


# -- running a case ----------------------------------------------------------------------
def _is_buffer_arg(a: Any) -> bool:
    return isinstance(a, np.ndarray) and a.dtype == F32


def _is_buffer_list(a: Any) -> bool:
    """A list of float32 arrays: a list of buffers (adam_step_many's and sgd_step_many's arguments)."""
    return isinstance(a, list) and all(_is_buffer_arg(x) for x in a)


def runtime_args(args: list, device: str) -> list:
    return [Buffer.from_numpy(a, device) if _is_buffer_arg(a) else
            [Buffer.from_numpy(x, device) for x in a] if _is_buffer_list(a) else a for a in args]


def spec_args(args: list) -> list:
    return [a.astype(np.float64) if _is_buffer_arg(a) else
            [x.astype(np.float64) for x in a] if _is_buffer_list(a) else a for a in args]


def run_runtime(info: PrimitiveInfo, args: list, device: str) -> Any:
    """The primitive's output(s) on ``device`` as host float32 arrays."""
    rargs = runtime_args(args, device)
    if info.name in ("rand_uniform", "bernoulli_mask", "rand_normal"):
        rargs = rargs + [device]
    out = info.runtime(*rargs)
    if isinstance(out, tuple):
        return tuple(o.to_numpy() for o in out)
    return out.to_numpy()


def run_case(info: PrimitiveInfo, args: list, device: str) -> tuple[contract.Verdict, Any, Any]:
    """(verdict, output, spec output) for one argument list on one device. A bound that takes a
    ``device`` keyword gets it: its error model may depend on the kernels that ran (attention's
    products: float32 chains on the CPU, tensor cores on CUDA)."""
    out = run_runtime(info, args, device)
    sargs = spec_args(args)
    ref = info.spec(*sargs)
    kw = {"device": device} if _takes_device(info.contract.bound) else {}
    tol = info.contract.bound(ref, *sargs, **kw)
    return contract.compare(out, ref, tol), out, ref


@functools.lru_cache(maxsize=None)
def _takes_device(bound) -> bool:
    try:
        return "device" in inspect.signature(bound).parameters
    except (TypeError, ValueError):
        return False


TABLE.update(_FAMILY_ENTRIES)
