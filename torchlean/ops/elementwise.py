"""Elementwise ops with NumPy broadcasting. Each forward is one primitive; each VJP is its _bwd
primitive (or a product); broadcast operands are expanded first so their VJP sums back."""

from __future__ import annotations

from typing import Any

from .. import autograd
from .._validate import complex_refusal, real_arg
from ..errors import DTypeError
from ..runtime import primitives as P
from ..runtime.buffer import Buffer
from . import integer
from ._base import Tensor, broadcast_shapes, fbuf, new, operand, same_device
from .shape import expand


def _unary(name: str, x: Tensor, fwd, vjp_of, saves: str = "xy"):
    """out = fwd(xb); vjp_of(xb, yb, g) -> dx. ``saves`` names the buffers the VJP reads ("x", "y",
    both or ""): the node keeps only those (the others come as None), as PyTorch saves only what
    its derivative formula uses, so that an activation nobody else needs is freed during forward."""
    if not isinstance(x, Tensor):
        raise complex_refusal(name, "input", x)
    xb = fbuf(name, x)
    yb = fwd(xb)
    kx = xb if "x" in saves else None
    ky = yb if "y" in saves else None
    return autograd.record(name, new(yb, x.shape), (x,), lambda g: (vjp_of(kx, ky, g),))


def abs(x: Tensor) -> Tensor:
    if isinstance(x, Tensor) and x._buf is None:
        return integer.abs(x)
    return _unary("abs", x, P.abs, lambda xb, yb, g: P.abs_bwd(xb, g), "x")


def sqrt(x: Tensor) -> Tensor:
    return _unary("sqrt", x, P.sqrt, lambda xb, yb, g: P.sqrt_bwd(xb, g), "x")


def exp(x: Tensor) -> Tensor:
    return _unary("exp", x, P.exp, lambda xb, yb, g: P.mul(g, yb), "y")


def log(x: Tensor) -> Tensor:
    return _unary("log", x, P.log, lambda xb, yb, g: P.div(g, xb), "x")


def reciprocal(x: Tensor) -> Tensor:
    # d(1/x) = -dy / x^2 = -dy * y * y
    return _unary("inv", x, P.inv, lambda xb, yb, g: P.scale(P.mul(P.mul(g, yb), yb), -1.0), "y")


def relu(x: Tensor) -> Tensor:
    # The VJP reads the output, as PyTorch's: y > 0 exactly where x > 0 (relu keeps x there and
    # gives 0 or NaN elsewhere), so the gradient is the same bits, and the next layer, which saves
    # y as its input anyway, shares it instead of x staying alive as well.
    return _unary("relu", x, P.relu, lambda xb, yb, g: P.relu_bwd(yb, g), "y")


def leaky_relu(x: Tensor, slope: float) -> Tensor:
    """x where x > 0, else slope * x; the VJP is PyTorch's formula (slope at x == 0).

    With slope >= 0 the VJP reads the output, as relu's: y > 0 exactly where x > 0 (a NaN stays
    NaN), so leaky_relu_bwd(y) is the same bits, and the input (a batch norm's output, say) is freed
    during forward: the memory PyTorch saves with ``inplace=True``. A negative slope flips signs:
    then it reads x."""
    slope = real_arg("leaky_relu", "negative_slope", slope)
    if slope >= 0.0:
        return _unary("leaky_relu", x, lambda xb: P.leaky_relu(xb, slope),
                      lambda xb, yb, g: P.leaky_relu_bwd(yb, g, slope), "y")
    return _unary("leaky_relu", x, lambda xb: P.leaky_relu(xb, slope),
                  lambda xb, yb, g: P.leaky_relu_bwd(xb, g, slope), "x")


def sigmoid(x: Tensor) -> Tensor:
    return _unary("sigmoid", x, P.sigmoid, lambda xb, yb, g: P.sigmoid_bwd(yb, g), "y")


def tanh(x: Tensor) -> Tensor:
    return _unary("tanh", x, P.tanh, lambda xb, yb, g: P.tanh_bwd(yb, g), "y")


def softplus(x: Tensor) -> Tensor:
    return _unary("softplus", x, P.softplus, lambda xb, yb, g: P.softplus_bwd(xb, g), "x")


