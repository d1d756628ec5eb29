"""Layout primitives (concat, slice, broadcast, transpose, axis swaps) and bmm on NumPy arrays.

Large permutations (swap_adjacent_at_depth, permute), concat1d, narrow_block(_bwd) and
broadcast_to's repeat loop split over Numba's threads (parallel.parts; see "moves" below); small
ones stay on NumPy.
broadcast_to / reduce_from_broadcast whose broadcast axes form one block (the common case: a
bias, a per-channel or per-step factor) run as Numba loops over (A, B, C) views, and so does
reduce_from_broadcast over a leading and a trailing block (a conv's bias gradient); the rest goes
through NumPy. bmm's GEMMs go through gemm.py.
"""

from __future__ import annotations

import math

import numpy as np
from numba import carray, njit, prange

from . import parallel, tasks
from .gemm import gemm

F32 = np.float32
# Outputs per block of the broadcast/reduce kernels.
_RED_BLOCK = 256
# The moves (permutations, concat1d, broadcast_to's repeat loop; see "moves" below) split over
# Numba's threads from 2 * MIN_WORK elements, with contiguous runs of at least MIN_RUN elements:
# below that size a region's start costs more than the copy it shares out.
MIN_WORK = 1 << 15
MIN_RUN = 8

__all__ = [
    "concat1d", "slice1d", "narrow_block", "narrow_block_bwd", "concat_block", "broadcast_vec_to_rows", "broadcast_vec_to_cols", "broadcast_to",
    "reduce_from_broadcast", "swap_adjacent_at_depth", "permute", "transpose2d", "bmm", "bmm_nt", "bmm_tn",
    "adjacent_union",
]


def concat1d(a, b, n, m):
    t = parallel.parts(n + m, n + m, MIN_WORK)
    if t == 1:
        return np.concatenate([a, b])
    out = np.empty(n + m, F32)
    _concat_par(a, b, out, t)
    return out


def slice1d(b, n, start, length):
    return b[start:start + length].copy()


def narrow_block(x, outer, size, start, length, inner):
    """(outer, size, inner) -> x[:, start:start+length, :]: one strided copy (always a new array,
    also at full width); from 2 * MIN_WORK elements its rows are dealt to Numba's threads."""
    a, width = start * inner, length * inner
    t = parallel.parts(outer * width, outer, MIN_WORK)
    if t == 1:
        return x.reshape(outer, size * inner)[:, a:a + width].copy().reshape(-1)
    out = np.empty(outer * width, F32)
    _rows_par(x, size * inner, a, out, width, 0, width, outer, t)
    return out


def narrow_block_bwd(dy, outer, size, start, length, inner):
    """(outer, size, inner) zeros with dy at [:, start:start+length, :]: every element written once
    (rows dealt to Numba's threads as narrow_block's)."""
    a, b = start * inner, (start + length) * inner
    total = size * inner
    t = parallel.parts(outer * total, outer, MIN_WORK)
    out = np.empty((outer, total), F32)
    if t == 1:
        out[:, :a] = 0.0
        out[:, a:b] = dy.reshape(outer, b - a)
        out[:, b:] = 0.0
        return out.reshape(-1)
    out = out.reshape(-1)
    _rows_par(dy, b - a, 0, out, total, a, b - a, outer, t)
    return out


def concat_block(a, b, outer, size_a, size_b, inner):
    """a (outer, size_a, inner) and b (outer, size_b, inner) joined along the middle axis; from
    2 * MIN_WORK elements the rows are dealt to Numba's threads."""
    wa, wb = size_a * inner, size_b * inner
    t = parallel.parts(outer * (wa + wb), outer, MIN_WORK)
    out = np.empty((outer, wa + wb), F32)
    if t == 1:
        out[:, :wa] = a.reshape(outer, wa)
        out[:, wa:] = b.reshape(outer, wb)
        return out.reshape(-1)
    out = out.reshape(-1)
    _join_rows_par(a, wa, b, wb, out, outer, t)
    return out


