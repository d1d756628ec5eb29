// Classification kernels: fused cross entropy rows (forward and backward) and GELU (exact and tanh).
//
// Semantics follow torchlean/spec/classify.py and kernels/cpu/classify.py; the error bounds in
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

// ---- cross entropy -----------------------------------------------------------------------------
// Row state of the online pass: m = running maximum ignoring NaN (-inf until a non-NaN value is
// seen) and the shift c = max(m, -FLT_MAX), which is finite unless m = +inf; s = sum exp(x_j - c)
// and q = sum (c - x_j) (only when ls > 0) over the n values seen, both in double. With c finite
// a -inf logit gives exp(-inf) = 0 and c - x = +inf (never -inf - -inf = NaN); a NaN logit makes s
// and q NaN, which reaches lse and loss as the spec wants. When the shift grows from c to c'
// (c' > c), s *= exp(c - c') and q += n (c' - c), both in double. Combining states (threads, then
// warps, then blocks of a split row) uses the same rule towards the larger shift, in a fixed order.
// Q = sum_j (M - x_j) = sum_t [n_t (M - c_t) + q_t] is a sum of non-negative terms: no cancellation.
//
// Error (contract/classify.py derives rho = u W + LIB + gamma(n-1) + u for S = sum expf(x_j - M)):
// term j is evaluated as expf(x_j - c) * exp(c - M) with c <= M the shift current when x_j was
// read; x_j <= c, so |x_j - c| <= |x_j - M| and the rounding of x_j - c costs at most u|x_j - M|
// (the contract's u W term); expf: LIB; the factors exp(c - M) (and the rescalings, at most one
// per chunk) are double exp and double products: relative 2^-52 each, far below the u that the
// contract keeps for rounding S (S now stays in double). The float partial sums (a tree over 16
// or 32 terms of one thread) and the double sums after them form one summation tree over the
// row's terms (adding an exact 0 is exact), so gamma(n-1) covers them. Q: each c - x_j and each
// n (M - c) rounds once in double, the sums are in double: far inside u per term + gamma(n).
#define TL_FLT_MAX 3.402823466e+38f
#define TL_CE_REG 32     // floats per lane held in registers: rows of up to 32 * 32 = 1024 columns
#define TL_CE_CHUNK 16   // floats per thread per step of the long-row online pass

__device__ __forceinline__ float ce_shift(float m) { return fmaxf(m, -TL_FLT_MAX); }

// Moves a state's sums from shift c to the shift C (in place, in double; nothing when C <= c): s *=
// exp(c - C), and q += n (C - c) for the n values it holds (when smooth).
__device__ __forceinline__ void ce_rebase(double& s, double& q, long long n, float c, float C, bool smooth) {
    if (c < C) {
        s *= exp((double)c - (double)C);
        if (smooth && n > 0) q += (double)n * ((double)C - (double)c);
    }
}

// Rows whose maximum is not finite (rare): the NaN count and the plain sum (in double) of this
// thread's values xr[j], j = j0, j0 + step, ... < cols.
__device__ __forceinline__ void ce_nan_count_sum(const float* __restrict__ xr, long long cols, long long j0,
                                                 long long step, double& cnt, double& sum) {
    cnt = 0.0;
    sum = 0.0;
    for (long long j = j0; j < cols; j += step) {
        const float v = xr[j];
        cnt += (v != v) ? 1.0 : 0.0;
        sum += (double)v;
    }
}

