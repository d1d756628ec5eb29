"""One float32 GEMM with the bias added in its epilogue, through cuBLASLt (``cublasLtMatmul`` with
``CUBLASLT_EPILOGUE_BIAS``): what PyTorch's addmm runs for a linear layer. fast_gemm's plain path
(cublasGemmEx, then our kernel adding the bias) moves the (m, n) output once more: at GPT-2's
shapes that pass costs 3-10% of the product (BENCHMARKS.md).

CuPy has no cuBLASLt binding, so the C API is called through ctypes. The library is the
``libcublasLt`` that CuPy's cuBLAS already loaded (cuBLAS links against it), found in the process's
memory map, so both come from the same toolkit. Descriptors and the heuristic's algorithm are made
once per (device, shape, transposes, compute type) and reused; only the bias pointer is set per call.

Arithmetic: the epilogue computes fl(acc + bias[j]) from the float32 accumulator with alpha = 1 and
beta = 0, the same fl(fl(A B) + b) as the plain path; the product's algorithm is cuBLASLt's choice,
so its bits may differ from cublasGemmEx's (fast_gemm's contract bounds both). The choice is
fixed per process for a shape, and a plan is only made on the device it runs on: repeat calls give
the same bits.

``matmul_bias`` returns None when cuBLASLt cannot be loaded or offers no algorithm for the case;
the caller then takes the plain path on the same device.
"""

from __future__ import annotations

import ctypes
import threading

import cupy
import numpy as np

from ...errors import DeviceError
from ..caches import register_table
from ..flags import allow_tf32
from .launch import empty

__all__ = ["matmul_bias", "available"]

_R_32F = 0                        # cudaDataType CUDA_R_32F
_COMPUTE_32F, _COMPUTE_32F_FAST_TF32 = 68, 77
_DESC_TRANSA, _DESC_TRANSB, _DESC_EPILOGUE, _DESC_BIAS_POINTER = 3, 4, 7, 8   # cublasLtMatmulDescAttributes_t
_EPILOGUE_BIAS = 4                # cublasLtEpilogue_t CUBLASLT_EPILOGUE_BIAS
_PREF_MAX_WORKSPACE_BYTES = 1     # cublasLtMatmulPreferenceAttributes_t
_WORKSPACE_BYTES = 4 << 20
_N, _T = 0, 1                     # cublasOperation_t
_HEURISTIC_RESULT_BYTES = 96      # sizeof(cublasLtMatmulHeuristicResult_t): algo (64), size_t, status, float, int[4]
_U64_MAX = 2**63 - 1

_ONE = np.ones(1, dtype=np.float32)
_ZERO = np.zeros(1, dtype=np.float32)
_ONE_PTR, _ZERO_PTR = _ONE.ctypes.data, _ZERO.ctypes.data

_lock = threading.Lock()
_call_lock = threading.Lock()     # a plan's descriptor holds the bias pointer of the call in flight
_state: dict[str, object] = {}    # "lib": the CDLL or None once tried; "handles": device -> handle
_plans: dict[tuple, object] = {}  # (device, m, n, k, trans_a, trans_b, compute) -> _Plan or None
_MAX_PLANS = 256                  # more shapes than this: every plan is destroyed and made again on use
# per (device, stream): the workspace the plans were chosen for (a cache in cached_bytes)
_workspaces: dict[tuple[int, int], cupy.ndarray] = {}
register_table("cuda", _workspaces, lambda a: a.nbytes)


def _find_library():
    """The libcublasLt already mapped into this process by CuPy's cuBLAS (same toolkit), else the
    first of the usual sonames that loads; None when neither works."""
    cupy.cuda.device.get_cublas_handle()  # loads libcublas, and with it libcublasLt
    path = None
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                if "libcublasLt.so" in line:
                    path = line.split(None, 5)[-1].strip()
                    break
    except OSError:
        pass
    names = ([path] if path else []) + [f"libcublasLt.so.{v}" for v in (13, 12)] + ["libcublasLt.so"]
    for name in names:
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        return _declare(lib)
    return None


