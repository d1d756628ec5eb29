"""One rank of the distributed tests (tests/test_distributed_*.py start it under mpiexec or the
launcher): ``python tests/distributed_worker.py BACKEND CASE``. Each case asserts on every rank and
exits 0 when it holds; a failed assertion fails the job."""

from __future__ import annotations

import os
import signal
import sys
import time

import numpy as np

import torchlean as tl
import torchlean.distributed as dist
from torchlean.nn.parallel import DistributedDataParallel as DDP
from torchlean.utils.data import DataLoader, DistributedSampler, TensorDataset

BACKEND, CASE = sys.argv[1], sys.argv[2]
TIMEOUT = float(os.environ.get("DIST_TEST_TIMEOUT", "60"))
# gradients of a 2-rank average against 1-process full-batch gradients (float32, batch 8)
RTOL, ATOL = 1e-5, 1e-6


def dev() -> str:
    return "cpu" if BACKEND == "mpi" else f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"


def model(seed: int, hidden: int = 16) -> tl.nn.Module:
    tl.manual_seed(seed)
    return tl.nn.Sequential(tl.nn.Linear(5, hidden), tl.nn.Tanh(), tl.nn.Linear(hidden, 3)).to(dev())


def data(n: int = 8) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(123)
    return rng.standard_normal((n, 5)).astype(np.float32), rng.standard_normal((n, 3)).astype(np.float32)


def grads_of(m: tl.nn.Module) -> list[np.ndarray]:
    return [p.grad.numpy() for p in m.parameters()]


def case_collectives(rank: int, world: int) -> None:
    d = dev()
    t = tl.tensor([1.0 + rank, -2.0 * rank], device=d)
    dist.all_reduce(t)
    assert t.tolist() == [sum(1.0 + r for r in range(world)), sum(-2.0 * r for r in range(world))], t
    t = tl.tensor([1.0 + rank], device=d)
    dist.all_reduce(t, dist.ReduceOp.AVG)
    assert t.tolist() == [sum(1.0 + r for r in range(world)) / world], t
    for op, want in ((dist.ReduceOp.MAX, world - 1.0), (dist.ReduceOp.MIN, 0.0)):
        t = tl.tensor([float(rank)], device=d)
        dist.all_reduce(t, op)
        assert t.tolist() == [want], (op, t)
    t = tl.tensor([3 + rank], device=d)  # an int64 tensor
    dist.all_reduce(t)
    assert t.tolist() == [sum(3 + r for r in range(world))] and t.dtype == tl.int64, t
    t = tl.full((2, 2), float(rank), device=d)
    dist.broadcast(t, src=world - 1)
    assert t.numpy().tolist() == [[world - 1.0] * 2] * 2, t
    out = [tl.zeros(2, device=d) for _ in range(world)]
    dist.all_gather(out, tl.tensor([rank, rank + 0.5], device=d))
    assert [o.tolist() for o in out] == [[r, r + 0.5] for r in range(world)], out
    big = tl.zeros(2 * world, device=d)
    dist.all_gather_into_tensor(big, tl.tensor([rank, -rank], device=d).float())
    assert big.tolist() == [v for r in range(world) for v in (r, -r)], big
    o = tl.zeros(2, device=d)
    dist.reduce_scatter_tensor(o, tl.arange(2 * world, device=d).float() + rank)
    base = sum(range(world))
    assert o.tolist() == [2 * rank * world + base, (2 * rank + 1) * world + base], o
    o = tl.zeros(2, device=d)
    dist.reduce_scatter(o, [tl.full((2,), float(r + rank), device=d) for r in range(world)])
    assert o.tolist() == [float(sum(rank + r for r in range(world)))] * 2, o
    h = dist.all_reduce(tl.ones(3, device=d), async_op=True)
    assert h.wait()
    dist.barrier()
    # the sampler reads the group: disjoint shards that cover the data set
    ds = TensorDataset(tl.arange(10).float())
    s = DistributedSampler(ds, shuffle=True, seed=1)
    assert (s.num_replicas, s.rank) == (world, rank)
    mine = tl.tensor(list(s), device=d)
    every = [tl.zeros(len(s), dtype=tl.int64, device=d) for _ in range(world)]
    dist.all_gather(every, mine)
    seen = sorted(v for e in every for v in e.tolist())
    assert set(seen) == set(range(10)) and len(seen) == len(s) * world, seen
    # a wrong device is an error naming the call
    other = "cuda:0" if BACKEND == "mpi" else "cpu"
    if other == "cpu" or tl.cuda.is_available():
        try:
            dist.all_reduce(tl.ones(2, device=other))
        except tl.TorchLeanError as exc:
            assert "all_reduce" in str(exc) and BACKEND in str(exc), exc
        else:
            raise AssertionError("all_reduce took a tensor on the wrong device")