// Fixed-order trees over a register array (N a power of two): level w combines a[i] and a[i + w]
// for i < w, w = N/2, N/4, ..., 1. Template recursion keeps every index static (registers, no stack).
template <int W>
__device__ __forceinline__ void tl_tree_max_level(float* a) {
    if constexpr (W > 0) {
#pragma unroll
        for (int i = 0; i < W; ++i) a[i] = fmaxf(a[i], a[i + W]);
        tl_tree_max_level<W / 2>(a);
    }
}
template <int W>
__device__ __forceinline__ void tl_tree_sum_level(float* a) {
    if constexpr (W > 0) {
#pragma unroll
        for (int i = 0; i < W; ++i) a[i] = a[i] + a[i + W];
        tl_tree_sum_level<W / 2>(a);
    }
}
template <int N>
__device__ __forceinline__ float tl_tree_max(const float* v) {
    float a[N];
#pragma unroll
    for (int i = 0; i < N; ++i) a[i] = v[i];
    tl_tree_max_level<N / 2>(a);
    return a[0];
}
template <int N>
__device__ __forceinline__ float tl_tree_sum(float* a) {  // overwrites a
    tl_tree_sum_level<N / 2>(a);
    return a[0];
}

// The per-row finish, by one thread: writes loss[r] and lse[r]. M: the row maximum ignoring NaN
// (-inf when there is none). M finite: s = sum exp(x_j - M), q = sum (M - x_j) (used only when
// ls > 0), in double; lse = M + log s, loss = log s + (1 - ls)(M - x_t) + (ls / cols) q (three
// non-negative terms, no cancellation; a term with coefficient 0 left out). M = +inf or -inf
// (a +inf logit; a row of -inf and NaN): s = the number of NaN, q = the plain sum of the row, and
// the direct formula lse - (1 - ls) x_t - (ls/cols) sum x with lse = NaN if the row holds a NaN,
// else M. Ignored rows (t >= cols): loss 0.
__device__ __forceinline__ void ce_finish(float M, double s, double q, float xt, bool valid, long long cols,
                                          float ls, float* __restrict__ loss, float* __restrict__ lse,
                                          long long r) {
    double lse_d, loss_d = 0.0;
    if (tl_finite(M)) {
        double log_s = log(s);  // NaN when the row holds a NaN
        lse_d = (double)M + log_s;
        if (valid) {
            loss_d = log_s;
            if (ls < 1.f) loss_d += (1.0 - (double)ls) * ((double)M - (double)xt);
            if (ls > 0.f) loss_d += ((double)ls / (double)cols) * q;
        }
    } else {
        lse_d = (s != 0.0) ? (double)TL_CE_NAN : (double)M;
        if (valid) {
            loss_d = lse_d;
            if (ls < 1.f) loss_d -= (1.0 - (double)ls) * (double)xt;
            if (ls > 0.f) loss_d -= ((double)ls / (double)cols) * q;
        }
    }
    lse[r] = (float)lse_d;
    loss[r] = (float)loss_d;
}

// -- short rows (cols <= 1024): a warp per row, the row held in registers -----------------------
// Lane L holds slot k = element 4 (L + 32 (k / 4)) + k % 4 (VW = 4: float4 loads, cols % 4 == 0 and
// x 16-byte aligned) or L + 32 k (VW = 1); slots past the row hold -inf (exp gives an exact +0).
template <int VW>
__device__ __forceinline__ bool ce_slot_ok(int lane, int k, long long cols) {
    return VW == 4 ? (long long)(lane + 32 * (k >> 2)) < (cols >> 2) : (long long)(lane + 32 * k) < cols;
}
template <int VW>
__device__ __forceinline__ long long ce_slot_col(int lane, int k) {
    return VW == 4 ? 4LL * (lane + 32 * (k >> 2)) + (k & 3) : (long long)(lane + 32 * k);
}
template <int VW>
__device__ __forceinline__ void ce_load_row(const float* __restrict__ xr, long long cols, int lane, float* v) {
    const float ninf = -TL_CLS_INF;
    if (VW == 4) {
        const float4* x4 = reinterpret_cast<const float4*>(xr);
#pragma unroll
        for (int k = 0; k < TL_CE_REG / 4; ++k) {
            float4 a = make_float4(ninf, ninf, ninf, ninf);
            if (ce_slot_ok<4>(lane, 4 * k, cols)) a = x4[lane + 32 * k];
            v[4 * k] = a.x; v[4 * k + 1] = a.y; v[4 * k + 2] = a.z; v[4 * k + 3] = a.w;
        }
    } else {
#pragma unroll
        for (int k = 0; k < TL_CE_REG; ++k) v[k] = ce_slot_ok<1>(lane, k, cols) ? xr[lane + 32 * k] : ninf;
    }
}

