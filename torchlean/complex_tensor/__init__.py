"""complex64 tensors (``dtype=torch.cfloat``), stored as float32 pairs: ``ComplexTensor`` over its
real view (``_core``), arithmetic (``_math``), elementwise functions and powers (``_funcs``),
reductions and vector products (``_reduce``), shape ops and indexing (``_shape``), factories
(``_create``) and complex einsum/matmul (``_einsum``). This module binds the methods onto the class
and gives the public functions that route complex arguments (``torch.abs(z)``, ``torch.cat``,
``torch.einsum``...) here and every other call to the real function unchanged.

For code that builds on it (torch.fft, spectral convolutions): ``ComplexTensor.from_real_view(r)``
wraps a float32 (*S, 2) tensor (no copy, same tape node) and ``z.real_view()`` unwraps it.

Differences from PyTorch, on purpose: ``z.real`` / ``z.imag`` are new (differentiable) tensors, not
views: writing into them does not write z (write ``view_as_real(z)[..., 0]`` instead).
"""

from __future__ import annotations

import builtins
import numbers
from typing import Any

from .. import fast_kernels, ops
from ..errors import NotSupportedError
from ..ops.einsum import dot as real_dot, inner as real_inner, outer as real_outer
from ..ops import extra as ops_extra
from ..ops import math as ops_math
from ..ops import reduce_dim
from ..tensor import Tensor
from . import _einsum, _funcs, _math, _reduce, _shape
from ._core import SUPPORTED_METHODS, ComplexTensor, is_complex_tensor
from ._create import (as_tensor, empty, empty_like, from_numpy, full, full_like, is_cfloat, ones, ones_like,
                      rand, rand_like, randn, randn_like, tensor, view_as_complex, view_as_real, zeros,
                      zeros_like)
from ._einsum import einsum  # (not in __all__: torchlean.einsum routes complex operands here itself)
from ._math import angle, complex, polar, real, imag
from ._reduce import vector_norm

__all__ = ["ComplexTensor", "is_complex_tensor", "is_complex", "complex", "polar", "view_as_real",
           "view_as_complex", "real", "imag", "conj", "conj_physical", "resolve_conj", "resolve_neg", "angle",
           "is_cfloat", "zeros", "ones", "empty", "full", "zeros_like", "ones_like", "empty_like", "full_like",
           "rand", "randn", "rand_like", "randn_like", "vector_norm", "tensor", "as_tensor", "from_numpy",
           "PUBLIC_ROUTES", "routed"]


def is_complex(input: Any) -> bool:  # noqa: A002
    """``torch.is_complex``: True for a complex tensor, False for a real one."""
    if isinstance(input, ComplexTensor):
        return True
    if isinstance(input, Tensor):
        return False
    from ..errors import DTypeError
    from .._validate import type_name

    raise DTypeError(f"is_complex: expected a Tensor for input, got {type_name(input)}")


def conj(input: Any) -> Any:  # noqa: A002
    """The conjugate; a real tensor is its own (PyTorch returns it unchanged)."""
    return _math.conj(input) if isinstance(input, ComplexTensor) else input


conj_physical = conj


def resolve_conj(input: Any) -> Any:  # noqa: A002
    """Identity: torchlean never holds a lazily conjugated tensor (``is_conj()`` is False)."""
    return input


def resolve_neg(input: Any) -> Any:  # noqa: A002
    """Identity: torchlean never holds a lazily negated tensor (``is_neg()`` is False)."""
    return input


def _sign(z: ComplexTensor) -> Any:
    raise NotSupportedError("sign: complex tensors are not supported by sign (as PyTorch's); use sgn for z / |z|")


# the arithmetic a real Tensor's operators hand a complex operand to (``x * z``, ``x * 1j``)
cadd, csub, cmul, cdiv, cmatmul = _math.add, _math.sub, _math.mul, _math.div, _einsum.matmul
cpow, crpow = _funcs.pow, _funcs.rpow


def to_complex(op: str, x: Tensor) -> ComplexTensor:
    """A real tensor as complex64 (imaginary parts zero; differentiable): ``x.to(torch.cfloat)``."""
    return _shape.as_complex(op, x, None)


