"""The PyTorch twins of the benchmarked examples (benchmarks/torch_models.py) are the same models:
each loads our state dict strictly and gives the same tiny-config losses (first step and after two
optimizer steps) on the CPU. Also an in-process smoke run of the training-step benchmark's worker."""

from __future__ import annotations

import argparse
import json
import os

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed: the torch twins cannot be checked")

from benchmarks import torch_models as TM  # noqa: E402

TOL = 1e-4


@pytest.mark.parametrize("name", TM.EXAMPLES)
def test_twin_loads_strictly_and_matches(name):
    r = TM.check_twin(name, "tiny", steps=2, device="cpu")
    assert r["strict_load"]
    for (ours, theirs), rel in zip(r["losses"], r["rel"]):
        assert rel < TOL, f"{name}: loss ours {ours} vs torch {theirs} (relative difference {rel:.2e})"


def test_twin_state_dict_keys_match():
    for name in TM.EXAMPLES:
        cfg = TM.config(name, "tiny")
        ours = TM.example(name).make_model(cfg)
        twin = TM.make_torch_model(name, cfg)
        ours_sd, twin_sd = ours.state_dict(), twin.state_dict()
        assert list(ours_sd) == list(twin_sd), name
        for k in ours_sd:
            assert tuple(ours_sd[k].shape) == tuple(twin_sd[k].shape), (name, k)


def test_train_step_worker_smoke(tmp_path):
    from benchmarks import train_step as TS

    cfg, path, _ = TS.write_batches("cnn", "tiny", 3)
    try:
        res = {}
        for side in ("ours", "torch"):
            out = tmp_path / f"{side}.json"
            args = argparse.Namespace(worker=side, name="cnn", device="cpu", cfg_json=json.dumps(cfg), batches=path,
                                      warmup=1, steps=2, result=str(out))
            assert TS.worker(args) == 0
            res[side] = json.loads(out.read_text())
    finally:
        os.unlink(path)
    o, t = res["ours"], res["torch"]
    assert len(o["times_s"]) == len(t["times_s"]) == 2
    for a, b in zip(o["losses"], t["losses"]):
        assert abs(a - b) <= TOL * abs(b)
