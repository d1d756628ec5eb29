"""``torchlean.save`` / ``torchlean.load``: round trips of tensors, state dicts, optimizer states and
nested containers in torchlean's format; ``.pt`` files written by PyTorch's ``torch.save`` (the real
torch, installed as an oracle) read with PyTorch's weights_only semantics; files that would run
code, truncated or corrupt files refused without effect."""

from __future__ import annotations

import io
import os
import pickle
import zipfile
from collections import OrderedDict

import numpy as np
import pytest
import torch

import torchlean as tl
import torchlean.serialization as ser
from torchlean.errors import DeviceError, TorchLeanError
from torchlean.serialization import SerializationError, UnsafeFileError

HAS_CUDA = tl.cuda.is_available()


def _trained(seed=0):
    tl.manual_seed(seed)
    model = tl.nn.Sequential(tl.nn.Linear(4, 8), tl.nn.ReLU(), tl.nn.Linear(8, 2))
    opt = tl.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(2):
        opt.zero_grad()
        (model(tl.randn(3, 4)) ** 2).sum().backward()
        opt.step()
    return model, opt


def _same(a, b):
    if isinstance(a, tl.Tensor):
        assert isinstance(b, tl.Tensor) and type(a) is type(b)
        assert a.shape == b.shape and a.dtype == b.dtype and a.device == b.device
        assert a.requires_grad == b.requires_grad
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    elif isinstance(a, dict):
        assert type(a) is type(b) and list(a) == list(b)
        for k in a:
            _same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    elif isinstance(a, float) and np.isnan(a):
        assert isinstance(b, float) and np.isnan(b)
    else:
        assert type(a) is type(b) and a == b


# -- torchlean's format ------------------------------------------------------------------------------
def test_round_trip_of_a_checkpoint_dict(tmp_path):
    model, opt = _trained()
    obj = {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 3, "best": 0.25, "nan": float("nan"),
           "inf": float("-inf"), "name": "run", "none": None, "flags": (True, False), "ints": [1, 2**70, -3],
           7: "int key", (1, "a"): "tuple key", "arr": np.arange(6, dtype=np.int32).reshape(2, 3),
           "raw": b"\x00\xff", "dev": tl.device("cpu"), "set": {1, 2}, "mask": tl.tensor([True, False]),
           "idx": tl.tensor([4, 5, 6]), "scalar": tl.tensor(2.5), "empty": tl.zeros(0, 3)}
    path = tmp_path / "ckpt.pt"
    tl.save(obj, path)
    back = tl.load(path)
    assert isinstance(back["model"], OrderedDict)
    _same(obj, back)

    again, opt2 = _trained(seed=1)
    again.load_state_dict(back["model"])
    opt2.load_state_dict(back["optimizer"])
    x = tl.randn(2, 4)
    np.testing.assert_array_equal(again(x).detach().numpy(), model(x).detach().numpy())


def test_round_trip_through_a_file_object_and_str_path(tmp_path):
    buf = io.BytesIO()
    tl.save([tl.ones(2), {"a": tl.arange(3)}], buf)
    buf.seek(0)
    back = tl.load(buf)
    _same([tl.ones(2), {"a": tl.arange(3)}], back)
    tl.save(tl.ones(3), str(tmp_path / "t.pt"))
    _same(tl.ones(3), tl.load(str(tmp_path / "t.pt")))


def test_shared_tensors_parameters_and_requires_grad_survive(tmp_path):
    w = tl.nn.Parameter(tl.randn(2, 2))
    leaf = tl.ones(3, requires_grad=True)
    tl.save({"a": w, "b": w, "leaf": leaf, "frozen": tl.nn.Parameter(tl.ones(1), requires_grad=False)},
            tmp_path / "f.pt")
    back = tl.load(tmp_path / "f.pt")
    assert back["a"] is back["b"] and isinstance(back["a"], tl.nn.Parameter) and back["a"].requires_grad
    assert back["leaf"].requires_grad and back["leaf"].is_leaf
    assert isinstance(back["frozen"], tl.nn.Parameter) and not back["frozen"].requires_grad


def test_a_flat_state_dict_file_reads_in_pytorch_through_safetensors(tmp_path):
    from safetensors.torch import load_file

    model, _ = _trained()
    tl.save(model.state_dict(), tmp_path / "sd.pt")
    sd = load_file(str(tmp_path / "sd.pt"))
    ref = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    ref.load_state_dict(sd)
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    np.testing.assert_allclose(ref(torch.tensor(x)).detach().numpy(), model(tl.tensor(x)).detach().numpy(),
                               rtol=1e-5, atol=1e-6)


