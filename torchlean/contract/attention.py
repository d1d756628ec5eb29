"""Contracts of the attention family: flash_attention_fwd and its backward passes.

The kernels (CPU: float32 BLAS tiles; CUDA: tensor-core tiles, float32 register tiles where an item
holds a non-finite value or the GPU predates sm_80) share one error model, derived here term by
term. Notation as in ``torchlean.contract``: u = 2**-24, LIB = 8u (one library exp/exp2/log, 4 ulp),
gamma(k) = k u / (1 - k u).

Products of two matrices (Q K^T, dO V^T, P V, dS K, dS^T Q, P^T dO) are bounded per inner product
of k terms by tc(k) sum|a b|, tc(k) = 48u + 60u ceil(k / 8), which covers every backend; given
``device`` = "cpu" (the primitive table passes the device that ran) the bounds use gamma(k), the CPU
kernels' own model, and drop the per-step chain terms:
* 3xTF32 on tensor cores (CUDA): a = hi + lo with hi = a truncated to TF32 (|a - hi| < 2^-10 |a|)
  and lo = a - hi truncated likewise; the product lo_a hi_b + hi_a lo_b + hi_a hi_b misses lo_a lo_b
  and the truncations of lo: 3 * 2^-20 |a b| = 48u.
  Each m16n8k8 MMA adds 8 exact products to its float32 accumulator, aligning them to the largest
  term and truncating (Fasi, Higham, Mikaitis, Pranesh 2021): at most 20u (|acc| + sum|p|) per
  MMA, 3 MMAs per 8 terms. A chain never runs longer than one 64-row step: each step's product
  starts from zero and is then added to the running result (one more rounding, in the gamma terms).
* float32 FMA chains (CPU BLAS, the CUDA-core kernels): gamma(k) <= tc(k).
With TF32 allowed (``set_allow_tf32(True)``) the CUDA kernels keep only hi_a hi_b (hi rounded to
nearest): that mode has its own bounds, the same derivation with tc(k, tf32=True) = 16388u + 20u
ceil(k / 8) (each product within 2^-10 + 2^-22 of |a b|); every bound function takes ``tf32=True``.

Forward, for one query row i and allowed key j (s' the exact masked score, m = max_j s'_j):
* score: the dot product of d terms: tc(d) |scale| A_ij, A_ij = sum_k |q_ik k_jk|; the scale
  (folded into q on CUDA together with log2 e: 3 roundings), the mask addition and the base-2
  conversions add 4u (|s_ij| + |mask_ij|): delta_ij = (tc(d) + gamma(4)) |scale| A_ij
  + 4u (|s'_ij| + |mask_ij|); a filled score (-1000) 4u 1000.
* weight: exp(s' - m) with the computed row maximum of the tile so far, then multiplied by the
  rescale factors exp(m_old - m_new) of every later tile (online softmax): the subtractions round
  by at most u |s'_ij - m| in all (they telescope), each exp adds LIB and each rescale one
  multiplication (u): eta_ij = delta_ij + 2u |s'_ij - m| + (R + 1)(LIB + 2u), R = ceil(n_k / 32) - 1
  the most rescales (every backend's key tiles hold at least KEY_TILE_MIN = 32 keys). The computed
  maximum is the maximum of the computed scores: its error cancels in the normalization.
* out_i = sum_j w_j v_j / sum_j w_j with w_j = p_ij (1 + eta_ij), both sums rounded in any order
  and the numerator's 64-key products on tensor cores: with G = gamma(n_k + 2) + tc(64),
  W = sum_j p_j eta_j + G and E = max_j eta_j + G (G written gamma(g) below),
    |err| <= (sum_j p_j (eta_j + gamma(g)) |v_j| + W sum_j p_j |v_j|) / (1 - 2E) + 2u |out| + TINY.
* lse_i = m + log(l): log(sum_j exp(s'_j) (1 + eta_j)) is within sum_j p_j eta_j / (1 - E) of the
  exact value; the sum (gamma(g)), the library log of l in [1, n_k] (LIB log n_k) and the final
  additions / base conversions (4u (|lse| + |m|)) add to it. Rows with no allowed key: out exactly
  0 and lse exactly -inf.

Backward (from the given out and lse, so P = exp(s' - lse) is recomputed tile by tile):
* P_ij: eta^b_ij = delta_ij + 2u |s'_ij - lse_i| + 2u |lse_i| + LIB + 2u (the subtraction, lse
  converted to base 2, the exp, 2 more roundings).
* D_i = sum_k dout_ik out_ik: gamma(d) sum |dout out|. dP_ij = dout_i . v_j: tc(d) sum|dout_i v_j|.
* dS_ij = P_ij (dP_ij - D_i): B_ij = P_ij ((eta^b_ij + 3u) |dP_ij - D_i| + (eps^P_ij + eps^D_i)(1 + eta^b_ij))
  (the cancellation dP - D is bounded through the errors of its operands, never relative to the
  result); exactly 0 on filled, blocked and causally excluded entries.
* dQ = scale dS K: |scale| (B |K| + G_k |dS| |K|) + u|dQ| + TINY (n_k + 1), G_k = gamma(n_k + 2) + tc(64);
  dK = scale dS^T Q: |scale| (B^T |Q| + G_q |dS|^T |Q|) + u|dK| + TINY (n_q + 1), G_q = gamma(n_q + 2) + tc(64);
  dV = P^T dout: (eta^b P)^T |dout| + (gamma(n_q + 1) + tc(64)) P^T |dout| + TINY (n_q + 1).
All first-order terms carry a (1 + 4E) margin for their products of (1 + eps) factors.
The bound functions take an array module ``xp`` (NumPy here; benchmarks/attention_cuda.py passes
CuPy to check benchmark-sized batches on the GPU).
"""

