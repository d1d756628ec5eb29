"""``LayerNorm`` and ``BatchNorm1d/2d/3d`` (PyTorch's parameters, buffers and defaults).

``nn.LayerNorm`` defaults to eps = 1e-5 as PyTorch's module does, so a PyTorch model gives the
same numbers, as does ``nn.functional.layer_norm``; ``ops.layer_norm`` keeps the seed's 1e-6 default.
"""

from __future__ import annotations

from typing import Any

from ..._validate import expect_tensor, real_arg, size_arg
from ...dtypes import int64
from ...errors import ShapeError
from ...tensor import Tensor, ones, tensor, zeros
from .. import functional as F
from ..parameter import Parameter
from .linear import device_dtype
from .module import Module

__all__ = ["LayerNorm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "GroupNorm", "RMSNorm", "InstanceNorm1d",
           "InstanceNorm2d", "InstanceNorm3d"]


class LayerNorm(Module):
    def __init__(self, normalized_shape: Any, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        device = device_dtype("LayerNorm", device, dtype)
        shape = normalized_shape if isinstance(normalized_shape, (tuple, list)) else (normalized_shape,)
        shape = tuple(size_arg("LayerNorm", "normalized_shape", s) for s in shape)
        eps = real_arg("LayerNorm", "eps", eps, 0.0, finite=True)
        self.normalized_shape, self.eps, self.elementwise_affine = shape, eps, bool(elementwise_affine)
        if elementwise_affine:
            self.weight = Parameter(ones(*shape, device=device))
            if bias:
                self.bias = Parameter(zeros(*shape, device=device))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
                f"bias={self.bias is not None}")


class _BatchNorm(Module):
    _ranks: tuple[int, ...] = ()

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, device: Any = None, dtype: Any = None, *, bias: bool = True) -> None:
        super().__init__()
        op = type(self).__name__
        device = device_dtype(op, device, dtype)
        if momentum is not None:
            momentum = real_arg(op, "momentum", momentum, 0.0, 1.0)
        num_features = size_arg(op, "num_features", num_features)
        eps = real_arg(op, "eps", eps, 0.0, finite=True)
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = bool(affine), bool(track_running_stats)
        self.register_parameter("weight", Parameter(ones(num_features, device=device)) if affine else None)
        self.register_parameter("bias", Parameter(zeros(num_features, device=device)) if affine and bias else None)
        if track_running_stats:
            self.register_buffer("running_mean", zeros(num_features, device=device))
            self.register_buffer("running_var", ones(num_features, device=device))
            self.register_buffer("num_batches_tracked", tensor(0, dtype=int64, device=device))
        else:
            for n in ("running_mean", "running_var", "num_batches_tracked"):
                self.register_buffer(n, None)

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            self.running_mean.zero_()
            self.running_var.fill_(1.0)
            self.num_batches_tracked.zero_()

    def forward(self, x: Tensor) -> Tensor:
        op = type(self).__name__
        expect_tensor(op, "input", x, Tensor)
        if x.ndim not in self._ranks:
            raise ShapeError(f"{op}: expected a {' or '.join(f'{r}-D' for r in self._ranks)} input, got shape {x.shape}")
        use_batch = self.training or not self.track_running_stats
        momentum = 0.0 if self.momentum is None else self.momentum
        counting = self.training and self.track_running_stats
        if counting:
            n = self.num_batches_tracked
            if self.momentum is None:  # cumulative moving average, as PyTorch
                momentum = 1.0 / float(n.item() + 1)
        track = self.track_running_stats and (self.training or not use_batch)
        y = F.batch_norm(x, self.running_mean if track else None, self.running_var if track else None,
                         self.weight, self.bias, use_batch, momentum, self.eps)
        if counting:  # counted once batch_norm has succeeded: a refused call leaves the module as it was
            n.add_(1)  # (an int64 tensor on the module's device: it stays one)
        return y

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"bias={self.bias is not None}, track_running_stats={self.track_running_stats}")


BatchNormBase = _BatchNorm  # (torch.nn.modules.batchnorm._BatchNorm, for isinstance checks)


class BatchNorm1d(_BatchNorm):
    _ranks = (2, 3)


class BatchNorm2d(_BatchNorm):
    _ranks = (4,)


class BatchNorm3d(_BatchNorm):
    _ranks = (5,)


