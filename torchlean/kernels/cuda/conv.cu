// Convolution helpers around cuBLAS SGEMMs (host side: conv.py): im2col, the col2im gather, the
// (A0, A1, L) -> (A1, A0, L) permute with an optional bias, the bias fill and the fixed-order sum
// of bwd_weight's partial products.
//
// Layout of the columns of a chunk of B images: cols[(c*K + kk)*B*P + n*P + p] (channel c, kernel
// position kk in row-major order, image n of the chunk, output position p in row-major order),
// i.e. a row-major (C*K, B*P) matrix whose rows match the weights (out_c, C*K) row-major.
//
// Every output element is written by exactly one thread and every sum runs in an order fixed by
// the shape alone (no atomics): results are bitwise repeatable whatever the grid, and the
// deterministic-reductions switch changes nothing here. Rank-generic index math unrolls over the
// 8 possible axes with static indices (`if (tl_axis<R>(i, g))`), so the per-axis arrays stay in registers.

#define TL_CONV_MAX_RANK 8

// Passed by value (a 0-d NumPy structured array on the host: the field order and types must match
// _GEOM in conv.py). `in` are the spatial dims of x (or dx), `out` those of y (or dy).
struct TlConvGeom {
    long long r, S, P, K;  // rank; prod(in); prod(out); prod(k)
    long long in[TL_CONV_MAX_RANK], out[TL_CONV_MAX_RANK], k[TL_CONV_MAX_RANK];
    long long s[TL_CONV_MAX_RANK], p[TL_CONV_MAX_RANK];
    long long d[TL_CONV_MAX_RANK];  // dilation (1: adjacent taps)
};

// a / b for a >= 0, b > 0: one 32-bit division when both fit (a 64-bit one is several times dearer).
__device__ __forceinline__ long long tl_div(long long a, long long b) {
    if ((((unsigned long long)a | (unsigned long long)b) >> 32) == 0ull)
        return (long long)((unsigned int)a / (unsigned int)b);
    return a / b;
}

// Kernels are instantiated for rank 1, 2, 3 exactly (R = rank: every axis is live) and for any rank
// up to 8 (R = 8: axis i is live when i < g.r), so the common ranks carry no dead axes.
template <int R>
__device__ __forceinline__ bool tl_axis(int i, const TlConvGeom& g) {
    return R < TL_CONV_MAX_RANK || i < g.r;
}

// ---- im2col -------------------------------------------------------------------------------------
// cols[(c*K + kk)*B*P + n*P + p] = x[(n*C + c)*S + q], q_i = p_i*s_i - pad_i + k_i*d_i per axis, and 0
// where some q_i falls in the padding. `x` points at the chunk's first image. x-dim threads: the
// (n, p) pairs; y-dim: channels. A thread decodes its (n, p) once, then walks the K kernel
// positions (an odometer) and, for each, every channel of its y-slice: consecutive threads write
// consecutive addresses and read consecutive (or stride-s) inputs.
template <int R>
__device__ __forceinline__ void im2col(const float* __restrict__ x, float* __restrict__ cols,
                                       const TlConvGeom& g, long long B, long long C) {
    const long long BP = B * g.P, KBP = g.K * BP;
    for (long long e = TL_TID; e < BP; e += TL_STRIDE) {
        long long n = tl_div(e, g.P), rem = e - n * g.P;
        long long base[R], kc[R];
#pragma unroll
        for (int i = R - 1; i >= 0; --i) {
            kc[i] = 0;
            base[i] = 0;
            if (tl_axis<R>(i, g)) {
                long long t = tl_div(rem, g.out[i]);
                base[i] = (rem - t * g.out[i]) * g.s[i] - g.p[i];
                rem = t;
            }
        }
        const float* xn = x + n * C * g.S;
        float* ce = cols + e;
        for (long long kk = 0; kk < g.K; ++kk) {
            bool valid = true;
            long long off = 0;
#pragma unroll
            for (int i = 0; i < R; ++i) {
                if (tl_axis<R>(i, g)) {
                    long long q = base[i] + kc[i] * g.d[i];
                    valid = valid && q >= 0 && q < g.in[i];
                    off = off * g.in[i] + q;
                }
            }
            for (long long c = blockIdx.y; c < C; c += gridDim.y)
                ce[c * KBP + kk * BP] = valid ? xn[c * g.S + off] : 0.0f;
#pragma unroll
            for (int i = R - 1; i >= 0; --i) {  // next kernel position, last axis fastest
                if (tl_axis<R>(i, g)) {
                    if (++kc[i] < g.k[i]) break;
                    kc[i] = 0;
                }
            }
        }
    }
}