// One read of the row (all loads issued before any use); the maximum comes from the registers, so
// the terms are expf(x_j - M) with the row maximum itself: no rescaling. The 32 terms of a lane
// are summed in float (a fixed tree), the lanes in double (fixed butterfly). The smoothing sum q
// stays in double per term (c - x_j can exceed FLT_MAX for logits near +-3e38) and is only formed
// when ls > 0. No double per element otherwise: conversions to double run at 1/4 of the float rate.
template <int VW>
__device__ __forceinline__ void ce_rows_reg(const float* __restrict__ x, long long rows, long long cols,
                                            const unsigned* __restrict__ tg, float ls, float* __restrict__ loss,
                                            float* __restrict__ lse) {
    const int lane = threadIdx.x & 31;
    const bool smooth = ls > 0.f;
    for (long long r = TL_TID >> 5; r < rows; r += TL_STRIDE >> 5) {
        const float* xr = x + r * cols;
        const long long tr = (long long)tg[r];
        const bool valid = tr < cols;
        float xt = 0.f;
        if (lane == 0 && valid) xt = xr[tr];  // issued with the row's loads
        float v[TL_CE_REG];
        ce_load_row<VW>(xr, cols, lane, v);
        const float M = tl_warp_max_f(tl_tree_max<TL_CE_REG>(v));
        double s, q = 0.0;
        if (tl_finite(M)) {  // M is the same in the whole warp: the branch is uniform
            if (smooth) {
                double qd = 0.0;
#pragma unroll
                for (int k = 0; k < TL_CE_REG; ++k)
                    if (ce_slot_ok<VW>(lane, k, cols)) qd += (double)M - (double)v[k];
                q = tl_warp_sum_d(qd);
            }
#pragma unroll
            for (int k = 0; k < TL_CE_REG; ++k) v[k] = expf(v[k] - M);
            s = tl_warp_sum_d((double)tl_tree_sum<TL_CE_REG>(v));
        } else {
            double cnt = 0.0, sum = 0.0;
#pragma unroll
            for (int k = 0; k < TL_CE_REG; ++k) {
                if (ce_slot_ok<VW>(lane, k, cols)) {
                    cnt += (v[k] != v[k]) ? 1.0 : 0.0;
                    sum += (double)v[k];
                }
            }
            s = tl_warp_sum_d(cnt);
            q = tl_warp_sum_d(sum);
        }
        if (lane == 0) ce_finish(M, s, q, xt, valid, cols, ls, loss, lse, r);
    }
}

#define TL_CE_ROWS(NAME, FN, V, LB, MINB)                                                                  \
extern "C" __global__ void __launch_bounds__(LB, MINB) NAME(const float* x, long long rows, long long cols,      \
                                                            const unsigned* tg, float ls, float* loss, float* lse) { \
    FN<V>(x, rows, cols, tg, ls, loss, lse);                                                                     \
}

TL_CE_ROWS(tl_cross_entropy_rows_reg4, ce_rows_reg, 4, 256, 4)
TL_CE_ROWS(tl_cross_entropy_rows_reg1, ce_rows_reg, 1, 256, 2)

