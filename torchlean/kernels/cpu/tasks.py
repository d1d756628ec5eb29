"""Parallel regions that compile once: a kernel's body as a cached C callback, run over Numba's pool
by one generic pair of wrappers.

Why: a ``parallel=True`` function whose prange body calls a compiled njit function does not reuse
that compilation. Numba links the callee's LLVM module into the region's gufunc and optimizes it
again, so each parallel wrapper costs seconds on a cold start (BENCHMARKS.md), and every wrapper
pays again for the same callees.
Called through its address instead, a body is compiled once, as a ``cfunc`` cached on disk like any
``cache=True`` function, and the two wrappers here (``_run_par``, ``_run_ser``) are tiny and shared
by every kernel that uses them: a body costs its own compilation and nothing more.

A task body is ``body(i, args)``: part i of the region, ``args`` a pointer to int64 words that carry
the kernel's integers, its floats' bits (``as_float(word)``) and its arrays' addresses
(``as_f32(word, shape)`` / ``as_i64(word, shape)`` view one); ``pack`` builds the words, and
``pack_f32`` faster for integers and float32 arrays (a hot call's words). ``Task(fn)``
builds the callback on first use, so importing the backend compiles nothing. Threads follow
parallel.py's policy: the caller decides the part count (``parallel.parts``) and whether to split.
The caller keeps the arrays alive for the call; the bits are the body's alone, whatever the split.
A body that calls cblas_sgemm fixes the BLAS integer type at compile time, so such kernels keep one
task per type (``blas_task``) and the cache never holds a callback of the wrong ABI.
"""

from __future__ import annotations

import struct
import threading

import numpy as np
from llvmlite import ir
from numba import carray, cfunc, njit, prange, types
from numba.extending import intrinsic

__all__ = ["Task", "callback", "run", "call", "as_f32", "as_i64", "as_float", "pack", "pack_f32", "float_bits", "blas_task"]

SIG = types.void(types.int64, types.CPointer(types.int64))


@intrinsic
def _call(typingctx, fptr, i, args):
    """fptr(i, args) for a ``void(int64, int64*)`` callback at address fptr (an int64)."""
    if not isinstance(args, types.Integer):
        return None

    def codegen(context, builder, signature, llargs):
        f_, i_, a_ = llargs
        i64 = ir.IntType(64)
        fnty = ir.FunctionType(ir.VoidType(), [i64, i64.as_pointer()])
        builder.call(builder.inttoptr(f_, fnty.as_pointer()), [i_, builder.inttoptr(a_, i64.as_pointer())])
        return context.get_dummy_value()

    return types.void(types.int64, types.int64, types.int64), codegen


@intrinsic
def _f32_pointer(typingctx, addr):
    """The float32 pointer at byte address addr (an int64)."""
    if not isinstance(addr, types.Integer):
        return None

    def codegen(context, builder, signature, llargs):
        return builder.inttoptr(llargs[0], ir.FloatType().as_pointer())

    return types.CPointer(types.float32)(types.int64), codegen


@intrinsic
def _i64_pointer(typingctx, addr):
    """The int64 pointer at byte address addr (an int64)."""
    if not isinstance(addr, types.Integer):
        return None

    def codegen(context, builder, signature, llargs):
        return builder.inttoptr(llargs[0], ir.IntType(64).as_pointer())

    return types.CPointer(types.int64)(types.int64), codegen


@intrinsic
def as_float(typingctx, word):
    """The float64 whose bits are the int64 word (``pack`` stores a float that way)."""
    if not isinstance(word, types.Integer):
        return None

    def codegen(context, builder, signature, llargs):
        return builder.bitcast(llargs[0], ir.DoubleType())

    return types.float64(types.int64), codegen


@njit(inline="always", nogil=True)
def as_f32(addr, shape):
    """The float32 array of ``shape`` (an int or a tuple) at byte address ``addr``: no copy."""
    return carray(_f32_pointer(addr), shape)


@njit(inline="always", nogil=True)
def as_i64(addr, shape):
    """The int64 array of ``shape`` at byte address ``addr``: no copy."""
    return carray(_i64_pointer(addr), shape)


@njit(cache=True, nogil=True, parallel=True)
def _run_par(fptr, args, t):
    for i in prange(t):
        _call(fptr, i, args.ctypes.data)


