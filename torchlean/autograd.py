"""The tape: nodes that record parents, a VJP and workspace buffers; a reverse walk to run them.

Like micrograd, every differentiable op builds its output and attaches a small backward closure.
On top of that a node owns *workspace* buffers: scratch results the backward pass needs that are
not the output of any tensor. ``backward()`` topologically sorts the graph, walks it in reverse,
and retires each node as soon as its VJP has run: the workspace is released at once (the seed's
explicit ownership, so a long training loop never waits for the garbage collector) and the
closure is dropped. Gradients of shared inputs accumulate (``x + x`` has gradient 2).
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Callable, Sequence

from .errors import AutogradError
from .runtime import primitives as P
from .runtime.buffer import Buffer, full as _full_buffer, unpin, zeros as _zeros_buffer

# "Tensor" in the annotations is torchlean.tensor.Tensor. The tape sits below it (tensor.py imports
# this module): it reads a tensor's tape fields (requires_grad, _node, _retains_grad) and calls
# its _accumulate_grad, and never names the class.
VJP = Callable[[Buffer], Sequence["Buffer | None"]]


class _GradMode(threading.local):
    enabled = True
    inference = False
    functional = 0  # grad_buffers walks (torch.autograd.grad) in progress on this thread


_mode = _GradMode()


def is_grad_enabled() -> bool:
    return _mode.enabled


def in_functional_walk() -> bool:
    """True while a ``grad_buffers`` walk (``torch.autograd.grad``) runs VJPs on this thread."""
    return _mode.functional > 0


class set_grad_enabled:
    """Context manager (and function) that turns recording on or off, restoring it on exit."""

    def __init__(self, mode: bool) -> None:
        self._prev = _mode.enabled
        _mode.enabled = bool(mode)

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        _mode.enabled = self._prev


class no_grad:
    """``with no_grad(): ...`` runs ops without recording them (also usable as a decorator)."""

    def __enter__(self) -> None:
        self._prev = _mode.enabled
        _mode.enabled = False

    def __exit__(self, *exc: object) -> None:
        _mode.enabled = self._prev

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            with no_grad():
                return fn(*args, **kwargs)

        wrapped.__name__ = getattr(fn, "__name__", "wrapped")
        wrapped.__doc__ = fn.__doc__
        return wrapped


class inference_mode(no_grad):
    """``torch.inference_mode(mode=True)``: ``no_grad`` (we keep no version counters, so there is
    nothing more to turn off). ``inference_mode(False)`` changes nothing. Usable as a decorator,
    with or without the call: ``@inference_mode`` and ``@inference_mode()``."""

    def __init__(self, mode: Any = True) -> None:
        if callable(mode):  # @inference_mode without parentheses
            self.mode, self._fn = True, mode
        else:
            self.mode, self._fn = bool(mode), None

    def __enter__(self) -> None:
        self._prev = _mode.enabled
        self._inference_prev = _mode.inference
        if self.mode:
            _mode.enabled = False
            _mode.inference = True

    def __exit__(self, *exc: object) -> None:
        _mode.enabled = self._prev
        _mode.inference = self._inference_prev

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._fn is not None:
            with inference_mode(self.mode):
                return self._fn(*args, **kwargs)
        return super().__call__(*args)


def is_inference_mode_enabled() -> bool:
    return _mode.inference


def current_mode() -> tuple[bool, bool]:
    """(recording, inference): the mode an op asked for now would run under (ops/pending.py
    replays layout ops later, under the mode of the moment they were asked for)."""
    return (_mode.enabled, _mode.inference)


class run_in_mode:
    """``with run_in_mode(mode):`` runs under a mode ``current_mode()`` returned; restores on exit."""

    def __init__(self, mode: tuple[bool, bool]) -> None:
        self.mode = mode

    def __enter__(self) -> None:
        self._prev = (_mode.enabled, _mode.inference)
        _mode.enabled, _mode.inference = self.mode

    def __exit__(self, *exc: object) -> None:
        _mode.enabled, _mode.inference = self._prev


class enable_grad(no_grad):
    """``with enable_grad(): ...`` records even inside ``no_grad``."""

    def __enter__(self) -> None:
        self._prev = _mode.enabled
        _mode.enabled = True


class Node:
    """One recorded op: its name, its edges, the VJP and the workspace it keeps.

    ``parents`` holds one edge per input, in the VJP's order: the input's own node when it has one,
    the tensor itself when it is a leaf that requires grad, None when no gradient flows to it. The
    graph never holds an intermediate tensor (PyTorch's edges point at grad_fns too): what a
    backward reads is what its VJP closure keeps, so an activation nobody saved is freed as soon as
    the program drops it. ``owner`` is the output tensor, kept only once it asks for its gradient
    (``retain_grad``, ``register_hook``).

    A VJP reads only its parents' buffers (as they were when the op ran), the output and the
    workspace. The node pins the buffers of its leaf parents until it retires, so that no
    optimizer writes over a value a later backward will read (runtime/buffer.py, ownership): an
    optimizer writes in place only into leaves, and every other buffer is an op's output, which
    nothing ever writes."""

    __slots__ = ("name", "parents", "vjp", "workspace", "pinned", "retired", "owner", "__weakref__")

    def __init__(self, name: str, parents: tuple["Tensor", ...], vjp: VJP, workspace: tuple[Buffer, ...]) -> None:
        self.name = name
        self.vjp = vjp
        self.workspace = workspace
        pinned = None
        edges = []
        for p in parents:
            pn = p._node
            if pn is not None:
                edges.append(pn)
                continue
            edges.append(p if p.requires_grad else None)
            b = p._buf
            if b is not None:  # (int and bool tensors have no float buffer)
                b._pins += 1
                if pinned is None:
                    pinned = [b]
                else:
                    pinned.append(b)
        self.parents = tuple(edges)
        self.pinned = pinned
        self.retired = False
        self.owner = None

    def retire(self) -> None:
        """Release the workspace, unpin the parents' buffers and drop the closure; the node can no
        longer run backward."""
        if self.workspace:
            for w in self.workspace:
                w.release()
            self.workspace = ()
        if self.pinned:
            unpin(self.pinned)
            self.pinned = None
        self.vjp = None  # type: ignore[assignment]
        self.parents = ()
        self.owner = None
        self.retired = True

    def __repr__(self) -> str:
        return f"<Node {self.name}{' retired' if self.retired else ''}>"


class GradFn:
    """``Tensor.grad_fn``: a read-only handle on the tape node that made a tensor, with PyTorch's
    ``name()`` and ``next_functions`` (one ``(edge, 0)`` per input: the input's GradFn, an
    ``AccumulateGrad`` for a leaf that requires grad, None where no gradient flows). Names are our
    ops' (``linear``, ``lstm_recurrence``), not PyTorch's ``AddmmBackward0``; after backward the
    node's edges are freed, so ``next_functions`` is empty, and the handle cannot run backward."""

    __slots__ = ("_node",)

    def __init__(self, node: Node) -> None:
        self._node = node

    def name(self) -> str:
        return self._node.name

    @property
    def next_functions(self) -> tuple:
        return tuple((None if e is None else GradFn(e) if type(e) is Node else AccumulateGrad(e), 0)
                     for e in self._node.parents)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GradFn) and other._node is self._node

    def __hash__(self) -> int:
        return id(self._node)

    def __repr__(self) -> str:
        return f"<{self._node.name} object>"