def safe_log(x: Tensor) -> Tensor:
    """log(softplus(x) + 1e-6): a log that is finite and smooth everywhere (the seed's safe_log)."""
    return _unary("safe_log", x, P.safe_log, lambda xb, yb, g: P.safe_log_bwd(xb, g), "x")


def neg(x: Tensor) -> Tensor:
    if isinstance(x, Tensor) and x._buf is None:
        return integer.neg(x)
    return _unary("neg", x, lambda xb: P.scale(xb, -1.0), lambda xb, yb, g: P.scale(g, -1.0), "")


def clamp(x: Tensor, min: float | None = None, max: float | None = None) -> Tensor:
    """min(max(x, min), max); the gradient passes strictly inside (min, max). NaN propagates."""
    lo = float("-inf") if min is None else real_arg("clamp", "min", min)
    hi = float("inf") if max is None else real_arg("clamp", "max", max)
    return _unary("clamp", x, lambda xb: P.clamp(xb, lo, hi), lambda xb, yb, g: P.clamp_bwd(xb, g, lo, hi), "x")


def _pair(name: str, a: Any, b: Any) -> tuple[Tensor, Tensor]:
    """Tensor operands of one shape and device: scalars/arrays converted, shapes broadcast."""
    if (isinstance(a, Tensor) and isinstance(b, Tensor) and a._buf is not None and b._buf is not None
            and a._shape == b._shape and a._device == b._device):
        return a, b  # the common case: two float tensors of one shape, nothing to convert or check
    like = a if isinstance(a, Tensor) else b
    a, b = operand(name, a, like), operand(name, b, like)
    same_device(name, a, b)
    if a.shape != b.shape:
        shape = broadcast_shapes(name, a.shape, b.shape)
        a, b = expand(a, shape), expand(b, shape)
    return a, b


def _binary(name: str, a: Any, b: Any, fwd, vjp, saves: str = "aby"):
    """out = fwd(ab, bb); vjp(ab, bb, yb, g) -> (da, db). ``saves``: the buffers the VJP reads (as
    _unary's; the others come as None)."""
    if (isinstance(a, Tensor) and isinstance(b, Tensor) and a._buf is not None and b._buf is not None
            and a._shape == b._shape and a._device == b._device):
        ab, bb = a._buf, b._buf  # the common case: two float tensors of one shape (as in _pair)
    else:
        out = integer.arith(name, a, b)  # an integer or bool result (None: PyTorch's result is float32)
        if out is not None:
            return out
        a, b = _pair(name, a, b)
        ab, bb = fbuf(name, a), fbuf(name, b)
    yb = fwd(ab, bb)
    ka = ab if "a" in saves else None
    kb = bb if "b" in saves else None
    ky = yb if "y" in saves else None
    return autograd.record(name, new(yb, a.shape), (a, b), lambda g: vjp(ka, kb, ky, g))


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _cpu_scalar(x: Any, c: Any) -> float | None:
    """c's value where ``x op c`` can run as the scalar primitive with the same bits (scale,
    add_scalar: c rounded to float32, which c already is): c a one-element float tensor, x a float
    tensor of the broadcast shape, both on the CPU, nothing to record. Expanding c instead writes
    and reads a tensor of x's size (clip_grad_norm_'s coefficient on an embedding's gradient). On
    CUDA, reading c would wait for the device, so the broadcast stays there."""
    if (isinstance(x, Tensor) and isinstance(c, Tensor) and x._buf is not None and c._buf is not None
            and x._device == "cpu" and c._device == "cpu" and c._buf.size == 1 and x._buf.size > 1
            and len(c._shape) <= len(x._shape)
            and not (autograd.is_grad_enabled() and (x.requires_grad or c.requires_grad))):
        return float(c._buf.to_numpy()[0])
    return None


def add(a: Any, b: Any) -> Tensor:
    if isinstance(a, Tensor) and _is_number(b):
        if a._buf is None and (out := integer.arith("add", a, b)) is not None:
            return out
        return _unary("add_scalar", a, lambda xb: P.add_scalar(xb, b), lambda xb, yb, g: g, "")
    if isinstance(b, Tensor) and _is_number(a):
        return add(b, a)
    if (c := _cpu_scalar(a, b)) is not None:
        return add(a, c)
    if (c := _cpu_scalar(b, a)) is not None:
        return add(b, c)
    return _binary("add", a, b, P.add, lambda ab, bb, yb, g: (g, g), "")


