"""Tensor operators and the methods that compute, bound onto ``Tensor`` from above the ops.

``torchlean.tensor`` holds the class (data, shape, device, gradient fields, factories) below the
ops, so that the ops can build tensors; every method that calls an op is bound here, one layer up
(docs/architecture.md). Binding a plain function or an op itself adds no call to a method call.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from . import autograd, dtypes, fast_kernels, ops
from ._validate import real_arg, type_name
from .errors import DTypeError, ShapeError
from .memory_format import check_memory_format
from .runtime import primitives as P
from .runtime.buffer import zeros as _zeros_buffer
from .runtime.device import canonical_device
from . import complex_tensor as CX
from .complex_tensor import ComplexTensor
from .tensor import Tensor, canonical_dtype, empty, full, inplace_operand, ones, tensor, zeros


def _r(fn):
    return lambda self, other: fn(other, self)


def _install() -> None:
    T = Tensor
    # a complex operand (a complex tensor or a Python complex number) makes a complex result (x * 1j)
    C = (ComplexTensor, complex)
    T.__add__ = lambda s, o: CX.cadd(s, o) if isinstance(o, C) else ops.add(s, o)
    T.__radd__ = lambda s, o: CX.cadd(o, s) if isinstance(o, complex) else ops.add(o, s)
    T.__sub__ = lambda s, o: CX.csub(s, o) if isinstance(o, C) else ops.sub(s, o)
    T.__rsub__ = lambda s, o: CX.csub(o, s) if isinstance(o, complex) else ops.sub(o, s)
    T.__mul__ = lambda s, o: CX.cmul(s, o) if isinstance(o, C) else ops.mul(s, o)
    T.__rmul__ = lambda s, o: CX.cmul(o, s) if isinstance(o, complex) else ops.mul(o, s)
    T.__truediv__ = lambda s, o: CX.cdiv(s, o) if isinstance(o, C) else ops.div(s, o)
    T.__rtruediv__ = lambda s, o: CX.cdiv(o, s) if isinstance(o, complex) else ops.div(o, s)
    # ops.matmul, or matmul_fast when Options.fast_kernels
    T.__matmul__ = lambda s, o: CX.cmatmul(s, o) if isinstance(o, ComplexTensor) else fast_kernels.matmul(s, o)
    T.is_complex = lambda s: False
    T.__rmatmul__ = _r(ops.matmul)
    T.__neg__ = lambda s: ops.neg(s)
    T.__pos__ = lambda s: s
    T.__abs__ = lambda s: ops.abs(s)
    T.__pow__ = lambda s, p: CX.cpow(s, p) if isinstance(p, C) else ops.pow(s, p)
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
    _install_dtype_ops(T)
    T.__hash__ = object.__hash__  # tensors hash by identity (kept explicit next to __eq__, as PyTorch does)
    T.to = to
    T.clone = ops.clone
    T.add_ = T.__iadd__ = add_
    T.sub_ = T.__isub__ = sub_
    T.mul_ = T.__imul__ = mul_
    T.div_ = T.__itruediv__ = div_
    T.copy_ = copy_


def to(self: Tensor, *args: Any, device: Any = None, dtype: Any = None, non_blocking: bool = False,
       copy: bool = False, memory_format: Any = None) -> Tensor:
    """``to(device)``, ``to(dtype)``, ``to(device, dtype)`` or ``to(other)`` (other's device and
    dtype): a copy on ``device`` (differentiable), converted to ``dtype``. ``memory_format`` is
    accepted and changes nothing (torchlean/memory_format.py)."""
    check_memory_format("to", memory_format)
    for a in args:
        if isinstance(a, bool):  # to(device, dtype, non_blocking) passes the flag positionally
            continue
        if isinstance(a, Tensor):
            device, dtype = a.device, a.dtype
        elif _is_dtype(a):
            dtype = a
        elif device is None:
            device = a
        else:
            raise DTypeError(f"to: expected a device, a dtype or a Tensor, got {a!r} ({type_name(a)})")
    out = self
    if dtype is not None and CX.is_cfloat("to", dtype):  # x.to(torch.cfloat): a complex tensor
        out = CX.to_complex("to", out)
        return out if device is None else out.to(device)
    if dtype is not None:
        out = out._as("to", canonical_dtype("to", dtype))
    if device is not None and canonical_device(device, "to") != out._device:
        out = ops.to_device(out, device)
    return out


def _split_method(self: Tensor, split_size: Any = None, dim: int = 0, *,
                  split_size_or_sections: Any = None) -> tuple:
    """``Tensor.split(split_size, dim=0)``: PyTorch names the method's argument ``split_size`` (and
    torch.split's ``split_size_or_sections``); both are accepted."""
    if split_size is None:
        split_size = split_size_or_sections
    return ops.select.split(self, split_size, dim)


