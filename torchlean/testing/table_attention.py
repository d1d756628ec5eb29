"""Primitive-table entries of the attention family: flash_attention_fwd and its backward passes,
and the packed self-attention pair (flash_attention_packed_fwd / _bwd: qkv (batch, n, 3, heads, d)).

Random cases draw (batch, n_q, n_k, d), a mask mode, causal, and a dense or broadcast mask
layout; edge cases cover the CUDA tile boundaries (n = 1, 17, 65, 130), n_q != n_k, d in
{16, 32, 64, 128} and odd d (24, 80), fully blocked rows, empty sizes, large scales and NaN.
"""

from __future__ import annotations

import numpy as np

from .. import spec
from .table_core import SUM_KINDS, PrimitiveInfo, add

F32 = np.float32
MODES = ("none", "fill", "hard", "add")
FWD = "flash_attention_fwd"
BWD = ("flash_attention_bwd_q", "flash_attention_bwd_k", "flash_attention_bwd_v", "flash_attention_bwd_kv",
       "flash_attention_bwd")


def _vals(rng, n, kind):
    """q/k values of a kind; 'wide' means magnitudes 1e-3 .. 30 (scores up to ~1e3 d: rows near
    one-hot), 'special_sum' sprinkles NaN, +-inf and 0 (q and k only: v stays finite, since a
    blocked key's 0 weight times inf is NaN or not depending on the tiling)."""
    if kind == "int":
        return rng.integers(-3, 4, n).astype(F32)
    if kind == "wide":
        return (10.0 ** rng.uniform(-3, 1.5, n) * rng.choice([-1.0, 1.0], n)).astype(F32)
    v = rng.standard_normal(n).astype(F32)
    if kind == "special_sum" and n:
        pick = rng.random(n) < 0.05
        v[pick] = rng.choice(np.array([np.nan, np.inf, -np.inf, 0.0, 1e-38], F32), int(pick.sum()))
    return v


def layout_for(rng, batch, n_q, n_k):
    """(mask size, layout): dense, or a broadcast one (shared over heads, over batch, over queries)."""
    heads = next((h for h in (3, 2, 1) if batch % h == 0), 1) if batch else 1
    n = batch // heads if batch else 0
    c = int(rng.integers(0, 4))
    if c == 0:
        return batch * n_q * n_k, None
    if c == 1:  # (L, S) shared by every batch
        return n_q * n_k, (heads, 0, 0, n_k, 1)
    if c == 2:  # (N, 1, L, S)
        return n * n_q * n_k, (heads, n_q * n_k, 0, n_k, 1)
    return n * n_k, (heads, n_k, 0, 0, 1)  # key padding (N, 1, 1, S)


def mask_values(rng, size, mode, p_allow=0.75, kind="normal"):
    if mode == "none":
        return None
    allow = rng.random(size) < p_allow
    if mode in ("fill", "hard"):
        return allow.astype(F32)
    add = rng.standard_normal(size).astype(F32) * (3.0 if kind != "int" else 1.0)
    if kind == "int":
        add = np.round(add)
    return np.where(allow, add, F32(-np.inf)).astype(F32)


def fwd_args(q, k, v, mask, batch, n_q, n_k, d, scale, causal, mode, layout):
    return [q, k, v, mask, batch, n_q, n_k, d, float(F32(scale)), bool(causal), mode, layout]


def _draw(rng, dims, kind):
    batch, n_q, n_k, d = dims
    batch = batch % 4
    mode = MODES[int(rng.integers(0, 4))]
    causal = bool(rng.random() < 0.3)
    size, layout = layout_for(rng, batch, n_q, n_k)
    mask = mask_values(rng, size, mode, kind=kind)
    if mode == "none":
        layout = None
    scale = float(rng.choice([1.0 / np.sqrt(max(d, 1)), 1.0, 0.125])) if kind != "int" else 1.0
    return fwd_args(_vals(rng, batch * n_q * d, kind), _vals(rng, batch * n_k * d, kind),
                    _vals(rng, batch * n_k * d, "int" if kind == "int" else "normal"), mask,
                    batch, n_q, n_k, d, scale, causal, mode, layout)


def bwd_args(fargs, dout=None, rng=None):
    """The backward's arguments: out and lse from the spec forward rounded to float32."""
    q, k, v, mask, batch, n_q, n_k, d, scale, causal, mode, layout = fargs
    f64 = [a.astype(np.float64) if isinstance(a, np.ndarray) else a for a in fargs]
    out, lse = spec.flash_attention_fwd(*f64)
    if dout is None:
        dout = (rng or np.random.default_rng(0)).standard_normal(batch * n_q * d).astype(F32)
    return [q, k, v, mask, out.astype(F32), lse.astype(F32), dout, batch, n_q, n_k, d, scale, causal, mode, layout]