from __future__ import annotations

import math

import numpy as np

from .core import LIB, TINY, U, gamma, register
from ..spec import attention as S

KEY_TILE_MIN = 32


def tc(k: int, tf32: bool = False) -> float:
    """The relative bound of one inner product of k terms, every backend (module docstring); with
    ``tf32`` the CUDA kernels' TF32 mode: hi_a hi_b alone, hi rounded to nearest (|a - hi| <= 2^-11
    |a|), so 2^-10 + 2^-22 = 16388u per product, and one MMA (20u) per 8 terms."""
    if tf32:
        return (16388 + 20 * math.ceil(max(k, 0) / 8)) * U
    return (48 + 60 * math.ceil(max(k, 0) / 8)) * U


STEP = 64  # the longest product chain: one step of rows (tensor-core kernels)


def _cpu(device) -> bool:
    """The bounds may name the device that ran (``device=``, as the primitive table passes it): the
    CPU kernels' products are float32 FMA/BLAS chains, bounded by gamma(k) alone."""
    return device is not None and str(device).startswith("cpu")


def _sum(k: int, tf32: bool, device) -> float:
    """A backward product's sum term: gamma(k), plus one tensor-core step's chain tc(STEP) unless the
    CPU ran it (each step's product is then added in float32: within gamma(k))."""
    return gamma(k) + (0.0 if _cpu(device) else tc(STEP, tf32))


def _rescales(n_k: int) -> int:
    return max(math.ceil(n_k / KEY_TILE_MIN) - 1, 0)


def _score_err(q, k, mask, batch, n_q, n_k, d, scale, causal, mode, layout, xp, tf32=False, device=None):
    """(s', allowed, filled, delta): the exact masked scores and their error bound per entry."""
    s, allowed, filled = S.scores(q, k, None, mask, batch, n_q, n_k, d, scale, causal, mode, layout, xp)
    q3 = xp.abs(xp.asarray(q, dtype=xp.float64).reshape(batch, n_q, d))
    k3 = xp.abs(xp.asarray(k, dtype=xp.float64).reshape(batch, n_k, d))
    a = xp.matmul(q3, xp.swapaxes(k3, 1, 2)) if d else xp.zeros((batch, n_q, n_k))
    with np.errstate(all="ignore"):
        dot = gamma(d + 4) if _cpu(device) else tc(d, tf32) + gamma(4)
        delta = dot * abs(float(scale)) * a + 4 * U * xp.abs(s)
        if mode == "add":
            m = S.mask_matrix(mask, batch, n_q, n_k, layout, xp)
            delta = delta + 4 * U * xp.where(xp.isfinite(m), xp.abs(m), 0.0)
        delta = xp.where(filled, 4 * U * 1000.0, delta)
    return s, allowed, filled, delta


def _clean(a, xp):
    return xp.where(xp.isfinite(a), a, 0.0)


