"""``torchlean.nn.functional``: PyTorch names and signatures over the differentiable ops."""

from __future__ import annotations

from typing import Any

from .. import ops
from .._validate import real_arg
from ..fast_kernels import get_options as _get_options
from ..ops.linalg import linear_args
from ..tensor import Tensor

__all__ = ["relu", "sigmoid", "tanh", "softplus", "softmax", "log_softmax", "linear", "mse_loss", "dropout"]


def relu(input: Tensor, inplace: bool = False) -> Tensor:
    """max(x, 0); ``inplace`` is accepted for compatibility and ignored (buffers are values)."""
    return ops.relu(input)


def sigmoid(input: Tensor) -> Tensor:
    return ops.sigmoid(input)


def tanh(input: Tensor) -> Tensor:
    return ops.tanh(input)


def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """log(1 + exp(beta x)) / beta, evaluated stably (``threshold`` is not needed and ignored)."""
    beta = real_arg("softplus", "beta", beta)
    if beta == 1.0:
        return ops.softplus(input)
    return ops.mul(ops.softplus(ops.mul(input, beta)), 1.0 / beta)


def softmax(input: Tensor, dim: int = -1, dtype: Any = None) -> Tensor:
    """Softmax along ``dim`` (default: the last axis; PyTorch's implicit dim is deprecated)."""
    return ops.softmax(input, dim)


def log_softmax(input: Tensor, dim: int = -1, dtype: Any = None) -> Tensor:
    return ops.log_softmax(input, dim)


def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """input @ weight.T + bias. With ``torchlean.Options.fast_kernels`` on: ``ops.linear_fast`` (the
    bias fused into one GEMM) at ``Options.fast_gpu_matmul_precision``."""
    if not isinstance(input, Tensor) or not isinstance(weight, Tensor) or not (bias is None or isinstance(bias, Tensor)):
        linear_args("linear", input, weight, bias)  # the same error on either path
    opts = _get_options()
    if opts.fast_kernels:
        return ops.linear_fast(input, weight, bias, opts.fast_gpu_matmul_precision)
    return ops.linear(input, weight, bias)


def mse_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    """With ``torchlean.Options.fast_kernels`` on, "mean" and "sum" use ``ops.mse_loss_fast`` (one
    float64 reduction pass, the result rounded once)."""
    if reduction in ("mean", "sum") and _get_options().fast_kernels:
        return ops.mse_loss_fast(input, target, reduction)
    return ops.mse_loss(input, target, reduction)


def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False, generator: Any = None) -> Tensor:
    """Counter-based dropout: the same mask on every device for the same seed."""
    return ops.dropout(input, p, training, generator)


# -- families: each ops module lists its PyTorch-named functions in FUNCTIONAL ----------------------
from ..ops import (attention as _attention, classify as _classify, conv as _conv, norm as _norm,  # noqa: E402
                   pool as _pool, scan as _scan, spectral as _spectral)

for _family in (_conv, _pool, _norm, _classify, _spectral, _scan, _attention):
    for _n in getattr(_family, "FUNCTIONAL", ()):
        globals()[_n] = getattr(_family, _n)
        __all__.append(_n)
del _family