#define TL_CONV_IM2COL(SUFFIX, R)                                                              \
    extern "C" __global__ void tl_conv_im2col_##SUFFIX(const float* __restrict__ x,               \
                                                      float* __restrict__ cols,                   \
                                                      const TlConvGeom g, long long B, long long C) { \
        im2col<R>(x, cols, g, B, C);                                                               \
    }
TL_CONV_IM2COL(r1, 1)
TL_CONV_IM2COL(r2, 2)
TL_CONV_IM2COL(r3, 3)
TL_CONV_IM2COL(rn, TL_CONV_MAX_RANK)

// ---- im2col, 32-bit fast form -------------------------------------------------------------------
// The same columns as im2col above, for rank R = 1, 2, 3 when every index fits in an int (the host
// checks C*K*B*P and B*C*S below 2^31). Each thread owns V consecutive column positions
// e0 .. e0+V-1 (e0 = V*t; the host requires B*P % V == 0, so with V = 4 every row (c*K + kk) of
// cols starts 16-byte aligned and the V values go out as one float4 store). A thread decodes its
// first position once (R + 1 divisions) and steps to the next V-1 with an odometer, then for each
// channel of its y-slice walks the K taps: no division in the loop, 32-bit arithmetic, reads
// through the read-only cache. Consecutive threads write consecutive 16 bytes. The host also
// bounds every intermediate (|q|, offsets) below 2^31, padding included.
template <int R, int V>
__device__ __forceinline__ void im2col_fast(const float* __restrict__ x, float* __restrict__ cols,
                                            const TlConvGeom& g, int B, int C) {
    const int P = (int)g.P, S = (int)g.S, K = (int)g.K;
    const int BP = B * P, KBP = K * BP, nq = BP / V;
    int in[R], out[R], kd[R], st[R], pd[R], dl[R];
#pragma unroll
    for (int i = 0; i < R; ++i) {
        in[i] = (int)g.in[i];
        out[i] = (int)g.out[i];
        kd[i] = (int)g.k[i];
        st[i] = (int)g.s[i];
        pd[i] = (int)g.p[i];
        dl[i] = (int)g.d[i];
    }
    for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < nq; t += blockDim.x * gridDim.x) {
        const int e0 = t * V;
        int n = e0 / P, rem = e0 - n * P, o[R];
#pragma unroll
        for (int i = R - 1; i >= 0; --i) {
            int tt = rem / out[i];
            o[i] = rem - tt * out[i];
            rem = tt;
        }
        int q0[V][R], base[V];  // first-tap input coordinates (may be < 0) and x offset of that tap
#pragma unroll
        for (int u = 0; u < V; ++u) {
            int off = 0;
#pragma unroll
            for (int i = 0; i < R; ++i) {
                q0[u][i] = o[i] * st[i] - pd[i];
                off = off * in[i] + q0[u][i];
            }
            base[u] = n * C * S + off;
            bool carry = true;  // next position: last axis fastest, then the image
#pragma unroll
            for (int i = R - 1; i >= 0; --i) {
                if (carry) {
                    if (++o[i] < out[i]) carry = false;
                    else o[i] = 0;
                }
            }
            if (carry) ++n;
        }
        for (int c = blockIdx.y; c < C; c += gridDim.y) {
            const float* xc = x + c * S;
            float* dst = cols + c * KBP + e0;
            int kc[R];
#pragma unroll
            for (int i = 0; i < R; ++i) kc[i] = 0;
            for (int kk = 0; kk < K; ++kk) {
                int koff = 0;
#pragma unroll
                for (int i = 0; i < R; ++i) koff = koff * in[i] + kc[i] * dl[i];
                float v[V];
#pragma unroll
                for (int u = 0; u < V; ++u) {
                    bool valid = true;
#pragma unroll
                    for (int i = 0; i < R; ++i) valid = valid && (unsigned)(q0[u][i] + kc[i] * dl[i]) < (unsigned)in[i];
                    v[u] = 0.0f;
                    if (valid) v[u] = __ldg(xc + (base[u] + koff));
                }
                if (V == 4) {
                    *reinterpret_cast<float4*>(dst + kk * BP) = make_float4(v[0], v[1 % V], v[2 % V], v[3 % V]);
                } else {
#pragma unroll
                    for (int u = 0; u < V; ++u) dst[kk * BP + u] = v[u];
                }
                bool carry = true;  // next tap, last axis fastest
#pragma unroll
                for (int i = R - 1; i >= 0; --i) {
                    if (carry) {
                        if (++kc[i] < kd[i]) carry = false;
                        else kc[i] = 0;
                    }
                }
            }
        }
    }
}

