"""The primitive surface (the seed's Kernels/Buffer pages): validate, then dispatch on device.

Every primitive takes Buffers and explicit dims, checks them here once (dims as uint32, buffer
sizes against dims, one device for all inputs), then calls the function of the same name on the
inputs' backend and wraps the result in a new Buffer. Inputs are never modified.
"""

from __future__ import annotations

from typing import Any, Sequence

from ..errors import ArgumentError, AxisError, ShapeError
from ..kernels.caches import memo
from .buffer import Buffer, check_buffer, same_device, wrap
from .checks import (
    U32_LIMIT,
    check_dims,
    check_indices,
    check_product,
    check_scalar,
    check_u32,
    check_u32_tuple,
)
from .device import DeviceContext, get_context
from .oom import run_allocating

# The families, one module each (conv, pool, norm, ...), gathered into this one surface.
from . import (primitives_attention, primitives_classify, primitives_conv, primitives_fast,
               primitives_norm, primitives_optim, primitives_pool, primitives_rnn, primitives_scan,
               primitives_spectral)
from . import primitives_fft
from . import primitives_spectral_nd

__all__ = [
    # elementwise (seed: Buffer page)
    "abs", "abs_bwd", "sqrt", "sqrt_bwd", "exp", "log", "inv", "clamp", "clamp_bwd", "max",
    "max_bwd", "min", "min_bwd", "div", "relu", "relu_bwd", "leaky_relu", "leaky_relu_bwd", "add", "sub", "mul", "scale", "copy",
    "axpy",
    # fused elementwise (ours; the seed composes these from the ones above)
    "add_scalar", "sigmoid", "sigmoid_bwd", "tanh", "tanh_bwd", "softplus", "softplus_bwd",
    "safe_log", "safe_log_bwd",
    # more elementwise math: library functions, rounding, sign, x ** c
    "sin", "cos", "erf", "log1p", "expm1", "floor", "ceil", "round", "trunc", "sign", "pow_scalar",
    # inverse trigonometric and hyperbolic functions
    "atan", "asin", "acos", "asinh", "acosh", "atanh", "atan2",
    # reductions
    "reduce_sum", "reduce_mean", "reduce_sum_axis0", "reduce_sum_axis1", "reduce_max_axis0",
    "reduce_max_axis1", "reduce_sum_axis",
    # layout (seed: Kernels page)
    "concat1d", "slice1d", "narrow_block", "narrow_block_bwd", "concat_block", "broadcast_vec_to_rows", "broadcast_vec_to_cols", "broadcast_to",
    "reduce_from_broadcast", "swap_adjacent_at_depth", "permute", "transpose2d", "bmm", "bmm_nt", "bmm_tn",
    # indexing
    "gather_vec", "gather_rows", "scatter_add", "scatter_add_row", "scatter_add_rows",
    # fused rows
    "softmax_rows", "softmax_rows_bwd", "log_softmax_rows", "log_softmax_rows_bwd",
    # random numbers
    "rand_uniform", "bernoulli_mask", "rand_normal",
]


# -- elementwise -------------------------------------------------------------------------
def _unary(name: str, x: Buffer) -> Buffer:
    if type(x) is not Buffer or x._data is None:
        check_buffer(name, "x", x)
    ctx = x._ctx
    return wrap(ctx, run_allocating(name, ctx, x.size, getattr(ctx.backend, name), x._data))


def _binary(name: str, a_name: str, b_name: str, a: Buffer, b: Buffer) -> Buffer:
    # The hot path of every tape op: the full checks run only when a cheap test fails.
    if type(a) is not Buffer or type(b) is not Buffer or a._data is None or b._data is None:
        check_buffer(name, a_name, a)
        check_buffer(name, b_name, b)
    ctx = a._ctx
    if b._ctx is not ctx:
        same_device(name, **{a_name: a, b_name: b})
    if a._nbytes != b._nbytes:
        raise ShapeError(f"{name}: expected {a_name} and {b_name} of equal size, got {a.size} and {b.size}")
    return wrap(ctx, run_allocating(name, ctx, a.size, getattr(ctx.backend, name), a._data, b._data))


def abs(x: Buffer) -> Buffer:
    """|x|."""
    return _unary("abs", x)


def sqrt(x: Buffer) -> Buffer:
    """sqrt(x); NaN for x < 0."""
    return _unary("sqrt", x)


def exp(x: Buffer) -> Buffer:
    """e**x."""
    return _unary("exp", x)


def log(x: Buffer) -> Buffer:
    """ln(x); -inf at 0, NaN below."""
    return _unary("log", x)


def inv(x: Buffer) -> Buffer:
    """1/x."""
    return _unary("inv", x)


def relu(x: Buffer) -> Buffer:
    """max(x, 0); NaN propagates."""
    return _unary("relu", x)


def copy(x: Buffer) -> Buffer:
    """A new buffer with the same contents."""
    return _unary("copy", x)


def sigmoid(x: Buffer) -> Buffer:
    """1/(1+e**-x), evaluated without overflow."""
    return _unary("sigmoid", x)


def tanh(x: Buffer) -> Buffer:
    """tanh(x); never NaN for large |x|."""
    return _unary("tanh", x)


