"""Every differentiable op: its VJP on the tape against central finite differences of a float64 oracle.

For each op we write an independent float64 reference ``ref`` in plain NumPy (never calling
torchlean), draw float32 inputs ``x`` (away from kinks for relu/abs/clamp/max/min, positive for
sqrt/log/reciprocal) and a float32 cotangent ``w``, and compare

    ours = d/dx sum(w * op(x))   (torchlean, float32, ``op(x).backward(w)`` through the tape)
    fd   = central differences of sum(w * ref(x)) in float64, h = 1e-6

Tolerance (``_within``):  |ours - fd| <= 1e-4 * (|fd| + 0.1 * max|fd|) + 1e-6.

* ours carries float32 rounding: each primitive is within a few u = 2**-24 ~ 6e-8 relative of its
  exact value (torchlean.contract), and the handful of primitives in a VJP (at most ~10 terms in
  a sum here) multiply that by the conditioning of the op; 1e-4 relative leaves a margin of
  ~100x over k*u for every op below.
* Entries that are small because of cancellation (softmax: y * (w - sum(w y)); sums of +- terms
  in matmul) have an error that scales with the *large* terms that cancelled, not with
  themselves: hence the 1e-4 * 0.1 * max|fd| term (1e-5 of the largest gradient entry).
* fd itself: truncation error h**2/6 |f'''| ~ 1e-12, cancellation eps64 |f| / h ~ 1e-10 * |f|
  for |f| <= 10; both far below the 1e-6 absolute floor, which only exists for entries that are
  exactly 0 (masked by relu/clamp/gather).

Discrimination: every case also checks that the same tolerance REJECTS 2 * fd and -fd (a VJP off
by a factor of 2 or with the wrong sign), i.e. that the gradient is large enough for the check
to mean something. Inputs are drawn from a seed fixed per case, so every run checks the same
numbers.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pytest

import torchlean as tl
from torchlean import ops
from torchlean.runtime import derive_key
from torchlean.spec import rng as spec_rng

F32 = np.float32
H = 1e-6


# -- tolerance ---------------------------------------------------------------------------------
def _tol(fd: np.ndarray, floor: float = 1e-6) -> np.ndarray:
    """1e-4 relative to each element and to a tenth of the largest, plus an absolute ``floor``."""
    fd = np.asarray(fd, dtype=np.float64)
    scale = float(np.max(np.abs(fd))) if fd.size else 0.0
    return 1e-4 * (np.abs(fd) + 0.1 * scale) + floor


def _within(ours: np.ndarray, fd: np.ndarray, floor: float = 1e-6) -> bool:
    ours = np.asarray(ours, dtype=np.float64)
    fd = np.asarray(fd, dtype=np.float64)
    return ours.shape == fd.shape and bool(np.all(np.abs(ours - fd) <= _tol(fd, floor)))


def _report(ours: np.ndarray, fd: np.ndarray, floor: float = 1e-6) -> str:
    err = np.abs(np.asarray(ours, np.float64) - fd)
    i = int(np.argmax(err / _tol(fd, floor))) if err.size else 0
    return (f"max err/tol = {float(np.max(err / _tol(fd, floor))):.3g}; at flat [{i}] ours={np.ravel(ours)[i]!r} "
            f"fd={np.ravel(fd)[i]!r}\nours=\n{ours}\nfd=\n{fd}")


# -- finite differences ------------------------------------------------------------------------
def fd_grads(ref: Callable[..., Any], xs: list[np.ndarray], w: np.ndarray) -> list[np.ndarray]:
    """Central differences (float64, step H) of sum(w * ref(*xs)) wrt every element of every input."""
    xs64 = [np.array(x, dtype=np.float64) for x in xs]
    w64 = np.asarray(w, dtype=np.float64)

    def f(args: list[np.ndarray]) -> float:
        return float(np.sum(w64 * np.asarray(ref(*args), dtype=np.float64)))

    grads = []
    for k, x in enumerate(xs64):
        g = np.zeros_like(x)
        for idx in np.ndindex(*x.shape):
            plus = [a.copy() for a in xs64]
            minus = [a.copy() for a in xs64]
            plus[k][idx] += H
            minus[k][idx] -= H
            g[idx] = (f(plus) - f(minus)) / (2 * H)
        grads.append(g)
    return grads


# -- input generators ---------------------------------------------------------------------------
def normal(*shape: int, scale: float = 1.0):
    return lambda rng: (rng.standard_normal(shape) * scale).astype(F32)


def positive(*shape: int):
    return lambda rng: rng.uniform(0.5, 2.0, shape).astype(F32)


def away(*shape: int, points: tuple[float, ...] = (0.0,), lo: float = -2.0, hi: float = 2.0, gap: float = 0.05):
    """Uniform values in [lo, hi] at least ``gap`` (> 1e-2) from every kink in ``points``."""
    def draw(rng):
        x = rng.uniform(lo, hi, shape)
        for _ in range(100):
            bad = np.zeros(shape, dtype=bool)
            for p in points:
                bad |= np.abs(x - p) < gap
            if not bad.any():
                return x.astype(F32)
            x[bad] = rng.uniform(lo, hi, int(bad.sum()))
        raise AssertionError("could not draw inputs away from the kinks")
    return draw


def nonzero(*shape: int):
    """|x| in [0.5, 2] with a random sign: a safe denominator."""
    def draw(rng):
        return (rng.uniform(0.5, 2.0, shape) * rng.choice([-1.0, 1.0], shape)).astype(F32)
    return draw


def separated_pair(*shape: int):
    """Two float32 arrays whose elementwise gap is > 0.05 (max/min away from ties)."""
    def draw(rng):
        a = rng.standard_normal(shape)
        b = rng.standard_normal(shape)
        close = np.abs(a - b) < 0.05
        b[close] = a[close] + 0.5
        return [a.astype(F32), b.astype(F32)]
    return draw


# -- float64 references (NumPy only) -----------------------------------------------------------
def np_sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def np_softplus(x):
    return np.logaddexp(0.0, x)


def np_softmax(x, axis):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def np_log_softmax(x, axis):
    m = np.max(x, axis=axis, keepdims=True)
    return x - m - np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True))


def np_gather(x, idx):
    """x[idx] with an out-of-bounds index reading 0 (rows of zeros for 2-D x)."""
    idx = np.asarray(idx)
    ok = idx < x.shape[0]
    out = x[np.where(ok, idx, 0)]
    mask = ok.reshape((-1,) + (1,) * (x.ndim - 1))
    return np.where(mask, out, 0.0)


def np_scatter_add(x, idx, v):
    out = np.array(x, dtype=np.float64, copy=True)
    for j, i in enumerate(idx):
        if i < x.shape[0]:
            out[i] = out[i] + v[j]
    return out


# -- the table ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    name: str
    inputs: Callable[[np.random.Generator], Any]  # -> one array or a list of arrays
    ours: Callable[..., Any]
    ref: Callable[..., Any]


def C(name, inputs, ours, ref):
    return pytest.param(Case(name, inputs, ours, ref), id=name)


def many(*gens):
    return lambda rng: [g(rng) for g in gens]


IDX_REP = np.array([2, 0, 2, 3])
MASK = np.array([[True, False, True], [False, False, True], [True, True, False], [False, True, True]])
LO, HI = -0.5, 0.8

CASES = [
    # elementwise, unary
    C("neg", normal(3, 4), ops.neg, lambda x: -x),
    C("abs", away(3, 4), ops.abs, np.abs),
    C("sqrt", positive(3, 4), ops.sqrt, np.sqrt),
    C("exp", normal(3, 4), ops.exp, np.exp),
    C("log", positive(3, 4), ops.log, np.log),
    C("reciprocal", nonzero(3, 4), ops.reciprocal, lambda x: 1.0 / x),
    C("clamp", away(3, 5, points=(LO, HI)), lambda x: ops.clamp(x, LO, HI), lambda x: np.clip(x, LO, HI)),
    C("clamp_min_only", away(3, 5, points=(LO,)), lambda x: ops.clamp(x, min=LO), lambda x: np.maximum(x, LO)),
    C("clamp_max_only", away(3, 5, points=(HI,)), lambda x: x.clamp(max=HI), lambda x: np.minimum(x, HI)),
    C("relu", away(3, 4), ops.relu, lambda x: np.maximum(x, 0.0)),
    C("leaky_relu", away(3, 4), lambda x: ops.leaky_relu(x, 0.1), lambda x: np.where(x > 0, x, 0.1 * x)),
    C("leaky_relu_steep", away(3, 4), lambda x: ops.leaky_relu(x, -2.5), lambda x: np.where(x > 0, x, -2.5 * x)),
    C("sigmoid", normal(3, 4, scale=2.0), ops.sigmoid, np_sigmoid),
    C("tanh", normal(3, 4, scale=1.5), ops.tanh, np.tanh),
    C("softplus", normal(3, 4, scale=2.0), ops.softplus, np_softplus),
    C("safe_log", normal(3, 4, scale=2.0), ops.safe_log, lambda x: np.log(np_softplus(x) + 1e-6)),
    C("pow2", normal(3, 4), lambda x: ops.pow(x, 2), lambda x: x * x),
    C("pow2_operator", normal(3, 4), lambda x: x ** 2, lambda x: x ** 2),
    C("pow3", normal(3, 4), lambda x: ops.pow(x, 3), lambda x: x ** 3),
    # issue 22: the new elementwise primitives (sin, cos, erf, log1p, expm1, pow_scalar) and ops composed on them
    C("sin", normal(3, 4, scale=2.0), ops.sin, np.sin),
    C("cos", normal(3, 4, scale=2.0), ops.cos, np.cos),
    C("tan", normal(3, 4, scale=0.5), ops.tan, np.tan),
    C("erf", normal(3, 4), ops.erf, lambda x: np.vectorize(math.erf)(x)),
    C("log1p", positive(3, 4), ops.log1p, np.log1p),
    C("expm1", normal(3, 4), ops.expm1, np.expm1),
    C("pow_scalar", positive(3, 4), lambda x: ops.pow(x, 2.5), lambda x: x ** 2.5),
    C("pow_negative", positive(3, 4), lambda x: ops.pow(x, -1.5), lambda x: x ** -1.5),
    C("rsqrt", positive(3, 4), ops.rsqrt, lambda x: 1.0 / np.sqrt(x)),
    C("logsumexp", normal(3, 4), lambda x: ops.logsumexp(x, 1), lambda x: np.log(np.sum(np.exp(x), axis=1))),
    C("cumprod", nonzero(3, 4), lambda x: ops.cumprod(x, 1), lambda x: np.cumprod(x, axis=1)),
    C("einsum", many(normal(2, 3, 4), normal(4, 5)), lambda a, b: ops.einsum("bij,jk->bki", a, b),
      lambda a, b: np.einsum("bij,jk->bki", a, b)),
    # elementwise, binary, same shape
    C("add", many(normal(3, 4), normal(3, 4)), ops.add, np.add),
    C("sub", many(normal(3, 4), normal(3, 4)), ops.sub, np.subtract),
    C("mul", many(normal(3, 4), normal(3, 4)), ops.mul, np.multiply),
    C("div", many(normal(3, 4), nonzero(3, 4)), ops.div, np.divide),
    C("maximum", separated_pair(3, 4), ops.maximum, np.maximum),
    C("minimum", separated_pair(3, 4), ops.minimum, np.minimum),
    C("x_plus_x", normal(3, 4), lambda x: x + x, lambda x: 2 * x),
    C("x_times_x", normal(3, 4), lambda x: x * x, lambda x: x * x),
    # scalar variants
    C("x_plus_c", normal(3, 4), lambda x: x + 1.7, lambda x: x + 1.7),
    C("c_plus_x", normal(3, 4), lambda x: 1.7 + x, lambda x: 1.7 + x),
    C("x_minus_c", normal(3, 4), lambda x: x - 0.3, lambda x: x - 0.3),
    C("c_minus_x", normal(3, 4), lambda x: 2.5 - x, lambda x: 2.5 - x),
    C("x_times_c", normal(3, 4), lambda x: x * -1.3, lambda x: x * -1.3),
    C("c_times_x", normal(3, 4), lambda x: 3.0 * x, lambda x: 3.0 * x),
    C("x_div_c", normal(3, 4), lambda x: x / 3.0, lambda x: x / 3.0),
    C("c_div_x", nonzero(3, 4), lambda x: 2.0 / x, lambda x: 2.0 / x),
    # broadcasting
    C("add_bcast_3x1_1x4", many(normal(3, 1), normal(1, 4)), ops.add, np.add),
    C("sub_bcast_3x1_1x4", many(normal(3, 1), normal(1, 4)), ops.sub, np.subtract),
    C("mul_bcast_234_4", many(normal(2, 3, 4), normal(4)), ops.mul, np.multiply),
    C("div_bcast_234_31", many(normal(2, 3, 4), nonzero(3, 1)), ops.div, np.divide),
    C("maximum_bcast", lambda rng: [away(3, 4, points=(0.1,))(rng), np.full((1,), 0.1, F32)],
      ops.maximum, np.maximum),
    C("add_bcast_scalar_tensor", many(normal(2, 3), normal()), ops.add, np.add),
    # reductions
    C("sum_all", normal(3, 4), ops.sum, np.sum),
    C("sum_dim1", normal(3, 4, 2), lambda x: ops.sum(x, 1), lambda x: np.sum(x, 1)),
    C("sum_dim_neg1_keepdim", normal(3, 4), lambda x: x.sum(-1, keepdim=True), lambda x: np.sum(x, -1, keepdims=True)),
    C("sum_dims_0_2", normal(2, 3, 4), lambda x: x.sum((0, 2)), lambda x: np.sum(x, (0, 2))),
    C("sum_all_keepdim", normal(2, 3), lambda x: x.sum(None, keepdim=True), lambda x: np.sum(x, keepdims=True)),
    C("mean_all", normal(3, 4), ops.mean, np.mean),
    C("mean_dim0", normal(3, 4), lambda x: x.mean(0), lambda x: np.mean(x, 0)),
    C("mean_dim1_keepdim", normal(3, 4, 2), lambda x: x.mean(1, keepdim=True), lambda x: np.mean(x, 1, keepdims=True)),
    C("mean_dims_tuple", normal(2, 3, 4), lambda x: x.mean((0, -1)), lambda x: np.mean(x, (0, 2))),
    C("mean_all_keepdim", normal(2, 3), lambda x: x.mean(keepdim=True), lambda x: np.mean(x, keepdims=True)),
    # shape
    C("flatten_all", normal(2, 3, 4), ops.flatten, lambda x: x.reshape(-1)),
    C("flatten_1", normal(2, 3, 4), lambda x: ops.flatten(x, 1), lambda x: x.reshape(2, 12)),
    C("reshape", normal(2, 3, 4), lambda x: x.reshape(4, -1), lambda x: x.reshape(4, -1)),
    C("view_unsqueeze_squeeze", normal(3, 4),
      lambda x: ops.unsqueeze(x, 1).view(3, 1, 2, 2).squeeze(1), lambda x: x.reshape(3, 2, 2)),
    C("transpose_2d", normal(3, 4), lambda x: ops.transpose(x, 0, 1), lambda x: x.T),
    C("t_2d", normal(3, 4), lambda x: x.t(), lambda x: x.T),
    C("transpose_3d_adjacent", normal(2, 3, 4), lambda x: x.transpose(1, 2), lambda x: np.swapaxes(x, 1, 2)),
    C("transpose_3d_outer", normal(2, 3, 4), lambda x: x.transpose(0, 2), lambda x: np.swapaxes(x, 0, 2)),
    C("transpose_4d_neg", normal(2, 3, 2, 4), lambda x: x.transpose(-1, 0), lambda x: np.swapaxes(x, -1, 0)),
    C("permute_4d", normal(2, 3, 4, 2), lambda x: ops.permute(x, 3, 1, 0, 2), lambda x: np.transpose(x, (3, 1, 0, 2))),
    C("permute_bca", normal(2, 3, 4), ops.permute_bca, lambda x: np.transpose(x, (1, 2, 0))),
    C("permute_cab", normal(2, 3, 4), ops.permute_cab, lambda x: np.transpose(x, (2, 0, 1))),
    C("swap_last2", normal(2, 3, 4), ops.swap_last2, lambda x: np.transpose(x, (0, 2, 1))),
    C("swap_adjacent_d0", normal(2, 3, 4), lambda x: ops.swap_adjacent(x, 0), lambda x: np.swapaxes(x, 0, 1)),
    C("swap_adjacent_d2", normal(2, 3, 4, 2), lambda x: ops.swap_adjacent(x, 2), lambda x: np.swapaxes(x, 2, 3)),
    C("swap_adjacent_past_rank", normal(2, 3, 4), lambda x: ops.swap_adjacent(x, 2) * 3, lambda x: 3 * x),  # identity
    C("swap_adjacent_far", normal(3, 4), lambda x: ops.swap_adjacent(x, 7) * 2, lambda x: 2 * x),
    C("expand", normal(3, 1), lambda x: ops.expand(x, (2, 3, 4)), lambda x: np.broadcast_to(x, (2, 3, 4))),
    C("expand_minus1", normal(3, 1), lambda x: x.expand((-1, 5)), lambda x: np.broadcast_to(x, (3, 5))),
    C("broadcast_to", normal(4), lambda x: ops.broadcast_to(x, (3, 4)), lambda x: np.broadcast_to(x, (3, 4))),
    C("expand_as", many(normal(1, 4), normal(3, 4)), lambda x, y: x.expand_as(y) * y,
      lambda x, y: np.broadcast_to(x, (3, 4)) * y),
    # linear algebra
    C("matmul_2d", many(normal(3, 4), normal(4, 5)), ops.matmul, np.matmul),
    C("matmul_operator", many(normal(2, 3), normal(3, 2)), lambda a, b: a @ b, np.matmul),
    C("matmul_1d_2d", many(normal(4), normal(4, 3)), ops.matmul, np.matmul),
    C("matmul_2d_1d", many(normal(3, 4), normal(4)), ops.matmul, np.matmul),
    C("matmul_1d_1d", many(normal(5), normal(5)), ops.matmul, np.matmul),
    C("matmul_batched_bcast", many(normal(2, 1, 3, 4), normal(3, 4, 2)), ops.matmul, np.matmul),
    C("matmul_batched_1d", many(normal(2, 3, 4), normal(4)), ops.matmul, np.matmul),
    C("bmm", many(normal(2, 3, 4), normal(2, 4, 3)), ops.bmm, np.matmul),
    # linear: one tape node over bmm_nt (forward) and bmm / bmm_tn / column sums (backward)
    C("linear_bias", many(normal(5, 4), normal(3, 4), normal(3)), ops.linear, lambda x, w, b: x @ w.T + b),
    C("linear_no_bias", many(normal(5, 4), normal(3, 4)), ops.linear, lambda x, w: x @ w.T),
    C("linear_leading_dims", many(normal(2, 3, 4), normal(5, 4), normal(5)), ops.linear,
      lambda x, w, b: x @ w.T + b),
    C("linear_1d_input", many(normal(4), normal(3, 4), normal(3)), ops.linear, lambda x, w, b: w @ x + b),
    C("bmm_batch1", many(normal(1, 3, 4), normal(1, 4, 2)), ops.bmm, np.matmul),
    C("linear_bias", many(normal(4, 3), normal(5, 3), normal(5)), ops.linear, lambda x, w, b: x @ w.T + b),
    C("linear_nobias", many(normal(4, 3), normal(5, 3)), ops.linear, lambda x, w: x @ w.T),
    C("linear_3d_input", many(normal(2, 3, 3), normal(2, 3), normal(2)), ops.linear, lambda x, w, b: x @ w.T + b),
    # nn
    C("mse_loss_mean", many(normal(3, 4), normal(3, 4)), ops.mse_loss, lambda a, b: np.mean((a - b) ** 2)),
    C("mse_loss_sum", many(normal(3, 4), normal(3, 4)), lambda a, b: ops.mse_loss(a, b, "sum"),
      lambda a, b: np.sum((a - b) ** 2)),
    C("mse_loss_none", many(normal(3, 4), normal(3, 4)), lambda a, b: ops.mse_loss(a, b, reduction="none"),
      lambda a, b: (a - b) ** 2),
    C("softmax_last", normal(3, 5, scale=2.0), ops.softmax, lambda x: np_softmax(x, -1)),
    C("softmax_dim0", normal(4, 3, scale=2.0), lambda x: ops.softmax(x, 0), lambda x: np_softmax(x, 0)),
    C("softmax_dim1_3d", normal(2, 4, 3, scale=2.0), lambda x: x.softmax(1), lambda x: np_softmax(x, 1)),
    C("log_softmax_last", normal(3, 5, scale=2.0), ops.log_softmax, lambda x: np_log_softmax(x, -1)),
    C("log_softmax_dim0", normal(4, 3, scale=2.0), lambda x: ops.log_softmax(x, 0), lambda x: np_log_softmax(x, 0)),
    C("log_softmax_dim1_3d", normal(2, 4, 3, scale=2.0), lambda x: x.log_softmax(dim=1),
      lambda x: np_log_softmax(x, 1)),
    # concat / slice / cat
    C("concat1d", many(normal(3), normal(4)), ops.concat1d, lambda a, b: np.concatenate([a, b])),
    C("slice1d", normal(7), lambda x: ops.slice1d(x, 2, 3), lambda x: x[2:5]),
    C("slice0_2d", normal(5, 3), lambda x: ops.slice0(x, 1, 3), lambda x: x[1:4]),
    C("slice0_prefix", normal(5, 2), lambda x: ops.slice0(x, 0, 2), lambda x: x[0:2]),
    C("slice0_suffix", normal(5, 2), lambda x: ops.slice0(x, 3, 2), lambda x: x[3:5]),
    C("cat_dim0", many(normal(2, 3), normal(1, 3), normal(3, 3)), lambda *t: ops.cat(t, 0),
      lambda *a: np.concatenate(a, 0)),
    C("cat_dim1", many(normal(2, 3), normal(2, 1), normal(2, 2)), lambda *t: ops.cat(list(t), dim=1),
      lambda *a: np.concatenate(a, 1)),
    C("cat_dim_neg1_3d", many(normal(2, 3, 2), normal(2, 3, 1)), lambda a, b: ops.cat([a, b], -1),
      lambda a, b: np.concatenate([a, b], -1)),
    # narrow along a later dim: narrow_block, VJP narrow_block_bwd
    C("narrow_dim1_3d", normal(2, 5, 3), lambda x: x.narrow(1, 1, 3), lambda x: x[:, 1:4]),
    C("narrow_last_unaligned", normal(3, 2, 7), lambda x: x.narrow(-1, 2, 3), lambda x: x[..., 2:5]),
    C("split_dim2_middle", normal(2, 3, 12), lambda x: x.split(4, dim=2)[1], lambda x: x[:, :, 4:8]),
    C("chunk_last_sum", normal(2, 6), lambda x: sum(x.chunk(3, dim=1)[i] * (i + 1) for i in range(3)),
      lambda x: x[:, 0:2] + 2 * x[:, 2:4] + 3 * x[:, 4:6]),
    C("getitem_ellipsis_slice", normal(2, 3, 6), lambda x: x[..., 1:4], lambda x: x[..., 1:4]),
    # indexing
    C("getitem_int", normal(4, 3), lambda x: x[1], lambda x: x[1]),
    C("getitem_neg_int", normal(4, 3), lambda x: x[-1], lambda x: x[-1]),
    C("getitem_int_1d", normal(5), lambda x: x[3], lambda x: x[3]),
    C("getitem_slice", normal(5, 3), lambda x: x[1:3], lambda x: x[1:3]),
    C("getitem_step_slice", normal(6, 2), lambda x: x[::2], lambda x: x[::2]),
    C("getitem_neg_step", normal(5), lambda x: x[::-2], lambda x: x[::-2]),
    C("getitem_int_array", normal(4, 3), lambda x: x[np.array([2, 0, 2])], lambda x: x[np.array([2, 0, 2])]),
    C("getitem_int_tensor", normal(4, 3), lambda x: x[tl.tensor([3, 3, 1])], lambda x: x[np.array([3, 3, 1])]),
    C("getitem_bool_mask", normal(4, 3), lambda x: x[tl.tensor(MASK)], lambda x: x[MASK]),
    C("getitem_tuple", normal(4, 5), lambda x: x[1:, ::2], lambda x: x[1:, ::2]),
    C("getitem_column", normal(4, 3), lambda x: x[:, 1], lambda x: x[:, 1]),
    C("index_select_dim0", normal(4, 3), lambda x: ops.index_select(x, 0, tl.tensor(IDX_REP)), lambda x: x[IDX_REP]),
    C("index_select_dim1", normal(3, 4), lambda x: x.index_select(1, tl.tensor(IDX_REP)), lambda x: x[:, IDX_REP]),
    C("index_select_3d_dim2", normal(2, 2, 4), lambda x: ops.index_select(x, -1, tl.tensor([3, -1, 0])),
      lambda x: x[:, :, [3, 3, 0]]),
    C("gather_vec", normal(6), lambda x: ops.gather_vec(x, np.array([5, 0, 2, 2, 9])),
      lambda x: np_gather(x, np.array([5, 0, 2, 2, 9]))),
    C("gather_rows", normal(4, 3), lambda x: ops.gather_rows(x, tl.tensor([3, 0, 3, 7])),
      lambda x: np_gather(x, np.array([3, 0, 3, 7]))),
    C("scatter_add", many(normal(5), normal(4)), lambda x, v: ops.scatter_add(x, [1, 3, 1, 8], v),
      lambda x, v: np_scatter_add(x, [1, 3, 1, 8], v)),
    C("scatter_add_rows", many(normal(4, 3), normal(4, 3)),
      lambda x, v: ops.scatter_add_rows(x, tl.tensor([2, 0, 2, 9]), v),
      lambda x, v: np_scatter_add(x, [2, 0, 2, 9], v)),
    # dropout: for a fixed generator a linear map x -> x * mask / keep, the mask from the spec's
    # exact-integer bernoulli_mask with the generator's first key
    C("dropout", normal(4, 5), lambda x: ops.dropout(x, 0.3, generator=tl.Generator(11)),
      lambda x: x * spec_rng.bernoulli_mask(20, 0.7, derive_key(11, 0)).reshape(4, 5) / 0.7),
    C("dropout_eval", normal(3, 2), lambda x: ops.dropout(x, 0.3, training=False) * 1.0, lambda x: x * 1.0),
    # copies
    C("clone", normal(3, 4), ops.clone, lambda x: x.copy()),
    C("clone_method", normal(3, 4), lambda x: x.clone() * x, lambda x: x * x),
    C("to_device_cpu", normal(3, 4), lambda x: ops.to_device(x, "cpu"), lambda x: x.copy()),
    C("to_cpu_then_mul", normal(3, 4), lambda x: x.to("cpu") * 2.0, lambda x: 2.0 * x),
]


def _as_list(v: Any) -> list[np.ndarray]:
    return list(v) if isinstance(v, (list, tuple)) else [v]


@pytest.mark.parametrize("case", CASES)
def test_vjp_matches_finite_differences(case: Case, device: str) -> None:
    rng = np.random.default_rng(zlib.crc32(case.name.encode()))
    xs = _as_list(case.inputs(rng))
    assert all(x.dtype == F32 for x in xs)

    ref_out = np.asarray(case.ref(*[x.astype(np.float64) for x in xs]), dtype=np.float64)
    w = rng.standard_normal(ref_out.shape).astype(F32)

    ts = [tl.tensor(x, device=device, requires_grad=True) for x in xs]
    y = case.ours(*ts)
    assert tuple(y.shape) == ref_out.shape, f"{case.name}: output shape {y.shape} != reference {ref_out.shape}"
    assert y.requires_grad and not y.is_leaf
    # The forward must agree with the reference too (same kind of float32 tolerance), else the
    # gradient comparison below would be against a different function.
    assert _within(y.numpy(), ref_out), f"{case.name} forward: " + _report(y.numpy(), ref_out)

    y.backward(tl.tensor(w, device=y.device))
    fds = fd_grads(case.ref, xs, w)
    for k, (t, fd) in enumerate(zip(ts, fds)):
        assert t.grad is not None, f"{case.name}: input {k} got no gradient"
        assert t.grad.device == t.device
        g = t.grad.numpy()
        assert g.dtype == F32 and g.shape == fd.shape
        # The check must be able to fail: a VJP off by a factor 2 or with its sign flipped would.
        assert not _within(2.0 * fd, fd) and not _within(-fd, fd), \
            f"{case.name}: input {k} has a gradient too small for the check to discriminate: {fd}"
        assert _within(g, fd), f"{case.name} d/dinput{k}: " + _report(g, fd)


def test_gradient_via_sum_of_w_times_output_equals_explicit_cotangent() -> None:
    """Backward of sum(w * op(x)) through the tape equals op(x).backward(w), for a few ops."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 4)).astype(F32)
    w = rng.standard_normal((3, 4)).astype(F32)
    pairs = [
        (ops.tanh, np.tanh),
        (ops.exp, np.exp),
        (lambda t: ops.softmax(t, 0), lambda v: np_softmax(v, 0)),
        (lambda t: t @ t.T @ t, lambda v: v @ v.T @ v),
    ]
    for op, ref in pairs:
        a = tl.tensor(x, requires_grad=True)
        op(a).backward(tl.tensor(w))
        b = tl.tensor(x, requires_grad=True)
        (op(b) * tl.tensor(w)).sum().backward()
        fd = fd_grads(ref, [x], w)[0]
        assert _within(a.grad.numpy(), fd), _report(a.grad.numpy(), fd)
        assert _within(b.grad.numpy(), fd), _report(b.grad.numpy(), fd)