class GroupNorm(Module):
    """Normalizes each of ``num_groups`` channel groups per sample; per-channel affine (weight 1, bias 0)."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True, bias: bool = True,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        device = device_dtype("GroupNorm", device, dtype)
        self.num_groups = size_arg("GroupNorm", "num_groups", num_groups, 1)
        self.num_channels = size_arg("GroupNorm", "num_channels", num_channels)
        if self.num_channels % self.num_groups:
            raise ShapeError(f"GroupNorm: num_channels ({num_channels}) must be divisible by num_groups ({num_groups})")
        self.eps = real_arg("GroupNorm", "eps", eps, 0.0, finite=True)
        self.affine = bool(affine)
        self.register_parameter("weight", Parameter(ones(self.num_channels, device=device)) if affine else None)
        self.register_parameter("bias", Parameter(zeros(self.num_channels, device=device)) if affine and bias else None)

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim < 2 or x.shape[1] != self.num_channels:
            raise ShapeError(f"GroupNorm: expected an input (N, {self.num_channels}, *), got shape {x.shape}")
        return F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, bias={self.bias is not None}"


class RMSNorm(Module):
    """x / sqrt(mean(x^2) + eps) * weight over the trailing ``normalized_shape`` dims; eps None is
    float32's machine epsilon (PyTorch's default)."""

    def __init__(self, normalized_shape: Any, eps: float | None = None, elementwise_affine: bool = True,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        device = device_dtype("RMSNorm", device, dtype)
        shape = normalized_shape if isinstance(normalized_shape, (tuple, list)) else (normalized_shape,)
        self.normalized_shape = tuple(size_arg("RMSNorm", "normalized_shape", s) for s in shape)
        self.eps = None if eps is None else real_arg("RMSNorm", "eps", eps, 0.0, finite=True)
        self.elementwise_affine = bool(elementwise_affine)
        if elementwise_affine:
            self.weight = Parameter(ones(*self.normalized_shape, device=device))
        else:
            self.register_parameter("weight", None)

    def forward(self, x: Tensor) -> Tensor:
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class _InstanceNorm(Module):
    _rank = 0

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1, affine: bool = False,
                 track_running_stats: bool = False, device: Any = None, dtype: Any = None, *, bias: bool = True) -> None:
        super().__init__()
        op = type(self).__name__
        device = device_dtype(op, device, dtype)
        self.num_features = size_arg(op, "num_features", num_features)
        self.eps = real_arg(op, "eps", eps, 0.0, finite=True)
        self.momentum = real_arg(op, "momentum", momentum, 0.0, 1.0)
        self.affine, self.track_running_stats = bool(affine), bool(track_running_stats)
        self.register_parameter("weight", Parameter(ones(num_features, device=device)) if affine else None)
        self.register_parameter("bias", Parameter(zeros(num_features, device=device)) if affine and bias else None)
        if track_running_stats:
            self.register_buffer("running_mean", zeros(num_features, device=device))
            self.register_buffer("running_var", ones(num_features, device=device))
            self.register_buffer("num_batches_tracked", tensor(0, dtype=int64, device=device))
        else:
            for n in ("running_mean", "running_var", "num_batches_tracked"):
                self.register_buffer(n, None)

    def forward(self, x: Tensor) -> Tensor:
        op = type(self).__name__
        expect_tensor(op, "input", x, Tensor)
        r = self._rank
        if x.ndim not in (r + 1, r + 2):
            raise ShapeError(f"{op}: expected a {r + 1}-D (unbatched) or {r + 2}-D input, got shape {x.shape}")
        unbatched = x.ndim == r + 1
        if unbatched:
            x = x.unsqueeze(0)
        if x.shape[1] != self.num_features and self.affine:
            raise ShapeError(f"{op}: expected {self.num_features} channels, got input of shape {x.shape}")
        use_input_stats = self.training or not self.track_running_stats  # (num_batches_tracked stays 0, as in PyTorch)
        y = F.instance_norm(x, self.running_mean, self.running_var, self.weight, self.bias, use_input_stats,
                            self.momentum, self.eps)
        return y.squeeze(0) if unbatched else y

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"bias={self.bias is not None}, track_running_stats={self.track_running_stats}")


class InstanceNorm1d(_InstanceNorm):
    _rank = 1


class InstanceNorm2d(_InstanceNorm):
    _rank = 2


class InstanceNorm3d(_InstanceNorm):
    _rank = 3
