"""Training steps at realistic sizes against a PyTorch twin (same weights, same batches).

    python3 -m benchmarks.scale [--device cpu|cuda] [--size small|full] [--only NAME ...] [--steps N]
                                [--warmup W] [--markdown FILE] [--json FILE] [--breakdown] [--tf32]

Cases (``benchmarks/scale_models.py``; ``--size full`` is the realistic size, ``small`` a scale-down
for a 2-core CPU, default ``small`` on cpu and ``full`` on cuda): gpt2, gpt_mini, resnet18, dcgan,
mlp, fno1d, fno2d, mamba, lstm.

Method:

* Each model is written ONCE (``scale_models``), as code taking the framework's modules (``torch``,
  ``nn``, ``F``, ``optim``): the same source builds our model (``import torchlean as torch`` ...) and
  the PyTorch twin. Every parameter is drawn from NumPy by (seed, qualified name) and copied in under
  ``no_grad`` on both sides; the batches are NumPy arrays drawn from a seeded generator, the same in
  both. Two pieces differ by side (torchlean has no ``torch.fft`` yet, and a Python selective scan is
  what torch eager runs without mamba_ssm's CUDA extension): the FNO spectral layer (ours
  ``nn.SpectralConv1d``, torch the reference rfft-einsum-irfft) and Mamba's selective scan (ours
  ``ops.selective_scan``, torch ``selective_scan_ref``, a Python loop over time). fno2d is the
  reference ``fourier_2d.py`` model on both sides: ours ``torchlean.nn.FNO2d``, torch's the reference
  code (rfft2, complex einsum on both kept corners, irfft2; ``scale_models.reference_fno2d``), the
  same parameter names, so the same state dict; LpLoss of the decoded prediction, Adam.
* Each framework runs in its own subprocess: build, W warm-up steps, N timed steps. One timed step:
  upload the batch (``from_numpy(arr).to(device)``), forward, loss, ``zero_grad``, ``backward``,
  optimizer step(s) (DCGAN: the discriminator step on real and fake, then the generator step), and on
  CUDA a device synchronize before the clock stops; the loss is read after. Median and min reported.
* Peak memory as ``benchmarks.train_step``: CUDA, our allocator's ``peak_bytes`` vs
  ``torch.cuda.max_memory_allocated()``, both reset after warm-up; CPU, the worker's peak anonymous
  memory growth during the timed steps (VmHWM reset after warm-up, minus file-backed pages) over its
  memory before the model was built (our allocator's peak in parentheses).
* torch gets ``set_num_threads`` = NumPy's BLAS thread count; TF32 off on both unless ``--tf32``.
* Fraction of the hardware limit: once per run, a separate process times ``torch.matmul`` of two
  4096x4096 float32 matrices on the device (synchronized; CPU at the torch thread count; TF32 as
  ``--tf32``; best of 3, 5 on CUDA, after a warm-up): the achieved GEMM rate, the "GEMM peak". Each row's
  "% of GEMM peak" = the step's FLOPs (``scale_models.step_flops``, analytic from the config: GEMMs,
  convs, attention, FFTs; element-wise work not counted) / median step time / GEMM peak, for both sides.
* ``--breakdown``: after the timed steps, our worker runs ``min(N, 3)`` more steps with every
  function of ``torchlean.runtime.primitives*`` wrapped (outermost calls only, a device synchronize
  before and after each on CUDA, so the times are real) and reports the slowest primitives; "(outside
  primitives)" is the rest of the step (Python, tape, autograd bookkeeping, launches not in a primitive).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import types
from typing import Any

from . import harness as H
from . import scale_models as SM
from .train_step import _maxrss_bytes, _proc_status, meta_info, timed_steps

MiB = 1024.0 * 1024.0
BUSY = H.BUSY_CORES


# -- op-by-op breakdown of our step ---------------------------------------------------------------

class PrimitiveTimer:
    """Wraps every public function of torchlean.runtime.primitives* wherever a torchlean module holds
    it; times outermost calls only (a primitive calling another is charged to the outer one)."""

    def __init__(self, sync) -> None:
        self.sync = sync
        self.totals: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self.depth = 0
        self.patched: list[tuple[Any, str, Any]] = []

    def _wrap(self, fn, label: str):
        timer = self

        def wrapper(*args, **kwargs):
            if timer.depth:
                return fn(*args, **kwargs)
            timer.sync()
            timer.depth = 1
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                timer.sync()
                dt = time.perf_counter() - t0
                timer.depth = 0
                timer.totals[label] = timer.totals.get(label, 0.0) + dt
                timer.calls[label] = timer.calls.get(label, 0) + 1
        wrapper.__wrapped__ = fn
        return wrapper

    def install(self) -> None:
        wrappers: dict[int, Any] = {}
        for modname, mod in list(sys.modules.items()):
            if not modname.startswith("torchlean") or mod is None:
                continue
            for attr, obj in list(vars(mod).items()):
                if (not isinstance(obj, types.FunctionType) or attr.startswith("_")
                        or not (obj.__module__ or "").startswith("torchlean.runtime.primitives")):
                    continue
                w = wrappers.get(id(obj))
                if w is None:
                    sub = obj.__module__[len("torchlean.runtime.primitives"):].lstrip("_")
                    w = wrappers[id(obj)] = self._wrap(obj, f"{sub}.{obj.__name__}" if sub else obj.__name__)
                self.patched.append((mod, attr, obj))
                setattr(mod, attr, w)

    def uninstall(self) -> None:
        for mod, attr, obj in reversed(self.patched):
            setattr(mod, attr, obj)
        self.patched.clear()


# -- the hardware limit: achieved float32 GEMM rate ------------------------------------------------

GEMM_N = 4096


def gemm_worker(args: argparse.Namespace) -> int:
    """torch.matmul of two GEMM_N^2 float32 matrices on the device (TF32 as --tf32; on CPU at the torch
    workers' thread count), synchronized; best of a few. Writes {"gemm_flops_per_s", "gemm_s", ...}."""
    import torch

    cuda = args.device.startswith("cuda")
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = bool(args.tf32)
        sync = torch.cuda.synchronize
    else:
        torch.set_num_threads(H.blas_threads()[0])

        def sync() -> None:
            return None
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(GEMM_N, GEMM_N, generator=g).to(args.device) for _ in range(2))
    times = []
    for _ in range(6 if cuda else 4):                      # the first is a warm-up
        sync()
        t0 = time.perf_counter()
        torch.matmul(a, b)
        sync()
        times.append(time.perf_counter() - t0)
    best = min(times[1:])
    out = {"gemm_n": GEMM_N, "gemm_s": best, "gemm_flops_per_s": 2.0 * GEMM_N ** 3 / best, "reps": len(times) - 1,
           "threads": torch.get_num_threads(), "tf32": bool(args.tf32) and cuda}
    with open(args.result, "w") as f:
        json.dump(out, f)
    return 0


