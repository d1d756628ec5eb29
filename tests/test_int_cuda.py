"""Integer and bool tensors on CUDA through the code written before they lived there: every result
has the CPU run's values and dtype, and keeps its array on the GPU (a CuPy array), never a NumPy
array under a "cuda" device.

Each case is a function of the device; the test runs it on "cpu" and on the GPU and compares.
"""

from __future__ import annotations

import numpy as np
import pytest

import torchlean as tl
import torchlean.nn as nn
from torchlean.errors import ArgumentError

pytestmark = pytest.mark.cuda


def _flat(out):
    if isinstance(out, tl.Tensor):
        return [out]
    if isinstance(out, dict):
        return [t for v in out.values() for t in _flat(v)]
    if isinstance(out, (list, tuple)):
        return [t for v in out for t in _flat(v)]
    return []


def _on(t: tl.Tensor, dev: str) -> None:
    """t lives on dev: its integer array is one of dev's array module (or its float buffer is there)."""
    assert t.device == tl.zeros(1, device=dev).device, (t.device, dev)  # ("cuda" is "cuda:0")
    if t._buf is None:
        module = type(t._arr).__module__.split(".")[0]
        assert module == ("numpy" if dev == "cpu" else "cupy"), (module, dev, t.dtype)
    else:
        assert t._buf.device == t.device


def _same_on_both(fn, dev: str) -> None:
    """fn(device) gives the same values and dtypes on the CPU and on dev, each on its device."""
    want, got = _flat(fn("cpu")), _flat(fn(dev))
    assert len(want) == len(got) > 0
    for w, g in zip(want, got):
        _on(w, "cpu")
        _on(g, dev)
        assert g.dtype == w.dtype and tuple(g.shape) == tuple(w.shape), (g.dtype, w.dtype, g.shape, w.shape)
        np.testing.assert_array_equal(g.numpy(), w.numpy())


def _ints(dev, dtype=tl.int64):
    return tl.tensor([[3, -1, 4, 1], [5, 9, -2, 6], [5, 3, 5, 8]], dtype=dtype, device=dev)


def _mask(dev):
    return tl.tensor([[True, False, True, True], [False, False, True, False], [True, True, False, True]], device=dev)


# -- ops/select.py: take_flat and the functions built on it, unbind, stack, scatter -------------------------
SELECT = {
    "gather": lambda d: _ints(d).gather(1, tl.tensor([[0, 3], [1, 1], [2, 0]], device=d)),
    "take": lambda d: tl.take(_ints(d), tl.tensor([0, 5, 11], device=d)),
    "tril": lambda d: [_ints(d).tril(), _mask(d).triu(1)],
    "flip_roll": lambda d: [_ints(d).flip(0), _mask(d).roll(1, 1), _ints(d, tl.uint8).flip(1)],
    "repeat": lambda d: [_ints(d).repeat(2, 1), _mask(d).repeat_interleave(2, dim=0)],
    "narrow_split": lambda d: [_ints(d).narrow(1, 1, 2), *_mask(d).split(2, 1), *_ints(d, tl.int32).chunk(2, 0)],
    "diag": lambda d: [tl.diag(_ints(d)[0]), _ints(d).diagonal(), _mask(d).diagonal(1)],
    "movedim": lambda d: [_ints(d).movedim(0, 1), _mask(d).t()],
    "masked_select": lambda d: [tl.masked_select(_ints(d), _mask(d)), _ints(d)[_mask(d)]],
    "unbind": lambda d: [*_ints(d).unbind(0), *_mask(d).unbind(1), *_ints(d, tl.uint8).unbind(1)],
    "stack": lambda d: [tl.stack([_ints(d), _ints(d)]), tl.stack([_mask(d), _mask(d)], 2),
                        tl.stack([_ints(d), _ints(d, tl.int32)], 1),  # promoted: int64
                        tl.stack([_ints(d, tl.uint8), _mask(d)])],  # promoted: uint8
    "stack_float_grad": lambda d: _stack_grad(d),
    "scatter": lambda d: [_ints(d).scatter(1, tl.tensor([[0], [2], [3]], device=d), 7),
                          _ints(d).scatter(0, tl.tensor([[2, 0, 1, 0]], device=d), _ints(d)[:1] * 10),
                          _mask(d).scatter(1, tl.tensor([[1], [0], [2]], device=d), True)],
    "scatter_add": lambda d: _ints(d).scatter_add(1, tl.tensor([[0, 0], [1, 3], [2, 2]], device=d),
                                                  tl.ones(3, 2, dtype=tl.int64, device=d)),
    "index_put": lambda d: _ints(d).index_put((tl.tensor([0, 2], device=d),), tl.tensor(0, device=d)),
}


