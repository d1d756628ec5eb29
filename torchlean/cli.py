"""The ``torchlean`` command: ``info``, ``check``, ``demo``, ``list``, ``train`` and ``launch``."""

from __future__ import annotations

import argparse
import math
import os
import sys
import time


def _info(args: argparse.Namespace) -> int:
    import numpy as np
    import scipy

    import torchlean as tl
    from .runtime.device import cuda_unavailable_reason

    reason = cuda_unavailable_reason()
    print(f"torchlean {tl.__version__}  (numpy {np.__version__}, scipy {scipy.__version__}, python {sys.version.split()[0]})")
    print("backends:")
    print("  cpu   available (NumPy/SciPy)")
    if reason is None:
        import cupy

        for i in range(cupy.cuda.runtime.getDeviceCount()):
            props = cupy.cuda.runtime.getDeviceProperties(i)
            name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
            print(f"  cuda:{i} available: {name}, {props['totalGlobalMem'] / 2**30:.0f} GiB, "
                  f"{props['multiProcessorCount']} SMs (CuPy {cupy.__version__}, "
                  f"CUDA runtime {cupy.cuda.runtime.runtimeGetVersion()})")
    else:
        print(f"  cuda  unavailable: {reason}")
    print(f"TF32 in CUDA matmuls: {'allowed' if tl.runtime.allow_tf32() else 'off'}  (env TORCHLEAN_ALLOW_TF32)")
    print(f"deterministic reductions: {'on' if tl.deterministic_reductions() else 'off'}"
          f"  (env TORCHLEAN_CUDA_DETERMINISTIC_REDUCTIONS)")
    print(tl.format_allocator_stats(tl.allocator_stats("cpu")))
    if reason is None:
        print(tl.format_allocator_stats(tl.allocator_stats("cuda")))
    return 0