def fwd_bound(ref, q, k, v, mask, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout, xp=np, tf32=False,
              device=None):
    out_ref, lse_ref = ref
    batch, n_q, n_k, d = int(batch), int(n_q), int(n_k), int(d)
    if batch * n_q == 0:
        return xp.zeros(batch * n_q * d), xp.zeros(batch * n_q)
    s, allowed, _, delta = _score_err(q, k, mask, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout, xp, tf32,
                                      device)
    lse = xp.asarray(lse_ref, dtype=xp.float64).reshape(batch, n_q)
    r = _rescales(n_k)
    g = gamma(n_k + 2) + (0.0 if _cpu(device) else tc(min(n_k, STEP), tf32))
    with np.errstate(all="ignore"):
        t = xp.where(allowed, s, -xp.inf)
        m = xp.max(t, axis=-1, keepdims=True) if n_k else xp.full((batch, n_q, 1), -xp.inf)
        mf = xp.where(xp.isfinite(m), m, 0.0)
        p = xp.where(allowed, xp.exp(s - mf), 0.0)
        tot = xp.sum(p, axis=-1, keepdims=True)
        p = _clean(p / xp.where(tot > 0, tot, 1.0), xp)
        eta = _clean(xp.where(allowed, delta + 2 * U * xp.abs(s - mf), 0.0), xp) + (r + 1) * (LIB + 2 * U)
        w = xp.sum(p * eta, axis=-1, keepdims=True) + g
        e = xp.max(xp.where(p > 0, eta, 0.0), axis=-1, keepdims=True) + g if n_k else xp.zeros((batch, n_q, 1))
        denom = xp.where(2 * e < 1, 1 - 2 * e, 0.0)
        v3 = xp.abs(xp.asarray(v, dtype=xp.float64).reshape(batch, n_k, d))
        pv = xp.matmul(p, v3)
        pev = xp.matmul(p * (eta + g), v3)
        o = xp.abs(xp.asarray(out_ref, dtype=xp.float64).reshape(batch, n_q, d))
        out_b = _clean((pev + w * pv) / denom, xp) * (1 + 4 * e) + 2 * U * _clean(o, xp) + TINY
        out_b = xp.where(denom > 0, out_b, xp.inf)
        lse_b = (w[..., 0] / xp.where(e[..., 0] < 1, 1 - e[..., 0], 0.0) * (1 + 4 * e[..., 0])
                 + LIB * math.log(max(n_k, 1)) + 4 * U * (_clean(xp.abs(lse), xp) + xp.abs(mf[..., 0])) + TINY)
        empty = ~xp.any(allowed, axis=-1)
        out_b = xp.where(empty[..., None], 0.0, out_b)
        lse_b = xp.where(empty, 0.0, lse_b)
    return out_b.reshape(-1), lse_b.reshape(-1)


def _bwd_terms(q, k, v, mask, out, lse, dout, batch, n_q, n_k, d, scale, causal, mode, layout, xp, tf32, device):
    s, allowed, filled, delta = _score_err(q, k, mask, batch, n_q, n_k, d, scale, causal, mode, layout, xp, tf32,
                                           device)
    lse3 = xp.asarray(lse, dtype=xp.float64).reshape(batch, n_q)[..., None]
    v3 = xp.asarray(v, dtype=xp.float64).reshape(batch, n_k, d)
    o3 = xp.asarray(out, dtype=xp.float64).reshape(batch, n_q, d)
    g3 = xp.asarray(dout, dtype=xp.float64).reshape(batch, n_q, d)
    with np.errstate(all="ignore"):
        p = S.probabilities(s, allowed, lse3[..., 0], xp)
        eta = _clean(xp.where(allowed, delta + 2 * U * xp.abs(s - lse3) + 2 * U * xp.abs(lse3), 0.0), xp) \
            + LIB + 2 * U
        dd = xp.sum(g3 * o3, axis=-1)[..., None]
        eps_d = gamma(d) * xp.sum(xp.abs(g3 * o3), axis=-1)[..., None]
        dp = xp.matmul(g3, xp.swapaxes(v3, 1, 2))
        eps_p = (gamma(d) if _cpu(device) else tc(d, tf32)) * xp.matmul(xp.abs(g3), xp.swapaxes(xp.abs(v3), 1, 2))
        live = allowed & ~filled
        ds = xp.where(live, p * (dp - dd), 0.0)
        b = xp.where(live, p * ((eta + 3 * U) * xp.abs(dp - dd) + (eps_p + eps_d) * (1 + eta)), 0.0)
        e = float(xp.max(xp.where(p > 0, eta, 0.0))) if p.size else 0.0
    return p, eta, ds, _clean(b, xp) * (1 + 4 * e), g3


