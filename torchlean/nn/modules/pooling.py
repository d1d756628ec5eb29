"""Pooling modules: ``MaxPool1d/2d/3d`` and ``AvgPool1d/2d/3d`` over the functional pools."""

from __future__ import annotations

from typing import Any

from ...tensor import Tensor
from .. import functional as F
from .module import Module

__all__ = ["MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d", "AvgPool2d", "AvgPool3d", "AdaptiveAvgPool1d",
           "AdaptiveAvgPool2d", "AdaptiveAvgPool3d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d"]


class _MaxPool(Module):
    _fn = ""

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
                 return_indices: bool = False, ceil_mode: bool = False) -> None:
        super().__init__()
        self.kernel_size, self.stride, self.padding, self.dilation = kernel_size, stride, padding, dilation
        self.return_indices, self.ceil_mode = return_indices, ceil_mode

    def forward(self, x: Tensor) -> Tensor:
        return getattr(F, self._fn)(x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode,
                                    self.return_indices)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class _AvgPool(Module):
    _fn = ""

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False,
                 count_include_pad: bool = True, divisor_override: Any = None) -> None:
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.ceil_mode, self.count_include_pad, self.divisor_override = ceil_mode, count_include_pad, divisor_override

    def forward(self, x: Tensor) -> Tensor:
        args = [x, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad]
        if self._fn != "avg_pool1d":
            args.append(self.divisor_override)
        return getattr(F, self._fn)(*args)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class MaxPool1d(_MaxPool):
    _fn = "max_pool1d"


class MaxPool2d(_MaxPool):
    _fn = "max_pool2d"


class MaxPool3d(_MaxPool):
    _fn = "max_pool3d"


class AvgPool1d(_AvgPool):
    _fn = "avg_pool1d"


class AvgPool2d(_AvgPool):
    _fn = "avg_pool2d"


class AvgPool3d(_AvgPool):
    _fn = "avg_pool3d"


class _AdaptiveAvgPool(Module):
    _fn = ""

    def __init__(self, output_size: Any) -> None:
        super().__init__()
        self.output_size = output_size

    def forward(self, x: Tensor) -> Tensor:
        return getattr(F, self._fn)(x, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveAvgPool1d(_AdaptiveAvgPool):
    _fn = "adaptive_avg_pool1d"


class AdaptiveAvgPool2d(_AdaptiveAvgPool):
    _fn = "adaptive_avg_pool2d"


class AdaptiveAvgPool3d(_AdaptiveAvgPool):
    _fn = "adaptive_avg_pool3d"


class _AdaptiveMaxPool(_AdaptiveAvgPool):
    def __init__(self, output_size: Any, return_indices: bool = False) -> None:
        super().__init__(output_size)
        self.return_indices = return_indices

    def forward(self, x: Tensor) -> Tensor:
        return getattr(F, self._fn)(x, self.output_size, self.return_indices)


class AdaptiveMaxPool1d(_AdaptiveMaxPool):
    _fn = "adaptive_max_pool1d"


class AdaptiveMaxPool2d(_AdaptiveMaxPool):
    _fn = "adaptive_max_pool2d"