#define TL_CONV_IM2COL_FAST(SUFFIX, R, V)                                                        \
    extern "C" __global__ void tl_conv_im2col_fast_##SUFFIX(const float* __restrict__ x,        \
                                                           float* __restrict__ cols,            \
                                                           const TlConvGeom g, int B, int C) {  \
        im2col_fast<R, V>(x, cols, g, B, C);                                                     \
    }
TL_CONV_IM2COL_FAST(r1v1, 1, 1)
TL_CONV_IM2COL_FAST(r2v1, 2, 1)
TL_CONV_IM2COL_FAST(r3v1, 3, 1)
TL_CONV_IM2COL_FAST(r1v4, 1, 4)
TL_CONV_IM2COL_FAST(r2v4, 2, 4)
TL_CONV_IM2COL_FAST(r3v4, 3, 4)

// ---- col2im (a gather: no atomics) ----------------------------------------------------------------
// dx[(n*C + c)*S + q] = bias[c] (0 without bias) + sum of dcols[(c*K + kk)*B*P + n*P + p] over
// the (kk, p) with p_i*s_i - pad_i + k_i = q_i on every axis. Per axis those are
// k_i = k0_i + j*s_i, p_i = pst_i - j (k0_i = (q_i + pad_i) mod s_i, pst_i = (q_i + pad_i) div s_i)
// for j in [jlo_i, jhi_i] where 0 <= p_i < out_i and k_i < kernel_i. The sum runs over j in row-major
// order (fixed by the shape), in double, rounded once. Threads: x-dim the (n, q) pairs of the
// chunk, y-dim groups of 4 channels (one walk over the (kk, p) pairs serves 4 channels).
#define TL_CONV_CG 4
template <int R>
__device__ __forceinline__ void col2im(const float* __restrict__ dcols, float* __restrict__ dx,
                                       const float* __restrict__ bias, const TlConvGeom& g,
                                       long long B, long long C) {
    const long long BS = B * g.S, BP = B * g.P, KBP = g.K * BP;
    for (long long e = TL_TID; e < BS; e += TL_STRIDE) {
        long long n = tl_div(e, g.S), rem = e - n * g.S;
        long long k0[R], p0[R], cnt[R], j[R];
        bool any = true;
#pragma unroll
        for (int i = R - 1; i >= 0; --i) {
            k0[i] = 0;
            p0[i] = 0;
            cnt[i] = 1;
            j[i] = 0;
            if (tl_axis<R>(i, g)) {
                long long t = tl_div(rem, g.in[i]);
                long long tq = rem - t * g.in[i] + g.p[i];  // q_i + pad_i >= 0
                rem = t;
                long long pst = tl_div(tq, g.s[i]);
                long long kf = tq - pst * g.s[i];          // first kernel index that can reach q_i
                long long jhi = kf < g.k[i] ? min(pst, tl_div(g.k[i] - 1 - kf, g.s[i])) : -1;
                long long jlo = max(0ll, pst - g.out[i] + 1);
                cnt[i] = jhi - jlo + 1;
                any = any && cnt[i] > 0;
                k0[i] = kf + jlo * g.s[i];                 // (k_i, p_i) at j = jlo
                p0[i] = pst - jlo;
            }
        }
        const float* dn = dcols + n * g.P;
        float* xe = dx + n * (C - 1) * g.S + e;  // dx[(n*C + c)*S + q] = xe[c*S]
        for (long long c0 = (long long)blockIdx.y * TL_CONV_CG; c0 < C; c0 += (long long)gridDim.y * TL_CONV_CG) {
            double acc[TL_CONV_CG];
#pragma unroll
            for (int u = 0; u < TL_CONV_CG; ++u)
                acc[u] = (bias != nullptr && c0 + u < C) ? (double)bias[c0 + u] : 0.0;
            if (any) {
#pragma unroll
                for (int i = 0; i < R; ++i) j[i] = 0;
                const float* dc = dn + c0 * KBP;
                while (true) {
                    long long kk = 0, p = 0;
#pragma unroll
                    for (int i = 0; i < R; ++i) {
                        if (tl_axis<R>(i, g)) {
                            kk = kk * g.k[i] + k0[i] + j[i] * g.s[i];
                            p = p * g.out[i] + p0[i] - j[i];
                        }
                    }
                    const float* src = dc + kk * BP + p;
#pragma unroll
                    for (int u = 0; u < TL_CONV_CG; ++u)
                        if (c0 + u < C) acc[u] += (double)src[u * KBP];
                    bool more = false;  // next j, last axis fastest
#pragma unroll
                    for (int i = R - 1; i >= 0; --i) {
                        if (tl_axis<R>(i, g)) {
                            if (++j[i] < cnt[i]) {
                                more = true;
                                break;
                            }
                            j[i] = 0;
                        }
                    }
                    if (!more) break;
                }
            }
#pragma unroll
            for (int u = 0; u < TL_CONV_CG; ++u)
                if (c0 + u < C) xe[(c0 + u) * g.S] = (float)acc[u];
        }
    }
}

