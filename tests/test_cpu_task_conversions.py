"""The CPU kernels that run as tasks (tasks.py) since the cold-start work: pool's 2x2 / stride 2
kernels, layout's outer sum, elementwise's split kernels and conv's im2col / col2im give, on 1 and
2 Numba threads, the bits of the serial njit kernels they wrap (the kernels that ran before, called
directly), on random inputs with NaN, +-inf and -0."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import torchlean.kernels.cpu  # noqa: F401  (the backend's modules, by name below)

POOL = sys.modules["torchlean.kernels.cpu.pool"]
LAYOUT = sys.modules["torchlean.kernels.cpu.layout"]
EW = sys.modules["torchlean.kernels.cpu.elementwise"]
CONV = sys.modules["torchlean.kernels.cpu.conv"]
F32 = np.float32


def _specials(rng, n):
    x = rng.standard_normal(n).astype(F32)
    idx = rng.choice(n, size=max(1, n // 7), replace=False)
    x[idx] = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, -np.nan], F32)[rng.integers(0, 6, idx.size)]
    return x


@pytest.mark.parametrize("spatial", [(16, 16), (7, 10), (9, 8), (5, 7)])
@pytest.mark.parametrize("parts", [1, 3, 64])
def test_max22_task_matches_the_serial_kernels(numba_threads, spatial, parts):
    h, w = spatial
    oh, ow = h // 2, w // 2
    planes = 64
    rng = np.random.default_rng(h * w + parts)
    x = _specials(rng, planes * h * w)
    dy = _specials(rng, planes * oh * ow)
    y0 = np.full(planes * oh * ow, 7, F32)
    d0 = np.full(x.size, 7, F32)
    (POOL._max22e_rows if w % 2 == 0 else POOL._max22_rows)(x, y0, 0, planes, h, w, oh, ow)
    (POOL._max22e_bwd if w % 2 == 0 else POOL._max22_bwd)(x, dy, d0, 0, planes, h, w, oh, ow)
    y1, d1 = np.full_like(y0, 5), np.full_like(d0, 5)
    POOL._max22_run(False, x, y1, y1, planes, parts, h, w, oh, ow)
    POOL._max22_run(True, x, dy, d1, planes, parts, h, w, oh, ow)
    assert y1.tobytes() == y0.tobytes()
    assert d1.tobytes() == d0.tobytes()


@pytest.mark.parametrize("dims", [(3, 40, 5), (2, 7, 3000), (5, 600, 33), (1, 9, 16)])
@pytest.mark.parametrize("parts", [2, 5])
def test_sum_outer_task_matches_the_serial_kernel(numba_threads, dims, parts):
    na, nk, nc = dims
    d = _specials(np.random.default_rng(na * nk * nc), na * nk * nc)
    groups = -(-nk // max(1, LAYOUT._CHUNK // nc))
    want = np.full(nk, 7, F32)
    LAYOUT._sum_outer_groups(d, na, nk, nc, want, 0, groups)
    got = np.full(nk, 5, F32)
    LAYOUT._sum_outer_par(d, na, nk, nc, got, groups, min(parts, groups))
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("parts", [2, 3])
def test_elementwise_tasks_match_the_range_kernels(numba_threads, parts):
    rng = np.random.default_rng(parts)
    n = 10007
    a, b = _specials(rng, n), _specials(rng, n)
    for op in range(8):
        for c in (F32(0.5), F32(-np.inf), F32(np.nan)):
            want, got = np.empty(n, F32), np.empty(n, F32)
            EW._unary_range(op, a, c, want)
            EW._unary_par(op, a, c, got, parts)
            assert got.tobytes() == want.tobytes(), (op, c)
    for op in range(9):
        for c in (F32(-1.5), F32(np.inf)):
            want, got = np.empty(n, F32), np.empty(n, F32)
            EW._binary_range(op, a, b, c, want)
            EW._binary_par(op, a, b, c, got, parts)
            assert got.tobytes() == want.tobytes(), (op, c)


# (batch, channels, spatial, kernel, stride, padding): the stride-1 same-pitch case, the phase layout
# (stride 2) and the general walk (stride 3, odd sizes)
_GEOMS = [(3, 4, (8, 8), (3, 3), (1, 1), (1, 1)), (2, 3, (16, 16), (4, 4), (2, 2), (1, 1)),
          (2, 2, (9, 7), (3, 2), (3, 2), (1, 0)), (2, 3, (6, 5), (2, 2), (1, 1), (0, 1))]


def _run_im2col(x, n0, n1, c0, c1, c_n, h, w, col, sn, sr, kh, kw, sh, sw, ph, pw, oh_n, ow_n):
    words = CONV.tasks.pack(x, x.size, n0, n1, c0, c1, c_n, h, w, col, col.size, sn, sr, kh, kw, sh, sw, ph, pw, oh_n,
                            ow_n)
    CONV.tasks.run(CONV._im2col_task(h, w, kh, kw, sh, sw, oh_n, ow_n), words, 1)


def _run_col2im(dcol, dx, n0, n1, c0, c1, c_n, h, w, kh, kw, sh, sw, ph, pw, oh_n, ow_n, sn, sr, margin):
    words = CONV.tasks.pack(dcol, dcol.size, dx, dx.size, n0, n1, c0, c1, c_n, h, w, kh, kw, sh, sw, ph, pw, oh_n, ow_n,
                            sn, sr, margin)
    CONV.tasks.run(CONV._col2im_task(h, w, kh, kw, sh, sw, oh_n, ow_n), words, 1)


@pytest.mark.parametrize("geom", _GEOMS)
def test_im2col_and_col2im_tasks_match_the_njit_bodies(numba_threads, geom):
    """Each geometry's branch task (the conv tasks call it through its address) against the whole body
    as an njit function (_im2col_rows / _col2im2d, the np.matmul paths' kernels)."""
    n, c, (h, w), (kh, kw), (sh, sw), (ph, pw) = geom
    oh, ow = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    p_n = oh * ow
    rng = np.random.default_rng(h * w + kh)
    x = CONV._phase_input(_specials(rng, n * c * h * w), n, c, (h, w), (kh, kw), (sh, sw), (oh, ow))
    for n0, n1, c0, c1 in [(0, n, 0, c), (1, n, 1, c)]:
        size = (n1 - n0) * (c1 - c0) * kh * kw * p_n
        want, got = np.full(size, 7, F32), np.full(size, 5, F32)
        args = (n0, n1, c0, c1, c, h, w)
        geo = (p_n, (n1 - n0) * p_n, kh, kw, sh, sw, ph, pw, oh, ow)
        CONV._im2col_rows(x, *args, want, *geo)
        _run_im2col(x, *args, got, *geo)
        assert got.tobytes() == want.tobytes()
        bias = np.full(size + (n1 - n0) * p_n, 5, F32)
        if (n0, c0) == (0, 0):
            CONV._block_cols(x, n0, n1, bias, c, h, w, kh, kw, sh, sw, ph, pw, oh, ow, 1)
            assert bias[:size].tobytes() == want.tobytes() and (bias[size:] == 1).all()
        margin = max(CONV._col2im_margin(h, w, kh, kw, ph, pw, oh, ow), CONV._phase_margin((kh, kw), (sh, sw),
                                                                                             (ph, pw), (oh, ow)))
        dcol = _specials(rng, size + 2 * margin)
        want, got = np.full(n * c * h * w, 7, F32), np.full(n * c * h * w, 7, F32)
        CONV._col2im2d(dcol, want, *args, kh, kw, sh, sw, ph, pw, oh, ow, p_n, (n1 - n0) * p_n, margin)
        _run_col2im(dcol, got, *args, kh, kw, sh, sw, ph, pw, oh, ow, p_n, (n1 - n0) * p_n, margin)
        assert got.tobytes() == want.tobytes()
