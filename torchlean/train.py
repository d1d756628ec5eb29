"""The training loop behind ``torchlean train``: any example, any device, with progress, allocator
telemetry, a JSON log, plots, and checkpoints that resume bit for bit in deterministic mode.

``train(name, device="cpu", steps=None, ...)`` returns the summary dict it also prints. The loop
is deliberately plain (PyTorch's habits): batch -> loss -> backward -> optimizer step ->
scheduler step. Batches come from ``get_batch(data, step, ...)``, a function of the seed and the
step only, so a resumed run sees exactly the batches of an uninterrupted one.

``torchlean train NAME --nproc-per-node N`` (``launch_training``) starts N processes with
``torchlean launch``; each runs ``train(..., distributed=True)``: it joins the process group
(backend "mpi" on the CPU, "nccl" with ``--device cuda``, one GPU per local rank), wraps the
example's model in ``DistributedDataParallel`` and takes its contiguous 1/N of every batch
(``get_batch`` is unchanged: the global batch is the single-process batch, so the gradients are
those of the full batch whenever the example's loss is a mean over equal per-sample parts). The
logged loss is the ranks' average. Only rank 0 prints, logs, plots and saves checkpoints (of the
bare model, which a single process can resume, and vice versa); every rank loads ``--resume``.
Models with BatchNorm normalise by per-rank batch statistics (as PyTorch's DDP without
SyncBatchNorm), with rank 0's running statistics broadcast at each forward.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import time
from typing import Any, Callable

import torchlean as tl

from . import examples
from .errors import ArgumentError, DeviceError
from .runtime.device import canonical_device, cuda_device_count, cuda_unavailable_reason


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
          progress: bool = True, config: str = "auto", data_cache: bool = True, distributed: bool = False,
          precompile: bool = False) -> dict:
    """Train example ``name``; returns (and prints) the summary. ``stop_at`` ends the run after that
    many steps of the configured schedule (saving ``checkpoint``), so that ``resume`` continues it.
    ``config``: "auto" (the example's longer GPU schedule on CUDA, its CPU defaults elsewhere),
    "default" or "cuda" (that one on any device: to run the very same computation on both).
    ``data_cache``: load the generated data set from, and store it in, the data cache
    (torchlean/data_cache.py; also off with TORCHLEAN_DATA_CACHE=off).
    ``distributed``: this process is one rank of a job that ``launch_training`` started (see the
    module docstring); the process group is joined here and left at the end.
    ``precompile``: on the CPU, start helper processes that compile the example's kernels not yet in
    Numba's disk cache while this one starts (kernels/cpu/warm.py; `torchlean train` does)."""
    ex = examples.get(name)
    if config not in ("auto", "default", "cuda"):
        raise ArgumentError(f"train: --config must be auto, default or cuda, got {config!r}")
    dev = pick_device(device, say)
    job = None
    if distributed:
        job, dev = _join_job(dev)
        if job.rank != 0:
            say, progress = _quiet, False
    if dev.startswith("cuda"):
        _precompile_cuda(dev, say)
    elif precompile and (job is None or job.rank == 0):
        _precompile_cpu(name, say)
    cfg = _config(ex, dev, config, tiny, steps, batch_size, lr, seed)
    if job is not None:
        _check_shardable(name, cfg, job.world_size)
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
                        deterministic, stop_at, data_cache, job)
    finally:
        tl.set_deterministic_reductions(was_det)
        if job is not None:
            from .distributed import destroy_process_group

            destroy_process_group()


def _config(ex, dev: str, config: str, tiny: bool, steps=None, batch_size=None, lr=None, seed=None) -> dict:
    """The example's settings: its defaults, its CUDA schedule (``config``), tiny sizes, overrides."""
    cfg = dict(ex.default_config())
    if config == "cuda" or (config == "auto" and dev.startswith("cuda")):
        cfg.update(ex.cuda_config())
    if tiny:
        cfg.update(ex.tiny_config())
    for key, val in (("steps", steps), ("batch_size", batch_size), ("lr", lr), ("seed", seed)):
        if val is not None:
            cfg[key] = val
    return cfg


# -- several processes ---------------------------------------------------------------------------
def _quiet(msg: str) -> None:
    """What ranks other than 0 print: nothing."""


def _check_shardable(name: str, cfg: dict, world: int) -> None:
    bs = cfg.get("batch_size")
    if not isinstance(bs, int) or isinstance(bs, bool):
        raise ArgumentError(f"train {name}: --nproc-per-node needs an example whose batches have a batch_size to "
                            f"split across the ranks; {name!r} has none, so it cannot be trained data-parallel")
    if bs % world:
        raise ArgumentError(f"train {name}: with {world} processes each batch of {bs} is split into {world} equal "
                            f"shards, so the batch size must be a multiple of {world}; pass --batch-size "
                            f"{max(world, bs - bs % world)} (or another multiple of {world})")


