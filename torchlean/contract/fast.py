"""Contracts of the fast-kernel family: fast_gemm (fp32 and fp64), mse_loss_fwd, mse_loss_bwd.

Notation: u = 2^-24, gamma(k) = k u / (1 - k u) (float32), u64 = 2^-53 and gamma64(k) = k u64 /
(1 - k u64) (float64), S = 2^-149 (the smallest float32 subnormal). Inputs are float32 values,
exact in float64.

fast_gemm, fp64 = 0 (float32 GEMM, then the bias added in float32, or by cuBLAS with beta = 1):
  each output is a sum of k products and the bias, k + 1 terms with the bias exact, so Higham's
  any-order bound (sec. 3.1, FMA or not) applies with k + 1 terms:
      |err| <= gamma(k + 1) (sum_j |a_ij||b_jk| + |bias_k|) + (k + 1) S
  the last term covering products (and the final add) that underflow into subnormals. This is
  bmm's bound with one more term. (Like bmm's, it holds with TF32 off: TF32 is outside it.)

fast_gemm, fp64 = 1 (inputs widened to float64, float64 GEMM, bias added in float64, ONE rounding
  to float32): the float64 value y has |y - ref| <= e64 = gamma64(k + 1) (sum |a||b| + |bias|)
  for any order of summation, FMA or not, with or without split-K (no underflow: a product of two
  float32 values is >= 2^-298, far inside float64's normal range). We allow twice that (2 e64),
  which also covers an implementation that rounds the float64 GEMM and then adds the bias in a
  second float64 rounding. The rounding to float32 adds u |y| <= u (|ref| + e64), or at most
  S / 2 when y is subnormal in float32:
      |err| <= u |ref| + 2 gamma64(k + 1) (sum |a||b| + |bias|) (1 + u) + S
  For k up to ~10^6 the second term is ~10^-10 of sum |a||b|: on data where the result cancels
  (|ref| << sum |a||b|) a GEMM that accumulates in float32 misses this bound by orders of
  magnitude, so the contract tells fp64 from fp32 (the table has such cases).

mse_loss_fwd: every term (x - t)^2 is formed in float64 (the difference with relative error <= u64,
  the square with one more rounding: 3 u64 per term, all terms >= 0) and summed in float64 in any
  fixed order (gamma64(n - 1) of the sum of the terms, which, all terms being >= 0, is the result
  itself); the mean divides in float64 (u64); then one rounding to float32:
      |err| <= u |ref| + gamma64(n + 3) |ref| (1 + u) + S
  i.e. correctly rounded to within a hair: a kernel that forms the difference or the square in
  float32, or accumulates in float32, fails it.

mse_loss_bwd: out_i = fl(fl(fl(x_i - t_i) * g) * c) with c = fl32(2 / n) (mean) or 2 (sum), the
  same operations, in the same order, as mse_loss's VJP (sub, mul by the broadcast g, scale by
  2/n): four relative roundings (c, the difference, two products) give gamma(4) |ref|; a product
  that underflows loses at most S / 2, multiplied by c <= 2 when it is the first product, so
      |err| <= gamma(4) |ref| + 4 S
  (a difference that is subnormal is exact).
"""

from __future__ import annotations

import numpy as np

from .core import U, abs64, gamma, register, sum_bound

__all__: list[str] = []

U64 = 2.0**-53
S = 2.0**-149


def gamma64(k: float) -> float:
    k = max(float(k), 0.0)
    return k * U64 / (1.0 - k * U64) if k * U64 < 0.5 else np.inf


def _abs_gemm(a, b, bias, m, k, n, trans_a, trans_b):
    """sum_j |a_ij||b_jk| + |bias_k| (in float64; the spec's own GEMM on absolute values)."""
    from .. import spec

    with np.errstate(all="ignore"):
        return spec.fast_gemm(abs64(a), abs64(b), None if bias is None else abs64(bias), m, k, n, trans_a, trans_b, 0)


def _gemm_bound(ref, a, b, bias, m, k, n, trans_a, trans_b, fp64):
    mag = _abs_gemm(a, b, bias, m, k, n, trans_a, trans_b)
    with np.errstate(all="ignore"):
        if fp64:
            return U * abs64(ref) + 2 * gamma64(k + 1) * mag * (1 + U) + S
        return gamma(k + 1) * mag + (k + 1) * S


def _linear_bwd_bound(ref, g, x, w, rows, n_in, n_out):
    from .. import spec

    ag, ax, aw = abs64(g), abs64(x), abs64(w)
    with np.errstate(all="ignore"):
        mdx, mdw, mdb = spec.linear_bwd(ag, ax, aw, rows, n_in, n_out)
        # dx, dw: a GEMM each, in any order (bmm's bound); db: a column sum (reduce_sum_axis0's).
        return gamma(n_out) * mdx + n_out * S, gamma(rows) * mdw + rows * S, sum_bound(rows, mdb, ref[2])


def _mse_fwd_bound(ref, input, target, n, mean):
    r = abs64(ref)
    with np.errstate(all="ignore"):
        return U * r + gamma64(n + 3) * r * (1 + U) + S


def _mse_bwd_bound(ref, input, target, g, n, mean):
    return gamma(4) * abs64(ref) + 4 * S


register("fast_gemm",
          "fp32: |err| <= gamma(k+1) (|A||B| + |bias|) + (k+1) 2^-149 (any order); fp64: float64 GEMM and bias, "
          "one rounding: |err| <= u|ref| + 2 gamma64(k+1) (|A||B| + |bias|) (1+u) + 2^-149",
          _gemm_bound)
register("linear_bwd",
          "(dx, dw, db) = (g W, g^T x, column sums of g): |err| <= gamma(n_out)|g||W| + n_out 2^-149, "
          "gamma(rows)|g|^T|x| + rows 2^-149, gamma(rows-1) sum|g| + ulp/2 (bmm's, bmm_tn's and reduce_sum_axis0's bounds)",
          _linear_bwd_bound)
register("mse_loss_fwd",
          "squares and sum in float64, one rounding: |err| <= u|ref| + gamma64(n+3) |ref| (1+u) + 2^-149",
          _mse_fwd_bound)
register("mse_loss_bwd",
          "fl(fl(fl(x - t) g) fl32(2/n)) (2 for sum): |err| <= gamma(4) |ref| + 4 2^-149",
          _mse_bwd_bound)
