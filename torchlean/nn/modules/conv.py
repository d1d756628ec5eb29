"""Convolution modules: ``Conv1d/2d/3d`` and ``ConvTranspose1d/2d/3d`` (PyTorch's names and init)."""

from __future__ import annotations

import math
import numbers
from typing import Any

from ... import ops
from ..._validate import size_arg
from ...errors import ArgumentError
from ...tensor import Tensor, zeros
from .. import init
from ..parameter import Parameter
from .linear import device_dtype
from .module import Module

__all__ = ["Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d"]


def _tuple(op: str, name: str, v: Any, rank: int, minimum: int = 0) -> tuple[int, ...]:
    """An int or ``rank`` ints (never bools, floats or strings), each in [minimum, 2**32 - 1] (the
    runtime's uint32 dims), checked here so that a bad module fails when it is built."""
    if isinstance(v, (tuple, list)):
        t = tuple(v)
    elif isinstance(v, numbers.Integral) and not isinstance(v, bool):
        t = (v,) * rank
    else:
        raise ArgumentError(f"{op}: {name} must be an int or {rank} ints, got {v!r}")
    if len(t) != rank or not all(isinstance(i, numbers.Integral) and not isinstance(i, bool) for i in t):
        raise ArgumentError(f"{op}: {name} must be an int or {rank} ints, got {v!r}")
    t = tuple(int(i) for i in t)
    if any(not minimum <= i < 2**32 for i in t):
        raise ArgumentError(f"{op}: {name} must be in [{minimum}, 2**32) along every axis, got {v!r}")
    return t


class _ConvNd(Module):
    _rank = 0
    _transposed = False

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
                 dilation: Any = 1, groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 output_padding: Any = 0, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        op, r = type(self).__name__, self._rank
        device = device_dtype(op, device, dtype)
        if padding_mode != "zeros":
            raise ArgumentError(f"{op}: padding_mode={padding_mode!r} is not supported yet (only 'zeros')")
        in_channels = size_arg(op, "in_channels", in_channels)
        out_channels = size_arg(op, "out_channels", out_channels)
        if groups != 1 or _tuple(op, "dilation", dilation, r) != (1,) * r:
            raise ArgumentError(f"{op}: groups and dilation other than 1 are not supported yet "
                                f"(got groups={groups}, dilation={dilation!r})")
        self.in_channels, self.out_channels = int(in_channels), int(out_channels)
        self.kernel_size = _tuple(op, "kernel_size", kernel_size, r, 1)
        self.stride = _tuple(op, "stride", stride, r, 1)
        if isinstance(padding, str) and padding not in ("same", "valid"):
            raise ArgumentError(f"{op}: padding must be 'same', 'valid', an int or {r} ints, got {padding!r}")
        self.padding = padding if isinstance(padding, str) else _tuple(op, "padding", padding, r)
        self.dilation, self.groups, self.padding_mode = (1,) * r, 1, padding_mode
        self.output_padding = _tuple(op, "output_padding", output_padding, r)
        if any(o >= max(s, 1) for o, s in zip(self.output_padding, self.stride)):
            raise ArgumentError(f"{op}: output_padding {self.output_padding} must be smaller than stride "
                                f"{self.stride} along every axis")
        shape = ((in_channels, out_channels) if self._transposed else (out_channels, in_channels)) + self.kernel_size
        self.weight = Parameter(zeros(*shape, device=device))
        if bias:
            self.bias = Parameter(zeros(out_channels, device=device))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # PyTorch: kaiming_uniform_(a=sqrt(5)) = U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in from the
        # weight's dim 1 (in_channels for conv, out_channels for the transposed conv); the same for the bias.
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = self.weight.shape[1] * math.prod(self.kernel_size)
            if fan_in:
                bound = 1 / math.sqrt(fan_in)
                init.uniform_(self.bias, -bound, bound)

    def extra_repr(self) -> str:
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0,) * self._rank:
            s += f", padding={self.padding}"
        if self._transposed and self.output_padding != (0,) * self._rank:
            s += f", output_padding={self.output_padding}"
        return s + ("" if self.bias is not None else ", bias=False")


class _Conv(_ConvNd):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
                 dilation: Any = 1, groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode, 0, device, dtype)

    def forward(self, x: Tensor) -> Tensor:
        fn = (ops.conv1d, ops.conv2d, ops.conv3d)[self._rank - 1]
        return fn(x, self.weight, self.bias, self.stride, self.padding)


class _ConvTranspose(_ConvNd):
    _transposed = True

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
                 output_padding: Any = 0, groups: int = 1, bias: bool = True, dilation: Any = 1,
                 padding_mode: str = "zeros", device: Any = None, dtype: Any = None) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode, output_padding, device, dtype)

    def forward(self, x: Tensor, output_size: Any = None) -> Tensor:
        op = type(self).__name__
        out_pad = self.output_padding
        if output_size is not None:  # PyTorch: pick output_padding so that the output has this size
            size = tuple(output_size)[-self._rank:]
            spatial = x.shape[-self._rank:]
            out_pad = tuple(sz - ((i - 1) * s - 2 * p + k)
                            for sz, i, s, p, k in zip(size, spatial, self.stride, self.padding, self.kernel_size))
            if any(not 0 <= o < s for o, s in zip(out_pad, self.stride)):
                raise ArgumentError(f"{op}: output_size {tuple(output_size)} is not reachable from input {x.shape}")
        fn = (ops.conv_transpose1d, ops.conv_transpose2d, ops.conv_transpose3d)[self._rank - 1]
        return fn(x, self.weight, self.bias, self.stride, self.padding, out_pad)


class Conv1d(_Conv):
    _rank = 1


class Conv2d(_Conv):
    _rank = 2


class Conv3d(_Conv):
    _rank = 3


class ConvTranspose1d(_ConvTranspose):
    _rank = 1


class ConvTranspose2d(_ConvTranspose):
    _rank = 2


class ConvTranspose3d(_ConvTranspose):
    _rank = 3