def softplus(x: Buffer) -> Buffer:
    """max(x,0) + log1p(exp(-|x|))."""
    return _unary("softplus", x)


def safe_log(x: Buffer) -> Buffer:
    """log(softplus(x) + 1e-6)."""
    return _unary("safe_log", x)


def sin(x: Buffer) -> Buffer:
    """sin(x); NaN for +-inf."""
    return _unary("sin", x)


def cos(x: Buffer) -> Buffer:
    """cos(x); NaN for +-inf."""
    return _unary("cos", x)


def erf(x: Buffer) -> Buffer:
    """The error function."""
    return _unary("erf", x)


def log1p(x: Buffer) -> Buffer:
    """ln(1 + x), accurate near 0; -inf at -1, NaN below."""
    return _unary("log1p", x)


def expm1(x: Buffer) -> Buffer:
    """e**x - 1, accurate near 0."""
    return _unary("expm1", x)


def atan(x: Buffer) -> Buffer:
    """arctan(x) in [-pi/2, pi/2]; +-pi/2 at +-inf, -0 at -0."""
    return _unary("atan", x)


def asin(x: Buffer) -> Buffer:
    """arcsin(x) in [-pi/2, pi/2]; NaN outside [-1, 1]."""
    return _unary("asin", x)


def acos(x: Buffer) -> Buffer:
    """arccos(x) in [0, pi]; NaN outside [-1, 1]."""
    return _unary("acos", x)


def asinh(x: Buffer) -> Buffer:
    """arsinh(x); +-inf at +-inf."""
    return _unary("asinh", x)


def acosh(x: Buffer) -> Buffer:
    """arcosh(x) >= 0; NaN below 1."""
    return _unary("acosh", x)


def atanh(x: Buffer) -> Buffer:
    """artanh(x); +-inf at +-1, NaN outside [-1, 1]."""
    return _unary("atanh", x)


def floor(x: Buffer) -> Buffer:
    """The largest integer <= x (exact)."""
    return _unary("floor", x)


def ceil(x: Buffer) -> Buffer:
    """The smallest integer >= x (exact)."""
    return _unary("ceil", x)


def round(x: Buffer) -> Buffer:
    """x rounded to the nearest integer, ties to even (exact)."""
    return _unary("round", x)


def trunc(x: Buffer) -> Buffer:
    """x rounded toward zero (exact)."""
    return _unary("trunc", x)


def sign(x: Buffer) -> Buffer:
    """-1, 0 or 1; +0 for +-0 and for NaN, as torch.sign (exact)."""
    return _unary("sign", x)


def abs_bwd(x: Buffer, dy: Buffer) -> Buffer:
    """dx = sign(x) * dy with sign(0) = 0."""
    return _binary("abs_bwd", "x", "dy", x, dy)


def sqrt_bwd(x: Buffer, dy: Buffer) -> Buffer:
    """dx = dy / (2 sqrt(x)) for x > 0, else 0."""
    return _binary("sqrt_bwd", "x", "dy", x, dy)


def relu_bwd(x: Buffer, dy: Buffer) -> Buffer:
    """dx = dy where x > 0, else 0."""
    return _binary("relu_bwd", "x", "dy", x, dy)


def sigmoid_bwd(y: Buffer, dy: Buffer) -> Buffer:
    """dx = dy * y * (1 - y), from the output y."""
    return _binary("sigmoid_bwd", "y", "dy", y, dy)


def tanh_bwd(y: Buffer, dy: Buffer) -> Buffer:
    """dx = dy * (1 - y**2), from the output y."""
    return _binary("tanh_bwd", "y", "dy", y, dy)


def softplus_bwd(x: Buffer, dy: Buffer) -> Buffer:
    """dx = dy * sigmoid(x)."""
    return _binary("softplus_bwd", "x", "dy", x, dy)


def safe_log_bwd(x: Buffer, dy: Buffer) -> Buffer:
    """dx = dy * sigmoid(x) / (softplus(x) + 1e-6)."""
    return _binary("safe_log_bwd", "x", "dy", x, dy)


def max(a: Buffer, b: Buffer) -> Buffer:
    """Elementwise fmax: a NaN loses to a number."""
    return _binary("max", "a", "b", a, b)


def min(a: Buffer, b: Buffer) -> Buffer:
    """Elementwise fmin: a NaN loses to a number."""
    return _binary("min", "a", "b", a, b)


def div(a: Buffer, b: Buffer) -> Buffer:
    """a / b (IEEE: x/0 = +-inf, 0/0 = NaN)."""
    return _binary("div", "a", "b", a, b)


def add(a: Buffer, b: Buffer) -> Buffer:
    """a + b."""
    return _binary("add", "a", "b", a, b)


def sub(a: Buffer, b: Buffer) -> Buffer:
    """a - b."""
    return _binary("sub", "a", "b", a, b)


def mul(a: Buffer, b: Buffer) -> Buffer:
    """a * b."""
    return _binary("mul", "a", "b", a, b)


def atan2(a: Buffer, b: Buffer) -> Buffer:
    """The angle of the point (b, a) in [-pi, pi] (C's atan2: signed zeros and infinities)."""
    return _binary("atan2", "a", "b", a, b)


