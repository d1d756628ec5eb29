"""Padding modules over ``F.pad``: constant, zero, reflection, replication and circular, 1d to 3d."""

from __future__ import annotations

from typing import Any

from ..._validate import int_arg, real_arg
from ...errors import ArgumentError
from ...tensor import Tensor
from .. import functional as F
from .module import Module

__all__ = ["ConstantPad1d", "ConstantPad2d", "ConstantPad3d", "ZeroPad1d", "ZeroPad2d", "ZeroPad3d",
           "ReflectionPad1d", "ReflectionPad2d", "ReflectionPad3d", "ReplicationPad1d", "ReplicationPad2d",
           "ReplicationPad3d", "CircularPad1d", "CircularPad2d", "CircularPad3d"]


class _Pad(Module):
    _mode = "constant"
    _rank = 1

    def __init__(self, padding: Any) -> None:
        super().__init__()
        n = 2 * self._rank
        op = type(self).__name__
        if isinstance(padding, (tuple, list)):
            if len(padding) != n:
                raise ArgumentError(f"{op}: padding must be an int or {n} ints, got {padding!r}")
            self.padding = tuple(int_arg(op, "padding", p) for p in padding)
        else:
            self.padding = (int_arg(op, "padding", padding),) * n
        self.value = 0.0

    def forward(self, x: Tensor) -> Tensor:
        if self._mode == "constant":
            return F.pad(x, self.padding, "constant", self.value)
        return F.pad(x, self.padding, self._mode)

    def extra_repr(self) -> str:
        if type(self).__name__.startswith("Constant"):
            return f"padding={self.padding}, value={self.value}"
        return f"{self.padding}"


class _ConstantPad(_Pad):
    def __init__(self, padding: Any, value: float) -> None:
        super().__init__(padding)
        self.value = real_arg(type(self).__name__, "value", value)


class ConstantPad1d(_ConstantPad):
    _rank = 1


class ConstantPad2d(_ConstantPad):
    _rank = 2


class ConstantPad3d(_ConstantPad):
    _rank = 3


class ZeroPad1d(_Pad):
    _rank = 1


class ZeroPad2d(_Pad):
    _rank = 2


class ZeroPad3d(_Pad):
    _rank = 3


class ReflectionPad1d(_Pad):
    _mode, _rank = "reflect", 1


class ReflectionPad2d(_Pad):
    _mode, _rank = "reflect", 2


class ReflectionPad3d(_Pad):
    _mode, _rank = "reflect", 3


class ReplicationPad1d(_Pad):
    _mode, _rank = "replicate", 1


class ReplicationPad2d(_Pad):
    _mode, _rank = "replicate", 2


class ReplicationPad3d(_Pad):
    _mode, _rank = "replicate", 3


class CircularPad1d(_Pad):
    _mode, _rank = "circular", 1


class CircularPad2d(_Pad):
    _mode, _rank = "circular", 2


class CircularPad3d(_Pad):
    _mode, _rank = "circular", 3
