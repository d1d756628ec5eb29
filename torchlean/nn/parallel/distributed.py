"""``DistributedDataParallel``: one model replica per process, gradients averaged over the ranks
during backward (PyTorch's class and arguments).

At wrap time every rank checks that all ranks hold the same parameters (names, shapes, in
order; a mismatch is a DistributedError naming the first difference, raised on every rank) and
takes rank 0's parameters and buffers. Gradients go in buckets of about ``bucket_cap_mb``, filled
in reverse parameter order (roughly the order backward produces them): a leaf's
post-accumulate-grad hook copies its gradient into its bucket, and a bucket whose gradients are
all in starts its all-reduce at once (MPI: a nonblocking request that the later hooks drive;
NCCL: on the engine's own stream), so communication overlaps the rest of backward. When the last
bucket has started, the hook waits for all of them (the group's timeout applies; on NCCL the wait
is in stream order, watched by the engine's watchdog) and sets each parameter's ``.grad`` to the
average over ranks (in deterministic mode: the rank-order sum
divided by the world size, ``torchlean.distributed.collectives``).

``no_sync()`` skips the reduction (gradients accumulate locally); the first backward after it
reduces the accumulated gradients. ``find_unused_parameters=True`` walks the output's graph after
each forward and counts parameters it does not reach as ready (their gradient, or zeros, is
reduced); torch instead leaves a gradient that no rank produced untouched.
"""

from __future__ import annotations

import contextlib
import json
import weakref
from typing import Any, Iterator

import numpy as np

from ...autograd import Node, is_grad_enabled
from ...distributed.collectives import array_of, rank_order_sum, store_array
from ...distributed.common import DistributedError, ReduceOp
from ...distributed.group import current_group
from ...errors import DeviceError
from ...kernels.flags import deterministic_reductions
from ...runtime.buffer import Buffer, wrap
from ...runtime.device import canonical_device, get_context
from ...tensor import Tensor
from ..modules.module import Module

__all__ = ["DistributedDataParallel"]

_OP = "DistributedDataParallel"


# Gradients start at multiples of this many elements in their bucket, so that the averaged
# gradients handed out as views of it start 16-byte aligned, as every buffer (float4 kernels).
_ALIGN = 4


class _Bucket:
    __slots__ = ("params", "offsets", "numel", "padded", "pending", "flat", "work")

    def __init__(self) -> None:
        self.params: list[Tensor] = []
        self.offsets: list[int] = []
        self.numel = 0
        self.padded = False  # some gradient is followed by alignment padding (zeroed each step)
        self.pending = 0
        self.flat: Any = None
        self.work: Any = None


def _signature(module: Module) -> list[list[Any]]:
    return [[name, list(p.shape)] for name, p in module.named_parameters()]


def _first_difference(sigs: list[list[list[Any]]]) -> str | None:
    ref = sigs[0]
    for rank, sig in enumerate(sigs[1:], 1):
        for i in range(max(len(ref), len(sig))):
            a = ref[i] if i < len(ref) else None
            b = sig[i] if i < len(sig) else None
            if a == b:
                continue
            if a is None:
                return f"rank {rank} has an extra parameter {b[0]!r} of shape {tuple(b[1])} (parameter {i}) that rank 0 lacks"
            if b is None:
                return f"rank 0 has parameter {a[0]!r} of shape {tuple(a[1])} (parameter {i}) that rank {rank} lacks"
            if a[0] != b[0]:
                return f"parameter {i} is {a[0]!r} on rank 0 but {b[0]!r} on rank {rank}"
            return f"parameter {a[0]!r} has shape {tuple(a[1])} on rank 0 but {tuple(b[1])} on rank {rank}"
    return None


