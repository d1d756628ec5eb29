"""CPU kernels of the fused optimizer steps: adam_step and sgd_step (Numba, one pass), and their
multi-tensor forms (a loop over the tensors: on the CPU a call costs microseconds, not a launch);
and clip_grad_norm_'s norm2_many (Numba: CUDA's order of summation, so the same bits) and
scale_many (a NumPy product per tensor).

Each element is read once and written once (p, g, m, v in; p, m, v out), in float32 arithmetic
arranged as PyTorch's CPU kernels arrange it (see runtime/primitives_optim.py): a fused
multiply-add where torch's vectorized kernel uses one (an LLVM ``fma`` intrinsic: one rounding,
the same bits as CUDA's fmaf), one rounding per operation elsewhere. The coefficients arrive
already rounded to float32. Tensors that ``parallel.parts`` splits run in parallel chunks
(elementwise: the result does not depend on the split).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange, types
from numba.extending import intrinsic

from .parallel import parts

F32 = np.float32

__all__ = ["adam_step", "adam_step_many", "adam_step_many_inplace", "sgd_step", "sgd_step_many",
           "sgd_step_many_inplace", "norm2_many", "scale_many"]

_CHUNK = 1 << 15  # elements per parallel task, and the work that pays for a thread (parallel.parts)


def _split(n: int) -> bool:
    return parts(n, -(-n // _CHUNK), _CHUNK) > 1


@intrinsic
def _fmaf(typingctx, a, b, c):
    """fma(a, b, c) on float32: a * b + c with one rounding (llvm.fma.f32)."""
    sig = types.float32(types.float32, types.float32, types.float32)

    def codegen(context, builder, signature, args):
        return builder.fma(*args)

    return sig, codegen


@njit(inline="always", error_model="numpy")
def _adam_elem(pi, gi, mi, vi, wd, decay, w1, b2, w2, bc2s, eps, nss, mode):
    """One element's new (p, m, v)."""
    if mode == 1:
        gi = _fmaf(pi, wd, gi)              # grad.add(param, alpha=wd)
    elif mode == 2:
        pi = pi * decay                     # param.mul_(1 - lr * wd)
    d = gi - mi
    if w1 < F32(0.5):                       # torch's lerp: self + w (end - self) for |w| < 0.5 ...
        mi = _fmaf(w1, d, mi)               # exp_avg.lerp_(grad, 1 - beta1)
    else:                                   # ... else end + (w - 1) (end - self)
        mi = _fmaf(w1 - F32(1.0), d, gi)
    vi = _fmaf(w2 * gi, gi, vi * b2)        # exp_avg_sq.mul_(beta2).addcmul_(g, g, value=1 - beta2)
    den = np.sqrt(vi) / bc2s + eps          # (exp_avg_sq.sqrt() / bc2_sqrt).add_(eps)
    return pi + (nss * mi) / den, mi, vi    # param.addcdiv_(exp_avg, denom, value=-step_size)


# The loops take slices and run from 0: with ``range(lo, hi)`` Numba cannot rule out a negative
# index, wraps it, and LLVM keeps the loop scalar (several times slower). In place
# (p, m, v written where they were read) is its own loop, not the out-of-place one with po = p:
# LLVM's runtime alias check sees po overlap p and takes the scalar loop too.
@njit(inline="always", error_model="numpy")
def _adam_range(p, g, m, v, po, mo, vo, wd, decay, w1, b2, w2, bc2s, eps, nss, mode):
    for i in range(p.size):
        po[i], mo[i], vo[i] = _adam_elem(p[i], g[i], m[i], v[i], wd, decay, w1, b2, w2, bc2s, eps, nss, mode)


@njit(inline="always", error_model="numpy")
def _adam_range_inplace(p, g, m, v, wd, decay, w1, b2, w2, bc2s, eps, nss, mode):
    for i in range(p.size):
        p[i], m[i], v[i] = _adam_elem(p[i], g[i], m[i], v[i], wd, decay, w1, b2, w2, bc2s, eps, nss, mode)


@njit(cache=True, error_model="numpy")
def _adam_seq(p, g, m, v, po, mo, vo, wd, decay, w1, b2, w2, bc2s, eps, nss, mode):
    _adam_range(p, g, m, v, po, mo, vo, wd, decay, w1, b2, w2, bc2s, eps, nss, mode)


