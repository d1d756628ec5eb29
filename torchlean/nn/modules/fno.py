"""Fourier Neural Operator modules (Li et al., ICLR 2021): ``SpectralConv1d`` and ``FNO1d`` (channels
LAST, NOT the reference layout), ``SpectralConv2d`` and ``SpectralConv3d`` (channels FIRST, the
reference layout and parameters).

1-D, channels last: ``SpectralConv1d`` and ``FNO1d`` take x of shape (batch, grid, channels) (or
(grid, channels) unbatched), the layout of ``torchlean.ops.spectral_conv1d``. The reference
``fourier_1d.py`` passes channels FIRST to its ``SpectralConv1d`` (x (batch, in, grid), after a
``permute``) and keeps one complex ``weights1`` of shape (in, out, modes); these modules differ on
both counts: the caller's x must be (batch, grid, channels), and the weight is stored as two real
tensors ``weight_re``, ``weight_im`` of shape (modes, in, out), i.e.
``weight_re = weights1.real.permute(2, 0, 1)`` and ``weight_im = weights1.imag.permute(2, 0, 1)``,
so a reference state dict does not load into them as it is (map its keys that way). Every 1x1
convolution of the reference is a ``Linear`` over the last axis in ``FNO1d``, the same map. The
initialization is the reference's: each part uniform in [0, scale), scale = 1 / (in * out), as
``scale * torch.rand(in, out, modes, dtype=cfloat)`` draws them.

2-D and 3-D, channels first: ``SpectralConv2d``/``SpectralConv3d`` have the reference's
signature, layout and complex parameters ``weights1`` .. ``weights4`` (see ``_SpectralConvNd``):
reference state dicts load as they are.
"""

from __future__ import annotations

import numbers
from typing import Any

from ... import ops
from ...complex_tensor import ComplexTensor
from ...errors import ArgumentError
from ...tensor import Tensor, rand, zeros
from .. import functional as F
from .. import init
from ..parameter import Parameter
from .container import ModuleList
from .linear import Linear
from .module import Module

__all__ = ["SpectralConv1d", "FNO1d", "SpectralConv2d", "SpectralConv3d"]


def _positive_int(op: str, name: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or int(v) < 1:
        raise ArgumentError(f"{op}: argument {name} must be an int >= 1, got {v!r}")
    return int(v)


class SpectralConv1d(Module):
    """y = irfft(R . rfft(x)) along the grid axis, keeping the lowest ``modes`` frequencies.

    Channels LAST, unlike the reference ``fourier_1d.py`` SpectralConv1d (channels first, complex
    ``weights1`` (in, out, modes)): x is (batch, grid, in_channels) or (grid, in_channels), and
    R[k] = weight_re[k] + i weight_im[k], each (modes, in_channels, out_channels), indexed
    [k, in, out] (= the reference's weights1.permute(2, 0, 1)). The grid must have
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


class _SpectralConvNd(Module):
    """The reference ``SpectralConv2d`` / ``SpectralConv3d`` (``fourier_2d.py`` / ``fourier_3d.py``):
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
