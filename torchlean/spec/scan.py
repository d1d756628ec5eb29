"""Float64 reference of the selective-scan family: the diagonal affine recurrence and its VJP.

Layout: (seq_len, state) row-major, channels contiguous; A, B, h0 have length ``state`` (diag
form) or A, B have length seq_len * state (var form: one coefficient per token and channel).

    H[t, j] = A[j] H[t-1, j] + B[j] X[t, j]            (diag),   H[-1, j] = h0[j]
    H[t, j] = A[t, j] H[t-1, j] + B[t, j] X[t, j]      (var)

The backward passes take the forward output H (so nothing is recomputed) and the cotangent dH,
and return (dA, dB, dX, dh0), the exact VJP *given that H*: with the adjoint

    g[L-1] = dH[L-1],   g[t] = dH[t] + A[t+1] g[t+1]   (diag: A[j] for A[t+1, j])

dX = g B, dB = g X, dA = g Hprev (Hprev[t] = H[t-1], Hprev[0] = h0) summed over t in the diag
form (elementwise in the var form), dh0 = A[0] g[0] (0 when seq_len = 0).

Everything is the plain sequential recurrence in float64, one time step at a time (vectorized
over channels only); the kernels use a chunked scan of composed affine maps (CUDA) or a
sequential float32 loop (CPU), none of which is shared with this file.

``selective_scan_ref`` (not a primitive) is a float64 NumPy port of mamba_ssm's
``selective_scan_ref``, the oracle of ``torchlean.ops.selective_scan``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["selective_scan_diag_fwd", "selective_scan_diag_bwd", "selective_scan_diag_var_fwd",
           "selective_scan_diag_var_bwd"]


def _f64(a, n=None):
    a = np.asarray(a, dtype=np.float64).reshape(-1)
    return a


def _coef(a, t, seq_len, state, var):
    """Row t of a per-token coefficient (var) or the per-channel vector (diag)."""
    return a.reshape(seq_len, state)[t] if var else a


def _forward(A, B, X, h0, seq_len, state, var):
    A, B, X, h0 = _f64(A), _f64(B), _f64(X), _f64(h0)
    X2 = X.reshape(seq_len, state)
    H = np.empty((seq_len, state))
    h = h0.copy()
    with np.errstate(all="ignore"):
        for t in range(seq_len):
            h = _coef(A, t, seq_len, state, var) * h + _coef(B, t, seq_len, state, var) * X2[t]
            H[t] = h
    return H.reshape(-1)


def _backward(A, B, X, h0, H, dH, seq_len, state, var):
    A, B, X, h0, H, dH = (_f64(v) for v in (A, B, X, h0, H, dH))
    X2, H2, dH2 = X.reshape(seq_len, state), H.reshape(seq_len, state), dH.reshape(seq_len, state)
    dX = np.empty((seq_len, state))
    if var:
        dA, dB = np.empty((seq_len, state)), np.empty((seq_len, state))
    else:
        dA, dB = np.zeros(state), np.zeros(state)
    dh0 = np.zeros(state)
    g = None
    with np.errstate(all="ignore"):
        for t in range(seq_len - 1, -1, -1):
            # the adjoint: g[t] = dH[t] + A[t+1] g[t+1]; the last step has no successor
            g = dH2[t].copy() if g is None else dH2[t] + _coef(A, t + 1, seq_len, state, var) * g
            hprev = h0 if t == 0 else H2[t - 1]
            dX[t] = g * _coef(B, t, seq_len, state, var)
            if var:
                dA[t] = g * hprev
                dB[t] = g * X2[t]
            else:
                dA += g * hprev
                dB += g * X2[t]
        if g is not None:
            dh0 = _coef(A, 0, seq_len, state, var) * g
    return dA.reshape(-1), dB.reshape(-1), dX.reshape(-1), dh0


def selective_scan_diag_fwd(A, B, X, h0, seq_len, state):
    """H (seq_len * state): H[t, j] = A[j] H[t-1, j] + B[j] X[t, j], H[-1] = h0."""
    return _forward(A, B, X, h0, seq_len, state, var=False)


def selective_scan_diag_bwd(A, B, X, h0, H, dH, seq_len, state):
    """(dA, dB, dX, dh0) of selective_scan_diag_fwd, given its output H and the cotangent dH."""
    return _backward(A, B, X, h0, H, dH, seq_len, state, var=False)


def selective_scan_diag_var_fwd(A, B, X, h0, seq_len, state):
    """H (seq_len * state): H[t, j] = A[t, j] H[t-1, j] + B[t, j] X[t, j], H[-1] = h0."""
    return _forward(A, B, X, h0, seq_len, state, var=True)


def selective_scan_diag_var_bwd(A, B, X, h0, H, dH, seq_len, state):
    """(dA, dB, dX, dh0) of selective_scan_diag_var_fwd (dA, dB per token), given H and dH."""
    return _backward(A, B, X, h0, H, dH, seq_len, state, var=True)


# -- the front end's oracle ----------------------------------------------------------------------------
def _softplus64(x):
    return np.maximum(x, 0.0) + np.log1p(np.exp(-np.abs(x)))


def selective_scan_ref(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False,
                       return_last_state=False):
    """mamba_ssm's selective_scan_ref in float64 NumPy (real A; B, C either (dim, N) fixed or
    (batch, N, L) variable). u, delta, z: (batch, dim, L); A: (dim, N); D, delta_bias: (dim,).
    Returns out (batch, dim, L), and the last state (batch, dim, N) when asked."""
    u = np.asarray(u, np.float64)
    delta = np.asarray(delta, np.float64)
    A, B, C = (np.asarray(v, np.float64) for v in (A, B, C))
    if delta_bias is not None:
        delta = delta + np.asarray(delta_bias, np.float64)[:, None]
    if delta_softplus:
        delta = _softplus64(delta)
    batch, dim, L = u.shape
    N = A.shape[1]
    x = np.zeros((batch, dim, N))
    delta_a = np.exp(np.einsum("bdl,dn->bdln", delta, A))
    if B.ndim == 2:
        delta_b_u = np.einsum("bdl,dn,bdl->bdln", delta, B, u)
    else:
        delta_b_u = np.einsum("bdl,bnl,bdl->bdln", delta, B, u)
    ys = []
    for i in range(L):
        x = delta_a[:, :, i] * x + delta_b_u[:, :, i]
        if C.ndim == 2:
            y = np.einsum("bdn,dn->bd", x, C)
        else:
            y = np.einsum("bdn,bn->bd", x, C[:, :, i])
        ys.append(y)
    y = np.stack(ys, axis=2) if ys else np.zeros((batch, dim, 0))
    out = y if D is None else y + u * np.asarray(D, np.float64)[:, None]
    if z is not None:
        z = np.asarray(z, np.float64)
        out = out * (z / (1.0 + np.exp(-z)))
    return (out, x) if return_last_state else out
