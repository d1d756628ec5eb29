"""``torchlean.special`` (PyTorch's ``torch.special``): aliases of the differentiable ops.

Functions that need a new primitive (erfinv, the gamma family, Bessel functions) raise
``NotSupportedError`` naming the call.
"""

from __future__ import annotations

from typing import Any

from .errors import NotSupportedError
from .ops import elementwise as _el, math as _m
from .ops.nn import log_softmax as _log_softmax, softmax as _softmax
from .ops.reduce_dim import logsumexp
from .tensor import Tensor

__all__ = ["erf", "erfc", "erfinv", "expit", "logit", "exp2", "expm1", "log1p", "logsumexp", "softmax",
           "log_softmax", "sinc", "round", "xlogy", "digamma", "gammaln", "polygamma", "i0", "ndtr", "ndtri"]

erf, erfc, exp2, expm1, log1p, round = _m.erf, _m.erfc, _m.exp2, _m.expm1, _m.log1p, _m.round  # noqa: A001
expit = _el.sigmoid


def logit(input: Tensor, eps: float | None = None) -> Tensor:  # noqa: A002
    """log(p / (1 - p)), p clamped to [eps, 1 - eps] when eps is given."""
    p = input if eps is None else _el.clamp(input, eps, 1.0 - eps)
    return _el.sub(_el.log(p), _m.log1p(_el.neg(p)))


def softmax(input: Tensor, dim: int, *, dtype: Any = None) -> Tensor:  # noqa: A002
    return _softmax(input, dim)


def log_softmax(input: Tensor, dim: int, *, dtype: Any = None) -> Tensor:  # noqa: A002
    return _log_softmax(input, dim)


def ndtr(input: Tensor) -> Tensor:  # noqa: A002
    """The standard normal CDF: (1 + erf(x / sqrt(2))) / 2."""
    return _el.mul(_el.add(_m.erf(_el.mul(input, 0.7071067811865476)), 1.0), 0.5)


def xlogy(input: Any, other: Any) -> Tensor:  # noqa: A002
    """x * log(y), 0 where x == 0 (also when y is 0 or NaN... as PyTorch: 0 where x == 0 unless y is NaN)."""
    from .ops.extra import where
    from .ops.integer import compare

    prod = _el.mul(input, _el.log(other))
    zero = compare("eq", input, 0) if isinstance(input, Tensor) else None
    if zero is None:
        return prod if input != 0 else _el.mul(prod, 0.0)
    keep_nan = compare("ne", other, other) if isinstance(other, Tensor) else None
    if keep_nan is not None:
        from .ops.integer import logical, logical_not

        zero = logical("logical_and", zero, logical_not(keep_nan))
    return where(zero, 0.0, prod)


def sinc(input: Tensor) -> Tensor:  # noqa: A002
    """sin(pi x) / (pi x), 1 at 0."""
    from .ops.extra import where
    from .ops.integer import compare

    px = _el.mul(input, 3.141592653589793)
    zero = compare("eq", input, 0)
    safe = where(zero, 1.0, px)
    return where(zero, 1.0, _el.div(_m.sin(safe), safe))


def _unsupported(name: str):
    def fn(*args: Any, **kwargs: Any) -> Any:
        raise NotSupportedError(f"special.{name}: not supported yet (it needs a new primitive: spec, contract, "
                                f"CPU and CUDA kernels)")
    fn.__name__ = name
    return fn


erfinv, digamma, gammaln, polygamma, i0, ndtri = (_unsupported(n) for n in
                                                   ("erfinv", "digamma", "gammaln", "polygamma", "i0", "ndtri"))
