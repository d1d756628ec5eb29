"""The default process group: ``init_process_group`` and the questions about it (PyTorch's names).

One group per process, as PyTorch's default group. ``backend="mpi"`` runs collectives on CPU
tensors through MPI (mpi4py) and needs the processes started by ``mpiexec`` (``torchlean launch``
does that when mpiexec is installed); ``backend="nccl"`` runs them on CUDA tensors through NCCL
(CuPy), each process on its own GPU, and takes its place from MPI when mpiexec started it, else
from ``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` with NCCL's unique id handed out by rank 0 at
``MASTER_ADDR:MASTER_PORT``.
"""

from __future__ import annotations

import datetime
import os
from typing import Any

from ..runtime.device import canonical_device, cuda_device_count, current_cuda, set_current_cuda
from .common import DEFAULT_TIMEOUT, DistributedError
from .env import LaunchEnv, master, mpi_module, mpiexec_env, torch_env
from .work import Work

__all__ = ["ProcessGroup", "init_process_group", "destroy_process_group", "is_initialized", "is_available",
           "is_mpi_available", "is_nccl_available", "get_rank", "get_world_size", "get_local_rank", "get_backend",
           "barrier", "current_group"]


class ProcessGroup:
    """The processes of one job and the engine that joins them. ``device``: where its tensors live
    ("cpu" for mpi, this rank's "cuda:N" for nccl)."""

    def __init__(self, backend: str, place: LaunchEnv, device: str, engine: Any, timeout: datetime.timedelta) -> None:
        self.backend = backend
        self.rank, self.world_size = place.rank, place.world_size
        self.local_rank, self.local_world_size = place.local_rank, place.local_world_size
        self.device = device
        self.engine = engine
        self.timeout = timeout

    def size(self) -> int:
        return self.world_size

    def __repr__(self) -> str:
        return f"ProcessGroup(backend={self.backend!r}, rank={self.rank}, world_size={self.world_size}, device={self.device!r})"


_default: list[ProcessGroup | None] = [None]


def is_available() -> bool:
    """True: ``torchlean.distributed`` is always importable (its engines load on demand)."""
    return True


def is_mpi_available() -> bool:
    try:
        import mpi4py  # noqa: F401  (is it installed? MPI itself loads later)
    except ImportError:
        return False
    return True


def is_nccl_available() -> bool:
    try:
        from cupy.cuda import nccl
    except ImportError:
        return False
    return bool(getattr(nccl, "available", True))


def is_initialized() -> bool:
    return _default[0] is not None


def current_group(op: str) -> ProcessGroup:
    """The default group, or a DistributedError naming ``op`` when there is none."""
    g = _default[0]
    if g is None:
        raise DistributedError(f"{op}: the default process group has not been initialized; call "
                               f"torchlean.distributed.init_process_group(backend='mpi' or 'nccl') first")
    return g


def _timeout_of(timeout: Any) -> datetime.timedelta:
    if timeout is None:
        return DEFAULT_TIMEOUT
    if isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        timeout = datetime.timedelta(seconds=timeout)
    if not isinstance(timeout, datetime.timedelta) or timeout.total_seconds() <= 0:
        raise DistributedError(f"init_process_group: timeout must be a positive datetime.timedelta (or seconds), "
                               f"got {timeout!r}")
    return timeout


def _mpi_group(op: str, timeout_s: float, rank: int, world_size: int) -> tuple[LaunchEnv, Any]:
    from .mpi_backend import MPIEngine

    MPI = mpi_module(op)
    comm = MPI.COMM_WORLD
    size = comm.Get_size()
    if world_size >= 0:
        want = world_size
    elif mpiexec_env() is None and "WORLD_SIZE" in os.environ:  # started by another launcher
        want = torch_env(op).world_size
    else:
        want = size
    if want != size:
        raise DistributedError(f"{op}: backend 'mpi' sees {size} MPI process(es) but the job has {want}: start the "
                               f"processes with mpiexec (`mpiexec -n {want} python script.py`, or `torchlean launch`, "
                               f"which uses mpiexec when it is installed); RANK/WORLD_SIZE alone cannot join MPI "
                               f"processes")
    if rank >= 0 and rank != comm.Get_rank():
        raise DistributedError(f"{op}: rank={rank} was given but MPI made this process rank {comm.Get_rank()}")
    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    place = LaunchEnv(comm.Get_rank(), size, local.Get_rank(), local.Get_size())
    local.Free()
    return place, MPIEngine(MPI, comm, timeout_s)


