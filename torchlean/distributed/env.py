"""Where a process of a distributed job learns its place: from MPI when ``mpiexec`` started it,
else from PyTorch's launch variables (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``,
``MASTER_PORT``) that ``torchlean launch`` and ``torchrun`` set."""

from __future__ import annotations

import os
from typing import NamedTuple

from .common import DistributedError

__all__ = ["LaunchEnv", "mpiexec_env", "torch_env", "master", "mpi_module"]

# (rank, size, local rank, local size) as the two common mpiexec families export them
_MPI_VARS = (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
              "OMPI_COMM_WORLD_LOCAL_SIZE"),  # Open MPI
             ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),  # MPICH's hydra
             ("PMIX_RANK", "PMIX_SIZE", "PMIX_LOCAL_RANK", "PMIX_LOCAL_SIZE"))


class LaunchEnv(NamedTuple):
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int


def mpiexec_env() -> LaunchEnv | None:
    """The place ``mpiexec`` gave this process (from its environment, without loading MPI), or
    None when it was not started by mpiexec."""
    env = os.environ
    for r, s, lr, ls in _MPI_VARS:
        if r in env and s in env:
            try:
                return LaunchEnv(int(env[r]), int(env[s]), int(env.get(lr, env[r])), int(env.get(ls, env[s])))
            except ValueError:
                continue
    return None


def _int_var(op: str, name: str, default: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None:
        if default is None:
            raise DistributedError(f"{op}: the environment variable {name} is not set: start the processes with "
                                   f"`torchlean launch` (or mpiexec, or torchrun), or set RANK, WORLD_SIZE, "
                                   f"MASTER_ADDR and MASTER_PORT yourself")
        return default
    try:
        return int(raw)
    except ValueError:
        raise DistributedError(f"{op}: the environment variable {name}={raw!r} is not an integer") from None


def torch_env(op: str, rank: int = -1, world_size: int = -1) -> LaunchEnv:
    """The place PyTorch's launch variables give (``rank``/``world_size`` passed by the caller win)."""
    world = world_size if world_size >= 0 else _int_var(op, "WORLD_SIZE")
    me = rank if rank >= 0 else _int_var(op, "RANK")
    if world < 1 or not 0 <= me < world:
        raise DistributedError(f"{op}: rank {me} is outside a world of size {world}")
    local = _int_var(op, "LOCAL_RANK", me)
    local_size = _int_var(op, "LOCAL_WORLD_SIZE", world)
    return LaunchEnv(me, world, local, local_size)


def master(op: str) -> tuple[str, int]:
    addr = os.environ.get("MASTER_ADDR", "127.0.0.1")
    return addr, _int_var(op, "MASTER_PORT")


def mpi_module(op: str):
    """mpi4py's ``MPI`` (initialising MPI), or a DistributedError that says how to install it."""
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise DistributedError(f"{op}: the MPI backend needs mpi4py and an MPI library "
                               f"(pip install 'torchlean[distributed]'): {exc}") from None
    return MPI
