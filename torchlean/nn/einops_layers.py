"""einops' layers as torchlean modules: ``Rearrange``, ``Reduce`` and ``EinMix``, the counterparts of
``einops.layers.torch`` (needs einops installed; the tensor operations go through the einops
backend in ``torchlean/_einops_backend.py``).

``from einops.layers.torch import Rearrange`` becomes ``from torchlean.nn.einops_layers import
Rearrange``.
"""

from __future__ import annotations

from typing import Any

from einops.layers import RearrangeMixin, ReduceMixin
from einops.layers._einmix import _EinmixMixin

from .. import ops
from ..tensor import Tensor, zeros
from . import init
from .modules.module import Module
from .parameter import Parameter

__all__ = ["Rearrange", "Reduce", "EinMix"]


class Rearrange(RearrangeMixin, Module):
    def forward(self, input: Tensor) -> Tensor:
        return self._apply_recipe(input)


class Reduce(ReduceMixin, Module):
    def forward(self, input: Tensor) -> Tensor:
        return self._apply_recipe(input)


class EinMix(_EinmixMixin, Module):
    def _create_parameters(self, weight_shape: Any, weight_bound: float, bias_shape: Any, bias_bound: float) -> None:
        self.weight = Parameter(init.uniform_(zeros(*weight_shape), -weight_bound, weight_bound))
        if bias_shape is not None:
            self.bias = Parameter(init.uniform_(zeros(*bias_shape), -bias_bound, bias_bound))
        else:
            self.bias = None

    def _create_rearrange_layers(self, pre_reshape_pattern: Any, pre_reshape_lengths: Any,
                                 post_reshape_pattern: Any, post_reshape_lengths: Any) -> None:
        self.pre_rearrange = None
        if pre_reshape_pattern is not None:
            self.pre_rearrange = Rearrange(pre_reshape_pattern, **dict(pre_reshape_lengths))
        self.post_rearrange = None
        if post_reshape_pattern is not None:
            self.post_rearrange = Rearrange(post_reshape_pattern, **dict(post_reshape_lengths))

    def forward(self, input: Tensor) -> Tensor:
        if self.pre_rearrange is not None:
            input = self.pre_rearrange(input)
        result = ops.einsum(self.einsum_pattern, input, self.weight)
        if self.bias is not None:
            result = result + self.bias
        if self.post_rearrange is not None:
            result = self.post_rearrange(result)
        return result
