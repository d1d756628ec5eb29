"""Loading our CUDA C kernels: one NVRTC-compiled module per ``.cu`` file, per device, cached.

Each ``.cu`` file in this folder is compiled with ``common.cuh`` prepended (so NVRTC needs no
include path, and CuPy's on-disk cache keys on the full text). ``RawModule`` compiles lazily and
keeps one loaded module per device, so ``kernel(file, name)`` works on every GPU.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import cupy
import numpy as np

HERE = Path(__file__).resolve().parent
# --fmad=false: no contraction of a*b+c into FMA, so elementwise arithmetic rounds as NumPy's does.
# -std=c++17 for templates and constexpr; precise division and sqrt stay on (NVRTC's default).
OPTIONS = ("-std=c++17", "--fmad=false")

BLOCK = 256
I64 = np.int64
F32 = np.float32


def source(file: str) -> str:
    return (HERE / "common.cuh").read_text() + "\n#line 1\n" + (HERE / file).read_text()


@lru_cache(maxsize=None)
def module(file: str) -> cupy.RawModule:
    return cupy.RawModule(code=source(file), options=OPTIONS)


@lru_cache(maxsize=None)
def kernel(file: str, name: str) -> cupy.RawKernel:
    return module(file).get_function(name)


@lru_cache(maxsize=None)
def _sm_count(device: int) -> int:
    return cupy.cuda.runtime.getDeviceProperties(device)["multiProcessorCount"]


def sm_count() -> int:
    return _sm_count(cupy.cuda.runtime.getDevice())


def grid_for(work_items: int, block: int = BLOCK, per_sm: int = 8) -> int:
    """Blocks for a grid-stride loop over ``work_items``: enough to fill the device, no more."""
    need = (work_items + block - 1) // block
    return max(1, min(need, sm_count() * per_sm))


def empty(n: int) -> cupy.ndarray:
    return cupy.empty(n, dtype=cupy.float32)
