"""Flash attention of longer sequences (beyond attention.py's lane kernels): float32 tiles on
Numba's threads, each tile's GEMMs by OpenBLAS's cblas_sgemm called from inside the region.

Layout: score tiles are stored transposed, S^T (keys x queries, row stride TQ). Then every GEMM
takes the plain or the transposed-A form (OpenBLAS's transposed-B form is ~25% slower at these
shapes), with K and V read in place, and every per-query loop (maximum, exp, sum, dS) runs over a
contiguous row of queries: it vectorizes, and each query takes its keys in ascending order, so no
partial lanes are needed for a fixed order. Loops run over all the queries of a row, causally
excluded ones deselected (a loop from the first allowed query does not vectorize).

Forward: a work item is (batch entry, query tile of TQ rows); it walks the key tiles (TK keys,
>= contract.attention.KEY_TILE_MIN) with an online softmax: S^T = K (q scale)^T by one sgemm, the
mask, the tile's maximum per query, m_new, the rescale alpha = expf(m_old - m_new), then P =
expf(S - m_new) by classify.exp32 and the tile's sum per query in the same pass, l = l alpha +
sum, and acc = acc alpha + P V (one sgemm into a scratch, one rounded multiply-add per element);
out = acc / l and lse = m + logf(l) at the end.

Backward (FlashAttention-2): a pair (query tile, key tile) recomputes S and P = expf(S - lse)
and dS = P (dP - D) in one pass (dP^T = V dout^T by sgemm, D = dout . out per row in order); then
dV += P^T dout, dK += dS^T (q scale) and dQ += dS K (three sgemms into a scratch, each added in
place), dQ multiplied by scale at the end. A query tile's operands (q scale, its transpose, dout^T,
D, lse) are loaded once per tile where the plan allows. Every pair's arithmetic is the same in
all three plans, and each output row takes its pairs in the same order (dQ over key tiles, dK and
dV over query tiles, ascending), so the plans give the same bits:
* fused: a work item is one batch entry, query tiles outer, key tiles inner (five GEMMs a pair);
* two passes: dq over (entry, query tile) items, (dk, dv) over (entry, key tile) items (seven GEMMs
  a pair in all): when only one of them is wanted, or when the entries are too few to keep every
  thread busy (the fused plan's items are whole entries).

Causal: a query tile reads keys < its last row + 1 only, and within a tile each query's keys past
the diagonal are given weight 0 (P and dS exactly 0, whatever the score). Masks and NaN / infinity
follow attention.py's module docstring (the same rules as its lane kernels: a row with a NaN or
+inf allowed score gives NaN, a row without a finite one 0 and lse -inf; keys without weight get P
and dS exactly 0; filled keys dS exactly 0).

Threads: the items split into contiguous runs, one per part (parallel.parts), each part with its
scratch tiles allocated once. An item's arithmetic does not depend on which part runs it: the bits
do not depend on the thread count. Operands are placed by a geo table (see attention.py's _geo):
q, k, v and out of one tensor each or slices of a packed qkv, read and written in place (sgemm's
leading dimensions take the row strides).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from . import parallel
from .cblas import NO_TRANS, TRANS, sgemm
from .classify import exp32

__all__ = ["available", "fwd", "bwd", "TQ", "TK"]

F32 = np.float32
TQ = 64    # query rows per tile (4 AVX-512 vectors of float32 in the per-query loops)
TK = 128   # keys per tile (>= contract.attention.KEY_TILE_MIN = 32); 64 x 128 tiles measured fastest
MIN_WORK = 1 << 18  # multiply-adds per part at least (a region's start is a few microseconds)
FUSED_SLACK = 1.3   # the fused backward while its whole-entry items leave threads idle < 30% of the time
GQ, GK, GV, GO, GG, GDQ, GDK, GDV = range(8)  # geo rows: q, k, v, out, dout, dq, dk, dv
WANT_Q, WANT_KV = 1, 2
_INF, _Z, _ONE, _FILL = F32(np.inf), F32(0.0), F32(1.0), F32(-1000.0)


@njit(inline="always")
def _base(geo, r, heads, e):
    """Element offset of row 0 of batch entry e in operand r."""
    return geo[r, 0] + (e // heads) * geo[r, 1] + (e % heads) * geo[r, 3]


@njit(inline="always")
def _addr(a, off):
    return a.ctypes.data + 4 * off


@njit(inline="always")
def _cut(causal, i, j0, w):
    """Keys j0 .. j0 + cut - 1 of the tile are allowed causally for query i."""
    return min(w, max(0, i - j0 + 1)) if causal else w


@njit(inline="always")
def _first_row(causal, i0, jj, nr):
    """Rows r >= this of the query tile at i0 may see key jj (causal: i0 + r >= jj)."""
    return min(nr, max(0, jj - i0)) if causal else 0


@njit(inline="always", error_model="numpy")
def _load_t(x, xb, sx, i0, nr, d, sc, xt):
    """xt[c, r] = x_(i0 + r), c sc: a query tile transposed (d x nr, row stride TQ)."""
    for r in range(nr):
        o = xb + (i0 + r) * sx
        for c in range(d):
            xt[c, r] = x[o + c] * sc


@njit(inline="always", error_model="numpy")
def _mask_tile(s, w, nr, causal, i0, j0, mask, mode, mo, lay, st, track):
    """Applies the mask to the allowed entries of the score tile s (key j, query r): fill -1000,
    hard -inf, add (an -inf entry blocks whatever the score); track: st[j, r] = 0 blocked, 1
    allowed, 2 filled."""
    for j in range(w):
        jj = j0 + j
        for r in range(_first_row(causal, i0, jj, nr), nr):
            mv = mask[mo + (i0 + r) * lay[3] + jj * lay[4]]
            t = s[j, r]
            if mode == 1:
                f = mv == 0.0
                s[j, r] = _FILL if f else t
                if track:
                    st[j, r] = 2 if f else 1
            else:
                b = (mv == 0.0) if mode == 2 else (mv == -_INF)
                s[j, r] = -_INF if b else (t if mode == 2 else t + mv)
                if track:
                    st[j, r] = 0 if b else 1


# -- forward --------------------------------------------------------------------------------------
@njit(cache=True, nogil=True, error_model="numpy")
def _fwd_item(fn, iz, q, k, v, geo, heads, n_q, n_k, d, mask, mode, lay, sc, causal, out, lse, e, i0,
              qt, s, pv, acc, m, l, mu, alpha, ts):
    nr = min(n_q, i0 + TQ) - i0
    _load_t(q, _base(geo, GQ, heads, e), geo[GQ, 2], i0, nr, d, sc, qt)
    kb, sk = _base(geo, GK, heads, e), geo[GK, 2]
    vb, sv = _base(geo, GV, heads, e), geo[GV, 2]
    mo = (e // lay[0]) * lay[1] + (e % lay[0]) * lay[2]
    kend = min(n_k, i0 + nr) if causal else n_k
    for r in range(nr):
        m[r] = -_INF
        l[r] = _Z
        for c in range(d):
            acc[r, c] = _Z
    for j0 in range(0, kend, TK):
        w = min(kend, j0 + TK) - j0
        # S^T (keys x queries) = K (q scale)^T: the plain GEMM form, and every per-query loop
        # below runs over a contiguous row of queries (vectorized, each query's keys in order)
        sgemm(fn, iz, NO_TRANS, NO_TRANS, w, nr, d, _addr(k, kb + j0 * sk), sk, qt.ctypes.data, TQ, s.ctypes.data, TQ)
        if mode != 0:
            _mask_tile(s, w, nr, causal, i0, j0, mask, mode, mo, lay, s, False)
        for r in range(nr):
            ts[r] = -_INF
        # (each loop below runs over all nr queries of a 1-D row, causally excluded ones deselected:
        # a loop from the first allowed query, or over a 2-D index, does not vectorize)
        for j in range(w):
            row, rs = s[j], _first_row(causal, i0, j0 + j, nr)
            for r in range(nr):
                t, x = row[r], ts[r]
                ts[r] = t if ((t > x) | (t != t)) & (r >= rs) else x  # exact, NaN sticky
        for r in range(nr):
            mx, mold = ts[r], m[r]
            mnew = mx if (mx > mold) | (mx != mx) else mold
            u = mnew if (mnew - mnew) == _Z else _Z  # +inf / NaN rows give NaN at the end, -inf rows 0
            mu[r] = u
            alpha[r] = exp32(mold - u)  # 0 while the row had no weight (m -inf), 1 when m stays
            m[r] = mnew
            ts[r] = _Z
        for j in range(w):
            row, rs = s[j], _first_row(causal, i0, j0 + j, nr)
            if rs == 0:
                for r in range(nr):
                    p = exp32(row[r] - mu[r])  # exactly 0 on blocked keys (-inf)
                    row[r] = p
                    ts[r] += p
            else:
                for r in range(nr):
                    p = exp32(row[r] - mu[r])
                    p = p if r >= rs else _Z
                    row[r] = p
                    ts[r] += p
        for r in range(nr):
            l[r] = l[r] * alpha[r] + ts[r]
        sgemm(fn, iz, TRANS, NO_TRANS, nr, d, w, s.ctypes.data, TQ, _addr(v, vb + j0 * sv), sv, pv.ctypes.data, d)
        for r in range(nr):
            a = alpha[r]
            for c in range(d):
                acc[r, c] = acc[r, c] * a + pv[r, c]
    ob, so = _base(geo, GO, heads, e), geo[GO, 2]
    for r in range(nr):
        mr, o = m[r], ob + (i0 + r) * so
        if mr != mr or mr == _INF:
            for c in range(d):
                out[o + c] = np.nan
            lse[e, i0 + r] = np.nan
        elif mr == -_INF:  # no allowed key, or every allowed score -inf
            for c in range(d):
                out[o + c] = _Z
            lse[e, i0 + r] = -_INF
        else:
            lr = l[r]
            for c in range(d):
                out[o + c] = acc[r, c] / lr
            lse[e, i0 + r] = mr + np.log(lr)


@njit(cache=True, nogil=True, parallel=True, error_model="numpy")
def _fwd(fn, iz, q, k, v, geo, heads, n_q, n_k, d, mask, mode, lay, scale, causal, out, lse, nparts):
    batch = lse.shape[0]
    nqt = (n_q + TQ - 1) // TQ
    items = batch * nqt
    sc = np.float32(scale)
    for p in prange(nparts):
        qt = np.empty((d, TQ), F32)
        s = np.empty((TK, TQ), F32)
        pv = np.empty((TQ, d), F32)
        acc = np.empty((TQ, d), F32)
        m = np.empty(TQ, F32)
        l = np.empty(TQ, F32)
        mu = np.empty(TQ, F32)
        alpha = np.empty(TQ, F32)
        ts = np.empty(TQ, F32)
        for it in range(items * p // nparts, items * (p + 1) // nparts):
            _fwd_item(fn, iz, q, k, v, geo, heads, n_q, n_k, d, mask, mode, lay, sc, causal, out, lse,
                      it // nqt, (it % nqt) * TQ, qt, s, pv, acc, m, l, mu, alpha, ts)


# -- backward -------------------------------------------------------------------------------------
@njit(inline="always", error_model="numpy")
def _key_width(causal, n_k, i1, j0):
    """Keys of the pair (query tile ending at i1, key tile at j0): causal reads keys < i1 only."""
    kend = min(n_k, i1) if causal else n_k
    return max(0, min(kend, j0 + TK) - j0)


@njit(cache=True, nogil=True, error_model="numpy")
def _load_rows(q, out, g, geo, heads, n_q, d, sc, lse, e, i0, qs, qt, gt, le, dd):
    """The query tile at i0's operands of every pair: qs = q scale, qt = its transpose, gt =
    dout^T, dd = D_i = dout_i . out_i (in order) and le = lse; returns its rows nr."""
    nr = min(n_q, i0 + TQ) - i0
    qb, sq = _base(geo, GQ, heads, e), geo[GQ, 2]
    gb, sg = _base(geo, GG, heads, e), geo[GG, 2]
    ob, so = _base(geo, GO, heads, e), geo[GO, 2]
    for r in range(nr):
        oq, og, oo = qb + (i0 + r) * sq, gb + (i0 + r) * sg, ob + (i0 + r) * so
        t = _Z
        for c in range(d):
            x = q[oq + c] * sc
            qs[r, c] = x
            qt[c, r] = x
            y = g[og + c]
            gt[c, r] = y
            t += y * out[oo + c]
        dd[r] = t
        le[r] = lse[e, i0 + r]
    return nr


@njit(cache=True, nogil=True, error_model="numpy")
def _pair(fn, iz, k, v, geo, heads, nr, d, mask, mode, lay, causal, e, i0, j0, w, qt, gt, s, ds, st, le, dd):
    """P^T into s and dS^T into ds (w x nr, row stride TQ) of the pair (query tile at i0, loaded
    by _load_rows, key tile at j0 of width w)."""
    kb, sk = _base(geo, GK, heads, e), geo[GK, 2]
    vb, sv = _base(geo, GV, heads, e), geo[GV, 2]
    sgemm(fn, iz, NO_TRANS, NO_TRANS, w, nr, d, _addr(k, kb + j0 * sk), sk, qt.ctypes.data, TQ, s.ctypes.data, TQ)
    sgemm(fn, iz, NO_TRANS, NO_TRANS, w, nr, d, _addr(v, vb + j0 * sv), sv, gt.ctypes.data, TQ, ds.ctypes.data, TQ)
    if mode != 0:
        mo = (e // lay[0]) * lay[1] + (e % lay[0]) * lay[2]
        _mask_tile(s, w, nr, causal, i0, j0, mask, mode, mo, lay, st, True)
    for j in range(w):
        row, drow, srow, rs = s[j], ds[j], st[j], _first_row(causal, i0, j0 + j, nr)
        if mode != 0:
            for r in range(nr):
                lr, sj = le[r], srow[r]
                # exactly 0 when blocked or causally excluded (whatever lse: NaN) or in a row
                # without weight (lse -inf); dS also on filled keys, as in the spec (not 0 (dP - D))
                live = (r >= rs) & (lr != -_INF)
                p = exp32(row[r] - lr)
                p = p if live & (sj != 0) else _Z
                row[r] = p
                drow[r] = p * (drow[r] - dd[r]) if live & (sj == 1) else _Z
        else:
            for r in range(nr):
                lr = le[r]
                live = (r >= rs) & (lr != -_INF)
                p = exp32(row[r] - lr)
                p = p if live else _Z
                row[r] = p
                drow[r] = p * (drow[r] - dd[r]) if live else _Z


@njit(inline="always", error_model="numpy")
def _add_into(dst, base, stride, tmp, rows, d):
    for r in range(rows):
        o = base + r * stride
        for c in range(d):
            dst[o + c] += tmp[r, c]


@njit(inline="always", error_model="numpy")
def _zero_rows(dst, base, stride, rows, d):
    for r in range(rows):
        o = base + r * stride
        for c in range(d):
            dst[o + c] = _Z


@njit(inline="always", error_model="numpy")
def _scale_rows(dst, base, stride, rows, d, sc):
    for r in range(rows):
        o = base + r * stride
        for c in range(d):
            dst[o + c] = dst[o + c] * sc


@njit(inline="always", error_model="numpy")
def _first_query_tile(causal, j0):
    """The first query tile that sees key j0 (causal: a row i >= j0)."""
    return (j0 // TQ) * TQ if causal else 0


@njit(inline="always", error_model="numpy")
def _dkv(fn, iz, g, geo, heads, d, e, i0, j0, nr, w, qs, s, ds, tmp, dk, dv):
    """dv += P^T dout and dk += dS^T (q scale) of one pair (both the plain GEMM form)."""
    gb, sg = _base(geo, GG, heads, e), geo[GG, 2]
    dkb, sdk = _base(geo, GDK, heads, e) + j0 * geo[GDK, 2], geo[GDK, 2]
    dvb, sdv = _base(geo, GDV, heads, e) + j0 * geo[GDV, 2], geo[GDV, 2]
    sgemm(fn, iz, NO_TRANS, NO_TRANS, w, d, nr, s.ctypes.data, TQ, _addr(g, gb + i0 * sg), sg, tmp.ctypes.data, d)
    _add_into(dv, dvb, sdv, tmp, w, d)
    sgemm(fn, iz, NO_TRANS, NO_TRANS, w, d, nr, ds.ctypes.data, TQ, qs.ctypes.data, d, tmp.ctypes.data, d)
    _add_into(dk, dkb, sdk, tmp, w, d)


@njit(inline="always", error_model="numpy")
def _dq(fn, iz, k, geo, heads, d, e, i0, j0, nr, w, ds, tmp, dq):
    """dq += dS K of one pair (unscaled; dS^T is stored, so the transposed-A form, as fast)."""
    kb, sk = _base(geo, GK, heads, e), geo[GK, 2]
    dqb, sdq = _base(geo, GDQ, heads, e) + i0 * geo[GDQ, 2], geo[GDQ, 2]
    sgemm(fn, iz, TRANS, NO_TRANS, nr, d, w, ds.ctypes.data, TQ, _addr(k, kb + j0 * sk), sk, tmp.ctypes.data, d)
    _add_into(dq, dqb, sdq, tmp, nr, d)


@njit(cache=True, nogil=True, error_model="numpy")
def _bwd_item(fn, iz, q, k, v, out, g, geo, heads, n_q, n_k, d, mask, mode, lay, sc, causal, lse, plan, dq, dk, dv,
              e, t0, qs, qt, gt, s, ds, st, le, dd, tmp):
    """plan 0: every pair of entry e, query tiles outer (each loaded once), key tiles inner; 1: dq
    of the query tile at t0 over its key tiles; 2: dk and dv of the key tile at t0 over its query
    tiles. Each output row takes its pairs in ascending order in every plan."""
    if plan == 2:
        j0 = t0
        wt = min(n_k, j0 + TK) - j0
        _zero_rows(dk, _base(geo, GDK, heads, e) + j0 * geo[GDK, 2], geo[GDK, 2], wt, d)
        _zero_rows(dv, _base(geo, GDV, heads, e) + j0 * geo[GDV, 2], geo[GDV, 2], wt, d)
        for i0 in range(_first_query_tile(causal, j0), n_q, TQ):
            w = _key_width(causal, n_k, min(n_q, i0 + TQ), j0)
            if w == 0:
                continue
            nr = _load_rows(q, out, g, geo, heads, n_q, d, sc, lse, e, i0, qs, qt, gt, le, dd)
            _pair(fn, iz, k, v, geo, heads, nr, d, mask, mode, lay, causal, e, i0, j0, w, qt, gt, s, ds, st, le, dd)
            _dkv(fn, iz, g, geo, heads, d, e, i0, j0, nr, w, qs, s, ds, tmp, dk, dv)
        return
    if plan == 0:
        i_lo, i_hi = 0, n_q
        _zero_rows(dk, _base(geo, GDK, heads, e), geo[GDK, 2], n_k, d)
        _zero_rows(dv, _base(geo, GDV, heads, e), geo[GDV, 2], n_k, d)
    else:
        i_lo, i_hi = t0, t0 + 1
    dqb, sdq = _base(geo, GDQ, heads, e), geo[GDQ, 2]
    for i0 in range(i_lo, i_hi, TQ):
        nr = _load_rows(q, out, g, geo, heads, n_q, d, sc, lse, e, i0, qs, qt, gt, le, dd)
        _zero_rows(dq, dqb + i0 * sdq, sdq, nr, d)
        for j0 in range(0, n_k, TK):
            w = _key_width(causal, n_k, i0 + nr, j0)
            if w == 0:
                break
            _pair(fn, iz, k, v, geo, heads, nr, d, mask, mode, lay, causal, e, i0, j0, w, qt, gt, s, ds, st, le, dd)
            if plan == 0:
                _dkv(fn, iz, g, geo, heads, d, e, i0, j0, nr, w, qs, s, ds, tmp, dk, dv)
            _dq(fn, iz, k, geo, heads, d, e, i0, j0, nr, w, ds, tmp, dq)
        _scale_rows(dq, dqb + i0 * sdq, sdq, nr, d, sc)


@njit(cache=True, nogil=True, parallel=True, error_model="numpy")
def _bwd(fn, iz, q, k, v, out, g, geo, heads, n_q, n_k, d, mask, mode, lay, scale, causal, lse, dq, dk, dv, plan,
         nparts):
    """plan 0: fused, items are entries; 1: dq over (entry, query tile); 2: (dk, dv) over (entry,
    key tile)."""
    batch = lse.shape[0]
    sc = np.float32(scale)
    nqt, nkt = (n_q + TQ - 1) // TQ, (n_k + TK - 1) // TK
    per = 1 if plan == 0 else (nqt if plan == 1 else nkt)
    step = TQ if plan == 1 else TK
    items = batch * per
    for p in prange(nparts):
        qs = np.empty((TQ, d), F32)
        qt = np.empty((d, TQ), F32)
        gt = np.empty((d, TQ), F32)
        s = np.empty((TK, TQ), F32)
        ds = np.empty((TK, TQ), F32)
        st = np.empty((TK, TQ), np.int8)
        le = np.empty(TQ, F32)
        dd = np.empty(TQ, F32)
        tmp = np.empty((max(TQ, TK), d), F32)
        for it in range(items * p // nparts, items * (p + 1) // nparts):
            _bwd_item(fn, iz, q, k, v, out, g, geo, heads, n_q, n_k, d, mask, mode, lay, sc, causal, lse, plan, dq,
                      dk, dv, it // per, (it % per) * step, qs, qt, gt, s, ds, st, le, dd, tmp)


# -- entry points -----------------------------------------------------------------------------------
def available(d: int) -> bool:
    """Whether the tiles run here: OpenBLAS's sgemm callable from Numba (parallel.sgemm_address) and
    d > 0 (a GEMM over an empty inner dimension may leave its output unwritten)."""
    return d > 0 and parallel.sgemm_address() is not None


def _parts(work: int, items: int) -> int:
    return parallel.parts(work, items, MIN_WORK)


def fwd(q, k, v, geo, heads, mask, mode, lay, batch, n_q, n_k, d, scale, causal, out, lse) -> None:
    """Writes out (placed by geo) and lse (batch, n_q) of ``batch`` entries; mask, mode and lay as
    attention._mask_args gives them."""
    fn, iz = parallel.sgemm_address()
    parallel.blas_one_thread()
    nqt = -(-n_q // TQ)
    work = batch * n_q * max(n_k, 1) * d
    _fwd(fn, iz, q, k, v, geo, heads, n_q, n_k, d, mask, mode, lay, float(scale), bool(causal), out,
         lse.reshape(batch, n_q), _parts(work, batch * nqt))


def bwd(want, q, k, v, geo, heads, mask, mode, lay, out, lse, dout, batch, n_q, n_k, d, scale, causal,
        dq, dk, dv) -> None:
    """Writes dq (want & WANT_Q) and dk, dv (want & WANT_KV), placed by geo; the others may be
    placeholders (never written)."""
    fn, iz = parallel.sgemm_address()
    parallel.blas_one_thread()
    work = batch * n_q * n_k * d
    args = (fn, iz, q, k, v, out, dout, geo, heads, n_q, n_k, d, mask, mode, lay, float(scale), bool(causal),
            lse.reshape(batch, n_q), dq, dk, dv)
    if want == WANT_Q | WANT_KV:
        p = _parts(work, batch)
        if -(-batch // p) * p <= FUSED_SLACK * batch:
            _bwd(*args, 0, p)
            return
    if want & WANT_Q:
        _bwd(*args, 1, _parts(work, batch * -(-n_q // TQ)))
    if want & WANT_KV:
        _bwd(*args, 2, _parts(work, batch * -(-n_k // TK)))
