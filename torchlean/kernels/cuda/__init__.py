"""The CUDA backend (CuPy: cuBLAS, cuFFT, NVRTC-compiled kernels).

Importing torchlean never needs CuPy: this module only probes. ``unavailable_reason()`` says
why CUDA cannot be used (no CuPy, no driver, no device), or returns None.
"""

from __future__ import annotations

from functools import lru_cache

from ...errors import DeviceError


@lru_cache(maxsize=None)
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
    return _probe()


@lru_cache(maxsize=None)
def _backend(index: int):
    from .backend import make_backend

    return make_backend(index)


def backend_for(index: int, op: str):
    """The backend of device ``index``; DeviceError when the process has no such GPU."""
    import cupy

    count = cupy.cuda.runtime.getDeviceCount()
    if index >= count:
        raise DeviceError(f"{op}: device 'cuda:{index}' is not available: the CUDA driver reports {count} device(s)")
    return _backend(index)
