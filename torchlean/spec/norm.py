"""Float64 specs of the normalization: layer_norm, batch_norm (training and inference) and their backward passes."""

from __future__ import annotations

__all__: list[str] = []
