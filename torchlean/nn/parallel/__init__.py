"""``torchlean.nn.parallel`` (PyTorch's ``torch.nn.parallel``).

``DataParallel`` is a pass-through wrapper that runs its module on one device: PyTorch's class,
with the same ``module`` attribute and the same state-dict keys ("module." + the module's keys), so
programs that wrap their model run unchanged, but it does not split the batch over several GPUs.
Without CUDA it calls the module as it is (as PyTorch does); with CUDA it moves the inputs' tensors
to ``device_ids[0]`` (by default the current CUDA device) and calls the module there, as PyTorch
does for one device. Given several devices it warns and uses the first.

``DistributedDataParallel`` (``distributed.py``) trains one replica per process over
``torchlean.distributed``'s process group, averaging gradients during backward.
"""

from __future__ import annotations

import warnings
from typing import Any

from ...errors import DeviceError, TorchLeanError
from ...runtime.device import canonical_device, cuda_device_count, cuda_unavailable_reason
from ...tensor import Tensor
from ..modules.module import Module
from .distributed import DistributedDataParallel

__all__ = ["DataParallel", "DistributedDataParallel", "UnsupportedError"]


class UnsupportedError(TorchLeanError, NotImplementedError):
    """A PyTorch feature that torchlean does not implement (yet)."""


def _to(v: Any, dev: str) -> Any:
    if isinstance(v, Tensor):
        return v if v.device == dev else v.to(dev)
    if isinstance(v, tuple) and not hasattr(v, "_fields"):
        return tuple(_to(x, dev) for x in v)
    if isinstance(v, list):
        return [_to(x, dev) for x in v]
    if isinstance(v, dict):
        return type(v)((k, _to(x, dev)) for k, x in v.items())
    return v


class DataParallel(Module):
    """``DataParallel(module, device_ids=None, output_device=None, dim=0)``: runs ``module`` on one
    device (see the module docstring)."""

    def __init__(self, module: Module, device_ids: Any = None, output_device: Any = None, dim: int = 0) -> None:
        super().__init__()
        if not isinstance(module, Module):
            raise TypeError(f"DataParallel: expected a Module, got {type(module).__name__}")
        self.module = module
        self.dim = dim
        if cuda_unavailable_reason() is not None:
            if device_ids:
                raise DeviceError(f"DataParallel: device_ids={device_ids!r} but CUDA is not available "
                                  f"({cuda_unavailable_reason()})")
            self.device_ids: list[int] = []
            self.output_device = None
            return
        ids = list(range(cuda_device_count())) if device_ids is None else list(device_ids)
        names = [canonical_device(d, "DataParallel") for d in ids]
        if not names or any(not n.startswith("cuda:") for n in names):
            raise DeviceError(f"DataParallel: device_ids must name CUDA devices, got {device_ids!r}")
        if len(set(names)) > 1:
            warnings.warn(f"DataParallel: torchlean runs the module on one device; using {names[0]} of {names} "
                          f"(the batch is not split)", UserWarning, stacklevel=2)
        self.device_ids = [int(n.split(":")[1]) for n in names]
        self.output_device = self.device_ids[0] if output_device is None else output_device
        self._dp_device = names[0]

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        if not self.device_ids:
            return self.module(*inputs, **kwargs)
        dev = self._dp_device
        for name, t in list(self.module.named_parameters()) + list(self.module.named_buffers()):
            if t.device != dev:
                raise DeviceError(f"DataParallel: module must have its parameters and buffers on device {dev} "
                                  f"(device_ids[0]) but found {name!r} on device {t.device}")
        return self.module(*_to(inputs, dev), **_to(kwargs, dev))
