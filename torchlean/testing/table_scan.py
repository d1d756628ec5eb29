"""Primitive-table entries of the selective scans (diag and var forms, forward and backward).

The scans accumulate, so they draw SUM_KINDS (no float32 values near the overflow threshold in
random draws). Dims are (seq_len, state). The backward entries take H from the float64 forward
rounded to float32, as the tape passes the forward output. Edge cases: empty sizes, one step,
A = 0, A = 1 (prefix sums of integers: exact), A = -1, growth to overflow (|A| > 1), NaN and inf
inputs, a long sequence with few channels (CUDA: several chunks).
"""

from __future__ import annotations

import numpy as np

from ..spec import scan as spec_scan
from .table_core import SUM_KINDS, PrimitiveInfo, add, values

F32 = np.float32


def f32(*v) -> np.ndarray:
    return np.array(v, dtype=F32)


def _coef_values(rng, n, kind):
    """A: "wide" magnitudes would overflow float32 within a few steps (A^t), which is IEEE behaviour
    (inf - inf = NaN where float64 stays finite), not a kernel defect: A stays of order 1 there;
    the edge cases bring growth to overflow explicitly."""
    return values(rng, n, "normal" if kind == "wide" else kind)


def _fwd_args(rng, L, S, kind, var):
    n = L * S
    return [_coef_values(rng, n if var else S, kind), values(rng, n if var else S, kind), values(rng, n, kind),
            values(rng, S, kind), L, S]


def _bwd_from_fwd(args, rng_or_dh, var):
    A, B, X, h0, L, S = args
    fwd = spec_scan.selective_scan_diag_var_fwd if var else spec_scan.selective_scan_diag_fwd
    with np.errstate(all="ignore"):
        H = fwd(*(a.astype(np.float64) for a in (A, B, X, h0)), L, S).astype(F32)
    dH = values(rng_or_dh, L * S, "normal") if isinstance(rng_or_dh, np.random.Generator) else rng_or_dh
    return [A, B, X, h0, H, dH, L, S]


def _edge_fwd(var):
    """Forward edge cases for the diag (var=False) or var form."""
    def coef(v, L, S):
        v = np.asarray(v, F32).reshape(-1)
        return np.tile(np.broadcast_to(v, (S,)), L).astype(F32) if var else np.broadcast_to(v, (S,)).astype(F32)

    cases = []
    cases.append([coef([0.5], 0, 3), coef([2.0], 0, 3), np.zeros(0, F32), f32(1, 2, 3), 0, 3])  # seq_len 0
    cases.append([np.zeros(0, F32), np.zeros(0, F32), np.zeros(0, F32), np.zeros(0, F32), 4, 0])  # state 0
    cases.append([coef([0.5, -2, 3], 1, 3), coef([1, 2, -1], 1, 3), f32(4, 5, 6), f32(1, -1, 0.25), 1, 3])
    # A = 0: H = B X;  A = 1: prefix sums (integers: exact);  A = -1: alternating
    rng = np.random.default_rng(5)
    x = rng.integers(-8, 9, 300 * 3).astype(F32)
    cases.append([coef([0.0, 0.0, -0.0], 300, 3), coef([1, 2, 3], 300, 3), x, f32(7, 7, 7), 300, 3])
    cases.append([coef([1.0, 1.0, -1.0], 300, 3), coef([1, -1, 2], 300, 3), x, f32(1, 2, 3), 300, 3])
    # growth: |A| > 1 overflows float32 (ref beyond range: inf expected), and a tiny A underflows
    cases.append([coef([1e30, -1e30, 1e-30], 5, 3), coef([1, 1, 1], 5, 3), np.ones(15, F32), f32(1, 1, 1e30), 5, 3])
    cases.append([coef([2.0, 0.5, 1e-20], 40, 3), coef([1, 1, 1e-20], 40, 3), np.full(120, 1e-30, F32),
                  f32(1e-38, 1e-45, 3), 40, 3])
    # NaN and inf in X, B, h0; NaN and inf in A (a one-chunk sequence: IEEE as the sequential recurrence)
    cases.append([coef([np.nan, np.inf, -np.inf], 3, 3), coef([1, 1, 1], 3, 3), f32(1, 0, 1, 2, 2, 0, 3, 3, 3),
                  f32(1, 0, 2), 3, 3])
    cases.append([coef([0.9, 0.5, 1.0], 4, 3), coef([1, np.nan, 1], 4, 3), f32(1, 1, np.inf, 2, 2, 2, 3, 3, 3, 4, 4, 4),
                  f32(0, 0, np.nan), 4, 3])
    # a long sequence, few channels (several CUDA chunks); decaying and near-1 coefficients
    xl = rng.standard_normal(2000 * 2).astype(F32)
    cases.append([coef([0.999, -0.95], 2000, 2), coef([0.5, 1.5], 2000, 2), xl, f32(3, -1), 2000, 2])
    if var:  # per-token coefficients that change sign and size, some zeros
        av = rng.uniform(-1.2, 1.2, 64 * 5).astype(F32)
        av[::7] = 0.0
        cases.append([av, rng.standard_normal(64 * 5).astype(F32), rng.standard_normal(64 * 5).astype(F32),
                      f32(1, 2, 3, 4, 5), 64, 5])
    return cases


def _edge_bwd(var):
    rng = np.random.default_rng(9)
    out = []
    for i, args in enumerate(_edge_fwd(var)):
        if i == 5:  # growth past float32 range: inf adjoints of both signs meet (inf - inf), IEEE, not a defect
            A = args[0].copy()
            A[A == F32(1e30)], A[A == F32(-1e30)] = 1e3, -1e3
            args = [A] + args[1:]
        out.append(_bwd_from_fwd(args, rng, var))
    # cotangent with NaN / inf, and a zero cotangent
    args = _edge_fwd(var)[2]
    out.append(_bwd_from_fwd(args, f32(np.nan, 1, np.inf), var))
    out.append(_bwd_from_fwd(_edge_fwd(var)[4], np.zeros(900, F32), var))
    return out


for _var, _fwd_name, _bwd_name in ((False, "selective_scan_diag_fwd", "selective_scan_diag_bwd"),
                                   (True, "selective_scan_diag_var_fwd", "selective_scan_diag_var_bwd")):
    add(PrimitiveInfo(_fwd_name, lambda rng, d, kind, v=_var: _fwd_args(rng, d[0], d[1], kind, v), 2,
                       edge_cases=_edge_fwd(_var), max_dim=12, kinds=SUM_KINDS))
    add(PrimitiveInfo(_bwd_name, lambda rng, d, kind, v=_var: _bwd_from_fwd(_fwd_args(rng, d[0], d[1], kind, v), rng, v),
                       2, edge_cases=_edge_bwd(_var), max_dim=12, kinds=SUM_KINDS))
