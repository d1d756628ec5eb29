"""The TF32 switch for CUDA matrix products (off by default).

With TF32 on, cuBLAS may round matmul inputs to 10-bit mantissas on tensor cores: several times
faster on Hopper, but far outside bmm's float32 contract; the CUDA attention kernels then take one
TF32 product where they otherwise take three (3xTF32, float32 accuracy), under the attention
contract's own TF32 bounds (``tf32=True``). So it is off unless the user asks,
through ``set_allow_tf32(True)`` or ``TORCHLEAN_ALLOW_TF32=1`` in the environment; the CPU
backend ignores it.
"""

from __future__ import annotations

import os

import numpy as np

from ..errors import ArgumentError
from ..kernels import flags
from ..kernels.flags import allow_tf32  # noqa: F401  (the reader, shared with the CUDA matmuls)

ENV_VAR = "TORCHLEAN_ALLOW_TF32"
flags.set_flag("allow_tf32", os.environ.get(ENV_VAR, "").strip() not in ("", "0"))


def set_allow_tf32(on: bool) -> bool:
    """Allow (or forbid) TF32 tensor-core math in CUDA matmuls; returns the value in force."""
    if not isinstance(on, (bool, int, np.bool_)):
        raise ArgumentError(f"set_allow_tf32: expected a bool, got {on!r}")
    return flags.set_flag("allow_tf32", bool(on))
