"""Complex arithmetic as real ops on the parts: z = x + iy is (x, y), two float32 tensors read from
the real view; a result is packed back into a real view (``stack([re, im], -1)``). Every step is a
recorded real op, so the real view's gradient comes out as PyTorch's complex gradient."""

from __future__ import annotations

import builtins
import math
import numbers
from typing import Any

import numpy as np

from .. import autograd, dtypes, ops
from ..ops import extra as ops_extra
from ..ops import math as ops_math
from .._validate import type_name
from ..errors import DTypeError, ShapeError
from ..tensor import Tensor, tensor
from ._core import ComplexTensor

__all__ = ["parts", "pack", "operand_parts", "add", "sub", "mul", "div", "neg", "conj", "abs", "angle", "real",
           "imag", "complex", "polar", "sum", "mean", "pow", "reciprocal", "eq", "ne", "allclose", "isclose",
           "equal", "dims_of"]

# A part is a float32 Tensor, a Python float, or None for an exact zero (a real operand's imaginary part)
Part = Any


def parts(z: ComplexTensor) -> tuple[Tensor, Tensor]:
    """(re, im) of z as differentiable float32 tensors of z's shape."""
    r = z.real_view()
    return r[..., 0], r[..., 1]


def _as_tensor(v: Any, like: Tensor) -> Tensor:
    return v if isinstance(v, Tensor) else ops.add(ops.mul(like, 0.0), float(v))


def pack(re: Part, im: Part, op: str = "complex") -> ComplexTensor:
    """The complex tensor (re + i im): parts broadcast to one shape; a None part is zero."""
    like = re if isinstance(re, Tensor) else im
    if not isinstance(like, Tensor):
        raise DTypeError(f"{op}: expected a tensor part")
    re = ops.mul(like, 0.0) if re is None else _as_tensor(re, like)
    im = ops.mul(like, 0.0) if im is None else _as_tensor(im, re)
    if re.shape != im.shape:
        shape = tuple(np.broadcast_shapes(tuple(re.shape), tuple(im.shape)))
        re = re if tuple(re.shape) == shape else ops.expand(re, shape)
        im = im if tuple(im.shape) == shape else ops.expand(im, shape)
    return ComplexTensor.from_real_view(ops.stack([re, im], -1), op)


def operand_parts(op: str, v: Any) -> tuple[Part, Part] | None:
    """(re, im) of an operand: a ComplexTensor, a real Tensor (im None), a Python/NumPy number;
    None for anything else (the caller answers NotImplemented or raises)."""
    if isinstance(v, ComplexTensor):
        return parts(v)
    if isinstance(v, Tensor):
        return (v if v.dtype.is_floating_point else v.float()), None
    if isinstance(v, (bool, np.bool_)):
        return float(v), None
    if isinstance(v, numbers.Real):
        return float(v), None
    if isinstance(v, numbers.Complex):
        c = builtins.complex(v)
        return c.real, c.imag
    return None


def _need(op: str, v: Any) -> tuple[Part, Part]:
    p = operand_parts(op, v)
    if p is None:
        raise DTypeError(f"{op}: expected a Tensor or a number as an operand, got {type_name(v)}")
    return p


def _mul(a: Part, b: Part) -> Part:
    if a is None or b is None:
        return None
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        return a * b
    if not isinstance(a, Tensor):
        a, b = b, a
    return ops.mul(a, b) if isinstance(b, Tensor) or b != 1.0 else a


def _add(a: Part, b: Part, sign: float = 1.0) -> Part:
    """a + sign * b (None is zero)."""
    if b is None or (not isinstance(b, Tensor) and b == 0.0):
        return a
    if a is None or (not isinstance(a, Tensor) and a == 0.0):
        return ops.neg(b) if sign < 0 and isinstance(b, Tensor) else (-b if sign < 0 else b)
    if not isinstance(a, Tensor):
        return ops.add(ops.neg(b), a) if sign < 0 else ops.add(b, a)
    return ops.sub(a, b) if sign < 0 else ops.add(a, b)


def _result(op: str, re: Part, im: Part) -> ComplexTensor:
    return pack(re, im, op)


