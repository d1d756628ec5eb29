"""Hashes of the CPU convolutions' outputs on random geometries (ranks 1-3, strides, paddings, batch
sizes from 1 to 64, a GEMM dimension of 1 included), to compare two trees bit for bit:

    python -m benchmarks.conv_bits > new.txt
    (cd OTHER_TREE && PYTHONPATH=. python -m benchmarks.conv_bits) > old.txt && diff old.txt new.txt
"""

from __future__ import annotations

import hashlib
import math

import numpy as np

from torchlean.kernels import cpu
from torchlean.kernels.plans import conv_plan_of, conv_transpose_plan_of


def _case(rng, rank):
    batch = int(rng.choice([1, 2, 3, 5, 8, 16, 64]))
    in_c, out_c = (int(v) for v in rng.choice([1, 2, 3, 4, 8, 16, 32], 2))
    kernel = tuple(int(v) for v in rng.integers(1, 4, rank))
    stride = tuple(int(v) for v in rng.integers(1, 3, rank))
    padding = tuple(int(rng.integers(0, k + 1)) for k in kernel)
    side = {1: 64, 2: 18, 3: 8}[rank]
    spatial = tuple(int(v) for v in rng.integers(max(kernel), side + 1, rank))
    return batch, in_c, out_c, spatial, kernel, stride, padding


def main(n_cases: int = 240) -> None:
    rng = np.random.default_rng(2024)
    for i in range(n_cases):
        rank = 1 + i % 3
        dims = _case(rng, rank)
        batch, in_c, out_c, spatial, kernel, stride, padding = dims
        if i % 10 == 0:  # a big case: several parts and chunks
            batch, in_c, out_c = 64, 16, 32
            dims = (batch, in_c, out_c, spatial, kernel, stride, padding)
        out = tuple((s + 2 * p - k) // t + 1 for s, k, t, p in zip(spatial, kernel, stride, padding))
        x = rng.standard_normal(batch * in_c * math.prod(spatial)).astype(np.float32)
        w = rng.standard_normal(out_c * in_c * math.prod(kernel)).astype(np.float32)
        b = rng.standard_normal(out_c).astype(np.float32)
        dy = rng.standard_normal(batch * out_c * math.prod(out)).astype(np.float32)
        plan = conv_plan_of(*dims)
        res = [cpu.conv(x, w, b, plan), cpu.conv(x, w, None, plan), cpu.conv_bwd_input(dy, w, plan),
               cpu.conv_bwd_weight(x, dy, plan)]
        ow = tuple(int(rng.integers(0, max(s, 1))) if s > 1 else 0 for s in stride)
        tdims = (batch, out_c, in_c, out, kernel, stride, padding, ow)
        tout = tuple((s - 1) * st - 2 * p + k + o for s, k, st, p, o in zip(out, kernel, stride, padding, ow))
        if all(v > 0 for v in tout):
            res.append(cpu.conv_transpose(dy, w, rng.standard_normal(in_c).astype(np.float32),
                                       conv_transpose_plan_of(*tdims)))
        h = hashlib.sha256(b"".join(r.tobytes() for r in res)).hexdigest()[:16]
        print(i, dims, h)


if __name__ == "__main__":
    main()
