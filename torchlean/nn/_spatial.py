"""Padding, resampling, adaptive pooling, pixel shuffles, unfold/fold and small vector utilities.

All are compositions of differentiable ops. Index-based ones (reflect/replicate/circular padding,
nearest interpolation, unfold) are ``index_select`` / gathers with indices computed on the host;
fold is a scatter-add; linear interpolation and the non-divisible adaptive average pool are
products with a small (out, in) weight matrix per spatial dim (both are separable). A divisible
adaptive pool is the fused avg/max pool with kernel = stride = in / out.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from .. import ops
from .._validate import int_arg, real_arg, type_name
from ..errors import ArgumentError, DTypeError, ShapeError
from ..ops.shape import pad_block
from ..tensor import Tensor, dim_index, full, tensor, zeros
from ._compose import as_tensor_arg, const, narrow

__all__ = ["pad", "interpolate", "upsample", "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d",
           "adaptive_max_pool1d", "adaptive_max_pool2d", "pixel_shuffle", "pixel_unshuffle", "unfold", "fold",
           "one_hot", "normalize", "cosine_similarity", "pairwise_distance"]


def _tuple(op: str, name: str, v: Any, n: int, minimum: int = 0) -> tuple[int, ...]:
    vals = tuple(v) if isinstance(v, (tuple, list)) else (v,) * n
    if len(vals) != n:
        raise ArgumentError(f"{op}: {name} must be an int or {n} ints, got {v!r}")
    return tuple(int_arg(op, name, x, minimum) for x in vals)


# -- pad --------------------------------------------------------------------------------------
def _pad_indices(mode: str, n: int, lo: int, hi: int) -> np.ndarray:
    j = np.arange(-lo, n + hi)
    if mode == "replicate":
        return np.clip(j, 0, n - 1)
    if mode == "circular":
        return j % n
    period = 2 * (n - 1)  # reflect (the edge is not repeated)
    k = np.abs(j) % period if period else np.zeros_like(j)
    return np.where(k >= n, period - k, k)


def pad(input: Tensor, pad: Sequence[int], mode: str = "constant", value: float | None = None) -> Tensor:
    """PyTorch's F.pad: ``pad`` pairs (left, right) from the last dim backwards; negative amounts crop.
    Modes: constant (``value``, default 0), reflect, replicate, circular."""
    op = "pad"
    x = as_tensor_arg(op, "input", input)
    if not isinstance(pad, (tuple, list)) or len(pad) % 2 or len(pad) // 2 > x.ndim:
        raise ArgumentError(f"{op}: pad must be a sequence of an even length at most 2 * input.dim() = {2 * x.ndim}, "
                            f"got {pad!r}")
    amounts = [int_arg(op, "pad", p) for p in pad]
    if mode not in ("constant", "reflect", "replicate", "circular"):
        raise ArgumentError(f"{op}: mode must be 'constant', 'reflect', 'replicate' or 'circular', got {mode!r}")
    if mode != "constant":
        if value not in (None, 0, 0.0):
            raise ArgumentError(f"{op}: value is only meaningful for mode='constant', got value={value!r} "
                                f"with mode={mode!r}")
        if len(amounts) // 2 > x.ndim - 1 or len(amounts) // 2 > 3:
            raise ArgumentError(f"{op}: mode={mode!r} pads at most the last 3 dims of a batched input and never the "
                                f"first dim; got pad {pad!r} for a {x.ndim}-D input")
    fill = 0.0 if value is None else real_arg(op, "value", value)
    out = x
    for i in range(len(amounts) // 2):
        d = x.ndim - 1 - i
        lo, hi = amounts[2 * i], amounts[2 * i + 1]
        n = out.shape[d]
        if lo < 0:  # negative padding crops first
            out, n, lo = narrow(out, d, -lo, n + lo), n + lo, 0
        if hi < 0:
            out, n, hi = narrow(out, d, 0, n + hi), n + hi, 0
        if lo == 0 and hi == 0:
            continue
        if mode == "constant" and fill == 0.0 and math.copysign(1.0, fill) > 0 and out._buf is not None \
                and out.numel():  # +0.0 fill of a float tensor: one placement into zeros
            out = pad_block(out, d, lo, hi)
        elif mode == "constant":
            pieces = []
            for amount in (lo, None, hi):
                if amount is None:
                    pieces.append(out)
                elif amount:
                    shape = list(out.shape)
                    shape[d] = amount
                    pieces.append(full(tuple(shape), fill, device=out.device))
            out = ops.cat(pieces, d)
        else:
            if mode == "reflect" and (lo >= n or hi >= n):
                raise ArgumentError(f"{op}: reflect padding ({lo}, {hi}) must be smaller than the size {n} of dim {d}")
            if mode == "circular" and (lo > n or hi > n):
                raise ArgumentError(f"{op}: circular padding ({lo}, {hi}) must not exceed the size {n} of dim {d}")
            out = ops.index_select(out, d, _pad_indices(mode, n, lo, hi))
    return out


# -- interpolate ------------------------------------------------------------------------------
def _out_sizes(op: str, x: Tensor, size: Any, scale_factor: Any) -> tuple[tuple[int, ...], tuple[float | None, ...]]:
    r = x.ndim - 2
    if r < 1:
        raise ShapeError(f"{op}: expected an input of shape (N, C, d1, ...), got {x.shape}")
    if (size is None) == (scale_factor is None):
        raise ArgumentError(f"{op}: give exactly one of size and scale_factor")
    if size is not None:
        return _tuple(op, "size", size, r, 1), (None,) * r
    sf = tuple(scale_factor) if isinstance(scale_factor, (tuple, list)) else (scale_factor,) * r
    if len(sf) != r:
        raise ArgumentError(f"{op}: scale_factor must be a number or {r} numbers, got {scale_factor!r}")
    sf = tuple(real_arg(op, "scale_factor", s, 0.0, finite=True) for s in sf)
    return tuple(int(math.floor(n * s)) for n, s in zip(x.shape[2:], sf)), sf


def _src_scale(n_in: int, n_out: int, sf: float | None, align_corners: bool) -> float:
    if align_corners:
        return (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
    return 1.0 / sf if sf is not None else n_in / n_out


def _linear_matrix(n_in: int, n_out: int, sf: float | None, align_corners: bool) -> np.ndarray:
    """The (n_out, n_in) weights of PyTorch's linear interpolation along one dim."""
    scale = np.float32(_src_scale(n_in, n_out, sf, align_corners))
    dst = np.arange(n_out, dtype=np.float32)
    src = dst * scale if align_corners else np.maximum(scale * (dst + np.float32(0.5)) - np.float32(0.5), 0)
    i0 = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    i1 = np.minimum(i0 + 1, n_in - 1)
    lam = (src - i0).astype(np.float64)
    m = np.zeros((n_out, n_in))
    rows = np.arange(n_out)
    np.add.at(m, (rows, i0), 1.0 - lam)
    np.add.at(m, (rows, i1), lam)
    return m


