"""``torchlean.nn``: the functional API for now (modules arrive with the models issue)."""

from . import functional

__all__ = ["functional"]
