"""``Mamba``: the selective state-space block of mamba_ssm's ``mamba_simple.Mamba`` (Gu & Dao 2023).

Parameter names and shapes follow ``mamba_ssm.modules.mamba_simple.Mamba`` (so its state dict loads):

* ``in_proj``   Linear(d_model, 2 * d_inner, bias=bias)          (x and the gate z)
* ``conv1d``    weight (d_inner, 1, d_conv), bias (d_inner,)      (depthwise causal conv over time)
* ``x_proj``    Linear(d_inner, dt_rank + 2 * d_state, bias=False) (dt, B, C from x)
* ``dt_proj``   Linear(dt_rank, d_inner, bias=True)               (its bias is the dt bias, initialized so
  that softplus(bias) is log-uniform in [dt_min, dt_max] = [0.001, 0.1], as mamba_simple)
* ``A_log``     (d_inner, d_state), log(1..d_state) on every row  (A = -exp(A_log), S4D-real init)
* ``D``         (d_inner,), ones                                  (the skip connection)
* ``out_proj``  Linear(d_inner, d_model, bias=bias)

with d_inner = expand * d_model and dt_rank = ceil(d_model / 16) for ``dt_rank="auto"``.

Forward over ``hidden_states`` (batch, L, d_model) -> (batch, L, d_model), the reference ("slow")
path of mamba_simple: in_proj -> split into x, z -> causal depthwise conv + SiLU on x -> x_proj ->
(dt, B, C) -> ``torchlean.ops.selective_scan(x, dt_proj.weight @ dt, A, B, C, D, z=z,
delta_bias=dt_proj.bias, delta_softplus=True)`` -> out_proj.

Difference from mamba_ssm: our ``Conv1d`` has no ``groups`` yet, so ``conv1d`` here is not an
``nn.Conv1d`` module but a small module holding the depthwise weight (d_inner, 1, d_conv) and bias
(same names and shapes, same PyTorch default initialization, so the state dict keys
``conv1d.weight`` / ``conv1d.bias`` match) whose forward is the causal depthwise convolution written
as d_conv shifted slices of the left-zero-padded sequence, each times its per-channel weight column.
No inference cache (``inference_params``) and no fused CUDA path: every step is a taped op.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ... import autograd, ops
from ...errors import ArgumentError, ShapeError
from ...tensor import Tensor, rand, tensor, zeros
from .. import init
from ..parameter import Parameter
from .linear import Linear, device_dtype
from .module import Module

__all__ = ["Mamba", "CausalDepthwiseConv1d"]


class CausalDepthwiseConv1d(Module):
    """Depthwise causal conv over time, the ``conv1d`` of mamba_simple (``nn.Conv1d(channels, channels,
    kernel_size, groups=channels, padding=kernel_size - 1)`` followed by ``[..., :L]``).

    ``weight`` (channels, 1, kernel_size), ``bias`` (channels,), initialized as PyTorch's Conv1d
    (fan_in = kernel_size: U(-1/sqrt(k), 1/sqrt(k)) for both). ``forward`` takes the time-major layout
    (L, batch, channels) (so that each shift is a contiguous slice) and returns the same shape:
    out[t, :, c] = bias[c] + sum_j weight[c, 0, j] * x[t - (k - 1) + j, :, c] (x = 0 before t = 0).
    """

    def __init__(self, channels: int, kernel_size: int, bias: bool = True, device: Any = None) -> None:
        super().__init__()
        if kernel_size < 1 or channels < 1:
            raise ArgumentError(f"CausalDepthwiseConv1d: channels and kernel_size must be >= 1, got "
                                f"{channels}, {kernel_size}")
        self.channels, self.kernel_size = int(channels), int(kernel_size)
        self.weight = Parameter(zeros(self.channels, 1, self.kernel_size, device=device))
        if bias:
            self.bias = Parameter(zeros(self.channels, device=device))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))  # U(-1/sqrt(k), 1/sqrt(k)), fan_in = 1 * k
        if self.bias is not None:
            bound = 1 / math.sqrt(self.kernel_size)
            init.uniform_(self.bias, -bound, bound)

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim != 3 or x.shape[2] != self.channels:
            raise ShapeError(f"CausalDepthwiseConv1d: input must have shape (L, batch, {self.channels}), "
                             f"got {tuple(x.shape)}")
        L, b, c = x.shape
        k = self.kernel_size
        xp = ops.cat([zeros(k - 1, b, c, device=x.device), x], dim=0) if k > 1 else x   # (L + k - 1, b, c)
        w = ops.t(ops.reshape(self.weight, (c, k)))                                      # (k, c)
        out = None
        for j in range(k):
            term = ops.mul(ops.slice0(xp, j, L), ops.slice0(w, j, 1))                   # (L, b, c) * (1, c)
            out = term if out is None else ops.add(out, term)
        if self.bias is not None:
            out = ops.add(out, self.bias)
        return out

    def extra_repr(self) -> str:
        return f"{self.channels}, kernel_size={self.kernel_size}, causal, depthwise"


class Mamba(Module):
    def __init__(self, d_model: int, d_state: int = 16, d_conv: int = 4, expand: int = 2, dt_rank: Any = "auto",
                 dt_min: float = 0.001, dt_max: float = 0.1, dt_init: str = "random", dt_scale: float = 1.0,
                 dt_init_floor: float = 1e-4, conv_bias: bool = True, bias: bool = False, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        device = device_dtype("Mamba", device, dtype)
        self.d_model, self.d_state, self.d_conv, self.expand = int(d_model), int(d_state), int(d_conv), int(expand)
        self.d_inner = self.expand * self.d_model
        self.dt_rank = math.ceil(self.d_model / 16) if dt_rank == "auto" else int(dt_rank)
        if min(self.d_model, self.d_state, self.d_conv, self.expand, self.dt_rank) < 1:
            raise ArgumentError(f"Mamba: d_model, d_state, d_conv, expand and dt_rank must be >= 1, got "
                                f"{d_model}, {d_state}, {d_conv}, {expand}, {dt_rank!r}")
        if dt_init not in ("random", "constant"):
            raise ArgumentError(f"Mamba: dt_init must be 'random' or 'constant', got {dt_init!r}")
        if not 0 < dt_min <= dt_max:
            raise ArgumentError(f"Mamba: need 0 < dt_min <= dt_max, got {dt_min}, {dt_max}")
        di, n, r = self.d_inner, self.d_state, self.dt_rank
        self.in_proj = Linear(self.d_model, 2 * di, bias=bias, device=device)
        self.conv1d = CausalDepthwiseConv1d(di, self.d_conv, bias=conv_bias, device=device)
        self.x_proj = Linear(di, r + 2 * n, bias=False, device=device)
        self.dt_proj = Linear(r, di, bias=True, device=device)

        # dt_proj as mamba_simple: weight U(-std, std) (or constant std) with std = dt_rank^-0.5 * dt_scale;
        # bias = softplus^-1(dt), dt log-uniform in [dt_min, dt_max], floored at dt_init_floor.
        std = r ** -0.5 * dt_scale
        with autograd.no_grad():
            if dt_init == "constant":
                init.constant_(self.dt_proj.weight, std)
            else:
                init.uniform_(self.dt_proj.weight, -std, std)
            u = rand(di).numpy().astype(np.float64)
            dt = np.exp(u * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min))
            dt = np.maximum(dt, dt_init_floor)
            inv_dt = dt + np.log(-np.expm1(-dt))
            self.dt_proj.bias.copy_(tensor(inv_dt.astype(np.float32), device=device))
        a = np.tile(np.arange(1, n + 1, dtype=np.float64), (di, 1))                   # S4D-real
        self.A_log = Parameter(tensor(np.log(a).astype(np.float32), device=device))
        self.D = Parameter(tensor(np.ones(di, dtype=np.float32), device=device))
        self.out_proj = Linear(di, self.d_model, bias=bias, device=device)

    def forward(self, hidden_states: Tensor) -> Tensor:
        if hidden_states.ndim != 3 or hidden_states.shape[2] != self.d_model:
            raise ShapeError(f"Mamba: hidden_states must have shape (batch, L, {self.d_model}), "
                             f"got {tuple(hidden_states.shape)}")
        b, L, _ = hidden_states.shape
        di, n, r = self.d_inner, self.d_state, self.dt_rank
        # time-major (L, b, .) so that the conv's shifts and the x / z split are contiguous slices
        xz = self.in_proj(ops.permute(hidden_states, (1, 0, 2)))                 # (L, b, 2 di)
        xz = ops.permute(xz, (2, 0, 1))                                          # (2 di, L, b)
        x = ops.permute(ops.slice0(xz, 0, di), (1, 2, 0))                        # (L, b, di)
        z = ops.permute(ops.slice0(xz, di, di), (2, 0, 1))                       # (b, di, L)
        x = self.conv1d(x)
        x = ops.mul(x, ops.sigmoid(x))                                           # SiLU
        x_dbl = ops.permute(self.x_proj(x), (2, 1, 0))                           # (r + 2n, b, L)
        dt = ops.permute(ops.slice0(x_dbl, 0, r), (1, 2, 0))                     # (b, L, r)
        B = ops.permute(ops.slice0(x_dbl, r, n), (1, 0, 2))                      # (b, n, L)
        C = ops.permute(ops.slice0(x_dbl, r + n, n), (1, 0, 2))                  # (b, n, L)
        delta = ops.permute(ops.matmul(dt, ops.t(self.dt_proj.weight)), (0, 2, 1))  # (b, di, L), no bias
        A = ops.neg(ops.exp(self.A_log))
        u = ops.permute(x, (1, 2, 0))                                            # (b, di, L)
        y = ops.selective_scan(u, delta, A, B, C, self.D, z=z, delta_bias=self.dt_proj.bias, delta_softplus=True)
        return self.out_proj(ops.permute(y, (0, 2, 1)))                          # (b, L, d_model)

    def extra_repr(self) -> str:
        return (f"d_model={self.d_model}, d_state={self.d_state}, d_conv={self.d_conv}, expand={self.expand}, "
                f"dt_rank={self.dt_rank}")
