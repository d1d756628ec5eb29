"""Training-step time and peak memory of the examples against the same models in PyTorch eager.

    python3 -m benchmarks.train_step [--device cpu|cuda] [--config default|cuda] [--only NAME]
                                     [--steps N] [--warmup W] [--out DIR] [--markdown FILE]
    python3 -m benchmarks.train_step --profile [--only NAME] [--steps N]   # cProfile of our side
    python3 -m benchmarks.train_step --check                                # twins vs ours, tiny configs

Examples: ``fno1d``, ``gpt_adder``, ``mamba``, ``cnn`` (torchlean/examples) against their twins in
``benchmarks/torch_models.py`` (same architecture, parameter names, forward math, loss, optimizer
and scheduler; the twin loads our initial weights, so both start from the same point).

Method:

* The config is the example's ``default_config()`` (``--config default``, the CPU default) or with
  ``cuda_config()`` merged in (``--config cuda``, the default with ``--device cuda``).
* The driver generates the data once (``make_data``) and the batches of steps 0 .. W+N-1 with the
  example's ``get_batch`` (on the CPU, as NumPy arrays) and hands the same arrays to both
  frameworks through an .npz file.
* Each framework runs in its OWN subprocess (no shared thread pools, allocators or imports):
  build the model (ours: ``make_model(cfg).to(device)``; torch: the twin loading our initial weights)
  and the optimizer/scheduler, W warm-up steps, then N timed steps. One timed step is: upload the
  batch (``torchlean.tensor(arr, device=...)`` / ``torch.from_numpy(arr).to(device)``), loss,
  ``zero_grad``, ``backward``, ``optimizer.step``, ``scheduler.step``, and on CUDA a device
  synchronize (``cupy.cuda.Device().synchronize()`` / ``torch.cuda.synchronize()``) before the clock
  stops; the loss is read (``.item()``) after the clock stops. Median and min step time are reported.
* Peak memory. CUDA: our allocator's peak bytes (``torchlean.runtime.reset_peak_bytes`` after
  warm-up, ``allocator_stats(device).peak_bytes`` after the timed steps: buffers only, not CuPy's
  pool slack nor cuFFT/cuBLAS workspaces) against ``torch.cuda.max_memory_allocated()`` after
  ``reset_peak_memory_stats()`` at the same point (tensors only, not the caching allocator's
  slack). Both include parameters, gradients and optimizer state live at the reset. CPU: the
  worker's peak anonymous memory during the timed steps minus its anonymous memory after imports,
  data and batches were loaded (before the model was built): VmHWM is reset after warm-up
  (``/proc/self/clear_refs``), and file-backed pages (shared libraries' code that torch faults in
  on first use) are subtracted; ``ru_maxrss`` growth is in the JSON too. Our allocator's CPU peak
  (live Buffer bytes, reset after warm-up) is shown in parentheses.
* Threads: torch gets ``torch.set_num_threads(n)`` with n = NumPy's BLAS thread count (as
  ``benchmarks.run``). CUDA: TF32 off for torch (``allow_tf32 = False`` for matmul and cuDNN).
  torch's optimizers run with their defaults (``foreach`` on CUDA, the single-tensor loop on CPU).
* The machine's other load: each worker reads /proc/stat around its timed steps; when other
  processes used more than 0.25 cores on average the pair is re-run (``--retries``) and the least
  disturbed attempt is kept; rows still disturbed get a ``*``.

The mamba twin runs mamba_ssm's ``selective_scan_ref`` (a Python loop over time): that is what a
PyTorch eager user without mamba_ssm's CUDA extension runs; the extension's fused scan is far
faster on a GPU than this reference loop.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

from . import harness as H

EXAMPLES = ("fno1d", "gpt_adder", "mamba", "cnn")
BUSY = H.BUSY_CORES
MiB = 1024.0 * 1024.0


def _example(name: str):
    import importlib

    return importlib.import_module(f"torchlean.examples.{name}")


def make_config(name: str, kind: str) -> dict:
    ex = _example(name)
    cfg = ex.default_config()
    if kind == "cuda":
        cfg.update(ex.cuda_config())
    elif kind == "tiny":
        cfg.update(ex.tiny_config())
    return cfg


def config_summary(name: str, cfg: dict) -> str:
    """A short description of the sizes that matter for the step time."""
    if name == "fno1d":
        return (f"b={cfg['batch_size']} grid={cfg['grid']} width={cfg['width']} modes={cfg['modes']} "
                f"L={cfg.get('n_layers', 4)}")
    if name == "cnn":
        c1, c2 = cfg["channels"]
        return f"b={cfg['batch_size']} {cfg['image_size']}x{cfg['image_size']} ch={c1},{c2} hidden={cfg['hidden']}"
    if name == "gpt_adder":
        t = 3 * cfg["n_digits"] + 2
        return f"b={cfg['batch_size']} T={t} d={cfg['d_model']} h={cfg['n_heads']} L={cfg['n_layers']}"
    if name == "mamba":
        t = cfg["seq_len"] + cfg["n_data"]
        return (f"b={cfg['batch_size']} T={t} d={cfg['d_model']} N={cfg['d_state']} x{cfg['expand']} "
                f"L={cfg['n_layers']}")
    return ""


def _maxrss_bytes() -> int:
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(r) * (1 if sys.platform == "darwin" else 1024)


def _proc_status() -> dict[str, int]:
    """VmRSS, VmHWM, RssAnon, RssFile, RssShmem of this process in bytes ({} where /proc is missing)."""
    out: dict[str, int] = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem"):
                    out[k] = int(v.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return {}
    return out


def _reset_hwm() -> bool:
    """Reset the peak RSS (VmHWM) to the current RSS (Linux >= 4.0: write 5 to clear_refs)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _cpu_peak(mem0: dict, mem_reset: dict, mem1: dict, hwm_reset: bool, rss_growth: int) -> tuple[int, str]:
    """Peak anonymous memory during the timed steps minus anonymous memory before the model was built:
    VmHWM (reset after warm-up) - RssFile (code and mapped files, at the reset) - (RssAnon + RssShmem
    before the model). Falls back to the growth of ru_maxrss."""
    if hwm_reset and mem0 and mem_reset and mem1:
        base = mem0["RssAnon"] + mem0.get("RssShmem", 0)
        return mem1["VmHWM"] - mem_reset["RssFile"] - base, "VmHWM-RssFile-RssAnon0"
    return rss_growth, "ru_maxrss growth"