class AccumulateGrad:
    """The ``next_functions`` edge to a leaf that requires grad (``variable`` is the leaf)."""

    __slots__ = ("variable",)

    def __init__(self, variable: "Tensor") -> None:
        self.variable = variable

    def name(self) -> str:
        return "AccumulateGrad"

    next_functions: tuple = ()

    def __repr__(self) -> str:
        return "<AccumulateGrad object>"


def keep_owner(t: "Tensor") -> None:
    """``t`` asked for its own gradient (retain_grad, a hook): its node keeps it, so that backward
    can hand the gradient to it."""
    if t._node is not None:
        t._node.owner = t


def record_inplace(name: str, t: "Tensor", parents: Sequence["Tensor"], vjp: VJP, old: "Tensor") -> None:
    """``t`` was just updated in place while recording: it gets a node over ``parents`` (``old``
    among them: a stand-in holding t's previous value and node). Ops recorded before the update
    hold t's previous node as their edge, so their gradients reach the old value; later ones reach
    the new node (PyTorch's graph keeps the two versions apart the same way)."""
    node = Node(name, tuple(parents), vjp, ())
    t._node = node
    t.requires_grad = True
    if t._retains_grad or id(t) in _tensor_hooks:
        node.owner = t


def record(name: str, out: "Tensor", parents: Sequence["Tensor"], vjp: VJP,
           workspace: Sequence[Buffer] = ()) -> "Tensor":
    """Attach a node to ``out`` when recording is on and a parent needs a gradient.

    When nothing will be recorded the workspace is released at once: no backward can need it.
    """
    if _mode.enabled:
        # a plain loop, not any(<generator>): this runs once per op and the generator costs more
        # than the test itself for the usual one or two parents
        for p in parents:
            if p.requires_grad:
                out.requires_grad = True
                out._node = Node(name, tuple(parents), vjp, tuple(workspace))
                return out
    for w in workspace:
        w.release()
    return out


