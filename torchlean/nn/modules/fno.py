"""Fourier Neural Operator modules: ``SpectralConv1d`` and ``FNO1d`` (Li et al., ICLR 2021).

Layout: channels LAST. ``SpectralConv1d`` and ``FNO1d`` take x of shape (batch, grid, channels)
(or (grid, channels) unbatched), the layout of ``torchlean.ops.spectral_conv1d`` and of the
reference FNO code's input before its ``permute``; every 1x1 convolution of the reference is a
``Linear`` over the last axis, which is the same map.

Parameters follow the reference implementation (``fourier_1d.py``), with the complex weight of
shape (in, out, modes) stored as two real tensors of shape (modes, in, out), the layout of
``ops.spectral_conv1d``: ``weight_re``, ``weight_im``, each drawn uniform in [0, scale) with
scale = 1 / (in * out), as ``scale * torch.rand(in, out, modes, dtype=cfloat)`` does for the
real and the imaginary part.
"""

from __future__ import annotations

import numbers
from typing import Any

from ... import ops
from ...errors import ArgumentError
from ...tensor import Tensor, zeros
from .. import functional as F
from .. import init
from ..parameter import Parameter
from .container import ModuleList
from .linear import Linear
from .module import Module

__all__ = ["SpectralConv1d", "FNO1d"]


def _positive_int(op: str, name: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or int(v) < 1:
        raise ArgumentError(f"{op}: argument {name} must be an int >= 1, got {v!r}")
    return int(v)


class SpectralConv1d(Module):
    """y = irfft(R . rfft(x)) along the grid axis, keeping the lowest ``modes`` frequencies.

    R[k] = weight_re[k] + i weight_im[k], each (modes, in_channels, out_channels), indexed
    [k, in, out]. x: (batch, grid, in_channels) or (grid, in_channels); the grid must have
    grid // 2 + 1 >= modes. ``ops.spectral_conv1d`` maps a width to the same width, so
    in_channels must equal out_channels (else ArgumentError).
    """

    def __init__(self, in_channels: int, out_channels: int, modes: int, device: Any = None) -> None:
        super().__init__()
        op = "SpectralConv1d"
        self.in_channels = _positive_int(op, "in_channels", in_channels)
        self.out_channels = _positive_int(op, "out_channels", out_channels)
        self.modes = _positive_int(op, "modes", modes)
        if self.in_channels != self.out_channels:
            raise ArgumentError(f"{op}: in_channels must equal out_channels (ops.spectral_conv1d maps a width to "
                                f"the same width), got in_channels={self.in_channels}, "
                                f"out_channels={self.out_channels}")
        shape = (self.modes, self.in_channels, self.out_channels)
        self.weight_re = Parameter(zeros(*shape, device=device))
        self.weight_im = Parameter(zeros(*shape, device=device))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        scale = 1.0 / (self.in_channels * self.out_channels)
        init.uniform_(self.weight_re, 0.0, scale)
        init.uniform_(self.weight_im, 0.0, scale)

    def forward(self, x: Tensor) -> Tensor:
        return ops.spectral_conv1d(x, self.weight_re, self.weight_im, self.modes)

    def extra_repr(self) -> str:
        return f"in_channels={self.in_channels}, out_channels={self.out_channels}, modes={self.modes}"


class FNO1d(Module):
    """The 1-d Fourier Neural Operator: lifting, ``n_layers`` Fourier blocks, projection.

    x (batch, grid, in_channels) -> (batch, grid, out_channels) (or unbatched (grid, in_channels)):

    * ``lift``: Linear(in_channels, width) over the channel axis (the reference's ``fc0``);
    * block l: v <- GELU(spectral[l](v) + pointwise[l](v)), where ``pointwise[l]`` is a
      Linear(width, width) (the reference's 1x1 ``Conv1d`` ``w{l}``); no GELU after the last block;
    * ``proj1`` Linear(width, 128) -> GELU -> ``proj2`` Linear(128, out_channels) (``fc1``, ``fc2``).

    The grid needs grid // 2 + 1 >= modes. Default initialization: PyTorch's for the Linear layers,
    the reference's for the spectral weights (see ``SpectralConv1d``).
    """

    def __init__(self, modes: int, width: int, in_channels: int = 2, out_channels: int = 1, n_layers: int = 4,
                 device: Any = None) -> None:
        super().__init__()
        op = "FNO1d"
        self.modes = _positive_int(op, "modes", modes)
        self.width = _positive_int(op, "width", width)
        self.in_channels = _positive_int(op, "in_channels", in_channels)
        self.out_channels = _positive_int(op, "out_channels", out_channels)
        self.n_layers = _positive_int(op, "n_layers", n_layers)
        self.lift = Linear(self.in_channels, self.width, device=device)
        self.spectral = ModuleList([SpectralConv1d(self.width, self.width, self.modes, device=device)
                                    for _ in range(self.n_layers)])
        self.pointwise = ModuleList([Linear(self.width, self.width, device=device) for _ in range(self.n_layers)])
        self.proj1 = Linear(self.width, 128, device=device)
        self.proj2 = Linear(128, self.out_channels, device=device)

    def forward(self, x: Tensor) -> Tensor:
        v = self.lift(x)
        for i, (spec, point) in enumerate(zip(self.spectral, self.pointwise)):
            v = spec(v) + point(v)
            if i < self.n_layers - 1:
                v = F.gelu(v)
        return self.proj2(F.gelu(self.proj1(v)))

    def extra_repr(self) -> str:
        return (f"modes={self.modes}, width={self.width}, in_channels={self.in_channels}, "
                f"out_channels={self.out_channels}, n_layers={self.n_layers}")
