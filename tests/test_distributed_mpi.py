"""torchlean.distributed on the CPU: 2- and 3-process MPI jobs (tests/distributed_worker.py under
mpiexec), the launcher, and what needs no second process (errors, the hook point, the rendezvous).

The MPI jobs need mpi4py and an mpiexec (``pip install -e '.[distributed]'``, which CI does); they
skip, saying so, only where those are absent. Every job runs under a hard subprocess timeout."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import torchlean as tl
import torchlean.distributed as dist
from torchlean.distributed.launch import find_mpiexec, free_port
from torchlean.distributed.rendezvous import share_from_rank0

ROOT = Path(__file__).resolve().parents[1]
WORKER = str(ROOT / "tests" / "distributed_worker.py")
MPIEXEC = find_mpiexec()
needs_mpi = pytest.mark.skipif(MPIEXEC is None, reason="mpi4py or mpiexec not installed (pip install -e '.[distributed]')")


def run(cmd: list[str], timeout: float = 90, **env: str) -> subprocess.CompletedProcess:
    full_env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1", **env)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env, cwd=ROOT)


def mpi_job(n: int, cases: str, timeout: float = 90, **env: str) -> subprocess.CompletedProcess:
    return run([MPIEXEC, "-n", str(n), sys.executable, WORKER, "mpi", cases], timeout, **env)


# -- 2- and 3-process MPI jobs ---------------------------------------------------------------------
@needs_mpi
def test_two_ranks_collectives_ddp_no_sync_sampler_and_shape_check():
    r = mpi_job(2, "collectives,deterministic,ddp,mismatch")
    assert r.returncode == 0, r.stdout + r.stderr
    for rank in (0, 1):
        assert f"rank {rank}: collectives,deterministic,ddp,mismatch ok" in r.stdout
        # the wrap-time check names the first mismatch on every rank
        assert f"rank {rank}: DistributedDataParallel: the ranks' models differ: parameter '0.weight' has shape " \
               f"(16, 5) on rank 0 but (17, 5) on rank 1" in r.stdout


@needs_mpi
def test_three_ranks_deterministic_sum_is_the_rank_order_sum():
    r = mpi_job(3, "deterministic,collectives")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("deterministic,collectives ok") == 3


@needs_mpi
@pytest.mark.parametrize("n", [2, 3])
def test_world_size_invariant_steps_equal_one_process_accumulating_the_micro_batches(n):
    r = mpi_job(n, "invariant")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("invariant ok") == n


@needs_mpi
def test_mpi_over_the_network_transport():
    # what two machines would use: MPICH's network module instead of shared memory between local
    # ranks (MPIR_CVAR_NOLOCAL), Open MPI's TCP transport (btl self,tcp)
    r = mpi_job(2, "collectives,deterministic,ddp", MPIR_CVAR_NOLOCAL="1", OMPI_MCA_btl="self,tcp")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("collectives,deterministic,ddp ok") == 2


@needs_mpi
def test_deterministic_100_ddp_steps_repeat_bitwise():
    digests = []
    for _ in range(3):
        r = mpi_job(2, "repeat100")
        assert r.returncode == 0, r.stdout + r.stderr
        lines = sorted(re.findall(r"rank \d+: digest [0-9a-f]{64}", r.stdout))  # (ranks' lines may interleave)
        assert len(lines) == 2 and lines[0].split()[-1] == lines[1].split()[-1], r.stdout
        digests.append(lines)
    assert digests[0] == digests[1] == digests[2], digests


@needs_mpi
def test_checkpoint_saved_by_rank0_resumes_bitwise_on_every_rank(tmp_path):
    r = mpi_job(2, "checkpoint", DIST_TEST_DIR=str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("checkpoint ok") == 2, r.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ddp.ckpt", "ddp.pt"]  # rank 0's files, nothing else


@needs_mpi
def test_a_hung_rank_makes_the_other_fail_within_the_timeout():
    t0 = time.monotonic()
    r = mpi_job(2, "hang", timeout=60, DIST_TEST_TIMEOUT="3")
    took = time.monotonic() - t0
    assert r.returncode == 17, r.stdout + r.stderr  # rank 0's exit after its DistTimeoutError
    assert "within the process group's timeout of 3 s" in r.stdout and "all_reduce" in r.stdout, r.stdout
    assert took < 40, took


@needs_mpi
def test_a_killed_rank_ends_the_job():
    r = mpi_job(2, "kill", timeout=60, DIST_TEST_TIMEOUT="3")
    assert r.returncode != 0, r.stdout + r.stderr


# -- the launcher ------------------------------------------------------------------------------------
SCRIPT = """
import os, sys, time
rank = int(os.environ["RANK"])
print(f"rank {rank} of {os.environ['WORLD_SIZE']} local {os.environ['LOCAL_RANK']} {sys.argv[1:]}", flush=True)  # one write
if rank == 1 and "--fail" in sys.argv:
    sys.exit(5)
