"""``torchlean.nn.functional``: PyTorch names and signatures over the differentiable ops."""

from __future__ import annotations

from typing import Any

from .. import ops
from ..fast_kernels import get_options as _get_options
from ..ops.linalg import linear_args
from ..tensor import Tensor

__all__ = ["relu", "sigmoid", "tanh", "linear", "mse_loss", "dropout"]


def relu(input: Tensor, inplace: bool = False) -> Tensor:
    """max(x, 0); ``inplace`` is accepted for compatibility and ignored (buffers are values)."""
    return ops.relu(input)


def sigmoid(input: Tensor) -> Tensor:
    return ops.sigmoid(input)


def tanh(input: Tensor) -> Tensor:
    return ops.tanh(input)


def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """input @ weight.T + bias. With ``torchlean.Options.fast_kernels`` on: ``ops.linear_fast`` (the
    bias fused into one GEMM) at ``Options.fast_gpu_matmul_precision``."""
    if not isinstance(input, Tensor) or not isinstance(weight, Tensor) or not (bias is None or isinstance(bias, Tensor)):
        linear_args("linear", input, weight, bias)  # the same error on either path
    opts = _get_options()
    if opts.fast_kernels:
        return ops.linear_fast(input, weight, bias, opts.fast_gpu_matmul_precision)
    return ops.linear(input, weight, bias)


def mse_loss(input: Tensor, target: Tensor, size_average: Any = None, reduce: Any = None,
             reduction: str = "mean") -> Tensor:
    """With ``torchlean.Options.fast_kernels`` on, "mean" and "sum" use ``ops.mse_loss_fast`` (one
    float64 reduction pass, the result rounded once)."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
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

# -- compositions over the ops (nn/_activations.py, _losses.py, _norms.py, _spatial.py); these come
# after the families: cross_entropy / nll_loss here add weight= and the legacy flags around the
# fused ops, and scaled_dot_product_attention adds dropout_p -----------------------------------
from . import _activations, _losses, _more, _norms, _spatial  # noqa: E402
from ._losses import legacy_reduction as _legacy_reduction  # noqa: E402

for _family in (_activations, _losses, _norms, _spatial, _more):
    for _n in _family.__all__:
        if _n in ("legacy_reduction", "softmax_dim", "feature_dropout", "sdpa_with_dropout"):
            continue
        globals()[_n] = getattr(_family, _n)
        if _n not in __all__:
            __all__.append(_n)
del _family

_fused_sdpa = _attention.scaled_dot_product_attention
_seed_layer_norm = _norm.layer_norm


def layer_norm(input: Tensor, normalized_shape: Any, weight: Tensor | None = None, bias: Tensor | None = None,
               eps: float = 1e-5) -> Tensor:
    """PyTorch's ``F.layer_norm``, default ``eps`` 1e-5 included (``torchlean.ops.layer_norm``, the
    seed's, defaults to 1e-6)."""
    return _seed_layer_norm(input, normalized_shape, weight, bias, eps)


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: Any = None,
                                 dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False) -> Tensor:
    """The fused attention (ops.attention) when ``dropout_p`` is 0; with dropout, PyTorch's math
    path composed from matmul, softmax and dropout (the mask drawn from torchlean's counter RNG)."""
    try:
        dp = float(dropout_p)
    except (TypeError, ValueError):
        dp = None
    if dp is None or dp == 0.0 or enable_gqa or (attn_mask is not None and is_causal):
        return _fused_sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    if not 0.0 < dp <= 1.0:
        from ..errors import ArgumentError

        raise ArgumentError(f"scaled_dot_product_attention: dropout_p must be in [0, 1], got {dropout_p!r}")
    return _norms.sdpa_with_dropout(query, key, value, attn_mask, dp, bool(is_causal), scale)


def feature_alpha_dropout(input: Tensor, p: float = 0.5, training: bool = False, inplace: bool = False) -> Tensor:
    from ..errors import ArgumentError

    raise ArgumentError("feature_alpha_dropout: not supported (use alpha_dropout or dropout2d)")


__all__.append("feature_alpha_dropout")
