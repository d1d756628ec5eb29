"""Elementwise primitives and their backward kernels on float32 NumPy arrays.

Large calls of the primitives a training step makes by the million (add, sub, mul, div, scale,
add_scalar, axpy, copy, abs, sqrt, inv, relu and the backward kernels relu_bwd, sigmoid_bwd,
tanh_bwd) split into ``parallel.parts(n, n, MIN_WORK)`` contiguous chunks run by Numba's threads;
smaller ones stay on NumPy (or the serial Numba loop), whose per-call cost is lower. Each element
gets the same float32 operations, in the same order, on either path (IEEE add, multiply, divide
and square root are correctly rounded; nothing is contracted into an fma), so the bits depend on
neither the path nor the thread count. exp, tanh, sigmoid and the other library functions stay
on NumPy: its SIMD exp/tanh are its own code (chosen per CPU at run time) whose last bit can
differ from the libm that Numba calls, and NumPy's loops cannot run inside Numba's threads.
"""

from __future__ import annotations

import numpy as np
from numba import carray, njit
from scipy import special as _special

from . import parallel, tasks

F32 = np.float32
SAFE_LOG_EPS = F32(1e-6)
_IGNORE = dict(all="ignore")

__all__ = [
    "abs", "abs_bwd", "sqrt", "sqrt_bwd", "exp", "log", "inv", "clamp", "clamp_bwd", "max",
    "max_bwd", "min", "min_bwd", "div", "relu", "relu_bwd", "leaky_relu", "leaky_relu_bwd", "add", "sub", "mul",
    "scale", "copy",
    "axpy", "add_scalar", "sigmoid", "sigmoid_bwd", "tanh", "tanh_bwd", "softplus",
    "softplus_bwd", "safe_log", "safe_log_bwd",
    "sin", "cos", "erf", "log1p", "expm1", "floor", "ceil", "round", "trunc", "sign", "pow_scalar",
    "atan", "asin", "acos", "asinh", "acosh", "atanh", "atan2",
]

def _ufunc(f, *args):
    """f(*args) (1-D float32 arrays and scalars), NumPy's floating-point warnings off. On the calling
    thread: NumPy's loops cannot run inside Numba's threads, the backend's one pool (parallel.py)."""
    with np.errstate(**_IGNORE):
        return f(*args)


# -- the parallel path (module docstring) --------------------------------------------------------
# Elements per part at least: below 2 * MIN_WORK a call runs whole on the calling thread. Measured
# on a 2-core EPYC (OpenMP layer), two parts against one NumPy call: add gains from about 6e4
# floats, scale and relu from about 1e5 (a region's start and the other thread's wake-up cost a few
# microseconds, an in-cache pass over 6e4 floats about 10).
MIN_WORK = 1 << 16

# Operation codes of _unary_range / _binary_range (compile-time constants in the kernels).
_COPY, _RELU, _SCALE, _ADD_SCALAR, _ABS, _SQRT, _INV, _LEAKY_RELU = range(8)
_ADD, _SUB, _MUL, _DIV, _AXPY, _RELU_BWD, _SIGMOID_BWD, _TANH_BWD, _LEAKY_RELU_BWD = range(9)
_AXPY_BLOCK = 2048  # elements


@njit(cache=True, nogil=True, error_model="numpy")
def _unary_range(op, x, c, y):
    """y = op(x) (c: the scalar of scale / add_scalar), each element's float32 operations as
    NumPy's. One loop per op, the branch outside it: every loop vectorizes."""
    n = np.uint64(x.size)  # unsigned: no wraparound check in the loops
    zero, one = np.float32(0.0), np.float32(1.0)
    if op == _COPY:
        for i in range(n):
            y[i] = x[i]
    elif op == _RELU:
        for i in range(n):
            v = x[i]
            y[i] = v if (v > zero) | (v != v) else zero  # NaN propagates (as PyTorch's relu); -0 -> +0
    elif op == _SCALE:
        for i in range(n):
            y[i] = x[i] * c
    elif op == _ADD_SCALAR:
        for i in range(n):
            y[i] = x[i] + c
    elif op == _ABS:
        for i in range(n):
            y[i] = np.abs(x[i])
    elif op == _SQRT:
        for i in range(n):
            y[i] = np.sqrt(x[i])
    elif op == _LEAKY_RELU:
        for i in range(n):
            v = x[i]
            y[i] = v if v > zero else v * c  # NaN * c is NaN: NaN propagates
    else:  # _INV
        for i in range(n):
            y[i] = one / x[i]