// -- long rows: one online pass per block over a row segment --------------------------------------
// The thread's part of [j0, j1) (j0 % 4 == 0 and j1 % 4 == 0 or j1 == cols when VW = 4), in steps of
// TL_CE_CHUNK values read together (4 float4 or 16 floats, strided by blockDim: coalesced, 16 loads
// in flight per thread); per step: the step's maximum, the shift update (rescale in double), the
// step's terms summed in float by a fixed tree, added to s in double.
template <int VW>
__device__ __forceinline__ void ce_seg_online(const float* __restrict__ xr, long long j0, long long j1, bool smooth,
                                              float& m, double& s, double& q, long long& n) {
    constexpr int U = TL_CE_CHUNK / VW;
    const long long nt = blockDim.x;
    const long long e = VW == 4 ? (j1 >> 2) : j1;
    const float ninf = -TL_CLS_INF;
    for (long long i0 = (VW == 4 ? (j0 >> 2) : j0) + threadIdx.x; i0 < e; i0 += nt * U) {
        float v[TL_CE_CHUNK];
        int cnt = 0;
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const long long i = i0 + u * nt;
            if (VW == 4) {
                float4 a = make_float4(ninf, ninf, ninf, ninf);
                if (i < e) { a = reinterpret_cast<const float4*>(xr)[i]; cnt += 4; }
                v[4 * u] = a.x; v[4 * u + 1] = a.y; v[4 * u + 2] = a.z; v[4 * u + 3] = a.w;
            } else {
                v[u] = ninf;
                if (i < e) { v[u] = xr[i]; cnt += 1; }
            }
        }
        const float mn = fmaxf(m, tl_tree_max<TL_CE_CHUNK>(v));
        const float c0 = ce_shift(m), c1 = ce_shift(mn);
        if (c1 > c0) {  // the shift grows (rarely after the first steps): rescale in double
            s *= exp((double)c0 - (double)c1);
            if (smooth && n > 0) q += (double)n * ((double)c1 - (double)c0);
        }
        m = mn;
        if (smooth) {
#pragma unroll
            for (int k = 0; k < TL_CE_CHUNK; ++k)
                if (i0 + (k / VW) * nt < e) q += (double)c1 - (double)v[k];
        }
#pragma unroll
        for (int k = 0; k < TL_CE_CHUNK; ++k) v[k] = expf(v[k] - c1);
        s += (double)tl_tree_sum<TL_CE_CHUNK>(v);
        n += cnt;
    }
}

// Combines the threads' states towards the block's shift (fixed order: tl_block_*). On return every
// thread holds the block's (m, s, q); s, q relative to ce_shift(m).
__device__ __forceinline__ void ce_block_combine(float& m, double& s, double& q, long long n, bool smooth,
                                                 float* fs, double* ds) {
    const float M = tl_block_max_f(m, fs);
    ce_rebase(s, q, n, ce_shift(m), ce_shift(M), smooth);
    s = tl_block_sum_d(s, ds);
    q = smooth ? tl_block_sum_d(q, ds) : 0.0;
    m = M;
}

// A block (512 threads) per row: the row is read once (separate max and sum passes would read a
// long row twice, the second time mostly from DRAM once many rows are in flight).
template <int VW>
__device__ __forceinline__ void ce_rows_block(const float* __restrict__ x, long long rows, long long cols,
                                              const unsigned* __restrict__ tg, float ls, float* __restrict__ loss,
                                              float* __restrict__ lse) {
    __shared__ float fs[32];
    __shared__ double ds[32];
    const bool smooth = ls > 0.f;
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* xr = x + r * cols;
        const long long tr = (long long)tg[r];
        const bool valid = tr < cols;
        float xt = 0.f;
        if (threadIdx.x == 0 && valid) xt = xr[tr];
        float m = -TL_CLS_INF;
        double s = 0.0, q = 0.0;
        long long n = 0;
        ce_seg_online<VW>(xr, 0, cols, smooth, m, s, q, n);
        ce_block_combine(m, s, q, n, smooth, fs, ds);
        if (!tl_finite(m)) {  // rare (m is uniform in the block): a second pass over the row
            double cnt, sum;
            ce_nan_count_sum(xr, cols, threadIdx.x, blockDim.x, cnt, sum);
            s = tl_block_sum_d(cnt, ds);
            q = tl_block_sum_d(sum, ds);
        }
        if (threadIdx.x == 0) ce_finish(m, s, q, xt, valid, cols, ls, loss, lse, r);
    }
}

