"""Primitives of the classification: cross_entropy_rows, gelu, gelu_tanh and their backward passes (checked, then dispatched like those in ``primitives``)."""

from __future__ import annotations

__all__: list[str] = []
