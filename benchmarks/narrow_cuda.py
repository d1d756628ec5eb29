"""narrow / split along a later dim on the GPU: the primitives narrow_block / narrow_block_bwd (CUDA
backend, torchlean/kernels/cuda/layout.{py,cu}) and the front end ``qkv.split(d, dim=2)`` forward and
backward, against PyTorch's ``qkv.split(d, 2)`` made contiguous. Needs a GPU, CuPy and torch with CUDA.

    python3 -m benchmarks.narrow_cuda [--reps 50] [--shape 8x1024x2304] [--piece 768]

Lines (microseconds per call: wall time of `reps` back-to-back calls then one synchronize, and the
GPU time of the same calls from CUDA events):
  prim fwd / prim bwd   P.narrow_block / P.narrow_block_bwd of one piece (argument checks included)
  tl split fwd+bwd      q, k, v = x.split(piece, 2); (q + k + v).sum().backward() on a leaf x
  torch split fwd+bwd   the same in torch, each piece .contiguous() (the copy our pieces are)
and each one's memory bound (bytes moved / 3.35 TB/s). Before timing, the pieces and x.grad are
checked against torch bit for bit.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

BW = 3.35e12  # bytes/s, H100 SXM HBM3 peak


def _time(fn, reps):
    import cupy

    fn()
    cupy.cuda.Device().synchronize()
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    t0 = time.perf_counter()
    start.record()
    for _ in range(reps):
        fn()
    stop.record()
    stop.synchronize()
    wall = (time.perf_counter() - t0) / reps * 1e6
    gpu = cupy.cuda.get_elapsed_time(start, stop) / reps * 1e3
    return wall, gpu


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--shape", default="8x1024x2304")
    ap.add_argument("--piece", type=int, default=768)
    args = ap.parse_args()

    import torch

    import torchlean as tl
    from torchlean.runtime import primitives as P

    b, t, c = (int(v) for v in args.shape.split("x"))
    d = args.piece
    a = np.random.default_rng(0).standard_normal((b, t, c)).astype(np.float32)

    x = tl.tensor(a, device="cuda", requires_grad=True)
    tx = torch.tensor(a, device="cuda", requires_grad=True)

    def tl_step():
        x.grad = None
        pieces = x.split(d, 2)
        sum(p * (i + 1) for i, p in enumerate(pieces)).sum().backward()
        return pieces

    def torch_step():
        tx.grad = None
        pieces = [p.contiguous() for p in tx.split(d, 2)]
        sum(p * (i + 1) for i, p in enumerate(pieces)).sum().backward()
        return pieces

    ours, theirs = tl_step(), torch_step()
    for p, q in zip(ours, theirs):
        assert np.array_equal(p.detach().cpu().numpy(), q.detach().cpu().numpy()), "pieces differ from torch"
    assert np.array_equal(x.grad.cpu().numpy(), tx.grad.cpu().numpy()), "x.grad differs from torch"

    xb = x.detach()._buf
    piece = P.narrow_block(xb, b * t, c, 0, d, 1)
    n_piece, n_full = b * t * d, b * t * c
    rows = [
        ("prim fwd", lambda: P.narrow_block(xb, b * t, c, d, d, 1), 8 * n_piece),
        ("prim bwd", lambda: P.narrow_block_bwd(piece, b * t, c, d, d, 1), 4 * (n_piece + n_full)),
        # the mul, sum and their VJPs are in both; the split's own traffic: read x, write 3 pieces
        # forward, read 3 pieces and write 3 full-size blocks (then 2 adds of full size) backward
        ("tl split fwd+bwd", tl_step, None),
        ("torch split fwd+bwd", torch_step, None),
    ]
    print(f"shape {b}x{t}x{c}, pieces of {d} along dim 2, {args.reps} reps")
    for name, fn, nbytes in rows:
        wall, gpu = _time(fn, args.reps)
        bound = f"   bound {nbytes / BW * 1e6:8.1f} us" if nbytes else ""
        print(f"  {name:22s} wall {wall:9.1f} us   gpu {gpu:9.1f} us{bound}")


if __name__ == "__main__":
    main()
