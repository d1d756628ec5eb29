"""Device names and the backend that serves each device.

A device is ``"cpu"``, ``"cuda"`` (the current CUDA device: index 0 unless ``set_current_cuda``
chose another), ``"cuda:N"``, a ``device`` object (``torchlean.device``, PyTorch's
``torch.device``) or an int N (``cuda:N``, as ``x.to(0)`` means in PyTorch). Each canonical
device has one ``DeviceContext``: its name, its backend and its allocator counters. Buffers keep a
reference to their context, which makes dispatch one attribute lookup.
"""

from __future__ import annotations

import builtins
import numbers
import re
from typing import Any

from ..errors import DeviceError
from .allocator import AllocatorCounters

_CUDA_RE = re.compile(r"^cuda(?::(\d+))?$")
_CPU_RE = re.compile(r"^cpu(?::0)?$")
_current_cuda = [0]  # the index "cuda" names (torch.cuda.set_device)


class device(str):
    """A device, as PyTorch's ``torch.device``: ``device("cuda:0")``, ``device("cuda", 0)``,
    ``device("cpu")``, ``device(0)`` (cuda:0), with ``.type`` ("cpu" or "cuda") and ``.index``
    (None when not given) and PyTorch's ``str``/``repr``.

    It is a ``str`` subclass whose value is PyTorch's ``str(device)`` ("cuda", "cuda:1", "cpu"), so it
    is accepted wherever torchlean takes a device string, and it compares equal to that string
    (``device("cuda:0") == "cuda:0"``; PyTorch says False there, but a tensor's ``.device`` has long
    been a string in torchlean and code compares the two). ``device("cuda") != device("cuda:0")``,
    as in PyTorch. Naming a CUDA device needs no GPU; using one does.
    """

    __slots__ = ()

    def __new__(cls, type: Any, index: Any = None) -> "device":  # noqa: A002  (PyTorch's name)
        if isinstance(type, device) and index is None:
            return type
        if isinstance(type, numbers.Integral) and not isinstance(type, bool) and index is None:
            type, index = "cuda", type
        if not isinstance(type, str):
            raise DeviceError(f"device: expected a device string such as 'cpu', 'cuda' or 'cuda:0', or an int, "
                              f"got {type!r} ({builtins.type(type).__name__})")
        name = type.strip()
        kind, sep, idx = name.partition(":")
        if kind not in ("cpu", "cuda"):
            raise DeviceError(f"device: torchlean has the devices 'cpu', 'cuda' and 'cuda:N', got {type!r}")
        if sep:
            if index is not None:
                raise DeviceError(f"device: the type {type!r} must not include an index because index={index!r} "
                                  f"was passed explicitly")
            if not idx.isdigit():
                raise DeviceError(f"device: invalid device string {type!r} (expected 'cuda:N' with N >= 0)")
            index = int(idx)
        elif index is not None:
            if isinstance(index, bool) or not isinstance(index, numbers.Integral) or int(index) < 0:
                raise DeviceError(f"device: index must be a non-negative int, got {index!r}")
            index = int(index)
        if kind == "cpu" and index not in (None, 0):
            raise DeviceError(f"device: torchlean has one CPU device, got index {index} ({type!r})")
        return str.__new__(cls, kind if index is None else f"{kind}:{index}")

    @property
    def type(self) -> str:
        return str.__str__(self).partition(":")[0]

    @property
    def index(self) -> int | None:
        idx = str.__str__(self).partition(":")[2]
        return int(idx) if idx else None

    def __repr__(self) -> str:
        idx = self.index
        return f"device(type={self.type!r})" if idx is None else f"device(type={self.type!r}, index={idx})"

    def __str__(self) -> str:
        return str.__str__(self)

    def __reduce__(self) -> Any:
        return (device, (str.__str__(self),))


_device_objects: dict[str, device] = {}


def device_of(name: str) -> device:
    """The ``device`` object of a canonical name (one object per name: a tensor's ``.device``)."""
    d = _device_objects.get(name)
    if d is None:
        d = _device_objects[name] = device(name)
    return d


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
    """``"cpu"`` or ``"cuda:N"``; anything else is a ``DeviceError`` naming ``op``. ``"cuda"``
    names the current CUDA device (``set_current_cuda``)."""
    if device is None:
        return "cpu"
    if isinstance(device, numbers.Integral) and not isinstance(device, bool):
        if int(device) < 0:
            raise DeviceError(f"{op}: a device index must be >= 0, got {device!r}")
        return f"cuda:{int(device)}"
    if not isinstance(device, str):
        raise DeviceError(f"{op}: expected a device 'cpu', 'cuda', 'cuda:N', a torchlean.device or an int, "
                          f"got {device!r}")
    name = str.strip(device).lower()
    if _CPU_RE.match(name):
        return "cpu"
    m = _CUDA_RE.match(name)
    if m:
        return f"cuda:{int(m.group(1) if m.group(1) is not None else _current_cuda[0])}"
    raise DeviceError(f"{op}: expected a device 'cpu', 'cuda' or 'cuda:N', got {device!r}")


def current_cuda() -> int:
    """The index that ``"cuda"`` names (0 unless ``set_current_cuda`` chose another)."""
    return _current_cuda[0]


def set_current_cuda(index: Any, op: str = "set_current_cuda") -> int:
    """Make ``"cuda"`` name ``cuda:index`` (``torch.cuda.set_device``); DeviceError without that GPU."""
    name = canonical_device(index, op)
    if not name.startswith("cuda:"):
        raise DeviceError(f"{op}: expected a CUDA device, got {index!r}")
    get_context(name, op)  # raises DeviceError when CUDA or that device is missing
    new = int(name.split(":")[1])
    if new != _current_cuda[0]:
        _current_cuda[0] = new
        for key in [k for k, ctx in _contexts.items() if k != ctx.name]:  # aliases such as "cuda"
            del _contexts[key]
    return new


def cuda_device_count() -> int:
    """How many CUDA devices the driver reports (0 where CUDA is unavailable)."""
    from ..kernels import cuda as cuda_backend

    return 0 if cuda_backend.unavailable_reason() is not None else cuda_backend.device_count()


def cuda_index(device: Any, op: str) -> int:
    """The CUDA index that ``device`` (None: the current device, an int, "cuda", "cuda:N") names,
    checked against the devices present; DeviceError naming ``op`` otherwise."""
    name = canonical_device(_current_cuda[0] if device is None else device, op)
    if not name.startswith("cuda:"):
        raise DeviceError(f"{op}: expected a CUDA device, got {device!r}")
    return get_context(name, op).backend.device


def cuda_synchronize(device: Any = None, op: str = "synchronize") -> None:
    """Wait for every kernel queued on the CUDA device."""
    from ..kernels import cuda as cuda_backend

    cuda_backend.synchronize(cuda_index(device, op))


def cuda_device_name(device: Any = None, op: str = "get_device_name") -> str:
    from ..kernels import cuda as cuda_backend

    return cuda_backend.device_name(cuda_index(device, op))


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
