"""What every part of ``torchlean.distributed`` shares: its errors, ``ReduceOp`` and the default
timeout."""

from __future__ import annotations

import datetime
import enum

from ..errors import TorchLeanError

__all__ = ["DistributedError", "DistTimeoutError", "ReduceOp", "DEFAULT_TIMEOUT"]

# PyTorch's default for its NCCL process groups: long enough for a slow first step (kernel
# compilation, data loading), short enough that a dead peer is noticed.
DEFAULT_TIMEOUT = datetime.timedelta(minutes=10)


class DistributedError(TorchLeanError, RuntimeError):
    """A collective was misused (no process group, a tensor on the wrong device) or failed."""


class DistTimeoutError(DistributedError, TimeoutError):
    """A collective did not complete within the process group's timeout (a peer died or hangs)."""


class ReduceOp(enum.Enum):
    """``torch.distributed.ReduceOp``: how ``all_reduce`` and ``reduce_scatter`` combine ranks."""

    SUM = "sum"
    AVG = "avg"
    PRODUCT = "product"
    MAX = "max"
    MIN = "min"
