"""Flash attention on the CPU: forward + backward of our kernels against torch SDPA, per thread count.

    python3 -m benchmarks.attention_cpu [--sizes "32,6,256,64;8,12,1024,64"] [--threads 1,2] [--reps 5]

Each size is (batch, heads, n, d), self-attention without a mask, plain and causal. Ours: the CPU
kernels' public entry points (``kernels.cpu.attention.flash_attention_fwd`` then
``flash_attention_bwd`` from its out and lse), on ``numba.set_num_threads(t)``; torch:
``F.scaled_dot_product_attention`` and ``.backward`` on ``torch.set_num_threads(t)``, the same
float32 inputs. Each side of each case runs in a process of its own (two thread pools in one
process slow each other: OpenMP's workers spin for a while after a region), one after the other,
after one warm-up call; the table gives the median wall time over --reps calls, the ratio ours /
torch (below 1: ours is faster) and our GFLOP/s: forward 4 n^2 d per (batch, head) (halved for
causal), backward 2.5x that (the FlashAttention convention).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np


def _sizes(text):
    try:
        sizes = [tuple(int(x) for x in part.split(",")) for part in text.split(";") if part.strip()]
    except ValueError:
        sizes = []
    if not sizes or any(len(s) != 4 or min(s) < 1 for s in sizes):
        raise argparse.ArgumentTypeError(f"expected sizes like '32,6,256,64;8,12,1024,64', got {text!r}")
    return sizes


def _threads(text):
    try:
        threads = [int(t) for t in text.split(",")]
    except ValueError:
        threads = []
    if not threads or min(threads) < 1:
        raise argparse.ArgumentTypeError(f"expected thread counts like '1,2', got {text!r}")
    return threads


def _side(side, batch, heads, n, d, causal, threads, reps):
    """Median seconds of one fwd+bwd call of one side, in this process."""
    import numba
    import torch
    import torch.nn.functional as F

    from torchlean.kernels.cpu import attention as A

    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    torch.set_num_threads(threads)
    rng = np.random.default_rng(0)
    q, k, v, g = (rng.standard_normal((batch, heads, n, d)).astype(np.float32) for _ in range(4))
    bh, scale = batch * heads, 1.0 / math.sqrt(d)
    fq, fk, fv, fg = (x.reshape(-1) for x in (q, k, v, g))

    def ours():
        out, lse = A.flash_attention_fwd(fq, fk, fv, None, bh, n, n, d, scale, causal, "none", None)
        A.flash_attention_bwd(fq, fk, fv, None, out, lse, fg, bh, n, n, d, scale, causal, "none", None)

    tq, tk, tv = (torch.from_numpy(x).requires_grad_() for x in (q, k, v))
    tg = torch.from_numpy(g)

    def theirs():
        for t in (tq, tk, tv):
            t.grad = None
        F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal).backward(tg)

    fn = ours if side == "ours" else theirs
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _run_side(side, case, threads, reps):
    b, h, n, d, causal = case
    cmd = [sys.executable, "-m", "benchmarks.attention_cpu", "--side", side, "--sizes", f"{b},{h},{n},{d}",
           "--threads", str(threads), "--reps", str(reps)] + (["--causal"] if causal else [])
    res = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=Path(__file__).resolve().parents[1])
    if res.returncode != 0:
        raise SystemExit(f"benchmarks.attention_cpu: the {side} process failed:\n{res.stderr}")
    return json.loads(res.stdout.strip().splitlines()[-1])["seconds"]


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m benchmarks.attention_cpu", description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=_sizes, default=_sizes("32,6,256,64;8,12,1024,64"),
                    help="batch,heads,n,d sizes separated by ';' (default: %(default)s)")
    ap.add_argument("--threads", type=_threads, default=[1, 2], help="thread counts, e.g. 1,2 (default: 1,2)")
    ap.add_argument("--reps", type=int, default=5, help="timed rounds per case; the median is reported (default 5)")
    ap.add_argument("--side", choices=("ours", "torch"), help=argparse.SUPPRESS)  # a worker process
    ap.add_argument("--causal", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.reps < 1:
        ap.error(f"--reps: expected at least 1, got {args.reps}")
    if args.side:
        (b, h, n, d), = args.sizes
        print(json.dumps({"seconds": _side(args.side, b, h, n, d, args.causal, args.threads[0], args.reps)}))
        return

    print(f"{'size (b,h,n,d)':>18} {'causal':>6} {'thr':>3} {'ours ms':>9} {'torch ms':>9} {'ours/torch':>10} "
          f"{'GFLOP/s':>8}")
    for (b, h, n, d) in args.sizes:
        for causal in (False, True):
            for t in args.threads:
                mine = _run_side("ours", (b, h, n, d, causal), t, args.reps)
                theirs = _run_side("torch", (b, h, n, d, causal), t, args.reps)
                flops = 3.5 * 4 * b * h * n * n * d / (2 if causal else 1)
                print(f"{f'{b},{h},{n},{d}':>18} {str(causal):>6} {t:>3} {1e3 * mine:9.1f} {1e3 * theirs:9.1f} "
                      f"{mine / theirs:10.2f} {flops / mine / 1e9:8.1f}", flush=True)


if __name__ == "__main__":
    main()
