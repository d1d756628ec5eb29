"""Activation modules (PyTorch names, arguments and reprs) and the dropout modules."""

from __future__ import annotations

from typing import Any

from ..._validate import int_arg, real_arg
from ...errors import ArgumentError
from ...tensor import Tensor, full
from .. import functional as F
from ..parameter import Parameter
from .linear import device_dtype
from .module import Module

__all__ = ["ReLU", "GELU", "Tanh", "Sigmoid", "Softmax", "Dropout", "SiLU", "LeakyReLU", "ELU", "SELU", "CELU",
           "Softplus", "LogSoftmax", "Softmin", "Mish", "Hardswish", "Hardsigmoid", "Hardtanh", "ReLU6", "Softsign",
           "Tanhshrink", "PReLU", "GLU", "LogSigmoid", "Threshold", "Hardshrink", "Softshrink", "Dropout1d",
           "Dropout2d", "Dropout3d", "AlphaDropout", "Softmax2d"]


class ReLU(Module):
    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(x)

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class GELU(Module):
    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ArgumentError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return F.gelu(x, approximate=self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class Tanh(Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.tanh(x)


class Sigmoid(Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.sigmoid(x)


class Softmax(Module):
    """Softmax along ``dim``; None picks PyTorch's implicit dim from the input's rank."""

    _fn = "softmax"

    def __init__(self, dim: int | None = None) -> None:
        super().__init__()
        self.dim = None if dim is None else int_arg(type(self).__name__, "dim", dim)

    def forward(self, x: Tensor) -> Tensor:
        return getattr(F, self._fn)(x, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(Softmax):
    _fn = "log_softmax"


class Softmin(Softmax):
    _fn = "softmin"


class Dropout(Module):
    """Counter-based dropout (identity in eval mode): the same mask on every device for a seed."""

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        self.p = real_arg(type(self).__name__, "p", p, 0.0, 1.0)
        self.inplace = inplace

    def forward(self, x: Tensor, generator: Any = None) -> Tensor:
        return F.dropout(x, self.p, self.training, generator=generator)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


class Dropout1d(Dropout):
    """Zeroes whole channels of (N, C, L) or (C, L) inputs (one draw per channel)."""

    def forward(self, x: Tensor) -> Tensor:
        return F.dropout1d(x, self.p, self.training)


class Dropout2d(Dropout):
    """Zeroes whole channels of (N, C, H, W) inputs (one draw per channel)."""

    def forward(self, x: Tensor) -> Tensor:
        return F.dropout2d(x, self.p, self.training)


class Dropout3d(Dropout):
    def forward(self, x: Tensor) -> Tensor:
        return F.dropout3d(x, self.p, self.training)


class AlphaDropout(Dropout):
    def forward(self, x: Tensor) -> Tensor:
        return F.alpha_dropout(x, self.p, self.training)


# -- pointwise activations: (functional name, constructor arguments) -------------------------------
class _Pointwise(Module):
    _fn = ""

    def forward(self, x: Tensor) -> Tensor:
        return getattr(F, self._fn)(x)


class _InplaceFlag(_Pointwise):
    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class SiLU(_InplaceFlag):
    _fn = "silu"


class Mish(_InplaceFlag):
    _fn = "mish"


class Hardswish(_InplaceFlag):
    _fn = "hardswish"


class Hardsigmoid(_InplaceFlag):
    _fn = "hardsigmoid"


class SELU(_InplaceFlag):
    _fn = "selu"


class Softsign(_Pointwise):
    _fn = "softsign"


class Tanhshrink(_Pointwise):
    _fn = "tanhshrink"


class LogSigmoid(_Pointwise):
    _fn = "logsigmoid"


class LeakyReLU(Module):
    def __init__(self, negative_slope: float = 0.01, inplace: bool = False) -> None:
        super().__init__()
        self.negative_slope = real_arg("LeakyReLU", "negative_slope", negative_slope)
        self.inplace = inplace

    def forward(self, x: Tensor) -> Tensor:
        return F.leaky_relu(x, self.negative_slope)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}" + (", inplace=True" if self.inplace else "")


class ELU(Module):
    _fn = "elu"

    def __init__(self, alpha: float = 1.0, inplace: bool = False) -> None:
        super().__init__()
        self.alpha = real_arg(type(self).__name__, "alpha", alpha)
        self.inplace = inplace

    def forward(self, x: Tensor) -> Tensor:
        return getattr(F, self._fn)(x, self.alpha)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}" + (", inplace=True" if self.inplace else "")


class CELU(ELU):
    _fn = "celu"


class Softplus(Module):
    def __init__(self, beta: float = 1.0, threshold: float = 20.0) -> None:
        super().__init__()
        self.beta = real_arg("Softplus", "beta", beta)
        self.threshold = real_arg("Softplus", "threshold", threshold)

    def forward(self, x: Tensor) -> Tensor:
        return F.softplus(x, self.beta, self.threshold)

    def extra_repr(self) -> str:
        return f"beta={self.beta}, threshold={self.threshold}"


class Hardtanh(Module):
    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> None:
        super().__init__()
        self.min_val = real_arg(type(self).__name__, "min_val", min_val)
        self.max_val = real_arg(type(self).__name__, "max_val", max_val)
        if self.min_val > self.max_val:
            raise ArgumentError(f"{type(self).__name__}: min_val ({min_val}) must not exceed max_val ({max_val})")
        self.inplace = inplace

    def forward(self, x: Tensor) -> Tensor:
        return F.hardtanh(x, self.min_val, self.max_val)

    def extra_repr(self) -> str:
        return f"min_val={self.min_val}, max_val={self.max_val}" + (", inplace=True" if self.inplace else "")


class ReLU6(Hardtanh):
    def __init__(self, inplace: bool = False) -> None:
        super().__init__(0.0, 6.0, inplace)

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class PReLU(Module):
    """relu(x) + a * min(x, 0) with a learned ``a`` (one, or one per channel), initialized to ``init``."""

    def __init__(self, num_parameters: int = 1, init: float = 0.25, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        device = device_dtype("PReLU", device, dtype)
        self.num_parameters = int_arg("PReLU", "num_parameters", num_parameters, 1)
        self.init = real_arg("PReLU", "init", init)
        self.weight = Parameter(full((self.num_parameters,), self.init, device=device))

    def forward(self, x: Tensor) -> Tensor:
        return F.prelu(x, self.weight)

    def extra_repr(self) -> str:
        return f"num_parameters={self.num_parameters}"


class GLU(Module):
    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self.dim = int_arg("GLU", "dim", dim)

    def forward(self, x: Tensor) -> Tensor:
        return F.glu(x, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class Threshold(Module):
    def __init__(self, threshold: float, value: float, inplace: bool = False) -> None:
        super().__init__()
        self.threshold, self.value, self.inplace = threshold, value, inplace

    def forward(self, x: Tensor) -> Tensor:
        return F.threshold(x, self.threshold, self.value)

    def extra_repr(self) -> str:
        return f"threshold={self.threshold}, value={self.value}" + (", inplace=True" if self.inplace else "")


class Hardshrink(Module):
    _fn = "hardshrink"

    def __init__(self, lambd: float = 0.5) -> None:
        super().__init__()
        self.lambd = lambd

    def forward(self, x: Tensor) -> Tensor:
        return getattr(F, self._fn)(x, self.lambd)

    def extra_repr(self) -> str:
        return f"{self.lambd}"


class Softshrink(Hardshrink):
    _fn = "softshrink"


class Softmax2d(Module):
    """Softmax over the channels of a (N, C, H, W) or (C, H, W) input."""

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim not in (3, 4):
            raise ArgumentError(f"Softmax2d: expected a 3-D or 4-D input, got shape {x.shape}")
        return F.softmax(x, -3)