@njit(cache=True, nogil=True, parallel=True)
def _join_rows_par(a, wa, b, wb, out, rows, tasks):
    """For each of rows: out's row r = a's row r then b's row r (a move: same bits on any split)."""
    for p in prange(tasks):
        for r in range(rows * p // tasks, rows * (p + 1) // tasks):
            o = np.uint64(r * (wa + wb))  # unsigned: no wraparound check, the copies vectorize
            sa, sb = np.uint64(r * wa), np.uint64(r * wb)
            for i in range(np.uint64(wa)):
                out[o + i] = a[sa + i]
            o += np.uint64(wa)
            for i in range(np.uint64(wb)):
                out[o + i] = b[sb + i]


@njit(cache=True, nogil=True, parallel=True)
def _rows_par(src, src_row, src_at, out, out_row, out_at, width, rows, tasks):
    """For each of rows: out[r * out_row + out_at:][:width] = src[r * src_row + src_at:][:width],
    the rest of out's row zero; rows dealt to tasks contiguous ranges (a move: same bits on any split)."""
    for p in prange(tasks):
        for r in range(rows * p // tasks, rows * (p + 1) // tasks):
            o = np.uint64(r * out_row)  # unsigned: no wraparound check, the copies vectorize
            s0 = np.uint64(r * src_row + src_at)
            for i in range(np.uint64(out_at)):
                out[o + i] = 0.0
            o += np.uint64(out_at)
            for i in range(np.uint64(width)):
                out[o + i] = src[s0 + i]
            o += np.uint64(width)
            for i in range(np.uint64(out_row - out_at - width)):
                out[o + i] = 0.0


def adjacent_union(a, b):
    """The view [a; b] when b's memory starts where a's ends in one allocation, else None (not a
    primitive: concat1d's no-copy case)."""
    base = a.base
    if base is None or b.base is not base or base.dtype != F32 or not base.flags.c_contiguous:
        return None
    pa, pb = a.__array_interface__["data"][0], b.__array_interface__["data"][0]
    if pa + a.nbytes != pb:
        return None
    off = (pa - base.__array_interface__["data"][0]) // 4
    return base.reshape(-1)[off:off + a.size + b.size]


def broadcast_vec_to_rows(vec, rows, cols):
    return np.ascontiguousarray(np.broadcast_to(vec, (rows, cols))).reshape(-1)


def broadcast_vec_to_cols(vec, rows, cols):
    return np.ascontiguousarray(np.broadcast_to(vec[:, None], (rows, cols))).reshape(-1)


def _aligned_view(x, in_dims, out_dims, axis_map):
    """View x (shape in_dims) with one axis per output axis: size 1 where the output broadcasts."""
    xs = x.reshape(in_dims)
    used = [a - 1 for a in axis_map if a != 0]
    dropped = tuple(a for a in range(len(in_dims)) if a not in used)  # unmapped axes have size 1
    xs = xs.reshape([d for a, d in enumerate(in_dims) if a not in dropped])
    remaining = [a for a in range(len(in_dims)) if a not in dropped]
    xs = xs.transpose([remaining.index(a) for a in used])
    shape = [1 if a == 0 else in_dims[a - 1] for a in axis_map]
    return xs.reshape(shape)


@njit(cache=True, error_model="numpy")
def _repeat_mid_block(x2, o3):
    """o3[a, b, c] = x2[a, c] (slices, loops from 0: see _sum_mid_block)."""
    na, nb, nc = o3.shape
    for a in range(na):
        if nc == 1:
            v = x2[a, 0]
            for b in range(nb):
                o3[a, b, 0] = v
        else:
            for b in range(nb):
                for c in range(nc):
                    o3[a, b, c] = x2[a, c]


@njit(cache=True, error_model="numpy")
def _repeat_mid_seq(x2, o3):
    na = o3.shape[0]
    for k in range((na + _RED_BLOCK - 1) // _RED_BLOCK):
        a0, a1 = k * _RED_BLOCK, min(na, (k + 1) * _RED_BLOCK)
        _repeat_mid_block(x2[a0:a1], o3[a0:a1])


@njit(cache=True, nogil=True, parallel=True)
def _repeat_mid_par(x2, o3, tasks):
    """_repeat_mid_seq with the rows (a, b) of o3 dealt to tasks contiguous ranges."""
    na, nb, nc = o3.shape
    rows = na * nb
    for p in prange(tasks):
        for r in range(rows * p // tasks, rows * (p + 1) // tasks):
            a = r // nb
            o3[a, r - a * nb, :] = x2[a]


def broadcast_to(x, in_dims, out_dims, axis_map):
    shape = [1 if a == 0 else in_dims[a - 1] for a in axis_map]
    axes = {j for j, (s, o) in enumerate(zip(shape, out_dims)) if s == 1 and o != 1}
    used = [a - 1 for a in axis_map if a != 0]
    if axes and used == sorted(used):  # one block of repeated axes, no permutation: a copy loop
        abc = _one_summed_block(out_dims, axes)
        if abc is not None:
            na, nb, nc = abc
            o3 = np.empty((na, nb, nc), F32)
            t = parallel.parts(o3.size, na * nb, MIN_WORK) if nc >= MIN_RUN else 1
            if t > 1:
                _repeat_mid_par(x.reshape(na, nc), o3, t)
            elif o3.size:
                _repeat_mid_seq(x.reshape(na, nc), o3)
            return o3.reshape(-1)
    view = _aligned_view(x, in_dims, out_dims, axis_map)
    return np.ascontiguousarray(np.broadcast_to(view, out_dims)).reshape(-1)


# -- reduce_from_broadcast: one block of summed axes (K.. R.. K..) in a Numba kernel ---------------
# out[a, c] = d[a, 0, c] + d[a, 1, c] + ... + d[a, B-1, c], left to right (a fixed order: bitwise
# repeatable; within the contract's gamma(B-1) bound like any order). NumPy's add.reduce over a
# short inner axis pays a fixed overhead per output row. Short rows (C < 16) run b-outer over blocks of
# _RED_BLOCK outputs so that the adds vectorize across outputs, except C = 1 with B >= 8 (row
# sums, four rows at a time); long rows add whole rows, four rows b per pass.
@njit(cache=True, error_model="numpy")
def _sum_mid_block(d3, o2):
    """o2 = d3 summed over axis 1 left to right; loops from 0 over slices (a range(lo, hi) index
    could be negative for all Numba knows, and its wraparound check stops vectorization)."""
    na, nb, nc = d3.shape
    if nc == 1 and nb >= 8:
        # Four outputs at a time, each summed along its own contiguous row (b inner, slices indexed
        # from 0): four independent chains. b outer with the outputs inner (below) vectorizes with
        # strided gathers: slower at mamba's (73728, 16, 1), much slower with long rows.
        dd = d3.reshape(na * nb)
        na4 = na - na % 4
        for a in range(0, na4, 4):
            p = a * nb
            r0, r1, r2, r3 = dd[p:p + nb], dd[p + nb:p + 2 * nb], dd[p + 2 * nb:p + 3 * nb], dd[p + 3 * nb:p + 4 * nb]
            s0, s1, s2, s3 = r0[0], r1[0], r2[0], r3[0]
            for b in range(1, nb):
                s0 += r0[b]
                s1 += r1[b]
                s2 += r2[b]
                s3 += r3[b]
            o2[a, 0], o2[a + 1, 0], o2[a + 2, 0], o2[a + 3, 0] = s0, s1, s2, s3
        for a in range(na4, na):
            r = dd[a * nb:(a + 1) * nb]
            s = r[0]
            for b in range(1, nb):
                s += r[b]
            o2[a, 0] = s
    elif nc == 1:
        for a in range(na):
            o2[a, 0] = d3[a, 0, 0]
        for b in range(1, nb):
            for a in range(na):
                o2[a, 0] += d3[a, b, 0]
    elif nc >= 16:
        # Four rows b per pass over the row's outputs (each output still adds them left to right):
        # with C = 16 (mamba) every pass is a short vectorized loop, whose start-up would dominate
        # with one row per pass.
        for a in range(na):
            o = o2[a]
            d0 = d3[a, 0]
            for c in range(nc):
                o[c] = d0[c]
            for q in range((nb - 1) // 4):
                b = 1 + 4 * q
                r0, r1, r2, r3 = d3[a, b], d3[a, b + 1], d3[a, b + 2], d3[a, b + 3]
                for c in range(nc):
                    o[c] = (((o[c] + r0[c]) + r1[c]) + r2[c]) + r3[c]
            for b in range(1 + 4 * ((nb - 1) // 4), nb):
                r = d3[a, b]
                for c in range(nc):
                    o[c] += r[c]
    else:
        for a in range(na):
            for c in range(nc):
                o2[a, c] = d3[a, 0, c]
        for b in range(1, nb):
            for a in range(na):
                for c in range(nc):
                    o2[a, c] += d3[a, b, c]


@njit(cache=True, error_model="numpy")
def _sum_mid_seq(d3, o2):
    na = d3.shape[0]
    for k in range((na + _RED_BLOCK - 1) // _RED_BLOCK):
        a0, a1 = k * _RED_BLOCK, min(na, (k + 1) * _RED_BLOCK)
        _sum_mid_block(d3[a0:a1], o2[a0:a1])


def _one_summed_block(out_dims, axes):
    """(A, B, C) when the summed axes (size > 1) are adjacent once size-1 axes are ignored: out =
    d.reshape(A, B, C) summed over B. None otherwise."""
    kinds = [j in axes for j, o in enumerate(out_dims) if o != 1]
    sizes = [o for o in out_dims if o != 1]
    if True not in kinds:
        return None
    first = kinds.index(True)
    last = len(kinds) - 1 - kinds[::-1].index(True)
    if not all(kinds[first:last + 1]):
        return None
    return math.prod(sizes[:first]), math.prod(sizes[first:last + 1]), math.prod(sizes[last + 1:])


# -- reduce_from_broadcast over two blocks of summed axes around the kept ones (R.. K.. R..) ------
# The bias gradient of a conv, the per-channel sums of a batch norm: d (A, K, C) summed over A and
# C. For each k, t (C,) = d[0, k] + d[1, k] + ... (a in order, contiguous runs: vectorized), then t
# folded into _LANES lane sums (lane j: the entries c = j mod _LANES in order of c; the lanes are
# independent, so this vectorizes too), the lanes added left to right (C <= _LANES: t summed left
# to right). t is built for a group of whole rows k (C <= _CHUNK) or _CHUNK entries of one row at a
# time (the lanes carry over, so the order is the same), so that it stays in cache while each
# slab a is read in long runs. A fixed order of the A*C terms per output, a function of C alone
# (bitwise repeatable, on any number of threads: the row groups are dealt to the pool whole), within
# the contract's gamma bound like any order; NumPy's add.reduce over the two axes costs several
# times more at the CNN's sizes, and as much on one thread at an FNO2d's (20 x 32 x 94^2).
_LANES = 16
_CHUNK = 2048  # a multiple of _LANES


@njit(cache=True, error_model="numpy", nogil=True)
def _fold_lanes(t, t0, m, acc, first):
    """Fold t[t0:t0+m] into the lane sums acc (set from its first _LANES entries when first)."""
    u = np.uint64
    lanes = u(_LANES)
    full = m - m % lanes
    i0 = u(0)
    if first:
        for j in range(lanes):
            acc[j] = t[t0 + j]
        i0 = lanes
    for i in range(i0, full, lanes):
        for j in range(lanes):
            acc[j] += t[t0 + i + j]
    for j in range(m - full):
        acc[j] += t[t0 + full + j]


@njit(cache=True, error_model="numpy", nogil=True)
def _sum_outer_groups(d, na, nk, nc, out, g0, g1):
    """out[k] for the row groups g0:g1 of d (na, nk, nc) flat, summed over a and c (see above); na,
    nc >= 1. Unsigned indices: no wraparound check, the loops vectorize."""
    u = np.uint64
    kc = u(nk * nc)
    rows = max(1, _CHUNK // nc)  # whole rows per group (1 when a row is longer than _CHUNK)
    t = np.empty(min(rows * nc, _CHUNK), dtype=np.float32)
    acc = np.empty(_LANES, dtype=np.float32)
    for g in range(g0, g1):
        k0 = g * rows
        k1 = min(nk, k0 + rows)
        for c0 in range(0, nc, _CHUNK):
            # t = the rows k0:k1, columns c0:c0+m, summed over a
            m = u(min(_CHUNK, nc - c0))
            span = u(nc) if k1 - k0 > 1 else m  # several rows: whole rows (then nc <= _CHUNK)
            n = span * u(k1 - k0) if k1 - k0 > 1 else m
            base = u(k0 * nc + c0)
            for i in range(n):
                t[i] = d[base + i]
            for a in range(1, na):
                row = base + u(a) * kc
                for i in range(n):
                    t[i] += d[row + i]
            for k in range(k1 - k0):
                t0 = u(k) * span
                if nc <= _LANES:
                    s = t[t0]
                    for i in range(u(1), m):
                        s += t[t0 + i]
                    out[k0 + k] = s
                    continue
                _fold_lanes(t, t0, m, acc, c0 == 0)
                if c0 + _CHUNK >= nc:
                    s = acc[0]
                    for j in range(1, _LANES):
                        s += acc[j]
                    out[k0 + k] = s


# Part i of t: the row groups [groups*i//t, groups*(i+1)//t). A task (tasks.py): compiled once as a
# cached callback, where a parallel wrapper of its own would compile _sum_outer_groups again.
def _sum_outer_task(i, p):
    a = carray(p, 8)
    na, nk, nc, groups, t = a[0], a[1], a[2], a[3], a[4]
    _sum_outer_groups(tasks.as_f32(a[5], a[6]), na, nk, nc, tasks.as_f32(a[7], nk), groups * i // t,
                      groups * (i + 1) // t)


_SUM_OUTER_TASK = tasks.Task(_sum_outer_task)


def _sum_outer_par(d, na, nk, nc, out, groups, t):
    """_sum_outer_groups over the row groups in t parts on Numba's threads (any split: the same bits)."""
    if not all(a.dtype == F32 and a.flags.c_contiguous for a in (d, out)):  # not the runtime's buffers
        _sum_outer_groups(d, na, nk, nc, out, 0, groups)
        return
    tasks.run(_SUM_OUTER_TASK, tasks.pack(na, nk, nc, groups, t, d, d.size, out), t, on_pool=True)


def _sum_outer_blocks(d, na, nk, nc, out):
    """out (nk,) = d (na, nk, nc) summed over a and c: each output's order is fixed by nc alone, its
    row groups dealt to the pool (any split gives the same bits)."""
    groups = -(-nk // max(1, _CHUNK // nc))
    t = parallel.parts(na * nk * nc, groups, MIN_WORK)
    if t > 1:
        _sum_outer_par(d, na, nk, nc, out, groups, t)
    else:
        _sum_outer_groups(d, na, nk, nc, out, 0, groups)


def _outer_summed_blocks(out_dims, axes):
    """(A, K, C) when, size-1 axes ignored, the summed axes are a leading and a trailing block around
    the kept ones (R.. K.. R..): out = d.reshape(A, K, C) summed over A and C. None otherwise."""
    a = k = c = 1
    state = 0  # 0: in the leading summed block, 1: in the kept block, 2: in the trailing summed block
    for j, o in enumerate(out_dims):
        if o == 1:
            continue
        summed = j in axes
        if state == 0 and not summed:
            state = 1
        elif state == 1 and summed:
            state = 2
        elif state == 2 and not summed:
            return None
        if state == 0:
            a *= o
        elif state == 1:
            k *= o
        else:
            c *= o
    if state != 2 or a == 1:
        return None
    return a, k, c


def reduce_from_broadcast(dout, in_dims, out_dims, axis_map):
    d = dout.reshape(out_dims)
    shape = [1 if a == 0 else in_dims[a - 1] for a in axis_map]
    axes = tuple(j for j, (s, o) in enumerate(zip(shape, out_dims)) if s == 1 and o != 1)
    used = [a - 1 for a in axis_map if a != 0]
    if axes and used == sorted(used):  # the kept axes are in in_dims' order: no permutation to undo
        abc = _one_summed_block(out_dims, set(axes))
        if abc is not None:
            na, nb, nc = abc
            if nb == 0:  # no terms (an empty axis is summed): zeros
                return np.zeros(na * nc, F32)
            o2 = np.empty((na, nc), F32)
            if o2.size:
                with np.errstate(all="ignore"):
                    _sum_mid_seq(dout.reshape(na, nb, nc), o2)
            return o2.reshape(-1)
        akc = _outer_summed_blocks(out_dims, axes)
        if akc is not None:  # R.. K.. R..
            na, nk, nc = akc
            if na * nc == 0:  # an empty summed axis: no terms
                return np.zeros(nk, F32)
            out = np.empty(nk, F32)
            _sum_outer_blocks(dout, na, nk, nc, out)
            return out
    if axes:
        with np.errstate(all="ignore"):
            d = np.add.reduce(d, axis=axes, keepdims=True)
    # d now has the aligned-view shape; undo the axis permutation to reach in_dims' order
    kept = [j for j, a in enumerate(axis_map) if a != 0]
    d = d.reshape([d.shape[j] for j in kept]) if kept else d.reshape(())
    order = sorted(range(len(used)), key=lambda i: used[i])
    d = d.transpose(order)
    return np.ascontiguousarray(d, dtype=F32).reshape(-1)


# -- moves: axis permutations and concatenation, split over Numba's threads -----------------------
# A permutation is a list of runs: the output, read in order, is R runs of D contiguous input
# elements (D: the trailing input axes the permutation leaves in place, merged), run r starting at
# the input offset that r's output multi-index (the other axes, merged where they stay adjacent)
# gives through the input strides. Calls of at least 2 * MIN_WORK elements with runs of at least
# MIN_RUN elements deal the runs to parallel.parts(...) contiguous ranges (a Numba region, each part
# walking its runs with an odometer); smaller ones, and short runs, keep NumPy's copy (with one
# element per run, a plain 2-D transpose such as transpose2d's, NumPy's loop is faster than ours on
# one thread: it is left there). concat1d and broadcast_to's repeat loop split the same way. A move
# copies bits: the result is the same on any split.
@njit(cache=True, nogil=True, parallel=True)
def _runs_par(x, out, shape, strides, run, tasks):
    """out (R * run,) = the runs of x (see above); shape / strides: the run index's axes (int64)."""
    k = shape.size
    n_runs = out.size // run
    for p in prange(tasks):
        r0, r1 = n_runs * p // tasks, n_runs * (p + 1) // tasks
        if r0 == r1:
            continue
        idx = np.empty(k, np.int64)
        rem, src = r0, 0
        for j in range(k - 1, -1, -1):
            idx[j] = rem % shape[j]
            rem //= shape[j]
            src += idx[j] * strides[j]
        dst = np.uint64(r0 * run)
        for _ in range(r1 - r0):
            s0 = np.uint64(src)  # unsigned: no wraparound check, the copy vectorizes
            for i in range(np.uint64(run)):
                out[dst + i] = x[s0 + i]
            dst += np.uint64(run)
            for j in range(k - 1, -1, -1):  # odometer: the last axis fastest
                idx[j] += 1
                src += strides[j]
                if idx[j] < shape[j]:
                    break
                src -= idx[j] * strides[j]
                idx[j] = 0


@njit(cache=True, nogil=True, parallel=True)
def _concat_par(a, b, out, tasks):
    """out = [a; b], its positions dealt to tasks contiguous ranges."""
    n, total = a.size, out.size
    for p in prange(tasks):
        lo, hi = total * p // tasks, total * (p + 1) // tasks
        if lo < n:
            e = min(hi, n)
            out[lo:e] = a[lo:e]
        if hi > n:
            s = max(lo, n)
            out[s:hi] = b[s - n:hi - n]


def _runs(dims, perm):
    """(shape, strides, run) of the permutation (see above): size-1 axes dropped, output axes that
    stay adjacent in the input merged, the unmoved trailing block as the run."""
    strides, acc = [0] * len(dims), 1
    for a in range(len(dims) - 1, -1, -1):
        strides[a], acc = acc, acc * dims[a]
    axes = [a for a in perm if dims[a] != 1]
    shape, stride = [], []
    for j, a in enumerate(axes):
        if j and axes[j - 1] == a - 1 and stride[-1] == strides[a] * dims[a]:
            shape[-1] *= dims[a]
            stride[-1] = strides[a]
        else:
            shape.append(dims[a])
            stride.append(strides[a])
    run = 1
    if stride and stride[-1] == 1:
        run = shape.pop()
        stride.pop()
    return shape, stride, run


_TILE = 32  # the transposes' square tiles: a tile's rows and columns stay in cache between reads and writes


@njit(cache=True, nogil=True, parallel=True)
def _transpose_tiles(x, out, batch, rows, cols):
    """out (batch, cols, rows) = x (batch, rows, cols) transposed, in _TILE x _TILE tiles dealt to
    the pool (a move: same bits on any split). Within a tile the loop runs along the longer side's
    rows (reads of x's rows when cols < rows, else writes of out's rows): measured about twice as
    fast as the other order, and than NumPy's copy, on one core."""
    tr, tc = (rows + _TILE - 1) // _TILE, (cols + _TILE - 1) // _TILE
    for t in prange(batch * tr * tc):
        e, rest = t // (tr * tc), t % (tr * tc)
        r0, c0 = (rest // tc) * _TILE, (rest % tc) * _TILE
        r1, c1 = min(rows, r0 + _TILE), min(cols, c0 + _TILE)
        xb = x[e * rows * cols:(e + 1) * rows * cols]
        ob = out[e * rows * cols:(e + 1) * rows * cols]
        if cols < rows:
            for r in range(r0, r1):
                xr = xb[r * cols + c0:r * cols + c1]
                for j in range(c1 - c0):
                    ob[(c0 + j) * rows + r] = xr[j]
        else:
            for c in range(c0, c1):
                d = ob[c * rows + r0:c * rows + r1]
                for i in range(r1 - r0):
                    d[i] = xb[(r0 + i) * cols + c]


def _transpose_split(b, shape, stride):
    """The permutation as a batched 2-D transpose on the pool, where its merged axes (``_runs``, run
    1) are one: (batch, rows, cols) stored, read as (batch, cols, rows); else None."""
    n = b.size
    if len(shape) == 2 and stride[0] == 1 and stride[1] == shape[0]:
        batch, cols, rows = 1, shape[0], shape[1]
    elif len(shape) == 3 and stride[1] == 1 and stride[2] == shape[1] and stride[0] == shape[1] * shape[2]:
        batch, cols, rows = shape
    else:
        return None
    if parallel.parts(n, batch * -(-rows // _TILE) * -(-cols // _TILE), MIN_WORK) == 1:
        return None
    out = np.empty(n, F32)
    _transpose_tiles(b, out, batch, rows, cols)
    return out


def _permute_split(b, dims, perm, t=None):
    """b.reshape(dims).transpose(perm) row-major on parallel.parts(...) (or t) threads; None where
    the call stays on NumPy (small, or short runs that are not a batched transpose)."""
    n = b.size
    shape, stride, run = _runs(dims, perm)
    if shape and run == 1 and t is None:
        return _transpose_split(b, shape, stride)
    if not shape or run < MIN_RUN:
        return None
    if t is None:
        t = parallel.parts(n, n // run, MIN_WORK)
        if t == 1:
            return None
    out = np.empty(n, F32)
    _runs_par(b, out, np.array(shape, np.int64), np.array(stride, np.int64), run, t)
    return out


def swap_adjacent_at_depth(b, dims, depth):
    if depth + 1 >= len(dims):
        return b.copy()
    perm = list(range(len(dims)))
    perm[depth], perm[depth + 1] = depth + 1, depth
    out = _permute_split(b, dims, perm)
    if out is not None:
        return out
    return np.ascontiguousarray(np.swapaxes(b.reshape(dims), depth, depth + 1)).reshape(-1)


def permute(b, dims, perm):
    out = _permute_split(b, dims, perm)
    if out is not None:
        return out
    return np.ascontiguousarray(b.reshape(dims).transpose(perm)).reshape(-1)


def transpose2d(b, rows, cols):
    return np.ascontiguousarray(b.reshape(rows, cols).T).reshape(-1)


# -- batched matmul ------------------------------------------------------------------------------
# GEMMs go through gemm.py (cblas_sgemm at one thread, split over Numba's threads), transposed
# operands as BLAS flags (nothing is copied). n == 1: each output is one product, a * b exactly (as
# BLAS gives it): an outer product by broadcasting.
def _product(a, b, batch, m, n, p, trans_a, trans_b):
    """op(a) @ op(b) per batch entry (a holds (m, n) or, transposed, (n, m) matrices; b (n, p) or
    (p, n)): flat float32."""
    if n == 0:
        return np.zeros(batch * m * p, dtype=F32)
    with np.errstate(all="ignore"):
        if n == 1 and batch * m * p:  # either layout of an (m, 1) or (1, p) matrix is the same vector
            out = np.empty(batch * m * p, F32)
            if parallel.parts(out.size, batch * m, MIN_WORK) > 1:
                _outer_rows(a, b, out, batch, m, p)
            else:
                np.multiply(a.reshape(batch, m, 1), b.reshape(batch, 1, p), out=out.reshape(batch, m, p))
            return out
        return gemm(a, b, batch, m, p, n, trans_a, trans_b)


@njit(cache=True, nogil=True, parallel=True, error_model="numpy")
def _outer_rows(a, b, out, batch, m, p):
    """out[e, i, j] = a[e, i] * b[e, j], rows dealt to the pool (one product each: any split)."""
    for r in prange(batch * m):
        e = r // m
        ai = a[r]
        o = out[r * p:(r + 1) * p]
        bv = b[e * p:(e + 1) * p]
        for j in range(p):
            o[j] = ai * bv[j]


def bmm(a, b, batch, m, n, p):
    return _product(a, b, batch, m, n, p, False, False)


def bmm_nt(a, b, batch, m, n, p):
    """a b^T with b stored (batch, p, n): BLAS reads the transposed view, nothing is copied."""
    return _product(a, b, batch, m, n, p, False, True)


def bmm_tn(a, b, batch, m, n, p):
    """a^T b with a stored (batch, n, m)."""
    return _product(a, b, batch, m, n, p, True, False)
