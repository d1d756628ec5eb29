"""More elementwise math: the library functions, rounding, powers, tests for
non-finite values and the fused PyTorch helpers (lerp, addcmul, addcdiv, hypot, nan_to_num).

New primitives (spec, contract, CPU and CUDA kernels): sin, cos, erf, log1p, expm1, floor, ceil,
round, trunc, sign, pow_scalar and the inverse trigonometric and hyperbolic functions (atan, asin,
acos, asinh, acosh, atanh, atan2). Everything else is composed from primitives where that is exact
(square = x * x, frac = x - trunc(x), the 0/1 masks of isnan/isfinite) or within a couple of
roundings of PyTorch's own formula (rsqrt, log2, log10, tan, erfc, lerp, hypot).
"""

from __future__ import annotations

import math
from typing import Any

from .. import autograd
from .._validate import real_arg, type_name
from ..errors import ArgumentError, DTypeError
from ..runtime import primitives as P
from ..runtime.buffer import Buffer, full as full_buffer, zeros as zeros_buffer
from ._base import Tensor, broadcast_shapes, fbuf, new, operand, same_device, tensor_arg
from .elementwise import add, clamp, div, log, maximum, minimum, mul, neg, reciprocal, sqrt, sub
from .results import bool_result
from .shape import expand

__all__ = ["sin", "cos", "tan", "erf", "erfc", "log1p", "expm1", "log2", "log10", "floor", "ceil", "round",
           "trunc", "frac", "sign", "rsqrt", "square", "pow", "float_power", "clamp_min", "clamp_max", "clamp_t",
           "isnan", "isinf", "isfinite", "isposinf", "isneginf", "nan_to_num", "lerp", "addcmul", "addcdiv",
           "hypot", "exp2", "atan", "asin", "acos", "asinh", "acosh", "atanh", "atan2"]


def _unary(name: str, x: Any, fwd, vjp_of) -> Tensor:
    """out = fwd(xb), recorded with dx = vjp_of(xb, yb, g)."""
    if not isinstance(x, Tensor):
        tensor_arg(name, "input", x)
    xb = fbuf(name, x)
    yb = fwd(xb)
    return autograd.record(name, new(yb, x.shape), (x,), lambda g: (vjp_of(xb, yb, g),))


def _zero_grad(xb: Buffer, yb: Buffer, g: Buffer) -> Buffer:
    # a step function: zero gradient everywhere (as PyTorch), NaN in g included
    return zeros_buffer(g.size, g.device)


def sin(x: Tensor) -> Tensor:
    return _unary("sin", x, P.sin, lambda xb, yb, g: P.mul(g, P.cos(xb)))


def cos(x: Tensor) -> Tensor:
    return _unary("cos", x, P.cos, lambda xb, yb, g: P.scale(P.mul(g, P.sin(xb)), -1.0))


def tan(x: Tensor) -> Tensor:
    return div(sin(x), cos(x))


_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def erf(x: Tensor) -> Tensor:
    # d erf = 2/sqrt(pi) exp(-x^2)
    return _unary("erf", x, P.erf,
                  lambda xb, yb, g: P.mul(g, P.scale(P.exp(P.scale(P.mul(xb, xb), -1.0)), _TWO_OVER_SQRT_PI)))


def erfc(x: Tensor) -> Tensor:
    return add(neg(erf(x)), 1.0)


def log1p(x: Tensor) -> Tensor:
    return _unary("log1p", x, P.log1p, lambda xb, yb, g: P.div(g, P.add_scalar(xb, 1.0)))


def expm1(x: Tensor) -> Tensor:
    return _unary("expm1", x, P.expm1, lambda xb, yb, g: P.mul(g, P.add_scalar(yb, 1.0)))


# -- inverse trigonometric and hyperbolic functions --------------------------------------------
# The VJPs are PyTorch's derivative formulas, operation for operation, so the edges agree: asin and
# acos give +-inf at |x| = 1, atanh +-inf at +-1, acosh g * rsqrt(x^2 - 1) (finite below -1, NaN
# inside (-1, 1), as PyTorch's), and NaN wherever the formula gives it.
def _one_minus_sq(xb: Buffer) -> Buffer:
    return P.add_scalar(P.scale(P.mul(xb, xb), -1.0), 1.0)  # -x*x + 1 (exact negation, one rounding each)


def _rsqrt(b: Buffer) -> Buffer:
    return P.inv(P.sqrt(b))


