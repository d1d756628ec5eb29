"""Several Python threads using torchlean at once: what is shared by the whole process (the random
generators, deterministic mode, TF32, the fast-kernel options) and what each thread has to itself
(``no_grad``), and torchlean's CPU kernels (Numba parallel regions) run from two threads at once."""

from __future__ import annotations

import sys
import threading
from contextlib import contextmanager

import numpy as np
import torchlean as tl
import torchlean.nn.functional as F
from torchlean import autograd
from torchlean.runtime import rng


@contextmanager
def _eager_switching():
    """Let the interpreter switch threads every 10 microseconds (the default is 5 ms), so that a race
    between reading and advancing a counter shows up in a short test instead of once in a while."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def _run_threads(n: int, target) -> list:
    """Run target(i) on n threads started together; their results, in thread order. A thread's
    exception fails the test."""
    results: list = [None] * n
    errors: list = []
    start = threading.Barrier(n)

    def body(i: int) -> None:
        try:
            start.wait()
            results[i] = target(i)
        except BaseException as exc:  # noqa: BLE001 (re-raised below, in the test's thread)
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def test_default_generator_hands_out_unique_keys_across_threads():
    # Without the lock, a few of every 80,000 keys came out twice (0 to 100 a round): five rounds
    # make a miss unlikely.
    gen = rng.default_generator
    saved = gen.get_state()
    try:
        for seed in range(5):
            tl.manual_seed(seed)
            with _eager_switching():
                keys = _run_threads(8, lambda i: [gen.next_key() for _ in range(10_000)])
            flat = [k for ks in keys for k in ks]
            assert len(flat) == 80_000
            assert len(set(flat)) == 80_000, f"round {seed}: {80_000 - len(set(flat))} keys handed out twice"
            assert gen.get_state() == (seed, 80_000)
            assert set(flat) == {rng.derive_key(seed, c) for c in range(80_000)}  # none skipped
    finally:
        gen.set_state(saved)


def test_threads_drawing_tensors_share_out_the_sequential_draws():
    saved = tl.get_rng_state()
    try:
        tl.manual_seed(7)
        sequential = {tuple(tl.rand(4).numpy().tolist()) for _ in range(8 * 100)}
        tl.manual_seed(7)
        with _eager_switching():
            rows = _run_threads(8, lambda i: [tuple(tl.rand(4).numpy().tolist()) for _ in range(100)])
        drawn = [r for rs in rows for r in rs]
        assert len(set(drawn)) == len(drawn) == 800
        assert set(drawn) == sequential  # the same draws, dealt out to the threads in some order
    finally:
        tl.set_rng_state(saved)


def test_a_generator_of_its_own_makes_a_thread_reproducible():
    def draws(i: int) -> np.ndarray:
        g = tl.Generator(1000 + i)
        return np.concatenate([tl.randn(16, generator=g).numpy() for _ in range(20)])

    with _eager_switching():
        once, again = _run_threads(4, draws), _run_threads(4, draws)
    for a, b in zip(once, again):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))


def test_no_grad_is_per_thread():
    entered, checked = threading.Event(), threading.Event()
    seen = {}

    def quiet(_: int) -> None:
        with tl.no_grad():
            entered.set()
            assert checked.wait(30)
            seen["quiet"] = autograd.is_grad_enabled()

    def recording(_: int) -> None:
        assert entered.wait(30)  # the other thread is inside no_grad now
        x = tl.ones(3, requires_grad=True)
        seen["recording"] = (autograd.is_grad_enabled(), (x * 2.0).requires_grad)
        checked.set()

    threads = [threading.Thread(target=f, args=(0,)) for f in (quiet, recording)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {"quiet": False, "recording": (True, True)}
    assert autograd.is_grad_enabled()


def test_deterministic_mode_and_tf32_are_process_global():
    from torchlean.runtime import allow_tf32, deterministic_reductions, set_allow_tf32, set_deterministic_reductions

    was_det, was_tf32 = deterministic_reductions(), allow_tf32()
    try:
        set_deterministic_reductions(not was_det)
        set_allow_tf32(not was_tf32)
        seen = _run_threads(2, lambda i: (deterministic_reductions(), allow_tf32()))
        assert seen == [(not was_det, not was_tf32)] * 2
    finally:
        set_deterministic_reductions(was_det)
        set_allow_tf32(was_tf32)


def test_two_threads_run_the_cpu_kernels_at_once():
    """Numba parallel regions (GEMMs, convolutions, softmax) entered from two Python threads at the
    same time, under the default threading layer, give the bits of one thread alone."""
    gen = np.random.default_rng(0)
    a = tl.tensor(gen.standard_normal((256, 128), dtype=np.float32))
    b = tl.tensor(gen.standard_normal((128, 256), dtype=np.float32))
    img = tl.tensor(gen.standard_normal((4, 3, 24, 24), dtype=np.float32))
    w = tl.tensor(gen.standard_normal((8, 3, 3, 3), dtype=np.float32))

    def work(_: int) -> list:
        out = []
        for _ in range(15):
            out.append(F.softmax(a @ b, dim=1).numpy())
            out.append(F.conv2d(img, w, padding=1).numpy())
        return out

    alone = work(0)
    for result in _run_threads(2, work):
        for x, y in zip(result, alone):
            assert np.array_equal(x.view(np.uint32), y.view(np.uint32))



# -- settings of the whole process: explicit, reported, and restorable -------------------------------
_PROCESS_PROBE = r"""
import ctypes, json, sys
import numpy as np

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2