@njit(cache=True, nogil=True, error_model="numpy")
def _binary_range(op, a, b, c, y):
    """y = op(a, b) (c: axpy's scalar), each element's float32 operations in NumPy's order."""
    n = np.uint64(a.size)
    zero, one = np.float32(0.0), np.float32(1.0)
    if op == _ADD:
        for i in range(n):
            y[i] = a[i] + b[i]
    elif op == _SUB:
        for i in range(n):
            y[i] = a[i] - b[i]
    elif op == _MUL:
        for i in range(n):
            y[i] = a[i] * b[i]
    elif op == _DIV:
        for i in range(n):
            y[i] = a[i] / b[i]
    elif op == _AXPY:
        # NumPy's two passes (b * c, then a + that) by blocks that stay in cache: in one expression
        # LLVM would put the product first in the add, and a NaN's payload (and sign) comes from the
        # add's first operand on x86: a NaN a would give way to a NaN b.
        for lo in range(np.uint64(0), n, np.uint64(_AXPY_BLOCK)):
            hi = lo + np.uint64(_AXPY_BLOCK)
            if hi > n:
                hi = n
            for i in range(lo, hi):
                y[i] = b[i] * c
            for i in range(lo, hi):
                y[i] = a[i] + y[i]
    elif op == _RELU_BWD:
        for i in range(n):
            y[i] = b[i] if a[i] > zero else zero
    elif op == _SIGMOID_BWD:
        for i in range(n):
            v = a[i]
            y[i] = b[i] * (v * (one - v))
    elif op == _LEAKY_RELU_BWD:
        for i in range(n):
            g = b[i]
            y[i] = g if a[i] > zero else g * c
    else:  # _TANH_BWD
        for i in range(n):
            v = a[i]
            y[i] = b[i] * (one - v * v)


# The split kernels run as tasks (tasks.py): each compiles once, as a cached callback, where a parallel
# wrapper of its own would compile its range kernel again. Part i of t: elements [n*i//t, n*(i+1)//t).
# (Not inlined here: LLVM may then commute leaky_relu's v * c, another NaN payload when both are NaN.)
def _unary_task(i, p):
    a = carray(p, 6)
    op, t, n = a[0], a[1], a[2]
    x, y = tasks.as_f32(a[4], n), tasks.as_f32(a[5], n)
    lo, hi = n * i // t, n * (i + 1) // t
    _unary_range(op, x[lo:hi], np.float32(tasks.as_float(a[3])), y[lo:hi])


def _binary_task(i, p):
    a = carray(p, 7)
    op, t, n = a[0], a[1], a[2]
    x, z, y = tasks.as_f32(a[4], n), tasks.as_f32(a[5], n), tasks.as_f32(a[6], n)
    lo, hi = n * i // t, n * (i + 1) // t
    _binary_range(op, x[lo:hi], z[lo:hi], np.float32(tasks.as_float(a[3])), y[lo:hi])


_UNARY_TASK, _BINARY_TASK = tasks.Task(_unary_task), tasks.Task(_binary_task)


def _f32(*arrays) -> bool:
    return all(a.dtype == F32 and a.flags.c_contiguous for a in arrays)


def _unary_par(op, x, c, y, t):
    """y = op(x) (flat) in t parts on Numba's threads."""
    if not _f32(x, y):  # not the runtime's float32: the same elementwise operations in one range
        _unary_range(op, x, c, y)
        return
    tasks.run(_UNARY_TASK, tasks.pack(op, t, x.size, float(c), x, y), t, on_pool=True)


def _binary_par(op, a, b, c, y, t):
    """y = op(a, b) (flat) in t parts on Numba's threads."""
    if not _f32(a, b, y):
        _binary_range(op, a, b, c, y)
        return
    tasks.run(_BINARY_TASK, tasks.pack(op, t, a.size, float(c), a, b, y), t, on_pool=True)


def _parts(n: int) -> int:
    return parallel.parts(n, n, MIN_WORK)


def _unary_split(op, x, t, c=0.0):
    """op(x) on t threads. The result is first touched by the thread that writes it, so a fresh
    mapping's page faults are spread over the threads too."""
    y = np.empty(x.shape, F32)
    _unary_par(op, x.reshape(-1), F32(c), y.reshape(-1), t)
    return y


def _binary_split(op, a, b, t, c=0.0):
    y = np.empty(a.shape, F32)
    _binary_par(op, a.reshape(-1), b.reshape(-1), F32(c), y.reshape(-1), t)
    return y


def abs(x):
    t = _parts(x.size)
    return _unary_split(_ABS, x, t) if t > 1 else np.abs(x)


def abs_bwd(x, dy):
    with np.errstate(**_IGNORE):
        return np.sign(x) * dy


def sqrt(x):
    t = _parts(x.size)
    if t > 1:
        return _unary_split(_SQRT, x, t)
    with np.errstate(**_IGNORE):
        return np.sqrt(x)


