"""Arrays of integer and bool tensors: the device's array module (NumPy on "cpu", CuPy on "cuda")
and the copies between those arrays, the host and float32 Buffers.

Float tensors are Buffers and run through the primitives; integer and bool tensors hold one array
of their own dtype on their device, computed on by the array module that the device's backend
names (``backend.array_module``), so that nothing above the runtime imports CuPy.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Sequence

import numpy as np

from .buffer import Buffer, wrap
from .device import get_context
from .oom import run_allocating

__all__ = ["array_module", "on_device", "from_host", "to_host", "move", "float_buffer", "buffer_array",
           "stack_buffers"]

_F32 = np.dtype(np.float32)


def array_module(device: Any) -> Any:
    """NumPy for "cpu", CuPy for a CUDA device (from its backend: importing it needs no CuPy)."""
    return get_context(device, "array_module").backend.array_module


def on_device(device: Any) -> Any:
    """A context in which the array module allocates on ``device`` (CUDA: that GPU current)."""
    backend = get_context(device, "on_device").backend
    xp = backend.array_module
    if xp is np:
        return contextlib.nullcontext()
    return xp.cuda.Device(backend.device)


def from_host(a: np.ndarray, device: Any) -> Any:
    """A copy of the host array ``a`` on ``device`` (its dtype kept)."""
    xp = array_module(device)
    if xp is np:
        return np.array(a, copy=True)
    with on_device(device):
        return xp.asarray(a)


def to_host(a: Any) -> np.ndarray:
    """The host NumPy array of ``a`` (``a`` itself when it is already one)."""
    return a if isinstance(a, np.ndarray) else (np.asarray(a) if isinstance(a, np.generic) else a.get())


def move(a: Any, device: Any) -> Any:
    """A copy of the array ``a`` on ``device``."""
    xp = array_module(device)
    if xp is np:
        return to_host(a).copy() if not isinstance(a, np.ndarray) else a.copy()
    with on_device(device):
        return xp.array(a, copy=True)  # CuPy copies host or peer memory onto the current device


def float_buffer(a: Any, device: Any) -> Buffer:
    """A new float32 Buffer with the values of ``a`` (an array on ``device``), row-major."""
    ctx = get_context(device, "float_buffer")
    xp = ctx.backend.array_module
    with on_device(device):
        flat = xp.array(a, dtype=_F32, copy=True).reshape(-1)
    return wrap(ctx, flat)


def buffer_array(buf: Buffer, shape: tuple) -> Any:
    """The values of a float32 Buffer as an array of its device, shaped (a view: never write it)."""
    return buf.data.reshape(shape)


def stack_buffers(op: str, bufs: Sequence[Buffer], shape: tuple, axis: int, device: Any) -> Buffer:
    """A new float32 Buffer: ``bufs`` (each holding ``shape``, all on ``device``) stacked along a
    new ``axis``, row-major. One copy on the device (a move: exact)."""
    ctx = get_context(device, op)
    xp = ctx.backend.array_module

    def run() -> Any:
        with on_device(device):
            return xp.stack([b._live().reshape(shape) for b in bufs], axis).reshape(-1)

    return wrap(ctx, run_allocating(op, ctx, len(bufs) * math.prod(shape), run))