@njit(cache=True, nogil=True)
def _run_ser(fptr, args, t):
    for i in range(t):
        _call(fptr, i, args.ctypes.data)


@njit(cache=True, nogil=True)
def call(fptr, words):
    """From compiled code: part 0 of the task at address fptr (``Task.address()``, passed in by the
    caller) on the calling thread, words its int64 argument words. The body runs through its address:
    the caller's compilation does not include (and optimize again) the body's code."""
    _call(fptr, 0, words.ctypes.data)


def callback(body):
    """``body`` compiled to its C callback (from Numba's disk cache when there): what a Task runs,
    and what warm.py's helper processes compile ahead of a Task's first run."""
    return cfunc(SIG, cache=True, nogil=True, error_model="numpy")(body)


class Task:
    """A task body (a module-level Python function ``body(i, args)``, njit-compatible), compiled to
    a cached C callback on its first run."""

    def __init__(self, body) -> None:
        self._body = body
        self._address = 0
        self._lock = threading.Lock()
        self._keep = None

    def address(self) -> int:
        if not self._address:
            with self._lock:
                if not self._address:
                    cb = callback(self._body)
                    self._keep = cb
                    self._address = cb.address
        return self._address


def _word(w) -> int:
    if isinstance(w, np.ndarray):
        return w.__array_interface__["data"][0]
    if isinstance(w, (float, np.floating)):
        return int(np.float64(w).view(np.int64))
    return int(w)


def pack(*words) -> np.ndarray:
    """The int64 words of a task's arguments: ints and bools as themselves, floats as their float64
    bits (``as_float``), arrays as their data addresses. (Python ints and arrays, nearly every
    word, are told apart by their exact type first: a conv call packs 30 words.)"""
    out = []
    for w in words:
        t = type(w)
        if t is int:
            out.append(w)
        elif t is np.ndarray:
            out.append(w.__array_interface__["data"][0])
        else:
            out.append(_word(w))
    return np.array(out, dtype=np.int64)


_NO_ARRAY = np.zeros(1, np.float32)


@njit(cache=True, nogil=True)
def _pack8(ints, a0, a1, a2, a3, a4, a5, a6, a7):
    n = ints.size
    w = np.empty(n + 16, np.int64)
    for j in range(n):
        w[j] = ints[j]
    w[n], w[n + 1], w[n + 2], w[n + 3] = a0.ctypes.data, a0.size, a1.ctypes.data, a1.size
    w[n + 4], w[n + 5], w[n + 6], w[n + 7] = a2.ctypes.data, a2.size, a3.ctypes.data, a3.size
    w[n + 8], w[n + 9], w[n + 10], w[n + 11] = a4.ctypes.data, a4.size, a5.ctypes.data, a5.size
    w[n + 12], w[n + 13], w[n + 14], w[n + 15] = a6.ctypes.data, a6.size, a7.ctypes.data, a7.size
    return w


def pack_f32(ints, *arrays):
    """A task's words: the integers ``ints`` (a list: ints, bools, floats' bits from
    ``float_bits``), then (address, size) of each of up to 8 flat C-contiguous float32 arrays, then
    unused pairs. About 2 us, where tasks.pack spends about 0.5 us a word (10 us: as much again as a
    small GEMM's or batch norm's whole call)."""
    return _pack8(np.array(ints, dtype=np.int64), *arrays, *(_NO_ARRAY,) * (8 - len(arrays)))


def float_bits(x) -> int:
    """The int64 word of the float64 x (tasks.as_float reads it back)."""
    return _Q.unpack(_D.pack(x))[0]


_Q, _D = struct.Struct("<q"), struct.Struct("<d")


def run(task: Task, args: np.ndarray, t: int, on_pool: bool | None = None) -> None:
    """task's body for parts 0 .. t-1: on Numba's threads (``on_pool``; by default when t > 1), else
    one after another on the caller's."""
    if t > 1 if on_pool is None else on_pool:
        _run_par(task.address(), args, t)
    else:
        _run_ser(task.address(), args, t)


def blas_task(tasks: tuple, iz) -> Task:
    """Of (task for 32-bit BLAS integers, task for 64-bit ones), the one for iz's type."""
    return tasks[1] if np.dtype(type(iz)).itemsize == 8 else tasks[0]
