"""``Parameter``: a leaf float32 tensor that a ``Module`` registers as one of its parameters."""

from __future__ import annotations

from typing import Any

from ..errors import DTypeError
from ..tensor import Tensor, tensor

__all__ = ["Parameter"]


class Parameter(Tensor):
    """A tensor that requires grad by default and that ``Module.__setattr__`` registers.

    ``Parameter(t)`` shares ``t``'s buffer (as ``torch.nn.Parameter`` shares storage); in-place
    updates (optimizer steps under ``no_grad``) rebind the parameter's buffer, never ``t``'s.
    """

    __slots__ = ()

    def __new__(cls, data: Any = None, requires_grad: bool = True) -> "Parameter":
        if data is None:
            data = tensor([])
        elif not isinstance(data, Tensor):
            data = tensor(data, dtype="float32")
        if data._buf is None:
            raise DTypeError(f"Parameter: expected a float32 tensor, got an {data.dtype} tensor")
        p = cls._blank(data._buf, None, data.shape, data.device)
        p.requires_grad = bool(requires_grad)
        return p

    def __init__(self, data: Any = None, requires_grad: bool = True) -> None:  # Tensor.__init__ refuses
        pass

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()

    def __reduce_ex__(self, protocol: Any) -> Any:
        return (Parameter, (Tensor._wrap(self._buf, self._shape), self.requires_grad))
