"""Deterministic reductions: the switch, its environment variable, and bitwise-repeatable results."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from torchlean.runtime import (
    Buffer,
    deterministic,
    deterministic_reductions,
    set_deterministic_reductions,
    zeros,
)
from torchlean.runtime import primitives as P
from torchlean.runtime.determinism import ENV_VAR
from torchlean.testing.primitive_table import TABLE, run_case

F32 = np.float32
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def restore_mode():
    previous = deterministic_reductions()
    yield
    set_deterministic_reductions(previous)


def mixed(rng: np.random.Generator, n: int) -> np.ndarray:
    """float32 values whose magnitudes span 1e-8 .. 1e8, so the summation order shows in the bits."""
    return (rng.standard_normal(n) * 10.0 ** rng.integers(-8, 9, n)).astype(F32)


# -- the switch -----------------------------------------------------------------------------------
def test_environment_variable_name():
    assert ENV_VAR == "TORCHLEAN_CUDA_DETERMINISTIC_REDUCTIONS"


@pytest.mark.parametrize("value, expected", [(None, False), ("", False), ("0", False), ("1", True), ("yes", True)],
                         ids=["unset", "empty", "0", "1", "yes"])
def test_start_value_comes_from_environment(value, expected):
    env = {k: v for k, v in os.environ.items() if k != ENV_VAR}
    if value is not None:
        env[ENV_VAR] = value
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    proc = subprocess.run(
        [sys.executable, "-c", "from torchlean.runtime import deterministic_reductions; print(deterministic_reductions())"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(expected)


def test_setter_returns_the_value_in_force():
    assert set_deterministic_reductions(True) is True
    assert deterministic_reductions() is True
    assert set_deterministic_reductions(False) is False
    assert deterministic_reductions() is False
    assert set_deterministic_reductions(1) is True  # truthy values are normalised to bool
    assert deterministic_reductions() is True


@pytest.mark.parametrize("start", [False, True])
def test_context_manager_restores(start):
    set_deterministic_reductions(start)
    with deterministic(True) as on:
        assert on is True and deterministic_reductions() is True
        with deterministic(False) as inner:
            assert inner is False and deterministic_reductions() is False
        assert deterministic_reductions() is True
    assert deterministic_reductions() is start
    with deterministic() as on:
        assert on is True
    assert deterministic_reductions() is start
    with pytest.raises(KeyError):
        with deterministic(not start):
            assert deterministic_reductions() is (not start)
            raise KeyError("boom")
    assert deterministic_reductions() is start


# -- bitwise repeatability ------------------------------------------------------------------------
def test_scatter_add_into_one_slot_has_one_result(device):
    k = 65_536
    vals = mixed(np.random.default_rng(0), k)
    idx = np.zeros(k, np.int64)
    with deterministic(True):
        x = zeros(1, device)
        v = Buffer.from_numpy(vals, device)
        results = {P.scatter_add(x, v, 1, idx, k).to_numpy().tobytes() for _ in range(100)}
    assert len(results) == 1, f"{len(results)} distinct results in deterministic mode"
    verdict = run_case(TABLE["scatter_add"], [np.zeros(1, F32), vals, 1, idx, k], device)[0]
    assert verdict.ok, verdict.detail


def _reduce_sum(rng, device):
    x = Buffer.from_numpy(mixed(rng, 1_000_003), device)
    return lambda: P.reduce_sum(x)


def _reduce_sum_axis0(rng, device):
    b = Buffer.from_numpy(mixed(rng, 4096 * 65), device)
    return lambda: P.reduce_sum_axis0(b, 4096, 65)


def _reduce_from_broadcast(rng, device):
    d = Buffer.from_numpy(mixed(rng, 64 * 512 * 3), device)
    return lambda: P.reduce_from_broadcast(d, (3, 1), (64, 512, 3), (0, 2, 1))


def _scatter_add_rows(rng, device):
    rows, cols, k = 8, 33, 20_000
    mat = Buffer.from_numpy(mixed(rng, rows * cols), device)
    vals = Buffer.from_numpy(mixed(rng, k * cols), device)
    idx = rng.integers(0, rows + 1, k)
    return lambda: P.scatter_add_rows(mat, vals, rows, cols, idx, k)


def _bmm(rng, device):
    batch, m, n, p = 3, 64, 1000, 48
    a = Buffer.from_numpy(mixed(rng, batch * m * n), device)
    b = Buffer.from_numpy(mixed(rng, batch * n * p), device)
    return lambda: P.bmm(a, b, batch, m, n, p)


REPEATABLE = {"reduce_sum": _reduce_sum, "reduce_sum_axis0": _reduce_sum_axis0,
              "reduce_from_broadcast": _reduce_from_broadcast, "scatter_add_rows": _scatter_add_rows, "bmm": _bmm}


@pytest.mark.parametrize("name", list(REPEATABLE))
def test_repeated_runs_are_bitwise_equal(name, device):
    run = REPEATABLE[name](np.random.default_rng(42), device)
    with deterministic(True):
        results = {run().to_numpy().tobytes() for _ in range(20)}
    assert len(results) == 1, f"{name}: {len(results)} distinct results in 20 deterministic runs"
    if device == "cpu":  # the CPU accumulates in a fixed order: the switch changes no bit
        with deterministic(False):
            assert run().to_numpy().tobytes() in results
