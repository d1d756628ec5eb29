"""Packed self-attention: the ``flash_attention_packed`` op and ``MultiheadAttention``'s packed path.

The primitive table already runs ``flash_attention_packed_fwd`` / ``_bwd`` against their float64
specs and contracts (tests/test_primitives_parity.py). Here: the op equals, bit for bit, the route
it replaces (reshape -> permute -> scaled_dot_product_attention -> permute -> reshape), forward and
qkv's gradient; its VJP against float64 finite differences; agreement with PyTorch; the tape (one
node, one backward primitive, no head-moving copies); errors; and MultiheadAttention's packed path
against the path it replaces (slice q, k, v, split_heads, sdpa, merge_heads), bit for bit.
"""

from __future__ import annotations

import math
import types

import numpy as np
import pytest

import torchlean as tl
import torchlean.nn.functional as F
from torchlean import nn, ops, spec
from torchlean.errors import ArgumentError, DeviceError, DTypeError, ShapeError, TorchLeanError
from torchlean.ops import mha
from torchlean.runtime import Buffer
from torchlean.runtime import primitives as P

from test_vjp import _report, _within, fd_grads

try:
    import torch
    import torch.nn.functional as TF
except ImportError:  # pragma: no cover - torch is in the test extra
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
F32 = np.float32


