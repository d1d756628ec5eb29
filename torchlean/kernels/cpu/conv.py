"""CPU kernels of the convolution: conv, conv_bwd_input, conv_bwd_weight, conv_transpose.

Every sum runs in float32 through BLAS (NumPy's matmul -> OpenBLAS SGEMM); the contracts allow
any order. Any spatial rank; two ways to lay the input out for the GEMM:

* im2col: a chunk of images is copied once into col (C*K, nb*P) (rows (channel, kernel offset),
  columns (image, output position)) from a ``sliding_window_view`` of the zero-padded chunk;
  conv is W (O, C*K) @ col, the weight gradient col @ dy^T. A 1x1 kernel at stride 1 without
  padding uses the input itself (no copy).
* last-axis unfold (stride 1 on every axis but the last; chosen by a rough cost model): the
  window is unfolded along the last axis only (kl copies of the input instead of K), one GEMM
  with the weight's other-axis offsets stacked as rows gives every offset's partial sums at every
  padded row, and the output adds those partials through strided views shifted by each offset.
  Its weight gradient is one GEMM per other-axis offset over a shifted column range (no copy).

conv_bwd_input in 2-D takes dcol = W^T dy and col2im in blocks of images (see "the 2-D path"),
below its output-plane threshold too where every block's GEMM is a cblas_sgemm (a transposed conv
from a 1x1 input is one). Otherwise, at stride 1 (or in 1-D) with finite weights, it is split by
the phase of dx positions modulo the stride into prod(stride) stride-1 convs of dy with the
phase's taps flipped and channels swapped (at stride 1: one conv; each dx element written once,
no scatter-adds); else it takes dcol = W^T dy and col2im (a fixed-order sum of the K shifted
slices), which is as fast at stride > 1 and the only choice with an inf/NaN weight (a padded 0
times an inf weight is no term of the adjoint). conv_transpose is conv_bwd_input with the channel
roles swapped, plus the bias.
Grouped or dilated plans (``plan.plain`` False) run conv_groups.py's kernels instead. A pointwise
plan (every kernel extent 1, stride 1, no padding: an FNO's or a ResNet's 1x1 layers) is a batched
GEMM with the weight shared by the images (``_pointwise``), through gemm.py, with no copies and none
of the 2-D path's kernels to compile.
In the 2-D path a strided conv whose output is the input divided by the stride reads (and its
input gradient writes) the input through its phase planes, and GEMMs with a short inner dimension
run as column slices (see "Strided convs" and _sgemm_nn_cols): the same values and bits, fewer
passes over memory.

Chunks hold about ``_COL_BYTES`` of columns (at least one image). Threads follow parallel.py's
policy (one pool, Numba's): rank 2 with enough output positions runs a few Numba parallel regions per
call, each item (a block of images x a tile of GEMM rows) copying its columns and calling
cblas_sgemm (see "the 2-D path"); every other geometry runs its copies on the calling thread and
its GEMMs through gemm.py, which splits them over the same threads.
Results are bitwise repeatable from run to run.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from numba import carray, njit, prange
from numpy.lib.stride_tricks import as_strided, sliding_window_view

from ..plans import ConvPlan, ConvTransposePlan, conv_plan_of
from . import conv_groups, parallel, tasks
from .cblas import NO_TRANS, TRANS, sgemm
from .gemm import gemm

__all__ = ["conv", "conv_bwd_input", "conv_bwd_weight", "conv_transpose"]

F32 = np.float32
_COL_BYTES = 8 << 20  # one chunk's column matrix: a few MB, so it is written and read back while warm
_UNFOLD_MAX_WASTE = 1.5  # the last-axis unfold computes every padded row: at most this many per output row


# -- parts of the batch ----------------------------------------------------------------------------
# Outside the 2-D path the batch is cut into parallel.parts(macs, batch, _ND_PART_MACS) contiguous
# parts, run in order on the calling thread (their GEMMs split over Numba's threads in gemm.py).
# conv and conv_bwd_input give the same bits for any cut; conv_bwd_weight adds the parts' partial
# sums in part order, so its bits follow the part count (fixed by the sizes and the thread count).
_ND_PART_MACS = 1 << 23


def _by_parts(batch: int, macs: int, fn) -> list:
    """[fn(n0, n1) for each part of the batch], in order (see above)."""
    t = parallel.parts(macs, batch, _ND_PART_MACS)
    return [fn(batch * i // t, batch * (i + 1) // t) for i in range(t)]


def _mm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b for 2-D float32 operands: through gemm.py (the same cblas_sgemm call NumPy makes, split
    over Numba's threads) when both are C-contiguous or transposed C-contiguous arrays and every
    dimension exceeds 1; otherwise np.matmul (NumPy hands a dimension of 1 to a GEMV or its own
    loop, whose bits a GEMM does not reproduce)."""
    (m, k), n = a.shape, b.shape[1]
    ta, tb = not a.flags.c_contiguous and a.T.flags.c_contiguous, not b.flags.c_contiguous and b.T.flags.c_contiguous
    if min(m, n, k) > 1 and a.dtype == F32 and b.dtype == F32 and (ta or a.flags.c_contiguous) \
            and (tb or b.flags.c_contiguous):
        return gemm((a.T if ta else a).reshape(-1), (b.T if tb else b).reshape(-1), 1, m, n, k, ta, tb).reshape(m, n)
    return np.matmul(a, b)


def _chunks(batch: int, per_image: int):
    nb = max(1, _COL_BYTES // max(4 * per_image, 1))
    for n0 in range(0, batch, nb):
        yield n0, min(batch, n0 + nb)


def _pad(xc: np.ndarray, lo, hi) -> np.ndarray:
    """xc (nb, C, *S) with lo[i] / hi[i] zeros before / after axis i (a negative count crops)."""
    if not any(lo) and not any(hi):
        return xc
    crop = tuple(slice(max(-a, 0), s - max(-b, 0)) for a, b, s in zip(lo, hi, xc.shape[2:]))
    xc = xc[(slice(None), slice(None)) + crop]
    shape = xc.shape[:2] + tuple(s + max(a, 0) + max(b, 0) for a, b, s in zip(lo, hi, xc.shape[2:]))
    xp = np.zeros(shape, F32)
    xp[(slice(None), slice(None)) + tuple(slice(max(a, 0), max(a, 0) + s) for a, s in zip(lo, xc.shape[2:]))] = xc
    return xp


def _identity_cols(kernel, stride, lo, hi) -> bool:
    """A 1x1 kernel at stride 1 without padding: the input is its own column matrix."""
    return math.prod(kernel) == 1 and not any(lo) and not any(hi) and all(s == 1 for s in stride)


def _im2col(xc: np.ndarray, kernel, stride, lo, hi, out) -> np.ndarray:
    """The (C*K, nb*P) column matrix of a chunk xc (nb, C, *S)."""
    nb, c = xc.shape[:2]
    r = len(kernel)
    k_n, p_n = math.prod(kernel), math.prod(out)
    if _identity_cols(kernel, stride, lo, hi):
        if nb == 1:
            return xc.reshape(c, p_n)  # 1x1 kernel: the image is its own column matrix
        return np.ascontiguousarray(xc.reshape(nb, c, p_n).transpose(1, 0, 2)).reshape(c, nb * p_n)
    xp = _pad(xc, lo, hi)
    v = sliding_window_view(xp, tuple(kernel), axis=tuple(range(2, 2 + r)))  # (nb, C, *windows, *kernel)
    v = v[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in stride)]  # (nb, C, *out, *kernel)
    col = np.empty((c,) + tuple(kernel) + (nb,) + tuple(out), F32)
    col[...] = v.transpose((1,) + tuple(range(2 + r, 2 + 2 * r)) + (0,) + tuple(range(2, 2 + r)))
    return col.reshape(c * k_n, nb * p_n)


def _rows(g3: np.ndarray, n0: int, n1: int) -> np.ndarray:
    """g3 (batch, C, P) images n0:n1 as a (C, nb*P) matrix (a view for one image)."""
    if n1 - n0 == 1:
        return g3[n0]
    c, p_n = g3.shape[1:]
    return np.ascontiguousarray(g3[n0:n1].transpose(1, 0, 2)).reshape(c, (n1 - n0) * p_n)


def _gemm_cost(m: int, flops: float) -> float:
    """Rough time of a GEMM with m output rows: a model of OpenBLAS's efficiency (one thread,
    AVX-512 kernel), which falls from 100% at 256 rows to 75% at 64 and 50% at 16."""
    eff = min(1.0, 0.5 + 0.125 * math.log2(max(m, 1) / 16)) if m < 256 else 1.0
    return flops / max(eff, 0.25)


_COPY = 25.0  # rough cost of copying (or adding) one float, in GEMM flops


def _unfold_cost(kernel, stride, lo, hi, spatial, out, c: int, o_n: int) -> float:
    """The rough cost of the last-axis unfold (inf where it does not apply: rank >= 2, stride 1 on
    every axis but the last, at most _UNFOLD_MAX_WASTE padded rows per output row)."""
    if len(kernel) < 2 or math.prod(kernel[:-1]) == 1 or any(s != 1 for s in stride[:-1]):
        return math.inf
    rows = math.prod(s + a + b for s, a, b in zip(spatial[:-1], lo[:-1], hi[:-1]))
    waste = rows / max(math.prod(out[:-1]), 1)
    if waste > _UNFOLD_MAX_WASTE:
        return math.inf
    k_n, kr_n, p_n = math.prod(kernel), math.prod(kernel[:-1]), math.prod(out)
    if _UNFOLD_MAX_WASTE > 1e6:
        return 0.0  # forced on (tests)
    flops = 2.0 * o_n * c * k_n * p_n
    return (_gemm_cost(kr_n * o_n, flops * waste) + _COPY * c * kernel[-1] * p_n * waste
            + _COPY * (kr_n - 1) * o_n * p_n)


def _im2col_cost(kernel, out, c: int, o_n: int) -> float:
    k_n, p_n = math.prod(kernel), math.prod(out)
    return _gemm_cost(o_n, 2.0 * o_n * c * k_n * p_n) + _COPY * c * k_n * p_n


def _plan(kernel, stride, lo, hi, spatial, out, c: int, o_n: int) -> str:
    """"unfold" (the last-axis unfold), "stack" (the same with a unit axis appended: every kernel
    offset stacked in the GEMM's rows, the padded input itself as the column matrix) or "im2col",
    whichever the rough cost model finds cheapest."""
    costs = {"im2col": _im2col_cost(kernel, out, c, o_n),
             "unfold": _unfold_cost(kernel, stride, lo, hi, spatial, out, c, o_n),
             "stack": _unfold_cost(tuple(kernel) + (1,), tuple(stride) + (1,), tuple(lo) + (0,), tuple(hi) + (0,),
                                   tuple(spatial) + (1,), tuple(out) + (1,), c, o_n)}
    return min(costs, key=costs.get)


def _unfold_last_pays(kernel, stride, lo, hi, spatial, out, c: int, o_n: int) -> bool:
    return _unfold_cost(kernel, stride, lo, hi, spatial, out, c, o_n) < _im2col_cost(kernel, out, c, o_n)


