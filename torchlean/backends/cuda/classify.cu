// Classification kernels: fused cross entropy rows (forward and backward) and GELU (exact and tanh).
//
// Semantics follow torchlean/spec/classify.py and backends/cpu/classify.py; the error bounds in
// torchlean/contract/classify.py are derived for the float32 arithmetic written here.
//
// Cross entropy, per row of the (rows, cols) logits (a warp per row up to 1024 columns, a block per
// row beyond): m = fmaxf over the row (NaN ignored); if m is finite, S = sum expf(x_j - m) and, when
// ls > 0, Q = sum (m - x_j), both accumulated in double in a fixed order (per-thread strided sums,
// then warp butterflies and the block tree: the launch shape depends on the problem shape only, so
// results are bitwise repeatable); then, in double by one thread per row,
//     lse  = m + log S,
//     loss = log S + (1 - ls)(m - x_t) + (ls / cols) Q      (three non-negative terms: no cancellation),
// a term with coefficient 0 left out, loss = 0 for an ignored row (t >= cols). A row whose maximum is
// not finite (+inf, a row of -inf, all NaN) takes the direct formula lse - (1 - ls) x_t - (ls/cols) sum x
// with lse = NaN if the row holds a NaN, else m. No (rows, cols) intermediate is written.
// Backward: dx_j = dl (expf(x_j - lse) - c_j), c_j = ls/cols (+ (1 - ls) at the target), one pass.
//
// GELU: Phi(x) = 0.5 erfcf(-x / sqrt 2), never 1 + erf (which cancels for x -> -inf);
// gelu_tanh = x sigmoid(2z) with sigmoid from e = expf(-|2z|) (no 1 + tanh, no 1 - sigmoid).

#define TL_CE_NAN __int_as_float(0x7fc00000)
#define TL_CLS_INF __int_as_float(0x7f800000)  // no <math.h> macros under NVRTC
#define TL_INV_SQRT2 0.7071067811865475244f
#define TL_INV_SQRT_2PI 0.3989422804014326779f
#define TL_SQRT_2_OVER_PI 0.7978845608028653559f
#define TL_GELU_C 0.044715f

__device__ __forceinline__ bool tl_finite(float v) { return fabsf(v) < TL_CLS_INF; }  // false for NaN

// ---- GELU -------------------------------------------------------------------------------------
__device__ __forceinline__ float tl_cdf(float x) { return 0.5f * erfcf(-x * TL_INV_SQRT2); }

__device__ __forceinline__ float tl_gelu(float x) {
    float y = x * tl_cdf(x);
    return x == -TL_CLS_INF ? -0.0f : y;  // the limit, not -inf * 0
}

__device__ __forceinline__ float tl_gelu_d(float x) {
    // (-0.5f * x) is exact; one rounding of the square; x*x = inf for huge |x| gives expf = 0.
    float d = tl_cdf(x) + x * (expf((-0.5f * x) * x) * TL_INV_SQRT_2PI);
    return x == TL_CLS_INF ? 1.f : (x == -TL_CLS_INF ? 0.f : d);
}

// s = sigmoid(2z), e = expf(-|2z|), q = 1 / (1 + e), z = sqrt(2/pi) (x + 0.044715 x^3)
__device__ __forceinline__ float tl_tanh_parts(float x, float& e, float& q) {
    float z = TL_SQRT_2_OVER_PI * (x + TL_GELU_C * (x * x * x));
    e = expf(-2.f * fabsf(z));
    q = 1.f / (1.f + e);
    return z >= 0.f ? q : e * q;  // NaN: e, q, s are NaN
}

__device__ __forceinline__ float tl_gelu_tanh(float x) {
    float e, q;
    float s = tl_tanh_parts(x, e, q);
    return x == -TL_CLS_INF ? -0.0f : x * s;
}

