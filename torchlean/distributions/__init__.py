"""``torchlean.distributions`` (PyTorch's ``torch.distributions``): ``Normal`` and ``Categorical``.

Samples come from torchlean's counter RNG (the same values on every device for one seed; not
PyTorch's stream). ``Normal.rsample`` is differentiable in loc and scale (the reparameterization
loc + scale * eps); ``log_prob``, ``entropy`` and the moments are differentiable compositions.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Sequence

import numpy as np

from .. import dtypes, ops
from .._validate import type_name
from ..autograd import no_grad
from ..errors import ArgumentError, DTypeError, NotSupportedError, ShapeError
from ..ops.creation import multinomial
from ..ops.extra import broadcast_tensors
from ..ops.math import erf
from ..ops.reduce_dim import logsumexp
from ..ops.select import gather
from ..size import Size
from ..tensor import Tensor, randn, tensor

__all__ = ["Distribution", "Normal", "Categorical"]

_FLOAT32_MIN = float(np.finfo(np.float32).min)


def _param(cls: str, name: str, v: Any, device: Any = None) -> Tensor:
    if isinstance(v, Tensor):
        if v.dtype is not dtypes.float32:
            raise DTypeError(f"{cls}: expected a float32 tensor for {name}, got {v.dtype!r}")
        return v
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise DTypeError(f"{cls}: expected a Tensor or a number for {name}, got {type_name(v)}")
    return tensor(float(v), device=device)


def _shape(sample_shape: Any) -> tuple[int, ...]:
    if isinstance(sample_shape, numbers.Integral):
        return (int(sample_shape),)
    return tuple(sample_shape)


class Distribution:
    """The base: ``batch_shape``, ``event_shape``, ``sample``/``rsample``/``log_prob``/``entropy``."""

    has_rsample = False

    def __init__(self, batch_shape: Sequence[int] = (), event_shape: Sequence[int] = (),
                 validate_args: Any = None) -> None:
        self._batch_shape, self._event_shape = Size(tuple(batch_shape)), Size(tuple(event_shape))

    @property
    def batch_shape(self) -> Size:
        return self._batch_shape

    @property
    def event_shape(self) -> Size:
        return self._event_shape

    def sample(self, sample_shape: Any = ()) -> Tensor:
        with no_grad():
            return self.rsample(sample_shape)

    def rsample(self, sample_shape: Any = ()) -> Tensor:
        raise NotSupportedError(f"{type(self).__name__}.rsample: this distribution has no reparameterized sampler")

    def sample_n(self, n: int) -> Tensor:
        return self.sample((n,))

    @property
    def stddev(self) -> Tensor:
        return ops.sqrt(self.variance)

    def perplexity(self) -> Tensor:
        return ops.exp(self.entropy())

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Normal(Distribution):
    """``Normal(loc, scale)`` (tensors or numbers, broadcast together)."""

    has_rsample = True

    def __init__(self, loc: Any, scale: Any, validate_args: Any = None) -> None:
        dev = next((v.device for v in (loc, scale) if isinstance(v, Tensor)), None)
        loc, scale = _param("Normal", "loc", loc, dev), _param("Normal", "scale", scale, dev)
        self.loc, self.scale = broadcast_tensors(loc, scale)
        if validate_args is not False and np.any(scale.detach().numpy() <= 0):
            raise ArgumentError("Normal: expected scale > 0 (parameter scale has invalid values)")
        super().__init__(self.loc.shape)

    @property
    def mean(self) -> Tensor:
        return self.loc

    @property
    def mode(self) -> Tensor:
        return self.loc

    @property
    def stddev(self) -> Tensor:
        return self.scale

    @property
    def variance(self) -> Tensor:
        return ops.mul(self.scale, self.scale)

    def rsample(self, sample_shape: Any = ()) -> Tensor:
        shape = _shape(sample_shape) + tuple(self.batch_shape)
        eps = randn(*shape, device=self.loc.device)
        return ops.add(ops.expand(self.loc, shape), ops.mul(eps, ops.expand(self.scale, shape)))

    def log_prob(self, value: Any) -> Tensor:
        v = value if isinstance(value, Tensor) else tensor(float(value), device=self.loc.device)
        z = ops.div(ops.sub(v, self.loc), self.scale)
        return ops.sub(ops.sub(ops.mul(ops.mul(z, z), -0.5), ops.log(self.scale)), 0.5 * math.log(2 * math.pi))

    def cdf(self, value: Any) -> Tensor:
        z = ops.div(ops.sub(value, self.loc), ops.mul(self.scale, math.sqrt(2.0)))
        return ops.mul(ops.add(erf(z), 1.0), 0.5)

    def icdf(self, value: Any) -> Tensor:
        raise NotSupportedError("Normal.icdf: not supported yet (it needs erfinv, a new primitive)")

    def entropy(self) -> Tensor:
        return ops.add(ops.log(self.scale), 0.5 + 0.5 * math.log(2 * math.pi))

    def __repr__(self) -> str:
        return f"Normal(loc: {self.loc.shape}, scale: {self.scale.shape})"


class Categorical(Distribution):
    """``Categorical(probs=...)`` or ``Categorical(logits=...)`` over the last dim (unnormalized
    probs are normalized; logits are normalized by logsumexp)."""

    def __init__(self, probs: Any = None, logits: Any = None, validate_args: Any = None) -> None:
        if (probs is None) == (logits is None):
            raise ArgumentError("Categorical: either `probs` or `logits` must be specified, but not both")
        given = probs if probs is not None else logits
        if not isinstance(given, Tensor) or given.dtype is not dtypes.float32:
            raise DTypeError(f"Categorical: expected a float32 Tensor for "
                             f"{'probs' if probs is not None else 'logits'}, got {type_name(given)}")
        if given.ndim < 1:
            raise ShapeError("Categorical: probs/logits must be at least one-dimensional")
        if probs is not None:
            if validate_args is not False and np.any(probs.detach().numpy() < 0):
                raise ArgumentError("Categorical: probs must be non-negative")
            self.probs = ops.div(probs, ops.sum(probs, -1, True))
            self.logits = ops.log(ops.clamp(self.probs, min=float(np.finfo(np.float32).tiny)))
        else:
            self.logits = ops.sub(logits, logsumexp(logits, -1, True))
            self.probs = ops.softmax(logits, -1)
        self._num_events = given.shape[-1]
        super().__init__(given.shape[:-1])

    @property
    def param_shape(self) -> Size:
        return self.probs.shape

    @property
    def mean(self) -> Tensor:
        return ops.mul(self.probs, float("nan"))

    @property
    def mode(self) -> Tensor:
        return ops.argmax(self.probs, -1)

    @property
    def variance(self) -> Tensor:
        return ops.mul(self.probs, float("nan"))

    def sample(self, sample_shape: Any = ()) -> Tensor:
        shape = _shape(sample_shape)
        n = int(math.prod(shape))
        with no_grad():
            p2 = ops.reshape(self.probs.detach(), (-1, self._num_events))
            draws = multinomial(p2, max(n, 1), True)  # (batch, n)
        vals = draws.numpy()[:, :n].T.reshape(shape + tuple(self.batch_shape))
        return tensor(vals, dtype=dtypes.int64, device=self.probs.device)

    def log_prob(self, value: Tensor) -> Tensor:
        if not isinstance(value, Tensor):
            value = tensor(value, dtype=dtypes.int64, device=self.logits.device)
        v = value.long()
        vals = v.numpy()
        if vals.size and (vals.min() < 0 or vals.max() >= self._num_events):
            raise ArgumentError(f"Categorical.log_prob: values must be in [0, {self._num_events}), got "
                                f"{int(vals.min())}..{int(vals.max())}")
        shape = tuple(np.broadcast_shapes(tuple(v.shape), tuple(self.batch_shape)))
        logits = ops.expand(self.logits, shape + (self._num_events,))
        idx = np.broadcast_to(vals, shape)[..., None]
        return ops.squeeze(gather(logits, -1, np.ascontiguousarray(idx)), -1)

    def entropy(self) -> Tensor:
        logits = ops.clamp(self.logits, min=_FLOAT32_MIN)
        return ops.neg(ops.sum(ops.mul(logits, self.probs), -1))

    def enumerate_support(self, expand: bool = True) -> Tensor:
        vals = np.arange(self._num_events, dtype=np.int64).reshape((-1,) + (1,) * len(self.batch_shape))
        if expand:
            vals = np.broadcast_to(vals, (self._num_events,) + tuple(self.batch_shape))
        return tensor(np.ascontiguousarray(vals), device=self.probs.device)

    def __repr__(self) -> str:
        return f"Categorical(probs: {self.probs.shape})"
