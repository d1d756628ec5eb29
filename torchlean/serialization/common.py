"""What both file formats share: the errors, and turning loaded host arrays into tensors on the
device ``map_location`` picks."""

from __future__ import annotations

import pickle
import warnings
from typing import Any

import numpy as np

from ..errors import DeviceError, DTypeError, TorchLeanError
from ..runtime.device import canonical_device
from ..tensor import Tensor, tensor

__all__ = ["SerializationError", "UnsafeFileError", "Placer", "FLOAT_DTYPES"]

FLOAT_DTYPES = ("float32", "float64", "float16", "bfloat16")


class SerializationError(TorchLeanError, ValueError):
    """``save`` was given something its format cannot hold, or ``load`` a file it cannot read
    (truncated, corrupt, altered, or not a torchlean or PyTorch file)."""


class UnsafeFileError(SerializationError, pickle.UnpicklingError):
    """A PyTorch file that asks to run code (a global outside the tensors-and-containers allowlist):
    refused before anything in it runs, as ``torch.load(weights_only=True)`` refuses it."""


def _check_map_location(op: str, map_location: Any) -> Any:
    if map_location is None or callable(map_location):
        return map_location
    if isinstance(map_location, dict):
        return {str(k): canonical_device(v, op) for k, v in map_location.items()}
    return canonical_device(map_location, op)


class Placer:
    """Makes the loaded tensors: float data as float32 (float64 rounded, float16/bfloat16 widened
    exactly, one warning per load naming what changed), integer and bool data through
    ``torchlean.tensor`` (which keeps the dtypes it has), each on the device that ``map_location``
    gives for its saved location (PyTorch's rules: None keeps it, a device moves everything, a dict
    maps saved locations, a callable ``f(cpu_tensor, saved_location)`` returns the tensor or None)."""

    def __init__(self, op: str, map_location: Any, source: str) -> None:
        self.op, self.source = op, source
        self.map_location = _check_map_location(op, map_location)
        self.converted: dict[str, list[str]] = {}

    def _target(self, location: str) -> str:
        m = self.map_location
        if isinstance(m, dict):
            location = m.get(location, location)
        elif isinstance(m, str):
            return m
        return canonical_device(location, self.op)

    def make(self, arr: np.ndarray, dtype_name: str, location: str, requires_grad: bool, path: str) -> Tensor:
        if dtype_name in FLOAT_DTYPES:
            if dtype_name != "float32":
                self.converted.setdefault(dtype_name, []).append(path)
            with np.errstate(over="ignore"):
                arr = arr.astype(np.float32)
        elif arr.dtype.kind not in "iub":
            raise SerializationError(f"{self.op}: {self.source}: entry {path!r} has dtype {dtype_name}, which torchlean "
                                     f"does not have (float32, integer and bool tensors only)")
        try:
            if callable(self.map_location):
                t = tensor(arr)
                out = self.map_location(t, location)
                if out is not None:
                    if not isinstance(out, Tensor):
                        raise SerializationError(f"{self.op}: map_location returned a {type(out).__name__} for "
                                                 f"{path!r}; expected a Tensor or None")
                    t = out
                else:
                    t = t.to(canonical_device(location, self.op))
            else:
                t = tensor(arr, device=self._target(location))
        except DeviceError as exc:
            raise DeviceError(f"{exc}; {path!r} was saved on {location!r}: pass map_location='cpu' (or another "
                              f"available device) to load it elsewhere") from None
        except DTypeError as exc:
            raise SerializationError(f"{self.op}: {self.source}: entry {path!r}: {exc}") from None
        if requires_grad and arr.dtype == np.float32:
            t.requires_grad_(True)
        return t

    def warn(self) -> None:
        """One warning for the float tensors whose dtype changed (float64 lost precision)."""
        if not self.converted:
            return
        parts = []
        for name in FLOAT_DTYPES:
            paths = self.converted.get(name)
            if paths:
                how = "rounded to float32" if name == "float64" else "widened exactly to float32"
                parts.append(f"{len(paths)} {name} tensor(s) {how} (e.g. {paths[0]!r})")
        warnings.warn(f"{self.op}: torchlean computes in float32: " + "; ".join(parts), UserWarning, stacklevel=3)

