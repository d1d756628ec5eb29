"""``torchlean.nn.utils``: gradient clipping, parameter vectors, weight/spectral norm and
``rnn.pad_sequence`` (PyTorch's names and semantics)."""

from . import rnn
from .clip_grad import NonFiniteNormError, clip_grad_norm_
from .params import clip_grad_value_, parameters_to_vector, vector_to_parameters
from .reparam import remove_spectral_norm, remove_weight_norm, spectral_norm, weight_norm

__all__ = ["clip_grad_norm_", "NonFiniteNormError", "rnn", "clip_grad_value_", "parameters_to_vector",
           "vector_to_parameters", "weight_norm", "remove_weight_norm", "spectral_norm", "remove_spectral_norm"]
