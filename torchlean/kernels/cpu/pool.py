"""CPU kernels of the pooling: max_pool, avg_pool, smooth_max_pool and their backward passes.

Numba (``cache=True``: compiled once per machine, then loaded from the cache; the general kernels
split over ``parallel=True`` regions, the 2x2 stride-2 fast path over tasks.py's shared region),
rank-generic over 1..8 spatial axes, flat float32 arrays laid out (planes, *spatial).

Window walk: the output is seen as rows along the last spatial axis. For one output row the
outer axes (0..r-2) of every window are the same, so the in-bounds input rows they cover are
listed once per row (``_row_bases``: flat offsets, in row-major order of the outer kernel
offsets); padding positions are never touched, and the cost per output is the window size plus
O(1), for any rank. Forward kernels then loop over those input rows and the last-axis offsets
kk, each time running over the outputs of the row whose window holds kk in bounds (a strided
run that LLVM vectorizes), accumulating one value per output: each output still receives its
terms in row-major order of its kernel offsets. Backward kernels walk window by window.

Arithmetic is float32 throughout, in a fixed order, with the same operations as the CUDA kernels:
- max: value and winner of the first strict maximum among the in-bounds positions (``v > best``:
  ties, -0/+0 included, keep the first; an all -inf window keeps its first position), unless the
  window holds a NaN: then the first NaN (found by a second scan; NaN is rare).
- avg: window sum in row-major order, then one division by float32(prod(kernel)).
- smooth max: m = max of beta*v (fmax: NaN ignored) over the in-bounds positions and 0 when the
  window has padding; s = sum over in-bounds positions of exp(t), t = beta*v - m (t = 0 when
  beta*v == m, so infinities give exp(0) = 1 and not NaN), in row-major order, then
  + float32(npad) * exp(0 - m) for the npad padding positions; y = (m + log(s)) / beta.
Backward passes run per plane (planes in parallel, never sharing an output element): the windows
of a plane are visited in row-major order and each adds its contribution to its input positions.
Every dx element therefore receives its terms in row-major order of the windows that contain
it, starting from +0: exactly the additions the CUDA gather kernels do (each thread walks the
windows containing its element in that order), so both backends give the same bits for max and
avg and every result is bitwise repeatable. avg divides each sum of dy by float32(prod(kernel))
once; smooth max adds dy[w] * exp(beta*x[q] - beta*y[w]) (the difference taken as 0 when equal).

2-D max pool without padding (the CNN case) takes its own kernels (``_max2d*``): the same
comparisons and additions in the same order, without the row lists; when the windows tile the
input (stride == kernel) the backward writes +0 + dy at each winner directly. Bitwise the same.
2x2 windows at stride 2 with an even width take flat passes over horizontal pairs (``_max22e*``,
see there): the same winners, found in an order LLVM vectorizes.
"""

from __future__ import annotations

import numpy as np
from numba import carray, njit, prange

from ..plans import PoolPlan
from . import tasks

F32 = np.float32
I64 = np.int64

__all__ = ["max_pool", "max_pool_bwd", "avg_pool", "avg_pool_bwd", "smooth_max_pool", "smooth_max_pool_bwd"]

_NEG_INF = F32(-np.inf)
_ZERO = F32(0.0)
# Parallel tasks per call (each a contiguous range of output rows or planes with its own scratch):
# enough to balance a few threads, few enough that scratch allocation is negligible.
_TASKS = 256
# Below this many window-element visits a call runs on the calling thread: waking Numba's thread
# pool costs more than the work (far more with an OpenMP layer that spins on a small shared
# machine).
_PARALLEL_WORK = 1 << 20


@njit(cache=True)
def _row_bases(ro, r, n, k, s, pd, o, istr, lo, hi, cur, bases):
    """Fill ``bases`` with the in-plane offsets of the input rows that the windows of output row
    ``ro`` (an index over the outer output axes 0..r-2) cover, in row-major order; return how many
    (0 when the outer axes of the windows lie entirely in padding)."""
    rem = ro
    for i in range(r - 2, -1, -1):
        p = rem % o[i]
        rem //= o[i]
        st = p * s[i] - pd[i]
        a = max(0, -st)
        b = min(k[i], n[i] - st)
        if a >= b:
            return 0
        lo[i] = st + a
        hi[i] = st + b
        cur[i] = st + a
    cnt = 0
    while True:
        off = 0
        for i in range(r - 1):
            off += cur[i] * istr[i]
        bases[cnt] = off
        cnt += 1
        i = r - 2
        while i >= 0:
            cur[i] += 1
            if cur[i] < hi[i]:
                break
            cur[i] = lo[i]
            i -= 1
        if i < 0:
            return cnt


