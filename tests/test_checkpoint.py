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
from torchlean.complex_tensor import ComplexTensor
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


def _train(m, opt, sch, steps: range, device: str, batch=None) -> list[int]:
    """Loss of each step as its float32 bit pattern (bitwise comparison); batch(step, device) gives
    (x, y), _batch by default."""
    bits = []
    for s in steps:
        x, y = (batch or _batch)(s, device)
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


def _fno(device: str):
    from torchlean.nn.modules.fno_nd import FNO2d

    m = FNO2d(3, 3, 6, padding=2).to(device)
    opt = optim.Adam(m.parameters(), lr=1e-2, weight_decay=1e-4)
    return m, opt, optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)


def _fno_batch(step: int, device: str):
    r = np.random.RandomState(2000 + step)
    return tuple(tl.tensor(r.standard_normal((2, 8, 8, 1)).astype(np.float32), device=device) for _ in range(2))


def _train_fno(m, opt, sch, steps: range, device: str) -> list[int]:
    return _train(m, opt, sch, steps, device, _fno_batch)


def test_complex_parameters_round_trip_and_resume_bitwise(device, tmp_path):
    """An FNO's complex64 spectral weights are stored as complex64 (safetensors' C64) and a resumed
    run repeats the uninterrupted one bit for bit; complex extras come back as complex tensors."""
    with tl.deterministic(True):
        tl.manual_seed(7)
        full = _train_fno(*_fno(device), range(8), device)
        tl.manual_seed(7)
        m, opt, sch = _fno(device)
        first = _train_fno(m, opt, sch, range(4), device)
        z = tl.randn(3, dtype=tl.cfloat)
        save_checkpoint(tmp_path / "f.safetensors", m, opt, sch, step=4, extra={"z": z})
        saved = _host_state(m)
        tl.manual_seed(99)
        m, opt, sch = _fno(device)
        meta = load_checkpoint(tmp_path / "f.safetensors", m, opt, sch)
        loaded = _host_state(m)
        second = _train_fno(m, opt, sch, range(meta["step"], 8), device)
    assert saved["conv0.weights1"].dtype == np.complex64
    assert all(_bits_equal(saved[k], loaded[k]) for k in saved)
    assert first + second == full
    assert isinstance(meta["extra"]["z"], ComplexTensor) and np.array_equal(meta["extra"]["z"].numpy(), z.numpy())


def test_complex_checkpoint_is_torch_readable_and_dtype_checked(tmp_path):
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file

    tl.manual_seed(0)
    m = nn.SpectralConv2d(2, 3, 2, 2)
    save_checkpoint(tmp_path / "s.safetensors", m)
    sd = load_file(str(tmp_path / "s.safetensors"))
    assert sd["weights1"].dtype == torch.complex64
    np.testing.assert_array_equal(sd["weights2"].numpy(), m.weights2.numpy())
    # a real model of the same keys and shapes refuses the complex entries and keeps its values
    real = nn.Module()
    real.weights1 = nn.Parameter(tl.zeros(*m.weights1.shape))
    real.weights2 = nn.Parameter(tl.zeros(*m.weights2.shape))
    with pytest.raises(CheckpointMismatchError, match="weights1.*complex64"):
        load_checkpoint(tmp_path / "s.safetensors", real)
    assert not real.weights1.numpy().any()


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
    # the next save works, replaces the checkpoint and removes the killed save's temporary file
    save_checkpoint(path, m, opt, step=3)
    assert load_checkpoint(path, m, opt)["step"] == 3
    assert os.listdir(tmp_path) == ["ck.safetensors"]


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
    with pytest.raises(CheckpointMismatchError, match=r"state\[0\]\['exp_avg'\] has shape \(16, 6\)"):
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
    with pytest.raises(CheckpointFormatError, match="version 99.*reads versions 1 and 2"):
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


# -- all or nothing: a failed load changes nothing ------------------------------------------------------
def _small(seed: int = 0):
    """A small trained model, Adam with state and a stepped StepLR, and the RNG moved on."""
    tl.manual_seed(seed)
    m = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    opt = optim.Adam(m.parameters(), lr=0.01 * (seed + 1))
    sch = optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    x = tl.randn(4, 3)
    for _ in range(seed % 3 + 2):
        opt.zero_grad()
        m(x).sum().backward()
        opt.step()
        sch.step()
    return m, opt, sch


