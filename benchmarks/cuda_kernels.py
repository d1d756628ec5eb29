"""Our CUDA kernels against torch's at the scale cases' shapes, kernel by kernel (CUDA events, one process).

    PYTHONPATH=. python3 -m benchmarks.cuda_kernels [--only gemm memory attention] [--reps 20]

* gemm: the products of one step of the mlp, gpt2 and gpt_mini cases (``benchmarks.scale``):
  ``kernels.cuda.linalg.bmm``/``bmm_nt``/``bmm_tn`` (batch 1) against ``torch.mm``, TF32 off.
* memory: memory-bound kernels at gpt_mini's and GPT-2's activation sizes (copy, add, the head
  permute, the qkv narrow and its backward, bias rows, gelu, layer norm), with GB/s (bytes moved /
  time) against torch's equivalent op.
* attention: ``flash_attention_fwd`` and ``_bwd`` against ``F.scaled_dot_product_attention``
  (fp32: torch's mem-efficient kernel) at GPT, ViT and BERT shapes, with TFLOP/s (forward 4 n^2 d per
  head, halved for causal; backward 2.5x).
Each row: median of --reps timed calls after three warm-ups; ours/torch below 1: ours is faster.
"""

from __future__ import annotations

import argparse
import math
import statistics


def _timer(reps):
    import cupy
    import torch

    def cupy_ms(fn):
        for _ in range(3):
            fn()
        ts = []
        for _ in range(reps):
            s, e = cupy.cuda.Event(), cupy.cuda.Event()
            s.record()
            fn()
            e.record()
            e.synchronize()
            ts.append(cupy.cuda.get_elapsed_time(s, e))
        return statistics.median(ts)

    def torch_ms(fn):
        for _ in range(3):
            fn()
        ts = []
        for _ in range(reps):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            ts.append(s.elapsed_time(e))
        return statistics.median(ts)

    return cupy_ms, torch_ms


# name, form, m, n, p: row-major C (m, p) = op(A) op(B) with inner length n; form nn, nt (B stored
# (p, n)) or tn (A stored (n, m))
GEMMS = [
    ("mlp x W^T", "nt", 512, 4096, 4096), ("mlp dX = g W", "nn", 512, 4096, 4096),
    ("mlp dW = g^T x", "tn", 4096, 512, 4096), ("gpt2 qkv x W^T", "nt", 8192, 768, 2304),
    ("gpt2 fc x W^T", "nt", 8192, 768, 3072), ("gpt2 proj2 x W^T", "nt", 8192, 3072, 768),
    ("gpt2 head x W^T", "nt", 8192, 768, 50304), ("gpt2 head dX", "nn", 8192, 50304, 768),
    ("gpt2 head dW", "tn", 50304, 8192, 768), ("gpt2 fc dW", "tn", 3072, 8192, 768),
    ("gpt2 fc dX", "nn", 8192, 3072, 768), ("gpt_mini qkv x W^T", "nt", 8192, 384, 1152),
    ("gpt_mini fc x W^T", "nt", 8192, 384, 1536), ("gpt_mini fc dW", "tn", 1536, 8192, 384),
    ("gpt_mini proj2 dX", "nn", 8192, 384, 1536),
]

ATTENTION = [(32, 6, 256, 64, True), (32, 6, 256, 64, False), (8, 12, 1024, 64, True), (8, 12, 1024, 64, False),
             (64, 12, 197, 64, False), (128, 12, 128, 64, False), (4, 16, 2048, 128, True),
             (4, 16, 2048, 128, False), (16, 8, 512, 32, True)]


def gemm(reps):
    import cupy
    import torch

    from torchlean.kernels.cuda import linalg

    cupy_ms, torch_ms = _timer(reps)
    print("| product | form | m x n x p | ours ms | torch ms | ours/torch | TFLOP/s ours / torch |")
    print("|---|---|---|---:|---:|---:|---|")
    for name, form, m, n, p in GEMMS:
        a = cupy.random.standard_normal(m * n, dtype=cupy.float32)
        b = cupy.random.standard_normal(n * p, dtype=cupy.float32)
        fn = {"nn": linalg.bmm, "nt": linalg.bmm_nt, "tn": linalg.bmm_tn}[form]
        ours = cupy_ms(lambda: fn(a, b, 1, m, n, p))
        ta, tb = torch.as_tensor(a, device="cuda"), torch.as_tensor(b, device="cuda")
        A = ta.view(n, m).t() if form == "tn" else ta.view(m, n)
        B = tb.view(p, n).t() if form == "nt" else tb.view(n, p)
        theirs = torch_ms(lambda: torch.mm(A, B))
        fl = 2.0 * m * n * p / 1e9
        print(f"| {name} | {form} | {m}x{n}x{p} | {ours:.3f} | {theirs:.3f} | {ours / theirs:.2f} | "
              f"{fl / ours:.1f} / {fl / theirs:.1f} |", flush=True)


