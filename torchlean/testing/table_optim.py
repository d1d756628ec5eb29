"""Primitive table entries of the optim family: adam_step and sgd_step, and their multi-tensor forms;
clip_grad_norm_'s norm2_many and scale_many.

Random draws use finite kinds (normal, wide, int): with infinities the spec's algebraic form
(beta m + (1 - beta) g) and the kernels' lerp meet inf - inf differently, which is IEEE behaviour,
not a kernel defect; NaN propagation, zero and huge/tiny values are edge cases. v (a second
moment) is drawn >= 0, the contract's precondition.
"""

from __future__ import annotations

import numpy as np

from .table_core import F32, KINDS, PrimitiveInfo, add, values

_KINDS = ("normal", "wide", "int")


def _hyper(rng, choices):
    return choices[int(rng.integers(0, len(choices)))]


def _adam(rng, d, kind):
    n = d[0]
    p, g, m = values(rng, n, kind), values(rng, n, kind), values(rng, n, kind)
    v = values(rng, n, kind, positive=True)
    lr = float(10.0 ** rng.uniform(-4, 0))
    return [p, g, m, v, n, lr, _hyper(rng, (0.9, 0.0, 0.5, 0.6, 0.99)), _hyper(rng, (0.999, 0.9, 0.0, 0.5)),
            _hyper(rng, (1e-8, 1e-6, 0.1)), _hyper(rng, (0.0, 0.01, 0.5)), _hyper(rng, (1, 2, 10, 1000)),
            bool(rng.integers(0, 2))]


def _sgd(rng, d, kind):
    n = d[0]
    p, g, b = values(rng, n, kind), values(rng, n, kind), values(rng, n, kind)
    lr = float(10.0 ** rng.uniform(-4, 0))
    return [p, g, b, n, lr, _hyper(rng, (0.0, 0.9, 0.5, 0.99)), _hyper(rng, (0.0, 0.1, 0.5)),
            _hyper(rng, (0.0, 0.01, 0.5)), bool(rng.integers(0, 2)), bool(rng.integers(0, 2))]


def f32(*v):
    return np.array(v, dtype=F32)


_Z0 = np.zeros(0, F32)
_P = f32(1.0, -2.0, 0.5, 3.0, -0.25, 1e-30, 1e18, -7.0)
_G = f32(0.0, 0.0, 1e-30, -1e18, 1e18, 2.5, -1e-20, np.nan)
_M = f32(0.0, 0.1, -0.2, 1e17, 0.0, -3.0, 1e-38, 0.5)
_V = f32(0.0, 0.01, 1e-40, 1e36, 0.0, 2.0, 1e-45, 1.0)
_adam_edges = [
    [_Z0, _Z0, _Z0, _Z0, 0, 1e-3, 0.9, 0.999, 1e-8, 0.0, 1, False],
    [f32(0.0, 1.0, -1.0), np.zeros(3, F32), np.zeros(3, F32), np.zeros(3, F32), 3, 1e-3, 0.9, 0.999, 1e-8, 0.0, 1,
     False],                                                                # zero grads, step 1: p unchanged
    [f32(1.5), f32(-0.5), f32(0.0), f32(0.0), 1, 0.1, 0.9, 0.999, 1e-8, 0.0, 1, False],  # size 1, step 1
    [_P, _G, _M, _V, 8, 1e-3, 0.9, 0.999, 1e-8, 0.0, 1, False],            # huge, tiny, subnormal, NaN
    [_P, _G, _M, _V, 8, 1e-2, 0.9, 0.999, 1e-8, 0.1, 7, False],            # Adam's L2 term
    [_P, _G, _M, _V, 8, 1e-2, 0.9, 0.999, 1e-8, 0.1, 7, True],             # AdamW's decay
    [_P, _G, _M, _V, 8, 1.0, 0.0, 0.0, 1e-3, 0.0, 3, False],               # beta 0: m = g, v = g^2
    [f32(1.0, 2.0), f32(0.5, 0.0), f32(0.0, 0.0), f32(0.0, 0.0), 2, 1e-3, 0.9, 0.999, 0.0, 0.0, 1, False],  # eps 0
]
_B = f32(0.0, 1.0, -1e17, 1e-38, 4.0, -0.5, 2.0, 0.0)
_sgd_edges = [
    [_Z0, _Z0, _Z0, 0, 0.1, 0.9, 0.0, 0.0, False, False],
    [_Z0, _Z0, None, 0, 0.1, 0.0, 0.0, 0.0, False, True],
    [_P, _G, None, 8, 0.1, 0.0, 0.0, 0.0, False, True],                    # plain SGD, no buffer
    [_P, _G, _B, 8, 0.1, 0.9, 0.0, 0.01, True, False],                     # nesterov with weight decay
    [_P, _G, _B, 8, 0.01, 0.9, 0.5, 0.0, False, False],                    # dampening
    [_P, np.zeros(8, F32), _B, 8, 1.0, 0.9, 0.0, 0.0, False, True],        # zero grads, first step
]

