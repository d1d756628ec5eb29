"""Loading our CUDA C kernels: one NVRTC-compiled module per ``.cu`` file and device, cached.

Each ``.cu`` file in this folder is compiled with ``common.cuh`` prepended and its ``#include "x.cuh"``
lines inlined (``sources.py``: NVRTC needs no include path). We call NVRTC through CuPy's ``compile_using_nvrtc`` and load the cubin ourselves
rather than use ``RawModule``, because RawModule always appends ``-ftz=true``: it would flush
float32 subnormals to zero, which breaks parity with the CPU (and every contract) near 1e-38.
Compiled cubins are cached on disk under ``$TORCHLEAN_KERNEL_CACHE`` (default
``~/.cache/torchlean/kernels``), bound to the full source, options, architecture and compiler
versions and verified by their SHA-256 before loading, in an owner-only directory (the rules and
the threat model: ``kernel_cache.py``).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import cupy
import numpy as np
from cupy.cuda import compiler, function, nvrtc
from cupy.cuda.function import CPointer

from ..caches import memo, register_table
from . import kernel_cache
from .sources import HERE, source
from .freelist import empty, empty_as, give_back  # noqa: F401  (re-exported: every module allocates through kernels.empty)

# -ftz=false: keep subnormals (IEEE, as NumPy). --fmad=false: no contraction of a*b+c into an FMA,
# so elementwise arithmetic rounds as NumPy's does. Precise division and sqrt (NVRTC's default)
# are spelled out so that no cache or wrapper default can change them.
OPTIONS = ("-std=c++17", "-ftz=false", "-prec-div=true", "-prec-sqrt=true", "--fmad=false")

BLOCK = 256
I64 = np.int64
F32 = np.float32


def _cache_dir() -> Path:
    return kernel_cache.cache_dir()


# Background compiles started by ``precompile``, by (file, arch, cache directory): ``_compile`` takes
# its file's result from here instead of compiling it a second time (never one made for another
# cache directory: that one's entry is not in the directory asked for).
_pending: dict[tuple[str, str, str], Future] = {}
_pending_lock = threading.Lock()


def precompile(device: int) -> None:
    """Start compiling every kernel file for ``device``'s architecture on background threads, so
    that the compiles overlap the program's set-up (data, model) and each other, and its first
    step waits only for what is still compiling. With a warm disk cache each is a file read.
    Returns at once."""
    arch = cupy.cuda.Device(device).compute_capability
    with _pending_lock:
        where = str(_cache_dir())
        todo = [p.name for p in sorted(HERE.glob("*.cu")) if (p.name, arch, where) not in _pending]
        if not todo:
            return
        pool = ThreadPoolExecutor(max_workers=min(len(todo), os.cpu_count() or 1), thread_name_prefix="torchlean-nvrtc")
        for file in todo:
            _pending[(file, arch, where)] = pool.submit(_compile_now, file, arch)
    pool.shutdown(wait=False)


def compiling() -> bool:
    """Whether a background compile that ``precompile`` started is still running or queued."""
    with _pending_lock:
        return any(not job.done() for job in _pending.values())


def _compile(file: str, arch: str) -> bytes:
    """The cubin of ``file`` for ``arch``: from a background compile (``precompile``), a verified
    cache entry, or NVRTC (then cached)."""
    with _pending_lock:
        started = _pending.pop((file, arch, str(_cache_dir())), None)
    if started is not None:
        try:
            return started.result()
        except Exception:  # noqa: BLE001 - compiled again here, where its error reaches the caller
            pass
    return _compile_now(file, arch)


def _compile_now(file: str, arch: str) -> bytes:
    src = source(file)

    def nvrtc_compile() -> bytes:
        binary, _ = compiler.compile_using_nvrtc(src, OPTIONS, arch=arch, filename=file)
        return binary

    return kernel_cache.compile_cached(Path(file).stem, src, OPTIONS, arch,
                                       f"nvrtc {nvrtc.getVersion()} cupy {cupy.__version__}", nvrtc_compile)


# (per device and source file: a few dozen entries at most)
@memo("cuda.modules", 256)
def module(device: int, file: str) -> function.Module:
    with cupy.cuda.Device(device):
        mod = function.Module()
        mod.load(_compile(file, cupy.cuda.Device(device).compute_capability))
    return mod


_functions: dict[tuple[int, str, str], function.Function] = {}


def kernel(file: str, name: str) -> function.Function:
    """Kernel ``name`` of ``file`` on the current device, compiled and loaded on first use."""
    dev = cupy.cuda.runtime.getDevice()
    fn = _functions.get((dev, file, name))
    if fn is None:
        fn = _functions[(dev, file, name)] = module(dev, file).get_function(name)
    return fn


@memo("cuda.sm_count", 64)
def _sm_count(device: int) -> int:
    return cupy.cuda.runtime.getDeviceProperties(device)["multiProcessorCount"]


def sm_count() -> int:
    return _sm_count(cupy.cuda.runtime.getDevice())


def grid_for(work_items: int, block: int = BLOCK, per_sm: int = 8) -> int:
    """Blocks for a grid-stride loop over ``work_items``: enough to fill the device, no more."""
    need = (work_items + block - 1) // block
    return max(1, min(need, sm_count() * per_sm))


class HostStruct(CPointer):
    """A kernel argument passed by value from host bytes it owns: CuPy copies the bytes a CPointer
    names at launch. Used for shape descriptors cached per plan (one argument instead of many
    scalars, each of which CuPy converts on every launch; and no structured array, whose
    __array_interface__ CuPy would rebuild on every launch). Keep the object as long as the plan."""

    def __init__(self, arr: np.ndarray) -> None:
        super().__init__(arr.ctypes.data)
        self.arr = arr


class BlockPartials:
    """The workspace of a one-launch fixed-order sum (reduce.cu's tl_reduce_sum pattern): float64
    block partials and the zeroed completion counter that the last block resets. One per (device,
    stream), so two streams never share a counter."""

    __slots__ = ("partials", "counter")

    def __init__(self, blocks: int) -> None:
        mem = cupy.zeros(blocks + 1, dtype=cupy.float64)
        self.partials = mem[:blocks]
        self.counter = mem[blocks:].view(cupy.uint32)

    def nbytes(self) -> int:
        return self.partials.nbytes + 8  # the partials and the 8-byte counter


class StreamPartials:
    """The BlockPartials of each (device, stream), made on first use with ``blocks`` partials; the
    table is a cache counted in ``cached_bytes`` and dropped by ``collect_allocator(True)``."""

    __slots__ = ("blocks", "table")

    def __init__(self, blocks: int) -> None:
        self.blocks = blocks
        self.table: dict[tuple[int, int], BlockPartials] = {}
        register_table("cuda", self.table, BlockPartials.nbytes)

    def get(self) -> BlockPartials:
        key = (cupy.cuda.runtime.getDevice(), cupy.cuda.get_current_stream().ptr)
        ws = self.table.get(key)
        if ws is None:
            ws = self.table[key] = BlockPartials(self.blocks)
        return ws