def _bind() -> None:
    C = ComplexTensor

    def reflected(fn):
        return lambda self, other: fn(other, self)

    def forward(fn):  # NotImplemented for an operand we do not know, so Python can try the other side
        def method(self, other):
            if not isinstance(other, (ComplexTensor, Tensor, numbers.Number)):
                return NotImplemented
            return fn(self, other)
        return method

    methods: dict[str, Any] = {
        "__add__": forward(_math.add), "__radd__": forward(reflected(_math.add)),
        "__sub__": forward(_math.sub), "__rsub__": forward(reflected(_math.sub)),
        "__mul__": forward(_math.mul), "__rmul__": forward(reflected(_math.mul)),
        "__truediv__": forward(_math.div), "__rtruediv__": forward(reflected(_math.div)),
        "__matmul__": lambda s, o: _einsum.matmul(s, o), "__rmatmul__": lambda s, o: _einsum.matmul(o, s),
        "__neg__": _math.neg, "__pos__": lambda s: s, "__abs__": _math.abs,
        "__pow__": forward(_funcs.pow), "__rpow__": forward(reflected(_funcs.rpow)),
        "__eq__": forward(_math.eq), "__ne__": forward(_math.ne),
        "__getitem__": _shape.getitem, "__setitem__": _shape.setitem,
        "add": _math.add, "sub": _math.sub, "mul": _math.mul, "div": _math.div, "neg": _math.neg,
        "conj": _math.conj, "conj_physical": _math.conj, "resolve_conj": lambda s: s, "is_conj": lambda s: False,
        "abs": _math.abs, "absolute": _math.abs, "angle": _math.angle, "pow": _funcs.pow,
        "reciprocal": _math.reciprocal, "resolve_neg": lambda s: s, "is_neg": lambda s: False,
        "exp": _funcs.exp, "log": _funcs.log, "log2": _funcs.log2, "log10": _funcs.log10, "sqrt": _funcs.sqrt,
        "rsqrt": _funcs.rsqrt, "square": _funcs.square, "sin": _funcs.sin, "cos": _funcs.cos, "tan": _funcs.tan,
        "sinh": _funcs.sinh, "cosh": _funcs.cosh, "tanh": _funcs.tanh, "sigmoid": _funcs.sigmoid,
        "log1p": _funcs.log1p, "expm1": _funcs.expm1,
        **{alias: getattr(_funcs, name) for name in ("asin", "acos", "atan", "asinh", "acosh", "atanh")
           for alias in (name, "arc" + name[1:])},
        "sgn": _funcs.sgn, "sign": _sign, "isnan": _funcs.isnan, "isinf": _funcs.isinf,
        "isfinite": _funcs.isfinite, "nan_to_num": _funcs.nan_to_num, "prod": _reduce.prod, "var": _reduce.var,
        "std": _reduce.std, "norm": _reduce.norm, "dot": _reduce.dot, "vdot": _reduce.vdot,
        "inner": _reduce.inner, "outer": _reduce.outer, "ger": _reduce.outer,
        "sum": _math.sum, "mean": _math.mean, "matmul": lambda s, o: _einsum.matmul(s, o),
        "reshape": _shape.reshape, "view": _shape.reshape, "permute": _shape.permute, "transpose": _shape.transpose,
        "swapaxes": _shape.transpose, "unsqueeze": _shape.unsqueeze, "squeeze": _shape.squeeze,
        "flatten": _shape.flatten, "expand": _shape.expand, "repeat": _shape.repeat, "clone": _shape.clone,
        "detach": _shape.detach, "to": _shape.to, "contiguous": lambda s, memory_format=None: s,
        "is_contiguous": lambda s, memory_format=None: True,
        "cpu": lambda s: _shape.to(s, "cpu"), "cuda": lambda s, device=None: _shape.to(
            s, "cuda" if device is None else f"cuda:{device}"),
        "expand_as": lambda s, o: _shape.expand(s, tuple(o.shape)),
        "reshape_as": lambda s, o: _shape.reshape(s, tuple(o.shape)),
        "view_as": lambda s, o: _shape.reshape(s, tuple(o.shape)),
        "cfloat": lambda s: s, "type_as": lambda s, o: s.to(dtype=o.dtype),
        "allclose": _math.allclose, "isclose": _math.isclose, "equal": _math.equal,
        "add_": lambda s, o, alpha=1: _shape.inplace("add_", _math.add, s, o, alpha),
        "sub_": lambda s, o, alpha=1: _shape.inplace("sub_", _math.sub, s, o, alpha),
        "mul_": lambda s, o: _shape.inplace("mul_", _math.mul, s, o),
        "div_": lambda s, o: _shape.inplace("div_", _math.div, s, o),
        "copy_": lambda s, o, non_blocking=False: _shape.inplace("copy_", lambda a, b: _shape.as_complex(
            "copy_", b, a).expand(*a.shape), s, o),
        "zero_": lambda s: (s.real_view().zero_(), s)[1],
        "requires_grad_": lambda s, requires_grad=True: (s.real_view().requires_grad_(requires_grad), s)[1],
        "backward": lambda s, gradient=None, retain_graph=False: _backward(s, gradient, retain_graph),
        "retain_grad": lambda s: (s.real_view().retain_grad(), s)[1],
        "numpy": ComplexTensor.numpy,
    }
    methods["__iadd__"], methods["__isub__"] = methods["add_"], methods["sub_"]
    methods["__imul__"], methods["__itruediv__"] = methods["mul_"], methods["div_"]
    for name, fn in methods.items():
        setattr(C, name, fn)
    for name, fn in (("real", _math.real), ("imag", _math.imag), ("mT", _shape.mT), ("T", _shape.T),
                     ("H", lambda s: _math.conj(_shape.T(s))), ("mH", lambda s: _math.conj(_shape.mT(s)))):
        setattr(C, name, property(fn))
    SUPPORTED_METHODS[:] = sorted(n for n in methods if not n.startswith("__")) + ["real", "imag", "T", "mT"]


