"""PyTorch's ``torch.nn.modules.dropout``: its classes, from ``torchlean.nn`` (see _reexport.py)."""

from ._reexport import path_module

__all__ = ["Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "FeatureAlphaDropout"]
__getattr__, __dir__ = path_module(__name__, tuple(__all__))
