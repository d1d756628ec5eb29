"""Elementwise primitives on CuPy arrays: one launch of a kernel from elementwise.cu each."""

from __future__ import annotations

import cupy

from .launch import BLOCK, F32, I64, empty, grid_for, kernel

__all__ = [
    "abs", "abs_bwd", "sqrt", "sqrt_bwd", "exp", "log", "inv", "clamp", "clamp_bwd", "max",
    "max_bwd", "min", "min_bwd", "div", "relu", "relu_bwd", "leaky_relu", "leaky_relu_bwd", "add", "sub", "mul",
    "scale", "copy",
    "axpy", "add_scalar", "sigmoid", "sigmoid_bwd", "tanh", "tanh_bwd", "softplus",
    "softplus_bwd", "safe_log", "safe_log_bwd", "fill",
    "sin", "cos", "erf", "log1p", "expm1", "floor", "ceil", "round", "trunc", "sign", "pow_scalar",
    "atan", "asin", "acos", "asinh", "acosh", "atanh", "atan2",
]

_FILE = "elementwise.cu"


def _grid(n: int) -> tuple[int]:
    return (grid_for((n + 3) >> 2),)  # one thread per float4


def _unary(kname: str):
    def fn(x):
        n = x.size
        y = empty(n)
        if n:
            kernel(_FILE, kname)(_grid(n), (BLOCK,), (x, y, I64(n)))
        return y

    fn.__name__ = kname[3:]
    return fn


def _unary_scalar(kname: str):
    def fn(x, c):
        n = x.size
        y = empty(n)
        if n:
            kernel(_FILE, kname)(_grid(n), (BLOCK,), (x, y, I64(n), F32(c)))
        return y

    fn.__name__ = kname[3:]
    return fn


def _binary(kname: str):
    def fn(a, b):
        n = a.size
        y = empty(n)
        if n:
            kernel(_FILE, kname)(_grid(n), (BLOCK,), (a, b, y, I64(n)))
        return y

    fn.__name__ = kname[3:]
    return fn


def leaky_relu(x, slope):
    n = x.size
    y = empty(n)
    if n:
        kernel(_FILE, "tl_leaky_relu")(_grid(n), (BLOCK,), (x, y, I64(n), F32(slope)))
    return y


def leaky_relu_bwd(x, dy, slope):
    n = x.size
    y = empty(n)
    if n:
        kernel(_FILE, "tl_leaky_relu_bwd")(_grid(n), (BLOCK,), (x, dy, y, I64(n), F32(slope)))
    return y


def clamp(x, lo, hi):
    n = x.size
    y = empty(n)
    if n:
        kernel(_FILE, "tl_clamp")(_grid(n), (BLOCK,), (x, y, I64(n), F32(lo), F32(hi)))
    return y


def clamp_bwd(x, dy, lo, hi):
    n = x.size
    y = empty(n)
    if n:
        kernel(_FILE, "tl_clamp_bwd")(_grid(n), (BLOCK,), (x, dy, y, I64(n), F32(lo), F32(hi)))
    return y


def axpy(a, b, c):
    n = a.size
    y = empty(n)
    if n:
        kernel(_FILE, "tl_axpy")(_grid(n), (BLOCK,), (a, b, y, I64(n), F32(c)))
    return y


abs = _unary("tl_abs")
sqrt = _unary("tl_sqrt")
exp = _unary("tl_exp")
log = _unary("tl_log")
inv = _unary("tl_inv")
relu = _unary("tl_relu")
sigmoid = _unary("tl_sigmoid_k")
tanh = _unary("tl_tanh")
softplus = _unary("tl_softplus_k")
safe_log = _unary("tl_safe_log")
sin = _unary("tl_sin")
cos = _unary("tl_cos")
erf = _unary("tl_erf")
log1p = _unary("tl_log1p")
expm1 = _unary("tl_expm1")
atan = _unary("tl_atan")
asin = _unary("tl_asin")
acos = _unary("tl_acos")
asinh = _unary("tl_asinh")
acosh = _unary("tl_acosh")
atanh = _unary("tl_atanh")
floor = _unary("tl_floor")
ceil = _unary("tl_ceil")
round = _unary("tl_round")
trunc = _unary("tl_trunc")
sign = _unary("tl_sign_k")
pow_scalar = _unary_scalar("tl_pow_scalar")
scale = _unary_scalar("tl_scale")
add_scalar = _unary_scalar("tl_add_scalar")

abs_bwd = _binary("tl_abs_bwd")
sqrt_bwd = _binary("tl_sqrt_bwd")
relu_bwd = _binary("tl_relu_bwd")
sigmoid_bwd = _binary("tl_sigmoid_bwd")
tanh_bwd = _binary("tl_tanh_bwd")
softplus_bwd = _binary("tl_softplus_bwd")
safe_log_bwd = _binary("tl_safe_log_bwd")
add = _binary("tl_add")
sub = _binary("tl_sub")
mul = _binary("tl_mul")
div = _binary("tl_div")
atan2 = _binary("tl_atan2")
max = _binary("tl_max")
min = _binary("tl_min")


def copy(x):
    """A device-to-device memcpy: the copy engine's bandwidth, no kernel."""
    y = empty(x.size)
    if x.size:
        y.data.copy_from_device_async(x.data, x.nbytes)
    return y


def _pair_bwd(kname: str):
    def fn(a, b, dy):
        n = a.size
        da, db = empty(n), empty(n)
        if n:
            kernel(_FILE, kname)((grid_for(n),), (BLOCK,), (a, b, dy, da, db, I64(n)))
        return da, db

    fn.__name__ = kname[3:]
    return fn


max_bwd = _pair_bwd("tl_max_bwd")
min_bwd = _pair_bwd("tl_min_bwd")


def fill(n: int, value: float) -> cupy.ndarray:
    y = empty(n)
    if n:
        kernel(_FILE, "tl_elementwise_fill")(_grid(n), (BLOCK,), (y, I64(n), F32(value)))
    return y
