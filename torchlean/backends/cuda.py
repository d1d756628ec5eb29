"""``torchlean.backends.cuda``: ``matmul.allow_tf32`` is torchlean's TF32 switch for CUDA matmuls."""

from __future__ import annotations

from typing import Any

from ..errors import ArgumentError
from ..runtime.device import cuda_unavailable_reason
from ..runtime.precision import allow_tf32, set_allow_tf32

__all__ = ["matmul", "is_built", "enable_flash_sdp", "enable_mem_efficient_sdp", "enable_math_sdp",
           "flash_sdp_enabled", "mem_efficient_sdp_enabled", "math_sdp_enabled"]


class _Matmul:
    """``matmul.allow_tf32`` reads and sets the TF32 switch; the reduced-precision reduction
    switches are accepted (torchlean has no float16/bfloat16 GEMMs) and stay False."""

    __slots__ = ()

    @property
    def allow_tf32(self) -> bool:
        return allow_tf32()

    @allow_tf32.setter
    def allow_tf32(self, on: Any) -> None:
        set_allow_tf32(on)

    @property
    def allow_fp16_reduced_precision_reduction(self) -> bool:
        return False

    @allow_fp16_reduced_precision_reduction.setter
    def allow_fp16_reduced_precision_reduction(self, on: Any) -> None:
        pass

    @property
    def allow_bf16_reduced_precision_reduction(self) -> bool:
        return False

    @allow_bf16_reduced_precision_reduction.setter
    def allow_bf16_reduced_precision_reduction(self, on: Any) -> None:
        pass

    def __setattr__(self, name: str, value: Any) -> None:
        if not hasattr(type(self), name):
            raise ArgumentError(f"backends.cuda.matmul: unknown setting {name!r} (torchlean has allow_tf32)")
        object.__setattr__(self, name, value)

    def __repr__(self) -> str:
        return f"<backends.cuda.matmul allow_tf32={allow_tf32()}>"


matmul = _Matmul()


def is_built() -> bool:
    """True where torchlean's CUDA backend can run (CuPy and a GPU present)."""
    return cuda_unavailable_reason() is None


# Scaled-dot-product attention has one fused kernel in torchlean; the switches that pick one of
# PyTorch's several are accepted, and every one reads as enabled.
_sdp = {"flash": True, "mem_efficient": True, "math": True}


def enable_flash_sdp(enabled: bool) -> None:
    _sdp["flash"] = bool(enabled)


def enable_mem_efficient_sdp(enabled: bool) -> None:
    _sdp["mem_efficient"] = bool(enabled)


def enable_math_sdp(enabled: bool) -> None:
    _sdp["math"] = bool(enabled)


def flash_sdp_enabled() -> bool:
    return _sdp["flash"]


def mem_efficient_sdp_enabled() -> bool:
    return _sdp["mem_efficient"]


def math_sdp_enabled() -> bool:
    return _sdp["math"]
