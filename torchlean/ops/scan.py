"""Differentiable selective scans, and mamba_ssm's ``selective_scan`` front end built on them.

* ``selective_scan_diag(A, B, X, h0)``: X (L, *state), A, B, h0 of shape ``state``:
  H[t] = A H[t-1] + B X[t] from h0; one tape node, its VJP is ``selective_scan_diag_bwd`` (which
  takes the forward's output H, so nothing is recomputed).
* ``selective_scan_diag_var(A, B, X, h0)``: the same with A, B of X's shape (a coefficient per token).
* ``selective_scan(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False,
  return_last_state=False)``: the semantics and shapes of mamba_ssm's ``selective_scan_ref``
  (``mamba_ssm.ops.selective_scan_interface``). It lives here, as ``torchlean.ops.selective_scan``
  (it is not a torch.nn.functional name, so it is not in ``FUNCTIONAL``).
"""

from __future__ import annotations

from typing import Any

from .. import autograd
from ..errors import ArgumentError, DTypeError, ShapeError
from ..runtime import primitives as P
from ..runtime.buffer import Buffer, zeros as buffer_zeros
from ._base import Tensor, fbuf, new, numel, same_device
from .elementwise import add, exp, mul, sigmoid, softplus
from .linalg import bmm
from .reduce import sum as _sum
from .shape import expand, permute, reshape, slice0

__all__ = ["selective_scan_diag", "selective_scan_diag_var", "selective_scan"]
# Above this many bytes per (L, b, d, N) tensor, selective_scan recomputes its scan in backward
# instead of keeping the coefficients and states (below it, the second forward costs more time than
# the memory is worth).
_RECOMPUTE_BYTES = 64 << 20
FUNCTIONAL: list[str] = []


def _tensor(op: str, name: str, t: Any) -> Tensor:
    if not isinstance(t, Tensor):
        if isinstance(t, complex) or "complex" in str(getattr(t, "dtype", "")):
            raise ArgumentError(f"{op}: argument {name} is complex; complex selective scans (complex A, B, C) "
                                "are not supported")
        raise DTypeError(f"{op}: argument {name} must be a Tensor, got {type(t).__name__}")
    return t if t._buf is not None else t.float()


def _scan_node(op: str, var: bool, A: Any, B: Any, X: Any, h0: Any) -> Tensor:
    A, B, X, h0 = (_tensor(op, n, v) for n, v in (("A", A), ("B", B), ("X", X), ("h0", h0)))
    if X.ndim < 1:
        raise ShapeError(f"{op}: X must have shape (seq_len, *state), got {tuple(X.shape)}")
    state_shape = tuple(X.shape[1:])
    coef_shape = tuple(X.shape) if var else state_shape
    for name, t, shape in (("A", A, coef_shape), ("B", B, coef_shape), ("h0", h0, state_shape)):
        if tuple(t.shape) != shape:
            raise ShapeError(f"{op}: argument {name} must have shape {shape} for X of shape {tuple(X.shape)}, "
                             f"got {tuple(t.shape)}")
    same_device(op, A, B, X, h0)
    L, S = X.shape[0], numel(state_shape)
    bufs = [fbuf(op, t) for t in (A, B, X, h0)]
    fwd = P.selective_scan_diag_var_fwd if var else P.selective_scan_diag_fwd
    bwd = P.selective_scan_diag_var_bwd if var else P.selective_scan_diag_bwd
    H = fwd(*bufs, L, S)
    parents = (A, B, X, h0)

    def vjp(g: Buffer):
        grads = list(bwd(*bufs, H, g, L, S))
        for k, p in enumerate(parents):
            if not p.requires_grad:
                grads[k].release()
                grads[k] = None
        return grads

    return autograd.record(op, new(H, X.shape), parents, vjp)


def selective_scan_diag(A: Tensor, B: Tensor, X: Tensor, h0: Tensor) -> Tensor:
    """H (L, *state): H[t] = A * H[t-1] + B * X[t], H[-1] = h0; A, B, h0 have shape ``state``."""
    return _scan_node("selective_scan_diag", False, A, B, X, h0)


def selective_scan_diag_var(A: Tensor, B: Tensor, X: Tensor, h0: Tensor) -> Tensor:
    """H (L, *state): H[t] = A[t] * H[t-1] + B[t] * X[t], H[-1] = h0; A, B have X's shape."""
    return _scan_node("selective_scan_diag_var", True, A, B, X, h0)


# -- the mamba front end -------------------------------------------------------------------------------
def _check_shape(op: str, name: str, t: Tensor | None, shape: tuple[int, ...]) -> None:
    if t is not None and tuple(t.shape) != shape:
        raise ShapeError(f"{op}: argument {name} must have shape {shape}, got {tuple(t.shape)}")


def _bc(op: str, name: str, t: Any, batch: int, dim: int, N: int, L: int) -> tuple[Tensor, bool]:
    """B or C: (dim, N) fixed or (batch, N, L) variable; grouped (batch, G, N, L) is refused."""
    t = _tensor(op, name, t)
    if t.ndim == 4:
        raise ArgumentError(f"{op}: argument {name} of shape {tuple(t.shape)} is the grouped form (batch, G, N, L), "
                            "which is not supported; pass (batch, N, L) or (dim, N)")
    if t.ndim == 3:
        _check_shape(op, name, t, (batch, N, L))
        return t, True
    if t.ndim == 2:
        _check_shape(op, name, t, (dim, N))
        return t, False
    raise ShapeError(f"{op}: argument {name} must have shape (batch, N, L) = {(batch, N, L)} or (dim, N) = "
                     f"{(dim, N)}, got {tuple(t.shape)}")