add(PrimitiveInfo("adam_step", _adam, 1, edge_cases=_adam_edges, max_dim=40, kinds=_KINDS))


def _adam_many(rng, d, kind):
    """d[0] tensors of random sizes 0..13 (quads and scalar tails on CUDA), one hyperparameter set."""
    sizes = [int(s) for s in rng.integers(0, 14, d[0])]
    ps, gs, ms = ([values(rng, s, kind) for s in sizes] for _ in range(3))
    vs = [values(rng, s, kind, positive=True) for s in sizes]
    hyper = _adam(rng, (1,), kind)[5:]
    return [ps, gs, ms, vs, *hyper]


_adam_many_edges = [
    [[], [], [], [], 1e-3, 0.9, 0.999, 1e-8, 0.0, 1, False],                      # no tensors
    [[_Z0, _P], [_Z0, _G], [_Z0, _M], [_Z0, _V], 1e-2, 0.9, 0.999, 1e-8, 0.1, 7, True],  # an empty one first
    [[_P, _P[:3], _P[:5]], [_G, _G[:3], _G[:5]], [_M, _M[:3], _M[:5]], [_V, _V[:3], _V[:5]],
     1e-2, 0.9, 0.999, 1e-8, 0.1, 7, False],                                       # tails of 3 and 1
]
add(PrimitiveInfo("adam_step_many", _adam_many, 1, edge_cases=_adam_many_edges, max_dim=12, kinds=_KINDS))
add(PrimitiveInfo("adam_step_many_inplace", _adam_many, 1, edge_cases=_adam_many_edges, max_dim=12, kinds=_KINDS))
add(PrimitiveInfo("sgd_step", _sgd, 1, edge_cases=_sgd_edges, max_dim=40, kinds=_KINDS))


def _sgd_many(rng, d, kind):
    """d[0] tensors of random sizes 0..13 (quads and scalar tails on CUDA), one hyperparameter set;
    the buffers are given (and written in place) on the first step too, where they are not read."""
    sizes = [int(s) for s in rng.integers(0, 14, d[0])]
    ps, gs, bufs = ([values(rng, s, kind) for s in sizes] for _ in range(3))
    return [ps, gs, bufs, *_sgd(rng, (1,), kind)[4:]]


_sgd_many_edges = [
    [[], [], [], 0.1, 0.9, 0.0, 0.0, False, False],                             # no tensors
    [[], [], None, 0.1, 0.0, 0.0, 0.0, False, True],                            # no tensors, no buffers
    [[_Z0, _P], [_Z0, _G], [_Z0, _B], 0.1, 0.9, 0.0, 0.01, True, False],        # an empty one first; nesterov
    [[_P, _P[:3], _P[:5]], [_G, _G[:3], _G[:5]], None, 0.1, 0.0, 0.0, 0.0, False, True],  # plain SGD, tails
    [[_P, _P[:3], _P[:5]], [_G, _G[:3], _G[:5]], [_B, _B[:3], _B[:5]], 0.01, 0.9, 0.5, 0.0, False, False],  # dampening
    [[_P, _P[:5]], [_G, _G[:5]], [_B, _B[:5]], 1.0, 0.9, 0.0, 0.1, True, True],  # first step: bufs not read
    [[_P, _P[:7]], [_G, _G[:7]], None, 0.5, 0.9, 0.0, 0.5, True, True],        # first step, no buffers given
]
add(PrimitiveInfo("sgd_step_many", _sgd_many, 1, edge_cases=_sgd_many_edges, max_dim=12, kinds=_KINDS))
add(PrimitiveInfo("sgd_step_many_inplace", _sgd_many, 1, edge_cases=_sgd_many_edges, max_dim=12, kinds=_KINDS))



