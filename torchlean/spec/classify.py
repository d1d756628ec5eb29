"""Float64 specs of the classification: cross_entropy_rows, gelu, gelu_tanh and their backward passes."""

from __future__ import annotations

__all__: list[str] = []