def _join_job(dev: str) -> tuple[Any, str]:
    """Join the job that launch_training started: backend mpi on the CPU, nccl on CUDA (each rank
    on the GPU of its local rank). Returns the group and this rank's device."""
    from .distributed import init_process_group
    from .distributed.group import current_group

    init_process_group("nccl" if dev.startswith("cuda") else "mpi")
    job = current_group("train")
    return job, job.device


def _shard(name: str, batch: Any, rank: int, world: int) -> Any:
    """This rank's contiguous 1/world of every tensor of the batch (a dict, list or tuple of
    tensors whose first dimensions are the batch)."""
    values = list(batch.values()) if isinstance(batch, dict) else list(batch) if isinstance(batch, (list, tuple)) \
        else [batch]
    sizes = {v.shape[0] if isinstance(v, tl.Tensor) and v.dim() > 0 else None for v in values}
    if None in sizes or len(sizes) != 1:
        got = ", ".join(f"{type(v).__name__}{tuple(v.shape) if isinstance(v, tl.Tensor) else ''}" for v in values)
        raise ArgumentError(f"train {name}: cannot split the example's batches across ranks: --nproc-per-node needs "
                            f"every entry of a batch to be a tensor whose first dimension is the batch, got {got}")
    n = sizes.pop()
    if n % world:
        raise ArgumentError(f"train {name}: a batch of {n} samples cannot be split into {world} equal shards; pass a "
                            f"--batch-size that is a multiple of {world} (and at most the training set's size)")
    part = n // world
    mine = [v[rank * part:(rank + 1) * part] for v in values]
    if isinstance(batch, dict):
        return dict(zip(batch.keys(), mine))
    return type(batch)(mine) if isinstance(batch, (list, tuple)) else mine[0]


def _mean_over_ranks(value: float, dev: str) -> float:
    """The ranks' average of a float (deterministic mode: the rank-order sum over the world size)."""
    from .distributed import ReduceOp, all_reduce

    t = tl.tensor([value], device=dev)
    all_reduce(t, ReduceOp.AVG)
    return t.item()


def _rank_digests(model: Any, dev: str) -> list[str]:
    """Every rank's SHA-256 of its parameters' bytes, in rank order (the replicas must agree)."""
    import numpy as np

    from .distributed import all_gather, get_world_size

    raw = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).digest()
    mine = tl.tensor(np.frombuffer(raw, np.uint8).astype(np.int64), device=dev)
    every = [tl.zeros(len(raw), dtype=tl.int64, device=dev) for _ in range(get_world_size())]
    all_gather(every, mine)
    return [bytes(e.numpy().astype(np.uint8)).hex() for e in every]


def _sync_buffers(model: Any) -> None:
    """Rank 0's buffers (BatchNorm's running statistics) on every rank, before evaluating."""
    from .distributed import broadcast

    for b in model.buffers():
        if b is not None:
            broadcast(b, 0)


def launch_training(name: str, train_argv: list[str], nproc_per_node: int, nnodes: int = 1, node_rank: int = 0,
                    master: str | None = None, device: str = "auto", config: str = "auto", tiny: bool = False,
                    batch_size: int | None = None, say: Callable[[str], None] = print) -> int:
    """``torchlean train NAME --nproc-per-node N ...``: check what can be checked here, then start
    the ranks with ``torchlean launch`` (each runs ``torchlean train NAME train_argv --device
    cpu|cuda`` as one rank). Returns the launcher's exit code."""
    from .distributed.launch import find_mpiexec, launch

    ex = examples.get(name)
    if nproc_per_node < 1 or nnodes < 1:
        raise ArgumentError(f"train: --nproc-per-node ({nproc_per_node}) and --nnodes ({nnodes}) must be >= 1")
    if config not in ("auto", "default", "cuda"):
        raise ArgumentError(f"train: --config must be auto, default or cuda, got {config!r}")
    if device.startswith("cuda:"):
        raise ArgumentError(f"train: --device {device} with --nproc-per-node: each rank uses the GPU of its local "
                            f"rank (cuda:0 ... cuda:{nproc_per_node - 1}); pass --device cuda")
    dev = pick_device(device, say)
    kind = "cuda" if dev.startswith("cuda") else "cpu"
    if kind == "cuda" and cuda_device_count() < nproc_per_node:
        raise DeviceError(f"train: --nproc-per-node {nproc_per_node} needs {nproc_per_node} GPUs (one per rank), "
                          f"this machine has {cuda_device_count()}")
    if kind == "cpu":
        if nnodes > 1:
            raise ArgumentError("train: on the CPU the ranks talk through MPI, which `torchlean train` starts on one "
                                "machine (mpiexec); for several machines use --device cuda (NCCL), or start the "
                                "ranks with your cluster's mpiexec")
        if find_mpiexec() is None:
            raise ArgumentError("train: --nproc-per-node on the CPU needs mpi4py and an mpiexec: pip install "
                                "'torchlean[distributed]'")
    _check_shardable(name, _config(ex, dev, config, tiny, batch_size=batch_size), nproc_per_node * nnodes)
    args = ["train", name, *train_argv, "--device", kind, "--rank-process"]
    return launch("torchlean", args, nproc_per_node, nnodes, node_rank, master,
                  "mpiexec" if kind == "cpu" else "auto", module=True)


