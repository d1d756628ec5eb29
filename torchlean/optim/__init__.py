"""``torchlean.optim``: PyTorch's optimizers and schedulers over torchlean tensors.

``SGD``, ``Adam``, ``AdamW`` (one fused step kernel per parameter: the ``sgd_step`` and
``adam_step`` primitives), the ``Optimizer`` base class with PyTorch's param groups and state
dicts (a torch optimizer's state dict loads), and ``lr_scheduler.StepLR`` /
``lr_scheduler.CosineAnnealingLR``.
"""

from . import lr_scheduler
from .adam import Adam, AdamW
from .optimizer import Optimizer
from .sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "lr_scheduler"]