TL_CE_ROWS(tl_cross_entropy_rows_block4, ce_rows_block, 4, 512, 2)
TL_CE_ROWS(tl_cross_entropy_rows_block1, ce_rows_block, 1, 512, 1)

// -- few long rows: nsplit blocks per row (nsplit <= 32, segments of seg columns, seg % 4 == 0),
// then a warp per row combines the nsplit states in lane order. nsplit and seg depend on (rows,
// cols) only, so the result is bitwise repeatable on every device.
template <int VW>
__device__ __forceinline__ void ce_split_part(const float* __restrict__ x, long long rows, long long cols,
                                              long long nsplit, long long seg, float ls, float* __restrict__ pm,
                                              double* __restrict__ ps, double* __restrict__ pq) {
    __shared__ float fs[32];
    __shared__ double ds[32];
    const bool smooth = ls > 0.f;
    for (long long w = blockIdx.x; w < rows * nsplit; w += gridDim.x) {
        const long long r = w / nsplit, b = w - r * nsplit;
        const long long j0 = min(cols, b * seg), j1 = min(cols, j0 + seg);
        float m = -TL_CLS_INF;
        double s = 0.0, q = 0.0;
        long long n = 0;
        ce_seg_online<VW>(x + r * cols, j0, j1, smooth, m, s, q, n);
        ce_block_combine(m, s, q, n, smooth, fs, ds);
        if (threadIdx.x == 0) {
            pm[w] = m;
            ps[w] = s;
            pq[w] = q;
        }
    }
}

extern "C" __global__ void __launch_bounds__(512, 2) tl_cross_entropy_rows_part4(const float* x, long long rows, long long cols,
                                                              long long nsplit, long long seg, float ls, float* pm,
                                                              double* ps, double* pq) {
    ce_split_part<4>(x, rows, cols, nsplit, seg, ls, pm, ps, pq);
}
extern "C" __global__ void __launch_bounds__(512, 1) tl_cross_entropy_rows_part1(const float* x, long long rows, long long cols,
                                                              long long nsplit, long long seg, float ls, float* pm,
                                                              double* ps, double* pq) {
    ce_split_part<1>(x, rows, cols, nsplit, seg, ls, pm, ps, pq);
}

extern "C" __global__ void tl_cross_entropy_rows_split_fin(const float* __restrict__ x, long long rows, long long cols,
                                           long long nsplit, long long seg, const unsigned* __restrict__ tg,
                                           float ls, const float* __restrict__ pm, const double* __restrict__ ps,
                                           const double* __restrict__ pq, float* __restrict__ loss,
                                           float* __restrict__ lse) {
    const int lane = threadIdx.x & 31;
    const bool smooth = ls > 0.f;
    for (long long r = TL_TID >> 5; r < rows; r += TL_STRIDE >> 5) {
        const float* xr = x + r * cols;
        const long long tr = (long long)tg[r];
        const bool valid = tr < cols;
        float xt = 0.f;
        if (lane == 0 && valid) xt = xr[tr];
        float mb = -TL_CLS_INF;
        double sb = 0.0, qb = 0.0;
        long long nb = 0;
        if (lane < nsplit) {
            const long long w = r * nsplit + lane, j0 = min(cols, lane * seg);
            mb = pm[w];
            sb = ps[w];
            qb = pq[w];
            nb = min(cols, j0 + seg) - j0;
        }
        const float M = tl_warp_max_f(mb);
        double s, q = 0.0;
        if (tl_finite(M)) {
            ce_rebase(sb, qb, nb, ce_shift(mb), M, smooth);
            s = tl_warp_sum_d(sb);
            if (smooth) q = tl_warp_sum_d(qb);
        } else {  // rare: the warp reads the row again
            double cnt, sum;
            ce_nan_count_sum(xr, cols, lane, 32, cnt, sum);
            s = tl_warp_sum_d(cnt);
            q = tl_warp_sum_d(sum);
        }
        if (lane == 0) ce_finish(M, s, q, xt, valid, cols, ls, loss, lse, r);
    }
}

