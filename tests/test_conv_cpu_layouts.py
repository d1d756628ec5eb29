"""The 2-D CPU conv's input layouts and GEMM slicing: a strided conv read through its input's phase
planes builds the same column matrix as the direct gather; GEMMs with a short inner dimension run as
column slices with the bits of one call; and the layers these paths serve (ResNet's 16-channel 3x3
layers, DCGAN's strided 4x4 layers and its first transposed conv from a 1x1 input) give the same bits
on 1 and 2 Numba threads."""

from __future__ import annotations

import math
import sys

import numba
import numpy as np
import pytest

import torchlean.kernels.cpu  # noqa: F401  (the backend's modules, by name below)
from torchlean.kernels import cpu as cpu_backend
from torchlean.kernels.plans import conv_plan_of, conv_transpose_plan_of

CPU_CONV = sys.modules["torchlean.kernels.cpu.conv"]
CPU_PARALLEL = sys.modules["torchlean.kernels.cpu.parallel"]
F32 = np.float32

# (batch, in_c, spatial, kernel, stride, padding): output = input / stride on every axis
_PHASED = [
    (3, 5, (32, 32), (4, 4), (2, 2), (1, 1)),   # DCGAN's discriminator layers
    (2, 4, (16, 16), (3, 3), (2, 2), (1, 1)),   # ResNet's downsampling 3x3
    (2, 3, (8, 12), (2, 2), (2, 2), (0, 0)),    # disjoint windows, no padding
    (2, 3, (12, 10), (3, 3), (2, 1), (1, 1)),   # strided on one axis only
    (1, 2, (9, 9), (5, 5), (3, 3), (1, 1)),     # stride 3
    (2, 3, (32, 34), (3, 3), (2, 2), (1, 1)),   # non-square, 16 x 17 outputs
    (2, 3, (16, 40), (3, 3), (2, 1), (1, 1)),   # one strided axis, 8 x 40 outputs
]


def _reference_cols(x4, kernel, stride, padding, out):
    """(C*K, batch*P): rows (channel, ky, kx), columns (image, position), zero outside the image."""
    n, c = x4.shape[:2]
    (kh, kw), (sh, sw), (ph, pw), (oh, ow) = kernel, stride, padding, out
    xp = np.zeros((n, c, x4.shape[2] + 2 * ph + kh, x4.shape[3] + 2 * pw + kw), F32)
    xp[:, :, ph:ph + x4.shape[2], pw:pw + x4.shape[3]] = x4
    col = np.empty((c, kh, kw, n, oh, ow), F32)
    for ky in range(kh):
        for kx in range(kw):
            col[:, ky, kx] = xp[:, :, ky:ky + sh * oh:sh, kx:kx + sw * ow:sw].transpose(1, 0, 2, 3)
    return col.reshape(c * kh * kw, n * oh * ow)


