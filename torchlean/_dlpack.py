"""DLPack exchange: ``Tensor.__dlpack__`` / ``__dlpack_device__`` and ``torchlean.from_dlpack``.

Export (zero-copy): a float32 tensor hands out its buffer's backing array, an integer or bool
tensor its own array (its dtype kept), the NumPy array on the CPU and the CuPy array on CUDA,
shaped like the tensor, so ``np.from_dlpack(t)``, ``cupy.from_dlpack(t)`` and
``torch.from_dlpack(t)`` share its memory.

Import: ``from_dlpack(obj)`` takes any object with ``__dlpack__``/``__dlpack_device__`` (NumPy,
CuPy, PyTorch, JAX arrays ...). A C-contiguous float32 source on the CPU or a CUDA device is
adopted without a copy; anything else (strided views, float64/float16, ...) is copied and
converted to a contiguous float32 buffer. Integer and bool sources keep their dtype (uint16/32/64,
which torchlean lacks, become int64) and their device, without a copy when C-contiguous.

Aliasing, read this: torchlean treats buffers as immutable values (primitives never write their
inputs; ``add_`` and the optimizers rebind a tensor to a new buffer). Sharing memory through
DLPack breaks that assumption in one direction only: writing into an exported array (or into the
source of an imported one) changes the torchlean tensor's values too, including tensors that
were saved for a backward pass, which then computes with the new values. Do not mutate shared
memory while torchlean may still use the tensor; pass ``copy=True`` when in doubt.

The other direction has one rule, for every optimizer and every in-place method: torchlean never
writes into memory it does not own alone. An imported buffer is marked shared (``Buffer._shared``,
on the CPU and on CUDA), so an in-place update (``t.add_(1)``, ``SGD``, ``Adam`` or ``AdamW``
``step()``) rebinds ``t`` to a fresh buffer the first time, and the source keeps its values;
later steps update that fresh buffer (in place where the optimizer can). A read-only source
(``arr.flags.writeable = False``) works the same way. This differs from PyTorch, whose
optimizers write through into memory shared with ``torch.from_dlpack``: to see the new values on
the other side, export the parameter again after the step (``np.from_dlpack(p.detach())``).
"""

from __future__ import annotations

from typing import Any

import contextlib

import numpy as np

from .dtypes import from_numpy_dtype
from .errors import ArgumentError, AutogradError, DeviceError, DTypeError
from .runtime.buffer import Buffer
from .runtime.device import get_context
from .tensor import Tensor

__all__ = ["from_dlpack", "tensor_dlpack", "tensor_dlpack_device"]

_KDL_CPU = 1
_KDL_CUDA = 2
_KDL_CUDA_MANAGED = 13


def _exported_array(t: Tensor, op: str) -> Any:
    if not isinstance(t, Tensor):
        raise DTypeError(f"{op}: expected a torchlean Tensor, got {type(t).__name__}")
    if t.requires_grad:
        raise AutogradError(f"{op}: cannot export a tensor that requires grad (its gradient would be lost); "
                            f"use tensor.detach()")
    if t._buf is None:
        return t._arr  # an integer or bool tensor's own array (NumPy on the CPU, CuPy on CUDA)
    return t._buf.data.reshape(t.shape)  # a view: the buffer is flat and contiguous


def tensor_dlpack(self: Tensor, *, stream: Any = None, max_version: Any = None, dl_device: Any = None,
                  copy: Any = None) -> Any:
    """``Tensor.__dlpack__``: a DLPack capsule over the tensor's memory (no copy unless ``copy=True``).

    Arguments follow the array API standard and are passed to the backing array's ``__dlpack__``
    (NumPy on the CPU, CuPy on CUDA, which handles ``stream`` synchronization). Tensors that
    require grad are refused (as PyTorch does): export ``t.detach()``. Mutating the consumer's
    array mutates this tensor (see the module docstring of ``torchlean._dlpack``).
    """
    arr = _exported_array(self, "Tensor.__dlpack__")
    kwargs = {k: v for k, v in (("stream", stream), ("max_version", max_version), ("dl_device", dl_device),
                                ("copy", copy)) if v is not None}
    return arr.__dlpack__(**kwargs)


def tensor_dlpack_device(self: Tensor) -> tuple[int, int]:
    """``Tensor.__dlpack_device__``: ``(1, 0)`` (kDLCPU) or ``(2, index)`` (kDLCUDA)."""
    if not isinstance(self, Tensor):
        raise DTypeError(f"Tensor.__dlpack_device__: expected a torchlean Tensor, got {type(self).__name__}")
    arr = self._arr if self._buf is None else self._buf._live()
    dev_type, dev_id = arr.__dlpack_device__()
    return (int(dev_type), int(dev_id))


def _device_of(obj: Any) -> tuple[int, int]:
    if not hasattr(obj, "__dlpack__"):
        raise DTypeError(f"from_dlpack: expected an object with __dlpack__ (a NumPy/CuPy/PyTorch array or a "
                         f"torchlean Tensor), got {type(obj).__name__}")
    if not hasattr(obj, "__dlpack_device__"):
        raise DTypeError(f"from_dlpack: {type(obj).__name__} has __dlpack__ but no __dlpack_device__")
    dev_type, dev_id = obj.__dlpack_device__()
    return int(dev_type), int(dev_id)


