"""Primitive-table entries of the convolution: conv, conv_bwd_input, conv_bwd_weight, conv_transpose.

The sampler turns the four drawn sizes into a random geometry: spatial rank 1-3 (now and then 4
or 5), batch and channel counts 0-3 (0 is rare), kernel 1-3, stride 1-3, padding 0..kernel (so
padding >= kernel/2 is common), spatial sizes just large enough for an output (odd and even),
with or without a bias; about a third of the draws also take a dilation of 1-2 per axis and a
group count dividing both channel counts (depthwise included). Sizes stay tiny: the spec loops
over kernel offsets.
"""

from __future__ import annotations

import math

import numpy as np

from .table_core import F32, SUM_KINDS, PrimitiveInfo, add, values

_NAMES = ("conv", "conv_bwd_input", "conv_bwd_weight", "conv_transpose")


def _rank(d0: int) -> int:
    return (4, 5)[d0 % 2] if d0 % 11 == 10 else 1 + d0 % 3


def _count(rng, d: int) -> int:
    return 0 if d % 13 == 12 else int(rng.integers(1, 4))


def _axes(rng, rank: int, transpose: bool):
    """Per axis (spatial, kernel, stride, padding, output_padding) with a non-empty output."""
    small = rank >= 4
    sp, kn, st, pd, op = [], [], [], [], []
    for _ in range(rank):
        k = int(rng.integers(1, 3 if small else 4))
        s = int(rng.integers(1, 3 if small else 4))
        if transpose:
            n = int(rng.integers(1, 3 if small else 5))
            o = int(rng.integers(0, s))
            p = int(rng.integers(0, ((n - 1) * s + k + o - 1) // 2 + 1))  # keeps the output >= 1
        else:
            p = int(rng.integers(0, k + 1))
            n = max(k - 2 * p, 0) + int(rng.integers(0 if p else 0, 3 if small else 6))
            o = 0
        sp.append(n), kn.append(k), st.append(s), pd.append(p), op.append(o)
    return tuple(sp), tuple(kn), tuple(st), tuple(pd), tuple(op)


def out_dims(spatial, kernel, stride, padding, dilation=None):
    dilation = (1,) * len(spatial) if dilation is None else dilation
    return tuple((s + 2 * p - d * (k - 1) - 1) // t + 1 for s, k, t, p, d in zip(spatial, kernel, stride, padding,
                                                                                dilation))


def _grouping(rng, rank: int, in_c: int, out_c: int, sp, kn, transpose: bool):
    """(spatial, dilation, groups): a dilation of 1-2 per axis (the spatial size grown so the output
    stays non-empty) and a group count dividing both channel counts."""
    dl = tuple(int(v) for v in rng.integers(1, 3, rank))
    if not transpose:
        sp = tuple(n + (d - 1) * (k - 1) for n, k, d in zip(sp, kn, dl))
    common = [g for g in range(1, max(in_c, out_c, 1) + 1) if in_c % g == 0 and out_c % g == 0]
    return sp, dl, int(rng.choice(common))


def _sample(name: str):
    def sample(rng, d, kind):
        rank = _rank(d[0])
        batch, in_c, out_c = _count(rng, d[1]), _count(rng, d[2]), _count(rng, d[3])
        transpose = name == "conv_transpose"
        sp, kn, st, pd, op = _axes(rng, rank, transpose)
        dl, g = None, 1
        if rng.random() < 0.35:
            sp, dl, g = _grouping(rng, rank, in_c, out_c, sp, kn, transpose)
        extra = [] if dl is None else [dl, g]
        bias = values(rng, out_c, kind) if rng.random() < 0.7 else None
        n_w = out_c * (in_c // g) * math.prod(kn) if not transpose else in_c * (out_c // g) * math.prod(kn)
        if name == "conv":
            return [values(rng, batch * in_c * math.prod(sp), kind), values(rng, n_w, kind),
                    bias, batch, in_c, out_c, sp, kn, st, pd, *extra]
        n_out = batch * out_c * math.prod(out_dims(sp, kn, st, pd, dl))
        if name == "conv_bwd_input":
            return [values(rng, n_out, kind), values(rng, n_w, kind), batch, in_c, out_c, sp, kn, st, pd, *extra]
        if name == "conv_bwd_weight":
            return [values(rng, batch * in_c * math.prod(sp), kind), values(rng, n_out, kind),
                    batch, in_c, out_c, sp, kn, st, pd, *extra]
        return [values(rng, batch * in_c * math.prod(sp), kind), values(rng, n_w, kind),
                bias, batch, in_c, out_c, sp, kn, st, pd, op, *extra]

    return sample


def _ar(n: int, scale: float = 1.0, shift: float = 0.0) -> np.ndarray:
    """0, 1, 2, ... (scaled, shifted) as float32: small integers make exact known answers."""
    return (np.arange(n, dtype=np.float64) * scale + shift).astype(F32)


def _mix(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(-4, 5, n).astype(F32)


def _tile(pattern: np.ndarray, n: int) -> np.ndarray:
    return np.resize(pattern, n).astype(F32)


def _inf_first(n: int) -> np.ndarray:
    a = np.ones(n, F32)
    a[:1] = np.inf
    return a


_NAN_INF = np.array([np.nan, 1.0, np.inf, -2.0, 0.5, -np.inf, 3.0, 0.0, 1.0, -1.0, 2.0, 0.25], F32)


def _geometries():
    """(batch, in_c, out_c, spatial, kernel, stride, padding) of the hand-picked edge cases."""
    return [
        (2, 3, 2, (7,), (3,), (1,), (1,)),                    # rank 1, 'same'-like padding
        (1, 2, 3, (9,), (4,), (3,), (2,)),                    # rank 1, stride 3, even kernel
        (2, 2, 3, (5, 7), (3, 3), (2, 2), (1, 1)),            # rank 2, stride 2, odd sizes
        (1, 3, 2, (4, 5), (3, 2), (1, 2), (2, 1)),            # padding >= kernel/2 (2 of 3), mixed strides
        (2, 1, 1, (3, 3), (3, 3), (1, 1), (3, 3)),            # padding >= kernel: taps entirely in the padding
        (3, 4, 5, (3, 5), (1, 1), (1, 1), (0, 0)),            # 1x1 kernel (plain GEMM), several images
        (2, 3, 2, (5, 4), (1, 1), (2, 3), (1, 0)),            # 1x1 kernel with stride and padding
        (1, 2, 2, (4, 3, 5), (3, 2, 3), (1, 1, 2), (1, 0, 1)),  # rank 3
        (1, 2, 1, (3, 2, 3, 2), (2, 1, 2, 2), (1, 1, 2, 1), (0, 1, 1, 0)),  # rank 4
        (1, 1, 2, (2, 3, 2, 2, 3), (2, 2, 1, 2, 3), (1, 2, 1, 1, 1), (0, 0, 1, 1, 1)),  # rank 5
        (1, 1, 1, (1,), (1,), (1,), (0,)),                    # one element
        (0, 2, 3, (4, 4), (3, 3), (1, 1), (1, 1)),            # batch 0: empty
        (2, 0, 3, (4, 4), (3, 3), (1, 1), (1, 1)),            # in_c 0: y = bias, dx empty, dw empty
        (2, 3, 0, (4, 4), (3, 3), (1, 1), (1, 1)),            # out_c 0: y empty, dx = 0
        (1, 2, 2, (0, 3), (1, 3), (1, 1), (1, 1)),            # an empty spatial axis, all padding
    ]


def _edge_cases(name: str) -> list[list]:
    cases = []
    for i, (n, ci, co, sp, kn, st, pd) in enumerate(_geometries()):
        nx, nw, ny = n * ci * math.prod(sp), co * ci * math.prod(kn), n * co * math.prod(out_dims(sp, kn, st, pd))
        bias = _ar(co, 1.0, -1.0) if i % 2 == 0 else None
        if name == "conv":
            cases.append([_mix(nx, i), _mix(nw, 100 + i), bias, n, ci, co, sp, kn, st, pd])
        elif name == "conv_bwd_input":
            cases.append([_mix(ny, i), _mix(nw, 100 + i), n, ci, co, sp, kn, st, pd])
        elif name == "conv_bwd_weight":
            cases.append([_mix(nx, i), _mix(ny, 100 + i), n, ci, co, sp, kn, st, pd])
    # NaN / inf: in x (and dy), and an inf weight next to the padding (conv: 0 * inf = NaN in the
    # padded border; conv_bwd_input: taps in the padding are no terms, so no NaN from them; the
    # CPU's stride-1 shortcut must step aside for non-finite weights).
    for n, ci, co, sp, kn, st, pd in [(2, 1, 3, (4, 4), (3, 3), (1, 1), (1, 1)), (2, 1, 3, (5,), (4,), (1,), (2,)),
                                      (1, 2, 1, (4, 4), (3, 3), (2, 2), (1, 1))]:
        nx, nw, ny = n * ci * math.prod(sp), co * ci * math.prod(kn), n * co * math.prod(out_dims(sp, kn, st, pd))
        dims = [n, ci, co, sp, kn, st, pd]
        if name == "conv":
            cases += [[_tile(_NAN_INF, nx), _mix(nw, 7), _ar(co), *dims],
                      [np.ones(nx, F32), _inf_first(nw), None, *dims]]
        elif name == "conv_bwd_input":
            cases += [[_tile(_NAN_INF, ny), _mix(nw, 7), *dims], [np.ones(ny, F32), _inf_first(nw), *dims]]
        elif name == "conv_bwd_weight":
            cases += [[_tile(_NAN_INF, nx), _mix(ny, 7), *dims], [np.ones(nx, F32), _inf_first(ny), *dims]]
    # groups and dilation: (batch, in_c, out_c, spatial, kernel, stride, padding, dilation, groups)
    for i, (n, ci, co, sp, kn, st, pd, dl, g) in enumerate([
        (2, 4, 4, (9,), (4,), (1,), (3,), (1,), 4),                    # depthwise 1-D, Mamba's causal conv
        (2, 3, 3, (11,), (3,), (2,), (2,), (3,), 3),                   # depthwise, strided and dilated
        (1, 4, 6, (9,), (3,), (1,), (1,), (2,), 2),                    # two groups, dilated
        (2, 2, 4, (7, 6), (3, 2), (2, 1), (1, 1), (2, 3), 2),          # depthwise with a channel multiplier
        (1, 6, 3, (5, 6), (2, 2), (1, 1), (2, 0), (1, 2), 3),
        (1, 2, 2, (5, 4, 5), (2, 2, 2), (1, 2, 1), (1, 0, 1), (2, 1, 2), 2),  # rank 3
        (1, 1, 1, (7,), (2,), (5,), (4,), (3,), 1),                    # dilation alone, padding >= kernel
    ]):
        nx, nw = n * ci * math.prod(sp), co * (ci // g) * math.prod(kn)
        ny = n * co * math.prod(out_dims(sp, kn, st, pd, dl))
        geom = [n, ci, co, sp, kn, st, pd, dl, g]
        if name == "conv":
            cases += [[_mix(nx, 200 + i), _mix(nw, 300 + i), _ar(co, 1.0, -1.0) if i % 2 else None, *geom],
                      [np.ones(nx, F32), _inf_first(nw), None, *geom]]
        elif name == "conv_bwd_input":
            cases += [[_mix(ny, 200 + i), _mix(nw, 300 + i), *geom], [np.ones(ny, F32), _inf_first(nw), *geom]]
        elif name == "conv_bwd_weight":
            cases += [[_mix(nx, 200 + i), _mix(ny, 300 + i), *geom], [_tile(_NAN_INF, nx), np.ones(ny, F32), *geom]]
    if name != "conv_transpose":
        return cases
    # conv_transpose: (batch, in_c, out_c, spatial, kernel, stride, padding, output_padding)
    for i, (n, ci, co, sp, kn, st, pd, op) in enumerate([
        (2, 3, 2, (4,), (3,), (2,), (1,), (1,)),
        (1, 2, 3, (3, 4), (3, 2), (2, 3), (1, 0), (1, 2)),
        (2, 2, 2, (3, 3), (1, 1), (1, 1), (0, 0), (0, 0)),
        (1, 2, 1, (2, 3, 2), (3, 2, 2), (2, 1, 2), (1, 0, 1), (0, 0, 1)),
        (1, 1, 2, (2, 2, 1, 2), (2, 1, 2, 2), (2, 1, 1, 2), (0, 0, 0, 1), (1, 0, 0, 1)),
        (0, 2, 2, (3,), (3,), (1,), (1,), (0,)),
        (2, 0, 2, (3,), (3,), (1,), (1,), (0,)),
        (2, 2, 0, (3,), (3,), (1,), (1,), (0,)),
        (1, 1, 1, (3, 3), (3, 3), (1, 1), (2, 2), (0, 0)),  # padding crops: out 1x1
    ]):
        nx, nw = n * ci * math.prod(sp), ci * co * math.prod(kn)
        cases.append([_mix(nx, i), _mix(nw, 50 + i), _ar(co, 1.0, -1.0) if i % 2 == 0 else None,
                      n, ci, co, sp, kn, st, pd, op])
    # groups and dilation: (..., output_padding, dilation, groups)
    for i, (n, ci, co, sp, kn, st, pd, op, dl, g) in enumerate([
        (2, 4, 4, (5,), (4,), (1,), (2,), (0,), (2,), 4),
        (1, 4, 6, (3, 4), (3, 2), (2, 1), (1, 0), (1, 0), (2, 3), 2),
        (1, 2, 2, (2, 3, 2), (2, 2, 2), (2, 1, 2), (0, 1, 1), (1, 0, 0), (1, 2, 2), 2),
    ]):
        nx, nw = n * ci * math.prod(sp), ci * (co // g) * math.prod(kn)
        cases += [[_mix(nx, 400 + i), _mix(nw, 500 + i), _ar(co, 1.0, -1.0) if i % 2 == 0 else None,
                   n, ci, co, sp, kn, st, pd, op, dl, g],
                  [np.ones(nx, F32), _inf_first(nw), None, n, ci, co, sp, kn, st, pd, op, dl, g]]
    cases += [[_tile(_NAN_INF, 12), _inf_first(6), None, 1, 2, 1, (6,), (3,), (2,), (1,), (1,)],
              [np.ones(12, F32), _inf_first(6), None, 1, 2, 1, (6,), (3,), (1,), (1,), (0,)],
              [_tile(_NAN_INF, 12), _mix(12, 3), _ar(2), 3, 2, 2, (2,), (3,), (1,), (1,), (0,)]]
    return cases


for _n in _NAMES:
    add(PrimitiveInfo(_n, _sample(_n), 4, edge_cases=_edge_cases(_n), exact_on_int=True, max_dim=40,
                       kinds=SUM_KINDS))