@njit(cache=True)
def _max_value(x, xoff, bases, nb, st, a, b):
    """The max pool value of one window (-inf when it is all padding): the value of the first
    strict maximum, or of the first NaN. Branch-free selects (``v > best`` keeps the first of equal
    values, -0 before +0 included); a NaN only raises a flag, and the rare window with a NaN is
    scanned again for its first NaN."""
    best = _NEG_INF
    nan = False
    for bi in range(nb):
        base = xoff + bases[bi] + st
        for kk in range(a, b):
            v = x[base + kk]
            best = v if v > best else best
            nan |= v != v
    if nan:
        for bi in range(nb):
            base = xoff + bases[bi] + st
            for kk in range(a, b):
                v = x[base + kk]
                if v != v:
                    return v
    return best


@njit(cache=True)
def _max_winner(x, xoff, bases, nb, st, a, b):
    """In-plane index of the winner of one non-empty window: the first strict maximum (the first
    position when all are -inf), or the first NaN (a flag in the main pass, then a rescan)."""
    best = _NEG_INF
    win = bases[0] + st + a
    nan = False
    for bi in range(nb):
        base = bases[bi] + st
        for kk in range(a, b):
            v = x[xoff + base + kk]
            if v > best:
                best = v
                win = base + kk
            nan |= v != v
    if nan:
        for bi in range(nb):
            base = bases[bi] + st
            for kk in range(a, b):
                v = x[xoff + base + kk]
                if v != v:
                    return base + kk
    return win


@njit(cache=True)
def _q_range(kk, nl, sl, pl_, ol):
    """The outputs q of a row whose window holds last-axis offset kk in bounds: 0 <= q*sl - pl_ + kk < nl."""
    qa = (pl_ - kk + sl - 1) // sl if pl_ > kk else 0
    qb = (nl - 1 + pl_ - kk) // sl + 1
    return qa, min(max(qb, qa), ol)


# mode: 0 max, 1 avg, 2 smooth max. Fills y for the output rows [r0, r1) (row = plane * R + outer row).
# Loop order: for each input row of the windows (bases) and each last-axis offset kk, a run over the
# outputs q of the row (contiguous or strided loads, which LLVM vectorizes), accumulating into one
# value per output. Each output still receives its terms in row-major order of its kernel offsets,
# exactly as a per-window loop would (and as the CUDA kernels do).
@njit(cache=True)
def _forward_rows(mode, x, y, r0, r1, r, n, k, s, pd, o, istr, S, R, nouter, kprod_f, kprod, beta):
    ol = o[r - 1]
    nl, kl, sl, pl_ = n[r - 1], k[r - 1], s[r - 1], pd[r - 1]
    lo = np.empty(8, dtype=np.int64)
    hi = np.empty(8, dtype=np.int64)
    cur = np.empty(8, dtype=np.int64)
    bases = np.empty(max(nouter, 1), dtype=np.int64)
    acc = np.empty(ol, dtype=np.float32)
    m = np.empty(ol, dtype=np.float32)
    for row in range(r0, r1):
        pl = row // R
        nb = _row_bases(row - pl * R, r, n, k, s, pd, o, istr, lo, hi, cur, bases)
        xoff = pl * S
        yoff = row * ol
        if mode == 0:
            for q in range(ol):
                acc[q] = _NEG_INF
            nan = False
            for bi in range(nb):
                for kk in range(kl):
                    qa, qb = _q_range(kk, nl, sl, pl_, ol)
                    off = xoff + bases[bi] - pl_ + kk
                    for q in range(qa, qb):
                        v = x[off + q * sl]
                        acc[q] = v if v > acc[q] else acc[q]
                        nan |= v != v
            if nan:  # rare: redo the row window by window (the first NaN of a window is its value)
                for q in range(ol):
                    st = q * sl - pl_
                    a = max(0, -st)
                    b = max(min(kl, nl - st), a)
                    acc[q] = _max_value(x, xoff, bases, nb, st, a, b)
            for q in range(ol):
                y[yoff + q] = acc[q]
        elif mode == 1:
            for q in range(ol):
                acc[q] = _ZERO
            for bi in range(nb):
                for kk in range(kl):
                    qa, qb = _q_range(kk, nl, sl, pl_, ol)
                    off = xoff + bases[bi] - pl_ + kk
                    for q in range(qa, qb):
                        acc[q] += x[off + q * sl]
            for q in range(ol):
                y[yoff + q] = acc[q] / kprod_f
        else:
            for q in range(ol):  # m starts at 0 (the padding's beta*0) when the window has padding
                st = q * sl - pl_
                cnt = nb * max(min(kl, nl - st) - max(0, -st), 0)
                m[q] = _ZERO if cnt < kprod else _NEG_INF
                acc[q] = _ZERO
            for bi in range(nb):
                for kk in range(kl):
                    qa, qb = _q_range(kk, nl, sl, pl_, ol)
                    off = xoff + bases[bi] - pl_ + kk
                    for q in range(qa, qb):
                        bv = beta * x[off + q * sl]
                        if bv > m[q]:
                            m[q] = bv
            for bi in range(nb):
                for kk in range(kl):
                    qa, qb = _q_range(kk, nl, sl, pl_, ol)
                    off = xoff + bases[bi] - pl_ + kk
                    for q in range(qa, qb):
                        bv = beta * x[off + q * sl]
                        t = _ZERO if bv == m[q] else bv - m[q]
                        acc[q] += np.exp(t)
            for q in range(ol):
                st = q * sl - pl_
                npad = kprod - nb * max(min(kl, nl - st) - max(0, -st), 0)
                mq = m[q]
                a_ = acc[q]
                if npad > 0:
                    t0 = _ZERO if mq == _ZERO else _ZERO - mq
                    a_ += F32(npad) * np.exp(t0)
                y[yoff + q] = (mq + np.log(a_)) / beta


