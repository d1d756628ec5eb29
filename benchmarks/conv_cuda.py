"""The CUDA convolution kernels (im2col / col2im + cuBLAS, torchlean/kernels/cuda/conv.py) against
PyTorch (cuDNN) on one GPU, TF32 off on both sides. Needs a GPU, CuPy and torch with CUDA.

    python3 -m benchmarks.conv_cuda [--reps 20] [--check-only] [--no-check] [--cudnn-benchmark]
                                    [--only SUBSTR]

1. check: every code path (per-image and wide GEMMs, several chunks, the pointwise shortcut,
   segmented weight gradients, ranks 1-4, stride/padding, conv_transpose with output_padding and
   bias) against float64 torch on the GPU, as err / bound with the contract's sum-of-products
   bound gamma(terms) * sum|products| (must be <= 1; it is typically ~1e-3). Also two runs of
   each primitive compared bitwise.
2. timing: forward, bwd_input and bwd_weight against F.conv*d and aten.convolution_backward (the
   op autograd runs; output_mask picks the input or the weight gradient), per case: ours, torch,
   ratio (ours / torch, < 1 is faster) and achieved TFLOP/s (2 * batch * out_c * P * in_c * K per
   call, P = prod(out), K = prod(kernel)).
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import numpy as np

from torchlean.kernels.plans import conv_plan_of, conv_transpose_plan_of

CASES = [  # name, batch, in_c, out_c, spatial, kernel, stride, padding
    ("resnet 3x3 s1", 32, 64, 64, (56, 56), (3, 3), (1, 1), (1, 1)),
    ("1x1 s1", 32, 256, 64, (56, 56), (1, 1), (1, 1), (0, 0)),
    ("3x3 s2", 32, 64, 128, (56, 56), (3, 3), (2, 2), (1, 1)),
    ("3x3 7x7 512ch", 32, 512, 512, (7, 7), (3, 3), (1, 1), (1, 1)),
    ("conv1d k5", 32, 256, 256, (1024,), (5,), (1,), (2,)),
    ("conv3d 3x3x3", 8, 32, 32, (16, 32, 32), (3, 3, 3), (1, 1, 1), (1, 1, 1)),
]

U = 2.0 ** -24


def gamma(n: int) -> float:
    return n * U / (1 - n * U)


def out_dims(spatial, kernel, stride, padding):
    return tuple((s + 2 * p - k) // st + 1 for s, k, st, p in zip(spatial, kernel, stride, padding))


def _setup():
    import cupy
    import torch

    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    from torchlean.kernels.cuda import conv as C
    from torchlean.runtime.precision import set_allow_tf32

    set_allow_tf32(False)
    return cupy, torch, C


def _cp(cupy, t):
    """A flat CuPy view of a contiguous torch CUDA tensor (shared memory)."""
    return cupy.from_dlpack(t.detach().contiguous().reshape(-1))


def _torch_fns(torch, r):
    import torch.nn.functional as F
    return {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}.get(r), {1: F.conv_transpose1d, 2: F.conv_transpose2d,
                                                            3: F.conv_transpose3d}.get(r)


def _conv_nd_f64(torch, x, w, b, stride, padding):
    """Float64 reference for any rank: a loop over kernel offsets (ranks > 3 have no torch conv)."""
    r = x.dim() - 2
    fwd, _ = _torch_fns(torch, r)
    if fwd is not None:
        return fwd(x, w, b, stride=stride, padding=padding)
    spatial, kernel = x.shape[2:], w.shape[2:]
    out = out_dims(spatial, kernel, stride, padding)
    xp = torch.nn.functional.pad(x, [p for pp in reversed(padding) for p in (pp, pp)])
    y = torch.zeros((x.shape[0], w.shape[0]) + out, dtype=x.dtype, device=x.device)
    for k in np.ndindex(*kernel):
        sl = tuple(slice(ki, ki + (o - 1) * s + 1, s) for ki, s, o in zip(k, stride, out))
        y += torch.einsum("nc...,oc->no...", xp[(slice(None), slice(None)) + sl], w[(slice(None), slice(None)) + k])
    if b is not None:
        y += b.reshape((1, -1) + (1,) * r)
    return y


def _ratio(torch, ours, ref, absref, terms):
    err = (ours.double() - ref).abs()
    bound = gamma(terms) * absref + 1e-38
    return float((err / bound).max()) if err.numel() else 0.0


def check(cupy, torch, C, rng, dev: str = "cuda") -> bool:
    """Every path against float64 torch; returns True if all within the contract bound."""
    shapes = [
        (3, 5, 7, (13, 11), (3, 3), (1, 1), (1, 1)),
        (2, 4, 6, (17, 9), (3, 2), (2, 3), (2, 1)),
        (3, 6, 5, (12, 10), (1, 1), (1, 1), (0, 0)),
        (2, 6, 5, (12, 10), (1, 1), (2, 2), (0, 0)),
        (2, 3, 4, (40,), (5,), (1,), (2,)),
        (2, 3, 4, (41,), (4,), (3,), (3,)),
        (2, 3, 4, (6, 7, 5), (3, 2, 3), (1, 2, 1), (1, 1, 2)),
        (2, 2, 3, (5, 4, 4, 3), (2, 3, 1, 2), (1, 1, 2, 1), (1, 0, 0, 1)),
        (9, 5, 4, (33, 35), (3, 3), (1, 1), (1, 1)),   # P > 1024: per-image GEMMs by default
        (5, 40, 3, (32, 40), (1, 1), (1, 1), (0, 0)),  # pointwise, P > 1024
        (3, 4, 5, (9, 7), (2, 3), (1, 1), (2, 3)),     # stride 1, padding >= kernel: negative k-1-p
        (2, 5, 3, (7, 9, 5), (3, 3, 3), (1, 1, 1), (1, 1, 1)),  # rank 3, B*P % 4 != 0 (scalar stores)
        (64, 64, 8, (64, 64), (3, 3), (1, 1), (1, 1)),  # columns over the workspace cap: several chunks
    ]
    worst, ok = 0.0, True
    for batch, in_c, out_c, spatial, kernel, stride, padding in shapes:
        r = len(spatial)
        out = out_dims(spatial, kernel, stride, padding)
        K, P = math.prod(kernel), math.prod(out)
        f64 = dict(dtype=torch.float64, device=dev)
        x = torch.tensor(rng.normal(size=(batch, in_c) + spatial), **f64).float()
        w = torch.tensor(rng.normal(size=(out_c, in_c) + kernel), **f64).float()
        b = torch.tensor(rng.normal(size=out_c), **f64).float()
        dy = torch.tensor(rng.normal(size=(batch, out_c) + out), **f64).float()
        dims = (batch, in_c, out_c, spatial, kernel, stride, padding)
        plan = conv_plan_of(*dims)
        xd, wd, bd, dyd = x.double(), w.double(), b.double(), dy.double()
        xd_ = xd.clone().requires_grad_(True)
        wd_ = wd.clone().requires_grad_(True)
        yref = _conv_nd_f64(torch, xd_, wd_, bd, stride, padding)
        dxref, dwref = torch.autograd.grad(yref, (xd_, wd_), dyd)
        xa, wa = xd.abs().requires_grad_(True), wd.abs().requires_grad_(True)
        yabs = _conv_nd_f64(torch, xa, wa, bd.abs(), stride, padding)
        dxabs, dwabs = torch.autograd.grad(yabs, (xa, wa), dyd.abs())
        got = {}
        for _ in range(2):  # twice: the bits must repeat
            y = C.conv(_cp(cupy, x), _cp(cupy, w), _cp(cupy, b), plan)
            dx = C.conv_bwd_input(_cp(cupy, dy), _cp(cupy, w), plan)
            dw = C.conv_bwd_weight(_cp(cupy, x), _cp(cupy, dy), plan)
            for name, v in (("y", y), ("dx", dx), ("dw", dw)):
                got.setdefault(name, []).append(torch.from_dlpack(v).clone())
        res = {
            "conv": _ratio(torch, got["y"][0], yref.detach().reshape(-1), yabs.detach().reshape(-1), in_c * K + 1),
            "bwd_input": _ratio(torch, got["dx"][0], dxref.reshape(-1), dxabs.reshape(-1), out_c * K),
            "bwd_weight": _ratio(torch, got["dw"][0], dwref.reshape(-1), dwabs.reshape(-1), batch * P),
        }
        same = all(torch.equal(a, c) for a, c in got.values())
        # transposed conv: x_t (batch, in_c, *spatial), w_t (in_c, out_c, *kernel)
        _, tr = _torch_fns(torch, r)
        if tr is not None:
            op = tuple(int(rng.integers(0, s)) for s in stride)
            wt = torch.tensor(rng.normal(size=(in_c, out_c) + kernel), **f64).float()
            yt = C.conv_transpose(_cp(cupy, x), _cp(cupy, wt), _cp(cupy, b), conv_transpose_plan_of(*dims, op))
            ref = tr(xd, wt.double(), bd, stride=stride, padding=padding, output_padding=op)
            absr = tr(xd.abs(), wt.double().abs(), bd.abs(), stride=stride, padding=padding, output_padding=op)
            res["conv_transpose"] = _ratio(torch, torch.from_dlpack(yt), ref.reshape(-1), absr.reshape(-1), in_c * K + 1)
        bad = [k for k, v in res.items() if not v <= 1.0] + ([] if same else ["not bitwise repeatable"])
        worst = max([worst] + list(res.values()))
        if bad:
            ok = False
            print(f"FAIL shape={dims}: {bad} {res}")
    print(f"check: {'all within the contract bound' if ok else 'FAILURES above'}; worst err/bound = {worst:.3g} "
          f"({len(shapes)} shapes, 4 primitives, bitwise repeat checked)")
    return ok


def _time(fn, sync, reps: int, rounds: int = 5) -> float:
    for _ in range(3):
        fn()
    sync()
    samples = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        sync()
        samples.append((time.perf_counter() - t0) / reps)
    return statistics.median(samples)


def _case_inputs(cupy, torch, case, rng):
    _, batch, in_c, out_c, spatial, kernel, stride, padding = case
    out = out_dims(spatial, kernel, stride, padding)
    dev = dict(device="cuda", dtype=torch.float32)
    x = torch.randn((batch, in_c) + spatial, **dev)
    w = torch.randn((out_c, in_c) + kernel, **dev) / math.sqrt(in_c * math.prod(kernel))
    dy = torch.randn((batch, out_c) + out, **dev)
    return x, w, dy, out


def timing(cupy, torch, C, reps: int, only: str | None, rng) -> None:
    tl_sync, t_sync = cupy.cuda.Device().synchronize, torch.cuda.synchronize
    print(f"\n{'case':<16}{'piece':<12}{'ours ms':>10}{'torch ms':>10}{'ratio':>8}{'ours TF/s':>11}{'torch TF/s':>11}")
    for case in CASES:
        name, batch, in_c, out_c, spatial, kernel, stride, padding = case
        if only and only not in name:
            continue
        x, w, dy, out = _case_inputs(cupy, torch, case, rng)
        r = len(spatial)
        flops = 2 * batch * out_c * math.prod(out) * in_c * math.prod(kernel)
        dims = (batch, in_c, out_c, spatial, kernel, stride, padding)
        plan = conv_plan_of(*dims)
        xc, wc, dyc = _cp(cupy, x), _cp(cupy, w), _cp(cupy, dy)
        fwd, _ = _torch_fns(torch, r)
        cb = torch.ops.aten.convolution_backward
        common = (list(stride), list(padding), [1] * r, False, [0] * r, 1)
        pieces = [
            ("forward", lambda: C.conv(xc, wc, None, plan), lambda: fwd(x, w, None, stride, padding)),
            ("bwd_input", lambda: C.conv_bwd_input(dyc, wc, plan),
             lambda: cb(dy, x, w, None, *common, [True, False, False])),
            ("bwd_weight", lambda: C.conv_bwd_weight(xc, dyc, plan),
             lambda: cb(dy, x, w, None, *common, [False, True, False])),
            ("fwd+bwd", lambda: (C.conv(xc, wc, None, plan), C.conv_bwd_input(dyc, wc, plan),
                                 C.conv_bwd_weight(xc, dyc, plan)),
             lambda: (fwd(x, w, None, stride, padding), cb(dy, x, w, None, *common, [True, True, False]))),
        ]
        for piece, ours, theirs in pieces:
            t_ours = _time(ours, tl_sync, reps)
            t_torch = _time(theirs, t_sync, reps)
            f = flops * (3 if piece == "fwd+bwd" else 1)
            print(f"{name:<16}{piece:<12}{t_ours * 1e3:>10.3f}{t_torch * 1e3:>10.3f}{t_ours / t_torch:>8.2f}"
                  f"{f / t_ours / 1e12:>11.1f}{f / t_torch / 1e12:>11.1f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--check-only", action="store_true")
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--cudnn-benchmark", action="store_true", help="let cuDNN time its algorithms")
    ap.add_argument("--only", default=None)
    a = ap.parse_args()
    cupy, torch, C = _setup()
    torch.backends.cudnn.benchmark = a.cudnn_benchmark
    print(f"GPU: {torch.cuda.get_device_name()}; torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, "
          f"CuPy {cupy.__version__}; TF32 off; cudnn.benchmark={a.cudnn_benchmark}")
    rng = np.random.default_rng(0)
    ok = True
    if not a.no_check:
        ok = check(cupy, torch, C, rng)
    if not a.check_only:
        timing(cupy, torch, C, a.reps, a.only, rng)
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
