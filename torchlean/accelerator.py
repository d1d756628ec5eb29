"""``torchlean.accelerator`` (PyTorch's ``torch.accelerator``): the CUDA device when there is one."""

from __future__ import annotations

from typing import Any

from .runtime.device import (cuda_device_count, cuda_synchronize, cuda_unavailable_reason, current_cuda, device,
                             device_of, set_current_cuda)
from .errors import DeviceError

__all__ = ["is_available", "current_accelerator", "device_count", "current_device_index", "set_device_index",
           "synchronize"]


def is_available() -> bool:
    return cuda_unavailable_reason() is None


def current_accelerator(check_available: bool = False) -> device | None:
    """``device("cuda")`` where CUDA is available, else None (as PyTorch without an accelerator)."""
    return device_of("cuda") if cuda_unavailable_reason() is None else None


def device_count() -> int:
    return cuda_device_count()


def _need(op: str) -> None:
    reason = cuda_unavailable_reason()
    if reason is not None:
        raise DeviceError(f"{op}: no accelerator is available ({reason})")


def current_device_index() -> int:
    _need("torchlean.accelerator.current_device_index")
    return current_cuda()


def set_device_index(device: Any) -> None:
    op = "torchlean.accelerator.set_device_index"
    _need(op)
    set_current_cuda(device, op)


def synchronize(device: Any = None) -> None:
    op = "torchlean.accelerator.synchronize"
    _need(op)
    cuda_synchronize(device, op)
