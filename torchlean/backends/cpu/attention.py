"""CPU kernels of the attention family: blocked flash attention in float32 NumPy/BLAS.

Never an (n_q, n_k) matrix: the forward walks (batch, query tile) work items, each running over
key tiles with an online softmax (running max m, running sum l, accumulator rescaled by
exp(m_old - m_new)); per tile two float32 GEMMs (S = (q scale) k^T and P v) and one exp. Extra
memory is O(n d) plus a few (TQ, TK) tiles per thread. The backward recomputes P = exp(S - lse)
tile by tile (FlashAttention-2): dq in work items that own a query tile and loop over key tiles,
(dk, dv) in work items that own a key tile and loop over query tiles, so every output element is
written by one work item in a fixed order: deterministic, no atomics. Causal tiles entirely above
the diagonal are skipped. A work item takes a chunk of batch entries (about CHUNK scores per
tile: short sequences, e.g. 256 (batch, head) pairs of 8 tokens, run as one item of batched
GEMMs and row-wise NumPy ops instead of 256 Python iterations; each entry's arithmetic is the same
as alone, so the bits do not depend on the chunk). Work items run on parallel threads with
OpenBLAS at one thread each (the conv family's scheme), each item computed exactly as in one thread.
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


CHUNK = 1 << 16  # score elements per work item: short sequences batch many (batch, head) pairs in one


class _Problem:
    """The arguments of one call, viewed as (batch, n, d) arrays, with the tile helpers. A work item
    is a chunk of batch entries [b0, b1) and a query (or key) tile; its arrays carry the chunk as
    their leading axis, and each entry is computed exactly as it would be alone (one GEMM per entry,
    row-wise reductions)."""

    def __init__(self, q, k, v, mask, batch, n_q, n_k, d, scale, causal, mode, layout):
        self.q3 = q.reshape(batch, n_q, d)
        self.k3 = k.reshape(batch, n_k, d)
        self.v3 = v.reshape(batch, n_k, d)
        self.mask, self.mode, self.layout, self.causal = mask, mode, layout, causal
        self.batch, self.n_q, self.n_k, self.d, self.scale = batch, n_q, n_k, d, F32(scale)

    def chunk(self) -> int:
        """Batch entries per work item: one tile's scores, times the chunk, stay near CHUNK."""
        return max(1, CHUNK // max(1, min(self.n_q, TQ) * min(self.n_k, TK)))

    def key_end(self, i1: int) -> int:
        """Keys needed by the queries < i1 (causal: j <= i)."""
        return min(self.n_k, i1) if self.causal else self.n_k

    def query_start(self, j0: int) -> int:
        """The first query that may see key j0 (causal: i >= j0)."""
        return min(self.n_q, j0) if self.causal else 0

    def mask_tile(self, b0, b1, i0, i1, j0, j1):
        """The mask's (b1 - b0, i1 - i0, j1 - j0) tile (a strided view for one batch entry)."""
        heads, s_n, s_h, s_q, s_k = self.layout
        if b1 - b0 == 1:
            off = (b0 // heads) * s_n + (b0 % heads) * s_h + i0 * s_q + j0 * s_k
            it = self.mask.itemsize
            return as_strided(self.mask[off:], shape=(1, i1 - i0, j1 - j0), strides=(0, s_q * it, s_k * it),
                              writeable=False)
        bs = np.arange(b0, b1)
        off = (bs // heads) * s_n + (bs % heads) * s_h + i0 * s_q + j0 * s_k
        return self.mask[off[:, None, None] + np.arange(i1 - i0)[None, :, None] * s_q
                         + np.arange(j1 - j0)[None, None, :] * s_k]

    def scores(self, b0, b1, qs, i0, i1, j0, j1):
        """(S', allowed-or-None, filled-or-None) of the tile: S' the masked scores, float32."""
        st = np.matmul(qs, self.k3[b0:b1, j0:j1].transpose(0, 2, 1))
        allowed = filled = None
        if self.mode != "none":
            mt = self.mask_tile(b0, b1, i0, i1, j0, j1)
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


def _items(n_outer: int, n: int, tile: int, chunk: int):
    return [(b0, min(n_outer, b0 + chunk), t0, min(n, t0 + tile))
            for b0 in range(0, n_outer, chunk) for t0 in range(0, n, tile)]


def _run_items(items, flops: int, fn) -> None:
    def part(a, e):
        for it in items[a:e]:
            fn(*it)
    _over_images(len(items), flops, part)


def _t(a):
    return a.transpose(0, 2, 1)


def flash_attention_fwd(q, k, v, mask, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout):
    pr = _Problem(q, k, v, mask, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout)
    out = np.empty((batch, n_q, d), F32)
    lse = np.empty((batch, n_q), F32)

    def tile(b0, b1, i0, i1):
        qs = pr.q3[b0:b1, i0:i1] * pr.scale
        shape = (b1 - b0, i1 - i0)
        m = np.full(shape, -np.inf, F32)
        l_ = np.zeros(shape, F32)
        acc = np.zeros(shape + (d,), F32)
        kend = pr.key_end(i1)
        with np.errstate(invalid="ignore", over="ignore"):
            for j0 in range(0, kend, TK):
                j1 = min(kend, j0 + TK)
                st, allowed, _ = pr.scores(b0, b1, qs, i0, i1, j0, j1)
                if allowed is not None:
                    np.copyto(st, F32(-np.inf), where=~allowed)
                m_new = np.maximum(m, st.max(axis=2))
                m_use = np.where(m_new == -np.inf, F32(0), m_new)
                p = np.subtract(st, m_use[..., None], out=st if st.flags.writeable and st.base is None else None)
                np.exp(p, out=p)
                if j0:
                    alpha = np.exp(m - m_use)
                    l_ = l_ * alpha + p.sum(axis=2)
                    acc *= alpha[..., None]
                    acc += np.matmul(p, pr.v3[b0:b1, j0:j1])
                else:
                    l_ = p.sum(axis=2, dtype=F32)
                    acc = np.matmul(p, pr.v3[b0:b1, j0:j1])
                m = m_new
            ok = l_ != 0  # NaN rows stay NaN; only rows without any weight are empty
            out[b0:b1, i0:i1] = np.where(ok[..., None], acc / np.where(ok, l_, F32(1))[..., None], F32(0))
            lse[b0:b1, i0:i1] = np.where(ok, m + np.log(np.where(ok, l_, F32(1))), F32(-np.inf))

    if batch * n_q:
        if n_k == 0:  # no keys: every row is empty
            out[:] = 0
            lse[:] = -np.inf
        else:
            _run_items(_items(batch, n_q, TQ, pr.chunk()), 4 * batch * n_q * n_k * d, tile)
    return out.reshape(-1), lse.reshape(-1)


def _probs(pr, b0, b1, qs, lse_t, i0, i1, j0, j1):
    """(P, live-or-None) of a tile: exp(S' - lse) on allowed keys, 0 elsewhere; live = not filled."""
    st, allowed, filled = pr.scores(b0, b1, qs, i0, i1, j0, j1)
    with np.errstate(invalid="ignore", over="ignore"):
        p = np.subtract(st, lse_t[..., None], out=st)
        np.exp(p, out=p)
    if allowed is not None:
        np.copyto(p, F32(0), where=~allowed)
    # a row without any allowed key has lse -inf: its P is 0 (exp(-inf - -inf) = NaN otherwise)
    if not np.all(np.isfinite(lse_t)):
        p = np.where((lse_t == -np.inf)[..., None], F32(0), p)
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

    def tile(b0, b1, i0, i1):
        qs = pr.q3[b0:b1, i0:i1] * pr.scale
        g = g3[b0:b1, i0:i1]
        acc = None
        kend = pr.key_end(i1)
        for j0 in range(0, kend, TK):
            j1 = min(kend, j0 + TK)
            p, live = _probs(pr, b0, b1, qs, l2[b0:b1, i0:i1], i0, i1, j0, j1)
            with np.errstate(invalid="ignore", over="ignore"):
                ds = np.matmul(g, _t(pr.v3[b0:b1, j0:j1]))
                ds -= dd[b0:b1, i0:i1, None]
                ds *= p
            if live is not None:
                np.copyto(ds, F32(0), where=~live)
            t = np.matmul(ds, pr.k3[b0:b1, j0:j1])
            acc = t if acc is None else acc + t
        if acc is not None:
            dq[b0:b1, i0:i1] = acc * pr.scale

    _run_items(_items(batch, n_q, TQ, pr.chunk()), 6 * batch * n_q * n_k * d, tile)
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

    def tile(b0, b1, j0, j1):
        kv_k, kv_v = pr.k3[b0:b1, j0:j1], pr.v3[b0:b1, j0:j1]
        ak = av = None
        for i0 in range(pr.query_start(j0) // tq * tq, n_q, tq):
            i1 = min(n_q, i0 + tq)
            qs = pr.q3[b0:b1, i0:i1] * pr.scale
            g = g3[b0:b1, i0:i1]
            p, live = _probs(pr, b0, b1, qs, l2[b0:b1, i0:i1], i0, i1, j0, j1)
            tv = np.matmul(_t(p), g)
            with np.errstate(invalid="ignore", over="ignore"):
                ds = np.matmul(g, _t(kv_v))
                ds -= dd[b0:b1, i0:i1, None]
                ds *= p
            if live is not None:
                np.copyto(ds, F32(0), where=~live)
            tk = np.matmul(_t(ds), qs)
            ak = tk if ak is None else ak + tk
            av = tv if av is None else av + tv
        if ak is not None:
            dk[b0:b1, j0:j1] = ak
            dv[b0:b1, j0:j1] = av

    _run_items(_items(batch, n_k, TK, pr.chunk()), 8 * batch * n_q * n_k * d, tile)
    return dk.reshape(-1), dv.reshape(-1)


def flash_attention_bwd_k(*args):
    return flash_attention_bwd_kv(*args)[0]


def flash_attention_bwd_v(*args):
    return flash_attention_bwd_kv(*args)[1]
