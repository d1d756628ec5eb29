"""Primitives of the pooling: max_pool, avg_pool, smooth_max_pool and their backward passes (checked, then dispatched like those in ``primitives``)."""

from __future__ import annotations

__all__: list[str] = []
