"""Contracts of the convolution: conv, conv_bwd_input, conv_bwd_weight, conv_transpose."""

from __future__ import annotations

from . import _register  # noqa: F401
