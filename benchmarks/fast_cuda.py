"""The fast-kernel family (fast_gemm, mse_loss_fwd/bwd, fast_matmul) against torch on one GPU.

    PYTHONPATH=. python3 benchmarks/fast_cuda.py [--out DIR] [--reps 30]

1. checks (at the benchmark sizes, against torch float64 on the GPU; the spec would be too slow):
   fast_gemm fp32 and fp64 in linear's layout (trans_b) and in the backward layouts (plain, trans_a)
   within the contract (max err / bound <= 1); fp64 also against the float32-rounded float64
   result (the share of outputs that are not the correctly rounded value); mse_loss_fwd within its
   contract and bitwise repeatable; mse_loss_bwd bitwise equal to mse_loss's three-primitive VJP
   and within its contract; every table edge case of the family on CUDA (and the CPU); fast_matmul
   (host float64) fp64 against NumPy float64 to 1e-9 relative to |a||b|, fp32 within contract.
2. timing (median of >= --reps synchronized samples, warm-up first; perf_counter, so host overhead
   counts): linear forward and forward+backward through the tape at (rows 8192, in 1024, out 1024)
   and (64, 4096, 4096): the normal ops.linear (bmm_nt + broadcast + add), linear_fast fp32 and
   fp64, torch F.linear float32 and (for fp64) float64; fast_gemm alone against bmm_nt + add;
   mse_loss / mse_loss_fast / torch at n = 2^24 (forward, forward+backward); fast_matmul's host
   round trip at 2048^3 (fp32, fp64) against torch's (upload, matmul, download) and NumPy float64.
   TF32 is off everywhere (torchlean's default; torch.backends.*.allow_tf32 = False). TFLOP/s =
   2 m k n per GEMM / time (forward+backward: three GEMMs); bandwidth = bytes read + written / time
   as a fraction of 4.0 TB/s (the H200's measured copy bandwidth). H200 peaks: FP32 SIMT ~60
   TFLOP/s, FP64 tensor core ~67 TFLOP/s.
Prints markdown; with --out also writes DIR/fast_cuda.md and DIR/fast_cuda.json.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

U = 2.0**-24
U64 = 2.0**-53
S = 2.0**-149
COPY_BW = 4.0e12


def _parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None, help="folder for fast_cuda.md and fast_cuda.json")
    ap.add_argument("--reps", type=int, default=30, help="timed samples per case (>= 20)")
    return ap.parse_args()


def _gamma(k, u=U):
    return k * u / (1 - k * u)


from benchmarks.harness import median_synced as _timeit, write_report  # noqa: E402


def main() -> int:
    args = _parse()
    import cupy
    import torch

    import torchlean as tl
    from torchlean import ops
    from torchlean.runtime import Buffer
    from torchlean.runtime import primitives as P
    from torchlean.testing.primitive_table import TABLE, run_case

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    tl.set_options(tl.Options(use_gpu=True))
    dev = "cuda"
    rng = np.random.default_rng(0)
    lines, record = [], {"checks": [], "timings": []}
    ok_all = True

    def say(s=""):
        print(s, flush=True)
        lines.append(s)

    def sync():
        cupy.cuda.Device().synchronize()
        torch.cuda.synchronize()

    def tdev(buf):  # a torchlean buffer as a torch float64 CUDA tensor (a copy)
        return torch.as_tensor(cupy.asarray(buf._data), device="cuda").double()

    def check(name, ok, **info):
        nonlocal ok_all
        ok_all &= bool(ok)
        record["checks"].append(dict(check=name, ok=bool(ok), **info))

    say(f"# fast kernels on {torch.cuda.get_device_name()}")
    # -- 1. checks ---------------------------------------------------------------------------------
    say("\n## checks\n")
    bad_edges = []
    for name in ("fast_gemm", "mse_loss_fwd", "mse_loss_bwd"):
        info = TABLE[name]
        for i, case in enumerate(info.edge_cases):
            for d in ("cuda", "cpu"):
                verdict = run_case(info, [a.copy() if isinstance(a, np.ndarray) else a for a in case], d)[0]
                if not verdict.ok:
                    bad_edges.append(f"{name}[{i}] on {d}: {verdict.detail}")
    say(f"table edge cases of fast_gemm, mse_loss_fwd, mse_loss_bwd on cuda and cpu: "
        f"{'PASS' if not bad_edges else 'FAIL: ' + '; '.join(bad_edges)}")
    check("edge cases", not bad_edges, failures=bad_edges)

    def gemm_check(label, a, b, bias, m, k, n, ta, tb):
        ab, bb = Buffer.from_numpy(a, dev), Buffer.from_numpy(b, dev)
        biasb = None if bias is None else Buffer.from_numpy(bias, dev)
        A, B = tdev(ab), tdev(bb)
        A = A.view(k, m).t() if ta else A.view(m, k)
        B = B.view(n, k).t() if tb else B.view(k, n)
        ref = A @ B
        mag = A.abs() @ B.abs()
        if bias is not None:
            bt = tdev(biasb)
            ref, mag = ref + bt, mag + bt.abs()
        for f64 in (0, 1):
            out = tdev(P.fast_gemm(ab, bb, biasb, m, k, n, ta, tb, f64)).view(m, n)
            err = (out - ref).abs()
            if f64:
                # contract + the float64 reference's own error (gamma64(k+1) mag)
                bound = U * ref.abs() + 3 * _gamma(k + 1, U64) * mag * (1 + U) + S
            else:
                bound = _gamma(k + 1) * mag + (k + 1) * S + _gamma(k + 1, U64) * mag
            ratio = float((err / bound).max())
            extra = ""
            if f64:
                not_rounded = float((out != ref.float().double()).double().mean())
                extra = f"; outputs not equal to float32(exact): {100 * not_rounded:.4f}%"
            else:
                extra = f"; max err / (u |ref|): {float((err / (U * ref.abs() + S)).max()):.1f}"
            ok = ratio <= 1.0
            say(f"fast_gemm {label} fp{'64' if f64 else '32'}: {'PASS' if ok else 'FAIL'} err/bound {ratio:.3g}{extra}")
            check(f"fast_gemm {label} fp{64 if f64 else 32}", ok, ratio=ratio)

    for rows, fin, fout in ((8192, 1024, 1024), (64, 4096, 4096)):
        x = rng.standard_normal(rows * fin).astype(np.float32)
        w = (rng.standard_normal(fout * fin) / np.sqrt(fin)).astype(np.float32)
        b = rng.standard_normal(fout).astype(np.float32)
        g = rng.standard_normal(rows * fout).astype(np.float32)
        gemm_check(f"linear fwd ({rows},{fin})x({fout},{fin})^T + b", x, w, b, rows, fin, fout, 0, 1)
        gemm_check(f"linear dx ({rows},{fout})x({fout},{fin})", g, w, None, rows, fout, fin, 0, 0)
        gemm_check(f"linear dW ({rows},{fout})^T x ({rows},{fin})", g, x, None, fout, rows, fin, 1, 0)

    n = 1 << 24
    xm = rng.standard_normal(n).astype(np.float32)
    tm = (xm + rng.standard_normal(n).astype(np.float32) * np.float32(0.01)).astype(np.float32)
    xb, tb = Buffer.from_numpy(xm, dev), Buffer.from_numpy(tm, dev)
    ref_sum = float(((tdev(xb) - tdev(tb)) ** 2).sum())
    for mean in (0, 1):
        ref = ref_sum / n if mean else ref_sum
        o1 = P.mse_loss_fwd(xb, tb, n, mean).to_numpy()
        o2 = P.mse_loss_fwd(xb, tb, n, mean).to_numpy()
        bound = U * ref + _gamma(n + 3, U64) * ref * (1 + U) + S + _gamma(n, U64) * ref  # + the reference's error
        ratio = abs(float(o1[0]) - ref) / bound
        ok = ratio <= 1 and o1.tobytes() == o2.tobytes()
        say(f"mse_loss_fwd n=2^24 mean={mean}: {'PASS' if ok else 'FAIL'} err/bound {ratio:.3g}; "
            f"bitwise repeatable: {o1.tobytes() == o2.tobytes()}")
        check(f"mse_loss_fwd mean={mean}", ok, ratio=ratio)
    gb = Buffer.from_numpy(np.array([0.7], np.float32), dev)
    for mean in (0, 1):
        d = P.mse_loss_bwd(xb, tb, gb, n, mean)
        coef = 2.0 / n if mean else 2.0
        diff = P.sub(xb, tb)
        normal = P.scale(P.mul(diff, P.broadcast_to(gb, (), (n,), (0,))), coef)
        same = d.to_numpy().tobytes() == normal.to_numpy().tobytes()
        ref = 0.7 * 2 * (tdev(xb) - tdev(tb)) / (n if mean else 1)
        ratio = float(((tdev(d) - ref).abs() / (_gamma(4) * ref.abs() + 4 * S)).max())
        ok = same and ratio <= 1
        say(f"mse_loss_bwd n=2^24 mean={mean}: {'PASS' if ok else 'FAIL'} err/bound {ratio:.3g}; "
            f"bits equal to mse_loss's VJP: {same}")
        check(f"mse_loss_bwd mean={mean}", ok, ratio=ratio, same_bits_as_normal=same)
        for buf in (d, diff, normal):
            buf.release()

    a = rng.standard_normal((2048, 2048))
    b = rng.standard_normal((2048, 2048))
    ref = a @ b
    mag = np.abs(a) @ np.abs(b)
    got = tl.fast_matmul(a, b, use_gpu=True, precision="fp64")
    rel = float(np.max(np.abs(got - ref) / mag))
    ok = rel <= 1e-9 and got.dtype == np.float64
    say(f"fast_matmul 2048^3 use_gpu fp64 vs NumPy float64: {'PASS' if ok else 'FAIL'} max |diff| / (|a||b|) = {rel:.3g} (<= 1e-9)")
    check("fast_matmul fp64", ok, rel=rel)
    got32 = tl.fast_matmul(a, b, use_gpu=True, precision="fp32")
    a32, b32 = a.astype(np.float32).astype(np.float64), b.astype(np.float32).astype(np.float64)
    ref32 = a32 @ b32
    ratio = float(np.max(np.abs(got32 - ref32) / (_gamma(2049) * (np.abs(a32) @ np.abs(b32)) + 2049 * S)))
    say(f"fast_matmul 2048^3 use_gpu fp32: {'PASS' if ratio <= 1 else 'FAIL'} err/bound {ratio:.3g} "
        f"(vs the float64 product: max |diff| / (|a||b|) = {float(np.max(np.abs(got32 - ref) / mag)):.3g})")
    check("fast_matmul fp32", ratio <= 1, ratio=ratio)

    # -- 2. timing ---------------------------------------------------------------------------------
    say("\n## timing\n")
    say(f"median of >= {max(args.reps, 20)} synchronized samples; TF32 off\n")
    say("| case | ours (us) | torch (us) | ratio ours/torch | ours TFLOP/s or GB/s | fraction of peak |")
    say("| --- | ---: | ---: | ---: | ---: | ---: |")

    def row(case, t_ours, t_torch, flops=None, nbytes=None, peak=60e12):
        tt = "" if t_torch is None else f"{t_torch * 1e6:.1f}"
        ratio = "" if t_torch is None else f"{t_ours / t_torch:.2f}"
        if flops:
            rate, frac = f"{flops / t_ours / 1e12:.1f} TFLOP/s", f"{flops / t_ours / peak:.2f}"
        elif nbytes:
            rate, frac = f"{nbytes / t_ours / 1e9:.0f} GB/s", f"{nbytes / t_ours / COPY_BW:.2f}"
        else:
            rate = frac = ""
        say(f"| {case} | {t_ours * 1e6:.1f} | {tt} | {ratio} | {rate} | {frac} |")
        record["timings"].append(dict(case=case, ours_s=t_ours, torch_s=t_torch, flops=flops, nbytes=nbytes))

    T = lambda fn: _timeit(fn, sync, args.reps)  # noqa: E731
    for rows, fin, fout in ((8192, 1024, 1024), (64, 4096, 4096)):
        fl = 2 * rows * fin * fout
        size = f"({rows},{fin},{fout})"
        x = rng.standard_normal((rows, fin)).astype(np.float32)
        w = (rng.standard_normal((fout, fin)) / np.sqrt(fin)).astype(np.float32)
        b = rng.standard_normal(fout).astype(np.float32)
        xt, wt, bt = (tl.tensor(v, device=dev) for v in (x, w, b))
        tx, tw, tb_ = (torch.tensor(v, device="cuda") for v in (x, w, b))
        tx64, tw64, tb64 = tx.double(), tw.double(), tb_.double()
        # primitives alone
        xb_, wb_, bb_ = xt._buf, wt._buf, bt._buf

        def normal_prims():
            y = P.bmm_nt(xb_, wb_, 1, rows, fin, fout)
            r = P.broadcast_vec_to_rows(bb_, rows, fout)
            P.add(y, r)

        t_tf = T(lambda: torch.nn.functional.linear(tx, tw, tb_))
        t_tf64 = T(lambda: torch.nn.functional.linear(tx64, tw64, tb64))
        row(f"fast_gemm fp32 (+bias) {size}", T(lambda: P.fast_gemm(xb_, wb_, bb_, rows, fin, fout, 0, 1, 0)), t_tf, fl)
        row(f"bmm_nt + broadcast + add {size}", T(normal_prims), t_tf, fl)
        row(f"fast_gemm fp64 (+bias) {size} vs torch float64", T(lambda: P.fast_gemm(xb_, wb_, bb_, rows, fin, fout,
                                                                                      0, 1, 1)), t_tf64, fl, peak=67e12)
        row(f"linear fwd (normal) {size}", T(lambda: ops.linear(xt, wt, bt)), t_tf, fl)
        row(f"linear_fast fp32 fwd {size}", T(lambda: ops.linear_fast(xt, wt, bt, "fp32")), t_tf, fl)
        row(f"linear_fast fp64 fwd {size} vs torch float64", T(lambda: ops.linear_fast(xt, wt, bt, "fp64")), t_tf64,
            fl, peak=67e12)
        G = tl.tensor(np.ones((rows, fout), np.float32), device=dev)
        TG, TG64 = torch.ones(rows, fout, device="cuda"), torch.ones(rows, fout, device="cuda", dtype=torch.float64)
        xg, wg, bg = (tl.tensor(v, device=dev, requires_grad=True) for v in (x, w, b))
        txg, twg, tbg = (torch.tensor(v, device="cuda", requires_grad=True) for v in (x, w, b))
        txg64, twg64, tbg64 = (torch.tensor(v, device="cuda", dtype=torch.float64, requires_grad=True)
                               for v in (x, w, b))

        def ours_fb(fn):
            def f():
                fn(xg, wg, bg).backward(G)
                xg.grad = wg.grad = bg.grad = None
            return f

        def torch_fb(xx, ww, bb, gg):
            def f():
                torch.nn.functional.linear(xx, ww, bb).backward(gg)
                xx.grad = ww.grad = bb.grad = None
            return f

        t_tfb = T(torch_fb(txg, twg, tbg, TG))
        t_tfb64 = T(torch_fb(txg64, twg64, tbg64, TG64))
        row(f"linear fwd+bwd (normal) {size}", T(ours_fb(ops.linear)), t_tfb, 3 * fl)
        row(f"linear_fast fp32 fwd+bwd {size}", T(ours_fb(lambda *t: ops.linear_fast(*t, precision="fp32"))), t_tfb,
            3 * fl)
        row(f"linear_fast fp64 fwd+bwd {size} vs torch float64",
            T(ours_fb(lambda *t: ops.linear_fast(*t, precision="fp64"))), t_tfb64, 3 * fl, peak=67e12)
        xt = wt = bt = tx = tw = tb_ = tx64 = tw64 = tb64 = xg = wg = bg = None  # free GPU memory
        txg = twg = tbg = txg64 = twg64 = tbg64 = G = TG = TG64 = None

    n = 1 << 24
    at, tt_ = tl.tensor(xm, device=dev), tl.tensor(tm, device=dev)
    ta, ttt = torch.tensor(xm, device="cuda"), torch.tensor(tm, device="cuda")
    t_torch = T(lambda: torch.nn.functional.mse_loss(ta, ttt))
    row("mse_loss fwd (normal) n=2^24", T(lambda: ops.mse_loss(at, tt_)), t_torch, nbytes=8 * n)
    row("mse_loss_fast fwd n=2^24", T(lambda: ops.mse_loss_fast(at, tt_)), t_torch, nbytes=8 * n)
    row("mse_loss_fwd primitive n=2^24", T(lambda: P.mse_loss_fwd(at._buf, tt_._buf, n, 1)), t_torch, nbytes=8 * n)
    ag = tl.tensor(xm, device=dev, requires_grad=True)
    tag = torch.tensor(xm, device="cuda", requires_grad=True)

    def fb(fn):
        def f():
            fn(ag, tt_).backward()
            ag.grad = None
        return f

    def tfb():
        torch.nn.functional.mse_loss(tag, ttt).backward()
        tag.grad = None

    t_tfb = T(tfb)
    row("mse_loss fwd+bwd (normal) n=2^24", T(fb(ops.mse_loss)), t_tfb, nbytes=20 * n)
    row("mse_loss_fast fwd+bwd n=2^24", T(fb(ops.mse_loss_fast)), t_tfb, nbytes=20 * n)
    row("mse_loss_bwd primitive n=2^24", T(lambda: P.mse_loss_bwd(at._buf, tt_._buf, gb, n, 1)), None, nbytes=12 * n)
    at = tt_ = ta = ttt = ag = tag = None

    a = rng.standard_normal((2048, 2048))
    b = rng.standard_normal((2048, 2048))
    fl = 2 * 2048**3
    t_t64 = T(lambda: (torch.from_numpy(a).cuda() @ torch.from_numpy(b).cuda()).cpu().numpy())
    t_t32 = T(lambda: (torch.from_numpy(a).cuda().float() @ torch.from_numpy(b).cuda().float()).double().cpu().numpy())
    row("fast_matmul 2048^3 fp64 host round trip vs torch (upload, float64 matmul, download)",
        T(lambda: tl.fast_matmul(a, b, True, "fp64")), t_t64, fl, peak=67e12)
    row("fast_matmul 2048^3 fp32 host round trip vs torch (upload, float32 matmul, download)",
        T(lambda: tl.fast_matmul(a, b, True, "fp32")), t_t32, fl)
    row("fast_matmul 2048^3 fp64 on the CPU (NumPy float64) vs torch GPU round trip",
        _timeit(lambda: tl.fast_matmul(a, b, False, "fp64"), sync, 3), t_t64, fl, peak=67e12)

    say("\nAll checks PASS" if ok_all else "\nSOME CHECKS FAILED")
    if args.out:
        write_report(args.out, "fast_cuda", lines, record)
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
