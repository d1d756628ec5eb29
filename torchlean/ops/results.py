"""Where the index and mask results of the ops are made, and where their inputs' values are read
on the host: integer and boolean tensors hold an array of their device (runtime/arrays.py).

``bool_result`` takes a float tensor of exact 0/1 values (computed on its device by primitives)
or a host boolean array; ``int_result`` a host integer array; ``array_result`` a host array of
any integer or bool dtype (kept).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..runtime import arrays
from ._base import Tensor

__all__ = ["bool_result", "int_result", "array_result", "host_values"]


def array_result(values: Any, device: str) -> Tensor:
    a = np.asarray(values)
    return Tensor._wrap_array(arrays.from_host(a, device) if device != "cpu" else a, device, a)


def bool_result(values: Any, device: str) -> Tensor:
    if isinstance(values, Tensor):
        if values._buf is not None:
            with arrays.on_device(device):
                return Tensor._wrap_array(arrays.buffer_array(values._buf, values.shape) != 0, device)
        values = values.numpy()
    return array_result(np.asarray(values, dtype=np.bool_), device)


def int_result(values: Any, device: str) -> Tensor:
    return array_result(np.asarray(values, dtype=np.int64), device)


def host_values(t: Tensor) -> np.ndarray:
    """The values of ``t`` as a host NumPy array (a copy from the device on CUDA)."""
    return t.numpy()