def _snapshot(m, opt, sch) -> dict:
    """Everything a load may change, as comparable values (tensors as dtype, shape and bytes)."""
    def t(v):
        a = v.numpy()
        return (a.dtype.str, a.shape, a.tobytes())

    index = {id(p): i for i, p in enumerate(p for g in opt.param_groups for p in g["params"])}
    groups = [{k: [index[id(p)] for p in v] if k == "params" else v for k, v in g.items()} for g in opt.param_groups]
    state = {index[id(p)]: {k: t(v) if isinstance(v, tl.Tensor) else v for k, v in st.items()}
             for p, st in opt.state.items()}
    sched = {k: list(v) if isinstance(v, list) else v for k, v in sch.__dict__.items() if k != "optimizer"}
    return {"model": {k: t(v) for k, v in m.state_dict().items()}, "groups": groups, "state": state,
            "sched": sched, "rng": tl.get_rng_state()}


def _rewrite(path, edit) -> None:
    """Rewrite a checkpoint's JSON metadata with ``edit(meta)`` and, where the format has one,
    recompute its digest: a file that is well formed but says something wrong."""
    import json

    import torchlean.checkpoint as ck
    from safetensors.numpy import load, save

    data = path.read_bytes()
    n = int.from_bytes(data[:8], "little")
    md = json.loads(data[8:8 + n])["__metadata__"]
    meta = json.loads(md["torchlean.checkpoint"])
    edit(meta)
    md["torchlean.checkpoint"] = json.dumps(meta)
    tensors = load(data)
    if "torchlean.sha256" in md:
        md["torchlean.sha256"] = ck._digest(md["torchlean.format_version"], md["torchlean.checkpoint"], tensors)
    path.write_bytes(save(tensors, metadata=md))


def _bad_rng(path, monkeypatch):
    import torchlean.checkpoint as ck

    m, opt, sch = _small(1)
    monkeypatch.setattr(ck, "get_rng_state", lambda: (2**64 + 5, 3))
    save_checkpoint(path, m, opt, sch, step=2)


def _bad_group_value(key, value):
    def make(path, monkeypatch):
        m, opt, sch = _small(1)
        opt.param_groups[0][key] = value  # state_dict() does not check: the load must
        save_checkpoint(path, m, opt, sch, step=2)
    return make


def _bad_state_step(path, monkeypatch):
    m, opt, sch = _small(1)
    next(iter(opt.state.values()))["step"] = tl.tensor(-3.0)
    save_checkpoint(path, m, opt, sch, step=2)


def _wrong_state_shape(path, monkeypatch):
    m, opt, sch = _small(1)
    next(iter(opt.state.values()))["exp_avg"] = tl.zeros(5)
    save_checkpoint(path, m, opt, sch, step=2)


def _sched_entries(**entries):
    def make(path, monkeypatch):
        m, opt, sch = _small(1)
        sd = dict(sch.state_dict(), **entries)
        monkeypatch.setattr(sch, "state_dict", lambda: sd)
        save_checkpoint(path, m, opt, sch, step=2)
    return make


def _meta_entry(key, value):
    def make(path, monkeypatch):
        m, opt, sch = _small(1)
        save_checkpoint(path, m, opt, sch, step=2)

        def edit(meta):
            meta[key] = value
        _rewrite(path, edit)
    return make


def _truncated(cut):
    def make(path, monkeypatch):
        m, opt, sch = _small(1)
        save_checkpoint(path, m, opt, sch, step=2)
        data = path.read_bytes()
        path.write_bytes(data[:cut] if cut >= 0 else data[:len(data) + cut])
    return make


def _wrong_model_shape(path, monkeypatch):
    tl.manual_seed(1)
    m = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    sd = {k: v.numpy() for k, v in m.state_dict().items()}
    sd["0.weight"] = np.zeros((2, 4), np.float32)
    save_checkpoint(path, sd, step=2)


