"""Contracts of the normalization: layer_norm, batch_norm (training and inference) and their backward passes."""

from __future__ import annotations

from . import _register  # noqa: F401