def from_dlpack(obj: Any, *, copy: bool | None = None) -> Tensor:
    """A torchlean tensor over ``obj``'s memory (DLPack), a NumPy, CuPy, PyTorch ... array.

    Zero-copy when ``obj`` is float32 and C-contiguous, on the CPU or a CUDA device (the tensor's
    device is ``"cpu"`` or ``"cuda:N"`` accordingly); otherwise the values are copied and converted
    to a contiguous float32 buffer (float64, float16, strided views ...). Integer and bool sources
    keep their dtype and device (uint16/32/64 become int64), zero-copy when C-contiguous.
    ``copy=True`` always copies; ``copy=False`` raises ArgumentError where a copy would be needed.
    Complex sources raise DTypeError. A PyTorch tensor that requires grad must be detached first
    (PyTorch refuses to export it).

    Shared memory: writes into the source are seen by the tensor (and by any backward pass that
    saved it), but torchlean never writes into the source: the imported buffer is marked shared,
    so an in-place update or an optimizer step (SGD, Adam, AdamW) rebinds the tensor to a fresh
    buffer and leaves the source's values as they were (read-only sources included). PyTorch's
    optimizers write through instead; see the module docstring of ``torchlean._dlpack``.
    """
    if copy is not None and not isinstance(copy, bool):
        raise ArgumentError(f"from_dlpack: copy must be None, True or False, got {copy!r}")
    if isinstance(obj, Tensor):
        if obj._buf is None:
            arr = obj._arr.copy() if copy else obj._arr
            return Tensor._wrap_array(arr, obj._device)
        if copy:
            return Tensor._wrap(Buffer.from_numpy(obj._buf.to_numpy(), obj.device), obj.shape)
        obj._buf._shared = True  # two tensors over one buffer: neither may be updated in place
        return Tensor._wrap(obj._buf, obj.shape)
    dev_type, dev_id = _device_of(obj)
    if dev_type == _KDL_CPU:
        ctx = get_context("cpu", "from_dlpack")
        arr = np.from_dlpack(obj)
        xp = np
    elif dev_type in (_KDL_CUDA, _KDL_CUDA_MANAGED):
        ctx = get_context(f"cuda:{dev_id}", "from_dlpack")  # DeviceError when CUDA is unavailable
        import cupy

        with cupy.cuda.Device(dev_id):
            arr = cupy.from_dlpack(obj)
        xp = cupy
    else:
        raise DeviceError(f"from_dlpack: DLPack device type {dev_type} (device {dev_id}) is not supported; torchlean "
                          f"imports CPU (1) and CUDA (2) memory")
    kind = arr.dtype.kind
    if kind == "c":
        raise DTypeError(f"from_dlpack: complex data ({arr.dtype}) is not supported")
    if kind in "iub":
        # an integer or bool tensor: an array of its own dtype on its device (uint16/32/64, which
        # torchlean has no dtype for, become int64)
        want = arr.dtype if from_numpy_dtype(arr.dtype) is not None else np.dtype(np.int64)
        needs_copy = arr.dtype != want or not arr.flags.c_contiguous
        if needs_copy and copy is False:
            raise ArgumentError(f"from_dlpack: a {'strided ' if not arr.flags.c_contiguous else ''}{arr.dtype} "
                                f"source on {ctx.name} needs a copy (to a contiguous {want} array) but copy=False")
        if needs_copy or copy:
            with (cupy.cuda.Device(dev_id) if xp is not np else contextlib.nullcontext()):
                arr = xp.array(arr, dtype=want, copy=True, order="C")
        return Tensor._wrap_array(arr, ctx.name)
    if kind != "f":
        raise DTypeError(f"from_dlpack: unsupported dtype {arr.dtype}")
    shape = tuple(int(s) for s in arr.shape)
    zero_copy = arr.dtype == np.float32 and arr.flags.c_contiguous
    if not zero_copy and copy is False:
        raise ArgumentError(f"from_dlpack: the source ({arr.dtype}, "
                            f"{'contiguous' if arr.flags.c_contiguous else 'strided'}) needs a copy to become a "
                            f"contiguous float32 buffer, but copy=False")
    if zero_copy and not copy:
        flat = arr.reshape(-1)  # a view of a C-contiguous array
        buf = Buffer(flat, ctx)
        buf._shared = True  # the exporter's memory: never written in place (module docstring)
        return Tensor._wrap(buf, shape)
    flat = xp.ascontiguousarray(arr, dtype=xp.float32).reshape(-1)
    if flat.size and _shares(xp, flat, arr):
        flat = flat.copy()
    return Tensor._wrap(Buffer(flat, ctx), shape)


def _shares(xp: Any, a: Any, b: Any) -> bool:
    try:
        return bool(xp.shares_memory(a, b))
    except Exception:  # noqa: BLE001
        return True