def _bwd_q_bound(ref, q, k, v, mask, out, lse, dout, batch, n_q, n_k, d, scale, causal, mode, layout, xp=np,
                 tf32=False, device=None):
    batch, n_q, n_k, d = int(batch), int(n_q), int(n_k), int(d)
    if batch * n_q * d == 0:
        return xp.zeros(batch * n_q * d)
    _, _, ds, b, _ = _bwd_terms(q, k, v, mask, out, lse, dout, batch, n_q, n_k, d, scale, causal, mode, layout, xp,
                                    tf32, device)
    ka = xp.abs(xp.asarray(k, dtype=xp.float64).reshape(batch, n_k, d))
    with np.errstate(all="ignore"):
        r = abs(float(scale)) * (xp.matmul(b, ka) + _sum(n_k + 2, tf32, device) * xp.matmul(xp.abs(ds), ka))
        return (_clean(r, xp).reshape(-1) + U * _clean(xp.abs(xp.asarray(ref, dtype=xp.float64)), xp)
                + TINY * (n_k + 1))


def _bwd_k_bound(ref, q, k, v, mask, out, lse, dout, batch, n_q, n_k, d, scale, causal, mode, layout, xp=np,
                 tf32=False, device=None):
    batch, n_q, n_k, d = int(batch), int(n_q), int(n_k), int(d)
    if batch * n_k * d == 0:
        return xp.zeros(batch * n_k * d)
    _, _, ds, b, _ = _bwd_terms(q, k, v, mask, out, lse, dout, batch, n_q, n_k, d, scale, causal, mode, layout, xp,
                                    tf32, device)
    qa = xp.abs(xp.asarray(q, dtype=xp.float64).reshape(batch, n_q, d))
    with np.errstate(all="ignore"):
        r = abs(float(scale)) * (xp.matmul(xp.swapaxes(b, 1, 2), qa)
                                 + _sum(n_q + 2, tf32, device) * xp.matmul(xp.swapaxes(xp.abs(ds), 1, 2), qa))
        return (_clean(r, xp).reshape(-1) + U * _clean(xp.abs(xp.asarray(ref, dtype=xp.float64)), xp)
                + TINY * (n_q + 1))


def _bwd_v_bound(ref, q, k, v, mask, out, lse, dout, batch, n_q, n_k, d, scale, causal, mode, layout, xp=np,
                 tf32=False, device=None):
    batch, n_q, n_k, d = int(batch), int(n_q), int(n_k), int(d)
    if batch * n_k * d == 0:
        return xp.zeros(batch * n_k * d)
    p, eta, _, _, g3 = _bwd_terms(q, k, v, mask, out, lse, dout, batch, n_q, n_k, d, scale, causal, mode, layout, xp,
                                    tf32, device)
    with np.errstate(all="ignore"):
        ga = xp.abs(g3)
        pt = xp.swapaxes(p, 1, 2)
        r = xp.matmul(xp.swapaxes(p * eta, 1, 2), ga) + _sum(n_q + 1, tf32, device) * xp.matmul(pt, ga)
        e = float(xp.max(xp.where(p > 0, eta, 0.0))) if p.size else 0.0
        return _clean(r, xp).reshape(-1) * (1 + 4 * e) + U * _clean(xp.abs(xp.asarray(ref, dtype=xp.float64)), xp) \
            + TINY * (n_q + 1)


def _bwd_kv_bound(ref, *args, xp=np, tf32=False, device=None):
    kw = dict(xp=xp, tf32=tf32, device=device)
    return _bwd_k_bound(ref[0], *args, **kw), _bwd_v_bound(ref[1], *args, **kw)


def _bwd_bound(ref, *args, xp=np, tf32=False, device=None):
    kw = dict(xp=xp, tf32=tf32, device=device)
    return _bwd_q_bound(ref[0], *args, **kw), _bwd_k_bound(ref[1], *args, **kw), _bwd_v_bound(ref[2], *args, **kw)


bwd_q_bound, bwd_k_bound, bwd_v_bound, bwd_kv_bound = _bwd_q_bound, _bwd_k_bound, _bwd_v_bound, _bwd_kv_bound

_FWD = ("(out, lse): products of k terms within tc(k) = 48u + 60u ceil(k/8) of sum|a b| (3xTF32 tensor cores "
        "or float32 FMA); eta_ij = (tc(d) + gamma(4))|scale| sum_k|q_ik k_jk| + 4u(|s'| + |mask|) + 2u|s' - m| + "
        "(R+1)(LIB+2u) per weight (R = ceil(n_k/32)-1 online rescales), G = gamma(n_k+2) + tc(64) "
        "(on the CPU: gamma(d+4) for tc(d) + gamma(4), G = gamma(n_k+2)), "
        "W = sum_j p_j eta_j + G, E = max eta + G: "
        "|err out| <= (sum_j p_j (eta_j + G) |v_j| + W sum_j p_j|v_j|)(1+4E)/(1-2E) "
        "+ 2u|out| + TINY; |err lse| <= W(1+4E)/(1-E) + LIB log n_k + 4u(|lse| + |m|) + TINY; "
        "rows without an allowed key: out 0, lse -inf exactly")
