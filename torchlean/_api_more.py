"""The long tail of PyTorch's everyday names: torch-level functions, Tensor methods,
``torch.autograd.grad`` / ``Function`` / ``functional.jacobian``, printing options and
``torch.compile``. The computing parts are ops (ops/extra.py and the ops they compose); this
module gives them PyTorch's names and signatures and binds the methods onto ``Tensor``.

Decided on purpose:

* ``compile(model)`` returns ``model`` unchanged (torchlean runs eagerly; PyTorch programs call
  it optionally, so it is silent).
* ``contiguous()`` returns the tensor itself and ``is_contiguous()`` is True: every torchlean tensor
  is one row-major buffer. ``pin_memory()`` returns the tensor itself (host memory is not pinned).
* ``autograd.set_detect_anomaly`` / ``detect_anomaly`` are accepted and change nothing: a
  backward that meets a problem already raises an ``AutogradError`` naming the op.
* ``autograd.grad(..., create_graph=True)`` (higher-order gradients) raises: the VJPs run on
  buffers, not on recorded ops.
"""

from __future__ import annotations

import math
import numbers
import os
import sys
import types
from typing import Any, Callable

import numpy as np

from . import autograd, dtypes, ops
from ._validate import type_name
from .errors import ArgumentError, AutogradError, AxisError, DTypeError, ShapeError
from .ops import extra as E
from .ops.creation import random_bits
from .ops.results import array_result, host_values
from .runtime.rng import default_generator
from .size import Size
from .tensor import Tensor, dim_index, print_options, randn, tensor

__all__ = ["Size", "where", "masked_fill", "nonzero", "argwhere", "concat", "concatenate", "t", "neg", "negative",
           "reciprocal", "fmod", "relu", "broadcast_to", "broadcast_tensors", "numel", "isclose", "allclose",
           "equal", "cross", "cdist", "mode", "histc", "erfinv", "normal", "seed", "initial_seed", "compile",
           "set_printoptions", "index_add", "index_fill", "index_copy", "unfold_windows"]

where = E.where
masked_fill = E.masked_fill
argwhere = E.argwhere
fmod = E.fmod
broadcast_to = E.broadcast_to
broadcast_tensors = E.broadcast_tensors
isclose, allclose, equal = E.isclose, E.allclose, E.equal
cross, cdist, mode, histc, erfinv = E.cross, E.cdist, E.mode, E.histc, E.erfinv
index_add, index_fill, index_copy = E.index_add, E.index_fill, E.index_copy
unfold_windows = E.unfold
concat = concatenate = ops.cat
t = ops.t
neg = negative = ops.neg
reciprocal = ops.reciprocal
relu = ops.relu


def nonzero(input: Tensor, *, as_tuple: bool = False) -> Any:  # noqa: A002
    return E.nonzero(input, as_tuple=as_tuple)


def numel(input: Tensor) -> int:  # noqa: A002
    if not isinstance(input, Tensor):
        raise DTypeError(f"numel: expected a Tensor for input, got {type_name(input)}")
    return input.numel()


def _std_checked(std: Any) -> None:
    vals = host_values(std) if isinstance(std, Tensor) else np.asarray(std)
    if np.any(vals < 0):
        raise ArgumentError(f"normal: expected all elements of std >= 0.0, got {float(np.min(vals))}")