# -- worker: one framework, one example, its own process ------------------------------------------

def timed_steps(step_fn, batches, warmup: int, steps: int, sync, reset_peak, peak, mem0: dict, rss0: int,
                out: dict) -> None:
    """W warm-up steps, then N timed ones (each synchronized); fills ``out`` with the times (median,
    min), the losses, the peak memory (``peak()`` and the process's, see _cpu_peak) and the other
    load seen meanwhile. The one timing loop of train_step and scale."""
    losses: list[float] = []
    for s in range(warmup):
        loss = step_fn(batches[s])
        sync()
        losses.append(float(loss.item()))
        del loss
    reset_peak()
    hwm_reset = _reset_hwm()
    mem_reset = _proc_status()
    mon = H.CpuMonitor()
    times: list[float] = []
    mon.start()
    for s in range(warmup, warmup + steps):
        t0 = time.perf_counter()
        loss = step_fn(batches[s])
        sync()
        times.append(time.perf_counter() - t0)
        losses.append(float(loss.item()))
        del loss
    other = mon.stop()
    rss1, mem1 = _maxrss_bytes(), _proc_status()
    out["cpu_peak_bytes"], out["cpu_peak_method"] = _cpu_peak(mem0, mem_reset, mem1, hwm_reset, rss1 - rss0)
    out.update({"proc_at_reset": mem_reset, "proc_after": mem1})
    out.update(peak())
    out.update({"times_s": times, "median_s": statistics.median(times), "min_s": min(times), "losses": losses,
                "first_loss": losses[0], "final_loss": losses[-1], "rss_growth_bytes": rss1 - rss0,
                "rss_base_bytes": rss0, "rss_peak_bytes": rss1, "other_cores": other})