def _pair_bwd(name: str, a: Buffer, b: Buffer, dy: Buffer) -> tuple[Buffer, Buffer]:
    for n_, v in (("a", a), ("b", b), ("dy", dy)):
        check_buffer(name, n_, v)
    ctx = same_device(name, a=a, b=b, dy=dy)
    if not (a.size == b.size == dy.size):
        raise ShapeError(f"{name}: expected a, b, dy of equal size, got {a.size}, {b.size}, {dy.size}")
    da, db = run_allocating(name, ctx, 2 * a.size, getattr(ctx.backend, name), a._data, b._data, dy._data)
    return wrap(ctx, da), wrap(ctx, db)


def max_bwd(a: Buffer, b: Buffer, dy: Buffer) -> tuple[Buffer, Buffer]:
    """(da, db): the strict winner of max gets dy; a tie splits it 0.5/0.5."""
    return _pair_bwd("max_bwd", a, b, dy)


def min_bwd(a: Buffer, b: Buffer, dy: Buffer) -> tuple[Buffer, Buffer]:
    """(da, db): the strict winner of min gets dy; a tie splits it 0.5/0.5."""
    return _pair_bwd("min_bwd", a, b, dy)


class _Required:
    """The default of a scalar the caller must give: a missing one is an ArgumentError naming it
    (the runtime's layer-1 API reports bad calls as TorchLeanErrors, not TypeErrors)."""

    def __repr__(self) -> str:
        return "<required>"


_REQUIRED: Any = _Required()


def _scalar_op(name: str, scalar_names: Sequence[str], x: Buffer, *scalars: Any) -> Buffer:
    check_buffer(name, "x", x)
    if any(v is _REQUIRED for v in scalars):
        given = sum(v is not _REQUIRED for v in scalars)
        raise ArgumentError(f"{name}: expected scalars {', '.join(scalar_names)}, got {given} values")
    vals = [check_scalar(name, n_, v) for n_, v in zip(scalar_names, scalars)]
    ctx = x._ctx
    return wrap(ctx, run_allocating(name, ctx, x.size, getattr(ctx.backend, name), x._data, *vals))


def scale(x: Buffer, c: float = _REQUIRED) -> Buffer:
    """scale(x, c) = c * x, c rounded to float32."""
    return _scalar_op("scale", ("c",), x, c)


def add_scalar(x: Buffer, c: float = _REQUIRED) -> Buffer:
    """add_scalar(x, c) = x + c, c rounded to float32."""
    return _scalar_op("add_scalar", ("c",), x, c)


def pow_scalar(x: Buffer, c: float = _REQUIRED) -> Buffer:
    """pow_scalar(x, c) = x ** c (IEEE pow), c rounded to float32."""
    return _scalar_op("pow_scalar", ("c",), x, c)


def clamp(x: Buffer, lo: float = _REQUIRED, hi: float = _REQUIRED) -> Buffer:
    """clamp(x, lo, hi) = min(max(x, lo), hi); NaN propagates."""
    return _scalar_op("clamp", ("lo", "hi"), x, lo, hi)


def leaky_relu(x: Buffer, slope: float = _REQUIRED) -> Buffer:
    """x where x > 0, else x * slope (slope rounded to float32); NaN propagates."""
    return _scalar_op("leaky_relu", ("slope",), x, slope)


def leaky_relu_bwd(x: Buffer, dy: Buffer, slope: float) -> Buffer:
    """dx = dy where x > 0, else dy * slope (at x == 0 too, as PyTorch)."""
    return _scalar_bwd("leaky_relu_bwd", ("slope",), x, dy, slope)


def _scalar_bwd(name: str, scalar_names: Sequence[str], x: Buffer, dy: Buffer, *scalars: Any) -> Buffer:
    """The VJP of a scalar op: x and dy of one size on one device, the scalars rounded to float32."""
    check_buffer(name, "x", x)
    check_buffer(name, "dy", dy)
    ctx = same_device(name, x=x, dy=dy)
    if x.size != dy.size:
        raise ShapeError(f"{name}: expected x and dy of equal size, got {x.size} and {dy.size}")
    vals = [check_scalar(name, n_, v) for n_, v in zip(scalar_names, scalars)]
    return wrap(ctx, run_allocating(name, ctx, x.size, getattr(ctx.backend, name), x._data, dy._data, *vals))


def clamp_bwd(x: Buffer, dy: Buffer, lo: float, hi: float) -> Buffer:
    """dx = dy strictly inside (lo, hi), else 0."""
    return _scalar_bwd("clamp_bwd", ("lo", "hi"), x, dy, lo, hi)


def axpy(a: Buffer, b: Buffer, c: float) -> Buffer:
    """a + c * b (the BLAS axpy), c rounded to float32."""
    check_buffer("axpy", "a", a)
    check_buffer("axpy", "b", b)
    ctx = same_device("axpy", a=a, b=b)
    if a.size != b.size:
        raise ShapeError(f"axpy: expected a and b of equal size, got {a.size} and {b.size}")
    c_ = check_scalar("axpy", "c", c)
    return wrap(ctx, run_allocating("axpy", ctx, a.size, ctx.backend.axpy, a._data, b._data, c_))