class DistributedDataParallel(Module):
    """``DistributedDataParallel(module, device_ids=None, broadcast_buffers=True, bucket_cap_mb=25,
    find_unused_parameters=False)`` over the default process group (see the module docstring).
    ``state_dict`` keys carry the ``module.`` prefix, as in PyTorch."""

    def __init__(self, module: Module, device_ids: Any = None, output_device: Any = None, dim: int = 0,
                 broadcast_buffers: bool = True, process_group: Any = None, bucket_cap_mb: float | None = 25,
                 find_unused_parameters: bool = False, check_reduction: bool = False,
                 gradient_as_bucket_view: bool = False, static_graph: bool = False) -> None:
        super().__init__()
        if not isinstance(module, Module):
            raise TypeError(f"{_OP}: expected a Module, got {type(module).__name__}")
        g = current_group(_OP)
        if process_group is not None and process_group is not g:
            raise DistributedError(f"{_OP}: torchlean has one process group (the default); got {process_group!r}")
        self.module = module
        self.device_ids = self._check_devices(g, module, device_ids)
        self.broadcast_buffers = bool(broadcast_buffers)
        self.find_unused_parameters = bool(find_unused_parameters)
        self.require_backward_grad_sync = True
        cap = 25 if bucket_cap_mb is None else bucket_cap_mb
        if cap <= 0:
            raise DistributedError(f"{_OP}: bucket_cap_mb must be positive, got {bucket_cap_mb!r}")
        self._ddp = _Reducer(self, g, int(cap * 2**20))

    @staticmethod
    def _check_devices(g: Any, module: Module, device_ids: Any) -> list[int] | None:
        where = {t.device for t in list(module.parameters()) + list(module.buffers())}
        if g.backend == "mpi":
            if device_ids:
                raise DeviceError(f"{_OP}: device_ids={device_ids!r} with backend 'mpi', which works on CPU tensors "
                                  f"(leave device_ids None)")
            want = "cpu"
        else:
            ids = [g.device] if device_ids is None else [canonical_device(d, _OP) for d in device_ids]
            if len(ids) != 1:
                raise DeviceError(f"{_OP}: device_ids must name this rank's one GPU, got {device_ids!r}")
            if ids[0] != g.device:
                raise DeviceError(f"{_OP}: device_ids={device_ids!r} names {ids[0]}, but this rank's process group "
                                  f"works on {g.device}")
            want = g.device
        stray = sorted(str(d) for d in where if d != want)
        if stray:
            raise DeviceError(f"{_OP}: the module must have its parameters and buffers on {want} (backend "
                              f"{g.backend!r}), found some on {', '.join(stray)}")
        return None if g.backend == "mpi" else [int(want.split(":")[1])]

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Backward passes of forwards run inside accumulate gradients locally, unreduced."""
        prev = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = prev

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        reducer = self._ddp
        reducer.before_forward()
        out = self.module(*inputs, **kwargs)
        reducer.after_forward(out)
        return out


class _Reducer:
    """The buckets of one DistributedDataParallel and their state across forward and backward."""

    def __init__(self, ddp: DistributedDataParallel, g: Any, cap_bytes: int) -> None:
        self.group = g
        self.engine = g.engine
        module = ddp.module
        self._ddp = weakref.ref(ddp)
        self._check_same_parameters(module)
        self._sync_module_states(module, buffers_only=False)
        params = [p for p in module.parameters() if p.requires_grad]
        self.buckets: list[_Bucket] = []
        self.bucket_of: dict[int, tuple[_Bucket, int]] = {}
        cur = _Bucket()
        for p in reversed(params):
            if cur.params and 4 * (cur.numel + p.numel()) > cap_bytes:
                self.buckets.append(cur)
                cur = _Bucket()
            self.bucket_of[id(p)] = (cur, cur.numel)
            cur.params.append(p)
            cur.offsets.append(cur.numel)
            n = p.numel()
            cur.numel += -(-n // _ALIGN) * _ALIGN
            cur.padded = cur.padded or n % _ALIGN != 0
        if cur.params:
            self.buckets.append(cur)
        self.params = params
        self.averaged: list[Any] = []  # the step's averaged buckets, which the .grad views share
        self.launched = 0
        self.hooked = 0  # gradients the hooks delivered since the last forward
        self.armed = False  # a forward that will be reduced ran; its backward has not finished
        self.handles = [p.register_post_accumulate_grad_hook(self._make_hook()) for p in params]

    # -- wrap time ---------------------------------------------------------------------------
    def _check_same_parameters(self, module: Module) -> None:
        """Every rank compares every rank's (name, shape) list, so all raise the same error."""
        engine, what = self.engine, f"{_OP} (wrap-time parameter check)"
        raw = json.dumps(_signature(module)).encode()
        lengths = engine.to_host(engine.all_gather(what, engine.to_device(np.array([len(raw)], np.int64))).wait())
        longest = int(lengths.max())
        mine = np.zeros(longest, np.uint8)
        mine[:len(raw)] = np.frombuffer(raw, np.uint8)
        rows = engine.to_host(engine.all_gather(what, engine.to_device(mine)).wait())
        sigs = [json.loads(bytes(rows[r, :int(lengths[r, 0])]).decode()) for r in range(rows.shape[0])]
        diff = _first_difference(sigs)
        if diff is not None:
            raise DistributedError(f"{_OP}: the ranks' models differ: {diff}; every rank must build the same model")

    def _sync_module_states(self, module: Module, buffers_only: bool) -> None:
        """Rank 0's parameters (unless ``buffers_only``) and buffers on every rank: one broadcast of
        all float tensors joined, one per integer tensor."""
        tensors = [] if buffers_only else list(module.parameters())
        tensors += [b for b in module.buffers() if b is not None]
        if self.group.world_size == 1 or not tensors:
            return
        floats = [t for t in tensors if t.is_floating_point()]
        xp = self.engine.xp
        if floats:
            flat = xp.concatenate([array_of(_OP, self.group, t) for t in floats])
            got = self.engine.broadcast(f"{_OP} (broadcast of rank 0's state)", flat, 0).wait()
            pos = 0
            for t in floats:
                n = t.numel()
                store_array(t, got[pos:pos + n].copy())
                pos += n
        for t in tensors:
            if not t.is_floating_point():
                store_array(t, self.engine.broadcast(f"{_OP} (broadcast of rank 0's state)",
                                                     array_of(_OP, self.group, t), 0).wait())

    # -- each step ---------------------------------------------------------------------------
    def before_forward(self) -> None:
        self.engine.raise_if_failed(_OP)  # (a collective the watchdog found past its deadline)
        # The last step's buckets leave the telemetry here (gradients still held keep their memory
        # as views): held into the next backward, they would raise its peak by the gradients' size.
        self.averaged = []
        if self.armed and self.hooked:
            raise DistributedError(
                f"{_OP}: the previous backward reduced only {self.launched} of {len(self.buckets)} gradient buckets: "
                f"some parameters received no gradient. Pass find_unused_parameters=True if the forward does "
                f"not use every parameter, and make sure the loss depends on all outputs")
        ddp = self._ddp()
        if ddp is not None and ddp.broadcast_buffers and ddp.require_backward_grad_sync:
            self._sync_module_states(ddp.module, buffers_only=True)

    def after_forward(self, out: Any) -> None:
        ddp = self._ddp()
        self.armed = bool(ddp is not None and ddp.require_backward_grad_sync and self.buckets and is_grad_enabled())
        self.launched = self.hooked = 0
        for b in self.buckets:
            b.pending, b.flat, b.work = len(b.params), None, None
        if self.armed and ddp is not None and ddp.find_unused_parameters:
            used = _reached_leaves(out)
            for p in self.params:
                if id(p) not in used:
                    self._ready(p)

    def _make_hook(self) -> Any:
        me = weakref.ref(self)

        def hook(p: Tensor) -> None:
            reducer = me()
            if reducer is not None and reducer.armed:
                reducer.hooked += 1
                reducer._ready(p)

        return hook

    def _ready(self, p: Tensor) -> None:
        b, off = self.bucket_of[id(p)]
        n = p.numel()
        if b.flat is None:
            xp = self.engine.xp
            b.flat = (xp.zeros if b.padded else xp.empty)(b.numel, np.float32)
        if p.grad is None:
            b.flat[off:off + n] = 0
        else:
            b.flat[off:off + n] = array_of(_OP, self.group, p.grad, "the gradient of a parameter")
        b.pending -= 1
        if b.pending == 0:
            what = f"{_OP} (gradient all-reduce, bucket {self.buckets.index(b)})"
            if deterministic_reductions():
                b.work = self.engine.all_gather(what, b.flat)
            else:
                b.work = self.engine.all_reduce(what, b.flat, ReduceOp.AVG)
            self.launched += 1
            if self.launched == len(self.buckets):
                self._finish()
                return
        self.engine.progress()

    def _finish(self) -> None:
        """Every bucket has started: wait for them and hand each parameter its averaged gradient,
        a view of its bucket (no copy on the step's critical path, as PyTorch's
        gradient_as_bucket_view)."""
        self.armed = False
        ordered = deterministic_reductions()
        ctx = get_context(self.group.device, _OP)
        averaged = []
        for b in self.buckets:
            got = b.work.enqueue()  # (NCCL: in stream order, the host goes on to the optimizer step)
            whole = wrap(ctx, rank_order_sum(got, True) if ordered else got)
            averaged.append(whole)  # counted in the telemetry while its views are the gradients
            avg = whole._data
            for p, off in zip(b.params, b.offsets):
                p.grad = Tensor._wrap(Buffer._view(avg[off:off + p.numel()], ctx, whole), p.shape)
            b.flat, b.work = None, None
        self.averaged = averaged
        self.launched = self.hooked = 0


def _reached_leaves(out: Any) -> set[int]:
    """ids of the leaf tensors the graphs of the tensors in ``out`` reach."""
    stack: list[Any] = []

    def collect(v: Any) -> None:
        if isinstance(v, Tensor):
            stack.append(v._node if v._node is not None else v)
        elif isinstance(v, (list, tuple)):
            for x in v:
                collect(x)
        elif isinstance(v, dict):
            for x in v.values():
                collect(x)

    collect(out)
    seen: set[int] = set()
    leaves: set[int] = set()
    while stack:
        item = stack.pop()
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        if type(item) is Node:
            stack.extend(item.parents)
        else:
            leaves.add(id(item))
    return leaves