if "--fail" in sys.argv:
    time.sleep(60)
"""


def launch(tmp_path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    return run([sys.executable, "-m", "torchlean", "launch", *args[:-1], str(script), *args[-1].split()], timeout)


def test_launch_env_sets_the_variables(tmp_path):
    r = launch(tmp_path, "--nproc-per-node", "2", "--launcher", "env", "a --b")
    assert r.returncode == 0, r.stderr
    assert "rank 0 of 2 local 0 ['a', '--b']" in r.stdout and "rank 1 of 2 local 1 ['a', '--b']" in r.stdout


def test_launch_env_failure_stops_the_others(tmp_path):
    t0 = time.monotonic()
    r = launch(tmp_path, "--nproc-per-node", "2", "--launcher", "env", "--fail")
    assert r.returncode == 5, r.stdout + r.stderr
    assert "rank 1 (local rank 1) failed with exit code 5; stopping the other processes" in r.stderr
    assert time.monotonic() - t0 < 30  # rank 0 would sleep 60 s


@needs_mpi
def test_launch_mpiexec_failure_ends_the_job(tmp_path):
    t0 = time.monotonic()
    r = launch(tmp_path, "--nproc-per-node", "2", "--launcher", "mpiexec", "--fail")
    assert r.returncode != 0 and time.monotonic() - t0 < 30  # rank 0 would sleep 60 s
    assert "rank 1 failed (exit code 5); ending the job" in r.stderr and "the job failed" in r.stderr, r.stderr


@needs_mpi
def test_launch_runs_a_ddp_job(tmp_path):
    r = run([sys.executable, "-m", "torchlean", "launch", "--nproc-per-node", "2", WORKER, "mpi", "collectives"], 90)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("collectives ok") == 2


def test_launch_argument_errors(tmp_path):
    r = run([sys.executable, "-m", "torchlean", "launch", "--nproc-per-node", "2", str(tmp_path / "nope.py")])
    assert r.returncode == 2 and "no such script" in r.stderr
    r = launch(tmp_path, "--nproc-per-node", "2", "--nnodes", "2", "")
    assert r.returncode == 2 and "--nnodes > 1 needs --master" in r.stderr
    r = launch(tmp_path, "--nproc-per-node", "0", "")
    assert r.returncode == 2 and "--nproc-per-node" in r.stderr


# -- in this process -----------------------------------------------------------------------------
def test_calls_without_a_process_group_name_themselves():
    assert not dist.is_initialized() and dist.is_available()
    for call, fn in (("all_reduce", lambda: dist.all_reduce(tl.ones(2))), ("get_rank", dist.get_rank),
                     ("barrier", dist.barrier), ("broadcast", lambda: dist.broadcast(tl.ones(2), 0))):
        with pytest.raises(dist.DistributedError, match=f"^{call}: the default process group has not been initialized"):
            fn()
    with pytest.raises(dist.DistributedError, match="unknown backend 'gloo'"):
        dist.init_process_group("gloo")


def test_mpi_backend_outside_mpiexec_with_a_larger_world_is_a_clear_error():
    code = ("import torchlean.distributed as d\n"
            "try:\n    d.init_process_group('mpi')\nexcept d.DistributedError as e:\n    print(e)\n")
    if MPIEXEC is None:
        pytest.skip("mpi4py not installed")
    r = run([sys.executable, "-c", code], 60, RANK="0", WORLD_SIZE="2", MASTER_PORT="1")
    assert "backend 'mpi' sees 1 MPI process(es) but the job has 2: start the processes with mpiexec" in r.stdout, r


def test_post_accumulate_grad_hook_sees_the_accumulated_grad():
    w = tl.ones(3, requires_grad=True)
    seen = []
    h = w.register_post_accumulate_grad_hook(lambda t: seen.append(t.grad.tolist()))
    (w * 2).sum().backward()
    (w * w).sum().backward()  # w used twice: one call, after both contributions
    assert seen == [[2.0] * 3, [4.0] * 3]
    h.remove()
    (w * 3).sum().backward()
    assert len(seen) == 2
    with pytest.raises(tl.TorchLeanError, match="register_post_accumulate_grad_hook"):
        (w * 2).register_post_accumulate_grad_hook(lambda t: None)


def test_consume_prefix_makes_a_wrapped_state_dict_loadable_by_the_bare_module():
    from collections import OrderedDict

    from torchlean.nn.modules.utils import consume_prefix_in_state_dict_if_present

    tl.manual_seed(0)
    wrapped = tl.nn.parallel.DataParallel(tl.nn.Sequential(tl.nn.Linear(3, 2), tl.nn.BatchNorm1d(2)))
    sd = wrapped.state_dict()
    assert all(k.startswith("module.") for k in sd)
    bare = tl.nn.Sequential(tl.nn.Linear(3, 2), tl.nn.BatchNorm1d(2))
    with pytest.raises(tl.TorchLeanError, match="unexpected keys"):
        bare.load_state_dict(sd)
    consume_prefix_in_state_dict_if_present(sd, "module.")
    assert list(sd) == list(bare.state_dict())
    bare.load_state_dict(sd)
    assert np.array_equal(bare[0].weight.numpy(), wrapped.module[0].weight.numpy())
    # PyTorch's semantics: keys without the prefix stay, moved keys go to the end in order
    od = OrderedDict([("module.a", 1), ("b", 2), ("module.c", 3)])
    consume_prefix_in_state_dict_if_present(od, "module.")
    assert list(od.items()) == [("b", 2), ("a", 1), ("c", 3)]
    with pytest.raises(tl.TorchLeanError, match="consume_prefix_in_state_dict_if_present: expected a state dict"):
        consume_prefix_in_state_dict_if_present([1, 2], "module.")


def test_rendezvous_hands_rank0_bytes_to_every_rank():
    port, payload, got = free_port(), bytes(range(128)), {}

    def rank(r: int) -> None:
        got[r] = share_from_rank0(payload if r == 0 else None, r, 3, "127.0.0.1", port, 20)

    threads = [threading.Thread(target=rank, args=(r,)) for r in (2, 1, 0)]  # peers first: they retry
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert got == {0: payload, 1: payload, 2: payload}
    with pytest.raises(dist.DistTimeoutError, match=r"ranks \[1\] did not connect"):
        share_from_rank0(payload, 0, 2, "127.0.0.1", free_port(), 0.3)


def test_rank_order_sum_is_left_to_right_in_float32():
    from torchlean.distributed.collectives import rank_order_sum

    rows = np.array([[1e8], [1.0], [-1e8]], np.float32)
    assert rank_order_sum(rows, False).tolist() == [0.0]  # (1e8 + 1) rounds to 1e8 first
    assert rank_order_sum(rows[[0, 2, 1]], False).tolist() == [1.0]