def _check(args: argparse.Namespace) -> int:
    from .check import SAMPLES, format_rows, run_check
    from .runtime.device import canonical_device, cuda_unavailable_reason

    if args.device == "all":
        devices = ["cpu"] + (["cuda:0"] if cuda_unavailable_reason() is None else [])
    else:
        devices = [canonical_device(args.device, "check")]
    if any(d.startswith("cuda") for d in devices) and cuda_unavailable_reason() is not None:
        print(f"torchlean check: CUDA unavailable: {cuda_unavailable_reason()}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    rows = run_check(devices, SAMPLES if args.samples is None else args.samples, args.seed)
    print(format_rows(rows))
    print(f"({time.perf_counter() - t0:.1f} s on {', '.join(devices)}; seed {args.seed})")
    return 0 if all(r.ok for r in rows) else 1


def _demo(args: argparse.Namespace) -> int:
    """Fit y = sin(3x) + 0.5 x^2 with a 1-64-64-1 tanh MLP by SGD with momentum, from the front end."""
    import math

    import torchlean as tl
    import torchlean.nn.functional as F

    dev = args.device
    tl.manual_seed(args.seed)
    xs = tl.rand(512, 1, device=dev) * 4.0 - 2.0
    x_np = xs.numpy()
    ys = tl.tensor(__import__("numpy").sin(3 * x_np) + 0.5 * x_np**2, device=dev)

    def init(fan_in: int, fan_out: int):
        bound = 1.0 / math.sqrt(fan_in)
        w = (tl.rand(fan_out, fan_in, device=dev) * (2 * bound) - bound).detach().requires_grad_()
        b = (tl.rand(fan_out, device=dev) * (2 * bound) - bound).detach().requires_grad_()
        return w, b

    params = [*init(1, 64), *init(64, 64), *init(64, 1)]
    vel = [tl.zeros(*p.shape, device=dev) for p in params]
    t0 = time.perf_counter()
    first = None
    for step in range(args.steps + 1):
        w1, b1, w2, b2, w3, b3 = params
        h = F.linear(xs, w1, b1).tanh()
        h = F.linear(h, w2, b2).tanh()
        loss = F.mse_loss(F.linear(h, w3, b3), ys)
        for p in params:
            p.grad = None
        loss.backward()
        with tl.no_grad():
            for p, v in zip(params, vel):
                v.mul_(0.9).add_(p.grad)
                p.sub_(v, alpha=args.lr)
        value = loss.item()
        first = value if first is None else first
        if step % max(args.steps // 10, 1) == 0:
            print(f"step {step:5d}  loss {value:.5f}  {tl.format_allocator_stats(tl.allocator_stats(dev))}")
    dt = time.perf_counter() - t0
    print(f"loss {first:.4f} -> {value:.5f} in {args.steps} steps, {args.steps / dt:.0f} steps/s on {dev}")
    return 0 if value < 0.25 * first else 1


def _list(args: argparse.Namespace) -> int:
    from . import examples

    for name, desc in examples.available():
        print(f"{name:10s} {desc}")
    return 0


# the options of `torchlean train` that the launching process keeps to itself (the ranks get the rest)
_LAUNCH_ONLY = {"example", "device", "nproc_per_node", "nnodes", "node_rank", "master", "rank_process"}


def _rank_argv(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    """The options of this `torchlean train` call, as a command line for each rank."""
    out: list[str] = []
    for action in parser._actions:  # (argparse has no public list of a parser's options)
        dest = action.dest
        if not action.option_strings or dest in _LAUNCH_ONLY or dest == "help":
            continue
        value = getattr(args, dest, None)
        if action.nargs == 0 and action.const is True:  # a store_true flag
            out += [action.option_strings[0]] if value else []
        elif value is not None and value != action.default:
            out += [action.option_strings[0], str(value)]
    return out


def _train(args: argparse.Namespace) -> int:
    from .train import launch_training, train

    if args.nproc_per_node is not None and not args.rank_process:
        return launch_training(args.example, _rank_argv(args.train_parser, args), args.nproc_per_node, args.nnodes,
                               args.node_rank, args.master, device=args.device, config=args.config, tiny=args.tiny,
                               batch_size=args.batch_size)
    summary = train(args.example, device=args.device, steps=args.steps, batch_size=args.batch_size, lr=args.lr,
                    seed=args.seed, deterministic=args.deterministic, fast_kernels=args.fast_kernels,
                    fast_gpu_matmul_precision=args.fast_gpu_matmul_precision, config=args.config, log=args.log,
                    plot=args.plot, checkpoint=args.checkpoint, resume=args.resume, mem_every=args.mem_every, tiny=args.tiny,
                    checkpoint_every=args.checkpoint_every, stop_at=args.stop_at, data_cache=not args.no_data_cache,
                    distributed=args.rank_process, precompile=True)
    return 0 if summary["final_loss"] is not None and math.isfinite(summary["final_loss"]) else 1


def _end_now_if_compiling(rc: int) -> None:
    """`torchlean train` has finished; if kernel files are still compiling in the background (a
    fresh machine's short run), end the process now instead of waiting for them at exit, tens of
    seconds after the summary. The entries compiled so far are in the disk cache, the rest compile
    at their first use in a later run (an entry is written whole or not at all). os._exit skips
    the interpreter's shutdown, whose joining of those threads is the wait (daemon threads would
    crash it while they are inside NVRTC or CuPy), so output is flushed first; `train` has closed
    its logs and checkpoints."""
    launch = sys.modules.get("torchlean.kernels.cuda.launch")
    if launch is not None and launch.compiling():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)


def _launch(args: argparse.Namespace) -> int:
    from .distributed.launch import launch

    return launch(args.script, args.args, args.nproc_per_node, args.nnodes, args.node_rank, args.master, args.launcher)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="torchlean", description=__import__("torchlean").__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_info = sub.add_parser("info", help="version, backends (and why one is unavailable), modes, allocator")
    p_info.set_defaults(fn=_info)
    p_check = sub.add_parser("check", help="run every primitive against its float64 spec and contract")
    p_check.add_argument("--device", default="all", help="cpu, cuda, cuda:N or all (default: every available)")
    p_check.add_argument("--samples", type=int, default=None,
                         help="random cases per primitive (plus edge cases; default 200)")
    p_check.add_argument("--seed", type=int, default=0)
    p_check.set_defaults(fn=_check)
    p_demo = sub.add_parser("demo", help="train a small MLP regression through the tape")
    p_demo.add_argument("--device", default="cpu")
    p_demo.add_argument("--steps", type=int, default=500)
    p_demo.add_argument("--lr", type=float, default=0.01)
    p_demo.add_argument("--seed", type=int, default=0)
    p_demo.set_defaults(fn=_demo)
    p_list = sub.add_parser("list", help="the examples `torchlean train` knows")
    p_list.set_defaults(fn=_list)
    p_train = sub.add_parser("train", help="train an example (embedded data) with progress, logs and checkpoints")
    p_train.add_argument("example", help="an example name (see `torchlean list`)")
    p_train.add_argument("--device", default="auto", help="auto (CUDA when available), cpu, cuda or cuda:N")
    p_train.add_argument("--config", choices=("auto", "default", "cuda"), default="auto",
                         help="the example's settings: auto = its GPU schedule on CUDA, its CPU defaults elsewhere")
    p_train.add_argument("--steps", type=int, default=None)
    p_train.add_argument("--batch-size", type=int, default=None)
    p_train.add_argument("--lr", type=float, default=None)
    p_train.add_argument("--seed", type=int, default=None)
    p_train.add_argument("--deterministic", action="store_true", help="fixed-order reductions (bitwise repeatable)")
    p_train.add_argument("--fast-kernels", action="store_true",
                         help="route linear, 2-D matmul and mse_loss through the fused fast kernels")
    p_train.add_argument("--fast-gpu-matmul-precision", choices=("fp32", "fp64"), default="fp32",
                         help="fast-kernel matmuls in float32 (SGEMM) or float64 (DGEMM, rounded once to float32)")
    p_train.add_argument("--log", default=None, help="write a JSON training log here")
    p_train.add_argument("--plot", default=None, help="write a PNG loss curve here (needs matplotlib)")
    p_train.add_argument("--checkpoint", default=None, help="save a checkpoint here at the end (atomically)")
    p_train.add_argument("--checkpoint-every", type=int, default=0, help="also save every N steps")
    p_train.add_argument("--resume", default=None, help="continue from this checkpoint")
    p_train.add_argument("--stop-at", type=int, default=None,
                         help="stop after this step of the schedule (with --checkpoint: continue later with --resume)")
    p_train.add_argument("--mem-every", type=int, default=0, help="print the allocator line every N steps")
    p_train.add_argument("--tiny", action="store_true", help="tiny sizes (a smoke test)")
    p_train.add_argument("--no-data-cache", action="store_true",
                         help="generate the data set afresh and do not store it (default: reuse it from "
                              "$TORCHLEAN_DATA_CACHE or ~/.cache/torchlean/datasets; TORCHLEAN_DATA_CACHE=off also "
                              "turns the cache off)")
    p_train.add_argument("--nproc-per-node", type=int, default=None,
                         help="train data-parallel in N processes (one per GPU with --device cuda, NCCL; MPI on the "
                              "CPU): each takes 1/N of every batch, rank 0 prints, logs and saves")
    p_train.add_argument("--nnodes", type=int, default=1, help="machines in the job (CUDA only; run on each)")
    p_train.add_argument("--node-rank", type=int, default=0, help="this machine's index in [0, nnodes)")
    p_train.add_argument("--master", default=None, help="ADDR:PORT of node 0 (required with --nnodes > 1)")
    p_train.add_argument("--rank-process", action="store_true", help=argparse.SUPPRESS)  # (set by the launcher)
    p_train.set_defaults(fn=_train, train_parser=p_train)
    p_launch = sub.add_parser("launch", help="start a data-parallel job's processes (torchrun's role)")
    p_launch.add_argument("--nproc-per-node", type=int, required=True, help="processes on this machine (one per GPU)")
    p_launch.add_argument("--nnodes", type=int, default=1, help="machines in the job (run the command on each)")
    p_launch.add_argument("--node-rank", type=int, default=0, help="this machine's index in [0, nnodes)")
    p_launch.add_argument("--master", default=None, help="ADDR:PORT of node 0 (required with --nnodes > 1)")
    p_launch.add_argument("--launcher", choices=("auto", "mpiexec", "env"), default="auto",
                          help="auto: mpiexec on one machine when installed, else plain processes")
    p_launch.add_argument("script")
    p_launch.add_argument("args", nargs=argparse.REMAINDER)
    p_launch.set_defaults(fn=_launch)
    args = parser.parse_args(argv)
    try:
        rc = args.fn(args)
    except Exception as exc:  # noqa: BLE001 - a CLI prints the error, not a traceback
        from .errors import TorchLeanError

        if isinstance(exc, TorchLeanError):
            print(f"torchlean {args.cmd}: {exc}", file=sys.stderr)
            return 2
        raise
    if argv is None and args.cmd == "train":  # the command itself, not a caller that goes on running
        _end_now_if_compiling(rc)
    return rc


if __name__ == "__main__":
    sys.exit(main())