def _along(x: Tensor, d: int, mat: np.ndarray) -> Tensor:
    """Contract dim ``d`` of x with mat (n_out, n_in): x moved last, @ mat.T, moved back."""
    last = x.ndim - 1
    xt = ops.transpose(x, d, last) if d != last else x
    y = ops.matmul(xt, const(mat.T, x))
    return ops.transpose(y, d, last) if d != last else y


def interpolate(input: Tensor, size: Any = None, scale_factor: Any = None, mode: str = "nearest",
                align_corners: bool | None = None, recompute_scale_factor: bool | None = None,
                antialias: bool = False) -> Tensor:
    """Modes nearest, nearest-exact, linear/bilinear/trilinear (align_corners False or True) and
    area (adaptive average pooling), PyTorch's index rules; bicubic is not supported."""
    op = "interpolate"
    x = as_tensor_arg(op, "input", input)
    linear = {"linear": 3, "bilinear": 4, "trilinear": 5}
    if mode not in ("nearest", "nearest-exact", "area") and mode not in linear:
        raise ArgumentError(f"{op}: mode {mode!r} is not supported (nearest, nearest-exact, linear, bilinear, "
                            f"trilinear, area)")
    if antialias:
        raise ArgumentError(f"{op}: antialias=True is not supported")
    if mode in linear and x.ndim != linear[mode]:
        raise ShapeError(f"{op}: mode {mode!r} expects a {linear[mode]}-D input, got shape {x.shape}")
    if mode not in linear and align_corners is not None:
        raise ArgumentError(f"{op}: align_corners only applies to the linear modes, got mode {mode!r}")
    out_sizes, sfs = _out_sizes(op, x, size, scale_factor)
    if recompute_scale_factor:
        sfs = (None,) * len(sfs)
    if mode == "area":
        return _adaptive_avg(op, x, out_sizes)
    y = x
    for i, (n_out, sf) in enumerate(zip(out_sizes, sfs)):
        d = 2 + i
        n_in = x.shape[d]
        if mode in linear:
            if n_in != n_out or align_corners or sf not in (None, 1.0):
                y = _along(y, d, _linear_matrix(n_in, n_out, sf, bool(align_corners)))
            continue
        scale = np.float32(_src_scale(n_in, n_out, sf, False))
        dst = np.arange(n_out, dtype=np.float32)
        src = np.floor((dst + np.float32(0.5)) * scale) if mode == "nearest-exact" else np.floor(dst * scale)
        idx = np.minimum(src.astype(np.int64), n_in - 1)
        if n_out != n_in or not np.array_equal(idx, np.arange(n_in)):
            y = ops.index_select(y, d, idx)
    return y


