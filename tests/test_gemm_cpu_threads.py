"""The CPU GEMM family and the recurrent cells at training shapes (scaled down): how the work is
split over Numba's threads (batch entries, inner parts, blocks) and that the bits never depend on
the thread count nor on the blocks. Shapes: the LM head of a GPT-2 (rows x d against a vocabulary),
an FNO's tall-thin linear layers (many rows, 64 x 64 weights), a batch of two large products, an
LSTM language model's step (batch 20, gates 4 H)."""

from __future__ import annotations

import importlib

import numba
import numpy as np
import pytest

G = importlib.import_module("torchlean.kernels.cpu.gemm")
P = importlib.import_module("torchlean.kernels.cpu.parallel")
layout = importlib.import_module("torchlean.kernels.cpu.layout")
fast = importlib.import_module("torchlean.kernels.cpu.fast")
reduce_ = importlib.import_module("torchlean.kernels.cpu.reduce")
rnn = importlib.import_module("torchlean.kernels.cpu.rnn")

pytestmark = pytest.mark.skipif(P.sgemm_address() is None or numba.config.NUMBA_NUM_THREADS < 2,
                                reason="needs NumPy's OpenBLAS and two Numba threads")


def _f32(rng, n, scale=1.0):
    return (rng.standard_normal(n) * scale).astype(np.float32)


def _same_bits(x, y):
    return x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x.view(np.uint32), y.view(np.uint32))


def _on_threads(fn, counts=(1, 2)):
    """fn() run with each Numba thread count (the caller's count put back)."""
    old = numba.get_num_threads()
    try:
        out = []
        for t in counts:
            numba.set_num_threads(t)
            res = fn()
            out.append(res if isinstance(res, tuple) else (res,))
        return out
    finally:
        numba.set_num_threads(old)


def _op(x, rows, cols, trans):
    return x.reshape(cols, rows).T if trans else x.reshape(rows, cols)


# -- the plan -----------------------------------------------------------------------------------
def test_a_batch_of_two_large_products_uses_every_thread(monkeypatch):
    # Entries alone gave 2 items on 16 threads: each entry is now split into blocks as well.
    monkeypatch.setattr(P, "threads", lambda: 16)
    ks, nb = G.plan(2, 512, 512, 512)
    assert ks == 1 and 2 * nb >= 16
    assert G.plan(64, 128, 128, 64) == (1, 1)        # many entries: the entries are the items
    monkeypatch.setattr(P, "threads", lambda: 1)
    assert G.plan(2, 512, 512, 512) == (1, 1)


def test_small_outputs_over_a_long_inner_dimension_split_k(monkeypatch):
    # A weight gradient 64 x 64 over 20480 rows (FNO) or the LM head's g W (256 x 256 over the
    # vocabulary): few rows/columns to split, so the inner dimension is; the count is the shape's.
    for threads in (1, 2, 16):
        monkeypatch.setattr(P, "threads", lambda t=threads: t)
        assert G.inner_parts(1, 64, 64, 20480) == 16
        assert G.inner_parts(1, 256, 256, 50304) == 16
        ks, nb = G.plan(1, 64, 64, 20480)
        assert ks == 16 and nb == 1
    assert G.inner_parts(1, 20480, 64, 64) == 1       # long outputs: blocks of rows
    assert G.inner_parts(1, 1, 64, 20480) == 1        # a GEMV is never split
    assert G.inner_parts(8, 256, 256, 4096) == 1      # too much scratch: the entries are enough
    assert G.inner_parts(1, 64, 64, 1500) == 1        # k too short for two parts


