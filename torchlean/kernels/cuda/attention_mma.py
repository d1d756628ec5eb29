"""Tensor-core flash attention kernels (attention_mma.cu, attention_mma_tf32.cu): which devices run
them, and their handles.

attention.py launches them (and attention.cu's float32 kernels for the items they flag); this module
only names them, so that the kernel-name checks see which file each launch reads.
"""

from __future__ import annotations

import cupy

from ..caches import memo
from . import attention_mma_tf32
from .launch import kernel

__all__ = ["available", "mma_kernel"]

_FILE = "attention_mma.cu"


@memo("cuda.attention_mma", 64)
def _available(device: int) -> bool:
    return int(cupy.cuda.Device(device).compute_capability) >= 80  # mma.sync .tf32 and cp.async: sm_80


def available() -> bool:
    """True when the current device has TF32 tensor cores (compute capability 8.0 or later)."""
    return _available(cupy.cuda.runtime.getDevice())


def mma_kernel(kind: str, dp: int, tf32: bool):
    """tl_flash_attention_mma_{fwd,dq,dkv}_d{dp}, or its one-product twin (attention_mma_tf32.cu)."""
    if tf32:
        return attention_mma_tf32.mma_kernel(kind, dp)
    return kernel(_FILE, f"tl_flash_attention_mma_{kind}_d{dp}")
