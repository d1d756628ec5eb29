"""Differentiable 2-D and 3-D FNO spectral convolutions (the reference ``SpectralConv2d`` /
``SpectralConv3d`` forward), on real tensors, channels first:

* ``spectral_conv2d(x, w)``: x (batch, cin, h, wd) or (cin, h, wd); w (2, cin, cout, m1, m2, 2): the
  reference's complex ``weights1``, ``weights2`` stacked as real views ([re, im] last). Returns
  (batch, cout, h, wd) = irfft2 of rfft2(x) with the corners [:m1, :m2] and [-m1:, :m2] multiplied
  channel-wise by the weights (per mode, sum over cin) and every other mode zero.
* ``spectral_conv3d(x, w)``: x (batch, cin, d1, d2, d3) or unbatched; w (4, cin, cout, m1, m2, m3, 2)
  (weights1..4 at [:m1, :m2], [-m1:, :m2], [:m1, -m2:], [-m1:, -m2:], all [:, :, :m3]).

The modes come from w's shape. One tape node each; the VJP runs ``*_bwd_x`` and ``*_bwd_w`` (only
the ones a parent asks for). PyTorch has no function of this name (FUNCTIONAL is empty).
"""

from __future__ import annotations

from typing import Any

from .. import autograd
from ..errors import ArgumentError, DTypeError, ShapeError
from ..runtime import primitives as P
from ..runtime.buffer import Buffer
from ._base import Tensor, fbuf, new, same_device

__all__ = ["spectral_conv2d", "spectral_conv3d"]
FUNCTIONAL: list[str] = []
_AXES = {2: ("h", "wd"), 3: ("d1", "d2", "d3")}


def _tensor(op: str, name: str, x: Any) -> Tensor:
    if not isinstance(x, Tensor):
        raise DTypeError(f"{op}: argument {name} must be a Tensor, got {type(x).__name__}")
    return x if x._buf is not None else x.float()


def _conv(op: str, d: int, x: Any, w: Any) -> Tensor:
    x, w = _tensor(op, "x", x), _tensor(op, "w", w)
    if x.ndim not in (d + 1, d + 2):
        raise ShapeError(f"{op}: expected x of shape (batch, cin, {', '.join(_AXES[d])}) or (cin, "
                         f"{', '.join(_AXES[d])}), got {tuple(x.shape)}")
    nc = 2 ** (d - 1)
    if w.ndim != d + 4 or w.shape[0] != nc or w.shape[-1] != 2:
        ms = ", ".join(f"m{j + 1}" for j in range(d))
        raise ShapeError(f"{op}: expected w of shape ({nc}, cin, cout, {ms}, 2) (the {nc} corner weights as real "
                         f"views), got {tuple(w.shape)}")
    unbatched = x.ndim == d + 1
    batch = 1 if unbatched else x.shape[0]
    cin, ns = x.shape[-d - 1], tuple(x.shape[-d:])
    if w.shape[1] != cin:
        raise ShapeError(f"{op}: w has {w.shape[1]} input channels (w.shape[1]), x has {cin} (x.shape"
                         f"[{-d - 1}])")
    cout, ms = w.shape[2], tuple(w.shape[3:3 + d])
    for j, (nm, n, m) in enumerate(zip(_AXES[d], ns, ms)):
        top = n // 2 + 1 if j == d - 1 else n // 2
        if not 1 <= m <= top:
            why = "" if j == d - 1 else " (the two corners must not overlap)"
            raise ArgumentError(f"{op}: mode count m{j + 1} = w.shape[{3 + j}] must be in [1, {top}] for {nm} = {n}"
                                f"{why}, got {m}")
    same_device(op, x, w)
    xb, wb = fbuf(op, x), fbuf(op, w)
    dims = (batch, cin, cout, *ns, *ms)
    fwd = getattr(P, f"spectral_conv{d}d_rfft_fwd")
    out_shape = ((cout,) if unbatched else (batch, cout)) + ns
    out = new(fwd(xb, wb, *dims), out_shape)
    bwd_x, bwd_w = getattr(P, f"spectral_conv{d}d_rfft_bwd_x"), getattr(P, f"spectral_conv{d}d_rfft_bwd_w")

    def vjp(g: Buffer):
        dx = bwd_x(xb, wb, g, *dims) if x.requires_grad else None
        dw = bwd_w(xb, wb, g, *dims) if w.requires_grad else None
        return dx, dw

    return autograd.record(op, out, (x, w), vjp)


def spectral_conv2d(x: Tensor, w: Tensor) -> Tensor:
    """The reference SpectralConv2d's forward on real views: x (batch, cin, h, wd), w (2, cin, cout, m1, m2, 2)."""
    return _conv("spectral_conv2d", 2, x, w)


def spectral_conv3d(x: Tensor, w: Tensor) -> Tensor:
    """The reference SpectralConv3d's forward on real views: x (batch, cin, d1, d2, d3),
    w (4, cin, cout, m1, m2, m3, 2)."""
    return _conv("spectral_conv3d", 3, x, w)
