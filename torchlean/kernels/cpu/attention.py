"""CPU kernels of the attention family: flash attention in float32, never an (n_q, n_k) matrix.

Three paths, by size and platform:
* short sequences (n_q, n_k <= SMALL_N and n_q n_k d <= SMALL_WORK): the Numba lane kernels below;
* longer ones: attention_tiles.py, (TQ, TK) tiles on Numba's threads with OpenBLAS's sgemm called
  from inside the region (FlashAttention-2: online softmax forward, dq over query tiles and
  (dk, dv) over key tiles, or one fused pass), where parallel.sgemm_address() finds that sgemm and
  d > 0;
* elsewhere (another BLAS, Numba's workqueue layer, d = 0): blocked NumPy/BLAS tiles on the calling
  thread (_Problem below), the same FlashAttention-2 structure: a work item takes a chunk of batch
  entries (about CHUNK scores per tile) and a query (or key) tile, each entry computed as alone.
Every output element is written by one work item in a fixed order: deterministic, no atomics, and
the bits depend neither on the thread count nor on the chunking. Causal tiles entirely above the
diagonal are skipped.

Short sequences (n_q, n_k <= SMALL_N and n_q n_k d <= SMALL_WORK: e.g. 256 (batch, head) pairs
of 8 tokens with d = 16) take one Numba kernel per primitive: there GEMM calls on tiny tiles cost
more than the work.
The kernel takes blocks of LANES batch entries and makes them SIMD lanes (the block's q, k, v, ...
transposed to (row, d, lane) by 8 x 8 tiles; every loop then runs over the lanes, which vectorize,
where loops over n = 8 keys or d = 16 would not). The arithmetic is the float32 model the contract
is derived for, operation by operation: q pre-scaled (one rounding), scores as float32 dot products
over d in order (gamma(d)), the mask (fill -1000, hard, add: one rounding), the row maximum m,
weights expf(s - m) by classify.exp32 (s - m rounded, then within 1.7u < LIB), their sum l and
sum p v in key order (gamma(n_k)), out = acc / l (one rounding), lse = m + logf(l); no online
rescaling (R = 0). The backward recomputes P = expf(s - lse) the same way, D and dP as float32 dot
products, dS = P (dP - D) (0 where filled), dQ = (sum_j dS k_j) scale in key order, dK = sum_i dS
(q scale) and dV = sum_i P dout in query order (one pass for all three when all are wanted: the
same sums as separate dq and (dk, dv) passes). Each lane's operations are the same whatever its
block, the vector width or the thread (no fastmath: nothing is reassociated or contracted), so the
bits depend neither on LANES nor on the path (serial below PAR_WORK multiply-adds, the blocks dealt
to the pool above, as tasks.py tasks) nor on the thread count. NaN and infinity follow the spec: a row with a NaN or +inf
allowed score gives NaN, a row without a finite allowed score 0 and -inf; a key without weight
(blocked by a hard or add mask, causally excluded) gets P and dS exactly 0 whatever its score (an
add mask's -inf blocks a NaN or +inf score too) and whatever dP - D, as in the spec (every path;
the NumPy path mends a tile only when a reduction over it shows a NaN or infinity).
"""

from __future__ import annotations


import numpy as np
from numpy.lib.stride_tricks import as_strided

from numba import carray, njit

from ..caches import memo
from . import attention_tiles as tiles
from . import tasks
from .classify import exp32

__all__ = ["flash_attention_packed_fwd", "flash_attention_packed_bwd",
           "flash_attention_fwd", "flash_attention_bwd_q", "flash_attention_bwd_k", "flash_attention_bwd_v",
           "flash_attention_bwd_kv", "flash_attention_bwd"]

F32 = np.float32
TQ = 256   # query rows per tile
TK = 1024  # keys per tile (>= contract.attention.KEY_TILE_MIN: at most ceil(n_k / 32) - 1 rescales)
FILL = F32(-1000.0)


CHUNK = 1 << 16  # score elements per work item: short sequences batch many (batch, head) pairs in one
SMALL_N = 32       # the Numba kernels take n_q, n_k <= SMALL_N with n_q n_k d <= SMALL_WORK (module docstring)
SMALL_WORK = 4096  # up to here they win (BLAS calls on such small tiles cost more than the work),
                   # at (32, 32, 32) or (32, 32, 64) per entry BLAS tiles win
