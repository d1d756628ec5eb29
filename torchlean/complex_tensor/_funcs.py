"""Complex elementwise functions (exp, log, sqrt, powers, trigonometric and hyperbolic functions,
sgn and the non-finite tests), each a composition of real ops on the parts, so autograd gives
PyTorch's conjugate-Wirtinger gradient with no hand-written backward.

Numerical care, in float32:

* magnitudes are taken after scaling by m = max(|x|, |y|) (``scaled``), so |z|, log|z|, 1/z and
  sqrt(z) neither overflow for parts near the float32 maximum nor underflow for tiny ones. m is a
  constant on the tape: each formula is exactly independent of m, so its gradient is unchanged.
* a constant sign c = +-1 picks the numerically stable form of sqrt and tanh; both forms are the
  same analytic function, so the gradient is right on both sides (the imaginary axis included).
* where a finite formula would give inf * 0 = nan for an exactly-zero imaginary part
  (exp(inf + 0j), sinh(100 + 0j)) the part is 0, as PyTorch's.

The inverse functions follow Kahan ("Branch cuts for complex elementary functions", 1987): asin,
acos and acosh from the square roots of 1 -+ z (or z -+ 1) and the real atan2 and asinh, with no
cancellation near the branch points; asinh(z) = -i asin(iz), atanh from log1p, atan(z) = -i atanh(iz).
log1p(z) = log|1 + z| + i arg(1 + z) with log|1 + z| = log1p(x (2 + x) + y^2) / 2 for small z;
expm1(z) = expm1(x) cos y - 2 sin^2(y/2) + i e^x sin y, likewise.

Known deviations from PyTorch: exp/sinh/cosh/sin/cos overflow as soon as e^|part| does (exp
matches PyTorch there; PyTorch's sinh/cosh stay finite up to |x| ~ 89.4); a few C99 special values
with an infinite imaginary part differ (sin(0 + inf j) is nan + nan j, PyTorch 0 + inf j);
sigmoid(-inf + yj) is 0 (PyTorch nan); log1p, atanh and atan overflow for |z| above about 1.8e19
(the square in log|1 + z|), asin/acos/acosh above about 3.4e38 / 2; on the branch cuts themselves
the side a signed zero picks may differ from PyTorch's.
"""

from __future__ import annotations

import cmath
import math
import numbers
from typing import Any

from .. import autograd, ops
from .._validate import type_name
from ..errors import DTypeError
from ..ops import extra as ops_extra
from ..ops import math as ops_math
from ..ops.integer import logical, logical_not
from ..tensor import Tensor
from ._core import ComplexTensor
from ._math import abs as cabs, add, angle, mul, operand_parts, pack, parts, reciprocal, scaled
from ._math import pow as int_pow

__all__ = ["exp", "log", "log2", "log10", "sqrt", "rsqrt", "square", "pow", "rpow", "sin", "cos", "tan",
           "sinh", "cosh", "tanh", "sigmoid", "sgn", "isnan", "isinf", "isfinite", "nan_to_num", "real_sinh",
           "real_cosh", "log1p", "expm1", "asin", "acos", "atan", "asinh", "acosh", "atanh"]


def _c(op: str, z: Any) -> ComplexTensor:
    if not isinstance(z, ComplexTensor):
        raise DTypeError(f"{op}: expected a complex Tensor for input, got {type_name(z)}")
    return z


def _and(a: Tensor, b: Tensor) -> Tensor:
    return logical("logical_and", a, b)


def _or(a: Tensor, b: Tensor) -> Tensor:
    return logical("logical_or", a, b)


def _times(a: Tensor, b: Tensor) -> Tensor:
    """a * b, but 0 where b is exactly 0 and a is not finite (inf * 0 would be nan)."""
    out = ops.mul(a, b)
    with autograd.no_grad():
        bad = _and(b == 0.0, logical_not(ops_math.isfinite(a)))
    return ops_extra.where(bad, 0.0, out)


def _sign_const(x: Tensor) -> Tensor:
    """+1 where x >= 0 (+0 and -0 included), -1 elsewhere; a constant (no gradient)."""
    with autograd.no_grad():
        return ops_extra.where(x >= 0.0, 1.0, -1.0)


