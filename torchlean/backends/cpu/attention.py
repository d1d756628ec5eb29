"""CPU kernels of the attention family: blocked flash attention in float32 NumPy/BLAS.

Never an (n_q, n_k) matrix: the forward walks (batch, query tile) work items, each running over
key tiles with an online softmax (running max m, running sum l, accumulator rescaled by
exp(m_old - m_new)); per tile two float32 GEMMs (S = (q scale) k^T and P v) and one exp. Extra
memory is O(n d) plus a few (TQ, TK) tiles per thread. The backward recomputes P = exp(S - lse)
tile by tile (FlashAttention-2): dq in work items that own a query tile and loop over key tiles,
(dk, dv) in work items that own a key tile and loop over query tiles, so every output element is
written by one work item in a fixed order: deterministic, no atomics. Causal tiles entirely above
the diagonal are skipped. Work items run on parallel threads with OpenBLAS at one thread each
(the conv family's scheme), each item computed exactly as in one thread.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .conv import _over_images

__all__ = ["flash_attention_fwd", "flash_attention_bwd_q", "flash_attention_bwd_k", "flash_attention_bwd_v",
           "flash_attention_bwd_kv"]

F32 = np.float32
TQ = 256   # query rows per tile
TK = 1024  # keys per tile (>= contract.attention.KEY_TILE_MIN: at most ceil(n_k / 32) - 1 rescales)
FILL = F32(-1000.0)


class _Problem:
    """The arguments of one call, viewed as (batch, n, d) arrays, with the tile helpers."""

    def __init__(self, q, k, v, mask, batch, n_q, n_k, d, scale, causal, mode, layout):
        self.q3 = q.reshape(batch, n_q, d)
        self.k3 = k.reshape(batch, n_k, d)
        self.v3 = v.reshape(batch, n_k, d)
        self.mask, self.mode, self.layout, self.causal = mask, mode, layout, causal
        self.batch, self.n_q, self.n_k, self.d, self.scale = batch, n_q, n_k, d, F32(scale)

    def key_end(self, i1: int) -> int:
        """Keys needed by the queries < i1 (causal: j <= i)."""
        return min(self.n_k, i1) if self.causal else self.n_k

    def query_start(self, j0: int) -> int:
        """The first query that may see key j0 (causal: i >= j0)."""
        return min(self.n_q, j0) if self.causal else 0

    def scores(self, b, qs, i0, i1, j0, j1):
        """(S', allowed-or-None, filled-or-None) of the tile: S' the masked scores, float32."""
        st = qs @ self.k3[b, j0:j1].T
        allowed = filled = None
        if self.mode != "none":
            heads, s_n, s_h, s_q, s_k = self.layout
            off = (b // heads) * s_n + (b % heads) * s_h + i0 * s_q + j0 * s_k
            it = self.mask.itemsize
            mt = as_strided(self.mask[off:], shape=(i1 - i0, j1 - j0), strides=(s_q * it, s_k * it), writeable=False)
            if self.mode == "fill":
                filled = mt == 0
                st = np.where(filled, FILL, st)
            elif self.mode == "hard":
                allowed = mt != 0
            else:
                st += mt
        if self.causal and j1 - 1 > i0:  # the tile reaches above the diagonal
            c = np.arange(j0, j1)[None, :] <= np.arange(i0, i1)[:, None]
            allowed = c if allowed is None else allowed & c
        return st, allowed, filled


def _items(n_outer: int, n: int, tile: int):
    return [(b, t0, min(n, t0 + tile)) for b in range(n_outer) for t0 in range(0, n, tile)]


def _run_items(items, flops: int, fn) -> None:
    def part(a, e):
        for it in items[a:e]:
            fn(*it)
    _over_images(len(items), flops, part)


def flash_attention_fwd(q, k, v, mask, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout):
    pr = _Problem(q, k, v, mask, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout)
    out = np.empty((batch, n_q, d), F32)
    lse = np.empty((batch, n_q), F32)

    def tile(b, i0, i1):
        qs = pr.q3[b, i0:i1] * pr.scale
        rows = i1 - i0
        m = np.full(rows, -np.inf, F32)
        l_ = np.zeros(rows, F32)
        acc = np.zeros((rows, d), F32)
        kend = pr.key_end(i1)
        with np.errstate(invalid="ignore", over="ignore"):
            for j0 in range(0, kend, TK):
                j1 = min(kend, j0 + TK)
                st, allowed, _ = pr.scores(b, qs, i0, i1, j0, j1)
                if allowed is not None:
                    np.copyto(st, F32(-np.inf), where=~allowed)
                m_new = np.maximum(m, st.max(axis=1))
                m_use = np.where(m_new == -np.inf, F32(0), m_new)
                p = np.subtract(st, m_use[:, None], out=st if st.flags.writeable and st.base is None else None)
                np.exp(p, out=p)
                if j0:
                    alpha = np.exp(m - m_use)
                    l_ = l_ * alpha + p.sum(axis=1)
                    acc *= alpha[:, None]
                    acc += p @ pr.v3[b, j0:j1]
                else:
                    l_ = p.sum(axis=1, dtype=F32)
                    acc = p @ pr.v3[b, j0:j1]
                m = m_new
            ok = l_ != 0  # NaN rows stay NaN; only rows without any weight are empty
            out[b, i0:i1] = np.where(ok[:, None], acc / np.where(ok, l_, F32(1))[:, None], F32(0))
            lse[b, i0:i1] = np.where(ok, m + np.log(np.where(ok, l_, F32(1))), F32(-np.inf))

    if batch * n_q:
        if n_k == 0:  # no keys: every row is empty
            out[:] = 0
            lse[:] = -np.inf
        else:
            _run_items(_items(batch, n_q, TQ), 4 * batch * n_q * n_k * d, tile)
    return out.reshape(-1), lse.reshape(-1)


def _probs(pr, b, qs, lse_t, i0, i1, j0, j1):
    """(P, live-or-None) of a tile: exp(S' - lse) on allowed keys, 0 elsewhere; live = not filled."""
    st, allowed, filled = pr.scores(b, qs, i0, i1, j0, j1)
    with np.errstate(invalid="ignore", over="ignore"):
        p = np.subtract(st, lse_t[:, None], out=st)
        np.exp(p, out=p)
    if allowed is not None:
        np.copyto(p, F32(0), where=~allowed)
    # a row without any allowed key has lse -inf: its P is 0 (exp(-inf - -inf) = NaN otherwise)
    if not np.all(np.isfinite(lse_t)):
        p = np.where((lse_t == -np.inf)[:, None], F32(0), p)
    live = None if filled is None else ~filled
    return p, live


def _rowdot(dout, out, batch, n_q, d):
    return np.einsum("bij,bij->bi", dout.reshape(batch, n_q, d), out.reshape(batch, n_q, d), dtype=F32)


def flash_attention_bwd_q(q, k, v, mask, out, lse, dout, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout):
    pr = _Problem(q, k, v, mask, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout)
    dq = np.zeros((batch, n_q, d), F32)
    if batch * n_q * n_k * d == 0:
        return dq.reshape(-1)
    g3 = dout.reshape(batch, n_q, d)
    l2 = lse.reshape(batch, n_q)
    dd = _rowdot(dout, out, batch, n_q, d)

    def tile(b, i0, i1):
        qs = pr.q3[b, i0:i1] * pr.scale
        g = g3[b, i0:i1]
        acc = None
        kend = pr.key_end(i1)
        for j0 in range(0, kend, TK):
            j1 = min(kend, j0 + TK)
            p, live = _probs(pr, b, qs, l2[b, i0:i1], i0, i1, j0, j1)
            with np.errstate(invalid="ignore", over="ignore"):
                ds = g @ pr.v3[b, j0:j1].T
                ds -= dd[b, i0:i1, None]
                ds *= p
            if live is not None:
                np.copyto(ds, F32(0), where=~live)
            t = ds @ pr.k3[b, j0:j1]
            acc = t if acc is None else acc + t
        if acc is not None:
            dq[b, i0:i1] = acc * pr.scale

    _run_items(_items(batch, n_q, TQ), 6 * batch * n_q * n_k * d, tile)
    return dq.reshape(-1)


def flash_attention_bwd_kv(q, k, v, mask, out, lse, dout, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout):
    pr = _Problem(q, k, v, mask, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout)
    dk = np.zeros((batch, n_k, d), F32)
    dv = np.zeros((batch, n_k, d), F32)
    if batch * n_q * n_k * d == 0:
        return dk.reshape(-1), dv.reshape(-1)
    g3 = dout.reshape(batch, n_q, d)
    l2 = lse.reshape(batch, n_q)
    dd = _rowdot(dout, out, batch, n_q, d)
    tq = TQ

    def tile(b, j0, j1):
        kv_k, kv_v = pr.k3[b, j0:j1], pr.v3[b, j0:j1]
        ak = av = None
        for i0 in range(pr.query_start(j0) // tq * tq, n_q, tq):
            i1 = min(n_q, i0 + tq)
            qs = pr.q3[b, i0:i1] * pr.scale
            g = g3[b, i0:i1]
            p, live = _probs(pr, b, qs, l2[b, i0:i1], i0, i1, j0, j1)
            tv = p.T @ g
            with np.errstate(invalid="ignore", over="ignore"):
                ds = g @ kv_v.T
                ds -= dd[b, i0:i1, None]
                ds *= p
            if live is not None:
                np.copyto(ds, F32(0), where=~live)
            tk = ds.T @ qs
            ak = tk if ak is None else ak + tk
            av = tv if av is None else av + tv
        if ak is not None:
            dk[b, j0:j1] = ak
            dv[b, j0:j1] = av

    _run_items(_items(batch, n_k, TK), 8 * batch * n_q * n_k * d, tile)
    return dk.reshape(-1), dv.reshape(-1)


def flash_attention_bwd_k(*args):
    return flash_attention_bwd_kv(*args)[0]


def flash_attention_bwd_v(*args):
    return flash_attention_bwd_kv(*args)[1]