# -- worker: one framework, one case, its own process ---------------------------------------------

def worker(args: argparse.Namespace) -> int:
    side, name, device = args.worker, args.name, args.device
    if side == "gemm":
        return gemm_worker(args)
    cfg = json.loads(args.cfg_json)
    cuda = device.startswith("cuda")
    warmup, steps = args.warmup, args.steps
    batches = SM.make_batches(name, cfg, warmup + steps + (min(steps, 3) if args.breakdown else 0))
    out: dict[str, Any] = {"side": side, "case": name, "device": device}
    fw = SM.framework(side)
    torch = fw.torch
    if side == "ours":
        from torchlean.runtime import allocator_stats, reset_peak_bytes, set_allow_tf32

        set_allow_tf32(bool(args.tf32))
        if cuda:
            import cupy

            sync = cupy.cuda.Device().synchronize
        else:
            def sync() -> None:
                return None

        def reset_peak() -> None:
            reset_peak_bytes(device)

        def peak() -> dict:
            st = allocator_stats(device)
            return {"allocator_peak_bytes": st.peak_bytes, "allocator_live_bytes": st.live_bytes,
                    "cached_bytes": st.cached_bytes}
    else:
        threads, _ = H.blas_threads()
        torch.set_num_threads(threads)
        out["torch_threads"] = threads
        if cuda:
            torch.backends.cuda.matmul.allow_tf32 = bool(args.tf32)
            torch.backends.cudnn.allow_tf32 = bool(args.tf32)
            sync = torch.cuda.synchronize
        else:
            def sync() -> None:
                return None

        def reset_peak() -> None:
            if cuda:
                torch.cuda.reset_peak_memory_stats()

        def peak() -> dict:
            if cuda:
                return {"torch_max_allocated_bytes": torch.cuda.max_memory_allocated(),
                        "torch_max_reserved_bytes": torch.cuda.max_memory_reserved()}
            return {}

    rss0, mem0 = _maxrss_bytes(), _proc_status()
    t0 = time.perf_counter()
    modules, opts, step = SM.build(name, cfg, fw, device)
    sync()
    out["build_s"] = time.perf_counter() - t0

    def one(arrays: dict) -> Any:
        b = {k: torch.from_numpy(v).to(device) for k, v in arrays.items()}
        return step(modules, opts, b)

    timed_steps(one, batches, warmup, steps, sync, reset_peak, peak, mem0, rss0, out)
    if args.breakdown and side == "ours":
        n = min(steps, 3)
        timer = PrimitiveTimer(sync)
        timer.install()
        try:
            t0 = time.perf_counter()
            for s in range(warmup + steps, warmup + steps + n):
                one(batches[s])
                sync()
            wall = time.perf_counter() - t0
        finally:
            timer.uninstall()
        ops = sorted(((k, v / n, timer.calls[k] / n) for k, v in timer.totals.items()), key=lambda r: -r[1])
        out["breakdown"] = {"steps": n, "step_s": wall / n, "ops": ops,
                            "outside_s": wall / n - sum(v for _, v, _ in ops)}
    with open(args.result, "w") as f:
        json.dump(out, f)
    return 0