def test_a_plain_safetensors_file_loads_as_an_ordered_dict(tmp_path):
    from safetensors.numpy import save_file

    save_file({"b": np.ones(2, np.float32), "a": np.arange(3)}, str(tmp_path / "x.safetensors"))
    back = tl.load(tmp_path / "x.safetensors")
    assert isinstance(back, OrderedDict) and set(back) == {"a", "b"}
    assert back["a"].dtype == tl.int64


@pytest.mark.parametrize("bad,match", [(tl.nn.Linear(2, 2), "Linear.*state_dict"), (lambda: 0, "function"),
                                       ({"x": object()}, "object at 'x'"), (1j, "complex")])
def test_save_refuses_what_it_cannot_store(tmp_path, bad, match):
    with pytest.raises(SerializationError, match=match):
        tl.save(bad, tmp_path / "x.pt")
    assert not (tmp_path / "x.pt").exists()


def test_save_refuses_an_optimizer_and_a_cycle(tmp_path):
    _, opt = _trained()
    with pytest.raises(SerializationError, match="optimizer.state_dict"):
        tl.save(opt, tmp_path / "o.pt")
    cyc: list = []
    cyc.append(cyc)
    with pytest.raises(SerializationError, match="cycle"):
        tl.save(cyc, tmp_path / "c.pt")


def test_an_interrupted_save_leaves_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "m.pt"
    tl.save({"v": tl.ones(4)}, path)
    before = path.read_bytes()

    def dies(f, data):
        f.write(data[: len(data) // 2])
        raise KeyboardInterrupt

    monkeypatch.setattr(ser, "_write_all", dies)
    with pytest.raises(KeyboardInterrupt):
        tl.save({"v": tl.zeros(4)}, path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["m.pt"]  # no temporary file left


@pytest.mark.parametrize("cut", [0.3, 0.9, 0.999])
def test_a_truncated_file_raises(tmp_path, cut):
    path = tmp_path / "t.pt"
    tl.save({"w": tl.randn(64), "n": 3}, path)
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * cut)])
    with pytest.raises(SerializationError, match="truncated|corrupt"):
        tl.load(path)


def test_a_flipped_bit_is_caught_by_the_digest(tmp_path):
    path = tmp_path / "t.pt"
    tl.save({"w": tl.ones(64)}, path)
    data = bytearray(path.read_bytes())
    data[-5] ^= 0x01  # inside the last tensor's bytes
    path.write_bytes(bytes(data))
    with pytest.raises(SerializationError, match="digest"):
        tl.load(path)


def test_map_location(tmp_path):
    tl.save({"w": tl.ones(2)}, tmp_path / "w.pt")
    for loc in ("cpu", tl.device("cpu"), {"cpu": "cpu"}, lambda storage, loc: storage):
        assert tl.load(tmp_path / "w.pt", map_location=loc)["w"].device == "cpu"
    seen = []
    tl.load(tmp_path / "w.pt", map_location=lambda t, loc: seen.append(loc))
    assert seen == ["cpu"]
    if not HAS_CUDA:
        with pytest.raises(DeviceError, match="map_location"):
            tl.load(tmp_path / "w.pt", map_location="cuda")


@pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA")
def test_cuda_tensors_come_back_on_cuda(tmp_path):
    x = tl.randn(3, device="cuda")
    tl.save({"x": x}, tmp_path / "c.pt")
    back = tl.load(tmp_path / "c.pt")["x"]
    assert back.device == "cuda:0"
    np.testing.assert_array_equal(back.numpy(), x.numpy())
    assert tl.load(tmp_path / "c.pt", map_location="cpu")["x"].device == "cpu"


