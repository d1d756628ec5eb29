"""``torchlean.amp`` (PyTorch's ``torch.amp``): ``autocast`` and ``GradScaler``.

torchlean computes in float32, the one floating dtype it has: there is no float16 or bfloat16
arithmetic to switch to. So ``autocast`` is accepted with PyTorch's arguments and the code inside
it runs in float32, exactly as outside (results equal a float32 PyTorch run, not an autocast one),
and ``GradScaler`` is PyTorch's dynamic loss scaler, which float32 does not need but which keeps
a training loop written for mixed precision working unchanged (see grad_scaler.py).
"""

from .autocast_mode import autocast, is_autocast_available, is_autocast_enabled
from .grad_scaler import GradScaler, OptState

__all__ = ["autocast", "is_autocast_available", "is_autocast_enabled", "GradScaler", "OptState"]
