"""Primitives of the selective scans (checked, then dispatched like those in ``primitives``).

Layout (seq_len, state) row-major, channels contiguous. The diag form takes A, B, h0 of length
state; the var form takes A, B of length seq_len * state (a coefficient per token) and h0 of
length state:

    H[t, j] = A[j] H[t-1, j] + B[j] X[t, j]            (selective_scan_diag_fwd)
    H[t, j] = A[t, j] H[t-1, j] + B[t, j] X[t, j]      (selective_scan_diag_var_fwd),  H[-1] = h0

The backward primitives take the forward's output H as an argument (the adjoint needs H[t-1];
passing it means nothing is recomputed) and the cotangent dH, and return (dA, dB, dX, dh0): the
exact VJP given that H (see torchlean.spec.scan). seq_len = 0 or state = 0 give empty outputs
(dA, dB, dh0 of zeros).
"""

from __future__ import annotations

from typing import Any

from .buffer import Buffer, check_buffer, same_device, wrap
from .checks import check_product, check_u32
from .oom import run_allocating

__all__ = ["selective_scan_diag_fwd", "selective_scan_diag_bwd", "selective_scan_diag_var_fwd",
           "selective_scan_diag_var_bwd"]


def _dims(op: str, seq_len: Any, state: Any) -> tuple[int, int, int]:
    L, S = check_u32(op, "seq_len", seq_len), check_u32(op, "state", state)
    return L, S, check_product(op, "seq_len*state", L, S)


def _check_inputs(op: str, A: Buffer, B: Buffer, X: Buffer, h0: Buffer, S: int, n: int, var: bool) -> None:
    coef = n if var else S
    check_buffer(op, "A", A, coef)
    check_buffer(op, "B", B, coef)
    check_buffer(op, "X", X, n)
    check_buffer(op, "h0", h0, S)


def _fwd(op: str, var: bool, A: Buffer, B: Buffer, X: Buffer, h0: Buffer, seq_len: int, state: int) -> Buffer:
    L, S, n = _dims(op, seq_len, state)
    _check_inputs(op, A, B, X, h0, S, n, var)
    ctx = same_device(op, A=A, B=B, X=X, h0=h0)
    return wrap(ctx, run_allocating(op, ctx, n, getattr(ctx.backend, op), A._data, B._data, X._data, h0._data, L, S))


def _bwd(op: str, var: bool, A: Buffer, B: Buffer, X: Buffer, h0: Buffer, H: Buffer, dH: Buffer, seq_len: int,
         state: int) -> tuple[Buffer, Buffer, Buffer, Buffer]:
    L, S, n = _dims(op, seq_len, state)
    _check_inputs(op, A, B, X, h0, S, n, var)
    check_buffer(op, "H", H, n)
    check_buffer(op, "dH", dH, n)
    ctx = same_device(op, A=A, B=B, X=X, h0=h0, H=H, dH=dH)
    coef = n if var else S
    out = run_allocating(op, ctx, 2 * coef + n + S, getattr(ctx.backend, op), A._data, B._data, X._data, h0._data, H._data,
               dH._data, L, S)
    return tuple(wrap(ctx, o) for o in out)  # type: ignore[return-value]


def selective_scan_diag_fwd(A: Buffer, B: Buffer, X: Buffer, h0: Buffer, seq_len: int, state: int) -> Buffer:
    """H (seq_len, state): H[t, j] = A[j] H[t-1, j] + B[j] X[t, j] from H[-1] = h0; A, B, h0 of length state."""
    return _fwd("selective_scan_diag_fwd", False, A, B, X, h0, seq_len, state)


def selective_scan_diag_bwd(A: Buffer, B: Buffer, X: Buffer, h0: Buffer, H: Buffer, dH: Buffer, seq_len: int,
                            state: int) -> tuple[Buffer, Buffer, Buffer, Buffer]:
    """(dA, dB, dX, dh0), the VJP of selective_scan_diag_fwd given its output H and the cotangent dH:
    g[t] = dH[t] + A g[t+1], dX = g B, dB = sum_t g X, dA = sum_t g H[t-1] (h0 at t = 0), dh0 = A g[0].
    Sums over time in an order fixed by the shape (bitwise repeatable)."""
    return _bwd("selective_scan_diag_bwd", False, A, B, X, h0, H, dH, seq_len, state)


def selective_scan_diag_var_fwd(A: Buffer, B: Buffer, X: Buffer, h0: Buffer, seq_len: int, state: int) -> Buffer:
    """H (seq_len, state): H[t, j] = A[t, j] H[t-1, j] + B[t, j] X[t, j] from H[-1] = h0 (A, B per token)."""
    return _fwd("selective_scan_diag_var_fwd", True, A, B, X, h0, seq_len, state)


def selective_scan_diag_var_bwd(A: Buffer, B: Buffer, X: Buffer, h0: Buffer, H: Buffer, dH: Buffer, seq_len: int,
                                state: int) -> tuple[Buffer, Buffer, Buffer, Buffer]:
    """(dA, dB, dX, dh0), the VJP of selective_scan_diag_var_fwd given H and dH: g[t] = dH[t] + A[t+1] g[t+1],
    dA[t] = g[t] H[t-1] (h0 at t = 0), dB[t] = g[t] X[t], dX[t] = g[t] B[t], dh0 = A[0] g[0]."""
    return _bwd("selective_scan_diag_var_bwd", True, A, B, X, h0, H, dH, seq_len, state)
