"""``Buffer``: a flat, contiguous float32 array on one device, with explicit ownership.

A buffer is a value: primitives never write into their inputs, they return new buffers.
``release()`` frees the memory at once (the tape calls it for workspaces it no longer needs);
any later use raises ``BufferReleasedError`` instead of reading freed memory.

A few layout primitives return *views* (``Buffer._view``): a 16-byte-aligned contiguous run of an
existing buffer's memory (``slice1d``), or two adjacent runs of one allocation joined
(``concat1d``), with no copy and no kernel. Values make that safe: nobody writes a buffer after it
is made. A view is not counted by the allocator telemetry (its memory is its source's; it keeps
that memory alive as long as it lives, as a PyTorch view does), and both it and its source are
marked ``_shared``, so that no optimizer ever updates either in place.

Ownership is state the runtime keeps, never guessed from reference counts (``exclusive``):

* ``_shared``: the memory is seen by something the runtime does not track: a view, a DLPack
  export or import, or a caller who took the raw array (``Buffer.data``). Permanent.
* ``_tensors``: how many Tensors have been bound to the buffer, less those that were explicitly
  rebound away. Tensors have no finalizer (one per op would cost host time on every step), so a
  Tensor that dies is not subtracted: the count never falls below the true number of holders.
* ``_pins``: live tape nodes whose backward may read the buffer (``autograd.Node`` pins its
  parents' buffers and unpins them when it retires). A node dropped without running backward
  leaves its pins: again an over-count.

Over-counting is always safe: an optimizer then first rebinds the parameter to a copy of its
buffer, whose counts are exact, so the cost is one copy, once (optim/optimizer.py, ``own_rows``:
a parameter's construction and ``copy_`` leave such counts, so every first step pays it). Naming a variable
never changes what happens. The CUDA free list (``kernels/cuda/freelist.py``) takes an array
back only from a buffer that was never shared.
"""

from __future__ import annotations

from typing import Any, Iterable, NamedTuple

import numpy as np

from ..errors import ArgumentError, BufferReleasedError, DeviceError, DTypeError, ShapeError
from .checks import check_scalar, check_u32
from .device import DeviceContext, get_context
from .oom import run_allocating

_F32 = np.dtype(np.float32)


class Buffer:
    """Flat float32 storage on one device. Create with ``from_numpy``, ``zeros`` or ``full``."""

    __slots__ = ("_data", "_ctx", "_nbytes", "_counted", "_shared", "_tensors", "_pins", "__weakref__")

    def __init__(self, data: Any, ctx: DeviceContext) -> None:
        # Internal: `data` is a 1-D contiguous float32 array of ctx's backend, owned from now on.
        self._data = data
        self._ctx = ctx
        self._nbytes = data.nbytes
        self._counted = True
        self._shared = False
        self._tensors = 0
        self._pins = 0
        ctx.counters.on_alloc(self._nbytes)

    @classmethod
    def _view(cls, data: Any, ctx: DeviceContext, *sources: "Buffer") -> "Buffer":
        """Internal: a buffer over ``data``, a 1-D contiguous run of the memory of ``sources``
        (see the module docstring): not counted, and it and its sources marked shared."""
        b = object.__new__(cls)
        b._data, b._ctx, b._nbytes, b._counted, b._shared = data, ctx, data.nbytes, False, True
        b._tensors = b._pins = 0
        for s in sources:
            s._shared = True
        return b

    # -- construction -------------------------------------------------------------------
    @classmethod
    def from_numpy(cls, a: Any, device: Any = "cpu") -> "Buffer":
        """Copy ``a`` (any shape, any real dtype) into a new float32 buffer, row-major."""
        ctx = get_context(device, "Buffer.from_numpy")
        try:
            host = np.asarray(a)
        except (TypeError, ValueError) as exc:
            raise ArgumentError(f"Buffer.from_numpy: expected array-like numbers, got {type(a).__name__}: {exc}") from None
        if host.dtype.kind not in "biuf":
            raise ArgumentError(f"Buffer.from_numpy: expected real numbers, got dtype {host.dtype}")
        flat = np.ascontiguousarray(host, dtype=_F32).reshape(-1)
        return cls(run_allocating("Buffer.from_numpy", ctx, flat.size, ctx.backend.from_host, flat), ctx)

    # -- properties ---------------------------------------------------------------------
    @property
    def data(self) -> Any:
        """The backing array (NumPy or CuPy); ``BufferReleasedError`` after ``release()``. The
        caller may keep it and read it later, so the buffer is shared from now on (never written
        in place, never recycled)."""
        d = self._live()
        self._shared = True
        return d

    def _live(self) -> Any:
        d = self._data
        if d is None:
            raise BufferReleasedError(f"Buffer: used after release() (a {self._nbytes}-byte buffer on {self._ctx.name})")
        return d

    @property
    def size(self) -> int:
        """Elements held; 0 after ``release()`` (the seed's ABI)."""
        return 0 if self._data is None else self._nbytes // 4

    @property
    def nbytes(self) -> int:
        return 0 if self._data is None else self._nbytes

    @property
    def device(self) -> str:
        return self._ctx.name

    @property
    def released(self) -> bool:
        return self._data is None

    def to_numpy(self) -> np.ndarray:
        """A fresh host float32 copy of the contents."""
        return self._ctx.backend.to_host(self._live())

    def copy_to(self, device: Any) -> "Buffer":
        """A copy of the contents on ``device``: one transfer (a host buffer is read where it is,
        not copied to a fresh host array first)."""
        ctx = get_context(device, "Buffer.copy_to")
        d = self._live()
        host = d if isinstance(d, np.ndarray) else self._ctx.backend.to_host(d)
        return Buffer(run_allocating("Buffer.copy_to", ctx, host.size, ctx.backend.from_host, host), ctx)

    # -- ownership ----------------------------------------------------------------------
    def release(self) -> bool:
        """Free the storage now. True when a live allocation was freed, False if already released."""
        d = self._data
        if d is None:
            return False
        self._data = None
        if self._counted:
            ctx = self._ctx
            ctx.counters.on_free(self._nbytes)
            if ctx.recycle is not None and not self._shared:
                ctx.recycle(d)
        return True

    def __del__(self) -> None:
        # Buffers dropped without release() still leave the live-bytes count.
        # An array nobody else was given goes back to the backend's free list (CUDA).
        try:
            d = self._data
            if d is not None:
                self._data = None
                if self._counted:
                    ctx = self._ctx
                    ctx.counters.on_free(self._nbytes)
                    if ctx.recycle is not None and not self._shared:
                        ctx.recycle(d)
        except AttributeError:  # __init__ failed half-way
            pass

    def __len__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        state = "released" if self._data is None else f"size={self.size}"
        return f"Buffer({state}, device={self._ctx.name!r})"

    def __getstate__(self) -> Any:  # buffers cross process boundaries as host copies
        raise TypeError("Buffer: cannot be pickled; use to_numpy()")