def _last_axis_cols(xc: np.ndarray, kl: int, sl: int, lo, hi, rows, wo: int) -> np.ndarray:
    """col (C, kl, nb, *rows, wo): col[c, j, n, *q, v] = xpad[n, c, *q, v*sl + j], xpad = xc (nb, C, *S)
    padded by lo / hi zeros per axis (negative: cropped). Written straight from xc: the borders are
    zero-filled, the interior copied once (no padded copy of the input first)."""
    nb, c = xc.shape[:2]
    spatial = xc.shape[2:]
    col = np.empty((c, kl, nb) + tuple(rows) + (wo,), F32)
    src, dst = [], []
    for i, (n, a, r) in enumerate(zip(spatial[:-1], lo[:-1], rows)):
        p0, p1 = max(a, 0), min(n + a, r)  # padded rows that hold input rows
        every = (slice(None),) * (3 + i)
        if p0 > 0:
            col[every + (slice(0, p0),)] = 0.0
        if p1 < r:
            col[every + (slice(max(p1, 0), r),)] = 0.0
        dst.append(slice(p0, max(p1, p0)))
        src.append(slice(p0 - a, max(p1, p0) - a))
    n_l, a_l = spatial[-1], lo[-1]
    for j in range(kl):
        # output column v reads input column v*sl + j - a_l, which must lie in [0, n_l)
        v0 = max(0, -(-(a_l - j) // sl))
        v1 = min(wo, max(v0, -(-(n_l + a_l - j) // sl)))
        cj = col[:, j]
        if v0 > 0:
            cj[..., :v0] = 0.0
        if v1 < wo:
            cj[..., v1:] = 0.0
        if v1 > v0:
            first = v0 * sl + j - a_l
            cj[(slice(None), slice(None)) + tuple(dst) + (slice(v0, v1),)] = \
                xc[(slice(None), slice(None)) + tuple(src) + (slice(first, first + (v1 - v0 - 1) * sl + 1, sl),)
                   ].swapaxes(0, 1)
    return col


def _conv_unfold_last(y, x5, w, b, kernel, stride, lo, hi, out) -> None:
    """conv with the kernel unfolded along the last axis only (stride 1 on the other axes).

    col (C*kl, nb*rows*wo) holds every padded row of the chunk, windowed along the last axis only
    (kl copies of the input instead of K); one GEMM with the weight reordered to (*k_rest, O) rows,
    Y = W_R @ col, gives for each other-axis kernel offset its partial sums at every padded row; the
    output adds the k_rest partials in a fixed order, each read through a strided view shifted by
    its offset (no copies). Each used partial is exactly the terms of its offset, so the NaN rule
    is unchanged.
    """
    batch, c = x5.shape[:2]
    o_n = w.shape[0]
    kr, kl = tuple(kernel[:-1]), kernel[-1]
    nk, kr_n = len(kr), math.prod(kr)
    sl, wo = stride[-1], out[-1]
    rows = tuple(s + a + bb for s, a, bb in zip(x5.shape[2:-1], lo[:-1], hi[:-1]))
    rows_n = math.prod(rows)
    wr = np.ascontiguousarray(w.reshape(o_n, c, kr_n, kl).transpose(2, 0, 1, 3)).reshape(kr_n * o_n, c * kl)
    for n0, n1 in _chunks(batch, (c * kl + kr_n * o_n) * rows_n * wo):
        nb = n1 - n0
        col = _last_axis_cols(x5[n0:n1], kl, sl, lo, hi, rows, wo)
        yk = _mm(wr, col.reshape(c * kl, nb * rows_n * wo))  # (*kr, O, nb, *rows, wo)
        st = np.cumprod((1,) + (wo,) + rows[::-1] + (nb, o_n) + kr[::-1])[::-1][1:]  # row-major, in elements
        st_k, st_o, st_n, st_r = st[:nk], st[nk], st[nk + 1], st[nk + 2:nk + 2 + nk]
        view = as_strided(yk, kr + (o_n, nb) + tuple(out),
                          tuple(4 * int(v) for v in tuple(st_k + st_r) + (st_o, st_n) + tuple(st_r) + (1,)),
                          writeable=False)
        target = y[n0:n1].reshape((nb, o_n) + tuple(out)).swapaxes(0, 1)
        offsets = list(np.ndindex(*kr))
        np.add(view[offsets[0]], view[offsets[1]], out=target)  # kr_n >= 2 here
        for k in offsets[2:]:
            np.add(target, view[k], out=target)
        if b is not None:
            y[n0:n1] += b[:, None]


def _conv_into(y: np.ndarray, x5: np.ndarray, w: np.ndarray, b, kernel, stride, lo, hi, out) -> None:
    """y (batch, O, P) = the conv of x5 (batch, C, *S), padded by lo/hi (negative: cropped), with
    w (O, C, *kernel), plus b, by parts of the batch (disjoint slices of y)."""
    macs = y.size * math.prod(w.shape[1:])
    _by_parts(x5.shape[0], macs, lambda n0, n1: _conv_part(y[n0:n1], x5[n0:n1], w, b, kernel, stride, lo, hi, out))


def _conv_part(y: np.ndarray, x5: np.ndarray, w: np.ndarray, b, kernel, stride, lo, hi, out) -> None:
    plan = _plan(kernel, stride, lo, hi, x5.shape[2:], out, x5.shape[1], w.shape[0])
    if plan == "unfold":
        return _conv_unfold_last(y, x5, w, b, kernel, stride, lo, hi, out)
    if plan == "stack":  # a unit last axis: views, no copies
        return _conv_unfold_last(y, x5[..., None], w[..., None], b, tuple(kernel) + (1,), tuple(stride) + (1,),
                                 tuple(lo) + (0,), tuple(hi) + (0,), tuple(out) + (1,))
    batch = x5.shape[0]
    o_n = w.shape[0]
    w2 = w.reshape(o_n, -1)
    p_n = math.prod(out)
    per_image = w2.shape[1] * p_n
    if _identity_cols(kernel, stride, lo, hi) and p_n >= 512:
        per_image = _COL_BYTES  # 1x1: one image per GEMM reads x and writes y in place, no transposes
    for n0, n1 in _chunks(batch, per_image):
        col = _im2col(x5[n0:n1], kernel, stride, lo, hi, out)
        if n1 - n0 == 1:
            y[n0] = _mm(w2, col)
        else:
            y[n0:n1] = _mm(w2, col).reshape(o_n, n1 - n0, p_n).transpose(1, 0, 2)
        if b is not None:
            y[n0:n1] += b[:, None]


# -- the 2-D path (the CNN case) -------------------------------------------------------------------
# Rank 2 with at least _FAST_MIN_P output positions per image has its own path: Numba kernels write
# the column matrices straight from x (no padded copy, no strided NumPy copy) and call cblas_sgemm
# from inside Numba parallel regions (a few per call, no GIL), in layouts of blocks of images x
# tiles of rows that follow from the sizes alone (conv and input gradient, then weight gradient,
# below). The other ranks cannot take it (their column copies and unfold plans are NumPy code). The
# conv's bias is a column of W against a row of ones in col (one more product, b * 1 = b exactly).
_FAST_MIN_P = 16  # fewer output positions per image: one wide GEMM over the chunk does better
_ZERO32 = np.float32(0.0)
_ONE32 = np.float32(1.0)


_U = np.uint64


# Index arithmetic in the kernels below is unsigned (np.uint64) wherever a loop should vectorize:
# Numba adds a negative-index wraparound to every signed index, and with an offset in the index
# LLVM cannot prove it dead, so the loop stays scalar (several times slower). Every value
# converted is >= 0 by construction.
@njit(cache=True, error_model="numpy", nogil=True)
def _span(ow_n, sw, kx, pw, w):
    """[a, b): the outputs ow whose tap kx reads an input column inside the image."""
    a = 0
    while a < ow_n and a * sw + kx - pw < 0:
        a += 1
    b = ow_n
    while b > a and (b - 1) * sw + kx - pw >= w:
        b -= 1
    return a, b


@njit(cache=True, error_model="numpy", nogil=True)
def _shift_masks(kh, kw, ph, pw, h, w, oh_n):
    """For stride 1 with ow_n == w ("row pitch kept"): the tap (ky, kx) of output q = oh*w + ow reads
    input q + (ky - ph)*w + kx - pw. mask[ky*kw + kx, q]: whether that input lies inside the image
    (its row and its column: a column off a side would wrap to the next or previous row)."""
    m = np.zeros((kh * kw, oh_n * w), dtype=np.bool_)
    for ky in range(kh):
        for kx in range(kw):
            for oh in range(oh_n):
                ih = oh + ky - ph
                for ow in range(w):
                    iw = ow + kx - pw
                    m[ky * kw + kx, oh * w + ow] = ih >= 0 and ih < h and iw >= 0 and iw < w
    return m


# Strided convs whose output is the input's size divided by the stride (DCGAN's k4 s2 p1, ResNet's
# k3 s2 p1 on even sizes) read their taps through the input's phases: x is first split once into
# its sh * sw phase planes (rows i*sh + phy, columns j*sw + phx), each (h/sh, w/sw), the output's
# own size; tap (ky, kx) then reads phase ((ky - ph) mod sh, (kx - pw) mod sw) shifted by
# ((ky - ph) div sh, (kx - pw) div sw) whole rows and columns: one contiguous run per tap and
# channel with a select against the tap's mask, as at stride 1 (no gather at the stride). The
# column matrices hold the same values, so the GEMMs and their bits are unchanged.
@njit(inline="always", nogil=True)
def _phased(h, w, kh, kw, sh, sw, oh_n, ow_n):
    """Whether _im2col_rows reads x in the phase layout (see above): a stride > 1 whose every phase
    holds a tap, and an output of exactly the phase planes' size."""
    return (sh > 1 or sw > 1) and kh >= sh and kw >= sw and oh_n * sh == h and ow_n * sw == w


_PHASE_DX_MIN_P = 256  # _col2im2d takes the phase planes from this many output positions (runs long enough)


@njit(inline="always", nogil=True)
def _phased_dx(h, w, kh, kw, sh, sw, oh_n, ow_n):
    """Whether _col2im2d writes dx in the phase layout: _phased, on planes of _PHASE_DX_MIN_P positions."""
    return _phased(h, w, kh, kw, sh, sw, oh_n, ow_n) and oh_n * ow_n >= _PHASE_DX_MIN_P


def _phased_dx_py(spatial, kernel, stride, out) -> bool:
    return _phased_py(spatial, kernel, stride, out) and math.prod(out) >= _PHASE_DX_MIN_P


def _phased_py(spatial, kernel, stride, out) -> bool:
    (h, w), (kh, kw), (sh, sw), (oh, ow) = spatial, kernel, stride, out
    return (sh > 1 or sw > 1) and kh >= sh and kw >= sw and oh * sh == h and ow * sw == w


@njit(cache=True, error_model="numpy", nogil=True)
def _phase_copy(src, n0, n1, c_n, h, w, sh, sw, dst, split):
    """Images n0:n1 between the image layout (flat (batch, C, h, w)) and the phase layout (flat
    (batch, C, sh, sw, h/sh, w/sw)): into the phases when ``split``, back from them otherwise."""
    hp, wp = h // sh, w // sw
    for n in range(n0, n1):
        for c in range(c_n):
            xb = _U((n * c_n + c) * h * w)
            for phy in range(sh):
                for phx in range(sw):
                    d = _U((((n * c_n + c) * sh + phy) * sw + phx) * hp * wp)
                    for i in range(hp):
                        img = xb + _U((i * sh + phy) * w + phx)
                        ph = d + _U(i * wp)
                        if split:
                            for j in range(_U(wp)):
                                dst[ph + j] = src[img + j * _U(sw)]
                        else:
                            for j in range(_U(wp)):
                                dst[img + j * _U(sw)] = src[ph + j]


@njit(cache=True, nogil=True, parallel=True)
def _phase_copy_par(src, t, batch, c_n, h, w, sh, sw, dst, split):
    for i in prange(t):
        _phase_copy(src, batch * i // t, batch * (i + 1) // t, c_n, h, w, sh, sw, dst, split)


def _phase_convert(src, batch: int, in_c: int, spatial, stride, split: bool) -> np.ndarray:
    """src in the phase layout (``split``) or back in the image layout (see _phase_copy)."""
    (h, w), (sh, sw) = spatial, stride
    dst = np.empty(batch * in_c * h * w, F32)
    t = parallel.parts(dst.size, batch, 1 << 16)
    if t > 1:
        _phase_copy_par(src, t, batch, in_c, h, w, sh, sw, dst, split)
    else:
        _phase_copy(src, 0, batch, in_c, h, w, sh, sw, dst, split)
    return dst


def _phase_input(x, batch: int, in_c: int, spatial, kernel, stride, out):
    """x in the phase layout where _im2col_rows reads it so (_phased), else x itself."""
    if not _phased_py(spatial, kernel, stride, out):
        return x
    return _phase_convert(x, batch, in_c, spatial, stride, True)


def _phase_output(xs, batch: int, in_c: int, spatial, stride) -> np.ndarray:
    """x (flat (batch, C, *spatial)) from xs in the phase layout."""
    return _phase_convert(xs, batch, in_c, spatial, stride, False)


@njit(cache=True, error_model="numpy", nogil=True)
def _phase_masks(kh, kw, ph, pw, sh, sw, hp, wp, sign):
    """mask[ky*kw + kx, q] for q = a*wp + b on a phase plane, (dy, dx) the tap's shift on the plane:
    sign +1, whether output q's tap reads inside the plane ((a + dy, b + dx) exists: the forward's
    columns); sign -1, whether position q receives the tap from an output ((a - dy, b - dx): dx)."""
    m = np.zeros((kh * kw, hp * wp), dtype=np.bool_)
    for ky in range(kh):
        dy = sign * ((ky - ph - (ky - ph) % sh) // sh)
        for kx in range(kw):
            dx = sign * ((kx - pw - (kx - pw) % sw) // sw)
            for a in range(hp):
                for b in range(wp):
                    m[ky * kw + kx, a * wp + b] = 0 <= a + dy < hp and 0 <= b + dx < wp
    return m


def _phase_margin(kernel, stride, padding, out) -> int:
    """Entries the phased _col2im2d may read before the first and after the last entry of dcol:
    the largest shift of a tap on its phase plane."""
    (kh, kw), (sh, sw), (ph, pw), ow = kernel, stride, padding, out[1]
    dys = [abs((ky - ph - (ky - ph) % sh) // sh) for ky in range(kh)]
    dxs = [abs((kx - pw - (kx - pw) % sw) // sw) for kx in range(kw)]
    return max(dys) * ow + max(dxs)


@njit(inline="always", error_model="numpy", nogil=True)
def _masked_run(x, col, rb, lo, p_n, mk):
    """col[rb + q] = x[lo + q] where the tap's mask mk[q] holds, else 0, for q < p_n (one run of a
    tap's row; a run that would leave x takes the careful loop)."""
    if lo >= 0 and lo + p_n <= x.size:
        s0 = _U(lo)
        for q in range(_U(p_n)):
            v = x[s0 + q]
            col[rb + q] = v if mk[q] else _ZERO32
    else:
        for q in range(p_n):
            col[rb + _U(q)] = x[_U(lo + q)] if mk[q] else _ZERO32


@njit(inline="always", error_model="numpy", nogil=True)
def _im2col_phased(x, n0, n1, c0, c1, c_n, h, w, col, sn, sr, kh, kw, sh, sw, ph, pw, oh_n, ow_n):
    """_im2col_body where _phased holds: x in the phase layout."""
    p_n = oh_n * ow_n
    kk = kh * kw
    # x in the phase layout (see _phased): each tap one shifted run over its phase plane
    m = _phase_masks(kh, kw, ph, pw, sh, sw, oh_n, ow_n, np.int64(1))  # int64: one compilation for both signs
    for n in range(n0, n1):
        cb = (n - n0) * sn
        for c in range(c0, c1):
            for k in range(kk):
                ky = k // kw
                kx = k - ky * kw
                phy, phx = (ky - ph) % sh, (kx - pw) % sw
                rb = _U(cb + ((c - c0) * kk + k) * sr)
                lo = (((n * c_n + c) * sh + phy) * sw + phx) * p_n + (ky - ph - phy) // sh * ow_n \
                    + (kx - pw - phx) // sw
                _masked_run(x, col, rb, lo, p_n, m[k])


@njit(inline="always", error_model="numpy", nogil=True)
def _im2col_shift(x, n0, n1, c0, c1, c_n, h, w, col, sn, sr, kh, kw, sh, sw, ph, pw, oh_n, ow_n):
    """_im2col_body at stride 1 with ow_n == w: masked shifted runs."""
    p_n = oh_n * ow_n
    kk = kh * kw
    # each row is the plane shifted by (ky - ph) rows and (kx - pw) columns: one run over the
    # whole row, with a select against the tap's mask (entries off the image read a neighbour
    # in x and are replaced by 0; a row whose run would leave x takes the careful loop)
    m = _shift_masks(kh, kw, ph, pw, h, w, oh_n)
    for n in range(n0, n1):
        cb = (n - n0) * sn
        for c in range(c0, c1):
            xb = (n * c_n + c) * h * w
            for k in range(kk):
                ky = k // kw
                rb = _U(cb + ((c - c0) * kk + k) * sr)
                lo = xb + (ky - ph) * w + (k - ky * kw) - pw
                _masked_run(x, col, rb, lo, p_n, m[k])


@njit(inline="always", error_model="numpy", nogil=True)
def _im2col_walk(x, n0, n1, c0, c1, c_n, h, w, col, sn, sr, kh, kw, sh, sw, ph, pw, oh_n, ow_n):
    """_im2col_body otherwise: row by row."""
    kk = kh * kw
    for n in range(n0, n1):
        cb = (n - n0) * sn
        for c in range(c0, c1):
            xb = (n * c_n + c) * h * w
            for ky in range(kh):
                for kx in range(kw):
                    rb = cb + ((c - c0) * kk + ky * kw + kx) * sr
                    a, b = _span(ow_n, sw, kx, pw, w)
                    for oh in range(oh_n):
                        ih = oh * sh + ky - ph
                        ro = rb + oh * ow_n
                        if ih < 0 or ih >= h:
                            for ow in range(ow_n):
                                col[_U(ro + ow)] = _ZERO32
                            continue
                        for ow in range(a):
                            col[_U(ro + ow)] = _ZERO32
                        for ow in range(b, ow_n):
                            col[_U(ro + ow)] = _ZERO32
                        xr = xb + ih * w + kx - pw
                        if sw == 1:
                            d0, s0 = _U(ro + a), _U(xr + a)
                            for i in range(_U(b - a)):
                                col[d0 + i] = x[s0 + i]
                        else:
                            for ow in range(a, b):
                                col[_U(ro + ow)] = x[_U(xr + ow * sw)]


@njit(inline="always", error_model="numpy", nogil=True)
def _im2col_body(x, n0, n1, c0, c1, c_n, h, w, col, sn, sr, kh, kw, sh, sw, ph, pw, oh_n, ow_n):
    """The rows of channels c0:c1 of images n0:n1's column matrices into col (flat):
    col[(n-n0)*sn + ((c-c0)*kh*kw + ky*kw + kx)*sr + (oh*ow_n + ow)] = x[n, c, oh*sh + ky - ph,
    ow*sw + kx - pw] (0 outside the image). sn = rows * P, sr = P: each image's (C*K, P) matrix
    after the last; sn = P, sr = images * P: one (C*K, images * P) matrix, columns (image, position).
    Where _phased holds, x is in the phase layout (_phase_input), not (batch, C, h, w)."""
    if _phased(h, w, kh, kw, sh, sw, oh_n, ow_n):
        _im2col_phased(x, n0, n1, c0, c1, c_n, h, w, col, sn, sr, kh, kw, sh, sw, ph, pw, oh_n, ow_n)
    elif sh == 1 and sw == 1 and ow_n == w:
        _im2col_shift(x, n0, n1, c0, c1, c_n, h, w, col, sn, sr, kh, kw, sh, sw, ph, pw, oh_n, ow_n)
    else:
        _im2col_walk(x, n0, n1, c0, c1, c_n, h, w, col, sn, sr, kh, kw, sh, sw, ph, pw, oh_n, ow_n)


@njit(cache=True, error_model="numpy", nogil=True)
def _dx_masks(kh, kw, ph, pw, h, w, oh_n):
    """For stride 1 with ow_n == w: mask[ky*kw + kx, i] whether input i (flat) receives the tap
    (ky, kx) of an output, i.e. output i - ((ky - ph)*w + kx - pw) exists and its tap lands on i
    without wrapping across a row."""
    m = np.zeros((kh * kw, h * w), dtype=np.bool_)
    for ky in range(kh):
        for kx in range(kw):
            for ih in range(h):
                oh = ih - ky + ph
                for iw in range(w):
                    ow = iw - kx + pw
                    m[ky * kw + kx, ih * w + iw] = oh >= 0 and oh < oh_n and ow >= 0 and ow < w
    return m


def _col2im_margin(h, w, kh, kw, ph, pw, oh_n, ow_n) -> int:
    """Entries _col2im2d may read before the first and after the last entry of dcol (the stride-1,
    ow_n == w case reads each image's row over the whole plane, shifted; the masked entries are
    never used). 0 otherwise."""
    if ow_n != w:
        return 0
    return max(0, (kh - 1 - ph) * w + kw - 1 - pw, h * w + ph * w + pw - oh_n * ow_n)


@njit(inline="always", error_model="numpy", nogil=True)
def _col2im_phased(dcol, dx, n0, n1, c0, c1, c_n, h, w, kh, kw, sh, sw, ph, pw, oh_n, ow_n, sn, sr, margin):
    """_col2im_body where _phased_dx holds: dx in the phase layout."""
    kk = kh * kw
    p_n = oh_n * ow_n
    m = _phase_masks(kh, kw, ph, pw, sh, sw, oh_n, ow_n, np.int64(-1))
    for n in range(n0, n1):
        cb = margin + (n - n0) * sn
        for c in range(c0, c1):
            for phy in range(sh):
                for phx in range(sw):
                    d = _U((((n * c_n + c) * sh + phy) * sw + phx) * p_n)
                    first = True
                    for k in range(kk):
                        ky = k // kw
                        kx = k - ky * kw
                        if (ky - ph) % sh != phy or (kx - pw) % sw != phx:
                            continue
                        shift = (ky - ph - phy) // sh * ow_n + (kx - pw - phx) // sw
                        r = _U(cb + ((c - c0) * kk + k) * sr - shift)
                        mk = m[k]
                        if first:
                            for i in range(_U(p_n)):
                                v = dcol[r + i]
                                dx[d + i] = _ZERO32 + (v if mk[i] else _ZERO32)
                            first = False
                        else:
                            for i in range(_U(p_n)):
                                v = dcol[r + i]
                                dx[d + i] += v if mk[i] else _ZERO32


@njit(inline="always", error_model="numpy", nogil=True)
def _col2im_shift(dcol, dx, n0, n1, c0, c1, c_n, h, w, kh, kw, sh, sw, ph, pw, oh_n, ow_n, sn, sr, margin):
    """_col2im_body at stride 1 with ow_n == w: masked shifted runs."""
    kk = kh * kw
    m = _dx_masks(kh, kw, ph, pw, h, w, oh_n)
    hw = _U(h * w)
    for n in range(n0, n1):
        cb = margin + (n - n0) * sn
        for c in range(c0, c1):
            d = _U((n * c_n + c) * h * w)
            for k in range(kk):
                ky = k // kw
                shift = (ky - ph) * w + (k - ky * kw) - pw
                r = _U(cb + ((c - c0) * kk + k) * sr - shift)
                mk = m[k]
                if k == 0:
                    for i in range(hw):
                        v = dcol[r + i]
                        dx[d + i] = _ZERO32 + (v if mk[i] else _ZERO32)
                else:
                    for i in range(hw):
                        v = dcol[r + i]
                        dx[d + i] += v if mk[i] else _ZERO32


@njit(inline="always", error_model="numpy", nogil=True)
def _col2im_walk(dcol, dx, n0, n1, c0, c1, c_n, h, w, kh, kw, sh, sw, ph, pw, oh_n, ow_n, sn, sr, margin):
    """_col2im_body otherwise: row by row."""
    kk = kh * kw
    for n in range(n0, n1):
        cb = margin + (n - n0) * sn
        for c in range(c0, c1):
            xb = (n * c_n + c) * h * w
            d = _U(xb)
            for i in range(_U(h * w)):
                dx[d + i] = _ZERO32
            for ky in range(kh):
                for kx in range(kw):
                    rb = cb + ((c - c0) * kk + ky * kw + kx) * sr
                    a, b = _span(ow_n, sw, kx, pw, w)
                    for oh in range(oh_n):
                        ih = oh * sh + ky - ph
                        if ih < 0 or ih >= h:
                            continue
                        ro = rb + oh * ow_n
                        xr = xb + ih * w + kx - pw
                        if sw == 1:
                            d0, s0 = _U(xr + a), _U(ro + a)
                            for i in range(_U(b - a)):
                                dx[d0 + i] += dcol[s0 + i]
                        else:
                            for ow in range(a, b):
                                dx[_U(xr + ow * sw)] += dcol[_U(ro + ow)]


@njit(inline="always", error_model="numpy", nogil=True)
def _col2im_body(dcol, dx, n0, n1, c0, c1, c_n, h, w, kh, kw, sh, sw, ph, pw, oh_n, ow_n, sn, sr, margin):
    """dx[n0:n1, c0:c1] (dx flat (batch, c_n, h, w)) = the adjoint of im2col applied to dcol, whose
    entry (image n, channel c, tap k = ky*kw + kx, position q) is dcol[margin + (n-n0)*sn +
    ((c-c0)*kh*kw + k)*sr + q] (the layouts of _im2col_rows): each dx element gets, from +0, the
    entries of the taps that land on it, added in row-major order of (ky, kx) and then (oh, ow);
    taps in the padding are dropped. With stride 1 and ow_n == w (sh == sw == 1 required) each
    tap's row is gathered over the whole plane, dx[i] += row[i - shift] where the tap lands on i and
    +0 elsewhere (a select against the mask; the reads elsewhere fall in neighbouring rows or
    images, or the margins, and are not used): a +0 term leaves a sum that started from +0
    unchanged, bit for bit (such a sum is never -0). Each dx element is read and written at the same
    place by every tap (no shifted stores). Where _phased_dx holds, dx is written in the phase layout
    (_phase_output puts it back): each phase plane gets its taps, in the same row-major order of
    (ky, kx), each tap one shifted run over the plane, as at stride 1."""
    if _phased_dx(h, w, kh, kw, sh, sw, oh_n, ow_n):
        _col2im_phased(dcol, dx, n0, n1, c0, c1, c_n, h, w, kh, kw, sh, sw, ph, pw, oh_n, ow_n, sn, sr, margin)
    elif sh == 1 and sw == 1 and ow_n == w:
        _col2im_shift(dcol, dx, n0, n1, c0, c1, c_n, h, w, kh, kw, sh, sw, ph, pw, oh_n, ow_n, sn, sr, margin)
    else:
        _col2im_walk(dcol, dx, n0, n1, c0, c1, c_n, h, w, kh, kw, sh, sw, ph, pw, oh_n, ow_n, sn, sr, margin)


# im2col and col2im run as tasks (tasks.py), also where the conv tasks' compiled parts call them
# (through the address, ``_im2col_at`` / ``_col2im_at``): each compiles once, as a cached callback.
# Linked into its callers as an njit function, LLVM would optimize and emit its code again in each
# (about a second apiece on a cold start). Words: the arrays as (address, size), then the integers,
# in the order of the bodies' parameters. One task per branch of the bodies (the branch follows from
# the geometry): a model compiles only the branches its layers take.
def _im2col_phased_task(i, p):
    a = carray(p, 21)
    _im2col_phased(tasks.as_f32(a[0], a[1]), a[2], a[3], a[4], a[5], a[6], a[7], a[8], tasks.as_f32(a[9], a[10]),
                   a[11], a[12], a[13], a[14], a[15], a[16], a[17], a[18], a[19], a[20])


def _im2col_shift_task(i, p):
    a = carray(p, 21)
    _im2col_shift(tasks.as_f32(a[0], a[1]), a[2], a[3], a[4], a[5], a[6], a[7], a[8], tasks.as_f32(a[9], a[10]),
                  a[11], a[12], a[13], a[14], a[15], a[16], a[17], a[18], a[19], a[20])


def _im2col_walk_task(i, p):
    a = carray(p, 21)
    _im2col_walk(tasks.as_f32(a[0], a[1]), a[2], a[3], a[4], a[5], a[6], a[7], a[8], tasks.as_f32(a[9], a[10]),
                 a[11], a[12], a[13], a[14], a[15], a[16], a[17], a[18], a[19], a[20])


def _col2im_phased_task(i, p):
    a = carray(p, 22)
    _col2im_phased(tasks.as_f32(a[0], a[1]), tasks.as_f32(a[2], a[3]), a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11],
                   a[12], a[13], a[14], a[15], a[16], a[17], a[18], a[19], a[20], a[21])


def _col2im_shift_task(i, p):
    a = carray(p, 22)
    _col2im_shift(tasks.as_f32(a[0], a[1]), tasks.as_f32(a[2], a[3]), a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11],
                  a[12], a[13], a[14], a[15], a[16], a[17], a[18], a[19], a[20], a[21])


def _col2im_walk_task(i, p):
    a = carray(p, 22)
    _col2im_walk(tasks.as_f32(a[0], a[1]), tasks.as_f32(a[2], a[3]), a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11],
                 a[12], a[13], a[14], a[15], a[16], a[17], a[18], a[19], a[20], a[21])


_IM2COL_TASKS = tuple(tasks.Task(f) for f in (_im2col_phased_task, _im2col_shift_task, _im2col_walk_task))
_COL2IM_TASKS = tuple(tasks.Task(f) for f in (_col2im_phased_task, _col2im_shift_task, _col2im_walk_task))


def _im2col_task(h, w, kh, kw, sh, sw, oh_n, ow_n) -> tasks.Task:
    """The task of _im2col_body's branch for this geometry."""
    if _phased_py((h, w), (kh, kw), (sh, sw), (oh_n, ow_n)):
        return _IM2COL_TASKS[0]
    return _IM2COL_TASKS[1 if sh == 1 and sw == 1 and ow_n == w else 2]


def _col2im_task(h, w, kh, kw, sh, sw, oh_n, ow_n) -> tasks.Task:
    """The task of _col2im_body's branch for this geometry."""
    if _phased_dx_py((h, w), (kh, kw), (sh, sw), (oh_n, ow_n)):
        return _COL2IM_TASKS[0]
    return _COL2IM_TASKS[1 if sh == 1 and sw == 1 and ow_n == w else 2]


@njit(inline="always", nogil=True)
def _im2col_at(fp, x, n0, n1, c0, c1, c_n, h, w, col, sn, sr, kh, kw, sh, sw, ph, pw, oh_n, ow_n):
    """_im2col_rows from compiled code, fp the address of its branch's task (``_im2col_task``)."""
    a = np.empty(21, np.int64)
    a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7] = x.ctypes.data, x.size, n0, n1, c0, c1, c_n, h
    a[8], a[9], a[10], a[11], a[12], a[13], a[14] = w, col.ctypes.data, col.size, sn, sr, kh, kw
    a[15], a[16], a[17], a[18], a[19], a[20] = sh, sw, ph, pw, oh_n, ow_n
    tasks.call(fp, a)


@njit(inline="always", nogil=True)
def _col2im_at(fp, dcol, dx, n0, n1, c0, c1, c_n, h, w, kh, kw, sh, sw, ph, pw, oh_n, ow_n, sn, sr, margin):
    """_col2im2d from compiled code, fp the address of its branch's task (``_col2im_task``)."""
    a = np.empty(22, np.int64)
    a[0], a[1], a[2], a[3], a[4], a[5] = dcol.ctypes.data, dcol.size, dx.ctypes.data, dx.size, n0, n1
    a[6], a[7], a[8], a[9], a[10], a[11], a[12], a[13], a[14] = c0, c1, c_n, h, w, kh, kw, sh, sw
    a[15], a[16], a[17], a[18], a[19], a[20], a[21] = ph, pw, oh_n, ow_n, sn, sr, margin
    tasks.call(fp, a)


def _f32_flat(*arrays) -> bool:
    return all(a.dtype == F32 and a.flags.c_contiguous for a in arrays)


# Called from Python (the np.matmul paths, without a cblas_sgemm from Numba): the bodies as njit
# functions, compiled only if such a call comes.
_im2col_rows = njit(cache=True, error_model="numpy", nogil=True)(_im2col_body.py_func)
_col2im2d = njit(cache=True, error_model="numpy", nogil=True)(_col2im_body.py_func)


_TR_COLS = 16  # _transpose_images with few channels of many positions: positions per step


@njit(cache=True, error_model="numpy", nogil=True)
def _transpose_images(g, n0, n1, o_n, p_n, out):
    """out (n1-n0, p_n, o_n) flat = images n0:n1 of g (batch, o_n, p_n) flat, each transposed. With
    fewer than 32 channels of 1024+ positions the column-wise reads (4 KiB apart, competing for the
    same L1 sets) are slow: there the copy runs in steps of _TR_COLS positions, each channel's run
    read contiguously, the step's rows of out kept in L1."""
    for n in range(n1 - n0):
        gb = _U((n0 + n) * o_n * p_n)
        ob = _U(n * o_n * p_n)
        if o_n < 32 and p_n >= 1024:
            for p0 in range(0, p_n, _TR_COLS):
                p1 = min(p_n, p0 + _TR_COLS)
                for o in range(_U(o_n)):
                    src = gb + o * _U(p_n)
                    for p in range(_U(p0), _U(p1)):
                        out[ob + p * _U(o_n) + o] = g[src + p]
        else:
            for p in range(_U(p_n)):
                for o in range(_U(o_n)):
                    out[ob + p * _U(o_n) + o] = g[gb + o * _U(p_n) + p]


_PART_MACS = 1 << 18  # multiply-adds per part at least: a region's start and wake-ups cost a few us
_COPY_PART = 1 << 16  # elements per part at least of a memory-bound copy (dy transposed for the weight gradient)


def _sgemm_fits(st, m: int, n: int, k: int) -> bool:
    """Whether an (m x k) @ (k x n) product is one sgemm in NumPy too (every dimension > 1) and its
    dimensions (the leading dimensions are among them) fit the BLAS integers."""
    return st is not None and min(m, n, k) > 1 and (st[1].itemsize == 8 or max(m, n, k) < 1 << 31)


_NT, _TR = NO_TRANS, TRANS


# -- the 2-D conv and input gradient: blocks of images x tiles of rows -------------------------------
# y = W col and dcol = W^T dy multiply by the whole weight; one GEMM per image of a small output
# plane (P = 16 at ResNet's 4x4) has OpenBLAS pack all of W for P columns. So the batch is cut into
# blocks of g images, g P >= _BLOCK_COLS, whose columns (image, position) are ONE GEMM's N, and the
# GEMM's rows into tiles so that 16 threads have items when the batch makes few blocks: the conv's
# tiles are output channels (at least _FW_TILE_ROWS, boundaries at multiples of _FW_TILE_ALIGN),
# the input gradient's whole input channels (at least _DW_TILE_ROWS rows; each item then does its
# channels' col2im, its dcol still in cache). Blocks and tiles are kept near square (OpenBLAS packs the whole other operand
# for every tile: tiles of few rows re-read the block's columns too often). Items (block, tile)
# run block-major, dealt to parallel.parts(...) parts in contiguous ranges, in one Numba region; a
# part writes its block's column matrix (conv: im2col, rows (c, ky, kx) and a bias row of ones;
# input gradient: dy as (O, (image, position))) into its scratch once for the block's run of
# tiles, then the item's sgemm: the conv's into its scratch, then to each image's y (a block of one
# image writes y directly, ldc P); the input gradient's into its dcol scratch (after a margin),
# then _col2im2d (a block of one image reads dy itself). The layout follows from the sizes alone
# and each output element is one GEMM's dot product, so the bits do not depend on the thread count.
# The sgemm gets the arguments NumPy's matmul would pass for the same operands (RowMajor; the conv's
# operands contiguous, the input gradient's W^T as W's columns with the Trans flag, as NumPy passes
# a transposed view; column slices where the inner dimension is short, the same dot products), so
# these are np.matmul's bits too; where NumPy would not call one sgemm (a dimension
# of 1: a GEMV or its own loop) or no cblas_sgemm is at hand, the same items run on the calling
# thread through np.matmul. Nothing inside a region can raise: every scratch buffer is allocated
# before it and the callers check the shapes.
_BLOCK_COLS = 128    # columns (image, position) per block at least
_FW_TILE_ROWS = 64   # conv: output channels per tile at least (OpenBLAS runs 64 rows near its 128-row rate)
_FW_TILE_ALIGN = 16  # conv tiles start at multiples of this many rows (OpenBLAS's row-edge kernels round differently)
_FD_ITEMS = 16       # blocks x tiles wanted at least (work for 16 threads)


def _blocks(batch: int, p_n: int) -> tuple:
    """(images per block, blocks) from the sizes alone."""
    g = min(batch, max(1, -(-_BLOCK_COLS // p_n)))
    return g, -(-batch // g)


def _fw_layout(batch: int, p_n: int, out_c: int) -> tuple:
    """conv: (images per block, blocks, output channels per tile, tiles)."""
    g, n_blocks = _blocks(batch, p_n)
    want = max(1, min(out_c // _FW_TILE_ROWS, -(-_FD_ITEMS // n_blocks)))
    per = -(-out_c // want)  # output channels per tile, then rounded up to the alignment
    tile = -(-per // _FW_TILE_ALIGN) * _FW_TILE_ALIGN
    return g, n_blocks, tile, -(-out_c // tile)


def _dx_layout(batch: int, in_c: int, k_n: int, p_n: int) -> tuple:
    """conv_bwd_input: (images per block, blocks, channel tiles)."""
    g, n_blocks = _blocks(batch, p_n)
    n_tiles = max(1, min(in_c // max(1, -(-_DW_TILE_ROWS // k_n)), -(-_FD_ITEMS // n_blocks)))
    return g, n_blocks, n_tiles


# A GEMM with a short inner dimension (k <= _NARROW_K: a ResNet 3x3 conv of 16 channels, K = 144,
# or an input gradient from 16 output channels, K = 16) runs as column slices of _COL_SLICE
# columns: OpenBLAS packs and streams each slice's B and C while they stay in L2 (about twice as
# fast there). Each output element is the same dot product in the same order (the slices start at
# multiples of OpenBLAS's column unroll), so the bits are those of the one call.
_NARROW_K = 160
_COL_SLICE = 256


@njit(inline="always", nogil=True)
def _sgemm_nn_cols(fn, iz, ta, m, n, k, a, lda, b, ldb, c, ldc):
    """sgemm(fn, iz, ta, NoTrans, m, n, k, a, lda, b, ldb, c, ldc), by column slices where k is short."""
    if k > _NARROW_K or n <= 2 * _COL_SLICE:
        sgemm(fn, iz, ta, _NT, m, n, k, a, lda, b, ldb, c, ldc)
        return
    for j0 in range(0, n, _COL_SLICE):
        sgemm(fn, iz, ta, _NT, m, min(_COL_SLICE, n - j0), k, a, lda, b + 4 * j0, ldb, c + 4 * j0, ldc)


@njit(inline="always", nogil=True)
def _fw_tile_out(sb, y, n0, n1, o0, o1, o_n, p_n):
    """An item's product (o1-o0, (n1-n0) P) into y[n0:n1, o0:o1] (y flat (batch, O, P))."""
    cols = (n1 - n0) * p_n
    for n in range(n0, n1):
        for o in range(o0, o1):
            s0, d0 = _U((o - o0) * cols + (n - n0) * p_n), _U((n * o_n + o) * p_n)
            for q in range(_U(p_n)):
                y[d0 + q] = sb[s0 + q]


@njit(cache=True, error_model="numpy", nogil=True)
def _block_cols_at(fp, x, n0, n1, col, in_c, h, w, kh, kw, sh, sw, ph, pw, oh_n, ow_n, bias_row):
    """Block n0:n1's column matrix (C*K + bias_row, (n1-n0) P) into col (flat), a last row of ones;
    fp: the address of _im2col_task's task for the geometry."""
    cols = (n1 - n0) * oh_n * ow_n
    _im2col_at(fp, x, n0, n1, 0, in_c, in_c, h, w, col, oh_n * ow_n, cols, kh, kw, sh, sw, ph, pw, oh_n, ow_n)
    if bias_row:
        b0 = _U(in_c * kh * kw * cols)
        for q in range(_U(cols)):
            col[b0 + q] = _ONE32


def _block_cols(x, n0, n1, col, in_c, h, w, kh, kw, sh, sw, ph, pw, oh_n, ow_n, bias_row) -> None:
    """_block_cols_at on the calling thread."""
    if not _f32_flat(x, col):
        cols = (n1 - n0) * oh_n * ow_n
        _im2col_rows(x, n0, n1, 0, in_c, in_c, h, w, col, oh_n * ow_n, cols, kh, kw, sh, sw, ph, pw, oh_n, ow_n)
        if bias_row:
            col[in_c * kh * kw * cols:(in_c * kh * kw + 1) * cols] = _ONE32
        return
    fp = _im2col_task(h, w, kh, kw, sh, sw, oh_n, ow_n).address()
    _block_cols_at(fp, x, n0, n1, col, in_c, h, w, kh, kw, sh, sw, ph, pw, oh_n, ow_n, bias_row)


@njit(inline="always", nogil=True)
def _fw_part(fn, iz, x, wb, y, cs, os, t, i, items, n_tiles, tile, g, batch, in_c, out_c, h, w, kh, kw, sh, sw, ph,
             pw, oh_n, ow_n, bias_row, im2col):
    """Part i of t: conv items [items i / t, items (i + 1) / t), cs[i] / os[i] its scratch."""
    p_n = oh_n * ow_n
    rows = in_c * kh * kw + bias_row
    cb, ob = cs[i], os[i]
    have = -1
    for j in range(items * i // t, items * (i + 1) // t):
        blk = j // n_tiles
        o0 = (j % n_tiles) * tile
        o1 = min(out_c, o0 + tile)
        n0 = blk * g
        n1 = min(batch, n0 + g)
        cols = (n1 - n0) * p_n
        if blk != have:
            _block_cols_at(im2col, x, n0, n1, cb, in_c, h, w, kh, kw, sh, sw, ph, pw, oh_n, ow_n, bias_row)
            have = blk
        a = wb.ctypes.data + 4 * o0 * rows
        if n1 - n0 == 1:
            _sgemm_nn_cols(fn, iz, _NT, o1 - o0, cols, rows, a, rows, cb.ctypes.data, cols,
                           y.ctypes.data + 4 * (n0 * out_c + o0) * p_n, p_n)
        else:
            _sgemm_nn_cols(fn, iz, _NT, o1 - o0, cols, rows, a, rows, cb.ctypes.data, cols, ob.ctypes.data, cols)
            _fw_tile_out(ob, y, n0, n1, o0, o1, out_c, p_n)


# The three 2-D regions run as tasks (tasks.py: each part body compiles once, as a cached callback,
# instead of once per parallel wrapper); one task per BLAS integer type (_I32, _I64).
_I32, _I64 = np.int32(0), np.int64(0)


@njit(inline="always", nogil=True)
def _fw_body(i, p, iz):
    a = carray(p, 33)
    _fw_part(a[0], iz, tasks.as_f32(a[2], a[3]), tasks.as_f32(a[4], a[5]), tasks.as_f32(a[6], a[7]),
             tasks.as_f32(a[8], (a[9], a[10])), tasks.as_f32(a[11], (a[12], a[13])), a[1], i, a[14], a[15], a[16],
             a[17], a[18], a[19], a[20], a[21], a[22], a[23], a[24], a[25], a[26], a[27], a[28], a[29], a[30], a[31],
             a[32])


def _fw_task32(i, p):
    _fw_body(i, p, _I32)


def _fw_task64(i, p):
    _fw_body(i, p, _I64)


_FW_TASKS = (tasks.Task(_fw_task32), tasks.Task(_fw_task64))


@njit(cache=True, error_model="numpy", nogil=True)
def _block_dy(dy, n0, n1, dyb, o_n, p_n):
    """Block n0:n1 of dy (batch, O, P) as (O, (n1-n0) P) into dyb (flat), columns (image, position)."""
    cols = (n1 - n0) * p_n
    for n in range(n0, n1):
        for o in range(o_n):
            s0, d0 = _U((n * o_n + o) * p_n), _U(o * cols + (n - n0) * p_n)
            for q in range(_U(p_n)):
                dyb[d0 + q] = dy[s0 + q]


@njit(inline="always", nogil=True)
def _dx_part(fn, iz, w2, ta, dy, dx, ds, cs, t, i, items, n_tiles, g, batch, in_c, out_c, h, w, kh, kw, sh, sw, ph, pw,
             oh_n, ow_n, margin, col2im):
    """Part i of t: input-gradient items [items i / t, items (i + 1) / t), ds[i] / cs[i] its scratch.
    w2 is W^T (C*K, O), or with ta == Trans the weight (O, C*K) itself (see _dx_weight)."""
    p_n = oh_n * ow_n
    k_n = kh * kw
    ck = in_c * k_n
    db, cb = ds[i], cs[i]
    have = -1
    for j in range(items * i // t, items * (i + 1) // t):
        blk, n0, n1, c0, c1 = _dw_item_span(j, 0, n_tiles, g, batch, in_c)
        cols = (n1 - n0) * p_n
        if n1 - n0 == 1:
            bb = dy.ctypes.data + 4 * n0 * out_c * p_n
        else:
            if blk != have:
                _block_dy(dy, n0, n1, db, out_c, p_n)
                have = blk
            bb = db.ctypes.data
        if ta == _TR:
            a, lda = w2.ctypes.data + 4 * c0 * k_n, ck
        else:
            a, lda = w2.ctypes.data + 4 * c0 * k_n * out_c, out_c
        _sgemm_nn_cols(fn, iz, ta, (c1 - c0) * k_n, cols, out_c, a, lda, bb, cols, cb.ctypes.data + 4 * margin, cols)
        _col2im_at(col2im, cb, dx, n0, n1, c0, c1, in_c, h, w, kh, kw, sh, sw, ph, pw, oh_n, ow_n, p_n, cols, margin)


@njit(inline="always", nogil=True)
def _dx_body(i, p, iz):
    a = carray(p, 33)
    _dx_part(a[0], iz, tasks.as_f32(a[2], a[3]), a[4], tasks.as_f32(a[5], a[6]), tasks.as_f32(a[7], a[8]),
             tasks.as_f32(a[9], (a[10], a[11])), tasks.as_f32(a[12], (a[13], a[14])), a[1], i, a[15], a[16], a[17],
             a[18], a[19], a[20], a[21], a[22], a[23], a[24], a[25], a[26], a[27], a[28], a[29], a[30], a[31], a[32])


def _dx_task32(i, p):
    _dx_body(i, p, _I32)


def _dx_task64(i, p):
    _dx_body(i, p, _I64)


_DX_TASKS = (tasks.Task(_dx_task32), tasks.Task(_dx_task64))


# -- the 2-D weight gradient: blocks of images x tiles of channels -------------------------------
# dW^T (C*K, O) = sum over images n of col_n (C*K, P) @ dy_n^T (P, O). The batch is cut into blocks
# of g images, g P >= _DW_BLOCK_COLS (the GEMM's inner dimension: long enough for OpenBLAS to run
# near peak, and one partial sum per block instead of one per image), the rows into tiles of whole
# channels (so that 16+ threads have items when one block holds the batch). Item (block, tile):
# the tile's rows of the block's column matrix, (rows (c, ky, kx), columns (image, position)),
# then ONE cblas_sgemm with the block's rows of dy^T (dy transposed once per call into (batch P, O),
# whose rows are the block's columns in the same order) into the tile's rows of the block's
# partial. The partials are added per element in block order (one left-to-right chain), in rounds
# of at most _DW_PARTIAL_BYTES of partials (a round continues the chain of the one before). One
# block (the whole batch: small planes) of _DW_DIRECT_MIN_O or more output channels has no
# partials to add: each item's sgemm then writes its tile's columns of dW (O, C*K) itself, as
# dy (O, cols) @ col^T (cols, rows) with both operands read transposed, and no partial is
# transposed into dW afterwards (a serial pass over the whole of dW). g, the tiles and the rounds follow from
# the sizes alone, and every item is the same GEMM however the items are dealt to parts: the bits
# do not depend on the thread count.
_DW_BLOCK_COLS = 1024         # columns (image, position) per block at least
_DW_ITEMS = 32                # blocks x tiles wanted at least (work for 16 threads, with some balance)
_DW_TILE_ROWS = 128           # rows per tile at least: OpenBLAS's efficiency falls below
_DW_PARTIAL_BYTES = 64 << 20  # one round's partial sums at most
_DW_ROWS = 16                 # the reduction's rows per step (each transposed write fills a cache line)
_DW_DIRECT_MIN_O = 128        # one block writes dW directly from this many output channels (fewer:
                              # the transposed GEMM with so short an M costs more than the pass it saves)


def _dw_layout(batch: int, in_c: int, k_n: int, p_n: int, out_c: int) -> tuple:
    """(images per block, blocks, channel tiles, blocks per round), from the sizes alone."""
    g = min(batch, max(1, -(-_DW_BLOCK_COLS // p_n)))
    n_blocks = -(-batch // g)
    n_tiles = max(1, min(in_c // max(1, -(-_DW_TILE_ROWS // k_n)), -(-_DW_ITEMS // n_blocks)))
    per_round = max(1, min(n_blocks, _DW_PARTIAL_BYTES // max(1, 4 * in_c * k_n * out_c)))
    return g, n_blocks, n_tiles, per_round


@njit(inline="always", nogil=True)
def _dw_item_span(j, b0, n_tiles, g, batch, in_c):
    """Item j of the round that starts at block b0: (block, first image, end image, c0, c1)."""
    b = b0 + j // n_tiles
    r = j % n_tiles
    n0 = b * g
    return b, n0, min(batch, n0 + g), in_c * r // n_tiles, in_c * (r + 1) // n_tiles


@njit(inline="always", nogil=True)
def _dw_part(fn, iz, x, dyt, sums, col, t, i, items, b0, n_tiles, g, batch, in_c, out_c, h, w, kh, kw, sh, sw, ph,
             pw, oh_n, ow_n, im2col, direct):
    """Part i of t: items [items i / t, items (i + 1) / t) of the round, col[i] the part's scratch;
    ``direct`` (one block): sums is dW itself (see above)."""
    p_n = oh_n * ow_n
    k_n = kh * kw
    ck = in_c * k_n
    cb = col[i]
    for j in range(items * i // t, items * (i + 1) // t):
        b, n0, n1, c0, c1 = _dw_item_span(j, b0, n_tiles, g, batch, in_c)
        cols = (n1 - n0) * p_n
        _im2col_at(im2col, x, n0, n1, c0, c1, in_c, h, w, cb, p_n, cols, kh, kw, sh, sw, ph, pw, oh_n, ow_n)
        dy_at = dyt.ctypes.data + 4 * n0 * p_n * out_c
        if direct:  # sums is dW (O, C*K): the tile's columns c0 K .. c1 K
            sgemm(fn, iz, _TR, _TR, out_c, (c1 - c0) * k_n, cols, dy_at, out_c, cb.ctypes.data, cols,
                  sums.ctypes.data + 4 * c0 * k_n, ck)
        else:
            sgemm(fn, iz, _NT, _NT, (c1 - c0) * k_n, out_c, cols, cb.ctypes.data, cols, dy_at, out_c,
                  sums.ctypes.data + 4 * ((b - b0) * ck + c0 * k_n) * out_c, out_c)


@njit(inline="always", nogil=True)
def _dw_body(i, p, iz):
    a = carray(p, 31)
    _dw_part(a[0], iz, tasks.as_f32(a[2], a[3]), tasks.as_f32(a[4], a[5]), tasks.as_f32(a[6], (a[7], a[8])),
             tasks.as_f32(a[9], (a[10], a[11])), a[1], i, a[12], a[13], a[14], a[15], a[16], a[17], a[18], a[19],
             a[20], a[21], a[22], a[23], a[24], a[25], a[26], a[27], a[28], a[29], a[30] != 0)


def _dw_task32(i, p):
    _dw_body(i, p, _I32)


def _dw_task64(i, p):
    _dw_body(i, p, _I64)


_DW_TASKS = (tasks.Task(_dw_task32), tasks.Task(_dw_task64))


@njit(inline="always", nogil=True)
def _dw_reduce_part(sums, nb, acc, dw, tmp, i, t, ck, o_n, first, last):
    """Row steps of part i of t: each element of rows r of dW^T is (acc or sums[0]) + sums[1] + ...
    (+ sums[nb - 1]), left to right; into acc, or (last round) transposed into dw (O, C*K)."""
    steps = -(-ck // _DW_ROWS)
    tb = tmp[i]
    for s in range(steps * i // t, steps * (i + 1) // t):
        r0 = s * _DW_ROWS
        r1 = min(ck, r0 + _DW_ROWS)
        n = _U((r1 - r0) * o_n)
        e0 = _U(r0 * o_n)
        if first:
            for e in range(n):
                tb[e] = sums[0, e0 + e]
        else:
            for e in range(n):
                tb[e] = acc[e0 + e]
        for b in range(1 if first else 0, nb):
            sb = sums[b]
            for e in range(n):
                tb[e] += sb[e0 + e]
        if last:
            for o in range(o_n):
                for r in range(r0, r1):
                    dw[o * ck + r] = tb[(r - r0) * o_n + o]
        else:
            for e in range(n):
                acc[e0 + e] = tb[e]


@njit(cache=True, nogil=True, error_model="numpy")
def _dw_reduce_ser(sums, nb, acc, dw, tmp, ck, o_n, first, last):
    _dw_reduce_part(sums, nb, acc, dw, tmp, 0, 1, ck, o_n, first, last)


@njit(cache=True, nogil=True, parallel=True, error_model="numpy")
def _dw_reduce_par(sums, nb, acc, dw, tmp, t, ck, o_n, first, last):
    for i in prange(t):
        _dw_reduce_part(sums, nb, acc, dw, tmp, i, t, ck, o_n, first, last)


@njit(cache=True, nogil=True, parallel=True)
def _transpose_images_par(g, t, batch, o_n, p_n, out):
    for i in prange(t):
        n0, n1 = batch * i // t, batch * (i + 1) // t
        _transpose_images(g, n0, n1, o_n, p_n, out[n0 * p_n * o_n:n1 * p_n * o_n])


def _fast_2d(spatial, out) -> bool:
    return len(spatial) == 2 and math.prod(out) >= _FAST_MIN_P


def _blocked_dx(batch: int, in_c: int, out_c: int, spatial, kernel, out) -> bool:
    """Whether conv_bwd_input takes the 2-D blocks: at _FAST_MIN_P output positions and up, and below
    that where every item is one cblas_sgemm from Numba (blocks make even P = 1 a wide GEMM: a
    transposed conv from a 1x1 input, DCGAN's first layer, is one; a dimension of 1 would run
    np.matmul per item)."""
    if len(spatial) != 2:
        return False
    p_n, k_n = math.prod(out), math.prod(kernel)
    if p_n >= _FAST_MIN_P:
        return True
    g, n_blocks, n_tiles = _dx_layout(batch, in_c, k_n, p_n)
    return _sgemm_fits(parallel.sgemm_address(), in_c // n_tiles * k_n, min(g, batch - (n_blocks - 1) * g) * p_n,
                       out_c)


def _geom2d(spatial, kernel, stride, padding, out):
    (h, w), (kh, kw), (sh, sw), (ph, pw), (oh, ow) = spatial, kernel, stride, padding, out
    return h, w, kh, kw, sh, sw, ph, pw, oh, ow


def _conv2d_fast(x, w, b, batch, in_c, out_c, spatial, kernel, stride, padding, out) -> np.ndarray:
    """conv (rank 2) by blocks of images x tiles of output channels (see above): y (batch, O, P) flat."""
    h, wd, kh, kw, sh, sw, ph, pw, oh, ow = _geom2d(spatial, kernel, stride, padding, out)
    p_n, ck = oh * ow, in_c * kh * kw
    bias_row = int(b is not None)
    rows = ck + bias_row
    wb = w.reshape(out_c, ck)
    if b is not None:
        wb = np.concatenate([wb, b.reshape(out_c, 1)], axis=1)
    wb = np.ascontiguousarray(wb)
    x = _phase_input(np.ascontiguousarray(x).reshape(-1), batch, in_c, spatial, kernel, stride, out)
    y = np.empty(batch * out_c * p_n, F32)
    g, n_blocks, tile, n_tiles = _fw_layout(batch, p_n, out_c)
    items = n_blocks * n_tiles
    st = parallel.sgemm_address()
    fits = _sgemm_fits(st, min(tile, out_c), g * p_n, rows) \
        and _sgemm_fits(st, out_c - (n_tiles - 1) * tile, (batch - (n_blocks - 1) * g) * p_n, rows) \
        and x.dtype == F32 and wb.dtype == F32
    t = parallel.parts(batch * out_c * rows * p_n, items, _PART_MACS) if fits else 1
    cs = np.empty((t, rows * g * p_n), F32)
    os = np.empty((t, min(tile, out_c) * g * p_n if g > 1 else 1), F32)
    if fits:
        tasks.run(tasks.blas_task(_FW_TASKS, st[1]),
                  tasks.pack(st[0], t, x, x.size, wb, wb.size, y, y.size, cs, *cs.shape, os, *os.shape, items, n_tiles,
                             tile, g, batch, in_c, out_c, h, wd, kh, kw, sh, sw, ph, pw, oh, ow, bias_row,
                             _im2col_task(h, wd, kh, kw, sh, sw, oh, ow).address()), t)
        return y
    y3 = y.reshape(batch, out_c, p_n)
    for blk in range(n_blocks):
        n0, n1 = blk * g, min(batch, blk * g + g)
        cols = (n1 - n0) * p_n
        _block_cols(x, n0, n1, cs[0], in_c, h, wd, kh, kw, sh, sw, ph, pw, oh, ow, bias_row)
        for o0 in range(0, out_c, tile):
            o1 = min(out_c, o0 + tile)
            prod = np.matmul(wb[o0:o1], cs[0, :rows * cols].reshape(rows, cols))
            y3[n0:n1, o0:o1] = prod.reshape(o1 - o0, n1 - n0, p_n).transpose(1, 0, 2)
    return y


_DX_COPY_W = 1 << 16  # weights up to this many floats are transposed for the input gradient's GEMMs


def _dx_weight(w2: np.ndarray) -> tuple:
    """(A, flag) for the input gradient's GEMMs: a small weight's transposed copy W^T (C*K, O), whose
    NoTrans packing is the faster; a large one's W itself with the Trans flag (its strided copy would
    cost more than the GEMMs gain). The same operand values either way: the same bits."""
    if w2.size <= _DX_COPY_W:
        return np.ascontiguousarray(w2.T), _NT
    return w2, _TR


def _bwd_input2d_col2im(dy, w, batch, in_c, out_c, spatial, kernel, stride, padding, out) -> np.ndarray:
    """conv_bwd_input (rank 2) by blocks of images x tiles of input channels (see above): dcol = W^T dy
    per item, then _col2im2d. Every term is a real term of the adjoint (taps in the padding are
    dropped whole), so inf/NaN weights need no other path."""
    h, wd, kh, kw, sh, sw, ph, pw, oh, ow = _geom2d(spatial, kernel, stride, padding, out)
    p_n, k_n = oh * ow, kh * kw
    ck = in_c * k_n
    w2 = np.ascontiguousarray(w).reshape(out_c, ck)
    wa, ta = _dx_weight(w2)
    dy = np.ascontiguousarray(dy).reshape(-1)
    dx = np.empty(batch * in_c * h * wd, F32)
    g, n_blocks, n_tiles = _dx_layout(batch, in_c, k_n, p_n)
    items = n_blocks * n_tiles
    tile_rows = -(-in_c // n_tiles) * k_n
    margin = _col2im_margin(h, wd, kh, kw, ph, pw, oh, ow)
    phased = _phased_dx_py(spatial, kernel, stride, out)
    if phased:  # _col2im2d writes dx in the phase layout, put back below
        margin = max(margin, _phase_margin(kernel, stride, padding, out))
    st = parallel.sgemm_address()
    fits = _sgemm_fits(st, in_c // n_tiles * k_n, g * p_n, out_c) \
        and _sgemm_fits(st, tile_rows, (batch - (n_blocks - 1) * g) * p_n, out_c) and dy.dtype == F32 \
        and w2.dtype == F32
    t = parallel.parts(batch * out_c * ck * p_n, items, _PART_MACS) if fits else 1
    ds = np.empty((t, out_c * g * p_n if g > 1 else 1), F32)
    cs = np.empty((t, tile_rows * g * p_n + 2 * margin), F32)
    if fits:
        tasks.run(tasks.blas_task(_DX_TASKS, st[1]),
                  tasks.pack(st[0], t, wa, wa.size, ta, dy, dy.size, dx, dx.size, ds, *ds.shape, cs, *cs.shape, items,
                             n_tiles, g, batch, in_c, out_c, h, wd, kh, kw, sh, sw, ph, pw, oh, ow, margin,
                             _col2im_task(h, wd, kh, kw, sh, sw, oh, ow).address()), t)
    else:
        g3 = dy.reshape(batch, out_c, p_n)
        for j in range(items):
            _, n0, n1, c0, c1 = _dw_item_span(j, 0, n_tiles, g, batch, in_c)
            cols, rows = (n1 - n0) * p_n, (c1 - c0) * k_n
            src = np.ascontiguousarray(g3[n0:n1].transpose(1, 0, 2)).reshape(out_c, cols)
            np.matmul(w2[:, c0 * k_n:c1 * k_n].T, src, out=cs[0, margin:margin + rows * cols].reshape(rows, cols))
            _col2im2d(cs[0], dx, n0, n1, c0, c1, in_c, h, wd, kh, kw, sh, sw, ph, pw, oh, ow, p_n, cols, margin)
    return _phase_output(dx, batch, in_c, spatial, stride) if phased else dx


def _bwd_weight2d_fast(x, dy, batch, in_c, out_c, spatial, kernel, stride, padding, out) -> np.ndarray:
    """conv_bwd_weight (rank 2) by blocks of images x tiles of channels (see above): dW (O, C*K) flat.
    Without a cblas_sgemm from Numba, or with a GEMM dimension of 1 (NumPy runs a GEMV or its own
    loop there), the same items run on the calling thread through np.matmul."""
    h, wd, kh, kw, sh, sw, ph, pw, oh, ow = _geom2d(spatial, kernel, stride, padding, out)
    p_n, k_n = oh * ow, kh * kw
    ck = in_c * k_n
    x = _phase_input(np.ascontiguousarray(x).reshape(-1), batch, in_c, spatial, kernel, stride, out)
    dy = np.ascontiguousarray(dy).reshape(-1)
    g, n_blocks, n_tiles, per_round = _dw_layout(batch, in_c, k_n, p_n, out_c)
    tile_rows = -(-in_c // n_tiles) * k_n
    dw = np.empty(out_c * ck, F32)
    dyt = np.empty(batch * p_n * out_c, F32)
    st = parallel.sgemm_address()
    fits = _sgemm_fits(st, in_c // n_tiles * k_n, out_c, p_n) and _sgemm_fits(st, tile_rows, out_c, g * p_n) \
        and x.dtype == F32 and dy.dtype == F32
    direct = n_blocks == 1 and out_c >= _DW_DIRECT_MIN_O  # the items write dW: no partials (see above)
    sums = dw.reshape(1, -1) if direct else np.empty((per_round, ck * out_c), F32)
    acc = np.empty(ck * out_c if n_blocks > per_round else 1, F32)
    t_dy = parallel.parts(dy.size, batch, _COPY_PART) if fits else 1
    if t_dy > 1:
        _transpose_images_par(dy, t_dy, batch, out_c, p_n, dyt)
    else:
        _transpose_images(dy, 0, batch, out_c, p_n, dyt)
    t_max = parallel.parts(batch * out_c * ck * p_n, per_round * n_tiles, _PART_MACS) if fits else 1
    col = np.empty((t_max, tile_rows * g * p_n), F32)
    tmp = np.empty((t_max, _DW_ROWS * out_c), F32)
    for b0 in range(0, n_blocks, per_round):
        nb = min(per_round, n_blocks - b0)
        items = nb * n_tiles
        if fits:
            n_imgs = min(batch, (b0 + nb) * g) - b0 * g
            t = min(t_max, parallel.parts(n_imgs * out_c * ck * p_n, items, _PART_MACS))
            tasks.run(tasks.blas_task(_DW_TASKS, st[1]),
                      tasks.pack(st[0], t, x, x.size, dyt, dyt.size, sums, *sums.shape, col, *col.shape, items, b0,
                                 n_tiles, g, batch, in_c, out_c, h, wd, kh, kw, sh, sw, ph, pw, oh, ow,
                                 _im2col_task(h, wd, kh, kw, sh, sw, oh, ow).address(), int(direct)), t)
            if direct:
                return dw
        else:
            for j in range(items):
                b, n0, n1, c0, c1 = _dw_item_span(j, b0, n_tiles, g, batch, in_c)
                cols, rows = (n1 - n0) * p_n, (c1 - c0) * k_n
                _im2col_rows(x, n0, n1, c0, c1, in_c, h, wd, col[0], p_n, cols, kh, kw, sh, sw, ph, pw, oh, ow)
                cm, dm = col[0, :rows * cols].reshape(rows, cols), dyt[n0 * p_n * out_c:n1 * p_n * out_c].reshape(
                    cols, out_c)
                if direct:  # the same sgemm as the items' (both operands read transposed)
                    dw.reshape(out_c, ck)[:, c0 * k_n:c1 * k_n] = np.matmul(dm.T, cm.T)
                else:
                    np.matmul(cm, dm, out=sums[b - b0, c0 * k_n * out_c:c1 * k_n * out_c].reshape(rows, out_c))
            if direct:
                return dw
        first, last = b0 == 0, b0 + nb == n_blocks
        t = min(t_max, parallel.parts(nb * ck * out_c, -(-ck // _DW_ROWS), _PART_MACS))
        if t > 1:
            _dw_reduce_par(sums, nb, acc, dw, tmp, t, ck, out_c, first, last)
        else:
            _dw_reduce_ser(sums, nb, acc, dw, tmp, ck, out_c, first, last)
    return dw


# -- geometry whose cost the stride or padding would set ------------------------------------------
# The layouts above pad the input (s + 2p per axis), and the phase split visits prod(stride)
# phases. An axis whose stride exceeds its kernel has disjoint windows; when its padding is also at
# least a kernel wide, the padded length s + 2p is no longer bounded by the tensors (conv1d with
# stride 2**31 and padding 2**30 has one output but a 2**31-long padded row). Such an axis is first
# gathered: out windows of k taps, (out * k) positions with the padding's zeros written in, read at
# stride k without padding. Every tap reads the same value as before, so the GEMMs see the same
# column matrices. On every other axis either stride <= kernel, where s + 2p < (out + 1) kernel, or
# padding < kernel, where s + 2p < s + 2 kernel: memory and time stay proportional to the tensors.
def _sparse_axes(kernel, stride, padding) -> list:
    return [i for i, (k, s, p) in enumerate(zip(kernel, stride, padding)) if s > k and p >= k]


def _taps(n: int, k: int, s: int, p: int, o: int) -> np.ndarray:
    """The input position of each (output, tap) pair along one axis, flat (o * k); a position in the
    padding reads slot n (a zero appended to the axis)."""
    idx = (np.arange(o, dtype=np.int64)[:, None] * s + (np.arange(k, dtype=np.int64) - p)).reshape(-1)
    idx[(idx < 0) | (idx >= n)] = n
    return idx


def _compact(axes, spatial, kernel, stride, padding, out) -> tuple:
    """(spatial', stride', padding') once ``axes`` are gathered: out * kernel positions, stride kernel, no padding."""
    sp, st, pd = list(spatial), list(stride), list(padding)
    for i in axes:
        sp[i], st[i], pd[i] = out[i] * kernel[i], kernel[i], 0
    return tuple(sp), tuple(st), tuple(pd)


def _gather_axes(a5: np.ndarray, axes, spatial, kernel, stride, padding, out):
    """(a5 gathered along ``axes`` (batch, C, *spatial'), spatial', stride', padding')."""
    for i in axes:
        ax = 2 + i
        zero = np.zeros(a5.shape[:ax] + (1,) + a5.shape[ax + 1:], F32)
        a5 = np.take(np.concatenate([a5, zero], axis=ax),
                     _taps(spatial[i], kernel[i], stride[i], padding[i], out[i]), axis=ax)
    return (a5,) + _compact(axes, spatial, kernel, stride, padding, out)


def _scatter_axes(d5: np.ndarray, axes, spatial, kernel, stride, padding, out) -> np.ndarray:
    """The adjoint of _gather_axes for an input gradient: d5 (batch, C, *spatial') back onto
    (batch, C, *spatial); taps that read the padding are dropped, positions no tap reads get 0.
    The windows are disjoint, so each position receives at most one tap (an assignment)."""
    for i in reversed(axes):
        ax = 2 + i
        n = spatial[i]
        full = np.zeros(d5.shape[:ax] + (n + 1,) + d5.shape[ax + 1:], F32)
        full[(slice(None),) * ax + (_taps(n, kernel[i], stride[i], padding[i], out[i]),)] = d5
        d5 = full[(slice(None),) * ax + (slice(0, n),)]
    return np.ascontiguousarray(d5)


def _pointwise(plan: ConvPlan) -> bool:
    """Every kernel extent 1, stride 1, no padding (groups and dilation are not plain: excluded)."""
    batch, in_c, out_c, spatial, kernel, stride, padding = plan[:7]
    return (plan.plain and all(k == 1 for k in kernel) and all(s == 1 for s in stride) and not any(padding)
            and batch * in_c * out_c * math.prod(spatial) > 0)


def _pointwise_conv(x, w, b, plan: ConvPlan):
    """y[n] = W (O, C) @ x[n] (C, P) (+ b per output channel): fl(fl(W x) + b)."""
    batch, in_c, out_c, spatial = plan[:4]
    p_n = math.prod(spatial)
    y = gemm(w, np.ascontiguousarray(x, F32), batch, out_c, p_n, in_c, False, False, shared_a=True)
    if b is not None:
        y.reshape(batch, out_c, p_n)[...] += b[:, None]
    return y


def _pointwise_bwd_input(dy, w, plan: ConvPlan):
    """dx[n] = W^T (C, O) @ dy[n] (O, P)."""
    batch, in_c, out_c, spatial = plan[:4]
    return gemm(w, np.ascontiguousarray(dy, F32), batch, in_c, math.prod(spatial), out_c, True, False,
                shared_a=True)


def _pointwise_bwd_weight(x, dy, plan: ConvPlan):
    """dW = sum over the images of dy[n] (O, P) @ x[n]^T (P, C): one product per image (gemm.py splits
    each over the pool by the shape alone), added in image order."""
    batch, in_c, out_c, spatial = plan[:4]
    per = gemm(np.ascontiguousarray(dy, F32), np.ascontiguousarray(x, F32), batch, out_c, in_c, math.prod(spatial),
               False, True).reshape(batch, out_c * in_c)
    dw = per[0].copy()
    for n in range(1, batch):
        dw += per[n]
    return dw


def conv(x, w, b, plan: ConvPlan):
    if not plan.plain:  # groups or dilation: conv_groups.py
        return conv_groups.conv(x, w, b, plan)
    parallel.blas_one_thread()  # every GEMM below, NumPy's included, at one OpenBLAS thread
    batch, in_c, out_c, spatial, kernel, stride, padding, out = plan[:8]
    if _pointwise(plan):
        with np.errstate(all="ignore"):
            return _pointwise_conv(x, w, b, plan)
    sparse = _sparse_axes(kernel, stride, padding)
    if sparse and batch * in_c:
        x5, spatial, stride, padding = _gather_axes(x.reshape((batch, in_c) + tuple(spatial)), sparse, spatial,
                                                    kernel, stride, padding, out)
        x = x5.reshape(-1)
    y = np.empty((batch, out_c, math.prod(out)), F32)
    if y.size == 0:
        return y.reshape(-1)
    with np.errstate(all="ignore"):
        if in_c == 0:  # no terms: the bias alone
            y[...] = 0.0 if b is None else b[:, None]
            return y.reshape(-1)
        if _fast_2d(spatial, out):
            return _conv2d_fast(x, w, b, batch, in_c, out_c, spatial, kernel, stride, padding, out)
        x5 = x.reshape((batch, in_c) + tuple(spatial))
        _conv_into(y, x5, w.reshape((out_c, in_c) + tuple(kernel)), b, kernel, stride, padding, padding, out)
    return y.reshape(-1)


def _phase(s: int, k: int, p: int, n_in: int, n_out: int, phi: int):
    """One axis of the phase split of conv_bwd_input: the dx positions i with (i + p) % s == phi are
    i = phi - p + s t for t in [t0, t0 + T), and get dx[i] = sum_m w[phi + s m] dy[t - m] over the
    M taps k = phi + s m < k_total: a stride-1 conv of dy padded by lo / hi (negative: cropped) with
    the M taps reversed. Returns (M, T, lo, hi, dx slice)."""
    m = max(0, -(-(k - phi) // s))
    t0 = -(-(p - phi) // s)
    t = (n_in - 1 + p - phi) // s - t0 + 1
    lo = m - 1 - t0
    hi = t + m - 1 - n_out - lo
    start = phi - p + s * t0
    return m, t, lo, hi, slice(start, start + s * (t - 1) + 1 if t > 0 else start, s)


def _bwd_input_by_phases(dx5, g5, w5, kernel, stride, padding, spatial, out) -> None:
    """conv_bwd_input as prod(stride) stride-1 convs of dy, one per phase of dx positions modulo the
    stride, each with its sub-kernel of taps (flipped, channels swapped); every dx element is
    written once (no scatter-adds). For finite weights only: a padded 0 times an inf weight would
    make a NaN that is no term of the adjoint."""
    batch, in_c = dx5.shape[:2]
    r = len(kernel)
    # phases phi >= kernel hold no taps (stride > kernel): their positions are 0, written here at
    # once, so the loop visits prod(min(stride, kernel)) phases, never prod(stride)
    if any(s > k for s, k in zip(stride, kernel)):
        dx5[...] = 0.0
    axes = [[_phase(s, k, p, n, o, phi) for phi in range(min(s, k))]
            for s, k, p, n, o in zip(stride, kernel, padding, spatial, out)]
    every = (slice(None), slice(None))
    for combo in itertools.product(*(range(min(s, k)) for s, k in zip(stride, kernel))):
        ph = [axes[i][phi] for i, phi in enumerate(combo)]
        if any(t <= 0 for _, t, _, _, _ in ph):
            continue  # no dx positions in this phase
        target = every + tuple(sl for *_, sl in ph)
        if any(m == 0 for m, *_ in ph):
            dx5[target] = 0.0  # positions no tap reaches (stride > kernel)
            continue
        sub = w5[every + tuple(slice(phi, None, s) for phi, s in zip(combo, stride))]  # (O, C, *M)
        sub = sub[every + (slice(None, None, -1),) * r]
        wt = np.ascontiguousarray(sub.swapaxes(0, 1))  # (C, O, *M)
        ts = tuple(t for _, t, _, _, _ in ph)
        part = np.empty((batch, in_c, math.prod(ts)), F32)
        _conv_into(part, g5, wt, None, tuple(m for m, *_ in ph), (1,) * r, tuple(lo for _, _, lo, _, _ in ph),
                   tuple(hi for _, _, _, hi, _ in ph), ts)
        dx5[target] = part.reshape((batch, in_c) + ts)


def conv_bwd_input(dy, w, plan: ConvPlan):
    if not plan.plain:
        return conv_groups.conv_bwd_input(dy, w, plan)
    parallel.blas_one_thread()  # every GEMM below, NumPy's included, at one OpenBLAS thread
    if _pointwise(plan):
        with np.errstate(all="ignore"):
            return _pointwise_bwd_input(dy, w, plan)
    batch, in_c, out_c, spatial, kernel, stride, padding, out = plan[:8]
    sparse = _sparse_axes(kernel, stride, padding)
    if sparse and batch * in_c * math.prod(spatial) and out_c:
        sp, st, pd = _compact(sparse, spatial, kernel, stride, padding, out)
        dxc = conv_bwd_input(dy, w, conv_plan_of(batch, in_c, out_c, sp, kernel, st, pd))
        return _scatter_axes(dxc.reshape((batch, in_c) + sp), sparse, spatial, kernel, stride, padding,
                             out).reshape(-1)
    k_n, p_n, s_n = math.prod(kernel), math.prod(out), math.prod(spatial)
    if batch * in_c * s_n == 0 or out_c == 0:
        return np.zeros(batch * in_c * s_n, F32)
    g3 = dy.reshape(batch, out_c, p_n)
    dx = np.empty((batch, in_c, s_n), F32)
    with np.errstate(all="ignore"):
        if _blocked_dx(batch, in_c, out_c, spatial, kernel, out):
            return _bwd_input2d_col2im(dy, w, batch, in_c, out_c, spatial, kernel, stride, padding, out)
        # phases: stride-1 convs of dy (best at stride 1, where it is one conv, and in 1-D);
        # col2im: one wide GEMM + K strided adds (as fast or faster at stride > 1 in 2-D and up,
        # and the only choice with an inf/NaN weight)
        if (all(s == 1 for s in stride) or len(kernel) == 1) and np.isfinite(w).all():
            _bwd_input_by_phases(dx.reshape((batch, in_c) + tuple(spatial)), g3.reshape((batch, out_c) + out),
                                 w.reshape((out_c, in_c) + tuple(kernel)), kernel, stride, padding, spatial, out)
            return dx.reshape(-1)
        _by_parts(batch, batch * in_c * k_n * p_n * out_c,
                  lambda n0, n1: _col2im_part(dx[n0:n1], g3[n0:n1], w, kernel, stride, padding, spatial, out))
    return dx.reshape(-1)


def _col2im_part(dx, g3, w, kernel, stride, padding, spatial, out) -> None:
    """conv_bwd_input by col2im: dcol = W^T dy, then each kernel offset's slice is added where its
    taps land (a fixed order); taps in the padding are dropped whole."""
    batch, in_c, s_n = dx.shape
    out_c, p_n, k_n = g3.shape[1], g3.shape[2], math.prod(kernel)
    w2t = np.ascontiguousarray(w.reshape(out_c, in_c * k_n).T)  # contiguous: a faster GEMM than the view
    padded = tuple(s + 2 * p for s, p in zip(spatial, padding))
    inner = tuple(slice(p, p + s) for s, p in zip(spatial, padding))
    every = (slice(None), slice(None))
    for n0, n1 in _chunks(batch, in_c * k_n * p_n):
        nb = n1 - n0
        dcol = _mm(w2t, _rows(g3, n0, n1)).reshape((in_c, k_n, nb) + out)
        dxp = np.zeros((nb, in_c) + padded, F32)
        for j, k in enumerate(np.ndindex(*kernel)):
            taps = tuple(slice(ki, ki + (o - 1) * s + 1, s) for ki, s, o in zip(k, stride, out))
            dxp[every + taps] += dcol[:, j].swapaxes(0, 1)
        dx[n0:n1] = dxp[every + inner].reshape(nb, in_c, s_n)


def _bwd_weight_unfold_last(x5, g3, kernel, stride, padding, out) -> np.ndarray:
    """dW^T (C*K, O) from the last-axis unfold (stride 1 on every axis but the last).

    Per image, col (C*kl, R) holds the padded rows windowed along the last axis; the output
    position q (flat over (*out_rest, wo), laid out with the padded row strides) of kernel offset
    k_rest reads col column q + off(k_rest). So each offset's weight gradient is one GEMM with a
    column range of col (a strided BLAS operand, no copy) and dy laid out on the padded rows
    ("wide"; zero where no output exists: for rank 2 that is dy itself, no zeros at all). The
    zeros are exact-zero terms unless x holds inf/NaN, where the caller takes im2col instead.
    """
    batch, c = x5.shape[:2]
    o_n = g3.shape[1]
    kr, kl, sl, wo = tuple(kernel[:-1]), kernel[-1], stride[-1], out[-1]
    rows = tuple(s + 2 * p for s, p in zip(x5.shape[2:-1], padding[:-1]))
    r_n = math.prod(rows) * wo
    row_st = np.cumprod((1, wo) + rows[:0:-1])[::-1][:len(rows)] if rows else ()  # element strides of rest axes
    offs = [int(sum(k * st for k, st in zip(ks, row_st))) for ks in np.ndindex(*kr)]
    n_cols = r_n - max(offs)
    wide = len(kr) >= 2
    acc = np.zeros((len(offs), c * kl, o_n), F32)
    part = np.empty((c * kl, o_n), F32)
    for n0, n1 in _chunks(batch, c * kl * r_n):
        col = _last_axis_cols(x5[n0:n1], kl, sl, padding, padding, rows, wo)  # (C, kl, nb, *rows, wo)
        for n in range(n1 - n0):
            cn = col[:, :, n].reshape(c * kl, r_n)  # a view: rows (c, j) evenly strided
            if wide:
                gw = np.zeros((o_n,) + rows + (wo,), F32)
                gw[(slice(None),) + tuple(slice(0, o) for o in out)] = g3[n0 + n].reshape((o_n,) + tuple(out))
                gt = gw.reshape(o_n, r_n)[:, :n_cols].T
            else:
                gt = g3[n0 + n].T
            for j, off in enumerate(offs):
                np.matmul(cn[:, off:off + n_cols], gt, out=part)
                acc[j] += part
    kr_n = len(offs)
    return acc.reshape(kr_n, c, kl, o_n).transpose(1, 0, 2, 3).reshape(c * kr_n * kl, o_n)


def conv_bwd_weight(x, dy, plan: ConvPlan):
    if not plan.plain:
        return conv_groups.conv_bwd_weight(x, dy, plan)
    parallel.blas_one_thread()  # every GEMM below, NumPy's included, at one OpenBLAS thread
    if _pointwise(plan):
        with np.errstate(all="ignore"):
            return _pointwise_bwd_weight(x, dy, plan)
    batch, in_c, out_c, spatial, kernel, stride, padding, out = plan[:8]
    sparse = _sparse_axes(kernel, stride, padding)
    if sparse and batch * in_c:
        x5, spatial, stride, padding = _gather_axes(x.reshape((batch, in_c) + tuple(spatial)), sparse, spatial,
                                                    kernel, stride, padding, out)
        x = x5.reshape(-1)
    k_n, p_n = math.prod(kernel), math.prod(out)
    ck = in_c * k_n
    if out_c * ck == 0 or batch == 0:
        return np.zeros(out_c * ck, F32)
    if _fast_2d(spatial, out):
        with np.errstate(all="ignore"):
            return _bwd_weight2d_fast(x, dy, batch, in_c, out_c, spatial, kernel, stride, padding, out)
    x5 = x.reshape((batch, in_c) + tuple(spatial))
    g3 = dy.reshape(batch, out_c, p_n)
    with np.errstate(all="ignore"):
        parts = _by_parts(batch, batch * out_c * ck * p_n,
                          lambda n0, n1: _bwd_weight_part(x5[n0:n1], g3[n0:n1], kernel, stride, padding, out))
        dwt = parts[0]
        for part in parts[1:]:  # in part order: a fixed order of summation
            dwt += part
    return np.ascontiguousarray(dwt.T).reshape(-1)


def _bwd_weight_part(x5, g3, kernel, stride, padding, out) -> np.ndarray:
    """dW^T (C*K, O) summed over the images of x5 / g3."""
    batch, in_c = x5.shape[:2]
    p_n = g3.shape[2]
    ck = in_c * math.prod(kernel)
    if p_n >= 256 and _unfold_last_pays(kernel, stride, padding, padding, x5.shape[2:], out, in_c, g3.shape[1]) \
            and (len(kernel) == 2 or np.isfinite(x5).all()):
        return _bwd_weight_unfold_last(x5, g3, kernel, stride, padding, out)
    dwt = None  # dW^T (C*K, O): col @ dy^T is the faster orientation of this GEMM in OpenBLAS
    single = _identity_cols(kernel, stride, padding, padding) and p_n >= 512
    for n0, n1 in _chunks(batch, _COL_BYTES if single else ck * p_n):
        col = _im2col(x5[n0:n1], kernel, stride, padding, padding, out)
        part = _mm(col, _rows(g3, n0, n1).T)
        if dwt is None:
            dwt = part
        else:
            dwt += part
    return dwt


def conv_transpose(x, w, b, plan: ConvTransposePlan):
    # the input gradient of the plan's adjoint conv (out_c channels on out to in_c on spatial)
    y = conv_bwd_input(x, w, plan.adjoint)
    if b is not None and y.size:
        with np.errstate(all="ignore"):
            y.reshape(plan.batch, plan.out_c, -1)[...] += b[:, None]
    return y
