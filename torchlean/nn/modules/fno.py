"""Fourier Neural Operator modules (Li et al., ICLR 2021).

Channels FIRST, the reference layout and parameters: ``SpectralConv1d``, ``SpectralConv2d`` and
``SpectralConv3d`` have the signatures of the reference ``fourier_1d.py`` / ``fourier_2d.py`` /
``fourier_3d.py`` classes, take x (batch, in_channels, grid..) and hold complex parameters
``weights1`` .. ``weights{2^(d-1)}`` of shape (in_channels, out_channels, modes..) drawn as the
reference draws them, so reference state dicts load as they are (see ``_SpectralConvNd``).

Channels LAST, torchlean's own 1-D layout: ``SpectralConv1dChannelsLast`` and ``FNO1d`` take x of
shape (batch, grid, channels) (or (grid, channels) unbatched), the layout of
``torchlean.ops.spectral_conv1d``, and keep the weight as two real tensors ``weight_re``,
``weight_im`` of shape (modes, in, out): ``weight_re = weights1.real.permute(2, 0, 1)`` and
``weight_im = weights1.imag.permute(2, 0, 1)`` map a reference state dict onto them. Every 1x1
convolution of the reference is a ``Linear`` over the last axis in ``FNO1d``, the same map. The
initialization is the reference's: each part uniform in [0, scale), scale = 1 / (in * out), as
``scale * torch.rand(in, out, modes, dtype=cfloat)`` draws them.
"""

from __future__ import annotations

import numbers
from typing import Any

from ... import ops
from ...complex_tensor import ComplexTensor
from ...complex_tensor import einsum as complex_einsum
from ...errors import ArgumentError, ShapeError
from ...tensor import Tensor, rand, zeros
from .. import functional as F
from .. import init
from ..parameter import Parameter
from .container import ModuleList
from .linear import Linear
from .module import Module

__all__ = ["SpectralConv1dChannelsLast", "FNO1d", "SpectralConv1d", "SpectralConv2d", "SpectralConv3d"]


