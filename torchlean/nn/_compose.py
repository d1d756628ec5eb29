"""Small differentiable building blocks that the nn front end composes from existing ops.

None of these is a primitive: each is a few tape nodes over ops that already have spec, contract,
kernels and VJPs, so the gradients come for free. ``select`` (an elementwise where with a host
mask) and ``narrow`` are what PyTorch's ``where`` and ``narrow`` would give; they live here so
that nn does not depend on the tensor methods that other parts of the package add.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .. import ops
from .._validate import type_name
from ..errors import ArgumentError, DTypeError, ShapeError
from ..tensor import Tensor, tensor

__all__ = ["as_tensor_arg", "reduce_loss", "reduction_arg", "select", "narrow", "const", "host", "channel_view",
           "neg_part", "same_shape"]


def as_tensor_arg(op: str, name: str, x: Any) -> Tensor:
    """``x`` as a float tensor: a Tensor (integer/bool promoted to float32), else a DTypeError naming op."""
    if not isinstance(x, Tensor):
        raise DTypeError(f"{op}: expected a Tensor for {name}, got {type_name(x)}")
    return x if x._buf is not None else x.float()


def reduction_arg(op: str, reduction: Any, extra: Sequence[str] = ()) -> str:
    allowed = ("none", "mean", "sum") + tuple(extra)
    if reduction not in allowed:
        raise ArgumentError(f"{op}: reduction must be one of {', '.join(repr(a) for a in allowed)}, got {reduction!r}")
    return reduction


def reduce_loss(loss: Tensor, reduction: str) -> Tensor:
    if reduction == "none":
        return loss
    if reduction == "sum":
        return ops.sum(loss)
    return ops.mean(loss)


def same_shape(op: str, input: Tensor, target: Tensor) -> None:
    if input.shape != target.shape:
        raise ShapeError(f"{op}: target shape {target.shape} must equal input shape {input.shape}")


def const(arr: Any, like: Tensor) -> Tensor:
    """A float32 constant on ``like``'s device (no gradient)."""
    return tensor(np.asarray(arr, dtype=np.float32), dtype="float32", device=like.device)


def host(x: Tensor) -> np.ndarray:
    """The values of ``x`` on the host (a device sync on CUDA: used to build masks and indices)."""
    return x.numpy()


def neg_part(x: Tensor) -> Tensor:
    """min(x, 0), exactly: -relu(-x)."""
    return ops.neg(ops.relu(ops.neg(x)))


def select(mask: np.ndarray, a: Tensor, b: Tensor) -> Tensor:
    """where(mask, a, b) for a host boolean mask broadcastable to a's shape (a and b of one shape):
    one gather from [a | b], exact for every value (no 0 * inf), gradients routed by the mask."""
    n = a.numel()
    m = np.broadcast_to(np.asarray(mask, dtype=bool), a.shape).reshape(-1)
    pos = np.arange(n, dtype=np.int64)
    idx = np.where(m, pos, pos + n)
    both = ops.cat([ops.reshape(a, (n,)), ops.reshape(b, (n,))], 0)
    return ops.reshape(ops.gather_vec(both, idx), a.shape)


def narrow(x: Tensor, dim: int, start: int, length: int) -> Tensor:
    """x.narrow(dim, start, length): a contiguous run along ``dim``."""
    return ops.narrow(x, dim, start, length)


def channel_view(t: Tensor, rank: int, channel_dim: int = 1) -> Tensor:
    """A per-channel vector (C,) viewed as (1, C, 1, ...) for broadcasting against a rank-``rank`` input."""
    shape = [1] * rank
    shape[channel_dim] = t.numel()
    return ops.reshape(t, tuple(shape))