def sub(a: Any, b: Any) -> Tensor:
    if isinstance(a, Tensor) and _is_number(b):
        if a._buf is None and (out := integer.arith("sub", a, b)) is not None:
            return out
        return add(a, -b)
    if isinstance(b, Tensor) and _is_number(a):
        if b._buf is None and (out := integer.arith("sub", a, b)) is not None:
            return out
        return add(neg(b), a)
    if (c := _cpu_scalar(a, b)) is not None:
        return add(a, -c)  # x - c and x + (-c) round alike (c - x does not: the sign of a zero result)
    return _binary("sub", a, b, P.sub, lambda ab, bb, yb, g: (g, P.scale(g, -1.0)), "")


def mul(a: Any, b: Any) -> Tensor:
    if isinstance(a, Tensor) and _is_number(b):
        if a._buf is None and (out := integer.arith("mul", a, b)) is not None:
            return out
        c = float(b)
        return _unary("scale", a, lambda xb: P.scale(xb, c), lambda xb, yb, g: P.scale(g, c), "")
    if isinstance(b, Tensor) and _is_number(a):
        return mul(b, a)
    if (c := _cpu_scalar(a, b)) is not None:
        return mul(a, c)
    if (c := _cpu_scalar(b, a)) is not None:
        return mul(b, c)
    return _binary("mul", a, b, P.mul, lambda ab, bb, yb, g: (P.mul(g, bb), P.mul(g, ab)), "ab")


def div(a: Any, b: Any) -> Tensor:
    if isinstance(a, Tensor) and _is_number(b):
        return mul(a, 1.0 / float(b)) if float(b) != 0.0 else _binary("div", a, float(b), P.div, _div_vjp, "by")
    if isinstance(b, Tensor) and _is_number(a):
        return mul(reciprocal(b), a)
    return _binary("div", a, b, P.div, _div_vjp, "by")


def _div_vjp(ab: Buffer, bb: Buffer, yb: Buffer, g: Buffer):
    # d(a/b) = g / b, -g * (a/b) / b
    gb = P.div(g, bb)
    return gb, P.scale(P.mul(gb, yb), -1.0)


def remainder(a: Any, b: Any) -> Tensor:
    """``a % b`` with the sign of ``b`` (PyTorch's ``remainder``): integers stay integers; floats are
    a - floor(a / b) * b, where floor(a / b) is a constant (the gradient PyTorch gives: 1 and -floor(a / b))."""
    out = integer.remainder(a, b)
    if out is not None:
        return out
    return sub(a, mul(integer.floor_divide(a, b), b))


def maximum(a: Any, b: Any) -> Tensor:
    """Elementwise fmax (a NaN loses to a number, unlike torch.maximum); a tie splits the gradient."""
    return _binary("max", a, b, P.max, lambda ab, bb, yb, g: P.max_bwd(ab, bb, g), "ab")


def minimum(a: Any, b: Any) -> Tensor:
    """Elementwise fmin (a NaN loses to a number, unlike torch.minimum); a tie splits the gradient."""
    return _binary("min", a, b, P.min, lambda ab, bb, yb, g: P.min_bwd(ab, bb, g), "ab")


def pow(x: Tensor, exponent: Any) -> Tensor:
    """x ** p for p in {0, 0.5, 1, 2, -1} or any integer p >= 0 (repeated products)."""
    if isinstance(x, Tensor) and x._buf is None and (out := integer.pow(x, exponent)) is not None:
        return out  # an integer tensor to a non-negative integer power stays an integer tensor
    if not _is_number(exponent):
        raise DTypeError(f"pow: only a constant Python exponent is supported, got {type(exponent).__name__}")
    p = float(exponent)
    if p == 2.0:
        return mul(x, x)
    if p == 0.5:
        return sqrt(x)
    if p == 1.0:
        return x
    if p == -1.0:
        return reciprocal(x)
    if p == 0.0:
        return add(mul(x, 0.0), 1.0)
    if p.is_integer() and p > 0:
        out = x
        for _ in range(int(p) - 1):
            out = mul(out, x)
        return out
    raise DTypeError(f"pow: exponent {exponent} is not supported (use exp(p * log(x)) for x > 0)")