def case_deterministic(rank: int, world: int) -> None:
    tl.set_deterministic_reductions(True)
    rows = [np.random.default_rng(r).standard_normal(1000).astype(np.float32) * 10 ** np.float32(r % 3)
            for r in range(world)]
    want = rows[0].copy()
    for r in rows[1:]:
        want += r
    outs = []
    for _ in range(3):
        t = tl.tensor(rows[rank], device=dev())
        dist.all_reduce(t)
        outs.append(t.numpy())
    for o in outs:
        assert o.tobytes() == want.tobytes(), "deterministic all_reduce is not the rank-order sum"
    t = tl.tensor(rows[rank], device=dev())
    dist.all_reduce(t, dist.ReduceOp.AVG)
    assert t.numpy().tobytes() == (want * np.float32(1.0 / world)).tobytes()  # as torchlean's t / world
    o = tl.zeros(1000 // world, device=dev())
    if 1000 % world == 0:
        dist.reduce_scatter_tensor(o, tl.tensor(rows[rank], device=dev()))
    n = 1000 // world
    if 1000 % world == 0:
        assert o.numpy().tobytes() == want[rank * n:(rank + 1) * n].tobytes()
    # a DDP step repeats bit for bit
    runs = []
    for _ in range(2):
        m = model(rank)
        ddp = DDP(m, bucket_cap_mb=0.0002)
        x, y = data()
        half = 8 // world
        loss = ((ddp(tl.tensor(x[rank * half:(rank + 1) * half], device=dev()))
                 - tl.tensor(y[rank * half:(rank + 1) * half], device=dev())) ** 2).mean()
        loss.backward()
        runs.append(b"".join(g.tobytes() for g in grads_of(m)))
    assert runs[0] == runs[1], "a deterministic DDP step did not repeat bitwise"


def case_ddp(rank: int, world: int) -> None:
    m = model(seed=rank + 7)  # different on each rank: the wrap takes rank 0's
    ddp = DDP(m, bucket_cap_mb=0.0002)  # ~50 floats per bucket: several buckets
    assert len(ddp._ddp.buckets) > 1
    ref_model = model(7)  # rank 0's initial weights, rebuilt locally
    for p, q in zip(m.parameters(), ref_model.parameters()):
        assert np.array_equal(p.numpy(), q.numpy()), "wrap did not broadcast rank 0's parameters"
    assert list(ddp.state_dict())[0] == "module.0.weight" and ddp.module is m
    x, y = data()
    ds = TensorDataset(tl.tensor(x), tl.tensor(y))
    loader = DataLoader(ds, batch_size=8 // world, sampler=DistributedSampler(ds, shuffle=False))
    (xb, yb), = list(loader)
    loss = ((ddp(xb.to(dev())) - yb.to(dev())) ** 2).mean()
    loss.backward()
    got = grads_of(m)
    # 1-process full batch with the same weights; the sampler's shard of rank r is rows r, r+world, ...
    ref = model(7)
    loss = ((ref(tl.tensor(x, device=dev())) - tl.tensor(y, device=dev())) ** 2).mean()
    loss.backward()
    for a, b in zip(got, grads_of(ref)):
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL)
    # no_sync: micro-batch 1 accumulates locally, micro-batch 2 reduces the sum
    for p in m.parameters():
        p.grad = None
    half = 8 // world
    x1, y1 = data(8)
    x2, y2 = x1[::-1].copy(), y1[::-1].copy()
    mine = slice(rank * half, (rank + 1) * half)
    with ddp.no_sync():
        loss = ((ddp(tl.tensor(x1[mine], device=dev())) - tl.tensor(y1[mine], device=dev())) ** 2).mean()
        loss.backward()
    local = grads_of(m)
    loss = ((ddp(tl.tensor(x2[mine], device=dev())) - tl.tensor(y2[mine], device=dev())) ** 2).mean()
    loss.backward()
    ref7 = model(7)  # 1 process: the full batch of each micro-batch, accumulated
    for p in ref7.parameters():
        p.grad = None
    for xx, yy in ((x1, y1), (x2, y2)):
        ((ref7(tl.tensor(xx, device=dev())) - tl.tensor(yy, device=dev())) ** 2).mean().backward()
    for a, b in zip(grads_of(m), grads_of(ref7)):
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL)
    assert not all(np.allclose(a, b) for a, b in zip(local, grads_of(ref7))), "no_sync reduced anyway"
    # an optimizer step keeps the replicas equal
    opt = tl.optim.SGD(m.parameters(), lr=0.1)
    opt.step()
    w = m[0].weight.detach().clone()
    every = [tl.zeros(*w.shape, device=dev()) for _ in range(world)]
    dist.all_gather(every, w)
    assert all(np.array_equal(e.numpy(), every[0].numpy()) for e in every)
    # find_unused_parameters: a branch the forward skips
    tl.manual_seed(0)
    two = tl.nn.ModuleDict({"a": tl.nn.Linear(3, 2), "b": tl.nn.Linear(3, 2)}).to(dev())

    class Pick(tl.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = two

        def forward(self, x):
            return self.m["a"](x)

    ddp2 = DDP(Pick(), find_unused_parameters=True)
    ddp2(tl.ones(2, 3, device=dev())).sum().backward()
    assert two["a"].weight.grad is not None


def case_mismatch(rank: int, world: int) -> None:
    m = model(0, hidden=16 if rank == 0 else 17)
    try:
        DDP(m)
    except dist.DistributedError as exc:
        msg = str(exc)
        assert "DistributedDataParallel" in msg and "'0.weight'" in msg and "(16, 5)" in msg and "(17, 5)" in msg, msg
        print(f"rank {rank}: {msg}", flush=True)
    else:
        raise AssertionError("DDP accepted models of different shapes")


def case_invariant(rank: int, world: int) -> None:
    """World-size invariance (deterministic mode): N ranks with b samples each give, bit for bit, the
    weights of one process that accumulates the same N micro-batches of b in rank order and divides
    the gradients by N (what the rank-order AVG computes), over several SGD steps."""
    tl.set_deterministic_reductions(True)
    b = 4
    x, y = data(b * world)
    m, ref = model(7), model(7)
    ddp = DDP(m, bucket_cap_mb=0.0002)
    opt, ref_opt = tl.optim.SGD(m.parameters(), lr=0.1, momentum=0.9), tl.optim.SGD(ref.parameters(), lr=0.1,
                                                                                     momentum=0.9)
    for _ in range(3):
        mine = slice(rank * b, (rank + 1) * b)
        opt.zero_grad()
        ((ddp(tl.tensor(x[mine], device=dev())) - tl.tensor(y[mine], device=dev())) ** 2).mean().backward()
        opt.step()
        ref_opt.zero_grad()
        for r in range(world):  # one process: the ranks' micro-batches in rank order
            part = slice(r * b, (r + 1) * b)
            ((ref(tl.tensor(x[part], device=dev())) - tl.tensor(y[part], device=dev())) ** 2).mean().backward()
        with tl.no_grad():
            for p in ref.parameters():
                p.grad.div_(world)
        ref_opt.step()
        for p, q in zip(m.parameters(), ref.parameters()):
            assert np.array_equal(p.numpy(), q.numpy()), "N ranks and one process with N micro-batches differ"
    tl.set_deterministic_reductions(False)


def case_hang(rank: int, world: int) -> None:
    """Rank 1 stops (as a hung process does); rank 0's next collective must fail within the timeout."""
    dist.barrier()
    if rank == 1:
        os.kill(os.getpid(), signal.SIGSTOP)
    t0 = time.monotonic()
    try:
        dist.all_reduce(tl.ones(4, device=dev()))
        tl.ones(1, device=dev()).item() if BACKEND == "nccl" else None
        dist.all_reduce(tl.ones(4, device=dev()))
    except dist.DistTimeoutError as exc:
        print(f"rank 0 gave up after {time.monotonic() - t0:.1f} s: {exc}", flush=True)
        sys.stdout.flush()
        os._exit(17)


def case_ddp_hang(rank: int, world: int) -> None:
    """Rank 1 stops after wrapping; rank 0's backward hands the gradient all-reduce over in stream
    order (NCCL), so the watchdog must end it, and rank 0's next DDP call must raise."""
    m = model(rank)
    ddp = DDP(m)
    x, y = data()
    dist.barrier()
    if rank == 1:
        os.kill(os.getpid(), signal.SIGSTOP)
    t0 = time.monotonic()
    try:
        ((ddp(tl.tensor(x, device=dev())) - tl.tensor(y, device=dev())) ** 2).mean().backward()
        m[0].weight.grad.numpy()  # a host sync: returns once the watchdog has aborted the collective
        ddp(tl.tensor(x, device=dev()))
    except dist.DistTimeoutError as exc:
        print(f"rank 0 gave up after {time.monotonic() - t0:.1f} s: {exc}", flush=True)
        sys.stdout.flush()
        os._exit(17)


def case_kill(rank: int, world: int) -> None:
    """Rank 1 dies mid-step; rank 0 must not hang."""
    dist.barrier()
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        for _ in range(100):
            dist.all_reduce(tl.ones(4, device=dev()))
            time.sleep(0.01)
    except dist.DistTimeoutError as exc:
        print(f"rank 0: {exc}", flush=True)
        os._exit(17)


def case_repeat100(rank: int, world: int) -> None:
    """100 deterministic DDP steps with AdamW on a small MLP: prints a digest of the final parameters
    (the test runs the job three times and compares the digests)."""
    import hashlib

    tl.set_deterministic_reductions(True)
    m = model(rank, hidden=256)
    ddp = DDP(m, bucket_cap_mb=0.05)
    opt = tl.optim.AdamW(ddp.parameters(), lr=1e-3)
    rng = np.random.default_rng(1000 + rank)
    for _ in range(100):
        x = tl.tensor(rng.standard_normal((64, 5)).astype(np.float32), device=dev())
        y = tl.tensor(rng.standard_normal((64, 3)).astype(np.float32), device=dev())
        opt.zero_grad()
        loss = ((ddp(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
    digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in m.parameters())).hexdigest()
    print(f"rank {rank}: digest {digest}", flush=True)


def _train_steps(ddp: DDP, opt, steps: range, rank: int) -> None:
    """Deterministic DDP steps: step s of rank r sees data seeded by (r, s), so a resumed run sees
    exactly the batches of an uninterrupted one."""
    for s in steps:
        rng = np.random.default_rng([rank, s])
        x = tl.tensor(rng.standard_normal((8, 5)).astype(np.float32), device=dev())
        y = tl.tensor(rng.standard_normal((8, 3)).astype(np.float32), device=dev())
        opt.zero_grad()
        ((ddp(x) - y) ** 2).mean().backward()
        opt.step()


def _fresh(seed: int) -> tuple[DDP, object]:
    ddp = DDP(model(seed), bucket_cap_mb=0.0002)
    return ddp, tl.optim.AdamW(ddp.parameters(), lr=1e-2)


def _state_bytes(ddp: DDP, opt) -> bytes:
    """The parameters and the optimizer's state tensors, as bytes (bitwise comparison)."""
    parts = [p.detach().numpy().tobytes() for p in ddp.module.parameters()]
    for st in opt.state_dict()["state"].values():
        parts += [v.numpy().tobytes() if isinstance(v, tl.Tensor) else repr(v).encode() for _, v in sorted(st.items())]
    return b"".join(parts)


def case_checkpoint(rank: int, world: int) -> None:
    """Train K steps, rank 0 saves model + optimizer, barrier, every rank loads into fresh replicas
    (differently initialised, so a load that did nothing would show) and trains M more: the same
    bits as K + M uninterrupted steps. Three ways: torchlean.save of the DDP state dict (``module.``
    keys) loaded into the DDP model; the same file loaded into the bare module before wrapping
    (consume_prefix_in_state_dict_if_present); save_checkpoint / load_checkpoint of the DDP model."""
    from torchlean.checkpoint import load_checkpoint, save_checkpoint
    from torchlean.nn.modules.utils import consume_prefix_in_state_dict_if_present

    tl.set_deterministic_reductions(True)
    K, M = 3, 4
    folder = os.environ["DIST_TEST_DIR"]
    ref, ref_opt = _fresh(11)
    _train_steps(ref, ref_opt, range(K + M), rank)
    want = _state_bytes(ref, ref_opt)

    ddp, opt = _fresh(11)
    _train_steps(ddp, opt, range(K), rank)
    sd_path, ck_path = os.path.join(folder, "ddp.pt"), os.path.join(folder, "ddp.ckpt")
    if rank == 0:
        assert list(ddp.state_dict())[0] == "module.0.weight"
        tl.save({"model": ddp.state_dict(), "optimizer": opt.state_dict(), "step": K}, sd_path)
        save_checkpoint(ck_path, ddp, opt, step=K)
    dist.barrier()

    # 1: torchlean.load, into the DDP model
    got, got_opt = _fresh(99)
    ck = tl.load(sd_path, map_location=dev())
    got.load_state_dict(ck["model"])
    got_opt.load_state_dict(ck["optimizer"])
    _train_steps(got, got_opt, range(ck["step"], K + M), rank)
    assert _state_bytes(got, got_opt) == want, "resume into the DDP model differs from the uninterrupted run"

    # 2: the same file into the bare module, before wrapping (as torch allows)
    ck = tl.load(sd_path, map_location=dev())
    sd = ck["model"]
    consume_prefix_in_state_dict_if_present(sd, "module.")
    assert list(sd)[0] == "0.weight", list(sd)
    bare = model(99)
    bare.load_state_dict(sd)
    got = DDP(bare, bucket_cap_mb=0.0002)
    got_opt = tl.optim.AdamW(got.parameters(), lr=1e-2)
    got_opt.load_state_dict(ck["optimizer"])
    _train_steps(got, got_opt, range(K, K + M), rank)
    assert _state_bytes(got, got_opt) == want, "resume into the bare module differs from the uninterrupted run"

    # 3: save_checkpoint / load_checkpoint
    got, got_opt = _fresh(99)
    meta = load_checkpoint(ck_path, got, got_opt)
    assert meta["step"] == K
    _train_steps(got, got_opt, range(K, K + M), rank)
    assert _state_bytes(got, got_opt) == want, "load_checkpoint resume differs from the uninterrupted run"
    # the replicas agree too
    digest = tl.tensor(np.frombuffer(__import__("hashlib").sha256(want).digest(), np.uint8).astype(np.int64),
                       device=dev())
    every = [tl.zeros(32, dtype=tl.int64, device=dev()) for _ in range(world)]
    dist.all_gather(every, digest)
    assert all(e.tolist() == every[0].tolist() for e in every), "the ranks' resumed states differ"


def init_hang() -> None:
    """Rank 1 receives NCCL's id but never joins the communicator (as a rank that hangs or dies
    between the id exchange and ncclCommInitRank): every rank's init must fail within the timeout."""
    if os.environ.get("RANK", os.environ.get("OMPI_COMM_WORLD_RANK")) == "1":
        import cupy.cuda.nccl as nccl

        nccl.NcclCommunicator = lambda *args: time.sleep(3600)
    t0 = time.monotonic()
    try:
        dist.init_process_group(BACKEND, timeout=TIMEOUT)
    except dist.DistTimeoutError as exc:
        print(f"rank {os.environ.get('RANK')} gave up after {time.monotonic() - t0:.1f} s: {exc}", flush=True)
        sys.stdout.flush()
        os._exit(17)
    raise AssertionError("init_process_group returned although a rank never joined")


def main() -> None:
    if BACKEND == "nccl":
        tl.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    if CASE == "init_hang":
        init_hang()
    dist.init_process_group(BACKEND, timeout=TIMEOUT)
    rank, world = dist.get_rank(), dist.get_world_size()
    for name in CASE.split(","):
        globals()[f"case_{name}"](rank, world)
    dist.destroy_process_group()
    print(f"rank {rank}: {CASE} ok", flush=True)


if __name__ == "__main__":
    main()