def _copysign_one(y: Tensor) -> Tensor:
    """+1 or -1 with the sign of y, -0 giving -1 (1 / -0 is -inf); a constant."""
    with autograd.no_grad():
        neg = _or(y < 0.0, _and(y == 0.0, ops.div(1.0, y) < 0.0))
        return ops_extra.where(neg, -1.0, 1.0)


# -- exponential and logarithm -------------------------------------------------------------
def exp(z: ComplexTensor) -> ComplexTensor:
    """e^x (cos y + i sin y)."""
    x, y = parts(_c("exp", z))
    ex = ops.exp(x)
    return pack(ops.mul(ex, ops_math.cos(y)), _times(ex, ops_math.sin(y)), "exp")


def _log_abs(z: ComplexTensor) -> Tensor:
    """log|z| = log m + log(s) / 2 (-inf at 0, inf for an infinite part)."""
    _, _, m, _, _, s = scaled(z)
    return ops.add(ops.mul(ops.log(s), 0.5), ops.log(m))


def log(z: ComplexTensor) -> ComplexTensor:
    """The principal branch: log|z| + i angle(z), angle in (-pi, pi] (the sign of a zero imaginary
    part picks the side of the cut, as PyTorch's)."""
    return pack(_log_abs(_c("log", z)), angle(z), "log")


def log2(z: ComplexTensor) -> ComplexTensor:
    return mul(log(_c("log2", z)), 1.0 / math.log(2.0))


def log10(z: ComplexTensor) -> ComplexTensor:
    return mul(log(_c("log10", z)), 1.0 / math.log(10.0))


def sqrt(z: ComplexTensor) -> ComplexTensor:
    """The principal square root (real part >= 0), with t = sqrt((|z| + |x|) / 2):
    x >= 0: t + i y / (2t);  x < 0: |y| / (2t) + i sign(y) t (-0 in y gives the lower side)."""
    x, y = parts(_c("sqrt", z))
    c, sy = _sign_const(x), _copysign_one(y)
    t = ops.sqrt(ops.add(ops.mul(cabs(z), 0.5), ops.mul(ops.mul(x, c), 0.5)))
    with autograd.no_grad():
        pos, yinf = x >= 0.0, ops_math.isinf(y)
        t0 = t == 0.0
    t2 = ops.mul(ops_extra.where(t0, 1.0, t), 2.0)  # at z = 0 the quotients below are +-0
    other = ops.div(ops.mul(y, sy), t2)
    re = ops_extra.where(pos, t, other)
    im = ops_extra.where(pos, ops.div(y, t2), ops.mul(t, sy))
    # an infinite imaginary part: inf + i y, whatever x is (C99, PyTorch)
    re = ops_extra.where(yinf, math.inf, re)
    im = ops_extra.where(yinf, y, im)
    return pack(re, im, "sqrt")


def rsqrt(z: ComplexTensor) -> ComplexTensor:
    return reciprocal(sqrt(_c("rsqrt", z)))


def square(z: ComplexTensor) -> ComplexTensor:
    return mul(_c("square", z), z)


# -- powers --------------------------------------------------------------------------------
def _zero_base(z: ComplexTensor, out: ComplexTensor, exp_re: Any) -> ComplexTensor:
    """0 ** w is 0 where Re(w) > 0 (exp(w log 0) would be nan)."""
    x, y = parts(z)
    with autograd.no_grad():
        zero = _and(x == 0.0, y == 0.0)
        if isinstance(exp_re, Tensor):
            zero = _and(zero, exp_re > 0.0)
        elif not exp_re > 0:
            return out
    re, im = parts(out)
    return pack(ops_extra.where(zero, 0.0, re), ops_extra.where(zero, 0.0, im), "pow")


