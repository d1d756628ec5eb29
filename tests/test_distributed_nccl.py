"""torchlean.distributed on NCCL: the jobs of tests/test_distributed_mpi.py with one process per GPU
(all the GPUs of the machine, at least 2), started by ``torchlean launch`` without mpiexec (NCCL's
id over the launcher's MASTER_ADDR:MASTER_PORT) and, where mpiexec is installed, with it (the id
over MPI). Marked ``cuda``: skipped, with the reason, without 2 GPUs and CuPy's NCCL."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from torchlean.runtime import cuda_unavailable_reason

pytestmark = pytest.mark.cuda

ROOT = Path(__file__).resolve().parents[1]
WORKER = str(ROOT / "tests" / "distributed_worker.py")


def gpus() -> int:
    if cuda_unavailable_reason() is not None:
        pytest.skip(f"CUDA unavailable: {cuda_unavailable_reason()}")
    import torchlean.distributed as dist
    from torchlean.runtime.device import cuda_device_count

    if not dist.is_nccl_available():
        pytest.skip("CuPy has no NCCL (cupy.cuda.nccl)")
    n = cuda_device_count()
    if n < 2:
        pytest.skip(f"needs 2 GPUs, this machine has {n}")
    return n


def job(cases: str, launcher: str = "env", timeout: float = 240, **env: str) -> subprocess.CompletedProcess:
    n = gpus()
    cmd = [sys.executable, "-m", "torchlean", "launch", "--nproc-per-node", str(n), "--launcher", launcher, WORKER,
           "nccl", cases]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT), **env))


def test_nccl_collectives_deterministic_ddp_and_shape_check():
    r = job("collectives,deterministic,ddp,mismatch")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("collectives,deterministic,ddp,mismatch ok") == gpus()


def test_nccl_over_the_network_transports():
    # what two machines would use: no peer-to-peer, no shared memory
    r = job("collectives,deterministic", NCCL_P2P_DISABLE="1", NCCL_SHM_DISABLE="1")
    assert r.returncode == 0, r.stdout + r.stderr


def test_nccl_under_mpiexec():
    from torchlean.distributed.launch import find_mpiexec

    if find_mpiexec() is None:
        pytest.skip("no mpiexec/mpi4py")
    r = job("collectives,ddp", launcher="mpiexec")
    assert r.returncode == 0, r.stdout + r.stderr


def test_nccl_hung_rank_times_out_and_aborts():
    t0 = time.monotonic()
    r = job("hang", DIST_TEST_TIMEOUT="5", timeout=120)
    assert r.returncode == 17, r.stdout + r.stderr
    assert "within the process group's timeout of 5 s" in r.stdout, r.stdout
    assert time.monotonic() - t0 < 90


def test_nccl_init_with_a_rank_that_never_joins_times_out():
    t0 = time.monotonic()
    r = job("init_hang", DIST_TEST_TIMEOUT="5", timeout=120)
    assert r.returncode == 17, r.stdout + r.stderr
    assert "did not build the communicator" in r.stdout and "timeout of 5 s" in r.stdout, r.stdout
    assert time.monotonic() - t0 < 90


def test_nccl_ddp_hung_rank_is_caught_by_the_watchdog():
    t0 = time.monotonic()
    r = job("ddp_hang", DIST_TEST_TIMEOUT="5", timeout=120)
    assert r.returncode == 17, r.stdout + r.stderr
    assert "within the process group's timeout of 5 s" in r.stdout and "watchdog" in r.stdout, r.stdout
    assert time.monotonic() - t0 < 90


def test_nccl_killed_rank_stops_the_job():
    r = job("kill", DIST_TEST_TIMEOUT="5", timeout=120)
    assert r.returncode != 0
    assert "rank 1 (local rank 1) failed with signal 9" in r.stderr, r.stderr


def test_nccl_deterministic_100_steps_repeat_bitwise():
    digests = []
    for _ in range(3):
        r = job("repeat100")
        assert r.returncode == 0, r.stdout + r.stderr
        lines = sorted(re.findall(r"rank \d+: digest [0-9a-f]{64}", r.stdout))  # (ranks' lines may interleave)
        assert len(lines) == gpus(), r.stdout
        assert len({line.split()[-1] for line in lines}) == 1, lines  # every rank holds the same weights
        digests.append(lines)
    assert digests[0] == digests[1] == digests[2], digests


def test_nccl_checkpoint_resume_bitwise(tmp_path):
    r = job("checkpoint", DIST_TEST_DIR=str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("checkpoint ok") == gpus()


def test_nccl_train_example_data_parallel(tmp_path):
    n, log = gpus(), tmp_path / "log.json"
    r = subprocess.run([sys.executable, "-m", "torchlean", "train", "mlp", "--tiny", "--steps", "3", "--device", "cuda",
                        "--nproc-per-node", str(n), "--batch-size", str(16 * n), "--deterministic", "--log", str(log)],
                       capture_output=True, text=True, timeout=300, cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=str(ROOT), TORCHLEAN_DATA_CACHE="off"))
    assert r.returncode == 0, r.stdout + r.stderr
    s = json.loads(log.read_text())
    assert s["world_size"] == n and s["backend"] == "nccl" and len(set(s["rank_weight_sha256"])) == 1