@pytest.mark.parametrize("dims", _PHASED)
def test_phase_planes_give_the_gathered_columns(dims):
    """_im2col_rows reading the phase layout writes exactly the column matrix of the direct gather
    (every tap's value, zeros where it falls in the padding), for every image and channel range."""
    n, c, spatial, kernel, stride, padding = dims
    out = tuple((s + 2 * p - k) // t + 1 for s, k, t, p in zip(spatial, kernel, stride, padding))
    assert CPU_CONV._phased_py(spatial, kernel, stride, out)
    x = np.random.default_rng(sum(spatial) + c).standard_normal(n * c * math.prod(spatial)).astype(F32)
    xs = CPU_CONV._phase_input(x, n, c, spatial, kernel, stride, out)
    assert xs is not x
    ref = _reference_cols(x.reshape((n, c) + spatial), kernel, stride, padding, out)
    p_n, k_n = math.prod(out), math.prod(kernel)
    col = np.full(c * k_n * n * p_n, np.nan, F32)
    CPU_CONV._im2col_rows(xs, 0, n, 0, c, c, *spatial, col, p_n, n * p_n, *kernel, *stride, *padding, *out)
    assert col.tobytes() == ref.reshape(-1).tobytes()
    # a part: images 1:n, channels 1:c, into its own (rows, images * P) matrix
    part = np.full((c - 1) * k_n * (n - 1) * p_n, np.nan, F32)
    CPU_CONV._im2col_rows(xs, 1, n, 1, c, c, *spatial, part, p_n, (n - 1) * p_n, *kernel, *stride, *padding, *out)
    want = ref.reshape(c, k_n, n, p_n)[1:, :, 1:].reshape(-1)
    assert part.tobytes() == want.tobytes()


@pytest.mark.parametrize("dims", [d for d in _PHASED if d[2][0] * d[2][1] // (d[4][0] * d[4][1]) >= 256])
def test_phase_planes_give_the_scattered_input_gradient(dims):
    """_col2im2d on phase planes (merged back by _phase_output) gives the bits of adding every tap's
    slice of dcol, from +0, in row-major order of (ky, kx), taps in the padding dropped."""
    n, c, spatial, kernel, stride, padding = dims
    out = tuple((s + 2 * p - k) // t + 1 for s, k, t, p in zip(spatial, kernel, stride, padding))
    assert CPU_CONV._phased_dx_py(spatial, kernel, stride, out)
    p_n, k_n = math.prod(out), math.prod(kernel)
    (kh, kw), (sh, sw), (ph, pw), (oh, ow) = kernel, stride, padding, out
    dcol = np.random.default_rng(c).standard_normal((c, k_n, n, p_n)).astype(F32)
    dcol[0, 0, 0, :3] = -0.0  # a -0 term: the sum starts from +0 either way
    margin = CPU_CONV._phase_margin(kernel, stride, padding, out)
    buf = np.concatenate([np.full(margin, np.nan, F32), dcol.reshape(-1), np.full(margin, np.nan, F32)])
    dxs = np.empty(n * c * math.prod(spatial), F32)
    CPU_CONV._col2im2d(buf, dxs, 0, n, 0, c, c, *spatial, *kernel, *stride, *padding, *out, p_n, n * p_n, margin)
    got = CPU_CONV._phase_output(dxs, n, c, spatial, stride)
    ref = np.zeros((n, c, spatial[0] + 2 * ph + kh, spatial[1] + 2 * pw + kw), F32)
    taps = dcol.reshape(c, kh, kw, n, oh, ow)
    for ky in range(kh):
        for kx in range(kw):
            ref[:, :, ky:ky + sh * oh:sh, kx:kx + sw * ow:sw] += taps[:, ky, kx].transpose(1, 0, 2, 3)
    ref = np.ascontiguousarray(ref[:, :, ph:ph + spatial[0], pw:pw + spatial[1]])
    assert got.tobytes() == ref.reshape(-1).tobytes()


def test_phase_layout_only_where_every_phase_is_read():
    """A 1x1 stride-2 conv reads one phase of four: it keeps the direct gather (no split copy)."""
    assert not CPU_CONV._phased_py((8, 8), (1, 1), (2, 2), (4, 4))
    assert not CPU_CONV._phased_py((9, 9), (3, 3), (2, 2), (5, 5))  # odd size: output is not input / 2
    assert not CPU_CONV._phased_py((8, 8), (3, 3), (1, 1), (8, 8))  # stride 1: the shifted runs already
    x = np.ones(2 * 3 * 64, F32)
    assert CPU_CONV._phase_input(x, 2, 3, (8, 8), (1, 1), (2, 2), (4, 4)) is x


@pytest.mark.parametrize("dims", [(4, 16, 16, (32, 32), (3, 3), (1, 1), (1, 1)),
                                  (2, 3, 16, (32, 32), (3, 3), (1, 1), (1, 1))])
def test_short_inner_dimension_slices_give_one_gemms_bits(dims):
    """conv with K = C*9 <= _NARROW_K over 1024 positions runs column slices: each image's output is
    np.matmul(W, col) of the whole image (one sgemm in NumPy) within the contract's bound,
    gamma(K) (|W| @ |col|) (bit for bit on AVX-512 OpenBLAS; on AVX2 kernels a GEMM's bits depend
    on how its columns are sliced)."""
    n, ci, co, sp, kn, st, pd = dims
    plan = conv_plan_of(*dims)
    assert ci * math.prod(kn) <= CPU_CONV._NARROW_K and math.prod(plan.out) > 2 * CPU_CONV._COL_SLICE
    rng = np.random.default_rng(ci)
    x = rng.standard_normal(n * ci * math.prod(sp)).astype(F32)
    w = rng.standard_normal(co * ci * math.prod(kn)).astype(F32)
    y = cpu_backend.conv(x, w, None, plan).reshape(n, co, -1)
    col = _reference_cols(x.reshape((n, ci) + sp), kn, st, pd, plan.out).reshape(ci * math.prod(kn), n, -1)
    k = ci * math.prod(kn)
    gamma = k * 2.0 ** -24 / (1 - k * 2.0 ** -24)
    for i in range(n):
        ci_ = np.ascontiguousarray(col[:, i])
        ref = np.matmul(w.reshape(co, -1).astype(np.float64), ci_.astype(np.float64))
        bound = 2 * gamma * np.matmul(np.abs(w.reshape(co, -1)).astype(np.float64), np.abs(ci_).astype(np.float64))
        assert np.all(np.abs(y[i] - ref) <= bound + 1e-30)


# ResNet-18's first stage at batch 8 (K = 144 and, for the input gradient, 16), DCGAN's 16 -> 32
# strided layer and its generator's first transposed conv (a 1x1 input)
_LAYERS = [(8, 16, 16, (32, 32), (3, 3), (1, 1), (1, 1)), (8, 16, 32, (32, 32), (4, 4), (2, 2), (1, 1)),
           (8, 128, 100, (4, 4), (4, 4), (1, 1), (0, 0))]


@pytest.mark.parametrize("dims", _LAYERS)
def test_sliced_and_phased_layers_same_bits_on_1_and_2_threads(dims):
    if CPU_PARALLEL.max_threads() < 2:
        pytest.skip("Numba runs one thread here (NUMBA_NUM_THREADS=1 or the workqueue layer)")
    n, ci, co, sp, kn, st, pd = dims
    plan = conv_plan_of(*dims)
    tplan = conv_transpose_plan_of(n, co, ci, plan.out, kn, st, pd, tuple(0 for _ in st))
    rng = np.random.default_rng(co)
    x = rng.standard_normal(n * ci * math.prod(sp)).astype(F32)
    w = rng.standard_normal(co * ci * math.prod(kn)).astype(F32)
    dy = rng.standard_normal(n * co * math.prod(plan.out)).astype(F32)

    def run():
        return [cpu_backend.conv(x, w, None, plan), cpu_backend.conv_bwd_input(dy, w, plan),
                cpu_backend.conv_bwd_weight(x, dy, plan), cpu_backend.conv_transpose(dy, w, None, tplan)]

    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = run()
        numba.set_num_threads(2)
        two = run()
    finally:
        numba.set_num_threads(before)
    for name, a, e in zip(("conv", "conv_bwd_input", "conv_bwd_weight", "conv_transpose"), two, one):
        assert a.tobytes() == e.tobytes(), f"{name} {dims}: 2 threads differ from 1"