# -- in-place updates ----------------------------------------------------------------------------------
# As in PyTorch: under no_grad (the optimizers) they rebind the tensor to the result; while
# gradients are recorded they are differentiable on a non-leaf or on a tensor that does not require
# grad, and refused on a leaf that does (Tensor._assign).
def _source(op: str, self: Tensor, *others: Any) -> Tensor:
    """What an in-place update computes from: ``self``, or when the update will be recorded a
    stand-in for its current value (so that ``self`` never becomes its own parent on the tape)."""
    if self._buf is not None and autograd.is_grad_enabled():
        self._check_inplace(op)
        if self.requires_grad or any(isinstance(o, Tensor) and o.requires_grad for o in others):
            return self._stand_in()
    return self


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
        if self._buf is None and float(alpha).is_integer():
            alpha = int(alpha)  # an integer tensor stays integer: x.sub_(y) is x.add_(y, alpha=-1)
        other = other * alpha if isinstance(other, numbers.Real) else ops.mul(other, alpha)
    src = _source("add_", self, other)
    return self._assign("add_", ops.add(src, other), src)


def sub_(self: Tensor, other: Any, alpha: float = 1.0) -> Tensor:
    inplace_operand("sub_", other)
    if type(alpha) is not float and type(alpha) is not int:
        alpha = real_arg("sub_", "alpha", alpha)
    return self.add_(other, -alpha)


def mul_(self: Tensor, other: Any) -> Tensor:
    inplace_operand("mul_", other)
    src = _source("mul_", self, other)
    return self._assign("mul_", ops.mul(src, other), src)


def div_(self: Tensor, other: Any) -> Tensor:
    inplace_operand("div_", other)
    src = _source("div_", self, other)
    return self._assign("div_", ops.div(src, other), src)


def copy_(self: Tensor, src: Tensor, non_blocking: bool = False) -> Tensor:
    """The values of ``src`` (broadcast, converted to this tensor's dtype and device) written in place."""
    if not isinstance(src, Tensor):
        src = tensor(src, device=self._device)
    if self._buf is None:
        src = src.to(self._device)._as("copy_", self.dtype)
        if src.shape != self._shape:
            src = ops.expand(src, self._shape)
        self._arr = ops.integer.clone(src)._arr
        return self
    self._check_inplace("copy_")
    src = src.float().to(self._device)
    if src.shape != self._shape:
        if len(src.shape) > len(self._shape) or any(
                s != 1 and s != t for s, t in zip(reversed(src.shape), reversed(self._shape))):
            raise ShapeError(f"copy_: the source of shape {src.shape} does not broadcast to the tensor's "
                             f"shape {self._shape}")
        src = ops.expand(src, self._shape)
    new = Tensor._wrap(P.copy(src._buf), self._shape)
    old = _source("copy_", self, src)
    if old is not self:  # differentiable in src; the old value's history gets zeros (PyTorch's CopyBackwards)
        n, dev, zero = new.numel(), self._device, old.requires_grad
        autograd.record("copy_", new, (old, src), lambda g: (_zeros_buffer(n, dev) if zero else None, g))
    return self._assign("copy_", new, old)