def recompute(name: str, fn: Callable[..., "Tensor"], inputs: Sequence["Tensor"]) -> "Tensor":
    """``fn(*inputs)`` recorded as one node that keeps only ``inputs`` (activation checkpointing):
    the forward runs without recording, so nothing ``fn`` computes on the way outlives it, and the
    VJP runs ``fn`` again, recording, from leaves bound to the inputs' buffers as they were at the
    call, then walks that graph back (``grad_buffers``). The gradients are the bits the graph
    recorded directly would give (the same ops in the same order), for a second forward. ``fn``
    must read no tensor that requires grad but ``inputs`` (its gradient would be lost) and draw no
    random numbers."""
    if not _mode.enabled or not any(t.requires_grad for t in inputs):
        return fn(*inputs)
    saved = [(t.detach(), t.requires_grad) for t in inputs]
    prev, _mode.enabled = _mode.enabled, False
    try:
        out = fn(*inputs)
    finally:
        _mode.enabled = prev

    def vjp(g: Buffer):
        leaves = [t.detach().requires_grad_(rg) for t, rg in saved]
        prev_enabled, _mode.enabled = _mode.enabled, True
        try:
            again = fn(*leaves)
        finally:
            _mode.enabled = prev_enabled
        wanted = [t for t in leaves if t.requires_grad]
        found = iter(grad_buffers([again], [g], wanted))
        return tuple(next(found) if t.requires_grad else None for t in leaves)

    return record(name, out, inputs, vjp)


# Marks, on the DFS stack of _topological, that the item just below it has had its parents
# visited and comes next in the order (a flat stack: no (item, flag) pair per visit).
_POSTORDER = object()


def _item(t: "Tensor") -> "Node | Tensor":
    """What the walk visits for ``t``: its node, or the tensor itself when it is a leaf."""
    return t if t._node is None else t._node


def _topological(root: "Node | Tensor") -> list["Node | Tensor"]:
    """Nodes and leaf tensors reachable from ``root``, each after every item it feeds."""
    order: list[Any] = []
    seen: set[int] = set()
    stack: list[Any] = [root]
    push, pop, mark, emit = stack.append, stack.pop, seen.add, order.append
    while stack:  # iterative DFS: deep graphs (long RNN unrolls) must not hit the recursion limit
        t = pop()
        if t is _POSTORDER:
            emit(pop())
            continue
        if id(t) in seen:
            continue
        mark(id(t))
        push(t)
        push(_POSTORDER)
        if type(t) is Node:
            if t.retired:
                raise AutogradError(
                    f"backward: the graph through {t.name!r} was already freed by an earlier backward(); "
                    "pass retain_graph=True to the first call to backward twice")
            for p in t.parents:
                if p is not None and id(p) not in seen:
                    push(p)
    return order


def _gather(grads: dict, node: Node, gt: Buffer) -> None:
    """Run ``node``'s VJP on ``gt`` and add each parent's share into ``grads``."""
    add = P.add
    for p, pg in zip(node.parents, node.vjp(gt)):
        if pg is None or p is None:
            continue
        key = id(p)
        prev = grads.get(key)
        if prev is None:
            grads[key] = pg
        elif type(prev) is Buffer and type(pg) is Buffer:
            grads[key] = add(prev, pg)
        else:
            grads[key] = _Parts.of(prev, pg)


def _own_grad(t: "Tensor | None", gt: Buffer, leaf: bool) -> Buffer:
    """Run t's hooks on its gradient and keep it in ``t.grad`` where t is a leaf or retains it."""
    if t is None:
        return gt
    if _tensor_hooks and id(t) in _tensor_hooks:
        gt = _run_tensor_hooks(t, gt)
    if leaf or t._retains_grad:
        t._accumulate_grad(gt)
        if leaf and _post_accumulate_hooks and id(t) in _post_accumulate_hooks:
            for hook in list(_post_accumulate_hooks[id(t)].values()):
                hook(t)
    return gt


