"""``torchlean launch``: start the processes of a data-parallel job on this machine.

``--nproc-per-node N script.py args`` starts N copies of the script, each told its place by
PyTorch's launch variables (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``,
``MASTER_ADDR``, ``MASTER_PORT``). On one machine with ``mpiexec`` installed (and mpi4py) the
copies are started by mpiexec, so that both backends work ("mpi" needs it); otherwise, and for
several machines (``--nnodes M --node-rank R --master ADDR:PORT``, run once on each machine), they
are started directly, which serves "nccl" (rank 0 hands NCCL's id out at ADDR:PORT). ``--launcher``
forces one way.

When a process fails the others are stopped (mpiexec does so itself) and the launcher exits with
that process's code and a line that names its rank.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from typing import Sequence

__all__ = ["launch", "free_port", "find_mpiexec"]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def find_mpiexec() -> str | None:
    """mpiexec beside this Python first (the one the pip wheel of MPICH or Open MPI installs,
    matching mpi4py's library), else on PATH; None without mpi4py or mpiexec."""
    try:
        import mpi4py  # noqa: F401  (only whether it is there)
    except ImportError:
        return None
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return here if os.access(here, os.X_OK) else shutil.which("mpiexec")


def _say(msg: str) -> None:
    print(f"torchlean launch: {msg}", file=sys.stderr, flush=True)


def _mpiexec_command(mpiexec: str, nproc: int, target: list[str], args: Sequence[str]) -> list[str]:
    version = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=30).stdout
    extra = ["--bind-to", "none"] if "Open MPI" in version or "OpenRTE" in version else []
    return [mpiexec, *extra, "-n", str(nproc), sys.executable, "-m", "torchlean.distributed.child", *target, *args]


def _stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM to every running process group, SIGKILL to those still alive 5 s later."""
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 5
    for p in procs:
        try:
            p.wait(timeout=max(deadline - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


def _watch(procs: list[subprocess.Popen], first_rank: int, names: bool = True) -> int:
    """Wait for all; at the first failure stop the rest. Returns the exit code."""
    try:
        while True:
            running = False
            for i, p in enumerate(procs):
                code = p.poll()
                if code is None:
                    running = True
                elif code != 0:
                    why = f"signal {-code}" if code < 0 else f"exit code {code}"
                    if names:
                        _say(f"rank {first_rank + i} (local rank {i}) failed with {why}; stopping the other processes")
                    _stop(procs)
                    return code if code > 0 else 128 - code
            if not running:
                return 0
            time.sleep(0.05)
    except KeyboardInterrupt:
        _say("interrupted; stopping the processes")
        _stop(procs)
        return 130


def launch(script: str, args: Sequence[str], nproc_per_node: int, nnodes: int = 1, node_rank: int = 0,
           master: str | None = None, launcher: str = "auto", module: bool = False) -> int:
    """Run the job (see the module docstring); returns the exit code for the command line.
    ``module``: ``script`` names a module to run as ``python -m script`` (``torchlean train``
    starts its ranks as ``python -m torchlean train ...``)."""
    if nproc_per_node < 1 or nnodes < 1 or not 0 <= node_rank < nnodes:
        _say(f"--nproc-per-node ({nproc_per_node}) and --nnodes ({nnodes}) must be >= 1 and --node-rank "
             f"({node_rank}) in [0, {nnodes - 1}]")
        return 2
    target = ["-m", script] if module else [script]
    if not module and not os.path.isfile(script):
        _say(f"no such script: {script}")
        return 2
    if nnodes > 1 and master is None:
        _say("--nnodes > 1 needs --master ADDR:PORT (rank 0's machine, the same on every node)")
        return 2
    addr, port = "127.0.0.1", free_port()
    if master is not None:
        addr, _, p = master.rpartition(":")
        if not addr or not p.isdigit():
            _say(f"--master must be ADDR:PORT, got {master!r}")
            return 2
        port = int(p)
    env = dict(os.environ, MASTER_ADDR=addr, MASTER_PORT=str(port))
    mpiexec = find_mpiexec() if launcher in ("auto", "mpiexec") and nnodes == 1 else None
    if launcher == "mpiexec" and mpiexec is None:
        _say("--launcher mpiexec: needs one machine (--nnodes 1), mpi4py and an mpiexec "
             "(pip install 'torchlean[distributed]')")
        return 2
    if mpiexec is not None:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")  # (Open MPI refuses root otherwise)
        cmd = _mpiexec_command(mpiexec, nproc_per_node, target, args)
        env["TORCHLEAN_LAUNCH_GROUP"] = "1"
        proc = subprocess.Popen(cmd, env=env, start_new_session=True)
        code = _watch([proc], 0, names=False)
        if code != 0:
            _say(f"the job failed (mpiexec exit code {code}; the failed rank's output above says why); the other "
                 f"processes were stopped")
        return code
    world = nproc_per_node * nnodes
    procs = []
    for local in range(nproc_per_node):
        rank = node_rank * nproc_per_node + local
        child_env = dict(env, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(local),
                         LOCAL_WORLD_SIZE=str(nproc_per_node), GROUP_RANK=str(node_rank))
        procs.append(subprocess.Popen([sys.executable, *target, *args], env=child_env, start_new_session=True))
    return _watch(procs, node_rank * nproc_per_node)