def _stack_grad(dev):
    xs = [tl.tensor([1.0, 2.0, 3.0], device=dev, requires_grad=True) for _ in range(3)]
    y = tl.stack(xs, 0)
    (y * tl.tensor([[1.0], [2.0], [3.0]], device=dev)).sum().backward()
    return [y.detach(), *[x.grad for x in xs]]


@pytest.mark.parametrize("name", sorted(SELECT))
def test_select_functions_on_cuda(name, cuda_device):
    _same_on_both(SELECT[name], cuda_device)


# -- ops/reduce_dim.py --------------------------------------------------------------------------------------
REDUCE = {
    "amax_amin": lambda d: [_ints(d).amax(1), _ints(d).amin(0, keepdim=True), _ints(d).amax(),
                            _mask(d).amax(1), _mask(d).amin(), _ints(d, tl.int32).amax((0, 1))],
    "max_min_dim": lambda d: [*_ints(d).max(1), *_ints(d).min(0), *_mask(d).max(1)],
    "argmax": lambda d: [_ints(d).argmax(1), _ints(d).argmin(), _ints(d, tl.int32).argmax(0)],
    "all_any": lambda d: [_mask(d).all(1), _mask(d).any(0), _ints(d).all(), (_ints(d) > 3).any(1, keepdim=True)],
    "sum_count": lambda d: [_mask(d).sum(), _mask(d).sum(1), _ints(d).sum(0), tl.count_nonzero(_ints(d), 1)],
    "cumsum_prod": lambda d: [_ints(d).cumsum(1), _mask(d).cumsum(0), _ints(d).prod(1), _ints(d).cumprod(0)],
}


@pytest.mark.parametrize("name", sorted(REDUCE))
def test_reductions_on_cuda(name, cuda_device):
    _same_on_both(REDUCE[name], cuda_device)


# -- in-place updates of integer and bool tensors, and the float ones under autograd --------------------
def _int_inplace(dev):
    x = _ints(dev)
    x.add_(2)
    x.mul_(3)
    x.clamp_(-5, 20)
    x[0] = 4
    x[x > 15] = 0
    x[:, 1] = tl.tensor([7, 8, 9], device=dev)
    y = _ints(dev, tl.uint8)
    y.copy_(_ints("cpu"))  # a CPU source: converted and moved, as PyTorch's copy_
    m = _mask(dev)
    m.fill_(True)
    m[0, 0] = False
    z = _ints(dev)
    z.zero_()
    return [x, y, m, z]


def _float_inplace_autograd(dev):
    w = tl.tensor([1.0, -2.0, 3.0, 0.5], device=dev, requires_grad=True)
    y = w * 2.0
    before = y + 1.0
    y.add_(w, alpha=0.5)
    y.clamp_(-3.0, 4.0)
    y[1] = w[0]
    (y.sum() + (before * before).sum()).backward()
    return [y.detach(), w.grad]


@pytest.mark.parametrize("fn", [_int_inplace, _float_inplace_autograd])
def test_inplace_on_cuda(fn, cuda_device):
    _same_on_both(fn, cuda_device)


# -- nn: BatchNorm's num_batches_tracked, Module.to and load_state_dict --------------------------------
def _batchnorm(dev):
    bn = nn.BatchNorm1d(3, device=dev)
    x = tl.tensor(np.arange(12, dtype=np.float32).reshape(4, 3), device=dev)
    bn(x)
    bn(x)
    counted = bn.num_batches_tracked.clone()
    cumulative = nn.BatchNorm1d(3, momentum=None, device=dev)
    cumulative(x)
    cumulative(x * 2.0)
    bn.reset_running_stats()
    return [counted, bn.num_batches_tracked, cumulative.num_batches_tracked, cumulative.running_mean]


def _module_to(dev):
    bn = nn.BatchNorm2d(2)
    bn.to(dev)
    bn(tl.ones(2, 2, 3, 3, device=dev))
    back = nn.BatchNorm2d(2).to(dev)
    back.load_state_dict(bn.state_dict())
    back.cpu().to(dev)
    return [bn.num_batches_tracked, back.num_batches_tracked, back.running_var]


def _load_state_dict(dev):
    m = nn.BatchNorm1d(2, device=dev)
    sd = {"weight": np.ones(2, np.float32) * 3, "bias": np.zeros(2, np.float32),
          "running_mean": np.ones(2, np.float32), "running_var": np.ones(2, np.float32),
          "num_batches_tracked": np.array(41, np.int64)}
    m.load_state_dict(sd)
    m(tl.ones(3, 2, device=dev))
    return [m.num_batches_tracked, m.weight.detach(), m.running_mean]


