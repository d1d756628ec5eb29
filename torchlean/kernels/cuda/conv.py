"""Convolutions on CuPy arrays: our im2col / col2im kernels (conv.cu) around cuBLAS SGEMMs.

A chunk of nb images is unfolded into columns ``cols`` (C*K, nb, P): row c*K + kk (channel,
kernel position), then image, then output position, i.e. a row-major (C*K, nb*P) matrix whose
row order matches the weights W (out_c, C*K). Per chunk:

- conv: y_n = W @ cols_n for every image n (one strided-batched GEMM writing y in place; a bias
  is filled in first and the GEMM adds to it) when P (output positions per image) is 64 or more
  and the batch has 8192 or more in all; otherwise one GEMM W @ cols -> (out_c, nb*P), then a
  permute to (nb, out_c, P) that adds the bias on the way (per-image GEMMs with few columns tile
  badly). On an H100 the per-image GEMMs beat GEMM + permute by 5-35% at ResNet-18's P = 256 and
  64 (batch 128), and lose by up to 2x at P = 16 (BENCHMARKS.md).
- conv_bwd_input: dcols = W^T @ dy (per image from dy as it is, or one GEMM on dy permuted to
  (out_c, nb*P)), then the col2im GATHER: every dx element sums its (kk, p) taps in a fixed order
  (no atomics, so deterministic mode costs nothing). Not a forward conv of dy with flipped weights
  at stride 1: that route multiplies dy's zero padding by the weights (0 * inf = NaN where the spec
  drops those taps), so an inf weight would give NaN near the border where the spec gives a number.
- conv_bwd_weight: dW = dyp @ cols^T, dy permuted to (out_c, nb*P): one GEMM over the chunk's
  whole (image, position) axis, written straight into dW when the batch is one chunk. cuBLAS
  splits that long contraction across the GPU itself, bitwise repeatably; on an H100 this beat
  our own equal segments plus a sum of their partials by up to 26% at ResNet-18's shapes
  (BENCHMARKS.md). A pointwise conv with large images takes per-image partials dy_n @ x_n^T
  instead (x is its own columns: no im2col, no permute). Partials, and the chunks of a batch
  over the workspace, are summed by a kernel in double, in a fixed order.
- conv_transpose: conv_bwd_input with the channel roles swapped; the bias starts the gather.

Groups (plan.groups G > 1): channel rows of group g are the g-th block of C/G rows of the columns,
and the weights' rows of group g the g-th block of O/G, so every GEMM above becomes one
strided-batched GEMM over the G groups (always on the permuted (out_c, nb*P) layout: the per-image
and pointwise shortcuts are for G = 1), bwd_weight's included. Dilation
enters the im2col index (tap k at k*d) and the col2im gather (tl_conv_bwd_input_col2im_dil_*, which
tests each kernel position, taps ascending). A depthwise 1-D plan (G == in_c == out_c, rank 1:
Mamba's conv) runs direct kernels instead, no columns: tl_conv_depthwise1d,
tl_conv_bwd_input_depthwise1d and tl_conv_bwd_weight_depthwise1d (a fixed-order block sum in double).

im2col for ranks 1-3 uses a 32-bit kernel (tl_conv_im2col_fast_*) when every index fits in an int:
each thread writes 4 consecutive columns as one float4 (when nb*P % 4 == 0) and walks the taps and
its channels with no division.

A 1x1 kernel at stride 1 without padding needs no columns: x itself is (C, P) per image, and the
per-image GEMMs use it directly. Chunks keep the workspace under ``_WORKSPACE`` bytes (at least
one image), and the workspace is dropped (back to CuPy's pool) when the call returns.

Every launch depends on the shape alone (chunking, groups and grids come from the shape and the
constants below, never from the device or timing), and cuBLAS is bitwise repeatable on a given
GPU, so results are the same bits on every run, in fast and deterministic mode alike.

Bytes moved (float32), per chunk of nb images, X = C*K*nb*P (the columns): im2col writes X and
reads the input (C*S*nb, mostly from L2); the GEMM reads X; col2im reads X and writes dx. So one
conv costs about 2X of traffic beyond the GEMM's own, which at ResNet-like shapes stays well below
the GEMM's time.
"""

from __future__ import annotations

import math

import cupy
import numpy as np

from ..caches import memo
from ..plans import ConvPlan, ConvTransposePlan
from .launch import BLOCK, I64, HostStruct, empty, empty_as, give_back, grid_for, kernel, sm_count

_getdev = cupy.cuda.runtime.getDevice