def test_tolerance_rejects_wrong_vjps() -> None:
    """The tolerance itself: off by 2, wrong sign, transposed or 1e-3 relative off is rejected."""
    rng = np.random.default_rng(0)
    fd = rng.standard_normal((4, 5))
    assert _within(fd * (1 + 5e-6), fd)  # ~80 float32 ulps: accepted
    assert not _within(2 * fd, fd)
    assert not _within(-fd, fd)
    assert not _within(fd * (1 + 1e-3), fd)
    assert not _within(np.roll(fd, 1), fd)
    assert not _within(fd.T, fd)


# -- kink conventions (DESIGN.md), exact through the tape -----------------------------------------
def _grad(fn, *xs, w=None, device="cpu"):
    ts = [tl.tensor(np.asarray(x, F32), device=device, requires_grad=True) for x in xs]
    y = fn(*ts)
    y.backward(tl.ones_like(y) if w is None else tl.tensor(np.asarray(w, F32), device=device))
    return [t.grad.numpy() for t in ts]


def test_relu_grad_at_zero_is_zero(device: str) -> None:
    (g,) = _grad(ops.relu, [-1.0, 0.0, -0.0, 2.0], w=[3.0, 3.0, 3.0, 3.0], device=device)
    np.testing.assert_array_equal(g, np.array([0.0, 0.0, 0.0, 3.0], F32))


