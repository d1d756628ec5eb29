"""The 2-D and 3-D Fourier Neural Operators of Li et al. (ICLR 2021): ``FNO2d`` and ``FNO3d``.

Laid out exactly as the reference programs (``fourier_2d.py``, ``fourier_2d_time.py``,
``fourier_3d.py``), with the same submodule and parameter names and shapes, so that their state
dicts load: ``fc0`` Linear(in_channels + d, width) on the input with the d grid coordinates
appended (linspace(0, 1) along each axis, as the reference's ``get_grid``), four Fourier layers
x <- conv_l(x) + w_l(x) (``conv0..conv3``: ``nn.SpectralConv2d``/``3d`` with complex ``weights1..``;
``w0..w3``: 1x1 ``Conv2d``/``Conv3d``), GELU between them, then ``fc1`` Linear(width, 128), GELU,
``fc2`` Linear(128, out_channels).

Input and output are channels LAST, as the reference's: (batch, x, y, in_channels) ->
(batch, x, y, out_channels) (3-D: (batch, x, y, t, c)); the Fourier layers run channels first.
``padding`` zero-pads the end of the spatial axes before the Fourier layers and crops it after
(the reference's trick for non-periodic data: 9 for Darcy flow in ``fourier_2d.py``; 0 for the
periodic Navier-Stokes data of ``fourier_2d_time.py``; 6 on the time axis only in ``fourier_3d.py``).
``unused_batchnorm`` declares ``bn0..bn3`` (BatchNorm2d/3d) that the forward never calls, as
``fourier_2d_time.py`` and ``fourier_3d.py`` do, so their state dicts load with strict=True.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from ... import ops
from ...errors import ArgumentError, NotSupportedError
from ...tensor import Tensor, tensor
from .. import functional as F
from .conv import Conv2d, Conv3d
from .linear import Linear
from .module import Module
from .normalization import BatchNorm2d, BatchNorm3d

__all__ = ["FNO2d", "FNO3d"]

_LAYERS = 4


def _int(op: str, name: str, v: Any, low: int = 1) -> int:
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or int(v) < low:
        raise ArgumentError(f"{op}: argument {name} must be an int >= {low}, got {v!r}")
    return int(v)


def _spectral_conv(op: str, name: str) -> Any:
    from . import fno

    cls = getattr(fno, name, None)
    if cls is None:  # the fused spectral convolutions are built alongside these models
        raise NotSupportedError(f"{op}: needs torchlean.nn.{name}, which this build of torchlean does not have")
    return cls


def _check_input(op: str, x: Any, dims: int) -> None:
    if not isinstance(x, Tensor):
        raise ArgumentError(f"{op}: expected a Tensor for input, got {type(x).__module__}.{type(x).__name__}")
    if x.dim() != dims + 2:
        raise ArgumentError(f"{op}: expected input of shape (batch, {', '.join('xyt'[:dims])}, channels) "
                            f"({dims + 2} dims, channels last), got shape {tuple(x.shape)}")


def _grid(batch: int, sizes: tuple[int, ...], device: Any) -> Tensor:
    """The reference's ``get_grid``: (batch, *spatial, dims) coordinates linspace(0, 1) per axis."""
    axes = np.meshgrid(*[np.linspace(0.0, 1.0, s) for s in sizes], indexing="ij")
    coords = np.stack(axes, axis=-1).astype(np.float32)
    return tensor(np.broadcast_to(coords, (batch,) + coords.shape).copy(), device=device)