def _declare(lib):
    p, i32, u64, i64, sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64, ctypes.c_int64, ctypes.c_size_t
    for name, args in (
            ("cublasLtCreate", [ctypes.POINTER(p)]),
            ("cublasLtMatmulDescCreate", [ctypes.POINTER(p), i32, i32]),
            ("cublasLtMatmulDescSetAttribute", [p, i32, p, sz]),
            ("cublasLtMatrixLayoutCreate", [ctypes.POINTER(p), i32, u64, u64, i64]),
            ("cublasLtMatmulDescDestroy", [p]),
            ("cublasLtMatrixLayoutDestroy", [p]),
            ("cublasLtMatmulPreferenceCreate", [ctypes.POINTER(p)]),
            ("cublasLtMatmulPreferenceSetAttribute", [p, i32, p, sz]),
            ("cublasLtMatmulPreferenceDestroy", [p]),
            ("cublasLtMatmulAlgoGetHeuristic", [p, p, p, p, p, p, p, i32, p, ctypes.POINTER(i32)]),
            ("cublasLtMatmul", [p, p, p, p, p, p, p, p, p, p, p, p, p, p, sz, p])):
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, i32
    return lib


def _lib():
    if "lib" not in _state:
        with _lock:
            if "lib" not in _state:
                _state["lib"] = _find_library()
                _state["handles"] = {}
    return _state["lib"]


def available() -> bool:
    """Whether cuBLASLt loaded in this process (fast_gemm's fused-bias path)."""
    return _lib() is not None


def _check(status: int, what: str) -> None:
    if status != 0:
        raise DeviceError(f"fast_gemm: cuBLASLt's {what} failed with status {status}")


class _Plan:
    """The descriptors and the chosen algorithm of one (shape, transposes, compute type)."""

    __slots__ = ("desc", "a", "b", "c", "algo", "ws_bytes")

    def __init__(self, desc, a, b, c, algo, ws_bytes) -> None:
        self.desc, self.a, self.b, self.c, self.algo, self.ws_bytes = desc, a, b, c, algo, ws_bytes


def _layout(lib, rows: int, cols: int, ld: int):
    h = ctypes.c_void_p()
    _check(lib.cublasLtMatrixLayoutCreate(ctypes.byref(h), _R_32F, rows, cols, ld), "cublasLtMatrixLayoutCreate")
    return h


def _set(lib, desc, attr: int, value) -> None:
    _check(lib.cublasLtMatmulDescSetAttribute(desc, attr, ctypes.byref(value), ctypes.sizeof(value)),
           "cublasLtMatmulDescSetAttribute")