#define TL_CONV_COL2IM(SUFFIX, R)                                                              \
    extern "C" __global__ void tl_conv_bwd_input_col2im_##SUFFIX(const float* __restrict__ dcols, \
                                                                float* __restrict__ dx,           \
                                                                const float* __restrict__ bias,   \
                                                                const TlConvGeom g, long long B,  \
                                                                long long C) {                    \
        col2im<R>(dcols, dx, bias, g, B, C);                                                       \
    }
TL_CONV_COL2IM(r1, 1)
TL_CONV_COL2IM(r2, 2)
TL_CONV_COL2IM(r3, 3)
TL_CONV_COL2IM(rn, TL_CONV_MAX_RANK)

// ---- col2im with dilation (a gather: no atomics) ----------------------------------------------------
// As col2im above for any dilation: dx[(n*C + c)*S + q] = bias[c] + the sum of dcols[(c*K + kk)*B*P
// + n*P + p] over the kernel positions kk (row-major, ascending) whose tap from some output p lands
// on q, i.e. per axis t_i = q_i + pad_i - k_i*d_i >= 0, t_i % s_i == 0 and p_i = t_i / s_i < out_i;
// in double, rounded once. Threads as in col2im.
template <int R>
__device__ __forceinline__ void col2im_dil(const float* __restrict__ dcols, float* __restrict__ dx,
                                           const float* __restrict__ bias, const TlConvGeom& g,
                                           long long B, long long C) {
    const long long BS = B * g.S, BP = B * g.P, KBP = g.K * BP;
    for (long long e = TL_TID; e < BS; e += TL_STRIDE) {
        long long n = tl_div(e, g.S), rem = e - n * g.S;
        long long t0[R];  // q_i + pad_i
#pragma unroll
        for (int i = R - 1; i >= 0; --i) {
            t0[i] = 0;
            if (tl_axis<R>(i, g)) {
                long long t = tl_div(rem, g.in[i]);
                t0[i] = rem - t * g.in[i] + g.p[i];
                rem = t;
            }
        }
        const float* dn = dcols + n * g.P;
        float* xe = dx + n * (C - 1) * g.S + e;  // dx[(n*C + c)*S + q] = xe[c*S]
        for (long long c0 = (long long)blockIdx.y * TL_CONV_CG; c0 < C; c0 += (long long)gridDim.y * TL_CONV_CG) {
            double acc[TL_CONV_CG];
#pragma unroll
            for (int u = 0; u < TL_CONV_CG; ++u)
                acc[u] = (bias != nullptr && c0 + u < C) ? (double)bias[c0 + u] : 0.0;
            const float* dc = dn + c0 * KBP;
            long long kc[R];
#pragma unroll
            for (int i = 0; i < R; ++i) kc[i] = 0;
            for (long long kk = 0; kk < g.K; ++kk) {
                bool valid = true;
                long long p = 0;
#pragma unroll
                for (int i = 0; i < R; ++i) {
                    if (tl_axis<R>(i, g)) {
                        long long t = t0[i] - kc[i] * g.d[i];
                        long long o = t >= 0 ? tl_div(t, g.s[i]) : 0;
                        valid = valid && t >= 0 && o * g.s[i] == t && o < g.out[i];
                        p = p * g.out[i] + o;
                    }
                }
                if (valid) {
                    const float* src = dc + kk * BP + p;
#pragma unroll
                    for (int u = 0; u < TL_CONV_CG; ++u)
                        if (c0 + u < C) acc[u] += (double)src[u * KBP];
                }
#pragma unroll
                for (int i = R - 1; i >= 0; --i) {  // next kernel position, last axis fastest
                    if (tl_axis<R>(i, g)) {
                        if (++kc[i] < g.k[i]) break;
                        kc[i] = 0;
                    }
                }
            }
#pragma unroll
            for (int u = 0; u < TL_CONV_CG; ++u)
                if (c0 + u < C) xe[(c0 + u) * g.S] = (float)acc[u];
        }
    }
}

