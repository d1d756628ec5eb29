"""The collectives on tensors (PyTorch's names and signatures): ``all_reduce``, ``broadcast``,
``all_gather``, ``all_gather_into_tensor``, ``reduce_scatter``, ``reduce_scatter_tensor``.

As in PyTorch they update their tensor arguments in place (the tensor is rebound to the result,
outside the tape). A tensor must live where the group's engine works: CPU tensors with "mpi",
this rank's GPU with "nccl"; anything else is a DeviceError naming the call (never a silent copy).

Deterministic mode (``torchlean.set_deterministic_reductions(True)``): ``all_reduce`` and
``reduce_scatter`` with SUM or AVG gather every rank's tensor and add them in rank order
(((x0 + x1) + x2) + ...) in float32 on every rank, then scale by 1/world (rounded to float32) for
AVG. The bits depend on the values only: not on the engine's algorithm (ring, tree), the topology
or the device (the CPU and the GPU add and multiply float32 alike); and N ranks with b samples each
give the bits of one process accumulating the N micro-batches of b in rank order and then dividing
the gradients by N (world-size invariance, tests/test_distributed_mpi.py). The cost: each rank receives
(world - 1) full tensors instead of the 2 (world - 1) / world tensors of a ring all-reduce, and
holds world tensors at once; at 2 ranks the traffic is the same, at 8 ranks four times as much.
"""

from __future__ import annotations

from typing import Any, Callable

from ..errors import DeviceError, DTypeError, ShapeError
from ..kernels.flags import deterministic_reductions
from ..runtime.buffer import wrap
from ..runtime.device import get_context
from ..tensor import Tensor
from .common import DistributedError, ReduceOp
from .group import ProcessGroup, current_group
from .work import Work

__all__ = ["all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter",
           "reduce_scatter_tensor", "AsyncWork", "rank_order_sum", "array_of", "store_array"]


class AsyncWork:
    """What ``async_op=True`` returns: ``wait()`` finishes the collective and writes its result
    into the tensors (``DistTimeoutError`` past the group's timeout)."""

    def __init__(self, work: Work, store: Callable[[Any], None]) -> None:
        self._work, self._store, self._stored = work, store, False

    def is_completed(self) -> bool:
        return self._stored or self._work.is_completed()

    def wait(self, timeout: Any = None) -> bool:
        if not self._stored:
            self._store(self._work.wait())
            self._stored = True
        return True


def _finish(work: Work, store: Callable[[Any], None], async_op: bool) -> AsyncWork | None:
    handle = AsyncWork(work, store)
    if async_op:
        return handle
    handle.wait()
    return None


def _group(op: str, group: Any) -> ProcessGroup:
    g = current_group(op)
    if group is not None and group is not g:
        raise DistributedError(f"{op}: torchlean has one process group (the default); got group={group!r}")
    return g


def array_of(op: str, g: ProcessGroup, t: Any, name: str = "tensor") -> Any:
    """The flat array of ``t`` (read, never written), checked to live on the group's device."""
    if not isinstance(t, Tensor):
        raise DTypeError(f"{op}: expected a Tensor for {name}, got {type(t).__name__}")
    if t.device != g.device:
        where = "CPU tensors" if g.backend == "mpi" else f"tensors on this rank's GPU ({g.device})"
        hint = " (move it with .cpu(), or use backend='nccl')" if g.backend == "mpi" else f" (move it with .to('{g.device}'))"
        raise DeviceError(f"{op}: the process group's backend {g.backend!r} works on {where}, got {name} on "
                          f"{t.device}{hint}")
    if t._buf is not None:
        return t._buf._live()  # (read now; the collective copies it or is waited for before it returns)
    return t._arr.reshape(-1)


def store_array(t: Tensor, arr: Any) -> None:
    """Make ``t`` hold ``arr`` (a fresh flat array of t's device and dtype, t's element count)."""
    if t._buf is not None:
        t._rebind(wrap(get_context(t._device, "distributed"), arr))
    else:
        t._arr = arr.reshape(t.shape)
        t._mirror = None


def rank_order_sum(rows: Any, avg: bool) -> Any:
    """((rows[0] + rows[1]) + rows[2]) + ... in the rows' dtype; for AVG times the rounded reciprocal
    of their count, as torchlean's ``t / n`` computes: one process that sums the ranks' micro-batch
    gradients in rank order and writes ``p.grad /= n`` gets the same bits (world-size invariance)."""
    acc = rows[0].copy()
    for r in range(1, rows.shape[0]):
        acc += rows[r]
    if avg:
        acc *= acc.dtype.type(1.0 / rows.shape[0])
    return acc


def _check_op(op_name: str, op: Any, arr: Any) -> ReduceOp:
    if not isinstance(op, ReduceOp):
        raise DistributedError(f"{op_name}: op must be a torchlean.distributed.ReduceOp, got {op!r}")
    if op is ReduceOp.AVG and arr.dtype.kind != "f":
        raise DTypeError(f"{op_name}: ReduceOp.AVG needs a float tensor, got dtype {arr.dtype}")
    return op


def _ordered(op: ReduceOp, arr: Any) -> bool:
    return deterministic_reductions() and op in (ReduceOp.SUM, ReduceOp.AVG) and arr.dtype.kind == "f"


def all_reduce(tensor: Tensor, op: ReduceOp = ReduceOp.SUM, group: Any = None, async_op: bool = False) -> AsyncWork | None:
    """Every rank's ``tensor`` becomes the reduction of all ranks' tensors."""
    name = "all_reduce"
    g = _group(name, group)
    arr = array_of(name, g, tensor)
    op = _check_op(name, op, arr)
    if _ordered(op, arr):
        work = g.engine.all_gather(name, arr)
        return _finish(work, lambda rows: store_array(tensor, rank_order_sum(rows, op is ReduceOp.AVG)), async_op)
    return _finish(g.engine.all_reduce(name, arr, op), lambda out: store_array(tensor, out), async_op)


