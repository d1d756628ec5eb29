"""Float64 references of the fused optimizer steps: adam_step (Adam and AdamW) and sgd_step, and
their multi-tensor forms (adam_step_many, sgd_step_many: the one-tensor step on each tensor); and
of clip_grad_norm_'s norm2_many (each tensor's 2-norm: NumPy's pairwise float64 sum of the
squares, not the kernels' chunked tree) and scale_many (each tensor times coef[0]).

Written from the textbook formulas (Kingma & Ba; PyTorch's SGD docs), in a different algebraic
form from the kernels (beta * m + (1 - beta) * g instead of a lerp, sqrt(v / bc2) instead of
sqrt(v) / sqrt(bc2)), so that a slip in the kernels' arrangement cannot hide in a shared routine.
Hyperparameters are the primitive's host doubles, used as they are (the kernels round the
coefficients derived from them to float32; the contract counts those roundings).
"""

from __future__ import annotations

import numpy as np

__all__ = ["adam_step", "adam_step_many", "adam_step_many_inplace", "sgd_step", "sgd_step_many",
           "sgd_step_many_inplace", "norm2_many", "scale_many"]


def _f64(a):
    return np.asarray(a, dtype=np.float64).reshape(-1)


def adam_step(p, g, m, v, n, lr, beta1, beta2, eps, weight_decay, step, decoupled):
    """(p_new, m_new, v_new) of one Adam (decoupled=False) or AdamW (decoupled=True) step."""
    p, g, m, v = _f64(p), _f64(g), _f64(m), _f64(v)
    lr, beta1, beta2, eps, wd = float(lr), float(beta1), float(beta2), float(eps), float(weight_decay)
    with np.errstate(all="ignore"):
        if wd != 0.0:
            if decoupled:
                p = p * (1.0 - lr * wd)
            else:
                g = g + wd * p
        m_new = beta1 * m + (1.0 - beta1) * g
        v_new = beta2 * v + (1.0 - beta2) * (g * g)
        bc1 = 1.0 - beta1 ** float(step)
        bc2 = 1.0 - beta2 ** float(step)
        m_hat = m_new / bc1
        v_hat = v_new / bc2
        p_new = p - lr * m_hat / (np.sqrt(v_hat) + eps)
    return p_new, m_new, v_new


def sgd_step(p, g, buf, n, lr, momentum, dampening, weight_decay, nesterov, first):
    """(p_new, buf_new) of one SGD step; ``first`` starts the momentum buffer at the gradient
    (buf is then ignored and may be None)."""
    p, g = _f64(p), _f64(g)
    lr, mom, damp, wd = float(lr), float(momentum), float(dampening), float(weight_decay)
    with np.errstate(all="ignore"):
        if wd != 0.0:
            g = g + wd * p
        if first:
            b = g.copy()
        else:
            b = mom * _f64(buf) + (1.0 - damp) * g
        d = g + mom * b if nesterov else b
        p_new = p - lr * d
    return p_new, b


def adam_step_many(ps, gs, ms, vs, lr, beta1, beta2, eps, weight_decay, step, decoupled):
    """adam_step on each tensor of the lists, the same hyperparameters for all: the flat tuple
    (p_new_0, ..., p_new_{T-1}, m_new_0, ..., v_new_{T-1})."""
    outs = [adam_step(p, g, m, v, np.size(p), lr, beta1, beta2, eps, weight_decay, step, decoupled)
            for p, g, m, v in zip(ps, gs, ms, vs)]
    return tuple(o[k] for k in range(3) for o in outs)


def adam_step_many_inplace(ps, gs, ms, vs, lr, beta1, beta2, eps, weight_decay, step, decoupled):
    """The values adam_step_many_inplace writes over ps, ms, vs: adam_step_many's."""
    return adam_step_many(ps, gs, ms, vs, lr, beta1, beta2, eps, weight_decay, step, decoupled)


def sgd_step_many(ps, gs, bufs, lr, momentum, dampening, weight_decay, nesterov, first):
    """sgd_step on each tensor of the lists, the same hyperparameters for all (bufs None: the
    first step, no buffer read): the flat tuple (p_new_0, ..., p_new_{T-1}, buf_new_0, ...)."""
    outs = [sgd_step(p, g, None if bufs is None else bufs[i], np.size(p), lr, momentum, dampening, weight_decay,
                     nesterov, first) for i, (p, g) in enumerate(zip(ps, gs))]
    return tuple(o[k] for k in range(2) for o in outs)


def sgd_step_many_inplace(ps, gs, bufs, lr, momentum, dampening, weight_decay, nesterov, first):
    """The values sgd_step_many_inplace writes over ps and bufs: sgd_step_many's (only the new
    ps when bufs is None: then no buffer is written)."""
    out = sgd_step_many(ps, gs, bufs, lr, momentum, dampening, weight_decay, nesterov, first)
    return out if bufs is not None else out[:len(ps)]


def norm2_many(xs):
    """The (T,) float64 2-norms sqrt(sum x^2) of the tensors xs (0 for an empty one)."""
    with np.errstate(all="ignore"):
        return np.array([np.sqrt(np.sum(np.square(_f64(x)))) for x in xs], dtype=np.float64)


def scale_many(xs, coef):
    """(x * coef[0] for each x): the products in float64 (exact for float32 inputs)."""
    c = float(_f64(coef)[0])
    with np.errstate(all="ignore"):
        return tuple(_f64(x) * c for x in xs)
