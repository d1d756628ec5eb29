"""``Parameter``: a leaf float32 tensor that a ``Module`` registers as one of its parameters."""

from __future__ import annotations

from typing import Any

from ..complex_tensor import ComplexTensor
from ..errors import DTypeError
from ..tensor import Tensor, tensor

__all__ = ["Parameter", "ComplexParameter"]


class Parameter(Tensor):
    """A tensor that requires grad by default and that ``Module.__setattr__`` registers.

    ``Parameter(t)`` shares ``t``'s buffer (as ``torch.nn.Parameter`` shares storage); in-place
    updates (optimizer steps under ``no_grad``) rebind the parameter's buffer, never ``t``'s.
    """

    __slots__ = ()

    def __new__(cls, data: Any = None, requires_grad: bool = True) -> Any:
        if isinstance(data, ComplexTensor):  # nn.Parameter(torch.rand(..., dtype=torch.cfloat))
            return ComplexParameter.of(data, requires_grad)
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


class ComplexParameter(ComplexTensor):
    """A complex64 parameter (``nn.Parameter(z)`` for a complex z): a complex tensor whose real view
    is a float32 ``Parameter`` (a leaf sharing z's buffer). ``Module`` registers it; optimizers
    step its real view elementwise, which is what PyTorch's optimizers do for complex parameters
    (they step ``view_as_real(p)``), and the real view's gradient is PyTorch's complex gradient."""

    __slots__ = ()

    @classmethod
    def of(cls, z: ComplexTensor, requires_grad: bool = True) -> "ComplexParameter":
        p = object.__new__(cls)
        p._r = Parameter(z.real_view(), requires_grad)
        return p

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()

    def __reduce_ex__(self, protocol: Any) -> Any:
        return (ComplexParameter.of, (ComplexTensor.from_real_view(self._r.detach()), self.requires_grad))