# -- bits ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("m,n,k", [(64, 64, 20480), (96, 80, 6000), (40, 300, 4100)])
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_inner_parts_are_added_in_part_order(m, n, k, ta, tb):
    """The product is ((p0 + p1) + ...) of the parts' products over consecutive k ranges, each part
    NumPy's (OpenBLAS's) product, and the blocks do not change a bit."""
    rng = np.random.default_rng(m + n + k)
    a, b = _f32(rng, m * k), _f32(rng, k * n)
    ks = G.inner_parts(1, m, n, k)
    assert ks > 1
    A, B = _op(a, m, k, ta), _op(b, k, n, tb)
    ref = None
    P.blas_one_thread()  # the reference's OpenBLAS as the backend's: one thread
    for s in range(ks):
        k0, k1 = (k * s) // ks, (k * (s + 1)) // ks
        p = np.matmul(A[:, k0:k1], B[k0:k1, :])
        ref = p if ref is None else ref + p
    out = G.gemm(a, b, 1, m, n, k, ta, tb)
    assert _same_bits(out, ref.reshape(-1))
    for nb in (2, 3, 5):
        if m * n * (k // ks) >= nb * G.BLOCK_MACS and max(m, n) >= nb * 32:
            assert _same_bits(G.gemm(a, b, 1, m, n, k, ta, tb, nblocks=nb), out), nb
    # and one part is NumPy's one product (in the orientation gemm runs it: see test_cpu_gemm.numpy_product)
    one = np.matmul(B.T, A.T).T if G._swapped(ta, tb, m, n, 1) else np.matmul(A, B)
    assert _same_bits(G.gemm(a, b, 1, m, n, k, ta, tb, kparts=1), np.ascontiguousarray(one).reshape(-1))


def test_lm_head_products_same_bits_on_1_and_2_threads():
    rng = np.random.default_rng(3)
    rows, d, vocab = 128, 96, 12000            # GPT-2's LM head, scaled down
    h, w, g = _f32(rng, rows * d), _f32(rng, vocab * d, 0.05), _f32(rng, rows * vocab)
    runs = _on_threads(lambda: (layout.bmm_nt(h, w, 1, rows, d, vocab), layout.bmm(g, w, 1, rows, vocab, d),
                                layout.bmm_tn(g, h, 1, vocab, rows, d)))
    assert G.inner_parts(1, rows, d, vocab) > 1   # g W: the inner-part path is the one checked
    for x, y in zip(*runs):
        assert _same_bits(x, y)
    ref = np.matmul(g.reshape(rows, vocab).astype(np.float64), w.reshape(vocab, d).astype(np.float64))
    assert np.allclose(runs[0][1].reshape(rows, d), ref, rtol=1e-4, atol=1e-3)


def test_batched_large_products_same_bits_on_1_and_2_threads_and_numpys():
    rng = np.random.default_rng(4)
    a, b = _f32(rng, 2 * 256 * 192), _f32(rng, 2 * 192 * 160)
    runs = _on_threads(lambda: G.gemm(a, b, 2, 256, 160, 192, False, False))
    assert _same_bits(runs[0][0], runs[1][0])
    assert _same_bits(runs[0][0], np.matmul(a.reshape(2, 256, 192), b.reshape(2, 192, 160)).reshape(-1))


def test_tall_thin_fast_gemm_and_linear_bwd_same_bits_on_1_and_2_threads():
    rng = np.random.default_rng(5)
    rows, n_in, n_out = 8192, 64, 64           # FNO1d's pointwise layers, scaled down
    x, w, bias, g = _f32(rng, rows * n_in), _f32(rng, n_out * n_in), _f32(rng, n_out), _f32(rng, rows * n_out)
    runs = _on_threads(lambda: (fast.fast_gemm(x, w, bias, rows, n_in, n_out, 0, 1, 0),)
                       + tuple(fast.linear_bwd(g, x, w, rows, n_in, n_out)))
    for u, v in zip(*runs):
        assert _same_bits(u, v)
    y, dx, dw, db = runs[1]
    # fast_gemm: the bias added to the rounded product, once
    with np.errstate(all="ignore"):
        assert _same_bits(y, (np.matmul(x.reshape(rows, n_in), w.reshape(n_out, n_in).T) + bias).reshape(-1))
    # linear_bwd: each product as its own primitive computes it
    assert _same_bits(dx, layout.bmm(g, w, 1, rows, n_out, n_in))
    assert _same_bits(dw, layout.bmm_tn(g, x, 1, n_out, rows, n_in))
    assert _same_bits(db, reduce_.reduce_sum_axis0(g, rows, n_out))


@pytest.mark.parametrize("rows,cols", [(20480, 64), (700, 1000), (5000, 17), (3000, 2)])
def test_linear_bwd_column_sums_are_reduce_sum_axis0s_bits(rows, cols):
    rng = np.random.default_rng(rows + cols)
    g = (_f32(rng, rows * cols) * np.exp(_f32(rng, rows * cols) * 3)).astype(np.float32)
    runs = _on_threads(lambda: fast._column_sums(g, rows, cols))
    ref = reduce_.reduce_sum_axis0(g, rows, cols)
    for (out,) in runs:
        assert _same_bits(out, ref)


# -- recurrent cells ----------------------------------------------------------------------------
def test_lstm_lm_step_cells_split_over_threads(monkeypatch):
    # Batch 20, hidden 650: the forward cell (five library transcendentals an element) splits.
    monkeypatch.setattr(P, "threads", lambda: 16)
    monkeypatch.setattr(rnn, "parts", P.parts)
    assert rnn._parts(20, 650, rnn._FWD_MIN_ELEMS) >= 4
    assert rnn._parts(2, 8, rnn._FWD_MIN_ELEMS) == 1


@pytest.mark.parametrize("B,H", [(20, 650), (3, 1000), (5, 999), (1, 3)])
def test_cells_same_bits_on_1_and_2_threads_and_any_split(B, H, monkeypatch):
    rng = np.random.default_rng(B * H)
    gi, gh, c, dh, dc = (_f32(rng, 4 * B * H, 2), _f32(rng, 4 * B * H, 2), _f32(rng, B * H), _f32(rng, B * H),
                         _f32(rng, B * H))

    def run():
        h, cn, act = rnn.lstm_cell_fwd(gi, gh, c, B, H)
        dg, dcp = rnn.lstm_cell_bwd(act, c, dh, dc, B, H)
        hg, actg = rnn.gru_cell_fwd(gi[:3 * B * H], gh[:3 * B * H], c, B, H)
        return (h, cn, act, dg, dcp, hg, actg) + tuple(rnn.gru_cell_bwd(actg, c, dh, B, H))

    ref = run()
    for u, v in zip(*_on_threads(run)):
        assert _same_bits(u, v)
    # parts that cut rows anywhere (7 parts of B H elements) give the same bits
    monkeypatch.setattr(rnn, "_parts", lambda batch, hidden, min_elems: 7 if batch * hidden >= 7 else 1)
    for u, v in zip(ref, run()):
        assert _same_bits(u, v)


@pytest.mark.parametrize("m,n,k", [(20, 2600, 650), (2, 300, 40), (64, 256, 96), (33, 1000, 1500)])
def test_few_rows_times_b_transposed_is_numpys_product(m, n, k):
    """A B^T with few rows (an LSTM step's h W_hh^T + b_hh) runs as (B A^T)^T: the bits of NumPy's
    B A^T transposed (on AVX-512 kernels also those of its A B^T; on AVX2 ones not), with the bias
    added once, for any thread count and block count."""
    rng = np.random.default_rng(m * n)
    a, b, bias = _f32(rng, m * k), _f32(rng, n * k), _f32(rng, n)
    assert G._swapped(False, True, m, n, 1)
    P.blas_one_thread()
    ref = np.ascontiguousarray(np.matmul(b.reshape(n, k), a.reshape(m, k).T).T)
    runs = _on_threads(lambda: (G.gemm(a, b, 1, m, n, k, False, True),
                                fast.fast_gemm(a, b, bias, m, k, n, 0, 1, 0)))
    for out, with_bias in runs:
        assert _same_bits(out, ref.reshape(-1))
        assert _same_bits(with_bias, (ref + bias).reshape(-1))
    for nb in (2, 3, 5):
        if m * n * k >= nb * G.BLOCK_MACS and n >= nb * 32:
            assert _same_bits(G.gemm(a, b, 1, m, n, k, False, True, nblocks=nb), ref.reshape(-1))


# -- a single row or column (our GEMV) ------------------------------------------------------------------
@pytest.mark.parametrize("m,n,k", [(20000, 1, 128), (1, 128, 20000), (1, 700, 9000), (9000, 1, 700), (1, 1, 300000)])
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_single_row_or_column_products_split_over_threads_without_changing_bits(m, n, k, ta, tb):
    """A linear layer with one output (fc2 of an FNO: (rows, 128) -> 1), its weight gradient (one
    row over many rows of k): ours, spread over the pool, the same bits on 1 and 2 threads, with
    and without a bias, within float32 rounding of the float64 product."""
    rng = np.random.default_rng(m + 3 * n + k)
    a, b, bias = _f32(rng, m * k), _f32(rng, k * n), _f32(rng, n)
    assert m * n * k >= G.GEMV_MIN_MACS
    runs = _on_threads(lambda: (G.gemm(a, b, 1, m, n, k, ta, tb), G.gemm(a, b, 1, m, n, k, ta, tb, bias=bias)))
    assert _same_bits(runs[0][0], runs[1][0]) and _same_bits(runs[0][1], runs[1][1])
    ref = _op(a, m, k, ta).astype(np.float64) @ _op(b, k, n, tb).astype(np.float64)
    np.testing.assert_allclose(runs[0][0].reshape(m, n), ref, rtol=0, atol=1e-6 * np.abs(ref).max() + 1e-30)
    assert _same_bits(runs[0][1], (runs[0][0].reshape(m, n) + bias).reshape(-1))  # fl(fl(A B) + bias)


def test_single_row_or_column_non_finite_values_propagate():
    a = np.ones(4096 * 64, np.float32)
    b = np.ones(64, np.float32)
    a[5 * 64 + 3], a[9 * 64] = np.inf, np.nan
    out = G.gemm(a, b, 1, 4096, 1, 64, False, False)
    assert np.isinf(out[5]) and np.isnan(out[9]) and np.all(out[np.r_[0:5, 6:9, 10:4096]] == 64)


@pytest.mark.parametrize("dims,perm", [((20, 47, 47, 32), (0, 3, 1, 2)), ((20, 32, 47, 47), (0, 2, 3, 1)),
                                       ((3000, 77), (1, 0)), ((77, 3000), (1, 0)), ((6, 1, 50, 130), (3, 1, 0, 2))])
def test_transposing_permutes_split_over_threads_equal_numpys(dims, perm):
    """Permutations that are batched 2-D transposes (channels last <-> first) run tiled on the pool."""
    x = _f32(np.random.default_rng(7), int(np.prod(dims)))
    ref = np.ascontiguousarray(x.reshape(dims).transpose(perm)).reshape(-1)
    for (out,) in _on_threads(lambda: layout.permute(x, dims, perm)):
        assert _same_bits(out, ref)


def test_outer_products_split_over_threads_equal_numpys():
    rng = np.random.default_rng(8)
    a, b = _f32(rng, 3 * 9000), _f32(rng, 3 * 40)
    ref = (a.reshape(3, 9000, 1) * b.reshape(3, 1, 40)).reshape(-1)
    for (out,) in _on_threads(lambda: layout.bmm(a, b, 3, 9000, 1, 40)):
        assert _same_bits(out, ref)


@pytest.mark.parametrize("n", [reduce_.SUM_SPLIT, reduce_.SUM_SPLIT + 12345, 3 * reduce_.SUM_SPLIT + 1])
def test_long_sums_split_over_threads_same_bits_and_within_contract(n):
    """reduce_sum / reduce_mean of SUM_SPLIT elements or more run in fixed chunks on the pool: the same
    bits on 1 and 2 threads, the float64 sum rounded once (a gradient's squared norm in clip_grad_norm_)."""
    x = _f32(np.random.default_rng(9), n, 3.0) + np.float32(0.25)
    outs = _on_threads(lambda: (reduce_.reduce_sum(x), reduce_.reduce_mean(x)))
    assert all(_same_bits(a, b) for a, b in zip(outs[0], outs[1]))
    exact = np.sum(x.astype(np.float64))
    assert outs[0][0][0] == np.float32(exact)  # chunk sums in float64: within an ulp of float32's rounding
    assert outs[0][1][0] == np.float32(exact) / np.float32(n)


def test_long_sums_propagate_non_finite_values():
    n = reduce_.SUM_SPLIT + 7
    x = np.ones(n, np.float32)
    x[n - 1] = np.inf
    assert np.isposinf(reduce_.reduce_sum(x)[0])
    x[3] = -np.inf
    assert np.isnan(reduce_.reduce_sum(x)[0])
    x[3], x[n - 1] = np.nan, 1.0
    assert np.isnan(reduce_.reduce_mean(x)[0])
    big = np.full(n, np.float32(3e38))
    assert np.isposinf(reduce_.reduce_sum(big)[0])
