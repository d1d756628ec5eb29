"""``LayerNorm`` and ``BatchNorm1d/2d/3d`` (PyTorch's parameters, buffers and defaults).

``nn.LayerNorm`` defaults to eps = 1e-5 as PyTorch's module does, so a PyTorch model gives the
same numbers; the functional ``layer_norm`` keeps the seed's 1e-6 default.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..._validate import expect_tensor, real_arg, size_arg
from ...errors import ShapeError
from ...tensor import Tensor, ones, tensor, zeros
from .. import functional as F
from ..parameter import Parameter
from .linear import device_dtype
from .module import Module

__all__ = ["LayerNorm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d"]


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
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class _BatchNorm(Module):
    _ranks: tuple[int, ...] = ()

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        op = type(self).__name__
        device = device_dtype(op, device, dtype)
        if momentum is not None:
            momentum = real_arg(op, "momentum", momentum, 0.0, 1.0)
        num_features = size_arg(op, "num_features", num_features)
        eps = real_arg(op, "eps", eps, 0.0, finite=True)
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = bool(affine), bool(track_running_stats)
        if affine:
            self.weight = Parameter(ones(num_features, device=device))
            self.bias = Parameter(zeros(num_features, device=device))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", zeros(num_features, device=device))
            self.register_buffer("running_var", ones(num_features, device=device))
            self.register_buffer("num_batches_tracked", tensor(np.array(0, dtype=np.int64)))
        else:
            for n in ("running_mean", "running_var", "num_batches_tracked"):
                self.register_buffer(n, None)

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            self.running_mean.zero_()
            self.running_var.fill_(1.0)
            self.num_batches_tracked._host = np.array(0, dtype=np.int64)

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
                momentum = 1.0 / float(n._host + 1)
        track = self.track_running_stats and (self.training or not use_batch)
        y = F.batch_norm(x, self.running_mean if track else None, self.running_var if track else None,
                         self.weight, self.bias, use_batch, momentum, self.eps)
        if counting:  # counted once batch_norm has succeeded: a refused call leaves the module as it was
            n._host = n._host + 1
        return y

    def extra_repr(self) -> str:
        return f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}"


class BatchNorm1d(_BatchNorm):
    _ranks = (2, 3)


class BatchNorm2d(_BatchNorm):
    _ranks = (4,)


class BatchNorm3d(_BatchNorm):
    _ranks = (5,)