def add(a: Any, b: Any, alpha: Any = 1) -> ComplexTensor:
    (ar, ai), (br, bi) = _need("add", a), _need("add", b)
    if alpha != 1:
        br, bi = _mul(br, alpha), _mul(bi, alpha)
    return _result("add", _add(ar, br), _add(ai, bi))


def sub(a: Any, b: Any, alpha: Any = 1) -> ComplexTensor:
    (ar, ai), (br, bi) = _need("sub", a), _need("sub", b)
    if alpha != 1:
        br, bi = _mul(br, alpha), _mul(bi, alpha)
    return _result("sub", _add(ar, br, -1.0), _add(ai, bi, -1.0))


def mul(a: Any, b: Any) -> ComplexTensor:
    (ar, ai), (br, bi) = _need("mul", a), _need("mul", b)
    return _result("mul", _add(_mul(ar, br), _mul(ai, bi), -1.0), _add(_mul(ar, bi), _mul(ai, br)))


def div(a: Any, b: Any) -> ComplexTensor:
    (ar, ai), (br, bi) = _need("div", a), _need("div", b)
    if bi is None:  # a real divisor: each part divided
        return _result("div", _div(ar, br), None if ai is None else _div(ai, br))
    if not isinstance(br, Tensor):  # a complex number: times its reciprocal
        w = 1.0 / builtins.complex(br, bi)
        return mul(ComplexTensor.from_real_view(ops.stack([ar, ai if ai is not None else ops.mul(ar, 0.0)], -1))
                   if isinstance(ar, Tensor) else pack(ar, ai), w)
    _, _, m, brs, bis, den = scaled(b)  # (a conj(b/m)) / (|b/m|^2 m): no overflow or underflow in |b|^2
    re = _add(_mul(ar, brs), _mul(ai, bis))
    im = _add(_mul(ai, brs), _mul(ar, bis), -1.0)
    return _result("div", _div(_div(re, den), m), _div(_div(im, den), m))


def _div(a: Part, b: Part) -> Part:
    if a is None:
        return None
    if isinstance(a, Tensor):
        return ops.div(a, b)
    return ops.mul(ops.reciprocal(b), a)


def reciprocal(z: ComplexTensor) -> ComplexTensor:
    """conj(z/m) / (|z/m|^2 m); PyTorch's values at 0 (inf + nan j) and at infinity (0)."""
    x, _, m, xs, ys, den = scaled(z)
    re, im = ops.div(ops.div(xs, den), m), ops.neg(ops.div(ops.div(ys, den), m))
    with autograd.no_grad():
        zero = den == 0.0
        inf = ops_extra.where(zero, False, ops_math.isinf(den))
    re = ops_extra.where(zero, math.inf, ops_extra.where(inf, 0.0, re))
    im = ops_extra.where(zero, math.nan, ops_extra.where(inf, 0.0, im))
    return _result("reciprocal", re, im)


def neg(z: ComplexTensor) -> ComplexTensor:
    return ComplexTensor.from_real_view(ops.neg(z.real_view()), "neg")


def conj(z: ComplexTensor) -> ComplexTensor:
    r = z.real_view()
    flip = tensor([1.0, -1.0], device=r.device)
    return ComplexTensor.from_real_view(ops.mul(r, flip), "conj")


def _zero_mask(re: Tensor, im: Tensor) -> tuple[Tensor, Tensor]:
    s = ops.add(ops.mul(re, re), ops.mul(im, im))
    return s, (s == 0.0)


def scaled(z: ComplexTensor) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """(x, y, m, xs, ys, s): the parts, a scale m (max(|x|, |y|); 1 where that is 0 or not finite)
    held constant on the tape, the scaled parts x/m, y/m and s = xs^2 + ys^2 (in [1, 2] for a
    finite nonzero z): |z| = m sqrt(s) with no overflow for huge parts nor underflow for tiny ones.
    The formulas built on it do not depend on m, so a constant m leaves their gradients exact."""
    x, y = parts(z)
    with autograd.no_grad():
        m = ops.maximum(ops.abs(x), ops.abs(y))
        bad = ops.integer.logical("logical_or", m == 0.0, ops.integer.logical_not(ops_math.isfinite(m)))
        m = ops_extra.where(bad, 1.0, m)
    xs, ys = ops.div(x, m), ops.div(y, m)
    return x, y, m, xs, ys, ops.add(ops.mul(xs, xs), ops.mul(ys, ys))


