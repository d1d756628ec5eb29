"""Host-side cost of one call, per primitive, at a tiny size (the launch-bound regime).

    python3 -m benchmarks.overhead [--device cuda] [--only NAME ...]

Calls are timed back to back without synchronizing, so on CUDA this measures what Python,
validation, dispatch and the launch cost the host: the floor under every small op in a
training step. Also times a bare CuPy kernel launch and torch.add for scale, and counts the
primitives one front-end MLP training step calls.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter

import numpy as np

F32 = np.float32


def per_call(fn, reps: int = 2000) -> float:
    fn()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m benchmarks.overhead")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--only", action="append")
    args = ap.parse_args(argv)
    import torchlean as tl
    from torchlean import runtime as rt
    from torchlean.runtime import primitives as P

    dev = args.device
    sync = (lambda: None)
    if dev.startswith("cuda"):
        import cupy

        sync = cupy.cuda.Device().synchronize
    rng = np.random.default_rng(0)
    a, b = (rt.Buffer.from_numpy(rng.normal(size=64).astype(F32), dev) for _ in range(2))
    m = rt.Buffer.from_numpy(rng.normal(size=64 * 8).astype(F32), dev)
    idx = np.arange(8, dtype=np.int64)
    cases = {
        "add": lambda: P.add(a, b),
        "relu_bwd": lambda: P.relu_bwd(a, b),
        "scale": lambda: P.scale(a, 0.5),
        "axpy": lambda: P.axpy(a, b, 0.5),
        "clamp": lambda: P.clamp(a, -1.0, 1.0),
        "reduce_sum": lambda: P.reduce_sum(a),
        "reduce_sum_axis0": lambda: P.reduce_sum_axis0(m, 8, 64),
        "softmax_rows": lambda: P.softmax_rows(m, 8, 64),
        "transpose2d": lambda: P.transpose2d(m, 8, 64),
        "broadcast_vec_to_rows": lambda: P.broadcast_vec_to_rows(a, 8, 64),
        "broadcast_to": lambda: P.broadcast_to(a, (64,), (8, 64), (0, 1)),
        "reduce_from_broadcast": lambda: P.reduce_from_broadcast(m, (64,), (8, 64), (0, 1)),
        "bmm": lambda: P.bmm(a, a, 1, 8, 8, 8),
        "gather_rows": lambda: P.gather_rows(m, 8, 64, idx, 8),
        "scatter_add_rows": lambda: P.scatter_add_rows(m, m, 8, 64, idx, 8),
        "rand_uniform": lambda: P.rand_uniform(64, 1, dev),
        "copy": lambda: P.copy(a),
        "Buffer.from_numpy": lambda: rt.Buffer.from_numpy(np.ones(64, F32), dev),
    }
    if dev.startswith("cuda"):
        from torchlean.kernels.cuda import launch as kernels

        k = kernels.kernel("elementwise.cu", "tl_add")
        out = cupy.empty(64, cupy.float32)
        cases["(bare cupy launch, 4 args)"] = lambda: k((1,), (256,), (a.data, b.data, out, np.int64(64)))
        cases["(cupy.empty)"] = lambda: cupy.empty(64, cupy.float32)
    try:
        import torch

        tdev = "cuda" if dev.startswith("cuda") else "cpu"
        ta, tb = torch.ones(64, device=tdev), torch.ones(64, device=tdev)
        cases["(torch.add)"] = lambda: torch.add(ta, tb)
    except ImportError:
        pass
    for name, fn in cases.items():
        if args.only and not any(o in name for o in args.only):
            continue
        t = per_call(fn)
        sync()
        print(f"{name:<28} {t * 1e6:7.2f} µs/call")

    # primitives per MLP step (front end), by name
    counts: Counter = Counter()
    orig = {}
    for name in P.__all__:
        f = getattr(P, name)

        def counting(*args_, __f=f, __n=name, **kw):
            counts[__n] += 1
            return __f(*args_, **kw)

        orig[name] = f
        setattr(P, name, counting)
    try:
        x = tl.tensor(rng.normal(size=(256, 64)).astype(F32), device=dev)
        y = tl.tensor(rng.normal(size=(256, 1)).astype(F32), device=dev)
        ps = [tl.tensor(rng.normal(size=s).astype(F32) * 0.1, device=dev, requires_grad=True)
              for s in ((256, 64), (256,), (256, 256), (256,), (1, 256), (1,))]
        counts.clear()
        h = x
        for i in range(0, 6, 2):
            h = tl.nn.functional.linear(h, ps[i], ps[i + 1])
            if i < 4:
                h = h.tanh()
        loss = tl.nn.functional.mse_loss(h, y)
        loss.backward()
        with tl.no_grad():
            for p in ps:
                p.sub_(p.grad, alpha=0.01)
                p.grad = None
    finally:
        for name, f in orig.items():
            setattr(P, name, f)
    print(f"MLP step (3 linear, 2 tanh, mse, backward, SGD): {sum(counts.values())} primitive calls: "
          + ", ".join(f"{k} {v}" for k, v in counts.most_common()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
