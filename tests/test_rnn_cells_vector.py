"""The CPU recurrent cells' own float32 sigmoid / tanh (built on exp32 so that the row loops vectorize):
accuracy against float64, exact special cases, and no scalar libm call left in the forward loops."""

import math
import re

import numpy as np
import pytest
from numba import njit

from torchlean.kernels.cpu import rnn

U = 2.0**-24
TINY = 2.0**-126


def _gates(vals, k):
    """(gi, gh) of one row whose every gate slot holds vals, batch 1, hidden len(vals); gh is -0, the
    additive identity (x + -0 is x, -0 included)."""
    v = np.asarray(vals, np.float32)
    return np.tile(v, k), np.full(k * v.size, -0.0, np.float32)


def _sweep_values():
    # every 97th float32 bit pattern below 120 (beyond, both functions are saturated), both signs
    bits = np.arange(0, int(np.float32(120.0).view(np.int32)), 97, dtype=np.int64).astype(np.uint32)
    x = bits.view(np.float32)
    return np.concatenate([x, -x])


def _check(got, want, rel):
    got, want = got.astype(np.float64), want.astype(np.float64)
    err = np.abs(got - want)
    assert np.all(err <= rel * U * np.abs(want) + TINY), float(np.max((err - TINY) / np.abs(want)) / U)


def test_cell_sigmoid_and_tanh_within_a_few_ulp():
    # the cells' contract allows the sigmoid / tanh primitives' 16u / 8u; the kernels stay within 4u
    x = _sweep_values()
    H = x.size
    gi, gh = _gates(x, 4)
    h, c, act = rnn.lstm_cell_fwd(gi, gh, np.zeros(H, np.float32), 1, H)
    xd = x.astype(np.float64)
    with np.errstate(over="ignore"):
        sig = 1.0 / (1.0 + np.exp(-xd))
    _check(act[:H], sig, 4.0)  # i = sigmoid(x)
    _check(act[2 * H:3 * H], np.tanh(xd), 4.0)  # g = tanh(x)
    gi3, gh3 = _gates(x, 3)
    hg, actg = rnn.gru_cell_fwd(gi3, gh3, np.zeros(H, np.float32), 1, H)
    _check(actg[:H], sig, 4.0)
    _check(actg[2 * H:3 * H], np.tanh(xd), 4.0)  # n = tanh(x + r (-0))


def test_cell_special_values_exact():
    x = np.array([np.nan, np.inf, -np.inf, 200.0, -200.0, 30.0, -30.0, 0.0, -0.0, 1e-40, -1e-40], np.float32)
    H = x.size
    gi, gh = _gates(x, 4)
    _, _, act = rnn.lstm_cell_fwd(gi, gh, np.zeros(H, np.float32), 1, H)
    s, t = act[:H], act[2 * H:3 * H]
    assert np.isnan(s[0]) and np.isnan(t[0])
    assert s[1:6].tolist() == [1.0, 0.0, 1.0, 0.0, 1.0]
    assert abs(float(s[6]) - 1.0 / (1.0 + math.exp(30.0))) <= 4 * U * 1e-13
    assert t[1:7].tolist() == [1.0, -1.0, 1.0, -1.0, 1.0, -1.0]
    assert s[7] == s[8] == 0.5
    # tanh keeps the sign of zero and is exact on subnormals (tanh x = x to float32 there)
    assert t[7] == 0 and not np.signbit(t[7]) and t[8] == 0 and np.signbit(t[8])
    assert t[9] == x[9] and t[10] == x[10]


def _fresh_llvm(name, *args):
    # the package's kernels are cached (no IR to inspect): compile the same Python function afresh
    f = njit(error_model="numpy", boundscheck=False)(getattr(rnn, name).py_func)
    f(*args)
    return "\n".join(f.inspect_llvm().values())


@pytest.mark.parametrize("name", ["_lstm_fwd_rows", "_gru_fwd_rows"])
def test_forward_cells_call_no_scalar_libm_and_vectorize(name):
    B, H = 2, 64
    n = B * H
    z = np.zeros(4 * n, np.float32)
    if name == "_lstm_fwd_rows":
        args = (z, z, z[:n], H, 0, n, np.zeros(n, np.float32), np.zeros(n, np.float32), np.zeros(5 * n, np.float32))
    else:
        args = (z[:3 * n], z[:3 * n], z[:n], H, 0, n, np.zeros(n, np.float32), np.zeros(4 * n, np.float32))
    ll = _fresh_llvm(name, *args)
    called = set(re.findall(r'call [^@\n]*@"?([A-Za-z_.0-9]+)', ll))
    assert not {c for c in called if re.fullmatch(r"(llvm\.)?(exp|tanh)(f|\.f32)?", c)}, called
    assert re.search(r"fdiv <\d+ x float>", ll)  # the sigmoid / tanh divisions run on vectors


def test_cells_math_matches_float64_spec_closely():
    # a whole LSTM step against a float64 evaluation: well inside the contract's first-order bound
    rng = np.random.default_rng(3)
    B, H = 3, 50
    gi = (rng.standard_normal(4 * B * H) * 4).astype(np.float32)
    gh = rng.standard_normal(4 * B * H).astype(np.float32)
    cp = rng.standard_normal(B * H).astype(np.float32)
    h, c, _ = rnn.lstm_cell_fwd(gi, gh, cp, B, H)
    g = (gi.astype(np.float64) + gh.astype(np.float64)).reshape(B, 4, H)
    sg = lambda v: 1.0 / (1.0 + np.exp(-v))  # noqa: E731
    cw = sg(g[:, 1]) * cp.reshape(B, H) + sg(g[:, 0]) * np.tanh(g[:, 2])
    hw = sg(g[:, 3]) * np.tanh(cw)
    assert np.max(np.abs(c.reshape(B, H) - cw)) < 64 * U * max(1.0, np.abs(cw).max())
    assert np.max(np.abs(h.reshape(B, H) - hw)) < 64 * U
