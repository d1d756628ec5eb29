// The fast-kernel family's own kernels: the MSE loss forward (one fixed-order reduction pass) and
// backward (one elementwise pass), and the float64 -> float32 epilogue of the fp64 GEMM.

// ---- mse_loss_fwd ------------------------------------------------------------------------------
// Thread part: (x - t)^2 in double (the difference of two floats in double, the square in double),
// accumulated in double over a grid-stride range; float4 loads when both inputs are 16-byte
// aligned. The order depends only on n and the grid (fixed by the launcher from n alone).
__device__ __forceinline__ double mse_sq(float x, float t) {
    double d = (double)x - (double)t;
    return d * d;
}

__device__ __forceinline__ double mse_thread_sum(const float* __restrict__ x, const float* __restrict__ t,
                                                 long long n, int vec) {
    long long stride = TL_STRIDE, i = TL_TID;
    double acc = 0.0;
    long long done = 0;
    if (vec) {
        const float4* x4 = reinterpret_cast<const float4*>(x);
        const float4* t4 = reinterpret_cast<const float4*>(t);
        long long n4 = n >> 2;
        for (; i + stride < n4; i += 2 * stride) {  // two float4 pairs in flight
            float4 a0 = x4[i], b0 = t4[i], a1 = x4[i + stride], b1 = t4[i + stride];
            acc += (mse_sq(a0.x, b0.x) + mse_sq(a0.y, b0.y)) + (mse_sq(a0.z, b0.z) + mse_sq(a0.w, b0.w));
            acc += (mse_sq(a1.x, b1.x) + mse_sq(a1.y, b1.y)) + (mse_sq(a1.z, b1.z) + mse_sq(a1.w, b1.w));
        }
        for (; i < n4; i += stride) {
            float4 a = x4[i], b = t4[i];
            acc += (mse_sq(a.x, b.x) + mse_sq(a.y, b.y)) + (mse_sq(a.z, b.z) + mse_sq(a.w, b.w));
        }
        done = n4 << 2;
    }
    for (long long j = done + TL_TID; j < n; j += stride) acc += mse_sq(x[j], t[j]);
    return acc;
}

// out[0] = (float)(sum / div) in ONE launch (reduce.cu's tl_reduce_sum pattern: every block writes its
// partial, the last block to finish (an integer counter, never a float atomic) adds the partials
// in block order and resets the counter). div is n for the mean (NaN for n = 0), 1 for the sum.
extern "C" __global__ void tl_mse_loss_fwd(const float* __restrict__ x, const float* __restrict__ t, long long n,
                                      int vec, double* partials, unsigned int* counter,
                                      float* __restrict__ out, double div) {
    __shared__ double scratch[32];
    double s = tl_block_sum_d(mse_thread_sum(x, t, n, vec), scratch);
    if (gridDim.x == 1) {
        if (threadIdx.x == 0) out[0] = (float)(s / div);
        return;
    }
    __shared__ bool last;
    if (threadIdx.x == 0) {
        partials[blockIdx.x] = s;
        __threadfence();
        last = atomicAdd(counter, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (last) {
        __threadfence();
        const volatile double* p = partials;
        double acc = 0.0;
        for (int i = threadIdx.x; i < (int)gridDim.x; i += blockDim.x) acc += p[i];
        acc = tl_block_sum_d(acc, scratch);
        if (threadIdx.x == 0) {
            out[0] = (float)(acc / div);
            *counter = 0u;
        }
    }
}

// ---- mse_loss_bwd ------------------------------------------------------------------------------
// out = ((x - t) * g) * c, rounding after each operation (--fmad=false): the bits of mse_loss's
// sub, mul and scale. float4 loads and stores when all three arrays are 16-byte aligned.
__device__ __forceinline__ float mse_d(float x, float t, float g, float c) { return ((x - t) * g) * c; }

extern "C" __global__ void tl_mse_loss_bwd(const float* __restrict__ x, const float* __restrict__ t,
                                      const float* __restrict__ g, long long n, float c, int vec,
                                      float* __restrict__ out) {
    float g0 = g[0];
    long long done = 0;
    if (vec) {
        const float4* x4 = reinterpret_cast<const float4*>(x);
        const float4* t4 = reinterpret_cast<const float4*>(t);
        float4* o4 = reinterpret_cast<float4*>(out);
        long long n4 = n >> 2;
        for (long long i = TL_TID; i < n4; i += TL_STRIDE) {
            float4 a = x4[i], b = t4[i], r;
            r.x = mse_d(a.x, b.x, g0, c);
            r.y = mse_d(a.y, b.y, g0, c);
            r.z = mse_d(a.z, b.z, g0, c);
            r.w = mse_d(a.w, b.w, g0, c);
            o4[i] = r;
        }
        done = n4 << 2;
    }
    for (long long j = done + TL_TID; j < n; j += TL_STRIDE) out[j] = mse_d(x[j], t[j], g0, c);
}

// ---- fp64 GEMM epilogue --------------------------------------------------------------------------
// out (m, n) float32 = (float)(c (m, n) double + (double)bias[col]): the bias added in double and
// ONE rounding. has_bias = 0: just the rounding. m * n < 2^32 (checked by the runtime), so the
// column is a 32-bit remainder.
extern "C" __global__ void tl_fast_gemm_fp64_epilogue(const double* __restrict__ c, const float* __restrict__ bias,
                                              int has_bias, long long m, long long n,
                                              float* __restrict__ out) {
    long long total = m * n;
    unsigned int nn = (unsigned int)n;
    for (long long i = TL_TID; i < total; i += TL_STRIDE) {
        double v = c[i];
        if (has_bias) v += (double)bias[(unsigned int)i % nn];
        out[i] = (float)v;
    }
}

// float32 -> float64, exactly. Our kernels keep subnormals (-ftz=false); CuPy's astype kernels are
// built with -ftz=true and would flush subnormal float32 inputs to 0 before the DGEMM.
extern "C" __global__ void tl_fast_gemm_widen_f64(const float* __restrict__ x, long long n, double* __restrict__ y) {
    for (long long i = TL_TID; i < n; i += TL_STRIDE) y[i] = (double)x[i];
}

// out (m, n) += bias on every row, in place on the GEMM's fresh output: fl(fl(A B) + b), the value
// cuBLAS's beta = 1 epilogue gives over bias-filled rows, in one launch with four arguments
// (the general strided gather that filled the rows took several times the host time).
extern "C" __global__ void tl_fast_gemm_add_bias_rows(float* __restrict__ out, const float* __restrict__ bias,
                                            long long m, long long n) {
    const long long total = m * n;
    for (long long i = TL_TID; i < total; i += TL_STRIDE) out[i] = out[i] + bias[i % n];
}
