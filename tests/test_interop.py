"""DLPack exchange (torchlean._dlpack) and PyTorch state dicts (torchlean.interop)."""

from __future__ import annotations

import numpy as np
import pytest

import torchlean as tl
from torchlean import _dlpack, nn
from torchlean.errors import ArgumentError, AutogradError, DTypeError
from torchlean.interop import state_dict_from_torch, state_dict_to_torch

torch = pytest.importorskip("torch")
from_dlpack = _dlpack.from_dlpack


@pytest.fixture(autouse=True)
def _bound(monkeypatch):
    """Bind the DLPack methods for these tests even before torchlean/__init__ does it."""
    monkeypatch.setattr(tl.Tensor, "__dlpack__", _dlpack.tensor_dlpack, raising=False)
    monkeypatch.setattr(tl.Tensor, "__dlpack_device__", _dlpack.tensor_dlpack_device, raising=False)


def test_public_names_bound():
    import torchlean

    if not hasattr(torchlean, "from_dlpack"):
        pytest.skip("torchlean.from_dlpack not exported yet (the lead wires torchlean/__init__.py)")
    assert torchlean.from_dlpack is _dlpack.from_dlpack


# -- export ------------------------------------------------------------------------------------------
def _cpu_array(t: tl.Tensor) -> np.ndarray:
    return t._buf.data


def test_export_numpy_zero_copy():
    t = tl.randn(3, 4)
    assert t.__dlpack_device__() == (1, 0)
    a = np.from_dlpack(t)
    assert a.shape == (3, 4) and a.dtype == np.float32
    np.testing.assert_array_equal(a, t.numpy())
    assert np.shares_memory(a, _cpu_array(t))
    a[1, 2] = 42.0  # documented: mutating the exported array mutates the tensor
    assert t.numpy()[1, 2] == 42.0


def test_export_torch_zero_copy():
    t = tl.arange(6.0).reshape(2, 3)
    x = torch.from_dlpack(t)
    assert x.dtype == torch.float32 and tuple(x.shape) == (2, 3)
    np.testing.assert_array_equal(x.numpy(), t.numpy())
    x.mul_(2)
    np.testing.assert_array_equal(t.numpy(), np.arange(6.0, dtype=np.float32).reshape(2, 3) * 2)
    # an in-place torchlean update rebinds the tensor to a new buffer: the consumer keeps the old values
    t.add_(1.0)
    assert x[0, 1].item() == 2.0 and t.numpy()[0, 1] == 3.0


def test_export_edge_cases():
    s = tl.tensor(3.5)  # 0-d
    assert np.from_dlpack(s).shape == () and np.from_dlpack(s)[()] == 3.5
    e = tl.zeros(0, 3)
    assert np.from_dlpack(e).shape == (0, 3)
    idx = tl.tensor([1, 2, 3])
    a = np.from_dlpack(idx)
    assert a.dtype == np.int64 and a.tolist() == [1, 2, 3]
    assert torch.from_dlpack(tl.tensor([True, False])).dtype == torch.bool
    assert np.from_dlpack(tl.randn(3), copy=True).shape == (3,)
    w = tl.randn(2, requires_grad=True)
    with pytest.raises(AutogradError, match=r"__dlpack__: cannot export a tensor that requires grad"):
        np.from_dlpack(w)
    np.from_dlpack(w.detach())
    r = tl.randn(2)
    r._buf.release()
    with pytest.raises(tl.BufferReleasedError):
        np.from_dlpack(r)


def test_export_cuda(cuda_device):
    import cupy

    t = tl.randn(5, 7, device=cuda_device)
    assert t.__dlpack_device__() == (2, 0)
    c = cupy.from_dlpack(t)
    assert c.shape == (5, 7) and c.data.ptr == t._buf.data.data.ptr
    x = torch.from_dlpack(t) if torch.cuda.is_available() else None
    if x is not None:
        assert x.is_cuda and x.data_ptr() == c.data.ptr
    back = from_dlpack(c)
    assert back.device == "cuda:0" and back._buf.data.data.ptr == c.data.ptr
    s = from_dlpack(cupy.arange(12, dtype=cupy.float64).reshape(3, 4)[:, ::2])
    np.testing.assert_array_equal(s.numpy(), np.arange(12.0, dtype=np.float32).reshape(3, 4)[:, ::2])


