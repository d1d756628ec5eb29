"""The CPU element-wise kernels and the scatters split over Numba's threads (kernels/cpu/parallel.py)
without changing a bit: below and above the split threshold, on 1 and 2 threads and on as many
parts as a 16-core machine would cut, every result equals today's NumPy expression (NaN payloads,
-0.0, infinities and subnormals included) and, for the scatters, the sequential additions in
index order per output row."""

from __future__ import annotations

import numba
import numpy as np
import pytest

from torchlean.kernels.cpu import elementwise as EW
from torchlean.kernels.cpu import index as IX
from torchlean.kernels.cpu import parallel as PAR

F32 = np.float32
N_SMALL = 2 * EW.MIN_WORK - 1  # the largest call that stays whole
N_LARGE = 5 * EW.MIN_WORK + 13  # split, with uneven parts
SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-45, -1e-45, 1.1754942e-38, -1e-40,
                     3.4028235e38, -3.4028235e38, 1.0, -1.0, 0.5, 2.0], F32)


def _bits(a):
    return np.asarray(a).view(np.uint32)


def _edge(n, seed):
    """Random floats over many magnitudes (subnormal to near overflow), with ~5% specials and ~1%
    NaNs of random sign and payload."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * rng.choice(np.array([1e-41, 1e-3, 1.0, 1e3, 1e36]), n)).astype(F32)
    m = rng.random(n) < 0.05
    x[m] = rng.choice(SPECIALS, int(m.sum()))
    m = rng.random(n) < 0.01
    payload = rng.integers(0, 1 << 22, int(m.sum()), dtype=np.uint32) | np.uint32(0x7FC00000)
    sign = rng.integers(0, 2, int(m.sum()), dtype=np.uint32) << np.uint32(31)
    x[m] = (payload | sign).view(F32)
    return x


# Today's (pre-split) NumPy expression of each primitive: the reference bits.
def _np(f):
    def run(*args):
        with np.errstate(all="ignore"):
            return f(*args)
    return run


REFERENCE = {
    "add": _np(np.add), "sub": _np(np.subtract), "mul": _np(np.multiply), "div": _np(np.divide),
    "scale": _np(lambda x, c: np.multiply(x, F32(c))),
    "add_scalar": _np(lambda x, c: np.add(x, F32(c))),
    "axpy": _np(lambda a, b, c: np.add(a, np.multiply(b, F32(c)))),
    "copy": lambda x: x.copy(),
    "abs": np.abs, "sqrt": _np(np.sqrt), "inv": _np(np.reciprocal),
    "relu": lambda x: np.where((x > 0) | np.isnan(x), x, F32(0)),
    "relu_bwd": lambda x, dy: np.where(x > 0, dy, F32(0)),
    "sigmoid_bwd": _np(lambda y, dy: dy * (y * (F32(1) - y))),
    "tanh_bwd": _np(lambda y, dy: dy * (F32(1) - y * y)),
    "leaky_relu": _np(lambda x, c: np.where(x > 0, x, x * F32(c))),
    "leaky_relu_bwd": _np(lambda x, dy, c: np.where(x > 0, dy, dy * F32(c))),
}
UNARY = ["copy", "abs", "sqrt", "inv", "relu"]
BINARY = ["add", "sub", "mul", "div", "relu_bwd", "sigmoid_bwd", "tanh_bwd"]
SCALAR = ["scale", "add_scalar", "axpy", "leaky_relu", "leaky_relu_bwd"]
CONSTANTS = [0.0, -0.0, 1.5, -3.25, float("inf"), float("nan"), 1e-40]


def _args(name, n, c=1.5):
    a, b = _edge(n, n), _edge(n, n + 1)
    if name in UNARY:
        return (a,)
    if name in BINARY:
        return (a, b)
    return (a, b, c) if name in ("axpy", "leaky_relu_bwd") else (a, c)


@pytest.fixture
def threads():
    """Run the body at the thread counts it sets, then give the process its count back."""
    saved = numba.get_num_threads()
    yield
    numba.set_num_threads(saved)


@pytest.mark.parametrize("n", [0, 1, 1000, N_SMALL, N_LARGE])
@pytest.mark.parametrize("name", UNARY + BINARY + SCALAR)
def test_bits_equal_numpy_on_one_and_two_threads(name, n, threads):
    args = _args(name, n)
    want = _bits(REFERENCE[name](*args))
    for t in (1, min(2, PAR.max_threads())):
        numba.set_num_threads(t)
        got = getattr(EW, name)(*args)
        assert got.dtype == F32 and got.shape == args[0].shape
        assert np.array_equal(_bits(got), want), f"{name}[{n}] on {t} threads"


@pytest.mark.parametrize("c", CONSTANTS)
@pytest.mark.parametrize("name", SCALAR)
def test_scalar_ops_bits_for_special_constants(name, c, threads):
    args = _args(name, N_LARGE, c)
    numba.set_num_threads(min(2, PAR.max_threads()))
    assert np.array_equal(_bits(getattr(EW, name)(*args)), _bits(REFERENCE[name](*args))), f"{name}(c={c})"


@pytest.mark.parametrize("t", [1, 2, 3, 7, 16])
def test_split_kernels_give_the_same_bits_on_any_part_count(t):
    """The parts a 16-core machine would cut (prange runs them on this machine's threads)."""
    for name in UNARY + BINARY + SCALAR:
        args = _args(name, N_LARGE)
        op = getattr(EW, "_" + name.upper())
        if name in UNARY or name in ("scale", "add_scalar", "leaky_relu"):
            got = EW._unary_split(op, args[0], t, args[1] if len(args) > 1 else 0.0)
        else:
            got = EW._binary_split(op, args[0], args[1], t, args[2] if len(args) > 2 else 0.0)
        assert np.array_equal(_bits(got), _bits(REFERENCE[name](*args))), f"{name} on {t} parts"


def test_large_calls_run_on_numbas_threads_small_ones_on_numpy(monkeypatch, threads):
    """Above 2 * MIN_WORK elements add / relu_bwd / scale split into parallel.parts() chunks; below,
    no parallel region starts (a region costs more than it saves there)."""
    calls = []
    for kernel in ("_unary_par", "_binary_par"):
        real = getattr(EW, kernel)
        monkeypatch.setattr(EW, kernel, lambda *a, _real=real: (calls.append(a[-1]), _real(*a))[1])
    monkeypatch.setattr(PAR, "threads", lambda: 16)
    small, large = _edge(N_SMALL, 1), _edge(16 * EW.MIN_WORK, 2)
    for x in (small, large):
        EW.add(x, x), EW.relu_bwd(x, x), EW.scale(x, 2.0), EW.relu(x), EW.copy(x)
    assert calls == [16] * 5


# -- scatters ----------------------------------------------------------------------------------------
def _scatter_reference(mat2, values2, idx):
    """Today's kernel, the sequential one (still the path of small calls): a copy, then one row
    addition per index, in index order."""
    out = mat2.copy()
    IX._scatter_rows(out, values2, mat2.shape[0], idx)
    return out


def _scatter_case(rows, cols, k, seed, skew):
    rng = np.random.default_rng(seed)
    mat = _edge(rows * cols, seed).reshape(rows, cols)
    values = (rng.standard_normal((k, cols)) * 10).astype(F32)
    values[rng.random((k, cols)) < 0.001] = np.nan
    if skew:  # a few frequent rows (tokens) take most indices, as in text
        idx = np.where(rng.random(k) < 0.7, rng.integers(0, 3, k), rng.integers(0, rows, k))
    else:
        idx = rng.integers(0, rows, k)
    idx[rng.random(k) < 0.02] = rows + 5  # out of bounds: ignored
    return mat, values, idx.astype(np.int64)


@pytest.mark.parametrize("rows,cols,k", [(65, 384, 8192), (5000, 64, 3000), (3000, 40, 4000),
                                         (40000, 8, 5000), (7, 16, 9)])
@pytest.mark.parametrize("skew", [False, True])
def test_scatter_add_rows_bits_on_any_thread_count(rows, cols, k, skew, monkeypatch, threads):
    mat, values, idx = _scatter_case(rows, cols, k, rows + cols + k, skew)
    want = _bits(_scatter_reference(mat, values, idx))
    for t in (1, min(2, PAR.max_threads())):
        numba.set_num_threads(t)
        got = IX.scatter_add_rows(mat.reshape(-1), values.reshape(-1), rows, cols, idx, k)
        assert np.array_equal(_bits(got).reshape(rows, cols), want), f"{t} threads"
    for t in (3, 16):  # a 16-core machine's splits: by column slabs where cols // 16 >= t, else by rows
        for by_cols in ((False, True) if cols // IX._LINE >= t else (False,)):
            out = mat.copy()
            IX._scatter_par(values, idx, out, t, by_cols)
            assert np.array_equal(_bits(out), want), f"{t} parts, by_cols={by_cols}"


def test_scatter_add_vector_and_row_bits(threads):
    n, k = 3 * IX.MIN_WORK + 1, 2 * IX.MIN_WORK
    x, values, idx = _scatter_case(n, 1, k, 3, True)
    want = x.reshape(-1).copy()
    IX._scatter_vec(want, values.reshape(-1), n, idx)
    want = _bits(want)
    for t in (1, min(2, PAR.max_threads())):
        numba.set_num_threads(t)
        got = IX.scatter_add(x.reshape(-1), values.reshape(-1), n, idx, k)
        assert np.array_equal(_bits(got), want), f"{t} threads"
    mat = _edge(4 * IX.MIN_WORK, 4)
    row = _edge(IX.MIN_WORK, 5)
    got = IX.scatter_add_row(mat, row, 4, IX.MIN_WORK, 2)
    ref = mat.copy()
    with np.errstate(all="ignore"):
        ref[2 * IX.MIN_WORK:3 * IX.MIN_WORK] += row
    assert np.array_equal(_bits(got), _bits(ref))


def test_scatter_and_gather_split_when_large(monkeypatch, threads):
    """The embedding's backward (its copy, then its additions; rows 50304 would do, a smaller table
    of the same width here) and forward split over Numba's threads; the result equals the
    sequential one."""
    calls = []
    for kernel in ("_scatter_par", "_gather_rows_par"):
        real = getattr(IX, kernel)
        monkeypatch.setattr(IX, kernel, lambda *a, _real=real, _k=kernel: (calls.append(_k), _real(*a))[1])
    real_copy = EW._unary_par
    monkeypatch.setattr(EW, "_unary_par", lambda *a: (calls.append("copy"), real_copy(*a))[1])
    monkeypatch.setattr(PAR, "threads", lambda: 16)
    rows, cols, k = 2000, 768, 512
    mat, values, idx = _scatter_case(rows, cols, k, 9, True)
    got = IX.scatter_add_rows(mat.reshape(-1), values.reshape(-1), rows, cols, idx, k)
    assert np.array_equal(_bits(got).reshape(rows, cols), _bits(_scatter_reference(mat, values, idx)))
    g = IX.gather_rows(mat.reshape(-1), rows, cols, idx, k)
    want = np.where((idx < rows)[:, None], mat[np.minimum(idx, rows - 1)], F32(0))
    assert np.array_equal(_bits(g).reshape(k, cols), _bits(want))
    assert calls == ["copy", "_scatter_par", "_gather_rows_par"]


def test_primitives_reach_the_split_kernels(threads):
    """Through the runtime's primitive surface (where broadcasting has already happened)."""
    from torchlean.runtime import primitives as P
    from torchlean.runtime.buffer import Buffer

    numba.set_num_threads(min(2, PAR.max_threads()))
    a, b = _edge(N_LARGE, 11), _edge(N_LARGE, 12)
    A, B = Buffer.from_numpy(a), Buffer.from_numpy(b)
    for name in ("add", "sub", "mul", "div", "relu_bwd"):
        got = getattr(P, name)(A, B).to_numpy()
        assert np.array_equal(_bits(got), _bits(REFERENCE[name](a, b))), name
