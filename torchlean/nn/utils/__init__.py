"""``torchlean.nn.utils``: ``clip_grad_norm_`` and ``rnn.pad_sequence`` (PyTorch's names and semantics)."""

from . import rnn
from .clip_grad import NonFiniteNormError, clip_grad_norm_

__all__ = ["clip_grad_norm_", "NonFiniteNormError", "rnn"]