#define TL_CONV_COL2IM_DIL(SUFFIX, R)                                                              \
    extern "C" __global__ void tl_conv_bwd_input_col2im_dil_##SUFFIX(const float* __restrict__ dcols, \
                                                                    float* __restrict__ dx,           \
                                                                    const float* __restrict__ bias,   \
                                                                    const TlConvGeom g, long long B,  \
                                                                    long long C) {                    \
        col2im_dil<R>(dcols, dx, bias, g, B, C);                                                       \
    }
TL_CONV_COL2IM_DIL(r1, 1)
TL_CONV_COL2IM_DIL(r2, 2)
TL_CONV_COL2IM_DIL(r3, 3)
TL_CONV_COL2IM_DIL(rn, TL_CONV_MAX_RANK)

// ---- depthwise 1-D (groups == in_c == out_c, rank 1): direct kernels, no columns ---------------------
// Rows r = n*C + c of x (length L) and y (length Lo); tap k of output o reads x[o*s - p + k*d], a
// value 0 in the padding (0 * inf = NaN, as the spec).
extern "C" __global__ void tl_conv_depthwise1d(const float* __restrict__ x, const float* __restrict__ w,
                                               const float* __restrict__ bias, float* __restrict__ y,
                                               long long rows, long long C, long long L, long long Lo,
                                               long long K, long long s, long long p, long long d) {
    const long long total = rows * Lo;
    for (long long e = TL_TID; e < total; e += TL_STRIDE) {
        long long r = tl_div(e, Lo), o = e - r * Lo;
        long long c = r - tl_div(r, C) * C;
        const float* xr = x + r * L;
        const float* wc = w + c * K;
        float acc = 0.0f;
        long long i = o * s - p;
        for (long long k = 0; k < K; ++k, i += d) {
            float v = (i >= 0 && i < L) ? xr[i] : 0.0f;
            acc = fmaf(wc[k], v, acc);
        }
        y[e] = bias != nullptr ? acc + bias[c] : acc;
    }
}

// dx[r*L + i] = the sum over the taps k (ascending) of an output o with o*s - p + k*d = i of
// w[c*K + k] * dy[r*Lo + o]; taps in the padding are no terms.
// bias (may be null: the transposed conv's, per channel) starts each sum, as in the general path;
// adding it afterwards with a CuPy elementwise kernel would flush subnormal sums (CuPy compiles
// with -ftz=true).
extern "C" __global__ void tl_conv_bwd_input_depthwise1d(const float* __restrict__ dy, const float* __restrict__ w,
                                                         const float* __restrict__ bias, float* __restrict__ dx,
                                                         long long rows, long long C, long long L, long long Lo,
                                                         long long K, long long s, long long p, long long d) {
    const long long total = rows * L;
    for (long long e = TL_TID; e < total; e += TL_STRIDE) {
        long long r = tl_div(e, L), i = e - r * L;
        long long c = r - tl_div(r, C) * C;
        const float* wc = w + c * K;
        const float* gr = dy + r * Lo;
        float acc = bias ? bias[c] : 0.0f;
        for (long long k = 0; k < K; ++k) {
            long long t = i + p - k * d;  // = o*s
            if (t < 0) break;             // t falls as k grows
            long long o = tl_div(t, s);
            if (o * s == t && o < Lo) acc = fmaf(wc[k], gr[o], acc);
        }
        dx[e] = acc;
    }
}