def worker(args: argparse.Namespace) -> int:
    side, name, device = args.worker, args.name, args.device
    cfg = json.loads(args.cfg_json)
    with np.load(args.batches) as z:
        keys = sorted({k.split("/", 1)[1] for k in z.files})
        n_total = 1 + max(int(k.split("/", 1)[0]) for k in z.files)
        batches = [{k: np.array(z[f"{s}/{k}"]) for k in keys} for s in range(n_total)]
    warmup, steps = args.warmup, args.steps
    assert warmup + steps <= n_total
    ex = _example(name)
    import torchlean as tl
    from torchlean.runtime import allocator_stats, reset_peak_bytes

    cuda = device.startswith("cuda")
    out: dict[str, Any] = {"side": side, "example": name, "device": device}
    if side == "ours":
        if cuda:
            import cupy

            sync = cupy.cuda.Device().synchronize
        else:
            def sync() -> None:
                return None
        rss0, mem0 = _maxrss_bytes(), _proc_status()
        model = ex.make_model(cfg).to(device)
        opt, sched = ex.make_optimizer(model, cfg)

        def step_fn(arrays: dict) -> Any:
            batch = {k: tl.tensor(v, device=device) for k, v in arrays.items()}
            loss = ex.loss_fn(model, batch)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if sched is not None:
                sched.step()
            return loss

        def reset_peak() -> None:
            reset_peak_bytes(device)

        def peak() -> dict:
            st = allocator_stats(device)
            d = {"allocator_peak_bytes": st.peak_bytes, "allocator_live_bytes": st.live_bytes,
                 "cached_bytes": st.cached_bytes}
            if cuda:
                import cupy

                d["cupy_pool_total_bytes"] = cupy.get_default_memory_pool().total_bytes()
            return d
    else:
        import torch

        from . import torch_models as TM

        threads, source = H.blas_threads()
        torch.set_num_threads(threads)
        out["torch_threads"] = threads
        if cuda:
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
            sync = torch.cuda.synchronize
        else:
            def sync() -> None:
                return None
        ours = ex.make_model(cfg)            # on the CPU: the initial weights and the optimizer settings
        our_opt, our_sched = ex.make_optimizer(ours, cfg)
        arrays0 = TM.state_dict_arrays(ours)
        rss0, mem0 = _maxrss_bytes(), _proc_status()
        model = TM.make_torch_model(name, cfg)
        TM.load_into(model, arrays0)
        model.to(device)
        opt, sched = TM.make_optimizer_like(our_opt, our_sched, model)
        del arrays0
        tdev = torch.device(device)

        def step_fn(arrays: dict) -> Any:
            batch = {k: torch.from_numpy(v).to(tdev) for k, v in arrays.items()}
            loss = TM.torch_loss(name, model, batch)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if sched is not None:
                sched.step()
            return loss

        def reset_peak() -> None:
            if cuda:
                torch.cuda.reset_peak_memory_stats()

        def peak() -> dict:
            if cuda:
                return {"torch_max_allocated_bytes": torch.cuda.max_memory_allocated(),
                        "torch_max_reserved_bytes": torch.cuda.max_memory_reserved(),
                        "torch_allocated_bytes": torch.cuda.memory_allocated()}
            return {}

    timed_steps(step_fn, batches, warmup, steps, sync, reset_peak, peak, mem0, rss0, out)
    out["proc_before_model"] = mem0
    with open(args.result, "w") as f:
        json.dump(out, f)
    return 0


# -- driver ---------------------------------------------------------------------------------------

def _run_worker(side: str, name: str, device: str, cfg: dict, batches_path: str, warmup: int, steps: int,
                timeout: float) -> dict:
    fd, result = tempfile.mkstemp(prefix=f"tl_bench_{side}_", suffix=".json")
    os.close(fd)
    cmd = [sys.executable, "-m", "benchmarks.train_step", "--worker", side, "--name", name, "--device", device,
           "--cfg-json", json.dumps(cfg), "--batches", batches_path, "--warmup", str(warmup), "--steps",
           str(steps), "--result", result]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if side == "torch":
        # The torch worker builds our model once, for the initial weights: with Numba's OpenMP layer
        # its worker threads would then spin after each of our kernels and take a core from
        # PyTorch's own OpenMP threads for the whole run (measured: torch's CPU gpt_adder step
        # 6-8 ms -> 10-12 ms). One Numba thread starts none.
        env["NUMBA_NUM_THREADS"] = "1"
    try:
        p = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout)
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