# -- reductions --------------------------------------------------------------------------
def reduce_sum(x: Buffer) -> Buffer:
    """Sum of all elements as a length-1 buffer (0 for an empty buffer)."""
    check_buffer("reduce_sum", "x", x)
    return wrap(x._ctx, run_allocating("reduce_sum", x._ctx, 1, x._ctx.backend.reduce_sum, x._data))


def reduce_mean(x: Buffer) -> Buffer:
    """Mean of all elements as a length-1 buffer (NaN for an empty buffer)."""
    check_buffer("reduce_mean", "x", x)
    return wrap(x._ctx, run_allocating("reduce_mean", x._ctx, 1, x._ctx.backend.reduce_mean, x._data))


def _matrix(op: str, b: Buffer, rows: Any, cols: Any) -> tuple[int, int]:
    r, c = check_u32(op, "rows", rows), check_u32(op, "cols", cols)
    check_buffer(op, "b", b, check_product(op, "rows*cols", r, c))
    return r, c


def _axis_reduce(name: str, out_axis: int, b: Buffer, rows: int, cols: int) -> Buffer:
    r, c = _matrix(name, b, rows, cols)
    ctx = b._ctx
    n_out = c if out_axis == 0 else r
    return wrap(ctx, run_allocating(name, ctx, n_out, getattr(ctx.backend, name), b._data, r, c))


def reduce_sum_axis0(b: Buffer, rows: int, cols: int) -> Buffer:
    """Column sums of a (rows, cols) buffer: length cols."""
    return _axis_reduce("reduce_sum_axis0", 0, b, rows, cols)


def reduce_sum_axis1(b: Buffer, rows: int, cols: int) -> Buffer:
    """Row sums of a (rows, cols) buffer: length rows."""
    return _axis_reduce("reduce_sum_axis1", 1, b, rows, cols)


def reduce_max_axis0(b: Buffer, rows: int, cols: int) -> Buffer:
    """Column maxima (fmax: NaN ignored unless all NaN; 0 when rows = 0): length cols."""
    return _axis_reduce("reduce_max_axis0", 0, b, rows, cols)


def reduce_max_axis1(b: Buffer, rows: int, cols: int) -> Buffer:
    """Row maxima (fmax: NaN ignored unless all NaN; 0 when cols = 0): length rows."""
    return _axis_reduce("reduce_max_axis1", 1, b, rows, cols)


def _nd(op: str, b: Buffer, dims: Any) -> tuple[int, ...]:
    d = check_dims(op, "dims", dims)
    n = 1
    for v in d:
        n *= v
    check_buffer(op, "b", b, n)
    return d


def reduce_sum_axis(b: Buffer, dims: Sequence[int], axis: int) -> Buffer:
    """Sum along ``axis`` of an N-D buffer; the result has shape dims without that axis."""
    d = _nd("reduce_sum_axis", b, dims)
    ax = check_u32("reduce_sum_axis", "axis", axis)
    if ax >= len(d):
        raise AxisError(f"reduce_sum_axis: axis {ax} out of range for dims {list(d)} (rank {len(d)})")
    n_out = 1
    for i, v in enumerate(d):
        n_out *= 1 if i == ax else v
    return wrap(b._ctx, run_allocating("reduce_sum_axis", b._ctx, n_out, b._ctx.backend.reduce_sum_axis, b._data, d, ax))


# -- layout ------------------------------------------------------------------------------
def concat1d(a: Buffer, b: Buffer, n: int, m: int) -> Buffer:
    """[a; b] for a of length n and b of length m. When b's memory starts where a's ends, in one
    allocation (the gradient pieces of one tensor that a VJP computed side by side), the result is
    a view of both (Buffer._view): no copy."""
    n_, m_ = check_u32("concat1d", "n", n), check_u32("concat1d", "m", m)
    check_buffer("concat1d", "a", a, n_)
    check_buffer("concat1d", "b", b, m_)
    ctx = same_device("concat1d", a=a, b=b)
    check_product("concat1d", "n+m", n_ + m_)
    if n_ and m_:
        joined = ctx.backend.adjacent_union(a._data, b._data)
        if joined is not None:
            return Buffer._view(joined, ctx, a, b)
    return wrap(ctx, run_allocating("concat1d", ctx, n_ + m_, ctx.backend.concat1d, a._data, b._data, n_, m_))


_VIEW_ALIGN = 4  # elements: a view starts 16-byte aligned, as every buffer (the CUDA kernels' float4 loads)


def slice1d(b: Buffer, n: int, start: int, length: int) -> Buffer:
    """b[start:start+length]; requires start + length <= n. A view of b (Buffer._view: no copy)
    when start is a multiple of 4 elements, else a copy."""
    n_ = check_u32("slice1d", "n", n)
    s, ln = check_u32("slice1d", "start", start), check_u32("slice1d", "length", length)
    check_buffer("slice1d", "b", b, n_)
    if s + ln > n_:
        raise ShapeError(f"slice1d: start + length = {s} + {ln} exceeds n = {n_}")
    if ln and s % _VIEW_ALIGN == 0:
        return Buffer._view(b._data[s:s + ln], b._ctx, b)
    return wrap(b._ctx, run_allocating("slice1d", b._ctx, ln, b._ctx.backend.slice1d, b._data, n_, s, ln))