def atan(x: Tensor) -> Tensor:
    # d atan = g / (x*x + 1)
    return _unary("atan", x, P.atan, lambda xb, yb, g: P.div(g, P.add_scalar(P.mul(xb, xb), 1.0)))


def asin(x: Tensor) -> Tensor:
    # d asin = g * rsqrt(1 - x*x)
    return _unary("asin", x, P.asin, lambda xb, yb, g: P.mul(g, _rsqrt(_one_minus_sq(xb))))


def acos(x: Tensor) -> Tensor:
    # d acos = g * -rsqrt(1 - x*x)
    return _unary("acos", x, P.acos, lambda xb, yb, g: P.mul(g, P.scale(_rsqrt(_one_minus_sq(xb)), -1.0)))


def asinh(x: Tensor) -> Tensor:
    # d asinh = g * rsqrt(x*x + 1)
    return _unary("asinh", x, P.asinh, lambda xb, yb, g: P.mul(g, _rsqrt(P.add_scalar(P.mul(xb, xb), 1.0))))


def acosh(x: Tensor) -> Tensor:
    # d acosh = g * rsqrt(x*x - 1)
    return _unary("acosh", x, P.acosh, lambda xb, yb, g: P.mul(g, _rsqrt(P.add_scalar(P.mul(xb, xb), -1.0))))


def atanh(x: Tensor) -> Tensor:
    # d atanh = g / (1 - x*x)
    return _unary("atanh", x, P.atanh, lambda xb, yb, g: P.div(g, _one_minus_sq(xb)))