def memory(reps):
    import cupy
    import torch
    import torch.nn.functional as F

    from torchlean.kernels.cuda import classify, elementwise, fast, layout, norm

    cupy_ms, torch_ms = _timer(reps)
    r = lambda n: cupy.random.standard_normal(n, dtype=cupy.float32)  # noqa: E731
    tr = lambda n: torch.randn(n, device="cuda")  # noqa: E731
    print("| kernel | elements | ours us | torch us | ours/torch | GB/s ours / torch |")
    print("|---|---|---:|---:|---:|---|")

    def row(name, n, nbytes, ours, theirs):
        print(f"| {name} | {n} | {1e3 * ours:.1f} | {1e3 * theirs:.1f} | {ours / theirs:.2f} | "
              f"{nbytes / ours / 1e6:.0f} / {nbytes / theirs / 1e6:.0f} |", flush=True)

    for (B, T, H, D) in [(32, 256, 6, 64), (8, 1024, 12, 64)]:
        n, rows, cols = B * T * H * D, B * T, H * D
        a, b, ta, tb = r(n), r(n), tr(n), tr(n)
        row("copy", n, 8 * n, cupy_ms(lambda: elementwise.copy(a)), torch_ms(lambda: ta.clone()))
        row("add", n, 12 * n, cupy_ms(lambda: elementwise.add(a, b)), torch_ms(lambda: ta + tb))
        row(f"head permute ({B},{T},{H},{D})", n, 8 * n,
            cupy_ms(lambda: layout.swap_adjacent_at_depth(a, (B, T, H, D), 1)),
            torch_ms(lambda: ta.view(B, T, H, D).transpose(1, 2).contiguous()))
        q, tq = r(3 * n), tr(3 * n)
        row("qkv narrow", n, 8 * n, cupy_ms(lambda: layout.narrow_block(q, rows, 3, 1, 1, cols)),
            torch_ms(lambda: tq.view(rows, 3, cols)[:, 1].contiguous()))
        row("qkv narrow bwd", n, 16 * n, cupy_ms(lambda: layout.narrow_block_bwd(a, rows, 3, 1, 1, cols)),
            torch_ms(lambda: F.pad(ta.view(rows, 1, cols), (0, 0, 1, 1))))
        m4 = 4 * n
        x4, g4, tx4, tg4 = r(m4), r(m4), tr(m4), tr(m4)
        bias, tbias = r(4 * cols), tr(4 * cols)
        ty = tr(m4).view(rows, 4 * cols)

        def bias_rows():
            fast.kernel(fast._FILE, "tl_fast_gemm_add_bias_rows")(
                (fast.grid_for(m4),), (fast.BLOCK,), (x4, bias, fast.I64(rows), fast.I64(4 * cols)))

        row("bias rows (fast_gemm's epilogue)", m4, 8 * m4, cupy_ms(bias_rows), torch_ms(lambda: ty.add_(tbias)))
        row("gelu", m4, 8 * m4, cupy_ms(lambda: classify.gelu(x4)), torch_ms(lambda: F.gelu(tx4)))
        row("gelu_bwd", m4, 12 * m4, cupy_ms(lambda: classify.gelu_bwd(x4, g4)),
            torch_ms(lambda: torch.ops.aten.gelu_backward(tg4, tx4)))
        gam, bet, tgam, tbet = r(cols), r(cols), tr(cols), tr(cols)
        tx = ta.view(rows, cols)
        row("layer_norm", n, 8 * n, cupy_ms(lambda: norm.layer_norm(a, gam, bet, rows, cols, 1e-5)),
            torch_ms(lambda: F.layer_norm(tx, (cols,), tgam, tbet)))
        _, mean, var = norm.layer_norm(a, gam, bet, rows, cols, 1e-5)
        txg, tgg, tbb = (t.clone().requires_grad_() for t in (tx, tgam, tbet))
        ty2 = F.layer_norm(txg, (cols,), tgg, tbb)
        tdy = torch.randn_like(ty2)
        row("layer_norm_bwd", n, 12 * n, cupy_ms(lambda: norm.layer_norm_bwd(a, gam, mean, var, b, rows, cols, 1e-5)),
            torch_ms(lambda: torch.autograd.grad(ty2, (txg, tgg, tbb), tdy, retain_graph=True)))


