"""OpenBLAS's cblas_sgemm callable from Numba code, through its address (no ctypes object, so the
callers can be cached). gemm.py finds the address (``gemm._ready()``) and splits GEMMs over Numba's
threads; conv.py's 2-D per-image parts call it directly. No imports from the backend: both use it."""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

__all__ = ["sgemm", "ROW_MAJOR", "NO_TRANS", "TRANS"]

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112  # CblasRowMajor, CblasNoTrans, CblasTrans


@intrinsic
def sgemm(typingctx, fn, iz, ta, tb, m, n, k, a, lda, b, ldb, c, ldc):
    """cblas_sgemm(RowMajor, ta, tb, m, n, k, 1, a, lda, b, ldb, 0, c, ldc) through its address fn;
    a, b, c are byte addresses; the BLAS integers take the type of iz (int32: LP64, int64: ILP64)."""
    if not isinstance(iz, types.Integer):
        return None
    bits = iz.bitwidth

    def codegen(context, builder, signature, args):
        fn_, _, ta_, tb_, m_, n_, k_, a_, lda_, b_, ldb_, c_, ldc_ = args
        i32, iw, f32 = ir.IntType(32), ir.IntType(bits), ir.FloatType()
        vp = ir.IntType(8).as_pointer()
        fnty = ir.FunctionType(ir.VoidType(), [i32, i32, i32, iw, iw, iw, f32, vp, iw, vp, iw, f32, vp, iw])
        f = builder.inttoptr(fn_, fnty.as_pointer())
        builder.call(f, [ir.Constant(i32, ROW_MAJOR), builder.trunc(ta_, i32), builder.trunc(tb_, i32), m_, n_, k_,
                         ir.Constant(f32, 1.0), builder.inttoptr(a_, vp), lda_, builder.inttoptr(b_, vp), ldb_,
                         ir.Constant(f32, 0.0), builder.inttoptr(c_, vp), ldc_])
        return context.get_dummy_value()

    i64 = types.int64
    return types.void(i64, iz, i64, i64, iz, iz, iz, i64, iz, i64, iz, i64, iz), codegen
