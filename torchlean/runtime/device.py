"""Device names and the backend that serves each device.

A device string is ``"cpu"``, ``"cuda"`` (the current CUDA device, index 0 unless set) or
``"cuda:N"``. Each canonical device has one ``DeviceContext``: its name, its backend and its
allocator counters. Buffers keep a reference to their context, which makes dispatch one
attribute lookup.
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import DeviceError
from .allocator import AllocatorCounters

_CUDA_RE = re.compile(r"^cuda(?::(\d+))?$")


class DeviceContext:
    """Everything torchlean keeps per device. ``recycle``: the backend's hook that takes back the
    array of a dying Buffer (CUDA's free list), or None."""

    __slots__ = ("name", "backend", "counters", "recycle")

    def __init__(self, name: str, backend: Any) -> None:
        self.name = name
        self.backend = backend
        self.counters = AllocatorCounters()
        self.recycle = getattr(backend, "recycle", None)

    def __repr__(self) -> str:
        return f"DeviceContext({self.name!r})"


_contexts: dict[str, DeviceContext] = {}


def canonical_device(device: Any, op: str = "device") -> str:
    """``"cpu"`` or ``"cuda:N"``; anything else is a ``DeviceError`` naming ``op``."""
    if device is None:
        return "cpu"
    name = str(device).strip().lower()
    if name == "cpu":
        return "cpu"
    m = _CUDA_RE.match(name)
    if m:
        return f"cuda:{int(m.group(1) or 0)}"
    raise DeviceError(f"{op}: expected a device 'cpu', 'cuda' or 'cuda:N', got {device!r}")


def cuda_unavailable_reason() -> str | None:
    """Why CUDA cannot be used here, or None when it can."""
    from ..kernels import cuda as cuda_backend

    return cuda_backend.unavailable_reason()


def get_context(device: Any, op: str = "device") -> DeviceContext:
    """The context of ``device``, creating it on first use; ``DeviceError`` if unavailable."""
    ctx = _contexts.get(device) if isinstance(device, str) else None
    if ctx is not None:
        return ctx
    name = canonical_device(device, op)
    ctx = _contexts.get(name)
    if ctx is not None:
        return ctx
    if name == "cpu":
        from ..kernels import cpu as cpu_backend

        ctx = DeviceContext("cpu", cpu_backend)
    else:
        from ..kernels import cuda as cuda_backend

        reason = cuda_backend.unavailable_reason()
        if reason is not None:
            raise DeviceError(f"{op}: device {name!r} is not available: {reason}")
        index = int(name.split(":")[1])
        ctx = DeviceContext(name, cuda_backend.backend_for(index, op))
    _contexts[name] = ctx
    if isinstance(device, str) and device != name:
        _contexts[device] = ctx
    return ctx


def known_contexts() -> list[DeviceContext]:
    """Contexts created so far, one per canonical device."""
    seen: dict[int, DeviceContext] = {}
    for ctx in _contexts.values():
        seen[id(ctx)] = ctx
    return list(seen.values())