def upsample(input: Tensor, size: Any = None, scale_factor: Any = None, mode: str = "nearest",
             align_corners: bool | None = None) -> Tensor:
    return interpolate(input, size, scale_factor, mode, align_corners)


# -- adaptive pools ---------------------------------------------------------------------------
def _bins(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray]:
    i = np.arange(n_out)
    return (i * n_in) // n_out, -((-(i + 1) * n_in) // n_out)  # floor(i n / o), ceil((i + 1) n / o)


def _adaptive_avg(op: str, x: Tensor, out: tuple[int, ...]) -> Tensor:
    r = len(out)
    ins = x.shape[-r:]
    if all(o > 0 and n % o == 0 for n, o in zip(ins, out)) and r <= 3:
        k = tuple(n // o for n, o in zip(ins, out))
        if all(kk == 1 for kk in k):
            return x
        return ops.avg_pool_nd(x, k, k, 0)
    y = x
    for i, (n, o) in enumerate(zip(ins, out)):
        start, end = _bins(n, o)
        m = np.zeros((o, n))
        for j in range(o):
            m[j, start[j]:end[j]] = 1.0 / (end[j] - start[j])
        y = _along(y, x.ndim - r + i, m)
    return y


def _adaptive_max(op: str, x: Tensor, out: tuple[int, ...], return_indices: bool) -> Tensor:
    if return_indices:
        raise ArgumentError(f"{op}: return_indices=True is not supported")
    r = len(out)
    ins = x.shape[-r:]
    if all(o > 0 and n % o == 0 for n, o in zip(ins, out)):
        k = tuple(n // o for n, o in zip(ins, out))
        return x if all(kk == 1 for kk in k) else ops.max_pool_nd(x, k, k, 0)
    y = x
    for i, (n, o) in enumerate(zip(ins, out)):  # max over a box = max over each dim in turn
        d = x.ndim - r + i
        start, end = _bins(n, o)
        widest = int((end - start).max())
        best = None
        for k in range(widest):  # the k-th element of every window (the last one where shorter)
            picked = ops.index_select(y, d, np.minimum(start + k, end - 1))
            best = picked if best is None else ops.maximum(best, picked)
        y = best
    return y


def _out_arg(op: str, output_size: Any, x: Tensor, r: int) -> tuple[int, ...]:
    if x.ndim not in (r + 1, r + 2):
        raise ShapeError(f"{op}: expected a {r + 1}-D or {r + 2}-D input, got shape {x.shape}")
    sizes = tuple(output_size) if isinstance(output_size, (tuple, list)) else (output_size,) * r
    if len(sizes) != r:
        raise ArgumentError(f"{op}: output_size must be an int or {r} ints, got {output_size!r}")
    return tuple(x.shape[x.ndim - r + i] if s is None else int_arg(op, "output_size", s, 1)
                 for i, s in enumerate(sizes))


def adaptive_avg_pool1d(input: Tensor, output_size: Any) -> Tensor:
    x = as_tensor_arg("adaptive_avg_pool1d", "input", input)
    return _adaptive_avg("adaptive_avg_pool1d", x, _out_arg("adaptive_avg_pool1d", output_size, x, 1))


def adaptive_avg_pool2d(input: Tensor, output_size: Any) -> Tensor:
    x = as_tensor_arg("adaptive_avg_pool2d", "input", input)
    return _adaptive_avg("adaptive_avg_pool2d", x, _out_arg("adaptive_avg_pool2d", output_size, x, 2))


def adaptive_avg_pool3d(input: Tensor, output_size: Any) -> Tensor:
    x = as_tensor_arg("adaptive_avg_pool3d", "input", input)
    return _adaptive_avg("adaptive_avg_pool3d", x, _out_arg("adaptive_avg_pool3d", output_size, x, 3))


def adaptive_max_pool1d(input: Tensor, output_size: Any, return_indices: bool = False) -> Tensor:
    x = as_tensor_arg("adaptive_max_pool1d", "input", input)
    return _adaptive_max("adaptive_max_pool1d", x, _out_arg("adaptive_max_pool1d", output_size, x, 1), return_indices)


def adaptive_max_pool2d(input: Tensor, output_size: Any, return_indices: bool = False) -> Tensor:
    x = as_tensor_arg("adaptive_max_pool2d", "input", input)
    return _adaptive_max("adaptive_max_pool2d", x, _out_arg("adaptive_max_pool2d", output_size, x, 2), return_indices)


# -- pixel shuffle ----------------------------------------------------------------------------
def pixel_shuffle(input: Tensor, upscale_factor: int) -> Tensor:
    """(*, C r^2, H, W) -> (*, C, H r, W r)."""
    op = "pixel_shuffle"
    x = as_tensor_arg(op, "input", input)
    r = int_arg(op, "upscale_factor", upscale_factor, 1)
    if x.ndim < 3 or x.shape[-3] % (r * r):
        raise ShapeError(f"{op}: expected (*, C * {r}^2, H, W), got shape {x.shape}")
    lead, (c, h, w) = x.shape[:-3], x.shape[-3:]
    y = ops.reshape(x, (-1, c // (r * r), r, r, h, w))
    y = ops.permute(y, 0, 1, 4, 2, 5, 3)
    return ops.reshape(y, lead + (c // (r * r), h * r, w * r))


def pixel_unshuffle(input: Tensor, downscale_factor: int) -> Tensor:
    """(*, C, H r, W r) -> (*, C r^2, H, W)."""
    op = "pixel_unshuffle"
    x = as_tensor_arg(op, "input", input)
    r = int_arg(op, "downscale_factor", downscale_factor, 1)
    if x.ndim < 3 or x.shape[-1] % r or x.shape[-2] % r:
        raise ShapeError(f"{op}: expected (*, C, H, W) with H and W divisible by {r}, got shape {x.shape}")
    lead, (c, h, w) = x.shape[:-3], x.shape[-3:]
    y = ops.reshape(x, (-1, c, h // r, r, w // r, r))
    y = ops.permute(y, 0, 1, 3, 5, 2, 4)
    return ops.reshape(y, lead + (c * r * r, h // r, w // r))


# -- unfold / fold ----------------------------------------------------------------------------
def _im2col_index(c: int, hp: int, wp: int, k, d, s, oh: int, ow: int) -> np.ndarray:
    """Flat positions in a (C, Hp, Wp) image of the (C kh kw, oh ow) columns."""
    ch, ki, kj = np.meshgrid(np.arange(c), np.arange(k[0]), np.arange(k[1]), indexing="ij")
    rows = (ch * hp * wp + ki * d[0] * wp + kj * d[1]).reshape(-1, 1)
    oi, oj = np.meshgrid(np.arange(oh), np.arange(ow), indexing="ij")
    cols = (oi * s[0] * wp + oj * s[1]).reshape(1, -1)
    return rows + cols


def _fold_geometry(op: str, spatial: tuple[int, int], kernel_size, dilation, padding, stride):
    k = _tuple(op, "kernel_size", kernel_size, 2, 1)
    d = _tuple(op, "dilation", dilation, 2, 1)
    p = _tuple(op, "padding", padding, 2, 0)
    s = _tuple(op, "stride", stride, 2, 1)
    hp, wp = spatial[0] + 2 * p[0], spatial[1] + 2 * p[1]
    oh = (hp - d[0] * (k[0] - 1) - 1) // s[0] + 1
    ow = (wp - d[1] * (k[1] - 1) - 1) // s[1] + 1
    if oh < 1 or ow < 1:
        raise ShapeError(f"{op}: kernel {k} (dilation {d}) does not fit the padded size {(hp, wp)}")
    return k, d, p, s, hp, wp, oh, ow


def unfold(input: Tensor, kernel_size: Any, dilation: Any = 1, padding: Any = 0, stride: Any = 1) -> Tensor:
    """im2col: (N, C, H, W) -> (N, C kh kw, L), one gather of the zero-padded input."""
    op = "unfold"
    x = as_tensor_arg(op, "input", input)
    if x.ndim not in (3, 4):
        raise ShapeError(f"{op}: expected a 3-D or 4-D input (N, C, H, W), got shape {x.shape}")
    batched = x.ndim == 4
    x4 = x if batched else ops.reshape(x, (1,) + x.shape)
    n, c, h, w = x4.shape
    k, d, p, s, hp, wp, oh, ow = _fold_geometry(op, (h, w), kernel_size, dilation, padding, stride)
    xp = pad(x4, (p[1], p[1], p[0], p[0])) if any(p) else x4
    idx = _im2col_index(c, hp, wp, k, d, s, oh, ow).reshape(-1)
    cols = ops.index_select(ops.reshape(xp, (n, c * hp * wp)), 1, idx)
    out = ops.reshape(cols, (n, c * k[0] * k[1], oh * ow))
    return out if batched else ops.reshape(out, out.shape[1:])


def fold(input: Tensor, output_size: Any, kernel_size: Any, dilation: Any = 1, padding: Any = 0,
         stride: Any = 1) -> Tensor:
    """col2im, the adjoint of unfold: (N, C kh kw, L) -> (N, C, H, W), overlapping entries summed."""
    op = "fold"
    x = as_tensor_arg(op, "input", input)
    if x.ndim not in (2, 3):
        raise ShapeError(f"{op}: expected a 2-D or 3-D input (N, C * kh * kw, L), got shape {x.shape}")
    batched = x.ndim == 3
    x3 = x if batched else ops.reshape(x, (1,) + x.shape)
    osz = _tuple(op, "output_size", output_size, 2, 1)
    k, d, p, s, hp, wp, oh, ow = _fold_geometry(op, osz, kernel_size, dilation, padding, stride)
    n, ck, L = x3.shape
    if ck % (k[0] * k[1]) or L != oh * ow:
        raise ShapeError(f"{op}: input of shape {x.shape} does not match kernel {k} and {oh * ow} blocks")
    c = ck // (k[0] * k[1])
    idx = _im2col_index(c, hp, wp, k, d, s, oh, ow).reshape(-1)
    per = c * hp * wp
    flat_idx = (np.arange(n, dtype=np.int64)[:, None] * per + idx[None, :]).reshape(-1)
    img = ops.scatter_add(zeros(n * per, device=x.device), flat_idx, ops.reshape(x3, (-1,)))
    img = ops.reshape(img, (n, c, hp, wp))
    if any(p):
        img = narrow(narrow(img, 2, p[0], osz[0]), 3, p[1], osz[1])
    return img if batched else ops.reshape(img, img.shape[1:])


# -- small utilities --------------------------------------------------------------------------
def one_hot(tensor_: Tensor, num_classes: int = -1) -> Tensor:
    """An int64 tensor with a trailing class dim (num_classes -1: max + 1)."""
    op = "one_hot"
    if not isinstance(tensor_, Tensor):
        raise DTypeError(f"{op}: expected an int64 Tensor of class indices, got {type_name(tensor_)}")
    idx = np.asarray(tensor_.numpy())
    if tensor_._buf is not None or idx.dtype.kind not in "iu":
        raise DTypeError(f"{op}: class values must be an integer (int64) tensor, got {tensor_.dtype}")
    idx = idx.astype(np.int64)
    n = int_arg(op, "num_classes", num_classes, -1)
    if n == -1:
        n = int(idx.max()) + 1 if idx.size else 0
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise ArgumentError(f"{op}: class values must be in [0, {n}), got values in [{idx.min()}, {idx.max()}]")
    out = (idx[..., None] == np.arange(n)).astype(np.int64)
    return tensor(out, device=tensor_.device)


def _vector_norm(op: str, x: Tensor, p: float, dim: int) -> Tensor:
    if p == 2.0:
        return ops.sqrt(ops.sum(ops.mul(x, x), dim, True))
    if p == 1.0:
        return ops.sum(ops.abs(x), dim, True)
    raise ArgumentError(f"{op}: only p=1 and p=2 norms are supported, got p={p}")


def normalize(input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12, out: Any = None) -> Tensor:
    """x / max(||x||_p, eps) along ``dim`` (p = 1 or 2)."""
    op = "normalize"
    if out is not None:
        raise ArgumentError(f"{op}: out= is not supported")
    x = as_tensor_arg(op, "input", input)
    d = dim_index(op, dim, x.ndim)
    n = _vector_norm(op, x, real_arg(op, "p", p), d)
    return ops.div(x, ops.clamp(n, real_arg(op, "eps", eps, 0.0)))


def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """sum((x1 / max(||x1||, eps)) * (x2 / max(||x2||, eps))) along ``dim`` (PyTorch's formula)."""
    op = "cosine_similarity"
    a, b = as_tensor_arg(op, "x1", x1), as_tensor_arg(op, "x2", x2)
    if a.shape != b.shape:
        shape = tuple(np.broadcast_shapes(a.shape, b.shape))
        a, b = ops.expand(a, shape), ops.expand(b, shape)
    d = dim_index(op, dim, a.ndim)
    e = real_arg(op, "eps", eps, 0.0)
    na = ops.clamp(_vector_norm(op, a, 2.0, d), e)
    nb = ops.clamp(_vector_norm(op, b, 2.0, d), e)
    return ops.sum(ops.mul(ops.div(a, na), ops.div(b, nb)), d)


def pairwise_distance(x1: Tensor, x2: Tensor, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> Tensor:
    """||x1 - x2 + eps||_p over the last dim (p = 1 or 2)."""
    op = "pairwise_distance"
    a, b = as_tensor_arg(op, "x1", x1), as_tensor_arg(op, "x2", x2)
    diff = ops.add(ops.sub(a, b), real_arg(op, "eps", eps))
    n = _vector_norm(op, diff, real_arg(op, "p", p), diff.ndim - 1)
    return n if keepdim else ops.squeeze(n, -1)
