"""``default_collate`` and ``default_convert``: samples to batches, as PyTorch's.

``default_collate`` stacks tensors and NumPy arrays along a new first dimension, turns numbers into
1-d tensors, keeps strings as they are, and recurses into dicts, namedtuples, tuples and lists.
Where we differ: Python floats become float32, not float64 (torchlean computes in float32); ints
become int64 as in PyTorch.

In a worker process the loader uses ``host_collate``/``host_convert`` in their place: the same
rules, with ``HostTensor`` leaves (arrays) that become tensors in the main process (transport.py).
"""

from __future__ import annotations

import collections.abc
import copy
import numbers
from typing import Any, Callable

import numpy as np

from ... import ops
from ...errors import DTypeError, ShapeError
from ...tensor import Tensor
from .transport import HostTensor, tensor_from_array

__all__ = ["default_collate", "default_convert", "host_collate", "host_convert", "for_worker"]

_NOT_NUMERIC = ("S", "a", "U", "O")  # numpy dtype chars of strings and objects
_ERR = "batch must contain tensors, numpy arrays, numbers, dicts or lists"


def _is_namedtuple(x: Any) -> bool:
    return isinstance(x, tuple) and hasattr(x, "_fields")


def _check_stackable(batch: Any, what: str) -> None:
    first = batch[0]
    for i, t in enumerate(batch):
        if tuple(t.shape) != tuple(first.shape):
            raise ShapeError(f"default_collate: stack expects each {what} to be equal size, but got "
                             f"{tuple(first.shape)} at entry 0 and {tuple(t.shape)} at entry {i}")


def _stack_tensors(batch: Any) -> Tensor:
    _check_stackable(batch, "tensor")
    first = batch[0]
    for i, t in enumerate(batch):
        if t.dtype != first.dtype or t.device != first.device:
            raise DTypeError(f"default_collate: tensors of one batch must share dtype and device, got "
                             f"{first.dtype} on {first.device} at entry 0 and {t.dtype} on {t.device} at entry {i}")
    # one copy on the tensors' device, dtype kept (recorded on the tape where a sample requires grad)
    return ops.stack(list(batch), 0)


def _recurse(batch: Any, elem: Any, collate: Callable[[Any], Any]) -> Any:
    """dicts, namedtuples and sequences: collate each field across the batch (PyTorch's rules)."""
    if isinstance(elem, collections.abc.Mapping):
        try:
            if isinstance(elem, collections.abc.MutableMapping):
                clone = copy.copy(elem)
                clone.update({key: collate([d[key] for d in batch]) for key in elem})
                return clone
            return type(elem)({key: collate([d[key] for d in batch]) for key in elem})
        except TypeError:  # a mapping type that cannot be built from a dict
            return {key: collate([d[key] for d in batch]) for key in elem}
    if _is_namedtuple(elem):
        return type(elem)(*(collate(samples) for samples in zip(*batch)))
    size = len(elem)
    if any(len(e) != size for e in batch):
        raise ShapeError("default_collate: each element in list of batch should be of equal size")
    transposed = list(zip(*batch))  # tuples: strings come back as tuples, as in PyTorch
    if isinstance(elem, tuple):
        return [collate(samples) for samples in transposed]  # tuples become lists, as in PyTorch
    try:
        if isinstance(elem, collections.abc.MutableSequence):
            clone = copy.copy(elem)
            for i, samples in enumerate(transposed):
                clone[i] = collate(samples)
            return clone
        return type(elem)([collate(samples) for samples in transposed])
    except TypeError:
        return [collate(samples) for samples in transposed]


def _collate(batch: Any, host: bool) -> Any:
    if not isinstance(batch, (list, tuple)) or not batch:
        raise DTypeError(f"default_collate: expected a non-empty list of samples, got {type(batch).__name__}")
    leaf = HostTensor if host else tensor_from_array
    elem = batch[0]
    if isinstance(elem, Tensor):
        if not host:
            return _stack_tensors(batch)
        _check_stackable(batch, "tensor")
        return HostTensor(np.stack([t.numpy() for t in batch]))
    if isinstance(elem, np.ndarray):
        if elem.dtype.char in _NOT_NUMERIC:
            raise DTypeError(f"default_collate: {_ERR}; found numpy array of dtype {elem.dtype}")
        _check_stackable(batch, "array")
        return leaf(np.stack([np.asarray(b) for b in batch]))
    if isinstance(elem, (np.bool_, np.number)):
        return leaf(np.array(batch))
    if isinstance(elem, bool):
        return leaf(np.array(batch, dtype=np.bool_))
    if isinstance(elem, numbers.Integral):
        return leaf(np.array(batch, dtype=np.int64))
    if isinstance(elem, numbers.Real):
        return leaf(np.array(batch, dtype=np.float32))
    if isinstance(elem, (str, bytes)):
        return batch
    if isinstance(elem, (collections.abc.Mapping, collections.abc.Sequence)):
        return _recurse(batch, elem, host_collate if host else default_collate)
    raise DTypeError(f"default_collate: {_ERR}; found {type(elem).__name__}")


def default_collate(batch: Any) -> Any:
    """A batch (a list of samples of one structure) as one sample of stacked values."""
    return _collate(batch, host=False)


def host_collate(batch: Any) -> Any:
    """``default_collate`` with ``HostTensor`` leaves (in a worker process)."""
    return _collate(batch, host=True)


def _convert(data: Any, host: bool) -> Any:
    again = host_convert if host else default_convert
    if isinstance(data, Tensor):
        return data
    if isinstance(data, np.ndarray):
        if data.dtype.char in _NOT_NUMERIC:
            return data
        return HostTensor(data) if host else tensor_from_array(data)
    if isinstance(data, (np.bool_, np.number)):
        return HostTensor(np.asarray(data)) if host else tensor_from_array(np.asarray(data))
    if isinstance(data, (str, bytes)):
        return data
    if isinstance(data, collections.abc.Mapping):
        try:
            if isinstance(data, collections.abc.MutableMapping):
                clone = copy.copy(data)
                clone.update({key: again(data[key]) for key in data})
                return clone
            return type(data)({key: again(data[key]) for key in data})
        except TypeError:
            return {key: again(data[key]) for key in data}
    if _is_namedtuple(data):
        return type(data)(*(again(d) for d in data))
    if isinstance(data, tuple):
        return [again(d) for d in data]  # as PyTorch
    if isinstance(data, collections.abc.Sequence):
        try:
            if isinstance(data, collections.abc.MutableSequence):
                clone = copy.copy(data)
                for i, d in enumerate(data):
                    clone[i] = again(d)
                return clone
            return type(data)([again(d) for d in data])
        except TypeError:
            return [again(d) for d in data]
    return data


def default_convert(data: Any) -> Any:
    """One sample with its NumPy arrays and NumPy scalars as tensors (no batch dimension added);
    used when a DataLoader does not batch (``batch_size=None``)."""
    return _convert(data, host=False)


def host_convert(data: Any) -> Any:
    """``default_convert`` with ``HostTensor`` leaves (in a worker process)."""
    return _convert(data, host=True)


def for_worker(collate_fn: Callable) -> Callable:
    """The function a worker runs for ``collate_fn``: the host variant of the defaults, else itself
    (a custom collate function gets real tensors from ``default_collate``)."""
    return {default_collate: host_collate, default_convert: host_convert}.get(collate_fn, collate_fn)