def selective_scan(u: Tensor, delta: Tensor, A: Tensor, B: Tensor, C: Tensor, D: Tensor | None = None,
                   z: Tensor | None = None, delta_bias: Tensor | None = None, delta_softplus: bool = False,
                   return_last_state: bool = False) -> Any:
    """mamba_ssm's selective scan (the semantics and shapes of ``selective_scan_ref``), differentiable in
    every tensor argument. ``torchlean.ops.selective_scan`` (not in torch.nn.functional).

    u, delta: (batch, dim, L); A: (dim, N) real; B, C: (batch, N, L) (variable) or (dim, N) (fixed);
    D, delta_bias: (dim,); z: (batch, dim, L). With dt = softplus(delta + delta_bias) (softplus only
    if ``delta_softplus``) and the state x (batch, dim, N) starting at 0:

        x[l] = exp(dt[l] A) x[l-1] + dt[l] B[l] u[l],   y[l] = sum_n x[l] C[l],
        out = (y + D u) * silu(z)

    Returns out (batch, dim, L), or (out, last_state) with last_state = x[L-1] (batch, dim, N) when
    ``return_last_state`` (zeros when L = 0). Unlike mamba_ssm's CUDA function, the last state is
    differentiable too. Not supported (ArgumentError): complex A, B, C, and the grouped B, C of shape
    (batch, G, N, L).

    Built from the tape ops above: the discretized exp(dt A) and the (dt u, B) factors are
    materialized as (L, batch*dim*N) tensors for ``selective_scan_diag_var``; y is a batched
    matrix-vector product (variable C) or a product and a sum over N (fixed C).
    """
    op = "selective_scan"
    u, delta, A = _tensor(op, "u", u), _tensor(op, "delta", delta), _tensor(op, "A", A)
    if u.ndim != 3:
        raise ShapeError(f"{op}: argument u must have shape (batch, dim, L), got {tuple(u.shape)}")
    batch, dim, L = u.shape
    _check_shape(op, "delta", delta, (batch, dim, L))
    if A.ndim != 2 or A.shape[0] != dim:
        raise ShapeError(f"{op}: argument A must have shape (dim, N) with dim = {dim}, got {tuple(A.shape)}")
    N = A.shape[1]
    B, var_b = _bc(op, "B", B, batch, dim, N, L)
    C, var_c = _bc(op, "C", C, batch, dim, N, L)
    D = None if D is None else _tensor(op, "D", D)
    z = None if z is None else _tensor(op, "z", z)
    delta_bias = None if delta_bias is None else _tensor(op, "delta_bias", delta_bias)
    _check_shape(op, "D", D, (dim,))
    _check_shape(op, "z", z, (batch, dim, L))
    _check_shape(op, "delta_bias", delta_bias, (dim,))
    same_device(op, *(t for t in (u, delta, A, B, C, D, z, delta_bias) if t is not None))
    dev = u.device

    dt = delta
    if delta_bias is not None:
        dt = add(dt, reshape(delta_bias, (dim, 1)))
    if delta_softplus:
        dt = softplus(dt)
    dt_t = reshape(permute(dt, (2, 0, 1)), (L, batch, dim, 1))          # (L, b, d, 1)
    u_t = reshape(permute(u, (2, 0, 1)), (L, batch, dim, 1))
    S = batch * dim * N

    def states(dt_t: Tensor, u_t: Tensor, A: Tensor, B: Tensor) -> Tensor:
        """Every step's state x (L, S), from the discretized coefficients (L, b, d, N) each."""
        full = (L, batch, dim, N)
        a_bar = exp(mul(dt_t, A))
        b_coef = expand(mul(dt_t, u_t), full)                           # dt u
        x_in = expand(reshape(permute(B, (2, 0, 1)), (L, batch, 1, N)), full) if var_b else expand(B, full)
        h0 = Tensor._wrap(buffer_zeros(S, dev), (S,))
        return selective_scan_diag_var(reshape(a_bar, (L, S)), reshape(b_coef, (L, S)), reshape(x_in, (L, S)), h0)

    def readout(H: Tensor, C: Tensor) -> Tensor:
        """y (L, b, d) = sum over n of x C."""
        if var_c:
            c_t = reshape(permute(C, (2, 0, 1)), (L * batch, N, 1))     # (L b, N, 1)
            return reshape(bmm(reshape(H, (L * batch, dim, N)), c_t), (L, batch, dim))
        return _sum(mul(reshape(H, (L, batch, dim, N)), C), dim=3)

    if return_last_state or 4 * L * S < _RECOMPUTE_BYTES:
        H = states(dt_t, u_t, A, B)
        y = readout(H, C)
    else:
        # The (L, b, d, N) coefficients and states are the step's largest tensors (Mamba-scale:
        # 400 MB each per layer, five kept per layer for backward): keep none; backward runs the
        # scan again, one layer at a time (autograd.recompute; the same gradient bits).
        y = autograd.recompute("selective_scan", lambda dt_t, u_t, A, B, C: readout(states(dt_t, u_t, A, B), C),
                               [dt_t, u_t, A, B, C])
    out = permute(y, (1, 2, 0))                                         # (b, d, L)
    if D is not None:
        out = add(out, mul(u, reshape(D, (dim, 1))))
    if z is not None:
        out = mul(out, mul(z, sigmoid(z)))
    if not return_last_state:
        return out
    if L == 0:
        return out, Tensor._wrap(buffer_zeros(S, dev), (batch, dim, N))
    last = reshape(slice0(H, L - 1, 1), (batch, dim, N))
    return out, last
