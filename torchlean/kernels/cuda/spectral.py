"""CUDA spectral family: cuFFT real transforms and the FNO spectral convolution (cuBLAS GEMMs or cuFFT).

* rfft1d_packed: one cuFFT R2C (Plan1d, cached per (n, type, batch, device)) straight from x into
  the output: the packed (batch, n//2+1, 2) layout is cuFFT's complex half spectrum. n = 1 is a copy.
* irfft1d_packed: cuFFT C2R overwrites its input, so the spectrum is copied first; the copy kernel
  also applies 1/n (folded where it costs nothing) and zeroes the imaginary parts of bin 0 and
  (even n) bin n/2, which the convention ignores. Then one C2R into the output.
* spectral convolution, route "dft" (default for modes <= 64 and a basis of at most 64 MiB): the
  truncated DFT as strided-batched SGEMMs with a cached float32 basis per (grid, modes, device):
      X[b] = Bf (2 modes, grid) @ x[b]           one GEMM, batch = samples, Bf shared (stride 0)
      Y_k  = [Xr_k | Xi_k] (batch, 2 width) @ [[w_re, w_im], [-w_im, w_re]]_k   one GEMM over modes
      y[b] = Bi (grid, 2 modes) @ Y[b]           one GEMM
  Bf rows 2k, 2k+1 are cos and -sin, so a mode's [Re X | Im X] is one contiguous 2 width row and the
  mixing reads X in place (row stride 2 modes width); Bi holds (c_k/grid) cos and -(c_k/grid) sin
  with the sin exactly 0 at bins 0 and grid/2 (their imaginary parts are ignored). Nothing of the
  full half spectrum is ever materialized: x is read once, y written once, the intermediates are
  batch * 2 modes * width floats. At the benchmark size (32, 1024, 64, 16) that is 0.27 GFLOP in
  three GEMMs plus one tiny kernel (the block weights).
  Backward: dx = Bf^T ((Bi^T dy) W^T) (the same three GEMMs with transpose flags), and the weight
  gradient P_k = [Xr Xi]_k^T [dYr dYi]_k (one GEMM over modes, the batch sum inside cuBLAS in a
  fixed order: no atomics), combined by tl_spectral_conv1d_rfft_bwd_w_combine into dw_re = P00 + P11,
  dw_im = P01 - P10.
* route "fft" (many modes, or forced): cupy.fft rfft along grid, a complex batched matmul
  (cuBLAS CGEMM) over the retained modes, a zero-filled half spectrum, irfft.
``CONV_ROUTE`` = "auto", "dft" or "fft" picks the route (the GPU benchmark times both).
"""

from __future__ import annotations

import cupy
import numpy as np

from ..caches import ByteLRU, register
from .launch import BLOCK, F32, I64, empty, grid_for, kernel

__all__ = ["rfft1d_packed", "irfft1d_packed", "spectral_conv1d_rfft_fwd", "spectral_conv1d_rfft_bwd_x",
           "spectral_conv1d_rfft_bwd_wre", "spectral_conv1d_rfft_bwd_wim", "spectral_conv1d_rfft_bwd_w"]

_FILE = "spectral.cu"
CONV_ROUTE = "auto"
_DFT_MAX_MODES = 64
_BASIS_MAX_BYTES = 64 << 20
_PLAN_CACHE_MAX = 64
_R2C, _C2R = 0x2A, 0x2C  # cufftType CUFFT_R2C, CUFFT_C2R
_FORWARD, _INVERSE = -1, 1

_plans: dict = {}
# float32 DFT bases per (grid, modes, device), bounded by bytes, reported as cached and dropped by
# collect_allocator(True) (kernels/caches.py), as the plans' work areas are
_bases_dev = ByteLRU("cuda", 128 << 20, max_entries=32)


def _plan_bytes(device=None) -> int:
    """The device bytes the cached plans' work areas hold (CuPy allocates them from its pool)."""
    total = 0
    for key, plan in list(_plans.items()):
        if device is None or key[3] == device:
            mem = getattr(getattr(plan, "work_area", None), "mem", None)
            total += int(getattr(mem, "size", 0) or 0)
    return total


def _clear_plans() -> int:
    """Drop the current device's plans (after the work queued on it: a plan may still be running)."""
    dev = cupy.cuda.runtime.getDevice()
    mine = [key for key in list(_plans) if key[3] == dev]
    if not mine:
        return 0
    freed = _plan_bytes(dev)
    cupy.cuda.runtime.deviceSynchronize()
    for key in mine:
        _plans.pop(key, None)
    return freed


register("cuda", _plan_bytes, _clear_plans)


def gemm(a, b, c, m, n, k, lda, ldb, ldc, trans_a=False, trans_b=False, batch=1,
         stride_a=0, stride_b=0, stride_c=0, beta=0.0, name="gemm"):
    # Imported on first use: linalg loads cuBLAS, which needs CUDA libraries absent on CPU-only
    # machines, and this module must import everywhere.
    from .linalg import gemm as _gemm

    return _gemm(a, b, c, m, n, k, lda, ldb, ldc, trans_a, trans_b, batch, stride_a, stride_b, stride_c, beta, name)