# Fills dx for the planes [p0, p1): each plane's windows in row-major order add to their inputs.
@njit(cache=True)
def _backward_planes(mode, x, y, dy, dx, p0, p1, r, n, k, s, pd, o, istr, S, R, nouter, kprod_f, beta):
    ol = o[r - 1]
    nl, kl, sl, pl_ = n[r - 1], k[r - 1], s[r - 1], pd[r - 1]
    lo = np.empty(8, dtype=np.int64)
    hi = np.empty(8, dtype=np.int64)
    cur = np.empty(8, dtype=np.int64)
    bases = np.empty(max(nouter, 1), dtype=np.int64)
    for pl in range(p0, p1):
        xoff = pl * S
        for i in range(xoff, xoff + S):
            dx[i] = _ZERO
        for ro in range(R):
            nb = _row_bases(ro, r, n, k, s, pd, o, istr, lo, hi, cur, bases)
            if nb == 0:
                continue
            yoff = (pl * R + ro) * ol
            for q in range(ol):
                st = q * sl - pl_
                a = max(0, -st)
                b = min(kl, nl - st)
                if a >= b:
                    continue
                g = dy[yoff + q]
                if mode == 0:
                    win = _max_winner(x, xoff, bases, nb, st, a, b)
                    dx[xoff + win] += g
                elif mode == 1:
                    for bi in range(nb):
                        base = xoff + bases[bi] + st
                        for kk in range(a, b):
                            dx[base + kk] += g
                else:
                    by = beta * y[yoff + q]
                    for bi in range(nb):
                        base = xoff + bases[bi] + st
                        for kk in range(a, b):
                            bx = beta * x[base + kk]
                            d = _ZERO if bx == by else bx - by
                            dx[base + kk] += g * np.exp(d)
        if mode == 1:
            for i in range(xoff, xoff + S):
                dx[i] = dx[i] / kprod_f


@njit(parallel=True, cache=True)
def _forward_par(mode, x, y, rows, ntask, r, n, k, s, pd, o, istr, S, R, nouter, kprod_f, kprod, beta):
    for t in prange(ntask):
        _forward_rows(mode, x, y, rows * t // ntask, rows * (t + 1) // ntask, r, n, k, s, pd, o, istr, S, R,
                      nouter, kprod_f, kprod, beta)


@njit(parallel=True, cache=True)
def _backward_par(mode, x, y, dy, dx, planes, ntask, r, n, k, s, pd, o, istr, S, R, nouter, kprod_f, beta):
    for t in prange(ntask):
        _backward_planes(mode, x, y, dy, dx, planes * t // ntask, planes * (t + 1) // ntask, r, n, k, s, pd, o,
                         istr, S, R, nouter, kprod_f, beta)


