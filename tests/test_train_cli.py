"""The training loop and the command line: ``torchlean list``, ``torchlean train`` (log, checkpoint,
resume bit for bit in deterministic mode, device selection), on tiny settings."""

from __future__ import annotations

import json

import numpy as np

import pytest

import torchlean as tl
from torchlean import cli, examples
from torchlean.errors import ArgumentError, DeviceError
from torchlean.train import pick_device, train


def quiet(_: str) -> None:
    pass


def test_list_names_every_example(capsys):
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    for name in examples.NAMES:
        assert name in out


def test_unknown_example_and_bad_options():
    with pytest.raises(ArgumentError, match="unknown example 'nope'"):
        train("nope", device="cpu", say=quiet)
    with pytest.raises(ArgumentError, match="fast-gpu-matmul-precision"):
        train("mlp", device="cpu", tiny=True, fast_gpu_matmul_precision="fp16", say=quiet, progress=False)
    with pytest.raises(ArgumentError, match="--config must be auto, default or cuda"):
        train("mlp", device="cpu", tiny=True, config="gpu", say=quiet, progress=False)
    said = []
    s = train("mlp", device="cpu", steps=1, config="cuda", say=said.append, progress=False)
    assert s["config"]["batch_size"] == examples.get("mlp").cuda_config()["batch_size"]  # the GPU schedule, on the CPU


def test_device_auto_says_what_it_picked():
    said = []
    dev = pick_device("auto", said.append)
    assert dev in ("cpu", "cuda:0") and said and ("CUDA" in said[0])
    if tl.is_cuda_available():
        return
    with pytest.raises(DeviceError, match="unavailable"):
        pick_device("cuda", quiet)


def test_train_writes_log_and_learns(tmp_path):
    log = tmp_path / "log.json"
    s = train("mlp", device="cpu", tiny=True, log=str(log), say=quiet, progress=False)
    assert s["final_loss"] < s["first_loss"]
    data = json.loads(log.read_text())
    assert data["example"] == "mlp" and len(data["losses"]) == s["steps_run"]
    assert data["metric"] in data["evaluation"]


def test_resume_reproduces_the_uninterrupted_run_bitwise(tmp_path):
    full = train("mlp", device="cpu", tiny=True, steps=12, deterministic=True, say=quiet, progress=False)
    ck = tmp_path / "ck.safetensors"
    half = train("mlp", device="cpu", tiny=True, steps=12, stop_at=6, deterministic=True, checkpoint=str(ck), say=quiet,
                 progress=False)
    assert half["losses"] == full["losses"][:6]
    resumed = train("mlp", device="cpu", tiny=True, steps=12, deterministic=True, resume=str(ck), say=quiet,
                    progress=False)
    assert resumed["losses"] == full["losses"]  # bitwise: float equality of every step's loss


def test_cli_train_runs(tmp_path, capsys):
    rc = cli.main(["train", "mlp", "--device", "cpu", "--tiny", "--steps", "5", "--log", str(tmp_path / "l.json")])
    assert rc == 0
    assert "done: loss" in capsys.readouterr().out


def test_fast_kernels_train_the_same_model(tmp_path):
    plain = train("mlp", device="cpu", tiny=True, steps=8, deterministic=True, say=quiet, progress=False)
    said = []
    fast = train("mlp", device="cpu", tiny=True, steps=8, deterministic=True, fast_kernels=True, say=said.append,
                 progress=False)
    assert fast["fast_kernels"] and not plain["fast_kernels"]
    assert any("fast kernels on" in s for s in said)
    # Different kernels (fused bias, one-pass MSE), each within its contract: close, not bitwise.
    np.testing.assert_allclose(fast["losses"], plain["losses"], rtol=1e-4)
    fp64 = train("mlp", device="cpu", tiny=True, steps=8, deterministic=True, fast_kernels=True,
                 fast_gpu_matmul_precision="fp64", say=quiet, progress=False)
    assert fp64["fast_gpu_matmul_precision"] == "fp64"
    np.testing.assert_allclose(fp64["losses"], plain["losses"], rtol=1e-4)
    assert not tl.get_options().fast_kernels  # the options are restored after the run


def test_plot_and_log_go_into_new_folders(tmp_path):
    pytest.importorskip("matplotlib", reason="the plot extra (matplotlib) is part of the test extra")
    plot, log = tmp_path / "a" / "b" / "loss.png", tmp_path / "c" / "log.json"
    train("fno1d", device="cpu", tiny=True, steps=3, plot=str(plot), log=str(log), say=quiet, progress=False)
    assert plot.stat().st_size > 1000 and log.stat().st_size > 0
    pred = plot.with_name("loss_predictions.png")
    assert pred.stat().st_size > 1000  # fno1d also plots predicted against true solutions
