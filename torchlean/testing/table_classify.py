"""Primitive-table entries of the classification: cross_entropy_rows, gelu, gelu_tanh and their backward passes."""

from __future__ import annotations

from .primitive_table import PrimitiveInfo, _add  # noqa: F401