class _FNO(Module):
    _dims = 0

    def _build(self, op: str, modes: tuple[int, ...], width: int, in_channels: int, out_channels: int,
               padding: int, unused_batchnorm: bool) -> None:
        self.width = _int(op, "width", width)
        self.in_channels = _int(op, "in_channels", in_channels)
        self.out_channels = _int(op, "out_channels", out_channels)
        self.padding = _int(op, "padding", padding, low=0)
        self.unused_batchnorm = bool(unused_batchnorm)
        conv = _spectral_conv(op, f"SpectralConv{self._dims}d")
        pointwise = Conv2d if self._dims == 2 else Conv3d
        norm = BatchNorm2d if self._dims == 2 else BatchNorm3d
        self.fc0 = Linear(self.in_channels + self._dims, self.width)
        for i in range(_LAYERS):
            setattr(self, f"conv{i}", conv(self.width, self.width, *modes))
        for i in range(_LAYERS):
            setattr(self, f"w{i}", pointwise(self.width, self.width, 1))
        if self.unused_batchnorm:
            for i in range(_LAYERS):
                setattr(self, f"bn{i}", norm(self.width))
        self.fc1 = Linear(self.width, 128)
        self.fc2 = Linear(128, self.out_channels)
        # the last grid built, keyed by (batch, spatial sizes, device): a constant, so a training loop
        # at one batch shape builds and uploads it once, not every forward
        self._grid_cache: tuple[tuple, Tensor] | None = None

    def _cached_grid(self, x: Tensor) -> Tensor:
        d = self._dims
        key = (int(x.shape[0]), tuple(int(n) for n in x.shape[1:1 + d]), str(x.device))
        if self._grid_cache is None or self._grid_cache[0] != key:
            self._grid_cache = (key, _grid(key[0], key[1], x.device))
        return self._grid_cache[1]

    def _pad(self) -> list[int]:
        raise NotImplementedError

    def _crop(self, x: Tensor) -> Tensor:
        raise NotImplementedError

    def forward(self, x: Tensor) -> Tensor:
        op = type(self).__name__
        d = self._dims
        _check_input(op, x, d)
        x = ops.cat([x, self._cached_grid(x)], dim=-1)
        x = self.fc0(x)
        x = x.permute(0, d + 1, *range(1, d + 1))
        if self.padding:
            x = F.pad(x, self._pad())
        for i in range(_LAYERS):
            x = getattr(self, f"conv{i}")(x) + getattr(self, f"w{i}")(x)
            if i < _LAYERS - 1:
                x = F.gelu(x)
        if self.padding:
            x = self._crop(x)
        x = x.permute(0, *range(2, d + 2), 1)
        x = self.fc1(x)
        x = F.gelu(x)
        return self.fc2(x)


class FNO2d(_FNO):
    """FNO2d(modes1, modes2, width): the 2-D Fourier Neural Operator of ``fourier_2d.py``.

    x (batch, s_x, s_y, in_channels) -> (batch, s_x, s_y, out_channels); ``fc0`` sees the
    in_channels data channels and the two grid coordinates. Defaults: Darcy flow's (one input
    channel, padding 9). ``fourier_2d_time.py`` (10 past vorticity fields, periodic):
    ``FNO2d(12, 12, 20, in_channels=10, padding=0, unused_batchnorm=True)``. Each padded spatial
    size s + padding must keep modes1 <= s_x + padding and modes2 <= (s_y + padding) // 2 + 1.
    """

    _dims = 2

    def __init__(self, modes1: int, modes2: int, width: int, in_channels: int = 1, out_channels: int = 1,
                 padding: int = 9, unused_batchnorm: bool = False) -> None:
        super().__init__()
        self.modes1 = _int("FNO2d", "modes1", modes1)
        self.modes2 = _int("FNO2d", "modes2", modes2)
        self._build("FNO2d", (self.modes1, self.modes2), width, in_channels, out_channels, padding, unused_batchnorm)

    def _pad(self) -> list[int]:
        return [0, self.padding, 0, self.padding]

    def _crop(self, x: Tensor) -> Tensor:
        return x[..., :-self.padding, :-self.padding]

    def extra_repr(self) -> str:
        return (f"modes1={self.modes1}, modes2={self.modes2}, width={self.width}, in_channels={self.in_channels}, "
                f"out_channels={self.out_channels}, padding={self.padding}")


class FNO3d(_FNO):
    """FNO3d(modes1, modes2, modes3, width): the 3-D Fourier Neural Operator of ``fourier_3d.py``
    (2-D space + time as a third axis).

    x (batch, s_x, s_y, s_t, in_channels) -> (batch, s_x, s_y, s_t, out_channels); ``fc0`` sees
    the in_channels data channels (the reference: the first 10 vorticity fields, repeated along
    t) and the three grid coordinates. ``padding`` pads the time axis only (the reference: 6).
    Defaults are ``fourier_3d.py``'s, including its unused ``bn0..bn3``.
    """

    _dims = 3

    def __init__(self, modes1: int, modes2: int, modes3: int, width: int, in_channels: int = 10,
                 out_channels: int = 1, padding: int = 6, unused_batchnorm: bool = True) -> None:
        super().__init__()
        self.modes1 = _int("FNO3d", "modes1", modes1)
        self.modes2 = _int("FNO3d", "modes2", modes2)
        self.modes3 = _int("FNO3d", "modes3", modes3)
        self._build("FNO3d", (self.modes1, self.modes2, self.modes3), width, in_channels, out_channels, padding,
                    unused_batchnorm)

    def _pad(self) -> list[int]:
        return [0, self.padding]

    def _crop(self, x: Tensor) -> Tensor:
        return x[..., :-self.padding]

    def extra_repr(self) -> str:
        return (f"modes1={self.modes1}, modes2={self.modes2}, modes3={self.modes3}, width={self.width}, "
                f"in_channels={self.in_channels}, out_channels={self.out_channels}, padding={self.padding}")