def _narrow_dims(name: str, outer: int, size: int, start: int, length: int, inner: int) -> tuple[int, ...]:
    o, n, s, ln, i = (check_u32(name, k, v) for k, v in
                      (("outer", outer), ("size", size), ("start", start), ("length", length), ("inner", inner)))
    if s + ln > n:
        raise ShapeError(f"{name}: start + length = {s} + {ln} exceeds size = {n}")
    return (o, n, s, ln, i, check_product(name, "outer*size*inner", o, n, i),
            check_product(name, "outer*length*inner", o, ln, i))


def narrow_block(x: Buffer, outer: int, size: int, start: int, length: int, inner: int) -> Buffer:
    """x seen as (outer, size, inner): out (outer, length, inner) = x[:, start:start+length, :]
    (narrow, split and chunk along a dim after the first: one strided copy)."""
    o, n, s, ln, i, n_in, n_out = _narrow_dims("narrow_block", outer, size, start, length, inner)
    check_buffer("narrow_block", "x", x, n_in)
    return wrap(x._ctx, run_allocating("narrow_block", x._ctx, n_out, x._ctx.backend.narrow_block,
                                       x._data, o, n, s, ln, i))


def narrow_block_bwd(dy: Buffer, outer: int, size: int, start: int, length: int, inner: int) -> Buffer:
    """narrow_block's VJP: (outer, size, inner) zeros with dy (outer, length, inner) at
    [:, start:start+length, :]."""
    o, n, s, ln, i, n_in, n_out = _narrow_dims("narrow_block_bwd", outer, size, start, length, inner)
    check_buffer("narrow_block_bwd", "dy", dy, n_out)
    return wrap(dy._ctx, run_allocating("narrow_block_bwd", dy._ctx, n_in, dy._ctx.backend.narrow_block_bwd,
                                        dy._data, o, n, s, ln, i))


def concat_block(a: Buffer, b: Buffer, outer: int, size_a: int, size_b: int, inner: int) -> Buffer:
    """a (outer, size_a, inner) and b (outer, size_b, inner) joined along the middle axis: out
    (outer, size_a + size_b, inner) (cat along a dim after the first, and the gradient pieces of a
    split joined in one pass). Ours: the seed has concat1d only."""
    name = "concat_block"
    o, na, nb, i = (check_u32(name, k, v) for k, v in
                    (("outer", outer), ("size_a", size_a), ("size_b", size_b), ("inner", inner)))
    check_buffer(name, "a", a, check_product(name, "outer*size_a*inner", o, na, i))
    check_buffer(name, "b", b, check_product(name, "outer*size_b*inner", o, nb, i))
    ctx = same_device(name, a=a, b=b)
    n_out = check_product(name, "outer*(size_a+size_b)*inner", o, na + nb, i)
    return wrap(ctx, run_allocating(name, ctx, n_out, ctx.backend.concat_block, a._data, b._data, o, na, nb, i))


def _vec_broadcast(name: str, along_rows: bool, vec: Buffer, rows: int, cols: int) -> Buffer:
    r, c = check_u32(name, "rows", rows), check_u32(name, "cols", cols)
    check_buffer(name, "vec", vec, c if along_rows else r)
    n = check_product(name, "rows*cols", r, c)
    return wrap(vec._ctx, run_allocating(name, vec._ctx, n, getattr(vec._ctx.backend, name), vec._data, r, c))


def broadcast_vec_to_rows(vec: Buffer, rows: int, cols: int) -> Buffer:
    """out[i, j] = vec[j] (vec has length cols)."""
    return _vec_broadcast("broadcast_vec_to_rows", True, vec, rows, cols)


def broadcast_vec_to_cols(vec: Buffer, rows: int, cols: int) -> Buffer:
    """out[i, j] = vec[i] (vec has length rows)."""
    return _vec_broadcast("broadcast_vec_to_cols", False, vec, rows, cols)


def check_axis_map(op: str, in_dims: Any, out_dims: Any, axis_map: Any) -> tuple[tuple[int, ...], ...]:
    """Validate a (in_dims, out_dims, axis_map) broadcast description; return the checked tuples.

    The tape passes the same plain-int tuples on every step (every bias gradient): those are
    checked once per description (a memo keeps no exception, so only successes are cached; bools
    and NumPy ints, which hash like ints, take the uncached path)."""
    if isinstance(in_dims, tuple) and isinstance(out_dims, tuple) and isinstance(axis_map, tuple):  # (Size too)
        for v in in_dims + out_dims + axis_map:
            if type(v) is not int:
                break
        else:
            return _check_axis_map_cached(op, in_dims, out_dims, axis_map)
    return _check_axis_map(op, in_dims, out_dims, axis_map)


