"""The fast-kernel ``Options`` (seed page Torch.Options): process-global, like the TF32 switch.

They live with the ops because the fast variants (``ops.fast``) read ``use_gpu`` and the front end
(``torchlean.fast_kernels``, ``nn.functional``, ``Tensor.__matmul__``) reads ``fast_kernels`` to route
calls there; ``torchlean.fast_kernels`` documents them and hands them on.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from typing import Any, Iterator, Literal

import numpy as np

from ..errors import ArgumentError

__all__ = ["GpuMatmulPrecision", "PRECISIONS", "Options", "get_options", "set_options", "options", "check_precision",
           "check_bool"]

GpuMatmulPrecision = Literal["fp32", "fp64"]
PRECISIONS = ("fp32", "fp64")


def check_precision(op: str, precision: Any, name: str = "precision") -> str:
    if isinstance(precision, str) and precision in PRECISIONS:
        return precision
    raise ArgumentError(f"{op}: {name} must be 'fp32' or 'fp64', got {precision!r}")


def check_bool(op: str, name: str, value: Any) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise ArgumentError(f"{op}: {name} must be a bool, got {value!r} ({type(value).__name__})")


@dataclass(frozen=True)
class Options:
    """The seed's Torch.Options: fast_kernels (route linear, mse_loss and 2-D matmul to the fused
    variants), use_gpu (where those expect their tensors) and fast_gpu_matmul_precision ("fp32" or
    "fp64")."""

    fast_kernels: bool = False
    use_gpu: bool = False
    fast_gpu_matmul_precision: str = "fp32"

    def __post_init__(self) -> None:
        object.__setattr__(self, "fast_kernels", check_bool("Options", "fast_kernels", self.fast_kernels))
        object.__setattr__(self, "use_gpu", check_bool("Options", "use_gpu", self.use_gpu))
        check_precision("Options", self.fast_gpu_matmul_precision, "fast_gpu_matmul_precision")


# The Options in force; the front end's matmul reads it straight (one dict lookup per call).
state = {"options": Options()}


def get_options() -> Options:
    """The Options in force (process-global)."""
    return state["options"]


def set_options(opts: Options) -> Options:
    """Put ``opts`` in force; returns the previous Options."""
    if not isinstance(opts, Options):
        raise ArgumentError(f"set_options: expected a torchlean.Options, got {type(opts).__name__}")
    prev = state["options"]
    state["options"] = opts
    return prev


@contextlib.contextmanager
def options(opts: Options | None = None, **fields: Any) -> Iterator[Options]:
    """``with options(fast_kernels=True): ...``: ``opts`` (default: the Options in force) with
    ``fields`` replaced, in force for the block; the previous Options come back afterwards, also
    when the block raises."""
    base = get_options() if opts is None else opts
    if not isinstance(base, Options):
        raise ArgumentError(f"options: expected a torchlean.Options, got {type(base).__name__}")
    known = {f.name for f in dataclasses.fields(Options)}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ArgumentError(f"options: unknown field(s) {', '.join(unknown)}; the fields are {', '.join(sorted(known))}")
    new = dataclasses.replace(base, **fields) if fields else base
    prev = set_options(new)
    try:
        yield new
    finally:
        set_options(prev)