def normal(mean: Any = 0.0, std: Any = 1.0, size: Any = None, *, generator: Any = None, out: Any = None,
           dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    """PyTorch's four overloads: normal(mean_tensor, std_tensor) (broadcast), normal(mean_tensor,
    std=1.0), normal(mean, std_tensor) and normal(mean, std, size); mean + std * a standard normal
    draw of torchlean's counter RNG. Like PyTorch's, the result carries no gradient to mean or std."""
    if out is not None:
        raise ArgumentError("normal: out= is not supported (use the returned tensor)")
    for name, v in (("mean", mean), ("std", std)):
        if not isinstance(v, Tensor) and (isinstance(v, bool) or not isinstance(v, numbers.Real)):
            raise DTypeError(f"normal: expected a Tensor or a number for {name}, got {type_name(v)}")
    _std_checked(std)
    tensors = [v for v in (mean, std) if isinstance(v, Tensor)]
    if tensors:
        if size is not None:
            raise ArgumentError("normal: size= is only for a number mean and std; the tensors give the shape")
        for v in tensors:
            if v.dtype is not dtypes.float32:
                raise DTypeError(f"normal: expected float32 tensors for mean and std, got {v.dtype!r}")
        shape = E.broadcast_tensors(*tensors)[0].shape
        dev = tensors[0].device
    else:
        if size is None:
            raise ArgumentError("normal: with a number mean and std, size is required: normal(mean, std, size)")
        shape = (size,) if isinstance(size, numbers.Integral) else tuple(size)
        dev = device
    with autograd.no_grad():
        z = randn(*shape, device=dev, generator=generator, dtype=dtype)
        y = ops.add(ops.mul(z, std.detach() if isinstance(std, Tensor) else float(std)),
                    mean.detach() if isinstance(mean, Tensor) else float(mean))
    if requires_grad:
        y.requires_grad_(True)
    return y


def seed() -> int:
    """Seed the default generator with a non-deterministic number (from the OS) and return it."""
    s = int.from_bytes(os.urandom(8), "little") >> 1
    default_generator.manual_seed(s)
    return s


def initial_seed() -> int:
    """The seed the default generator was last seeded with."""
    return default_generator.get_state()[0]


def compile(model: Any = None, **kwargs: Any) -> Any:  # noqa: A001
    """``torch.compile``: returns ``model`` unchanged (torchlean runs eagerly). As a decorator with
    options (``@compile(mode=...)``) it returns the identity decorator."""
    if model is None:
        return lambda fn: fn
    return model


_DEFAULT_PRINT = dict(print_options)
_PROFILES = {"default": {"precision": 4, "threshold": 1000, "edgeitems": 3, "max_line_width": 80},
             "short": {"precision": 2, "threshold": 1000, "edgeitems": 2, "max_line_width": 80},
             "full": {"precision": 4, "threshold": sys.maxsize, "edgeitems": 3, "max_line_width": 80}}


def set_printoptions(precision: int | None = None, threshold: float | None = None, edgeitems: int | None = None,
                     linewidth: int | None = None, profile: str | None = None, sci_mode: bool | None = None) -> None:
    """What ``repr(tensor)`` shows: digits after the point, the element count above which it
    summarizes, the items kept at each edge and the line width (PyTorch's names and profiles;
    ``profile="default"`` restores torchlean's own defaults). ``sci_mode`` is accepted and ignored."""
    if profile is not None:
        if profile not in _PROFILES:
            raise ArgumentError(f"set_printoptions: profile must be one of {sorted(_PROFILES)}, got {profile!r}")
        print_options.update(_DEFAULT_PRINT if profile == "default" else _PROFILES[profile])
    for key, v in (("precision", precision), ("threshold", threshold), ("edgeitems", edgeitems),
                   ("max_line_width", linewidth)):
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or v < 0:
            raise ArgumentError(f"set_printoptions: {key} must be a non-negative number, got {v!r}")
        print_options[key] = sys.maxsize if math.isinf(v) else int(v)


# -- Tensor methods ---------------------------------------------------------------------------
def _stride(self: Tensor, dim: int | None = None) -> Any:
    """Row-major strides in elements (every torchlean tensor is contiguous)."""
    out, acc = [], 1
    for s in reversed(self.shape):
        out.append(acc)
        acc *= max(s, 1)
    out = tuple(reversed(out))
    if dim is None:
        return out
    if not self.ndim:
        raise AxisError(f"stride: dim {dim} out of range for a tensor of rank 0")
    return out[dim_index("stride", dim, self.ndim)]


def _mT(self: Tensor) -> Tensor:  # noqa: N802
    if self.ndim < 2:
        raise ShapeError(f"mT: tensor.mT is only supported on matrices or batches of matrices, got {self.ndim}-D")
    return ops.transpose(self, -2, -1)


def _get_device(self: Tensor) -> int:
    dev = str(self.device)
    return -1 if dev == "cpu" else int(dev.split(":")[1]) if ":" in dev else 0


def _detach_(self: Tensor) -> Tensor:
    """Cut this tensor from the graph in place: it becomes a leaf that does not require grad."""
    self._node = None
    self.requires_grad = False
    return self


def _reshape_(op: str, self: Tensor, shape: tuple) -> Tensor:
    self._shape = Size(shape)  # shape only: the buffer and any recorded history stay as they are
    return self


def _unsqueeze_(self: Tensor, dim: int) -> Tensor:
    d = dim_index("unsqueeze_", dim, self.ndim + 1)
    shape = list(self.shape)
    shape.insert(d, 1)
    return _reshape_("unsqueeze_", self, tuple(shape))


def _squeeze_(self: Tensor, dim: Any = None) -> Tensor:
    if dim is None:
        return _reshape_("squeeze_", self, tuple(s for s in self.shape if s != 1))
    dims = dim if isinstance(dim, (tuple, list)) else (dim,)
    drop = {dim_index("squeeze_", d, max(self.ndim, 1)) for d in dims}
    return _reshape_("squeeze_", self, tuple(s for i, s in enumerate(self.shape) if not (i in drop and s == 1)))


def _inplace_from(name: str, fn: Callable) -> Callable:
    """``x.name_(...)``: ``fn(x, ...)`` written into x on the tape (ops.select.inplace_update)."""
    def method(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        if self._buf is not None and autograd.is_grad_enabled():
            self._check_inplace(name)
        old = ops.select.snapshot(self)
        return ops.select.inplace_update(name, self, fn(old, *args, **kwargs))

    method.__name__ = name
    return method


def _bernoulli_(self: Tensor, p: Any = 0.5, *, generator: Any = None) -> Tensor:
    """Each element 1 with probability p (a number or a tensor broadcast to self), else 0."""
    from .tensor import bernoulli, full

    if self._buf is not None:
        self._check_inplace("bernoulli_")
    with autograd.no_grad():
        if isinstance(p, Tensor):
            probs = ops.expand(p.float(), self.shape)
        else:
            if isinstance(p, bool) or not isinstance(p, numbers.Real) or not 0 <= p <= 1:
                raise ArgumentError(f"bernoulli_: expected 0 <= p <= 1, got {p!r}")
            probs = full(self.shape, float(p), device=self.device)
        draws = bernoulli(probs, generator=generator)
    new = draws if self.dtype is dtypes.float32 else draws._as("bernoulli_", self.dtype)
    return ops.select.inplace_update("bernoulli_", self, new)


_RANDOM_TOP = {"float32": 2 ** 24 + 1, "int64": 2 ** 63 - 1, "int32": 2 ** 31 - 1, "int16": 2 ** 15 - 1,
               "int8": 2 ** 7 - 1, "uint8": 2 ** 8, "bool": 2}


def _random_(self: Tensor, from_: Any = None, to: Any = None, *, generator: Any = None, **kwargs: Any) -> Tensor:
    """Integers uniform in [from, to) (``random_(to)``: [0, to); no bounds: [0, 2**24] for float32,
    the dtype's range for integers), drawn from torchlean's counter RNG."""
    if "from" in kwargs:
        from_ = kwargs.pop("from")
    if kwargs:
        raise ArgumentError(f"random_: unexpected arguments {sorted(kwargs)}")
    if to is None and from_ is not None:
        from_, to = 0, from_
    lo = 0 if from_ is None else from_
    hi = _RANDOM_TOP[self.dtype.name] if to is None else to
    for name, v in (("from", lo), ("to", hi)):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise ArgumentError(f"random_: {name} must be an integer, got {v!r}")
    if hi <= lo:
        raise ArgumentError(f"random_: expects 'from' to be less than 'to', but got from={lo} >= to={hi}")
    if self._buf is not None:
        self._check_inplace("random_")
    bits = random_bits(self.numel(), generator)
    vals = (lo + (bits % np.uint64(hi - lo)).astype(object)).astype(np.int64) if hi - lo > 2 ** 62 else \
        lo + (bits % np.uint64(hi - lo)).astype(np.int64)
    vals = np.asarray(vals, np.int64).reshape(self.shape)
    if self.dtype is dtypes.float32:
        new = tensor(vals.astype(np.float32), device=self.device)
    else:
        new = array_result(vals.astype(self.dtype.np), self.device)
    return ops.select.inplace_update("random_", self, new)


def _where_method(self: Tensor, condition: Any, other: Any) -> Tensor:
    return E.where(condition, self, other)


def _type_as(self: Tensor, other: Tensor) -> Tensor:
    if not isinstance(other, Tensor):
        raise DTypeError(f"type_as: expected a Tensor for other, got {type_name(other)}")
    return self.to(other.device, other.dtype)  # (PyTorch's type string names the device too)


def _install() -> None:
    T = Tensor
    methods = {
        "where": _where_method, "masked_fill": E.masked_fill, "argwhere": E.argwhere,
        "nonzero": lambda s, *, as_tuple=False: E.nonzero(s, as_tuple=as_tuple),
        "contiguous": lambda s, memory_format=None: s, "is_contiguous": lambda s, memory_format=None: True,
        "stride": _stride, "type_as": _type_as, "get_device": _get_device, "pin_memory": lambda s, device=None: s,
        "is_pinned": lambda s, device=None: False, "detach_": _detach_, "unsqueeze_": _unsqueeze_,
        "squeeze_": _squeeze_, "unfold": E.unfold, "index_add": E.index_add, "index_fill": E.index_fill,
        "index_copy": E.index_copy, "fmod": E.fmod, "negative": ops.neg, "cross": E.cross,
        "isclose": E.isclose, "allclose": E.allclose, "equal": E.equal, "mode": E.mode, "histc": E.histc,
        "erfinv": E.erfinv, "broadcast_to": E.broadcast_to, "bernoulli_": _bernoulli_, "random_": _random_,
        "index_add_": _inplace_from("index_add_", E.index_add),
        "index_fill_": _inplace_from("index_fill_", E.index_fill),
        "index_copy_": _inplace_from("index_copy_", E.index_copy),
        "masked_fill_": _inplace_from("masked_fill_", E.masked_fill),
        "fmod_": _inplace_from("fmod_", E.fmod),
    }
    for name, fn in methods.items():
        if name not in T.__dict__:  # the in-place helpers of _methods.py (bound first) win
            setattr(T, name, fn)
    if "mT" not in T.__dict__:
        T.mT = property(_mT)


_install()


# -- torch.autograd: grad, Function, anomaly detection, functional.jacobian ---------------------
def _as_tuple(op: str, name: str, v: Any) -> tuple[Tensor, ...]:
    seq = (v,) if isinstance(v, Tensor) else tuple(v) if isinstance(v, (tuple, list)) else None
    if seq is None or not all(isinstance(x, Tensor) for x in seq):
        raise AutogradError(f"{op}: expected a Tensor or a sequence of Tensors for {name}, got {type_name(v)}")
    return seq


def grad(outputs: Any, inputs: Any, grad_outputs: Any = None, retain_graph: bool | None = None,
         create_graph: bool = False, only_inputs: bool = True, allow_unused: bool | None = None,
         is_grads_batched: bool = False, materialize_grads: bool = False) -> tuple[Tensor | None, ...]:
    """The gradients of ``outputs`` (weighted by ``grad_outputs``; None: ones, for one-element
    outputs) with respect to ``inputs``, returned instead of accumulated into ``.grad``. An input
    the outputs do not depend on raises unless ``allow_unused`` (then None, or zeros with
    ``materialize_grads``)."""
    if create_graph:
        raise AutogradError("autograd.grad: create_graph=True (higher-order gradients) is not supported yet: "
                            "torchlean's VJPs are not recorded on the tape")
    if is_grads_batched:
        raise AutogradError("autograd.grad: is_grads_batched=True is not supported (loop over the grad_outputs)")
    outs = _as_tuple("autograd.grad", "outputs", outputs)
    ins = _as_tuple("autograd.grad", "inputs", inputs)
    if grad_outputs is None:
        gos: tuple[Any, ...] = (None,) * len(outs)
    else:
        gos = (grad_outputs,) if isinstance(grad_outputs, Tensor) else tuple(grad_outputs)
    if len(gos) != len(outs):
        raise AutogradError(f"autograd.grad: got {len(gos)} grad_outputs for {len(outs)} outputs")
    for i, x in enumerate(ins):
        if not x.requires_grad:
            raise AutogradError(f"autograd.grad: inputs[{i}] does not require grad")
    roots, root_grads = [], []
    from .runtime.buffer import full as full_buffer

    for i, (o, go) in enumerate(zip(outs, gos)):
        if not o.requires_grad:
            raise AutogradError(f"autograd.grad: outputs[{i}] does not require grad and has no recorded graph")
        if go is None:
            if o.numel() != 1:
                raise AutogradError(f"autograd.grad: grad can be implicitly created only for scalar outputs, "
                                    f"outputs[{i}] has shape {tuple(o.shape)}")
            g = full_buffer(1, 1.0, o.device)
        else:
            if not isinstance(go, Tensor) or go.shape != o.shape:
                raise ShapeError(f"autograd.grad: grad_outputs[{i}] must be a Tensor of shape {tuple(o.shape)}, "
                                 f"got {type_name(go) if not isinstance(go, Tensor) else tuple(go.shape)}")
            g = go.to(o.device).float()._float_buffer("autograd.grad")
        roots.append(o)
        root_grads.append(g)
    bufs = autograd.grad_buffers(roots, root_grads, ins, bool(retain_graph))
    out: list[Tensor | None] = []
    for i, (x, b) in enumerate(zip(ins, bufs)):
        if b is None:
            if not (allow_unused or materialize_grads):
                raise AutogradError(f"autograd.grad: one of the differentiated Tensors (inputs[{i}]) appears to "
                                    f"not have been used in the graph; set allow_unused=True if this is the "
                                    f"desired behavior")
            out.append(ops.mul(x.detach(), 0.0) if materialize_grads else None)
        else:
            out.append(Tensor._wrap(b, x.shape))
    return tuple(out)


class FunctionCtx:
    """The ``ctx`` of a custom ``Function``: what forward leaves for backward."""

    def __init__(self) -> None:
        self.saved_tensors: tuple[Any, ...] = ()
        self.needs_input_grad: tuple[bool, ...] = ()
        self.materialize_grads = True
        self._non_differentiable: set[int] = set()

    def save_for_backward(self, *tensors: Any) -> None:
        for x in tensors:
            if x is not None and not isinstance(x, Tensor):
                raise AutogradError(f"save_for_backward: expected Tensors or None, got {type_name(x)}")
        self.saved_tensors = tuple(x.detach() if isinstance(x, Tensor) else x for x in tensors)

    def mark_non_differentiable(self, *tensors: Tensor) -> None:
        self._non_differentiable.update(id(x) for x in tensors)

    def mark_dirty(self, *tensors: Tensor) -> None:
        """Accepted: torchlean's tensors are rebound, never written, so nothing needs marking."""

    def set_materialize_grads(self, value: bool) -> None:
        self.materialize_grads = bool(value)


class Function:
    """A custom differentiable op, as ``torch.autograd.Function``: subclass with static
    ``forward(ctx, *args)`` (or ``forward(*args)`` plus ``setup_context(ctx, inputs, output)``) and
    ``backward(ctx, *grad_outputs)`` returning one gradient (or None) per forward argument; call
    ``MyFn.apply(*args)``. Forward runs under no_grad; the output's tape node calls backward, also
    under no_grad, with the output's gradient (zeros for the other outputs of a tuple)."""

    @staticmethod
    def forward(ctx: Any, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("Function.forward: subclasses must implement forward")

    @staticmethod
    def backward(ctx: Any, *grad_outputs: Any) -> Any:
        raise NotImplementedError("Function.backward: subclasses must implement backward")

    @staticmethod
    def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
        raise NotImplementedError

    @classmethod
    def apply(cls, *args: Any, **kwargs: Any) -> Any:
        ctx = FunctionCtx()
        ctx.needs_input_grad = tuple(isinstance(a, Tensor) and a.requires_grad for a in args)
        separate = "setup_context" in _own_attrs(cls)
        with autograd.no_grad():
            out = cls.forward(*args, **kwargs) if separate else cls.forward(ctx, *args, **kwargs)
        if separate:
            cls.setup_context(ctx, args, out)
        single = isinstance(out, Tensor)
        outs = (out,) if single else tuple(out) if isinstance(out, (tuple, list)) else None
        if outs is None:
            raise AutogradError(f"{cls.__name__}.apply: forward must return a Tensor or a tuple of Tensors, "
                                f"got {type_name(out)}")
        # fresh tensors over the outputs' buffers: an output may be an input returned as it is
        fresh = tuple(o.detach() if isinstance(o, Tensor) else o for o in outs)
        parents = tuple(a for a in args if isinstance(a, Tensor) and a._buf is not None)
        positions = [i for i, a in enumerate(args) if isinstance(a, Tensor) and a._buf is not None]
        if autograd.is_grad_enabled() and any(p.requires_grad for p in parents):
            diff = [k for k, o in enumerate(fresh) if isinstance(o, Tensor) and o._buf is not None
                    and id(outs[k]) not in ctx._non_differentiable]
            for k in diff:
                autograd.record(cls.__name__ + "Backward", fresh[k], parents,
                                _function_vjp(cls, ctx, fresh, k, args, positions))
        return fresh[0] if single else type(out)(fresh) if isinstance(out, tuple) else list(fresh)


def _own_attrs(cls: type) -> set[str]:
    names: set[str] = set()
    for c in cls.__mro__:
        if c is Function:
            break
        names.update(vars(c))
    return names


def _function_vjp(cls: type, ctx: FunctionCtx, outs: tuple, k: int, args: tuple, positions: list[int]) -> Callable:
    def vjp(g: Any) -> list[Any]:
        grads = []
        for j, o in enumerate(outs):
            if j == k:
                grads.append(Tensor._wrap(g, o.shape))
            elif isinstance(o, Tensor) and o._buf is not None and ctx.materialize_grads:
                grads.append(ops.mul(o, 0.0))
            else:
                grads.append(None)
        res = cls.backward(ctx, *grads)
        res = res if isinstance(res, tuple) else (res,)
        if len(res) < len(args):
            raise AutogradError(f"{cls.__name__}.backward: returned {len(res)} gradients, forward took "
                                f"{len(args)} inputs")
        out = []
        for i in positions:
            r, a = res[i], args[i]
            if r is None:
                out.append(None)
                continue
            if not isinstance(r, Tensor):
                raise AutogradError(f"{cls.__name__}.backward: gradient {i} must be a Tensor or None, got "
                                    f"{type_name(r)}")
            if r.shape != a.shape:
                if r.numel() == a.numel():
                    r = ops.reshape(r, a.shape)
                else:
                    raise ShapeError(f"{cls.__name__}.backward: gradient {i} has shape {tuple(r.shape)}, the "
                                     f"input has shape {tuple(a.shape)}")
            out.append(r.float()._float_buffer(cls.__name__ + ".backward"))
        return out

    return vjp


class set_detect_anomaly:  # noqa: N801 - PyTorch's name
    """Accepted and changes nothing (usable as a call, a context manager or a decorator)."""

    def __init__(self, mode: bool = True, check_nan: bool = True) -> None:
        self.mode = bool(mode)

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None

    def __call__(self, fn: Callable) -> Callable:
        return fn


class detect_anomaly(set_detect_anomaly):  # noqa: N801
    def __init__(self, check_nan: bool = True) -> None:
        super().__init__(True, check_nan)


def is_anomaly_enabled() -> bool:
    return False


def jacobian(func: Callable, inputs: Any, create_graph: bool = False, strict: bool = False,
             vectorize: bool = False, strategy: str = "reverse-mode") -> Any:
    """``torch.autograd.functional.jacobian`` by one ``grad`` per output element (small inputs):
    shape output.shape + input.shape, nested like PyTorch's (tuples follow tuple inputs/outputs)."""
    if create_graph:
        raise AutogradError("jacobian: create_graph=True is not supported yet")
    single_in = isinstance(inputs, Tensor)
    ins = tuple(x.detach().requires_grad_(True) for x in _as_tuple("jacobian", "inputs", inputs))
    with autograd.enable_grad():
        out = func(*ins)
    single_out = isinstance(out, Tensor)
    outs = _as_tuple("jacobian", "outputs", out)
    rows: list[list[Tensor]] = []
    for o in outs:
        per_in: list[list[Tensor]] = [[] for _ in ins]
        for e in range(o.numel()):
            if o.requires_grad:
                sel = np.zeros(o.numel(), np.float32)
                sel[e] = 1.0
                gs = grad(o, ins, tensor(sel.reshape(o.shape), device=o.device), retain_graph=True,
                          allow_unused=True)
            else:
                gs = (None,) * len(ins)
            for j, (x, g) in enumerate(zip(ins, gs)):
                if g is None and strict:
                    raise AutogradError(f"jacobian: output {e} is independent of input {j} (strict=True)")
                per_in[j].append(ops.mul(x.detach(), 0.0) if g is None else g)
        rows.append([ops.reshape(ops.stack(p, 0) if p else ops.mul(x.detach(), 0.0), tuple(o.shape) + tuple(x.shape))
                     for p, x in zip(per_in, ins)])
    if single_out and single_in:
        return rows[0][0]
    if single_out:
        return tuple(rows[0])
    if single_in:
        return tuple(r[0] for r in rows)
    return tuple(tuple(r) for r in rows)


def _install_autograd() -> None:
    """Make the tape module also PyTorch's ``torch.autograd`` namespace (and
    ``torch.autograd.functional`` importable)."""
    functional = types.ModuleType("torchlean.autograd.functional",
                                  "torch.autograd.functional: jacobian (by repeated grad; small inputs)")
    functional.jacobian = jacobian
    for name, value in (("grad", grad), ("Function", Function), ("FunctionCtx", FunctionCtx),
                        ("set_detect_anomaly", set_detect_anomaly), ("detect_anomaly", detect_anomaly),
                        ("is_anomaly_enabled", is_anomaly_enabled), ("functional", functional)):
        setattr(autograd, name, value)
    sys.modules["torchlean.autograd.functional"] = functional


_install_autograd()
