"""The CUDA backend (CuPy: cuBLAS, cuFFT, NVRTC-compiled kernels).

Importing torchlean never needs CuPy: this module only probes. ``unavailable_reason()`` says
why CUDA cannot be used (no CuPy, no driver, no device), or returns None.
"""

from __future__ import annotations

from typing import Any

from ...errors import DeviceError

# Process-wide facts, found once and never dropped (no memo: clearing would make a second backend
# for a device that already has one, with its own free list and streams).
_probed: list[str | None] = []
_backends: dict[int, Any] = {}


def _probe() -> str | None:
    try:
        import cupy  # noqa: F401
    except Exception as exc:  # ImportError, or a broken CUDA install raising on import
        return f"CuPy is not installed or failed to import ({type(exc).__name__}: {exc}); install torchlean[cuda12] or torchlean[cuda13]"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return f"the CUDA driver reports no usable device ({type(exc).__name__}: {exc})"
    if count == 0:
        return "the CUDA driver reports 0 devices"
    return None


def unavailable_reason() -> str | None:
    if not _probed:
        _probed.append(_probe())
    return _probed[0]


def _backend(index: int):
    backend = _backends.get(index)
    if backend is None:
        from .backend import make_backend

        backend = _backends[index] = make_backend(index)
    return backend


def backend_for(index: int, op: str):
    """The backend of device ``index``; DeviceError when the process has no such GPU."""
    import cupy

    count = cupy.cuda.runtime.getDeviceCount()
    if index >= count:
        raise DeviceError(f"{op}: device 'cuda:{index}' is not available: the CUDA driver reports {count} device(s)")
    return _backend(index)


def device_count() -> int:
    """How many devices the CUDA driver reports (call only when ``unavailable_reason()`` is None)."""
    import cupy

    return int(cupy.cuda.runtime.getDeviceCount())


def synchronize(index: int) -> None:
    """Wait for every kernel queued on device ``index``."""
    import cupy

    cupy.cuda.Device(index).synchronize()


def device_name(index: int) -> str:
    """The driver's name of device ``index`` (e.g. "NVIDIA H100 80GB HBM3")."""
    import cupy

    name = cupy.cuda.runtime.getDeviceProperties(index)["name"]
    return name.decode() if isinstance(name, bytes) else str(name)
