"""Tensor operators and the methods that compute, bound onto ``Tensor`` from above the ops.

``torchlean.tensor`` holds the class (data, shape, device, gradient fields, factories) below the
ops, so that the ops can build tensors; every method that calls an op is bound here, one layer up
(docs/architecture.md). Binding a plain function or an op itself adds no call to a method call.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from . import autograd, fast_kernels, ops
from ._validate import real_arg, type_name
from .errors import DTypeError, ShapeError
from .runtime import primitives as P
from .runtime.device import canonical_device
from .tensor import Tensor, canonical_dtype, float32, inplace_operand, int64, tensor


def _r(fn):
    return lambda self, other: fn(other, self)


def _install() -> None:
    T = Tensor
    T.__add__ = lambda s, o: ops.add(s, o)
    T.__radd__ = _r(ops.add)
    T.__sub__ = lambda s, o: ops.sub(s, o)
    T.__rsub__ = _r(ops.sub)
    T.__mul__ = lambda s, o: ops.mul(s, o)
    T.__rmul__ = _r(ops.mul)
    T.__truediv__ = lambda s, o: ops.div(s, o)
    T.__rtruediv__ = _r(ops.div)
    T.__matmul__ = lambda s, o: fast_kernels.matmul(s, o)  # ops.matmul, or matmul_fast when Options.fast_kernels
    T.__rmatmul__ = _r(ops.matmul)
    T.__neg__ = lambda s: ops.neg(s)
    T.__pos__ = lambda s: s
    T.__abs__ = lambda s: ops.abs(s)
    T.__pow__ = lambda s, p: ops.pow(s, p)
    T.__getitem__ = lambda s, k: ops.getitem(s, k)
    for name in ("exp", "log", "sqrt", "abs", "relu", "sigmoid", "tanh", "softplus", "neg", "reciprocal",
                 "flatten", "unsqueeze", "squeeze", "permute", "t", "matmul", "clamp", "expand",
                 "index_select"):
        setattr(T, name, getattr(ops, name))
    T.matmul = fast_kernels.matmul
    T.reshape = lambda s, *shape: ops.reshape(s, *shape)
    T.view = T.reshape
    T.transpose = lambda s, dim0, dim1: ops.transpose(s, dim0, dim1)
    T.sum = lambda s, dim=None, keepdim=False: ops.sum(s, dim, keepdim)
    T.mean = lambda s, dim=None, keepdim=False: ops.mean(s, dim, keepdim)
    T.softmax = lambda s, dim=-1: ops.softmax(s, dim)
    T.log_softmax = lambda s, dim=-1: ops.log_softmax(s, dim)
    T.clamp = lambda s, min=None, max=None: ops.clamp(s, min, max)
    T.clip = T.clamp
    T.pow = ops.pow
    T.add = lambda s, o: ops.add(s, o)
    T.sub = lambda s, o: ops.sub(s, o)
    T.mul = lambda s, o: ops.mul(s, o)
    T.div = lambda s, o: ops.div(s, o)
    T.T = property(lambda s: ops.t(s) if s.ndim <= 2 else ops.permute(s, *reversed(range(s.ndim))))
    T.expand_as = lambda s, o: ops.expand(s, o.shape)
    T.__lt__ = lambda s, o: _compare(s, o, "lt")
    T.__le__ = lambda s, o: _compare(s, o, "le")
    T.__gt__ = lambda s, o: _compare(s, o, "gt")
    T.__ge__ = lambda s, o: _compare(s, o, "ge")
    T.__eq__ = lambda s, o: _compare(s, o, "eq")
    T.__ne__ = lambda s, o: _compare(s, o, "ne")
    T.__hash__ = object.__hash__  # tensors hash by identity (kept explicit next to __eq__, as PyTorch does)
    T.to = to
    T.clone = ops.clone
    T.add_ = T.__iadd__ = add_
    T.sub_ = T.__isub__ = sub_
    T.mul_ = T.__imul__ = mul_
    T.div_ = T.__itruediv__ = div_
    T.copy_ = copy_


def to(self: Tensor, device: Any = None, dtype: Any = None) -> Tensor:
    """A copy on ``device`` (differentiable), optionally converted to ``dtype``."""
    out = self
    if dtype is not None:
        d = canonical_dtype("to", dtype)
        out = out.float() if d == float32 else (out.long() if d == int64 else out.bool())
    if device is not None and canonical_device(device, "to") != out._device:
        out = ops.to_device(out, device)
    return out


# -- in-place updates (optimizers, under no_grad) ----------------------------------------------------
def add_(self: Tensor, other: Any, alpha: float = 1.0) -> Tensor:
    inplace_operand("add_", other)
    if type(alpha) is not float and type(alpha) is not int:
        alpha = real_arg("add_", "alpha", alpha)
    if (alpha != 1.0 and isinstance(other, Tensor) and other._shape == self._shape
            and other._device == self._device and other._buf is not None and self._buf is not None
            and not (autograd.is_grad_enabled() and (self.requires_grad or other.requires_grad))):
        # The optimizer step p += alpha * g: one axpy (the same two roundings as scale, then add).
        self._rebind(P.axpy(self._buf, other._buf, alpha))
        return self
    if alpha != 1.0:
        other = other * alpha if isinstance(other, numbers.Real) else ops.mul(other, alpha)
    return self._assign("add_", ops.add(self, other))


def sub_(self: Tensor, other: Any, alpha: float = 1.0) -> Tensor:
    inplace_operand("sub_", other)
    if type(alpha) is not float and type(alpha) is not int:
        alpha = real_arg("sub_", "alpha", alpha)
    return self.add_(other, -alpha)


def mul_(self: Tensor, other: Any) -> Tensor:
    inplace_operand("mul_", other)
    return self._assign("mul_", ops.mul(self, other))


def div_(self: Tensor, other: Any) -> Tensor:
    inplace_operand("div_", other)
    return self._assign("div_", ops.div(self, other))


def copy_(self: Tensor, src: Tensor) -> Tensor:
    if not isinstance(src, Tensor):
        src = tensor(src, device=self._device)
    src = src.float().to(self._device)
    if src.shape != self._shape:
        if len(src.shape) > len(self._shape) or any(
                s != 1 and s != t for s, t in zip(reversed(src.shape), reversed(self._shape))):
            raise ShapeError(f"copy_: the source of shape {src.shape} does not broadcast to the tensor's "
                             f"shape {self._shape}")
        src = ops.expand(src, self._shape)
    return self._assign("copy_", Tensor._wrap(P.copy(src._buf), self._shape))


def _compare(a: Tensor, b: Any, how: str) -> Tensor:
    """Comparisons give host boolean (mask) tensors; not differentiable."""
    av = a.numpy()
    bv = b.numpy() if isinstance(b, Tensor) else np.asarray(b) if not isinstance(b, (str, bytes)) else None
    if bv is None or bv.dtype.kind not in "biuf":
        if how in ("eq", "ne"):
            return NotImplemented  # Python's fallback: x == None is False, as for a torch tensor
        raise DTypeError(f"{how}: cannot compare a Tensor with {type_name(b)} (expected a Tensor or a number)")
    res = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal, "eq": np.equal,
           "ne": np.not_equal}[how](av, bv)
    return Tensor._wrap_host(np.asarray(res), a.device)


_install()
