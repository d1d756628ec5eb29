"""``torchlean.distributed`` (PyTorch's ``torch.distributed``): data-parallel training over MPI
(CPU tensors, mpi4py) and NCCL (CUDA tensors, CuPy's NCCL bindings).

Start the processes with ``torchlean launch --nproc-per-node N script.py`` (or ``mpiexec``, or
any launcher that sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``),
call ``init_process_group("mpi")`` or ``init_process_group("nccl")`` in each, wrap the model in
``torchlean.nn.parallel.DistributedDataParallel`` and feed each rank its share of the data with
``torchlean.utils.data.DistributedSampler``. Every collective raises ``DistTimeoutError`` when it
does not complete within the group's timeout (default 10 minutes), instead of hanging.
"""

from .collectives import (AsyncWork, all_gather, all_gather_into_tensor, all_reduce, broadcast, reduce_scatter,
                          reduce_scatter_tensor)
from .common import DEFAULT_TIMEOUT, DistributedError, DistTimeoutError, ReduceOp
from .group import (ProcessGroup, barrier, destroy_process_group, get_backend, get_local_rank, get_rank,
                    get_world_size, init_process_group, is_available, is_initialized, is_mpi_available,
                    is_nccl_available)

__all__ = ["init_process_group", "destroy_process_group", "is_initialized", "is_available", "is_mpi_available",
           "is_nccl_available", "get_rank", "get_world_size", "get_local_rank", "get_backend", "barrier",
           "all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter",
           "reduce_scatter_tensor", "ReduceOp", "AsyncWork", "ProcessGroup", "DistributedError", "DistTimeoutError",
           "DEFAULT_TIMEOUT"]