__all__ = ["conv", "conv_bwd_input", "conv_bwd_weight", "conv_transpose"]

_FILE = "conv.cu"
_NULL = np.uint64(0)  # a NULL device pointer, passed by value: no bias
_WORKSPACE = 256 << 20   # bytes of columns (and partials) per call, at most; one image may exceed it
_IMAGE_MIN_P = 64        # per-image GEMMs (no permute) when an image has at least this many outputs
_IMAGE_MIN_COLS = 8192   # ... and the batch at least this many in all (fewer: one wide GEMM tiles better)
_IMAGE_MAX_P = 8192      # ... and at most this many (unless pointwise): beyond it one wide GEMM
                         # over the chunk tiles better than many per-image ones
_WEIGHT_IMAGE_MIN_P = 1024  # bwd_weight: per-image partials of a pointwise conv from this many outputs
_CHANNEL_GROUP = 4       # channels per thread pass in col2im (TL_CONV_CG in conv.cu)
_MAX_RANK = 8
_INT32_MAX = 2**31 - 1
_SUFFIX = {1: "r1", 2: "r2", 3: "r3"}

# The kernels' TlConvGeom, field for field (all int64: no padding on either side).
_GEOM = np.dtype([("r", I64), ("S", I64), ("P", I64), ("K", I64), ("inp", I64, (_MAX_RANK,)),
                  ("out", I64, (_MAX_RANK,)), ("k", I64, (_MAX_RANK,)), ("s", I64, (_MAX_RANK,)),
                  ("p", I64, (_MAX_RANK,)), ("d", I64, (_MAX_RANK,))])


def _gemm(a, b, c, m, n, k, lda, ldb, ldc, trans_a=False, trans_b=False, batch=1,
          stride_a=0, stride_b=0, stride_c=0, beta=0.0, name="gemm"):
    # Imported on first use: linalg loads cuBLAS, which needs the CUDA libraries this module's
    # import must not (the module is imported on machines without a GPU).
    from .linalg import gemm
    return gemm(a, b, c, m, n, k, lda, ldb, ldc, trans_a, trans_b, batch, stride_a, stride_b, stride_c, beta, name)


def _launch(name: str, grid, args) -> None:
    kernel(_FILE, name)(grid, (BLOCK,), args)


def _at(a, offset: int):
    """The flat array from ``offset`` on: ``a`` itself at 0 (a CuPy slice costs host time, and most
    calls are one chunk)."""
    return a if offset == 0 else a[offset:]


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class _Geometry:
    """A TlConvGeom, built once per plan (``_geom`` memoizes it): ``arr`` holds its fields and ``arg``
    passes its bytes to a kernel by value (a HostStruct, not the structured array itself)."""

    __slots__ = ("arr", "arg", "_fits")

    def __init__(self, arr: np.ndarray) -> None:
        self.arr = arr
        self.arg = HostStruct(arr)
        self._fits: dict[tuple[int, int], bool] = {}

    def fits32(self, nb: int, c: int) -> bool:
        key = (nb, c)
        hit = self._fits.get(key)
        if hit is None:
            hit = self._fits[key] = _fits32(self.arr, nb, c)
        return hit


@memo("cuda.conv.geometry", 1024)
def _geom(plan: ConvPlan) -> _Geometry:
    """The geometry of one plan as a _Geometry (the 0-d structured array and its kernel argument)."""
    spatial, out, kernel_, stride, padding = plan.spatial, plan.out, plan.kernel, plan.stride, plan.padding
    r = len(spatial)
    g = np.zeros((), dtype=_GEOM)
    g["r"], g["S"], g["P"], g["K"] = r, math.prod(spatial), math.prod(out), math.prod(kernel_)
    for name, dims in (("inp", spatial), ("out", out), ("k", kernel_), ("s", stride), ("p", padding),
                       ("d", plan.dilation)):
        g[name][:r] = dims
    g.flags.writeable = False
    return _Geometry(g)


def _grid2(items: int, channels: int) -> tuple:
    """x: a grid-stride over the items; y: enough channel slices that the device is full."""
    gx = grid_for(items)
    gy = max(1, min(channels, 65535, _cdiv(sm_count() * 8, gx)))
    return (gx, gy)


