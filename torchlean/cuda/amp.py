"""``torchlean.cuda.amp`` (PyTorch's deprecated spelling of ``torch.amp`` with device "cuda")."""

from __future__ import annotations

from typing import Any

from ..amp import GradScaler as _AmpGradScaler
from ..amp import autocast as _amp_autocast

__all__ = ["autocast", "GradScaler"]


class autocast(_amp_autocast):
    """``torch.cuda.amp.autocast(enabled=True, dtype=torch.float16, cache_enabled=True)``: accepted,
    and the code inside runs in float32 (see ``torchlean.amp``)."""

    def __init__(self, enabled: bool = True, dtype: Any = "float16", cache_enabled: bool = True) -> None:
        super().__init__("cuda", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


class GradScaler(_AmpGradScaler):
    """``torch.cuda.amp.GradScaler(...)``: ``torchlean.amp.GradScaler("cuda", ...)``."""

    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True) -> None:
        super().__init__("cuda", init_scale, growth_factor, backoff_factor, growth_interval, enabled)