LANES = 64        # Numba kernels: batch entries computed side by side as SIMD lanes
PAR_WORK = 1 << 16  # Numba kernels: batch * n_q * n_k * d of at least this spread blocks over threads
                    # (an OpenMP region starts in a few microseconds, so small batches split too)
_MODES = {"none": 0, "fill": 1, "hard": 2, "add": 3}
_NO_MASK = np.zeros(1, F32)
_NO_LAYOUT = np.array([1, 0, 0, 0, 0], np.int64)
_INF32 = F32(np.inf)
_FILL32 = F32(-1000.0)
_Z32, _ONE32 = F32(0.0), F32(1.0)


# -- Numba kernels for short sequences --------------------------------------------------------------
# An operand of the Numba kernels is a flat float32 array and a row of ``geo`` (offset, outer stride,
# row stride, head stride), in elements, d contiguous: batch entry e = outer * heads + head, row i,
# channel c is at offset + outer s_outer + head s_head + i s_row + c. So q, k, v of one tensor (heads
# = 1) and the q, k, v slices of a packed qkv (batch, n, 3, heads, d) are read in place, and out or
# dqkv written in place, by one compiled kernel (all 1-D arrays).
# geo rows: q, k, v, out, dout, dq, dk, dv (shared with attention_tiles)
_GQ, _GK, _GV, _GO, _GG, _GDQ, _GDK, _GDV = tiles.GQ, tiles.GK, tiles.GV, tiles.GO, tiles.GG, tiles.GDQ, \
    tiles.GDK, tiles.GDV