# -- norm2_many and scale_many ------------------------------------------------------------------------
# Every kind, specials included: norm2_many squares and sums in double, where no float32 value's
# square overflows (3.4e38^2 ~ 1e77), and a norm beyond the float32 range rounds to inf as the
# contract allows; scale_many is one IEEE product. Sizes: mostly 0..13 (CUDA's quads and scalar
# tails), sometimes up to 3 of norm2_many's 8192-element chunks (a partial last chunk).
_N2_CHUNK = 8192


def _many_sizes(rng, t):
    return [int(rng.integers(0, 3 * _N2_CHUNK + 5)) if rng.random() < 0.2 else int(rng.integers(0, 14))
            for _ in range(t)]


def _norm2_many(rng, d, kind):
    return [[values(rng, s, kind) for s in _many_sizes(rng, d[0])]]


def _scale_many(rng, d, kind):
    return [[values(rng, s, kind) for s in _many_sizes(rng, d[0])], values(rng, 1, kind)]


_R = np.random.default_rng(20240601)
_BIG = (_R.standard_normal(300_000) * 3.0).astype(F32)  # one large tensor (37 chunks) among small ones
_SMALL = [(_R.standard_normal(n) * 2.0).astype(F32) for n in (1, 2, 3, 4, 5, 7, 13)]
_ODD = f32(np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 1e-38, 3.4e38, -3.4e38, 1e20, 1e-30, 0.5)
_BOUNDARIES = [(_R.standard_normal(n)).astype(F32) for n in (_N2_CHUNK - 1, _N2_CHUNK, _N2_CHUNK + 1,
                                                               2 * _N2_CHUNK + 3)]
_norm2_many_edges = [
    [[]],                                                                   # T = 0: an empty result
    [[_Z0]],                                                                # one empty tensor: 0
    [[_Z0, f32(3.0, 4.0), _Z0, f32(-0.0), f32(-5.0)]],                      # 0, 5, 0, 0, 5
    [[_SMALL[0], _BIG, *_SMALL[1:]]],                                       # 300k elements among small ones
    [_BOUNDARIES],                                                          # chunk boundaries, partial chunks
    [[f32(np.nan, 1.0), f32(np.inf, 2.0), f32(-np.inf), f32(np.inf, np.nan), f32(1.0, -np.inf, 0.0)]],  # NaN, inf
    [[f32(1e-45), f32(1e-45, -1e-45, 1e-45), f32(1e-38, -1e-39), f32(1e-30, 1e-30), f32(-0.0, 0.0)]],  # tiny
    [[f32(3.4e38), f32(3.4e38, -3.4e38), f32(1e20, -1e20, 1e20), f32(1e19, 1e-30)]],  # huge: inf, finite
    [[_ODD, _ODD[:7], _ODD[1:], np.tile(_ODD, 700)]],                       # specials, some over a chunk
]
_scale_many_edges = [
    [[], f32(2.0)],                                                         # T = 0
    [[_Z0, _P, _Z0], f32(0.5)],                                             # empty ones
    [[_SMALL[0], _BIG, *_SMALL[1:]], f32(0.3)],                             # 300k elements among small ones
    [[_ODD, _ODD[:5], _ODD[2:]], f32(1.0)],                                 # coefficient 1: the same bits
    [[_ODD, _ODD[:3]], f32(-0.0)],                                          # -0: signed zeros, NaN for inf
    [[_ODD, _P], f32(np.inf)],
    [[_ODD, _P], f32(np.nan)],
    [[_ODD, _P, _G], f32(1e-45)],                                           # subnormal coefficient
    [[_ODD, _P, _G], f32(3e38)],                                            # overflow to inf
    [[_ODD, _P, _G], f32(1.5e-7)],                                          # clip_grad_norm_'s small factors
    [_BOUNDARIES, f32(0.7)],
]
add(PrimitiveInfo("norm2_many", _norm2_many, 1, edge_cases=_norm2_many_edges, max_dim=12, kinds=KINDS))
add(PrimitiveInfo("scale_many", _scale_many, 1, edge_cases=_scale_many_edges, max_dim=12, kinds=KINDS))
