"""Cross entropy on the GPU: the primitives cross_entropy_rows / cross_entropy_rows_bwd (CUDA backend,
torchlean/kernels/cuda/classify.{py,cu}) and the front end F.cross_entropy, against PyTorch.
Needs a GPU, CuPy and torch with CUDA.

    python3 -m benchmarks.ce_cuda [--reps 50] [--shapes 8192x1000,4096x32000]

Per shape (rows x classes): microseconds per call, measured as wall time of `reps` back-to-back
calls followed by one synchronize (so launch and host overheads count, as in training), and the
GPU time of the same calls from CUDA events. Lines:
  prim fwd / prim bwd    the backend functions, targets as a host int64 array (as the runtime passes them)
  P fwd / P bwd          the runtime primitives (argument checks included)
  F.ce fwd / fwd+bwd     torchlean.nn.functional.cross_entropy (mean), then .backward()
  torch fwd / fwd+bwd    torch.nn.functional.cross_entropy on CUDA (targets already on the GPU)
and the memory bound (bytes / 4.1 TB/s). Before timing, a check: loss and lse against torch
(float64 on the GPU), and two runs compared bitwise.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

BW = 4.1e12  # bytes/s, measured copy bandwidth of the H200


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
    ap.add_argument("--shapes", default="8192x1000,4096x32000")
    args = ap.parse_args()

    import cupy
    import torch
    import torch.nn.functional as F

    import torchlean as tl
    import torchlean.nn.functional as TF
    from torchlean.kernels.cuda import classify as C
    from torchlean.runtime import Buffer
    from torchlean.runtime import primitives as P

    rng = np.random.default_rng(0)
    for shape in args.shapes.split(","):
        rows, cols = (int(v) for v in shape.split("x"))
        x_np = (rng.standard_normal((rows, cols)) * 3).astype(np.float32)
        t_np = rng.integers(0, cols, rows).astype(np.int64)
        xc = cupy.asarray(x_np.reshape(-1))
        dl = cupy.full(rows, 1.0 / rows, dtype=cupy.float32)

        # -- check -------------------------------------------------------------------------------
        loss, lse = C.cross_entropy_rows(xc, rows, cols, t_np, 0.0)
        loss2, lse2 = C.cross_entropy_rows(xc, rows, cols, t_np, 0.0)
        xt64 = torch.as_tensor(x_np, device="cuda", dtype=torch.float64)
        tt = torch.as_tensor(t_np, device="cuda")
        ref_lse = torch.logsumexp(xt64, 1).cpu().numpy()
        ref_loss = F.cross_entropy(xt64, tt, reduction="none").cpu().numpy()
        e_lse = np.max(np.abs(cupy.asnumpy(lse) - ref_lse) / np.maximum(np.abs(ref_lse), 1))
        e_loss = np.max(np.abs(cupy.asnumpy(loss) - ref_loss) / np.maximum(np.abs(ref_loss), 1))
        dx = C.cross_entropy_rows_bwd(xc, lse, dl, rows, cols, t_np, 0.0)
        dx2 = C.cross_entropy_rows_bwd(xc, lse, dl, rows, cols, t_np, 0.0)
        x_req = xt64.clone().requires_grad_(True)
        F.cross_entropy(x_req, tt).backward()
        e_dx = float(np.max(np.abs(cupy.asnumpy(dx).reshape(rows, cols) - x_req.grad.cpu().numpy())))
        same = bool((loss == loss2).all() and (lse == lse2).all() and (dx == dx2).all())
        ls_loss, ls_lse = C.cross_entropy_rows(xc, rows, cols, t_np, float(np.float32(0.1)))
        ref_ls = F.cross_entropy(xt64, tt, reduction="none", label_smoothing=float(np.float32(0.1))).cpu().numpy()
        e_ls = np.max(np.abs(cupy.asnumpy(ls_loss) - ref_ls) / np.maximum(np.abs(ref_ls), 1))
        print(f"== {rows} x {cols}: rel err loss {e_loss:.1e} lse {e_lse:.1e} loss(ls=0.1) {e_ls:.1e}, "
              f"abs err dx {e_dx:.1e}, bitwise repeatable: {same}")

        # -- timing ------------------------------------------------------------------------------
        nbytes = rows * cols * 4
        xb = Buffer.from_numpy(x_np.reshape(-1), "cuda")
        _, lse_b = P.cross_entropy_rows(xb, rows, cols, t_np, 0.0)
        dlb = Buffer.from_numpy(np.full(rows, 1.0 / rows, np.float32), "cuda")
        xtl = tl.tensor(x_np, device="cuda", requires_grad=True)
        xto = torch.as_tensor(x_np, device="cuda").requires_grad_(True)

        def tl_fb():
            xtl.grad = None
            TF.cross_entropy(xtl, t_np).backward()

        def to_fb():
            xto.grad = None
            F.cross_entropy(xto, tt).backward()

        lines = [
            ("prim fwd", lambda: C.cross_entropy_rows(xc, rows, cols, t_np, 0.0), nbytes),
            ("prim bwd", lambda: C.cross_entropy_rows_bwd(xc, lse, dl, rows, cols, t_np, 0.0), 2 * nbytes),
            ("P fwd", lambda: P.cross_entropy_rows(xb, rows, cols, t_np, 0.0), nbytes),
            ("P bwd", lambda: P.cross_entropy_rows_bwd(xb, lse_b, dlb, rows, cols, t_np, 0.0), 2 * nbytes),
            ("F.ce fwd", lambda: TF.cross_entropy(xtl.detach(), t_np), nbytes),
            ("F.ce fwd+bwd", tl_fb, 3 * nbytes),
            ("torch fwd", lambda: F.cross_entropy(xto.detach(), tt), nbytes),
            ("torch fwd+bwd", to_fb, 3 * nbytes),
        ]
        for name, fn, b in lines:
            wall, gpu = _time(fn, args.reps)
            print(f"  {name:14s} {wall:9.1f} us/call (GPU {gpu:9.1f} us)   memory bound {b / BW * 1e6:7.1f} us")


if __name__ == "__main__":
    main()