def pow(z: Any, exponent: Any) -> ComplexTensor:  # noqa: A001  (PyTorch's name)
    """``z ** w`` for a number or tensor w (real or complex), or a real base with a complex w:
    integer w by repeated products (exact as PyTorch's), 0.5 and -0.5 by sqrt and rsqrt (as
    PyTorch's), anything else exp(w log z) on the principal branch."""
    if not isinstance(z, ComplexTensor):  # a real tensor base and a complex exponent
        from ._shape import as_complex

        if not isinstance(z, Tensor):
            raise DTypeError(f"pow: expected a Tensor for input, got {type_name(z)}")
        z = as_complex("pow", z, exponent)
    if isinstance(exponent, numbers.Number) and not isinstance(exponent, bool):
        w = complex(exponent)
        if w.imag == 0.0:
            p = w.real
            if math.isfinite(p) and p == int(p) and abs(p) <= 1024:
                return int_pow(z, int(p))
            if p == 0.5:
                return sqrt(z)
            if p == -0.5:
                return rsqrt(z)
            lr, th = _log_abs(z), angle(z)  # |z|^p (cos p theta + i sin p theta)
            mag = ops.exp(ops.mul(lr, p))
            pth = ops.mul(th, p)
            return _zero_base(z, pack(ops.mul(mag, ops_math.cos(pth)), _times(mag, ops_math.sin(pth)), "pow"), p)
        return _zero_base(z, exp(mul(log(z), w)), w.real)
    parts_w = operand_parts("pow", exponent)
    if parts_w is None or not isinstance(parts_w[0], Tensor):
        raise DTypeError(f"pow: expected a number or a Tensor for exponent, got {type_name(exponent)}")
    return _zero_base(z, exp(mul(log(z), exponent)), parts_w[0])



def rpow(base: Any, z: ComplexTensor) -> ComplexTensor:
    """``base ** z`` for a number base: exp(z log base) (log base in double precision)."""
    if isinstance(base, ComplexTensor) or isinstance(base, Tensor):
        return pow(base, z)
    if isinstance(z, Tensor):  # a real exponent and a complex base (1j ** x)
        from ._shape import as_complex

        z = as_complex("pow", z, None)
    if isinstance(base, bool) or not isinstance(base, numbers.Number):
        raise DTypeError(f"pow: expected a number or a Tensor for input, got {type_name(base)}")
    b = complex(base)
    if b == 0:  # 0 ** z: 0 where Re z > 0, nan elsewhere (no gradient)
        x, _ = parts(z)
        with autograd.no_grad():
            pos = x > 0.0
            v = ops_extra.where(pos, ops.mul(x, 0.0), math.nan)
        return pack(v, v, "pow")
    lb = cmath.log(b)
    return exp(mul(z, lb if lb.imag != 0.0 else lb.real))


def log1p(z: ComplexTensor) -> ComplexTensor:
    """log(1 + z): log|1 + z| as log1p(x (2 + x) + y^2) / 2 for |z| < 1/2 (small z keep their digits),
    else as log|w| of w = 1 + z (exact in x for x in [-2, -1/2] by Sterbenz: no cancellation near -1)."""
    x, y = parts(_c("log1p", z))
    w = ops.add(x, 1.0)
    t = ops.add(ops.mul(x, ops.add(x, 2.0)), ops.mul(y, y))
    with autograd.no_grad():
        small = ops.add(ops.mul(x, x), ops.mul(y, y)) < 0.25
    re = ops_extra.where(small, ops.mul(ops_math.log1p(t), 0.5), _log_abs(pack(w, y, "log1p")))
    return pack(re, ops_math.atan2(y, w), "log1p")


def expm1(z: ComplexTensor) -> ComplexTensor:
    """exp(z) - 1, accurate for small z: expm1(x) cos y - 2 sin^2(y/2) + i e^x sin y."""
    x, y = parts(_c("expm1", z))
    h = ops_math.sin(ops.mul(y, 0.5))
    re = ops.sub(_times(ops_math.expm1(x), ops_math.cos(y)), ops.mul(ops.mul(h, h), 2.0))
    return pack(re, _times(ops.exp(x), ops_math.sin(y)), "expm1")


# -- trigonometric and hyperbolic ----------------------------------------------------------
def _sinh_cosh(x: Tensor) -> tuple[Tensor, Tensor]:
    """sinh and cosh of a real tensor from expm1 of +-x: accurate near 0, no cancellation."""
    p, n = ops_math.expm1(x), ops_math.expm1(ops.neg(x))
    return ops.mul(ops.sub(p, n), 0.5), ops.add(ops.mul(ops.add(p, n), 0.5), 1.0)