def abs(z: ComplexTensor) -> Tensor:  # noqa: A001  (PyTorch's name)
    """|z| = m sqrt((x/m)^2 + (y/m)^2) (``scaled``); at 0 the value is 0 and the gradient 0, as PyTorch's."""
    _, _, m, _, _, s = scaled(z)
    zero = s == 0.0
    safe = ops_extra.where(zero, 1.0, s)  # the masked lanes get no gradient through sqrt
    return ops_extra.where(zero, 0.0, ops.mul(ops.sqrt(safe), m))


def angle(z: ComplexTensor) -> Tensor:
    """atan2(y, x) (the atan2 primitive, on z's device), with PyTorch's gradient (-y, x) / |z|^2 (0 at
    z = 0) taken from a term that is exactly zero in value, (c_x * x + c_y * y) - (c_x * x0 + c_y * y0)
    with the coefficients and x0, y0 held constant: computed from the scaled parts, it neither
    overflows nor underflows where atan2's own VJP (1 / (x^2 + y^2)) would."""
    re, im = parts(z)
    with autograd.no_grad():
        theta = ops_math.atan2(im, re)
    if not (autograd.is_grad_enabled() and z.requires_grad):
        return theta
    with autograd.no_grad():
        x0, y0, m, xs, ys, s0 = scaled(z.detach())  # (-y, x) / |z|^2 = (-ys, xs) / (s m): no overflow
        s0 = ops_extra.where(s0 == 0.0, 1.0, ops.mul(s0, m))
        cx, cy = ops.div(ops.neg(ys), s0), ops.div(xs, s0)
        base = ops.add(ops.mul(cx, x0), ops.mul(cy, y0))
    lin = ops.add(ops.mul(cx, re), ops.mul(cy, im))
    return ops.add(ops.sub(lin, base), theta)


def real(z: Any) -> Tensor:
    """The real part. PyTorch returns a view; this is a new tensor (differentiable, but writing to
    it does not write z)."""
    if isinstance(z, Tensor):
        return z
    return parts(_complex_arg("real", z))[0]


def imag(z: Any) -> Tensor:
    """The imaginary part (a new differentiable tensor, not a view; see ``real``)."""
    if isinstance(z, Tensor):
        raise DTypeError("imag: imag is not implemented for tensors with non-complex dtypes")
    return parts(_complex_arg("imag", z))[1]


def _complex_arg(op: str, z: Any) -> ComplexTensor:
    if not isinstance(z, ComplexTensor):
        raise DTypeError(f"{op}: expected a Tensor for input, got {type_name(z)}")
    return z


def _float_arg(op: str, name: str, t: Any) -> Tensor:
    if not isinstance(t, Tensor):
        raise DTypeError(f"{op}: expected a Tensor for {name}, got {type_name(t)}")
    if t.dtype is not dtypes.float32:
        raise DTypeError(f"{op}: expected a float32 tensor for {name}, got {t.dtype!r} (complex64 is built "
                         f"from float32 parts)")
    return t


def complex(real: Any, imag: Any) -> ComplexTensor:  # noqa: A001  (PyTorch's name)
    """``torch.complex(real, imag)``: float32 tensors (broadcast) as one complex64 tensor."""
    re, im = _float_arg("complex", "real", real), _float_arg("complex", "imag", imag)
    if re.device != im.device:
        raise DTypeError(f"complex: expected real and imag on one device, got {re.device} and {im.device}")
    return pack(re, im, "complex")


def polar(abs: Any, angle: Any) -> ComplexTensor:  # noqa: A002
    """``torch.polar(abs, angle)``: abs * (cos(angle) + i sin(angle))."""
    r, t = _float_arg("polar", "abs", abs), _float_arg("polar", "angle", angle)
    return pack(ops.mul(r, ops.cos(t)), ops.mul(r, ops.sin(t)), "polar")