// ---- cross entropy, reduced: the sum of the row losses, scaled ------------------------------------
// One block: lane l sums loss[r] for r = l mod TL_CE_SUM_LANES in order, in double; thread 0 adds
// the lanes in order and rounds fl32(sum * scale) once. The order depends on rows only (the CPU
// backend repeats it), so the result repeats bitwise on every GPU.
#define TL_CE_SUM_LANES 256

extern "C" __global__ void __launch_bounds__(TL_CE_SUM_LANES) tl_cross_entropy_reduce_sum_scale(const float* __restrict__ loss,
                                                                           long long rows, float scale,
                                                                           float* __restrict__ out) {
    __shared__ double part[TL_CE_SUM_LANES];
    double a = 0.0;
    for (long long r = threadIdx.x; r < rows; r += TL_CE_SUM_LANES) a += (double)loss[r];
    part[threadIdx.x] = a;
    __syncthreads();
    if (threadIdx.x == 0) {
        double s = 0.0;
        for (int i = 0; i < TL_CE_SUM_LANES; ++i) s += part[i];
        out[0] = (float)(s * (double)scale);
    }
}

// ---- cross entropy backward -------------------------------------------------------------------
// dx_j = dl (expf(x_j - lse) - c_j), c_j = b = ls/cols, or a + b = (1 - ls) + ls/cols at j == t;
// rows with t >= cols are zero. One read of x, one write of dx. The loads of x do not wait for the
// row's target (an ignored row's x is read for nothing: rare), so they overlap the per-row loads.
__device__ __forceinline__ float ce_dx(float v, long long j, long long tr, bool ign, float l, float dl, float b,
                                       float ab) {
    return ign ? 0.f : dl * (expf(v - l) - (j == tr ? ab : b));
}

// Short rows: a warp per row, the row loaded into registers up front (up to 8 float4 / 32 floats
// per lane in flight: the old loop waited for one load per iteration).
template <int VW>
__device__ __forceinline__ void ce_bwd_reg(const float* __restrict__ x, const float* __restrict__ lse,
                                           const float* __restrict__ dloss, long long dstep, float dsc,
                                           long long rows, long long cols, const unsigned* __restrict__ tg,
                                           float b, float ab, float* __restrict__ dx) {
    const int lane = threadIdx.x & 31;
    for (long long r = TL_TID >> 5; r < rows; r += TL_STRIDE >> 5) {
        const long long tr = (long long)tg[r];
        const float l = lse[r], dl = dloss[r * dstep] * dsc;
        float v[TL_CE_REG];
        ce_load_row<VW>(x + r * cols, cols, lane, v);
        const bool ign = tr >= cols;
        float* dr = dx + r * cols;
        if (VW == 4) {
            float4* d4 = reinterpret_cast<float4*>(dr);
#pragma unroll
            for (int k = 0; k < TL_CE_REG / 4; ++k) {
                if (ce_slot_ok<4>(lane, 4 * k, cols)) {
                    const long long j = ce_slot_col<4>(lane, 4 * k);
                    d4[lane + 32 * k] = make_float4(ce_dx(v[4 * k], j, tr, ign, l, dl, b, ab),
                                                    ce_dx(v[4 * k + 1], j + 1, tr, ign, l, dl, b, ab),
                                                    ce_dx(v[4 * k + 2], j + 2, tr, ign, l, dl, b, ab),
                                                    ce_dx(v[4 * k + 3], j + 3, tr, ign, l, dl, b, ab));
                }
            }
        } else {
#pragma unroll
            for (int k = 0; k < TL_CE_REG; ++k)
                if (ce_slot_ok<1>(lane, k, cols)) dr[lane + 32 * k] = ce_dx(v[k], lane + 32 * k, tr, ign, l, dl, b, ab);
        }
    }
}

