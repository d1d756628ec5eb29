"""CPU kernels of the selective scans (Numba; layout (seq_len, state), channels contiguous).

The recurrence runs sequentially in time, in float32, exactly as written
(h = fl(fl(a h) + fl(b x)); no fastmath, no FMA contraction), so each output is IEEE float32
arithmetic in a fixed order. The loop nest is time outside, a block of channels inside, so each
step reads and writes contiguous row segments; the running state (h, or the adjoint g) is a private
row, so LLVM sees no aliasing and vectorizes the channel loop (updating H in place would not). Blocks of channels go to
Numba's threads (``prange``) when there are enough channels; otherwise one thread walks all of
them. The var forms read the coefficient row of the current token (coefficient stride = state),
the diag forms the same vector at every step (stride 0).

Backward: the adjoint g runs backwards in time in float32 (g = fl(dH + fl(a' g))); dX, and the
var form's dA, dB, are one product each; the diag form's dA, dB add the float32 products in
float64 in time order and round once. Everything is bitwise repeatable.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .parallel import parts

F32 = np.float32

__all__ = ["selective_scan_diag_fwd", "selective_scan_diag_bwd", "selective_scan_diag_var_fwd",
           "selective_scan_diag_var_bwd"]

_MIN_BLOCK = 2048           # channels per parallel task (8 KiB row segments)
_PARALLEL_ELEMS = 1 << 20   # below this many elements one thread does it all (the scan is memory-bound)


@njit(cache=True, error_model="numpy", boundscheck=False)
def _fwd_block(A, B, X, h0, L, S, cs, j0, j1, H):
    # The running state lives in a private row (h), so LLVM sees no aliasing between the row it
    # reads and the row it writes, and vectorizes the channel loop.
    n = j1 - j0
    h = h0[j0:j1].copy()
    for t in range(L):
        row, crow = t * S + j0, t * cs + j0
        a, b, x, out = A[crow:crow + n], B[crow:crow + n], X[row:row + n], H[row:row + n]
        for k in range(n):
            v = a[k] * h[k] + b[k] * x[k]
            h[k] = v
            out[k] = v


@njit(cache=True, error_model="numpy", boundscheck=False)
def _bwd_block(A, B, X, h0, H, dH, L, S, cs, j0, j1, dA, dB, dX, dh0):
    n = j1 - j0
    var = cs != 0
    g = np.zeros(n, np.float32)
    acc_a, acc_b = np.zeros(n), np.zeros(n)
    for t in range(L - 1, -1, -1):
        row, crow = t * S + j0, t * cs + j0
        d, b, x, dx = dH[row:row + n], B[crow:crow + n], X[row:row + n], dX[row:row + n]
        hp = h0[j0:j1] if t == 0 else H[row - S:row - S + n]
        if t == L - 1:
            for k in range(n):
                g[k] = d[k]
        else:
            a = A[crow + cs:crow + cs + n]  # the coefficient of step t + 1
            for k in range(n):
                g[k] = d[k] + a[k] * g[k]
        for k in range(n):
            dx[k] = g[k] * b[k]
        if var:
            da, db = dA[row:row + n], dB[row:row + n]
            for k in range(n):
                da[k] = g[k] * hp[k]
                db[k] = g[k] * x[k]
        else:
            for k in range(n):
                acc_a[k] += np.float64(g[k] * hp[k])
                acc_b[k] += np.float64(g[k] * x[k])
    if L == 0:
        for k in range(n):
            dh0[j0 + k] = 0.0
    else:
        a0 = A[j0:j1]  # step 0's coefficient (diag and var alike)
        for k in range(n):
            dh0[j0 + k] = a0[k] * g[k]
    if not var:
        for k in range(n):
            dA[j0 + k] = np.float32(acc_a[k])
            dB[j0 + k] = np.float32(acc_b[k])


@njit(cache=True, error_model="numpy", parallel=True)
def _fwd_par(A, B, X, h0, L, S, cs, blk, H):
    nb = (S + blk - 1) // blk
    for b in prange(nb):
        _fwd_block(A, B, X, h0, L, S, cs, b * blk, min(S, (b + 1) * blk), H)


@njit(cache=True, error_model="numpy", parallel=True)
def _bwd_par(A, B, X, h0, H, dH, L, S, cs, blk, dA, dB, dX, dh0):
    nb = (S + blk - 1) // blk
    for b in prange(nb):
        _bwd_block(A, B, X, h0, H, dH, L, S, cs, b * blk, min(S, (b + 1) * blk), dA, dB, dX, dh0)


def _block(L: int, S: int) -> int:
    """Channels per task, or 0 for one serial pass: one task of >= _MIN_BLOCK channels per thread."""
    width = parts(L * S, S // _MIN_BLOCK, _PARALLEL_ELEMS // 2)
    if width == 1:
        return 0
    return max(_MIN_BLOCK, -(-S // width))


def _fwd(A, B, X, h0, L, S, var):
    H = np.empty(L * S, F32)
    cs = S if var else 0
    blk = _block(L, S)
    if blk:
        _fwd_par(A, B, X, h0, L, S, cs, blk, H)
    else:
        _fwd_block(A, B, X, h0, L, S, cs, 0, S, H)
    return H


def _bwd(A, B, X, h0, H, dH, L, S, var):
    n = L * S
    cs = S if var else 0
    dA, dB = np.empty(n if var else S, F32), np.empty(n if var else S, F32)
    dX, dh0 = np.empty(n, F32), np.empty(S, F32)
    blk = _block(L, S)
    if blk:
        _bwd_par(A, B, X, h0, H, dH, L, S, cs, blk, dA, dB, dX, dh0)
    else:
        _bwd_block(A, B, X, h0, H, dH, L, S, cs, 0, S, dA, dB, dX, dh0)
    return dA, dB, dX, dh0


def selective_scan_diag_fwd(A, B, X, h0, seq_len, state):
    return _fwd(A, B, X, h0, seq_len, state, False)


def selective_scan_diag_bwd(A, B, X, h0, H, dH, seq_len, state):
    return _bwd(A, B, X, h0, H, dH, seq_len, state, False)


def selective_scan_diag_var_fwd(A, B, X, h0, seq_len, state):
    return _fwd(A, B, X, h0, seq_len, state, True)


def selective_scan_diag_var_bwd(A, B, X, h0, H, dH, seq_len, state):
    return _bwd(A, B, X, h0, H, dH, seq_len, state, True)