// dw[c*K + k] = sum over (n, o) of dy[(n*C + c)*Lo + o] * xpad; one block per (c, k) (grid-stride):
// each thread sums its strided share in double, then a fixed tree over the block (blockDim.x a power
// of two, at most 1024): the order depends on the shape and the block size alone.
extern "C" __global__ void tl_conv_bwd_weight_depthwise1d(const float* __restrict__ x, const float* __restrict__ dy,
                                                          float* __restrict__ dw, long long B, long long C,
                                                          long long L, long long Lo, long long K, long long s,
                                                          long long p, long long d) {
    __shared__ double part[1024];
    const long long CK = C * K, M = B * Lo;
    for (long long j = blockIdx.x; j < CK; j += gridDim.x) {
        long long c = tl_div(j, K), k = j - c * K;
        double acc = 0.0;
        for (long long m = threadIdx.x; m < M; m += blockDim.x) {
            long long n = tl_div(m, Lo), o = m - n * Lo;
            long long i = o * s - p + k * d, r = n * C + c;
            float v = (i >= 0 && i < L) ? x[r * L + i] : 0.0f;
            acc += (double)(dy[r * Lo + o] * v);
        }
        part[threadIdx.x] = acc;
        __syncthreads();
        for (int h = blockDim.x / 2; h > 0; h >>= 1) {
            if (threadIdx.x < h) part[threadIdx.x] += part[threadIdx.x + h];
            __syncthreads();
        }
        if (threadIdx.x == 0) dw[j] = (float)part[0];
        __syncthreads();
    }
}

// ---- permute and bias ---------------------------------------------------------------------------
// dst (A1, A0, L) from src (A0, A1, L): dst[(a1*A0 + a0)*L + l] = src[(a0*A1 + a1)*L + l], plus
// bias[a0] when bias is given (one float32 addition).
extern "C" __global__ void tl_conv_swap01(const float* __restrict__ src, float* __restrict__ dst,
                                          const float* __restrict__ bias, long long A0, long long A1,
                                          long long L) {
    const long long total = A0 * A1 * L;
    for (long long e = TL_TID; e < total; e += TL_STRIDE) {
        long long t = tl_div(e, L), l = e - t * L;
        long long a1 = tl_div(t, A0), a0 = t - a1 * A0;
        float v = src[(a0 * A1 + a1) * L + l];
        if (bias != nullptr) v = v + bias[a0];
        dst[e] = v;
    }
}

// y viewed as (N, C, L): y[(n*C + c)*L + l] = bias[c].
extern "C" __global__ void tl_conv_bias_fill(float* __restrict__ y, const float* __restrict__ bias,
                                             long long C, long long L, long long total) {
    for (long long e = TL_TID; e < total; e += TL_STRIDE) {
        long long t = tl_div(e, L);
        y[e] = bias[t - tl_div(t, C) * C];
    }
}

// ---- bwd_weight partials ------------------------------------------------------------------------
// s = (first ? 0 : acc[j]) + part[0*MN + j] + part[1*MN + j] + ... + part[(G-1)*MN + j], in double
// and in that order; then out[j] = float(s) on the last chunk, else acc[j] = s.
extern "C" __global__ void tl_conv_bwd_weight_sum_partials(const float* __restrict__ part, long long G,
                                                           long long MN, double* __restrict__ acc,
                                                           long long first, long long last,
                                                           float* __restrict__ out) {
    for (long long e = TL_TID; e < MN; e += TL_STRIDE) {
        double s = first ? 0.0 : acc[e];
        for (long long q = 0; q < G; ++q) s += (double)part[q * MN + e];
        if (last) out[e] = (float)s;
        else acc[e] = s;
    }
}
