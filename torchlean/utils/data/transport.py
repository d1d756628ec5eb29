"""How tensors cross between the main process and DataLoader workers: as NumPy arrays.

Plain ``pickle`` refuses Tensors (they point to ``save``). The loader's own pickler writes a Tensor
as its array (``reducer_override``), and a worker's ``default_collate`` builds ``HostTensor``s
(a tensor's array, no device buffer: a worker then never starts a compute backend) that pickle the
same way. The receiving side rebuilds each as a CPU tensor with the array's dtype.
"""

from __future__ import annotations

import io
import pickle
from typing import Any

import numpy as np

from ...errors import DTypeError
from ...tensor import Tensor, tensor

__all__ = ["tensor_from_array", "HostTensor", "dumps"]


def tensor_from_array(a: np.ndarray, requires_grad: bool = False) -> Tensor:
    """A CPU tensor with the array's values and dtype where torchlean has that dtype (else the one
    ``tensor`` infers: float64 data becomes float32, the dtype we compute in)."""
    try:
        t = tensor(a, dtype=a.dtype)
    except DTypeError:
        t = tensor(a)
    if requires_grad:
        t.requires_grad = True
    return t


class HostTensor:
    """A tensor to be, as its NumPy array: what ``default_collate`` builds in a worker process."""

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __reduce__(self) -> tuple:
        return tensor_from_array, (self.array,)


class _TensorPickler(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, Tensor):
            return tensor_from_array, (obj.numpy(), bool(obj.requires_grad))
        return NotImplemented


def dumps(obj: Any) -> bytes:
    """``pickle.dumps`` that writes every Tensor in ``obj`` as its array (read back with ``pickle.loads``)."""
    buf = io.BytesIO()
    _TensorPickler(buf, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return buf.getvalue()
