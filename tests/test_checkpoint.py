"""Checkpoints (torchlean.checkpoint): contents round trip, bitwise resume, atomic writes, errors."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import torchlean as tl
from torchlean import nn, optim
from torchlean.checkpoint import (CheckpointError, CheckpointFormatError, CheckpointMismatchError, FORMAT_VERSION,
                                  load_checkpoint, save_checkpoint)
from torchlean.errors import ArgumentError, ShapeError, TorchLeanError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _model(device: str, hidden: int = 16) -> nn.Module:
    return nn.Sequential(nn.Linear(6, hidden), nn.ReLU(), nn.Dropout(0.3), nn.Linear(hidden, 3),
                         nn.BatchNorm1d(3)).to(device)


def _objects(device: str, hidden: int = 16):
    m = _model(device, hidden)
    opt = optim.Adam(m.parameters(), lr=3e-2, weight_decay=1e-3)
    sch = optim.lr_scheduler.StepLR(opt, step_size=4, gamma=0.5)
    return m, opt, sch


def _batch(step: int, device: str):
    r = np.random.RandomState(1000 + step)
    x = r.standard_normal((8, 6)).astype(np.float32)
    y = np.tanh(x[:, :3] * 2.0 - x[:, 3:]).astype(np.float32)
    return tl.tensor(x, device=device), tl.tensor(y, device=device)


def _train(m, opt, sch, steps: range, device: str) -> list[int]:
    """Loss of each step as its float32 bit pattern (bitwise comparison)."""
    bits = []
    for s in steps:
        x, y = _batch(s, device)
        opt.zero_grad()
        loss = tl.ops.mse_loss(m(x), y)
        loss.backward()
        opt.step()
        sch.step()
        bits.append(int(np.float32(loss.item()).view(np.uint32)))
    return bits


def _host_state(m) -> dict[str, np.ndarray]:
    return {k: v.numpy() for k, v in m.state_dict().items()}


def _bits_equal(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


# -- contents ------------------------------------------------------------------------------------
def test_round_trip_contents(device, tmp_path):
    tl.manual_seed(3)
    m, opt, sch = _objects(device)
    _train(m, opt, sch, range(5), device)
    tl.manual_seed(77)
    _ = tl.rand(4)  # counter 1
    rng = tl.get_rng_state()
    path = tmp_path / "ck.safetensors"
    extra = {"epoch": 2, "name": "run", "pair": (1, 2.5), "nan": float("nan"), "arr": np.arange(4, dtype=np.int64),
             "t": tl.ones(2, 3), 7: [None, True]}
    save_checkpoint(path, m, opt, sch, step=5, extra=extra)
    assert os.listdir(tmp_path) == ["ck.safetensors"]

    tl.manual_seed(999)
    m2, opt2, sch2 = _objects(device)
    out = load_checkpoint(path, m2, opt2, sch2)
    assert out["step"] == 5 and out["format_version"] == FORMAT_VERSION
    assert out["rng_state"] == rng and tl.get_rng_state() == rng
    e = out["extra"]
    assert e["epoch"] == 2 and e["name"] == "run" and e["pair"] == (1, 2.5) and np.isnan(e["nan"])
    assert e[7] == [None, True] and _bits_equal(e["arr"], extra["arr"])
    assert isinstance(e["t"], tl.Tensor) and e["t"].shape == (2, 3)

    a, b = _host_state(m), _host_state(m2)
    assert list(a) == list(b)
    for k in a:
        assert _bits_equal(a[k], b[k]), k
    assert m2.state_dict()["4.num_batches_tracked"].dtype == tl.int64
    for p in m2.parameters():
        assert p.device == m[0].weight.device
    s1, s2 = opt.state_dict(), opt2.state_dict()
    assert s1["param_groups"] == s2["param_groups"]
    for i in s1["state"]:
        for k, v in s1["state"][i].items():
            w = s2["state"][i][k]
            assert _bits_equal(v.numpy(), w.numpy()), (i, k)
            if k != "step":
                assert w.device == v.device
    assert sch.state_dict() == sch2.state_dict()
    assert opt2.param_groups[0]["lr"] == opt.param_groups[0]["lr"]


def test_plain_state_dict_and_torch_readable(tmp_path):
    """Model entries keep their own names: safetensors.torch reads them as a PyTorch state dict."""
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file

    tl.manual_seed(0)
    m = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    save_checkpoint(tmp_path / "m.safetensors", m)
    sd = load_file(str(tmp_path / "m.safetensors"))
    tm = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    tm.load_state_dict(sd)
    assert sd["1.num_batches_tracked"].dtype == torch.int64
    np.testing.assert_array_equal(tm[0].weight.detach().numpy(), m[0].weight.numpy())
    # a state dict (not a module) can be saved too
    save_checkpoint(tmp_path / "sd.safetensors", m.state_dict(), step=1)
    assert load_checkpoint(tmp_path / "sd.safetensors", m)["step"] == 1


def test_restore_rng_optional(tmp_path):
    tl.manual_seed(5)
    m = _model("cpu")
    save_checkpoint(tmp_path / "c.safetensors", m)
    saved = tl.get_rng_state()
    tl.manual_seed(6)
    out = load_checkpoint(tmp_path / "c.safetensors", m, restore_rng=False)
    assert out["rng_state"] == saved and tl.get_rng_state() == (6, 0)


# -- resume ----------------------------------------------------------------------------------------
def test_resume_is_bitwise_identical(device, tmp_path):
    with tl.deterministic(True):
        tl.manual_seed(1234)
        full = _train(*_objects(device), range(20), device)

        tl.manual_seed(1234)
        m, opt, sch = _objects(device)
        first = _train(m, opt, sch, range(10), device)
        save_checkpoint(tmp_path / "r.safetensors", m, opt, sch, step=10)
        del m, opt, sch
        tl.manual_seed(42)  # a different RNG state and fresh weights: the load must restore everything
        m, opt, sch = _objects(device)
        start = load_checkpoint(tmp_path / "r.safetensors", m, opt, sch)["step"]
        second = _train(m, opt, sch, range(start, 20), device)
    assert first == full[:10]
    assert second == full[10:]
    assert len(set(full)) > 10  # the loss really changes (dropout + learning)


# -- atomic writes -----------------------------------------------------------------------------------
def _write_half_then(exc_factory):
    def writer(f, data):
        f.write(bytes(data[: len(data) // 2]))
        f.flush()
        raise exc_factory()
    return writer


def test_interrupted_save_keeps_previous(tmp_path, monkeypatch):
    import torchlean.checkpoint as ck

    tl.manual_seed(0)
    m, opt, sch = _objects("cpu")
    path = tmp_path / "ck.safetensors"
    save_checkpoint(path, m, opt, sch, step=1)
    before = path.read_bytes()
    _train(m, opt, sch, range(3), "cpu")  # change the state, then fail halfway through the save
    monkeypatch.setattr(ck, "_write_all", _write_half_then(lambda: OSError("disk full (simulated)")))
    with pytest.raises(OSError, match="simulated"):
        save_checkpoint(path, m, opt, sch, step=4)
    monkeypatch.undo()
    assert os.listdir(tmp_path) == ["ck.safetensors"]  # no temporary file left behind
    assert path.read_bytes() == before
    m2, opt2, sch2 = _objects("cpu")
    assert load_checkpoint(path, m2, opt2, sch2)["step"] == 1
    # KeyboardInterrupt (a BaseException) also cleans up
    monkeypatch.setattr(ck, "_write_all", _write_half_then(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(path, m, opt, sch, step=4)
    assert os.listdir(tmp_path) == ["ck.safetensors"]
    assert path.read_bytes() == before


def test_killed_save_keeps_previous(tmp_path):
    """A process SIGKILLed halfway through writing leaves the previous checkpoint loadable."""
    if not hasattr(signal, "SIGKILL"):
        pytest.skip("no SIGKILL on this platform")
    path = tmp_path / "ck.safetensors"
    script = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {ROOT!r})
        import torchlean as tl
        import torchlean.checkpoint as ck
        from torchlean import nn, optim
        tl.manual_seed(0)
        m = nn.Sequential(nn.Linear(6, 64), nn.Linear(64, 3))
        opt = optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        path = {str(path)!r}
        ck.save_checkpoint(path, m, opt, step=1)
        with tl.no_grad():
            m[0].weight.add_(1.0)
        def killed_writer(f, data):
            f.write(bytes(data[: len(data) // 2]))
            f.flush()
            os.fsync(f.fileno())
            print("half written", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        ck._write_all = killed_writer
        ck.save_checkpoint(path, m, opt, step=2)
        print("not reached", flush=True)
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert r.returncode == -signal.SIGKILL, r.stderr
    assert "half written" in r.stdout and "not reached" not in r.stdout
    leftovers = [f for f in os.listdir(tmp_path) if f != "ck.safetensors"]
    assert len(leftovers) == 1 and leftovers[0].endswith(".tmp")  # the half-written temporary file
    tl.manual_seed(1)
    m = nn.Sequential(nn.Linear(6, 64), nn.Linear(64, 3))
    opt = optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    out = load_checkpoint(path, m, opt)
    assert out["step"] == 1
    tl.manual_seed(0)
    ref = nn.Sequential(nn.Linear(6, 64), nn.Linear(64, 3))
    np.testing.assert_array_equal(m[0].weight.numpy(), ref[0].weight.numpy())  # the pre-kill weights
    with pytest.raises(CheckpointFormatError, match="truncated or corrupt"):
        load_checkpoint(tmp_path / leftovers[0], m, opt)
    # the next save works and replaces the checkpoint
    save_checkpoint(path, m, opt, step=3)
    assert load_checkpoint(path, m, opt)["step"] == 3


# -- errors --------------------------------------------------------------------------------------------
def test_shape_mismatch_names_key_and_changes_nothing(tmp_path):
    tl.manual_seed(0)
    m, opt, sch = _objects("cpu")
    save_checkpoint(tmp_path / "c.safetensors", m, opt, sch)
    m2, opt2, sch2 = _objects("cpu", hidden=17)
    before = _host_state(m2)
    rng = tl.get_rng_state()
    with pytest.raises(CheckpointMismatchError, match=r"'0\.weight'.*\(16, 6\).*\(17, 6\)") as ei:
        load_checkpoint(tmp_path / "c.safetensors", m2, opt2, sch2)
    assert isinstance(ei.value, ShapeError) and isinstance(ei.value, TorchLeanError)
    after = _host_state(m2)
    assert all(_bits_equal(before[k], after[k]) for k in before)
    assert tl.get_rng_state() == rng and not opt2.state


def test_optimizer_state_shape_mismatch(tmp_path):
    tl.manual_seed(0)
    m, opt, sch = _objects("cpu")
    _train(m, opt, sch, range(1), "cpu")
    save_checkpoint(tmp_path / "c.safetensors", m.state_dict(), opt, sch)
    m2 = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 3), nn.BatchNorm1d(3))
    other = nn.Sequential(nn.Linear(6, 5), nn.Linear(5, 2), nn.Linear(2, 3))
    opt2 = optim.Adam(other.parameters())  # six parameters of other shapes
    with pytest.raises(CheckpointMismatchError, match=r"optimizer entry 'state\.0\.exp_avg'"):
        load_checkpoint(tmp_path / "c.safetensors", m2, opt2)


def test_key_and_kind_mismatches(tmp_path):
    tl.manual_seed(0)
    m, opt, sch = _objects("cpu")
    p = tmp_path / "c.safetensors"
    save_checkpoint(p, m, opt)
    with pytest.raises(CheckpointMismatchError, match=r"missing \['2\.weight'.*unexpected \['3\.weight'"):
        load_checkpoint(p, nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3)))
    with pytest.raises(CheckpointMismatchError, match="Adam state, the optimizer is a SGD"):
        load_checkpoint(p, m, optim.SGD(m.parameters(), lr=0.1))
    with pytest.raises(CheckpointMismatchError, match="no scheduler state"):
        load_checkpoint(p, m, opt, sch)
    save_checkpoint(p, m)
    with pytest.raises(CheckpointMismatchError, match="no optimizer state"):
        load_checkpoint(p, m, opt)
    save_checkpoint(p, m, opt)
    with pytest.raises(CheckpointMismatchError, match="parameter group 0 has 4 parameters"):
        load_checkpoint(p, m, optim.Adam(list(m.parameters())[:4]))


def test_format_errors(tmp_path):
    from safetensors.numpy import save_file

    m = _model("cpu")
    p = tmp_path / "c.safetensors"
    save_checkpoint(p, m)
    # a future format version
    import json
    data = p.read_bytes()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    header["__metadata__"]["torchlean.format_version"] = "99"
    tensors = {k: v for k, v in __import__("safetensors.numpy", fromlist=["load"]).load(data).items()}
    save_file(tensors, str(tmp_path / "v99.safetensors"), metadata=header["__metadata__"])
    with pytest.raises(CheckpointFormatError, match="version 99.*reads version 1"):
        load_checkpoint(tmp_path / "v99.safetensors", m)
    # a plain safetensors file, garbage, a truncated file, a missing file
    save_file({"w": np.zeros(3, np.float32)}, str(tmp_path / "plain.safetensors"))
    with pytest.raises(CheckpointFormatError, match="not a torchlean checkpoint"):
        load_checkpoint(tmp_path / "plain.safetensors", m)
    (tmp_path / "junk").write_bytes(b"\x07" * 40)
    with pytest.raises(CheckpointFormatError):
        load_checkpoint(tmp_path / "junk", m)
    (tmp_path / "cut").write_bytes(data[: len(data) - 10])
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        load_checkpoint(tmp_path / "cut", m)
    with pytest.raises(FileNotFoundError):
        load_checkpoint(tmp_path / "nope.safetensors", m)


def test_save_argument_errors(tmp_path):
    m = _model("cpu")
    with pytest.raises(ArgumentError, match=r"extra entry 'f'.*function"):
        save_checkpoint(tmp_path / "c", m, extra={"f": len})
    with pytest.raises(ArgumentError, match="step must be a non-negative integer"):
        save_checkpoint(tmp_path / "c", m, step=-1)
    with pytest.raises(ArgumentError, match="model must be a Module or a state dict"):
        save_checkpoint(tmp_path / "c", 3)
    assert os.listdir(tmp_path) == []