# -- driver ---------------------------------------------------------------------------------------

def _run_worker(side: str, name: str, cfg: dict, args: argparse.Namespace) -> dict:
    """Runs ``side`` ("ours", "torch", or "gemm": the GEMM rate) in its own process; its JSON result."""
    fd, result = tempfile.mkstemp(prefix=f"tl_scale_{side}_", suffix=".json")
    os.close(fd)
    cmd = [sys.executable, "-m", "benchmarks.scale", "--worker", side, "--name", name, "--device", args.device,
           "--cfg-json", json.dumps(cfg), "--warmup", str(args.warmup), "--steps", str(args.steps),
           "--result", result] + (["--breakdown"] if args.breakdown else []) + (["--tf32"] if args.tf32 else [])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    try:
        p = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=args.timeout)
        if p.returncode != 0:
            raise RuntimeError(f"{side} worker for {name} failed (exit {p.returncode}):\n{p.stderr[-3000:]}")
        with open(result) as f:
            return json.load(f)
    finally:
        try:
            os.unlink(result)
        except OSError:
            pass


def _disturbance(pair: dict) -> float:
    vals = [pair[s].get("other_cores") for s in ("ours", "torch")]
    vals = [v for v in vals if v is not None]
    return max(vals) if vals else 0.0


def bench_one(name: str, args: argparse.Namespace, say, gemm_rate: float) -> dict:
    cfg = SM.CASES[name][args.size]
    flops = SM.step_flops(name, cfg)
    rounds = []
    for r in range(max(1, args.rounds)):
        best, attempt = None, 0
        for attempt in range(1 + max(0, args.retries)):
            pair = {side: _run_worker(side, name, cfg, args) for side in ("ours", "torch")}
            if best is None or _disturbance(pair) < _disturbance(best):
                best = pair
            say(f"  {name}: ours {1e3 * pair['ours']['median_s']:.2f} ms, torch {1e3 * pair['torch']['median_s']:.2f}"
                f" ms (other load {_disturbance(pair):.2f} cores, round {r + 1}, attempt {attempt + 1})")
            if _disturbance(pair) <= BUSY:
                break
        rounds.append(best)
    o, t = _pooled([p["ours"] for p in rounds]), _pooled([p["torch"] for p in rounds])
    ratios = sorted(p["ours"]["median_s"] / p["torch"]["median_s"] for p in rounds)
    cuda = args.device.startswith("cuda")
    return {
        "case": name, "desc": SM.CASES[name]["desc"], "device": args.device, "size": args.size, "cfg": cfg,
        "sizes": SM.summary(name, cfg), "warmup": args.warmup, "steps": args.steps,
        "ours_ms": 1e3 * o["median_s"], "ours_min_ms": 1e3 * o["min_s"],
        "torch_ms": 1e3 * t["median_s"], "torch_min_ms": 1e3 * t["min_s"], "rounds": len(rounds),
        "ratio": statistics.median(ratios), "ratio_range": (ratios[0], ratios[-1]),
        "ours_peak_mib": (o["allocator_peak_bytes"] if cuda else o["cpu_peak_bytes"]) / MiB,
        "ours_allocator_peak_mib": o["allocator_peak_bytes"] / MiB,
        "torch_peak_mib": (t["torch_max_allocated_bytes"] if cuda else t["cpu_peak_bytes"]) / MiB,
        "first_loss_ours": o["first_loss"], "first_loss_torch": t["first_loss"],
        "first_loss_rel": abs(o["first_loss"] - t["first_loss"]) / max(abs(t["first_loss"]), 1e-30),
        "final_loss_ours": o["final_loss"], "final_loss_torch": t["final_loss"],
        "other_cores": max(_disturbance(p) for p in rounds), "attempts": attempt + 1, "breakdown": o.get("breakdown"),
        "step_flops": flops, "ours_flops_per_s": flops / o["median_s"], "torch_flops_per_s": flops / t["median_s"],
        "gemm_flops_per_s": gemm_rate, "ours_gemm_frac": flops / o["median_s"] / gemm_rate,
        "torch_gemm_frac": flops / t["median_s"] / gemm_rate,
        "ours": o, "torch": t,
    }