def exclusive(buf: Buffer) -> bool:
    """True when writing over ``buf`` in place is unobservable by anyone but the one Tensor bound
    to it: never shared, bound to at most one Tensor, read by no live tape node (module
    docstring). The optimizers' one rule for in-place updates."""
    return not buf._shared and buf._tensors <= 1 and not buf._pins


def unpin(buffers: Iterable[Buffer]) -> None:
    """A tape node that pinned ``buffers`` (``autograd.Node``) has retired."""
    for b in buffers:
        b._pins -= 1


def wrap(ctx: DeviceContext, data: Any) -> Buffer:
    """Adopt a backend array that a kernel produced on ``ctx`` (no copy): every primitive's result."""
    return Buffer(data, ctx)


def zeros(n: int, device: Any = "cpu") -> Buffer:
    """A length-``n`` buffer of zeros."""
    check_u32("zeros", "n", n)
    ctx = get_context(device, "zeros")
    return Buffer(run_allocating("zeros", ctx, n, ctx.backend.full, n, 0.0), ctx)


def full(n: int, value: float, device: Any = "cpu") -> Buffer:
    """A length-``n`` buffer filled with ``float32(value)``."""
    check_u32("full", "n", n)
    v = check_scalar("full", "value", value)
    ctx = get_context(device, "full")
    return Buffer(run_allocating("full", ctx, n, ctx.backend.full, n, v), ctx)


def release_then(workspace: Buffer, keep: Any) -> Any:
    """Release ``workspace`` and return ``keep`` (the seed's ``releaseThen``)."""
    workspace.release()
    return keep


def release_many_then(workspaces: Iterable[Buffer], keep: Any) -> Any:
    """Release every buffer in ``workspaces`` and return ``keep``."""
    for w in workspaces:
        w.release()
    return keep


class WithWorkspace(NamedTuple):
    """A result buffer plus the scratch buffers that were needed to make it.

    The tape keeps the workspace on the node while the backward pass may need it and
    releases it when the node retires.
    """

    value: Buffer
    workspace: tuple[Buffer, ...] = ()

    def release_workspace(self) -> Buffer:
        """Release the workspace, return the value."""
        return release_many_then(self.workspace, self.value)

    def release_all(self, keep: Any = None) -> Any:
        """Release the value and the workspace, return ``keep``."""
        self.value.release()
        return release_many_then(self.workspace, keep)


def same_size(op: str, **buffers: Buffer) -> int:
    """Check that the named buffers all have one size; return it."""
    items = list(buffers.items())
    n = items[0][1].size
    for name, b in items[1:]:
        if b.size != n:
            sizes = ", ".join(f"{k}={v.size}" for k, v in items)
            raise ShapeError(f"{op}: expected buffers of equal size, got {sizes}")
    return n


# -- checks of Buffer operands (every primitive's first test) --------------------------------------
def check_buffer(op: str, name: str, buf: Any, size: int | None = None) -> Buffer:
    """``buf`` must be a live Buffer (of ``size`` elements when given)."""
    # the common case first, in one test (every primitive checks each operand); a float32
    # buffer's byte count is always 4 * size
    if type(buf) is Buffer and buf._data is not None and (size is None or buf._nbytes == 4 * size):
        return buf
    if not isinstance(buf, Buffer):
        raise DTypeError(f"{op}: argument {name} must be a Buffer, got {type(buf).__name__}")
    if buf._data is None:
        raise BufferReleasedError(
            f"{op}: argument {name} was used after release() (a {buf._nbytes}-byte buffer on {buf.device})")
    if size is not None and buf.size != size:
        raise ShapeError(f"{op}: argument {name} must hold {size} elements for the given dims, got {buf.size}")
    return buf


def same_device(op: str, **buffers: Buffer) -> DeviceContext:
    """The one device context shared by all ``buffers``; mixing devices is a ``DeviceError``."""
    ctx = None
    for b in buffers.values():
        if ctx is None:
            ctx = b._ctx
        elif b._ctx is not ctx:
            where = ", ".join(f"{k} on {v.device}" for k, v in buffers.items())
            raise DeviceError(f"{op}: expected all buffers on one device, got {where}")
    assert ctx is not None
    return ctx