def backward(root: "Tensor", grad: Buffer | None = None, retain_graph: bool = False) -> None:
    """Accumulate d(root)/d(leaf) into every leaf's ``.grad``; ``grad`` is d(loss)/d(root), already
    checked against root by ``Tensor.backward`` (None: ones, for a one-element root).

    Each node retires as soon as its VJP has run: what it saved is freed there, not at the end."""
    if not root.requires_grad:
        raise AutogradError("backward: the tensor does not require grad and has no recorded graph")
    if grad is None:
        if root.numel() != 1:
            raise AutogradError(
                f"backward: a gradient can be created implicitly only for a one-element output, got shape {root.shape}")
        g = _ones_like(root)
    else:
        g = grad
    start = _item(root)
    if type(start) is Node and start.owner is None and (root._retains_grad or id(root) in _tensor_hooks):
        start.owner = root
    order = _topological(start)
    grads: dict[int, Any] = {id(start): g}
    take = grads.pop
    mode = _mode
    prev_enabled, mode.enabled = mode.enabled, False  # no_grad() for the walk, without the object
    try:
        for i in range(len(order) - 1, -1, -1):
            item = order[i]
            order[i] = None  # (the walk holds nothing it has passed)
            gt = take(id(item), None)
            if gt is not None and type(gt) is not Buffer:
                gt = gt.materialize()
            if type(item) is not Node:
                if gt is not None:
                    _own_grad(item, gt, True)
                continue
            if gt is None:
                if not retain_graph:
                    item.retire()
                continue
            if item.owner is not None:
                gt = _own_grad(item.owner, gt, False)
            _gather(grads, item, gt)
            del gt
            if not retain_graph:
                item.retire()
    finally:
        mode.enabled = prev_enabled


# Gradient hooks of tensors (``Tensor.register_hook``) by id(tensor): hooks are rare, so the walk
# above tests one (usually empty) dict per tensor; an entry goes when its tensor is collected.
_tensor_hooks: dict[int, dict[int, tuple[Callable, Callable]]] = {}
_hook_ids = iter(range(1 << 62))


# Hooks that run after a leaf's gradient was accumulated into its ``.grad``
# (``Tensor.register_post_accumulate_grad_hook``: DistributedDataParallel's bucket trigger), by id(tensor).
_post_accumulate_hooks: dict[int, dict[int, Callable]] = {}


class TensorHookHandle:
    """``remove()`` unregisters the hook (also on leaving a ``with`` block)."""

    def __init__(self, key: int, hook_id: int, table: dict | None = None) -> None:
        self._key, self.id = key, hook_id
        self._table = _tensor_hooks if table is None else table

    def remove(self) -> None:
        hooks = self._table.get(self._key)
        if hooks is not None:
            hooks.pop(self.id, None)
            if not hooks:
                del self._table[self._key]

    def __enter__(self) -> "TensorHookHandle":
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def register_tensor_hook(t: "Tensor", hook: Callable, wrap: Callable) -> TensorHookHandle:
    """Run ``hook(grad)`` whenever t's gradient is computed in backward, before it is accumulated into
    ``t.grad`` or passed on; a returned tensor replaces the gradient. ``wrap(buffer, shape)`` makes
    the tensor the hook sees."""
    key = id(t)
    if key not in _tensor_hooks:
        _tensor_hooks[key] = {}
        weakref.finalize(t, _tensor_hooks.pop, key, None)
    hook_id = next(_hook_ids)
    _tensor_hooks[key][hook_id] = (hook, wrap)
    keep_owner(t)
    return TensorHookHandle(key, hook_id)


def register_post_accumulate_hook(t: "Tensor", hook: Callable) -> TensorHookHandle:
    """Run ``hook(t)`` each time backward has accumulated a gradient into the leaf ``t``'s ``.grad``
    (once per backward: a leaf's contributions are summed before they reach it)."""
    key = id(t)
    if key not in _post_accumulate_hooks:
        _post_accumulate_hooks[key] = {}
        weakref.finalize(t, _post_accumulate_hooks.pop, key, None)
    hook_id = next(_hook_ids)
    _post_accumulate_hooks[key][hook_id] = hook
    return TensorHookHandle(key, hook_id, _post_accumulate_hooks)