def sqrt_bwd(x, dy):
    pos = x > 0
    with np.errstate(**_IGNORE):
        out = dy / (F32(2) * np.sqrt(x))
    out[~pos] = 0
    return out


def exp(x):
    return _ufunc(np.exp, x)


def log(x):
    with np.errstate(**_IGNORE):
        return np.log(x)


def inv(x):
    t = _parts(x.size)
    if t > 1:
        return _unary_split(_INV, x, t)
    with np.errstate(**_IGNORE):
        return np.reciprocal(x)


def clamp(x, lo, hi):
    # np.clip propagates NaN; minimum(maximum()) keeps clip's semantics when lo > hi (gives hi).
    return np.minimum(np.maximum(x, F32(lo)), F32(hi))


def clamp_bwd(x, dy, lo, hi):
    return _keep_where((x > F32(lo)) & (x < F32(hi)), dy)


def _signed_zeros(out, a, b, sign):
    """IEEE 754-2019 maximumNumber/minimumNumber on zeros: max(-0, +0) = +0, min(-0, +0) = -0.

    np.fmax alone returns either zero depending on the array length (its scalar and SIMD loops
    disagree), so ties of two zeros are settled here: a + b is the max of two zeros, and
    -(-a + -b) their min. The CUDA kernels apply the same rule.
    """
    both = (a == 0) & (b == 0)
    if both.any():
        out[both] = (a[both] + b[both]) if sign > 0 else -((-a[both]) + (-b[both]))
    return out


def max(a, b):
    return _signed_zeros(np.fmax(a, b), a, b, +1)


def min(a, b):
    return _signed_zeros(np.fmin(a, b), a, b, -1)


def _split(a_wins, b_wins, dy):
    half = dy * F32(0.5)
    tie = ~(a_wins | b_wins)
    da = np.where(a_wins, dy, np.where(tie, half, F32(0)))
    db = np.where(b_wins, dy, np.where(tie, half, F32(0)))
    return da, db


def max_bwd(a, b, dy):
    an, bn = np.isnan(a), np.isnan(b)
    return _split((a > b) | (bn & ~an), (b > a) | (an & ~bn), dy)


def min_bwd(a, b, dy):
    an, bn = np.isnan(a), np.isnan(b)
    return _split((a < b) | (bn & ~an), (b < a) | (an & ~bn), dy)


def div(a, b):
    t = _parts(a.size)
    if t > 1:
        return _binary_split(_DIV, a, b, t)
    with np.errstate(**_IGNORE):
        return np.divide(a, b)


# relu / relu_bwd: one Numba pass (unsigned indices: no wraparound check, the loop vectorizes),
# faster than np.maximum (slow with a scalar operand) or a mask; ``_keep_where`` stays for
# the other primitives that use it.
@njit(cache=True, nogil=True, error_model="numpy")
def _relu_kernel(x, y):
    zero = np.float32(0.0)
    for i in range(np.uint64(x.size)):
        v = x[i]
        y[i] = v if (v > zero) | (v != v) else zero  # NaN propagates (as PyTorch's relu); -0 -> +0


@njit(cache=True, nogil=True, error_model="numpy")
def _relu_bwd_kernel(x, dy, dx):
    zero = np.float32(0.0)
    for i in range(np.uint64(x.size)):
        dx[i] = dy[i] if x[i] > zero else zero


def relu(x):
    t = _parts(x.size)
    if t > 1:
        return _unary_split(_RELU, x, t)
    y = np.empty(x.shape, F32)
    _relu_kernel(x.reshape(-1), y.reshape(-1))
    return y


def leaky_relu(x, slope):
    t = _parts(x.size)
    if t > 1:
        return _unary_split(_LEAKY_RELU, x, t, slope)
    y = np.empty(x.shape, F32)
    _unary_range(_LEAKY_RELU, x.reshape(-1), F32(slope), y.reshape(-1))
    return y


def leaky_relu_bwd(x, dy, slope):
    t = _parts(x.size)
    if t > 1:
        return _binary_split(_LEAKY_RELU_BWD, x, dy, t, slope)
    dx = np.empty(x.shape, F32)
    _binary_range(_LEAKY_RELU_BWD, x.reshape(-1), dy.reshape(-1), F32(slope), dx.reshape(-1))
    return dx


def _keep_where(cond, v):
    """v where cond else +0.0, as a bitwise AND with an all-ones/zero mask: far cheaper than np.where."""
    return (v.view(np.int32) & -cond.view(np.int8).astype(np.int32)).view(np.float32)