def dims_of(op: str, dim: Any, ndim: int) -> tuple[int, ...]:
    """Complex dims as non-negative axes (the same axes of the real view, whose last is [re, im])."""
    seq = dim if isinstance(dim, (tuple, list)) else (dim,)
    out = []
    for d in seq:
        if isinstance(d, bool) or not isinstance(d, numbers.Integral):
            raise DTypeError(f"{op}: dim must be an integer, got {d!r} ({type_name(d)})")
        d = int(d)
        if not -max(ndim, 1) <= d < max(ndim, 1):
            raise ShapeError(f"{op}: dim {d} is out of range for a tensor of {ndim} dimensions")
        out.append(d % max(ndim, 1))
    return tuple(out)


def _reduce(op: str, fn, z: ComplexTensor, dim: Any, keepdim: bool) -> ComplexTensor:
    z = _complex_arg(op, z)
    if dim is None or (isinstance(dim, (tuple, list)) and len(dim) == 0):
        dims = tuple(range(z.ndim))
        if not dims:
            return ComplexTensor.from_real_view(ops.mul(z.real_view(), 1.0), op)
        out = fn(z.real_view(), dims, False)
        return ComplexTensor.from_real_view(out if dim is None or not keepdim else
                                            ops.reshape(out, *([1] * z.ndim), 2), op)
    return ComplexTensor.from_real_view(fn(z.real_view(), dims_of(op, dim, z.ndim), keepdim), op)


def sum(z: ComplexTensor, dim: Any = None, keepdim: bool = False) -> ComplexTensor:  # noqa: A001
    return _reduce("sum", ops.sum, z, dim, keepdim)


def mean(z: ComplexTensor, dim: Any = None, keepdim: bool = False) -> ComplexTensor:
    return _reduce("mean", ops.mean, z, dim, keepdim)


def pow(z: ComplexTensor, exponent: Any) -> ComplexTensor:  # noqa: A001
    """``z ** n`` for an integer n (repeated squaring; a negative n through the reciprocal): the
    integer case of ``_funcs.pow``, which takes every other exponent."""
    if isinstance(exponent, bool) or not isinstance(exponent, numbers.Integral):
        raise DTypeError(f"pow: complex tensors support integer exponents only, got {exponent!r} "
                         f"({type_name(exponent)})")
    n = int(exponent)
    base = reciprocal(z) if n < 0 else z
    n = -n if n < 0 else n
    out = None
    while True:
        if n & 1:
            out = base if out is None else mul(out, base)
        n >>= 1
        if not n:
            break
        base = mul(base, base)
    if out is None:  # z ** 0
        re, _ = parts(z)
        return pack(ops.add(ops.mul(re, 0.0), 1.0), None, "pow")
    return out


def _eq_parts(op: str, a: Any, b: Any) -> tuple[Tensor, Tensor]:
    (ar, ai), (br, bi) = _need(op, a), _need(op, b)
    ai = 0.0 if ai is None else ai
    bi = 0.0 if bi is None else bi
    with autograd.no_grad():
        er = (ar == br) if isinstance(ar, Tensor) else (br == ar)
        ei = (ai == bi) if isinstance(ai, Tensor) else (bi == ai)
    return er, ei


def eq(a: Any, b: Any) -> Tensor:
    er, ei = _eq_parts("eq", a, b)
    return ops.integer.logical("logical_and", er, ei)


def ne(a: Any, b: Any) -> Tensor:
    return ops.integer.logical_not(eq(a, b))


def isclose(a: Any, b: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> Tensor:
    """PyTorch's complex isclose: |a - b| <= atol + rtol * |b|."""
    with autograd.no_grad():
        A = a.numpy() if isinstance(a, (ComplexTensor, Tensor)) else np.asarray(a)
        B = b.numpy() if isinstance(b, (ComplexTensor, Tensor)) else np.asarray(b)
        dev = a.device if isinstance(a, (ComplexTensor, Tensor)) else b.device
        return tensor(np.isclose(A, B, rtol=rtol, atol=atol, equal_nan=equal_nan), device=dev)


def allclose(a: Any, b: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> bool:
    return bool(np.all(isclose(a, b, rtol, atol, equal_nan).numpy()))


def equal(a: Any, b: Any) -> bool:
    if not (isinstance(a, (ComplexTensor, Tensor)) and isinstance(b, (ComplexTensor, Tensor))):
        raise DTypeError(f"equal: expected Tensors, got {type_name(a)} and {type_name(b)}")
    return tuple(a.shape) == tuple(b.shape) and bool(np.array_equal(a.numpy(), b.numpy()))
