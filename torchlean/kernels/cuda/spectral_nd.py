"""CUDA 2-D/3-D FNO spectral convolutions: the truncated DFT as cuBLAS SGEMMs around one mixing kernel.

Why GEMMs and not cuFFT (the layout and the stage matrices: kernels/spectral_nd_basis.py). An FNO
keeps few modes: at the reference sizes 2 m1 x m2 = 24 x 12 of 64 x 33 bins (2-D) and
16 x 16 x 8 of 64 x 64 x 21 (3-D), 4-14 % of the half spectrum. The cuFFT route (torch's) transforms
every bin, writes the whole complex half spectrum (the size of x, 8 bytes a bin), zero-fills a
second one and transforms it back: 5 full passes over memory plus the FFTs' internal passes, and
the NumPy-semantics inverse needs a C2C pass and a C2R pass with a copy between. The truncated DFT
reads x once and writes y once; in between only the kept modes live: the first stage (the last
axis, a (rows, n) @ (n, 2 m) GEMM) shrinks the data by n / 2m (64 -> 24, 40 -> 16), and the later
stages work on that. Per forward: 2-D one GEMM over the rows, one batched GEMM (2 m1*2, 2 h) per
(b, c), the mixing kernel, and their mirror images (5 launches, ~0.5 GFLOP, 4 MB of
intermediates against torch's 2 x 11 MB spectra); 3-D three stages each way (7 launches). Peak
memory is the output plus the first stage's (rows, 2 m) intermediate, below torch's (x-sized complex
spectra). Backward: dx is the same walk with the transposed matrices (5/7 launches); dw analyses x
and dy (the stages only) and one kernel sums conj(X) dY over the batch per mode, straight into the
weights' corner layout. Every sum runs in a fixed order (cuBLAS without split-K atomics, the
kernels' loops): bitwise repeatable. TF32 follows kernels.flags.allow_tf32() as every GEMM does.
"""

from __future__ import annotations

import math

import cupy
import numpy as np

from ..caches import ByteLRU
from ..spectral_nd_basis import analysis, kept_counts, make_bases, synthesis
from .launch import BLOCK, I64, empty, grid_for, kernel

__all__ = ["spectral_conv2d_rfft_fwd", "spectral_conv2d_rfft_bwd_x", "spectral_conv2d_rfft_bwd_w",
           "spectral_conv3d_rfft_fwd", "spectral_conv3d_rfft_bwd_x", "spectral_conv3d_rfft_bwd_w"]

_FILE = "spectral_nd.cu"
# the stage matrices per (ns, ms, device): a few hundred KiB each; reported as cached and dropped by
# collect_allocator(True) (kernels/caches.py)
_bases_dev = ByteLRU("cuda", 64 << 20, max_entries=32)


def gemm(a, b, c, m, n, k, lda, ldb, ldc, trans_a=False, trans_b=False, batch=1, stride_a=0, stride_b=0,
         stride_c=0, name="spectral_conv_nd"):
    # Imported on first use, as in spectral.py: linalg loads cuBLAS (absent on CPU-only machines).
    from .linalg import gemm as _gemm

    return _gemm(a, b, c, m, n, k, lda, ldb, ldc, trans_a, trans_b, batch, stride_a, stride_b, stride_c, 0.0, name)


def _bases(ns, ms):
    dev = cupy.cuda.runtime.getDevice()
    key = (ns, ms, dev)
    hit = _bases_dev.get(key)
    if hit is None:
        host = make_bases(ns, ms)
        hit = type(host)(*(tuple(cupy.asarray(a) for a in group) for group in host))
        _bases_dev.put(key, hit, sum(a.nbytes for group in hit for a in group), device=dev)
    return hit


def _real_mm(v, basis, p, q):
    """(p, r) = v (p, q) @ basis^T, basis (r, q) row-major."""
    r = basis.shape[0]
    out = empty(p * r)
    return gemm(v, basis, out, p, r, q, q, q, r, trans_b=True)


def _batched_mm(basis, v, outer, q, inner):
    """(outer, r, inner): basis (r, q) @ v[o] (q, inner) for every o (the basis shared: stride 0)."""
    r = basis.shape[0]
    out = empty(outer * r * inner)
    return gemm(basis, v, out, r, inner, q, q, inner, inner, batch=outer, stride_a=0, stride_b=q * inner,
                stride_c=r * inner)