# -- import ------------------------------------------------------------------------------------------
def test_import_numpy():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = from_dlpack(a)
    assert t.shape == (3, 4) and t.device == "cpu" and t.dtype == tl.float32
    assert np.shares_memory(_cpu_array(t), a)
    a[0, 0] = -1.0
    assert t.numpy()[0, 0] == -1.0
    assert (t * 2.0).numpy()[0, 0] == -2.0  # usable in computations
    c = from_dlpack(a, copy=True)
    assert not np.shares_memory(_cpu_array(c), a)
    # not contiguous / not float32: copied and converted
    v = from_dlpack(a.T)
    np.testing.assert_array_equal(v.numpy(), a.T)
    assert not np.shares_memory(_cpu_array(v), a)
    d = from_dlpack(np.linspace(0, 1, 5))  # float64
    assert d.dtype == tl.float32 and np.array_equal(d.numpy(), np.linspace(0, 1, 5).astype(np.float32))
    with pytest.raises(ArgumentError, match="needs a copy.*copy=False"):
        from_dlpack(a.T, copy=False)
    i = from_dlpack(np.array([[1, 2]], dtype=np.int32))  # its dtype kept, as torch.from_dlpack keeps it
    assert i.dtype == tl.int32 and i.numpy().tolist() == [[1, 2]]
    assert torch.from_dlpack(np.array([[1, 2]], dtype=np.int32)).dtype == torch.int32
    u = from_dlpack(np.array([1, 2], dtype=np.uint16))  # no uint16 in torchlean: int64
    assert u.dtype == tl.int64 and u.numpy().tolist() == [1, 2]
    assert from_dlpack(np.zeros((0, 2), np.float32)).shape == (0, 2)
    z = from_dlpack(np.array(2.5, np.float32))
    assert z.shape == () and z.item() == 2.5


def test_import_torch():
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    t = from_dlpack(x)
    assert t.shape == (2, 3) and np.shares_memory(_cpu_array(t), x.numpy())
    x.add_(10)
    assert t.numpy()[0, 0] == 10.0
    y = from_dlpack(x.t())  # strided: a copy
    np.testing.assert_array_equal(y.numpy(), x.t().numpy())
    h = from_dlpack(torch.tensor([1.5, 2.25], dtype=torch.float16))
    assert h.numpy().tolist() == [1.5, 2.25]
    n = from_dlpack(torch.tensor([3, 4]))
    assert n.dtype == tl.int64 and n.numpy().tolist() == [3, 4]
    with pytest.raises(DTypeError, match="complex"):
        from_dlpack(torch.zeros(2, dtype=torch.complex64))
    with pytest.raises(DTypeError, match="expected an object with __dlpack__"):
        from_dlpack([1.0, 2.0])
    with pytest.raises(ArgumentError, match="copy must be"):
        from_dlpack(x, copy="yes")


def test_round_trip_through_torch_and_self():
    t = tl.randn(4, 5)
    back = from_dlpack(torch.from_dlpack(t))
    assert np.shares_memory(_cpu_array(back), _cpu_array(t))
    same = from_dlpack(t)
    assert same._buf is t._buf and not same.requires_grad
    assert from_dlpack(t, copy=True)._buf is not t._buf


# -- state dicts ---------------------------------------------------------------------------------------
class _TorchNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.proj = torch.nn.Linear(8, 16)
        self.ln = torch.nn.LayerNorm(16)
        self.attn = torch.nn.MultiheadAttention(16, 4, batch_first=True)
        self.head = torch.nn.Linear(16, 5)

    def forward(self, x):
        h = self.bn(self.conv(x))  # (B, 8, H, W)
        h = h.flatten(2).transpose(1, 2)  # (B, HW, 8)
        h = self.ln(self.proj(h))
        a, _ = self.attn(h, h, h, need_weights=False)
        return self.head(a + h)


class _LeanNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.proj = nn.Linear(8, 16)
        self.ln = nn.LayerNorm(16)
        self.attn = nn.MultiheadAttention(16, 4, batch_first=True)
        self.head = nn.Linear(16, 5)

    def forward(self, x):
        h = self.bn(self.conv(x))
        b, c = h.shape[0], h.shape[1]
        h = h.reshape(b, c, -1).transpose(1, 2)
        h = self.ln(self.proj(h))
        a, _ = self.attn(h, h, h, need_weights=False)
        return self.head(a + h)