FAILED_LOADS = {
    "RNG state out of range": (_bad_rng, "RNG state"),
    "negative lr": (_bad_group_value("lr", -0.5), "Invalid learning rate"),
    "lr of the wrong type": (_bad_group_value("lr", "0.1"), r"\['lr'\] must be a finite real number"),
    "unknown optimizer hyperparameter": (_bad_group_value("momentum_typo", 0.9), "no hyperparameter 'momentum_typo'"),
    "negative optimizer step count": (_bad_state_step, "step count"),
    "optimizer state of the wrong shape": (_wrong_state_shape, r"state\[\d\]\['exp_avg'\] has shape \(5,\)"),
    "model tensor of the wrong shape": (_wrong_model_shape, r"'0\.weight' has shape \(2, 4\)"),
    "unknown scheduler key (a method's name)": (_sched_entries(get_lr=5), r"unknown \['get_lr'\]"),
    "scheduler value of the wrong type": (_sched_entries(step_size="2"), "'step_size' must be a positive integer"),
    "scheduler lr list of the wrong length": (_sched_entries(base_lrs=[0.1, 0.2]), "'base_lrs' must be a list of 1"),
    "negative step": (_meta_entry("step", -1), "step -1"),
    "step of the wrong type": (_meta_entry("step", "5"), "step '5'"),
    "RNG counter of the wrong type": (_meta_entry("rng_state", ["1", 2]), "RNG state"),
    "truncated in the header": (_truncated(500), "truncated or corrupt"),
    "truncated in the tensors": (_truncated(-7), "truncated or corrupt"),
    "truncated to the length field": (_truncated(8), "truncated or corrupt"),
}


@pytest.mark.parametrize("case", list(FAILED_LOADS))
def test_failed_load_changes_nothing(case, tmp_path, monkeypatch):
    """Every kind of bad file raises a TorchLeanError naming the problem, and model, optimizer,
    scheduler and RNG state are bit for bit as before the call."""
    make, message = FAILED_LOADS[case]
    path = tmp_path / "bad.safetensors"
    make(path, monkeypatch)
    monkeypatch.undo()
    m, opt, sch = _small(2)  # different weights, state, lrs and RNG state from the file's
    tl.manual_seed(9)
    _ = tl.rand(3)
    before = _snapshot(m, opt, sch)
    with pytest.raises(TorchLeanError, match=message):
        load_checkpoint(path, m, opt, sch)
    assert _snapshot(m, opt, sch) == before
    assert "get_lr" not in sch.__dict__ and "step_size" in sch.__dict__


def test_apply_failure_rolls_back(tmp_path, monkeypatch):
    """If applying is interrupted after all checks passed, everything already applied is put back."""
    m, opt, sch = _small(1)
    save_checkpoint(tmp_path / "c.safetensors", m, opt, sch, step=2)
    m, opt, sch = _small(2)
    before = _snapshot(m, opt, sch)

    import torchlean.checkpoint as ck

    calls = []
    real = ck.set_rng_state

    def fail_once(state):  # the last step of applying: model, optimizer and scheduler are in
        calls.append(state)
        if len(calls) == 1:
            raise KeyboardInterrupt
        real(state)
    monkeypatch.setattr(ck, "set_rng_state", fail_once)
    with pytest.raises(KeyboardInterrupt):
        load_checkpoint(tmp_path / "c.safetensors", m, opt, sch)
    assert len(calls) == 2 and _snapshot(m, opt, sch) == before


def test_scheduler_state_dict_cannot_replace_methods():
    m, opt, sch = _small(0)
    good = sch.state_dict()
    before = _snapshot(m, opt, sch)
    for bad in ({**good, "get_lr": lambda: [99.0]}, {**good, "step": "x"}, {**good, "gamma": len},
                {**good, "last_epoch": 2.5}, {**good, "_is_initial": 1},
                {k: v for k, v in good.items() if k != "gamma"},
                {**good, "_last_lr": [float("nan")]}, [("last_epoch", 3)]):
        with pytest.raises(ArgumentError, match="StepLR.load_state_dict"):
            sch.load_state_dict(bad)
        assert _snapshot(m, opt, sch) == before
    assert sch.get_lr.__func__ is optim.lr_scheduler.StepLR.get_lr and "step" not in sch.__dict__
    sch.load_state_dict(good)
    assert _snapshot(m, opt, sch) == before


