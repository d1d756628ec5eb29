"""Primitives of the convolution: conv, conv_bwd_input, conv_bwd_weight, conv_transpose (checked, then dispatched like those in ``primitives``)."""

from __future__ import annotations

__all__: list[str] = []