def _check_axis_map(op: str, in_dims: Any, out_dims: Any, axis_map: Any) -> tuple[tuple[int, ...], ...]:
    ind = check_dims(op, "in_dims", in_dims)
    outd = check_dims(op, "out_dims", out_dims)
    amap = check_u32_tuple(op, "axis_map", axis_map)
    if len(amap) != len(outd):
        raise ShapeError(f"{op}: axis_map must have one entry per output axis ({len(outd)}), got {len(amap)}")
    seen = set()
    for j, a in enumerate(amap):
        if a == 0:
            continue
        if a > len(ind):
            raise ShapeError(f"{op}: axis_map[{j}] = {a} names input axis {a - 1}, but in_dims has rank {len(ind)}")
        if a in seen:
            raise ShapeError(f"{op}: axis_map maps input axis {a - 1} twice")
        seen.add(a)
        if ind[a - 1] not in (1, outd[j]):
            raise ShapeError(
                f"{op}: cannot broadcast in_dims {list(ind)} to out_dims {list(outd)}: input axis {a - 1} "
                f"has size {ind[a - 1]}, output axis {j} has size {outd[j]}")
    for a, d in enumerate(ind):
        if (a + 1) not in seen and d != 1:
            raise ShapeError(f"{op}: input axis {a} (size {d}) of in_dims {list(ind)} is not mapped by axis_map {list(amap)}")
    return ind, outd, amap


_check_axis_map_cached = memo("runtime.axis_map", 1024)(_check_axis_map)


def _prod(dims: Sequence[int]) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


def broadcast_to(x: Buffer, in_dims: Sequence[int], out_dims: Sequence[int], axis_map: Sequence[int]) -> Buffer:
    """Broadcast x (in_dims) to out_dims; axis_map[j] = 0 inserts output axis j, else names input axis + 1."""
    ind, outd, amap = check_axis_map("broadcast_to", in_dims, out_dims, axis_map)
    check_buffer("broadcast_to", "x", x, _prod(ind))
    return wrap(x._ctx, run_allocating("broadcast_to", x._ctx, _prod(outd), x._ctx.backend.broadcast_to, x._data, ind, outd, amap))


def reduce_from_broadcast(dout: Buffer, in_dims: Sequence[int], out_dims: Sequence[int],
                          axis_map: Sequence[int]) -> Buffer:
    """Adjoint of broadcast_to: sum dout (out_dims) over the broadcast axes back to in_dims."""
    ind, outd, amap = check_axis_map("reduce_from_broadcast", in_dims, out_dims, axis_map)
    check_buffer("reduce_from_broadcast", "dout", dout, _prod(outd))
    ctx = dout._ctx
    return wrap(ctx, run_allocating("reduce_from_broadcast", ctx, _prod(ind), ctx.backend.reduce_from_broadcast,
                           dout._data, ind, outd, amap))


def swap_adjacent_at_depth(b: Buffer, dims: Sequence[int], depth: int) -> Buffer:
    """Swap axes depth and depth+1 of an N-D buffer (the identity when depth+1 >= rank)."""
    d = _nd("swap_adjacent_at_depth", b, dims)
    dp = check_u32("swap_adjacent_at_depth", "depth", depth)
    return wrap(b._ctx, run_allocating("swap_adjacent_at_depth", b._ctx, b.size, b._ctx.backend.swap_adjacent_at_depth,
                              b._data, d, dp))


def permute(b: Buffer, dims: Sequence[int], perm: Sequence[int]) -> Buffer:
    """out = b.reshape(dims).transpose(perm), row-major: output axis j is input axis perm[j].

    Ours (the seed composes permutations from swap_adjacent_at_depth): one pass instead of one per
    adjacent swap, e.g. the (B, L, 3, H, D) -> (3, B, H, L, D) split of attention heads.
    """
    d = _nd("permute", b, dims)
    p = check_u32_tuple("permute", "perm", perm)
    if sorted(p) != list(range(len(d))):
        raise ArgumentError(f"permute: perm must be a permutation of 0..{len(d) - 1} (one per axis of dims {d}), got {p}")
    return wrap(b._ctx, run_allocating("permute", b._ctx, b.size, b._ctx.backend.permute, b._data, d, p))


def transpose2d(b: Buffer, rows: int, cols: int) -> Buffer:
    """Row-major transpose of a (rows, cols) buffer into (cols, rows)."""
    r, c = _matrix("transpose2d", b, rows, cols)
    return wrap(b._ctx, run_allocating("transpose2d", b._ctx, b.size, b._ctx.backend.transpose2d, b._data, r, c))


def _bmm_dims(op: str, batch: Any, m: Any, n: Any, p: Any) -> tuple[int, int, int, int]:
    # The hot path (every linear layer): four plain ints in range skip the per-argument checks.
    if type(batch) is int and type(m) is int and type(n) is int and type(p) is int \
            and 0 <= batch < U32_LIMIT and 0 <= m < U32_LIMIT and 0 <= n < U32_LIMIT and 0 <= p < U32_LIMIT:
        return batch, m, n, p
    return tuple(check_u32(op, k, v) for k, v in (("batch", batch), ("m", m), ("n", n), ("p", p)))  # type: ignore


