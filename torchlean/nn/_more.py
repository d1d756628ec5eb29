"""More of ``torch.nn.functional``, composed from differentiable ops: bilinear,
local_response_norm, channel_shuffle, embedding_bag, affine_grid, grid_sample (bilinear and
nearest, zeros/border padding) and relu_. ``ctc_loss`` and ``multi_head_attention_forward`` raise
``NotSupportedError`` naming the call.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import ops
from .._validate import type_name
from ..errors import ArgumentError, DTypeError, NotSupportedError, ShapeError
from ..ops.extra import index_add
from ..tensor import Tensor, tensor, zeros

__all__ = ["bilinear", "local_response_norm", "channel_shuffle", "embedding_bag", "affine_grid", "grid_sample",
           "relu_", "ctc_loss", "multi_head_attention_forward"]


def _tensor(op: str, name: str, x: Any) -> Tensor:
    if not isinstance(x, Tensor):
        raise DTypeError(f"{op}: expected a Tensor for {name}, got {type_name(x)}")
    return x


def bilinear(input1: Tensor, input2: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """y[..., k] = input1[..., i] weight[k, i, j] input2[..., j] + bias[k]."""
    for name, x in (("input1", input1), ("input2", input2), ("weight", weight)):
        _tensor("bilinear", name, x)
    if weight.ndim != 3 or input1.shape[-1] != weight.shape[1] or input2.shape[-1] != weight.shape[2]:
        raise ShapeError(f"bilinear: expected weight (out, in1, in2) matching input1 (..., {input1.shape[-1]}) and "
                         f"input2 (..., {input2.shape[-1]}), got weight {tuple(weight.shape)}")
    if input1.shape[:-1] != input2.shape[:-1]:
        raise ShapeError(f"bilinear: input1 and input2 must have the same batch dims, got {tuple(input1.shape)} "
                         f"and {tuple(input2.shape)}")
    lead = tuple(input1.shape[:-1])
    a = ops.reshape(input1, (-1, input1.shape[-1]))
    b = ops.reshape(input2, (-1, input2.shape[-1]))
    y = ops.einsum("bi,kij,bj->bk", a, weight, b)
    if bias is not None:
        y = ops.add(y, _tensor("bilinear", "bias", bias))
    return ops.reshape(y, lead + (weight.shape[0],))


def local_response_norm(input: Tensor, size: int, alpha: float = 1e-4, beta: float = 0.75,  # noqa: A002
                        k: float = 1.0) -> Tensor:
    """x / (k + alpha / size * sum of x^2 over ``size`` neighbouring channels) ** beta (PyTorch's
    window: size // 2 channels before, (size - 1) // 2 after, zeros outside)."""
    x = _tensor("local_response_norm", "input", input)
    if x.ndim < 3:
        raise ShapeError(f"local_response_norm: expected 3D or higher input, got {x.ndim}D")
    if x.shape[1] == 0:
        return x
    c = x.shape[1]
    sq = ops.mul(x, x)
    zeros_shape = list(sq.shape)
    before, after = size // 2, (size - 1) // 2
    parts = []
    if before:
        zeros_shape[1] = before
        parts.append(zeros(*zeros_shape, device=x.device))
    parts.append(sq)
    if after:
        zeros_shape[1] = after
        parts.append(zeros(*zeros_shape, device=x.device))
    padded = ops.cat(parts, 1) if len(parts) > 1 else sq
    total = ops.narrow(padded, 1, 0, c)
    for j in range(1, size):
        total = ops.add(total, ops.narrow(padded, 1, j, c))
    div = ops.pow(ops.add(ops.mul(total, alpha / size), k), beta)
    return ops.div(x, div)


def channel_shuffle(input: Tensor, groups: int) -> Tensor:  # noqa: A002
    x = _tensor("channel_shuffle", "input", input)
    if isinstance(groups, bool) or not isinstance(groups, int) or groups <= 0:
        raise ArgumentError(f"channel_shuffle: groups must be a positive integer, got {groups!r}")
    if x.ndim < 3 or x.shape[1] % groups:
        raise ShapeError(f"channel_shuffle: expected (N, C, ...) with C divisible by groups={groups}, got "
                         f"{tuple(x.shape)}")
    n, c, rest = x.shape[0], x.shape[1], tuple(x.shape[2:])
    y = ops.reshape(x, (n, groups, c // groups) + rest)
    return ops.reshape(ops.transpose(y, 1, 2), (n, c) + rest)


def embedding_bag(input: Any, weight: Tensor, offsets: Any = None, max_norm: Any = None, norm_type: float = 2,  # noqa: A002
                  scale_grad_by_freq: bool = False, mode: str = "mean", sparse: bool = False,
                  per_sample_weights: Any = None, include_last_offset: bool = False,
                  padding_idx: int | None = None) -> Tensor:
    """Sums, means or maxima of bags of embedding rows: ``input`` 2-D (one bag per row) or 1-D with
    ``offsets`` (bag starts). Empty bags give zeros. Differentiable in weight (and per_sample_weights)."""
    op = "embedding_bag"
    _tensor(op, "weight", weight)
    if mode not in ("sum", "mean", "max"):
        raise ArgumentError(f"{op}: mode must be 'sum', 'mean' or 'max', got {mode!r}")
    if max_norm is not None or scale_grad_by_freq or sparse:
        raise NotSupportedError(f"{op}: max_norm, scale_grad_by_freq and sparse are not supported")
    idx = ops.results.host_values(input) if isinstance(input, Tensor) else np.asarray(input)
    if idx.dtype.kind not in "iu":
        raise DTypeError(f"{op}: input must be an integer tensor, got {idx.dtype}")
    if idx.ndim == 2:
        if offsets is not None:
            raise ArgumentError(f"{op}: offsets must be None when input is 2-D")
        bags, length = idx.shape
        bag_of = np.repeat(np.arange(bags), length)
        flat = idx.reshape(-1)
    elif idx.ndim == 1:
        if offsets is None:
            raise ArgumentError(f"{op}: offsets are required when input is 1-D")
        offs = (ops.results.host_values(offsets) if isinstance(offsets, Tensor) else np.asarray(offsets)).astype(np.int64)
        if offs.ndim != 1 or (offs.size and (offs[0] != 0 or np.any(np.diff(offs) < 0) or offs[-1] > idx.size)):
            raise ArgumentError(f"{op}: offsets must be a non-decreasing 1-D sequence starting at 0, within the input")
        if include_last_offset:
            offs, ends = offs[:-1], offs[1:]
        else:
            ends = np.append(offs[1:], idx.size)
        bags = offs.size
        bag_of = np.repeat(np.arange(bags), ends - offs)
        flat = idx[: bag_of.size]
    else:
        raise ShapeError(f"{op}: input must be 1-D or 2-D, got shape {idx.shape}")
    keep = np.ones(flat.size, bool) if padding_idx is None else flat != (padding_idx % weight.shape[0])
    rows = ops.embedding(tensor(flat.astype(np.int64), device=weight.device), weight)
    if per_sample_weights is not None:
        if mode != "sum":
            raise ArgumentError(f"{op}: per_sample_weights are only supported for mode='sum', got mode={mode!r}")
        rows = ops.mul(rows, ops.unsqueeze(ops.reshape(_tensor(op, "per_sample_weights", per_sample_weights), -1), 1))
    d = weight.shape[1]
    sel = np.nonzero(keep)[0]
    if sel.size != flat.size:
        rows = ops.index_select(rows, 0, tensor(sel, device=weight.device)) if sel.size else None
    bag_sel = bag_of[sel]
    counts = np.bincount(bag_sel, minlength=bags).astype(np.float32)
    if mode == "max":
        outs = []
        for b in range(bags):
            members = np.nonzero(bag_sel == b)[0]
            if members.size:
                outs.append(ops.amax(ops.index_select(rows, 0, tensor(members, device=weight.device)), 0))
            else:
                outs.append(zeros(d, device=weight.device))
        return ops.stack(outs, 0) if outs else zeros(0, d, device=weight.device)
    out = zeros(bags, d, device=weight.device)
    if rows is not None and bag_sel.size:
        out = index_add(out, 0, tensor(bag_sel.astype(np.int64), device=weight.device), rows)
    if mode == "mean":
        out = ops.div(out, tensor(np.maximum(counts, 1.0).reshape(-1, 1), device=weight.device))
    return out


def affine_grid(theta: Tensor, size: Any, align_corners: bool | None = None) -> Tensor:
    """The sampling grid (N, H, W, 2) (or (N, D, H, W, 3)) of the affine maps theta (N, 2, 3) (or
    (N, 3, 4)) over normalized coordinates in [-1, 1]; differentiable in theta."""
    _tensor("affine_grid", "theta", theta)
    size = tuple(int(s) for s in size)
    ac = bool(align_corners)
    spatial = size[2:]
    if len(spatial) not in (2, 3) or theta.ndim != 3 or theta.shape[0] != size[0] or \
            tuple(theta.shape[1:]) != (len(spatial), len(spatial) + 1):
        raise ShapeError(f"affine_grid: expected theta (N, 2, 3) with size (N, C, H, W) or theta (N, 3, 4) with "
                         f"size (N, C, D, H, W), got theta {tuple(theta.shape)} and size {size}")

    def lin(n: int) -> np.ndarray:
        if n <= 1:
            return np.zeros(max(n, 0))
        v = np.linspace(-1.0, 1.0, n)
        return v if ac else v * (n - 1) / n

    axes = [lin(n) for n in spatial]  # (D,) H, W
    mesh = np.meshgrid(*axes, indexing="ij")
    coords = [mesh[i] for i in reversed(range(len(spatial)))]  # x (width) first
    base = np.stack(coords + [np.ones_like(mesh[0])], -1).reshape(-1, len(spatial) + 1).astype(np.float32)
    b = tensor(base, device=theta.device)  # (P, k+1)
    grid = ops.matmul(b, ops.transpose(theta, 1, 2))  # (N, P, k)
    return ops.reshape(grid, (size[0],) + spatial + (len(spatial),))


def grid_sample(input: Tensor, grid: Tensor, mode: str = "bilinear", padding_mode: str = "zeros",  # noqa: A002
                align_corners: bool | None = None) -> Tensor:
    """4-D grid_sample: input (N, C, H, W) read at grid (N, Ho, Wo, 2) of (x, y) in [-1, 1]; bilinear
    or nearest, zeros or border padding. Differentiable in input and (bilinear) grid."""
    op = "grid_sample"
    x, g = _tensor(op, "input", input), _tensor(op, "grid", grid)
    if mode not in ("bilinear", "nearest") or padding_mode not in ("zeros", "border"):
        raise NotSupportedError(f"{op}: mode={mode!r}, padding_mode={padding_mode!r} not supported (bilinear or "
                                f"nearest; zeros or border)")
    if x.ndim != 4 or g.ndim != 4 or g.shape[-1] != 2 or g.shape[0] != x.shape[0]:
        raise NotSupportedError(f"{op}: only 4-D input (N, C, H, W) with grid (N, Ho, Wo, 2) is supported, got "
                                f"input {tuple(x.shape)} and grid {tuple(g.shape)}")
    n, c, h, w = x.shape
    ho, wo = g.shape[1], g.shape[2]
    ac = bool(align_corners)

    def unnormalize(v: Tensor, size: int) -> Tensor:
        return ops.mul(ops.add(v, 1.0), (size - 1) / 2.0) if ac else ops.div(ops.sub(ops.mul(ops.add(v, 1.0), size), 1.0), 2.0)

    gx = unnormalize(ops.narrow(g, 3, 0, 1), w)  # (N, Ho, Wo, 1)
    gy = unnormalize(ops.narrow(g, 3, 1, 1), h)
    if padding_mode == "border":
        gx, gy = ops.clamp(gx, 0.0, float(w - 1)), ops.clamp(gy, 0.0, float(h - 1))
    gx = ops.reshape(gx, (n, 1, ho, wo))
    gy = ops.reshape(gy, (n, 1, ho, wo))
    hx, hy = ops.results.host_values(gx).astype(np.float64), ops.results.host_values(gy).astype(np.float64)
    base = (np.arange(n).reshape(n, 1, 1, 1) * c + np.arange(c).reshape(1, c, 1, 1)) * (h * w)

    def read(ix: np.ndarray, iy: np.ndarray) -> Tensor:
        ok = (ix >= 0) & (ix < w) & (iy >= 0) & (iy < h)
        pos = np.where(ok, base + iy.astype(np.int64) * w + ix.astype(np.int64), -1)
        return ops.select.take_flat(x, np.broadcast_to(pos, (n, c, ho, wo)).copy())

    if mode == "nearest":
        return read(np.rint(hx), np.rint(hy))
    x0, y0 = np.floor(hx), np.floor(hy)
    fx = ops.sub(gx, tensor(x0.astype(np.float32), device=x.device))  # differentiable in the grid
    fy = ops.sub(gy, tensor(y0.astype(np.float32), device=x.device))
    one_x, one_y = ops.sub(1.0, fx), ops.sub(1.0, fy)
    out = ops.mul(read(x0, y0), ops.mul(one_x, one_y))
    out = ops.add(out, ops.mul(read(x0 + 1, y0), ops.mul(fx, one_y)))
    out = ops.add(out, ops.mul(read(x0, y0 + 1), ops.mul(one_x, fy)))
    return ops.add(out, ops.mul(read(x0 + 1, y0 + 1), ops.mul(fx, fy)))


def relu_(input: Tensor) -> Tensor:  # noqa: A002
    """relu written into input (Tensor.relu_)."""
    return _tensor("relu_", "input", input).relu_()


def ctc_loss(*args: Any, **kwargs: Any) -> Tensor:
    raise NotSupportedError("ctc_loss: not supported yet (the CTC forward-backward recursion needs a new fused "
                            "primitive)")


def multi_head_attention_forward(*args: Any, **kwargs: Any) -> Any:
    raise NotSupportedError("multi_head_attention_forward: not supported; use nn.MultiheadAttention or "
                            "F.scaled_dot_product_attention")
