"""Float64 specs of the pooling: max_pool, avg_pool, smooth_max_pool and their backward passes."""

from __future__ import annotations

__all__: list[str] = []