def real_sinh(x: Tensor) -> Tensor:
    return _sinh_cosh(x)[0]


def real_cosh(x: Tensor) -> Tensor:
    return _sinh_cosh(x)[1]


def sinh(z: ComplexTensor) -> ComplexTensor:
    """sinh x cos y + i cosh x sin y."""
    x, y = parts(_c("sinh", z))
    sh, ch = _sinh_cosh(x)
    return pack(_times(sh, ops_math.cos(y)), _times(ch, ops_math.sin(y)), "sinh")


def cosh(z: ComplexTensor) -> ComplexTensor:
    """cosh x cos y + i sinh x sin y."""
    x, y = parts(_c("cosh", z))
    sh, ch = _sinh_cosh(x)
    return pack(_times(ch, ops_math.cos(y)), _times(sh, ops_math.sin(y)), "cosh")


def sin(z: ComplexTensor) -> ComplexTensor:
    """sin x cosh y + i cos x sinh y."""
    x, y = parts(_c("sin", z))
    sh, ch = _sinh_cosh(y)
    return pack(ops.mul(ops_math.sin(x), ch), _times(ops_math.cos(x), sh), "sin")


def cos(z: ComplexTensor) -> ComplexTensor:
    """cos x cosh y - i sin x sinh y."""
    x, y = parts(_c("cos", z))
    sh, ch = _sinh_cosh(y)
    return pack(ops.mul(ops_math.cos(x), ch), ops.neg(_times(ops_math.sin(x), sh)), "cos")


