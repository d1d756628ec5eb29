"""The LSTM recurrence primitives (lstm_recurrence_fwd / _bwd): one call for every step of a
layer-direction. Parity with the spec within the contract, on random and edge inputs, is in
test_primitives_parity.py through the table; here: the CPU result is the per-step primitives' bit
for bit (the same GEMM and cell kernels, written in place), the spec's VJP against finite
differences of the spec's forward, a contract that rejects wrong recurrences, the errors of bad
arguments, and (CUDA) agreement of the fused per-step kernels with the CPU."""

from __future__ import annotations

import numpy as np
import pytest

from torchlean import contract, spec
from torchlean.errors import ArgumentError, ShapeError
from torchlean.runtime import primitives as P
from torchlean.runtime.buffer import Buffer
from torchlean.testing.primitive_table import TABLE

from test_rnn import _float32_rounding_only

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
F32 = np.float32


def _args(rng, T, B, H, bias=True, reverse=0, scale=0.5):
    n = B * H
    r = lambda k: (rng.standard_normal(k) * scale).astype(F32)  # noqa: E731
    return [r(4 * T * n), r(n), r(n), r(4 * H * H), r(4 * H) if bias else None, T, B, H, reverse]


def _bufs(args, device="cpu"):
    return [Buffer.from_numpy(a, device) if isinstance(a, np.ndarray) else a for a in args]


def _per_step(args, device="cpu"):
    """The recurrence from the per-step primitives (fast_gemm, lstm_cell_fwd / _bwd), as the layer
    ran it before the fused primitive."""
    gi, h0, c0, w, b, T, B, H, rev = _bufs(args, device)
    n, G = B * H, 4 * H
    order = list(range(T - 1, -1, -1) if rev else range(T))
    h, c, hs, cs, acts = h0, c0, {}, {}, {}
    for t in order:
        gh = P.fast_gemm(h, w, b, B, H, G, 0, 1, 0)
        h, c, acts[t] = P.lstm_cell_fwd(P.slice1d(gi, gi.size, t * G * B, G * B), gh, c, B, H)
        hs[t], cs[t] = h, c
    return ([hs[t].to_numpy() for t in range(T)] + [c.to_numpy()], [cs[t].to_numpy() for t in range(T)],
            [acts[t].to_numpy() for t in range(T)])


@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("bias", [True, False])
def test_cpu_recurrence_is_the_per_step_primitives_bit_for_bit(reverse, bias):
    rng = np.random.default_rng(3 + reverse)
    args = _args(rng, 6, 5, 13, bias, reverse)
    y, cs, act = (o.to_numpy() for o in P.lstm_recurrence_fwd(*_bufs(args)))
    ys, css, acts = _per_step(args)
    np.testing.assert_array_equal(y, np.concatenate(ys))
    np.testing.assert_array_equal(cs, np.concatenate(css))
    np.testing.assert_array_equal(act, np.concatenate(acts))


def _fd(f, x, i, eps=1e-6):
    xp, xm = x.copy(), x.copy()
    xp[i] += eps
    xm[i] -= eps
    return (f(xp) - f(xm)) / (2 * eps)


@pytest.mark.parametrize("reverse", [0, 1])
def test_spec_vjp_matches_finite_differences_of_the_spec_forward(reverse):
    """In float64: <gy, J v> from central differences of the forward against <VJP(gy), v>, for every
    input the backward returns a gradient of (gi, h0, c0, and w_hh / b_hh through dgates)."""
    rng = np.random.default_rng(12 + reverse)
    T, B, H = 4, 2, 3
    gi, h0, c0, w, b = (a.astype(np.float64) for a in _args(rng, T, B, H, True, reverse, 0.8)[:5])
    gy = rng.standard_normal((T + 1) * B * H)
    y, cs, act = spec.lstm_recurrence_fwd(gi, h0, c0, w, b, T, B, H, reverse)
    dG, dh0, dc0 = spec.lstm_recurrence_bwd(act, cs, c0, w, gy, T, B, H, reverse)

    def loss(gi_=gi, h0_=h0, c0_=c0, w_=w, b_=b):
        return float(gy @ spec.lstm_recurrence_fwd(gi_, h0_, c0_, w_, b_, T, B, H, reverse)[0])

    # h_prev of each time index (what dW_hh = dG^T h_prev multiplies), from the forward's y
    yr = y.reshape(T + 1, B, H)
    hp = np.stack([(yr[t + 1] if t < T - 1 else h0.reshape(B, H)) if reverse else
                   (yr[t - 1] if t > 0 else h0.reshape(B, H)) for t in range(T)]).reshape(T * B, H)
    dW = dG.reshape(T * B, 4 * H).T @ hp
    db = dG.reshape(T * B, 4 * H).sum(0)
    for name, x, g in (("gi", gi, dG), ("h0", h0, dh0), ("c0", c0, dc0), ("w_hh", w, dW.reshape(-1)),
                       ("b_hh", b, db)):
        fd = np.array([_fd(lambda v: loss(**{name.replace("w_hh", "w").replace("b_hh", "b") + "_": v}), x, i)
                       for i in range(x.size)])
        np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8, err_msg=name)


def _no_recurrent_term(gi, h0, c0, w, b, T, B, H, rev):
    """A wrong kernel: every step's GEMM reads h0 instead of the previous step's h."""
    n, out_y, out_c, out_a = B * H, [], [], []
    c = c0
    for t in (range(T - 1, -1, -1) if rev else range(T)):
        gh = (h0.reshape(B, H) @ w.reshape(4 * H, H).T + (0 if b is None else b)).reshape(-1)
        h, c, a = spec.lstm_cell_fwd(gi[t * 4 * n:(t + 1) * 4 * n], gh, c, B, H)
        out_y.append((t, h)), out_c.append((t, c)), out_a.append((t, a))
    y = np.concatenate([h for _, h in sorted(out_y)] + [c])
    return y, np.concatenate([c for _, c in sorted(out_c)]), np.concatenate([a for _, a in sorted(out_a)])


