"""``autocast``: accepted, and the code inside runs in float32 (see ``torchlean.amp``)."""

from __future__ import annotations

import functools
import numbers
import threading
from typing import Any, Callable

from ..errors import ArgumentError, DTypeError

__all__ = ["autocast", "is_autocast_available", "is_autocast_enabled"]

_DEVICE_TYPES = ("cuda", "cpu")
_FLOAT_NAMES = {"float16", "half", "bfloat16", "float32", "float"}
_local = threading.local()  # per thread, as PyTorch's autocast state: {device_type: enabled}


def _enabled_map() -> dict[str, bool]:
    m = getattr(_local, "enabled", None)
    if m is None:
        m = _local.enabled = {}
    return m


def is_autocast_available(device_type: str) -> bool:
    return device_type in _DEVICE_TYPES


def is_autocast_enabled(device_type: str = "cuda") -> bool:
    """Whether an ``autocast`` block for ``device_type`` is active in this thread (it changes
    nothing in torchlean's arithmetic either way)."""
    return _enabled_map().get(device_type, False)


def _dtype_name(op: str, dtype: Any) -> str:
    name = getattr(dtype, "name", None)
    if not isinstance(name, str):
        name = str(dtype)
    name = name.split(".")[-1]
    if name not in _FLOAT_NAMES:
        raise DTypeError(f"{op}: dtype must be a floating dtype (float16, bfloat16 or float32), got {dtype!r}")
    return name


class autocast:
    """``autocast(device_type, dtype=None, enabled=True, cache_enabled=None)``, as a context manager
    or a decorator. torchlean computes in float32, so the block runs in float32 whatever ``dtype``
    says: float16/bfloat16 are accepted names, not a change of arithmetic. ``device_type`` is
    "cuda" or "cpu" (a device type, not "cuda:0"), checked as PyTorch checks it."""

    def __init__(self, device_type: str, dtype: Any = None, enabled: bool = True,
                 cache_enabled: bool | None = None) -> None:
        op = "autocast"
        if not isinstance(device_type, str):
            raise ArgumentError(f"{op}: device_type must be a str such as 'cuda' or 'cpu', got {device_type!r}")
        if device_type not in _DEVICE_TYPES:
            raise ArgumentError(f"{op}: unsupported device_type {device_type!r} (expected 'cuda' or 'cpu'; a device "
                                f"type, without an index)")
        if not isinstance(enabled, (bool, numbers.Integral)):
            raise ArgumentError(f"{op}: enabled must be a bool, got {enabled!r}")
        self.device = device_type
        self.fast_dtype = _dtype_name(op, dtype) if dtype is not None else (
            "float16" if device_type == "cuda" else "bfloat16")
        self._enabled = bool(enabled)
        self._cache_enabled = cache_enabled
        self._prev: list[bool] = []

    def __enter__(self) -> "autocast":
        m = _enabled_map()
        self._prev.append(m.get(self.device, False))
        m[self.device] = self._enabled
        return self

    def __exit__(self, *exc: object) -> None:
        _enabled_map()[self.device] = self._prev.pop()

    def __call__(self, func: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with autocast(self.device, self.fast_dtype, self._enabled, self._cache_enabled):
                return func(*args, **kwargs)
        return wrapper
