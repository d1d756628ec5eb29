"""CPU GEMMs at the scale cases' shapes: ours against NumPy's OpenBLAS (its own threads) and torch.

    python3 -m benchmarks.gemm_cpu [--threads 16] [--reps 7] [--only gpt_mini lstm]

Ours: ``kernels.cpu.gemm.gemm`` (OpenBLAS's sgemm at one thread per work item, the items on Numba's
pool); "openblas": ``np.matmul`` with OpenBLAS at the same thread count (its own threading, same
microkernels); torch: ``torch.matmul`` on ``torch.set_num_threads``. Each side runs in a process of
its own (two thread pools in one process slow each other), after two warm-up calls; the table gives
the median wall time over --reps calls and the achieved GFLOP/s (2 m n k per product). The shapes are
the products of one training step of the named cases (forward, input gradient, weight gradient), so a
low rate here points at the rows of ``benchmarks.scale``'s breakdown.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

# (case, what, batch, m, n, k, trans_a, trans_b): c = op(a) @ op(b), op(a) (m, k), op(b) (k, n)
SHAPES = [
    ("gpt_mini", "qkv x W^T", 1, 8192, 1152, 384, False, True),
    ("gpt_mini", "fc1 x W^T", 1, 8192, 1536, 384, False, True),
    ("gpt_mini", "fc2 x W^T", 1, 8192, 384, 1536, False, True),
    ("gpt_mini", "proj x W^T", 1, 8192, 384, 384, False, True),
    ("gpt_mini", "fc1 dX = g W", 1, 8192, 384, 1536, False, False),
    ("gpt_mini", "fc2 dX = g W", 1, 8192, 1536, 384, False, False),
    ("gpt_mini", "fc1 dW = g^T x", 1, 1536, 384, 8192, True, False),
    ("gpt_mini", "fc2 dW = g^T x", 1, 384, 1536, 8192, True, False),
    ("gpt_mini", "proj dW = g^T x", 1, 384, 384, 8192, True, False),
    ("lstm", "h W_hh^T", 1, 20, 2600, 650, False, True),
    ("lstm", "x W_ih^T (all steps)", 1, 700, 2600, 650, False, True),
    ("lstm", "decoder x W^T", 1, 700, 10000, 650, False, True),
    ("lstm", "decoder dX = g W", 1, 700, 650, 10000, False, False),
    ("lstm", "decoder dW = g^T x", 1, 10000, 650, 700, True, False),
    ("lstm", "dh = g W_hh", 1, 20, 650, 2600, False, False),
    ("lstm", "W_hh dW = g^T h (all steps)", 1, 2600, 650, 700, True, False),
    ("square", "4096^3", 1, 4096, 4096, 4096, False, False),
]


def _side(side, shape, threads, reps):
    """Median seconds of one product of one side, in this process."""
    import numba

    from torchlean.kernels.cpu import gemm as G
    from torchlean.kernels.cpu import parallel

    _, _, batch, m, n, k, ta, tb = shape
    rng = np.random.default_rng(0)
    a = rng.standard_normal(batch * m * k).astype(np.float32)
    b = rng.standard_normal(batch * k * n).astype(np.float32)
    a3 = a.reshape(batch, k, m).transpose(0, 2, 1) if ta else a.reshape(batch, m, k)
    b3 = b.reshape(batch, n, k).transpose(0, 2, 1) if tb else b.reshape(batch, k, n)
    if side == "ours":
        numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))

        def fn():
            G.gemm(a, b, batch, m, n, k, ta, tb)
    elif side == "openblas":
        parallel.set_blas_threads(threads)
        out = np.empty((batch, m, n), np.float32)

        def fn():
            np.matmul(a3, b3, out=out)
    else:
        import torch

        torch.set_num_threads(threads)
        ta3, tb3 = torch.from_numpy(np.ascontiguousarray(a.reshape(a3.shape[:1] + ((k, m) if ta else (m, k))))), \
            torch.from_numpy(np.ascontiguousarray(b.reshape(b3.shape[:1] + ((n, k) if tb else (k, n)))))
        ta3 = ta3.transpose(1, 2) if ta else ta3
        tb3 = tb3.transpose(1, 2) if tb else tb3

        def fn():
            torch.matmul(ta3, tb3)
    fn()
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _run_side(side, index, threads, reps):
    cmd = [sys.executable, "-m", "benchmarks.gemm_cpu", "--side", side, "--index", str(index), "--threads",
           str(threads), "--reps", str(reps)]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=Path(__file__).resolve().parents[1])
    if res.returncode != 0:
        raise SystemExit(f"benchmarks.gemm_cpu: the {side} process failed:\n{res.stderr}")
    return json.loads(res.stdout.strip().splitlines()[-1])["seconds"]


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m benchmarks.gemm_cpu", description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2, help="thread count of every side (default 2)")
    ap.add_argument("--reps", type=int, default=7, help="timed calls per side; the median is reported (default 7)")
    ap.add_argument("--only", nargs="*", help="case names (gpt_mini, lstm, square)")
    ap.add_argument("--side", choices=("ours", "openblas", "torch"), help=argparse.SUPPRESS)  # a worker process
    ap.add_argument("--index", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.reps < 1 or args.threads < 1:
        ap.error("--reps and --threads must be at least 1")
    if args.side:
        print(json.dumps({"seconds": _side(args.side, SHAPES[args.index], args.threads, args.reps)}))
        return
    print(f"threads {args.threads}; GFLOP/s = 2 m n k / median time")
    print(f"| case | product | batch x m x n x k | ours ms | openblas ms | torch ms | ours/torch | ours GFLOP/s | "
          f"openblas GFLOP/s | torch GFLOP/s |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for i, shape in enumerate(SHAPES):
        case, what, batch, m, n, k, ta, tb = shape
        if args.only and case not in args.only:
            continue
        t = {s: _run_side(s, i, args.threads, args.reps) for s in ("ours", "openblas", "torch")}
        fl = 2.0 * batch * m * n * k / 1e9
        print(f"| {case} | {what} | {batch}x{m}x{n}x{k} | {1e3 * t['ours']:.3f} | {1e3 * t['openblas']:.3f} | "
              f"{1e3 * t['torch']:.3f} | {t['ours'] / t['torch']:.2f} | {fl / t['ours']:.0f} | "
              f"{fl / t['openblas']:.0f} | {fl / t['torch']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
