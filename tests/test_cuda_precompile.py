"""``launch.precompile``: the CUDA kernel files compiled on background threads (``torchlean train``
starts it while the data and the model are made), without a GPU: CuPy is the stand-in of
test_kernel_cache.py, with a Device and a compiler that is slow, counts its calls and can fail.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

from test_kernel_cache import FAKE_CUPY, ROOT

# Every script starts here: the stand-in CuPy with a device of compute capability 9.0.
PRELUDE = """
    import os, threading, time
    os.environ["TORCHLEAN_KERNEL_CACHE"] = {cache!r}
    import cupy.cuda
    from cupy.cuda import compiler

    class Device:
        def __init__(self, i):
            self.compute_capability = "90"
    cupy.cuda.Device = Device
"""


def _run_standin(tmp_path, body: str, cache) -> subprocess.CompletedProcess:
    """PRELUDE (with ``cache`` as the kernel cache) then ``body``, in a process whose CuPy is the stand-in."""
    fake = tmp_path / "standin"
    for rel, text in FAKE_CUPY.items():
        (fake / rel).parent.mkdir(parents=True, exist_ok=True)
        (fake / rel).write_text(textwrap.dedent(text))
    script = textwrap.dedent(PRELUDE.format(cache=str(cache))) + textwrap.dedent(body)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(fake), ROOT]))
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)

SCRIPT = """
    calls, fail = [], {"norm.cu"}
    release = threading.Event()

    def slow(source, options=(), arch=None, filename="kern.cu", **kw):
        calls.append(filename)
        if filename == "conv.cu":
            release.wait(30)  # still compiling when the main thread asks for it
        if filename in fail:
            fail.discard(filename)
            raise RuntimeError("nvrtc failed once")
        return b"\\x7fELF compiled " + filename.encode(), None
    compiler.compile_using_nvrtc = slow

    from torchlean.kernels.cuda import launch
    files = sorted(p.name for p in launch.HERE.glob("*.cu"))
    launch.precompile(0)
    threading.Timer(0.2, release.set).start()
    got = {f: launch._compile(f, "90") for f in ["conv.cu"] + files}
    assert all(got[f] == b"\\x7fELF compiled " + f.encode() for f in files), got
    launch.precompile(0)  # again: every file is in the disk cache now
    again = {f: launch._compile(f, "90") for f in files}
    assert again == got
    print(len(files), len(calls), calls.count("norm.cu"), calls.count("conv.cu"))
"""


def test_precompile_compiles_each_file_once_and_hands_results_over(tmp_path):
    r = _run_standin(tmp_path, SCRIPT, tmp_path / "cache")
    assert r.returncode == 0, r.stderr
    n_files, n_calls, norm_calls, conv_calls = map(int, r.stdout.split())
    assert n_files >= 10
    # one compile per file; norm.cu failed in the background and was compiled again on first use;
    # conv.cu, asked for while its background compile ran, was waited for, not compiled twice
    assert (n_calls, norm_calls, conv_calls) == (n_files + 1, 2, 1)


OTHER_DIR_SCRIPT = """
    calls = []

    def compile_(source, options=(), arch=None, filename="kern.cu", **kw):
        calls.append(filename)
        return b"\\x7fELF compiled " + filename.encode(), None
    compiler.compile_using_nvrtc = compile_

    from torchlean.kernels.cuda import launch
    launch.precompile(0)
    for job in list(launch._pending.values()):
        job.result()  # all written to the first directory
    os.environ["TORCHLEAN_KERNEL_CACHE"] = {second!r}  # e.g. a test's own cache directory
    launch._compile("elementwise.cu", "90")
    print(sorted(n for n in os.listdir({second!r}) if n.endswith(".cubin")))
"""


def test_a_compile_for_another_cache_directory_is_not_handed_over(tmp_path):
    """A background compile made for one cache directory is not what a later call asking with
    another directory gets: its entry must appear in the directory asked for."""
    r = _run_standin(tmp_path, OTHER_DIR_SCRIPT.format(second=str(tmp_path / "b")), tmp_path / "a")
    assert r.returncode == 0, r.stderr
    assert "elementwise" in r.stdout, r.stdout


EXIT_SCRIPT = """

    def slow(source, options=(), arch=None, filename="kern.cu", **kw):
        time.sleep(60)  # a fresh machine's NVRTC, much slowed down
        return b"\\x7fELF compiled " + filename.encode(), None
    compiler.compile_using_nvrtc = slow

    from torchlean import cli
    from torchlean.kernels.cuda import launch
    cli._end_now_if_compiling(0)  # nothing compiling: it returns
    launch.precompile(0)
    assert launch.compiling()
    print("done")
    cli._end_now_if_compiling(0)  # what `torchlean train` does when it has finished
    raise SystemExit("still running")
"""


def test_torchlean_train_ends_without_waiting_for_the_background_compiles(tmp_path):
    t0 = time.perf_counter()
    r = _run_standin(tmp_path, EXIT_SCRIPT, tmp_path / "cache")
    assert r.returncode == 0 and r.stdout.strip() == "done", r.stderr
    assert time.perf_counter() - t0 < 30  # not the 60 s that each file's compile takes
    cache = tmp_path / "cache"  # (made by the first compile to start, if one got that far)
    assert not (cache.exists() and [n for n in os.listdir(cache) if n.endswith(".cubin")])  # nothing half-written
