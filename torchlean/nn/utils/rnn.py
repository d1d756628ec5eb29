"""``torch.nn.utils.rnn``: ``pad_sequence`` and ``unpad_sequence``. PackedSequence is not supported:
``pack_padded_sequence``, ``pack_sequence`` and ``pad_packed_sequence`` raise an ArgumentError
saying so (our recurrent layers run padded batches; pass the padded tensor and mask the loss)."""

from __future__ import annotations

from typing import Any, Sequence

from ... import ops
from ...errors import ArgumentError, ShapeError
from ...tensor import Tensor, full

__all__ = ["pad_sequence", "unpad_sequence", "pack_padded_sequence", "pack_sequence", "pad_packed_sequence",
           "PackedSequence"]


def pad_sequence(sequences: Sequence[Tensor], batch_first: bool = False, padding_value: float = 0.0,
                 padding_side: str = "right") -> Tensor:
    """Stack tensors of shapes (L_i, *) into (L_max, B, *) (or (B, L_max, *) with batch_first),
    padding each with ``padding_value`` on ``padding_side``; dtypes and gradients carry through."""
    op = "pad_sequence"
    if isinstance(sequences, Tensor):
        sequences = list(sequences.unbind(0)) if sequences.dim() else [sequences]
    seqs = list(sequences)
    if not seqs:
        raise ArgumentError(f"{op}: received an empty list of sequences")
    if padding_side not in ("right", "left"):
        raise ArgumentError(f"{op}: padding_side must be 'left' or 'right', got {padding_side!r}")
    for i, s in enumerate(seqs):
        if not isinstance(s, Tensor):
            raise ArgumentError(f"{op}: sequences[{i}] must be a Tensor, got {type(s).__name__}")
        if s.dim() == 0:
            raise ShapeError(f"{op}: sequences[{i}] is 0-d; expected (L, *)")
    trailing = tuple(seqs[0].shape[1:])
    for i, s in enumerate(seqs):
        if tuple(s.shape[1:]) != trailing:
            raise ShapeError(f"{op}: sequences[{i}] has trailing shape {tuple(s.shape[1:])}, "
                             f"sequences[0] has {trailing}")
    longest = max(s.shape[0] for s in seqs)
    padded = []
    for s in seqs:
        gap = longest - s.shape[0]
        if gap:
            fill = full((gap,) + trailing, padding_value, dtype=s.dtype, device=s.device)
            s = ops.cat([s, fill] if padding_side == "right" else [fill, s], 0)
        padded.append(s)
    out = ops.cat([p.unsqueeze(0) for p in padded], 0)  # (B, L_max, *)
    return out if batch_first else out.transpose(0, 1)


def unpad_sequence(padded_sequences: Tensor, lengths: Any, batch_first: bool = False) -> list[Tensor]:
    """The inverse of ``pad_sequence`` (right padding): a list of (L_i, *) tensors."""
    x = padded_sequences if batch_first else padded_sequences.transpose(0, 1)
    lens = [int(v) for v in (lengths.tolist() if isinstance(lengths, Tensor) else lengths)]
    if len(lens) != x.shape[0]:
        raise ShapeError(f"unpad_sequence: {len(lens)} lengths for a batch of {x.shape[0]}")
    return [x[i, :n] for i, n in enumerate(lens)]


def _unsupported(name: str):
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise ArgumentError(f"{name}: PackedSequence is not supported by torchlean; pass the padded batch "
                            f"(pad_sequence) to the recurrent layer and mask the padded steps in the loss")

    refuse.__name__ = refuse.__qualname__ = name
    return refuse


pack_padded_sequence = _unsupported("pack_padded_sequence")
pack_sequence = _unsupported("pack_sequence")
pad_packed_sequence = _unsupported("pad_packed_sequence")


class PackedSequence:
    """Not supported (see the module docstring); constructing one raises."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _unsupported("PackedSequence")()