def test_optimizer_load_state_dict_schema():
    m, opt, sch = _small(0)
    good = opt.state_dict()
    before = _snapshot(m, opt, sch)
    g0 = good["param_groups"][0]
    st0 = good["state"][0]
    bad_cases = [
        dict(good, extra_key=1),
        dict(good, param_groups=[dict(g0, lr=float("nan"))]),
        dict(good, param_groups=[dict(g0, lr=True)]),
        dict(good, param_groups=[dict(g0, betas=(0.9,))]),
        dict(good, param_groups=[dict(g0, amsgrad="no")]),
        dict(good, param_groups=[dict(g0, amsgrad=True)]),
        dict(good, param_groups=[dict(g0, sneaky=print)]),
        dict(good, param_groups=[dict(g0, params=[0, 0, 1, 2])]),
        dict(good, state={**good["state"], 7: st0}),
        dict(good, state={0: {k: v for k, v in st0.items() if k != "exp_avg_sq"}}),
        dict(good, state={0: dict(st0, extra=tl.zeros(2, 3))}),
        dict(good, state={0: dict(st0, step=2.5)}),
        dict(good, state={0: dict(st0, exp_avg=np.zeros((3, 2), np.float32))}),
        dict(good, state={0: dict(st0, exp_avg=np.zeros((2, 3), np.int64))}),
        dict(good, state={0: dict(st0, exp_avg="zeros")}),
    ]
    for bad in bad_cases:
        with pytest.raises(TorchLeanError, match="Adam.load_state_dict"):
            opt.load_state_dict(bad)
        assert _snapshot(m, opt, sch) == before
    opt.load_state_dict(good)
    assert _snapshot(m, opt, sch) == before


# -- corruption ------------------------------------------------------------------------------------------
def test_every_sampled_bit_flip_is_caught_or_harmless(tmp_path):
    """A single flipped bit anywhere (length field, JSON header, metadata, tensor bytes) either
    raises a TorchLeanError, changing nothing, or loads exactly the original values."""
    m, opt, sch = _small(1)
    path = tmp_path / "c.safetensors"
    save_checkpoint(path, m, opt, sch, step=2, extra={"note": "x", "arr": np.arange(3.0, dtype=np.float32)})
    data = path.read_bytes()
    ref_objs = _small(2)
    ref_out = load_checkpoint(path, *ref_objs)
    ref = _snapshot(*ref_objs)
    positions = sorted(set(range(8)) | set(range(8, len(data), 9)) | {len(data) - 1})
    silent, caught = [], 0
    for i, pos in enumerate(positions):
        flipped = bytearray(data)
        flipped[pos] ^= 1 << (i % 8)
        bad = tmp_path / "flipped.safetensors"
        bad.write_bytes(bytes(flipped))
        objs = _small(2)
        tl.manual_seed(5)
        before = _snapshot(*objs)
        try:
            out = load_checkpoint(bad, *objs)
        except TorchLeanError:
            caught += 1
            assert _snapshot(*objs) == before, f"a failed load changed state (byte {pos})"
            continue
        same_extra = out["extra"]["note"] == "x" and _bits_equal(out["extra"]["arr"], ref_out["extra"]["arr"])
        if _snapshot(*objs) != ref or out["step"] != ref_out["step"] or not same_extra:
            silent.append(pos)
    assert not silent, f"{len(silent)} of {len(positions)} single bit flips loaded different values silently " \
                       f"(bytes {silent[:10]}...)"
    assert caught > len(positions) * 0.9  # nearly every flip is caught, not just harmless


def test_digest_detects_an_edited_tensor(tmp_path):
    import json

    from safetensors.numpy import load, save

    m, opt, sch = _small(1)
    path = tmp_path / "c.safetensors"
    save_checkpoint(path, m, opt, sch, step=2)
    data = path.read_bytes()
    n = int.from_bytes(data[:8], "little")
    md = json.loads(data[8:8 + n])["__metadata__"]
    tensors = load(data)
    tensors["0.weight"] = tensors["0.weight"] + np.float32(1.0)  # a well-formed file with other values
    path.write_bytes(save(tensors, metadata=md))
    m2, opt2, sch2 = _small(2)
    before = _snapshot(m2, opt2, sch2)
    with pytest.raises(CheckpointFormatError, match="does not match its SHA-256 digest"):
        load_checkpoint(path, m2, opt2, sch2)
    assert _snapshot(m2, opt2, sch2) == before


