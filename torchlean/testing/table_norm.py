"""Primitive-table entries of the normalization: layer_norm, batch_norm (training and inference) and their backward passes."""

from __future__ import annotations

from .primitive_table import PrimitiveInfo, _add  # noqa: F401