def _make_plan(lib, handle, m: int, n: int, k: int, trans_a: bool, trans_b: bool, compute: int):
    # Column-major view, as linalg.gemm: C^T (n, m) = op(B)^T op(A)^T, so B is cuBLASLt's A. The
    # bias is a vector over the rows of that D (n of them): the output's columns.
    desc = ctypes.c_void_p()
    _check(lib.cublasLtMatmulDescCreate(ctypes.byref(desc), compute, _R_32F), "cublasLtMatmulDescCreate")
    _set(lib, desc, _DESC_TRANSA, ctypes.c_int32(_T if trans_b else _N))
    _set(lib, desc, _DESC_TRANSB, ctypes.c_int32(_T if trans_a else _N))
    _set(lib, desc, _DESC_EPILOGUE, ctypes.c_uint32(_EPILOGUE_BIAS))
    la = _layout(lib, k, n, k) if trans_b else _layout(lib, n, k, n)
    lb = _layout(lib, m, k, m) if trans_a else _layout(lib, k, m, k)
    lc = _layout(lib, n, m, n)
    pref = ctypes.c_void_p()
    _check(lib.cublasLtMatmulPreferenceCreate(ctypes.byref(pref)), "cublasLtMatmulPreferenceCreate")
    try:
        ws = ctypes.c_uint64(_WORKSPACE_BYTES)
        _check(lib.cublasLtMatmulPreferenceSetAttribute(pref, _PREF_MAX_WORKSPACE_BYTES, ctypes.byref(ws),
                                                        ctypes.sizeof(ws)), "cublasLtMatmulPreferenceSetAttribute")
        result = ctypes.create_string_buffer(_HEURISTIC_RESULT_BYTES)
        count = ctypes.c_int32(0)
        status = lib.cublasLtMatmulAlgoGetHeuristic(handle, desc, la, lb, lc, lc, pref, 1, result,
                                                    ctypes.byref(count))
    finally:
        lib.cublasLtMatmulPreferenceDestroy(pref)
    if status != 0 or count.value < 1:  # no algorithm for this case: the caller's plain path
        lib.cublasLtMatmulDescDestroy(desc)
        for layout in (la, lb, lc):
            lib.cublasLtMatrixLayoutDestroy(layout)
        return None
    ws_bytes = int.from_bytes(result.raw[64:72], "little")
    return _Plan(desc, la, lb, lc, result, ws_bytes)


def _drop_plans(lib) -> None:
    """Destroy every plan's descriptors (a program of ever new shapes must not grow this cache)."""
    with _call_lock:
        for plan in _plans.values():
            if plan is not None:
                lib.cublasLtMatmulDescDestroy(plan.desc)
                for layout in (plan.a, plan.b, plan.c):
                    lib.cublasLtMatrixLayoutDestroy(layout)
        _plans.clear()


def _workspace(nbytes: int):
    key = (cupy.cuda.runtime.getDevice(), cupy.cuda.get_current_stream().ptr)
    ws = _workspaces.get(key)
    if ws is None or ws.nbytes < nbytes:
        ws = _workspaces[key] = empty(max(nbytes, _WORKSPACE_BYTES) // 4)
    return ws


def matmul_bias(a, b, bias, m: int, k: int, n: int, trans_a: bool, trans_b: bool):
    """Row-major float32 (m, n) = op(a) (m, k) @ op(b) (k, n) + bias (n,) on every row, in one
    cuBLASLt call; None when cuBLASLt is missing or has no algorithm for the case. Needs m, n,
    k >= 1."""
    lib = _lib()
    if lib is None or max(m, n, k) > _U64_MAX:
        return None
    dev = cupy.cuda.runtime.getDevice()
    compute = _COMPUTE_32F_FAST_TF32 if allow_tf32() else _COMPUTE_32F
    key = (dev, m, n, k, bool(trans_a), bool(trans_b), compute)
    plan = _plans.get(key, False)
    handles = _state["handles"]
    handle = handles.get(dev)
    if handle is None:
        handle = ctypes.c_void_p()
        _check(lib.cublasLtCreate(ctypes.byref(handle)), "cublasLtCreate")
        handles[dev] = handle
    if plan is False:
        if len(_plans) >= _MAX_PLANS:
            _drop_plans(lib)
        plan = _plans[key] = _make_plan(lib, handle, m, n, k, bool(trans_a), bool(trans_b), compute)
    if plan is None:
        return None
    out = empty(m * n)
    ws = _workspace(plan.ws_bytes) if plan.ws_bytes else None
    with _call_lock:
        _set(lib, plan.desc, _DESC_BIAS_POINTER, ctypes.c_void_p(bias.data.ptr))
        _check(lib.cublasLtMatmul(handle, plan.desc, _ONE_PTR, b.data.ptr, plan.a, a.data.ptr, plan.b, _ZERO_PTR,
                                  out.data.ptr, plan.c, out.data.ptr, plan.c, plan.algo,
                                  ws.data.ptr if ws is not None else None, plan.ws_bytes,
                                  cupy.cuda.get_current_stream().ptr), "cublasLtMatmul")
    return out
