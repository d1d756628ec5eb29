"""benchmarks.scale_models' analytic step FLOPs agree with PyTorch's FlopCounterMode on the torch twin.

The twin runs one full training step at the ``small`` size under ``FlopCounterMode``. Only cases where
torch counts the same operations are compared: torch counts no FLOPs for CPU scaled_dot_product_attention
(gpt_mini: ours adds the causal QK^T/PV, about 5%), none for the CPU LSTM kernel or FFTs, complex
einsums at 2 FLOPs per multiply-add, and grouped-conv backward at the full (ungrouped) cost, so lstm,
fno1d and mamba's depthwise conv are left out (mamba is compared on its GEMMs).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed: FlopCounterMode is the reference")

from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from benchmarks import scale_models as SM  # noqa: E402

GEMM_OPS = ("aten.mm", "aten.addmm")


def _torch_step_flops(name: str) -> dict[str, int]:
    cfg = SM.CASES[name]["small"]
    modules, opts, step = SM.build(name, cfg, SM.framework("torch"), "cpu")
    batch = {k: torch.from_numpy(v) for k, v in SM.make_batches(name, cfg, 1)[0].items()}
    with FlopCounterMode(display=False) as counter:
        step(modules, opts, batch)
    return {str(op): n for op, n in counter.get_flop_counts()["Global"].items()}


@pytest.mark.parametrize("name", ["gpt_mini", "resnet18", "dcgan", "mlp", "mamba"])
def test_step_flops_match_torch_flop_counter(name):
    counts = _torch_step_flops(name)
    ref = sum(n for op, n in counts.items() if name != "mamba" or op in GEMM_OPS)
    ours = SM.step_flops(name, SM.CASES[name]["small"])
    assert ref > 0
    assert abs(ours - ref) / ref < 0.10, (name, ours, ref, counts)


def test_step_flops_scale_with_the_config():
    # doubling the MLP's batch doubles every GEMM; doubling gpt's T more than doubles (attention is T^2)
    mlp = dict(SM.CASES["mlp"]["small"])
    assert SM.step_flops("mlp", {**mlp, "batch": 2 * mlp["batch"]}) == 2 * SM.step_flops("mlp", mlp)
    gpt = dict(SM.CASES["gpt_mini"]["small"])
    assert SM.step_flops("gpt_mini", {**gpt, "T": 2 * gpt["T"]}) > 2 * SM.step_flops("gpt_mini", gpt)
