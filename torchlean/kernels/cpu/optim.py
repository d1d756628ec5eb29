"""CPU kernels of the fused optimizer steps: adam_step and sgd_step (Numba, one pass), and their
multi-tensor forms (a loop over the tensors: on the CPU a call costs microseconds, not a launch).

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
           "sgd_step_many_inplace"]

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
