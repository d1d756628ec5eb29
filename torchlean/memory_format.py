"""PyTorch's memory formats (``torch.channels_last`` ...), accepted wherever PyTorch takes one.

Every torchlean tensor is stored row-major and contiguous, so a memory format is a layout hint
with nothing to do: ``x.to(memory_format=torch.channels_last)``, ``model.to(memory_format=...)``
and ``x.contiguous(memory_format=...)`` keep the values and the storage as they are.
"""

from __future__ import annotations

from .errors import ArgumentError

__all__ = ["memory_format", "contiguous_format", "channels_last", "channels_last_3d", "preserve_format",
           "check_memory_format"]


class memory_format:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"torchlean.{self.name}"


contiguous_format = memory_format("contiguous_format")
channels_last = memory_format("channels_last")
channels_last_3d = memory_format("channels_last_3d")
preserve_format = memory_format("preserve_format")


def check_memory_format(op: str, value: object) -> None:
    """None or one of the formats above; anything else is an ArgumentError naming ``op``."""
    if value is not None and not isinstance(value, memory_format):
        raise ArgumentError(f"{op}: memory_format must be a torchlean memory format (torchlean.channels_last, "
                            f"...), got {value!r}")
