"""Contracts of the pooling: max_pool, avg_pool, smooth_max_pool and their backward passes."""

from __future__ import annotations

from . import _register  # noqa: F401
