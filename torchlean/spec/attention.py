"""Float64 spec of the attention family: flash_attention_fwd and its backward passes.

Written for clarity: every (batch, n_q, n_k) score matrix is materialized in float64 and the
softmax is taken over whole rows (the kernels tile keys and use an online softmax; the CPU kernel
in float32 BLAS tiles, the CUDA kernel in register tiles), so a tiling bug cannot hide here.

Semantics (shared with the primitives, ``torchlean.runtime.primitives_attention``):

* q (batch, n_q, d), k and v (batch, n_k, d), row-major; scores s_ij = (q_i . k_j) * scale.
* causal: key j is allowed for query i iff j <= i (top-left aligned, PyTorch's is_causal); a
  causally excluded key has weight exactly 0, whatever the mask mode.
* mask_mode "none": no mask (never read). "fill" (the seed's): an entry 0.0 blocks, any other
  (1.0) allows, and a blocked score is replaced by -1000.0 (so a fully blocked row averages v
  uniformly). "hard": an entry 0.0 blocks, any other allows; a blocked key gets weight exactly 0.
  "add": the mask is added to the scores (-inf blocks: weight exactly 0).
* A blocked (or causally excluded) key has weight exactly 0 and dS exactly 0 whatever its score
  (a NaN or infinite q . k included: -inf + inf does not unblock it) and whatever dP - D, so the
  forward rows and dS never see a NaN or infinity of a key they block. (The products P v, P^T dout
  and dS^T q remain IEEE sums: 0 times a NaN or infinite entry is NaN there.)
* A row without any allowed key (hard/add mask, causal with n_k = 0, or n_k = 0) gives out 0 and
  lse -inf, and zero gradients (PyTorch's math path gives NaN there; we give the hard-mask zeros).
* mask_layout = (heads, s_n, s_h, s_q, s_k): for batch index b = n * heads + h, the mask entry of
  (b, i, j) is mask[n s_n + h s_h + i s_q + j s_k] (stride 0 on a broadcast axis).
* lse_i = log sum_j exp(s'_ij) over the allowed keys, s' the (filled or added) score.
* Backward (FlashAttention-2, from the saved out and lse as given): P = exp(s' - lse) on allowed
  keys (0 elsewhere), D_i = sum_k dout_ik out_ik, dV = P^T dout, dP = dout V^T, dS = P (dP - D),
  with dS = 0 where the score was filled (fill mode: a constant does not depend on q or k),
  dQ = scale dS K, dK = scale dS^T Q.

Packed self-attention (``flash_attention_packed_fwd`` / ``_bwd``): the same computation over one
qkv buffer laid out (batch, n, 3, heads, d) -- a Linear(E, 3E) output, E = heads d -- with the
output (batch, n, heads, d) and lse (batch, heads, n). Per (batch, head) pair b' = b heads + h it is
flash attention with n_q = n_k = n; the mask layout indexes b' like the unpacked primitives' batch.
Its gradient dqkv has qkv's layout. Specified here by moving the heads and calling the above.
"""

from __future__ import annotations

import numpy as np

__all__ = ["flash_attention_packed_fwd", "flash_attention_packed_bwd", "flash_attention_fwd", "flash_attention_bwd_q", "flash_attention_bwd_k", "flash_attention_bwd_v",
           "flash_attention_bwd_kv", "flash_attention_bwd"]

FILL = -1000.0


def _f(x):
    return np.asarray(x, dtype=np.float64)


def dense_layout(n_q, n_k):
    """The layout of a full (batch, n_q, n_k) mask (the seed's)."""
    return (1, n_q * n_k, 0, n_k, 1)