# -- 2-D max pool without padding (the CNN case): the same visits in the same order, less overhead --
# Every window lies in bounds, so no row lists or in-bounds ranges are needed: per output row the
# kernel offsets (ky, kx) are visited in row-major order, each a run over the row's outputs (the
# forward), and the backward walks the windows in row-major order as _backward_planes does. The
# comparisons and additions are exactly those of the generic kernels, so the bits are the same.
@njit(cache=True, error_model="numpy")
def _max2d_rows(x3, y3, p0, p1, kh, kw, sh, sw):
    oh_n, ow_n = y3.shape[1], y3.shape[2]
    acc = np.empty(ow_n, dtype=np.float32)
    for pl in range(p0, p1):
        for oh in range(oh_n):
            for ow in range(ow_n):
                acc[ow] = _NEG_INF
            nan = False
            for ky in range(kh):
                xr = x3[pl, oh * sh + ky]
                for kx in range(kw):
                    for ow in range(ow_n):
                        v = xr[ow * sw + kx]
                        acc[ow] = v if v > acc[ow] else acc[ow]
                        nan |= v != v
            if nan:  # rare: the first NaN of a window (row-major) is its value
                for ow in range(ow_n):
                    found = False
                    for ky in range(kh):
                        for kx in range(kw):
                            v = x3[pl, oh * sh + ky, ow * sw + kx]
                            if v != v and not found:
                                acc[ow] = v
                                found = True
            for ow in range(ow_n):
                y3[pl, oh, ow] = acc[ow]


@njit(cache=True, error_model="numpy")
def _max2d_bwd_planes(x3, dy3, dx3, p0, p1, kh, kw, sh, sw):
    oh_n, ow_n = dy3.shape[1], dy3.shape[2]
    for pl in range(p0, p1):
        dx3[pl] = _ZERO
        for oh in range(oh_n):
            for ow in range(ow_n):
                y0, x0 = oh * sh, ow * sw
                best = _NEG_INF
                wy, wx = y0, x0
                nan = False
                for ky in range(kh):
                    for kx in range(kw):
                        v = x3[pl, y0 + ky, x0 + kx]
                        gt = v > best  # selects, not branches: the winner is data-dependent
                        best = v if gt else best
                        wy = y0 + ky if gt else wy
                        wx = x0 + kx if gt else wx
                        nan |= v != v
                if nan:
                    found = False
                    for ky in range(kh):
                        for kx in range(kw):
                            if not found and x3[pl, y0 + ky, x0 + kx] != x3[pl, y0 + ky, x0 + kx]:
                                wy, wx = y0 + ky, x0 + kx
                                found = True
                dx3[pl, wy, wx] += dy3[pl, oh, ow]


@njit(cache=True, error_model="numpy")
def _max2d_bwd_tiles(x3, dy3, dx3, p0, p1, kh, kw):
    """max_pool_bwd for windows that tile the input (stride == kernel): each input lies in at most
    one window, so dx is +0 except at each window's winner, where it is +0 + dy (the same single
    addition as _max2d_bwd_planes). The winners of an output row are found offset by offset
    (row-major, strict >: the first maximum; a NaN raises a flag and the row is redone window by
    window for its first NaN), a run over the row's windows that vectorizes."""
    oh_n, ow_n = dy3.shape[1], dy3.shape[2]
    best = np.empty(ow_n, dtype=np.float32)
    wy = np.empty(ow_n, dtype=np.int64)
    wx = np.empty(ow_n, dtype=np.int64)
    for pl in range(p0, p1):
        dx3[pl] = _ZERO
        for oh in range(oh_n):
            y0 = oh * kh
            for ow in range(ow_n):
                best[ow] = _NEG_INF
                wy[ow] = y0
                wx[ow] = ow * kw
            nan = False
            for ky in range(kh):
                xr = x3[pl, y0 + ky]
                for kx in range(kw):
                    for ow in range(ow_n):
                        v = xr[ow * kw + kx]
                        gt = v > best[ow]
                        best[ow] = v if gt else best[ow]
                        wy[ow] = y0 + ky if gt else wy[ow]
                        wx[ow] = ow * kw + kx if gt else wx[ow]
                        nan |= v != v
            if nan:
                for ow in range(ow_n):
                    found = False
                    for ky in range(kh):
                        for kx in range(kw):
                            q = x3[pl, y0 + ky, ow * kw + kx]
                            if not found and q != q:
                                wy[ow] = y0 + ky
                                wx[ow] = ow * kw + kx
                                found = True
            for ow in range(ow_n):
                dx3[pl, wy[ow], wx[ow]] = _ZERO + dy3[pl, oh, ow]