def _compare(a: Tensor, b: Any, how: str) -> Tensor:
    """Comparisons give bool tensors on the operands' device; not differentiable. ``x == None`` is
    NotImplemented (Python then answers False, as for a torch tensor)."""
    return ops.integer.compare(how, a, b)


def _is_dtype(a: Any) -> bool:
    return (isinstance(a, (dtypes.dtype, np.dtype)) or type(a).__name__ == "dtype"
            or (isinstance(a, type) and (a in (float, int, bool) or issubclass(a, np.generic))))


def _new_factory(fn: Any) -> Any:
    def method(self: Tensor, *size: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False,
               **kw: Any) -> Tensor:
        return fn(*size, dtype=self.dtype if dtype is None else dtype,
                  device=self._device if device is None else device, requires_grad=requires_grad, **kw)
    method.__name__ = f"new_{fn.__name__}"
    return method


def _new_full(self: Tensor, size: Any, fill_value: Any, dtype: Any = None, device: Any = None,
              requires_grad: bool = False) -> Tensor:
    return full(size, fill_value, dtype=self.dtype if dtype is None else dtype,
                              device=self._device if device is None else device, requires_grad=requires_grad)


def _new_tensor(self: Tensor, data: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    return tensor(data, dtype=self.dtype if dtype is None else dtype,
                  device=self._device if device is None else device, requires_grad=requires_grad)


def _int_inplace(op: str, fn: Any) -> Any:
    def method(self: Tensor, other: Any) -> Tensor:
        inplace_operand(op, other)
        src = _source(op, self, other)
        return self._assign(op, fn(src, other), src)
    method.__name__ = op
    return method


def _install_dtype_ops(T: type) -> None:
    """Operators whose result dtype follows PyTorch's promotion (ops/integer.py)."""
    I = ops.integer
    T.__floordiv__ = T.floor_divide = lambda s, o: I.floor_divide(s, o)
    T.__rfloordiv__ = lambda s, o: I.floor_divide(o, s)
    T.__mod__ = T.remainder = lambda s, o: ops.elementwise.remainder(s, o)
    T.__rmod__ = lambda s, o: ops.elementwise.remainder(o, s)
    T.__rpow__ = lambda s, o: CX.crpow(o, s) if isinstance(o, complex) else _rpow(o, s)
    for name, op in (("and", "bitwise_and"), ("or", "bitwise_or"), ("xor", "bitwise_xor"),
                     ("lshift", "bitwise_left_shift"), ("rshift", "bitwise_right_shift")):
        fwd = (lambda op_: lambda s, o: I.bitwise(op_, s, o))(op)
        setattr(T, f"__{name}__", fwd)
        setattr(T, op, fwd)
        setattr(T, f"__r{name}__", (lambda op_: lambda s, o: I.bitwise(op_, o, s))(op))
        setattr(T, f"__i{name}__", _int_inplace(op + "_", fwd))
        setattr(T, op + "_", _int_inplace(op + "_", fwd))
    T.__invert__ = T.bitwise_not = lambda s: I.bitwise_not(s)
    for op in ("logical_and", "logical_or", "logical_xor"):
        setattr(T, op, (lambda op_: lambda s, o: I.logical(op_, s, o))(op))
    T.logical_not = lambda s: I.logical_not(s)
    for how in ("eq", "ne", "lt", "le", "gt", "ge"):
        setattr(T, how, (lambda h: lambda s, o: _compare(s, o, h))(how))
    T.greater, T.less, T.greater_equal, T.less_equal, T.not_equal = T.gt, T.lt, T.ge, T.le, T.ne
    T.__ifloordiv__ = T.floor_divide_ = _int_inplace("floor_divide_", I.floor_divide)
    T.__imod__ = T.remainder_ = _int_inplace("remainder_", ops.elementwise.remainder)
    T.new_zeros = _new_factory(zeros)
    T.new_ones = _new_factory(ones)
    T.new_empty = _new_factory(empty)
    T.new_full = _new_full
    T.new_tensor = _new_tensor


def _rpow(base: Any, exponent: Tensor) -> Tensor:
    """``number ** tensor``: integers stay integers (PyTorch's promotion); a float result is
    exp(exponent * log(base)) for base > 0."""
    out = ops.integer.arith("pow", base, exponent) if exponent._buf is None else None
    if out is not None:
        return out
    if not isinstance(base, (int, float)) or isinstance(base, bool) or base <= 0:
        raise DTypeError(f"pow: number ** tensor needs a positive base, got {base!r}")
    import math

    return ops.exp(ops.mul(exponent.float(), math.log(base)))


# -- math, reductions with dim, shape/index functions, products, sorting ---------------------
def _inplace(name: str, fn: Any) -> Any:
    """``x.name_(...)``: ``fn(x, ...)`` written into x, recorded on the tape (ops.select.inplace_update)."""
    def method(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        old = _source(name, self, *args, *kwargs.values())
        if old is not self:
            args = tuple(old if a is self else a for a in args)
            kwargs = {k: old if v is self else v for k, v in kwargs.items()}
        return ops.select.inplace_update(name, self, fn(old, *args, **kwargs), old)

    method.__name__ = name
    return method


def _random_fill(name: str, draw: Any) -> Any:
    def method(self: Tensor, *args: Any, generator: Any = None, **kwargs: Any) -> Tensor:
        self._check_inplace(name)
        with autograd.no_grad():  # the draw has no gradient; the update itself is recorded as any other
            new = draw(self, generator, *args, **kwargs)
        return ops.select.inplace_update(name, self, new)

    method.__name__ = name
    return method


def _normal(self: Tensor, generator: Any, mean: float = 0.0, std: float = 1.0) -> Tensor:
    from .tensor import randn

    return ops.add(ops.mul(randn(*self.shape, device=self.device, generator=generator), float(std)), float(mean))


def _uniform(self: Tensor, generator: Any, a: float = 0.0, b: float = 1.0) -> Tensor:
    from .tensor import rand

    return ops.add(ops.mul(rand(*self.shape, device=self.device, generator=generator), float(b) - float(a)), float(a))


def _install_more() -> None:
    T = Tensor
    M, S, R, E, C = ops.math_ops, ops.select, ops.reduce_dim, ops.einsum_ops, ops.creation
    methods = {
        # elementwise math
        "sin": M.sin, "cos": M.cos, "tan": M.tan, "erf": M.erf, "erfc": M.erfc, "log1p": M.log1p,
        "expm1": M.expm1, "exp2": M.exp2, "log2": M.log2, "log10": M.log10, "floor": M.floor, "ceil": M.ceil,
        "round": M.round, "trunc": M.trunc, "fix": M.trunc, "frac": M.frac, "sign": M.sign, "sgn": M.sign,
        "rsqrt": M.rsqrt, "square": M.square, "clamp_min": M.clamp_min, "clamp_max": M.clamp_max,
        "isnan": M.isnan, "isinf": M.isinf, "isfinite": M.isfinite, "isposinf": M.isposinf,
        "isneginf": M.isneginf, "nan_to_num": M.nan_to_num, "lerp": M.lerp, "addcmul": M.addcmul,
        "addcdiv": M.addcdiv, "hypot": M.hypot, "float_power": M.float_power,
        "atan": M.atan, "arctan": M.atan, "asin": M.asin, "arcsin": M.asin, "acos": M.acos, "arccos": M.acos,
        "asinh": M.asinh, "arcsinh": M.asinh, "acosh": M.acosh, "arccosh": M.acosh, "atanh": M.atanh,
        "arctanh": M.atanh, "atan2": M.atan2, "arctan2": M.atan2,
        # reductions with dim
        "max": R.max, "min": R.min, "argmax": R.argmax, "argmin": R.argmin, "amax": R.amax, "amin": R.amin,
        "aminmax": R.aminmax, "norm": R.norm, "var": R.var, "std": R.std, "logsumexp": R.logsumexp,
        "prod": R.prod, "all": R.all, "any": R.any, "cumsum": R.cumsum, "cumprod": R.cumprod,
        "median": R.median, "count_nonzero": R.count_nonzero,
        # shape and index
        "split": _split_method, "chunk": S.chunk, "unbind": S.unbind, "narrow": S.narrow, "tril": S.tril,
        "triu": S.triu, "flip": S.flip, "fliplr": S.fliplr, "flipud": S.flipud, "roll": S.roll,
        "repeat": S.repeat, "repeat_interleave": S.repeat_interleave, "tile": S.tile, "gather": S.gather,
        "scatter": S.scatter, "scatter_add": S.scatter_add, "take_along_dim": S.take_along_dim, "take": S.take,
        "masked_select": S.masked_select, "diag": S.diag, "diagonal": S.diagonal, "movedim": S.movedim,
        "moveaxis": S.movedim, "swapaxes": S.swapaxes, "swapdims": S.swapaxes, "unflatten": S.unflatten,
        "index_put": S.index_put,
        # products
        "mm": E.mm, "mv": E.mv, "addmm": E.addmm, "addmv": E.addmv, "baddbmm": E.baddbmm, "addbmm": E.addbmm,
        "outer": E.outer, "ger": E.outer, "dot": E.dot, "vdot": E.vdot, "inner": E.inner, "kron": E.kron,
        "bmm": ops.bmm,
        # sorting
        "sort": C.sort, "argsort": C.argsort, "topk": C.topk, "unique": C.unique,
    }
    for name, fn in methods.items():
        if name not in T.__dict__:  # never replace a binding made above (or by the dtype ops)
            setattr(T, name, fn)
    T.__setitem__ = S.setitem
    for name in ("view_as", "reshape_as"):
        if name not in T.__dict__:
            setattr(T, name, lambda s, o: ops.reshape(s, o.shape))
    inplace = {
        "clamp_": ops.clamp, "clip_": ops.clamp, "clamp_min_": M.clamp_min, "clamp_max_": M.clamp_max,
        "pow_": M.pow, "sqrt_": ops.sqrt, "rsqrt_": M.rsqrt, "exp_": ops.exp, "log_": ops.log, "neg_": ops.neg,
        "abs_": ops.abs, "sigmoid_": ops.sigmoid, "tanh_": ops.tanh, "relu_": ops.relu, "floor_": M.floor,
        "ceil_": M.ceil, "round_": M.round, "trunc_": M.trunc, "sign_": M.sign, "sin_": M.sin, "cos_": M.cos,
        "reciprocal_": ops.reciprocal, "square_": M.square, "lerp_": M.lerp, "addcmul_": M.addcmul,
        "addcdiv_": M.addcdiv, "scatter_": S.scatter, "scatter_add_": S.scatter_add, "tril_": S.tril,
        "triu_": S.triu, "nan_to_num_": M.nan_to_num, "erf_": M.erf, "log1p_": M.log1p, "expm1_": M.expm1,
        "frac_": M.frac, "masked_fill_": getattr(ops, "masked_fill", None),
        "atan_": M.atan, "arctan_": M.atan, "asin_": M.asin, "arcsin_": M.asin, "acos_": M.acos,
        "arccos_": M.acos, "asinh_": M.asinh, "arcsinh_": M.asinh, "acosh_": M.acosh, "arccosh_": M.acosh,
        "atanh_": M.atanh, "arctanh_": M.atanh, "atan2_": M.atan2, "arctan2_": M.atan2,
    }
    for name, fn in inplace.items():
        if fn is not None and name not in T.__dict__:
            setattr(T, name, _inplace(name, fn))
    for name, draw in (("normal_", _normal), ("uniform_", _uniform)):
        if name not in T.__dict__:
            setattr(T, name, _random_fill(name, draw))


_install()
_install_more()