def relu_bwd(x, dy):
    t = _parts(x.size)
    if t > 1:
        return _binary_split(_RELU_BWD, x, dy, t)
    dx = np.empty(x.shape, F32)
    _relu_bwd_kernel(x.reshape(-1), dy.reshape(-1), dx.reshape(-1))
    return dx


def add(a, b):
    t = _parts(a.size)
    if t > 1:
        return _binary_split(_ADD, a, b, t)
    with np.errstate(**_IGNORE):
        return np.add(a, b)


def sub(a, b):
    t = _parts(a.size)
    if t > 1:
        return _binary_split(_SUB, a, b, t)
    with np.errstate(**_IGNORE):
        return np.subtract(a, b)


def mul(a, b):
    t = _parts(a.size)
    if t > 1:
        return _binary_split(_MUL, a, b, t)
    with np.errstate(**_IGNORE):
        return np.multiply(a, b)


def scale(x, c):
    t = _parts(x.size)
    if t > 1:
        return _unary_split(_SCALE, x, t, c)
    with np.errstate(**_IGNORE):
        return np.multiply(x, F32(c))


def copy(x):
    t = _parts(x.size)
    return _unary_split(_COPY, x, t) if t > 1 and x.dtype == F32 else x.copy()


def axpy(a, b, c):
    t = _parts(a.size)
    if t > 1:
        return _binary_split(_AXPY, a, b, t, c)
    with np.errstate(**_IGNORE):
        out = np.multiply(b, F32(c))
        return np.add(a, out, out=out)


def add_scalar(x, c):
    t = _parts(x.size)
    if t > 1:
        return _unary_split(_ADD_SCALAR, x, t, c)
    with np.errstate(**_IGNORE):
        return np.add(x, F32(c))


def sigmoid(x):
    with np.errstate(**_IGNORE):
        e = np.abs(x)
        np.negative(e, out=e)
        np.exp(e, out=e)  # exp(-|x|) in (0, 1]: never overflows
        # numerator: 1 for x >= 0, e for x < 0 (max(e, 1) = 1 as e <= 1; NaN stays NaN)
        num = np.maximum(e, (x >= 0).astype(F32))
        e += F32(1)
        num /= e
        return num


def sigmoid_bwd(y, dy):
    t = _parts(y.size)
    if t > 1:
        return _binary_split(_SIGMOID_BWD, y, dy, t)
    with np.errstate(**_IGNORE):
        return dy * (y * (F32(1) - y))


def tanh(x):
    return _ufunc(np.tanh, x)


def tanh_bwd(y, dy):
    t = _parts(y.size)
    if t > 1:
        return _binary_split(_TANH_BWD, y, dy, t)
    with np.errstate(**_IGNORE):
        return dy * (F32(1) - y * y)


def softplus(x):
    with np.errstate(**_IGNORE):
        return np.maximum(x, F32(0)) + np.log1p(np.exp(-np.abs(x)))


def softplus_bwd(x, dy):
    with np.errstate(**_IGNORE):
        return dy * sigmoid(x)


def safe_log(x):
    return np.log(softplus(x) + SAFE_LOG_EPS)


def safe_log_bwd(x, dy):
    with np.errstate(**_IGNORE):
        return dy * sigmoid(x) / (softplus(x) + SAFE_LOG_EPS)


def sin(x):
    return _ufunc(np.sin, x)


def cos(x):
    return _ufunc(np.cos, x)


def erf(x):
    # SciPy's float32 loop evaluates in double and rounds once: within half an ulp.
    return _ufunc(_special.erf, x).astype(F32, copy=False)


def log1p(x):
    return _ufunc(np.log1p, x)


def expm1(x):
    return _ufunc(np.expm1, x)


# The inverse trigonometric and hyperbolic functions: NumPy's float32 loops (computed in float32),
# on the calling thread like the other library functions.
def atan(x):
    return _ufunc(np.arctan, x)


def asin(x):
    return _ufunc(np.arcsin, x)


def acos(x):
    return _ufunc(np.arccos, x)


def asinh(x):
    return _ufunc(np.arcsinh, x)


def acosh(x):
    return _ufunc(np.arccosh, x)


def atanh(x):
    return _ufunc(np.arctanh, x)


def atan2(a, b):
    return _ufunc(np.arctan2, a, b)


def floor(x):
    return np.floor(x)


def ceil(x):
    return np.ceil(x)


def round(x):
    return np.rint(x)  # ties to even, as torch.round


def trunc(x):
    return np.trunc(x)


def sign(x):
    # torch.sign: +0 for +-0 and for NaN (np.sign keeps NaN and -0)
    return np.where(x > 0, F32(1), np.where(x < 0, F32(-1), F32(0)))


def pow_scalar(x, c):
    return _ufunc(np.power, x, F32(c))
