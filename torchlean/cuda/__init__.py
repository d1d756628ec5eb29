"""``torchlean.cuda`` (PyTorch's ``torch.cuda``): is CUDA here, which device is current, its memory
figures (torchlean's allocator telemetry) and ``amp``.

It imports without CuPy or a GPU: ``is_available()`` is then False and ``device_count()`` 0. Calls
that need a GPU (``current_device``, ``set_device``, ``synchronize``, ``get_device_name``,
``get_device_properties``) raise ``DeviceError`` naming the call, as ``tensor.cuda()`` does:
nothing falls back to the CPU. The memory figures report 0 bytes and the resets and
``empty_cache`` do nothing where CUDA is unavailable, as in PyTorch (there is no CUDA memory).

Memory figures count torchlean's buffers (``torchlean.allocator_stats``): ``memory_allocated`` the
bytes of live buffers, ``max_memory_allocated`` their peak since start or the last
``reset_peak_memory_stats``, ``memory_reserved`` those plus the blocks torchlean's caches hold
(the free list, workspaces, FFT plans). ``empty_cache`` hands the cached blocks back to the driver
(``torchlean.collect_allocator(force=True)``).

Random numbers: torchlean has one counter-based default generator for every device (a program's
n-th draw is the same on the CPU and on CUDA), so ``manual_seed``/``manual_seed_all`` seed it, as
``torchlean.manual_seed`` does, whether or not a GPU is present (so a program seeds identically
on either).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ..errors import DeviceError
from ..runtime.device import (cuda_device_count, cuda_device_name, cuda_index, cuda_synchronize,
                              cuda_unavailable_reason, current_cuda, set_current_cuda)
from ..runtime.rng import manual_seed as _seed_default
from ..runtime.telemetry import allocator_stats, collect_allocator, reset_peak_bytes
from . import amp

__all__ = ["is_available", "device_count", "current_device", "set_device", "device", "synchronize", "manual_seed",
           "manual_seed_all", "memory_allocated", "max_memory_allocated", "memory_reserved",
           "reset_peak_memory_stats", "reset_max_memory_allocated", "empty_cache", "get_device_name",
           "get_device_properties", "is_bf16_supported", "is_initialized", "init", "amp"]


def is_available() -> bool:
    """True where torchlean's CUDA backend can run (CuPy and at least one GPU)."""
    return cuda_unavailable_reason() is None


def is_initialized() -> bool:
    return is_available()


def init() -> None:
    _need_cuda("torchlean.cuda.init")


def device_count() -> int:
    return cuda_device_count()


def _need_cuda(op: str) -> None:
    reason = cuda_unavailable_reason()
    if reason is not None:
        raise DeviceError(f"{op}: CUDA is not available ({reason})")


def current_device() -> int:
    """The index that the device "cuda" names."""
    _need_cuda("torchlean.cuda.current_device")
    return current_cuda()


def set_device(device: Any) -> None:
    """Make "cuda" name ``device`` (an int, "cuda:N" or a torchlean.device)."""
    op = "torchlean.cuda.set_device"
    _need_cuda(op)
    set_current_cuda(device, op)


class device:
    """``with torchlean.cuda.device(1): ...``: "cuda" names that device inside the block."""

    def __init__(self, device: Any) -> None:
        self.idx = device
        self.prev: int | None = None

    def __enter__(self) -> None:
        op = "torchlean.cuda.device"
        _need_cuda(op)
        self.prev = current_cuda()
        if self.idx is not None and not (isinstance(self.idx, int) and self.idx < 0):
            set_current_cuda(self.idx, op)

    def __exit__(self, *exc: object) -> None:
        if self.prev is not None:
            set_current_cuda(self.prev, "torchlean.cuda.device")


def synchronize(device: Any = None) -> None:
    """Wait until every kernel queued on ``device`` (default: the current one) has finished."""
    op = "torchlean.cuda.synchronize"
    _need_cuda(op)
    cuda_synchronize(device, op)


def get_device_name(device: Any = None) -> str:
    op = "torchlean.cuda.get_device_name"
    _need_cuda(op)
    return cuda_device_name(device, op)


class DeviceProperties(NamedTuple):
    name: str
    total_memory: int


def get_device_properties(device: Any = None) -> DeviceProperties:
    """The device's name and total memory in bytes."""
    op = "torchlean.cuda.get_device_properties"
    _need_cuda(op)
    index = cuda_index(device, op)
    return DeviceProperties(cuda_device_name(index, op), allocator_stats(f"cuda:{index}").device_total_bytes)


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """False: torchlean computes in float32 (so programs that pick bfloat16 when it is supported
    pick another path)."""
    return False


def manual_seed(seed: int) -> None:
    """Seed the default generator, which serves every device (see the module docstring)."""
    _seed_default(seed)


def manual_seed_all(seed: int) -> None:
    _seed_default(seed)


def _stats(op: str, device: Any):
    if cuda_unavailable_reason() is not None:
        return None
    return allocator_stats(f"cuda:{cuda_index(device, op)}")


def memory_allocated(device: Any = None) -> int:
    """Bytes held by live torchlean buffers on the device (0 without CUDA)."""
    s = _stats("torchlean.cuda.memory_allocated", device)
    return 0 if s is None else s.live_bytes


def max_memory_allocated(device: Any = None) -> int:
    """The peak of ``memory_allocated`` since start or the last ``reset_peak_memory_stats``."""
    s = _stats("torchlean.cuda.max_memory_allocated", device)
    return 0 if s is None else s.peak_bytes


def memory_reserved(device: Any = None) -> int:
    """``memory_allocated`` plus the bytes torchlean's caches keep on the device."""
    s = _stats("torchlean.cuda.memory_reserved", device)
    return 0 if s is None else s.live_bytes + s.cached_bytes


def reset_peak_memory_stats(device: Any = None) -> None:
    op = "torchlean.cuda.reset_peak_memory_stats"
    if cuda_unavailable_reason() is None:
        reset_peak_bytes(f"cuda:{cuda_index(device, op)}")


def reset_max_memory_allocated(device: Any = None) -> None:
    reset_peak_memory_stats(device)


def empty_cache() -> None:
    """Hand the blocks torchlean's caches keep back to the driver (nothing to do without CUDA)."""
    if cuda_unavailable_reason() is None:
        collect_allocator(force=True)


_MISSING = {n: "torchlean runs every kernel on the current CUDA stream; user-managed streams and events are not "
               "supported yet" for n in ("Stream", "Event", "stream", "current_stream", "default_stream")}


def __getattr__(name: str):
    from ..errors import missing_name

    raise missing_name("torchlean.cuda", name, _MISSING)