def atan2(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002  (PyTorch's argument name)
    """torch.atan2(input, other): the angle of the point (other, input), the two broadcast."""
    a, b = tensor_arg("atan2", "input", input), tensor_arg("atan2", "other", other)
    a, b = operand("atan2", a, a), operand("atan2", b, a)  # integer and bool tensors compute in float32
    same_device("atan2", a, b)
    if a.shape != b.shape:
        shape = broadcast_shapes("atan2", a.shape, b.shape)
        a, b = expand(a, shape), expand(b, shape)
    ab, bb = fbuf("atan2", a), fbuf("atan2", b)
    return autograd.record("atan2", new(P.atan2(ab, bb), a.shape), (a, b), lambda g: _atan2_vjp(ab, bb, g))


def _atan2_vjp(ab: Buffer, bb: Buffer, g: Buffer) -> tuple[Buffer, Buffer]:
    # PyTorch's: r = 1 / (a*a + b*b), taken as 0 where a*a + b*b is 0 (both squares underflow);
    # da = (g * b) * r, db = (g * -a) * r. With s = sign(d) (0 or 1; d >= 0 or NaN, and NaN gives 0),
    # r = inv(d + (1 - s)) * s: exactly 1/d where d > 0, 0 where d == 0, NaN where d is NaN.
    d = P.add(P.mul(ab, ab), P.mul(bb, bb))
    s = P.sign(d)
    r = P.mul(P.inv(P.add(d, P.add_scalar(P.scale(s, -1.0), 1.0))), s)
    return P.mul(P.mul(g, bb), r), P.mul(P.mul(g, P.scale(ab, -1.0)), r)


def exp2(x: Tensor) -> Tensor:
    return pow(2.0, x)


def log2(x: Tensor) -> Tensor:
    return mul(log(x), 1.0 / math.log(2.0))


def log10(x: Tensor) -> Tensor:
    return mul(log(x), 1.0 / math.log(10.0))


def floor(x: Tensor) -> Tensor:
    return _int_valued("floor", x, P.floor)


def ceil(x: Tensor) -> Tensor:
    return _int_valued("ceil", x, P.ceil)


def trunc(x: Tensor) -> Tensor:
    return _int_valued("trunc", x, P.trunc)


def sign(x: Tensor) -> Tensor:
    return _int_valued("sign", x, P.sign)


def _int_valued(name: str, x: Any, prim) -> Tensor:
    if isinstance(x, Tensor) and x._buf is None:
        return x.clone() if name != "sign" else _host_sign(x)  # integer tensors: already integers
    return _unary(name, x, prim, _zero_grad)


def _host_sign(x: Tensor) -> Tensor:
    import numpy as np

    from .results import array_result

    return array_result(np.sign(x.numpy()), x.device)


def round(x: Tensor, decimals: int = 0) -> Tensor:
    """Half to even, as torch.round; ``decimals`` rounds x * 10**decimals and divides back."""
    if type(decimals) is not int:
        raise ArgumentError(f"round: decimals must be an int, got {type_name(decimals)}")
    if decimals == 0:
        return _int_valued("round", x, P.round)
    c = 10.0 ** decimals
    return div(_int_valued("round", mul(x, c), P.round), c) if decimals > 0 else \
        mul(_int_valued("round", div(x, 10.0 ** -decimals), P.round), 10.0 ** -decimals)


def frac(x: Tensor) -> Tensor:
    return sub(x, trunc(x))


def rsqrt(x: Tensor) -> Tensor:
    return reciprocal(sqrt(x))


def square(x: Tensor) -> Tensor:
    return mul(x, x)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def pow(x: Any, exponent: Any) -> Tensor:
    """torch.pow: tensor ** number (any real exponent), number ** tensor and tensor ** tensor.

    A tensor exponent goes through exp(e * log(base)): a negative base gives NaN there even for an
    integer exponent (PyTorch gives the real power); use a number exponent for that."""
    if isinstance(x, Tensor) and _is_number(exponent):
        return _pow_number(x, float(exponent))
    if _is_number(x) and isinstance(exponent, Tensor):
        base = float(x)
        if base == 1.0:
            return add(mul(exponent, 0.0), 1.0)
        return _unary("pow_base", exponent, lambda eb: P.exp(P.scale(eb, math.log(base) if base > 0 else
                                                                     (float("-inf") if base == 0 else float("nan")))),
                      lambda eb, yb, g: P.mul(g, P.scale(yb, math.log(base) if base > 0 else float("nan"))))
    if isinstance(x, Tensor) or isinstance(exponent, Tensor):
        like = x if isinstance(x, Tensor) else exponent
        b, e = operand("pow", x, like), operand("pow", exponent, like)
        if isinstance(x, Tensor) and e.numel() == 1 and e.ndim <= b.ndim and not e.requires_grad:
            return _pow_number(b, float(e.item()))  # a constant exponent: the exact real power
        from .elementwise import exp

        return exp(mul(e, log(b)))
    raise DTypeError(f"pow: expected a Tensor for input or exponent, got {type_name(x)} and {type_name(exponent)}")


def _pow_number(x: Tensor, p: float) -> Tensor:
    if not isinstance(x, Tensor):
        tensor_arg("pow", "input", x)
    if x._buf is None:
        from . import integer

        out = integer.pow(x, int(p) if p.is_integer() else p)
        if out is not None:
            return out  # an integer tensor to a non-negative integer power stays an integer tensor
        x = x.float()
    if p == 2.0:
        return mul(x, x)  # exact product, the common case (x ** 2)
    if p == 1.0:
        return mul(x, 1.0)
    if p == 0.0:
        return _unary("pow", x, lambda xb: P.pow_scalar(xb, 0.0), _zero_grad)
    # d x**p = p x**(p-1)
    return _unary("pow", x, lambda xb: P.pow_scalar(xb, p),
                  lambda xb, yb, g: P.mul(g, P.scale(P.pow_scalar(xb, p - 1.0), p)))


def float_power(x: Any, exponent: Any) -> Tensor:
    raise DTypeError("float_power: computes in float64 in PyTorch; torchlean computes in float32 only "
                     "(use pow)")


def clamp_min(x: Tensor, min: Any) -> Tensor:
    return clamp_t(x, min=min)


def clamp_max(x: Tensor, max: Any) -> Tensor:
    return clamp_t(x, max=max)


def clamp_t(x: Tensor, min: Any = None, max: Any = None) -> Tensor:
    """clamp with number or tensor bounds (a tensor bound broadcasts; the gradient flows to the
    bound where it is the result, as in PyTorch)."""
    if not isinstance(min, Tensor) and not isinstance(max, Tensor):
        return clamp(x, min, max)
    out = x
    if min is not None:
        out = maximum(out, min)
    if max is not None:
        out = minimum(out, max)
    return out


# -- tests for non-finite values: exact 0/1 masks from primitives, on the tensor's device -------
def _nan01(xb: Buffer) -> Buffer:
    # |abs_bwd(x, 1)| = |np.sign(x)| is NaN at NaN, else 0 or 1; fmax(., -1) turns NaN into -1;
    # -(.) then relu: 1 at NaN only
    a = P.abs(P.abs_bwd(xb, full_buffer(xb.size, 1.0, xb.device)))
    return P.relu(P.scale(P.max(a, full_buffer(xb.size, -1.0, xb.device)), -1.0))


def _finite01(xb: Buffer) -> Buffer:
    # x - x is 0 for finite x, NaN for inf and NaN; fmax(., -1) + 1: 1 or 0
    d = P.sub(xb, xb)
    return P.add_scalar(P.max(d, full_buffer(xb.size, -1.0, xb.device)), 1.0)


def _posinf01(xb: Buffer, inf01: Buffer) -> Buffer:
    return P.mul(inf01, P.relu(P.sign(xb)))  # sign is 0 at NaN, 1 at +inf


def _inf01(xb: Buffer) -> Buffer:
    return P.sub(P.sub(full_buffer(xb.size, 1.0, xb.device), _finite01(xb)), _nan01(xb))


def _mask(op: str, x: Any, make) -> Tensor:
    tensor_arg(op, "input", x)
    if x._buf is None:  # integer and boolean tensors are always finite
        import numpy as np

        hv = np.zeros(x.shape, np.bool_) if op != "isfinite" else np.ones(x.shape, np.bool_)
        return bool_result(hv, x.device)
    return bool_result(new(make(x._buf), x.shape), x.device)


def isnan(x: Tensor) -> Tensor:
    return _mask("isnan", x, _nan01)


def isfinite(x: Tensor) -> Tensor:
    return _mask("isfinite", x, _finite01)


def isinf(x: Tensor) -> Tensor:
    return _mask("isinf", x, _inf01)


def isposinf(x: Tensor) -> Tensor:
    return _mask("isposinf", x, lambda xb: _posinf01(xb, _inf01(xb)))


def isneginf(x: Tensor) -> Tensor:
    def make(xb):
        inf = _inf01(xb)
        return P.sub(inf, _posinf01(xb, inf))
    return _mask("isneginf", x, make)


_F32_MAX = 3.4028234663852886e38


def nan_to_num(x: Tensor, nan: float = 0.0, posinf: float | None = None, neginf: float | None = None) -> Tensor:
    """NaN -> nan, +inf -> posinf (default the largest float32), -inf -> neginf; the gradient
    passes where x is finite. Every step is exact: the replacements land in slots that are 0."""
    tensor_arg("nan_to_num", "input", x)
    if x._buf is None:
        return x.clone()
    nan_v = real_arg("nan_to_num", "nan", nan)
    pos_v = _F32_MAX if posinf is None else real_arg("nan_to_num", "posinf", posinf)
    neg_v = -_F32_MAX if neginf is None else real_arg("nan_to_num", "neginf", neginf)

    def fwd(xb: Buffer) -> Buffer:
        zero = zeros_buffer(xb.size, xb.device)
        z = P.add(P.max(xb, zero), P.min(xb, zero))  # NaN -> 0, everything else unchanged (-0 -> +0)
        fin = _finite01(xb)
        nan01 = _nan01(xb)
        inf01 = P.sub(P.sub(full_buffer(xb.size, 1.0, xb.device), fin), nan01)
        pos01 = _posinf01(xb, inf01)
        neg01 = P.sub(inf01, pos01)
        out = P.mul(P.clamp(z, -_F32_MAX, _F32_MAX), fin)  # finite values; 0 at every non-finite slot
        out = P.add(out, P.scale(nan01, nan_v))
        out = P.add(out, P.scale(pos01, pos_v))
        return P.add(out, P.scale(neg01, neg_v))

    return _unary("nan_to_num", x, fwd, lambda xb, yb, g: P.mul(g, _finite01(xb)))


def lerp(start: Tensor, end: Any, weight: Any) -> Tensor:
    """start + weight * (end - start)."""
    tensor_arg("lerp", "input", start)
    return add(start, mul(weight, sub(end, start)))


def addcmul(input: Tensor, tensor1: Any, tensor2: Any, value: float = 1) -> Tensor:
    tensor_arg("addcmul", "input", input)
    prod = mul(tensor1, tensor2)
    return add(input, prod if value == 1 else mul(prod, real_arg("addcmul", "value", value)))


def addcdiv(input: Tensor, tensor1: Any, tensor2: Any, value: float = 1) -> Tensor:
    tensor_arg("addcdiv", "input", input)
    q = div(tensor1, tensor2)
    return add(input, q if value == 1 else mul(q, real_arg("addcdiv", "value", value)))


def hypot(a: Tensor, b: Any) -> Tensor:
    tensor_arg("hypot", "input", a)
    return sqrt(add(mul(a, a), mul(b, b)))