// Long rows: tiles of 16 values per thread (blockDim * 16 columns of one row), grid-stride over
// (row, tile): every load of a tile in flight at once, and few rows still fill the device.
template <int VW>
__device__ __forceinline__ void ce_bwd_tiles(const float* __restrict__ x, const float* __restrict__ lse,
                                             const float* __restrict__ dloss, long long dstep, float dsc,
                                             long long rows, long long cols, const unsigned* __restrict__ tg,
                                             float b, float ab, float* __restrict__ dx) {
    constexpr int U = TL_CE_CHUNK / VW;
    const long long nt = blockDim.x, tile = nt * TL_CE_CHUNK;
    const long long tpr = (cols + tile - 1) / tile, e = VW == 4 ? (cols >> 2) : cols;
    for (long long w = blockIdx.x; w < rows * tpr; w += gridDim.x) {
        const long long r = w / tpr;
        const long long i0 = (w - r * tpr) * (tile / VW) + threadIdx.x;  // in units of VW floats
        const long long tr = (long long)tg[r];
        const float l = lse[r], dl = dloss[r * dstep] * dsc;
        const bool ign = tr >= cols;
        if (VW == 4) {
            const float4* x4 = reinterpret_cast<const float4*>(x + r * cols);
            float4* d4 = reinterpret_cast<float4*>(dx + r * cols);
            float4 v[U];
#pragma unroll
            for (int u = 0; u < U; ++u)
                if (i0 + u * nt < e) v[u] = x4[i0 + u * nt];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const long long i = i0 + u * nt, j = i << 2;
                if (i < e)
                    d4[i] = make_float4(ce_dx(v[u].x, j, tr, ign, l, dl, b, ab), ce_dx(v[u].y, j + 1, tr, ign, l, dl, b, ab),
                                        ce_dx(v[u].z, j + 2, tr, ign, l, dl, b, ab), ce_dx(v[u].w, j + 3, tr, ign, l, dl, b, ab));
            }
        } else {
            const float* xr = x + r * cols;
            float* dr = dx + r * cols;
            float v[U];
#pragma unroll
            for (int u = 0; u < U; ++u)
                if (i0 + u * nt < e) v[u] = xr[i0 + u * nt];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const long long i = i0 + u * nt;
                if (i < e) dr[i] = ce_dx(v[u], i, tr, ign, l, dl, b, ab);
            }
        }
    }
}

// dloss is read at r * dstep and scaled by dsc: (1, 1.f) for cross_entropy_rows_bwd (x * 1.f is x),
// (0, scale) for cross_entropy_reduce_bwd, whose one cotangent is scaled in float32 on every row
// (the bits of a scale kernel followed by a broadcast).
#define TL_CE_BWD(NAME, FN, V, LB, MINB)                                                                \
extern "C" __global__ void __launch_bounds__(LB, MINB) NAME(const float* x, const float* lse, const float* dloss, \
                                long long dstep, float dsc, long long rows, long long cols,       \
                                const unsigned* tg, float b, float ab, float* dx) {               \
    FN<V>(x, lse, dloss, dstep, dsc, rows, cols, tg, b, ab, dx);                                  \
}

TL_CE_BWD(tl_cross_entropy_rows_bwd_reg4, ce_bwd_reg, 4, 256, 4)
TL_CE_BWD(tl_cross_entropy_rows_bwd_reg1, ce_bwd_reg, 1, 256, 2)
TL_CE_BWD(tl_cross_entropy_rows_bwd_tile4, ce_bwd_tiles, 4, 256, 4)
TL_CE_BWD(tl_cross_entropy_rows_bwd_tile1, ce_bwd_tiles, 1, 256, 2)