def _launch(name: str, n_items: int, args) -> None:
    kernel(_FILE, name)((grid_for(n_items),), (BLOCK,), args)


def _plan(n: int, fft_type: int, batch: int):
    """A cuFFT 1-D plan for (n, type, batch) on the current device, cached (cuFFT plans are costly)."""
    from cupy.cuda import cufft  # imported here: needs libcufft, absent on machines without CUDA

    key = (n, fft_type, batch, cupy.cuda.runtime.getDevice())
    plan = _plans.get(key)
    if plan is None:
        if len(_plans) >= _PLAN_CACHE_MAX:
            _plans.pop(next(iter(_plans)))
        plan = _plans[key] = cufft.Plan1d(n, fft_type, batch)
    return plan


def rfft1d_packed(x, batch, n):
    bins = n // 2 + 1
    if batch == 0:
        return empty(0)
    out = empty(batch * bins * 2)
    if n == 1:  # X_0 = x_0, Im 0
        out2 = out.reshape(batch, 2)
        out2[:, 0] = x
        out2[:, 1] = 0
        return out
    _plan(n, _R2C, batch).fft(x, out, _FORWARD)
    return out


def irfft1d_packed(spec, batch, n):
    bins = n // 2 + 1
    if batch == 0:
        return empty(0)
    if n == 1:  # x_0 = Re X_0
        return spec.reshape(batch, 2)[:, 0].copy()  # a new array (ascontiguousarray would return a
        # one-element view of spec, which then dies and goes back to the free list under it)
    tmp = empty(batch * bins * 2)
    _launch("tl_irfft1d_packed_prep", tmp.size, (spec, tmp, I64(batch), I64(bins), I64(n), F32(1.0 / n)))
    out = empty(batch * n)
    _plan(n, _C2R, batch).fft(tmp, out, _INVERSE)
    return out


# -- spectral convolution --------------------------------------------------------------------------------
def _route(grid: int, modes: int) -> str:
    if CONV_ROUTE != "auto":
        return CONV_ROUTE
    if modes > _DFT_MAX_MODES or 2 * 2 * modes * grid * 4 > _BASIS_MAX_BYTES:
        return "fft"
    return "dft"


def _bases(grid: int, modes: int):
    dev = cupy.cuda.runtime.getDevice()
    key = (grid, modes, dev)
    b = _bases_dev.get(key)
    if b is None:
        from ..spectral_basis import make_bases  # float64 angles, exactly reduced, rounded once

        bf, bi = make_bases(grid, modes)  # (not the CPU's cache: no host copy is kept)
        b = (cupy.asarray(bf).reshape(-1), cupy.asarray(bi).reshape(-1))
        _bases_dev.put(key, b, b[0].nbytes + b[1].nbytes, device=dev)
    return b


def _blocks(w_re, w_im, modes, width):
    wb = empty(modes * 4 * width * width)
    _launch("tl_spectral_conv1d_rfft_weight_blocks", wb.size, (w_re, w_im, wb, I64(modes), I64(width)))
    return wb


def _analysis(basis, v, batch, grid, width, modes, transposed):
    """(batch, 2 modes, width): Bf @ v[b] (transposed=False) or Bi^T @ v[b] (transposed=True)."""
    s = empty(batch * 2 * modes * width)
    lda = 2 * modes if transposed else grid
    return gemm(basis, v, s, 2 * modes, width, grid, lda, width, width, trans_a=transposed, batch=batch,
                stride_a=0, stride_b=grid * width, stride_c=2 * modes * width, name="spectral_conv1d")


def _synthesis(basis, s, batch, grid, width, modes, transposed):
    """(batch, grid, width): Bi @ s[b] (transposed=False) or Bf^T @ s[b] (transposed=True)."""
    y = empty(batch * grid * width)
    lda = grid if transposed else 2 * modes
    return gemm(basis, s, y, grid, width, 2 * modes, lda, width, width, trans_a=transposed, batch=batch,
                stride_a=0, stride_b=2 * modes * width, stride_c=grid * width, name="spectral_conv1d")


def _mix(s, wb, batch, width, modes, transposed):
    """Per mode k: [Yr | Yi]_k (batch, 2 width) = [Xr | Xi]_k @ block_k (or block_k^T), read and
    written in place in the (batch, modes, 2 width) layout."""
    out = empty(batch * 2 * modes * width)
    w2 = 2 * width
    return gemm(s, wb, out, batch, w2, w2, modes * w2, w2, modes * w2, trans_b=transposed, batch=modes,
                stride_a=w2, stride_b=w2 * w2, stride_c=w2, name="spectral_conv1d")


