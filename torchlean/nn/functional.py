"""``torchlean.nn.functional``: PyTorch names and signatures over the differentiable ops."""

from __future__ import annotations

from ..ops import dropout, linear, log_softmax, mse_loss, relu, sigmoid, softmax, softplus, tanh

__all__ = ["relu", "sigmoid", "tanh", "softplus", "softmax", "log_softmax", "linear", "mse_loss", "dropout"]
