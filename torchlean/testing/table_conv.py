"""Primitive-table entries of the convolution: conv, conv_bwd_input, conv_bwd_weight, conv_transpose."""

from __future__ import annotations

from .primitive_table import PrimitiveInfo, _add  # noqa: F401