# kind: 0 the forward (into out), 1 the backward (dy3 into out), 2 the backward of tiling windows.
@njit(parallel=True, cache=True, error_model="numpy")
def _max2d_par(kind, x3, dy3, out, ntask, kh, kw, sh, sw):
    planes = x3.shape[0]
    for t in prange(ntask):
        p0, p1 = planes * t // ntask, planes * (t + 1) // ntask
        if kind == 0:
            _max2d_rows(x3, out, p0, p1, kh, kw, sh, sw)
        elif kind == 1:
            _max2d_bwd_planes(x3, dy3, out, p0, p1, kh, kw, sh, sw)
        else:
            _max2d_bwd_tiles(x3, dy3, out, p0, p1, kh, kw)


# -- 2x2 windows at stride 2 (the CNN's pool): one kernel each way, flat indices, no rescans --------
# The winner chain keeps a NaN once it holds one: v replaces the best a when v > a, or when v is
# NaN and a is not. Over a window's positions in row-major order that gives the first NaN if there
# is one, else the first strict maximum (ties, -0/+0 included, keep the first; an all -inf window
# keeps its first position): the same winner and value as the generic kernels, without a rescan.
@njit(cache=True, error_model="numpy", nogil=True, inline="always")
def _max22_rows(x, y, p0, p1, h, w, oh_n, ow_n):
    for pl in range(p0, p1):
        xb = pl * h * w
        yb = pl * oh_n * ow_n
        for oh in range(oh_n):
            r0 = xb + 2 * oh * w
            xr0 = x[r0:r0 + w]
            xr1 = x[r0 + w:r0 + 2 * w]
            yr = y[yb + oh * ow_n:yb + (oh + 1) * ow_n]
            for ow in range(ow_n):
                a = xr0[2 * ow]
                v = xr0[2 * ow + 1]
                a = v if (v > a) | ((v != v) & (a == a)) else a
                v = xr1[2 * ow]
                a = v if (v > a) | ((v != v) & (a == a)) else a
                v = xr1[2 * ow + 1]
                a = v if (v > a) | ((v != v) & (a == a)) else a
                yr[ow] = a


@njit(cache=True, error_model="numpy", nogil=True, inline="always")
def _max22_bwd(x, dy, dx, p0, p1, h, w, oh_n, ow_n):
    """max_pool_bwd of 2x2 windows at stride 2: per output row, the winners' offsets (0..3,
    row-major) first, then the two input rows written: +0 + dy at each winner, +0 elsewhere (each
    input lies in at most one window: the single addition of _backward_planes). Inputs beyond the
    last window (odd h or w) get +0."""
    k = np.empty(ow_n, dtype=np.int32)
    for pl in range(p0, p1):
        xb = pl * h * w
        yb = pl * oh_n * ow_n
        for i in range(xb + 2 * oh_n * w, xb + h * w):
            dx[i] = _ZERO  # an odd last row
        for oh in range(oh_n):
            r0 = xb + 2 * oh * w
            xr0 = x[r0:r0 + w]
            xr1 = x[r0 + w:r0 + 2 * w]
            for ow in range(ow_n):
                a = xr0[2 * ow]
                kk = 0
                v = xr0[2 * ow + 1]
                t = (v > a) | ((v != v) & (a == a))
                a = v if t else a
                kk = 1 if t else kk
                v = xr1[2 * ow]
                t = (v > a) | ((v != v) & (a == a))
                a = v if t else a
                kk = 2 if t else kk
                v = xr1[2 * ow + 1]
                t = (v > a) | ((v != v) & (a == a))
                kk = 3 if t else kk
                k[ow] = kk
            d0 = dx[r0:r0 + w]
            d1 = dx[r0 + w:r0 + 2 * w]
            g = dy[yb + oh * ow_n:yb + (oh + 1) * ow_n]
            for ow in range(ow_n):
                gv = _ZERO + g[ow]
                kk = k[ow]
                d0[2 * ow] = gv if kk == 0 else _ZERO
                d0[2 * ow + 1] = gv if kk == 1 else _ZERO
                d1[2 * ow] = gv if kk == 2 else _ZERO
                d1[2 * ow + 1] = gv if kk == 3 else _ZERO
            for c in range(2 * ow_n, w):  # an odd last column
                d0[c] = _ZERO
                d1[c] = _ZERO


# w even (every CNN): the same winners from a flat pass over horizontal pairs. The chain's rule is a
# total preorder on the values (NaN above everything, all NaNs equal, -0 == +0) with ties kept by
# the earlier position, so the winner of a window is also the winner of its top pair against its
# bottom pair (each pair's winner found first; top positions all precede bottom ones). Pass 1 runs
# over every pair of the planes (x[2k], x[2k+1]) in one flat loop (rows of a plane and planes are
# contiguous when w is even), which LLVM vectorizes; pass 2 combines each top pair with the pair
# below it, a short contiguous run per output row; the backward's pass 3 writes dx from the pair
# bits in one more flat loop. The stride-2 loads of one window at a time (_max22_rows / _max22_bwd)
# do not vectorize and cost several times more.
@njit(cache=True, error_model="numpy", nogil=True, inline="always")
def _beats(v, a):
    """Whether v, later in the chain, wins against a: larger, or NaN against a number (ties keep a)."""
    return (v > a) | ((v != v) & (a == a))