def _nccl_group(op: str, timeout_s: float, rank: int, world_size: int, device_id: Any) -> tuple[LaunchEnv, str, Any]:
    from .nccl_backend import NCCLEngine
    from .rendezvous import share_from_rank0

    launched = mpiexec_env()
    comm = None
    if launched is not None and rank < 0 and world_size < 0 and is_mpi_available():
        MPI = mpi_module(op)
        comm = MPI.COMM_WORLD
        local = comm.Split_type(MPI.COMM_TYPE_SHARED)
        place = LaunchEnv(comm.Get_rank(), comm.Get_size(), local.Get_rank(), local.Get_size())
        local.Free()
    else:
        place = torch_env(op, rank, world_size)
    if device_id is not None:
        device = canonical_device(device_id, op)
    elif current_cuda() == 0 and place.local_rank > 0:
        # the script did not choose its GPU: one GPU per local rank, as torchrun's scripts do
        count = cuda_device_count()
        if count == 0:
            raise DistributedError(f"{op}: backend 'nccl' needs CUDA, which is unavailable here")
        device = f"cuda:{place.local_rank % count}"
    else:
        device = canonical_device("cuda", op)
    if not device.startswith("cuda:"):
        raise DistributedError(f"{op}: backend 'nccl' works on CUDA devices, got device_id={device_id!r}")
    index = set_current_cuda(int(device.split(":")[1]), op)

    if comm is not None:
        def share(uid: Any) -> Any:
            return comm.bcast(uid, root=0)
    else:
        addr, port = master(op)

        def share(uid: Any) -> Any:
            return share_from_rank0(uid, place.rank, place.world_size, addr, port, timeout_s, op)

    return place, device, NCCLEngine(place.rank, place.world_size, index, share, timeout_s, op)


def init_process_group(backend: str | None = None, init_method: str | None = None, timeout: Any = None,
                       world_size: int = -1, rank: int = -1, store: Any = None, group_name: str = "",
                       pg_options: Any = None, device_id: Any = None) -> None:
    """Join this process to the job (``torch.distributed.init_process_group``).

    ``backend``: "mpi" (CPU tensors, processes started by mpiexec) or "nccl" (CUDA tensors, one
    GPU per process; default when None and CUDA is present, else "mpi"). ``timeout`` (a
    ``datetime.timedelta`` or seconds; default 10 minutes, ``DEFAULT_TIMEOUT``): how long any
    collective may take before the ranks still alive raise ``DistTimeoutError``. ``init_method``
    may be None or "env://" (the launch variables); ``store`` and ``pg_options`` are not
    supported. ``device_id``: the GPU of this rank for nccl (default: the current CUDA device, or
    ``cuda:LOCAL_RANK`` when the script did not pick one)."""
    op = "init_process_group"
    if _default[0] is not None:
        raise DistributedError(f"{op}: the default process group is already initialized "
                               f"(call destroy_process_group() first)")
    if init_method not in (None, "env://"):
        raise DistributedError(f"{op}: init_method={init_method!r} is not supported: torchlean takes its place "
                               f"from mpiexec or from the environment variables (init_method='env://')")
    if store is not None or pg_options is not None:
        raise DistributedError(f"{op}: store= and pg_options= are not supported by torchlean")
    if backend is None:
        backend = "nccl" if cuda_device_count() > 0 and is_nccl_available() else "mpi"
    name = str(backend).lower()
    t = _timeout_of(timeout)
    if name == "mpi":
        place, engine = _mpi_group(op, t.total_seconds(), rank, world_size)
        device = "cpu"
    elif name == "nccl":
        place, device, engine = _nccl_group(op, t.total_seconds(), rank, world_size, device_id)
    else:
        raise DistributedError(f"{op}: unknown backend {backend!r}; torchlean has 'mpi' (CPU tensors) and "
                               f"'nccl' (CUDA tensors)")
    _default[0] = ProcessGroup(name, place, device, engine, t)


def destroy_process_group(group: Any = None) -> None:
    """Leave the job: the engine's resources are freed and a new group may be made."""
    g = _default[0]
    if g is None:
        raise DistributedError("destroy_process_group: the default process group has not been initialized")
    _default[0] = None
    g.engine.close()


def _group_or_default(op: str, group: Any) -> ProcessGroup:
    g = current_group(op)
    if group is not None and group is not g:
        raise DistributedError(f"{op}: torchlean has one process group (the default); got group={group!r}")
    return g


def get_rank(group: Any = None) -> int:
    return _group_or_default("get_rank", group).rank


def get_world_size(group: Any = None) -> int:
    return _group_or_default("get_world_size", group).world_size


def get_local_rank() -> int:
    return current_group("get_local_rank").local_rank


def get_backend(group: Any = None) -> str:
    return _group_or_default("get_backend", group).backend


def barrier(group: Any = None, async_op: bool = False, device_ids: Any = None) -> Work | None:
    """Wait until every rank has called ``barrier`` (``DistTimeoutError`` after the group's timeout)."""
    g = _group_or_default("barrier", group)
    work = g.engine.barrier("barrier")
    if async_op:
        return work
    work.wait()
    return None