def _mode_args(ms):
    """(m1, m2, m3, corner2) for the kernels: 2-D is (k1: two corners, k2: the last axis, k3 = 1)."""
    if len(ms) == 2:
        return I64(ms[0]), I64(ms[1]), I64(1), np.int32(0)
    return I64(ms[0]), I64(ms[1]), I64(ms[2]), np.int32(1)


def _zeros(n):
    """A free-list array of n zeros (an empty sum: no channel or no sample)."""
    out = empty(n)
    out.fill(0)
    return out


def _launch(name, n_items, args):
    kernel(_FILE, name)((grid_for(n_items),), (BLOCK,), args)


def _fwd(x, w, batch, cin, cout, ns, ms):
    n_out = batch * cout * math.prod(ns)
    if n_out == 0:
        return empty(0)
    if cin == 0:
        return _zeros(n_out)
    bs, ks = _bases(ns, ms), kept_counts(ms)
    modes = math.prod(ks)
    s = analysis(x, batch * cin, ns, ks, bs.ana[-1], bs.ana, _real_mm, _batched_mm)
    ys = empty(batch * cout * 2 * modes)
    _launch("tl_spectral_conv_nd_rfft_mix", batch * cout * modes,
            (s, w, ys, I64(batch), I64(cin), I64(cout), *_mode_args(ms)))
    del s
    return synthesis(ys, batch * cout, ns, ks, bs.syn, bs.syn[-1], _real_mm, _batched_mm)


def _bwd_x(x, w, dy, batch, cin, cout, ns, ms):
    n_out = batch * cin * math.prod(ns)
    if n_out == 0:
        return empty(0)
    if cout == 0:
        return _zeros(n_out)
    bs, ks = _bases(ns, ms), kept_counts(ms)
    modes = math.prod(ks)
    g = analysis(dy, batch * cout, ns, ks, bs.syn_t[-1], bs.syn_t, _real_mm, _batched_mm)  # T^H dy
    dxs = empty(batch * cin * 2 * modes)
    _launch("tl_spectral_conv_nd_rfft_mix_adjoint", batch * cin * modes,
            (g, w, dxs, I64(batch), I64(cin), I64(cout), *_mode_args(ms)))
    del g
    return synthesis(dxs, batch * cin, ns, ks, bs.ana_t, bs.ana_t[-1], _real_mm, _batched_mm)  # Re(E^H dX)


def _bwd_w(x, w, dy, batch, cin, cout, ns, ms):
    n_w = 2 ** (len(ms) - 1) * cin * cout * math.prod(ms) * 2
    if n_w == 0:
        return empty(0)
    if batch == 0:
        return _zeros(n_w)
    bs, ks = _bases(ns, ms), kept_counts(ms)
    xs = analysis(x, batch * cin, ns, ks, bs.ana[-1], bs.ana, _real_mm, _batched_mm)
    gs = analysis(dy, batch * cout, ns, ks, bs.syn_t[-1], bs.syn_t, _real_mm, _batched_mm)
    dw = empty(n_w)
    _launch("tl_spectral_conv_nd_rfft_bwd_w", n_w // 2, (xs, gs, dw, I64(batch), I64(cin), I64(cout), *_mode_args(ms)))
    return dw


def spectral_conv2d_rfft_fwd(x, w, batch, cin, cout, h, wd, m1, m2):
    return _fwd(x, w, batch, cin, cout, (h, wd), (m1, m2))


def spectral_conv2d_rfft_bwd_x(x, w, dy, batch, cin, cout, h, wd, m1, m2):
    return _bwd_x(x, w, dy, batch, cin, cout, (h, wd), (m1, m2))


def spectral_conv2d_rfft_bwd_w(x, w, dy, batch, cin, cout, h, wd, m1, m2):
    return _bwd_w(x, w, dy, batch, cin, cout, (h, wd), (m1, m2))


def spectral_conv3d_rfft_fwd(x, w, batch, cin, cout, d1, d2, d3, m1, m2, m3):
    return _fwd(x, w, batch, cin, cout, (d1, d2, d3), (m1, m2, m3))


def spectral_conv3d_rfft_bwd_x(x, w, dy, batch, cin, cout, d1, d2, d3, m1, m2, m3):
    return _bwd_x(x, w, dy, batch, cin, cout, (d1, d2, d3), (m1, m2, m3))


def spectral_conv3d_rfft_bwd_w(x, w, dy, batch, cin, cout, d1, d2, d3, m1, m2, m3):
    return _bwd_w(x, w, dy, batch, cin, cout, (d1, d2, d3), (m1, m2, m3))
