"""narrow / split / chunk / unbind and the one-axis basic slices ``x[..., a:b]``, ``x[:, i]`` along a
dim after the first: one strided copy (the narrow_block primitive) forward and its exact VJP
backward (narrow_block_bwd, or the pieces' gradients joined by concat_block), with no host index
array and no gather or scatter. Values and
gradients equal PyTorch's bit for bit (a move never rounds) on every backend; the primitives'
errors name them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import torchlean as tl
from torchlean.errors import IndexOutOfRangeError, ShapeError
from torchlean.runtime import Buffer
from torchlean.runtime import primitives as P

F32 = np.float32

KEYS = {
    "qkv_split_q": lambda z: z.split(8, dim=2)[0],
    "qkv_split_v": lambda z: z.split(8, dim=2)[2],
    "split_sizes_odd": lambda z: z.split([5, 19], dim=2)[1],
    "chunk_mid": lambda z: z.chunk(3, dim=1)[1],
    "narrow_neg_start": lambda z: z.narrow(1, -3, 2),
    "narrow_full": lambda z: z.narrow(2, 0, 24),
    "narrow_empty": lambda z: z.narrow(2, 7, 0),
    "ellipsis_slice": lambda z: z[..., 3:11],
    "ellipsis_int": lambda z: z[..., 5],
    "ellipsis_mid_slice": lambda z: z[..., 1:3, :],
    "lead_ellipsis_int": lambda z: z[1, ..., 2:9][..., 1],
    "slice_dim1": lambda z: z[:, 2:5],
    "unbind_dim1": lambda z: z.unbind(1)[3],
    "dim0_unchanged": lambda z: z.split(2, dim=0)[1],
}


def _pair(a):
    return tl.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)


def _check_against_torch(fn, a, device, rng):
    x, t = _pair(a)
    if device != "cpu":
        x = tl.tensor(a, device=device, requires_grad=True)
    y, r = fn(x), fn(t)
    assert y.shape == tuple(r.shape)
    assert np.array_equal(y.detach().cpu().numpy(), r.detach().numpy(), equal_nan=True)
    w = rng.standard_normal(tuple(r.shape)).astype(F32)
    (y * tl.tensor(w, device=device)).sum().backward()
    (r * torch.tensor(w)).sum().backward()
    assert np.array_equal(x.grad.cpu().numpy().view(np.uint32), t.grad.numpy().view(np.uint32))


@pytest.mark.parametrize("name", sorted(KEYS))
def test_values_and_gradients_match_torch_bitwise(name, device):
    rng = np.random.default_rng(7)
    a = rng.standard_normal((4, 5, 24)).astype(F32)
    a[0, 0, :4] = [np.nan, np.inf, -np.inf, -0.0]
    _check_against_torch(KEYS[name], a, device, rng)


def test_gradients_of_all_pieces_sum_like_torch(device):
    """q, k, v of a fused projection, each used differently: x.grad joins three placed blocks."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((2, 16, 3 * 32)).astype(F32)
    _check_against_torch(lambda z: (lambda q, k, v: q * 2 + k * k - v)(*z.split(32, dim=2)), a, device, rng)


def test_one_leading_row_is_a_contiguous_slice(device):
    """Dims before the narrowed one all of size 1: the piece is one run (slice0's view path)."""
    rng = np.random.default_rng(5)
    _check_against_torch(lambda z: z[:, :, 2:6], rng.standard_normal((1, 1, 9, 3)).astype(F32), device, rng)


@pytest.mark.parametrize("key", ["split", "ellipsis_slice", "ellipsis_int", "chunk"])
def test_no_host_indices_no_gather_no_scatter(monkeypatch, key):
    """The split of a fused projection (and x[..., a:b]) runs narrow_block forward; backward, the
    pieces' gradients join by concat_block (a tree: pieces - 1 joins, no zeros, no adds) and a lone
    piece is placed by narrow_block_bwd; never a gather or scatter of host indices."""
    calls = []
    for name in ("gather_vec", "gather_rows", "scatter_add", "scatter_add_rows"):
        real = getattr(P, name)
        monkeypatch.setattr(P, name, lambda *a, _n=name, _r=real: calls.append(_n) or _r(*a))
    used = []
    for name in ("narrow_block", "narrow_block_bwd", "concat_block", "add"):
        real = getattr(P, name)
        monkeypatch.setattr(P, name, lambda *a, _n=name, _r=real: used.append(_n) or _r(*a))
    x = tl.randn(2, 16, 3 * 32, requires_grad=True)
    pieces = {"split": lambda: x.split(32, dim=2), "chunk": lambda: x.chunk(3, dim=-1),
              "ellipsis_slice": lambda: (x[..., 40:72],), "ellipsis_int": lambda: (x[..., 9],)}[key]()
    loss = sum((p * (i + 1)).sum() for i, p in enumerate(pieces))
    used.clear()
    loss.backward()
    assert calls == []
    k = len(pieces)
    assert used.count("concat_block") == k - 1 and used.count("narrow_block_bwd") == (1 if k == 1 else 0)
    assert "add" not in used
    want = np.zeros((2, 16, 96), F32)
    if k == 3:
        for i in range(3):
            want[..., 32 * i:32 * (i + 1)] = i + 1
    elif key == "ellipsis_slice":
        want[..., 40:72] = 1
    else:
        want[..., 9] = 1
    assert np.array_equal(x.grad.numpy(), want)