def write_batches(name: str, kind: str, n_steps: int) -> tuple[dict, str, float]:
    """The example's config, an .npz (a temporary file) of the batches of steps 0 .. n_steps-1
    (keys "step/name"), and the seconds make_data took."""
    ex = _example(name)
    cfg = make_config(name, kind)
    t0 = time.perf_counter()
    data = ex.make_data(cfg)
    t_data = time.perf_counter() - t0
    arrays: dict[str, np.ndarray] = {}
    for s in range(n_steps):
        b = ex.get_batch(data, s, cfg, "cpu")
        for k, v in b.items():
            arrays[f"{s}/{k}"] = np.array(v.numpy(), copy=True)
    del data
    fd, path = tempfile.mkstemp(prefix=f"tl_bench_{name}_", suffix=".npz")
    os.close(fd)
    np.savez(path, **arrays)
    return cfg, path, t_data


def bench_one(name: str, device: str, kind: str, steps: int, warmup: int, retries: int,
              say) -> dict:
    cfg, path, t_data = write_batches(name, kind, warmup + steps)
    try:
        best = None
        for attempt in range(1 + max(0, retries)):
            pair = {}
            for side in ("ours", "torch"):
                pair[side] = _run_worker(side, name, device, cfg, path, warmup, steps, timeout=600)
            pair["attempts"] = attempt + 1
            if best is None or _disturbance(pair) < _disturbance(best):
                best = pair
            say(f"  {name}: ours {1e3 * pair['ours']['median_s']:.2f} ms, "
                f"torch {1e3 * pair['torch']['median_s']:.2f} ms"
                f" (other load {_disturbance(pair):.2f} cores, attempt {attempt + 1})")
            if _disturbance(pair) <= BUSY:
                break
        best["attempts"] = attempt + 1
    finally:
        os.unlink(path)
    o, t = best["ours"], best["torch"]
    first_rel = abs(o["first_loss"] - t["first_loss"]) / max(abs(t["first_loss"]), 1e-30)
    cuda = device.startswith("cuda")
    row = {
        "example": name, "device": device, "config": kind, "sizes": config_summary(name, cfg), "cfg": cfg,
        "warmup": warmup, "steps": steps, "data_seconds": t_data,
        "ours_ms": 1e3 * o["median_s"], "ours_min_ms": 1e3 * o["min_s"],
        "torch_ms": 1e3 * t["median_s"], "torch_min_ms": 1e3 * t["min_s"],
        "ratio": o["median_s"] / t["median_s"],
        "ours_peak_mib": (o["allocator_peak_bytes"] if cuda else o["cpu_peak_bytes"]) / MiB,
        "ours_allocator_peak_mib": o["allocator_peak_bytes"] / MiB,
        "torch_peak_mib": (t["torch_max_allocated_bytes"] if cuda else t["cpu_peak_bytes"]) / MiB,
        "first_loss_ours": o["first_loss"], "first_loss_torch": t["first_loss"], "first_loss_rel": first_rel,
        "final_loss_ours": o["final_loss"], "final_loss_torch": t["final_loss"],
        "other_cores": _disturbance(best), "attempts": best["attempts"],
        "ours": o, "torch": t,
    }
    return row


def _fmt_mib(x: float) -> str:
    return f"{x:.1f}" if abs(x) < 100 else f"{x:.0f}"


HEADERS = ("example", "device", "config", "ours ms/step", "torch ms/step", "ours/torch", "ours peak MiB",
           "torch peak MiB", "loss 1st (rel diff)", "loss after N: ours / torch")