def _precompile_cuda(dev: str, say: Callable[[str], None]) -> None:
    """Compile the CUDA kernels on background threads while the data and the model are made (a
    fresh machine has no compiled kernels on disk yet). Only a head start: a failure here leaves
    each kernel file to be compiled on first use, as without it."""
    try:
        from .kernels.cuda.launch import precompile

        precompile(int(dev.partition(":")[2] or 0))
    except Exception as exc:  # noqa: BLE001
        say(f"note: could not start compiling the CUDA kernels early ({type(exc).__name__}: {exc})")


def _precompile_cpu(name: str, say: Callable[[str], None]) -> None:
    """Helper processes compile the example's CPU kernels that a fresh machine has not cached yet
    while this process compiles those it calls first (warm.shares). Only a head start: without
    them every kernel compiles at its first call, as before."""
    try:
        from .kernels.cpu import warm

        warm.start(name)
    except Exception as exc:  # noqa: BLE001
        say(f"note: could not start compiling the CPU kernels early ({type(exc).__name__}: {exc})")


def _make_parent(path: str | None) -> None:
    if not path:
        return
    parent = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as e:
        raise ArgumentError(f"train: cannot create the folder {parent!r} for {path!r}: {e}") from None


def _run(ex, name, dev, cfg, log, plot, checkpoint, resume, mem_every, checkpoint_every, say, progress, deterministic,
         stop_at, data_cache, job=None):
    from .checkpoint import load_checkpoint, save_checkpoint
    from .data_cache import cached_data
    from .fast_kernels import get_options

    t_start = time.perf_counter()
    lead = job is None or job.rank == 0  # the process that prints, logs and saves
    where = dev if job is None else f"{job.world_size} processes ({job.backend}, {'GPUs' if dev != 'cpu' else 'CPU'})"
    say(f"torchlean train {name} on {where}: " + ", ".join(f"{k}={v}" for k, v in cfg.items()))
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
    net = model
    if job is not None:
        from .nn.parallel import DistributedDataParallel

        net = DistributedDataParallel(model)
    total = int(cfg["steps"])
    end = total if stop_at is None else max(start, min(total, int(stop_at)))
    before = ex.evaluate(model, data, cfg, dev) if start == 0 else None
    watch = MemoryWatch(dev, mem_every if lead else 0, say)
    bar = Progress(end, start, dev) if progress else None
    t_train = time.perf_counter()
    for step in range(start, end):
        batch = ex.get_batch(data, step, cfg, dev)
        if job is not None:
            batch = _shard(name, batch, job.rank, job.world_size)
        loss = ex.loss_fn(net, batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
        value = loss.item() if job is None else _mean_over_ranks(loss.item(), dev)
        losses.append(value)
        if not math.isfinite(value):
            say(f"step {step}: the loss is {value}; stopping")
            break
        if bar is not None:
            bar.update(step, value)
        watch(step + 1)
        if lead and checkpoint and checkpoint_every and (step + 1) % checkpoint_every == 0 and step + 1 < end:
            save_checkpoint(checkpoint, model, opt, sched, step + 1, {"losses": losses, "example": name})
    train_s = time.perf_counter() - t_train
    digests = None
    if job is not None:
        _sync_buffers(model)
        digests = _rank_digests(model, dev)
        if len(set(digests)) != 1:
            from .distributed import DistributedError

            raise DistributedError(f"train {name}: the ranks' weights differ after training (SHA-256 by rank: "
                                   f"{digests}); the replicas fell out of step")
        say(f"all {job.world_size} ranks hold identical weights (SHA-256 {digests[0][:16]}...)")
    after = ex.evaluate(model, data, cfg, dev)
    if lead and checkpoint:
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
    if job is not None:
        summary.update(world_size=job.world_size, backend=job.backend, rank_weight_sha256=digests)
    better = "lower" if ex.LOWER_IS_BETTER else "higher"
    say(f"done: loss {summary['first_loss']:.4g} -> {summary['final_loss']:.4g}; test {ex.METRIC} "
        f"{'' if before is None else f'{before.get(ex.METRIC):.4g} -> '}{after.get(ex.METRIC):.4g} ({better} is better); "
        f"{summary['steps_per_second']} steps/s; train {train_s:.1f} s, data {t_data:.1f} s, wall "
        f"{summary['wall_seconds']:.1f} s; peak memory {stats.peak_bytes / 2**20:.1f} MiB on {dev}")
    if not lead:
        return summary
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
