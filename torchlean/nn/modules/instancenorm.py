"""PyTorch's ``torch.nn.modules.instancenorm``: its classes, from ``torchlean.nn`` (see _reexport.py)."""

from ._reexport import path_module

__all__ = ["InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d"]
__getattr__, __dir__ = path_module(__name__, tuple(__all__))