def _pooled(results: list[dict]) -> dict:
    """One side's worker results of several rounds as one: the median and min over all their timed
    steps, the largest peaks, the first round's losses (every round starts from the same weights)."""
    out = dict(results[0])
    times = [t for r in results for t in r["times_s"]]
    out.update(times_s=times, median_s=statistics.median(times), min_s=min(times))
    for key in ("allocator_peak_bytes", "cpu_peak_bytes", "torch_max_allocated_bytes"):
        if key in out:
            out[key] = max(r[key] for r in results)
    return out


def _ratio_text(r: dict) -> str:
    """ours/torch; with several rounds, the median of the rounds' ratios and their range."""
    lo, hi = r.get("ratio_range", (r["ratio"], r["ratio"]))
    return f"{r['ratio']:.2f}x" + (f" ({lo:.2f}-{hi:.2f})" if r.get("rounds", 1) > 1 else "")


def _mib(x: float) -> str:
    return f"{x:.1f}" if abs(x) < 100 else f"{x:.0f}"


def table(rows: list[dict]) -> str:
    hdr = ("case", "size", "ours ms/step", "torch ms/step", "ours/torch", "GFLOP/step", "ours % of GEMM peak",
           "torch % of GEMM peak", "ours peak MiB", "torch peak MiB", "loss 1st ours (rel diff)",
           "loss after N: ours / torch")
    out = ["| " + " | ".join(hdr) + " |", "|---|---|" + "---:|" * 8 + "---|---|"]
    for r in rows:
        cuda = r["device"].startswith("cuda")
        star = " *" if r["other_cores"] > BUSY else ""
        ours_mem = _mib(r["ours_peak_mib"]) + ("" if cuda else f" ({_mib(r['ours_allocator_peak_mib'])})")
        out.append("| " + " | ".join([
            f"{r['case']} ({r['desc']})", f"{r['size']}: {r['sizes']}",
            f"{r['ours_ms']:.1f} (min {r['ours_min_ms']:.1f})", f"{r['torch_ms']:.1f} (min {r['torch_min_ms']:.1f})",
            f"{_ratio_text(r)}{star}", f"{r['step_flops'] / 1e9:.3g}", f"{100 * r['ours_gemm_frac']:.1f}",
            f"{100 * r['torch_gemm_frac']:.1f}", ours_mem, _mib(r["torch_peak_mib"]),
            f"{r['first_loss_ours']:.6g} ({r['first_loss_rel']:.1e})",
            f"{r['final_loss_ours']:.5g} / {r['final_loss_torch']:.5g}"]) + " |")
    return "\n".join(out)


def breakdown_text(rows: list[dict], top: int) -> str:
    lines = []
    for r in rows:
        b = r.get("breakdown")
        if not b:
            continue
        lines += ["", f"#### {r['case']}: our step by primitive ({b['steps']} profiled steps, "
                  f"{1e3 * b['step_s']:.1f} ms/step with the wrappers"
                  + (", synchronized per primitive" if r["device"].startswith("cuda") else "") + ")", "",
                  "| primitive | ms/step | % of step | calls/step |", "|---|---:|---:|---:|"]
        for k, v, c in b["ops"][:top]:
            lines.append(f"| {k} | {1e3 * v:.2f} | {100 * v / b['step_s']:.1f} | {c:g} |")
        lines.append(f"| (outside primitives) | {1e3 * b['outside_s']:.2f} | "
                     f"{100 * b['outside_s'] / b['step_s']:.1f} | |")
    return "\n".join(lines)