@pytest.mark.parametrize("fn", [_batchnorm, _module_to, _load_state_dict])
def test_nn_int_buffers_on_cuda(fn, cuda_device):
    _same_on_both(fn, cuda_device)


def _small_int_arith(dev):
    n = tl.tensor(5, dtype=tl.int64, device=dev)
    for _ in range(3):
        n.add_(1)
    u = tl.tensor([250, 3, 7], dtype=tl.uint8, device=dev)
    return [n, n * 2 - 1, u + 10, u * 3, u - 1, u // 2, u % 7, u ** 2, -u, u + n, n > 6]


def test_small_int_arith_on_the_gpu_matches_the_cpu(cuda_device):
    _same_on_both(_small_int_arith, cuda_device)


# -- DLPack ---------------------------------------------------------------------------------------------
def test_dlpack_exports_cuda_int_tensors_as_their_cupy_arrays(cuda_device):
    cupy = pytest.importorskip("cupy")
    x = _ints(cuda_device, tl.int32)
    assert x.__dlpack_device__() == (2, 0)
    a = cupy.from_dlpack(x)
    assert a.dtype == np.int32 and a.tolist() == x.tolist()
    assert a.data.ptr == x._arr.data.ptr  # zero-copy
    m = cupy.from_dlpack(_mask(cuda_device))
    assert m.dtype == np.bool_ and m.tolist() == _mask("cpu").tolist()


def test_dlpack_imports_cupy_int_arrays_keeping_dtype_and_device(cuda_device):
    cupy = pytest.importorskip("cupy")
    src = cupy.arange(12, dtype=cupy.int32).reshape(3, 4)
    t = tl.from_dlpack(src)
    _on(t, cuda_device)
    assert t.dtype == tl.int32 and t.tolist() == src.get().tolist() and t._arr.data.ptr == src.data.ptr
    u = tl.from_dlpack(src.T)  # strided: a contiguous copy
    _on(u, cuda_device)
    assert u.dtype == tl.int32 and u.tolist() == src.get().T.tolist() and u._arr.flags.c_contiguous
    with pytest.raises(ArgumentError, match="copy=False"):
        tl.from_dlpack(src.T, copy=False)
    b = tl.from_dlpack(src > 5)
    _on(b, cuda_device)
    assert b.dtype == tl.bool and (b + 0).sum().item() == 6
    own = _ints(cuda_device)
    c, shared = tl.from_dlpack(own, copy=True), tl.from_dlpack(own)
    _on(c, cuda_device)
    _on(shared, cuda_device)
    assert c._arr.data.ptr != own._arr.data.ptr and shared._arr.data.ptr == own._arr.data.ptr
    assert c.tolist() == own.tolist() and c.dtype == tl.int64


# -- data loading ---------------------------------------------------------------------------------------
def _collate(dev):
    from torchlean.utils.data import DataLoader, TensorDataset, default_collate

    ints, mask = _ints(dev), _mask(dev)
    feats = tl.tensor(np.arange(12, dtype=np.float32).reshape(3, 4), device=dev)
    batch = default_collate([(ints[i], mask[i], feats[i]) for i in range(3)])
    loaded = list(DataLoader(TensorDataset(ints, mask, feats), batch_size=2))
    return [batch, loaded]


def test_collate_keeps_dtype_and_device_on_cuda(cuda_device):
    _same_on_both(_collate, cuda_device)


# -- other places that held host arrays -----------------------------------------------------------------
OTHER = {
    "reshape_view": lambda d: [_ints(d).reshape(2, 6), _mask(d).view(-1), _ints(d).flatten()],
    "data_detach": lambda d: [_ints(d).data, _mask(d).detach(), _ints(d).clone()],
    "casts": lambda d: [_ints(d).to(tl.uint8), _mask(d).long(), _ints(d).bool(), (_ints(d) * 1.5).long()],
    "sign_round": lambda d: [_ints(d).sign(), _ints(d).floor(), _ints(d).abs(), -_ints(d)],
    "index_with_cuda_ints": lambda d: [_ints(d)[tl.tensor([2, 0], device=d)], _ints(d)[:, tl.tensor([1], device=d)]],
    "trunc_normal_init": lambda d: _trunc_normal(d),
}


def _trunc_normal(dev):
    w = tl.zeros(64, device=dev)
    nn.init.trunc_normal_(w, std=2.0, a=-1.0, b=1.0, generator=tl.Generator().manual_seed(3))
    return [(w.abs() <= 1.0).all(), w]  # (the same host draws on both devices)


@pytest.mark.parametrize("name", sorted(OTHER))
def test_other_array_uses_on_cuda(name, cuda_device):
    _same_on_both(OTHER[name], cuda_device)