# -- PyTorch's files ---------------------------------------------------------------------------------
def test_loads_a_pytorch_model_state_dict(tmp_path):
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3), torch.nn.BatchNorm2d(3), torch.nn.ReLU(), torch.nn.Flatten(),
                              torch.nn.Linear(3 * 4 * 4, 5))
    with torch.no_grad():
        ref[1].running_mean.uniform_()
    ref.eval()
    torch.save(ref.state_dict(), tmp_path / "ref.pt")
    sd = tl.load(tmp_path / "ref.pt", weights_only=True)
    assert isinstance(sd, OrderedDict) and list(sd) == list(ref.state_dict())
    assert sd["1.num_batches_tracked"].dtype == tl.int64
    ours = tl.nn.Sequential(tl.nn.Conv2d(2, 3, 3), tl.nn.BatchNorm2d(3), tl.nn.ReLU(), tl.nn.Flatten(),
                            tl.nn.Linear(3 * 4 * 4, 5))
    ours.load_state_dict(sd)
    ours.eval()
    x = np.random.default_rng(0).standard_normal((2, 2, 6, 6)).astype(np.float32)
    np.testing.assert_allclose(ours(tl.tensor(x)).detach().numpy(), ref(torch.tensor(x)).detach().numpy(),
                               rtol=1e-5, atol=1e-5)


def test_loads_pytorch_containers_dtypes_views_and_parameters(tmp_path):
    base = torch.randn(4, 6)
    obj = {"sd": OrderedDict(w=base, t=base.t(), row=base[2], step=base[:, ::2], i64=torch.arange(5),
                             i32=torch.arange(4, dtype=torch.int32), u8=torch.arange(3, dtype=torch.uint8),
                             b=torch.tensor([True, False]), empty=torch.zeros(0, 2), s=torch.tensor(3.5)),
           "p": torch.nn.Parameter(torch.ones(2)), "frozen": torch.nn.Parameter(torch.ones(1), requires_grad=False),
           "epoch": 4, "lr": 1e-3, "name": "gpt", "tup": (1, None, True), "size": torch.Size([2, 3]),
           "list": [torch.ones(1), 2], "bytes": b"ab", "set": {1, 2}}
    torch.save(obj, tmp_path / "obj.pt")
    back = tl.load(tmp_path / "obj.pt")
    for k, v in obj["sd"].items():
        got = back["sd"][k]
        assert got.shape == tuple(v.shape), k
        np.testing.assert_array_equal(got.numpy(), v.numpy(), err_msg=k)
        assert str(got.dtype).split(".")[-1] in (str(v.dtype).split(".")[-1], "int64"), k  # int64 where a dtype is missing
    assert back["sd"]["w"].dtype == tl.float32 and back["sd"]["b"].dtype == tl.bool
    assert isinstance(back["p"], tl.nn.Parameter) and back["p"].requires_grad
    assert isinstance(back["frozen"], tl.nn.Parameter) and not back["frozen"].requires_grad
    assert back["size"] == (2, 3) and back["tup"] == (1, None, True) and back["bytes"] == b"ab"
    assert back["set"] == {1, 2} and back["epoch"] == 4 and back["lr"] == 1e-3 and back["name"] == "gpt"


def test_tied_weights_stay_one_tensor(tmp_path):
    emb = torch.nn.Embedding(5, 3)
    head = torch.nn.Linear(3, 5, bias=False)
    head.weight = emb.weight
    sd = {"emb.weight": emb.weight.data, "head.weight": head.weight.data}
    torch.save(sd, tmp_path / "tied.pt")
    back = tl.load(tmp_path / "tied.pt")
    assert back["emb.weight"] is back["head.weight"]


def test_float64_float16_bfloat16_become_float32_with_a_warning(tmp_path):
    src = torch.randn(5, dtype=torch.float64)
    torch.save({"d": src, "h": src.half(), "bf": src.bfloat16()}, tmp_path / "f.pt")
    with pytest.warns(UserWarning, match="float64 tensor.*rounded to float32.*float16.*exactly"):
        back = tl.load(tmp_path / "f.pt")
    np.testing.assert_array_equal(back["d"].numpy(), src.float().numpy())
    np.testing.assert_array_equal(back["h"].numpy(), src.half().float().numpy())
    np.testing.assert_array_equal(back["bf"].numpy(), src.bfloat16().float().numpy())


def test_loads_a_pytorch_optimizer_state_dict(tmp_path):
    torch.manual_seed(0)
    ref = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(ref.parameters(), lr=0.01)
    ref(torch.ones(1, 3)).sum().backward()
    opt.step()
    torch.save({"model": ref.state_dict(), "optimizer": opt.state_dict()}, tmp_path / "opt.pt")
    back = tl.load(tmp_path / "opt.pt")
    st = back["optimizer"]["state"][0]
    np.testing.assert_array_equal(st["exp_avg"].numpy(), opt.state_dict()["state"][0]["exp_avg"].numpy())
    assert back["optimizer"]["param_groups"][0]["lr"] == 0.01 and back["optimizer"]["param_groups"][0]["params"] == [0, 1]