def mapped_by_malloc(nbytes):
    # whether malloc serves an array of nbytes from a fresh mapping (glibc's mmap threshold)
    before = libc.mallinfo2().hblkhd
    a = np.empty(nbytes // 4, np.float32)
    grew = libc.mallinfo2().hblkhd - before >= nbytes
    del a
    return bool(grew)

import torchlean as tl
from torchlean.kernels import cpu
from torchlean.kernels.cpu import parallel
out = {"threads_before": parallel.blas_threads()}
x = tl.randn(96, 96)
x @ x  # the first GEMM
out["threads_after_gemm"] = parallel.blas_threads()
out["settings"] = cpu.process_settings()
out["mapped_with_torchlean"] = mapped_by_malloc(8 << 20)
out["restored"] = cpu.restore_process_settings()
out["threads_restored"] = parallel.blas_threads()
out["settings_restored"] = cpu.process_settings()
out["mapped_restored"] = mapped_by_malloc(8 << 20)
out["second_restore"] = cpu.restore_process_settings()
x @ x  # torchlean needs one thread again: the next GEMM sets it
out["threads_next_gemm"] = parallel.blas_threads()
print(json.dumps(out))
"""


def _probe(**env: str) -> dict:
    import json
    import os
    import platform
    import subprocess

    if platform.libc_ver()[0] != "glibc":
        pytest.fail("this test reads glibc's malloc statistics (mallinfo2); run it on a glibc system")
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    full_env.update(OPENBLAS_NUM_THREADS="2", **env)
    done = subprocess.run([sys.executable, "-c", _PROCESS_PROBE], env=full_env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_process_settings_are_reported_and_restored():
    out = _probe()
    assert out["threads_before"] == 2 and out["threads_after_gemm"] == 1
    assert out["settings"] == {"malloc_thresholds": [32 << 20, 256 << 20], "openblas_threads": [2, 1]}
    assert out["mapped_with_torchlean"] is False  # 8 MiB comes from the heap under torchlean's threshold
    assert out["restored"] == {"openblas_threads": 2, "malloc_thresholds": [128 << 10, 128 << 10]}
    assert out["threads_restored"] == 2
    assert out["settings_restored"] == {"malloc_thresholds": None, "openblas_threads": None}
    assert out["mapped_restored"] is True  # glibc's default threshold again
    assert out["second_restore"] == {}
    assert out["threads_next_gemm"] == 1


def test_malloc_settings_can_be_left_alone():
    out = _probe(TORCHLEAN_MALLOPT="0")
    assert out["settings"]["malloc_thresholds"] is None
    assert out["mapped_with_torchlean"] is True
    assert "malloc_thresholds" not in out["restored"]
