"""Digests of the pool, classify (GELU, cross entropy), rng and attention kernels' outputs on fixed
random inputs (NaN, +-inf, -0 and ties mixed in), one line per case, to compare two trees bit for
bit on one device:

    python -m benchmarks.kernel_bits --device cpu > new.txt
    (cd OTHER_TREE && PYTHONPATH=. python -m benchmarks.kernel_bits --device cpu) > old.txt && diff old.txt new.txt

(--device cuda on the GPU machine.) The kernels are called directly, below the runtime layer.
"""

from __future__ import annotations

import argparse
import hashlib
import math

import numpy as np

from torchlean.kernels.plans import pool_plan_of

F32 = np.float32


def _values(rng, n, special=True):
    """n float32 values: normal, with ties (rounded copies) and, when special, NaN, +-inf and -0."""
    x = rng.standard_normal(n).astype(F32) * F32(3.0)
    x[rng.random(n) < 0.1] = F32(1.5)  # ties
    if special and n >= 8:
        for v in (np.nan, np.inf, -np.inf, -0.0):
            x[rng.integers(0, n, max(1, n // 64))] = F32(v)
    return x


class _Dev:
    def __init__(self, name):
        self.name = name
        if name == "cuda":
            import cupy

            from torchlean.kernels.cuda.backend import make_backend

            self.k, self.xp = make_backend(0), cupy
        else:
            from torchlean.kernels import cpu

            self.k, self.xp = cpu, np

    def put(self, a):
        return None if a is None else self.xp.asarray(a)

    def host(self, a):
        return np.asarray(a.get() if self.name == "cuda" else a)


def _digest(dev, outs):
    h = hashlib.sha256()
    for o in outs:
        h.update(np.ascontiguousarray(dev.host(o)).tobytes())
    return h.hexdigest()[:16]


def _pool_cases(rng):
    geos = [  # (planes, spatial, kernel, stride, padding)
        (6, (16, 16), (2, 2), (2, 2), (0, 0)), (5, (15, 17), (2, 2), (2, 2), (0, 0)),
        (4, (14, 16), (3, 3), (2, 2), (0, 0)), (3, (12, 12), (3, 3), (3, 3), (0, 0)),
        (4, (13, 11), (3, 2), (2, 1), (1, 1)), (3, (40,), (4,), (3,), (2,)), (2, (7, 8, 9), (3, 2, 3), (2, 2, 1), (1, 0, 1)),
        (2, (5, 4, 3, 4), (2, 2, 2, 2), (1, 2, 1, 2), (1, 1, 0, 1)), (256, (32, 32), (2, 2), (2, 2), (0, 0)),
        (64, (33, 31), (3, 3), (1, 1), (1, 1)), (1, (300,), (5,), (2,), (2,)),
        (512, (64, 64), (2, 2), (2, 2), (0, 0)), (512, (64, 63), (2, 2), (2, 2), (0, 0)),  # parallel paths
        (64, (64, 64), (3, 3), (1, 1), (1, 1)), (64, (64, 64), (3, 3), (2, 2), (0, 0)), (96, (48, 48), (4, 4), (4, 4), (0, 0)),
    ]
    for planes, spatial, kernel, stride, padding in geos:
        plan = pool_plan_of(planes, spatial, kernel, stride, padding)
        x = _values(rng, plan.n_in)
        dy = _values(rng, plan.n_out, special=False)
        yield f"pool {plan[:5]}", plan, x, dy


def _run_pool(dev, plan, x, dy):
    k = dev.k
    x, dy = dev.put(x), dev.put(dy)
    y_max = k.max_pool(x, plan)
    y_avg = k.avg_pool(x, plan)
    y_sm = k.smooth_max_pool(x, plan, 2.5)
    return [y_max, k.max_pool_bwd(x, dy, plan), y_avg, k.avg_pool_bwd(dy, plan), y_sm,
            k.smooth_max_pool_bwd(x, y_sm, dy, plan, 2.5)]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    dev = _Dev(ap.parse_args(argv).device)
    k = dev.k
    rng = np.random.default_rng(21)

    for name, plan, x, dy in _pool_cases(rng):
        print(name, _digest(dev, _run_pool(dev, plan, x, dy)))

    for n in (1, 7, 1000, 1 << 15, (1 << 20) + 3):  # serial and parallel splits, float4 tails
        x = _values(rng, n)
        x[: min(n, 4)] = np.array([np.inf, -np.inf, np.nan, -0.0], F32)[: min(n, 4)]
        dy = _values(rng, n, special=False)
        xd, dyd = dev.put(x), dev.put(dy)
        print(f"gelu n={n}", _digest(dev, [k.gelu(xd), k.gelu_bwd(xd, dyd)]))
        print(f"gelu_tanh n={n}", _digest(dev, [k.gelu_tanh(xd), k.gelu_tanh_bwd(xd, dyd)]))

    for rows, cols in ((1, 1), (3, 10), (64, 1000), (5, 1024), (7, 1025), (2, 50000), (300, 4096), (1, 262147)):
        for ls in (0.0, 0.1):
            x = _values(rng, rows * cols, special=False)
            if rows >= 3 and cols >= 3:  # a +inf row, a row with a NaN, a row of -inf
                x[cols:cols + 3] = (np.inf, 1.0, 2.0)
                x[2 * cols + 1] = np.nan
                if rows > 3:
                    x[3 * cols:4 * cols] = -np.inf
            td = rng.integers(0, cols + 1, rows).astype(np.int64)  # host targets; t == cols: an ignored row
            xd = dev.put(x)
            loss, lse = k.cross_entropy_rows(xd, rows, cols, td, ls)
            dl = dev.put(_values(rng, rows, special=False))
            dx = k.cross_entropy_rows_bwd(xd, lse, dl, rows, cols, td, ls)
            red, _ = k.cross_entropy_reduce(xd, rows, cols, td, ls, 1.0 / rows)
            dxr = k.cross_entropy_reduce_bwd(xd, lse, dev.put(np.array([0.75], F32)), rows, cols, td, ls, 1.0 / rows)
            print(f"cross_entropy rows={rows} cols={cols} ls={ls}", _digest(dev, [loss, lse, dx, red, dxr]))

    for n in (0, 1, 3, 4, 5, 1001, 1 << 17):
        for key in (0, 12345, (1 << 64) - 3):
            print(f"rng n={n} key={key}", _digest(dev, [k.rand_uniform(n, key), k.rand_normal(n, key),
                                                       k.bernoulli_mask(n, 0.7, key)]))

    for batch, n_q, n_k, d in ((2, 5, 7, 3), (3, 64, 64, 32), (2, 100, 70, 64), (1, 130, 130, 128),
                               (2, 33, 40, 160), (1, 17, 17, 48)):
        for causal, mode in ((False, "none"), (True, "none"), (False, "fill"), (False, "hard"), (True, "add")):
            q = _values(rng, batch * n_q * d, special=False)
            kk = _values(rng, batch * n_k * d, special=False)
            v = _values(rng, batch * n_k * d, special=False)
            dout = _values(rng, batch * n_q * d, special=False)
            mask, lay = None, None
            if mode != "none":
                m = (rng.random(batch * n_q * n_k) < 0.8).astype(F32)
                if mode == "add":
                    m = np.where(m > 0, rng.standard_normal(m.size).astype(F32), F32(-np.inf)).astype(F32)
                mask, lay = m, (1, n_q * n_k, 0, n_k, 1)
            scale = 1.0 / math.sqrt(d)
            a = [dev.put(t) for t in (q, kk, v)]
            md = dev.put(mask)
            out, lse = k.flash_attention_fwd(*a, md, batch, n_q, n_k, d, scale, causal, mode, lay)
            dq, dk, dv = k.flash_attention_bwd(*a, md, out, lse, dev.put(dout), batch, n_q, n_k, d, scale, causal, mode,
                                               lay)
            print(f"attention b={batch} n_q={n_q} n_k={n_k} d={d} causal={causal} mask={mode}",
                  _digest(dev, [out, lse, dq, dk, dv]))


if __name__ == "__main__":
    main()