@njit(cache=True, error_model="numpy", nogil=True)
def _pair_winners(x, hw, ht, k0):
    """hw[k] = the winner of the pair (x[2(k0+k)], x[2(k0+k)+1]) by the chain's rule (the right one
    when it is larger, or NaN against a number), ht[k] = whether the right one won."""
    xs = x[2 * k0:2 * (k0 + hw.size)]
    for k in range(hw.size):
        a0 = xs[2 * k]
        a1 = xs[2 * k + 1]
        t = _beats(a1, a0)
        hw[k] = a1 if t else a0
        ht[k] = t


# Pass 2 kernels take slices starting at their first row and index them from loop counters and sizes
# alone: with an offset added, LLVM cannot drop Numba's negative-index wraparound and the loop stays
# scalar (many times slower).
@njit(cache=True, error_model="numpy", nogil=True)
def _combine_rows(hw, y, m_n, ow_n):
    """y[m, ow] = the winner of the pairs hw[m, 0, ow] (top) and hw[m, 1, ow] (bottom)."""
    for m in range(m_n):
        t0 = 2 * m * ow_n
        for ow in range(ow_n):
            a = hw[t0 + ow]
            v = hw[t0 + ow_n + ow]
            y[m * ow_n + ow] = v if _beats(v, a) else a


@njit(cache=True, error_model="numpy", nogil=True)
def _share_rows(hw, dy, m_n, ow_n):
    """In place: hw[m, r, ow] = +0 + dy[m, ow] for the winning pair r of window (m, ow), +0 for the other."""
    for m in range(m_n):
        t0 = 2 * m * ow_n
        for ow in range(ow_n):
            a = hw[t0 + ow]
            v = hw[t0 + ow_n + ow]
            tb = _beats(v, a)
            gv = _ZERO + dy[m * ow_n + ow]
            hw[t0 + ow] = _ZERO if tb else gv
            hw[t0 + ow_n + ow] = gv if tb else _ZERO


@njit(cache=True, error_model="numpy", nogil=True)
def _pair_max(x, hw, k0):
    """hw[k] = the winner of the pair (x[2(k0+k)], x[2(k0+k)+1]), as _pair_winners."""
    xs = x[2 * k0:2 * (k0 + hw.size)]
    for k in range(hw.size):
        a0 = xs[2 * k]
        a1 = xs[2 * k + 1]
        hw[k] = a1 if _beats(a1, a0) else a0


@njit(cache=True, error_model="numpy", nogil=True, inline="always")
def _max22e_rows(x, y, p0, p1, h, w, oh_n, ow_n):
    """_max22_rows for even w."""
    hp = h * ow_n  # pairs per plane
    hw = np.empty((p1 - p0) * hp, dtype=np.float32)
    _pair_max(x, hw, p0 * hp)
    if h % 2 == 0:  # the planes' row pairs follow each other
        _combine_rows(hw, y[p0 * oh_n * ow_n:p1 * oh_n * ow_n], (p1 - p0) * oh_n, ow_n)
    else:
        for pl in range(p1 - p0):
            _combine_rows(hw[pl * hp:(pl + 1) * hp], y[(p0 + pl) * oh_n * ow_n:(p0 + pl + 1) * oh_n * ow_n],
                          oh_n, ow_n)


@njit(cache=True, error_model="numpy", nogil=True, inline="always")
def _max22e_bwd(x, dy, dx, p0, p1, h, w, oh_n, ow_n):
    """_max22_bwd for even w: pass 2 turns each pair's winner value into the pair's share of dy (+0 + dy
    for the window's winning pair, +0 for the other and for an odd last row), in place; pass 3 writes
    both positions of every pair from it and the pair's bit."""
    hp = h * ow_n
    n = (p1 - p0) * hp
    hw = np.empty(n, dtype=np.float32)
    ht = np.empty(n, dtype=np.bool_)
    _pair_winners(x, hw, ht, p0 * hp)
    g = dy[p0 * oh_n * ow_n:p1 * oh_n * ow_n]
    if h % 2 == 0:
        _share_rows(hw, g, (p1 - p0) * oh_n, ow_n)
    else:
        for pl in range(p1 - p0):
            hs = hw[pl * hp:(pl + 1) * hp]
            _share_rows(hs, g[pl * oh_n * ow_n:(pl + 1) * oh_n * ow_n], oh_n, ow_n)
            hs[hp - ow_n:] = _ZERO  # the odd last row
    d = dx[2 * p0 * hp:2 * p1 * hp]
    for k in range(n):
        t = ht[k]
        v = hw[k]
        d[2 * k] = _ZERO if t else v
        d[2 * k + 1] = v if t else _ZERO


