"""Primitives of the fused optimizer steps: adam_step (Adam and AdamW) and sgd_step, and their
multi-tensor forms adam_step_many and sgd_step_many (T tensors in one call: one launch on CUDA).

Each is ONE pass over the parameter: every input element is read once and every output element
written once (a step of PyTorch's single-tensor Adam is about ten passes). The arithmetic follows
PyTorch's CPU ``_single_tensor_adam`` / ``_single_tensor_sgd`` operation by operation, so that a
torchlean step lands within an ulp or two of torch's:

* The hyperparameters are host doubles (Python floats, as in torch.optim), not rounded to float32
  at the boundary like other primitives' scalars: the float32 coefficients the kernels use are
  derived from them in float64 here, exactly as PyTorch derives its Python-float scalars
  (1 - lr * wd, 1 - beta1, 1 - beta2, sqrt(1 - beta2**step), -lr / (1 - beta1**step)), then each is
  rounded to float32 once (as PyTorch's CPU kernels do with a Python scalar). The backends receive
  those coefficients (``adam_coefficients`` / ``sgd_coefficients``), not the hyperparameters.
* Where PyTorch's vectorized CPU kernel fuses a multiply-add (add with alpha, lerp, the second half
  of addcmul), the kernels use a fused multiply-add too (one rounding); everything else rounds
  after each operation. The remaining difference to torch: torch's CPU float32 sqrt (MKL VML) is
  not correctly rounded (we measured 0.75 ulp), ours is.

Also here, for ``clip_grad_norm_``: the multi-tensor ``norm2_many`` (the 2-norm of each of T
tensors: two launches on CUDA, whatever T and the sizes) and ``scale_many`` (T tensors times one
device scalar: one launch), so that clipping costs a handful of launches, not ~7 per parameter.

Inputs are never modified; the outputs are new buffers. The exceptions are
``adam_step_many_inplace`` and ``sgd_step_many_inplace``, named for it: the optimizer's own step,
which writes the new p and state over the old ones (as every PyTorch optimizer does) and so
allocates nothing.
"""

from __future__ import annotations

import math
import numbers
import struct
from typing import Any

from ..errors import ArgumentError, ShapeError
from .buffer import Buffer, check_buffer, full, same_device, wrap
from .checks import check_u32
from .oom import run_allocating

__all__ = ["adam_step", "adam_step_many", "adam_step_many_inplace", "sgd_step", "sgd_step_many",
           "sgd_step_many_inplace", "norm2_many", "scale_many"]

_F32 = struct.Struct("f")


