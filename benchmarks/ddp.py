"""Data-parallel GPT-2-small training steps: torchlean's DistributedDataParallel over NCCL against
PyTorch's, weak scaling (a fixed per-GPU batch: 8 sequences of T=1024, fp32, AdamW).

One measurement (run it under a launcher, one process per GPU):

    torchlean launch --nproc-per-node 2 benchmarks/ddp.py --side ours --out ddp_ours_2.json
    torchrun --nproc-per-node 2 benchmarks/ddp.py --side torch --out ddp_torch_2.json

The table (weak-scaling efficiency = step time at 1 GPU / step time at N GPUs):

    python benchmarks/ddp.py --table ddp_*.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import scale_models as SM  # noqa: E402


def measure(side: str, steps: int, warmup: int, small: bool) -> dict:
    fw = SM.framework(side)
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if side == "ours":
        import torchlean.distributed as dist
        from torchlean.nn.parallel import DistributedDataParallel as DDP

        fw.torch.cuda.set_device(local)
        dist.init_process_group("nccl")
        sync = fw.torch.cuda.synchronize
    else:
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP

        fw.torch.cuda.set_device(local)
        dist.init_process_group("nccl", device_id=fw.torch.device(f"cuda:{local}"))
        sync = fw.torch.cuda.synchronize
    rank, world = dist.get_rank(), dist.get_world_size()
    cfg = SM.CASES["gpt2"]["small" if small else "full"]
    device = f"cuda:{local}"
    modules, _, step = SM.build("gpt2", cfg, fw, device, seed=0)
    modules["model"] = DDP(modules["model"], device_ids=[local])
    opts = [fw.optim.AdamW(modules["model"].parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)]
    batches = SM.make_batches("gpt2", cfg, 2, seed=rank)
    tb = [{k: fw.torch.tensor(v, device=device) for k, v in b.items()} for b in batches]
    times = []
    for i in range(warmup + steps):
        sync()
        t0 = time.perf_counter()
        loss = step(modules, opts, tb[i % 2])
        sync()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    last = float(loss.item())
    times.sort()
    out = {"side": side, "world": world, "median_ms": 1e3 * times[len(times) // 2], "min_ms": 1e3 * times[0],
           "steps": steps, "loss": last, "cfg": cfg}
    dist.barrier()
    dist.destroy_process_group()
    return out if rank == 0 else {}


def table(paths: list[str]) -> str:
    rows = [json.load(open(p)) for p in paths]
    rows = [r for r in rows if r]
    base = {r["side"]: r["median_ms"] for r in rows if r["world"] == 1}
    lines = ["| GPUs | torchlean ms/step | torchlean efficiency | torch DDP ms/step | torch efficiency |",
             "|---:|---:|---:|---:|---:|"]
    for w in sorted({r["world"] for r in rows}):
        cells = [str(w)]
        for side in ("ours", "torch"):
            r = next((r for r in rows if r["world"] == w and r["side"] == side), None)
            if r is None:
                cells += ["-", "-"]
                continue
            eff = f"{100 * base[side] / r['median_ms']:.1f}%" if side in base else "-"
            cells += [f"{r['median_ms']:.1f}", eff]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--side", choices=("ours", "torch"), default="ours")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--small", action="store_true", help="the CPU-size GPT-2 (a smoke test)")
    ap.add_argument("--out", default=None, help="write rank 0's result (JSON) here")
    ap.add_argument("--table", nargs="*", default=None, help="print the markdown table of these results")
    args = ap.parse_args()
    if args.table is not None:
        print(table(args.table))
        return
    res = measure(args.side, args.steps, args.warmup, args.small)
    if res:
        print(json.dumps(res), flush=True)
        if args.out:
            with open(args.out, "w") as f:
                json.dump(res, f)


if __name__ == "__main__":
    main()