__device__ __forceinline__ float tl_gelu_tanh_d(float x) {
    float e, q;
    float s = tl_tanh_parts(x, e, q);
    float dz = TL_SQRT_2_OVER_PI * (1.f + (3.f * TL_GELU_C) * (x * x));
    // sigmoid'(2z) = s(1 - s) = e q^2. When e == 0 (|x| > ~10) the term is 0: skipping it also
    // avoids inf * 0 where x * x overflows.
    float t2 = e > 0.f ? ((2.f * x) * dz) * ((e * q) * q) : 0.f;
    float d = s + t2;
    return x == TL_CLS_INF ? 1.f : (x == -TL_CLS_INF ? 0.f : d);
}

// Grid-stride over float4 vectors (buffers are whole allocations: 16-byte aligned) plus a tail.
#define TL_CLS_UNARY(NAME, F)                                                                    \
extern "C" __global__ void NAME(const float* __restrict__ xs, float* __restrict__ ys, long long n) { \
    long long n4 = n >> 2;                                                                       \
    const float4* x4 = reinterpret_cast<const float4*>(xs);                                      \
    float4* y4 = reinterpret_cast<float4*>(ys);                                                  \
    for (long long i = TL_TID; i < n4; i += TL_STRIDE) {                                         \
        float4 v = x4[i];                                                                        \
        y4[i] = make_float4(F(v.x), F(v.y), F(v.z), F(v.w));                                     \
    }                                                                                            \
    for (long long j = (n4 << 2) + TL_TID; j < n; j += TL_STRIDE) ys[j] = F(xs[j]);              \
}

#define TL_CLS_BWD(NAME, D)                                                                      \
extern "C" __global__ void NAME(const float* __restrict__ xs, const float* __restrict__ dys,    \
                                float* __restrict__ ys, long long n) {                           \
    long long n4 = n >> 2;                                                                       \
    const float4* x4 = reinterpret_cast<const float4*>(xs);                                      \
    const float4* d4 = reinterpret_cast<const float4*>(dys);                                     \
    float4* y4 = reinterpret_cast<float4*>(ys);                                                  \
    for (long long i = TL_TID; i < n4; i += TL_STRIDE) {                                         \
        float4 v = x4[i], g = d4[i];                                                             \
        y4[i] = make_float4(g.x * D(v.x), g.y * D(v.y), g.z * D(v.z), g.w * D(v.w));             \
    }                                                                                            \
    for (long long j = (n4 << 2) + TL_TID; j < n; j += TL_STRIDE) ys[j] = dys[j] * D(xs[j]);     \
}

TL_CLS_UNARY(tl_gelu_k, tl_gelu)
TL_CLS_UNARY(tl_gelu_tanh_k, tl_gelu_tanh)
TL_CLS_BWD(tl_gelu_bwd_k, tl_gelu_d)
TL_CLS_BWD(tl_gelu_tanh_bwd_k, tl_gelu_tanh_d)

// ---- cross entropy: group helpers -------------------------------------------------------------
// A group is a warp (BLOCK_GROUP = false: rows of at most 1024 columns) or the whole block.
template <bool BLOCK_GROUP>
struct CeGroup {
    long long g0, ng;
    int t, nt;
    __device__ __forceinline__ CeGroup() {
        g0 = BLOCK_GROUP ? (long long)blockIdx.x : (TL_TID >> 5);
        ng = BLOCK_GROUP ? (long long)gridDim.x : (TL_STRIDE >> 5);
        t = BLOCK_GROUP ? (int)threadIdx.x : (int)(threadIdx.x & 31);
        nt = BLOCK_GROUP ? (int)blockDim.x : 32;
    }
};

__device__ __forceinline__ float ce_group_max(bool block_group, float v, float* fscratch) {
    return block_group ? tl_block_max_f(v, fscratch) : tl_warp_max_f(v);
}
__device__ __forceinline__ double ce_group_sum(bool block_group, double v, double* dscratch) {
    return block_group ? tl_block_sum_d(v, dscratch) : tl_warp_sum_d(v);
}

