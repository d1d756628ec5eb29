"""Activation functions with PyTorch's names and signatures, composed from differentiable ops.

Each is exact where PyTorch's formula is (relu, min, clamp, products) and within float32
rounding elsewhere (exp(x) - 1 where PyTorch uses expm1: the same to an absolute ~1e-7). Gradients
come from the composed ops; at a kink (x == 0 for elu) the one-sided value may differ
from PyTorch's choice. ``inplace`` is accepted and ignored (buffers are values).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import ops
from .._validate import int_arg, real_arg
from ..errors import ArgumentError, ShapeError
from ..tensor import Tensor, dim_index
from ._compose import as_tensor_arg, channel_view, const, host, neg_part, narrow, select

__all__ = ["silu", "leaky_relu", "elu", "selu", "celu", "softplus", "mish", "hardswish", "hardsigmoid", "hardtanh",
           "relu6", "softsign", "tanhshrink", "prelu", "glu", "logsigmoid", "softmin", "softmax", "log_softmax",
           "softmax_dim", "threshold", "hardshrink", "softshrink"]

_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def silu(input: Tensor, inplace: bool = False) -> Tensor:
    x = as_tensor_arg("silu", "input", input)
    return ops.mul(x, ops.sigmoid(x))


def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    """x where x > 0, else x * slope (rounded once, as in PyTorch): one primitive each way."""
    x = as_tensor_arg("leaky_relu", "input", input)
    return ops.leaky_relu(x, real_arg("leaky_relu", "negative_slope", negative_slope))


def _elu(op: str, x: Tensor, alpha: float, scale: float, input_scale: float) -> Tensor:
    # relu(x) + alpha (exp(min(x, 0) * input_scale) - 1): exp never sees a positive argument (no inf)
    neg = neg_part(x)
    if input_scale != 1.0:
        neg = ops.mul(neg, input_scale)
    out = ops.add(ops.relu(x), ops.mul(ops.add(ops.exp(neg), -1.0), alpha))
    return ops.mul(out, scale) if scale != 1.0 else out


def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    x = as_tensor_arg("elu", "input", input)
    return _elu("elu", x, real_arg("elu", "alpha", alpha), 1.0, 1.0)


def selu(input: Tensor, inplace: bool = False) -> Tensor:
    x = as_tensor_arg("selu", "input", input)
    return _elu("selu", x, _SELU_ALPHA, _SELU_SCALE, 1.0)


def celu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    x = as_tensor_arg("celu", "input", input)
    alpha = real_arg("celu", "alpha", alpha)
    if alpha == 0.0:
        raise ArgumentError("celu: alpha must not be 0 (PyTorch raises too)")
    return _elu("celu", x, alpha, 1.0, 1.0 / alpha)


def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """log(1 + exp(beta x)) / beta, and x itself where beta x > threshold (PyTorch's rule).

    Above a threshold of 16 the two agree in float32 (log1p(exp(-t)) is below half an ulp of t),
    so the switch (one host read for its mask) is made only for smaller thresholds."""
    x = as_tensor_arg("softplus", "input", input)
    beta = real_arg("softplus", "beta", beta)
    threshold = real_arg("softplus", "threshold", threshold)
    bx = ops.mul(x, beta) if beta != 1.0 else x
    y = ops.softplus(bx)
    if beta != 1.0:
        y = ops.mul(y, 1.0 / beta)
    if threshold < 16.0:
        mask = host(bx) > threshold
        if mask.any():
            y = select(mask, x, y)
    return y


def mish(input: Tensor, inplace: bool = False) -> Tensor:
    x = as_tensor_arg("mish", "input", input)
    return ops.mul(x, ops.tanh(ops.softplus(x)))


def hardtanh(input: Tensor, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> Tensor:
    x = as_tensor_arg("hardtanh", "input", input)
    lo, hi = real_arg("hardtanh", "min_val", min_val), real_arg("hardtanh", "max_val", max_val)
    if lo > hi:
        raise ArgumentError(f"hardtanh: min_val ({lo}) must not exceed max_val ({hi})")
    return ops.clamp(x, lo, hi)


def relu6(input: Tensor, inplace: bool = False) -> Tensor:
    return ops.clamp(as_tensor_arg("relu6", "input", input), 0.0, 6.0)


def hardsigmoid(input: Tensor, inplace: bool = False) -> Tensor:
    x = as_tensor_arg("hardsigmoid", "input", input)
    return ops.div(ops.clamp(ops.add(x, 3.0), 0.0, 6.0), 6.0)


def hardswish(input: Tensor, inplace: bool = False) -> Tensor:
    x = as_tensor_arg("hardswish", "input", input)
    return ops.div(ops.mul(x, ops.clamp(ops.add(x, 3.0), 0.0, 6.0)), 6.0)


def softsign(input: Tensor) -> Tensor:
    x = as_tensor_arg("softsign", "input", input)
    return ops.div(x, ops.add(ops.abs(x), 1.0))


def tanhshrink(input: Tensor) -> Tensor:
    x = as_tensor_arg("tanhshrink", "input", input)
    return ops.sub(x, ops.tanh(x))


def logsigmoid(input: Tensor) -> Tensor:
    """log(sigmoid(x)) = -softplus(-x), stable for every x."""
    x = as_tensor_arg("logsigmoid", "input", input)
    return ops.neg(ops.softplus(ops.neg(x)))


def prelu(input: Tensor, weight: Tensor) -> Tensor:
    """relu(x) + weight * min(x, 0), weight (1,) or (C,) along dim 1 (dim 0 for a 1-D input)."""
    x = as_tensor_arg("prelu", "input", input)
    w = as_tensor_arg("prelu", "weight", weight)
    if w.ndim > 1 or (w.numel() != 1 and (x.ndim == 0 or w.numel() != x.shape[1 if x.ndim >= 2 else 0])):
        raise ShapeError(f"prelu: weight of shape {w.shape} does not match the channels of input {x.shape}")
    if w.numel() == 1:
        wv = ops.reshape(w, ())
    else:
        wv = w if x.ndim == 1 else channel_view(w, x.ndim)
    return ops.add(ops.relu(x), ops.mul(neg_part(x), wv))


def glu(input: Tensor, dim: int = -1) -> Tensor:
    """a * sigmoid(b) for the halves a, b of ``input`` along ``dim``."""
    x = as_tensor_arg("glu", "input", input)
    d = dim_index("glu", dim, x.ndim)
    n = x.shape[d]
    if n % 2:
        raise ShapeError(f"glu: halving dimension {d} must have an even size, got {n} (shape {x.shape})")
    return ops.mul(narrow(x, d, 0, n // 2), ops.sigmoid(narrow(x, d, n // 2, n // 2)))


def softmax_dim(op: str, ndim: int, dim: Any) -> int:
    """PyTorch's implicit softmax dim (deprecated there): 0 for 0-, 1- and 3-D inputs, else 1."""
    if dim is None:
        return 0 if ndim in (0, 1, 3) else 1
    return int_arg(op, "dim", dim)


def softmax(input: Tensor, dim: Any = None, _stacklevel: int = 3, dtype: Any = None) -> Tensor:
    x = as_tensor_arg("softmax", "input", input)
    return ops.softmax(x, softmax_dim("softmax", x.ndim, dim))


def log_softmax(input: Tensor, dim: Any = None, _stacklevel: int = 3, dtype: Any = None) -> Tensor:
    x = as_tensor_arg("log_softmax", "input", input)
    return ops.log_softmax(x, softmax_dim("log_softmax", x.ndim, dim))


def softmin(input: Tensor, dim: Any = None, _stacklevel: int = 3, dtype: Any = None) -> Tensor:
    x = as_tensor_arg("softmin", "input", input)
    return ops.softmax(ops.neg(x), softmax_dim("softmin", x.ndim, dim))


def threshold(input: Tensor, threshold: float, value: float, inplace: bool = False) -> Tensor:
    """x where x > threshold, else value."""
    x = as_tensor_arg("threshold", "input", input)
    th, val = real_arg("threshold", "threshold", threshold), real_arg("threshold", "value", value)
    return select(host(x) > th, x, _full_like(x, val))


def hardshrink(input: Tensor, lambd: float = 0.5) -> Tensor:
    x = as_tensor_arg("hardshrink", "input", input)
    lam = real_arg("hardshrink", "lambd", lambd)
    h = host(x)
    return select((h > lam) | (h < -lam), x, _full_like(x, 0.0))


def softshrink(input: Tensor, lambd: float = 0.5) -> Tensor:
    """x - clamp(x, -lambd, lambd): x - lambd above, x + lambd below, 0 between."""
    x = as_tensor_arg("softshrink", "input", input)
    lam = real_arg("softshrink", "lambd", lambd, 0.0)
    return ops.sub(x, ops.clamp(x, -lam, lam))


def _full_like(x: Tensor, value: float) -> Tensor:
    return const(np.full(x.shape, value, dtype=np.float32), x)