def table(rows: list[dict]) -> str:
    out = ["| " + " | ".join(HEADERS) + " |", "|" + "|".join(["---"] * 3 + ["---:"] * 5 + ["---", "---"]) + "|"]
    for r in rows:
        cuda = r["device"].startswith("cuda")
        star = " *" if r["other_cores"] > BUSY else ""
        ours_mem = _fmt_mib(r["ours_peak_mib"]) + ("" if cuda else f" ({_fmt_mib(r['ours_allocator_peak_mib'])})")
        out.append("| " + " | ".join([
            r["example"], r["device"], f"{r['config']}: {r['sizes']}",
            f"{r['ours_ms']:.2f} (min {r['ours_min_ms']:.2f})", f"{r['torch_ms']:.2f} (min {r['torch_min_ms']:.2f})",
            f"{r['ratio']:.2f}x{star}", ours_mem, _fmt_mib(r["torch_peak_mib"]),
            f"{r['first_loss_ours']:.5g} ({r['first_loss_rel']:.1e})",
            f"{r['final_loss_ours']:.5g} / {r['final_loss_torch']:.5g}"]) + " |")
    return "\n".join(out)


def meta_info(device: str, steps: int, warmup: int) -> dict:
    import platform

    import torchlean

    meta: dict[str, Any] = {"device": device, "date": H.today(), "commit": H.git_commit(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "python": platform.python_version(),
        "numpy": np.__version__, "torchlean": getattr(torchlean, "__version__", "?"), "steps": steps,
        "warmup": warmup}
    threads, source = H.blas_threads()
    meta["blas_threads"], meta["blas_threads_source"] = threads, source
    try:
        import torch

        meta["torch"] = torch.__version__
        meta["device_name"] = torch.cuda.get_device_name(0) if device.startswith("cuda") else H.cpu_model()
    except Exception:  # noqa: BLE001
        meta["torch"] = "missing"
        meta["device_name"] = H.cpu_model()
    meta["cpu_count"] = H.cpu_count()
    return meta


def markdown(rows: list[dict], meta: dict) -> str:
    cuda = meta["device"].startswith("cuda")
    lines = [f"### Training step, {meta['device']} ({meta['device_name']}), {meta['date']}", "",
             f"- commit {meta['commit']}; python {meta['python']}, numpy {meta['numpy']}, torch {meta['torch']}; "
             f"NumPy BLAS threads {meta['blas_threads']} (from {meta['blas_threads_source']}) = "
             f"torch.set_num_threads",
             f"- {meta['warmup']} warm-up steps, then {meta['steps']} timed steps per framework, each in its own "
             "process; time = median per step (min in parentheses): batch upload + forward + loss + zero_grad + "
             "backward + optimizer.step + scheduler.step" + (" + device synchronize" if cuda else ""),
             ("- peak memory: our allocator's peak Buffer bytes vs torch.cuda.max_memory_allocated(), both reset "
              "after warm-up (parameters, gradients and optimizer state included)" if cuda else
              "- peak memory: the worker's peak anonymous memory during the timed steps (VmHWM reset after "
              "warm-up, minus file-backed RSS) minus its anonymous memory before the model was built: model, "
              "gradients, optimizer state and the step's transient peak, including malloc's retained slack "
              "(in parentheses: our allocator's peak of live Buffer bytes, reset after warm-up)"),
             "- loss 1st: the loss of step 0 (ours) and |ours - torch| / |torch|; both start from the same weights "
             "and see the same batches",
             "- mamba's twin is mamba_ssm's selective_scan_ref (a Python loop over time): what PyTorch eager runs "
             "without mamba_ssm's CUDA extension", ""]
    lines.append(table(rows))
    if any(r["other_cores"] > BUSY for r in rows):
        lines += ["", f"`*`: other processes used more than {BUSY} cores on average while this row was timed "
                  "(even after re-running it); treat as noise."]
    return "\n".join(lines) + "\n"


def profile(names: list[str], device: str, kind: str, steps: int, warmup: int, top: int = 25) -> None:
    """cProfile of our training step (``steps`` steps after ``warmup``), top functions by tottime."""
    import cProfile
    import pstats

    import torchlean as tl

    sync = (lambda: None)
    if device.startswith("cuda"):
        import cupy

        sync = cupy.cuda.Device().synchronize
    for name in names:
        ex = _example(name)
        cfg = make_config(name, kind)
        data = ex.make_data(cfg)
        batches = []
        for s in range(warmup + steps):
            b = ex.get_batch(data, s, cfg, "cpu")
            batches.append({k: np.array(v.numpy(), copy=True) for k, v in b.items()})
        model = ex.make_model(cfg).to(device)
        opt, sched = ex.make_optimizer(model, cfg)

        def run(bs: list[dict]) -> None:
            for arrays in bs:
                batch = {k: tl.tensor(v, device=device) for k, v in arrays.items()}
                loss = ex.loss_fn(model, batch)
                opt.zero_grad()
                loss.backward()
                opt.step()
                if sched is not None:
                    sched.step()
                sync()
                del loss

        run(batches[:warmup])
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        run(batches[warmup:])
        prof.disable()
        wall = time.perf_counter() - t0
        print(f"\n=== {name} ({kind}: {config_summary(name, cfg)}) on {device}: {steps} steps, "
              f"{1e3 * wall / steps:.2f} ms/step under the profiler ===")
        st = pstats.Stats(prof)
        st.sort_stats("tottime").print_stats(top)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m benchmarks.train_step", description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--config", choices=("default", "cuda", "tiny"), default=None,
                    help="example config: default_config (default on cpu) or with cuda_config merged (default on cuda)")
    ap.add_argument("--only", action="append", help="examples whose name contains this (repeatable)")
    ap.add_argument("--steps", type=int, default=None, help="timed steps per framework (default 40 cpu, 50 cuda)")
    ap.add_argument("--warmup", type=int, default=None, help="warm-up steps (default 5 cpu, 10 cuda)")
    ap.add_argument("--retries", type=int, default=1, help="re-runs of a pair timed while others were busy")
    ap.add_argument("--out", help="directory for train_step_<device>_<config>.json")
    ap.add_argument("--markdown", help="write the markdown section to this file")
    ap.add_argument("--profile", action="store_true", help="cProfile our side instead (top 25 by tottime)")
    ap.add_argument("--check", action="store_true", help="check the torch twins against ours (tiny configs)")
    # worker (internal)
    ap.add_argument("--worker", choices=("ours", "torch"), help=argparse.SUPPRESS)
    ap.add_argument("--name", help=argparse.SUPPRESS)
    ap.add_argument("--cfg-json", help=argparse.SUPPRESS)
    ap.add_argument("--batches", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    cuda = args.device == "cuda"
    if args.steps is None:
        args.steps = 50 if cuda else 40
    if args.warmup is None:
        args.warmup = 10 if cuda else 5
    if args.worker:
        return worker(args)
    kind = args.config or ("cuda" if cuda else "default")
    names = [n for n in EXAMPLES if not args.only or any(o in n for o in args.only)]

    def say(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    if cuda:
        from torchlean.runtime import cuda_unavailable_reason

        reason = cuda_unavailable_reason()
        if reason is None and not args.profile and not args.check:
            try:
                import torch

                if not torch.cuda.is_available():
                    reason = f"torch {torch.__version__} has no usable CUDA device"
            except ImportError:
                reason = "torch is not installed"
        if reason:
            print(f"benchmarks.train_step: --device cuda is not available: {reason}", file=sys.stderr)
            return 2
    if args.check:
        from . import torch_models as TM

        worst = 0.0
        for name in names:
            r = TM.check_twin(name, "tiny", 3, args.device)
            worst = max(worst, *r["rel"])
            print(f"{name:10s} losses ours/torch: " + ", ".join(f"{a:.6g}/{b:.6g} ({e:.1e})"
                                                             for (a, b), e in zip(r["losses"], r["rel"])))
        print(f"worst relative loss difference: {worst:.2e}")
        return 0 if worst < 1e-4 else 1
    if args.profile:
        profile(names, args.device, kind, min(args.steps, 20), args.warmup)
        return 0
    meta = meta_info(args.device, args.steps, args.warmup)
    say(f"train_step on {args.device} ({meta['device_name']}), config {kind}, {args.warmup} warm-up + "
        f"{args.steps} timed steps")
    rows = []
    for name in names:
        rows.append(bench_one(name, args.device, kind, args.steps, args.warmup, args.retries, say))
    md = markdown(rows, meta)
    print(md)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        path = os.path.join(args.out, f"train_step_{args.device}_{kind}.json")
        with open(path, "w") as f:
            json.dump({"meta": meta, "results": rows}, f, indent=1, default=str)
            f.write("\n")
        say(f"wrote {path}")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(md)
        say(f"wrote {args.markdown}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
