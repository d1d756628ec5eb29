"""The TF32 twins of the tensor-core attention kernels (attention_mma_tf32.cu: one TF32 product per
product, for ``set_allow_tf32(True)``), a file of their own so that it compiles in parallel with
attention_mma.cu. attention_mma.mma_kernel hands out these handles."""

from __future__ import annotations

from .launch import kernel

__all__ = ["mma_kernel"]

_FILE = "attention_mma_tf32.cu"


def mma_kernel(kind: str, dp: int):
    """tl_flash_attention_mma_{fwd,dq,dkv}_d{dp}_tf32."""
    return kernel(_FILE, f"tl_flash_attention_mma_{kind}_d{dp}_tf32")