# The forward (x into out) or the backward (dy into out), planes split into t parts, part i the planes
# [planes*i//t, planes*(i+1)//t). Tasks (tasks.py), one per kernel: each compiles once, as a cached
# callback, and only when a geometry needs it, where a parallel wrapper of its own would compile all
# four kernels again (seconds on a cold start). The kernels are inlined into their tasks (called
# from Python, as the tests do, they compile as plain njit functions).
@njit(inline="always", nogil=True)
def _max22_words(p):
    a = carray(p, 12)
    return (tasks.as_f32(a[6], a[7]), tasks.as_f32(a[8], a[9]), tasks.as_f32(a[10], a[11]), a[0], a[1], a[2], a[3], a[4],
            a[5])


def _max22e_rows_task(i, p):
    x, dy, out, t, planes, h, w, oh_n, ow_n = _max22_words(p)
    _max22e_rows(x, out, planes * i // t, planes * (i + 1) // t, h, w, oh_n, ow_n)


def _max22_rows_task(i, p):
    x, dy, out, t, planes, h, w, oh_n, ow_n = _max22_words(p)
    _max22_rows(x, out, planes * i // t, planes * (i + 1) // t, h, w, oh_n, ow_n)


def _max22e_bwd_task(i, p):
    x, dy, out, t, planes, h, w, oh_n, ow_n = _max22_words(p)
    _max22e_bwd(x, dy, out, planes * i // t, planes * (i + 1) // t, h, w, oh_n, ow_n)


def _max22_bwd_task(i, p):
    x, dy, out, t, planes, h, w, oh_n, ow_n = _max22_words(p)
    _max22_bwd(x, dy, out, planes * i // t, planes * (i + 1) // t, h, w, oh_n, ow_n)


# (forward, backward) for odd w, then for even w
_MAX22_TASKS = ((tasks.Task(_max22_rows_task), tasks.Task(_max22_bwd_task)),
                (tasks.Task(_max22e_rows_task), tasks.Task(_max22e_bwd_task)))


def _max22_run(bwd, x, dy, out, planes, t, h, w, oh_n, ow_n):
    """The 2x2 / stride 2 kernel of (bwd, w)'s parity in t parts: on Numba's threads when t > 1, else
    on the caller's. x, dy, out: C-contiguous float32."""
    words = tasks.pack(t, planes, h, w, oh_n, ow_n, x, x.size, dy, dy.size, out, out.size)
    tasks.run(_MAX22_TASKS[w % 2 == 0][bool(bwd)], words, t)


def _plain_2d(spatial, padding) -> bool:
    return len(spatial) == 2 and not any(padding)


def _max2d(x, planes, spatial, kernel, stride, dy=None):
    """max_pool (dy None) or max_pool_bwd on the 2-D, unpadded fast path."""
    (h, w), (kh, kw), (sh, sw) = spatial, kernel, stride
    oh, ow = (h - kh) // sh + 1, (w - kw) // sw + 1
    ntask = min(planes, _TASKS)
    if (kh, kw, sh, sw) == (2, 2, 2, 2) and oh * ow > 0:
        return _max22(x, planes, h, w, oh, ow, ntask, dy)
    x3 = x.reshape(planes, h, w)
    with np.errstate(all="ignore"):
        if dy is None:
            y = np.empty((planes, oh, ow), dtype=F32)
            if y.size:
                if y.size * min(kh * kw, 64) < _PARALLEL_WORK:
                    _max2d_rows(x3, y, 0, planes, kh, kw, sh, sw)
                else:
                    _max2d_par(0, x3, y, y, ntask, kh, kw, sh, sw)
            return y.reshape(-1)
        dx = np.empty((planes, h, w), dtype=F32)
        if dx.size:
            dy3 = dy.reshape(planes, oh, ow)
            serial = dy.size * min(kh * kw, 64) < _PARALLEL_WORK or planes == 1
            if (kh, kw) == (sh, sw):  # windows tile the input: no input is shared
                if serial:
                    _max2d_bwd_tiles(x3, dy3, dx, 0, planes, kh, kw)
                else:
                    _max2d_par(2, x3, dy3, dx, ntask, kh, kw, sh, sw)
            elif serial:
                _max2d_bwd_planes(x3, dy3, dx, 0, planes, kh, kw, sh, sw)
            else:
                _max2d_par(1, x3, dy3, dx, ntask, kh, kw, sh, sw)
        return dx.reshape(-1)


def _max22(x, planes, h, w, oh, ow, ntask, dy):
    """max_pool / max_pool_bwd (dy given) of 2x2 windows at stride 2 on flat arrays."""
    t = 1 if planes * oh * ow * 4 < _PARALLEL_WORK or planes == 1 else ntask
    x = np.ascontiguousarray(x, dtype=F32)
    with np.errstate(all="ignore"):
        if dy is None:
            y = np.empty(planes * oh * ow, dtype=F32)
            _max22_run(False, x, y, y, planes, t, h, w, oh, ow)
            return y
        dy = np.ascontiguousarray(dy, dtype=F32)
        dx = np.empty(planes * h * w, dtype=F32)
        _max22_run(True, x, dy, dx, planes, t, h, w, oh, ow)
        return dx


def _geometry(spatial, kernel, stride, padding):
    n = np.asarray(spatial, dtype=I64)
    k = np.asarray(kernel, dtype=I64)
    s = np.asarray(stride, dtype=I64)
    pd = np.asarray(padding, dtype=I64)
    o = (n + 2 * pd - k) // s + 1
    r = len(n)
    istr = np.ones(r, dtype=I64)
    for i in range(r - 2, -1, -1):
        istr[i] = istr[i + 1] * n[i + 1]
    S = int(np.prod(n))
    R = int(np.prod(o[:-1]))
    nouter = int(np.prod(np.minimum(k[:-1], n[:-1])))
    kprod = int(np.prod(k))
    return r, n, k, s, pd, o, istr, S, R, nouter, kprod


def _fwd(mode, x, planes, spatial, kernel, stride, padding, beta=1.0):
    r, n, k, s, pd, o, istr, S, R, nouter, kprod = _geometry(spatial, kernel, stride, padding)
    rows = planes * R
    y = np.empty(rows * int(o[-1]), dtype=F32)
    if rows == 0:
        return y
    args = (r, n, k, s, pd, o, istr, S, R, nouter, F32(kprod), kprod, F32(beta))
    with np.errstate(all="ignore"):
        if y.size * min(kprod, 64) < _PARALLEL_WORK:
            _forward_rows(mode, x, y, 0, rows, *args)
        else:
            _forward_par(mode, x, y, rows, min(rows, _TASKS), *args)
    return y


def _bwd(mode, x, y, dy, planes, spatial, kernel, stride, padding, beta=1.0):
    r, n, k, s, pd, o, istr, S, R, nouter, kprod = _geometry(spatial, kernel, stride, padding)
    dx = np.empty(planes * S, dtype=F32)
    if dx.size == 0:
        return dx
    args = (r, n, k, s, pd, o, istr, S, R, nouter, F32(kprod), F32(beta))
    with np.errstate(all="ignore"):
        if dy.size * min(kprod, 64) < _PARALLEL_WORK or planes == 1:
            _backward_planes(mode, x, y, dy, dx, 0, planes, *args)
        else:
            _backward_par(mode, x, y, dy, dx, planes, min(planes, _TASKS), *args)
    return dx


_EMPTY = np.zeros(0, dtype=F32)


def max_pool(x, plan: PoolPlan):
    planes, spatial, kernel, stride, padding = plan[:5]
    if _plain_2d(spatial, padding):
        return _max2d(x, planes, spatial, kernel, stride)
    return _fwd(0, x, planes, spatial, kernel, stride, padding)


def avg_pool(x, plan: PoolPlan):
    return _fwd(1, x, *plan[:5])


def smooth_max_pool(x, plan: PoolPlan, beta):
    return _fwd(2, x, *plan[:5], beta)


def max_pool_bwd(x, dy, plan: PoolPlan):
    planes, spatial, kernel, stride, padding = plan[:5]
    if _plain_2d(spatial, padding):
        return _max2d(x, planes, spatial, kernel, stride, dy)
    return _bwd(0, x, _EMPTY, dy, planes, spatial, kernel, stride, padding)


def avg_pool_bwd(dy, plan: PoolPlan):
    return _bwd(1, _EMPTY, _EMPTY, dy, *plan[:5])


def smooth_max_pool_bwd(x, y, dy, plan: PoolPlan, beta):
    return _bwd(2, x, y, dy, *plan[:5], beta)