def test_overlapping_and_partial_pieces_sum_like_pytorch(device):
    """Gradients of pieces that overlap, leave gaps or come from two narrowed dims add up as
    PyTorch's (the disjoint ones joined by concat_block, the rest padded and added): within a few
    float32 roundings of the sums, and exact where only disjoint pieces meet."""
    rng = np.random.default_rng(7)
    a = rng.standard_normal((3, 5, 17)).astype(F32)

    def fn(z):
        return z[..., 1:4] * z[..., 3:6] + z[..., 10:13] + z[:, 2:4, :3].sum(1, keepdim=True)

    x = tl.tensor(a, device=device, requires_grad=True)
    t = torch.tensor(a, requires_grad=True)
    w = rng.standard_normal((3, 5, 3)).astype(F32)
    (fn(x) * tl.tensor(w, device=device)).sum().backward()
    (fn(t) * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(x.grad.cpu().numpy(), t.grad.numpy(), rtol=1e-6, atol=1e-6)
    _check_against_torch(lambda z: z[..., :4] * z[..., 4:8] * z[..., 8:12], rng.standard_normal((2, 3, 12)).astype(F32),
                         device, rng)


def test_integer_and_bool_tensors_keep_their_path():
    x = tl.arange(24).reshape(2, 3, 4)
    assert x.narrow(2, 1, 2).tolist() == torch.arange(24).reshape(2, 3, 4).narrow(2, 1, 2).tolist()
    assert x[..., 3].dtype == tl.int64 and x.split(2, dim=1)[1].dtype == tl.int64
    b = x > 5
    assert b.chunk(2, dim=2)[1].tolist() == (torch.arange(24).reshape(2, 3, 4) > 5).chunk(2, dim=2)[1].tolist()


def test_narrow_errors_unchanged():
    x = tl.ones(2, 5)
    with pytest.raises(IndexOutOfRangeError, match=r"^narrow: start 4 and length 2 are out of range for dim 1 "
                                                   r"of size 5$"):
        x.narrow(1, 4, 2)
    with pytest.raises(ShapeError, match=r"^narrow: cannot narrow a 0-d tensor$"):
        tl.tensor(1.0).narrow(0, 0, 1)


@pytest.mark.parametrize("call, match", [
    (lambda b: P.narrow_block(b, 2, 3, 2, 2, 2), r"^narrow_block: start \+ length = 2 \+ 2 exceeds size = 3$"),
    (lambda b: P.narrow_block(b, 2, 4, 0, 1, 2), r"^narrow_block: argument x must hold 16 elements"),
    (lambda b: P.narrow_block_bwd(b, 2, 3, 0, 2, 2), r"^narrow_block_bwd: argument dy must hold 8 elements"),
    (lambda b: P.narrow_block_bwd(b, 2, 3, 1, 3, 2), r"^narrow_block_bwd: start \+ length = 1 \+ 3 exceeds"),
    (lambda b: P.narrow_block(b, -1, 3, 0, 1, 2), r"^narrow_block: .*outer"),
])
def test_primitive_errors_name_the_primitive(call, match):
    with pytest.raises(ShapeError, match=match):
        call(Buffer.from_numpy(np.zeros(12, F32), "cpu"))


def test_primitives_return_new_memory(device):
    """Full width forward is still a copy, never the input's array."""
    x = Buffer.from_numpy(np.arange(12, dtype=F32), device)
    out = P.narrow_block(x, 2, 3, 0, 3, 2)
    assert np.array_equal(out.to_numpy(), np.arange(12, dtype=F32))
    assert out._data is not x._data and not np.shares_memory(np.asarray(out.to_numpy()), x.to_numpy())
    if device == "cpu":
        assert not np.shares_memory(out._data, x._data)


@pytest.mark.cuda
@pytest.mark.parametrize("offset", [0, 1])
@pytest.mark.parametrize("dims", [(8, 2304, 768, 768, 1), (6, 3, 1, 1, 4), (70000, 3, 2, 1, 1)],
                         ids=["gpt2_row", "float4_rows", "many_rows"])
def test_cuda_kernels_float4_and_unaligned_paths(cuda_device, offset, dims):
    """The launcher's float4 path (aligned, multiples of 4) and its float path (a source one float
    past a 16-byte boundary) give NumPy's bits, forward and backward."""
    import cupy

    from torchlean.kernels.cuda import layout

    outer, size, start, length, inner = dims
    rng = np.random.default_rng(11)
    a = rng.standard_normal(outer * size * inner + 1).astype(F32)
    a[offset] = np.nan
    src = a[offset:offset + outer * size * inner]
    got = cupy.asnumpy(layout.narrow_block(cupy.asarray(a)[offset:offset + src.size], outer, size, start, length,
                                           inner))
    want = src.reshape(outer, size, inner)[:, start:start + length].reshape(-1)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    dy = a[offset:offset + want.size]
    back = cupy.asnumpy(layout.narrow_block_bwd(cupy.asarray(a)[offset:offset + dy.size], outer, size, start, length,
                                                inner))
    full = np.zeros((outer, size, inner), F32)
    full[:, start:start + length] = dy.reshape(outer, length, inner)
    assert np.array_equal(back.view(np.uint32), full.reshape(-1).view(np.uint32))