register("flash_attention_fwd", _FWD, fwd_bound)
_BWD_COMMON = ("P = exp(s' - lse) with eta^b = delta + 2u|s' - lse| + 2u|lse| + LIB + 2u; "
               "dS error B = P((eta^b+3u)|dP - D| + (tc(d) sum|dout v| + gamma(d) sum|dout out|)(1+eta^b)), 0 on "
               "filled/blocked entries; on the CPU (device='cpu') tc(d) is gamma(d) and the + tc(64) terms are 0")
register("flash_attention_bwd_q", "dQ = scale dS K: |err| <= |scale|(B|K| + (gamma(n_k+2) + tc(64))|dS||K|) + u|dQ| + "
          "TINY(n_k+1); " + _BWD_COMMON, _bwd_q_bound)
register("flash_attention_bwd_k", "dK = scale dS^T Q: |err| <= |scale|(B^T|Q| + (gamma(n_q+2) + tc(64))|dS|^T|Q|) + u|dK| + "
          "TINY(n_q+1); " + _BWD_COMMON, _bwd_k_bound)
register("flash_attention_bwd_v", "dV = P^T dout: |err| <= ((eta^b P)^T|dout| + (gamma(n_q+1) + tc(64)) P^T|dout|)(1+4E) + "
          "u|dV| + TINY(n_q+1); " + _BWD_COMMON, _bwd_v_bound)
register("flash_attention_bwd_kv", "(dK, dV): the bounds of flash_attention_bwd_k and flash_attention_bwd_v",
          _bwd_kv_bound)
register("flash_attention_bwd", "(dQ, dK, dV): the bounds of flash_attention_bwd_q, _bwd_k and _bwd_v",
          _bwd_bound)


# -- packed self-attention: the same kernels per (batch, head) pair, only the addressing differs --------
# (NumPy only: the CuPy variant of the bounds serves the unpacked benchmark checks)
def _packed_args(qkv, batch, heads, n, d):
    q, k, v = S.unpack(qkv, batch, heads, n, d)
    return q, k, v, int(batch) * int(heads), int(n), int(n), int(d)


def packed_fwd_bound(ref, qkv, mask, batch, heads, n, d, scale, causal, mask_mode, mask_layout, device=None):
    q, k, v, bh, nq, nk, dd = _packed_args(qkv, batch, heads, n, d)
    out_ref = S.to_heads(ref[0], batch, heads, n, d)
    out_b, lse_b = fwd_bound((out_ref, ref[1]), q, k, v, mask, bh, nq, nk, dd, scale, causal, mask_mode,
                             mask_layout, device=device)
    return S.from_heads(out_b, batch, heads, n, d), lse_b


def packed_bwd_bound(ref, qkv, mask, out, lse, dout, batch, heads, n, d, scale, causal, mask_mode, mask_layout,
                     device=None):
    q, k, v, bh, nq, nk, dd = _packed_args(qkv, batch, heads, n, d)
    g = np.asarray(ref, dtype=np.float64).reshape(int(batch), int(n), 3, int(heads), int(d)).transpose(2, 0, 3, 1, 4)
    args = (q, k, v, mask, S.to_heads(out, batch, heads, n, d), lse, S.to_heads(dout, batch, heads, n, d), bh, nq,
            nk, dd, scale, causal, mask_mode, mask_layout)
    bounds = _bwd_bound(tuple(g[i].reshape(-1) for i in range(3)), *args, device=device)
    b = np.stack([np.asarray(x).reshape(int(batch), int(heads), int(n), int(d)) for x in bounds])
    return b.transpose(1, 3, 0, 2, 4).reshape(-1)


register("flash_attention_packed_fwd", "(out, lse) of flash_attention_fwd per (batch, head) pair (q, k, v read "
          "from the packed (batch, n, 3, heads, d) buffer, out written (batch, n, heads, d)): the same bound",
          packed_fwd_bound)
register("flash_attention_packed_bwd", "dqkv: the bounds of flash_attention_bwd (dQ, dK, dV) per (batch, head) "
          "pair, written in qkv's layout", packed_bwd_bound)
