"""The float32 error bound every primitive promises against its float64 spec.

A bound is a formula of the inputs (and of the exact result ``ref``), evaluated in float64, giving
an allowed absolute error per output element. Notation: u = 2**-24 (float32 unit roundoff),
ulp(r) = spacing of the float32 grid at |r|, gamma(k) = k u / (1 - k u), TINY = 2**-126 (slack
for results that underflow into subnormals). Inputs are float32 values, exact in float64, so a
bound only has to cover the rounding done by the kernel itself.

Why sums use gamma(k) * sum|x| (Higham, Accuracy and Stability, sec. 4.2): it holds for *every*
order of summation, so one contract covers NumPy's pairwise sums, cuBLAS, tree reductions and
atomics. Its weakness (loose for large k) is made up for in the tests, which also feed
integer-valued inputs whose sums are exact in any order and must match the spec bit for bit.

Transcendentals: we assume the float32 library functions (NumPy's SIMD loops, CUDA's expf/logf/
tanhf without fast-math) are within 4 ulp, i.e. 8u relative; ``torchlean check`` measures it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import spec
from .core import (CONTRACTS, F32_MAX, F32_OVERFLOW, LIB, TINY, U, Contract, abs64, gamma, register,  # noqa: F401
                   sum_bound, ulp32, zero_bound)
# the families, each registering its primitives' contracts on import (they import .core, never this module)
from . import attention, classify, conv, fast, norm, optim, pool, rnn, scan, spectral  # noqa: F401
from . import fft  # noqa: F401,E402  (registers fftn_c2c, rfftn_r2c, irfftn_c2r)
from . import spectral_nd  # noqa: F401,E402  (the 2-D/3-D spectral convolutions)


def _rel(k_u: float, extra_abs: float = TINY):
    """k_u * u * |ref| + TINY: for ops made of a fixed handful of roundings."""
    return lambda ref, *args: k_u * U * abs64(ref) + extra_abs


def _half_ulp(ref, *args):
    return 0.5 * ulp32(ref)


# -- exact: selections, copies, comparisons, moves -----------------------------------------
for _n in ("abs", "abs_bwd", "copy", "relu", "relu_bwd", "floor", "ceil", "round", "trunc", "sign", "clamp", "clamp_bwd", "max", "min", "reduce_max_axis0", "reduce_max_axis1", "concat1d", "slice1d",
           "narrow_block", "narrow_block_bwd", "concat_block",
           "broadcast_vec_to_rows", "broadcast_vec_to_cols", "broadcast_to", "swap_adjacent_at_depth", "permute",
           "transpose2d", "gather_vec", "gather_rows", "rand_uniform", "bernoulli_mask"):
    register(_n, "exact (no rounding: a selection, a move, or a sign/0.5 scaling)", zero_bound, exact=True)

# -- one correctly rounded IEEE operation -------------------------------------------------
for _n in ("sqrt", "inv", "div", "add", "sub", "mul", "scale", "add_scalar", "scatter_add_row", "leaky_relu",
           "leaky_relu_bwd"):
    register(_n, "correctly rounded: |err| <= ulp(ref)/2", _half_ulp)

for _n in ("max_bwd", "min_bwd"):
    register(_n, "dy, 0 or dy/2: exact but for halving a subnormal dy, |err| <= ulp(ref)/2", _half_ulp)
register("axpy", "a + c*b, two roundings: |err| <= u|c b| + ulp(ref)",
          lambda ref, a, b, c: U * abs64(c * np.asarray(b, dtype=np.float64)) + ulp32(ref))
register("exp", "library exp: |err| <= 8u |ref| + TINY", _rel(8))
register("log", "library log: |err| <= 8u |ref| + TINY", _rel(8))
for _n in ("sin", "cos", "erf", "log1p", "expm1"):
    register(_n, f"library {_n}: |err| <= 8u |ref| + TINY", _rel(8))
register("pow_scalar", "library pow: |err| <= 8u |ref| + TINY", _rel(8))
# The inverse trigonometric and hyperbolic functions. Float32 library results within k ulp of the
# correctly rounded one are within (k + 1/2) ulp(ref) <= (2k + 1) u |ref| of the exact value for a
# normal ref (ulp(r) <= 2u|r|); TINY covers results in the subnormal range (atan(x) = x there).
# The worst k among the kernels: CUDA's documented maxima (CUDA C++ Programming Guide, "Mathematical
# Functions" appendix, single-precision table: atanf, asinf, acosf 2 ulp, atan2f 3, asinhf 3,
# atanhf 3, acoshf 4; from extensive, not exhaustive, tests); NumPy's float32 loops are its SIMD
# (SVML-derived, within 4 ulp on AVX-512) or scalar libm routines (glibc: at most a few ulp). k = 4
# gives 9u; 12u (6 ulp) leaves room for the CUDA figures being measured rather than proven.
for _n in ("atan", "asin", "acos", "asinh", "acosh", "atanh", "atan2"):
    register(_n, f"library {_n}: within 6 ulp, |err| <= 12u |ref| + TINY", _rel(12))
register("tanh", "library tanh: |err| <= 8u |ref| + TINY", _rel(8))
register("sigmoid", "exp, add, divide: |err| <= 16u |ref| + TINY", _rel(16))
register("softplus", "max + log1p(exp(-|x|)): |err| <= 24u |ref| + TINY", _rel(24))
register("safe_log", "log(softplus + 1e-6): |err| <= 34u + 8u |ref| + TINY",
          lambda ref, x: 34 * U + 8 * U * abs64(ref) + TINY)
register("sqrt_bwd", "dy / (2 sqrt x): |err| <= 3u |ref| + TINY", _rel(3))
register("sigmoid_bwd", "dy (y (1 - y)): |err| <= 4u |ref| + TINY", _rel(4))
register("tanh_bwd", "dy (1 - y^2), cancellation in 1 - y^2: |err| <= u y^2 |dy| + 3u |ref| + TINY",
          lambda ref, y, dy: U * abs64(y) ** 2 * abs64(dy) + 3 * U * abs64(ref) + TINY)
register("softplus_bwd", "dy sigmoid(x): |err| <= 18u |ref| + TINY", _rel(18))
register("safe_log_bwd", "dy sigmoid(x) / (softplus(x) + 1e-6): |err| <= 44u |ref| + TINY", _rel(44))


# -- sums: gamma(k) * (the same sum over |terms|) ------------------------------------------


register("reduce_sum", "any order: |err| <= gamma(n-1) sum|x| + ulp(ref)/2",
          lambda ref, x: sum_bound(np.size(x), np.sum(abs64(x)), ref))
register("reduce_mean", "sum, then / float32(n): |err| <= gamma(n-1) sum|x| / n + 2 ulp(ref)",
          lambda ref, x: (gamma(np.size(x) - 1) * np.sum(abs64(x)) / max(np.size(x), 1) + 2 * ulp32(ref))
          if np.size(x) else np.zeros(1))
register("reduce_sum_axis0", "per column: gamma(rows-1) sum|col| + ulp/2",
          lambda ref, b, rows, cols: sum_bound(rows, spec.reduce_sum_axis0(abs64(b), rows, cols), ref))
register("reduce_sum_axis1", "per row: gamma(cols-1) sum|row| + ulp/2",
          lambda ref, b, rows, cols: sum_bound(cols, spec.reduce_sum_axis1(abs64(b), rows, cols), ref))
register("reduce_sum_axis", "per output: gamma(dims[axis]-1) sum|terms| + ulp/2",
          lambda ref, b, dims, axis: sum_bound(dims[axis], spec.reduce_sum_axis(abs64(b), dims, axis), ref))


def _broadcast_terms(in_dims, out_dims) -> int:
    n_in, n_out = int(np.prod(in_dims)), int(np.prod(out_dims))
    return n_out // n_in if n_in else 0


register("reduce_from_broadcast", "per input element: gamma(k-1) sum|terms| + ulp/2, k = out/in elements",
          lambda ref, d, ind, outd, amap: sum_bound(_broadcast_terms(ind, outd),
                                                      spec.reduce_from_broadcast(abs64(d), ind, outd, amap), ref))
register("bmm", "|err| <= gamma(n) (|A| |B|) + n 2**-149 (any order, FMA or not; the last term covers "
          "products that underflow)",
          lambda ref, a, b, batch, m, n, p: gamma(n) * spec.bmm(abs64(a), abs64(b), batch, m, n, p) + n * 2.0**-149)
register("bmm_nt", "as bmm, for a b^T: |err| <= gamma(n) (|A| |B|^T) + n 2**-149",
          lambda ref, a, b, batch, m, n, p: gamma(n) * spec.bmm_nt(abs64(a), abs64(b), batch, m, n, p) + n * 2.0**-149)
register("bmm_tn", "as bmm, for a^T b: |err| <= gamma(n) (|A|^T |B|) + n 2**-149",
          lambda ref, a, b, batch, m, n, p: gamma(n) * spec.bmm_tn(abs64(a), abs64(b), batch, m, n, p) + n * 2.0**-149)


def _multiplicity(indices, limit) -> int:
    idx = np.asarray(indices, dtype=np.int64)
    idx = idx[idx < limit]
    return int(np.bincount(idx).max()) if idx.size else 0


# Fast-mode CUDA scatters add with hardware float atomics (PTX atom/red.add.f32), which flush
# subnormal operands (the value added and the value in memory) and results to zero: each hit may
# lose up to twice the smallest normal, 2 * 2**-126.
FLUSH = 2.0**-126


def _scatter_bound(hits: int, abs_sum, ref):
    return sum_bound(hits + 1, abs_sum, ref) + 2 * hits * FLUSH


register("scatter_add", "per slot: gamma(hits) (|x| + sum|v|) + ulp/2 + 2 hits 2^-126, any order (atomics included)",
          lambda ref, x, v, n, idx, k: _scatter_bound(_multiplicity(idx, n),
                                                      spec.scatter_add(abs64(x), abs64(v), n, idx, k), ref))
register("scatter_add_rows", "per element: gamma(hits) (|mat| + sum|values|) + ulp/2 + 2 hits 2^-126, any order",
          lambda ref, mat, v, rows, cols, idx, k: _scatter_bound(
              _multiplicity(idx, rows), spec.scatter_add_rows(abs64(mat), abs64(v), rows, cols, idx, k), ref))


# -- fused rows ---------------------------------------------------------------------------
def _rows(x, rows, cols):
    x2 = np.asarray(x, dtype=np.float64).reshape(rows, cols)
    with np.errstate(invalid="ignore"):
        m = x2.max(axis=1, keepdims=True) if cols else np.zeros((rows, 1))
        dist = np.abs(x2 - m)
    return x2, m, dist


def _softmax_bound(ref, x, rows, cols):
    """y_j rel err <= u(|x_j - m| + W + 18) + gamma(n-1), W = sum_k y_k |x_k - m| (rounding of x - m
    amplified by exp, the library exp, the sum of the row, the division)."""
    if rows * cols == 0:
        return np.zeros(0)
    _, _, dist = _rows(x, rows, cols)
    y = np.asarray(ref, dtype=np.float64).reshape(rows, cols)
    with np.errstate(invalid="ignore"):
        w = np.sum(y * dist, axis=1, keepdims=True)
    return (y * (U * (dist + w + 18) + gamma(cols - 1)) + TINY).reshape(-1)


def _log_softmax_bound(ref, x, rows, cols):
    """|err| <= u|x_j - m| + rho + 8u|L| + u|y_j|, rho the relative error of the row sum S,
    L = log S = (x_j - m) - y_j."""
    if rows * cols == 0:
        return np.zeros(0)
    _, _, dist = _rows(x, rows, cols)
    y = np.asarray(ref, dtype=np.float64).reshape(rows, cols)
    with np.errstate(invalid="ignore"):
        p = np.exp(y)
        w = np.sum(p * dist, axis=1, keepdims=True)
        lse = np.abs(dist + y)[:, :1] if cols else 0.0
        rho = U * (w + 18) + gamma(cols - 1)
        return (U * dist + rho + 8 * U * np.abs(lse) + U * np.abs(y) + TINY).reshape(-1)


def _softmax_bwd_bound(ref, y, dy, rows, cols):
    y2 = np.asarray(y, dtype=np.float64).reshape(rows, cols)
    d2 = np.asarray(dy, dtype=np.float64).reshape(rows, cols)
    s = np.sum(np.abs(y2 * d2), axis=1, keepdims=True)
    return (np.abs(y2) * gamma(cols) * s).reshape(-1) + 2 * U * abs64(ref) + TINY


def _log_softmax_bwd_bound(ref, y, dy, rows, cols):
    y2 = np.asarray(y, dtype=np.float64).reshape(rows, cols)
    d2 = np.asarray(dy, dtype=np.float64).reshape(rows, cols)
    s_abs = np.sum(np.abs(d2), axis=1, keepdims=True)
    with np.errstate(over="ignore"):
        e = np.exp(y2)
    return (e * (gamma(max(cols - 1, 0)) * s_abs + 10 * U * np.abs(d2.sum(axis=1, keepdims=True)))).reshape(-1) \
        + U * abs64(ref) + TINY


register("softmax_rows", "|err_j| <= y_j (u(|x_j - m| + W + 18) + gamma(n-1)) + TINY", _softmax_bound)
register("log_softmax_rows", "|err_j| <= u|x_j - m| + u(W + 18) + gamma(n-1) + 8u|lse| + u|y_j|", _log_softmax_bound)
register("softmax_rows_bwd", "|err_j| <= |y_j| gamma(n) sum|dy y| + 2u|ref| + TINY", _softmax_bwd_bound)
register("log_softmax_rows_bwd", "|err_j| <= e^y_j (gamma(n-1) sum|dy| + 10u|sum dy|) + u|ref| + TINY",
          _log_softmax_bwd_bound)
register("rand_normal", "within 1 ulp of float32(Box-Muller in float64 with libm) (bitwise equal across devices)",
          lambda ref, n, key: ulp32(ref))


# -- comparing ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Verdict:
    ok: bool
    ratio: float  # max |out - ref| / bound over finite elements (0 when exact and bound 0)
    detail: str


def compare(out: Any, ref: Any, tol: Any) -> Verdict:
    """Check float32 ``out`` against float64 ``ref`` within ``tol``; NaN must meet NaN, inf must meet
    inf (or a ref that float32 rounds to inf)."""
    if isinstance(ref, tuple):
        verdicts = [compare(o, r, t) for o, r, t in zip(out, ref, tol)]
        bad = [v for v in verdicts if not v.ok]
        return Verdict(not bad, max((v.ratio for v in verdicts), default=0.0),
                       "; ".join(v.detail for v in bad))
    o = np.asarray(out, dtype=np.float64).reshape(-1)
    r = np.asarray(ref, dtype=np.float64).reshape(-1)
    t = np.broadcast_to(np.asarray(tol, dtype=np.float64), r.shape)
    # A bound that is NaN (an infinite input times zero in the formula) says nothing: inf.
    t = np.where(np.isnan(t), np.inf, t)
    if o.shape != r.shape:
        return Verdict(False, np.inf, f"shape: got {o.shape}, expected {r.shape}")
    onan, rnan = np.isnan(o), np.isnan(r)
    oinf = np.isinf(o)
    with np.errstate(invalid="ignore", over="ignore"):
        # a finite ref beyond float32 range may round to inf of the same sign
        inf_ok = oinf & ~rnan & (np.sign(o) == np.sign(r)) & (np.abs(r) + t >= F32_OVERFLOW)
        err = np.abs(o - r)
        fin = ~onan & ~rnan & ~oinf & np.isfinite(r)
        ok_elem = (onan & rnan) | (oinf & (o == r)) | inf_ok | (fin & (err <= t))
    if ok_elem.all():
        with np.errstate(divide="ignore", invalid="ignore"):
            ratios = np.where(t[fin] > 0, err[fin] / t[fin], np.where(err[fin] > 0, np.inf, 0.0))
        return Verdict(True, float(ratios.max()) if ratios.size else 0.0, "")
    i = int(np.flatnonzero(~ok_elem)[0])
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = float(np.max(np.where(fin, err / np.where(t > 0, t, np.nan), 0.0))) if fin.any() else np.inf
    nbad = int((~ok_elem).sum())
    return Verdict(False, ratio if np.isfinite(ratio) else np.inf,
                   f"{nbad} of {r.size} elements outside the bound; first at [{i}]: got {o[i]!r}, "
                   f"expected {r[i]!r} +- {t[i]:.3g}")