@njit(inline="always", error_model="numpy")
def _lane_offsets(geo, r, heads, b0, nb):
    """Where row 0 of each lane's batch entry b0 + l starts in operand r."""
    off = np.empty(nb, np.int64)
    for l in range(nb):
        e = b0 + l
        off[l] = geo[r, 0] + (e // heads) * geo[r, 1] + (e % heads) * geo[r, 3]
    return off


@njit(inline="always", error_model="numpy")
def _lanes_in(src, geo, r, heads, b0, out, mul):
    """out[i, c, l] = (row i, channel c of batch entry b0 + l of operand r) * mul (float32; mul = 1
    is exact): the block's entries become SIMD lanes. A transpose by 8 x 8 tiles of constant size
    (unrolled; vectorizing the plain loops would use slower gathers or scatters), the ragged
    edges element by element. The tile loops index unsigned: a signed index could be negative for
    all Numba knows, and its wraparound check keeps the tiles scalar."""
    n, d, nb = out.shape[0], out.shape[1], out.shape[2]
    off = _lane_offsets(geo, r, heads, b0, nb)
    s_n = geo[r, 2]
    l8, d8 = nb - nb % 8, d - d % 8
    for l0 in range(0, l8, 8):
        for i in range(n):
            for c0 in range(0, d8, 8):
                for x in range(8):
                    for y in range(8):
                        out[i, c0 + x, l0 + y] = src[np.uint64(off[l0 + y] + i * s_n + c0) + np.uint64(x)] * mul
    for l in range(nb):
        for i in range(n):
            for c in range(d8 if l < l8 else 0, d):
                out[i, c, l] = src[off[l] + i * s_n + c] * mul


@njit(inline="always", error_model="numpy")
def _lanes_out(src3, dst, geo, r, heads, b0):
    """The inverse of _lanes_in (no arithmetic): row j, channel c of batch entry b0 + l of operand r
    = src3[j, c, l]."""
    n, d, nb = src3.shape[0], src3.shape[1], src3.shape[2]
    off = _lane_offsets(geo, r, heads, b0, nb)
    s_n = geo[r, 2]
    l8, d8 = nb - nb % 8, d - d % 8
    for l0 in range(0, l8, 8):
        for j in range(n):
            for c0 in range(0, d8, 8):
                for y in range(8):
                    for x in range(8):
                        dst[np.uint64(off[l0 + y] + j * s_n + c0) + np.uint64(x)] = src3[j, c0 + x, l0 + y]
    for l in range(nb):
        for j in range(n):
            for c in range(d8 if l < l8 else 0, d):
                dst[off[l] + j * s_n + c] = src3[j, c, l]


@njit(inline="always", error_model="numpy")
def _scores(qt, kt, i, kend, nb, mask, mode, moff, s_q, s_k, srow, state):
    """srow[j, l] = the masked score of query i and key j of lane l (j < kend): a float32 dot
    product over d in order (q pre-scaled); state[j, l] = 0 blocked (srow -inf), 1 allowed, 2 filled."""
    d = qt.shape[1]
    for j in range(kend):
        sj = srow[j]
        for l in range(nb):
            sj[l] = _Z32
        kj = kt[j]
        for c in range(d):
            qc, kc = qt[i, c], kj[c]
            for l in range(nb):
                sj[l] += qc[l] * kc[l]
    if mode != 0:
        for j in range(kend):
            for l in range(nb):
                mv = mask[moff[l] + i * s_q + j * s_k]
                st = 1
                if mode == 1:
                    if mv == 0.0:
                        srow[j, l] = _FILL32
                        st = 2
                elif mode == 2:
                    if mv == 0.0:
                        st = 0
                        srow[j, l] = -_INF32
                elif mv == -_INF32:  # blocks whatever the score: inf + -inf or NaN + -inf is no weight
                    st = 0
                    srow[j, l] = -_INF32
                else:
                    srow[j, l] += mv
                state[j, l] = st


@njit(inline="always", error_model="numpy")
def _offsets(lay, b0, nb):
    heads, s_n, s_h = lay[0], lay[1], lay[2]
    moff = np.empty(nb, np.int64)
    for l in range(nb):
        b = b0 + l
        moff[l] = (b // heads) * s_n + (b % heads) * s_h
    return moff


@njit(cache=True, error_model="numpy")
def _fwd_block(q, k, v, geo, heads, n_q, n_k, d, mask, mode, lay, scale, causal, out, lse, b0, b1):
    s_q, s_k = lay[3], lay[4]
    nb = b1 - b0
    qt = np.empty((n_q, d, nb), F32)
    kt = np.empty((n_k, d, nb), F32)
    vt = np.empty((n_k, d, nb), F32)
    ot = np.empty((n_q, d, nb), F32)
    _lanes_in(q, geo, _GQ, heads, b0, qt, np.float32(scale))
    _lanes_in(k, geo, _GK, heads, b0, kt, _ONE32)
    _lanes_in(v, geo, _GV, heads, b0, vt, _ONE32)
    moff = _offsets(lay, b0, nb)
    srow = np.empty((n_k, nb), F32)
    state = np.ones((n_k, nb), np.int8)
    m = np.empty(nb, F32)
    mu = np.empty(nb, F32)
    tot = np.empty(nb, F32)
    for i in range(n_q):
        kend = min(n_k, i + 1) if causal else n_k
        _scores(qt, kt, i, kend, nb, mask, mode, moff, s_q, s_k, srow, state)
        for l in range(nb):
            m[l] = -_INF32
            tot[l] = _Z32
        for j in range(kend):
            sj = srow[j]
            for l in range(nb):
                t = sj[l]
                m[l] = t if (t > m[l]) | (t != t) else m[l]  # NaN sticks
        for l in range(nb):  # the shift: +inf / NaN rows give NaN below, -inf rows are empty
            ml = m[l]
            mu[l] = ml if (ml - ml) == _Z32 else _Z32
        acc = ot[i]
        acc[:] = _Z32
        for j in range(kend):
            sj = srow[j]
            for l in range(nb):  # (loops kept to one store each: they vectorize)
                sj[l] = exp32(sj[l] - mu[l])  # exactly 0 on blocked keys (-inf)
            for l in range(nb):
                tot[l] += sj[l]
            vj = vt[j]
            for c in range(d):
                ac, vc = acc[c], vj[c]
                for l in range(nb):
                    ac[l] += sj[l] * vc[l]
        for c in range(d):
            ac = acc[c]
            for l in range(nb):
                ml = m[l]
                if ml != ml or ml == _INF32:
                    ac[l] = np.nan
                elif ml == -_INF32:  # no allowed key, or every allowed score -inf
                    ac[l] = _Z32
                else:
                    ac[l] = ac[l] / tot[l]
        for l in range(nb):
            ml = m[l]
            if ml != ml or ml == _INF32:
                lse[b0 + l, i] = np.nan
            elif ml == -_INF32:
                lse[b0 + l, i] = -_INF32
            else:
                lse[b0 + l, i] = ml + np.log(tot[l])
    _lanes_out(ot, out, geo, _GO, heads, b0)


# The lane kernels run as tasks (tasks.py: a block body compiles once, as a cached callback, rather
# than again inside a parallel wrapper); part i is block i of ``block`` batch entries.
def _fwd_task(i, p):
    w = carray(p, 23)
    batch, n_q, block = w[21], w[9], w[22]
    _fwd_block(tasks.as_f32(w[0], w[1]), tasks.as_f32(w[2], w[3]), tasks.as_f32(w[4], w[5]),
               tasks.as_i64(w[6], (w[7], 4)), w[8], n_q, w[10], w[11], tasks.as_f32(w[12], w[13]), w[14],
               tasks.as_i64(w[15], 5), tasks.as_float(w[16]), w[17] != 0, tasks.as_f32(w[18], w[19]),
               tasks.as_f32(w[20], (batch, n_q)), i * block, min(batch, (i + 1) * block))


_FWD_TASK = tasks.Task(_fwd_task)


_WANT_Q, _WANT_KV, _WANT_QKV = 1, 2, 3  # the backward kernels' passes: dq, (dk, dv), or all three


@njit(cache=True, error_model="numpy")
def _bwd_block(q, k, v, geo, heads, n_q, n_k, d, mask, mode, lay, scale, causal, out, lse2, g, want, dq, dk, dv,
               b0, b1):
    """dq (want & 1) and/or (dk, dv) (want & 2) of the entries [b0, b1) as lanes, float32 as in
    the module docstring; one pass computes P and dS once for both (the same sums, in the same order,
    as two passes)."""
    s_q, s_k = lay[3], lay[4]
    nb = b1 - b0
    sc = np.float32(scale)
    want_q = (want & _WANT_Q) != 0
    want_kv = (want & _WANT_KV) != 0
    qt = np.empty((n_q, d, nb), F32)
    kt = np.empty((n_k, d, nb), F32)
    vt = np.empty((n_k, d, nb), F32)
    gt = np.empty((n_q, d, nb), F32)
    ot = np.empty((n_q, d, nb), F32)
    _lanes_in(q, geo, _GQ, heads, b0, qt, sc)
    _lanes_in(k, geo, _GK, heads, b0, kt, _ONE32)
    _lanes_in(v, geo, _GV, heads, b0, vt, _ONE32)
    _lanes_in(g, geo, _GG, heads, b0, gt, _ONE32)
    _lanes_in(out, geo, _GO, heads, b0, ot, _ONE32)
    moff = _offsets(lay, b0, nb)
    srow = np.empty((n_k, nb), F32)
    dsr = np.empty((n_k, nb), F32)
    state = np.ones((n_k, nb), np.int8)
    le = np.empty(nb, F32)
    dd = np.empty(nb, F32)
    aq = np.empty((n_q if want_q else 0, d, nb), F32)
    ak = np.zeros((n_k if want_kv else 0, d, nb), F32)
    av = np.zeros((n_k if want_kv else 0, d, nb), F32)
    for i in range(n_q):
        kend = min(n_k, i + 1) if causal else n_k
        _scores(qt, kt, i, kend, nb, mask, mode, moff, s_q, s_k, srow, state)
        for l in range(nb):
            le[l] = lse2[b0 + l, i]
            dd[l] = _Z32
        gi, oi, qi = gt[i], ot[i], qt[i]
        for c in range(d):
            gc, oc = gi[c], oi[c]
            for l in range(nb):
                dd[l] += gc[l] * oc[l]  # D_i = dout_i . out_i
        for j in range(kend):
            sj, dj, stj, vj = srow[j], dsr[j], state[j], vt[j]
            for l in range(nb):
                dj[l] = _Z32
            for c in range(d):
                gc, vc = gi[c], vj[c]
                for l in range(nb):
                    dj[l] += gc[l] * vc[l]  # dP_ij = dout_i . v_j
            for l in range(nb):
                p = exp32(sj[l] - le[l])  # 0 on blocked keys (-inf); NaN stays NaN
                sj[l] = _Z32 if (stj[l] == 0) | (le[l] == -_INF32) else p
            for l in range(nb):
                # blocked or filled: exactly 0 as in the spec, not 0 * (dP - D), NaN when that is not finite
                dj[l] = sj[l] * (dj[l] - dd[l]) if stj[l] == 1 else _Z32
        if want_q:
            acc = aq[i]
            acc[:] = _Z32
            for j in range(kend):
                dj, kj = dsr[j], kt[j]
                for c in range(d):
                    ac, kc = acc[c], kj[c]
                    for l in range(nb):
                        ac[l] += dj[l] * kc[l]
            for c in range(d):
                ac = acc[c]
                for l in range(nb):
                    ac[l] = ac[l] * sc
        if want_kv:
            for j in range(kend):
                sj, dj, akj, avj = srow[j], dsr[j], ak[j], av[j]
                for c in range(d):
                    avc, gc = avj[c], gi[c]
                    for l in range(nb):
                        avc[l] += sj[l] * gc[l]
                    akc, qc = akj[c], qi[c]
                    for l in range(nb):
                        akc[l] += dj[l] * qc[l]
    if want_q:
        _lanes_out(aq, dq, geo, _GDQ, heads, b0)
    if want_kv:
        _lanes_out(ak, dk, geo, _GDK, heads, b0)
        _lanes_out(av, dv, geo, _GDV, heads, b0)


def _bwd_task(i, p):
    w = carray(p, 32)
    batch, n_q, block = w[21], w[9], w[31]
    _bwd_block(tasks.as_f32(w[0], w[1]), tasks.as_f32(w[2], w[3]), tasks.as_f32(w[4], w[5]),
               tasks.as_i64(w[6], (w[7], 4)), w[8], n_q, w[10], w[11], tasks.as_f32(w[12], w[13]), w[14],
               tasks.as_i64(w[15], 5), tasks.as_float(w[16]), w[17] != 0, tasks.as_f32(w[18], w[19]),
               tasks.as_f32(w[20], (batch, n_q)), tasks.as_f32(w[22], w[23]), w[24], tasks.as_f32(w[25], w[26]),
               tasks.as_f32(w[27], w[28]), tasks.as_f32(w[29], w[30]), i * block, min(batch, (i + 1) * block))


_BWD_TASK = tasks.Task(_bwd_task)


def _small(batch, n_q, n_k, d) -> bool:
    return n_q <= SMALL_N and n_k <= SMALL_N and 0 < n_q * n_k * d <= SMALL_WORK and batch > 0


def _mask_args(mask, n_q, n_k, mask_mode, mask_layout):
    mk = _NO_MASK if mask is None else mask
    if mask_mode == "none":
        lay = _NO_LAYOUT
    else:  # the runtime always passes a layout; None (a direct call) means the dense one
        lay = np.asarray((1, n_q * n_k, 0, n_k, 1) if mask_layout is None else mask_layout, np.int64)
    return mk, _MODES[mask_mode], lay


def _parallel(batch, n_q, n_k, d) -> bool:
    return batch * n_q * n_k * d >= PAR_WORK and batch > LANES


@memo("cpu.attention.operands", 64)
def _geo(packed: bool, heads: int, n_q: int, n_k: int, d: int) -> np.ndarray:
    """The kernels' operand table (see _GQ ...): q, k, v, dq, dk, dv as slices of a packed
    (batch, n, 3, heads, d) tensor and out, dout as (batch, n, heads, d) when packed; else every
    operand its own (batch, n, d) array (heads = 1)."""
    if packed:
        slot = [(s * heads * d, n_q * 3 * heads * d, 3 * heads * d, d) for s in range(3)]
        last = (0, n_q * heads * d, heads * d, d)
        rows = slot + [last, last] + slot
    else:
        rq, rk = (0, n_q * d, d, 0), (0, n_k * d, d, 0)
        rows = [rq, rk, rk, rq, rq, rq, rk, rk]
    g = np.array(rows, np.int64)
    g.flags.writeable = False
    return g


def _fwd_geo(q, k, v, geo, heads, mask, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout, out, lse):
    """The Numba forward of ``batch`` entries (heads per outer index) over flat operands placed by
    geo: writes out and lse (batch n_q); the lane kernels for short sequences, else the tiles."""
    margs = _mask_args(mask, n_q, n_k, mask_mode, mask_layout)
    if not _small(batch, n_q, n_k, d):
        tiles.fwd(q, k, v, geo, heads, *margs, batch, n_q, n_k, d, scale, causal, out, lse)
        return
    mk, mode, lay = margs
    words = tasks.pack(q, q.size, k, k.size, v, v.size, geo, geo.shape[0], heads, n_q, n_k, d, mk, mk.size, mode,
                       lay, float(scale), bool(causal), out, out.size, lse, batch, LANES)
    tasks.run(_FWD_TASK, words, -(-batch // LANES), _parallel(batch, n_q, n_k, d))


def _bwd_geo(want, q, k, v, geo, heads, mask, out, lse, dout, batch, n_q, n_k, d, scale, causal, mask_mode,
             mask_layout, dq, dk, dv):
    """The Numba backward: writes dq (want & _WANT_Q) and dk, dv (want & _WANT_KV); the others may
    be placeholders."""
    margs = _mask_args(mask, n_q, n_k, mask_mode, mask_layout)
    if not _small(batch, n_q, n_k, d):
        tiles.bwd(want, q, k, v, geo, heads, *margs, out, lse, dout, batch, n_q, n_k, d, scale, causal, dq, dk, dv)
        return
    mk, mode, lay = margs
    words = tasks.pack(q, q.size, k, k.size, v, v.size, geo, geo.shape[0], heads, n_q, n_k, d, mk, mk.size, mode,
                       lay, float(scale), bool(causal), out, out.size, lse, batch, dout, dout.size, want, dq, dq.size,
                       dk, dk.size, dv, dv.size, LANES)
    tasks.run(_BWD_TASK, words, -(-batch // LANES), _parallel(batch, n_q, n_k, d))


def _fwd_numba(q, k, v, mask, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout):
    out = np.empty(batch * n_q * d, F32)
    lse = np.empty(batch * n_q, F32)
    _fwd_geo(q, k, v, _geo(False, 1, n_q, n_k, d), 1, mask, batch, n_q, n_k, d, scale, causal, mask_mode,
             mask_layout, out, lse)
    return out, lse


def _bwd_numba(want, q, k, v, mask, out, lse, dout, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout,
               into=None):
    """dq (_WANT_Q), (dk, dv) (_WANT_KV) or all three (_WANT_QKV), written into the flat arrays
    ``into`` when given (else new ones)."""
    if into is None:
        into = ((np.empty(batch * n_q * d, F32),) if want & _WANT_Q else ()) + (
            (np.empty(batch * n_k * d, F32), np.empty(batch * n_k * d, F32)) if want & _WANT_KV else ())
    none = _NO_MASK  # a placeholder for the outputs not wanted (never written)
    dq = into[0] if want & _WANT_Q else none
    dk, dv = (into[-2], into[-1]) if want & _WANT_KV else (none, none)
    _bwd_geo(want, q, k, v, _geo(False, 1, n_q, n_k, d), 1, mask, out, lse, dout, batch, n_q, n_k, d, scale,
             causal, mask_mode, mask_layout, dq, dk, dv)
    return into[0] if want == _WANT_Q else into


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
        """(S', filled-or-None) of the tile: S' the masked scores, float32, exactly -inf on every key
        without weight (blocked by a hard or add mask, or causally excluded) whatever its score."""
        st = np.matmul(qs, self.k3[b0:b1, j0:j1].transpose(0, 2, 1))
        filled = None
        if self.mode != "none":
            mt = self.mask_tile(b0, b1, i0, i1, j0, j1)
            if self.mode == "fill":
                filled = mt == 0
                st = np.where(filled, FILL, st)
            elif self.mode == "hard":
                np.copyto(st, F32(-np.inf), where=mt == 0)
            else:
                st += mt
                # a NaN or +inf score plus -inf is NaN, and -inf must still block: mend only such tiles
                # (one reduction tells; NaN and +inf are rare, and the mask's blocks common)
                if not st.max() < np.inf:
                    np.copyto(st, F32(-np.inf), where=mt == -np.inf)
        if self.causal and j1 - 1 > i0:  # the tile reaches above the diagonal
            np.copyto(st, F32(-np.inf), where=np.arange(j0, j1)[None, :] > np.arange(i0, i1)[:, None])
        return st, filled

    def blocked(self, b0, b1, i0, i1, j0, j1):
        """The tile's keys without weight (hard or add mask, causal) as a boolean array, or None."""
        out = None
        if self.mode in ("hard", "add"):
            mt = self.mask_tile(b0, b1, i0, i1, j0, j1)
            out = mt == 0 if self.mode == "hard" else mt == -np.inf
        if self.causal and j1 - 1 > i0:
            c = np.arange(j0, j1)[None, :] > np.arange(i0, i1)[:, None]
            out = c if out is None else out | c
        return out


def _items(n_outer: int, n: int, tile: int, chunk: int):
    return [(b0, min(n_outer, b0 + chunk), t0, min(n, t0 + tile))
            for b0 in range(0, n_outer, chunk) for t0 in range(0, n, tile)]


def _run_items(items, fn) -> None:
    """The tiles in order, on the calling thread: their NumPy code cannot run on Numba's threads
    (the backend's one pool, parallel.py), and each tile's BLAS calls are too small to split."""
    for it in items:
        fn(*it)


def _t(a):
    return a.transpose(0, 2, 1)


def flash_attention_fwd(q, k, v, mask, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout):
    if _small(batch, n_q, n_k, d) or tiles.available(d):
        return _fwd_numba(q, k, v, mask, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout)
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
                st, _ = pr.scores(b0, b1, qs, i0, i1, j0, j1)
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
            _run_items(_items(batch, n_q, TQ, pr.chunk()), tile)
    return out.reshape(-1), lse.reshape(-1)


def _probs(pr, b0, b1, qs, lse_t, i0, i1, j0, j1):
    """(P, filled-or-None) of a tile: exp(S' - lse) on allowed keys, exactly 0 on the others and on
    rows without any (lse -inf)."""
    st, filled = pr.scores(b0, b1, qs, i0, i1, j0, j1)
    with np.errstate(invalid="ignore", over="ignore"):
        p = np.subtract(st, lse_t[..., None], out=st)
        np.exp(p, out=p)
    if not np.all(np.isfinite(lse_t)):
        # lse -inf: no allowed key (exp(-inf - -inf) = NaN otherwise); NaN: a NaN row, whose keys
        # without weight still get exactly 0 (exp(-inf - NaN) = NaN otherwise)
        p = np.where((lse_t == -np.inf)[..., None], F32(0), p)
        _zero(p, pr.blocked(b0, b1, i0, i1, j0, j1))
    return p, filled


def _ds_tile(pr, p, filled, dp, dd_t, b0, b1, i0, i1, j0, j1):
    """dS = P (dP - D) in place of dp: exactly 0 where filled and on keys without weight (P is 0
    there, but 0 times a NaN or infinite dP - D, from dout, v or out, would be NaN)."""
    with np.errstate(invalid="ignore", over="ignore"):
        dp -= dd_t[..., None]
        dp *= p
    _zero(dp, filled)
    # rare: a NaN or inf somewhere in the tile (or an overflowing sum); the sum skipped without blocks
    if (pr.causal or pr.mode in ("hard", "add")) and not np.isfinite(dp.sum()):
        _zero(dp, pr.blocked(b0, b1, i0, i1, j0, j1))
    return dp


def _zero(a, where):
    if where is not None:
        np.copyto(a, F32(0), where=where)


def _rowdot(dout, out, batch, n_q, d):
    return np.einsum("bij,bij->bi", dout.reshape(batch, n_q, d), out.reshape(batch, n_q, d), dtype=F32)


def flash_attention_bwd_q(q, k, v, mask, out, lse, dout, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout):
    if _small(batch, n_q, n_k, d) or tiles.available(d):
        return _bwd_numba(_WANT_Q, q, k, v, mask, out, lse, dout, batch, n_q, n_k, d, scale, causal, mask_mode,
                          mask_layout)
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
            p, filled = _probs(pr, b0, b1, qs, l2[b0:b1, i0:i1], i0, i1, j0, j1)
            with np.errstate(invalid="ignore", over="ignore"):
                ds = np.matmul(g, _t(pr.v3[b0:b1, j0:j1]))
            ds = _ds_tile(pr, p, filled, ds, dd[b0:b1, i0:i1], b0, b1, i0, i1, j0, j1)
            t = np.matmul(ds, pr.k3[b0:b1, j0:j1])
            acc = t if acc is None else acc + t
        if acc is not None:
            dq[b0:b1, i0:i1] = acc * pr.scale

    _run_items(_items(batch, n_q, TQ, pr.chunk()), tile)
    return dq.reshape(-1)


def flash_attention_bwd_kv(q, k, v, mask, out, lse, dout, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout):
    if _small(batch, n_q, n_k, d) or tiles.available(d):
        return _bwd_numba(_WANT_KV, q, k, v, mask, out, lse, dout, batch, n_q, n_k, d, scale, causal, mask_mode,
                          mask_layout)
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
            p, filled = _probs(pr, b0, b1, qs, l2[b0:b1, i0:i1], i0, i1, j0, j1)
            tv = np.matmul(_t(p), g)
            with np.errstate(invalid="ignore", over="ignore"):
                ds = np.matmul(g, _t(kv_v))
            ds = _ds_tile(pr, p, filled, ds, dd[b0:b1, i0:i1], b0, b1, i0, i1, j0, j1)
            tk = np.matmul(_t(ds), qs)
            ak = tk if ak is None else ak + tk
            av = tv if av is None else av + tv
        if ak is not None:
            dk[b0:b1, j0:j1] = ak
            dv[b0:b1, j0:j1] = av

    _run_items(_items(batch, n_k, TK, pr.chunk()), tile)
    return dk.reshape(-1), dv.reshape(-1)


def flash_attention_bwd(q, k, v, mask, out, lse, dout, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout):
    args = (q, k, v, mask, out, lse, dout, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout)
    m = batch * n_q * d
    if (_small(batch, n_q, n_k, d) or tiles.available(d)) and n_q == n_k:
        # One allocation, dq | dk | dv: the gradient of the q, k, v slices of one tensor (qkv[0],
        # qkv[1], qkv[2]) then joins without a copy (concat1d's view case).
        packed = np.empty(3 * m, F32)
        return _bwd_numba(_WANT_QKV, *args, into=(packed[:m], packed[m:2 * m], packed[2 * m:]))
    return (flash_attention_bwd_q(*args), *flash_attention_bwd_kv(*args))


def flash_attention_bwd_k(q, k, v, mask, out, lse, dout, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout):
    return flash_attention_bwd_kv(q, k, v, mask, out, lse, dout, batch, n_q, n_k, d, scale, causal, mask_mode,
                                  mask_layout)[0]


def flash_attention_bwd_v(q, k, v, mask, out, lse, dout, batch, n_q, n_k, d, scale, causal, mask_mode, mask_layout):
    return flash_attention_bwd_kv(q, k, v, mask, out, lse, dout, batch, n_q, n_k, d, scale, causal, mask_mode,
                                  mask_layout)[1]


# -- packed self-attention ----------------------------------------------------------------------------
# The Numba kernels (lanes and tiles) read q, k, v from qkv and write out (and dqkv) in place (see
# _geo), so no head is copied. The NumPy fallback moves the heads by copies around its tiles (a
# copy is one pass over memory, cheap next to the attention there).
def _split_qkv(qkv, batch, heads, n, d):
    """Contiguous flat q, k, v (batch heads, n, d) from qkv (batch, n, 3, heads, d)."""
    a = qkv.reshape(batch, n, 3, heads, d)
    return tuple(np.ascontiguousarray(a[:, :, i].transpose(0, 2, 1, 3)).reshape(-1) for i in range(3))


def _heads_first(x, batch, heads, n, d):
    return np.ascontiguousarray(x.reshape(batch, n, heads, d).transpose(0, 2, 1, 3)).reshape(-1)


def flash_attention_packed_fwd(qkv, mask, batch, heads, n, d, scale, causal, mask_mode, mask_layout):
    if _small(batch * heads, n, n, d) or tiles.available(d):
        out = np.empty(batch * n * heads * d, F32)
        lse = np.empty(batch * heads * n, F32)
        _fwd_geo(qkv, qkv, qkv, _geo(True, heads, n, n, d), heads, mask, batch * heads, n, n, d, scale, causal,
                 mask_mode, mask_layout, out, lse)
        return out, lse
    q, k, v = _split_qkv(qkv, batch, heads, n, d)
    out, lse = flash_attention_fwd(q, k, v, mask, batch * heads, n, n, d, scale, causal, mask_mode, mask_layout)
    return np.ascontiguousarray(out.reshape(batch, heads, n, d).transpose(0, 2, 1, 3)).reshape(-1), lse


def flash_attention_packed_bwd(qkv, mask, out, lse, dout, batch, heads, n, d, scale, causal, mask_mode, mask_layout):
    dqkv = np.empty((batch, n, 3, heads, d), F32)
    if _small(batch * heads, n, n, d) or tiles.available(d):
        flat = dqkv.reshape(-1)
        _bwd_geo(_WANT_QKV, qkv, qkv, qkv, _geo(True, heads, n, n, d), heads, mask, out, lse, dout, batch * heads,
                 n, n, d, scale, causal, mask_mode, mask_layout, flat, flat, flat)
        return flat
    q, k, v = _split_qkv(qkv, batch, heads, n, d)
    grads = flash_attention_bwd(q, k, v, mask, _heads_first(out, batch, heads, n, d), lse,
                                _heads_first(dout, batch, heads, n, d), batch * heads, n, n, d, scale, causal,
                                mask_mode, mask_layout)
    for i, g in enumerate(grads):
        dqkv[:, :, i] = g.reshape(batch, heads, n, d).transpose(0, 2, 1, 3)
    return dqkv.reshape(-1)