def _positive_int(op: str, name: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or int(v) < 1:
        raise ArgumentError(f"{op}: argument {name} must be an int >= 1, got {v!r}")
    return int(v)


class SpectralConv1dChannelsLast(Module):
    """y = irfft(R . rfft(x)) along the grid axis, keeping the lowest ``modes`` frequencies.

    Channels LAST (for the reference layout, channels first with complex ``weights1``, use
    ``SpectralConv1d``): x is (batch, grid, in_channels) or (grid, in_channels), and
    R[k] = weight_re[k] + i weight_im[k], each (modes, in_channels, out_channels), indexed
    [k, in, out] (= the reference's weights1.permute(2, 0, 1)). The grid must have
    grid // 2 + 1 >= modes. ``ops.spectral_conv1d`` maps a width to the same width, so
    in_channels must equal out_channels (else ArgumentError).
    """

    def __init__(self, in_channels: int, out_channels: int, modes: int, device: Any = None) -> None:
        super().__init__()
        op = "SpectralConv1dChannelsLast"
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
    the reference's for the spectral weights (see ``SpectralConv1dChannelsLast``).
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
        self.spectral = ModuleList([SpectralConv1dChannelsLast(self.width, self.width, self.modes, device=device)
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


class _SpectralConvNd(Module):
    """The reference ``SpectralConv1d`` / ``SpectralConv2d`` / ``SpectralConv3d`` (``fourier_1d.py`` ..):
    channels first, complex parameters ``weights1`` .. ``weights{2^(d-1)}`` of shape
    (in_channels, out_channels, modes1, .., modes_d), drawn as the reference draws them,
    ``scale * torch.rand(..., dtype=torch.cfloat)`` with scale = 1 / (in_channels * out_channels), so a
    reference state dict loads as it is. The forward stacks the weights' real views into the fused
    primitive's w (``ops.spectral_conv2d`` / ``ops.spectral_conv3d``): one tape node, no complex
    intermediate."""

    _DIMS = 0

    def __init__(self, in_channels: int, out_channels: int, *modes: int, device: Any = None) -> None:
        super().__init__()
        op = type(self).__name__
        self.in_channels = _positive_int(op, "in_channels", in_channels)
        self.out_channels = _positive_int(op, "out_channels", out_channels)
        for j, m in enumerate(modes):
            setattr(self, f"modes{j + 1}", _positive_int(op, f"modes{j + 1}", m))
        self.scale = 1.0 / (self.in_channels * self.out_channels)
        shape = (self.in_channels, self.out_channels) + tuple(int(m) for m in modes)
        for c in range(2 ** (self._DIMS - 1)):
            real = ops.mul(rand(*shape, 2, device=device), self.scale)
            setattr(self, f"weights{c + 1}", Parameter(ComplexTensor.from_real_view(real)))

    def _modes(self) -> tuple[int, ...]:
        return tuple(getattr(self, f"modes{j + 1}") for j in range(self._DIMS))

    def reset_parameters(self) -> None:
        for c in range(2 ** (self._DIMS - 1)):
            init.uniform_(getattr(self, f"weights{c + 1}").real_view(), 0.0, self.scale)

    def _stacked(self) -> Tensor:
        return ops.stack([getattr(self, f"weights{c + 1}").real_view() for c in range(2 ** (self._DIMS - 1))])

    def extra_repr(self) -> str:
        modes = ", ".join(f"modes{j + 1}={m}" for j, m in enumerate(self._modes()))
        return f"in_channels={self.in_channels}, out_channels={self.out_channels}, {modes}"


class SpectralConv1d(_SpectralConvNd):
    """y = irfft(R . rfft(x), n=grid) keeping the modes [:modes1] (``weights1``, complex (in_channels,
    out_channels, modes1)), as the reference ``fourier_1d.py``. x: (batch, in_channels, grid); needs
    modes1 <= grid // 2 + 1. With in_channels == out_channels (every FNO layer) the forward is the
    fused ``ops.spectral_conv1d`` between two transposes; otherwise rfft, a complex einsum over the
    kept modes and irfft (torchlean.fft), the reference's own composition."""

    _DIMS = 1

    def __init__(self, in_channels: int, out_channels: int, modes1: int, device: Any = None) -> None:
        super().__init__(in_channels, out_channels, modes1, device=device)

    def forward(self, x: Tensor) -> Tensor:
        op = "SpectralConv1d"
        if not isinstance(x, Tensor) or x.ndim != 3 or x.shape[1] != self.in_channels:
            raise ShapeError(f"{op}: x must be a float32 tensor (batch, in_channels={self.in_channels}, grid), got "
                             f"{_describe(x)}")
        grid = x.shape[2]
        if self.modes1 > grid // 2 + 1:
            raise ArgumentError(f"{op}: modes1={self.modes1} exceeds the {grid // 2 + 1} frequencies of a grid of "
                                f"{grid} (grid // 2 + 1)")
        w = self.weights1.real_view()  # (in, out, modes, 2)
        if self.in_channels == self.out_channels:
            w_re, w_im = w[..., 0].permute(2, 0, 1), w[..., 1].permute(2, 0, 1)  # (modes, in, out)
            return ops.spectral_conv1d(x.permute(0, 2, 1), w_re, w_im, self.modes1).permute(0, 2, 1)
        x_ft = ComplexTensor.from_real_view(ops.fft.rfftn_r2c(x, 1, 1.0))  # (batch, in, grid // 2 + 1)
        out_ft = ComplexTensor.from_real_view(zeros(x.shape[0], self.out_channels, grid // 2 + 1, 2, device=x.device))
        out_ft[:, :, :self.modes1] = complex_einsum("bix,iox->box", x_ft[:, :, :self.modes1], self.weights1)
        return ops.fft.irfftn_c2r(out_ft.real_view(), 1, grid, 1.0 / grid)


def _describe(x: Any) -> str:
    return f"shape {tuple(x.shape)}" if isinstance(x, Tensor) else f"a {type(x).__name__}"


class SpectralConv2d(_SpectralConvNd):
    """y = irfft2(R . rfft2(x), s=(h, w)) keeping the modes [:modes1, :modes2] (``weights1``) and
    [-modes1:, :modes2] (``weights2``), as the reference ``fourier_2d.py``. x: (batch, in_channels, h, w)
    (or unbatched); needs 2 modes1 <= h and modes2 <= w // 2 + 1."""

    _DIMS = 2

    def __init__(self, in_channels: int, out_channels: int, modes1: int, modes2: int, device: Any = None) -> None:
        super().__init__(in_channels, out_channels, modes1, modes2, device=device)

    def forward(self, x: Tensor) -> Tensor:
        return ops.spectral_conv2d(x, self._stacked())


class SpectralConv3d(_SpectralConvNd):
    """y = irfftn(R . rfftn(x), s=(d1, d2, d3)) over the last three axes, keeping [:m1, :m2, :m3]
    (``weights1``), [-m1:, :m2] (``weights2``), [:m1, -m2:] (``weights3``) and [-m1:, -m2:]
    (``weights4``), as the reference ``fourier_3d.py``. x: (batch, in_channels, d1, d2, d3); needs
    2 modes1 <= d1, 2 modes2 <= d2, modes3 <= d3 // 2 + 1."""

    _DIMS = 3

    def __init__(self, in_channels: int, out_channels: int, modes1: int, modes2: int, modes3: int,
                 device: Any = None) -> None:
        super().__init__(in_channels, out_channels, modes1, modes2, modes3, device=device)

    def forward(self, x: Tensor) -> Tensor:
        return ops.spectral_conv3d(x, self._stacked())
