"""The training loop behind ``torchlean train``: any example, any device, with progress, allocator
telemetry, a JSON log, plots, and checkpoints that resume bit for bit in deterministic mode.

``train(name, device="cpu", steps=None, ...)`` returns the summary dict it also prints. The loop
is deliberately plain (PyTorch's habits): batch -> loss -> backward -> optimizer step ->
scheduler step. Batches come from ``get_batch(data, step, ...)``, a function of the seed and the
step only, so a resumed run sees exactly the batches of an uninterrupted one.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from typing import Any, Callable

import torchlean as tl

from . import examples
from .errors import ArgumentError, DeviceError
from .runtime.device import canonical_device, cuda_unavailable_reason


# data sets generated faster than this are not stored in the data cache: reading them back saves nothing
_CACHE_MIN_SECONDS = 0.1


def pick_device(device: str, say: Callable[[str], None] = print) -> str:
    """'auto' picks CUDA when it is usable (and says so), else the CPU (and says why)."""
    if device == "auto":
        reason = cuda_unavailable_reason()
        if reason is None:
            say("device auto: CUDA is available, using cuda:0")
            return "cuda:0"
        say(f"device auto: using the CPU (CUDA unavailable: {reason})")
        return "cpu"
    dev = canonical_device(device, "train")
    if dev.startswith("cuda") and cuda_unavailable_reason() is not None:
        raise DeviceError(f"train: --device {device} asked for CUDA, which is unavailable: {cuda_unavailable_reason()}")
    return dev


class MemoryWatch:
    """Every ``every`` steps: the allocator line; warns when the device's free memory keeps falling
    and projects the step at which it would run out (a linear fit over the last readings)."""

    def __init__(self, device: str, every: int, say: Callable[[str], None]) -> None:
        self.device, self.every, self.say = device, every, say
        self.readings: list[tuple[int, int]] = []

    def __call__(self, step: int) -> None:
        if not self.every or step % self.every:
            return
        stats = tl.allocator_stats(self.device)
        self.say(f"step {step}: {tl.format_allocator_stats(stats)}")
        if stats.device_total_bytes:
            free, where = stats.device_free_bytes, "device"
        elif stats.host_total_bytes:  # the CPU has no device memory: watch the host's
            free, where = stats.host_free_bytes, "host"
        else:
            return
        self.readings.append((step, free))
        last = self.readings[-4:]
        if len(last) == 4 and all(b[1] < a[1] for a, b in zip(last, last[1:])):
            rate = (last[0][1] - last[-1][1]) / max(last[-1][0] - last[0][0], 1)  # bytes per step
            runs_out = last[-1][0] + int(last[-1][1] / rate) if rate > 0 else None
            self.say(f"warning: free {where} memory fell at every one of the last {len(last)} readings "
                     f"({rate / 2**20:.2f} MiB/step); at this rate it runs out near step {runs_out}")


class Progress:
    """A one-line live progress bar on a terminal (a plain line every 10% otherwise)."""

    def __init__(self, total: int, start: int, device: str, stream: Any = sys.stderr) -> None:
        self.total, self.start, self.device, self.stream = total, start, device, stream
        self.tty = hasattr(stream, "isatty") and stream.isatty()
        self.t0 = time.perf_counter()
        self.last_draw = 0.0

    def update(self, step: int, loss: float) -> None:
        now = time.perf_counter()
        done = step + 1
        if self.tty and now - self.last_draw < 0.1 and done < self.total:
            return
        if not self.tty and done % max(self.total // 10, 1) and done != self.total:
            return
        self.last_draw = now
        rate = (done - self.start) / max(now - self.t0, 1e-9)
        st = tl.allocator_stats(self.device)
        width = 24
        filled = int(width * done / max(self.total, 1))
        bar = "#" * filled + "-" * (width - filled)
        line = (f"[{bar}] {done}/{self.total} loss {loss:.4g} {rate:.1f} steps/s "
                f"live {st.live_bytes / 2**20:.1f} MiB peak {st.peak_bytes / 2**20:.1f} MiB")
        if self.tty:
            self.stream.write("\r" + line + ("\n" if done == self.total else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


def _plot_losses(losses: list[float], path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(range(1, len(losses) + 1), losses)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def train(name: str, device: str = "cpu", steps: int | None = None, batch_size: int | None = None,
          lr: float | None = None, seed: int | None = None, deterministic: bool = False, fast_kernels: bool = False,
          fast_gpu_matmul_precision: str = "fp32", log: str | None = None, plot: str | None = None,
          checkpoint: str | None = None, resume: str | None = None, mem_every: int = 0, tiny: bool = False,
          checkpoint_every: int = 0, stop_at: int | None = None, say: Callable[[str], None] = print,
          progress: bool = True, config: str = "auto", data_cache: bool = True) -> dict:
    """Train example ``name``; returns (and prints) the summary. ``stop_at`` ends the run after that
    many steps of the configured schedule (saving ``checkpoint``), so that ``resume`` continues it.
    ``config``: "auto" (the example's longer GPU schedule on CUDA, its CPU defaults elsewhere),
    "default" or "cuda" (that one on any device: to run the very same computation on both).
    ``data_cache``: load the generated data set from, and store it in, the data cache
    (torchlean/data_cache.py; also off with TORCHLEAN_DATA_CACHE=off)."""
    ex = examples.get(name)
    if config not in ("auto", "default", "cuda"):
        raise ArgumentError(f"train: --config must be auto, default or cuda, got {config!r}")
    dev = pick_device(device, say)
    if dev.startswith("cuda"):
        _precompile_cuda(dev, say)
    cfg = dict(ex.default_config())
    if config == "cuda" or (config == "auto" and dev.startswith("cuda")):
        cfg.update(ex.cuda_config())
    if tiny:
        cfg.update(ex.tiny_config())
    for key, val in (("steps", steps), ("batch_size", batch_size), ("lr", lr), ("seed", seed)):
        if val is not None:
            cfg[key] = val
    if fast_gpu_matmul_precision not in ("fp32", "fp64"):
        raise ArgumentError(f"train: --fast-gpu-matmul-precision must be fp32 or fp64, got {fast_gpu_matmul_precision!r}")
    for path in (log, plot, checkpoint):
        _make_parent(path)  # before training: a missing folder must not lose a finished run
    from .fast_kernels import Options, options

    opts = Options(fast_kernels=bool(fast_kernels), use_gpu=dev.startswith("cuda"),
                   fast_gpu_matmul_precision=fast_gpu_matmul_precision)
    if fast_kernels:
        say(f"fast kernels on: linear, 2-D matmul and mse_loss use the fused fast variants "
            f"(matmul precision {fast_gpu_matmul_precision})")
    was_det = tl.deterministic_reductions()
    tl.set_deterministic_reductions(bool(deterministic))
    try:
        with options(opts):
            return _run(ex, name, dev, cfg, log, plot, checkpoint, resume, mem_every, checkpoint_every, say, progress,
                        deterministic, stop_at, data_cache)
    finally:
        tl.set_deterministic_reductions(was_det)


def _precompile_cuda(dev: str, say: Callable[[str], None]) -> None:
    """Compile the CUDA kernels on background threads while the data and the model are made (a
    fresh machine has no compiled kernels on disk yet). Only a head start: a failure here leaves
    each kernel file to be compiled on first use, as without it."""
    try:
        from .kernels.cuda.launch import precompile

        precompile(int(dev.partition(":")[2] or 0))
    except Exception as exc:  # noqa: BLE001
        say(f"note: could not start compiling the CUDA kernels early ({type(exc).__name__}: {exc})")


def _make_parent(path: str | None) -> None:
    if not path:
        return
    parent = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as e:
        raise ArgumentError(f"train: cannot create the folder {parent!r} for {path!r}: {e}") from None


def _run(ex, name, dev, cfg, log, plot, checkpoint, resume, mem_every, checkpoint_every, say, progress, deterministic,
         stop_at, data_cache):
    from .checkpoint import load_checkpoint, save_checkpoint
    from .data_cache import cached_data
    from .fast_kernels import get_options

    t_start = time.perf_counter()
    say(f"torchlean train {name} on {dev}: " + ", ".join(f"{k}={v}" for k, v in cfg.items()))
    t0 = time.perf_counter()
    data, data_source = cached_data(ex, cfg, lambda: ex.make_data(cfg), enabled=data_cache,
                                    min_seconds=_CACHE_MIN_SECONDS, say=say)
    t_data = time.perf_counter() - t0
    say(f"data: {data_source} ({t_data:.2f} s)")
    tl.manual_seed(cfg["seed"])
    model = ex.make_model(cfg).to(dev)
    opt, sched = ex.make_optimizer(model, cfg)
    start = 0
    losses: list[float] = []
    if resume:
        meta = load_checkpoint(resume, model, opt, sched)
        start = int(meta["step"])
        losses = list((meta.get("extra") or {}).get("losses", []))
        say(f"resumed from {resume} at step {start}")
    total = int(cfg["steps"])
    end = total if stop_at is None else max(start, min(total, int(stop_at)))
    before = ex.evaluate(model, data, cfg, dev) if start == 0 else None
    watch = MemoryWatch(dev, mem_every, say)
    bar = Progress(end, start, dev) if progress else None
    t_train = time.perf_counter()
    for step in range(start, end):
        batch = ex.get_batch(data, step, cfg, dev)
        loss = ex.loss_fn(model, batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
        value = loss.item()
        losses.append(value)
        if not math.isfinite(value):
            say(f"step {step}: the loss is {value}; stopping")
            break
        if bar is not None:
            bar.update(step, value)
        watch(step + 1)
        if checkpoint and checkpoint_every and (step + 1) % checkpoint_every == 0 and step + 1 < end:
            save_checkpoint(checkpoint, model, opt, sched, step + 1, {"losses": losses, "example": name})
    train_s = time.perf_counter() - t_train
    after = ex.evaluate(model, data, cfg, dev)
    if checkpoint:
        save_checkpoint(checkpoint, model, opt, sched, len(losses), {"losses": losses, "example": name})
    stats = tl.allocator_stats(dev)
    summary = {
        "example": name, "device": dev, "deterministic": bool(deterministic), "config": cfg,
        "fast_kernels": get_options().fast_kernels,
        "fast_gpu_matmul_precision": get_options().fast_gpu_matmul_precision,
        "steps_run": len(losses) - (start if resume else 0), "first_loss": losses[0] if losses else None,
        "final_loss": losses[-1] if losses else None, "metric": ex.METRIC,
        "metric_before": None if before is None else before.get(ex.METRIC), "metric_after": after.get(ex.METRIC),
        "evaluation": after, "data_seconds": round(t_data, 3), "data_source": data_source,
        "train_seconds": round(train_s, 3),
        "wall_seconds": round(time.perf_counter() - t_start, 3),
        "steps_per_second": round((len(losses) - start) / max(train_s, 1e-9), 2),
        "peak_bytes": stats.peak_bytes, "losses": losses,
    }
    better = "lower" if ex.LOWER_IS_BETTER else "higher"
    say(f"done: loss {summary['first_loss']:.4g} -> {summary['final_loss']:.4g}; test {ex.METRIC} "
        f"{'' if before is None else f'{before.get(ex.METRIC):.4g} -> '}{after.get(ex.METRIC):.4g} ({better} is better); "
        f"{summary['steps_per_second']} steps/s; train {train_s:.1f} s, data {t_data:.1f} s, wall "
        f"{summary['wall_seconds']:.1f} s; peak memory {stats.peak_bytes / 2**20:.1f} MiB on {dev}")
    if log:
        tmp = f"{log}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(summary, f, indent=1, default=float)
        os.replace(tmp, log)
        say(f"log written to {log}")
    if plot:
        try:
            _plot_losses(losses, plot, f"torchlean {name} on {dev}")
            say(f"loss curve written to {plot}")
            if hasattr(ex, "plot_predictions"):
                root, ext = os.path.splitext(plot)
                pred = f"{root}_predictions{ext or '.png'}"
                ex.plot_predictions(model, data, cfg, dev, pred)
                say(f"predictions written to {pred}")
        except ImportError:
            say("--plot needs matplotlib: pip install 'torchlean[plot]' (the run itself is complete)")
    return summary