def _run_tensor_hooks(t: "Tensor", g: Buffer) -> Buffer:
    for hook, wrap in list(_tensor_hooks[id(t)].values()):
        res = hook(wrap(g, t.shape))
        if res is not None:
            if getattr(res, "shape", None) != t.shape:
                raise AutogradError(f"register_hook: a hook returned {type(res).__name__} of shape "
                                    f"{getattr(res, 'shape', None)}, expected a gradient of shape {t.shape}")
            g = res._float_buffer("register_hook")
    return g


class SliceGrad:
    """A VJP result that is zero outside one contiguous run: ``buf`` at flat offset ``start`` of a
    ``total``-element gradient. A slice's VJP returns one instead of padding ``buf`` with zeros, so
    that the gradients of the parts of one tensor (``q, k, v = qkv[0], qkv[1], qkv[2]``) are joined
    by concatenation (pieces - 1 concat1d) rather than padded and added (2 concats, 2 zero fills
    and an add per part). Values are those of the padded sums, except that a -0 stays -0."""

    __slots__ = ("buf", "start", "total")

    def __init__(self, buf: Buffer, start: int, total: int) -> None:
        self.buf, self.start, self.total = buf, start, total

    def materialize(self) -> Buffer:
        return _Parts([], [self]).materialize()


class BlockGrad:
    """A VJP result that is zero outside one block of a middle axis: ``buf`` (outer, length, inner)
    at [:, start:start+length, :] of an (outer, size, inner) gradient. narrow_block's VJP returns
    one, so that the gradients of the pieces of a split along a later dim (``q, k, v =
    qkv.split(C, dim=-1)``) are joined by concat_block (pieces - 1 launches, each element written
    once per join) rather than each padded with zeros and added. Values are those of the padded
    sums, except that a -0 stays -0."""

    __slots__ = ("buf", "outer", "size", "start", "length", "inner")

    def __init__(self, buf: Buffer, outer: int, size: int, start: int, length: int, inner: int) -> None:
        self.buf, self.outer, self.size, self.start, self.length, self.inner = buf, outer, size, start, length, inner

    def materialize(self) -> Buffer:
        return _Parts([], [], [self]).materialize()


def join_blocks(pieces: Sequence[tuple[Buffer, int]], outer: int, inner: int) -> Buffer:
    """The (outer, sum of sizes, inner) join along the middle axis of pieces (buf, size), each
    (outer, size, inner): concat_block pairwise in rounds (a balanced tree), so each element is
    copied about log2(len(pieces)) times, not len(pieces) times as in a chain."""
    level = list(pieces)
    while len(level) > 1:
        nxt = [(P.concat_block(a, b, outer, na, nb, inner), na + nb)
               for (a, na), (b, nb) in zip(level[0::2], level[1::2])]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0][0]


