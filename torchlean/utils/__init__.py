"""PyTorch's ``torch.utils`` namespace: ``torchlean.utils.data`` (datasets, samplers, DataLoader) and
``torchlean.utils.checkpoint``."""

from . import checkpoint, data

__all__ = ["checkpoint", "data"]
