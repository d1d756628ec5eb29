"""CUDA kernels of the selective scans (scan.cu): a chunked scan of affine maps over time.

Launch plan, fixed by the shape (seq_len L, state S), never by the device:

* C = 1 (plain sequential loop per channel, one launch) when the channels alone fill the GPU
  (S >= 65536) or the sequence is short (L < 2 * 64).
* Otherwise C chunks of T >= 64 steps with C * S ~ 2^17 threads in flight (an H200 runs ~270k
  resident threads; 2^17 keeps every SM busy with a few warps while each thread still walks
  >= 64 steps): pass 1 (chunk maps) and pass 3 (rescan from the carry) are C * S threads, j
  fastest (coalesced rows); pass 2 (the carries) is one thread per channel walking the C chunk
  maps when C <= 64 or S >= 4096, else a block of 256 threads per channel (runs of chunk maps
  composed in parallel, then walked by one thread).
  Forward launches: 3; bytes: the inputs read twice (passes 1 and 3), H written once, plus
  4 C S bytes * 4 of chunk maps and carries.
* Backward: the same passes backwards in time for the adjoint; pass 3 writes dX (and the var
  form's dA, dB); the diag form's dA, dB come from per-chunk double partials added in chunk
  order by a fourth launch (no atomics: bitwise repeatable in every mode).
"""

from __future__ import annotations

import cupy
import numpy as np

from .launch import BLOCK, I64, empty, grid_for, kernel

__all__ = ["selective_scan_diag_fwd", "selective_scan_diag_bwd", "selective_scan_diag_var_fwd",
           "selective_scan_diag_var_bwd"]

_FILE = "scan.cu"
_MIN_T = 64                 # shortest chunk
_TARGET_THREADS = 1 << 17   # C * S aimed at
_SEQ_STATE = 65536          # this many channels fill the GPU without chunking
_CARRY_SEQ_MAX_C = 64       # pass 2: one thread per channel up to this many chunks ...
_CARRY_SEQ_MIN_S = 4096     # ... or from this many channels on
_CARRY_THREADS = 256        # SCAN_CARRY_THREADS in scan.cu


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def plan(L: int, S: int) -> tuple[int, int]:
    """(C chunks, T steps per chunk) for a scan of L steps over S channels."""
    if L < 2 * _MIN_T or S >= _SEQ_STATE or S == 0:
        return 1, max(L, 1)
    C = max(1, min(_cdiv(_TARGET_THREADS, S), L // _MIN_T))
    T = _cdiv(L, C)
    return _cdiv(L, T), T


def _launch(name: str, n_threads: int, args) -> None:
    kernel(_FILE, name)((grid_for(n_threads),), (BLOCK,), args)


def _carries(Pm, Pe, Lc, start, S: int, C: int, reverse: bool):
    cin = empty(C * S)
    args = (Pm, Pe, Lc, start, I64(S), I64(C), np.int32(1 if reverse else 0), cin)
    if C <= _CARRY_SEQ_MAX_C or S >= _CARRY_SEQ_MIN_S:
        _launch("tl_selective_scan_carry_seq", S, args)
    else:
        kernel(_FILE, "tl_selective_scan_carry_block")((min(S, 65535),), (_CARRY_THREADS,), args)
    return cin


def _maps(C: int, S: int):
    return empty(C * S), cupy.empty(C * S, dtype=cupy.int32), empty(C * S)


def _fwd(A, B, X, h0, L, S, var):
    H = empty(L * S)
    if L * S == 0:
        return H
    cs = I64(S if var else 0)
    C, T = plan(L, S)
    dims = (I64(L), I64(S), cs, I64(T), I64(C))
    if C == 1:
        cin = h0  # never read: chunk 0 starts from h0
    else:
        Pm, Pe, Lc = _maps(C, S)
        _launch("tl_selective_scan_fwd_agg", C * S, (A, B, X) + dims + (Pm, Pe, Lc))
        cin = _carries(Pm, Pe, Lc, h0, S, C, reverse=False)
        del Pm, Pe, Lc
    _launch("tl_selective_scan_fwd_apply", C * S, (A, B, X, h0, cin) + dims + (H,))
    return H


def _bwd(A, B, X, h0, H, dH, L, S, var):
    n = L * S
    dX, dh0 = empty(n), empty(S)
    if var:
        dA, dB = empty(n), empty(n)
    else:
        dA, dB = empty(S), empty(S)
    if n == 0:
        if not var:
            dA.fill(0)
            dB.fill(0)
        dh0.fill(0)
        return dA, dB, dX, dh0
    cs = I64(S if var else 0)
    C, T = plan(L, S)
    dims = (I64(L), I64(S), cs, I64(T), I64(C))
    if C == 1:
        cin = dH  # never read: the last chunk starts from no carry
    else:
        Pm, Pe, Lc = _maps(C, S)
        _launch("tl_selective_scan_bwd_agg", C * S, (A, dH) + dims + (Pm, Pe, Lc))
        cin = _carries(Pm, Pe, Lc, h0, S, C, reverse=True)
        del Pm, Pe, Lc
    part_a = part_b = None
    if not var and C > 1:
        part_a = cupy.empty(C * S, dtype=cupy.float64)
        part_b = cupy.empty(C * S, dtype=cupy.float64)
    null = np.uint64(0)
    _launch("tl_selective_scan_bwd_apply", C * S,
            (A, B, X, h0, H, dH, cin) + dims + (dA, dB, dX, dh0, null if part_a is None else part_a,
                                                 null if part_b is None else part_b))
    if part_a is not None:
        _launch("tl_selective_scan_diag_bwd_reduce_partials", S, (part_a, part_b, I64(S), I64(C), dA, dB))
    return dA, dB, dX, dh0


def selective_scan_diag_fwd(A, B, X, h0, seq_len, state):
    return _fwd(A, B, X, h0, seq_len, state, False)


def selective_scan_diag_bwd(A, B, X, h0, H, dH, seq_len, state):
    return _bwd(A, B, X, h0, H, dH, seq_len, state, False)


def selective_scan_diag_var_fwd(A, B, X, h0, seq_len, state):
    return _fwd(A, B, X, h0, seq_len, state, True)


def selective_scan_diag_var_bwd(A, B, X, h0, H, dH, seq_len, state):
    return _bwd(A, B, X, h0, H, dH, seq_len, state, True)
