"""``torchlean.nn.init``: PyTorch's initializers, drawn from torchlean's counter-based generator.

Every function fills its tensor in place (under ``no_grad``) and returns it, as in PyTorch; the
draws come from ``generator`` (default: the global one that ``torchlean.manual_seed`` seeds), so
the same seed gives the same bits on every device. Fan-in/fan-out and gains follow PyTorch
(``torch.nn.init``), so the distributions match; the bits do not (different generator).
"""

from __future__ import annotations

import math
from typing import Any

from .. import autograd
from .._validate import expect_tensor, real_arg
from ..errors import ArgumentError, DTypeError, ShapeError
from ..tensor import Tensor, from_numpy, rand, randn

__all__ = ["calculate_gain", "uniform_", "normal_", "constant_", "zeros_", "ones_", "xavier_uniform_",
           "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "trunc_normal_"]


def calculate_gain(nonlinearity: str, param: Any = None) -> float:
    linear = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
              "conv_transpose3d", "sigmoid")
    if nonlinearity in linear:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else float(param)
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ArgumentError(f"calculate_gain: unsupported nonlinearity {nonlinearity!r}")


def _fans(op: str, t: Tensor) -> tuple[int, int]:
    _target(op, t)
    if t.ndim < 2:
        raise ShapeError(f"{op}: fan in and fan out need a tensor with at least 2 dimensions, got shape {t.shape}")
    receptive = math.prod(t.shape[2:])
    return t.shape[1] * receptive, t.shape[0] * receptive


def _target(op: str, t: Any) -> Tensor:
    """The tensor an initializer writes: a float32 Tensor (DTypeError naming the initializer otherwise)."""
    expect_tensor(op, "tensor", t, Tensor)
    if t._buf is None:
        raise DTypeError(f"{op}: expected a float32 tensor, got an {t.dtype} tensor")
    return t


def _fill(t: Tensor, values: Tensor) -> Tensor:
    with autograd.no_grad():
        t.copy_(values)
    return t


def uniform_(tensor: Tensor, a: float = 0.0, b: float = 1.0, generator: Any = None) -> Tensor:
    _target("uniform_", tensor)
    a, b = real_arg("uniform_", "a", a), real_arg("uniform_", "b", b)
    if a > b:
        raise ArgumentError(f"uniform_: expected a <= b, got a={a} and b={b}")
    u = rand(*tensor.shape, device=tensor.device, generator=generator)
    return _fill(tensor, u * (b - a) + a)


def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, generator: Any = None) -> Tensor:
    _target("normal_", tensor)
    mean, std = real_arg("normal_", "mean", mean), real_arg("normal_", "std", std, 0.0)
    z = randn(*tensor.shape, device=tensor.device, generator=generator)
    return _fill(tensor, z * std + mean)


def trunc_normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, a: float = -2.0, b: float = 2.0,
                  generator: Any = None) -> Tensor:
    """Normal(mean, std) truncated to [a, b] by inverting the normal CDF on a uniform draw (as PyTorch)."""
    from scipy.special import ndtr, ndtri

    lo, hi = ndtr((a - mean) / std), ndtr((b - mean) / std)
    u = rand(*tensor.shape, generator=generator).numpy().astype("float64")
    x = ndtri(lo + (hi - lo) * u) * std + mean
    return _fill(tensor, from_numpy(x.clip(a, b).astype("float32")))  # (copy_ moves it to tensor's device)


def constant_(tensor: Tensor, val: float) -> Tensor:
    _target("constant_", tensor)
    real_arg("constant_", "val", val)
    with autograd.no_grad():
        tensor.fill_(val)
    return tensor


def zeros_(tensor: Tensor) -> Tensor:
    return constant_(tensor, 0.0)


def ones_(tensor: Tensor) -> Tensor:
    return constant_(tensor, 1.0)


def xavier_uniform_(tensor: Tensor, gain: float = 1.0, generator: Any = None) -> Tensor:
    fan_in, fan_out = _fans("xavier_uniform_", tensor)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(tensor, -bound, bound, generator)


def xavier_normal_(tensor: Tensor, gain: float = 1.0, generator: Any = None) -> Tensor:
    fan_in, fan_out = _fans("xavier_normal_", tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)), generator)


def _kaiming_std(op: str, tensor: Tensor, a: float, mode: str, nonlinearity: str) -> float:
    if mode not in ("fan_in", "fan_out"):
        raise ArgumentError(f"{op}: mode must be 'fan_in' or 'fan_out', got {mode!r}")
    fan_in, fan_out = _fans(op, tensor)
    fan = fan_in if mode == "fan_in" else fan_out
    if fan == 0:
        raise ShapeError(f"{op}: cannot initialize a tensor with zero fan ({mode}), shape {tensor.shape}")
    return calculate_gain(nonlinearity, a) / math.sqrt(fan)


