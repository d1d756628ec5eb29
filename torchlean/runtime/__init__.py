"""Layer 1: ``Buffer``, the primitives, allocator telemetry, determinism and random numbers."""

from . import primitives
from .allocator import AllocatorStats, format_allocator_stats
from .buffer import Buffer, WithWorkspace, full, release_many_then, release_then, zeros
from .determinism import deterministic, deterministic_reductions, set_deterministic_reductions
from .device import canonical_device, cuda_unavailable_reason, get_context
from .precision import allow_tf32, set_allow_tf32
from .primitives import *  # noqa: F401,F403
from .rng import Generator, derive_key, manual_seed, splitmix64
from .telemetry import allocator_stats, collect_allocator, reset_peak_bytes

__all__ = [
    "Buffer", "WithWorkspace", "zeros", "full", "release_then", "release_many_then",
    "AllocatorStats", "allocator_stats", "format_allocator_stats", "collect_allocator",
    "reset_peak_bytes", "set_deterministic_reductions", "deterministic_reductions", "deterministic",
    "canonical_device", "cuda_unavailable_reason", "get_context", "Generator", "manual_seed",
    "splitmix64", "derive_key", "primitives", "allow_tf32", "set_allow_tf32",
] + list(primitives.__all__)