def markdown(rows: list[dict], meta: dict, args: argparse.Namespace) -> str:
    cuda = args.device.startswith("cuda")
    lines = [f"### Training steps at scale, {args.device} ({meta['device_name']}, {meta['cpu_count']} cores), "
             f"size {args.size}, {meta['date']}", "",
             f"- commit {meta['commit']}; python {meta['python']}, numpy {meta['numpy']}, torch {meta['torch']}; "
             f"torch threads = NumPy BLAS threads = {meta['blas_threads']}"
             + (f"; TF32 {'on' if args.tf32 else 'off'} for both" if cuda else ""),
             f"- {args.warmup} warm-up + {args.steps} timed steps per framework, each in its own process"
             + (f", {args.rounds} rounds alternating the two (ours/torch: the median of the rounds' ratios, "
                "their range in parentheses)" if args.rounds > 1 else "")
             + "; median (min) of batch upload + forward + backward + optimizer step(s)"
             + (" + synchronize" if cuda else ""),
             ("- peak memory: our allocator's peak_bytes vs torch.cuda.max_memory_allocated(), reset after warm-up"
              if cuda else "- peak memory: the worker's peak anonymous memory growth over its memory before the "
              "model was built (our allocator's peak in parentheses)"),
             "- same source, same NumPy weights and batches on both sides; FNO spectral layer, FNO2d module and Mamba "
             "scan differ by side (see benchmarks/scale_models.py)",
             f"- GEMM peak (the limit): {meta['gemm_flops_per_s'] / 1e9:.1f} GFLOP/s achieved by torch.matmul of two "
             f"{GEMM_N}x{GEMM_N} float32 matrices, best of {meta['gemm_reps']}"
             + (f", TF32 {'on' if args.tf32 else 'off'}" if cuda else f", {meta['gemm_threads']} threads")
             + "; % of GEMM peak = step FLOPs (analytic: GEMMs, convs, attention, FFTs; "
             "scale_models.step_flops) / median step time / GEMM peak", "", table(rows)]
    if any(r["other_cores"] > BUSY for r in rows):
        lines += ["", f"`*`: other processes used more than {BUSY} cores while this row was timed."]
    if args.breakdown:
        lines.append(breakdown_text(rows, args.top))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m benchmarks.scale", description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--size", choices=("small", "full"), default=None, help="default: small on cpu, full on cuda")
    ap.add_argument("--only", nargs="+", action="extend", help="case names (or substrings)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--retries", type=int, default=1, help="re-runs of a pair timed while others were busy")
    ap.add_argument("--rounds", type=int, default=1,
                    help="pairs of worker runs per case, alternating ours and torch; the ratio is the median of "
                         "the rounds' ratios (a host whose speed drifts moves both sides of a round alike)")
    ap.add_argument("--breakdown", action="store_true", help="op-by-op breakdown of our step (separate pass)")
    ap.add_argument("--top", type=int, default=12, help="primitives per case in the breakdown")
    ap.add_argument("--tf32", action="store_true", help="allow TF32 in matmuls/convs on both sides (CUDA)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per worker")
    ap.add_argument("--markdown", help="write the markdown section to this file")
    ap.add_argument("--json", help="write all results as JSON to this file")
    ap.add_argument("--worker", choices=("ours", "torch", "gemm"), help=argparse.SUPPRESS)
    ap.add_argument("--name", help=argparse.SUPPRESS)
    ap.add_argument("--cfg-json", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args)
    if args.size is None:
        args.size = "full" if args.device == "cuda" else "small"
    names = [n for n in SM.CASES if not args.only or any(o in n for o in args.only)]
    if not names:
        print(f"benchmarks.scale: no case matches {args.only}; cases: {', '.join(SM.CASES)}", file=sys.stderr)
        return 2

    def say(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    meta = meta_info(args.device, args.steps, args.warmup)
    say(f"scale on {args.device} ({meta['device_name']}), size {args.size}, {args.warmup} warm-up + {args.steps} "
        f"timed steps")
    try:
        gemm = _run_worker("gemm", "gemm", {}, args)
        say(f"  GEMM peak: {gemm['gemm_flops_per_s'] / 1e9:.1f} GFLOP/s ({GEMM_N}^3 float32 matmul, "
            f"{1e3 * gemm['gemm_s']:.1f} ms)")
    except (RuntimeError, subprocess.TimeoutExpired) as e:       # the rows still run; their % reads nan
        say(f"  GEMM peak: FAILED: {e}")
        gemm = {"gemm_n": GEMM_N, "gemm_s": None, "gemm_flops_per_s": float("nan"), "reps": 0, "threads": None,
                "tf32": None}
    meta.update({k if k.startswith("gemm") else f"gemm_{k}": v for k, v in gemm.items()})
    rows, failed = [], []
    for name in names:
        try:
            rows.append(bench_one(name, args, say, meta["gemm_flops_per_s"]))
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            say(f"  {name}: FAILED: {e}")
            failed.append(name)
    md = markdown(rows, meta, args) + ("" if not failed else f"\nfailed: {', '.join(failed)}\n")
    print(md)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(md)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "size": args.size, "tf32": args.tf32, "results": rows}, f, indent=1,
                      default=str)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