class _Parts:
    """Gradient contributions to one tensor not yet summed: full Buffers, SliceGrads and BlockGrads."""

    __slots__ = ("full", "slices", "blocks")

    def __init__(self, full: list[Buffer], slices: list[SliceGrad], blocks: list[BlockGrad] | None = None) -> None:
        self.full, self.slices, self.blocks = full, slices, [] if blocks is None else blocks

    @staticmethod
    def of(prev: "Buffer | SliceGrad | BlockGrad | _Parts", g: "Buffer | SliceGrad | BlockGrad") -> "_Parts":
        parts = prev if type(prev) is _Parts else _Parts([], [])
        for x in ((g,) if parts is prev else (prev, g)):
            kind = type(x)
            (parts.slices if kind is SliceGrad else parts.blocks if kind is BlockGrad else parts.full).append(x)
        return parts

    def materialize(self) -> Buffer:
        out = self._join_slices() if self.slices else None
        groups: dict[tuple[int, int, int], list[BlockGrad]] = {}
        for b in self.blocks:
            groups.setdefault((b.outer, b.size, b.inner), []).append(b)
        for (outer, size, inner), blocks in groups.items():
            joined = self._join_blocks(blocks, outer, size, inner)
            out = joined if out is None else P.add(out, joined)
        for f in self.full:
            out = f if out is None else P.add(out, f)
        return out

    def _join_slices(self) -> Buffer:
        total = self.slices[0].total
        dev = self.slices[0].buf.device
        # Disjoint runs in offset order join into one buffer; a run overlapping an earlier one is
        # padded and added like a full gradient.
        runs, rest, end = [], [], 0
        for s in sorted(self.slices, key=lambda s: s.start):
            (runs if s.start >= end else rest).append(s)
            if s.start >= end:
                end = s.start + s.buf.size
        pieces, pos = [], 0
        for s in runs:
            if s.start > pos:
                pieces.append(_zeros_buffer(s.start - pos, dev))
            pieces.append(s.buf)
            pos = s.start + s.buf.size
        if pos < total:
            pieces.append(_zeros_buffer(total - pos, dev))
        out = pieces[0]
        for piece in pieces[1:]:
            out = P.concat1d(out, piece, out.size, piece.size)
        for s in rest:
            out = P.add(out, SliceGrad(s.buf, s.start, s.total).materialize())
        return out

    @staticmethod
    def _join_blocks(blocks: list[BlockGrad], outer: int, size: int, inner: int) -> Buffer:
        """Blocks of one (outer, size, inner) gradient summed: the disjoint ones (in start order)
        joined with zero blocks in the gaps, a block overlapping an earlier one padded and added."""
        runs, rest, end = [], [], 0
        for b in sorted(blocks, key=lambda b: b.start):
            (runs if b.start >= end else rest).append(b)
            if b.start >= end:
                end = b.start + b.length
        if len(runs) == 1:  # one block: one placement into zeros
            b = runs[0]
            out = P.narrow_block_bwd(b.buf, outer, size, b.start, b.length, inner)
        else:
            dev = runs[0].buf.device
            pieces, pos = [], 0
            for b in runs:
                if b.start > pos:
                    pieces.append((_zeros_buffer(outer * (b.start - pos) * inner, dev), b.start - pos))
                pieces.append((b.buf, b.length))
                pos = b.start + b.length
            if pos < size:
                pieces.append((_zeros_buffer(outer * (size - pos) * inner, dev), size - pos))
            out = join_blocks(pieces, outer, inner)
        for b in rest:
            out = P.add(out, P.narrow_block_bwd(b.buf, outer, size, b.start, b.length, inner))
        return out


def _ones_like(t: "Tensor") -> Buffer:
    return _full_buffer(t.numel(), 1.0, t.device)


def grad_buffers(roots: Sequence["Tensor"], root_grads: Sequence[Buffer], inputs: Sequence["Tensor"],
                 retain_graph: bool = False) -> list[Buffer | None]:
    """``torch.autograd.grad``'s walk: d(sum of roots . root_grads)/d(input) for each of ``inputs``
    (None where an input is not reached), accumulating into no ``.grad``. Gradient hooks run as in
    ``backward``; the nodes retire unless ``retain_graph``."""
    order: list[Any] = []
    placed: set[int] = set()
    for root in roots:  # the post-orders joined, each item once: still parents before children
        if type(_item(root)) is Node and (root._retains_grad or id(root) in _tensor_hooks):
            keep_owner(root)
        for t in _topological(_item(root)):
            if id(t) not in placed:
                placed.add(id(t))
                order.append(t)
    grads: dict[int, Any] = {}
    for root, g in zip(roots, root_grads):
        key = id(_item(root))
        prev = grads.get(key)
        grads[key] = g if prev is None else P.add(prev, g)
    wanted = {id(_item(t)) for t in inputs}
    found: dict[int, Buffer] = {}
    mode = _mode
    prev_enabled, mode.enabled = mode.enabled, False
    mode.functional += 1
    try:
        for item in reversed(order):
            gt = grads.pop(id(item), None)
            if gt is not None and type(gt) is not Buffer:
                gt = gt.materialize()
            node = item if type(item) is Node else None
            owner = item if node is None else node.owner
            if gt is not None and owner is not None and _tensor_hooks and id(owner) in _tensor_hooks:
                gt = _run_tensor_hooks(owner, gt)
            if gt is not None and id(item) in wanted:
                found[id(item)] = gt
            if node is None:
                continue
            if gt is not None:
                _gather(grads, node, gt)
            if not retain_graph:
                node.retire()
    finally:
        mode.enabled = prev_enabled
        mode.functional -= 1
    return [found.get(id(_item(t))) for t in inputs]
