"""``torchlean.fft`` (PyTorch's ``torch.fft``): discrete Fourier transforms of real and complex tensors.

Complex results are ``ComplexTensor``s over float32 real views ([re, im] in a last axis of size 2);
every transform is one of the fft family's ops (torchlean/ops/fft.py) on real views, so gradients
flow through them like any other op, with PyTorch's complex-gradient convention.

Semantics are PyTorch's (and NumPy's): forward transforms unnormalized and inverse ones scaled by
1/n for ``norm="backward"`` (the default), 1/sqrt(n) both ways for "ortho", the reverse for
"forward"; ``n``/``s`` pad the input with zeros or trim it along each transformed dim before the
transform (for the inverse real transforms: the leading dims to s[i], the last to s[-1]//2 + 1
bins; its default length is 2 (m - 1)); ``dim`` takes any dims, negative, unsorted, not trailing:
they are moved last (in the given order, the last one being the real transform's half axis), transformed
and moved back. irfftn is NumPy's: the inverse complex transform over the leading dims, then the
one-dimensional C2R along the last, which ignores the imaginary parts of its bins 0 and n/2.
hfft and ihfft are not supported.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Sequence

import numpy as np

from . import ops
from ._validate import type_name
from .complex_tensor import ComplexTensor
from .errors import ArgumentError, AxisError, DTypeError, NotSupportedError
from .ops import fft as F
from .tensor import Tensor, tensor as _tensor

__all__ = ["fft", "ifft", "rfft", "irfft", "fft2", "ifft2", "rfft2", "irfft2", "fftn", "ifftn", "rfftn", "irfftn",
           "hfft", "ihfft", "fftfreq", "rfftfreq", "fftshift", "ifftshift"]

_NORMS = (None, "backward", "ortho", "forward")
_MAX_AXES = 3  # per primitive call; more dims are done in groups


# -- arguments -------------------------------------------------------------------------------------------
def _real(op: str, x: Any) -> Tensor:
    if isinstance(x, ComplexTensor):
        raise DTypeError(f"fft.{op}: expected a real tensor, got complex64")
    if not isinstance(x, Tensor):
        raise DTypeError(f"fft.{op}: expected a Tensor for input, got {type_name(x)}")
    return x if x._buf is not None else x.float()


def _complex_view(op: str, x: Any) -> Tensor:
    """The real view (..., 2) of x; a real tensor gets a zero imaginary part."""
    if isinstance(x, ComplexTensor):
        return x.real_view()
    r = _real(op, x)
    return ops.stack([r, r.new_zeros(tuple(r.shape))], -1)


def _norm(op: str, norm: Any, n: int, inverse: bool) -> float:
    if norm not in _NORMS:
        raise ArgumentError(f"fft.{op}: invalid normalization mode {norm!r}; expected 'backward', 'ortho', 'forward' "
                            f"or None")
    if norm == "ortho":
        return 1.0 / math.sqrt(n)
    scaled = inverse if norm in (None, "backward") else not inverse
    return 1.0 / n if scaled else 1.0


def _dims(op: str, dim: Any, ndim: int) -> list[int]:
    """Normalized, unique dims of a tensor of ``ndim`` dims."""
    seq = [dim] if isinstance(dim, numbers.Integral) else dim
    if isinstance(seq, (str, bytes)) or not isinstance(seq, (Sequence, tuple, list)):
        raise ArgumentError(f"fft.{op}: dim must be an int or a sequence of ints, got {dim!r}")
    out = []
    for d in seq:
        if isinstance(d, bool) or not isinstance(d, numbers.Integral):
            raise ArgumentError(f"fft.{op}: dim must be an int or a sequence of ints, got {dim!r}")
        if not -ndim <= int(d) < ndim or ndim == 0:
            raise AxisError(f"fft.{op}: dimension out of range (expected to be in range of [{-max(ndim, 1)}, "
                            f"{max(ndim, 1) - 1}], but got {int(d)})")
        out.append(int(d) % ndim)
    if len(set(out)) != len(out):
        raise ArgumentError(f"fft.{op}: dims must be unique, got {dim!r}")
    return out


def _sizes(op: str, s: Any, dim: Any, shape: tuple, default_dims: Any) -> tuple[list[int], list[int | None]]:
    """(dims, sizes): torch's rules for s and dim; a size of None (or -1) keeps the input's length."""
    ndim = len(shape)
    if s is not None:
        if isinstance(s, numbers.Integral) or not isinstance(s, (Sequence, tuple, list)):
            raise ArgumentError(f"fft.{op}: s must be a sequence of ints, got {s!r}")
        s = list(s)
        if dim is None:
            if len(s) > ndim:
                raise ArgumentError(f"fft.{op}: got shape s with {len(s)} values but input has only {ndim} dimensions")
            dims = list(range(ndim - len(s), ndim))
        else:
            dims = _dims(op, dim, ndim)
            if len(dims) != len(s):
                raise ArgumentError(f"fft.{op}: when given, dim and shape arguments must have the same length, got "
                                    f"s={s!r} and dim={dim!r}")
        sizes = []
        for v in s:
            if isinstance(v, bool) or not isinstance(v, numbers.Integral):
                raise ArgumentError(f"fft.{op}: s must be a sequence of ints, got {s!r}")
            sizes.append(None if int(v) == -1 else int(v))
        return dims, sizes
    dims = _dims(op, list(range(ndim)) if dim is None and default_dims is None else
                 (default_dims if dim is None else dim), ndim)
    return dims, [None] * len(dims)


def _length(op: str, n: Any) -> int:
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or int(n) < 1:
        raise ArgumentError(f"fft.{op}: invalid number of data points ({n!r}) specified; expected an int >= 1")
    return int(n)


# -- padding, trimming, moving dims ----------------------------------------------------------------------
def _resize(t: Tensor, axis: int, n: int) -> Tensor:
    """t trimmed or zero-padded to length n along ``axis``."""
    size = t.shape[axis]
    if n == size:
        return t
    if n < size:
        return t.narrow(axis, 0, n)
    pad_shape = list(t.shape)
    pad_shape[axis] = n - size
    return ops.cat([t, t.new_zeros(tuple(pad_shape))], axis)


def _moved(t: Tensor, dims: list[int], pair: bool) -> tuple[Tensor, list[int]]:
    """t with ``dims`` (of its first len(shape) - pair dims) moved last, in order, contiguous; and the
    permutation of those dims."""
    nd = t.ndim - (1 if pair else 0)
    perm = [i for i in range(nd) if i not in dims] + list(dims)
    if perm == list(range(nd)):
        return t, perm
    return t.permute(*(perm + ([nd] if pair else []))).contiguous(), perm


def _back(t: Tensor, perm: list[int], pair: bool) -> Tensor:
    if perm == list(range(len(perm))):
        return t
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return t.permute(*(inv + ([len(perm)] if pair else [])))


def _c2c(rv: Tensor, dims: list[int], inverse: bool, scale: float) -> Tensor:
    """The complex transform of the real view rv over ``dims`` (any number), scale applied once."""
    for i in range(0, len(dims), _MAX_AXES):
        group = dims[i:i + _MAX_AXES]
        moved, perm = _moved(rv, group, pair=True)
        rv = _back(F.fftn_c2c(moved, len(group), inverse, scale if i == 0 else 1.0), perm, pair=True)
    return rv


def _check_lengths(op: str, shape: tuple, dims: list[int], sizes: list[int | None]) -> list[int]:
    return [_length(op, shape[d] if n is None else n) for d, n in zip(dims, sizes)]


def _c2c_call(op: str, x: Any, sizes: list[int | None] | None, dims: list[int], norm: Any, inverse: bool) -> ComplexTensor:
    rv = _complex_view(op, x)
    shape = tuple(rv.shape[:-1])
    lengths = _check_lengths(op, shape, dims, sizes)
    for d, n in zip(dims, lengths):
        rv = _resize(rv, d, n)
    if not dims:
        return ComplexTensor.from_real_view(rv.clone() if isinstance(x, ComplexTensor) else rv, f"fft.{op}")
    return ComplexTensor.from_real_view(_c2c(rv, dims, inverse, _norm(op, norm, math.prod(lengths), inverse)),
                                        f"fft.{op}")


def _r2c_call(op: str, x: Any, sizes: list[int | None], dims: list[int], norm: Any) -> ComplexTensor:
    r = _real(op, x)
    lengths = _check_lengths(op, tuple(r.shape), dims, sizes)
    for d, n in zip(dims, lengths):
        r = _resize(r, d, n)
    scale = _norm(op, norm, math.prod(lengths), False)
    last = dims[-_MAX_AXES:]
    moved, perm = _moved(r, last, pair=False)
    rv = _back(F.rfftn_r2c(moved, len(last), scale), perm, pair=True)
    if len(dims) > _MAX_AXES:  # the remaining dims: complex transforms of the half spectrum
        rv = _c2c(rv, dims[:-_MAX_AXES], False, 1.0)
    return ComplexTensor.from_real_view(rv, f"fft.{op}")


def _c2r_call(op: str, x: Any, sizes: list[int | None], dims: list[int], norm: Any) -> Tensor:
    rv = _complex_view(op, x)
    shape = tuple(rv.shape[:-1])
    if not dims:
        raise ArgumentError(f"fft.{op}: expected at least one dim to transform")
    lead = _check_lengths(op, shape, dims[:-1], sizes[:-1])
    n_last = sizes[-1] if sizes[-1] is not None else 2 * (shape[dims[-1]] - 1)
    n_last = _length(op, n_last)
    for d, n in zip(dims[:-1], lead):
        rv = _resize(rv, d, n)
    rv = _resize(rv, dims[-1], n_last // 2 + 1)
    scale = _norm(op, norm, math.prod(lead) * n_last, True)
    if len(dims) > _MAX_AXES:  # NumPy's order: the leading complex transforms first
        rv = _c2c(rv, dims[:-_MAX_AXES], True, 1.0)
    last = dims[-_MAX_AXES:]
    moved, perm = _moved(rv, last, pair=True)
    return _back(F.irfftn_c2r(moved, len(last), n_last, scale), perm, pair=False)


def _one_dim(op: str, x: Any, n: Any, dim: Any) -> tuple[list[int], list[int | None]]:
    ndim = x.ndim
    if isinstance(dim, bool) or not isinstance(dim, numbers.Integral):
        raise ArgumentError(f"fft.{op}: dim must be an int, got {dim!r}")
    dims = _dims(op, dim, ndim)
    return dims, [None if n is None else _length(op, n)]


def _tensor_arg(op: str, x: Any) -> Any:
    if not isinstance(x, (Tensor, ComplexTensor)):
        raise DTypeError(f"fft.{op}: expected a Tensor for input, got {type_name(x)}")
    return x


# -- the transforms --------------------------------------------------------------------------------------
def fft(input: Any, n: int | None = None, dim: int = -1, norm: str | None = None) -> ComplexTensor:
    dims, sizes = _one_dim("fft", _tensor_arg("fft", input), n, dim)
    return _c2c_call("fft", input, sizes, dims, norm, False)


def ifft(input: Any, n: int | None = None, dim: int = -1, norm: str | None = None) -> ComplexTensor:
    dims, sizes = _one_dim("ifft", _tensor_arg("ifft", input), n, dim)
    return _c2c_call("ifft", input, sizes, dims, norm, True)


def rfft(input: Any, n: int | None = None, dim: int = -1, norm: str | None = None) -> ComplexTensor:
    dims, sizes = _one_dim("rfft", _real("rfft", input), n, dim)
    return _r2c_call("rfft", input, sizes, dims, norm)


def irfft(input: Any, n: int | None = None, dim: int = -1, norm: str | None = None) -> Tensor:
    dims, sizes = _one_dim("irfft", _tensor_arg("irfft", input), n, dim)
    return _c2r_call("irfft", input, sizes, dims, norm)


def fftn(input: Any, s: Sequence[int] | None = None, dim: Any = None, norm: str | None = None) -> ComplexTensor:
    dims, sizes = _sizes("fftn", s, dim, tuple(_tensor_arg("fftn", input).shape), None)
    return _c2c_call("fftn", input, sizes, dims, norm, False)


def ifftn(input: Any, s: Sequence[int] | None = None, dim: Any = None, norm: str | None = None) -> ComplexTensor:
    dims, sizes = _sizes("ifftn", s, dim, tuple(_tensor_arg("ifftn", input).shape), None)
    return _c2c_call("ifftn", input, sizes, dims, norm, True)


def rfftn(input: Any, s: Sequence[int] | None = None, dim: Any = None, norm: str | None = None) -> ComplexTensor:
    dims, sizes = _sizes("rfftn", s, dim, tuple(_real("rfftn", input).shape), None)
    if not dims:
        raise ArgumentError("fft.rfftn: must transform at least one axis")
    return _r2c_call("rfftn", input, sizes, dims, norm)


def irfftn(input: Any, s: Sequence[int] | None = None, dim: Any = None, norm: str | None = None) -> Tensor:
    dims, sizes = _sizes("irfftn", s, dim, tuple(_tensor_arg("irfftn", input).shape), None)
    return _c2r_call("irfftn", input, sizes, dims, norm)


def fft2(input: Any, s: Sequence[int] | None = None, dim: Any = (-2, -1), norm: str | None = None) -> ComplexTensor:
    dims, sizes = _sizes("fft2", s, dim, tuple(_tensor_arg("fft2", input).shape), (-2, -1))
    return _c2c_call("fft2", input, sizes, dims, norm, False)


def ifft2(input: Any, s: Sequence[int] | None = None, dim: Any = (-2, -1), norm: str | None = None) -> ComplexTensor:
    dims, sizes = _sizes("ifft2", s, dim, tuple(_tensor_arg("ifft2", input).shape), (-2, -1))
    return _c2c_call("ifft2", input, sizes, dims, norm, True)


def rfft2(input: Any, s: Sequence[int] | None = None, dim: Any = (-2, -1), norm: str | None = None) -> ComplexTensor:
    dims, sizes = _sizes("rfft2", s, dim, tuple(_real("rfft2", input).shape), (-2, -1))
    return _r2c_call("rfft2", input, sizes, dims, norm)


def irfft2(input: Any, s: Sequence[int] | None = None, dim: Any = (-2, -1), norm: str | None = None) -> Tensor:
    dims, sizes = _sizes("irfft2", s, dim, tuple(_tensor_arg("irfft2", input).shape), (-2, -1))
    return _c2r_call("irfft2", input, sizes, dims, norm)


def _unsupported(name: str):
    def fn(*args: Any, **kwargs: Any) -> Any:
        raise NotSupportedError(f"fft.{name}: not supported (Hermitian-input transforms); use fft.irfft / fft.rfft "
                                f"with conjugation instead")
    fn.__name__ = name
    return fn


hfft = _unsupported("hfft")
ihfft = _unsupported("ihfft")


# -- shifts and frequencies ------------------------------------------------------------------------------
def _shift(op: str, input: Any, dim: Any, inverse: bool) -> Any:
    x = _tensor_arg(op, input)
    dims = list(range(x.ndim)) if dim is None else _dims(op, dim, x.ndim)
    if not dims:
        return x
    shape = tuple(x.shape)
    shifts = [(shape[d] + 1) // 2 if inverse else shape[d] // 2 for d in dims]
    if isinstance(x, ComplexTensor):
        return ComplexTensor.from_real_view(x.real_view().roll(shifts, dims), f"fft.{op}")
    return x.roll(shifts, dims)


def fftshift(input: Any, dim: Any = None) -> Any:
    return _shift("fftshift", input, dim, False)


def ifftshift(input: Any, dim: Any = None) -> Any:
    return _shift("ifftshift", input, dim, True)


def _freq(op: str, n: Any, d: Any, values: np.ndarray, dtype: Any, device: Any, requires_grad: bool) -> Tensor:
    if isinstance(d, bool) or not isinstance(d, numbers.Real):
        raise ArgumentError(f"fft.{op}: d must be a real number, got {d!r}")
    # PyTorch: float32 integers times the float32 rounding of 1 / (n d)
    with np.errstate(divide="ignore", invalid="ignore"):  # n d = 0: inf steps, as PyTorch's
        v = values.astype(np.float32) * np.float32(np.float64(1.0) / np.float64(n * float(d)))
    kw = {} if dtype is None else {"dtype": dtype}
    return _tensor(v, device=device, requires_grad=requires_grad, **kw)


def _count(op: str, n: Any) -> int:
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or int(n) < 0:
        raise ArgumentError(f"fft.{op}: n must be a non-negative int, got {n!r}")
    return int(n)


def fftfreq(n: int, d: float = 1.0, *, dtype: Any = None, device: Any = None, requires_grad: bool = False,
            layout: Any = None, pin_memory: bool = False) -> Tensor:
    n = _count("fftfreq", n)
    k = np.concatenate([np.arange((n + 1) // 2), np.arange(-(n // 2), 0)])
    return _freq("fftfreq", n, d, k, dtype, device, requires_grad)


def rfftfreq(n: int, d: float = 1.0, *, dtype: Any = None, device: Any = None, requires_grad: bool = False,
             layout: Any = None, pin_memory: bool = False) -> Tensor:
    n = _count("rfftfreq", n)
    return _freq("rfftfreq", n, d, np.arange(n // 2 + 1), dtype, device, requires_grad)