def _direction_ignored(gi, h0, c0, w, b, T, B, H, rev):
    return spec.lstm_recurrence_fwd(gi, h0, c0, w, b, T, B, H, 1 - rev)


def _bias_dropped(gi, h0, c0, w, b, T, B, H, rev):
    return spec.lstm_recurrence_fwd(gi, h0, c0, w, None, T, B, H, rev)


def _bwd_without_recurrence(act, cs, c0, w, gy, T, B, H, rev):
    """A wrong backward: dh_t = gy_t only (the dgates W_hh term of the next step dropped)."""
    return spec.lstm_recurrence_bwd(act, cs, c0, np.zeros_like(w), gy, T, B, H, rev)


@pytest.mark.parametrize("name, fake, fails", [
    ("lstm_recurrence_fwd", _no_recurrent_term, True),
    ("lstm_recurrence_fwd", _direction_ignored, True),
    ("lstm_recurrence_fwd", _bias_dropped, True),
    ("lstm_recurrence_bwd", _bwd_without_recurrence, True),
    ("lstm_recurrence_fwd", _float32_rounding_only("lstm_recurrence_fwd"), False),
    ("lstm_recurrence_bwd", _float32_rounding_only("lstm_recurrence_bwd"), False),
])
def test_contracts_reject_wrong_recurrences(name, fake, fails):
    info = TABLE[name]
    rng = np.random.default_rng(21)
    args = info.sample(rng, (5, 3, 4), "normal")
    if name == "lstm_recurrence_fwd":
        args[4] = args[4] if args[4] is not None else rng.standard_normal(16).astype(F32)
        args[8] = 0
    sargs = [a.astype(np.float64) if isinstance(a, np.ndarray) else a for a in args]
    ref = info.spec(*sargs)
    verdict = contract.compare(fake(*sargs), ref, info.contract.bound(ref, *sargs))
    assert verdict.ok is not fails, verdict.detail


def test_bad_arguments_name_the_primitive():
    rng = np.random.default_rng(0)
    gi, h0, c0, w, b, T, B, H, rev = _bufs(_args(rng, 2, 2, 3))
    with pytest.raises(ShapeError, match=r"^lstm_recurrence_fwd: .*gi"):
        P.lstm_recurrence_fwd(gi, h0, c0, w, b, 3, B, H, rev)
    with pytest.raises(ShapeError, match=r"^lstm_recurrence_fwd: .*b_hh"):
        P.lstm_recurrence_fwd(gi, h0, c0, w, h0, T, B, H, rev)
    with pytest.raises(ArgumentError, match=r"^lstm_recurrence_fwd: argument reverse must be 0 or 1"):
        P.lstm_recurrence_fwd(gi, h0, c0, w, b, T, B, H, 2)
    y, cs, act = P.lstm_recurrence_fwd(gi, h0, c0, w, b, T, B, H, rev)
    with pytest.raises(ShapeError, match=r"^lstm_recurrence_bwd: .*gy"):
        P.lstm_recurrence_bwd(act, cs, c0, w, cs, T, B, H, rev)


def _within_contract(name, outs, args):
    info = TABLE[name]
    sargs = [a.astype(np.float64) if isinstance(a, np.ndarray) else a for a in args]
    ref = info.spec(*sargs)
    verdict = contract.compare(tuple(outs), ref, info.contract.bound(ref, *sargs))
    assert verdict.ok, f"{name}: {verdict.detail}"


@pytest.mark.cuda
@pytest.mark.parametrize("T, B, H", [(35, 20, 650), (5, 33, 65), (3, 1, 7), (0, 4, 8), (4, 0, 8)])
@pytest.mark.parametrize("reverse", [0, 1])
def test_cuda_recurrence_within_the_contract_and_repeatable(T, B, H, reverse, cuda_device):
    """The fused per-step kernels (their own sums, in another order than the CPU's GEMM) within the
    contract at the LSTM LM's size and at odd ones, the backward fed the same forward values as
    the CPU's, both bitwise repeatable on the GPU; the CPU checked alongside."""
    rng = np.random.default_rng(T + B + H + reverse)
    args = _args(rng, T, B, H, True, reverse, 0.1)
    cpu = [o.to_numpy() for o in P.lstm_recurrence_fwd(*_bufs(args))]
    gpu = [o.to_numpy() for o in P.lstm_recurrence_fwd(*_bufs(args, cuda_device))]
    again = [o.to_numpy() for o in P.lstm_recurrence_fwd(*_bufs(args, cuda_device))]
    for a, b in zip(gpu, again):
        np.testing.assert_array_equal(a, b)
    _within_contract("lstm_recurrence_fwd", gpu, args)
    _within_contract("lstm_recurrence_fwd", cpu, args)
    gy = rng.standard_normal((T + 1) * B * H).astype(F32)
    bargs = [cpu[2], cpu[1], args[2], args[3], gy, T, B, H, reverse]
    bg = [o.to_numpy() for o in P.lstm_recurrence_bwd(*_bufs(bargs, cuda_device))]
    bg2 = [o.to_numpy() for o in P.lstm_recurrence_bwd(*_bufs(bargs, cuda_device))]
    for a, b in zip(bg, bg2):
        np.testing.assert_array_equal(a, b)
    _within_contract("lstm_recurrence_bwd", bg, bargs)
    _within_contract("lstm_recurrence_bwd", [o.to_numpy() for o in P.lstm_recurrence_bwd(*_bufs(bargs))], bargs)