def test_leaky_relu_grad_at_zero_is_the_slope(device: str) -> None:
    # PyTorch's rule: dx = dy where x > 0, else dy * slope (both zeros take the slope)
    (g,) = _grad(lambda x: ops.leaky_relu(x, 0.25), [-1.0, 0.0, -0.0, 2.0], w=[4.0] * 4, device=device)
    np.testing.assert_array_equal(g, np.array([1.0, 1.0, 1.0, 4.0], F32))


def test_abs_grad_at_zero_is_zero(device: str) -> None:
    (g,) = _grad(ops.abs, [-1.0, 0.0, -0.0, 2.0], w=[3.0, 3.0, 3.0, 3.0], device=device)
    np.testing.assert_array_equal(g, np.array([-3.0, 0.0, 0.0, 3.0], F32))


def test_sqrt_grad_at_zero_is_zero(device: str) -> None:
    (g,) = _grad(ops.sqrt, [0.0, 4.0, 0.25], device=device)
    np.testing.assert_array_equal(g, np.array([0.0, 0.25, 1.0], F32))
    assert np.all(np.isfinite(g))


def test_clamp_grad_at_bounds_is_zero(device: str) -> None:
    (g,) = _grad(lambda x: ops.clamp(x, -1.0, 1.0), [-1.0, 1.0, 0.0, -2.0, 2.0, 0.999], w=[2.0] * 6, device=device)
    np.testing.assert_array_equal(g, np.array([0.0, 0.0, 2.0, 0.0, 0.0, 2.0], F32))


