"""The fused 2-D/3-D FNO spectral convolutions against PyTorch's composition (the reference
``SpectralConv2d``/``3d`` forward: rfftn -> einsum on the corner slices -> zeros + slice assignment ->
irfftn; backward by autograd), forward + backward, at the issue's reference sizes:

    FNO2d: batch 20, width 32, 64 x 64, 12 modes     FNO3d: batch 10, width 20, 64 x 64 x 40, 8 modes

    PYTHONPATH=. python3 benchmarks/spectral_nd.py --device cuda [--reps 20] [--only 2d|3d]
    PYTHONPATH=. python3 benchmarks/spectral_nd.py --device cpu  [--reps 5] [--threads N] [--stages]

For each size: a check first (our y, dx, dw against torch float64 on the same device: max error
relative to max |ref|), then the median wall time of --reps forward+backward steps (synchronized,
after warm-up; Python overhead included on both sides, as a training step sees it), ours / torch
(the issue's bar: <= 0.67 on the GPU, < 1 on the CPU), and on CUDA the peak memory of one step
(torch.cuda.max_memory_allocated for torch; for ours only the growth of CuPy's pool over one step, a
rough figure: torchlean's free list reuses blocks). TF32 off on both sides.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

SIZES = {"2d": (20, 32, 32, (64, 64), (12, 12)), "3d": (10, 20, 20, (64, 64, 40), (8, 8, 8))}


def _corners(d, ns, ms):
    if d == 2:
        return [(slice(0, ms[0]), slice(0, ms[1])), (slice(ns[0] - ms[0], ns[0]), slice(0, ms[1]))]
    a, b, c = ms
    lo1, hi1, lo2, hi2 = slice(0, a), slice(ns[0] - a, ns[0]), slice(0, b), slice(ns[1] - b, ns[1])
    return [(lo1, lo2, slice(0, c)), (hi1, lo2, slice(0, c)), (lo1, hi2, slice(0, c)), (hi1, hi2, slice(0, c))]


def torch_conv(torch, x, weights, ns, ms):
    d = len(ns)
    X = torch.fft.rfftn(x, dim=tuple(range(-d, 0)))
    out = torch.zeros((x.shape[0], weights[0].shape[1]) + tuple(X.shape[2:]), dtype=X.dtype, device=x.device)
    eq = "bixy,ioxy->boxy" if d == 2 else "bixyz,ioxyz->boxyz"
    for w, sl in zip(weights, _corners(d, ns, ms)):
        idx = (slice(None), slice(None)) + sl
        out[idx] = torch.einsum(eq, X[idx], w)
    return torch.fft.irfftn(out, s=tuple(ns), dim=tuple(range(-d, 0)))


def _median_time(fn, sync, reps):
    for _ in range(3):
        fn()
    sync()
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def run(which, device, reps):
    import torch

    import torchlean as tl
    from torchlean import ops

    batch, cin, cout, ns, ms = SIZES[which]
    d = len(ns)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, cin) + ns).astype(np.float32)
    w = (rng.random((2 ** (d - 1), cin, cout) + ms + (2,)) / (cin * cout)).astype(np.float32)
    g = rng.standard_normal((batch, cout) + ns).astype(np.float32)
    tdev = "cuda" if device == "cuda" else "cpu"

    # check against float64 torch
    tx = torch.tensor(x, dtype=torch.float64, device=tdev, requires_grad=True)
    tw = torch.tensor(w, dtype=torch.float64, device=tdev, requires_grad=True)
    ty = torch_conv(torch, tx, [torch.view_as_complex(tw[c]) for c in range(2 ** (d - 1))], ns, ms)
    ty.backward(torch.tensor(g, dtype=torch.float64, device=tdev))
    lx = tl.tensor(x, device=device, requires_grad=True)
    lw = tl.tensor(w, device=device, requires_grad=True)
    ly = getattr(ops, f"spectral_conv{d}d")(lx, lw)
    lg = tl.tensor(g, device=device)
    ly.backward(lg)
    for what, ours, ref in (("y", ly.numpy(), ty.detach().cpu().numpy()), ("dx", lx.grad.numpy(), tx.grad.cpu().numpy()),
                            ("dw", lw.grad.numpy(), tw.grad.cpu().numpy())):
        err = float(np.abs(ours - ref).max() / max(np.abs(ref).max(), 1e-30))
        print(f"  check {which} {what}: max err / max|ref| = {err:.2e} {'PASS' if err < 1e-4 else 'FAIL'}")

    # timing: one forward + backward step each
    t32x = torch.tensor(x, device=tdev, requires_grad=True)
    t32w = [torch.nn.Parameter(torch.view_as_complex(torch.tensor(w[c], device=tdev).contiguous()))
            for c in range(2 ** (d - 1))]
    t32g = torch.tensor(g, device=tdev)

    def torch_step():
        t32x.grad = None
        for p in t32w:
            p.grad = None
        torch_conv(torch, t32x, t32w, ns, ms).backward(t32g)

    def ours_step():
        lx.grad = None
        lw.grad = None
        getattr(ops, f"spectral_conv{d}d")(lx, lw).backward(lg)

    if device == "cuda":
        import cupy

        sync = cupy.cuda.Device().synchronize

        def tsync():
            torch.cuda.synchronize()
    else:
        def sync():
            return None
        tsync = sync
    t_torch = _median_time(torch_step, tsync, reps)
    t_ours = _median_time(ours_step, sync, reps)
    line = (f"| {which} | {device} | {batch}x{cin}x{'x'.join(map(str, ns))}, modes {ms} | {t_torch * 1e3:.3f} ms | "
            f"{t_ours * 1e3:.3f} ms | {t_ours / t_torch:.2f} |")
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        torch_step()
        torch.cuda.synchronize()
        t_peak = torch.cuda.max_memory_allocated() - base
        pool = cupy.get_default_memory_pool()
        before = pool.total_bytes()
        ours_step()
        sync()
        o_peak = pool.total_bytes() - before
        line += f" {t_peak / 2**20:.1f} MiB | {o_peak / 2**20:.1f} MiB (CuPy pool growth in one step) |"
    print(line)


def stages(which, reps):
    """The CPU kernel's stages on their own, median ms of --reps runs each: where a step's time goes at
    this thread count. One step runs 4 analyses, 2 mixings, 1 weight gradient and 2 syntheses."""
    import math

    import torchlean.kernels.cpu.spectral_nd as K
    from torchlean.kernels.cpu import spectral_mix
    from torchlean.kernels.spectral_nd_basis import kept_counts

    batch, cin, cout, ns, ms = SIZES[which]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, cin) + ns).astype(np.float32).reshape(-1)
    w = rng.random((2 ** (len(ns) - 1), cin, cout) + ms + (2,)).astype(np.float32).reshape(-1)
    geo = K._geometry(ns, ms)
    lead, mm, p = batch * cin, math.prod(ms), batch * cin * math.prod(ns[:-1])
    spec = K._spectrum(x, lead, ns, ms, geo.bases, False)
    y = np.empty((lead, geo.off.size), np.complex64)
    k_last = kept_counts(ms)[-1]
    rows = [("analysis (all)", lambda: K._spectrum(x, lead, ns, ms, geo.bases, False)),
            ("  last-axis GEMM", lambda: K._real_mm(x, geo.bases.ana[-1], p, ns[-1])),
            ("mixing", lambda: spectral_mix.mix(spec, geo.off, w, geo.corner, geo.local, mm, cin, cout, False, geo.unit,
                                                y, geo.off, batch)),
            ("weight gradient", lambda: spectral_mix.weight_grad(spec, spec, geo.off, geo.unit, batch, cin, cout,
                                                                 geo.corner, geo.local, mm)),
            ("synthesis (all)", lambda: K._synth(spec, lead, ns, ms, geo.bases, False)),
            ("  last-axis GEMM", lambda: K._real_mm(np.ones(p * 2 * k_last, np.float32), geo.bases.syn[-1], p,
                                                   2 * k_last))]
    for name, fn in rows:
        print(f"  stage {which} {name:30s} {_median_time(fn, lambda: None, reps) * 1e3:9.3f} ms")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--only", choices=["2d", "3d"])
    ap.add_argument("--stages", action="store_true", help="CPU: also time the kernel's stages on their own")
    ap.add_argument("--threads", type=int, help="CPU threads of both (torch's and torchlean's set_num_threads)")
    args = ap.parse_args()
    import torch

    if args.threads:
        import torchlean

        torch.set_num_threads(args.threads)
        torchlean.set_num_threads(args.threads)

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    header = "| size | device | shape | torch fwd+bwd | ours fwd+bwd | ours / torch |"
    if args.device == "cuda":
        header += " torch peak | ours peak |"
    print(header)
    for which in ([args.only] if args.only else ["2d", "3d"]):
        run(which, args.device, args.reps)
        if args.stages and args.device == "cpu":
            stages(which, args.reps)


if __name__ == "__main__":
    main()
