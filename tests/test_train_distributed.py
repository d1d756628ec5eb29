"""``torchlean train NAME --nproc-per-node N``: the examples trained data-parallel (2 MPI processes on
the CPU here; the same with --device cuda runs on NCCL), and the single-process path unchanged.

The multi-process runs need mpi4py and an mpiexec (``pip install -e '.[distributed]'``, which CI
does); they skip, saying so, only where those are absent. Each runs under a hard subprocess timeout."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import torchlean as tl
from torchlean import examples
from torchlean.cli import main
from torchlean.distributed.launch import find_mpiexec
from torchlean.train import _shard, train

ROOT = Path(__file__).resolve().parents[1]
needs_mpi = pytest.mark.skipif(find_mpiexec() is None,
                               reason="mpi4py or mpiexec not installed (pip install -e '.[distributed]')")


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1",
               TORCHLEAN_DATA_CACHE="off")
    return subprocess.run([sys.executable, "-m", "torchlean", "train", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT)


def quiet_train(name: str, **kw) -> dict:
    return train(name, device="cpu", tiny=True, progress=False, data_cache=False, say=lambda m: None, **kw)


# -- several processes ------------------------------------------------------------------------------
@needs_mpi
def test_two_processes_train_the_full_batch_and_end_with_equal_weights(tmp_path):
    log, ck = tmp_path / "log.json", tmp_path / "model.ckpt"
    r = cli("mlp", "--tiny", "--steps", "3", "--device", "cpu", "--nproc-per-node", "2", "--log", str(log),
            "--checkpoint", str(ck))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("torchlean train mlp on 2 processes (mpi, CPU)") == 1, r.stdout  # rank 0 alone prints
    assert "all 2 ranks hold identical weights" in r.stdout, r.stdout
    s = json.loads(log.read_text())
    assert s["world_size"] == 2 and s["backend"] == "mpi" and len(s["losses"]) == 3
    digests = s["rank_weight_sha256"]
    assert len(digests) == 2 and digests[0] == digests[1]
    # the digest is of the weights rank 0 saved (and nothing else was written next to them)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.json", "model.ckpt"]
    ex = examples.get("mlp")
    cfg = dict(ex.default_config(), **ex.tiny_config())
    model = ex.make_model(cfg)
    tl.load_checkpoint(str(ck), model)
    raw = b"".join(p.detach().numpy().tobytes() for p in model.parameters())
    assert hashlib.sha256(raw).hexdigest() == digests[0]
    # each rank's half of each batch, averaged over the ranks: the single-process full-batch losses
    one = quiet_train("mlp", steps=3)
    np.testing.assert_allclose(s["losses"], one["losses"], rtol=1e-6)


@needs_mpi
def test_two_process_checkpoint_resumes_bitwise(tmp_path):
    full, half, resumed, ck = (tmp_path / n for n in ("full.json", "half.json", "resumed.json", "ck.safetensors"))
    common = ("mlp", "--tiny", "--steps", "6", "--device", "cpu", "--nproc-per-node", "2", "--deterministic")
    r = cli(*common, "--log", str(full))
    assert r.returncode == 0, r.stdout + r.stderr
    r = cli(*common, "--stop-at", "3", "--checkpoint", str(ck), "--log", str(half))
    assert r.returncode == 0, r.stdout + r.stderr
    r = cli(*common, "--resume", str(ck), "--log", str(resumed))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "resumed from" in r.stdout
    f, h, z = (json.loads(p.read_text()) for p in (full, half, resumed))
    assert h["losses"] == f["losses"][:3]
    assert z["losses"] == f["losses"]  # bitwise, every step
    assert z["rank_weight_sha256"] == f["rank_weight_sha256"]


def test_launch_errors_are_raised_before_any_process_starts(capsys):
    assert main(["train", "mlp", "--tiny", "--device", "cpu", "--nproc-per-node", "2", "--batch-size", "7"]) == 2
    err = capsys.readouterr().err
    assert "torchlean train: train mlp: with 2 processes each batch of 7 is split into 2 equal shards, so the batch " \
           "size must be a multiple of 2; pass --batch-size 6" in err, err
    assert main(["train", "mlp", "--device", "cuda:1", "--nproc-per-node", "2"]) == 2
    assert "--device cuda:1 with --nproc-per-node: each rank uses the GPU of its local rank" in capsys.readouterr().err
    assert main(["train", "mlp", "--device", "cpu", "--nproc-per-node", "0"]) == 2
    assert "--nproc-per-node (0) and --nnodes (1) must be >= 1" in capsys.readouterr().err
    assert main(["train", "nope", "--device", "cpu", "--nproc-per-node", "2"]) == 2
    assert "unknown example 'nope'" in capsys.readouterr().err
    assert main(["train", "mlp", "--device", "cpu", "--nproc-per-node", "2", "--nnodes", "2", "--master", "h:1"]) == 2
    assert "on the CPU the ranks talk through MPI" in capsys.readouterr().err


def test_a_batch_that_cannot_be_split_is_a_clear_error():
    x, y = tl.zeros(8, 3), tl.zeros(8, 1)
    got = _shard("mlp", {"x": x, "y": y}, 1, 2)
    assert got["x"].shape == (4, 3) and got["y"].shape == (4, 1)
    with pytest.raises(tl.TorchLeanError, match=r"train ex: cannot split the example's batches across ranks: "
                                                r"--nproc-per-node needs every entry .* got Tensor\(8, 3\), Tensor\(7, 1\)"):
        _shard("ex", {"x": x, "y": tl.zeros(7, 1)}, 0, 2)
    with pytest.raises(tl.TorchLeanError, match="cannot split the example's batches across ranks"):
        _shard("ex", {"x": x, "k": 3}, 0, 2)
    with pytest.raises(tl.TorchLeanError, match="a batch of 8 samples cannot be split into 3 equal shards"):
        _shard("ex", (x, y), 0, 3)


def test_rank_argv_forwards_every_option_but_the_launch_ones(monkeypatch):
    import torchlean.train as tr

    seen = {}

    def fake_launch(name, argv, nproc, nnodes, node_rank, master, **kw):
        seen.update(name=name, argv=argv, nproc=nproc, where=(nnodes, node_rank, master), kw=kw)
        return 0

    monkeypatch.setattr(tr, "launch_training", fake_launch)
    assert main(["train", "gpt_adder", "--nproc-per-node", "4", "--steps", "5", "--deterministic", "--lr", "0.5",
                 "--tiny", "--log", "x.json", "--no-data-cache", "--device", "cpu", "--nnodes", "2", "--node-rank",
                 "1", "--master", "h:1"]) == 0
    assert seen["name"] == "gpt_adder" and seen["nproc"] == 4 and seen["where"] == (2, 1, "h:1")
    # (the device goes separately: the launcher resolves "auto" once for all ranks)
    assert seen["argv"] == ["--steps", "5", "--lr", "0.5", "--deterministic", "--log", "x.json", "--tiny",
                            "--no-data-cache"], seen["argv"]
    assert seen["kw"]["device"] == "cpu" and seen["kw"]["tiny"] is True


LIST = "from torchlean.distributed.launch import launch; import sys; sys.exit(launch('torchlean', ['list'], 2, " \
       "launcher={!r}, module=True))"


@pytest.mark.parametrize("launcher", ["env", pytest.param("mpiexec", marks=needs_mpi)])
def test_launch_runs_a_module_in_every_process(launcher):
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-c", LIST.format(launcher)], capture_output=True, text=True, timeout=120,
                       env=env, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("gpt_adder ") == 2, r.stdout


# -- one process: unchanged -----------------------------------------------------------------------
@pytest.mark.parametrize("name", examples.NAMES)
def test_single_process_losses_are_the_plain_loops_bit_for_bit(name):
    """``train`` in one process is the plain loop (batch, loss, backward, step, scheduler step),
    whatever the data-parallel path added around it."""
    ex = examples.get(name)
    cfg = dict(ex.default_config(), **ex.tiny_config())
    cfg["steps"] = 3
    data = ex.make_data(cfg)
    tl.manual_seed(cfg["seed"])
    model = ex.make_model(cfg)
    opt, sched = ex.make_optimizer(model, cfg)
    ex.evaluate(model, data, cfg, "cpu")  # (train evaluates first too)
    want = []
    for step in range(3):
        loss = ex.loss_fn(model, ex.get_batch(data, step, cfg, "cpu"))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
        want.append(loss.item())
    got = quiet_train(name, steps=3)
    assert got["losses"] == want
    assert "world_size" not in got and "rank_weight_sha256" not in got