def test_state_dict_round_trip_through_torch():
    torch.manual_seed(0)
    tm = _TorchNet()
    with torch.no_grad():  # non-trivial running statistics and norm affine parameters
        tm.train()
        for _ in range(3):
            tm(torch.randn(2, 3, 4, 4))
        tm.ln.weight.uniform_(0.5, 1.5)
        tm.bn.bias.uniform_(-0.5, 0.5)
    tm.eval()
    tsd = tm.state_dict()
    assert tsd["bn.num_batches_tracked"].item() == 3

    lsd = state_dict_from_torch(tsd)
    assert list(lsd) == list(tsd)
    assert lsd["bn.num_batches_tracked"].dtype == tl.int64 and lsd["bn.num_batches_tracked"].shape == ()
    assert lsd["bn.num_batches_tracked"].item() == 3
    lm = _LeanNet()
    lm.load_state_dict(lsd)
    lm.eval()

    x = np.random.RandomState(0).standard_normal((2, 3, 4, 4)).astype(np.float32)
    with torch.no_grad():
        want = tm(torch.from_numpy(x)).numpy()
    got = lm(tl.tensor(x)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)

    back = state_dict_to_torch(lm)
    assert list(back) == list(tsd)
    for k, v in tsd.items():
        assert back[k].dtype == v.dtype, k
        assert torch.equal(back[k], v), k  # bitwise: float32 values and the int64 counter survive
    tm2 = _TorchNet()
    tm2.load_state_dict(back)
    tm2.eval()
    with torch.no_grad():
        assert torch.equal(tm2(torch.from_numpy(x)), torch.from_numpy(want))
    # copies, not views: training one side does not move the other
    with torch.no_grad():
        tm.head.weight.add_(1.0)
    assert not np.array_equal(lsd["head.weight"].numpy(), tm.head.weight.detach().numpy())


def test_state_dict_conversions():
    sd = {"a": torch.ones(2, dtype=torch.float64), "b": torch.tensor([1, 2], dtype=torch.int32),
          "c": torch.tensor([True]), "d": torch.ones(3, dtype=torch.bfloat16), "e": np.zeros(2)}
    out = state_dict_from_torch(sd)
    assert out["a"].dtype == tl.float32 and out["b"].dtype == tl.int64 and out["c"].dtype == tl.bool
    assert out["d"].numpy().tolist() == [1.0, 1.0, 1.0] and out["e"].dtype == tl.float32
    t = state_dict_to_torch(out)
    assert t["a"].dtype == torch.float32 and t["b"].dtype == torch.int64 and t["c"].dtype == torch.bool
    assert state_dict_from_torch(torch.nn.Linear(2, 3))["weight"].shape == (3, 2)
    with pytest.raises(DTypeError, match=r"entry 'z' is complex"):
        state_dict_from_torch({"z": torch.zeros(1, dtype=torch.complex64)})
    with pytest.raises(DTypeError, match=r"entry 'x' is a str"):
        state_dict_from_torch({"x": "nope"})
    with pytest.raises(DTypeError, match=r"state_dict_to_torch: entry 'x' is a int"):
        state_dict_to_torch({"x": 3})
    with pytest.raises(DTypeError, match="expected a state dict"):
        state_dict_to_torch(5)


def test_state_dict_device(device):
    lsd = state_dict_from_torch({"w": torch.ones(2, 2), "n": torch.tensor(4)}, device=device)
    assert lsd["w"].device == tl.tensor(0.0, device=device).device
    back = state_dict_to_torch(lsd)
    assert back["w"].device.type == "cpu" and back["n"].item() == 4


# -- optimizer steps over shared memory: torchlean never writes into memory it does not own alone ----
_OPTIMIZERS = {
    "sgd": lambda ps: tl.optim.SGD(ps, lr=0.1),
    "sgd_momentum": lambda ps: tl.optim.SGD(ps, lr=0.1, momentum=0.9),
    "adam": lambda ps: tl.optim.Adam(ps, lr=0.1),
    "adamw": lambda ps: tl.optim.AdamW(ps, lr=0.1),
}