def test_maximum_tie_splits_gradient(device: str) -> None:
    ga, gb = _grad(ops.maximum, [1.0, 2.0, 3.0], [1.0, 0.0, 5.0], w=[4.0, 4.0, 4.0], device=device)
    np.testing.assert_array_equal(ga, np.array([2.0, 4.0, 0.0], F32))
    np.testing.assert_array_equal(gb, np.array([2.0, 0.0, 4.0], F32))


def test_minimum_tie_splits_gradient(device: str) -> None:
    ga, gb = _grad(ops.minimum, [1.0, 2.0, 3.0], [1.0, 0.0, 5.0], w=[4.0, 4.0, 4.0], device=device)
    np.testing.assert_array_equal(ga, np.array([2.0, 0.0, 4.0], F32))
    np.testing.assert_array_equal(gb, np.array([2.0, 4.0, 0.0], F32))


def test_maximum_of_x_with_itself_gives_full_gradient(device: str) -> None:
    # max(x, x): a tie everywhere, 0.5 + 0.5 accumulated into the one input.
    (g,) = _grad(lambda x: ops.maximum(x, x), [1.0, -2.0, 0.0], w=[3.0, 3.0, 3.0], device=device)
    np.testing.assert_array_equal(g, np.array([3.0, 3.0, 3.0], F32))


def assert_vjp_matches_fd(name: str, ours: Callable[..., Any], ref: Callable[..., Any], xs: list[np.ndarray],
                          ref_out: np.ndarray, w: np.ndarray, device: str) -> None:
    """Forward of ``ours`` against ``ref_out``, then every input's VJP (cotangent w) against finite
    differences of ``ref``, each large enough to reject 2 x fd and -fd (shared by the family tests)."""
    import torchlean as tl_

    ts = [tl_.tensor(x, device=device, requires_grad=True) for x in xs]
    y = ours(*ts)
    assert tuple(y.shape) == ref_out.shape, f"{name}: output shape {y.shape} != reference {ref_out.shape}"
    assert _within(y.numpy(), ref_out), f"{name} forward: " + _report(y.numpy(), ref_out)
    y.backward(tl_.tensor(w, device=device))
    for k, (t, fd) in enumerate(zip(ts, fd_grads(ref, xs, w))):
        assert t.grad is not None, f"{name}: input {k} got no gradient"
        assert not _within(2.0 * fd, fd) and not _within(-fd, fd), f"{name}: input {k}: gradient too small to check"
        assert _within(t.grad.numpy(), fd), f"{name} d/dinput{k}: " + _report(t.grad.numpy(), fd)
