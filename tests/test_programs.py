"""Acceptance tests for issue 22: ordinary PyTorch training programs run under torchlean with only
their imports changed, and give PyTorch's losses.

Every program in tests/programs/ runs in a subprocess under PyTorch (the oracle) and under
torchlean, chosen by TORCHLEAN_PROGRAMS_FRAMEWORK. Each run trains twice (tests/programs/_run.py):
once as written, using the framework's own random numbers, and once in comparison mode, where
weights, data and noise come from NumPy and dropout is off, so the two frameworks must produce
the same losses step by step.

Devices: TORCHLEAN_PROGRAMS_DEVICE (default cpu) is torchlean's device, e.g. ``cuda`` on the GPU
machine; PyTorch runs on TORCHLEAN_PROGRAMS_TORCH_DEVICE (default cpu), since the oracle
installed here is a CPU build.
"""

from __future__ import annotations

import functools
import json
import math
import os
import subprocess
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
RUNNER = os.path.join(HERE, "programs", "_run.py")
sys.path.insert(0, os.path.join(HERE, "programs"))
from _run import PROGRAMS  # noqa: E402

# ---------------------------------------------------------------------------------------------
# Programs that do not yet run, or do not yet match PyTorch, under torchlean: the first error each
# raised when this table was last updated (regenerate with
# `TORCHLEAN_PROGRAMS_FRAMEWORK=torchlean python tests/programs/_run.py --table`). Strict: a
# program listed here that passes fails the suite, so delete its entry when the feature lands.
# An entry marks both the program's torchlean run and its loss comparison.
TORCHLEAN_XFAIL: dict[str, str] = {
}
# Programs that run under torchlean but whose comparison-mode losses do not yet match PyTorch's.
LOSSES_DIFFER_XFAIL: dict[str, str] = {
}
# ---------------------------------------------------------------------------------------------

# Tolerances for the comparison-mode losses, step by step: float32 rounding differences between
# the frameworks grow as training amplifies them, so later steps get looser bounds.
FIRST_LOSS_RTOL = 1e-3
LATER_LOSS_RTOLS = [5e-3, 1e-2, 2e-2, 5e-2]
TIMEOUT_S = 900


@functools.lru_cache(maxsize=None)
def run_program(name: str, framework: str) -> dict:
    """Run ``name`` under ``framework`` in a fresh interpreter; its JSON result (losses or error)."""
    env = dict(os.environ)
    env["TORCHLEAN_PROGRAMS_FRAMEWORK"] = framework
    if framework == "torch":
        env["TORCHLEAN_PROGRAMS_DEVICE"] = os.environ.get("TORCHLEAN_PROGRAMS_TORCH_DEVICE", "cpu")
        # Two busy cores: PyTorch's spinning OpenMP threads only slow everyone down.
        env.setdefault("OMP_NUM_THREADS", "1")
    else:
        env["TORCHLEAN_PROGRAMS_DEVICE"] = os.environ.get("TORCHLEAN_PROGRAMS_DEVICE", "cpu")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.json")
        proc = subprocess.run([sys.executable, RUNNER, name, "--out", out], env=env, cwd=tmp,
                              capture_output=True, text=True, timeout=TIMEOUT_S)
        try:
            with open(out) as f:
                result = json.load(f)
        except (OSError, ValueError):
            result = {"error": f"the program's process exited with {proc.returncode} and wrote no result",
                      "traceback": proc.stderr[-4000:]}
    return result


def _marks(name: str, *tables: dict[str, str]):
    for table in tables:
        if name in table:
            return [pytest.mark.xfail(strict=True, reason=table[name])]
    return []


def _check_result(name: str, framework: str, result: dict) -> None:
    if "error" in result:
        pytest.fail(f"{name} under {framework}: {result['error']}\n{result.get('traceback', '')}",
                    pytrace=False)
    for mode in ("normal", "deterministic"):
        losses = result[mode]
        assert losses, f"{name} ({mode}) under {framework} returned no losses"
        assert all(math.isfinite(v) for v in losses), f"{name} ({mode}) under {framework}: {losses}"
        # Training must make progress: the last third of the run is lower, on average, than the start.
        tail = losses[-max(1, len(losses) // 3):]
        assert sum(tail) / len(tail) < losses[0], (
            f"{name} ({mode}) under {framework} does not learn: {losses}")


@pytest.mark.parametrize("name", PROGRAMS)
def test_program_runs_under_torch(name):
    _check_result(name, "torch", run_program(name, "torch"))


@pytest.mark.parametrize("name", [pytest.param(n, marks=_marks(n, TORCHLEAN_XFAIL)) for n in PROGRAMS])
def test_program_runs_under_torchlean(name):
    _check_result(name, "torchlean", run_program(name, "torchlean"))


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=_marks(n, TORCHLEAN_XFAIL, LOSSES_DIFFER_XFAIL)) for n in PROGRAMS])
def test_program_losses_match_torch(name):
    reference = run_program(name, "torch")
    if "error" in reference:
        pytest.fail(f"{name} fails under torch, nothing to compare with: {reference['error']}", pytrace=False)
    ours = run_program(name, "torchlean")
    if "error" in ours:
        pytest.fail(f"{name} under torchlean: {ours['error']}\n{ours.get('traceback', '')}", pytrace=False)
    expected, got = reference["deterministic"], ours["deterministic"]
    assert len(got) == len(expected), f"{name}: {len(got)} losses under torchlean, {len(expected)} under torch"
    for step, rtol in enumerate([FIRST_LOSS_RTOL] + LATER_LOSS_RTOLS):
        if step >= len(expected):
            break
        assert got[step] == pytest.approx(expected[step], rel=rtol, abs=1e-6), (
            f"{name}: loss at step {step} is {got[step]!r} under torchlean, {expected[step]!r} under torch "
            f"(rtol {rtol})\ntorchlean: {got}\ntorch:     {expected}")