def broadcast(tensor: Tensor, src: int = 0, group: Any = None, async_op: bool = False) -> AsyncWork | None:
    """Every rank's ``tensor`` becomes rank ``src``'s."""
    name = "broadcast"
    g = _group(name, group)
    if isinstance(src, bool) or not isinstance(src, int) or not 0 <= src < g.world_size:
        raise DistributedError(f"{name}: src must be a rank in [0, {g.world_size - 1}], got {src!r}")
    arr = array_of(name, g, tensor)
    return _finish(g.engine.broadcast(name, arr, src), lambda out: store_array(tensor, out), async_op)


def _same(op: str, a: Tensor, b: Tensor, what: str) -> None:
    if a.dtype != b.dtype:
        raise DTypeError(f"{op}: {what} has dtype {b.dtype}, the input {a.dtype}")


def all_gather(tensor_list: list, tensor: Tensor, group: Any = None, async_op: bool = False) -> AsyncWork | None:
    """``tensor_list[r]`` becomes rank r's ``tensor`` (a list of world-size tensors of its shape)."""
    name = "all_gather"
    g = _group(name, group)
    arr = array_of(name, g, tensor)
    if not isinstance(tensor_list, (list, tuple)) or len(tensor_list) != g.world_size:
        raise ShapeError(f"{name}: tensor_list must be a list of {g.world_size} tensors (one per rank), got "
                         f"{type(tensor_list).__name__} of length {len(tensor_list) if hasattr(tensor_list, '__len__') else '?'}")
    for i, t in enumerate(tensor_list):
        array_of(name, g, t, f"tensor_list[{i}]")
        if t.shape != tensor.shape:
            raise ShapeError(f"{name}: tensor_list[{i}] has shape {tuple(t.shape)}, the input {tuple(tensor.shape)}")
        _same(name, tensor, t, f"tensor_list[{i}]")

    def store(rows: Any) -> None:
        for t, row in zip(tensor_list, rows):
            store_array(t, row.copy())

    return _finish(g.engine.all_gather(name, arr), store, async_op)


def all_gather_into_tensor(output_tensor: Tensor, input_tensor: Tensor, group: Any = None,
                           async_op: bool = False) -> AsyncWork | None:
    """``output_tensor`` (world_size times the input's elements: stacked or concatenated along
    dim 0) becomes every rank's input, in rank order."""
    name = "all_gather_into_tensor"
    g = _group(name, group)
    arr = array_of(name, g, input_tensor, "input_tensor")
    array_of(name, g, output_tensor, "output_tensor")
    _same(name, input_tensor, output_tensor, "output_tensor")
    if output_tensor.numel() != g.world_size * input_tensor.numel():
        raise ShapeError(f"{name}: output_tensor must hold world_size x {input_tensor.numel()} = "
                         f"{g.world_size * input_tensor.numel()} elements, got shape {tuple(output_tensor.shape)}")
    return _finish(g.engine.all_gather(name, arr), lambda rows: store_array(output_tensor, rows.reshape(-1)), async_op)


def _reduce_scatter(name: str, g: ProcessGroup, output: Tensor, flat: Any, op: ReduceOp, async_op: bool) -> AsyncWork | None:
    op = _check_op(name, op, flat)
    if _ordered(op, flat):
        n = flat.size // g.world_size
        me = g.rank

        def store(rows: Any) -> None:
            mine = rows.reshape(g.world_size, g.world_size, n)[:, me, :]
            store_array(output, rank_order_sum(mine, op is ReduceOp.AVG))

        return _finish(g.engine.all_gather(name, flat), store, async_op)
    return _finish(g.engine.reduce_scatter(name, flat, op), lambda out: store_array(output, out), async_op)


def reduce_scatter(output: Tensor, input_list: list, op: ReduceOp = ReduceOp.SUM, group: Any = None,
                   async_op: bool = False) -> AsyncWork | None:
    """``output`` on rank r becomes the reduction over ranks of their ``input_list[r]``."""
    name = "reduce_scatter"
    g = _group(name, group)
    array_of(name, g, output, "output")
    if not isinstance(input_list, (list, tuple)) or len(input_list) != g.world_size:
        raise ShapeError(f"{name}: input_list must be a list of {g.world_size} tensors (one per rank)")
    arrs = []
    for i, t in enumerate(input_list):
        arrs.append(array_of(name, g, t, f"input_list[{i}]"))
        if t.shape != output.shape:
            raise ShapeError(f"{name}: input_list[{i}] has shape {tuple(t.shape)}, output {tuple(output.shape)}")
        _same(name, output, t, f"input_list[{i}]")
    flat = g.engine.xp.concatenate(arrs)
    return _reduce_scatter(name, g, output, flat, op, async_op)


def reduce_scatter_tensor(output: Tensor, input: Tensor, op: ReduceOp = ReduceOp.SUM, group: Any = None,  # noqa: A002
                          async_op: bool = False) -> AsyncWork | None:
    """``output`` on rank r becomes the reduction over ranks of chunk r of ``input`` (world_size
    chunks of output's size, along dim 0)."""
    name = "reduce_scatter_tensor"
    g = _group(name, group)
    array_of(name, g, output, "output")
    flat = array_of(name, g, input, "input")
    _same(name, output, input, "input")
    if input.numel() != g.world_size * output.numel():
        raise ShapeError(f"{name}: input must hold world_size x {output.numel()} = {g.world_size * output.numel()} "
                         f"elements, got shape {tuple(input.shape)}")
    return _reduce_scatter(name, g, output, flat, op, async_op)
