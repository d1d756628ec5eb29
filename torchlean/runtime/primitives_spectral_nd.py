"""Primitives of the 2-D and 3-D FNO spectral convolutions (spec/spectral_nd.py), channels first as
the reference ``fourier_2d.py`` / ``fourier_3d.py``:

* ``spectral_conv2d_rfft_fwd(x, w, batch, cin, cout, h, wd, m1, m2)``: x (batch, cin, h, wd),
  w (2, cin, cout, m1, m2, 2) (weights1, weights2 as real views) -> y (batch, cout, h, wd).
* ``spectral_conv3d_rfft_fwd(x, w, batch, cin, cout, d1, d2, d3, m1, m2, m3)``: x (batch, cin, d1, d2,
  d3), w (4, cin, cout, m1, m2, m3, 2) -> y (batch, cout, d1, d2, d3).
* ``*_bwd_x(x, w, dy, ...)`` -> dx (x's shape); ``*_bwd_w(x, w, dy, ...)`` -> dw (w's shape, every
  corner, summed over the batch): the exact VJPs.

Modes: every m >= 1; a leading axis of length n keeps the corners [0, m) and [n - m, n), which must
not overlap (2 m <= n); the last axis keeps [0, m) with m <= n//2 + 1. Sizes may be 0 (batch,
channels): the results are then empty or zeros.
"""

from __future__ import annotations

from typing import Any

from ..errors import ArgumentError
from .buffer import Buffer, check_buffer, same_device, wrap
from .checks import check_product, check_u32
from .oom import run_allocating

__all__ = ["spectral_conv2d_rfft_fwd", "spectral_conv2d_rfft_bwd_x", "spectral_conv2d_rfft_bwd_w",
           "spectral_conv3d_rfft_fwd", "spectral_conv3d_rfft_bwd_x", "spectral_conv3d_rfft_bwd_w"]

_AXES = {2: ("h", "wd"), 3: ("d1", "d2", "d3")}


def _dims(op: str, batch: Any, cin: Any, cout: Any, ns: tuple, ms: tuple) -> tuple:
    """(batch, cin, cout, ns, ms, n_x, n_w, n_y), every dim checked."""
    d = len(ns)
    names = _AXES[d]
    b, ci, co = check_u32(op, "batch", batch), check_u32(op, "cin", cin), check_u32(op, "cout", cout)
    ns_ = tuple(check_u32(op, nm, n) for nm, n in zip(names, ns))
    ms_ = tuple(check_u32(op, f"m{j + 1}", m) for j, m in enumerate(ms))
    for j, (nm, n, m) in enumerate(zip(names, ns_, ms_)):
        if n < 1:
            raise ArgumentError(f"{op}: argument {nm} (a transform length) must be >= 1, got {n}")
        if j < d - 1 and not 1 <= m <= n // 2:
            raise ArgumentError(f"{op}: argument m{j + 1} must be in [1, {nm}//2] = [1, {n // 2}] for {nm} = {n} "
                                f"(the corners [0, m{j + 1}) and [{nm} - m{j + 1}, {nm}) must not overlap), got {m}")
        if j == d - 1 and not 1 <= m <= n // 2 + 1:
            raise ArgumentError(f"{op}: argument m{j + 1} must be in [1, {nm}//2 + 1] = [1, {n // 2 + 1}] for "
                                f"{nm} = {n}, got {m}")
    n_x = check_product(op, "batch*cin*" + "*".join(names), b, ci, *ns_)
    n_y = check_product(op, "batch*cout*" + "*".join(names), b, co, *ns_)
    n_w = check_product(op, f"{2 ** (d - 1)}*cin*cout*" + "*".join(f"m{j + 1}" for j in range(d)) + "*2",
                        2 ** (d - 1), ci, co, *ms_, 2)
    return b, ci, co, ns_, ms_, n_x, n_w, n_y