def _zero_edge_imag(spec3, grid):
    """Im of bin 0 and (even grid) bin grid/2 are 0 in exact arithmetic: make them exactly 0."""
    spec3[:, 0].imag = 0
    if grid % 2 == 0 and spec3.shape[1] > grid // 2:
        spec3[:, grid // 2].imag = 0


def _fft_modes(v, batch, grid, width, modes):
    """(modes, batch, width) complex64: the retained bins of every channel's rfft along grid."""
    spec = cupy.fft.rfft(v.reshape(batch, grid, width), axis=1)[:, :modes]
    spec = cupy.ascontiguousarray(spec)
    _zero_edge_imag(spec, grid)
    return cupy.ascontiguousarray(spec.transpose(1, 0, 2))


def _fft_conv(v, w_re, w_im, batch, grid, width, modes, adjoint):
    wc = (w_re.reshape(modes, width, width) + 1j * w_im.reshape(modes, width, width)).astype(cupy.complex64)
    if adjoint:
        wc = cupy.ascontiguousarray(cupy.conj(wc).transpose(0, 2, 1))
    ys = cupy.matmul(_fft_modes(v, batch, grid, width, modes), wc)  # (modes, batch, width)
    full = cupy.zeros((batch, grid // 2 + 1, width), dtype=cupy.complex64)
    full[:, :modes] = ys.transpose(1, 0, 2)
    _zero_edge_imag(full, grid)
    y = cupy.fft.irfft(full, n=grid, axis=1)
    return cupy.ascontiguousarray(y, dtype=cupy.float32).reshape(-1)


def _conv(v, w_re, w_im, batch, grid, width, modes, adjoint):
    n = batch * grid * width
    if n == 0:
        return empty(0)
    if modes == 0:  # no bin kept
        return cupy.zeros(n, dtype=cupy.float32)
    if _route(grid, modes) == "fft":
        return _fft_conv(v, w_re, w_im, batch, grid, width, modes, adjoint)
    bf, bi = _bases(grid, modes)
    wb = _blocks(w_re, w_im, modes, width)
    if not adjoint:
        s = _analysis(bf, v, batch, grid, width, modes, transposed=False)
        ys = _mix(s, wb, batch, width, modes, transposed=False)
        return _synthesis(bi, ys, batch, grid, width, modes, transposed=False)
    s = _analysis(bi, v, batch, grid, width, modes, transposed=True)
    ys = _mix(s, wb, batch, width, modes, transposed=True)
    return _synthesis(bf, ys, batch, grid, width, modes, transposed=True)


def spectral_conv1d_rfft_fwd(x, w_re, w_im, grid, width, modes, batch=1):
    return _conv(x, w_re, w_im, batch, grid, width, modes, adjoint=False)


def spectral_conv1d_rfft_bwd_x(x, w_re, w_im, dy, grid, width, modes, batch=1):
    return _conv(dy, w_re, w_im, batch, grid, width, modes, adjoint=True)


def spectral_conv1d_rfft_bwd_w(x, w_re, w_im, dy, grid, width, modes, batch=1):
    n_w = modes * width * width
    if n_w == 0:
        return empty(0), empty(0)
    if batch * grid == 0:
        return cupy.zeros(n_w, dtype=cupy.float32), cupy.zeros(n_w, dtype=cupy.float32)
    if _route(grid, modes) == "fft":
        xs = _fft_modes(x, batch, grid, width, modes)   # (modes, batch, width)
        gs = _fft_modes(dy, batch, grid, width, modes)
        k = np.arange(modes)
        ck = cupy.asarray((np.where((k == 0) | (2 * k == grid), 1.0, 2.0) / grid).astype(np.float32))
        p = cupy.matmul(cupy.conj(xs).transpose(0, 2, 1), gs) * ck[:, None, None]
        return (cupy.ascontiguousarray(p.real, dtype=cupy.float32).reshape(-1),
                cupy.ascontiguousarray(p.imag, dtype=cupy.float32).reshape(-1))
    bf, bi = _bases(grid, modes)
    xs = _analysis(bf, x, batch, grid, width, modes, transposed=False)   # (batch, modes, 2 width)
    gs = _analysis(bi, dy, batch, grid, width, modes, transposed=True)   # (c_k/grid) rfft(dy), same layout
    w2 = 2 * width
    p = empty(modes * w2 * w2)
    # P_k (2w, 2w) = Xs_k^T (2w, batch) @ Gs_k (batch, 2w): the sum over the batch inside the GEMM
    gemm(xs, gs, p, w2, w2, batch, modes * w2, modes * w2, w2, trans_a=True, batch=modes, stride_a=w2,
         stride_b=w2, stride_c=w2 * w2, name="spectral_conv1d_rfft_bwd_w")
    dwr, dwi = empty(n_w), empty(n_w)
    _launch("tl_spectral_conv1d_rfft_bwd_w_combine", n_w, (p, dwr, dwi, I64(modes), I64(width)))
    return dwr, dwi


def spectral_conv1d_rfft_bwd_wre(x, w_re, w_im, dy, grid, width, modes, batch=1):
    return spectral_conv1d_rfft_bwd_w(x, w_re, w_im, dy, grid, width, modes, batch)[0]


def spectral_conv1d_rfft_bwd_wim(x, w_re, w_im, dy, grid, width, modes, batch=1):
    return spectral_conv1d_rfft_bwd_w(x, w_re, w_im, dy, grid, width, modes, batch)[1]
