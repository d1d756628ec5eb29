"""Benchmark cases of the conv / norm / classification toolkit (issue 4), through the front end.

Each case runs ``torchlean.nn.functional.<op>`` and ``torch.nn.functional.<op>`` on the same inputs;
"fwd+bwd" cases time the forward, ``backward`` with a fixed cotangent and the gradients of every
input that requires one (for conv: input, weight and bias), with the ``.grad`` fields cleared
between calls in both frameworks. TF32 is off for torch (``run.Env`` sets cuDNN's and cuBLAS's
switches) and for torchlean (its default), so both compute in true float32.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import numpy as np

from .harness import Case

F32 = np.float32


def _data(seed: int, *shape: int, scale: float = 1.0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape, dtype=F32) * F32(scale)).astype(F32)


def _fwd_bwd(env, fn: Callable[..., Any], leaves: list, cot) -> Callable[[], Any]:
    """forward, backward(cot), and the leaves' grads cleared: one training step of the op."""

    def step():
        y = fn(*leaves)
        y.backward(cot)
        out = leaves[0].grad
        for t in leaves:
            if t.requires_grad:
                t.grad = None
        return out

    return step


def conv_specs(env, shapes: list[tuple[int, int, int, int, int]]) -> Iterator:
    from .run import Spec

    tl, torch = env.tl, env.torch
    import torch.nn.functional as TF

    import torchlean.nn.functional as LF

    for (n, c, o, hw, k) in shapes:
        size = f"{n}x{c}x{hw}x{hw} -> {o}, {k}x{k} pad {k // 2}"
        flops = 2 * n * o * c * k * k * hw * hw  # stride 1, 'same' padding: out = in

        def inputs(n=n, c=c, o=o, hw=hw, k=k):
            return (_data(1, n, c, hw, hw), _data(2, o, c, k, k, scale=1.0 / np.sqrt(c * k * k)),
                    _data(3, o), _data(4, n, o, hw, hw))

        def fwd(k=k, size=size, flops=flops, inputs=inputs) -> Case:
            x, w, b, _ = inputs()
            lx, lw, lb = env.tl_tensor(x), env.tl_tensor(w), env.tl_tensor(b)
            tx, tw, tb = env.tt(x), env.tt(w), env.tt(b)

            def f():
                with tl.no_grad():
                    return LF.conv2d(lx, lw, lb, padding=k // 2)

            def g():
                with torch.no_grad():
                    return TF.conv2d(tx, tw, tb, padding=k // 2)

            return Case("conv", "conv2d fwd", size, f, g, flops=flops, check=env.compare(f, g, rtol=1e-4))

        def both(k=k, size=size, flops=flops, inputs=inputs) -> Case:
            x, w, b, gy = inputs()
            lv = [env.tl_tensor(a, True) for a in (x, w, b)]
            tv = [env.tt(a).requires_grad_() for a in (x, w, b)]
            f = _fwd_bwd(env, lambda x_, w_, b_: LF.conv2d(x_, w_, b_, padding=k // 2), lv, env.tl_tensor(gy))
            g = _fwd_bwd(env, lambda x_, w_, b_: TF.conv2d(x_, w_, b_, padding=k // 2), tv, env.tt(gy))
            return Case("conv", "conv2d fwd+bwd", size, f, g, flops=3 * flops, check=env.compare(f, g, rtol=1e-4),
                        note="grads of input, weight and bias")

        yield Spec("conv", "conv2d fwd", size, fwd)
        yield Spec("conv", "conv2d fwd+bwd", size, both)


def norm_specs(env, ln_shapes: list[tuple[int, int]], bn_shapes: list[tuple[int, int, int]]) -> Iterator:
    from .run import Spec

    tl, torch = env.tl, env.torch
    import torch.nn.functional as TF

    import torchlean.nn.functional as LF

    for (r, c) in ln_shapes:
        size = f"{r}x{c}"

        def ln(r=r, c=c, size=size, bwd=False) -> Case:
            x, w, b, gy = _data(5, r, c), 1 + _data(6, c, scale=0.1), _data(7, c, scale=0.1), _data(8, r, c)
            nb = 4 * (2 * r * c + 2 * c) * (3 if bwd else 1)
            if not bwd:
                lx, lw, lb, tx, tw, tb = (env.tl_tensor(x), env.tl_tensor(w), env.tl_tensor(b),
                                          env.tt(x), env.tt(w), env.tt(b))

                def f():
                    with tl.no_grad():
                        return LF.layer_norm(lx, (c,), lw, lb, eps=1e-5)

                def g():
                    with torch.no_grad():
                        return TF.layer_norm(tx, (c,), tw, tb, eps=1e-5)

                return Case("norm", "layer_norm fwd", size, f, g, nbytes=nb, check=env.compare(f, g, rtol=1e-4))
            lv = [env.tl_tensor(a, True) for a in (x, w, b)]
            tv = [env.tt(a).requires_grad_() for a in (x, w, b)]
            f = _fwd_bwd(env, lambda x_, w_, b_: LF.layer_norm(x_, (c,), w_, b_, eps=1e-5), lv, env.tl_tensor(gy))
            g = _fwd_bwd(env, lambda x_, w_, b_: TF.layer_norm(x_, (c,), w_, b_, eps=1e-5), tv, env.tt(gy))
            return Case("norm", "layer_norm fwd+bwd", size, f, g, check=env.compare(f, g, rtol=1e-4),
                        note="grads of input, weight and bias")

        yield Spec("norm", "layer_norm fwd", size, ln)
        yield Spec("norm", "layer_norm fwd+bwd", size, lambda ln=ln: ln(bwd=True))

    for (n, c, hw) in bn_shapes:
        size = f"{n}x{c}x{hw}x{hw}"

        def bn(n=n, c=c, hw=hw, size=size, bwd=False) -> Case:
            x, w, b, gy = _data(9, n, c, hw, hw), 1 + _data(10, c, scale=0.1), _data(11, c, scale=0.1), \
                _data(12, n, c, hw, hw)
            nb = 4 * 3 * n * c * hw * hw  # two reads (statistics, normalize) and one write
            if not bwd:
                lx, lw, lb, tx, tw, tb = (env.tl_tensor(x), env.tl_tensor(w), env.tl_tensor(b),
                                          env.tt(x), env.tt(w), env.tt(b))

                def f():
                    with tl.no_grad():
                        return LF.batch_norm(lx, None, None, lw, lb, training=True)

                def g():
                    with torch.no_grad():
                        return TF.batch_norm(tx, None, None, tw, tb, training=True)

                return Case("norm", "batch_norm train fwd", size, f, g, nbytes=nb, check=env.compare(f, g, rtol=1e-4))
            lv = [env.tl_tensor(a, True) for a in (x, w, b)]
            tv = [env.tt(a).requires_grad_() for a in (x, w, b)]
            f = _fwd_bwd(env, lambda x_, w_, b_: LF.batch_norm(x_, None, None, w_, b_, training=True), lv,
                         env.tl_tensor(gy))
            g = _fwd_bwd(env, lambda x_, w_, b_: TF.batch_norm(x_, None, None, w_, b_, training=True), tv, env.tt(gy))
            return Case("norm", "batch_norm train fwd+bwd", size, f, g, check=env.compare(f, g, rtol=1e-4),
                        note="grads of input, weight and bias")

        yield Spec("norm", "batch_norm train fwd", size, bn)
        yield Spec("norm", "batch_norm train fwd+bwd", size, lambda bn=bn: bn(bwd=True))


def classify_specs(env, ce_shapes: list[tuple[int, int]]) -> Iterator:
    from .run import Spec

    tl, torch = env.tl, env.torch
    import torch.nn.functional as TF

    import torchlean.nn.functional as LF

    for (r, c) in ce_shapes:
        size = f"{r}x{c}"

        def ce(r=r, c=c, size=size, bwd=False) -> Case:
            x = _data(13, r, c, scale=3.0)
            t = np.random.default_rng(14).integers(0, c, r).astype(np.int64)
            lt, tt_ = tl.tensor(t, device=env.tl_device), env.tt(t)
            if not bwd:
                lx, tx = env.tl_tensor(x), env.tt(x)

                def f():
                    with tl.no_grad():
                        return LF.cross_entropy(lx, lt)

                def g():
                    with torch.no_grad():
                        return TF.cross_entropy(tx, tt_)

                return Case("classify", "cross_entropy fwd", size, f, g, nbytes=4 * r * c,
                            check=env.compare(f, g, rtol=1e-5))
            lx, tx = env.tl_tensor(x, True), env.tt(x).requires_grad_()
            f = _fwd_bwd(env, lambda x_: LF.cross_entropy(x_, lt), [lx], None)
            g = _fwd_bwd(env, lambda x_: TF.cross_entropy(x_, tt_), [tx], None)
            return Case("classify", "cross_entropy fwd+bwd", size, f, g, nbytes=4 * 3 * r * c,
                        check=env.compare(f, g, rtol=1e-5), note="mean reduction; grad of the logits")

        yield Spec("classify", "cross_entropy fwd", size, ce)
        yield Spec("classify", "cross_entropy fwd+bwd", size, lambda ce=ce: ce(bwd=True))


def nn_specs(env) -> list:
    quick, cuda = env.quick, env.device == "cuda"
    if quick:
        convs = [(4, 64, 64, 28, 3)]
        lns, bns, ces = [(2048, 1024)], [(8, 64, 28)], [(1024, 1000)]
    else:
        convs = [(32, 64, 64, 56, 3)]
        lns, bns, ces = [(16384, 1024)], [(32, 64, 56)], [(8192, 1000)]
        if cuda:
            ces.append((4096, 32000))
    return [*conv_specs(env, convs), *norm_specs(env, lns, bns), *classify_specs(env, ces)]