def _f32(x: float) -> float:
    """float32(x) as a Python float (round to nearest even; beyond the range: +-inf)."""
    try:
        return _F32.unpack(_F32.pack(x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


def _real(op: str, name: str, value: Any) -> float:
    if type(value) is float:
        if math.isfinite(value):
            return value
    elif isinstance(value, (bool,)) or not isinstance(value, numbers.Real):
        raise ArgumentError(f"{op}: argument {name} must be a real number, got {value!r} ({type(value).__name__})")
    v = float(value)
    if not math.isfinite(v):
        raise ArgumentError(f"{op}: argument {name} must be finite, got {value!r}")
    return v


def _flag(op: str, name: str, value: Any) -> bool:
    if isinstance(value, bool) or (isinstance(value, numbers.Integral) and value in (0, 1)):
        return bool(value)
    raise ArgumentError(f"{op}: argument {name} must be a bool, got {value!r} ({type(value).__name__})")


def adam_coefficients(lr: float, beta1: float, beta2: float, eps: float, weight_decay: float, step: int,
                      decoupled: bool) -> tuple:
    """The kernels' float32 coefficients, derived in float64 as PyTorch does, each rounded once:
    (wd, decay, w1, beta2, w2, bc2_sqrt, eps, neg_step_size, mode) with mode 0 = no weight decay,
    1 = Adam's L2 term g + wd * p, 2 = AdamW's decay p * (1 - lr * wd)."""
    bc1 = 1.0 - beta1 ** step
    bc2 = 1.0 - beta2 ** step
    mode = 0 if weight_decay == 0.0 else (2 if decoupled else 1)
    return (_f32(weight_decay), _f32(1.0 - lr * weight_decay), _f32(1.0 - beta1), _f32(beta2), _f32(1.0 - beta2),
            _f32(bc2 ** 0.5), _f32(eps), _f32(-(lr / bc1)), mode)


def sgd_coefficients(lr: float, momentum: float, dampening: float, weight_decay: float) -> tuple:
    """(wd, momentum, 1 - dampening, -lr) rounded to float32 once each."""
    return _f32(weight_decay), _f32(momentum), _f32(1.0 - dampening), _f32(-lr)


def _buffers(op: str, n: int, **bufs: Buffer) -> Any:
    for name, b in bufs.items():
        if type(b) is not Buffer or b._data is None or b._nbytes != 4 * n:
            check_buffer(op, name, b, n)
    return same_device(op, **bufs)


def adam_step(p: Buffer, g: Buffer, m: Buffer, v: Buffer, n: int, lr: float, beta1: float, beta2: float,
              eps: float, weight_decay: float, step: int, decoupled: bool) -> tuple[Buffer, Buffer, Buffer]:
    """(p_new, m_new, v_new): one Adam step (decoupled=False: g <- g + wd p) or AdamW step
    (decoupled=True: p <- p (1 - lr wd)) on n elements, in PyTorch's order:
    m <- lerp(m, g, 1 - beta1); v <- beta2 v + (1 - beta2) g g;
    p <- p - (lr / (1 - beta1**step)) m / (sqrt(v) / sqrt(1 - beta2**step) + eps).
    ``step`` is the step number after incrementing (1 on the first step). lr, beta1, beta2, eps
    and weight_decay are host doubles: finite, beta1 and beta2 in [0, 1), eps >= 0."""
    op = "adam_step"
    n = check_u32(op, "n", n)
    ctx = _buffers(op, n, p=p, g=g, m=m, v=v)
    coef = _adam_hyper(op, lr, beta1, beta2, eps, weight_decay, step, decoupled)
    pn, mn, vn = run_allocating(op, ctx, 3 * n, ctx.backend.adam_step, p._data, g._data, m._data, v._data, n, *coef)
    return wrap(ctx, pn), wrap(ctx, mn), wrap(ctx, vn)


def _adam_hyper(op: str, lr: Any, beta1: Any, beta2: Any, eps: Any, weight_decay: Any, step: Any,
                decoupled: Any) -> tuple:
    """Check Adam's hyperparameters and derive the kernels' float32 coefficients."""
    lr, b1, b2 = _real(op, "lr", lr), _real(op, "beta1", beta1), _real(op, "beta2", beta2)
    eps_, wd = _real(op, "eps", eps), _real(op, "weight_decay", weight_decay)
    if not 0.0 <= b1 < 1.0:
        raise ArgumentError(f"{op}: argument beta1 must be in [0, 1), got {beta1!r}")
    if not 0.0 <= b2 < 1.0:
        raise ArgumentError(f"{op}: argument beta2 must be in [0, 1), got {beta2!r}")
    if eps_ < 0.0:
        raise ArgumentError(f"{op}: argument eps must be >= 0, got {eps!r}")
    s = check_u32(op, "step", step)
    if s < 1:
        raise ArgumentError(f"{op}: argument step must be >= 1 (the step number after incrementing), got {step!r}")
    return adam_coefficients(lr, b1, b2, eps_, wd, s, _flag(op, "decoupled", decoupled))


def adam_step_many(ps: Any, gs: Any, ms: Any, vs: Any, lr: float, beta1: float, beta2: float, eps: float,
                   weight_decay: float, step: int, decoupled: bool) -> tuple[Buffer, ...]:
    """adam_step on T tensors at once, with the same hyperparameters and step number:
    ps, gs, ms, vs are equally long sequences of buffers on one device (the i-th of each of the
    same size). Returns the flat tuple (p_new_0, ..., p_new_{T-1}, m_new_0, ..., v_new_{T-1}),
    bitwise equal to T adam_step calls. On CUDA it is one launch (per 1024 tensors) instead of T:
    for a model of many small parameters the step is launch-bound, not bandwidth-bound."""
    op = "adam_step_many"
    ctx, coef = _many_args(op, ps, gs, ms, vs, lr, beta1, beta2, eps, weight_decay, step, decoupled)
    if ctx is None:
        return ()
    po, mo, vo = run_allocating(op, ctx, 3 * sum(p.size for p in ps), ctx.backend.adam_step_many, [p._data for p in ps],
                      [g._data for g in gs], [m._data for m in ms], [v._data for v in vs], *coef)
    return tuple(wrap(ctx, a) for a in (*po, *mo, *vo))


def adam_step_many_inplace(ps: Any, gs: Any, ms: Any, vs: Any, lr: float, beta1: float, beta2: float, eps: float,
                           weight_decay: float, step: int, decoupled: bool) -> tuple[Buffer, ...]:
    """adam_step_many with the results written over ps, ms and vs (the same bits; nothing is
    allocated, and on CUDA the step is one launch with no per-tensor host work but a pointer).
    Returns adam_step_many's flat tuple, made of the written buffers: (*ps, *ms, *vs).
    The ONE primitive that modifies its inputs: the optimizer's step, as in PyTorch. ps, ms and vs
    must be 3T distinct buffers and none of them a gradient (ArgumentError otherwise: an element
    updated twice, or read after it was overwritten, would be wrong). Every tensor sharing one of
    these buffers (``p.detach()``) sees the new values, as in PyTorch."""
    op = "adam_step_many_inplace"
    ctx, coef = _many_args(op, ps, gs, ms, vs, lr, beta1, beta2, eps, weight_decay, step, decoupled)
    if ctx is None:
        return ()
    _check_written(op, "ps, ms and vs", (*ps, *ms, *vs), gs)
    run_allocating(op, ctx, 0, ctx.backend.adam_step_many_inplace, [p._data for p in ps], [g._data for g in gs],
         [m._data for m in ms], [v._data for v in vs], *coef)
    return (*ps, *ms, *vs)


def _many_args(op: str, ps: Any, gs: Any, ms: Any, vs: Any, lr: Any, beta1: Any, beta2: Any, eps: Any,
               weight_decay: Any, step: Any, decoupled: Any) -> tuple[Any, tuple]:
    """Check adam_step_many's arguments: (the device context, or None for T = 0; the coefficients)."""
    t = _sequences(op, ps=ps, gs=gs, ms=ms, vs=vs)
    coef = _adam_hyper(op, lr, beta1, beta2, eps, weight_decay, step, decoupled)
    if t == 0:
        return None, coef
    ctx = None
    for i in range(t):
        p, g, m, v = ps[i], gs[i], ms[i], vs[i]
        # the common case in one test per tensor; the named checks only when it fails
        if type(p) is Buffer and p._data is not None and type(g) is Buffer and g._data is not None \
                and type(m) is Buffer and m._data is not None and type(v) is Buffer and v._data is not None \
                and p._nbytes == g._nbytes == m._nbytes == v._nbytes \
                and p._ctx is g._ctx is m._ctx is v._ctx is (p._ctx if ctx is None else ctx):
            ctx = p._ctx
            continue
        ctx = _row_context(op, i, ctx, {f"ps[{i}]": p, f"gs[{i}]": g, f"ms[{i}]": m, f"vs[{i}]": v})
    return ctx, coef


def _sequences(op: str, **seqs: Any) -> int:
    """Check that the named arguments are equally long lists or tuples; their length T."""
    for name, seq in seqs.items():
        if not isinstance(seq, (list, tuple)):
            raise ArgumentError(f"{op}: argument {name} must be a list or tuple of Buffers, got {type(seq).__name__}")
    names = list(seqs)
    t = len(seqs[names[0]])
    for name, seq in seqs.items():
        if len(seq) != t:
            raise ArgumentError(f"{op}: {', '.join(names[:-1])} and {names[-1]} must have the same length; "
                                f"{names[0]} has {t}, {name} has {len(seq)}")
    return t


def _row_context(op: str, i: int, ctx: Any, row: dict[str, Any]) -> Any:
    """The named checks of the i-th buffers of a multi-tensor call (``row``: name -> buffer, the
    parameter first), where the one-test fast path failed: the device context they share, which
    must be ``ctx`` unless that is None (the first row)."""
    name, p = next(iter(row.items()))
    if type(p) is not Buffer or p._data is None:
        check_buffer(op, name, p)
    c = _buffers(op, p.size, **row)
    if ctx is not None and c is not ctx:
        seq = name.split("[")[0]  # the first sequence's name: ps, or xs
        raise ArgumentError(f"{op}: all buffers must be on one device; {seq}[0] is on {ctx.name}, {seq}[{i}] on {c.name}")
    return c


def _check_written(op: str, what: str, written: tuple, gs: Any) -> None:
    """An in-place step's written buffers must be distinct and none a gradient: an element updated
    twice, or read after it was overwritten, would be wrong."""
    ids = {id(b) for b in written}
    if len(ids) != len(written) or any(id(g) in ids for g in gs):
        raise ArgumentError(f"{op}: {what} must be {len(written)} distinct buffers and none of them in gs "
                            "(they are updated in place)")


def sgd_step(p: Buffer, g: Buffer, buf: Buffer | None, n: int, lr: float, momentum: float, dampening: float,
             weight_decay: float, nesterov: bool, first: bool) -> tuple[Buffer, Buffer]:
    """(p_new, buf_new): one SGD step on n elements, in PyTorch's order: g <- g + wd p (when
    wd != 0); buf <- g if ``first`` else momentum buf + (1 - dampening) g; d <- g + momentum buf
    if nesterov else buf; p <- p - lr d. With momentum 0 and first=True this is plain SGD
    (buf_new = g then). ``buf`` may be None when ``first``. Hyperparameters are finite host doubles."""
    op = "sgd_step"
    n = check_u32(op, "n", n)
    is_first = _flag(op, "first", first)
    if buf is None:
        if not is_first:
            raise ArgumentError(f"{op}: argument buf may be None only when first=True")
        ctx = _buffers(op, n, p=p, g=g)
    else:
        ctx = _buffers(op, n, p=p, g=g, buf=buf)
    coef = _sgd_hyper(op, lr, momentum, dampening, weight_decay, nesterov, is_first)
    pn, bn = run_allocating(op, ctx, 2 * n, ctx.backend.sgd_step, p._data, g._data, None if buf is None else buf._data, n,
                  *coef)
    return wrap(ctx, pn), wrap(ctx, bn)


def _sgd_hyper(op: str, lr: Any, momentum: Any, dampening: Any, weight_decay: Any, nesterov: Any,
               is_first: bool) -> tuple:
    """Check SGD's hyperparameters and derive the kernels' float32 coefficients and mode:
    (wd, momentum, 1 - dampening, -lr, mode) with mode bits 1 = weight decay, 2 = first step
    (the buffer starts at the gradient, buf is not read), 4 = nesterov."""
    lr_, mom = _real(op, "lr", lr), _real(op, "momentum", momentum)
    damp, wd = _real(op, "dampening", dampening), _real(op, "weight_decay", weight_decay)
    nest = _flag(op, "nesterov", nesterov)
    mode = (1 if wd != 0.0 else 0) | (2 if is_first else 0) | (4 if nest else 0)
    return (*sgd_coefficients(lr_, mom, damp, wd), mode)


def sgd_step_many(ps: Any, gs: Any, bufs: Any, lr: float, momentum: float, dampening: float, weight_decay: float,
                  nesterov: bool, first: bool) -> tuple[Buffer, ...]:
    """sgd_step on T tensors at once, with the same hyperparameters: ps, gs and bufs are equally
    long sequences of buffers on one device (the i-th of each of the same size); bufs may be None
    when ``first`` (not read, as sgd_step's buf). Returns the flat tuple (p_new_0, ...,
    p_new_{T-1}, buf_new_0, ..., buf_new_{T-1}), bitwise equal to T sgd_step calls. On CUDA it is
    one launch (per 1024 tensors) instead of T."""
    op = "sgd_step_many"
    ctx, coef = _sgd_many_args(op, ps, gs, bufs, lr, momentum, dampening, weight_decay, nesterov, first)
    if ctx is None:
        return ()
    po, bo = run_allocating(op, ctx, 2 * sum(p.size for p in ps), ctx.backend.sgd_step_many, [p._data for p in ps],
                            [g._data for g in gs], None if bufs is None else [b._data for b in bufs], *coef)
    return tuple(wrap(ctx, a) for a in (*po, *bo))


def sgd_step_many_inplace(ps: Any, gs: Any, bufs: Any, lr: float, momentum: float, dampening: float,
                          weight_decay: float, nesterov: bool, first: bool) -> tuple[Buffer, ...]:
    """sgd_step_many with the results written over ps and bufs (the same bits; nothing is
    allocated, and on CUDA the step is one launch). bufs may be None when ``first``: then only ps
    are written and the new buffers are not kept (plain SGD, momentum 0, keeps none). Returns the
    written buffers: (*ps, *bufs), or ps alone. Like adam_step_many_inplace it modifies its inputs:
    ps and bufs must be distinct buffers and none of them a gradient (ArgumentError otherwise), and
    every tensor sharing one of them sees the new values, as in PyTorch."""
    op = "sgd_step_many_inplace"
    ctx, coef = _sgd_many_args(op, ps, gs, bufs, lr, momentum, dampening, weight_decay, nesterov, first)
    if ctx is None:
        return ()
    written = tuple(ps) if bufs is None else (*ps, *bufs)
    _check_written(op, "ps and bufs", written, gs)
    run_allocating(op, ctx, 0, ctx.backend.sgd_step_many_inplace, [p._data for p in ps], [g._data for g in gs],
                   None if bufs is None else [b._data for b in bufs], *coef)
    return written


def _sgd_many_args(op: str, ps: Any, gs: Any, bufs: Any, lr: Any, momentum: Any, dampening: Any, weight_decay: Any,
                   nesterov: Any, first: Any) -> tuple[Any, tuple]:
    """Check sgd_step_many's arguments: (the device context, or None for T = 0; the coefficients)."""
    is_first = _flag(op, "first", first)
    if bufs is None:
        if not is_first:
            raise ArgumentError(f"{op}: argument bufs may be None only when first=True")
        t = _sequences(op, ps=ps, gs=gs)
    else:
        t = _sequences(op, ps=ps, gs=gs, bufs=bufs)
    coef = _sgd_hyper(op, lr, momentum, dampening, weight_decay, nesterov, is_first)
    if t == 0:
        return None, coef
    ctx = None
    for i in range(t):
        p, g = ps[i], gs[i]
        b = g if bufs is None else bufs[i]  # (no buffers: g checked twice, one test for both cases)
        if type(p) is Buffer and p._data is not None and type(g) is Buffer and g._data is not None \
                and type(b) is Buffer and b._data is not None and p._nbytes == g._nbytes == b._nbytes \
                and p._ctx is g._ctx is b._ctx is (p._ctx if ctx is None else ctx):
            ctx = p._ctx
            continue
        row = {f"ps[{i}]": p, f"gs[{i}]": g}
        if bufs is not None:
            row[f"bufs[{i}]"] = b
        ctx = _row_context(op, i, ctx, row)
    return ctx, coef


# -- clip_grad_norm_'s multi-tensor primitives ----------------------------------------------------
def _xs_context(op: str, xs: Any) -> Any:
    """Check that xs is a list or tuple of live Buffers on one device: that device's context, or
    None when xs is empty."""
    _sequences(op, xs=xs)
    ctx = None
    for i, x in enumerate(xs):
        if type(x) is Buffer and x._data is not None and x._ctx is (x._ctx if ctx is None else ctx):
            ctx = x._ctx
            continue
        ctx = _row_context(op, i, ctx, {f"xs[{i}]": x})
    return ctx


def norm2_many(xs: Any) -> Buffer:
    """The (T,) buffer of the 2-norms sqrt(sum_j xs[i][j]^2) of T buffers of any sizes on one
    device (0 for an empty buffer; T = 0: an empty buffer, on the CPU since no device is named).
    The squares are summed in double, in an order fixed by the sizes alone (chunks of 8192
    elements, each a fixed tree; a tensor's chunk sums in order): bitwise repeatable, the same
    bits on the CPU and CUDA, and no float32 overflow or underflow of a square. On CUDA it is two
    launches whatever T (chunk partials, then one warp per tensor)."""
    op = "norm2_many"
    ctx = _xs_context(op, xs)
    if ctx is None:
        return full(0, 0.0, "cpu")
    t = len(xs)
    return wrap(ctx, run_allocating(op, ctx, t, ctx.backend.norm2_many, [x._data for x in xs]))


def scale_many(xs: Any, coef: Buffer) -> tuple[Buffer, ...]:
    """(xs[0] * coef[0], ..., xs[T-1] * coef[0]): T buffers on one device times the one element of
    ``coef`` (a length-1 buffer on the same device, read there: no host round trip), as new
    buffers, each bitwise equal to ``mul(x, broadcast_to(coef, x.size))`` (one float32 rounding
    per element). On CUDA it is one launch (per 1024 tensors) instead of two per tensor."""
    op = "scale_many"
    if type(coef) is not Buffer or coef._data is None:
        check_buffer(op, "coef", coef)
    if coef._nbytes != 4:
        raise ShapeError(f"{op}: argument coef must be a length-1 Buffer (the factor), got {coef.size} elements")
    ctx = _xs_context(op, xs)
    if ctx is None:
        return ()
    if coef._ctx is not ctx:
        same_device(op, **{"xs[0]": xs[0], "coef": coef})  # raises DeviceError, naming both
    outs = run_allocating(op, ctx, sum(x.size for x in xs), ctx.backend.scale_many, [x._data for x in xs],
                          coef._data)
    return tuple(wrap(ctx, a) for a in outs)
