"""Selective scans on the GPU: the primitives selective_scan_diag[_var]_{fwd,bwd} (CUDA backend,
torchlean/kernels/cuda/scan.{py,cu}) and the front end torchlean.ops.selective_scan, against PyTorch.
Needs a GPU, CuPy and torch with CUDA.

    PYTHONPATH=. python3 benchmarks/scan_cuda.py [--out DIR] [--reps 20] [--skip-check]

1. Checks (PASS/FAIL, max error / contract bound): every primitive against the float64 spec and its
   contract at (seq_len 4096, state 3072) and at a long few-channel case (seq_len 2^17, state 16).
   They run the same kernels and carry paths as the timed sizes (4096 x 24576: chunked, one
   thread per channel for the carries; 2^20 x 16: chunked, a block per channel for the carries),
   at sizes whose float64 spec and bound take seconds, not minutes, in NumPy. The front end against a torch float64 port of selective_scan_ref on the GPU.
2. Timings (CUDA events, warm-up, median of --reps): the primitives at (4096, 24576) and
   (2^20, 16), with the minimum bytes (inputs read once, outputs written once) and the fraction
   of the bandwidth of a device-to-device copy of the same size measured here; a torch loop
   (h = A h + B x[t], one step per iteration) on the GPU where it finishes in reasonable time.
   The front end at (batch 4, dim 1536, L 1024, N 16) against a PyTorch loop port of
   selective_scan_ref (float32, same GPU), forward and forward+backward.
Prints markdown tables; with --out, also writes them to DIR/scan_cuda.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

F32 = np.float32


def _median_ms(fn, reps: int, warmup: int = 2) -> float:
    import cupy
    import torch

    for _ in range(warmup):
        fn()
    cupy.cuda.Device().synchronize()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        torch.cuda.synchronize()  # torch runs on its own stream: count its work too
        times.append(cupy.cuda.get_elapsed_time(start, stop))
    return statistics.median(times)


def _median_torch_ms(fn, reps: int, warmup: int = 1) -> float:
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def _copy_bandwidth(nbytes: int) -> float:
    """Bytes/s of a device-to-device copy of nbytes (read + write counted)."""
    import cupy

    a = cupy.empty(max(nbytes // 4, 1), dtype=cupy.float32)
    b = cupy.empty_like(a)
    ms = _median_ms(lambda: b.__setitem__(slice(None), a), 10)
    return 2 * a.nbytes / (ms * 1e-3)


def _args(rng, L, S, var):
    n = L * S
    A = rng.uniform(0.9, 1.0, n if var else S).astype(F32)
    B = rng.standard_normal(n if var else S).astype(F32)
    return A, B, rng.standard_normal(n).astype(F32), rng.standard_normal(S).astype(F32)


def check_primitives(L: int, S: int, lines: list[str]) -> bool:
    from torchlean import contract, spec
    from torchlean.runtime import Buffer
    from torchlean.runtime import primitives as P

    ok_all = True
    rng = np.random.default_rng(0)
    for var in (False, True):
        A, B, X, h0 = _args(rng, L, S, var)
        dH = rng.standard_normal(L * S).astype(F32)
        dev = [Buffer.from_numpy(a, "cuda") for a in (A, B, X, h0, dH)]
        fname = "selective_scan_diag_var_fwd" if var else "selective_scan_diag_fwd"
        bname = "selective_scan_diag_var_bwd" if var else "selective_scan_diag_bwd"
        t0 = time.perf_counter()
        H = getattr(P, fname)(*dev[:4], L, S)
        outs = getattr(P, bname)(*dev[:4], H, dev[4], L, S)
        s64 = [a.astype(np.float64) for a in (A, B, X, h0)]
        ref = getattr(spec, fname)(*s64, L, S)
        v = contract.compare(H.to_numpy(), ref, contract.CONTRACTS[fname].bound(ref, *s64, L, S))
        Hh = H.to_numpy().astype(np.float64)
        refb = getattr(spec, bname)(*s64, Hh, dH.astype(np.float64), L, S)
        vb = contract.compare(tuple(o.to_numpy() for o in outs), refb,
                              contract.CONTRACTS[bname].bound(refb, *s64, Hh, dH.astype(np.float64), L, S))
        for name, verdict in ((fname, v), (bname, vb)):
            ok_all &= verdict.ok
            lines.append(f"| {name} | {L} x {S} | {'PASS' if verdict.ok else 'FAIL'} | {verdict.ratio:.3g} | "
                         f"{verdict.detail[:80]} |")
        print(f"checked {fname}/{bname} at {L}x{S} in {time.perf_counter() - t0:.1f} s", flush=True)
    return ok_all


def torch_selective_scan_ref(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False):
    """mamba_ssm's selective_scan_ref (real A; B, C of shape (batch, N, L) or (dim, N)), PyTorch loop."""
    import torch
    import torch.nn.functional as F

    if delta_bias is not None:
        delta = delta + delta_bias[..., None]
    if delta_softplus:
        delta = F.softplus(delta)
    x = A.new_zeros((u.shape[0], A.shape[0], A.shape[1]))
    delta_a = torch.exp(torch.einsum("bdl,dn->bdln", delta, A))
    delta_b_u = torch.einsum("bdl,bnl,bdl->bdln", delta, B, u) if B.dim() == 3 else \
        torch.einsum("bdl,dn,bdl->bdln", delta, B, u)
    ys = []
    for i in range(u.shape[2]):
        x = delta_a[:, :, i] * x + delta_b_u[:, :, i]
        ys.append(torch.einsum("bdn,bn->bd", x, C[:, :, i]) if C.dim() == 3 else torch.einsum("bdn,dn->bd", x, C))
    out = torch.stack(ys, dim=2)
    if D is not None:
        out = out + u * D[:, None]
    if z is not None:
        out = out * F.silu(z)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=None, help="directory for scan_cuda.md")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--skip-check", action="store_true")
    args = ap.parse_args()

    import cupy
    import torch

    import torchlean as tl
    from torchlean import ops
    from torchlean.kernels.cuda.scan import plan
    from torchlean.runtime import Buffer
    from torchlean.runtime import primitives as P

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev_name = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    lines = [f"# selective scans on {dev_name}", ""]
    ok = True
    t_start = time.perf_counter()

    # -- 1. checks --------------------------------------------------------------------------------------
    if not args.skip_check:
        lines += ["| primitive | L x S | check | max err / bound | detail |", "|---|---|---|---|---|"]
        ok &= check_primitives(4096, 3072, lines)
        ok &= check_primitives(1 << 17, 16, lines)
        lines.append("")

    # -- 2. primitive timings ---------------------------------------------------------------------------
    lines += ["| primitive | L x S | plan (C x T) | ours ms | torch loop ms | ours/torch | min bytes | GB/s | "
              "of copy BW |", "|---|---|---|---|---|---|---|---|---|"]
    rng = np.random.default_rng(1)
    bw_notes = []
    for L, S in ((4096, 24576), (1 << 20, 16)):
        bw = _copy_bandwidth(2 * L * S * 4)
        for var in (False, True):
            A, B, X, h0 = _args(rng, L, S, var)
            d = [Buffer.from_numpy(a, "cuda") for a in (A, B, X, h0)]
            dH = Buffer.from_numpy(rng.standard_normal(L * S).astype(F32), "cuda")
            fwd = P.selective_scan_diag_var_fwd if var else P.selective_scan_diag_fwd
            bwd = P.selective_scan_diag_var_bwd if var else P.selective_scan_diag_bwd
            H = fwd(*d, L, S)
            n, coef = L * S, (L * S if var else S)
            fwd_bytes = 4 * (n + 2 * coef + S + n)                       # A, B, X, h0 in; H out
            bwd_bytes = 4 * (2 * coef + S + 3 * n + (2 * coef + n + S))  # A, B, h0, X, H, dH in; dA, dB, dX, dh0 out
            t_f = _median_ms(lambda: fwd(*d, L, S).release(), args.reps)
            t_b = _median_ms(lambda: [o.release() for o in bwd(*d, H, dH, L, S)], args.reps)
            t_torch = None
            if L <= 8192:
                tA, tB = (torch.tensor(v, device="cuda") for v in (A, B))
                tX = torch.tensor(X, device="cuda").reshape(L, S)
                if var:
                    tA, tB = tA.reshape(L, S), tB.reshape(L, S)
                th0 = torch.tensor(h0, device="cuda")

                def torch_loop():
                    h, out = th0, torch.empty(L, S, device="cuda")
                    for t in range(L):
                        h = (tA[t] if var else tA) * h + (tB[t] if var else tB) * tX[t]
                        out[t] = h
                    return out

                t_torch = _median_torch_ms(torch_loop, max(3, args.reps // 4))
            C, T = plan(L, S)
            for label, t, nbytes, tt in (("fwd", t_f, fwd_bytes, t_torch), ("bwd", t_b, bwd_bytes, None)):
                gbps = nbytes / (t * 1e-3) / 1e9
                name = f"selective_scan_diag{'_var' if var else ''}_{label}"
                tt_s = f"{tt:.2f}" if tt else "n/a"
                ratio = f"{t / tt:.4f}" if tt else "n/a"
                lines.append(f"| {name} | {L} x {S} | {C} x {T} | {t:.3f} | {tt_s} | {ratio} | {nbytes / 1e6:.0f} MB | "
                             f"{gbps:.0f} | {gbps * 1e9 / bw:.0%} |")
            for b in d + [dH, H]:
                b.release()
            print(f"timed primitives at {L}x{S} ({time.perf_counter() - t_start:.0f} s)", flush=True)
        bw_notes.append(f"copy bandwidth measured at {2 * L * S * 4 / 1e6:.0f} MB moved: {bw / 1e12:.2f} TB/s")
    lines += [""] + bw_notes + [""]

    # -- 3. the front end -------------------------------------------------------------------------------
    batch, dim, L, N = 4, 1536, 1024, 16
    rng = np.random.default_rng(2)
    arrs = dict(u=rng.standard_normal((batch, dim, L)), delta=rng.uniform(-4, -1, (batch, dim, L)),
                A=-np.exp(rng.uniform(0, np.log(16), (dim, N))), B=rng.standard_normal((batch, N, L)),
                C=rng.standard_normal((batch, N, L)), D=rng.standard_normal(dim), z=rng.standard_normal((batch, dim, L)),
                delta_bias=rng.uniform(-1, 0, dim))
    arrs = {k: v.astype(F32) for k, v in arrs.items()}
    names = list(arrs)
    kw = dict(delta_softplus=True)

    # inputs uploaded once (the timed calls do no host transfers, as torch's do not)
    leaves = {bwd: [tl.tensor(arrs[k], device="cuda", requires_grad=bwd) for k in names] for bwd in (False, True)}

    def ours(bwd: bool):
        ts = leaves[bwd]
        out = ops.selective_scan(*ts[:7], delta_bias=ts[7], **kw)
        if bwd:
            out.sum().backward()
            for t in ts:
                t.grad = None
        return out

    tts = {k: torch.tensor(v, device="cuda") for k, v in arrs.items()}

    def theirs(bwd: bool):
        ts = [tts[k].detach().requires_grad_(bwd) for k in names]
        out = torch_selective_scan_ref(*ts[:7], delta_bias=ts[7], **kw)
        if bwd:
            out.sum().backward()
        return out

    if not args.skip_check:
        ref = torch_selective_scan_ref(*(tts[k].double() for k in names[:7]), delta_bias=tts["delta_bias"].double(),
                                       **kw).cpu().numpy()
        got = ours(False).numpy().astype(np.float64)
        err = float(np.max(np.abs(got - ref)))
        tol = 1e-4 * float(np.max(np.abs(ref)))
        ok &= err <= tol
        lines.append(f"front end vs torch float64 port: {'PASS' if err <= tol else 'FAIL'} max |err| {err:.3g} "
                     f"(tolerance 1e-4 max|ref| = {tol:.3g})")
    reps = max(3, args.reps // 4)
    o_f, t_f = _median_ms(lambda: ours(False), reps), _median_torch_ms(lambda: theirs(False), reps)
    o_b, t_b = _median_ms(lambda: ours(True), reps), _median_torch_ms(lambda: theirs(True), reps)
    lines += ["", f"| selective_scan (b {batch}, d {dim}, L {L}, N {N}) | ours ms | torch ref-loop ms | ours/torch |",
              "|---|---|---|---|",
              f"| forward | {o_f:.2f} | {t_f:.2f} | {o_f / t_f:.3f} |",
              f"| forward + backward | {o_b:.2f} | {t_b:.2f} | {o_b / t_b:.3f} |"]
    lines.append("")
    lines.append(f"overall: {'PASS' if ok else 'FAIL'} ({time.perf_counter() - t_start:.0f} s)")
    text = "\n".join(lines)
    print(text)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "scan_cuda.md"), "w") as f:
            f.write(text + "\n")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