def _run(op: str, kind: str, x: Buffer, w: Buffer, dy: Buffer | None, batch, cin, cout, ns, ms) -> Buffer:
    b, ci, co, ns_, ms_, n_x, n_w, n_y = _dims(op, batch, cin, cout, ns, ms)
    check_buffer(op, "x", x, n_x)
    check_buffer(op, "w", w, n_w)
    if dy is None:
        ctx = same_device(op, x=x, w=w)
        return wrap(ctx, run_allocating(op, ctx, n_y, getattr(ctx.backend, op), x._data, w._data, b, ci, co,
                                        *ns_, *ms_))
    check_buffer(op, "dy", dy, n_y)
    ctx = same_device(op, x=x, w=w, dy=dy)
    n_out = n_x if kind == "bwd_x" else n_w
    return wrap(ctx, run_allocating(op, ctx, n_out, getattr(ctx.backend, op), x._data, w._data, dy._data, b, ci, co,
                                    *ns_, *ms_))


def spectral_conv2d_rfft_fwd(x: Buffer, w: Buffer, batch: int, cin: int, cout: int, h: int, wd: int, m1: int,
                             m2: int) -> Buffer:
    """y (batch, cout, h, wd) = irfft2 of the corner-mixed rfft2(x) (reference SpectralConv2d)."""
    return _run("spectral_conv2d_rfft_fwd", "fwd", x, w, None, batch, cin, cout, (h, wd), (m1, m2))


def spectral_conv2d_rfft_bwd_x(x: Buffer, w: Buffer, dy: Buffer, batch: int, cin: int, cout: int, h: int, wd: int,
                               m1: int, m2: int) -> Buffer:
    """dx (batch, cin, h, wd): the VJP of spectral_conv2d_rfft_fwd wrt x."""
    return _run("spectral_conv2d_rfft_bwd_x", "bwd_x", x, w, dy, batch, cin, cout, (h, wd), (m1, m2))


def spectral_conv2d_rfft_bwd_w(x: Buffer, w: Buffer, dy: Buffer, batch: int, cin: int, cout: int, h: int, wd: int,
                               m1: int, m2: int) -> Buffer:
    """dw (2, cin, cout, m1, m2, 2): the VJP wrt both corners' weights, summed over the batch."""
    return _run("spectral_conv2d_rfft_bwd_w", "bwd_w", x, w, dy, batch, cin, cout, (h, wd), (m1, m2))


def spectral_conv3d_rfft_fwd(x: Buffer, w: Buffer, batch: int, cin: int, cout: int, d1: int, d2: int, d3: int,
                             m1: int, m2: int, m3: int) -> Buffer:
    """y (batch, cout, d1, d2, d3) = irfftn of the four-corner-mixed rfftn(x) (reference SpectralConv3d)."""
    return _run("spectral_conv3d_rfft_fwd", "fwd", x, w, None, batch, cin, cout, (d1, d2, d3), (m1, m2, m3))


def spectral_conv3d_rfft_bwd_x(x: Buffer, w: Buffer, dy: Buffer, batch: int, cin: int, cout: int, d1: int, d2: int,
                               d3: int, m1: int, m2: int, m3: int) -> Buffer:
    """dx (batch, cin, d1, d2, d3): the VJP of spectral_conv3d_rfft_fwd wrt x."""
    return _run("spectral_conv3d_rfft_bwd_x", "bwd_x", x, w, dy, batch, cin, cout, (d1, d2, d3), (m1, m2, m3))


def spectral_conv3d_rfft_bwd_w(x: Buffer, w: Buffer, dy: Buffer, batch: int, cin: int, cout: int, d1: int, d2: int,
                               d3: int, m1: int, m2: int, m3: int) -> Buffer:
    """dw (4, cin, cout, m1, m2, m3, 2): the VJP wrt the four corners' weights, summed over the batch."""
    return _run("spectral_conv3d_rfft_bwd_w", "bwd_w", x, w, dy, batch, cin, cout, (d1, d2, d3), (m1, m2, m3))