def mask_matrix(mask, batch, n_q, n_k, layout, xp=np):
    """The (batch, n_q, n_k) mask as a float64 array, gathered through the layout's strides."""
    heads, s_n, s_h, s_q, s_k = (int(v) for v in (layout if layout is not None else dense_layout(n_q, n_k)))
    b = xp.arange(batch)
    off = ((b // heads) * s_n + (b % heads) * s_h)[:, None, None] \
        + (xp.arange(n_q) * s_q)[None, :, None] + (xp.arange(n_k) * s_k)[None, None, :]
    return xp.asarray(mask, dtype=xp.float64).reshape(-1)[off]


def scores(q, k, v, mask, batch, n_q, n_k, d, scale, causal, mask_mode, layout, xp=np):
    """(s', allowed, filled): the scores after the mask, the keys that carry weight, the filled ones."""
    q3 = xp.asarray(q, dtype=xp.float64).reshape(batch, n_q, d)
    k3 = xp.asarray(k, dtype=xp.float64).reshape(batch, n_k, d)
    s = xp.matmul(q3, xp.swapaxes(k3, 1, 2)) * float(scale) if d else xp.zeros((batch, n_q, n_k))
    allowed = xp.ones((batch, n_q, n_k), dtype=bool)
    filled = xp.zeros((batch, n_q, n_k), dtype=bool)
    if mask_mode != "none":
        m = mask_matrix(mask, batch, n_q, n_k, layout, xp)
        if mask_mode == "fill":
            filled = m == 0.0
            s = xp.where(filled, FILL, s)
        elif mask_mode == "hard":
            allowed = ~(m == 0.0)
        else:  # add
            s = s + m
            allowed = ~(m == -xp.inf)
    if causal:
        allowed = allowed & (xp.arange(n_k)[None, None, :] <= xp.arange(n_q)[None, :, None])
    filled = filled & allowed
    return s, allowed, filled


def _lse(s, allowed, xp=np):
    """Row log-sum-exp over the allowed entries, by np.logaddexp folding (not max-shifting).

    A row with an allowed +inf score has undefined weights (inf / inf): its lse is NaN, like its
    output (a convention every backend shares; the mathematical log-sum-exp would be +inf)."""
    with np.errstate(all="ignore"):
        t = xp.where(allowed, s, -xp.inf)
        if t.shape[-1] == 0:
            return xp.full(t.shape[:-1], -xp.inf)
        out = xp.logaddexp.reduce(t, axis=-1) if xp is np else _lse_shifted(t, xp)
        return xp.where((t == xp.inf).any(axis=-1), xp.nan, out)


def _lse_shifted(t, xp):  # array modules without logaddexp.reduce (cupy): shift by the max
    m = xp.max(xp.where(xp.isnan(t), -xp.inf, t), axis=-1, keepdims=True)
    ms = xp.where(xp.isfinite(m), m, 0.0)
    out = (xp.log(xp.sum(xp.exp(t - ms), axis=-1, keepdims=True)) + ms)[..., 0]
    return xp.where(xp.isnan(t).any(axis=-1), xp.nan, out)


def probabilities(s, allowed, lse, xp=np):
    """exp(s - lse) on the allowed keys, exactly 0 on the others and on rows with lse = -inf (no
    allowed key, or every allowed score -inf: such a row is treated as fully blocked)."""
    with np.errstate(all="ignore"):
        p = xp.exp(s - lse[..., None])
    return xp.where(allowed & ~(lse[..., None] == -xp.inf), p, 0.0)


def flash_attention_fwd(q, k, v, mask, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout):
    """(out (batch*n_q*d), lse (batch*n_q))."""
    s, allowed, _ = scores(q, k, v, mask, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout)
    lse = _lse(s, allowed)
    p = probabilities(s, allowed, lse)
    v3 = _f(v).reshape(batch, n_k, d)
    with np.errstate(all="ignore"):
        out = np.matmul(p, v3)
    return out.reshape(-1), lse.reshape(-1)


def _grads(q, k, v, mask, out, lse, dout, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout, xp=np):
    """(dq, dk, dv) as (batch, n, d) float64 arrays, by the formulas in the module docstring."""
    s, allowed, filled = scores(q, k, v, mask, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout, xp)
    lse3 = xp.asarray(lse, dtype=xp.float64).reshape(batch, n_q)
    p = probabilities(s, allowed, lse3, xp)
    q3 = xp.asarray(q, dtype=xp.float64).reshape(batch, n_q, d)
    k3 = xp.asarray(k, dtype=xp.float64).reshape(batch, n_k, d)
    v3 = xp.asarray(v, dtype=xp.float64).reshape(batch, n_k, d)
    o3 = xp.asarray(out, dtype=xp.float64).reshape(batch, n_q, d)
    g3 = xp.asarray(dout, dtype=xp.float64).reshape(batch, n_q, d)
    with np.errstate(all="ignore"):
        dd = xp.sum(g3 * o3, axis=-1)
        dv = xp.matmul(xp.swapaxes(p, 1, 2), g3)
        dp = xp.matmul(g3, xp.swapaxes(v3, 1, 2))
        ds = xp.where(allowed & ~filled, p * (dp - dd[..., None]), 0.0)
        dq = xp.matmul(ds, k3) * float(scale)
        dk = xp.matmul(xp.swapaxes(ds, 1, 2), q3) * float(scale)
    return dq, dk, dv


def flash_attention_bwd_q(q, k, v, mask, out, lse, dout, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout):
    return _grads(q, k, v, mask, out, lse, dout, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout)[0].reshape(-1)


def flash_attention_bwd_k(q, k, v, mask, out, lse, dout, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout):
    return _grads(q, k, v, mask, out, lse, dout, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout)[1].reshape(-1)


def flash_attention_bwd_v(q, k, v, mask, out, lse, dout, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout):
    return _grads(q, k, v, mask, out, lse, dout, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout)[2].reshape(-1)


def flash_attention_bwd_kv(q, k, v, mask, out, lse, dout, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout):
    _, dk, dv = _grads(q, k, v, mask, out, lse, dout, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout)
    return dk.reshape(-1), dv.reshape(-1)


def flash_attention_bwd(q, k, v, mask, out, lse, dout, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout):
    dq, dk, dv = _grads(q, k, v, mask, out, lse, dout, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout)
    return dq.reshape(-1), dk.reshape(-1), dv.reshape(-1)


# -- packed self-attention ----------------------------------------------------------------------------
def unpack(qkv, batch, heads, n, d):
    """q, k, v as flat (batch heads, n, d) float64 arrays from qkv (batch, n, 3, heads, d)."""
    a = _f(qkv).reshape(batch, n, 3, heads, d).transpose(2, 0, 3, 1, 4)
    return tuple(a[i].reshape(-1) for i in range(3))


def to_heads(x, batch, heads, n, d):
    """(batch, n, heads, d) -> flat (batch heads, n, d)."""
    return _f(x).reshape(batch, n, heads, d).transpose(0, 2, 1, 3).reshape(-1)


def from_heads(x, batch, heads, n, d):
    """flat (batch heads, n, d) -> flat (batch, n, heads, d)."""
    return _f(x).reshape(batch, heads, n, d).transpose(0, 2, 1, 3).reshape(-1)


def flash_attention_packed_fwd(qkv, mask, batch, heads, n, d, scale, causal, mask_mode, mask_layout):
    """(out (batch*n*heads*d), lse (batch*heads*n))."""
    q, k, v = unpack(qkv, batch, heads, n, d)
    out, lse = flash_attention_fwd(q, k, v, mask, batch * heads, n, n, d, scale, causal, mask_mode, mask_layout)
    return from_heads(out, batch, heads, n, d), lse


def flash_attention_packed_bwd(qkv, mask, out, lse, dout, batch, heads, n, d, scale, causal, mask_mode,
                               mask_layout):
    """dqkv (batch*n*3*heads*d), qkv's layout."""
    q, k, v = unpack(qkv, batch, heads, n, d)
    grads = flash_attention_bwd(q, k, v, mask, to_heads(out, batch, heads, n, d), lse,
                                to_heads(dout, batch, heads, n, d), batch * heads, n, n, d, scale, causal,
                                mask_mode, mask_layout)
    g = np.stack([x.reshape(batch, heads, n, d) for x in grads])  # (3, batch, heads, n, d)
    return g.transpose(1, 3, 0, 2, 4).reshape(-1)