def attention(reps):
    import cupy
    import torch
    import torch.nn.functional as F

    from torchlean.kernels.cuda import attention as A

    cupy_ms, torch_ms = _timer(reps)
    print("| (B, H, N, D) | causal | fwd ours / torch ms | ratio | fwd+bwd ours / torch ms | ratio | "
          "ours TFLOP/s fwd / fwd+bwd | max err / max ref (out, dq, dk, dv) vs float64 |")
    print("|---|---|---|---:|---|---:|---|---|")
    for (B, H, N, D, causal) in ATTENTION:
        bh, sc = B * H, 1 / math.sqrt(D)
        q, k, v, g = (cupy.random.standard_normal(bh * N * D, dtype=cupy.float32) for _ in range(4))
        o, lse = A.flash_attention_fwd(q, k, v, None, bh, N, N, D, sc, causal, "none", None)
        tf = cupy_ms(lambda: A.flash_attention_fwd(q, k, v, None, bh, N, N, D, sc, causal, "none", None))
        tb = cupy_ms(lambda: A.flash_attention_bwd(q, k, v, None, o, lse, g, bh, N, N, D, sc, causal, "none", None))
        tq, tk, tv = (torch.randn(B, H, N, D, device="cuda", requires_grad=True) for _ in range(3))
        tg = torch.randn(B, H, N, D, device="cuda")
        with torch.no_grad():
            xf = torch_ms(lambda: F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal))

        def fwd_bwd():
            out = F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
            torch.autograd.grad(out, (tq, tk, tv), tg)

        xfb = torch_ms(fwd_bwd)
        fl = 4.0 * bh * N * N * D / (2 if causal else 1) / 1e9
        errs = _attention_errors(q, k, v, g, o, A.flash_attention_bwd(q, k, v, None, o, lse, g, bh, N, N, D, sc, causal,
                                                                      "none", None), bh, N, D, causal)
        print(f"| ({B}, {H}, {N}, {D}) | {causal} | {tf:.3f} / {xf:.3f} | {tf / xf:.2f} | {tf + tb:.3f} / {xfb:.3f} | "
              f"{(tf + tb) / xfb:.2f} | {fl / tf:.1f} / {3.5 * fl / (tf + tb):.1f} | {errs} |", flush=True)


def _attention_errors(q, k, v, g, o, grads, bh, n, d, causal):
    """max |ours - float64| / max |float64| of out, dq, dk, dv (torch's float64 SDPA as the reference)."""
    import torch
    import torch.nn.functional as F

    t = [torch.as_tensor(x, device="cuda").reshape(bh, n, d).double() for x in (q, k, v, g)]
    tq, tk, tv = (x.requires_grad_() for x in t[:3])
    ref = F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
    refs = [ref.detach()] + list(torch.autograd.grad(ref, (tq, tk, tv), t[3]))
    ours = [o] + list(grads)
    out = []
    for a, r in zip(ours, refs):
        a64 = torch.as_tensor(a, device="cuda").reshape(bh, n, d).double()
        out.append(f"{float((a64 - r).abs().max() / r.abs().max()):.1e}")
    del t, tq, tk, tv, ref, refs
    torch.cuda.empty_cache()
    return ", ".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m benchmarks.cuda_kernels", description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="*", choices=("gemm", "memory", "attention"), help="sections (default: all)")
    ap.add_argument("--reps", type=int, default=20, help="timed calls per kernel (default 20)")
    ap.add_argument("--tf32", action="store_true", help="allow TF32 on both sides (default: off on both)")
    args = ap.parse_args(argv)
    if args.reps < 1:
        ap.error("--reps must be at least 1")
    import torch

    from torchlean.runtime import set_allow_tf32

    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.allow_tf32 = args.tf32
    set_allow_tf32(args.tf32)
    print(f"TF32: {'on' if args.tf32 else 'off'} (both)")
    for name in args.only or ("gemm", "memory", "attention"):
        print(f"\n### {name}\n")
        {"gemm": gemm, "memory": memory, "attention": attention}[name](args.reps)


if __name__ == "__main__":
    main()
