"""``weight_norm`` and ``spectral_norm`` (PyTorch's ``torch.nn.utils`` hooks): the weight is
recomputed from its factors before every forward by a forward pre-hook, so it is differentiable in
them. State-dict keys as PyTorch's (``weight_g``/``weight_v``; ``weight_orig``/``weight_u``/``weight_v``)."""

from __future__ import annotations

from typing import Any

from ... import autograd, ops
from ...errors import ArgumentError
from ...tensor import Tensor, randn
from ..parameter import Parameter

__all__ = ["weight_norm", "remove_weight_norm", "spectral_norm", "remove_spectral_norm"]


def _norm_except_dim(v: Tensor, dim: int | None) -> Tensor:
    if dim is None:
        return ops.sqrt(ops.sum(ops.mul(v, v)))
    axes = tuple(i for i in range(v.ndim) if i != dim)
    return ops.sqrt(ops.sum(ops.mul(v, v), axes, True)) if axes else ops.abs(v)


def _weight_of(module: Any, name: str) -> Tensor:
    w = getattr(module, name, None)
    if not isinstance(w, Parameter):
        raise ArgumentError(f"{type(module).__name__} has no parameter {name!r} to reparameterize")
    return w


class _WeightNorm:
    def __init__(self, name: str, dim: int | None) -> None:
        self.name, self.dim = name, dim

    def compute(self, module: Any) -> Tensor:
        g, v = getattr(module, self.name + "_g"), getattr(module, self.name + "_v")
        return ops.mul(v, ops.div(g, _norm_except_dim(v, self.dim)))

    def __call__(self, module: Any, inputs: Any) -> None:
        setattr(module, self.name, self.compute(module))


def weight_norm(module: Any, name: str = "weight", dim: int | None = 0) -> Any:
    """weight = g * v / ||v|| (the norm over every dim but ``dim``; over all with dim=None)."""
    w = _weight_of(module, name)
    d = None if dim is None or dim == -1 or not w.ndim else dim % w.ndim
    fn = _WeightNorm(name, d)
    with autograd.no_grad():
        g = _norm_except_dim(w.detach(), d)
    delattr(module, name)
    module.register_parameter(name + "_g", Parameter(g.clone()))
    module.register_parameter(name + "_v", Parameter(w.detach().clone()))
    setattr(module, name, fn.compute(module))
    handle = module.register_forward_pre_hook(fn)
    module.__dict__.setdefault("_reparam_hooks", {})[name] = (fn, handle)
    return module


def remove_weight_norm(module: Any, name: str = "weight") -> Any:
    fn, handle = module.__dict__.get("_reparam_hooks", {}).pop(name, (None, None))
    if not isinstance(fn, _WeightNorm):
        raise ArgumentError(f"remove_weight_norm: weight_norm of {name!r} not found in {type(module).__name__}")
    with autograd.no_grad():
        w = fn.compute(module).detach().clone()
    handle.remove()
    delattr(module, name + "_g")
    delattr(module, name + "_v")
    object.__delattr__(module, name)
    module.register_parameter(name, Parameter(w))
    return module


def _normalize(x: Tensor, eps: float) -> Tensor:
    return ops.div(x, ops.clamp(ops.sqrt(ops.sum(ops.mul(x, x))), min=eps))


class _SpectralNorm:
    def __init__(self, name: str, n_power_iterations: int, dim: int, eps: float) -> None:
        self.name, self.n, self.dim, self.eps = name, n_power_iterations, dim, eps

    def matrix(self, w: Tensor) -> Tensor:
        if self.dim != 0:
            w = ops.movedim(w, self.dim, 0)
        return ops.reshape(w, (w.shape[0], -1))

    def compute(self, module: Any, do_power_iteration: bool) -> Tensor:
        w = getattr(module, self.name + "_orig")
        u, v = getattr(module, self.name + "_u"), getattr(module, self.name + "_v")
        mat = self.matrix(w)
        if do_power_iteration:
            with autograd.no_grad():
                m = mat.detach()
                for _ in range(self.n):
                    v = _normalize(ops.matmul(ops.t(m), u), self.eps)
                    u = _normalize(ops.matmul(m, v), self.eps)
                setattr(module, self.name + "_u", u.clone())
                setattr(module, self.name + "_v", v.clone())
        sigma = ops.sum(ops.mul(u, ops.matmul(mat, v)))
        return ops.div(w, sigma)

    def __call__(self, module: Any, inputs: Any) -> None:
        setattr(module, self.name, self.compute(module, module.training))


def spectral_norm(module: Any, name: str = "weight", n_power_iterations: int = 1, eps: float = 1e-12,
                  dim: int | None = None) -> Any:
    """weight = weight_orig / sigma, sigma the largest singular value of weight_orig (as a matrix
    with ``dim`` first) estimated by power iteration (``n_power_iterations`` per training forward;
    u and v start from normal draws of torchlean's generator)."""
    w = _weight_of(module, name)
    if isinstance(n_power_iterations, bool) or not isinstance(n_power_iterations, int) or n_power_iterations <= 0:
        raise ArgumentError(f"spectral_norm: expected n_power_iterations to be positive, got {n_power_iterations!r}")
    if dim is None:
        dim = 1 if type(module).__name__.startswith("ConvTranspose") else 0
    fn = _SpectralNorm(name, n_power_iterations, dim % max(w.ndim, 1), eps)
    mat = fn.matrix(w.detach())
    with autograd.no_grad():
        u = _normalize(randn(mat.shape[0], device=w.device), eps)
        v = _normalize(randn(mat.shape[1], device=w.device), eps)
    delattr(module, name)
    module.register_parameter(name + "_orig", Parameter(w.detach().clone()))
    module.register_buffer(name + "_u", u)
    module.register_buffer(name + "_v", v)
    setattr(module, name, fn.compute(module, True))
    handle = module.register_forward_pre_hook(fn)
    module.__dict__.setdefault("_reparam_hooks", {})[name] = (fn, handle)
    return module


def remove_spectral_norm(module: Any, name: str = "weight") -> Any:
    fn, handle = module.__dict__.get("_reparam_hooks", {}).pop(name, (None, None))
    if not isinstance(fn, _SpectralNorm):
        raise ArgumentError(f"remove_spectral_norm: spectral_norm of {name!r} not found in {type(module).__name__}")
    with autograd.no_grad():
        w = fn.compute(module, False).detach().clone()
    handle.remove()
    for suffix in ("_orig", "_u", "_v"):
        delattr(module, name + suffix)
    object.__delattr__(module, name)
    module.register_parameter(name, Parameter(w))
    return module
