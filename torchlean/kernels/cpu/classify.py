"""CPU kernels of the classification: cross_entropy_rows, gelu, gelu_tanh and their backward passes.

Numba (``cache=True``: compiled once per machine, then loaded from the cache; ``error_model=
"numpy"`` so that divisions carry no Python zero check and the loops vectorize). Every result is
inside its contract with room to spare (the bounds are written for the CUDA kernels' float32
arithmetic, which the cross entropy kernels here repeat operation for operation).

* exp: our own, because Numba code calling libm's exp runs one element at a time. Cody-Waite
  reduction by ln 2 (split constants, k * hi exact), a Taylor polynomial on |r| <= ln2/2, 2**k
  from the exponent bits. ``_exp`` (float64, degree 8, truncation below 3e-10 relative) for the
  tanh GELU; ``exp32`` (float32 throughout, so loops run 16 wide; degree 7; 2**k applied in two
  halves so subnormal results round once; measured within 1.7u, 1.2 ulp) for the cross entropy,
  the erf GELU and the attention kernels.
* gelu / gelu_bwd (erf form): float32, Phi from erfc(a) = erfcx(a) exp(-a^2) with our own erfcx
  polynomial and an exactly split exp(-x^2/2) (the derivation and the measurement against the
  contract are at ``_gauss_parts``); float32 fills twice the SIMD lanes of float64 loops.
* gelu_tanh / gelu_tanh_bwd: evaluated in float64 and rounded once.
* cross_entropy_rows: per row, m = fmax over the row (NaNs lose to numbers), then one pass
  writes expf(x - m) (x - m rounded to float32, as on the GPU) into a row scratch and a second
  sums it in float64 (the sums are the only loops compiled with ``fastmath={'reassoc'}``, so that
  they vectorize; the order is fixed by the compiled code, so results are bitwise repeatable).
  loss = log S + (1 - ls)(m - x_t) + (ls/cols) sum(m - x_j) in float64: non-negative terms, no
  cancellation. Rows whose maximum is not finite take the direct formula (inf/NaN by IEEE rules).
  No (rows, cols) intermediate: the scratch is one row per task.
* cross_entropy_rows_bwd: dx = dl (expf(x - lse) - c) in float32, c = ls/cols (+ (1 - ls) at the
  target) built in float32 as on the GPU.
Calls that ``parallel.parts`` splits spread rows (or chunks of elements) over Numba's threads
as tasks (tasks.py: each kernel's loop compiles once, as a cached callback, instead of again in a
parallel region of its own); smaller ones run the njit kernel on the calling thread (a parallel
region costs a few us). Each
row or element is computed by the same code whichever thread runs it, so the bits never depend on
the thread count or the path. The tanh GELU's float64 code lets LLVM fuse multiply-adds (``_FM``).
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import carray, njit
from numba.core import types
from numba.extending import intrinsic

from . import tasks
from .parallel import parts

F32 = np.float32
F64 = np.float64

__all__ = ["cross_entropy_rows", "cross_entropy_rows_bwd", "cross_entropy_reduce",
           "cross_entropy_reduce_bwd", "gelu", "gelu_bwd", "gelu_tanh", "gelu_tanh_bwd"]

_LOG2E = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01  # fdlibm: ln 2, low 21 bits clear: k * _LN2_HI is exact
_LN2_LO = 1.90821492927058770002e-10
_INV_SQRT2 = 0.7071067811865476
_INV_SQRT_2PI = 0.3989422804014327
_SQRT_2_OVER_PI = 0.7978845608028654
_GELU_TANH_C = 0.044715
_INF = np.inf
_CHUNK = 1 << 14  # elements per parallel task of the elementwise kernels (about; see _tasks)
# Elements per thread that pay for a parallel region (parallel.parts). Numba's OpenMP layer starts
# one in a few microseconds, so even a mid-sized call (a small model's GELU) gains from the split.
_MIN_WORK = 1 << 14
# The GELUs work in float64, far below float32 resolution: letting LLVM contract a * b + c into one
# fma (one rounding instead of two) only makes them more accurate, and faster (one instruction).
_FM = {"contract"}


@njit(inline="always", error_model="numpy", fastmath=_FM)
def _exp(v):
    """exp(v) for float64 v, within 3e-10 relative (see the module docstring)."""
    vc = v if v > -708.0 else -708.0  # NaN lands here too; it is restored below
    vc = vc if vc < 709.0 else 709.0
    k = math.floor(vc * _LOG2E + 0.5)
    r = (vc - k * _LN2_HI) - k * _LN2_LO
    p = 1.0 + r * (1.0 + r * (0.5 + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (
        1.0 / 720.0 + r * (1.0 / 5040.0 + r * (1.0 / 40320.0))))))))
    e = p * np.int64((np.int64(k) + 1023) << 52).view(np.float64)
    e = e if v > -708.0 else 0.0
    e = e if v < 709.0 else _INF
    return e if v == v else v


# -- GELU (erf form) in float32 -------------------------------------------------------------------
# Phi(x) = 0.5 erfc(a), a = |x|/sqrt 2, on the tail side (x < 0) and 1 - 0.5 erfc(a) on the other,
# with erfc(a) = erfcx(a) exp(-a^2) evaluated in float32 (16 lanes per vector, twice float64's;
# gelu_bwd shares E), the scheme of a branch-free
# library erfcf (the one N. Juffa published; the coefficients here are our own fit):
# * E = exp(-x^2/2) from the exact square x^2 = hs + he (hs = fl(x x), he = fma(x, x, -hs) exactly;
#   |x| clamped at 20 first, E = 0 there, so nothing overflows):
#   E = expf(-hs/2) (1 - he/2) (|he| <= u hs; the dropped (he/2)^2/2 is below 2^-40 relative).
#   The dominant factor thus takes no argument rounding at all.
# * erfcx(a) = (1 + p(q)) / (1 + 2a), q = (a - 2)/(a + 2) in [-1, 1), p a degree-11 polynomial
#   (least squares on Chebyshev nodes of q in [-1, 0.7], i.e. a <= 11.3, coefficients rounded to
#   float32 one by one with the rest refitted: within 8.3e-9 = 0.14u of (1 + 2a) erfcx(a) - 1, which
#   lies in [0, 0.28]), evaluated by Horner's rule with fused multiply-adds. Only a = fl(|x| fl(1/sqrt 2)) is rounded (1.3u), and erfcx's relative
#   sensitivity to a is |d ln erfcx / d ln a| <= 1: <= 1.3u, inside the contract's 2u S(x).
# * Measured against scipy.special.ndtr on 3e6 points in each of 12 ranges covering [-13, 9]:
#   Phi within 5.9u relative wherever Phi is a normal float32 (worst near x = -13, -5.5 and 0).
#   The contract allows Phi LIB + 2u S(x) >= 8u, then the product x Phi (u): gelu within 6.9u |y|
#   <= 9u |y|. Where Phi or E is subnormal (x < -13.2), |x Phi| < 2^-126 and TINY covers it.
#   End to end, every 13th float32 of [-14.5, -1e-30] and [1e-30, 20] against the contracts'
#   bound functions: gelu within 0.63 of its bound, gelu_bwd within 0.59 (tests/test_classify.py
#   checks 0.8 on a dense grid of 4e5 points).
# * gelu_bwd: d = Phi + x phi with phi = E / sqrt(2 pi) (the same E): x phi carries expf (1.7u),
#   the (1 - he) factor and its product (2u), the constant and two products (2.5u): 6.2u against
#   the contract's LIB + 4u + u x^2/2; the sum Phi + x phi (u|d|) and dy d (u|ref|) as stated.
# * Large |x|: |x| is clamped at 20 for E (E = 0 there: expf(-104) is already 0), so no inf - inf;
#   1 + 2a overflows to inf for |x| > 2.4e38 (erfcx = 0); x = +inf gives y = inf, d = 1 and
#   x = -inf gives y = -0, d = 0 (selected, as before); NaN propagates.
# No fastmath: every lane does the same IEEE operations (vector body or scalar remainder, any
# chunk, any thread), so the bits never depend on the path.
@intrinsic
def _fma32(typingctx, a, b, c):
    """a * b + c with one rounding (llvm.fma: the hardware instruction, or libm's exact fmaf where
    there is none; never left to the optimizer's discretion, so the bits never depend on it)."""
    sig = types.float32(types.float32, types.float32, types.float32)

    def codegen(context, builder, signature, args):
        f32 = ir.FloatType()
        fn = builder.module.declare_intrinsic("llvm.fma", [f32], ir.FunctionType(f32, [f32, f32, f32]))
        return builder.call(fn, args)

    return sig, codegen


_ERFCX_P = (
    F32(float.fromhex("0x1.1ba0380000000p-2")),  # 0.276978374
    F32(float.fromhex("-0x1.7bf5e80000000p-4")),  # -0.0927638113
    F32(float.fromhex("-0x1.5407a40000000p-3")),  # -0.166030198
    F32(float.fromhex("0x1.4ff9e20000000p-3")),  # 0.164050832
    F32(float.fromhex("-0x1.bc2dea0000000p-5")),  # -0.0542211123
    F32(float.fromhex("-0x1.071fea0000000p-7")),  # -0.0080299275
    F32(float.fromhex("0x1.1dd87e0000000p-7")),  # 0.00872331765
    F32(float.fromhex("0x1.48949c0000000p-10")),  # 0.00125343516
    F32(float.fromhex("-0x1.7bd6680000000p-10")),  # -0.00144896517
    F32(float.fromhex("-0x1.ae8e3a0000000p-12")),  # -0.000410609791
    F32(float.fromhex("0x1.8f71f80000000p-13")),  # 0.000190470309
    F32(float.fromhex("0x1.81bf1e0000000p-14")),  # 9.19691447e-05
)
_P0, _P1, _P2, _P3, _P4, _P5, _P6, _P7, _P8, _P9, _P10, _P11 = _ERFCX_P
_F32_TWO = F32(2.0)
_F32_INV_SQRT2 = F32(_INV_SQRT2)
_F32_INV_SQRT_2PI = F32(_INV_SQRT_2PI)
_F32_INF = F32(np.inf)
_F32_20 = F32(20.0)


@njit(inline="always", error_model="numpy")
def _gauss_parts(x):
    """(h, E): h = 0.5 erfc(|x|/sqrt 2) and E = exp(-x^2/2), both float32 (see above)."""
    ax = abs(x)
    xc = ax if ax < _F32_20 else _F32_20      # E = 0 beyond (NaN too: it returns through a below)
    hs = xc * xc
    he = _fma32(xc, xc, -hs)                   # exact: xc^2 = hs + he
    e = exp32(-(hs * _F32_HALF)) * (_F32_ONE - he * _F32_HALF)
    a = ax * _F32_INV_SQRT2
    q = (a - _F32_TWO) / (a + _F32_TWO)
    p = _fma32(_P11, q, _P10)
    p = _fma32(p, q, _P9)
    p = _fma32(p, q, _P8)
    p = _fma32(p, q, _P7)
    p = _fma32(p, q, _P6)
    p = _fma32(p, q, _P5)
    p = _fma32(p, q, _P4)
    p = _fma32(p, q, _P3)
    p = _fma32(p, q, _P2)
    p = _fma32(p, q, _P1)
    p = _fma32(p, q, _P0)
    f = (_F32_ONE + p) / (_F32_ONE + _F32_TWO * a)  # erfcx(a)
    return _F32_HALF * f * e, e


@njit(inline="always", error_model="numpy")
def _gelu1(v):
    h, _ = _gauss_parts(v)
    cdf = h if v < _F32_ZERO else _F32_ONE - h
    y = v * cdf
    y = y if v != _F32_INF else v
    return y if v != -_F32_INF else F32(-0.0)


@njit(inline="always", error_model="numpy")
def _gelu_d1(v):
    h, e = _gauss_parts(v)
    cdf = h if v < _F32_ZERO else _F32_ONE - h
    d = cdf + v * (e * _F32_INV_SQRT_2PI)
    d = d if v != _F32_INF else _F32_ONE
    return d if v != -_F32_INF else _F32_ZERO


@njit(inline="always", error_model="numpy", fastmath=_FM)
def _tanh_parts(v):
    """(s, e, q): e = exp(-|2z|), q = 1/(1+e), s = sigmoid(2z) = q (z >= 0) or e q (z < 0)."""
    z = _SQRT_2_OVER_PI * (v + _GELU_TANH_C * (v * v * v))
    e = _exp(-2.0 * abs(z))
    q = 1.0 / (1.0 + e)
    s = q if z >= 0.0 else e * q
    return s, e, q


@njit(inline="always", error_model="numpy", fastmath=_FM)
def _gelu_tanh1(v):
    s, _, _ = _tanh_parts(v)
    y = v * s
    return y if v != -_INF else -0.0


@njit(inline="always", error_model="numpy", fastmath=_FM)
def _gelu_tanh_d1(v):
    s, e, q = _tanh_parts(v)
    dz = _SQRT_2_OVER_PI * (1.0 + 3.0 * _GELU_TANH_C * (v * v))
    d = s + 2.0 * v * dz * (e * q * q)  # sigmoid'(2z) = s (1 - s) = e q^2: no 1 - s is formed
    d = d if v != _INF else 1.0
    return d if v != -_INF else 0.0


# -- elementwise loops: a serial (vectorized) loop per chunk, chunks spread over threads -----------
# The serial loops take slices and run from 0: with ``range(lo, hi)`` Numba cannot rule out a
# negative index, wraps it, and the loop turns into slow gathers and scatters. Elementwise:
# the bits never depend on the chunking.
@njit(cache=True, error_model="numpy")
def _gelu_range(x, y):
    for i in range(x.size):
        y[i] = _gelu1(x[i])


@njit(cache=True, error_model="numpy", fastmath=_FM)
def _gelu_tanh_range(x, y):
    for i in range(x.size):
        y[i] = np.float32(_gelu_tanh1(np.float64(x[i])))


@njit(cache=True, error_model="numpy")
def _gelu_bwd_range(x, dy, y):
    for i in range(x.size):
        y[i] = dy[i] * _gelu_d1(x[i])


@njit(cache=True, error_model="numpy", fastmath=_FM)
def _gelu_tanh_bwd_range(x, dy, y):
    for i in range(x.size):
        y[i] = np.float32(np.float64(dy[i]) * _gelu_tanh_d1(np.float64(x[i])))


# The split runs as tasks (tasks.py), one per kernel: each compiles once, as a cached callback, and
# only when a call needs it, where a parallel wrapper of its own would compile both forms' loops
# again. Part c of t: elements [n*c//t, n*(c+1)//t). Words: n, t, then the arrays.
def _gelu_task(c, p):
    a = carray(p, 4)
    n, t = a[0], a[1]
    lo, hi = n * c // t, n * (c + 1) // t
    _gelu_range(tasks.as_f32(a[2], n)[lo:hi], tasks.as_f32(a[3], n)[lo:hi])


def _gelu_tanh_task(c, p):
    a = carray(p, 4)
    n, t = a[0], a[1]
    lo, hi = n * c // t, n * (c + 1) // t
    _gelu_tanh_range(tasks.as_f32(a[2], n)[lo:hi], tasks.as_f32(a[3], n)[lo:hi])


def _gelu_bwd_task(c, p):
    a = carray(p, 5)
    n, t = a[0], a[1]
    lo, hi = n * c // t, n * (c + 1) // t
    _gelu_bwd_range(tasks.as_f32(a[2], n)[lo:hi], tasks.as_f32(a[3], n)[lo:hi], tasks.as_f32(a[4], n)[lo:hi])


def _gelu_tanh_bwd_task(c, p):
    a = carray(p, 5)
    n, t = a[0], a[1]
    lo, hi = n * c // t, n * (c + 1) // t
    _gelu_tanh_bwd_range(tasks.as_f32(a[2], n)[lo:hi], tasks.as_f32(a[3], n)[lo:hi], tasks.as_f32(a[4], n)[lo:hi])


# (erf form, tanh form) of the forward and of the backward
_GELU_TASKS = (tasks.Task(_gelu_task), tasks.Task(_gelu_tanh_task))
_GELU_BWD_TASKS = (tasks.Task(_gelu_bwd_task), tasks.Task(_gelu_tanh_bwd_task))


def _f32(*arrays) -> bool:
    return all(a.dtype == F32 and a.flags.c_contiguous for a in arrays)


def _tasks(n: int) -> int:
    """Chunks of about _CHUNK elements, their count a multiple of the thread count (equal shares);
    0 where parallel.parts keeps it whole: one chunk, run on the calling thread (a launch would cost more than it saves)."""
    t = parts(n, n, _MIN_WORK)
    if t == 1:
        return 0
    return -(-n // (_CHUNK * t)) * t


def _unary(x, tanh_form: bool):
    y = np.empty_like(x)
    t = _tasks(x.size)
    if t and _f32(x):
        tasks.run(_GELU_TASKS[tanh_form], tasks.pack(x.size, t, x, y), t, on_pool=True)
    elif x.size:
        (_gelu_tanh_range if tanh_form else _gelu_range)(x, y)
    return y


def _bwd(x, dy, tanh_form: bool):
    y = np.empty_like(x)
    t = _tasks(x.size)
    if t and _f32(x, dy):
        tasks.run(_GELU_BWD_TASKS[tanh_form], tasks.pack(x.size, t, x, dy, y), t, on_pool=True)
    elif x.size:
        (_gelu_tanh_bwd_range if tanh_form else _gelu_bwd_range)(x, dy, y)
    return y


def gelu(x):
    return _unary(x, False)


def gelu_tanh(x):
    return _unary(x, True)


def gelu_bwd(x, dy):
    return _bwd(x, dy, False)


def gelu_tanh_bwd(x, dy):
    return _bwd(x, dy, True)


# -- cross entropy ------------------------------------------------------------------------------
_F32_L2E = F32(1.4426950408889634)
_F32_LN2_HI = F32(0.693359375)       # 355/512: k * _F32_LN2_HI is exact for |k| < 2**15
_F32_LN2_LO = F32(-2.12194440e-4)    # ln 2 - _F32_LN2_HI
_F32_ONE, _F32_HALF, _F32_ZERO = F32(1.0), F32(0.5), F32(0.0)


@njit(inline="always", error_model="numpy")
def exp32(v):
    """expf for float32 v, all float32 (so the loops vectorize 16 wide): Cody-Waite by ln 2, Taylor
    degree 7 on |r| <= ln2/2 (truncation 0.12u), 2**k applied in two halves so that subnormal
    results round once. Measured within 1.7u of exp (and 1 ulp of a subnormal one). 0 below -104,
    +inf where exp overflows, NaN for NaN."""
    vc = v if v > F32(-104.0) else F32(-104.0)
    vc = vc if vc < F32(89.0) else F32(89.0)  # k <= 128: overflows to +inf by itself
    k = np.floor(vc * _F32_L2E + _F32_HALF)  # stays float32 (math.floor would go through int64 and back: slower)
    r = (vc - k * _F32_LN2_HI) - k * _F32_LN2_LO
    p = _F32_ONE + r * (_F32_ONE + r * (_F32_HALF + r * (F32(1.0 / 6.0) + r * (F32(1.0 / 24.0) + r * (
        F32(1.0 / 120.0) + r * (F32(1.0 / 720.0) + r * F32(1.0 / 5040.0)))))))
    ki = np.int32(k)
    k1 = ki >> np.int32(1)
    e = (p * np.int32((k1 + np.int32(127)) << np.int32(23)).view(np.float32)) * \
        np.int32((ki - k1 + np.int32(127)) << np.int32(23)).view(np.float32)
    e = e if v > F32(-104.0) else _F32_ZERO
    return e if v == v else v


@njit(inline="always", error_model="numpy")
def _fill_exp(xr, m, buf, n):
    for j in range(n):
        buf[j] = exp32(xr[j] - m)  # x - m rounded to float32, as on the GPU


@njit(inline="always", error_model="numpy")
def _fill_dist(xr, m, buf, n):
    for j in range(n):
        buf[j] = m - np.float64(xr[j])  # float64: m - x_j may exceed the float32 range


@njit(cache=True, error_model="numpy", fastmath={"reassoc"})
def _sum(buf, n):
    """sum of a scratch in float64; the only loops compiled with reassociation (so that they
    vectorize): the order is fixed by the compiled code, so the result is repeatable."""
    s = 0.0
    for j in range(n):
        s += np.float64(buf[j])
    return s


@njit(inline="always", error_model="numpy")
def _ce_row(xr, n, m, t, ls, buf, buf64):
    """(loss, lse) of one row in float64; m = fmax of the row (NaN only when every value is NaN)."""
    valid = t < n
    md = np.float64(m)
    if math.isfinite(md):
        _fill_exp(xr, m, buf, n)
        log_s = math.log(_sum(buf, n))  # NaN when the row holds a NaN
        lse = md + log_s
        if not valid:
            return 0.0, lse
        loss = log_s
        if ls < 1.0:
            loss += (1.0 - ls) * (md - np.float64(xr[t]))
        if ls > 0.0:
            _fill_dist(xr, md, buf64, n)
            loss += (ls / n) * _sum(buf64, n)
        return loss, lse
    # m = +inf, -inf (a row of -inf and NaN) or NaN (a row of NaN): the direct formula
    has_nan = False
    total = 0.0
    for j in range(n):
        v = np.float64(xr[j])
        has_nan |= v != v
        total += v
    lse = math.nan if (has_nan or md != md) else md
    if not valid:
        return 0.0, lse
    loss = lse
    if ls < 1.0:
        loss -= (1.0 - ls) * np.float64(xr[t])
    if ls > 0.0:
        loss -= (ls / n) * total
    return loss, lse


_MAX_LANES = 16


@njit(inline="always", error_model="numpy")
def _fmax_row(xr, n, lanes):
    """np.fmax.reduce of a row: NaNs lose to numbers, a row of NaN gives NaN. Element j goes to lane
    j % 16 (16 independent chains that vectorize; one chain of selects took longer than the row's
    exp and sum together), then the lanes in order, then the tail. Which of two equal maxima wins (+0 or -0) can differ from
    a single chain; no output of _ce_row depends on it (x - m, m + log s and m - x give the same
    bits for either zero where it is the row's maximum)."""
    for l in range(_MAX_LANES):
        lanes[l] = np.float32(np.nan)
    full = n - n % _MAX_LANES
    for j0 in range(0, full, _MAX_LANES):
        for l in range(_MAX_LANES):
            v, a = xr[j0 + l], lanes[l]
            lanes[l] = v if (v > a) | (a != a) else a
    m = np.float32(np.nan)
    for l in range(_MAX_LANES):
        v = lanes[l]
        m = v if (v > m) | (m != m) else m
    for j in range(full, n):
        v = xr[j]
        m = v if (v > m) | (m != m) else m
    return m


@njit(cache=True, error_model="numpy")
def _ce_fwd_rows(x2, t, ls, loss, lse, r0, r1):
    n = x2.shape[1]
    buf = np.empty(n, dtype=np.float32)
    buf64 = np.empty(n if ls > 0.0 else 0, dtype=np.float64)
    lanes = np.empty(_MAX_LANES, dtype=np.float32)
    for r in range(r0, r1):
        xr = x2[r]
        lo, le = _ce_row(xr, n, _fmax_row(xr, n, lanes), t[r], ls, buf, buf64)
        loss[r] = np.float32(lo)
        lse[r] = np.float32(le)


# The parallel cross entropy runs as tasks (tasks.py): part k of nt is the rows [rows*k//nt,
# rows*(k+1)//nt), through the row kernels above, each compiled once (a parallel wrapper of its own
# would compile its row kernel again). Words: rows, cols, nt, then the arrays' addresses; the
# forward's label smoothing as float64 bits, the backward's b and ab as float32 in float64 words.
def _ce_fwd_task(k, p):
    a = carray(p, 8)
    rows, cols, nt = a[0], a[1], a[2]
    _ce_fwd_rows(tasks.as_f32(a[4], (rows, cols)), tasks.as_i64(a[5], rows), tasks.as_float(a[3]),
                 tasks.as_f32(a[6], rows), tasks.as_f32(a[7], rows), rows * k // nt, rows * (k + 1) // nt)


@njit(cache=True, error_model="numpy")
def _ce_bwd_row(xr, dr, n, lse, dl, b):
    for j in range(n):
        dr[j] = dl * (exp32(xr[j] - lse) - b)  # float32 throughout, as on the GPU


@njit(cache=True, error_model="numpy")
def _ce_bwd_rows(x2, lse, dloss, t, b, ab, dx2, r0, r1):
    n = x2.shape[1]
    for r in range(r0, r1):
        tr = t[r]
        if tr >= n:
            dx2[r, :] = 0.0
        else:
            le, dl = lse[r], dloss[r]
            _ce_bwd_row(x2[r], dx2[r], n, le, dl, b)
            dx2[r, tr] = dl * (exp32(x2[r, tr] - le) - ab)


def _ce_bwd_task(k, p):
    a = carray(p, 10)
    rows, cols, nt = a[0], a[1], a[2]
    _ce_bwd_rows(tasks.as_f32(a[5], (rows, cols)), tasks.as_f32(a[6], rows), tasks.as_f32(a[7], rows),
                 tasks.as_i64(a[8], rows), np.float32(tasks.as_float(a[3])), np.float32(tasks.as_float(a[4])),
                 tasks.as_f32(a[9], (rows, cols)), rows * k // nt, rows * (k + 1) // nt)


_CE_FWD_TASK, _CE_BWD_TASK = tasks.Task(_ce_fwd_task), tasks.Task(_ce_bwd_task)


def cross_entropy_rows(x, rows, cols, targets, label_smoothing):
    loss = np.zeros(rows, dtype=F32)
    if cols == 0:
        return loss, np.full(rows, -np.inf, dtype=F32)
    lse = np.empty(rows, dtype=F32)
    if rows == 0:
        return loss, lse
    x2 = x.reshape(rows, cols)
    t = np.ascontiguousarray(targets, dtype=np.int64)
    if parts(rows * cols, rows, _MIN_WORK) > 1 and _f32(x2):
        nt = min(rows, 64)
        tasks.run(_CE_FWD_TASK, tasks.pack(rows, cols, nt, float(label_smoothing), x2, t, loss, lse), nt, on_pool=True)
    else:
        _ce_fwd_rows(x2, t, float(label_smoothing), loss, lse, 0, rows)
    return loss, lse


_SUM_LANES = 256  # the CUDA sum's threads (TL_CE_SUM_LANES): the same order, so the same bits


@njit(cache=True, error_model="numpy")
def _sum_lanes(v):
    """sum_l (sum_{r = l mod 256} v[r]) in double: lane l adds its rows in order, then the lanes in
    order, as tl_cross_entropy_reduce_sum_scale does."""
    part = np.zeros(_SUM_LANES, dtype=np.float64)
    for r in range(v.shape[0]):
        part[r % _SUM_LANES] += np.float64(v[r])
    s = 0.0
    for i in range(_SUM_LANES):
        s += part[i]
    return s


def cross_entropy_reduce(x, rows, cols, targets, label_smoothing, scale):
    loss, lse = cross_entropy_rows(x, rows, cols, targets, label_smoothing)
    with np.errstate(all="ignore"):
        out = np.array([_sum_lanes(loss) * float(F32(scale))], dtype=F32)
    return out, lse


def cross_entropy_reduce_bwd(x, lse, dloss, rows, cols, targets, label_smoothing, scale):
    # dl = fl32(dloss * scale) once, on every row: the bits of scale + broadcast + rows_bwd
    with np.errstate(all="ignore"):
        dl = np.full(rows, dloss[0] * F32(scale), dtype=F32)
    return cross_entropy_rows_bwd(x, lse, dl, rows, cols, targets, label_smoothing)


def cross_entropy_rows_bwd(x, lse, dloss, rows, cols, targets, label_smoothing):
    dx = np.empty(rows * cols, dtype=F32)
    if rows * cols == 0:
        return dx
    ls = F32(label_smoothing)
    b = ls / F32(cols)                # c_j = b, and a + b at the target: float32, as on the GPU
    ab = (F32(1.0) - ls) + b
    t = np.ascontiguousarray(targets, dtype=np.int64)
    args = (x.reshape(rows, cols), lse, dloss, t, b, ab, dx.reshape(rows, cols))
    if parts(rows * cols, rows, _MIN_WORK) > 1 and _f32(x, lse, dloss):
        nt = min(rows, 64)
        words = tasks.pack(rows, cols, nt, float(b), float(ab), x, lse, dloss, t, dx)
        tasks.run(_CE_BWD_TASK, words, nt, on_pool=True)
    else:
        _ce_bwd_rows(*args, 0, rows)
    return dx
