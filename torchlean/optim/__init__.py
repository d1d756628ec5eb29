"""``torchlean.optim``: PyTorch's optimizers and schedulers over torchlean tensors.

``SGD``, ``Adam``, ``AdamW`` (fused steps, one call per group: the ``sgd_step_many`` and
``adam_step_many`` primitives); ``RMSprop``, ``Adagrad``, ``Adadelta``, ``Adamax``, ``NAdam``,
``RAdam``, ``Rprop``, ``ASGD`` (PyTorch's single-tensor formulas, a few element-wise primitives
per parameter) and ``LBFGS``; the ``Optimizer`` base class with PyTorch's param groups and state
dicts (a torch optimizer's state dict loads), and the schedulers of ``lr_scheduler``.
"""

from . import lr_scheduler
from .adadelta import Adadelta
from .adagrad import Adagrad
from .adam import Adam, AdamW
from .adamax import Adamax
from .asgd import ASGD
from .lbfgs import LBFGS
from .nadam import NAdam
from .optimizer import Optimizer
from .radam import RAdam
from .rmsprop import RMSprop
from .rprop import Rprop
from .sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax", "NAdam", "RAdam",
           "Rprop", "ASGD", "LBFGS", "lr_scheduler"]


_MISSING = {"SparseAdam": "not implemented yet; the optimizers are SGD, Adam, AdamW, RMSprop, Adagrad, Adadelta, "
                          "Adamax, NAdam, RAdam, Rprop, ASGD and LBFGS"}


def __getattr__(name: str):
    from ..errors import missing_name

    raise missing_name("torchlean.optim", name, _MISSING)
