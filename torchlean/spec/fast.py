"""Float64 references of the fast-kernel family (seed page FastKernels): fast_gemm, mse_loss_fwd,
mse_loss_bwd.

Written for clarity and independence from the kernels: the GEMM is an explicit sum of products
through ``np.einsum`` without BLAS (optimize=False), the MSE sum is ``math.fsum`` (an exactly
rounded sum of the float64 squares). The precision flag ``fp64`` of fast_gemm does not change the
reference (the exact product); it changes the contract the kernel must meet.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["fast_gemm", "linear_bwd", "mse_loss_fwd", "mse_loss_bwd"]

F64 = np.float64


def _operand(x, rows: int, cols: int, trans: int) -> np.ndarray:
    """The logical (rows, cols) operand: stored (rows, cols), or (cols, rows) read transposed."""
    x = np.asarray(x, dtype=F64)
    return x.reshape(cols, rows).T if trans else x.reshape(rows, cols)


def fast_gemm(a, b, bias, m, k, n, trans_a, trans_b, fp64):
    """out = op(a) (m, k) @ op(b) (k, n) (+ bias (n,) on every row), flat (m*n,)."""
    A = _operand(a, m, k, trans_a)
    B = _operand(b, k, n, trans_b)
    with np.errstate(all="ignore"):
        out = np.einsum("ik,kj->ij", A, B, optimize=False) if k else np.zeros((m, n), dtype=F64)
        if bias is not None:
            out = out + np.asarray(bias, dtype=F64).reshape(1, n)
    return np.ascontiguousarray(out, dtype=F64).reshape(-1)


def linear_bwd(g, x, w, rows, n_in, n_out):
    """(dx, dw, db) of y = x w^T + b: g (rows, n_out) w (n_out, n_in), g^T x (n_out, n_in) and the
    column sums of g (n_out,), flat."""
    G = np.asarray(g, dtype=F64).reshape(rows, n_out)
    X = np.asarray(x, dtype=F64).reshape(rows, n_in)
    W = np.asarray(w, dtype=F64).reshape(n_out, n_in)
    with np.errstate(all="ignore"):
        dx = np.einsum("ro,oi->ri", G, W, optimize=False) if n_out else np.zeros((rows, n_in))
        dw = np.einsum("ro,ri->oi", G, X, optimize=False) if rows else np.zeros((n_out, n_in))
        db = G.sum(axis=0)
    return dx.reshape(-1), dw.reshape(-1), db


def mse_loss_fwd(input, target, n, mean):
    """sum_i (input_i - target_i)^2, divided by n when mean (mean of nothing: NaN), as (1,)."""
    x = np.asarray(input, dtype=F64).reshape(-1)
    t = np.asarray(target, dtype=F64).reshape(-1)
    with np.errstate(all="ignore"):
        sq = (x - t) ** 2
        if np.isnan(sq).any():
            s = math.nan
        elif np.isinf(sq).any():
            s = math.inf
        else:
            s = math.fsum(sq.tolist())
        if mean:
            s = s / n if n else math.nan
    return np.array([s], dtype=F64)


def mse_loss_bwd(input, target, g, n, mean):
    """d loss / d input = g * 2 (input - target) (/ n when mean), flat (n,)."""
    x = np.asarray(input, dtype=F64).reshape(-1)
    t = np.asarray(target, dtype=F64).reshape(-1)
    g0 = float(np.asarray(g, dtype=F64).reshape(-1)[0])
    with np.errstate(all="ignore"):
        d = g0 * 2.0 * (x - t)
        return d / n if (mean and n) else d
