"""PyTorch interop: state dicts both ways (``torch`` is imported only when these are called).

``state_dict_from_torch(sd)`` turns a PyTorch state dict (or a ``torch.nn.Module``) into a dict of
torchlean tensors with the same keys, in the same order: floating tensors become float32 tensors
(float64/float16/bfloat16 values are rounded to float32), integer tensors int64 and bool tensors
bool host tensors (so ``num_batches_tracked`` stays an integer). ``state_dict_to_torch(sd)`` is
the inverse: float32, int64 and bool ``torch.Tensor``s on the CPU (or ``device``). Both copy the
values, so later training on either side does not change the other (for zero-copy exchange of
single tensors use DLPack: ``torchlean.from_dlpack`` / ``torch.from_dlpack``).

Parameter names, shapes and layouts of torchlean's modules follow PyTorch's, so
``model.load_state_dict(state_dict_from_torch(torch_model.state_dict()))`` loads a PyTorch model
of the same architecture, and ``torch_model.load_state_dict(state_dict_to_torch(model))`` the
other way.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import DTypeError
from .tensor import Tensor, tensor

__all__ = ["state_dict_from_torch", "state_dict_to_torch", "as_host_array"]


def as_host_array(what: str, value: Any) -> np.ndarray:
    """A state-dict value as a host NumPy array: torchlean tensors, NumPy arrays or PyTorch tensors
    (no torch import). ``what`` names the entry in the DTypeError raised for anything else,
    including non-real dtypes."""
    if isinstance(value, Tensor):
        return value.numpy()
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch.Tensor
        value = value.detach().cpu().numpy()
    try:
        arr = np.asarray(value)
    except Exception as exc:  # noqa: BLE001
        raise DTypeError(f"{what} is a {type(value).__name__}, not an array ({exc})") from None
    if arr.dtype.kind not in "biuf":
        raise DTypeError(f"{what} has dtype {arr.dtype}, expected real numbers")
    return arr


def _items(op: str, sd: Any) -> Any:
    if hasattr(sd, "state_dict") and callable(sd.state_dict):
        sd = sd.state_dict()
    if not hasattr(sd, "items"):
        raise DTypeError(f"{op}: expected a state dict (a mapping of names to tensors) or a module, "
                         f"got {type(sd).__name__}")
    return sd.items()


def state_dict_from_torch(sd: Any, device: Any = None) -> dict[str, Tensor]:
    """A PyTorch state dict (or module) as ``{name: torchlean.Tensor}`` (copies; see the module doc).

    Floating entries become float32 tensors on ``device`` (default CPU), integer entries int64
    and bool entries bool tensors. NumPy arrays are accepted as values too. Complex or other
    non-numeric entries raise DTypeError naming the key.
    """
    op = "state_dict_from_torch"
    out: dict[str, Tensor] = {}
    for k, v in _items(op, sd):
        if isinstance(v, Tensor):
            arr = v.numpy()
        elif hasattr(v, "detach") and hasattr(v, "cpu"):  # a torch.Tensor
            import torch

            v = v.detach()
            if v.is_complex():
                raise DTypeError(f"{op}: entry {k!r} is complex ({v.dtype}); torchlean is real float32 only")
            if v.dtype.is_floating_point and v.dtype != torch.float32:
                v = v.float()  # bfloat16/float16/float64: numpy may not know the type; round to float32
            arr = v.cpu().contiguous().numpy()
        elif isinstance(v, np.ndarray):
            arr = v
        else:
            raise DTypeError(f"{op}: entry {k!r} is a {type(v).__name__}, not a tensor")
        kind = arr.dtype.kind
        if kind == "f":
            out[k] = tensor(arr.astype(np.float32, copy=False), device=device)
        elif kind in "iu":
            out[k] = tensor(arr.astype(np.int64), dtype="int64", device=device)
        elif kind == "b":
            out[k] = tensor(arr, dtype="bool", device=device)
        else:
            raise DTypeError(f"{op}: entry {k!r} has dtype {arr.dtype}; expected real or integer numbers")
    return out


def state_dict_to_torch(sd: Any, device: Any = None) -> dict[str, Any]:
    """A torchlean state dict (or module) as ``{name: torch.Tensor}`` (fresh copies, on ``device``).

    float32 tensors become ``torch.float32``, int64 ``torch.int64`` and bool ``torch.bool``
    (``num_batches_tracked`` stays an integer), ready for ``torch_module.load_state_dict``.
    """
    import torch

    op = "state_dict_to_torch"
    out: dict[str, Any] = {}
    for k, v in _items(op, sd):
        if isinstance(v, Tensor):
            arr = v.numpy()  # a fresh host copy
        elif isinstance(v, np.ndarray):
            arr = np.array(v)
        else:
            raise DTypeError(f"{op}: entry {k!r} is a {type(v).__name__}, not a torchlean tensor")
        if arr.dtype.kind == "f":
            arr = arr.astype(np.float32, copy=False)
        elif arr.dtype.kind in "iu":
            arr = arr.astype(np.int64, copy=False)
        elif arr.dtype.kind != "b":
            raise DTypeError(f"{op}: entry {k!r} has dtype {arr.dtype}; expected float32, int64 or bool")
        t = torch.from_numpy(np.ascontiguousarray(arr).reshape(arr.shape))
        out[k] = t.to(device) if device is not None else t
    return out
