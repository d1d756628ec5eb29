"""kernels/cpu/tasks.py: a kernel body compiled once as a cached C callback and run over Numba's pool
by the shared wrappers: every part runs exactly once, the result does not depend on the split, the
callback is built on first use only, and BLAS kernels pick the task of their integer type."""

from __future__ import annotations

import numba
import numpy as np
import pytest
from numba import carray

from torchlean.kernels.cpu import parallel, tasks


def _scale_parts(i, p):
    """Part i of t: x[j] = x[j] * 3 + 1 for its share of j; marks[i] += 1."""
    a = carray(p, 5)
    x = tasks.as_f32(a[0], a[1])
    marks = tasks.as_f32(a[2], a[3])
    t = a[4]
    n = x.size
    for j in range(n * i // t, n * (i + 1) // t):
        x[j] = x[j] * 3 + 1
    marks[i] += 1


_TASK = tasks.Task(_scale_parts)


def _mixed_words(i, p):
    """out[0] = float word * sum of the int64 array + the bool word."""
    a = carray(p, 6)
    ints = tasks.as_i64(a[0], a[1])
    out = tasks.as_f32(a[2], a[3])
    out[0] = tasks.as_float(a[4]) * ints.sum() + (a[5] != 0)


_MIXED = tasks.Task(_mixed_words)


@pytest.mark.parametrize("t", [1, 2, 3, 7])
def test_every_part_runs_once_and_the_split_does_not_matter(t):
    x = np.arange(1000, dtype=np.float32)
    marks = np.zeros(t, np.float32)
    tasks.run(_TASK, tasks.pack(x, x.size, marks, marks.size, t), t)
    assert np.array_equal(marks, np.ones(t, np.float32))
    assert np.array_equal(x, np.arange(1000, dtype=np.float32) * 3 + 1)


def test_the_callback_is_built_on_first_use_and_kept():
    task = tasks.Task(_scale_parts)
    assert task._address == 0  # nothing compiled (or loaded) before its first run
    x, marks = np.ones(4, np.float32), np.zeros(1, np.float32)
    tasks.run(task, tasks.pack(x, 4, marks, 1, 1), 1)
    first = task.address()
    assert first != 0 and task.address() == first


def test_parts_run_on_the_pool_when_there_are_threads():
    if parallel.max_threads() < 2:
        pytest.skip("Numba's pool has one thread (NUMBA_NUM_THREADS=1 or the workqueue layer)")
    old = numba.get_num_threads()
    try:
        numba.set_num_threads(2)
        x = np.zeros(1 << 16, np.float32)
        marks = np.zeros(4, np.float32)
        tasks.run(_TASK, tasks.pack(x, x.size, marks, 4, 4), 4)
    finally:
        numba.set_num_threads(old)
    assert np.array_equal(marks, np.ones(4, np.float32)) and np.all(x == 1)


def test_blas_tasks_follow_the_integer_type():
    pair = ("int32 task", "int64 task")
    assert tasks.blas_task(pair, np.int64(0)) == "int64 task"
    assert tasks.blas_task(pair, np.int32(0)) == "int32 task"


def test_words_carry_floats_ints_bools_and_int64_arrays():
    ints = np.array([1, 2, 3, 4], np.int64)
    out = np.zeros(1, np.float32)
    tasks.run(_MIXED, tasks.pack(ints, ints.size, out, out.size, 0.25, True), 1)
    assert out[0] == np.float32(0.25 * 10 + 1)
    assert tasks.pack(-1.5)[0] == np.float64(-1.5).view(np.int64)