def _numpy_source(writable: bool):
    a = np.linspace(-1.0, 1.0, 24, dtype=np.float32).reshape(4, 6)
    a.flags.writeable = writable
    return a


_SOURCES = {
    "numpy": lambda: _numpy_source(True),
    "numpy_readonly": lambda: _numpy_source(False),
    "torch": lambda: torch.linspace(-1.0, 1.0, 24, dtype=torch.float32).reshape(4, 6),
}


def _host(src) -> np.ndarray:
    return np.array(src.numpy() if hasattr(src, "detach") else src, copy=True)


def _train(p: tl.Tensor, make_opt, steps: int = 3) -> np.ndarray:
    opt = make_opt([p])
    for _ in range(steps):
        opt.zero_grad()
        (p * p * p).sum().backward()
        opt.step()
    return p.detach().numpy()


@pytest.mark.parametrize("source", sorted(_SOURCES))
@pytest.mark.parametrize("name", sorted(_OPTIMIZERS))
def test_optimizer_step_leaves_a_dlpack_source_untouched(name, source):
    src = _SOURCES[source]()
    before = _host(src)
    p = from_dlpack(src).requires_grad_(True)
    assert np.shares_memory(_cpu_array(p), np.asarray(src.numpy() if hasattr(src, "detach") else src))
    got = _train(p, _OPTIMIZERS[name])  # read-only sources used to fail inside Numba (TypingError)
    assert np.array_equal(_host(src).view(np.uint32), before.view(np.uint32))  # the source kept its values
    want = _train(tl.tensor(before, requires_grad=True), _OPTIMIZERS[name])  # the same run on a copy
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    assert not np.shares_memory(_cpu_array(p), before)


@pytest.mark.parametrize("name", sorted(_OPTIMIZERS))
def test_optimizer_step_over_an_imported_torchlean_tensor_keeps_the_other(name):
    q = tl.tensor(np.arange(1.0, 7.0, dtype=np.float32))
    p = from_dlpack(q).requires_grad_(True)  # the same buffer, no copy
    _train(p, _OPTIMIZERS[name], steps=1)
    assert q.numpy().tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]


@pytest.mark.parametrize("name", sorted(_OPTIMIZERS))
def test_optimizer_step_on_a_view_buffer_leaves_its_source_alone(name):
    from torchlean.runtime import primitives as P

    whole = tl.Tensor._wrap(rt_buffer(np.arange(16, dtype=np.float32)), (16,))
    view = P.slice1d(whole._buf, 16, 4, 8)  # a view (start a multiple of 4): no copy
    assert view._data.base is not None and np.shares_memory(view._data, whole._buf._data)
    p = tl.Tensor._wrap(view, (8,)).requires_grad_(True)
    _train(p, _OPTIMIZERS[name])
    assert whole.numpy().tolist() == list(range(16))
    # and the other way round: stepping the source leaves the view's values alone
    src = tl.Tensor._wrap(rt_buffer(np.arange(16, dtype=np.float32)), (16,))
    kept = tl.Tensor._wrap(P.slice1d(src._buf, 16, 8, 8), (8,))
    _train(src.requires_grad_(True), _OPTIMIZERS[name])
    assert kept.numpy().tolist() == list(range(8, 16))


def rt_buffer(a: np.ndarray):
    from torchlean.runtime import Buffer

    return Buffer.from_numpy(a)


@pytest.mark.cuda
@pytest.mark.parametrize("name", sorted(_OPTIMIZERS))
def test_optimizer_step_leaves_a_cupy_source_untouched(cuda_device, name):
    cupy = pytest.importorskip("cupy")
    src = cupy.linspace(-1.0, 1.0, 24, dtype=cupy.float32).reshape(4, 6)
    before = cupy.asnumpy(src)
    p = from_dlpack(src).requires_grad_(True)
    assert p.device.startswith("cuda") and p._buf.data.data.ptr == src.data.ptr  # zero-copy
    got = _train(p, _OPTIMIZERS[name])
    assert np.array_equal(cupy.asnumpy(src).view(np.uint32), before.view(np.uint32))
    want = _train(tl.tensor(before, device=cuda_device, requires_grad=True), _OPTIMIZERS[name])
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
