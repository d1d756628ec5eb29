"""The compiled-kernel cache (kernels/cuda/kernel_cache.py): only verified entries from a
directory that only this user can write are loaded; anything else is compiled again.

The cache logic needs no CuPy and no GPU: most tests drive it with fake source and cubin bytes.
One test imports the real ``kernels`` module over a stand-in ``cupy`` package (in a subprocess),
so the NVRTC path's use of the cache is checked on the CPU too; the ``cuda`` test repeats it
with NVRTC on a GPU.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
import warnings

import pytest

from torchlean.kernels.cuda import kernel_cache as kc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
POSIX = hasattr(os, "getuid")
SRC, OPTS, ARCH, COMPILER = "extern \"C\" __global__ void k() {}", ("-ftz=false",), "90", "nvrtc (12, 4) cupy 13"


class FakeCompiler:
    def __init__(self, cubin: bytes = b"\x7fELF good cubin") -> None:
        self.cubin, self.calls = cubin, 0

    def __call__(self) -> bytes:
        self.calls += 1
        return self.cubin


def _get(directory, compiler, source=SRC):
    return kc.compile_cached("k", source, OPTS, ARCH, COMPILER, compiler, directory)


def _entry(directory):
    names = [n for n in os.listdir(directory) if n.endswith(".cubin")]
    assert len(names) == 1, names
    return directory / names[0]


def test_compiles_once_then_loads_the_verified_entry(tmp_path):
    d = tmp_path / "cache" / "kernels"
    fc = FakeCompiler()
    assert _get(d, fc) == fc.cubin and fc.calls == 1
    assert _get(d, fc) == fc.cubin and fc.calls == 1  # from the cache
    if POSIX:
        assert stat.S_IMODE(os.stat(d).st_mode) == 0o700  # created owner-only
    assert sorted(os.listdir(d)) == [_entry(d).name]  # no temporary file left
    # a different source, option set, architecture or compiler is a different entry
    other = FakeCompiler(b"other")
    assert kc.compile_cached("k", SRC + " ", OPTS, ARCH, COMPILER, other, d) == b"other"
    assert kc.compile_cached("k", SRC, OPTS + ("-G",), ARCH, COMPILER, other, d) == b"other"
    assert kc.compile_cached("k", SRC, OPTS, "80", COMPILER, other, d) == b"other"
    assert kc.compile_cached("k", SRC, OPTS, ARCH, "nvrtc (12, 5) cupy 13", other, d) == b"other"
    assert other.calls == 4 and _get(d, fc) == fc.cubin and fc.calls == 1


def _flip(data: bytes, pos: int) -> bytes:
    b = bytearray(data)
    b[pos] ^= 0x10
    return bytes(b)


TAMPERINGS = {
    "a flipped bit in the cubin": lambda data, other: _flip(data, len(data) - 3),
    "a flipped bit in the recorded digest": lambda data, other: _flip(data, 50),
    "a flipped bit in the identity": lambda data, other: _flip(data, 10),
    "a truncated entry": lambda data, other: data[:-5],
    "an entry cut to its header": lambda data, other: data[:40],
    "a planted raw cubin (the old format)": lambda data, other: b"\x7fELF planted code",
    "another kernel's valid entry under this name": lambda data, other: other,
    "an empty file": lambda data, other: b"",
}


@pytest.mark.parametrize("case", list(TAMPERINGS))
def test_a_bad_entry_is_recompiled_and_replaced(case, tmp_path):
    d = tmp_path / "kernels"
    fc = FakeCompiler()
    _get(d, fc)
    entry = _entry(d)
    other_dir = tmp_path / "other"
    _get(other_dir, FakeCompiler(b"\x7fELF other kernel"), source=SRC + "// other")
    entry.write_bytes(TAMPERINGS[case](entry.read_bytes(), _entry(other_dir).read_bytes()))
    assert _get(d, fc) == fc.cubin and fc.calls == 2  # never the planted bytes
    assert _get(d, fc) == fc.cubin and fc.calls == 2  # the entry was rewritten, valid
    assert sorted(os.listdir(d)) == [entry.name]


@pytest.mark.skipif(not hasattr(os, "symlink") or not hasattr(os, "O_NOFOLLOW"), reason="no symbolic links here")
def test_a_symlinked_entry_is_not_followed(tmp_path):
    d = tmp_path / "kernels"
    fc = FakeCompiler()
    _get(d, fc)
    entry = _entry(d)
    elsewhere = tmp_path / "elsewhere.cubin"
    elsewhere.write_bytes(entry.read_bytes())  # a valid entry, but outside the checked directory
    entry.unlink()
    entry.symlink_to(elsewhere)
    assert _get(d, fc) == fc.cubin and fc.calls == 2
    assert not entry.is_symlink()  # replaced by a regular file


@pytest.mark.skipif(not POSIX, reason="POSIX owners and modes only (the check is skipped on Windows)")
@pytest.mark.parametrize("mode, who", [(0o777, "its group and others"), (0o720, "its group"), (0o702, "others")])
def test_a_directory_others_can_write_is_not_used(mode, who, tmp_path):
    d = tmp_path / "kernels"
    fc = FakeCompiler()
    _get(d, fc)  # a valid entry exists...
    os.chmod(d, mode)  # ...but anyone in the group (or anyone at all) could have replaced it
    kc._warned.clear()
    with pytest.warns(RuntimeWarning, match=f"not using the kernel cache.*writable by {who}"):
        assert _get(d, fc) == fc.cubin
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once per directory and reason
        assert _get(d, fc) == fc.cubin
    assert fc.calls == 3  # compiled every time, nothing read
    entry = _entry(d)
    entry.write_bytes(kc.pack(kc.identity(SRC, OPTS, ARCH, COMPILER), b"planted with a matching digest"))
    assert _get(d, fc) == fc.cubin and fc.calls == 4
    assert kc.unpack(entry.read_bytes(), kc.identity(SRC, OPTS, ARCH, COMPILER)) == b"planted with a matching digest"
    os.chmod(d, 0o700)


@pytest.mark.skipif(not POSIX, reason="POSIX owners only")
def test_a_directory_of_another_user_is_not_used(tmp_path, monkeypatch):
    d = tmp_path / "kernels"
    fc = FakeCompiler()
    _get(d, fc)
    me = os.getuid()
    monkeypatch.setattr(kc.os, "getuid", lambda: me + 1)  # as if another user owned the directory
    kc._warned.clear()
    with pytest.warns(RuntimeWarning, match=f"owned by user id {me}, not by this user"):
        assert _get(d, fc) == fc.cubin
    assert fc.calls == 2


def test_not_a_directory_or_uncreatable(tmp_path):
    f = tmp_path / "file"
    f.write_bytes(b"x")
    fc = FakeCompiler()
    kc._warned.clear()
    with pytest.warns(RuntimeWarning, match="not using the kernel cache"):
        assert _get(f, fc) == fc.cubin
    with pytest.warns(RuntimeWarning, match="cannot be created"):
        assert _get(f / "sub", fc) == fc.cubin
    assert fc.calls == 2 and f.read_bytes() == b"x"


def test_importable_without_cupy():
    r = subprocess.run([sys.executable, "-c", "import sys; sys.modules['cupy'] = None\n"
                        "import torchlean.kernels.cuda.kernel_cache as kc; print(kc.cache_dir())"],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr


# -- kernels.py over the cache, with a stand-in cupy (runs on the CPU) -------------------------------
FAKE_CUPY = {
    "cupy/__init__.py": """
        import numpy as _np
        __version__ = "0.0-standin"
        dtype, ndarray = _np.dtype, _np.ndarray
        float32, float64, uint32, int64 = _np.float32, _np.float64, _np.uint32, _np.int64
        from . import cuda
    """,
    "cupy/cuda/__init__.py": "from . import compiler, function, memory, nvrtc, runtime\n",
    "cupy/cuda/compiler.py": """
        calls = []
        def compile_using_nvrtc(source, options=(), arch=None, filename="kern.cu", **kw):
            calls.append(filename)
            return b"\\x7fELF compiled " + filename.encode(), None
    """,
    "cupy/cuda/function.py": """
        class CPointer:
            def __init__(self, p=0):
                self.p = p
        class Module: pass
        class Function: pass
    """,
    "cupy/cuda/memory.py": "class PooledMemory: pass\n",
    "cupy/cuda/nvrtc.py": "def getVersion():\n    return (12, 4)\n",
    "cupy/cuda/runtime.py": "def getDevice():\n    return 0\n",
}


def test_kernels_module_never_loads_a_planted_cubin(tmp_path):
    fake = tmp_path / "standin"
    for rel, text in FAKE_CUPY.items():
        (fake / rel).parent.mkdir(parents=True, exist_ok=True)
        (fake / rel).write_text(textwrap.dedent(text))
    cache = tmp_path / "cache"
    script = textwrap.dedent(f"""
        import os
        os.environ["TORCHLEAN_KERNEL_CACHE"] = {str(cache)!r}
        from cupy.cuda import compiler
        from torchlean.kernels.cuda import launch as kernels
        good = kernels._compile("elementwise.cu", "90")
        assert good == b"\\x7fELF compiled elementwise.cu", good
        for name in os.listdir({str(cache)!r}):  # plant code in every cached file
            with open(os.path.join({str(cache)!r}, name), "wb") as f:
                f.write(b"\\x7fELF planted")
        again = kernels._compile("elementwise.cu", "90")
        third = kernels._compile("elementwise.cu", "90")
        print(again == good, third == good, len(compiler.calls))
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(fake), ROOT]))
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "True", "2"]  # recompiled once, then the rewritten entry


@pytest.mark.cuda
def test_nvrtc_cubin_cache_on_the_gpu(cuda_device, tmp_path, monkeypatch):
    """With NVRTC: a corrupted entry is recompiled (the same cubin) and rewritten, and the kernels
    built from it run."""
    import cupy

    from torchlean.kernels.cuda import launch as kernels

    monkeypatch.setenv("TORCHLEAN_KERNEL_CACHE", str(tmp_path / "k"))
    calls = []
    real = kernels.compiler.compile_using_nvrtc

    def counting(*a, **kw):
        calls.append(1)
        return real(*a, **kw)
    monkeypatch.setattr(kernels.compiler, "compile_using_nvrtc", counting)
    arch = cupy.cuda.Device(0).compute_capability
    first = kernels._compile("elementwise.cu", arch)
    entry = _entry(tmp_path / "k")
    entry.write_bytes(_flip(entry.read_bytes(), len(entry.read_bytes()) // 2))
    second = kernels._compile("elementwise.cu", arch)
    assert second == first and len(calls) == 2
    assert kernels._compile("elementwise.cu", arch) == first and len(calls) == 2
    mod = cupy.cuda.function.Module()
    mod.load(second)
    assert mod.get_function("tl_add") is not None