class _Evil:
    def __reduce__(self):
        return (os.system, (f"touch {_Evil.marker}",))


def _torch_like_zip(payload: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("archive/data.pkl", payload)
        z.writestr("archive/byteorder", "little")
        z.writestr("archive/version", "3\n")
    return buf.getvalue()


def test_a_malicious_pickle_is_refused_without_running(tmp_path):
    marker = tmp_path / "pwned"
    _Evil.marker = str(marker)
    # hand-made (the zip layout PyTorch writes) and written by torch.save itself
    (tmp_path / "evil1.pt").write_bytes(_torch_like_zip(pickle.dumps({"w": _Evil()}, protocol=2)))
    torch.save({"w": torch.ones(2), "x": _Evil()}, tmp_path / "evil2.pt")
    for name in ("evil1.pt", "evil2.pt"):
        for weights_only in (None, True, False):
            with pytest.raises(UnsafeFileError, match="'posix.system'.*not allowed"):
                tl.load(tmp_path / name, weights_only=weights_only)
    assert not marker.exists()
    assert isinstance(UnsafeFileError("x"), pickle.UnpicklingError)  # catchable as PyTorch's error is


@pytest.mark.parametrize("payload,match", [
    (b"\x80\x02cbuiltins\neval\nX\x04\x00\x00\x001+1q\x00\x85R.", "builtins.eval"),
    (b"\x80\x02cnumpy.core.multiarray\n_reconstruct\n.", "numpy.core.multiarray._reconstruct"),
    (b"\x80\x02ctorch.nn.modules.linear\nLinear\n.", "Linear"),
])
def test_other_globals_are_refused(tmp_path, payload, match):
    (tmp_path / "g.pt").write_bytes(_torch_like_zip(payload))
    with pytest.raises(UnsafeFileError, match=match):
        tl.load(tmp_path / "g.pt")


def test_a_whole_pickled_pytorch_model_is_refused_with_advice(tmp_path):
    torch.save(torch.nn.Linear(2, 2), tmp_path / "model.pt")
    with pytest.raises(UnsafeFileError, match="state_dict"):
        tl.load(tmp_path / "model.pt")


def test_a_tensor_reaching_past_its_storage_is_refused(tmp_path):
    torch.save({"w": torch.ones(4)}, tmp_path / "w.pt")
    with zipfile.ZipFile(tmp_path / "w.pt") as z:
        entries = {n: z.read(n) for n in z.namelist()}
    pkl_name = next(n for n in entries if n.endswith("data.pkl"))
    # size (4,) -> (400,): the pickle stores it as BININT1 4 inside TUPLE1
    pkl = entries[pkl_name]
    assert b"K\x04\x85" in pkl
    entries[pkl_name] = pkl.replace(b"K\x04\x85", b"M\x90\x01\x85", 1)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for n, d in entries.items():
            z.writestr(n, d)
    (tmp_path / "bad.pt").write_bytes(buf.getvalue())
    with pytest.raises(SerializationError, match="reaches past its storage"):
        tl.load(tmp_path / "bad.pt")


@pytest.mark.parametrize("cut", [0.2, 0.5, 0.95])
def test_a_truncated_pytorch_file_raises(tmp_path, cut):
    torch.save({"w": torch.randn(256)}, tmp_path / "w.pt")
    data = (tmp_path / "w.pt").read_bytes()
    (tmp_path / "w.pt").write_bytes(data[: int(len(data) * cut)])
    with pytest.raises(SerializationError):
        tl.load(tmp_path / "w.pt")


def test_other_files_are_clear_errors(tmp_path):
    (tmp_path / "x.txt").write_bytes(b"hello world, not a checkpoint")
    with pytest.raises(SerializationError, match="neither a torchlean file nor a PyTorch file"):
        tl.load(tmp_path / "x.txt")
    (tmp_path / "legacy.pt").write_bytes(pickle.dumps({"a": 1}, protocol=2))
    with pytest.raises(SerializationError, match="legacy format"):
        tl.load(tmp_path / "legacy.pt")
    model, opt = _trained()
    tl.save_checkpoint(tmp_path / "ck.safetensors", model, opt)
    with pytest.raises(SerializationError, match="load_checkpoint"):
        tl.load(tmp_path / "ck.safetensors")
    assert issubclass(SerializationError, TorchLeanError)
    with pytest.raises(SerializationError, match="pickle_module"):
        tl.load(tmp_path / "x.txt", pickle_module=pickle)
