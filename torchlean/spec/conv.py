"""Float64 specs of the convolution: conv, conv_bwd_input, conv_bwd_weight, conv_transpose."""

from __future__ import annotations

__all__: list[str] = []