// The per-row finish, by one thread: writes loss[r] and lse[r].
__device__ __forceinline__ void ce_finish(const float* __restrict__ xr, long long cols, long long tr, float m,
                                          double s, double q, float ls, float* __restrict__ loss,
                                          float* __restrict__ lse, long long r) {
    double lse_d, loss_d = 0.0;
    bool valid = tr < cols;
    if (tl_finite(m)) {
        double log_s = log(s);  // NaN when the row holds a NaN
        lse_d = (double)m + log_s;
        if (valid) {
            loss_d = log_s;
            if (ls < 1.f) loss_d += (1.0 - (double)ls) * ((double)m - (double)xr[tr]);
            if (ls > 0.f) loss_d += ((double)ls / (double)cols) * q;
        }
    } else {
        // here s is 1 when the row holds a NaN (else 0) and q is the plain sum of the row
        lse_d = (s != 0.0 || m != m) ? (double)TL_CE_NAN : (double)m;
        if (valid) {
            loss_d = lse_d;
            if (ls < 1.f) loss_d -= (1.0 - (double)ls) * (double)xr[tr];
            if (ls > 0.f) loss_d -= ((double)ls / (double)cols) * q;
        }
    }
    lse[r] = (float)lse_d;
    loss[r] = (float)loss_d;
}

// Rows of any length, scalar loads: two passes over the row (the second from L1/L2).
template <bool BLOCK_GROUP>
__device__ void ce_rows(const float* __restrict__ x, long long rows, long long cols,
                        const unsigned* __restrict__ tg, float ls, float* __restrict__ loss,
                        float* __restrict__ lse) {
    __shared__ float fscratch[32];
    __shared__ double dscratch[32];
    CeGroup<BLOCK_GROUP> g;
    for (long long r = g.g0; r < rows; r += g.ng) {
        const float* xr = x + r * cols;
        float m = TL_CE_NAN;
        for (long long j = g.t; j < cols; j += g.nt) m = fmaxf(m, xr[j]);
        m = ce_group_max(BLOCK_GROUP, m, fscratch);
        double s = 0.0, q = 0.0;
        if (tl_finite(m)) {  // m is the same in the whole group: the branch is uniform
            for (long long j = g.t; j < cols; j += g.nt) {
                float v = xr[j];
                s += (double)expf(v - m);
                q += (double)m - (double)v;
            }
        } else {
            for (long long j = g.t; j < cols; j += g.nt) {
                float v = xr[j];
                s += (v != v) ? 1.0 : 0.0;
                q += (double)v;
            }
        }
        s = ce_group_sum(BLOCK_GROUP, s, dscratch);
        q = ce_group_sum(BLOCK_GROUP, q, dscratch);
        if (g.t == 0) ce_finish(xr, cols, (long long)tg[r], m, s, q, ls, loss, lse, r);
    }
}

// Rows of at most 1024 columns, a multiple of 4: a warp holds its row in registers (8 float4 per
// lane), so each row is read from DRAM once.
#define TL_CE_REG4 8
__device__ void ce_rows_reg(const float* __restrict__ x, long long rows, long long cols,
                            const unsigned* __restrict__ tg, float ls, float* __restrict__ loss,
                            float* __restrict__ lse) {
    const int lane = threadIdx.x & 31;
    const long long c4 = cols >> 2;
    for (long long r = TL_TID >> 5; r < rows; r += TL_STRIDE >> 5) {
        const float* xr = x + r * cols;
        const float4* xr4 = reinterpret_cast<const float4*>(xr);
        float4 v[TL_CE_REG4];
        float m = TL_CE_NAN;
#pragma unroll
        for (int k = 0; k < TL_CE_REG4; ++k) {
            long long j = lane + 32 * k;
            if (j < c4) {
                v[k] = xr4[j];
                m = fmaxf(fmaxf(fmaxf(fmaxf(m, v[k].x), v[k].y), v[k].z), v[k].w);
            }
        }
        m = tl_warp_max_f(m);
        double s = 0.0, q = 0.0;
        if (tl_finite(m)) {
#pragma unroll
            for (int k = 0; k < TL_CE_REG4; ++k) {
                if (lane + 32 * k < c4) {
                    float4 a = v[k];
                    s += ((double)expf(a.x - m) + (double)expf(a.y - m)) +
                         ((double)expf(a.z - m) + (double)expf(a.w - m));
                    double md = (double)m;
                    q += ((md - a.x) + (md - a.y)) + ((md - a.z) + (md - a.w));
                }
            }
        } else {
#pragma unroll
            for (int k = 0; k < TL_CE_REG4; ++k) {
                if (lane + 32 * k < c4) {
                    float4 a = v[k];
                    s += (double)((a.x != a.x) + (a.y != a.y) + (a.z != a.z) + (a.w != a.w));
                    q += ((double)a.x + (double)a.y) + ((double)a.z + (double)a.w);
                }
            }
        }
        s = tl_warp_sum_d(s);
        q = tl_warp_sum_d(q);
        if (lane == 0) ce_finish(xr, cols, (long long)tg[r], m, s, q, ls, loss, lse, r);
    }
}