@njit(cache=True, parallel=True, error_model="numpy")
def _adam_par(p, g, m, v, po, mo, vo, wd, decay, w1, b2, w2, bc2s, eps, nss, mode):
    n = p.size
    for c in prange((n + _CHUNK - 1) // _CHUNK):
        lo = c * _CHUNK
        hi = min(n, lo + _CHUNK)
        _adam_range(p[lo:hi], g[lo:hi], m[lo:hi], v[lo:hi], po[lo:hi], mo[lo:hi], vo[lo:hi],
                    wd, decay, w1, b2, w2, bc2s, eps, nss, mode)


@njit(cache=True, error_model="numpy")
def _adam_seq_inplace(p, g, m, v, wd, decay, w1, b2, w2, bc2s, eps, nss, mode):
    _adam_range_inplace(p, g, m, v, wd, decay, w1, b2, w2, bc2s, eps, nss, mode)


@njit(cache=True, parallel=True, error_model="numpy")
def _adam_par_inplace(p, g, m, v, wd, decay, w1, b2, w2, bc2s, eps, nss, mode):
    n = p.size
    for c in prange((n + _CHUNK - 1) // _CHUNK):
        lo = c * _CHUNK
        hi = min(n, lo + _CHUNK)
        _adam_range_inplace(p[lo:hi], g[lo:hi], m[lo:hi], v[lo:hi], wd, decay, w1, b2, w2, bc2s, eps, nss, mode)


@njit(inline="always", error_model="numpy")
def _sgd_elem(pi, gi, b, i, wd, mom, keep, nlr, has_wd, first, nesterov):
    """One element's new (p, buf); b[i] is read only after the first step."""
    if has_wd:
        gi = _fmaf(pi, wd, gi)                  # grad.add(param, alpha=wd)
    if first:
        bi = gi                                 # buf = grad.clone()
    else:
        bi = _fmaf(gi, keep, b[i] * mom)        # buf.mul_(momentum).add_(grad, alpha=1 - dampening)
    if nesterov:
        di = _fmaf(bi, mom, gi)                 # grad.add(buf, alpha=momentum)
    else:
        di = bi
    return _fmaf(di, nlr, pi), bi               # param.add_(grad, alpha=-lr)


# In place is its own loop, as Adam's: p and b written where they were read. _NO_BUF (a mode bit
# the kernels alone use) leaves b unwritten: sgd_step_many_inplace without buffers (plain SGD).
_NO_BUF = 8


@njit(inline="always", error_model="numpy")
def _sgd_range(p, g, b, po, bo, wd, mom, keep, nlr, mode):
    has_wd, first, nesterov = (mode & 1) != 0, (mode & 2) != 0, (mode & 4) != 0
    for i in range(p.size):
        po[i], bo[i] = _sgd_elem(p[i], g[i], b, i, wd, mom, keep, nlr, has_wd, first, nesterov)


@njit(inline="always", error_model="numpy")
def _sgd_range_inplace(p, g, b, wd, mom, keep, nlr, mode):
    has_wd, first, nesterov, write_b = (mode & 1) != 0, (mode & 2) != 0, (mode & 4) != 0, (mode & _NO_BUF) == 0
    for i in range(p.size):
        pi, bi = _sgd_elem(p[i], g[i], b, i, wd, mom, keep, nlr, has_wd, first, nesterov)
        p[i] = pi
        if write_b:
            b[i] = bi


@njit(cache=True, error_model="numpy")
def _sgd_seq(p, g, b, po, bo, wd, mom, keep, nlr, mode):
    _sgd_range(p, g, b, po, bo, wd, mom, keep, nlr, mode)


@njit(cache=True, parallel=True, error_model="numpy")
def _sgd_par(p, g, b, po, bo, wd, mom, keep, nlr, mode):
    n = p.size
    for c in prange((n + _CHUNK - 1) // _CHUNK):
        lo = c * _CHUNK
        hi = min(n, lo + _CHUNK)
        _sgd_range(p[lo:hi], g[lo:hi], b[lo:hi], po[lo:hi], bo[lo:hi], wd, mom, keep, nlr, mode)


@njit(cache=True, error_model="numpy")
def _sgd_seq_inplace(p, g, b, wd, mom, keep, nlr, mode):
    _sgd_range_inplace(p, g, b, wd, mom, keep, nlr, mode)


@njit(cache=True, parallel=True, error_model="numpy")
def _sgd_par_inplace(p, g, b, wd, mom, keep, nlr, mode):
    n = p.size
    for c in prange((n + _CHUNK - 1) // _CHUNK):
        lo = c * _CHUNK
        hi = min(n, lo + _CHUNK)
        _sgd_range_inplace(p[lo:hi], g[lo:hi], b[lo:hi], wd, mom, keep, nlr, mode)


def adam_step(p, g, m, v, n, wd, decay, w1, beta2, w2, bc2_sqrt, eps, neg_step_size, mode):
    po, mo, vo = np.empty(n, F32), np.empty(n, F32), np.empty(n, F32)
    if n:
        fn = _adam_par if _split(n) else _adam_seq
        fn(p, g, m, v, po, mo, vo, F32(wd), F32(decay), F32(w1), F32(beta2), F32(w2), F32(bc2_sqrt), F32(eps),
           F32(neg_step_size), int(mode))
    return po, mo, vo


def sgd_step(p, g, buf, n, wd, momentum, keep, neg_lr, mode):
    po, bo = np.empty(n, F32), np.empty(n, F32)
    if n:
        b = g if buf is None else buf  # first step: buf is not read
        fn = _sgd_par if _split(n) else _sgd_seq
        fn(p, g, b, po, bo, F32(wd), F32(momentum), F32(keep), F32(neg_lr), int(mode))
    return po, bo


def adam_step_many_inplace(ps, gs, ms, vs, wd, decay, w1, beta2, w2, bc2_sqrt, eps, neg_step_size, mode):
    """adam_step per tensor with its outputs the inputs p, m, v: each element is read, then written."""
    c = (F32(wd), F32(decay), F32(w1), F32(beta2), F32(w2), F32(bc2_sqrt), F32(eps), F32(neg_step_size), int(mode))
    for p, g, m, v in zip(ps, gs, ms, vs):
        if p.size:
            (_adam_par_inplace if _split(p.size) else _adam_seq_inplace)(p, g, m, v, *c)


def adam_step_many(ps, gs, ms, vs, wd, decay, w1, beta2, w2, bc2_sqrt, eps, neg_step_size, mode):
    """adam_step per tensor (on the CPU a call costs microseconds, not a kernel launch)."""
    outs = ([], [], [])
    for p, g, m, v in zip(ps, gs, ms, vs):
        for out, a in zip(outs, adam_step(p, g, m, v, p.size, wd, decay, w1, beta2, w2, bc2_sqrt, eps, neg_step_size,
                                          mode)):
            out.append(a)
    return outs


def sgd_step_many_inplace(ps, gs, bufs, wd, momentum, keep, neg_lr, mode):
    """sgd_step per tensor with its outputs the inputs p and buf (bufs None: p alone; the first
    step's buffer, g in its place, is then neither read nor written)."""
    c = (F32(wd), F32(momentum), F32(keep), F32(neg_lr), int(mode) | (_NO_BUF if bufs is None else 0))
    for p, g, b in zip(ps, gs, gs if bufs is None else bufs):
        if p.size:
            (_sgd_par_inplace if _split(p.size) else _sgd_seq_inplace)(p, g, b, *c)


def sgd_step_many(ps, gs, bufs, wd, momentum, keep, neg_lr, mode):
    """sgd_step per tensor: the lists (p_new per tensor, buf_new per tensor)."""
    outs = ([], [])
    for i, (p, g) in enumerate(zip(ps, gs)):
        pn, bn = sgd_step(p, g, None if bufs is None else bufs[i], p.size, wd, momentum, keep, neg_lr, mode)
        outs[0].append(pn)
        outs[1].append(bn)
    return outs


# -- norm2_many and scale_many (clip_grad_norm_) ------------------------------------------------------
# norm2_many runs the CUDA kernels' order of summation exactly (optim.cu, tl_norm2_many_chunks and
# tl_norm2_many_finish), in double: chunks of _N2_CHUNK elements; in a chunk, "thread" j of
# _N2_THREADS adds the quad sums (x0^2 + x1^2) + (x2^2 + x3^2) of quads j + _N2_THREADS k in k
# order (elements past the end are 0); the threads' sums meet in the block's fixed tree (warp
# butterflies, then the warp sums padded to 32 lanes); a tensor's chunk partials are added by 32
# "lanes" (lane l: partials l, l + 32, ... in order) and a butterfly; then sqrt, rounded to
# float32. Squares of float32 values are exact in double, and double addition is commutative, so
# the bits are CUDA's. Tensors of several chunks run their chunks in parallel (the order of the
# adds does not depend on it).
_N2_THREADS = 256
_N2_QUADS = 8
_N2_CHUNK = 4 * _N2_THREADS * _N2_QUADS
_N2_MIN_SPLIT = 1 << 16  # elements per thread that pay for a parallel region (parallel.parts)


@njit(inline="always", error_model="numpy")
def _butterfly32(v):
    """The value every lane holds after CUDA's xor butterfly (o = 16, 8, 4, 2, 1: v += shfl_xor(v, o))
    over v[0:32], which it overwrites: lanes l and l ^ o hold the same sum (a + b == b + a), so
    the lanes below o carry all of it."""
    o = 16
    while o > 0:
        for lane in range(o):
            v[lane] = v[lane] + v[lane + o]
        o >>= 1
    return v[0]


@njit(inline="always", error_model="numpy")
def _n2_chunk(x, lo, m, acc, lanes, warp_sums):
    """tl_norm2_many_chunks' partial of the m elements x[lo:lo + m] (acc: _N2_THREADS doubles,
    lanes: 32, warp_sums: _N2_THREADS / 32, all scratch)."""
    for j in range(_N2_THREADS):
        acc[j] = 0.0
    if m == _N2_CHUNK:  # a whole chunk: no bounds tests, so the loop over j vectorizes
        for k in range(_N2_QUADS):
            q = x[lo + 4 * _N2_THREADS * k:lo + 4 * _N2_THREADS * (k + 1)]
            for j in range(_N2_THREADS):
                a, b = np.float64(q[4 * j]), np.float64(q[4 * j + 1])
                c, d = np.float64(q[4 * j + 2]), np.float64(q[4 * j + 3])
                acc[j] += (a * a + b * b) + (c * c + d * d)
        m = 0  # (the loop below then adds nothing)
    for k in range(_N2_QUADS if m else 0):
        for j in range(_N2_THREADS):
            e = 4 * (j + _N2_THREADS * k)
            if e + 4 <= m:
                a, b = np.float64(x[lo + e]), np.float64(x[lo + e + 1])
                c, d = np.float64(x[lo + e + 2]), np.float64(x[lo + e + 3])
            elif e < m:
                a = np.float64(x[lo + e])
                b = np.float64(x[lo + e + 1]) if e + 1 < m else 0.0
                c = np.float64(x[lo + e + 2]) if e + 2 < m else 0.0
                d = 0.0
            else:
                continue  # a quad of zeros adds +0.0: nothing (acc >= +0 or NaN)
            acc[j] += (a * a + b * b) + (c * c + d * d)
    nwarps = _N2_THREADS // 32
    for w in range(nwarps):
        for lane in range(32):
            lanes[lane] = acc[32 * w + lane]
        warp_sums[w] = _butterfly32(lanes)
    for lane in range(32):
        lanes[lane] = warp_sums[lane] if lane < nwarps else 0.0
    return _butterfly32(lanes)


@njit(inline="always", error_model="numpy")
def _n2_chunks(x, partials, c0, c1):
    acc, lanes, warp_sums = np.empty(_N2_THREADS), np.empty(32), np.empty(_N2_THREADS // 32)
    n = x.size
    for c in range(c0, c1):
        lo = c * _N2_CHUNK
        partials[c] = _n2_chunk(x, lo, min(n - lo, _N2_CHUNK), acc, lanes, warp_sums)


@njit(cache=True, error_model="numpy")
def _n2_partials_seq(x, partials):
    _n2_chunks(x, partials, 0, partials.size)


@njit(cache=True, parallel=True, error_model="numpy")
def _n2_partials_par(x, partials, parts):
    nc = partials.size
    for p in prange(parts):
        _n2_chunks(x, partials, (nc * p) // parts, (nc * (p + 1)) // parts)


@njit(cache=True, error_model="numpy")
def _n2_finish(partials):
    """tl_norm2_many_finish's sum of one tensor's partials (32 lanes, then the butterfly)."""
    lanes = np.zeros(32)
    for lane in range(32):
        s = 0.0
        for c in range(lane, partials.size, 32):
            s += partials[c]
        lanes[lane] = s
    return _butterfly32(lanes)


def norm2_many(xs):
    """The float32 2-norms of the tensors xs: CUDA's order of summation (see above), in double."""
    sums = np.empty(len(xs), np.float64)
    for i, x in enumerate(xs):
        chunks = -(-x.size // _N2_CHUNK)
        partials = np.empty(chunks, np.float64)
        if chunks:
            parts_ = parts(x.size, chunks, _N2_MIN_SPLIT)
            if parts_ > 1:
                _n2_partials_par(x, partials, parts_)
            else:
                _n2_partials_seq(x, partials)
        sums[i] = _n2_finish(partials)
    with np.errstate(invalid="ignore"):
        return np.sqrt(sums).astype(F32)  # sqrt correctly rounded in double, then rounded to float32


def scale_many(xs, coef):
    """x * coef[0] per tensor: one float32 product per element, as mul's kernel (np.multiply)."""
    c = coef[:1]
    with np.errstate(all="ignore"):
        return [np.multiply(x, c) for x in xs]
