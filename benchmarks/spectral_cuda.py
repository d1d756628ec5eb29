"""The CUDA spectral family (torchlean/kernels/cuda/spectral.py) against PyTorch on one GPU, TF32 off.
Needs a GPU, CuPy and torch with CUDA.

    PYTHONPATH=. python3 benchmarks/spectral_cuda.py [--out DIR] [--reps 30] [--check-only] [--no-check]

1. check: every primitive (rfft1d_packed, irfft1d_packed, spectral_conv1d_rfft_fwd, _bwd_x, _bwd_w,
   _bwd_wre, _bwd_wim) at small sizes against the float64 spec within its contract, and at the
   benchmark sizes against float64 torch on the GPU (torch.fft in float64 is exact to ~1e-16),
   through both convolution routes ("dft": GEMMs with a cached basis; "fft": cuFFT + CGEMM); prints
   PASS/FAIL with max err / bound (must be <= 1) and repeat-run bitwise equality.
2. timing (CUDA events, warm-up, median of --reps): rfft / irfft (batch 4096, n 1024 and the prime
   n 1009) against torch.fft.rfft / irfft, and the spectral convolution at the issue's benchmark size
   (batch 32, grid 1024, width 64, modes 16) forward, bwd_x and bwd_w (both routes) against the
   PyTorch FNO composition (rfft along grid, einsum over the modes, zero-filled irfft; backward by
   autograd). Prints a markdown table: time, ratio ours / torch (< 1 is faster), and the hardware
   figure: fraction of copy bandwidth (H200 ~4.0 TB/s) for the FFTs (bytes = input + output), and
   TFLOP/s of the GEMM work for the dft route (FP32 SIMT peak ~60 TFLOP/s).
Writes the table to DIR/spectral_cuda.md when --out is given. Runs in well under 2 minutes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import numpy as np

COPY_TBPS = 4.0
PEAK_TFLOPS = 60.0
CONV_SIZE = (32, 1024, 64, 16)  # batch, grid, width, modes
FFT_SIZES = [(4096, 1024), (4096, 1009)]


def _setup():
    import cupy
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    from torchlean.runtime.precision import set_allow_tf32

    set_allow_tf32(False)
    import torchlean.kernels.cuda.spectral as S

    return cupy, torch, S


def _time(cupy, fn, reps):
    for _ in range(3):
        fn()
    cupy.cuda.Device().synchronize()
    samples = []
    for _ in range(reps):
        a, b = cupy.cuda.Event(), cupy.cuda.Event()
        a.record()
        fn()
        b.record()
        b.synchronize()
        samples.append(cupy.cuda.get_elapsed_time(a, b) * 1e-3)
    return statistics.median(samples)


def _ttime(torch, fn, reps):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        samples.append(a.elapsed_time(b) * 1e-3)
    return statistics.median(samples)


# -- 1. checks ---------------------------------------------------------------------------------------------
def check(cupy, torch, S) -> bool:
    from torchlean import contract
    from torchlean.testing.primitive_table import TABLE, run_case

    ok_all = True

    def report(name, ok, ratio, extra=""):
        nonlocal ok_all
        ok_all &= bool(ok)
        print(f"{'PASS' if ok else 'FAIL'}  {name:58s} max err/bound {ratio:.3g} {extra}")

    # (a) small sizes against the spec, every table edge case, both routes
    for route in ("dft", "fft"):
        S.CONV_ROUTE = route
        for name, info in TABLE.items():
            if "fft" not in name and "spectral" not in name:
                continue
            worst, ok = 0.0, True
            for i, args in enumerate(info.edge_cases):
                v, _, _ = run_case(info, [a.copy() if isinstance(a, np.ndarray) else a for a in args], "cuda")
                ok &= v.ok
                worst = max(worst, v.ratio)
                if not v.ok:
                    print(f"      edge case {i}: {v.detail}")
            rng = np.random.default_rng(0)
            for s in range(20):
                args = info.sample(rng, tuple(int(v) for v in rng.integers(0, 40, info.ndims)), "normal")
                v, _, _ = run_case(info, args, "cuda")
                ok &= v.ok
                worst = max(worst, v.ratio)
                if not v.ok:
                    print(f"      random case {s}: {v.detail}")
            report(f"{name} [{route}] edge + random vs spec", ok, worst)
    S.CONV_ROUTE = "auto"

    # (b) benchmark sizes against float64 torch on the GPU
    rng = np.random.default_rng(1)
    for batch, n in FFT_SIZES:
        x = rng.standard_normal((batch, n)).astype(np.float32)
        xc = cupy.asarray(x).reshape(-1)
        out = S.rfft1d_packed(xc, batch, n)
        ref = torch.view_as_real(torch.fft.rfft(torch.tensor(x, dtype=torch.float64, device="cuda"))).cpu().numpy()
        tol = contract.CONTRACTS["rfft1d_packed"].bound(ref.reshape(-1), x.reshape(-1).astype(np.float64), batch, n)
        v = contract.compare(cupy.asnumpy(out), ref.reshape(-1), tol)
        same = bool(cupy.all(out == S.rfft1d_packed(xc, batch, n)))
        report(f"rfft1d_packed ({batch}, {n}) vs torch float64", v.ok and same, v.ratio, "" if same else "NOT REPEATABLE")
        s = rng.standard_normal((batch, n // 2 + 1, 2)).astype(np.float32)
        sc = cupy.asarray(s).reshape(-1)
        out = S.irfft1d_packed(sc, batch, n)
        st = torch.tensor(s, dtype=torch.float64, device="cuda")
        ref = torch.fft.irfft(torch.complex(st[..., 0], st[..., 1]), n=n).cpu().numpy()
        tol = contract.CONTRACTS["irfft1d_packed"].bound(ref.reshape(-1), s.reshape(-1).astype(np.float64), batch, n)
        v = contract.compare(cupy.asnumpy(out), ref.reshape(-1), tol)
        report(f"irfft1d_packed ({batch}, {n}) vs torch float64", v.ok, v.ratio)
        unchanged = bool(cupy.all(sc == cupy.asarray(s).reshape(-1)))
        report("irfft1d_packed leaves its input unchanged", unchanged, 0.0)

    b, g, w, m = CONV_SIZE
    x = rng.standard_normal((b, g, w)).astype(np.float32)
    wr = (rng.standard_normal((m, w, w)) / w).astype(np.float32)
    wi = (rng.standard_normal((m, w, w)) / w).astype(np.float32)
    dy = rng.standard_normal((b, g, w)).astype(np.float32)
    T = {k: torch.tensor(v, dtype=torch.float64, device="cuda", requires_grad=True)
         for k, v in (("x", x), ("wr", wr), ("wi", wi))}
    X = torch.fft.rfft(T["x"], dim=1)
    Y = torch.einsum("bki,kio->bko", X[:, :m], torch.complex(T["wr"], T["wi"]))
    Yf = torch.cat([Y, torch.zeros(b, g // 2 + 1 - m, w, dtype=Y.dtype, device="cuda")], dim=1)
    yref = torch.fft.irfft(Yf, n=g, dim=1)
    yref.backward(torch.tensor(dy, dtype=torch.float64, device="cuda"))
    refs = {"y": yref.detach().cpu().numpy().reshape(-1), "dx": T["x"].grad.cpu().numpy().reshape(-1),
            "dwr": T["wr"].grad.cpu().numpy().reshape(-1), "dwi": T["wi"].grad.cpu().numpy().reshape(-1)}
    a64 = [v.reshape(-1).astype(np.float64) for v in (x, wr, wi, dy)]
    dims = (g, w, m, b)  # the seed's (grid, width, modes), then the batch
    bounds = {
        "y": contract.CONTRACTS["spectral_conv1d_rfft_fwd"].bound(refs["y"], *a64[:3], *dims),
        "dx": contract.CONTRACTS["spectral_conv1d_rfft_bwd_x"].bound(refs["dx"], *a64, *dims),
        "dwr": contract.CONTRACTS["spectral_conv1d_rfft_bwd_wre"].bound(refs["dwr"], *a64, *dims),
        "dwi": contract.CONTRACTS["spectral_conv1d_rfft_bwd_wim"].bound(refs["dwi"], *a64, *dims),
    }
    cx, cwr, cwi, cdy = (cupy.asarray(v).reshape(-1) for v in (x, wr, wi, dy))
    for route in ("dft", "fft"):
        S.CONV_ROUTE = route
        outs = {"y": S.spectral_conv1d_rfft_fwd(cx, cwr, cwi, *dims),
                "dx": S.spectral_conv1d_rfft_bwd_x(cx, cwr, cwi, cdy, *dims)}
        outs["dwr"], outs["dwi"] = S.spectral_conv1d_rfft_bwd_w(cx, cwr, cwi, cdy, *dims)
        again = S.spectral_conv1d_rfft_bwd_w(cx, cwr, cwi, cdy, *dims)
        same = bool(cupy.all(again[0] == outs["dwr"])) and bool(cupy.all(again[1] == outs["dwi"]))
        for k in ("y", "dx", "dwr", "dwi"):
            v = contract.compare(cupy.asnumpy(outs[k]), refs[k], bounds[k])
            err = float(np.max(np.abs(cupy.asnumpy(outs[k]) - refs[k])))
            rel = err / float(np.max(np.abs(refs[k])))
            report(f"spectral conv {k} {CONV_SIZE} [{route}] vs torch float64", v.ok, v.ratio,
                   f"(max abs err {err:.3g}, {rel:.2g} of max|ref|)")
        report(f"spectral conv bwd_w [{route}] repeat runs bitwise equal", same, 0.0)
    S.CONV_ROUTE = "auto"
    return ok_all


# -- 2. timing ---------------------------------------------------------------------------------------------
def timing(cupy, torch, S, reps: int) -> list[tuple]:
    rows = []
    rng = np.random.default_rng(2)
    for batch, n in FFT_SIZES:
        x = rng.standard_normal((batch, n)).astype(np.float32)
        xc = cupy.asarray(x).reshape(-1)
        xt = torch.tensor(x, device="cuda")
        ours = _time(cupy, lambda: S.rfft1d_packed(xc, batch, n), reps)
        theirs = _ttime(torch, lambda: torch.view_as_real(torch.fft.rfft(xt)), reps)
        nbytes = 4 * batch * n + 8 * batch * (n // 2 + 1)
        rows.append((f"rfft1d_packed ({batch}, {n})", ours, theirs, f"{nbytes / ours / 1e12 / COPY_TBPS:.0%} of copy BW"))
        sc = S.rfft1d_packed(xc, batch, n)
        st = torch.view_as_complex(torch.tensor(cupy.asnumpy(sc).reshape(batch, -1, 2), device="cuda"))
        ours = _time(cupy, lambda: S.irfft1d_packed(sc, batch, n), reps)
        theirs = _ttime(torch, lambda: torch.fft.irfft(st, n=n), reps)
        rows.append((f"irfft1d_packed ({batch}, {n})", ours, theirs,
                     f"{nbytes / ours / 1e12 / COPY_TBPS:.0%} of copy BW (+ the input copy)"))

    b, g, w, m = CONV_SIZE
    x = rng.standard_normal((b, g, w)).astype(np.float32)
    wr = (rng.standard_normal((m, w, w)) / w).astype(np.float32)
    wi = (rng.standard_normal((m, w, w)) / w).astype(np.float32)
    dy = rng.standard_normal((b, g, w)).astype(np.float32)
    cx, cwr, cwi, cdy = (cupy.asarray(v).reshape(-1) for v in (x, wr, wi, dy))
    tx = torch.tensor(x, device="cuda", requires_grad=True)
    twr = torch.tensor(wr, device="cuda", requires_grad=True)
    twi = torch.tensor(wi, device="cuda", requires_grad=True)
    tdy = torch.tensor(dy, device="cuda")

    def torch_fwd():
        X = torch.fft.rfft(tx, dim=1)
        out = torch.zeros(b, g // 2 + 1, w, dtype=torch.complex64, device="cuda")
        out[:, :m] = torch.einsum("bki,kio->bko", X[:, :m], torch.complex(twr, twi))
        return torch.fft.irfft(out, n=g, dim=1)

    with torch.no_grad():
        t_fwd = _ttime(torch, torch_fwd, reps)
    y = torch_fwd()
    t_fb = _ttime(torch, lambda: torch.autograd.grad(torch_fwd(), (tx, twr, twi), tdy), reps)
    t_bwd = max(t_fb - t_fwd, 1e-9)
    gemm_flops = 2 * 2 * b * 2 * m * g * w + 2 * b * m * (2 * w) ** 2  # two basis GEMMs + the mixing
    dims = (g, w, m, b)  # the seed's (grid, width, modes), then the batch
    for route in ("dft", "fft"):
        S.CONV_ROUTE = route
        t1 = _time(cupy, lambda: S.spectral_conv1d_rfft_fwd(cx, cwr, cwi, *dims), reps)
        t2 = _time(cupy, lambda: S.spectral_conv1d_rfft_bwd_x(cx, cwr, cwi, cdy, *dims), reps)
        t3 = _time(cupy, lambda: S.spectral_conv1d_rfft_bwd_w(cx, cwr, cwi, cdy, *dims), reps)
        fig = (lambda t, f: f"{f / t / 1e12:.1f} TFLOP/s ({f / t / 1e12 / PEAK_TFLOPS:.0%} of FP32 peak)") \
            if route == "dft" else (lambda t, f: f"{8 * b * g * w / t / 1e12 / COPY_TBPS:.0%} of copy BW (x + y)")
        rows.append((f"spectral conv fwd {dims} [{route}]", t1, t_fwd, fig(t1, gemm_flops)))
        rows.append((f"spectral conv bwd_x {dims} [{route}]", t2, None, fig(t2, gemm_flops)))
        rows.append((f"spectral conv bwd_w {dims} [{route}]", t3, None, fig(t3, gemm_flops)))
        rows.append((f"spectral conv bwd_x + bwd_w [{route}]", t2 + t3, t_bwd, "vs torch autograd backward"))
    S.CONV_ROUTE = "auto"
    del y
    return rows


def markdown(rows) -> str:
    lines = ["| case | ours | torch | ours / torch | hardware |", "| --- | --- | --- | --- | --- |"]
    for name, ours, theirs, fig in rows:
        t = f"{theirs * 1e6:.1f} us" if theirs else "-"
        r = f"{ours / theirs:.2f}" if theirs else "-"
        lines.append(f"| {name} | {ours * 1e6:.1f} us | {t} | {r} | {fig} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="folder for spectral_cuda.md")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--check-only", action="store_true")
    ap.add_argument("--no-check", action="store_true")
    args = ap.parse_args(argv)
    cupy, torch, S = _setup()
    print(f"GPU: {torch.cuda.get_device_name()}")
    ok = True
    if not args.no_check:
        ok = check(cupy, torch, S)
        print("checks:", "ALL PASS" if ok else "SOME FAILED")
    if not args.check_only:
        table = markdown(timing(cupy, torch, S, args.reps))
        print(table)
        if args.out:
            os.makedirs(args.out, exist_ok=True)
            with open(os.path.join(args.out, "spectral_cuda.md"), "w") as f:
                f.write(table + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