def _draw_bwd(rng, dims, kind):
    return bwd_args(_draw(rng, dims, kind), rng=rng)


def _case(seed, batch, n_q, n_k, d, mode="none", causal=False, scale=None, layout="dense", p_allow=0.75,
          nan_q=False):
    rng = np.random.default_rng(seed)
    if layout == "dense":
        size, lay = batch * n_q * n_k, None
    else:
        size, lay = layout
    mask = mask_values(rng, size, mode, p_allow)
    q = rng.standard_normal(batch * n_q * d).astype(F32)
    if nan_q and q.size:
        q[d * (n_q // 2) + 1] = np.nan
    k = rng.standard_normal(batch * n_k * d).astype(F32)
    v = rng.standard_normal(batch * n_k * d).astype(F32)
    return fwd_args(q, k, v, mask, batch, n_q, n_k, d, 1.0 / np.sqrt(max(d, 1)) if scale is None else scale,
                    causal, mode, None if mode == "none" else lay)


def _blocked_rows(seed, mode):
    """Rows 0 and 3 fully blocked (hard: zeros, fill: uniform, add: -inf everywhere)."""
    args = _case(seed, 2, 5, 7, 16, mode)
    m = args[3].reshape(2, 5, 7)
    m[:, 0, :] = 0.0 if mode != "add" else -np.inf
    m[1, 3, :] = 0.0 if mode != "add" else -np.inf
    return args


FWD_EDGES = [
    _case(1, 0, 3, 3, 4), _case(2, 2, 0, 3, 4), _case(3, 2, 3, 0, 4), _case(4, 2, 3, 3, 0),
    _case(5, 2, 3, 0, 4, "hard", causal=True),
    _case(6, 1, 1, 1, 16), _case(7, 2, 17, 17, 32, "fill"), _case(8, 1, 65, 65, 64, "hard", causal=True),
    _case(9, 1, 130, 67, 24, "add"), _case(10, 1, 33, 130, 80, "none", causal=True),
    _case(11, 1, 66, 129, 128, "hard"), _case(12, 1, 130, 130, 64, causal=True),
    _case(13, 2, 70, 40, 16, "fill", causal=True), _case(14, 3, 20, 70, 32, "add", causal=True),
    _case(15, 4, 9, 11, 48, "hard", layout=(9 * 11, (4, 0, 0, 11, 1))),       # (L, S) broadcast
    _case(16, 6, 9, 11, 8, "add", layout=(2 * 11, (3, 11, 0, 0, 1))),         # key padding (N, 1, 1, S)
    _case(17, 6, 9, 11, 8, "fill", layout=(2 * 9 * 11, (2, 0, 99, 11, 1))),   # (1, H, L, S)
    _case(18, 2, 12, 12, 16, scale=100.0), _case(19, 2, 12, 12, 16, "add", causal=True, scale=60.0),
    _case(20, 2, 12, 12, 16, "hard", p_allow=0.1), _case(21, 2, 9, 9, 16, nan_q=True),
    _case(22, 2, 9, 9, 16, "hard", causal=True, nan_q=True),
    _blocked_rows(23, "hard"), _blocked_rows(24, "fill"), _blocked_rows(25, "add"),
    _case(26, 1, 200, 1100, 20, "add", causal=True),  # several CPU key tiles
    _case(28, 40, 6, 5, 4, "hard", layout=(20 * 5, (2, 5, 0, 0, 1))),  # many entries per CPU work item
]
BWD_EDGES = [bwd_args(a) for a in FWD_EDGES if a[4] * a[5] * a[6] * a[7] == 0][:3] + [
    bwd_args(FWD_EDGES[i], rng=np.random.default_rng(i)) for i in (5, 6, 7, 8, 9, 10, 12, 13, 14, 15, 16, 17, 18, 19,
                                                                     20, 23, 24, 25)] + [
    bwd_args(_case(27, 1, 300, 1100, 8, "add", causal=True), rng=np.random.default_rng(27)),  # several CPU tiles
    bwd_args(_case(28, 40, 6, 5, 4, "hard", layout=(20 * 5, (2, 5, 0, 0, 1))), rng=np.random.default_rng(28)),
]
# (no NaN cases in the backward: a NaN in q reaches dK_j through 0 * NaN for keys the row blocks
# on some BLAS and not on others; the forward's NaN rows are pinned by FWD_EDGES)

add(PrimitiveInfo(FWD, _draw, 4, edge_cases=FWD_EDGES, max_dim=9, kinds=SUM_KINDS))
for _n in BWD:
    add(PrimitiveInfo(_n, _draw_bwd, 4, edge_cases=BWD_EDGES, max_dim=9, kinds=("normal", "wide", "int")))


# -- packed self-attention: qkv (batch, n, 3, heads, d), masks over the batch*heads pairs ---------------
PACKED_FWD, PACKED_BWD = "flash_attention_packed_fwd", "flash_attention_packed_bwd"


def packed_fwd_args(qkv, mask, batch, heads, n, d, scale, causal, mode, layout):
    return [qkv, mask, batch, heads, n, d, float(F32(scale)), bool(causal), mode, layout]


def packed_bwd_args(fargs, rng=None):
    """The backward's arguments: out and lse from the spec forward rounded to float32."""
    qkv, mask, batch, heads, n, d, scale, causal, mode, layout = fargs
    out, lse = spec.flash_attention_packed_fwd(qkv, mask, batch, heads, n, d, scale, causal, mode, layout)
    dout = (rng or np.random.default_rng(0)).standard_normal(batch * n * heads * d).astype(F32)
    return [qkv, mask, out.astype(F32), lse.astype(F32), dout, batch, heads, n, d, scale, causal, mode, layout]


def _draw_packed(rng, dims, kind):
    batch, heads, n, d = dims
    batch, heads = batch % 3, 1 + heads % 3
    mode = MODES[int(rng.integers(0, 4))]
    size, layout = layout_for(rng, batch * heads, n, n)
    mask = mask_values(rng, size, mode, kind=kind)
    scale = float(rng.choice([1.0 / np.sqrt(max(d, 1)), 1.0, 0.125])) if kind != "int" else 1.0
    qkv = _vals(rng, batch * n * 3 * heads * d, "int" if kind == "int" else "normal")
    if kind in ("wide", "special_sum"):  # q and k only: v stays finite (see _vals)
        qk = qkv.reshape(batch, n, 3, heads, d)
        qk[:, :, :2] = _vals(rng, batch * n * 2 * heads * d, kind).reshape(batch, n, 2, heads, d)
    return packed_fwd_args(qkv, mask, batch, heads, n, d, scale, bool(rng.random() < 0.3), mode,
                           None if mode == "none" else layout)


def _draw_packed_bwd(rng, dims, kind):
    return packed_bwd_args(_draw_packed(rng, dims, kind), rng=rng)


def _pcase(seed, batch, heads, n, d, mode="none", causal=False, layout="dense", nan=False):
    rng = np.random.default_rng(seed)
    size, lay = (batch * heads * n * n, None) if layout == "dense" else layout
    qkv = rng.standard_normal(batch * n * 3 * heads * d).astype(F32)
    if nan and qkv.size:
        qkv[(n // 2) * 3 * heads * d + 1] = np.nan  # a q entry of row n // 2, head 0
    return packed_fwd_args(qkv, mask_values(rng, size, mode), batch, heads, n, d, 1.0 / np.sqrt(max(d, 1)), causal,
                           mode, None if mode == "none" else lay)


# CUDA: tile edges (n = 1, 17, 65, 130), d in each instantiation (16, 32, 64, 128), odd d (24: scalar
# loads), d = 20 (float4 rows but a head stride of 20 floats), d > 128 (the generic kernels), masks
# dense and broadcast over the (batch, head) pairs, NaN, empty sizes.
PACKED_FWD_EDGES = [
    _pcase(1, 0, 2, 3, 4), _pcase(2, 2, 2, 0, 4), _pcase(3, 2, 2, 3, 0),
    _pcase(4, 1, 1, 1, 16), _pcase(5, 2, 4, 17, 32, causal=True), _pcase(6, 2, 3, 65, 64, "hard", causal=True),
    _pcase(7, 1, 2, 130, 24, "add"), _pcase(8, 3, 2, 66, 128, "fill"), _pcase(9, 2, 2, 40, 20, causal=True),
    _pcase(10, 2, 2, 19, 136, "hard"), _pcase(11, 2, 3, 9, 16, "add", layout=(2 * 9, (3, 9, 0, 0, 1))),  # key padding
    _pcase(12, 2, 3, 9, 8, "hard", layout=(3 * 81, (3, 0, 81, 9, 1))),  # (1, H, L, S)
    _pcase(13, 2, 2, 9, 16, nan=True), _pcase(14, 4, 4, 11, 32, causal=True),
]
PACKED_BWD_EDGES = [packed_bwd_args(a, rng=np.random.default_rng(i))
                    for i, a in enumerate(PACKED_FWD_EDGES) if not i == 12]  # (no NaN backward: see BWD_EDGES)

add(PrimitiveInfo(PACKED_FWD, _draw_packed, 4, edge_cases=PACKED_FWD_EDGES, max_dim=9, kinds=SUM_KINDS))
add(PrimitiveInfo(PACKED_BWD, _draw_packed_bwd, 4, edge_cases=PACKED_BWD_EDGES, max_dim=9,
                   kinds=("normal", "wide", "int")))