def kaiming_uniform_(tensor: Tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu",
                     generator: Any = None) -> Tensor:
    if _target("kaiming_uniform_", tensor).numel() == 0:
        return tensor  # as PyTorch: initializing a zero-element tensor is a no-op (nn.Linear(0, n))
    bound = math.sqrt(3.0) * _kaiming_std("kaiming_uniform_", tensor, a, mode, nonlinearity)
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(tensor: Tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu",
                    generator: Any = None) -> Tensor:
    if _target("kaiming_normal_", tensor).numel() == 0:
        return tensor
    return normal_(tensor, 0.0, _kaiming_std("kaiming_normal_", tensor, a, mode, nonlinearity), generator)


def eye_(tensor: Tensor) -> Tensor:
    """The identity matrix (ones on the diagonal of a 2-D tensor)."""
    _target("eye_", tensor)
    if tensor.ndim != 2:
        raise ShapeError(f"eye_: only tensors with 2 dimensions are supported, got shape {tuple(tensor.shape)}")
    import numpy as np

    return _fill(tensor, from_numpy(np.eye(*tensor.shape, dtype=np.float32)))


def dirac_(tensor: Tensor, groups: int = 1) -> Tensor:
    """The Dirac delta of a 3-, 4- or 5-D convolution weight: each output channel passes its input
    channel through (per group), as PyTorch."""
    _target("dirac_", tensor)
    if tensor.ndim not in (3, 4, 5):
        raise ShapeError(f"dirac_: only tensors with 3, 4, or 5 dimensions are supported, got {tensor.ndim}")
    if isinstance(groups, bool) or not isinstance(groups, int) or groups <= 0 or tensor.shape[0] % groups:
        raise ArgumentError(f"dirac_: dim 0 ({tensor.shape[0]}) must be divisible by groups ({groups!r})")
    import numpy as np

    w = np.zeros(tensor.shape, np.float32)
    out_per_group = tensor.shape[0] // groups
    centre = tuple(s // 2 for s in tensor.shape[2:])
    for g in range(groups):
        for d in range(min(out_per_group, tensor.shape[1])):
            w[(g * out_per_group + d, d) + centre] = 1.0
    return _fill(tensor, from_numpy(w))


def orthogonal_(tensor: Tensor, gain: float = 1.0, generator: Any = None) -> Tensor:
    """A (semi-)orthogonal matrix (the tensor flattened to rows x cols), times gain: the Q of a QR of
    a standard normal draw from torchlean's generator, computed on the host in float64 with Q's
    columns signed by R's diagonal (as PyTorch)."""
    _target("orthogonal_", tensor)
    if tensor.ndim < 2:
        raise ShapeError(f"orthogonal_: only tensors with 2 or more dimensions are supported, got shape "
                         f"{tuple(tensor.shape)}")
    if tensor.numel() == 0:
        return tensor
    import numpy as np

    rows = tensor.shape[0]
    cols = tensor.numel() // rows
    flat = randn(rows, cols, generator=generator).numpy().astype(np.float64)
    if rows < cols:
        flat = flat.T
    q, r = np.linalg.qr(flat)
    q = q * np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    return _fill(tensor, from_numpy((q * real_arg("orthogonal_", "gain", gain)).reshape(tensor.shape).astype(np.float32)))


def sparse_(tensor: Tensor, sparsity: float, std: float = 0.01, generator: Any = None) -> Tensor:
    """A 2-D tensor drawn N(0, std) with ceil(sparsity * rows) zeros in every column (random rows)."""
    _target("sparse_", tensor)
    if tensor.ndim != 2:
        raise ShapeError(f"sparse_: only tensors with 2 dimensions are supported, got shape {tuple(tensor.shape)}")
    sparsity = real_arg("sparse_", "sparsity", sparsity, 0.0)
    import numpy as np

    from ..ops.creation import randperm

    rows, cols = tensor.shape
    w = (randn(rows, cols, generator=generator).numpy() * real_arg("sparse_", "std", std, 0.0)).astype(np.float32)
    zeros_per_col = int(math.ceil(sparsity * rows))
    for c in range(cols):
        w[randperm(rows, generator=generator).numpy()[:zeros_per_col], c] = 0.0
    return _fill(tensor, from_numpy(w))


__all__ += ["eye_", "dirac_", "orthogonal_", "sparse_"]