extern "C" __global__ void tl_ce_reg(const float* x, long long rows, long long cols, const unsigned* tg,
                                     float ls, float* loss, float* lse) {
    ce_rows_reg(x, rows, cols, tg, ls, loss, lse);
}
extern "C" __global__ void tl_ce_warp(const float* x, long long rows, long long cols, const unsigned* tg,
                                      float ls, float* loss, float* lse) {
    ce_rows<false>(x, rows, cols, tg, ls, loss, lse);
}
extern "C" __global__ void tl_ce_block(const float* x, long long rows, long long cols, const unsigned* tg,
                                       float ls, float* loss, float* lse) {
    ce_rows<true>(x, rows, cols, tg, ls, loss, lse);
}

// ---- cross entropy backward -------------------------------------------------------------------
// dx_j = dl (expf(x_j - lse) - c_j), c_j = b = ls/cols, or a + b = (1 - ls) + ls/cols at j == t;
// rows with t >= cols are zero. One read of x, one write of dx; VEC4 when cols % 4 == 0.
template <bool BLOCK_GROUP, bool VEC4>
__device__ void ce_rows_bwd(const float* __restrict__ x, const float* __restrict__ lse,
                            const float* __restrict__ dloss, long long rows, long long cols,
                            const unsigned* __restrict__ tg, float b, float ab, float* __restrict__ dx) {
    CeGroup<BLOCK_GROUP> g;
    for (long long r = g.g0; r < rows; r += g.ng) {
        const long long tr = (long long)tg[r];
        const float* xr = x + r * cols;
        float* dr = dx + r * cols;
        if (tr >= cols) {
            if (VEC4) {
                float4* d4 = reinterpret_cast<float4*>(dr);
                for (long long j = g.t; j < (cols >> 2); j += g.nt) d4[j] = make_float4(0.f, 0.f, 0.f, 0.f);
            } else {
                for (long long j = g.t; j < cols; j += g.nt) dr[j] = 0.f;
            }
            continue;
        }
        const float l = lse[r], dl = dloss[r];
        if (VEC4) {
            const float4* x4 = reinterpret_cast<const float4*>(xr);
            float4* d4 = reinterpret_cast<float4*>(dr);
            for (long long j = g.t; j < (cols >> 2); j += g.nt) {
                float4 v = x4[j];
                long long j0 = j << 2;
                float4 o;
                o.x = dl * (expf(v.x - l) - (j0 == tr ? ab : b));
                o.y = dl * (expf(v.y - l) - (j0 + 1 == tr ? ab : b));
                o.z = dl * (expf(v.z - l) - (j0 + 2 == tr ? ab : b));
                o.w = dl * (expf(v.w - l) - (j0 + 3 == tr ? ab : b));
                d4[j] = o;
            }
        } else {
            for (long long j = g.t; j < cols; j += g.nt) dr[j] = dl * (expf(xr[j] - l) - (j == tr ? ab : b));
        }
    }
}

#define TL_CE_BWD(NAME, BG, V4)                                                                  \
extern "C" __global__ void NAME(const float* x, const float* lse, const float* dloss, long long rows, \
                                long long cols, const unsigned* tg, float b, float ab, float* dx) { \
    ce_rows_bwd<BG, V4>(x, lse, dloss, rows, cols, tg, b, ab, dx);                               \
}

TL_CE_BWD(tl_ce_bwd_warp, false, false)
TL_CE_BWD(tl_ce_bwd_warp4, false, true)
TL_CE_BWD(tl_ce_bwd_block, true, false)
TL_CE_BWD(tl_ce_bwd_block4, true, true)
