"""Flash attention on the GPU: correctness, TFLOP/s against torch SDPA, and the memory case.

    PYTHONPATH=. python3 benchmarks/attention_cuda.py [--out DIR] [--reps 20] [--quick]

(1) correctness at benchmark sizes on a few batches: our CUDA primitives against the float64 spec
    evaluated on the GPU with CuPy (the spec's own functions, ``xp=cupy``), judged by the contract
    bound (also computed on the GPU); PASS/FAIL with max error / bound per mask mode and causal,
    forward (out, lse) and backward (dq, dk, dv).
(2) time (median of --reps runs after warm-up, CUDA events) and TFLOP/s: forward 4 n_q n_k d per
    head (halved for causal), backward 2.5x the forward (the FlashAttention convention), for the
    primitives, the front end (F.scaled_dot_product_attention, fwd and fwd+bwd) and torch SDPA in
    float32 with TF32 off (the torch backend that ran is reported), at (batch*heads, n, d) =
    (128, 4096, 64) and (32, 8192, 128), plain and causal.
(3) memory: n = 16384, d = 64, batch*heads = 16, forward + backward: the CuPy pool's high-water
    bytes (pool emptied first) against the bytes of q, k, v, out, lse, dout, dq, dk, dv (<= 1.10).
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np

SIZES = [(128, 4096, 64), (32, 8192, 128)]
PEAK_TFLOPS = 60.0  # H200 FP32 SIMT (approx.)


def _median_ms(fn, reps):
    import cupy

    fn()
    cupy.cuda.Device().synchronize()
    times = []
    for _ in range(reps):
        a, b = cupy.cuda.Event(), cupy.cuda.Event()
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(cupy.cuda.get_elapsed_time(a, b))
    return statistics.median(times)


def _inputs(batch, n, d, seed=0):
    import cupy

    rng = cupy.random.default_rng(seed)
    return [rng.standard_normal(batch * n * d, dtype=cupy.float32) for _ in range(4)]


def check(lines, quick):
    import cupy

    from torchlean.kernels.cuda import attention as A
    from torchlean.contract import attention as C
    from torchlean.spec import attention as S

    ok_all = True
    for (bh, n, d) in SIZES[:1] if quick else SIZES:
        nb = 2 if n <= 4096 else 1
        n_c = n if n <= 4096 else 2048  # the float64 n x n reference of one batch at 8192 is 0.5 GB per matrix
        q, k, v, g = _inputs(nb, n_c, d, seed=n + d)
        for mode, causal in (("none", False), ("none", True), ("hard", False), ("add", False), ("fill", False)):
            mask, layout = None, None
            if mode != "none":
                rng = cupy.random.default_rng(3)
                allow = rng.random(n_c * n_c) < 0.8
                mask = (allow.astype(cupy.float32) if mode != "add"
                        else cupy.where(allow, rng.standard_normal(n_c * n_c, dtype=cupy.float32), -cupy.inf)
                        .astype(cupy.float32))
                layout = (nb, 0, 0, n_c, 1)  # one (L, S) mask for every head
            scale = float(np.float32(1.0 / np.sqrt(d)))
            args = (q, k, v, mask, nb, n_c, n_c, d, scale, causal, mode, layout)
            out, lse = A.flash_attention_fwd(*args)
            s, allowed, _ = S.scores(q, k, v, mask, nb, n_c, n_c, d, scale, causal, mode, layout, cupy)
            lse_ref = S._lse_shifted(cupy.where(allowed, s, -cupy.inf), cupy)
            p = S.probabilities(s, allowed, lse_ref, cupy)
            out_ref = cupy.matmul(p, v.astype(cupy.float64).reshape(nb, n_c, d)).reshape(-1)
            del s, allowed, p
            ob, lb = C.fwd_bound((out_ref, lse_ref.reshape(-1)), *args, xp=cupy)
            res = []
            for name, o, r, bnd in (("out", out, out_ref, ob), ("lse", lse, lse_ref.reshape(-1), lb)):
                err = cupy.abs(o.astype(cupy.float64) - r)
                fin = cupy.isfinite(r)
                ratio = float(cupy.max(cupy.where(fin, err / cupy.maximum(bnd, 1e-300), 0.0)))
                same_inf = bool(cupy.all(fin | (o.astype(cupy.float64) == r)))
                res.append((name, ratio <= 1.0 and same_inf, ratio))
            bargs = (q, k, v, mask, out, lse, g, nb, n_c, n_c, d, scale, causal, mode, layout)
            dq = A.flash_attention_bwd_q(*bargs)
            dk, dv = A.flash_attention_bwd_kv(*bargs)
            rq, rk, rv = S._grads(*bargs, xp=cupy)
            for name, o, r, fn in (("dq", dq, rq, C.bwd_q_bound), ("dk", dk, rk, C.bwd_k_bound),
                                   ("dv", dv, rv, C.bwd_v_bound)):
                bnd = fn(r.reshape(-1), *bargs, xp=cupy)
                err = cupy.abs(o.astype(cupy.float64) - r.reshape(-1))
                ratio = float(cupy.max(err / cupy.maximum(bnd, 1e-300)))
                res.append((name, ratio <= 1.0, ratio))
            ok = all(r[1] for r in res)
            ok_all &= ok
            lines.append(f"{'PASS' if ok else 'FAIL'} check batch={nb} n={n_c} d={d} mode={mode} causal={causal}: "
                         + ", ".join(f"{nm} err/bound {ra:.3g}" for nm, _, ra in res))
            print(lines[-1], flush=True)
            cupy.get_default_memory_pool().free_all_blocks()
    return ok_all


def _torch_backend(torch, F, q, k, v, causal):
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        return "unknown"
    for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("efficient (cutlass)", SDPBackend.EFFICIENT_ATTENTION),
                     ("cudnn", SDPBackend.CUDNN_ATTENTION), ("math", SDPBackend.MATH)):
        try:
            with sdpa_kernel(be):
                F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            return name
        except RuntimeError:
            continue
    return "unknown"


def bench(lines, reps, quick):
    import cupy
    import torch
    import torch.nn.functional as F

    import torchlean as tl
    import torchlean.nn.functional as TF
    from torchlean.kernels.cuda import attention as A

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    lines.append("| case | what | ms | TFLOP/s | ours/torch |")
    lines.append("| --- | --- | ---: | ---: | ---: |")
    rows = []
    for (bh, n, d) in SIZES[:1] if quick else SIZES:
        for causal in (False, True):
            q, k, v, g = _inputs(bh, n, d)
            scale = float(np.float32(1.0 / np.sqrt(d)))
            fl = 4.0 * bh * n * n * d * (0.5 if causal else 1.0)
            args = (q, k, v, None, bh, n, n, d, scale, causal, "none", None)
            st = {}
            st["prim fwd"] = _median_ms(lambda: A.flash_attention_fwd(*args), reps)
            out, lse = A.flash_attention_fwd(*args)
            bargs = (q, k, v, None, out, lse, g, bh, n, n, d, scale, causal, "none", None)
            st["prim bwd (q + kv)"] = _median_ms(lambda: (A.flash_attention_bwd_q(*bargs),
                                                          A.flash_attention_bwd_kv(*bargs)), reps)
            tq, tk, tv = (tl.tensor(torch.as_tensor(a, device="cuda").reshape(1, bh, n, d).cpu().numpy(), device="cuda",
                                    requires_grad=True) for a in (q, k, v))
            tg = tl.tensor(torch.as_tensor(g, device="cuda").reshape(1, bh, n, d).cpu().numpy(), device="cuda")

            def ours_fwd():
                with tl.no_grad():
                    TF.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)

            def ours_fb():
                TF.scaled_dot_product_attention(tq, tk, tv, is_causal=causal).backward(tg)
                tq.grad = tk.grad = tv.grad = None

            st["F.sdpa fwd"] = _median_ms(ours_fwd, reps)
            st["F.sdpa fwd+bwd"] = _median_ms(ours_fb, reps)
            Q, K, V, G = (torch.as_tensor(a, device="cuda").reshape(1, bh, n, d).clone() for a in (q, k, v, g))
            for t in (Q, K, V):
                t.requires_grad_(True)
            backend = _torch_backend(torch, F, Q.detach(), K.detach(), V.detach(), causal)

            def torch_fwd():
                with torch.no_grad():
                    F.scaled_dot_product_attention(Q, K, V, is_causal=causal)

            def torch_fb():
                F.scaled_dot_product_attention(Q, K, V, is_causal=causal).backward(G)
                Q.grad = K.grad = V.grad = None

            st["torch fwd"] = _median_ms(torch_fwd, reps)
            st["torch fwd+bwd"] = _median_ms(torch_fb, reps)
            case = f"({bh}, {n}, {d}){' causal' if causal else ''}"
            for what, ms in st.items():
                flops = fl * (1.0 if "fwd" in what and "bwd" not in what else 2.5 if what.startswith("prim bwd")
                              else 3.5)
                ref = st["torch fwd"] if ("fwd" in what and "bwd" not in what) else st["torch fwd+bwd"]
                if what.startswith("prim bwd"):
                    ref = st["torch fwd+bwd"] - st["torch fwd"]
                lines.append(f"| {case} | {what} | {ms:.2f} | {flops / ms / 1e9:.1f} | "
                             f"{'' if what.startswith('torch') else f'{ms / ref:.2f}'} |")
                rows.append(dict(case=case, what=what, ms=ms, tflops=flops / ms / 1e9))
                print(lines[-1], flush=True)
            lines.append(f"| {case} | torch backend | {backend} | | |")
            del tq, tk, tv, Q, K, V
            cupy.get_default_memory_pool().free_all_blocks()
    lines.append(f"(forward 4 n^2 d per head, halved when causal; backward 2.5x the forward; fwd+bwd 3.5x; "
                 f"FP32 SIMT peak ~{PEAK_TFLOPS:.0f} TFLOP/s)")
    return rows


def memory(lines):
    import cupy

    from torchlean.kernels.cuda import attention as A

    bh, n, d = 16, 16384, 64
    pool = cupy.get_default_memory_pool()
    pool.free_all_blocks()
    q, k, v, g = _inputs(bh, n, d)
    out, lse = A.flash_attention_fwd(q, k, v, None, bh, n, n, d, 0.125, False, "none", None)
    bargs = (q, k, v, None, out, lse, g, bh, n, n, d, 0.125, False, "none", None)
    dq = A.flash_attention_bwd_q(*bargs)
    dk, dv = A.flash_attention_bwd_kv(*bargs)
    cupy.cuda.Device().synchronize()
    peak = pool.total_bytes()
    need = sum(a.nbytes for a in (q, k, v, out, lse, g, dq, dk, dv))
    ratio = peak / need
    lines.append(f"{'PASS' if ratio <= 1.10 else 'FAIL'} memory (16, 16384, 64) fwd+bwd: pool high-water "
                 f"{peak / 2**20:.1f} MiB vs tensors {need / 2**20:.1f} MiB: ratio {ratio:.3f} (<= 1.10)")
    print(lines[-1], flush=True)
    return ratio


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None, help="folder for attention_cuda.md / .json")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--quick", action="store_true", help="only the first size")
    ap.add_argument("--skip-check", action="store_true")
    args = ap.parse_args()
    lines: list[str] = []
    ok = True if args.skip_check else check(lines, args.quick)
    ratio = memory(lines)
    rows = bench(lines, args.reps, args.quick)
    if args.out:
        from benchmarks.harness import write_report

        write_report(args.out, "attention_cuda", lines, dict(check_ok=ok, memory_ratio=ratio, rows=rows))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
