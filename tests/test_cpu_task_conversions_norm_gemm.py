"""The norm, GEMM and GELU kernels that run as tasks (tasks.py) since the cold-start work give, on 1
and 2 Numba threads, the bits of the njit kernels they wrap (called directly, as the serial paths
did before), on random inputs with NaN, +-inf and -0: batch norm (training, backward, inference),
layer norm and its backward, the GEMM items, the GELUs and their backward passes."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from numba import njit

import torchlean.kernels.cpu  # noqa: F401  (the backend's modules, by name below)

NORM = sys.modules["torchlean.kernels.cpu.norm"]
GEMM = sys.modules["torchlean.kernels.cpu.gemm"]
CLS = sys.modules["torchlean.kernels.cpu.classify"]
PAR = sys.modules["torchlean.kernels.cpu.parallel"]
F32 = np.float32


def _specials(rng, n, every=7):
    x = rng.standard_normal(n).astype(F32)
    idx = rng.choice(n, size=max(1, n // every), replace=False)
    x[idx] = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, -np.nan], F32)[rng.integers(0, 6, idx.size)]
    x[rng.integers(0, n)] = np.array([0x7FC12345], np.uint32).view(F32)[0]  # a NaN with a payload
    return x


def _same(got, want):
    """Equal bits, NaNs compared by position only: the sign of a NaN made by an invalid operation
    (inf - inf) is not fixed even for the kernels before the change (it was seen to differ between a
    process that compiled a kernel and one that loaded it from Numba's cache), and the two sides here
    may be compiled in either state."""
    g, w = np.asarray(got, F32).ravel(), np.asarray(want, F32).ravel()
    assert g.shape == w.shape
    gn, wn = np.isnan(g), np.isnan(w)
    assert np.array_equal(gn, wn), np.nonzero(gn != wn)[0][:8]
    assert g[~gn].tobytes() == w[~wn].tobytes()


# (batch, channels, inner): below and above the size that parallel.parts splits over 2 threads
_BN = [(2, 3, 5), (8, 16, 1024), (3, 40, 700)]


@pytest.mark.parametrize("dims", _BN)
@pytest.mark.parametrize("affine", [(True, True), (False, False), (True, False), (False, True)])
def test_batch_norm_tasks_match_the_channel_kernels(numba_threads, dims, affine):
    b, c, inner = dims
    rng = np.random.default_rng(b * c * inner + 2 * affine[0] + affine[1])
    x, dy = _specials(rng, b * c * inner), _specials(rng, b * c * inner)
    g, be = (_specials(rng, c, 3) if affine[0] else None), (_specials(rng, c, 3) if affine[1] else None)
    m2, v2 = _specials(rng, c, 4), np.abs(_specials(rng, c, 4))
    gg, bb = (NORM._ONE if g is None else g), (NORM._ONE if be is None else be)
    shape = (b, c, inner)

    y, mean, var = NORM.batch_norm(x, g, be, b, c, inner, 1e-5)
    y0, mean0, var0 = np.full(x.size, 7, F32), np.full(c, 7, F32), np.full(c, 7, F32)
    NORM._bn_serial(x.reshape(shape), gg, bb, g is not None, be is not None, 1e-5, y0.reshape(shape), mean0, var0)
    for got, want in ((y, y0), (mean, mean0), (var, var0)):
        _same(got, want)

    dx, dg, db = NORM.batch_norm_bwd(x, g, m2, v2, dy, b, c, inner, 1e-5)
    dx0, dg0, db0 = np.full(x.size, 7, F32), np.full(c, 7, F32), np.full(c, 7, F32)
    NORM._bn_bwd_serial(x.reshape(shape), gg, g is not None, m2, v2, dy.reshape(shape), 1e-5, dx0.reshape(shape),
                        dg0, db0)
    for got, want in ((dx, dx0), (dg, dg0), (db, db0)):
        _same(got, want)

    yi = NORM.batch_norm_infer(x, m2, v2, g, be, b, c, inner, 1e-3)
    yi0 = np.full(x.size, 7, F32)
    NORM._bn_infer_serial(x.reshape(shape), m2, v2, gg, bb, g is not None, be is not None, 1e-3, yi0.reshape(shape))
    _same(yi, yi0)


def test_batch_norm_of_a_strided_view_matches_its_copy(numba_threads):
    """An input that is not C-contiguous (not the runtime's flat buffer) takes the njit loop on the
    caller's thread: the same bits as the task over its copy."""
    rng = np.random.default_rng(5)
    b, c, inner = 8, 16, 1024
    base = _specials(rng, 2 * b * c * inner)
    view, copy = base[::2], np.ascontiguousarray(base[::2])
    g = _specials(rng, c, 3)
    for got, want in zip(NORM.batch_norm(view, g, None, b, c, inner, 1e-5),
                         NORM.batch_norm(copy, g, None, b, c, inner, 1e-5)):
        _same(got, want)


@pytest.mark.parametrize("dims", [(4, 16), (700, 64), (3000, 33), (9, 5000)])
@pytest.mark.parametrize("affine", [(True, True), (False, False), (True, False)])
def test_layer_norm_tasks_match_the_row_kernels(numba_threads, dims, affine):
    rows, cols = dims
    rng = np.random.default_rng(rows * cols + affine[0] + affine[1])
    x, dy = _specials(rng, rows * cols), _specials(rng, rows * cols)
    g, be = (_specials(rng, cols, 3) if affine[0] else None), (_specials(rng, cols, 3) if affine[1] else None)
    gg, bb = (NORM._ONE if g is None else g), (NORM._ONE if be is None else be)

    y, mean, var = NORM.layer_norm(x, g, be, rows, cols, 1e-5)
    y0, mean0, var0 = np.full(x.size, 7, F32), np.full(rows, 7, F32), np.full(rows, 7, F32)
    NORM._ln_rows(x.reshape(rows, cols), gg, bb, g is not None, be is not None, 1e-5, y0.reshape(rows, cols), mean0,
                  var0, 0, rows)
    for got, want in ((y, y0), (mean, mean0), (var, var0)):
        _same(got, want)

    var = np.abs(var)
    dx, dg, db = NORM.layer_norm_bwd(x, g, mean, var, dy, rows, cols, 1e-5)
    step = max(1, NORM._CHUNK_ELEMS // cols)
    parts = np.zeros((-(-rows // step), 2, cols))
    dx0, dg0, db0 = np.full(x.size, 7, F32), np.zeros(cols, F32), np.zeros(cols, F32)
    NORM._ln_bwd_serial(x.reshape(rows, cols), gg, g is not None, mean, var, dy.reshape(rows, cols), 1e-5,
                        dx0.reshape(rows, cols), parts, step)
    NORM._sum_parts(parts, dg0, db0)
    for got, want in ((dx, dx0), (dg, dg0), (db, db0)):
        _same(got, want)


@njit(nogil=True)
def _items(fn, iz, a, b, c, count, m, n, k, ta, tb, ks, nblocks, bias, has_bias, swap, scratch, a_step, q):
    """The GEMM's work items one after another in an njit loop: the serial kernel before the task."""
    for i in range(count):
        GEMM._item(fn, iz, a, b, c, m, n, k, ta, tb, ks, nblocks, i, bias, has_bias, swap, scratch, a_step, q)


# (batch, m, n, k): row blocks, few rows and many columns, the swapped A B^T, inner parts, a batch of small ones
_GEMMS = [(1, 256, 96, 200), (1, 40, 900, 128), (2, 8, 600, 300), (1, 24, 24, 9000), (6, 16, 20, 12)]


@pytest.mark.parametrize("dims", _GEMMS)
@pytest.mark.parametrize("trans", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_gemm_task_matches_the_items_in_an_njit_loop(numba_threads, dims, trans, with_bias):
    st = PAR.sgemm_address()
    if st is None:
        pytest.fail("these tests need OpenBLAS's cblas_sgemm (parallel.sgemm_address())")
    fn, iz = st
    batch, m, n, k = dims
    ta, tb = trans
    rng = np.random.default_rng(batch * m * n * k + 2 * ta + tb)
    a, b = _specials(rng, batch * m * k, 50), _specials(rng, batch * k * n, 50)
    bias = _specials(rng, n, 5) if with_bias else None
    ks = GEMM.inner_parts(batch, m, n, k)
    swap = GEMM._swapped(ta, tb, m, n, ks)
    _, nb = GEMM.plan(batch, m, n, k, swap)
    for nblocks in sorted({1, nb, 3}):
        got = GEMM.gemm(a, b, batch, m, n, k, ta, tb, nblocks=nblocks, bias=bias)
        dest = np.full(batch * ks * m * n, 7, F32)
        scratch = np.full(batch * m * n, 7, F32) if swap else GEMM._NO_BIAS
        bv = GEMM._NO_BIAS if bias is None else bias
        _items(fn, iz, a, b, dest, batch * ks * nblocks, m, n, k, ta, tb, ks, nblocks, bv, with_bias and ks == 1, swap,
               scratch, m * k, PAR.sgemm_row_quantum())
        if ks > 1:
            want = np.full(batch * m * n, 7, F32)
            GEMM._sum_serial(dest, want, batch, ks, m * n, n, bv, with_bias)
        else:
            want = dest
        _same(got, want)


@pytest.mark.parametrize("n", [1000, 40000, 300007])
def test_gelu_tasks_match_the_range_kernels(numba_threads, n):
    rng = np.random.default_rng(n)
    x, dy = _specials(rng, n) * F32(4), _specials(rng, n)
    for tanh_form in (False, True):
        fwd = CLS._gelu_tanh_range if tanh_form else CLS._gelu_range
        bwd = CLS._gelu_tanh_bwd_range if tanh_form else CLS._gelu_bwd_range
        y0, d0 = np.full(n, 7, F32), np.full(n, 7, F32)
        fwd(x, y0)
        bwd(x, dy, d0)
        _same(CLS.gelu_tanh(x) if tanh_form else CLS.gelu(x), y0)
        _same(CLS.gelu_tanh_bwd(x, dy) if tanh_form else CLS.gelu_bwd(x, dy), d0)


@pytest.mark.parametrize("dims", [(8, 10), (300, 65), (64, 1000)])
@pytest.mark.parametrize("ls", [0.0, 0.1])
def test_cross_entropy_tasks_match_the_row_kernels(numba_threads, dims, ls):
    rows, cols = dims
    rng = np.random.default_rng(rows * cols)
    x, dl = _specials(rng, rows * cols) * F32(8), _specials(rng, rows)
    x[:cols] = -np.inf  # a row of -inf (the direct formula)
    t = rng.integers(0, cols + 1, rows)  # cols: an ignored row
    loss, lse = CLS.cross_entropy_rows(x, rows, cols, t, ls)
    loss0, lse0 = np.full(rows, 7, F32), np.full(rows, 7, F32)
    CLS._ce_fwd_rows(x.reshape(rows, cols), t, ls, loss0, lse0, 0, rows)
    _same(loss, loss0)
    _same(lse, lse0)
    dx = CLS.cross_entropy_rows_bwd(x, lse, dl, rows, cols, t, ls)
    b = F32(ls) / F32(cols)
    dx0 = np.full(rows * cols, 7, F32)
    CLS._ce_bwd_rows(x.reshape(rows, cols), lse, dl, t, b, (F32(1.0) - F32(ls)) + b, dx0.reshape(rows, cols), 0, rows)
    _same(dx, dx0)
