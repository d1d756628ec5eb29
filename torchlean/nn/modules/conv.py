"""Convolution modules: ``Conv1d/2d/3d`` and ``ConvTranspose1d/2d/3d`` (PyTorch's names and init).

groups, dilation and padding="same"/"valid" run in the conv primitives. A padding_mode other than
"zeros" ("reflect", "replicate", "circular") is PyTorch's composition: F.pad with that mode, then
the conv without padding; transposed convs take "zeros" only, as in PyTorch."""

from __future__ import annotations

import math
import numbers
from typing import Any

from ... import ops
from ..._validate import size_arg
from ...errors import ArgumentError
from ...ops.conv import same_padding
from ...tensor import Tensor, zeros
from .. import functional as F
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


_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


class _ConvNd(Module):
    _rank = 0
    _transposed = False

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
                 dilation: Any = 1, groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 output_padding: Any = 0, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        op, r = type(self).__name__, self._rank
        device = device_dtype(op, device, dtype)
        if padding_mode not in _PADDING_MODES:
            raise ArgumentError(f"{op}: padding_mode must be one of {list(_PADDING_MODES)}, got {padding_mode!r}")
        if self._transposed and padding_mode != "zeros":
            raise ArgumentError(f"{op}: only padding_mode='zeros' is supported for transposed convolutions, "
                                f"got {padding_mode!r}")
        in_channels = size_arg(op, "in_channels", in_channels)
        out_channels = size_arg(op, "out_channels", out_channels)
        if not isinstance(groups, numbers.Integral) or isinstance(groups, bool) or groups < 1:
            raise ArgumentError(f"{op}: groups must be a positive int, got {groups!r}")
        groups = int(groups)
        for name, n in (("in_channels", in_channels), ("out_channels", out_channels)):
            if n % groups:
                raise ArgumentError(f"{op}: {name} ({n}) must be divisible by groups ({groups})")
        self.in_channels, self.out_channels = int(in_channels), int(out_channels)
        self.kernel_size = _tuple(op, "kernel_size", kernel_size, r, 1)
        self.stride = _tuple(op, "stride", stride, r, 1)
        self.dilation = _tuple(op, "dilation", dilation, r, 1)
        self.groups, self.padding_mode = groups, padding_mode
        if isinstance(padding, str):
            if padding not in ("same", "valid"):
                raise ArgumentError(f"{op}: padding must be 'same', 'valid', an int or {r} ints, got {padding!r}")
            if self._transposed:
                raise ArgumentError(f"{op}: padding must be an int or {r} ints, got {padding!r}")
            if padding == "same" and any(s != 1 for s in self.stride):
                raise ArgumentError(f"{op}: padding='same' is not supported for strided convolutions "
                                    f"(stride {self.stride})")
        self.padding = padding if isinstance(padding, str) else _tuple(op, "padding", padding, r)
        self._reversed_padding_repeated_twice = self._pad_pairs()
        self.output_padding = _tuple(op, "output_padding", output_padding, r)
        if any(o >= max(s, 1) for o, s in zip(self.output_padding, self.stride)):
            raise ArgumentError(f"{op}: output_padding {self.output_padding} must be smaller than stride "
                                f"{self.stride} along every axis")
        w_in = (out_channels if self._transposed else in_channels) // groups
        shape = ((in_channels, w_in) if self._transposed else (out_channels, w_in)) + self.kernel_size
        self.weight = Parameter(zeros(*shape, device=device))
        if bias:
            self.bias = Parameter(zeros(out_channels, device=device))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def _pad_pairs(self) -> tuple:
        """F.pad's (before, after) pairs, last axis first, for a padding_mode other than "zeros"."""
        if self.padding == "valid":
            return (0,) * (2 * self._rank)
        if self.padding == "same":
            before, after = same_padding(type(self).__name__, self.kernel_size, self.dilation, self.stride)
        else:
            before = after = self.padding
        return tuple(v for a, b in zip(reversed(before), reversed(after)) for v in (a, b))

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
            s += f", padding={self.padding!r}" if isinstance(self.padding, str) else f", padding={self.padding}"
        if self.dilation != (1,) * self._rank:
            s += f", dilation={self.dilation}"
        if self._transposed and self.output_padding != (0,) * self._rank:
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        s += "" if self.bias is not None else ", bias=False"
        return s + ("" if self.padding_mode == "zeros" else f", padding_mode={self.padding_mode}")


class _Conv(_ConvNd):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
                 dilation: Any = 1, groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode, 0, device, dtype)

    def forward(self, x: Tensor) -> Tensor:
        fn = (ops.conv1d, ops.conv2d, ops.conv3d)[self._rank - 1]
        if self.padding_mode != "zeros":
            x = F.pad(x, self._reversed_padding_repeated_twice, mode=self.padding_mode)
            return fn(x, self.weight, self.bias, self.stride, 0, self.dilation, self.groups)
        return fn(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


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
            out_pad = tuple(sz - ((i - 1) * s - 2 * p + d * (k - 1) + 1)
                            for sz, i, s, p, k, d in zip(size, spatial, self.stride, self.padding, self.kernel_size,
                                                         self.dilation))
            if any(not 0 <= o < s for o, s in zip(out_pad, self.stride)):
                raise ArgumentError(f"{op}: output_size {tuple(output_size)} is not reachable from input {x.shape}")
        fn = (ops.conv_transpose1d, ops.conv_transpose2d, ops.conv_transpose3d)[self._rank - 1]
        return fn(x, self.weight, self.bias, self.stride, self.padding, out_pad, self.groups, self.dilation)


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
