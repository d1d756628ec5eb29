// Shared by attention.cu (CUDA-core kernels) and attention_mma.cu (tensor-core kernels): tile
// constants, the mask and layout descriptors, the masked score, and the tile staging helpers.
// The loader inlines this file where a .cu file names it in an #include line.

#define TL_BR 64
#define TL_BC 64
#define TL_LD 68
#define TL_NT 128
#define TL_LOG2E 1.4426950408889634f
#define TL_LN2 0.6931471805599453f
#define TL_FILL2 (-1442.6950408889634f)  // -1000 nats in base 2

struct TlAttnMask {
    const float* mask;
    long long heads, s_n, s_h, s_q, s_k;
    int mode, causal;
};

struct TlAttnLay {
    long long heads;
    long long q_n, q_h, q_ld;  // q, dq
    long long k_n, k_h, k_ld;  // k, v, dk, dv
    long long o_n, o_h, o_ld;  // out, dout
};

__device__ __forceinline__ long long tl_qoff(const TlAttnLay& L, long long b) {
    return (b / L.heads) * L.q_n + (b % L.heads) * L.q_h;
}
__device__ __forceinline__ long long tl_koff(const TlAttnLay& L, long long b) {
    return (b / L.heads) * L.k_n + (b % L.heads) * L.k_h;
}
__device__ __forceinline__ long long tl_ooff(const TlAttnLay& L, long long b) {
    return (b / L.heads) * L.o_n + (b % L.heads) * L.o_h;
}

__device__ __forceinline__ const float* tl_mask_base(const TlAttnMask& M, long long b) {
    return M.mask + (b / M.heads) * M.s_n + (b % M.heads) * M.s_h;
}

// The masked base-2 score of (i, j), -inf when the key carries no weight; *live = false for a
// filled score (its gradient does not reach q or k).
__device__ __forceinline__ float tl_masked(float s, long long i, long long j, long long n_q, long long n_k,
                                           const TlAttnMask& M, const float* mb, bool* live) {
    *live = true;
    if (i >= n_q || j >= n_k || (M.causal && j > i)) { *live = false; return -INFINITY; }
    if (M.mode == 0) return s;
    float mv = mb[i * M.s_q + j * M.s_k];
    if (M.mode == 1) {
        if (mv == 0.0f) { *live = false; return TL_FILL2; }
        return s;
    }
    if (M.mode == 2) {
        if (mv == 0.0f) { *live = false; return -INFINITY; }
        return s;
    }
    if (mv == -INFINITY) { *live = false; return -INFINITY; }
    return s + mv * TL_LOG2E;
}

// dst[c * TL_LD + r] = src[(row0 + r) * ld + c] * mul for r < 64, c < DP (zero outside the data).
// vec (d % 4 == 0, 16-byte aligned rows): each thread loads a float4 along d, lane pairs share a
// 32-byte sector (r = (idx >> 1) & 63, chunk = (idx & 1) + 2 (idx >> 7)), so a warp reads 16 full

// cp.async: 16-byte global -> shared copies that do not pass through registers (sm_80+). Before
// sm_80 the same calls copy through registers at once and commit/wait do nothing: the barriers
// around every use keep the kernels correct, only the overlap is lost.
#if __CUDA_ARCH__ >= 800
__device__ __forceinline__ void tl_cp_async16(float* dst, const float* src) {
    const unsigned sa = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(sa), "l"(src) : "memory");
}
__device__ __forceinline__ void tl_cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void tl_cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }
#else
__device__ __forceinline__ void tl_cp_async16(float* dst, const float* src) {
    *reinterpret_cast<float4*>(dst) = *reinterpret_cast<const float4*>(src);
}
__device__ __forceinline__ void tl_cp_commit() {}
template <int N>
__device__ __forceinline__ void tl_cp_wait() {}
#endif

// dst[r * pitch + c] = src[(row0 + r) * ld + c] * mul for r < ROWS, c < DP (zero outside the data);
// with vec and mul == 1 through cp.async (the caller commits and waits), else through registers.
template <int DP, int ROWS, bool ASYNC>
__device__ __forceinline__ void tl_stage(float* dst, int pitch, const float* src, long long row0, long long nrows,
                                         int d, long long ld, float mul, int vec) {
    if (vec) {
        for (int idx = threadIdx.x; idx < ROWS * (DP / 4); idx += TL_NT) {
            const int r = idx / (DP / 4), c = (idx - r * (DP / 4)) * 4;
            float* dp = dst + r * pitch + c;
            if (row0 + r < nrows && c < d) {
                const float* sp = src + (row0 + r) * ld + c;
                if (ASYNC) {
                    tl_cp_async16(dp, sp);
                } else {
                    float4 x = *reinterpret_cast<const float4*>(sp);
                    x.x = x.x * mul; x.y = x.y * mul; x.z = x.z * mul; x.w = x.w * mul;
                    *reinterpret_cast<float4*>(dp) = x;
                }
            } else {
                *reinterpret_cast<float4*>(dp) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
        }
        return;
    }
    for (int idx = threadIdx.x; idx < ROWS * DP; idx += TL_NT) {
        const int r = idx / DP, c = idx - r * DP;
        float x = 0.0f;
        if (row0 + r < nrows && c < d) x = src[(row0 + r) * ld + c] * mul;
        dst[r * pitch + c] = x;
    }
}

#define TL_ATTN_MASK_ARGS const float* mask, long long heads, long long s_n, long long s_h, long long s_q, \
    long long s_k, int mode, int causal
#define TL_ATTN_MASK {mask, heads, s_n, s_h, s_q, s_k, mode, causal}
