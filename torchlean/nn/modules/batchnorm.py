"""PyTorch's ``torch.nn.modules.batchnorm``: its classes, from ``torchlean.nn`` (see _reexport.py)."""

from ._reexport import path_module
from .normalization import BatchNormBase as _BatchNorm  # noqa: F401  (PyTorch's base class, for isinstance)

__all__ = ["BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm", "LazyBatchNorm1d", "LazyBatchNorm2d", "LazyBatchNorm3d"]
__getattr__, __dir__ = path_module(__name__, tuple(__all__))