def _chunk(batch: int, per_image: int) -> int:
    """Images per chunk: the workspace (per_image floats each) under _WORKSPACE, at least one, and
    the chunks of a batch as equal as they can be (not a full chunk and a small remainder, whose
    GEMMs would tile badly)."""
    cap = max(1, min(batch, (_WORKSPACE // 4) // max(1, per_image)))
    return _cdiv(batch, _cdiv(batch, cap)) if batch else cap


def _pointwise(kernel_, stride, padding, spatial, out) -> bool:
    return all(k == 1 for k in kernel_) and all(s == 1 for s in stride) and \
        not any(padding) and tuple(spatial) == tuple(out)


def _bias_fill(y, b, n: int, c: int, length: int):
    """y (n, c, length) = b[c] everywhere, or zeros without a bias."""
    total = n * c * length
    if b is None:
        y[:total] = 0
        return y
    _launch("tl_conv_bias_fill", (grid_for(total),), (y, b, I64(c), I64(length), I64(total)))
    return y


def _fits32(g, nb: int, c: int) -> bool:
    """Whether im2col_fast's int arithmetic cannot overflow: the column index (< C*K*nb*P), the x
    offset of any tap, padding included (|q_i| < in_i + |p_i| + k_i on each axis, Horner-weighted),
    and the per-axis products o_i * s_i (<= in_i + 2|p_i|)."""
    r = int(g["r"])
    S, P, K = int(g["S"]), int(g["P"]), int(g["K"])
    inp = [int(v) for v in g["inp"][:r]]
    off, weight = 0, 1
    for i in reversed(range(r)):
        span = inp[i] + 2 * abs(int(g["p"][i])) + int(g["d"][i]) * (int(g["k"][i]) - 1) + 1 + int(g["s"][i])
        off += span * weight
        weight *= max(1, inp[i])
        if span + int(g["out"][i]) * int(g["s"][i]) > _INT32_MAX:
            return False
    return max(c * K * nb * P, nb * c * S + off) <= _INT32_MAX


class _Launch:
    """One kernel launch whose function, grid and trailing scalar arguments depend on the shape
    alone, built once per (device, plan) by the memoized constructors below: a call passes only the
    arrays. (Building names, grids and NumPy scalars on every call costs host time per conv, which
    bounds a small network's training step.)"""

    __slots__ = ("fn", "grid", "tail")

    def __init__(self, name: str, grid: tuple, tail: tuple) -> None:
        self.fn, self.grid, self.tail = kernel(_FILE, name), grid, tail

    def __call__(self, *arrays) -> None:
        self.fn(self.grid, _BLOCK, arrays + self.tail)


_BLOCK = (BLOCK,)


# The device is part of every key: kernels and SM counts are per device.
@memo("cuda.conv.im2col_launch", 1024)
def _im2col_launch(device: int, plan: ConvPlan, nb: int) -> _Launch:
    """im2col of nb images of ``plan``'s input (in_c channels on spatial, columns over out)."""
    g, c, rank, p = _geom(plan), plan.in_c, len(plan.spatial), math.prod(plan.out)
    if rank <= 3 and g.fits32(nb, c):
        v = 4 if (nb * p) % 4 == 0 else 1
        return _Launch(f"tl_conv_im2col_fast_r{rank}v{v}", _grid2(nb * p // v, c), (g.arg, np.int32(nb), np.int32(c)))
    return _Launch(f"tl_conv_im2col_{_SUFFIX.get(rank, 'rn')}", _grid2(nb * p, c), (g.arg, I64(nb), I64(c)))


def _im2col(x, cols, plan: ConvPlan, nb: int) -> None:
    _im2col_launch(_getdev(), plan, nb)(x, cols)


@memo("cuda.conv.col2im_launch", 1024)
def _col2im_launch(device: int, plan: ConvPlan, nb: int) -> _Launch:
    """col2im of nb images onto ``plan``'s input (in_c channels on spatial)."""
    g, c, rank, s = _geom(plan), plan.in_c, len(plan.spatial), math.prod(plan.spatial)
    dil = "dil_" if any(d != 1 for d in plan.dilation) else ""
    return _Launch(f"tl_conv_bwd_input_col2im_{dil}{_SUFFIX.get(rank, 'rn')}",
                   _grid2(nb * s, _cdiv(c, _CHANNEL_GROUP)), (g.arg, I64(nb), I64(c)))


def _col2im(dcols, dx, bias, plan: ConvPlan, nb: int) -> None:
    _col2im_launch(_getdev(), plan, nb)(dcols, dx, bias)


@memo("cuda.conv.swap_launch", 1024)
def _swap_launch(device: int, a0: int, a1: int, length: int) -> _Launch:
    return _Launch("tl_conv_swap01", (grid_for(a0 * a1 * length),), (I64(a0), I64(a1), I64(length)))


def _swap01(src, dst, bias, a0: int, a1: int, length: int) -> None:
    """dst (a1, a0, length) from src (a0, a1, length), plus bias[a0] if given."""
    _swap_launch(_getdev(), a0, a1, length)(src, dst, bias)


# -- forward ----------------------------------------------------------------------------------------
def conv(x, w, b, plan: ConvPlan):
    if _depthwise_1d(plan):
        return _depthwise_fwd(x, w, b, plan)
    return _forward(x, w, b, plan)


@memo("cuda.conv.chunking", 1024)
def _chunking(plan: ConvPlan) -> tuple:
    """(S, P, K, ck, pointwise, per_image, nb_max) of a plan, in_c channels on `spatial` to out_c on
    `out` (forward and input gradient; nb_max counts the columns and, when not per image, the
    permuted output)."""
    batch, in_c, out_c, spatial, kernel_, stride, padding, out = plan[:8]
    S, P, K = math.prod(spatial), math.prod(out), math.prod(kernel_)
    ck = in_c * K
    pw = _pointwise(kernel_, stride, padding, spatial, out) and plan.groups == 1
    per_image = (P >= _IMAGE_MIN_P and batch * P >= _IMAGE_MIN_COLS and (pw or P <= _IMAGE_MAX_P)
                 and plan.groups == 1)
    nb_max = _chunk(batch, ck * P + (0 if per_image else out_c * P))
    return S, P, K, ck, pw, per_image, nb_max


def _forward(x, w, b, plan: ConvPlan, name="conv"):
    """y (batch, out_c, *out) = W (out_c, in_c*K) @ columns of x (batch, in_c, *spatial), + b[o]."""
    batch, in_c, out_c = plan.batch, plan.in_c, plan.out_c
    S, P, K, ck, pw, per_image, nb_max = _chunking(plan)
    y = empty(batch * out_c * P)
    if y.size == 0:
        return y
    if ck == 0:  # an empty sum: the bias alone
        return _bias_fill(y, b, batch, out_c, P)
    beta = 0.0 if b is None else 1.0
    if per_image and pw:
        if b is not None:
            _bias_fill(y, b, batch, out_c, P)
        # y_n (out_c, P) = W (out_c, in_c) @ x_n (in_c, P), all images in one batched GEMM.
        _gemm(w, x, y, out_c, P, in_c, in_c, P, P, batch=batch, stride_b=in_c * P,
              stride_c=out_c * P, beta=beta, name=name)
        return y
    cols = empty(ck * nb_max * P)
    tmp = None if per_image else empty(out_c * nb_max * P)
    if per_image and b is not None:
        _bias_fill(y, b, batch, out_c, P)
    for n0 in range(0, batch, nb_max):
        nb = min(nb_max, batch - n0)
        _im2col(_at(x, n0 * in_c * S), cols, plan, nb)
        yc = _at(y, n0 * out_c * P)
        if per_image:
            # y_n = W @ cols_n: cols_n is the (ck, P) block at column n*P of cols (ld nb*P).
            _gemm(w, cols, yc, out_c, P, ck, ck, nb * P, P, batch=nb, stride_b=P,
                  stride_c=out_c * P, beta=beta, name=name)
        else:
            # per group g: tmp_g (out_c/G, nb*P) = W_g (out_c/G, ck/G) @ cols_g (ck/G, nb*P)
            G = plan.groups
            og, ckg = out_c // G, ck // G
            _gemm(w, cols, tmp, og, nb * P, ckg, ckg, nb * P, nb * P, batch=G, stride_a=og * ckg,
                  stride_b=ckg * nb * P, stride_c=og * nb * P, name=name)
            _swap01(tmp, yc, b, out_c, nb, P)  # (out_c, nb, P) -> (nb, out_c, P), + bias
    give_back(cols)  # workspaces back to the free list (freelist.give_back)
    if tmp is not None:
        give_back(tmp)
    return y


# -- input gradient and the transposed conv -----------------------------------------------------------
def _bwd_input(dy, w, bias, plan: ConvPlan):
    """dx (batch, in_c, *spatial) from dy (batch, out_c, *out), w (out_c, in_c, *kernel), + bias[c]."""
    batch, in_c, out_c = plan.batch, plan.in_c, plan.out_c
    S, P, K, ck, pw, per_image, nb_max = _chunking(plan)
    dx = empty(batch * in_c * S)
    if dx.size == 0:
        return dx
    if out_c == 0 or K == 0:  # no terms: the bias alone
        return _bias_fill(dx, bias, batch, in_c, S)
    if per_image and pw:
        if bias is not None:
            _bias_fill(dx, bias, batch, in_c, S)
        # dx_n (in_c, P) = W^T @ dy_n: W stored (out_c, in_c), read transposed.
        _gemm(w, dy, dx, in_c, P, out_c, in_c, P, P, trans_a=True, batch=batch,
              stride_b=out_c * P, stride_c=in_c * P, beta=0.0 if bias is None else 1.0,
              name="conv_bwd_input")
        return dx
    dcols = empty(ck * nb_max * P)
    dyp = None if per_image else empty(out_c * nb_max * P)
    for n0 in range(0, batch, nb_max):
        nb = min(nb_max, batch - n0)
        dyc = _at(dy, n0 * out_c * P)
        if per_image:
            # dcols_n (ck, P), at column n*P of dcols (ld nb*P) = W^T (ck, out_c) @ dy_n (out_c, P).
            _gemm(w, dyc, dcols, ck, P, out_c, ck, P, nb * P, trans_a=True, batch=nb,
                  stride_b=out_c * P, stride_c=P, name="conv_bwd_input")
        else:
            _swap01(dyc, dyp, None, nb, out_c, P)  # (nb, out_c, P) -> (out_c, nb, P)
            # per group g: dcols_g (ck/G, nb*P) = W_g^T (ck/G, out_c/G) @ dyp_g (out_c/G, nb*P)
            G = plan.groups
            og, ckg = out_c // G, ck // G
            _gemm(w, dyp, dcols, ckg, nb * P, og, ckg, nb * P, nb * P, trans_a=True, batch=G,
                  stride_a=og * ckg, stride_b=og * nb * P, stride_c=ckg * nb * P, name="conv_bwd_input")
        _col2im(dcols, _at(dx, n0 * in_c * S), bias, plan, nb)
    give_back(dcols)
    if dyp is not None:
        give_back(dyp)
    return dx


def conv_bwd_input(dy, w, plan: ConvPlan):
    if _depthwise_1d(plan):
        return _depthwise_bwd_input(dy, w, None, plan)
    return _bwd_input(dy, w, None, plan)


def conv_transpose(x, w, b, plan: ConvTransposePlan):
    # y (batch, out_c, *out) is the input gradient of the plan's adjoint conv (out_c channels on
    # `out` to in_c on `spatial`), whose weights (in_c, out_c / G, *kernel) are w as stored; b starts each sum.
    if _depthwise_1d(plan.adjoint):
        return _depthwise_bwd_input(x, w, b, plan.adjoint)
    return _bwd_input(x, w, b, plan.adjoint)


# -- depthwise 1-D ----------------------------------------------------------------------------------
def _depthwise_1d(plan: ConvPlan) -> bool:
    return len(plan.spatial) == 1 and plan.groups == plan.in_c == plan.out_c and plan.in_c > 0


def _dw_tail(plan: ConvPlan) -> tuple:
    """(C, L, Lo, K, s, p, d) as the kernels' int64 scalars."""
    return tuple(I64(v) for v in (plan.in_c, plan.spatial[0], plan.out[0], plan.kernel[0], plan.stride[0],
                                  plan.padding[0], plan.dilation[0]))


def _depthwise_fwd(x, w, b, plan: ConvPlan):
    rows, lo = plan.batch * plan.in_c, plan.out[0]
    y = empty(rows * lo)
    if y.size:
        _launch("tl_conv_depthwise1d", (grid_for(rows * lo),),
                (x, w, _NULL if b is None else b, y, I64(rows)) + _dw_tail(plan))
    return y


def _depthwise_bwd_input(dy, w, bias, plan: ConvPlan):
    rows, n_in = plan.batch * plan.in_c, plan.spatial[0]
    dx = empty(rows * n_in)
    if dx.size:
        _launch("tl_conv_bwd_input_depthwise1d", (grid_for(rows * n_in),),
                (dy, w, _NULL if bias is None else bias, dx, I64(rows)) + _dw_tail(plan))
    return dx


def _depthwise_bwd_weight(x, dy, plan: ConvPlan):
    dw = empty(plan.in_c * plan.kernel[0])
    if plan.batch == 0:
        dw[:] = 0
        return dw
    _launch("tl_conv_bwd_weight_depthwise1d", (max(1, min(dw.size, 1 << 16)),),
            (x, dy, dw, I64(plan.batch)) + _dw_tail(plan))
    return dw


# -- weight gradient --------------------------------------------------------------------------------
@memo("cuda.conv.weight_chunking", 1024)
def _weight_chunking(plan: ConvPlan) -> tuple:
    """(S, P, ck, mn, per_image, pointwise, nb_max, chunks) of conv_bwd_weight."""
    batch, in_c, out_c, spatial, kernel_, stride, padding, out = plan[:8]
    S, P, K = math.prod(spatial), math.prod(out), math.prod(kernel_)
    ck = in_c * K
    mn = out_c * (ck // plan.groups)  # the weight: out_c rows of in_c/G * K
    if mn == 0 or batch == 0:  # the caller returns before using the rest
        return S, P, ck, mn, False, False, 1, 1
    pw = _pointwise(kernel_, stride, padding, spatial, out) and plan.groups == 1
    # Per-image partials only for pointwise convs with large images (x is their columns); everywhere
    # else one GEMM over the chunk's whole (image, position) axis, whose long contraction cuBLAS
    # splits itself.
    per_image = pointwise = pw and P >= _WEIGHT_IMAGE_MIN_P
    nb_max = _chunk(batch, mn if per_image else (ck + out_c) * P)
    return S, P, ck, mn, per_image, pointwise, nb_max, _cdiv(batch, nb_max)


@memo("cuda.conv.sum_partials_args", 1024)
def _sum_partials_args(device: int, groups: int, mn: int, first: bool, last: bool) -> tuple:
    """(function, grid, (G, MN), (first, last)) of tl_conv_bwd_weight_sum_partials, whose scalars sit
    between arrays."""
    return kernel(_FILE, "tl_conv_bwd_weight_sum_partials"), (grid_for(mn),), (I64(groups), I64(mn)), (I64(first), I64(last))


def conv_bwd_weight(x, dy, plan: ConvPlan):
    if _depthwise_1d(plan):
        return _depthwise_bwd_weight(x, dy, plan)
    batch, in_c, out_c = plan.batch, plan.in_c, plan.out_c
    S, P, ck, mn, per_image, pointwise, nb_max, chunks = _weight_chunking(plan)
    dw = empty(mn)
    if mn == 0:
        return dw
    if batch == 0:
        dw[:] = 0
        return dw
    cols = None if pointwise else empty(ck * nb_max * P)
    dyp = None if per_image else empty(out_c * nb_max * P)
    # One chunk's single GEMM writes dW itself; per-image partials, or several chunks, go through
    # `part` and the fixed-order double sum.
    direct = chunks == 1 and not per_image
    part = None if direct else empty((nb_max if per_image else 1) * mn)
    acc = empty_as(mn, "d") if chunks > 1 else None
    dev = _getdev()
    G = plan.groups
    og, ckg = out_c // G, ck // G
    for i, n0 in enumerate(range(0, batch, nb_max)):
        nb = min(nb_max, batch - n0)
        xc, dyc = _at(x, n0 * in_c * S), _at(dy, n0 * out_c * P)
        if per_image:
            # part_n (out_c, in_c) = dy_n (out_c, P) @ x_n^T (x_n is (in_c, P): its own columns)
            _gemm(dyc, xc, part, out_c, ck, P, P, P, ck, trans_b=True, batch=nb,
                  stride_a=out_c * P, stride_b=in_c * P, stride_c=mn, name="conv_bwd_weight")
            groups = nb
        else:
            _im2col(xc, cols, plan, nb)
            length = nb * P
            _swap01(dyc, dyp, None, nb, out_c, P)  # (nb, out_c, P) -> (out_c, nb*P)
            # per group g: dW_g (out_c/G, ck/G) = dyp_g (out_c/G, nb*P) @ cols_g^T (nb*P, ck/G)
            _gemm(dyp, cols, dw if direct else part, og, ckg, length, length, length, ckg, trans_b=True,
                  batch=G, stride_a=og * length, stride_b=ckg * length, stride_c=og * ckg, name="conv_bwd_weight")
            groups = 1
        if not direct:
            fn, grid, gm, fl = _sum_partials_args(dev, groups, mn, i == 0, i == chunks - 1)
            fn(grid, _BLOCK, (part,) + gm + (acc,) + fl + (dw,))
    # (one call per variable: a tuple of them would hold a second reference, and the counts refuse)
    if part is not None:
        give_back(part)
    if cols is not None:
        give_back(cols)
    if dyp is not None:
        give_back(dyp)
    if acc is not None:
        give_back(acc)
    return dw
