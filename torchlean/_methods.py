"""Tensor methods and operators, bound to the ops of layer 2 (kept apart to avoid import cycles)."""

from __future__ import annotations

from typing import Any

from . import fast_kernels, ops
from .tensor import Tensor


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


def _compare(a: Tensor, b: Any, how: str) -> Tensor:
    """Comparisons give host boolean (mask) tensors; not differentiable."""
    import numpy as np

    from ._validate import type_name
    from .errors import DTypeError

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