def test_format_1_files_still_load(tmp_path):
    """Format 1 (before the digest) loads with every other check; a format 2 file without its
    digest, or relabelled as format 1 with its digest kept, is refused."""
    import json

    from safetensors.numpy import load, save

    m, opt, sch = _small(1)
    path = tmp_path / "c.safetensors"
    save_checkpoint(path, m, opt, sch, step=2)
    ref_objs = _small(2)
    load_checkpoint(path, *ref_objs)
    data = path.read_bytes()
    n = int.from_bytes(data[:8], "little")
    md = json.loads(data[8:8 + n])["__metadata__"]
    tensors = load(data)

    def variant(name, version, keep_digest):
        meta = json.loads(md["torchlean.checkpoint"])
        meta["format_version"] = int(version)
        new = {"torchlean.format_version": version, "torchlean.checkpoint": json.dumps(meta)}
        if keep_digest:
            new["torchlean.sha256"] = md["torchlean.sha256"]
        (tmp_path / name).write_bytes(save(tensors, metadata=new))
        return tmp_path / name

    objs = _small(2)
    out = load_checkpoint(variant("v1.safetensors", "1", False), *objs)
    assert out["format_version"] == 1 and out["step"] == 2
    assert _snapshot(*objs) == _snapshot(*ref_objs)
    objs = _small(2)
    before = _snapshot(*objs)
    with pytest.raises(CheckpointFormatError, match="no 'torchlean.sha256' entry"):
        load_checkpoint(variant("nodigest.safetensors", "2", False), *objs)
    with pytest.raises(CheckpointFormatError, match="digest"):
        load_checkpoint(variant("relabelled.safetensors", "1", True), *objs)
    assert _snapshot(*objs) == before


# -- saving: the target and temporary files -------------------------------------------------------------------
def test_save_to_a_directory_writes_nothing(tmp_path):
    m = _model("cpu")
    target = tmp_path / "runs"
    target.mkdir()
    (target / "keep.txt").write_text("x")
    for p in (target, str(target) + os.sep, str(tmp_path / "not_yet") + os.sep):
        with pytest.raises(CheckpointError, match="is a directory; give the checkpoint's file path"):
            save_checkpoint(p, m)
    assert sorted(os.listdir(tmp_path)) == ["runs"] and os.listdir(target) == ["keep.txt"]


def test_next_save_removes_stale_temporary_files(tmp_path):
    m = _model("cpu")
    stale = [tmp_path / ".ck.safetensors.0123456789ab.tmp", tmp_path / ".ck.safetensors.fedcba987654.tmp"]
    for f in stale:
        f.write_bytes(b"\0" * 1000)  # what a killed save leaves
    others = [tmp_path / ".other.safetensors.0123456789ab.tmp", tmp_path / ".ck.safetensors.notes.tmp",
              tmp_path / "ck.safetensors.0123456789ab.tmp"]
    for f in others:
        f.write_bytes(b"mine")
    save_checkpoint(tmp_path / "ck.safetensors", m)
    assert sorted(os.listdir(tmp_path)) == sorted(["ck.safetensors"] + [f.name for f in others])


def test_live_temporary_files_are_kept(tmp_path, monkeypatch):
    """A save never removes the temporary file of a save still in progress: one in this process
    (a save started while another is writing), or one another process holds locked."""
    import torchlean.checkpoint as ck

    path = tmp_path / "ck.safetensors"
    m = _model("cpu")
    real = ck._write_all
    nested = []

    def write_and_save_again(f, data):
        real(f, data[: len(data) // 2])
        if not nested:
            nested.append(1)
            save_checkpoint(path, m, step=7)  # sweeps the directory while the outer temp is live
        real(f, data[len(data) // 2:])

    monkeypatch.setattr(ck, "_write_all", write_and_save_again)
    save_checkpoint(path, m, step=3)  # the outer save still renames its (complete) file
    monkeypatch.undo()
    assert os.listdir(tmp_path) == ["ck.safetensors"] and load_checkpoint(path, m)["step"] == 3

    fcntl = pytest.importorskip("fcntl")
    held = tmp_path / ".ck.safetensors.00000000abcd.tmp"
    held.write_bytes(b"being written")
    with open(held, "rb") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)  # as a live save in another process holds it
        save_checkpoint(path, m, step=4)
        assert held.exists()
    save_checkpoint(path, m, step=5)  # the lock is gone: now it is stale
    assert os.listdir(tmp_path) == ["ck.safetensors"]