def _backward(z: ComplexTensor, gradient: Any, retain_graph: bool) -> None:
    from ..errors import AutogradError

    if gradient is None:
        raise AutogradError("backward: grad can be implicitly created only for real scalar outputs (a complex "
                            "output needs gradient=, or take .abs() / .real first)")
    g = _shape.as_complex("backward", gradient, z)
    z.real_view().backward(g.real_view(), retain_graph=retain_graph)


_bind()


def routed(name: str, real_fn, complex_fn, arg: int = 0):
    """``real_fn`` with complex arguments sent to ``complex_fn`` (positional ``arg``, or any of a
    list there, is a ComplexTensor; ``input=`` too)."""
    def fn(*args: Any, **kwargs: Any) -> Any:
        a = args[arg] if len(args) > arg else kwargs.get("input", kwargs.get("tensors"))
        if isinstance(a, ComplexTensor) or (isinstance(a, (list, tuple)) and _einsum.has_complex(a)):
            return complex_fn(*args, **kwargs)
        return real_fn(*args, **kwargs)
    fn.__name__ = name
    fn.__doc__ = getattr(real_fn, "__doc__", None)
    return fn


def _einsum_any(real_fn):
    def fn(equation: Any, *operands: Any) -> Any:
        if _einsum.has_complex(operands):
            return _einsum.einsum(equation, *operands)
        return real_fn(equation, *operands)
    fn.__name__ = "einsum"
    fn.__doc__ = real_fn.__doc__
    return fn


def _matmul_any(real_fn):
    def fn(input: Any, other: Any, **kw: Any) -> Any:  # noqa: A002
        if isinstance(input, ComplexTensor) or isinstance(other, ComplexTensor):
            return _einsum.matmul(input, other)
        return real_fn(input, other, **kw)
    fn.__name__ = "matmul"
    return fn


def _pow_any(real_fn):
    def fn(input: Any, exponent: Any) -> Any:  # noqa: A002
        if isinstance(input, ComplexTensor) or isinstance(exponent, (ComplexTensor, builtins.complex)):
            return _funcs.pow(input, exponent) if isinstance(input, (ComplexTensor, Tensor)) else \
                _funcs.rpow(input, exponent)
        return real_fn(input, exponent)
    fn.__name__ = "pow"
    fn.__doc__ = real_fn.__doc__
    return fn


def _binary(name: str, real_fn, complex_fn):
    def fn(input: Any, other: Any, *args: Any, **kw: Any) -> Any:  # noqa: A002
        if isinstance(input, ComplexTensor) or isinstance(other, ComplexTensor):
            return complex_fn(input, other, *args, **kw)
        return real_fn(input, other, *args, **kw)
    fn.__name__ = name
    return fn


# the torchlean names that take complex tensors too (torchlean's __init__ installs them over the
# real ones; each costs a real call one isinstance test)
def _inverse_routes() -> dict[str, Any]:
    """asin .. atanh routed, each alias (arcsin ..) the same function, as torch's."""
    out = {}
    for name in ("asin", "acos", "atan", "asinh", "acosh", "atanh"):
        out[name] = out["arc" + name[1:]] = routed(name, getattr(ops_math, name), getattr(_funcs, name))
    return out