def bmm(a: Buffer, b: Buffer, batch: int, m: int, n: int, p: int) -> Buffer:
    """Batched matmul: (batch, m, n) @ (batch, n, p) -> (batch, m, p), row-major."""
    bt, m_, n_, p_ = _bmm_dims("bmm", batch, m, n, p)
    check_buffer("bmm", "a", a, check_product("bmm", "batch*m*n", bt, m_, n_))
    check_buffer("bmm", "b", b, check_product("bmm", "batch*n*p", bt, n_, p_))
    ctx = same_device("bmm", a=a, b=b)
    n_out = check_product("bmm", "batch*m*p", bt, m_, p_)
    return wrap(ctx, run_allocating("bmm", ctx, n_out, ctx.backend.bmm, a._data, b._data, bt, m_, n_, p_))


def _bmm_variant(name: str, a_dims: tuple[str, str], b_dims: tuple[str, str], a: Buffer, b: Buffer, batch: int,
        m: int, n: int, p: int) -> Buffer:
    dims = dict(zip(("batch", "m", "n", "p"), _bmm_dims(name, batch, m, n, p)))
    bt = dims["batch"]
    check_buffer(name, "a", a, check_product(name, f"batch*{a_dims[0]}*{a_dims[1]}", bt, dims[a_dims[0]], dims[a_dims[1]]))
    check_buffer(name, "b", b, check_product(name, f"batch*{b_dims[0]}*{b_dims[1]}", bt, dims[b_dims[0]], dims[b_dims[1]]))
    ctx = same_device(name, a=a, b=b)
    n_out = check_product(name, "batch*m*p", bt, dims["m"], dims["p"])
    return wrap(ctx, run_allocating(name, ctx, n_out, getattr(ctx.backend, name), a._data, b._data, bt,
                           dims["m"], dims["n"], dims["p"]))


def bmm_nt(a: Buffer, b: Buffer, batch: int, m: int, n: int, p: int) -> Buffer:
    """a (batch, m, n) times b^T, b stored (batch, p, n): (batch, m, p). One GEMM, no transpose copy."""
    return _bmm_variant("bmm_nt", ("m", "n"), ("p", "n"), a, b, batch, m, n, p)


def bmm_tn(a: Buffer, b: Buffer, batch: int, m: int, n: int, p: int) -> Buffer:
    """a^T times b, a stored (batch, n, m), b (batch, n, p): (batch, m, p). One GEMM, no transpose copy."""
    return _bmm_variant("bmm_tn", ("n", "m"), ("n", "p"), a, b, batch, m, n, p)


# -- indexing ----------------------------------------------------------------------------
def gather_vec(vec: Buffer, n: int, indices: Any, k: int) -> Buffer:
    """out[j] = vec[indices[j]], or 0 where indices[j] >= n."""
    n_ = check_u32("gather_vec", "n", n)
    check_buffer("gather_vec", "vec", vec, n_)
    idx = check_indices("gather_vec", "indices", indices, k)
    return wrap(vec._ctx, run_allocating("gather_vec", vec._ctx, len(idx), vec._ctx.backend.gather_vec, vec._data, n_, idx, len(idx)))


def gather_rows(mat: Buffer, rows: int, cols: int, indices: Any, k: int) -> Buffer:
    """out[j, :] = mat[indices[j], :], or a zero row where indices[j] >= rows."""
    r, c = check_u32("gather_rows", "rows", rows), check_u32("gather_rows", "cols", cols)
    check_buffer("gather_rows", "mat", mat, check_product("gather_rows", "rows*cols", r, c))
    idx = check_indices("gather_rows", "indices", indices, k)
    n_out = check_product("gather_rows", "k*cols", len(idx), c)
    return wrap(mat._ctx, run_allocating("gather_rows", mat._ctx, n_out, mat._ctx.backend.gather_rows, mat._data, r, c, idx, len(idx)))


def scatter_add(x: Buffer, values: Buffer, n: int, indices: Any, k: int) -> Buffer:
    """A copy of x with out[indices[j]] += values[j]; indices >= n are ignored, repeats accumulate."""
    n_ = check_u32("scatter_add", "n", n)
    check_buffer("scatter_add", "x", x, n_)
    idx = check_indices("scatter_add", "indices", indices, k)
    check_buffer("scatter_add", "values", values, len(idx))
    ctx = same_device("scatter_add", x=x, values=values)
    return wrap(ctx, run_allocating("scatter_add", ctx, n_, ctx.backend.scatter_add, x._data, values._data, n_, idx, len(idx)))


def scatter_add_row(mat: Buffer, row_vec: Buffer, rows: int, cols: int, i: int) -> Buffer:
    """A copy of mat with out[i, :] += row_vec (ignored when i >= rows)."""
    r, c = check_u32("scatter_add_row", "rows", rows), check_u32("scatter_add_row", "cols", cols)
    i_ = check_u32("scatter_add_row", "i", i)
    check_buffer("scatter_add_row", "mat", mat, check_product("scatter_add_row", "rows*cols", r, c))
    check_buffer("scatter_add_row", "row_vec", row_vec, c)
    ctx = same_device("scatter_add_row", mat=mat, row_vec=row_vec)
    return wrap(ctx, run_allocating("scatter_add_row", ctx, mat.size, ctx.backend.scatter_add_row, mat._data, row_vec._data, r, c, i_))