def rand(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(F32)


def route(qkv, heads, attn_mask=None, is_causal=False, scale=None):
    """What flash_attention_packed replaces: move the heads, attend, move them back."""
    *lead, n, e3 = qkv.shape
    e, r = e3 // 3, len(lead)
    x = qkv.reshape(*lead, n, 3, heads, e // heads)
    x = x.permute(r + 1, *range(r), r + 2, r, r + 3)  # (3, *lead, H, L, Eh)
    o = F.scaled_dot_product_attention(x[0], x[1], x[2], attn_mask=attn_mask, is_causal=is_causal, scale=scale)
    return o.permute(*range(r), r + 1, r, r + 2).reshape(*lead, n, e)


def _count_calls(monkeypatch):
    """Record, in order, every public primitive called from now on."""
    calls = []
    for name in dir(P):
        f = getattr(P, name)
        if isinstance(f, types.FunctionType) and not name.startswith("_"):
            monkeypatch.setattr(P, name, lambda *a, _n=name, _f=f, **k: calls.append(_n) or _f(*a, **k))
    return calls


# -- bit for bit against the permute / sdpa route ---------------------------------------------------
DS, LS = (4, 16, 24, 32, 20), (1, 9, 65)
MASKS = ("none", "causal", "LL", "N1LL", "1HLL", "NHLL", "N11L", "float")
LEADS = ((), (2,), (2, 3))


def _bitwise_cases():
    cases = []
    for li, lead in enumerate(LEADS):
        for mi, mask in enumerate(MASKS):
            i = li * len(MASKS) + mi
            cases.append(dict(lead=lead, heads=1 + (mi + li) % 4, d=DS[i % 5], n=LS[(mi + li) % 3], mask=mask,
                              scale=None if (mi + li) % 2 else 0.3))
    cases += [
        dict(lead=(2, 3), heads=2, d=8, n=9, mask="N1HLL", scale=None),  # three leading groups: expanded
        dict(lead=(2,), heads=3, d=16, n=9, mask="N11L-numpy", scale=0.5),  # a host mask (own buffer)
        dict(lead=(2,), heads=2, d=136, n=9, mask="causal", scale=None),  # d > 128
        dict(lead=(), heads=1, d=136, n=65, mask="NHLL", scale=0.1),
        dict(lead=(3,), heads=2, d=16, n=0, mask="none", scale=None),  # empty sequence
    ]
    return [dict(c, seed=i) for i, c in enumerate(cases)]


def _mask_for(rng, kind, lead, heads, n, device):
    """(mask or None, is_causal) of a case; bool: True = take part (some rows fully blocked)."""
    if kind in ("none", "causal"):
        return None, kind == "causal"
    ones = (1,) * len(lead)
    shape = {"LL": (n, n), "N1LL": lead + (1, n, n), "1HLL": ones + (heads, n, n), "NHLL": lead + (heads, n, n),
             "N11L": lead + (1, 1, n), "N11L-numpy": lead + (1, 1, n), "float": lead + (heads, n, n),
             "N1HLL": lead[:1] + (1, heads, n, n)}[kind]
    first = (0,) * len(shape)  # one allowed entry at least: the comparison is never all zeros
    if kind == "float":
        m = rand(rng, *shape)
        m[rng.random(shape) < 0.3] = -np.inf
        m[first] = 0.0
        return tl.tensor(m, device=device), False
    m = rng.random(shape) < 0.7
    m[first] = True
    if kind == "N11L-numpy":
        return m, False
    return tl.tensor(m, device=device), False


@pytest.mark.parametrize("case", _bitwise_cases(),
                         ids=lambda c: f"{c['lead']}-H{c['heads']}-d{c['d']}-L{c['n']}-{c['mask']}-s{c['scale']}")
def test_equals_permute_sdpa_route_bit_for_bit(case, device):
    rng = np.random.default_rng(case["seed"])
    lead, heads, d, n = case["lead"], case["heads"], case["d"], case["n"]
    a = rand(rng, *lead, n, 3 * heads * d)
    g = rand(rng, *lead, n, heads * d)
    mask, causal = _mask_for(rng, case["mask"], lead, heads, n, device)
    x1 = tl.tensor(a, device=device, requires_grad=True)
    x2 = tl.tensor(a, device=device, requires_grad=True)
    ours = F.flash_attention_packed(x1, heads, attn_mask=mask, is_causal=causal, scale=case["scale"])
    ref = route(x2, heads, attn_mask=mask, is_causal=causal, scale=case["scale"])
    assert ours.shape == ref.shape == lead + (n, heads * d)
    ours.backward(tl.tensor(g, device=device))
    ref.backward(tl.tensor(g, device=device))
    o, r = ours.numpy(), ref.numpy()
    np.testing.assert_array_equal(o, r)
    np.testing.assert_array_equal(x1.grad.numpy(), x2.grad.numpy())
    if n:  # not a vacuous comparison
        assert np.any(o != 0) and np.all(np.isfinite(o)) and np.any(x1.grad.numpy() != 0)


def test_layout_against_numpy(device):
    """The layout by hand, without sdpa or torch: qkv (..., L, 3, H, d), head h attends with its
    own q, k, v and writes columns h d .. (h + 1) d of the output (a head-order mistake made by
    both the op and the route would pass the bitwise test, not this one)."""
    rng = np.random.default_rng(11)
    lead, heads, d, n = (2,), 3, 8, 9
    a = rand(rng, *lead, n, 3 * heads * d)
    out = F.flash_attention_packed(tl.tensor(a, device=device), heads, is_causal=True).numpy()
    x = a.reshape(*lead, n, 3, heads, d).astype(np.float64)
    for h in range(heads):
        q, k, v = x[..., 0, h, :], x[..., 1, h, :], x[..., 2, h, :]
        s = q @ np.swapaxes(k, -1, -2) / math.sqrt(d) + np.triu(np.full((n, n), -np.inf), 1)
        p = np.exp(s - s.max(-1, keepdims=True))
        ref = (p / p.sum(-1, keepdims=True)) @ v
        np.testing.assert_allclose(out[..., h * d:(h + 1) * d], ref, rtol=1e-4, atol=1e-5)


# -- VJP against float64 finite differences -------------------------------------------------------
def _ref_packed(mask64, batch, heads, n, d, scale, causal, mode):
    def ref(qkv):
        out, _ = spec.flash_attention_packed_fwd(qkv.reshape(-1), mask64, batch, heads, n, d, scale, causal, mode, None)
        return out.reshape(qkv.shape[:-1] + (heads * d,))
    return ref


@pytest.mark.parametrize("kind, scale", [("none", None), ("causal", 0.7), ("N1LL", None), ("float-LL", 0.7),
                                         ("N11L", 1.3)])
def test_vjp_matches_finite_differences(kind, scale, device):
    rng = np.random.default_rng(sum(map(ord, kind)))
    batch, heads, n, d = 2, 2, 3, 2
    a = rand(rng, batch, n, 3 * heads * d)
    w = rand(rng, batch, n, heads * d)
    mask, causal, mode, mask64 = None, kind == "causal", "none", None
    if kind in ("N1LL", "N11L"):
        shape = (batch, 1, n, n) if kind == "N1LL" else (batch, 1, 1, n)
        m = rng.random(shape) < 0.6
        m[..., 0] = True
        mask, mode = tl.tensor(m, device=device), "hard"
        mask64 = np.broadcast_to(m, (batch, heads, n, n)).astype(np.float64).reshape(-1)
    elif kind == "float-LL":
        m = rand(rng, n, n)
        m[0, 1:] = -np.inf  # a row that sees one key
        mask, mode = tl.tensor(m, device=device), "add"
        mask64 = np.broadcast_to(m, (batch, heads, n, n)).astype(np.float64).reshape(-1)
    x = tl.tensor(a, device=device, requires_grad=True)
    F.flash_attention_packed(x, heads, attn_mask=mask, is_causal=causal, scale=scale).backward(
        tl.tensor(w, device=device))
    sc = float(F32(1.0 / math.sqrt(d) if scale is None else scale))
    (fd,) = fd_grads(_ref_packed(mask64, batch, heads, n, d, sc, causal, mode), [a], w)
    ours = x.grad.numpy()
    assert _within(ours, fd), f"dqkv ({kind}): {_report(ours, fd)}"
    assert not _within(2 * fd, fd) and np.abs(fd).max() > 1e-3


# -- PyTorch agreement ----------------------------------------------------------------------------
TORCH_CASES = [
    dict(lead=(), heads=1, d=16, n=9, mask=None, causal=False),
    dict(lead=(2,), heads=2, d=8, n=17, mask=None, causal=True),
    dict(lead=(2, 3), heads=3, d=4, n=9, mask=("bool", "N1LL"), causal=False),
    dict(lead=(2,), heads=4, d=20, n=9, mask=("float", "NHLL"), causal=False, scale=0.05),
    dict(lead=(2,), heads=2, d=24, n=65, mask=("bool", "N11L"), causal=False),
    dict(lead=(2,), heads=2, d=136, n=5, mask=("bool", "LL"), causal=False, scale=2.0),
]


@needs_torch
@pytest.mark.parametrize("case", TORCH_CASES, ids=lambda c: f"{c['lead']}-H{c['heads']}-d{c['d']}-{c['mask']}")
def test_matches_torch_reshape_permute_sdpa(case, device):
    rng = np.random.default_rng(5)
    lead, heads, d, n = case["lead"], case["heads"], case["d"], case["n"]
    e = heads * d
    a = rand(rng, *lead, n, 3 * e)
    w = rand(rng, *lead, n, e)
    mask = None
    if case["mask"] is not None:
        kind, where = case["mask"]
        shape = {"N1LL": lead + (1, n, n), "NHLL": lead + (heads, n, n), "N11L": lead + (1, 1, n), "LL": (n, n)}[where]
        if kind == "bool":
            mask = rng.random(shape) < 0.7
            mask[..., 0] = True  # no fully blocked row (torch's gradients there are NaN)
        else:
            mask = rand(rng, *shape)
            mask[..., 1:][rng.random(mask[..., 1:].shape) < 0.3] = -np.inf
    scale = case.get("scale")
    x = tl.tensor(a, device=device, requires_grad=True)
    out = F.flash_attention_packed(x, heads, attn_mask=None if mask is None else tl.tensor(mask, device=device),
                                   is_causal=case["causal"], scale=scale)
    out.backward(tl.tensor(w, device=device))
    tdev = "cuda" if device == "cuda" and torch.cuda.is_available() else "cpu"
    t = torch.tensor(a, dtype=torch.float64, device=tdev, requires_grad=True)
    r = len(lead)
    tq, tk, tv = t.reshape(*lead, n, 3, heads, d).permute(r + 1, *range(r), r + 2, r, r + 3).unbind(0)
    tm = None if mask is None else torch.tensor(mask, device=tdev,
                                                dtype=torch.bool if mask.dtype == bool else torch.float64)
    ref = TF.scaled_dot_product_attention(tq, tk, tv, attn_mask=tm, is_causal=case["causal"], scale=scale)
    ref = ref.permute(*range(r), r + 1, r, r + 2).reshape(*lead, n, e)
    ref.backward(torch.tensor(w, dtype=torch.float64, device=tdev))
    tol = lambda z: 2e-5 * (np.abs(z) + np.abs(z).max()) + 1e-6  # noqa: E731
    rr, gg = ref.detach().cpu().numpy(), t.grad.cpu().numpy()
    assert out.shape == rr.shape
    assert np.all(np.abs(out.numpy() - rr) <= tol(rr)), np.abs(out.numpy() - rr).max()
    assert np.all(np.abs(x.grad.numpy() - gg) <= tol(gg)), np.abs(x.grad.numpy() - gg).max()


# -- the tape ---------------------------------------------------------------------------------------
def test_one_tape_node_and_one_primitive_each_way(monkeypatch, device):
    rng = np.random.default_rng(3)
    x = tl.tensor(rand(rng, 2, 7, 24), device=device, requires_grad=True)
    mask = tl.tensor(rng.random((2, 1, 7, 7)) < 0.8, device=device)
    calls = _count_calls(monkeypatch)
    out = F.flash_attention_packed(x, 2, attn_mask=mask)
    assert calls == ["flash_attention_packed_fwd"]  # no head-moving copies, no mask expansion
    node = out._node
    assert node.name == "flash_attention_packed" and len(node.parents) == 1 and node.parents[0] is x
    lse, mask_b = node.workspace  # the row log-sum-exp (B H L) and the uploaded bool mask
    assert lse.size == 2 * 2 * 7 and mask_b.size == 2 * 7 * 7
    calls.clear()
    out.backward(tl.tensor(rand(rng, 2, 7, 8), device=device))
    assert calls == ["flash_attention_packed_bwd"]
    assert node.retired and lse.released and mask_b.released  # workspace released at once


def test_one_node_per_call_and_no_node_without_grad(device):
    x = tl.randn(2, 5, 12, device=device, requires_grad=True)
    y = F.flash_attention_packed(x, 2)
    z = F.flash_attention_packed(ops.linear(y, tl.randn(18, 4, device=device)), 2, is_causal=True)  # a second call
    names, stack, seen = [], [z._node], set()
    while stack:  # the graph's edges are nodes (and leaf tensors, which end a path)
        n = stack.pop()
        if n is None or id(n) in seen or not hasattr(n, "vjp"):
            continue
        seen.add(id(n))
        names.append(n.name)
        stack.extend(n.parents)
    assert names.count("flash_attention_packed") == 2 and len(names) == 3, names  # and the linear's node
    z.sum().backward()
    assert x.grad is not None and np.any(x.grad.numpy() != 0)
    with tl.no_grad():
        assert F.flash_attention_packed(x, 2)._node is None
    assert F.flash_attention_packed(x.detach(), 2)._node is None


# -- errors -----------------------------------------------------------------------------------------
def test_op_errors():
    op = "flash_attention_packed"
    x = tl.zeros(2, 5, 12)
    for bad_dim in (tl.zeros(2, 5, 10), tl.zeros(2, 5, 6), tl.zeros(12)):  # 10 % 6, 6 % (3*4) with 4 heads, 1-D
        with pytest.raises(ShapeError, match=op):
            F.flash_attention_packed(bad_dim, 2 if bad_dim.shape[-1] == 10 else 4)
    for heads in (0, -1, True, 2.0, "2", None):
        with pytest.raises(ArgumentError, match=f"{op}.*num_heads"):
            F.flash_attention_packed(x, heads)
    with pytest.raises(ArgumentError, match=f"{op}.*is_causal"):
        F.flash_attention_packed(x, 2, attn_mask=tl.tensor(np.ones((5, 5), bool)), is_causal=True)
    with pytest.raises(DTypeError, match=f"{op}.*qkv"):
        F.flash_attention_packed(np.zeros((2, 5, 12), F32), 2)
    with pytest.raises(DTypeError, match=f"{op}.*qkv"):
        F.flash_attention_packed(tl.tensor(np.zeros((2, 5, 12), np.int64)), 2)
    with pytest.raises(ShapeError, match=f"{op}.*broadcast"):
        F.flash_attention_packed(x, 2, attn_mask=tl.tensor(np.ones((3, 5, 5), bool)))
    with pytest.raises(ArgumentError, match=f"{op}.*attn_mask"):
        F.flash_attention_packed(x, 2, attn_mask=tl.zeros(5, 5, requires_grad=True))
    with pytest.raises(ArgumentError, match=f"{op}.*scale"):
        F.flash_attention_packed(x, 2, scale="big")
    # every error above is one of ours
    for exc in (ShapeError, ArgumentError, DTypeError):
        assert issubclass(exc, TorchLeanError)
    assert "flash_attention_packed" in dir(F) and F.flash_attention_packed is ops.flash_attention_packed


@pytest.mark.cuda
def test_mask_on_another_device(cuda_device):
    x = tl.zeros(2, 5, 12)
    with pytest.raises(DeviceError, match="flash_attention_packed.*attn_mask"):
        F.flash_attention_packed(x, 2, attn_mask=tl.zeros(5, 5, device=cuda_device))
    with pytest.raises(DeviceError, match="flash_attention_packed"):
        F.flash_attention_packed(tl.zeros(2, 5, 12, device=cuda_device), 2, attn_mask=tl.zeros(5, 5))


def _buf(n):
    return Buffer.from_numpy(np.zeros(n, F32), "cpu")


def test_primitive_buffer_sizes():
    b, h, n, d = 2, 3, 4, 5
    qkv, out, lse = _buf(b * n * 3 * h * d), _buf(b * n * h * d), _buf(b * h * n)
    o, l_ = P.flash_attention_packed_fwd(qkv, None, b, h, n, d, 0.5)  # the right sizes pass
    assert o.size == b * n * h * d and l_.size == b * h * n
    assert P.flash_attention_packed_bwd(qkv, None, out, lse, out, b, h, n, d, 0.5).size == qkv.size
    with pytest.raises(ShapeError, match="flash_attention_packed_fwd.*argument qkv"):
        P.flash_attention_packed_fwd(_buf(qkv.size - 1), None, b, h, n, d, 0.5)
    with pytest.raises(ShapeError, match="flash_attention_packed_bwd.*argument qkv"):
        P.flash_attention_packed_bwd(_buf(qkv.size + d), None, out, lse, out, b, h, n, d, 0.5)
    with pytest.raises(ShapeError, match="flash_attention_packed_bwd.*argument out"):
        P.flash_attention_packed_bwd(qkv, None, _buf(out.size - 1), lse, out, b, h, n, d, 0.5)
    with pytest.raises(ShapeError, match="flash_attention_packed_bwd.*argument lse"):
        P.flash_attention_packed_bwd(qkv, None, out, _buf(b * n), out, b, h, n, d, 0.5)
    with pytest.raises(ShapeError, match="flash_attention_packed_bwd.*argument dout"):
        P.flash_attention_packed_bwd(qkv, None, out, lse, _buf(qkv.size), b, h, n, d, 0.5)
    with pytest.raises(ShapeError, match="flash_attention_packed_fwd.*mask"):  # the layout reads past the end
        P.flash_attention_packed_fwd(qkv, _buf(n * n - 1), b, h, n, d, 0.5, False, "hard", (1, 0, 0, n, 1))


# -- a NaN or inf stays in its row (as for the unpacked primitives; tests/test_attention.py) --------------
# (batch, heads) = (2, 2): pair 2 (batch 1, head 0) holds the specials; its mask blocks keys 2 and 5
# from every query but 0, and query 3 blocks every key. n = 8: the CPU's Numba lanes, n = 40: BLAS tiles.
def _packed_case(rng, mode, n, d=8):
    pairs = 4
    qkv = rand(rng, 2, n, 3, 2, d)
    allow = rng.random((pairs, n, n)) < 0.8
    allow[2, :, [2, 5]] = False
    allow[2, 0, [2, 5]] = True
    allow[2, 1, [0, 1]] = True
    allow[2, 3] = False
    mask = allow.astype(F32) if mode == "hard" else np.where(allow, rand(rng, pairs, n, n, scale=2.0), -np.inf)
    return qkv, mask.astype(F32).reshape(-1)


def _same_bits(a, b):
    return np.array_equal(np.asarray(a).view(np.uint32), np.asarray(b).view(np.uint32))


@pytest.mark.parametrize("n", [8, 40])
@pytest.mark.parametrize("mode", ["add", "hard"])
def test_non_finite_qkv_stay_in_their_rows(device, mode, n):
    from torchlean.testing.primitive_table import TABLE, run_case

    qkv, mask = _packed_case(np.random.default_rng(40), mode, n)
    bad = qkv.copy()
    bad[1, 2, 1, 0, 0], bad[1, 5, 1, 0, 3], bad[1, 6, 0, 0, 2] = np.inf, np.nan, -np.inf  # k2, k5, q6 of pair 2
    args = [bad.reshape(-1), mask, 2, 2, n, 8, 1.0, False, mode, None]
    verdict, (o, l_), _ = run_case(TABLE["flash_attention_packed_fwd"], args, device)
    assert verdict.ok, verdict.detail
    o2, l2 = run_case(TABLE["flash_attention_packed_fwd"], [qkv.reshape(-1)] + args[1:], device)[1]
    o, o2, l_, l2 = o.reshape(2, n, 2, 8), o2.reshape(2, n, 2, 8), l_.reshape(4, n), l2.reshape(4, n)
    rows = [r for r in range(n) if r not in (0, 3, 6)]
    assert np.all(np.isfinite(o[1, rows, 0])) and np.all(np.isfinite(l_[2, rows]))
    assert np.all(o[1, 3, 0] == 0) and l_[2, 3] == -np.inf
    assert _same_bits(o[0], o2[0]) and _same_bits(o[1, :, 1], o2[1, :, 1]) and _same_bits(l_[[0, 1, 3]], l2[[0, 1, 3]])


@pytest.mark.parametrize("n", [8, 40])
@pytest.mark.parametrize("mode", ["add", "hard"])
def test_non_finite_dout_row_reaches_only_the_keys_it_attends(device, mode, n):
    """dS of a blocked key is exactly 0: dout's NaN / inf in query 1 of pair 2 must not reach dk of
    the keys that query blocks, dq of the other queries, nor the other pairs."""
    from torchlean import contract
    from torchlean.testing.primitive_table import TABLE, run_case, spec_args
    from torchlean.testing.table_attention import packed_bwd_args

    qkv, mask = _packed_case(np.random.default_rng(41), mode, n)
    clean = packed_bwd_args([qkv.reshape(-1), mask, 2, 2, n, 8, 1.0, False, mode, None])
    args = list(clean)
    dout = clean[4].reshape(2, n, 2, 8).copy()
    dout[1, 1, 0, :2] = [np.nan, np.inf]
    args[4] = dout.reshape(-1)
    info = TABLE["flash_attention_packed_bwd"]
    _, g, ref = run_case(info, args, device)
    tol = info.contract.bound(ref, *spec_args(args))
    g, ref, tol = (np.asarray(x).reshape(2, n, 3, 2, 8) for x in (g, ref, tol))
    # dq and dk against the spec (dv = P^T dout holds 0 * NaN for the blocked keys: NaN in IEEE)
    verdict = contract.compare(*(x[:, :, :2].reshape(-1) for x in (g, ref, tol)))
    assert verdict.ok, verdict.detail
    assert np.all(np.isnan(g[1, 1, 0, 0])) and np.all(np.isfinite(np.delete(g[1, :, 0, 0], 1, axis=0)))
    assert np.all(np.isfinite(g[1, [2, 5], 1, 0]))
    g2 = run_case(info, clean, device)[1].reshape(2, n, 3, 2, 8)
    assert _same_bits(g[0], g2[0]) and _same_bits(g[1, :, :, 1], g2[1, :, :, 1])


# -- MultiheadAttention: the packed path equals the path it replaces --------------------------------
def _old_fused_path(m, x, attn_mask=None, key_padding_mask=None, is_causal=False):
    """MultiheadAttention's fused self-attention as it was before flash_attention_packed: one GEMM,
    q, k, v sliced out, split_heads, scaled_dot_product_attention, merge_heads, out_proj. (Unbatched
    input took three GEMMs then, as the unsqueeze lost ``query is key is value``; here it is one.)"""
    batched = x.ndim == 3
    if not batched:
        x = ops.unsqueeze(x, 0 if m.batch_first else 1)
        if key_padding_mask is not None:
            key_padding_mask = np.asarray(key_padding_mask).reshape(1, -1)
    if not m.batch_first:
        x = ops.transpose(x, 0, 1)
    N, L, E = x.shape
    qkv = ops.linear(x, m.in_proj_weight, m.in_proj_bias)
    q, k, v = (mha.split_heads(qkv[..., i * E:(i + 1) * E], m.num_heads) for i in range(3))
    mask, mode = m._merged_mask("MultiheadAttention", N, L, L, attn_mask, key_padding_mask, is_causal, x.device)
    sdpa_mask = None
    if mode == "hard":
        sdpa_mask = tl.tensor(np.broadcast_to(mask, np.broadcast_shapes(mask.shape, (1, 1, L, L))).copy(),
                              device=q.device)
    elif mode == "add":
        sdpa_mask = mask
    o = F.scaled_dot_product_attention(q, k, v, attn_mask=sdpa_mask, scale=1.0 / math.sqrt(m.head_dim))
    out = m.out_proj(mha.merge_heads(o))
    if not m.batch_first:
        out = ops.transpose(out, 0, 1)
    return out if batched else ops.squeeze(out, 0 if m.batch_first else 1)


MHA_MASKS = ("none", "bool", "float", "per_head", "padding", "causal", "padding+float", "padding+causal")


@pytest.mark.parametrize("mask_case", MHA_MASKS)
@pytest.mark.parametrize("batch_first, batched", [(True, True), (False, True), (True, False), (False, False)])
def test_mha_packed_path_same_bits_as_before(monkeypatch, device, batch_first, batched, mask_case):
    E, H, L, N = 12, 3, 6, 2
    rng = np.random.default_rng(MHA_MASKS.index(mask_case) + 10 * batch_first + 20 * batched)
    tl.manual_seed(0)
    m = nn.MultiheadAttention(E, H, batch_first=batch_first, device=device)
    with tl.no_grad():  # non-zero biases: every parameter matters
        m.in_proj_bias.copy_(tl.tensor(rand(rng, 3 * E, scale=0.1), device=device))
        m.out_proj.bias.copy_(tl.tensor(rand(rng, E, scale=0.1), device=device))
    nb = N if batched else 1
    shape = ((N, L, E) if batch_first else (L, N, E)) if batched else (L, E)
    a = rand(rng, *shape)
    kw = {}
    if mask_case in ("bool",):
        am = rng.random((L, L)) < 0.3  # True = NOT allowed (PyTorch's MultiheadAttention)
        am[1] = True  # a fully blocked row
        kw["attn_mask"] = tl.tensor(am)
    if mask_case in ("float", "padding+float"):
        am = rand(rng, L, L)
        am[2, 3:] = -np.inf
        kw["attn_mask"] = tl.tensor(am, device=device)
    if mask_case == "per_head":
        kw["attn_mask"] = tl.tensor(rng.random((nb * H, L, L)) < 0.3)
    if mask_case.startswith("padding"):
        kp = np.zeros((nb, L), bool)
        kp[0, -2:] = True
        kw["key_padding_mask"] = tl.tensor(kp if batched else kp[0])
    if mask_case.endswith("causal"):
        kw["is_causal"] = True
    g = rand(rng, *shape)
    results = []
    for which in ("new", "old"):
        x = tl.tensor(a, device=device, requires_grad=True)
        m.zero_grad()
        calls = _count_calls(monkeypatch)
        if which == "new":
            out, w = m(x, x, x, need_weights=False, **kw)
            assert w is None
        else:
            out = _old_fused_path(m, x, **kw)
        assert ("flash_attention_packed_fwd" in calls) == (which == "new")
        assert ("flash_attention_fwd" in calls) == (which == "old")
        monkeypatch.undo()
        out.backward(tl.tensor(g, device=device))
        results.append([out.numpy(), x.grad.numpy()] + [p.grad.numpy() for p in m.parameters()])
    assert results[0][0].shape == shape
    for name, new, old in zip(["out", "d input"] + [n for n, _ in m.named_parameters()], *results):
        np.testing.assert_array_equal(new, old, err_msg=f"{name} ({mask_case})")
    assert np.all(np.isfinite(results[0][0])) and np.any(results[0][1] != 0)


def test_mha_packed_path_only_where_it_applies(monkeypatch):
    E, H, L, N = 8, 2, 5, 3
    x = tl.randn(N, L, E)
    y = tl.randn(N, L, E)

    def packed(m, *args, **kw):
        calls = _count_calls(monkeypatch)
        m(*args, **kw)
        monkeypatch.undo()
        return "flash_attention_packed_fwd" in calls

    m = nn.MultiheadAttention(E, H, batch_first=True)
    assert packed(m, x, x, x, need_weights=False)
    assert not packed(m, x, x, x)  # need_weights=True (the default): the composed path
    assert not packed(m, x, y, y, need_weights=False)  # cross-attention
    assert not packed(m, x, x, y, need_weights=False)
    assert not packed(m, x, x.clone(), x.clone(), need_weights=False)  # equal values, other tensors
    assert packed(nn.MultiheadAttention(E, H, batch_first=True, bias=False), x, x, x, need_weights=False)
    assert not packed(nn.MultiheadAttention(E, H, batch_first=True, kdim=E, vdim=6), x, x, tl.randn(N, L, 6),
                      need_weights=False)
    drop = nn.MultiheadAttention(E, H, dropout=0.5, batch_first=True)
    assert not packed(drop, x, x, x, need_weights=False)  # attention dropout in training: composed
    drop.eval()
    assert packed(drop, x, x, x, need_weights=False)
    u = tl.randn(L, E)
    assert packed(nn.MultiheadAttention(E, H), u, u, u, need_weights=False)  # unbatched self-attention too


@needs_torch
def test_mha_packed_path_matches_torch_with_bias_false():
    """bias=False (no in_proj_bias) through the packed path against torch's module."""
    E, H, L, N = 8, 2, 6, 3
    torch.manual_seed(0)
    theirs = torch.nn.MultiheadAttention(E, H, bias=False, batch_first=True).double()
    ours = nn.MultiheadAttention(E, H, bias=False, batch_first=True)
    ours.load_state_dict({k: v.float() for k, v in theirs.state_dict().items()})
    a = np.random.default_rng(0).standard_normal((N, L, E))
    kp = np.zeros((N, L), bool)
    kp[1, -3:] = True
    out, _ = ours(*(tl.tensor(a.astype(F32)),) * 3, need_weights=False, key_padding_mask=tl.tensor(kp))
    t = torch.tensor(a)
    ref, _ = theirs(t, t, t, need_weights=False, key_padding_mask=torch.tensor(kp))
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("need_weights", [False, True])
def test_mha_host_float_mask_goes_to_the_inputs_device(device, need_weights):
    """A float attn_mask given as a NumPy array is added on the module's device (it once became a
    CPU tensor, and a CUDA module raised DeviceError)."""
    E, H, L, N = 8, 2, 5, 3
    rng = np.random.default_rng(7)
    tl.manual_seed(0)
    m = nn.MultiheadAttention(E, H, batch_first=True, device=device)
    x = tl.tensor(rand(rng, N, L, E), device=device)
    mask = np.where(rng.random((L, L)) < 0.8, rand(rng, L, L), -np.inf).astype(F32)
    np.fill_diagonal(mask, 0.0)
    out, _ = m(x, x, x, attn_mask=mask, need_weights=need_weights)
    ref, _ = m(x, x, x, attn_mask=tl.tensor(mask, device=device), need_weights=need_weights)
    assert out.device == x.device
    np.testing.assert_array_equal(out.numpy(), ref.numpy())
