"""Figures the CUDA issue asks for that are counts, not timings (run on a GPU machine).

    python3 -m benchmarks.gpu_extras [--steps 10000]

1. scatter_add of 65,536 values into one slot, 100 times: distinct results in fast (atomic)
   and in deterministic mode.
2. A leak run: forward, backward and SGD update of a small MLP for --steps steps; live bytes
   at steps 10, 100, 1000 and the last, and allocation/free counts after teardown.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

F32 = np.float32


def scatter_counts(device: str) -> dict[str, int]:
    from torchlean.runtime import Buffer, deterministic, zeros
    from torchlean.runtime import primitives as P

    k = 65_536
    vals = np.random.default_rng(1).normal(size=k).astype(F32)
    idx = np.zeros(k, np.int64)
    x, v = zeros(1, device), Buffer.from_numpy(vals, device)
    counts = {}
    for on in (False, True):
        with deterministic(on):
            counts["deterministic" if on else "fast"] = len(
                {P.scatter_add(x, v, 1, idx, k).to_numpy().tobytes() for _ in range(100)})
    return counts


def leak_run(device: str, steps: int) -> dict[str, object]:
    import torchlean as tl
    from torchlean.runtime import allocator_stats, collect_allocator
    from torchlean.testing.training import tanh_mlp_sgd_step

    collect_allocator()
    start = allocator_stats(device)
    rng = np.random.default_rng(0)
    x = tl.tensor(rng.normal(size=(64, 32)).astype(F32), device=device)
    y = tl.tensor(rng.normal(size=(64, 1)).astype(F32), device=device)
    params = [tl.tensor(rng.normal(0, 0.2, s).astype(F32), device=device, requires_grad=True)
              for s in ((64, 32), (64,), (1, 64), (1,))]
    marks = {10, 100, 1000, steps}
    live: dict[int, int] = {}
    t0 = time.perf_counter()
    for step in range(1, steps + 1):
        loss = tanh_mlp_sgd_step(x, y, params, 0.01)
        if step in marks:
            live[step] = allocator_stats(device).live_bytes - start.live_bytes
    last_loss = loss.item()
    wall = time.perf_counter() - t0
    del x, y, params, loss
    collect_allocator()
    end = allocator_stats(device)
    return {"live_bytes_at_step": live, "steps": steps, "wall_s": round(wall, 2), "last_loss": last_loss,
            "allocs": end.alloc_count - start.alloc_count, "frees": end.free_count - start.free_count,
            "live_after_teardown": end.live_bytes - start.live_bytes, "peak_bytes": end.peak_bytes}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m benchmarks.gpu_extras")
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args(argv)
    from torchlean.runtime import cuda_unavailable_reason

    if args.device.startswith("cuda") and cuda_unavailable_reason() is not None:
        print(f"gpu_extras: CUDA unavailable: {cuda_unavailable_reason()}", file=sys.stderr)
        return 2
    c = scatter_counts(args.device)
    print(f"scatter_add 65536 values -> 1 slot, 100 runs: {c['fast']} distinct result(s) in fast mode, "
          f"{c['deterministic']} in deterministic mode")
    r = leak_run(args.device, args.steps)
    flat = len(set(r["live_bytes_at_step"].values())) == 1
    print(f"leak run, {r['steps']} steps ({r['wall_s']} s): live bytes above start at steps "
          + ", ".join(f"{k}: {v}" for k, v in sorted(r["live_bytes_at_step"].items()))
          + f" -> {'flat' if flat else 'GROWING'}; after teardown allocs {r['allocs']} frees {r['frees']} "
          f"live {r['live_after_teardown']} (peak {r['peak_bytes']} bytes); final loss {r['last_loss']:.4g}")
    ok = c["deterministic"] == 1 and flat and r["allocs"] == r["frees"] and r["live_after_teardown"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
