"""``torchlean.nn.utils``: ``clip_grad_norm_`` (PyTorch's name and semantics)."""

from .clip_grad import NonFiniteNormError, clip_grad_norm_

__all__ = ["clip_grad_norm_", "NonFiniteNormError"]
