"""Primitive-table entries of the pooling: max_pool, avg_pool, smooth_max_pool and their backward passes."""

from __future__ import annotations

from .primitive_table import PrimitiveInfo, _add  # noqa: F401