def scatter_add_rows(mat: Buffer, values: Buffer, rows: int, cols: int, indices: Any, k: int) -> Buffer:
    """A copy of mat with out[indices[r], :] += values[r, :]; indices >= rows ignored, repeats accumulate."""
    r, c = check_u32("scatter_add_rows", "rows", rows), check_u32("scatter_add_rows", "cols", cols)
    check_buffer("scatter_add_rows", "mat", mat, check_product("scatter_add_rows", "rows*cols", r, c))
    idx = check_indices("scatter_add_rows", "indices", indices, k)
    check_buffer("scatter_add_rows", "values", values, check_product("scatter_add_rows", "k*cols", len(idx), c))
    ctx = same_device("scatter_add_rows", mat=mat, values=values)
    return wrap(ctx, run_allocating("scatter_add_rows", ctx, mat.size, ctx.backend.scatter_add_rows,
                           mat._data, values._data, r, c, idx, len(idx)))


# -- fused rows --------------------------------------------------------------------------
def softmax_rows(x: Buffer, rows: int, cols: int) -> Buffer:
    """Row-wise stable softmax of a (rows, cols) buffer."""
    r, c = _matrix("softmax_rows", x, rows, cols)
    return wrap(x._ctx, run_allocating("softmax_rows", x._ctx, x.size, x._ctx.backend.softmax_rows, x._data, r, c))


def log_softmax_rows(x: Buffer, rows: int, cols: int) -> Buffer:
    """Row-wise stable log-softmax: x - max - log(sum(exp(x - max)))."""
    r, c = _matrix("log_softmax_rows", x, rows, cols)
    return wrap(x._ctx, run_allocating("log_softmax_rows", x._ctx, x.size, x._ctx.backend.log_softmax_rows, x._data, r, c))


def _rows_bwd(name: str, y: Buffer, dy: Buffer, rows: int, cols: int) -> Buffer:
    r, c = check_u32(name, "rows", rows), check_u32(name, "cols", cols)
    n = check_product(name, "rows*cols", r, c)
    check_buffer(name, "y", y, n)
    check_buffer(name, "dy", dy, n)
    ctx = same_device(name, y=y, dy=dy)
    return wrap(ctx, run_allocating(name, ctx, n, getattr(ctx.backend, name), y._data, dy._data, r, c))


def softmax_rows_bwd(y: Buffer, dy: Buffer, rows: int, cols: int) -> Buffer:
    """dx = y * (dy - sum(dy * y, axis=1)), y the softmax output."""
    return _rows_bwd("softmax_rows_bwd", y, dy, rows, cols)


def log_softmax_rows_bwd(y: Buffer, dy: Buffer, rows: int, cols: int) -> Buffer:
    """dx = dy - exp(y) * sum(dy, axis=1), y the log-softmax output."""
    return _rows_bwd("log_softmax_rows_bwd", y, dy, rows, cols)


# -- random numbers ----------------------------------------------------------------------
def _check_key(op: str, key: Any) -> int:
    if isinstance(key, bool) or not isinstance(key, int) and not hasattr(key, "__index__"):
        raise ArgumentError(f"{op}: key must be an unsigned 64-bit integer, got {key!r}")
    k = int(key)
    if not 0 <= k < 2**64:
        raise ArgumentError(f"{op}: key must be in [0, 2**64), got {k}")
    return k


def rand_uniform(n: int, key: int, device: Any = "cpu") -> Buffer:
    """u[i] = float32(low32(splitmix64(key + i)) / 2**32): identical bits on every device."""
    n_ = check_u32("rand_uniform", "n", n)
    k = _check_key("rand_uniform", key)
    ctx = get_context(device, "rand_uniform")
    return wrap(ctx, run_allocating("rand_uniform", ctx, n_, ctx.backend.rand_uniform, n_, k))


def bernoulli_mask(n: int, keep_prob: float, key: int, device: Any = "cpu") -> Buffer:
    """m[i] = 1.0 if float32(keep_prob) > rand_uniform(n, key)[i] else 0.0."""
    n_ = check_u32("bernoulli_mask", "n", n)
    p = check_scalar("bernoulli_mask", "keep_prob", keep_prob)
    k = _check_key("bernoulli_mask", key)
    ctx = get_context(device, "bernoulli_mask")
    return wrap(ctx, run_allocating("bernoulli_mask", ctx, n_, ctx.backend.bernoulli_mask, n_, p, k))


def rand_normal(n: int, key: int, device: Any = "cpu") -> Buffer:
    """Standard normal samples by Box-Muller from correctly rounded operations: same bits on every device."""
    n_ = check_u32("rand_normal", "n", n)
    k = _check_key("rand_normal", key)
    ctx = get_context(device, "rand_normal")
    return wrap(ctx, run_allocating("rand_normal", ctx, n_, ctx.backend.rand_normal, n_, k))


for _family in (primitives_conv, primitives_pool, primitives_norm, primitives_classify, primitives_spectral,
                primitives_scan, primitives_attention, primitives_optim, primitives_fast, primitives_rnn,
                primitives_fft, primitives_spectral_nd):
    globals().update({_n: getattr(_family, _n) for _n in _family.__all__})
    __all__ += _family.__all__
del _family
