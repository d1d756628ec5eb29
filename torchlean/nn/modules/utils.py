"""``torch.nn.modules.utils``: ``consume_prefix_in_state_dict_if_present``, which turns the state
dict of a wrapped model (``DistributedDataParallel`` or ``DataParallel``: every key starts with
``module.``) into one the bare model loads."""

from __future__ import annotations

from typing import Any

from ...errors import ArgumentError

__all__ = ["consume_prefix_in_state_dict_if_present"]


def consume_prefix_in_state_dict_if_present(state_dict: Any, prefix: str) -> None:
    """Strip ``prefix`` from the keys of ``state_dict`` that start with it, in place (PyTorch's
    function: keys without the prefix are kept, moved keys go to the end in their order, and an
    ``_metadata`` attribute, when there is one, is renamed the same way)."""
    op = "consume_prefix_in_state_dict_if_present"
    if not isinstance(prefix, str):
        raise ArgumentError(f"{op}: prefix must be a str, got {type(prefix).__name__}")
    if not (hasattr(state_dict, "keys") and hasattr(state_dict, "pop")):
        raise ArgumentError(f"{op}: expected a state dict (a dict of tensors), got {type(state_dict).__name__}")
    for key in list(state_dict.keys()):
        if isinstance(key, str) and key.startswith(prefix):
            state_dict[key[len(prefix):]] = state_dict.pop(key)
    meta = getattr(state_dict, "_metadata", None)
    if meta is not None:
        for key in list(meta.keys()):
            # '' is the wrapper itself; 'module' the wrapped model; 'module.x.y' the rest
            if key and (key == prefix.replace(".", "") or key.startswith(prefix)):
                meta[key[len(prefix):]] = meta.pop(key)