def _tanh_parts(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    """tanh(x + iy) = (sinh 2x + i sin 2y) / (cosh 2x + cos 2y), written with u = e^(-2cx) (c the
    sign of x, a constant): re = c (1 - u^2) / D, im = 2u sin 2y / D, D = 1 + u^2 + 2u cos 2y.
    Both signs give the same function; c = sign(x) keeps u <= 1, so nothing overflows."""
    c = _sign_const(x)
    a = ops.mul(x, c)
    u = ops.exp(ops.mul(a, -2.0))
    y2 = ops.mul(y, 2.0)
    d = ops.add(ops.mul(u, ops.add(u, ops.mul(ops_math.cos(y2), 2.0))), 1.0)
    re = ops.mul(ops.div(ops.neg(ops_math.expm1(ops.mul(a, -4.0))), d), c)
    im = ops.div(ops.mul(ops.mul(u, 2.0), ops_math.sin(y2)), d)
    return re, im


def tanh(z: ComplexTensor) -> ComplexTensor:
    x, y = parts(_c("tanh", z))
    return pack(*_tanh_parts(x, y), "tanh")


def tan(z: ComplexTensor) -> ComplexTensor:
    """tan z = -i tanh(iz): with tanh(-y + ix) = p + iq, tan z = q - ip."""
    x, y = parts(_c("tan", z))
    p, q = _tanh_parts(ops.neg(y), x)
    return pack(q, ops.neg(p), "tan")


def sigmoid(z: ComplexTensor) -> ComplexTensor:
    """1 / (1 + e^-z), PyTorch's formula."""
    return reciprocal(add(exp(neg_z(_c("sigmoid", z))), 1.0))


def neg_z(z: ComplexTensor) -> ComplexTensor:
    return ComplexTensor.from_real_view(ops.neg(z.real_view()), "neg")


def sgn(z: ComplexTensor) -> ComplexTensor:
    """z / |z|, 0 at 0 (value and gradient, as PyTorch's)."""
    x, y = parts(_c("sgn", z))
    a = cabs(z)
    with autograd.no_grad():
        zero = a == 0.0
    safe = ops_extra.where(zero, 1.0, a)
    return pack(ops_extra.where(zero, 0.0, ops.div(x, safe)), ops_extra.where(zero, 0.0, ops.div(y, safe)), "sgn")


# -- tests for non-finite values (bool results, like PyTorch's) -----------------------------
def isnan(z: ComplexTensor) -> Tensor:
    x, y = parts(_c("isnan", z))
    with autograd.no_grad():
        return _or(ops_math.isnan(x), ops_math.isnan(y))


def isinf(z: ComplexTensor) -> Tensor:
    x, y = parts(_c("isinf", z))
    with autograd.no_grad():
        return _or(ops_math.isinf(x), ops_math.isinf(y))


def isfinite(z: ComplexTensor) -> Tensor:
    x, y = parts(_c("isfinite", z))
    with autograd.no_grad():
        return _and(ops_math.isfinite(x), ops_math.isfinite(y))


def nan_to_num(z: ComplexTensor, nan: float = 0.0, posinf: float | None = None,
               neginf: float | None = None) -> ComplexTensor:
    """Each part replaced as the real ``nan_to_num`` does (PyTorch's complex nan_to_num)."""
    r = ops_math.nan_to_num(_c("nan_to_num", z).real_view(), nan, posinf, neginf)
    return ComplexTensor.from_real_view(r, "nan_to_num")



# -- inverse trigonometric and hyperbolic (Kahan's formulas; see the module docstring) -------------
def _sqrt_parts(x: Any, y: Tensor) -> tuple[Tensor, Tensor]:
    return parts(sqrt(pack(x, y, "sqrt")))


def _asin_parts(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    """asin(x + iy) = atan2(x, Re(s1 s2)) + i asinh(Im(conj(s1) s2)), s1 = sqrt(1 - z), s2 = sqrt(1 + z)."""
    a, b = _sqrt_parts(ops.sub(1.0, x), ops.neg(y))
    c, d = _sqrt_parts(ops.add(x, 1.0), y)
    re = ops_math.atan2(x, ops.sub(ops.mul(a, c), ops.mul(b, d)))
    return re, ops_math.asinh(ops.sub(ops.mul(a, d), ops.mul(b, c)))


def asin(z: ComplexTensor) -> ComplexTensor:
    return pack(*_asin_parts(*parts(_c("asin", z))), "asin")


def acos(z: ComplexTensor) -> ComplexTensor:
    """2 atan2(Re s1, Re s2) + i asinh(Im(conj(s2) s1)), s1 = sqrt(1 - z), s2 = sqrt(1 + z)."""
    x, y = parts(_c("acos", z))
    a, b = _sqrt_parts(ops.sub(1.0, x), ops.neg(y))
    c, d = _sqrt_parts(ops.add(x, 1.0), y)
    return pack(ops.mul(ops_math.atan2(a, c), 2.0), ops_math.asinh(ops.sub(ops.mul(c, b), ops.mul(d, a))), "acos")


def acosh(z: ComplexTensor) -> ComplexTensor:
    """asinh(Re(conj(s1) s2)) + 2i atan2(Im s1, Re s2), s1 = sqrt(z - 1), s2 = sqrt(z + 1)."""
    x, y = parts(_c("acosh", z))
    a, b = _sqrt_parts(ops.sub(x, 1.0), y)
    c, d = _sqrt_parts(ops.add(x, 1.0), y)
    return pack(ops_math.asinh(ops.add(ops.mul(a, c), ops.mul(b, d))), ops.mul(ops_math.atan2(b, c), 2.0), "acosh")


def asinh(z: ComplexTensor) -> ComplexTensor:
    """-i asin(iz): with asin(-y + ix) = u + iv, asinh(z) = v - iu."""
    x, y = parts(_c("asinh", z))
    u, v = _asin_parts(ops.neg(y), x)
    return pack(v, ops.neg(u), "asinh")


def _atanh_parts(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    """(log1p(z) - log1p(-z)) / 2."""
    p, q = parts(log1p(pack(x, y, "atanh")))
    r, s = parts(log1p(pack(ops.neg(x), ops.neg(y), "atanh")))
    return ops.mul(ops.sub(p, r), 0.5), ops.mul(ops.sub(q, s), 0.5)


def atanh(z: ComplexTensor) -> ComplexTensor:
    return pack(*_atanh_parts(*parts(_c("atanh", z))), "atanh")


def atan(z: ComplexTensor) -> ComplexTensor:
    """-i atanh(iz): with atanh(-y + ix) = u + iv, atan(z) = v - iu."""
    x, y = parts(_c("atan", z))
    u, v = _atanh_parts(ops.neg(y), x)
    return pack(v, ops.neg(u), "atan")