PUBLIC_ROUTES: dict[str, Any] = {
    "abs": routed("abs", ops.abs, _math.abs),
    "absolute": routed("absolute", ops.abs, _math.abs),
    "angle": angle,
    "sum": routed("sum", ops.sum, _math.sum),
    "mean": routed("mean", ops.mean, _math.mean),
    "neg": routed("neg", ops.neg, _math.neg),
    "negative": routed("negative", ops.neg, _math.neg),
    "reciprocal": routed("reciprocal", ops.reciprocal, _math.reciprocal),
    "exp": routed("exp", ops.exp, _funcs.exp),
    "log": routed("log", ops.log, _funcs.log),
    "log2": routed("log2", ops_math.log2, _funcs.log2),
    "log10": routed("log10", ops_math.log10, _funcs.log10),
    "sqrt": routed("sqrt", ops.sqrt, _funcs.sqrt),
    "rsqrt": routed("rsqrt", ops_math.rsqrt, _funcs.rsqrt),
    "square": routed("square", ops_math.square, _funcs.square),
    "log1p": routed("log1p", ops_math.log1p, _funcs.log1p),
    "expm1": routed("expm1", ops_math.expm1, _funcs.expm1),
    **_inverse_routes(),
    "sin": routed("sin", ops_math.sin, _funcs.sin),
    "cos": routed("cos", ops_math.cos, _funcs.cos),
    "tan": routed("tan", ops_math.tan, _funcs.tan),
    "sinh": routed("sinh", _funcs.real_sinh, _funcs.sinh),
    "cosh": routed("cosh", _funcs.real_cosh, _funcs.cosh),
    "tanh": routed("tanh", ops.tanh, _funcs.tanh),
    "sigmoid": routed("sigmoid", ops.sigmoid, _funcs.sigmoid),
    "sgn": routed("sgn", ops_math.sign, _funcs.sgn),
    "sign": routed("sign", ops_math.sign, _sign),
    "isnan": routed("isnan", ops_math.isnan, _funcs.isnan),
    "isinf": routed("isinf", ops_math.isinf, _funcs.isinf),
    "isfinite": routed("isfinite", ops_math.isfinite, _funcs.isfinite),
    "nan_to_num": routed("nan_to_num", ops_math.nan_to_num, _funcs.nan_to_num),
    "prod": routed("prod", reduce_dim.prod, _reduce.prod),
    "var": routed("var", reduce_dim.var, _reduce.var),
    "std": routed("std", reduce_dim.std, _reduce.std),
    "var_mean": routed("var_mean", reduce_dim.var_mean, _reduce.var_mean),
    "std_mean": routed("std_mean", reduce_dim.std_mean, _reduce.std_mean),
    "norm": routed("norm", reduce_dim.norm, _reduce.norm),
    "dot": _binary("dot", real_dot, _reduce.dot),
    "vdot": _binary("vdot", real_dot, _reduce.vdot),
    "inner": _binary("inner", real_inner, _reduce.inner),
    "outer": _binary("outer", real_outer, _reduce.outer),
    "ger": _binary("ger", real_outer, _reduce.outer),
    "resolve_neg": resolve_neg,
    "reshape": routed("reshape", ops.reshape, _shape.reshape),
    "permute": routed("permute", ops.permute, _shape.permute),
    "transpose": routed("transpose", ops.transpose, _shape.transpose),
    "swapaxes": routed("swapaxes", ops.swapaxes, _shape.transpose),
    "swapdims": routed("swapdims", ops.swapaxes, _shape.transpose),
    "unsqueeze": routed("unsqueeze", ops.unsqueeze, _shape.unsqueeze),
    "squeeze": routed("squeeze", ops.squeeze, _shape.squeeze),
    "flatten": routed("flatten", ops.flatten, _shape.flatten),
    "clone": routed("clone", ops.clone, _shape.clone),
    "cat": routed("cat", ops.cat, _shape.cat),
    "concat": routed("concat", ops.cat, _shape.cat),
    "concatenate": routed("concatenate", ops.cat, _shape.cat),
    "stack": routed("stack", ops.stack, _shape.stack),
    "add": _binary("add", ops.add, _math.add),
    "sub": _binary("sub", ops.sub, _math.sub),
    "subtract": _binary("subtract", ops.sub, _math.sub),
    "mul": _binary("mul", ops.mul, _math.mul),
    "multiply": _binary("multiply", ops.mul, _math.mul),
    "div": _binary("div", ops.div, _math.div),
    "divide": _binary("divide", ops.div, _math.div),
    "true_divide": _binary("true_divide", ops.div, _math.div),
    "pow": _pow_any(ops.pow),
    "is_tensor": lambda obj: isinstance(obj, (Tensor, ComplexTensor)),
    "allclose": _binary("allclose", ops_extra.allclose, _math.allclose),
    "isclose": _binary("isclose", ops_extra.isclose, _math.isclose),
    "equal": _binary("equal", ops_extra.equal, _math.equal),
    "einsum": _einsum_any(ops.einsum),
    "matmul": _matmul_any(fast_kernels.matmul),
}
