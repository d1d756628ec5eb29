// Flash attention on tensor cores (sm_80+): forward, dQ and fused dK/dV over float32 buffers, in
// the layouts and mask modes of attention.cu (see attention_common.cuh), head dim padded to
// DP = 32, 64 or 128.
//
// Products: mma.sync m16n8k8 with TF32 operands and float32 accumulators. With SPLIT (the default,
// float32 accuracy), every operand x is split into hi and lo, both TF32 by truncation (x - hi is
// exact), and a product is lo_a hi_b + hi_a lo_b + hi_a hi_b, three MMAs, small terms first; the
// dropped lo_a lo_b and the truncations of lo leave at most 3 * 2^-20 |a b| per product. Without
// SPLIT (TF32 allowed by the user) one MMA of hi_a hi_b, hi rounded to nearest.
//
// Work: 128 threads (4 warps) per block, a block owns a 64-row item (query rows for the forward and
// dQ, key rows for dK/dV: the items of attention.cu's tiled kernels), each warp 16 of its rows
// against 64 columns per step (32 query columns for dK/dV at DP = 128, which would spill at 64). A warp's 16 x 64 score tile lives in MMA accumulator fragments:
// thread (g = lane / 4, t = lane % 4) holds rows g and g + 8, columns 8 n + 2 t and 8 n + 2 t + 1 of
// each 8-column block n. The second product (P V, dS K, P^T dO, dS^T Q) takes those fragments
// as its A operand directly: its k index t stands for column 2 t and t + 4 for 2 t + 1, and the B
// operand is read from the matching rows (2 t, 2 t + 1) of the shared tile, so no shuffle is needed.
// Each step's contribution to an output accumulates from zero in its own fragments and is then
// added (or, in the forward, added to the rescaled output): no MMA chain runs longer than one
// 64-column step.
//
// Shared tiles are row-major with pitch DP + 4 (= 4 mod 32 words): the A reads (row g, column t),
// the B reads (row g, column t) and (row 2 t, column g) each hit 32 distinct banks.
//
// Non-finite inputs: the split turns +-inf into NaN (inf - inf), so any non-finite operand shows
// as a NaN score or output in the item that reads it. Such an item (and any item whose scores or
// outputs hold a NaN for another reason) sets redo[item] = 1 and is computed again by attention.cu's
// float32 kernel, which gives IEEE semantics; every other item writes redo[item] = 0. A flagged item
// also adds 1 to redo[items] (zeroed by the launcher), so the float32 pass can see at once that there
// is nothing to do.
//
// Deterministic: each output element is written by one block, accumulated in a fixed order.

#include "attention_common.cuh"

#if __CUDA_ARCH__ >= 800  // mma.sync .tf32 and cp.async

#define TL_MMA_ROWS 64

__device__ __forceinline__ unsigned tl_tf32(float x) {
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
}

// SPLIT: hi = x with its 13 low mantissa bits cleared, lo = (x - hi) likewise (x - hi is exact):
// three simple integer/float ops, where cvt.rna costs several. Otherwise hi = tf32(x), rounded.
template <bool SPLIT>
__device__ __forceinline__ void tl_split(float x, unsigned& hi, unsigned& lo) {
    if (SPLIT) {
        hi = __float_as_uint(x) & 0xffffe000u;
        lo = __float_as_uint(x - __uint_as_float(hi)) & 0xffffe000u;
    } else {
        hi = tl_tf32(x);
    }
}

// d += a b for one m16n8k8 TF32 fragment triple.
__device__ __forceinline__ void tl_mma8(float d[4], const unsigned a[4], const unsigned b[2]) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <bool SPLIT>
__device__ __forceinline__ void tl_mma_split(float d[4], const unsigned ah[4], const unsigned al[4],
                                             const unsigned bh[2], const unsigned bl[2]) {
    if (SPLIT) {
        tl_mma8(d, al, bh);
        tl_mma8(d, ah, bl);
    }
    tl_mma8(d, ah, bh);
}

// acc[n] = X[r0 .. r0+16) . Z[8n .. 8n+8)^T over DP dims, for n < NB: X and Z row-major tiles
// (pitch DP + 4), A from X (rows g, g + 8; columns t, t + 4), B from Z (row g; columns t, t + 4).
template <int DP, int NB, bool SPLIT>
__device__ __forceinline__ void tl_mma_scores(float (&acc)[NB][4], const float* X, int r0, const float* Z, int g,
                                              int t) {
    constexpr int P = DP + 4;
#pragma unroll
    for (int n = 0; n < NB; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
#pragma unroll 2  // fully unrolled, the loads hoisted ahead spill at DP = 64
    for (int k0 = 0; k0 < DP; k0 += 8) {
        const float* xa = X + (r0 + g) * P + k0 + t;
        unsigned ah[4], al[4];
        tl_split<SPLIT>(xa[0], ah[0], al[0]);
        tl_split<SPLIT>(xa[8 * P], ah[1], al[1]);
        tl_split<SPLIT>(xa[4], ah[2], al[2]);
        tl_split<SPLIT>(xa[8 * P + 4], ah[3], al[3]);
#pragma unroll
        for (int n = 0; n < NB; ++n) {
            const float* zb = Z + (8 * n + g) * P + k0 + t;
            unsigned bh[2], bl[2];
            tl_split<SPLIT>(zb[0], bh[0], bl[0]);
            tl_split<SPLIT>(zb[4], bh[1], bl[1]);
            tl_mma_split<SPLIT>(acc[n], ah, al, bh, bl);
        }
    }
}

// out[C0 + m] (= out * alpha per row when SCALE) += sum_k F[k] W[k][8 (C0 + m) ..] for m < NC: the A
// operand is the score-layout fragments F (NK blocks of 8 columns, used in place: A index t is
// column 2 t), the B operand rows 8 k + 2 t and 8 k + 2 t + 1 of the row-major tile W (pitch DP + 4).
template <int DP, int NK, int NO, int C0, int NC, bool SPLIT, bool SCALE>
__device__ __forceinline__ void tl_mma_accum(float (&out)[NO][4], const float (&F)[NK][4], const float* W,
                                             const float alpha[2], int g, int t) {
    constexpr int P = DP + 4;
    float part[NC][4];
#pragma unroll
    for (int m = 0; m < NC; ++m) part[m][0] = part[m][1] = part[m][2] = part[m][3] = 0.0f;
#pragma unroll
    for (int k = 0; k < NK; ++k) {
        unsigned ah[4], al[4];
        tl_split<SPLIT>(F[k][0], ah[0], al[0]);  // (g, 2t)
        tl_split<SPLIT>(F[k][2], ah[1], al[1]);  // (g + 8, 2t)
        tl_split<SPLIT>(F[k][1], ah[2], al[2]);  // (g, 2t + 1)
        tl_split<SPLIT>(F[k][3], ah[3], al[3]);  // (g + 8, 2t + 1)
        const float* wb = W + (8 * k + 2 * t) * P + 8 * C0 + g;
#pragma unroll
        for (int m = 0; m < NC; ++m) {
            unsigned bh[2], bl[2];
            tl_split<SPLIT>(wb[8 * m], bh[0], bl[0]);
            tl_split<SPLIT>(wb[P + 8 * m], bh[1], bl[1]);
            tl_mma_split<SPLIT>(part[m], ah, al, bh, bl);
        }
    }
#pragma unroll
    for (int m = 0; m < NC; ++m)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            float o = out[C0 + m][e];
            if (SCALE) o = o * alpha[e >> 1];
            out[C0 + m][e] = o + part[m][e];
        }
}

// All DP / 8 output blocks in chunks of at most 8 (the per-step partial sums: 32 registers).
template <int DP, int NK, bool SPLIT, bool SCALE>
__device__ __forceinline__ void tl_mma_accum_all(float (&out)[DP / 8][4], const float (&F)[NK][4], const float* W,
                                                 const float alpha[2], int g, int t) {
    constexpr int NC = DP / 8 < 8 ? DP / 8 : 8;
    tl_mma_accum<DP, NK, DP / 8, 0, NC, SPLIT, SCALE>(out, F, W, alpha, g, t);
    if constexpr (DP / 8 > 8) tl_mma_accum<DP, NK, DP / 8, 8, DP / 8 - 8, SPLIT, SCALE>(out, F, W, alpha, g, t);
}

// redo[item] = flag, and a flagged item counts itself in redo[items].
__device__ __forceinline__ void tl_mma_flag(int* redo, long long item, long long items, int flag) {
    redo[item] = flag;
    if (flag) atomicAdd(redo + items, 1);
}

template <int NB>
__device__ __forceinline__ bool tl_any_nan(const float (&a)[NB][4]) {
    bool bad = false;
#pragma unroll
    for (int n = 0; n < NB; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) bad |= (a[n][e] != a[n][e]);
    return bad;
}

// -- forward: item = (b, 64 query rows); online softmax over 64-key steps ------------------------
// K and V are staged with cp.async into single buffers, staggered as in attention.cu: V_j loads
// while S_j = Q K_j^T is computed, K_{j+1} while the softmax and P V of step j run.
template <int DP, bool SPLIT>
__device__ void tl_flash_attention_mma_fwd_tc(const float* __restrict__ q, const float* __restrict__ k,
                                              const float* __restrict__ v, TlAttnMask M, float* __restrict__ out,
                                              float* __restrict__ lse, long long batch, long long n_q,
                                              long long n_k, int d, float scale, int vec, TlAttnLay L,
                                              int* __restrict__ redo) {
    constexpr int P = DP + 4;
    extern __shared__ float4 tl_smem4[];
    float* Qs = reinterpret_cast<float*>(tl_smem4);  // [64][P], q * c
    float* Ks = Qs + 64 * P;
    float* Vs = Ks + 64 * P;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const float c2 = scale * TL_LOG2E;
    const long long ntq = (n_q + TL_MMA_ROWS - 1) / TL_MMA_ROWS;
    for (long long item = blockIdx.x; item < batch * ntq; item += gridDim.x) {
        const long long b = item / ntq, i0 = (item - b * ntq) * TL_MMA_ROWS;
        const float* mb = M.mode ? tl_mask_base(M, b) : nullptr;
        const float* kb = k + tl_koff(L, b);
        const float* vb = v + tl_koff(L, b);
        tl_cp_wait<0>();
        __syncthreads();  // the previous item's readers are done with every buffer
        tl_stage<DP, 64, false>(Qs, P, q + tl_qoff(L, b), i0, n_q, d, L.q_ld, c2, vec);
        tl_stage<DP, 64, true>(Ks, P, kb, 0, n_k, d, L.k_ld, 1.0f, vec);
        tl_cp_commit();
        const long long ia = i0 + w * 16 + g;  // this thread's rows: ia and ia + 8
        float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, o[DP / 8][4];
#pragma unroll
        for (int n = 0; n < DP / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
        bool bad = false;
        const long long kend = M.causal ? min(n_k, i0 + TL_MMA_ROWS) : n_k;
        for (long long j0 = 0; j0 < kend; j0 += TL_BC) {
            tl_cp_wait<0>();
            __syncthreads();  // K_j (and Q) visible; everyone is done with V of step j-1
            tl_stage<DP, 64, true>(Vs, P, vb, j0, n_k, d, L.k_ld, 1.0f, vec);
            tl_cp_commit();
            float s[8][4];
            tl_mma_scores<DP, 8, SPLIT>(s, Qs, w * 16, Ks, g, t);
            __syncthreads();  // everyone is done reading K_j
            if (j0 + TL_BC < kend) tl_stage<DP, 64, true>(Ks, P, kb, j0 + TL_BC, n_k, d, L.k_ld, 1.0f, vec);
            tl_cp_commit();
            bad |= tl_any_nan(s);
            float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
            for (int n = 0; n < 8; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    bool live;
                    s[n][e] = tl_masked(s[n][e], ia + 8 * (e >> 1), j0 + 8 * n + 2 * t + (e & 1), n_q, n_k, M, mb,
                                        &live);
                    mx[e >> 1] = fmaxf(mx[e >> 1], s[n][e]);
                }
            float alpha[2], m_use[2];
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(TL_FULL_MASK, mx[r], 1));
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(TL_FULL_MASK, mx[r], 2));
                const float m_new = fmaxf(m[r], mx[r]);
                m_use[r] = (m_new == -INFINITY) ? 0.0f : m_new;
                alpha[r] = exp2f(m[r] - m_use[r]);
                m[r] = m_new;
            }
            float ps[2] = {0.0f, 0.0f};
#pragma unroll
            for (int n = 0; n < 8; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    s[n][e] = exp2f(s[n][e] - m_use[e >> 1]);
                    ps[e >> 1] += s[n][e];
                }
            l[0] = l[0] * alpha[0] + ps[0];
            l[1] = l[1] * alpha[1] + ps[1];
            tl_cp_wait<1>();  // V_j landed (K_{j+1} may still be in flight)
            __syncthreads();
            tl_mma_accum_all<DP, 8, SPLIT, true>(o, s, Vs, alpha, g, t);
        }
        bad |= tl_any_nan(o);
        const int redo_item = __syncthreads_or(bad);
        if (threadIdx.x == 0) tl_mma_flag(redo, item, batch * ntq, redo_item);
        if (redo_item) continue;  // attention.cu's kernel writes this item
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float lt = l[r];
            lt += __shfl_xor_sync(TL_FULL_MASK, lt, 1);
            lt += __shfl_xor_sync(TL_FULL_MASK, lt, 2);
            const long long i = ia + 8 * r;
            if (i < n_q) {
                const bool ok = !(lt == 0.0f);  // rows without weight give 0
                float* orow = out + tl_ooff(L, b) + i * L.o_ld;
#pragma unroll
                for (int n = 0; n < DP / 8; ++n)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int col = 8 * n + 2 * t + e;
                        if (col < d) orow[col] = ok ? o[n][2 * r + e] / lt : 0.0f;
                    }
                if (t == 0) lse[b * n_q + i] = ok ? (m[r] + log2f(lt)) * TL_LN2 : -INFINITY;
            }
        }
    }
}

// -- dQ: item = (b, 64 query rows), looping over 64-key steps ----------------------------------
// dP = dO V^T first (V_j landed), then S = Q K^T (K_j); V_{j+1} loads during S, the softmax and
// dQ += dS K_j, and K_{j+1} during the next step's dP.
template <int DP, bool SPLIT>
__device__ void tl_flash_attention_mma_dq_tc(const float* __restrict__ q, const float* __restrict__ k,
                                             const float* __restrict__ v, TlAttnMask M, const float* __restrict__ lse,
                                             const float* __restrict__ dd, const float* __restrict__ dout,
                                             float* __restrict__ dq, long long batch, long long n_q, long long n_k,
                                             int d, float scale, int vec, TlAttnLay L, int* __restrict__ redo) {
    constexpr int P = DP + 4;
    extern __shared__ float4 tl_smem4[];
    float* Qs = reinterpret_cast<float*>(tl_smem4);  // [64][P], q * c
    float* Gs = Qs + 64 * P;                          // dout
    float* Ks = Gs + 64 * P;
    float* Vs = Ks + 64 * P;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const float c2 = scale * TL_LOG2E;
    const float one[2] = {1.0f, 1.0f};
    const long long ntq = (n_q + TL_MMA_ROWS - 1) / TL_MMA_ROWS;
    for (long long item = blockIdx.x; item < batch * ntq; item += gridDim.x) {
        const long long b = item / ntq, i0 = (item - b * ntq) * TL_MMA_ROWS;
        const float* mb = M.mode ? tl_mask_base(M, b) : nullptr;
        const float* kb = k + tl_koff(L, b);
        const float* vb = v + tl_koff(L, b);
        tl_cp_wait<0>();
        __syncthreads();
        tl_stage<DP, 64, false>(Qs, P, q + tl_qoff(L, b), i0, n_q, d, L.q_ld, c2, vec);
        tl_stage<DP, 64, false>(Gs, P, dout + tl_ooff(L, b), i0, n_q, d, L.o_ld, 1.0f, vec);
        tl_stage<DP, 64, true>(Vs, P, vb, 0, n_k, d, L.k_ld, 1.0f, vec);
        tl_cp_commit();
        tl_stage<DP, 64, true>(Ks, P, kb, 0, n_k, d, L.k_ld, 1.0f, vec);
        tl_cp_commit();
        const long long ia = i0 + w * 16 + g;
        float l2[2], dr[2], acc[DP / 8][4];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const long long i = ia + 8 * r;
            l2[r] = (i < n_q) ? lse[b * n_q + i] * TL_LOG2E : -INFINITY;
            dr[r] = (i < n_q) ? dd[b * n_q + i] : 0.0f;
        }
#pragma unroll
        for (int n = 0; n < DP / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
        bool bad = false;
        const long long kend = M.causal ? min(n_k, i0 + TL_MMA_ROWS) : n_k;
        for (long long j0 = 0; j0 < kend; j0 += TL_BC) {
            tl_cp_wait<1>();  // V_j landed
            __syncthreads();
            float dp[8][4];
            tl_mma_scores<DP, 8, SPLIT>(dp, Gs, w * 16, Vs, g, t);
            tl_cp_wait<0>();  // K_j landed
            __syncthreads();  // K_j visible; everyone is done reading V_j
            if (j0 + TL_BC < kend) tl_stage<DP, 64, true>(Vs, P, vb, j0 + TL_BC, n_k, d, L.k_ld, 1.0f, vec);
            tl_cp_commit();
            float s[8][4];
            tl_mma_scores<DP, 8, SPLIT>(s, Qs, w * 16, Ks, g, t);
            bad |= tl_any_nan(s) | tl_any_nan(dp);
#pragma unroll
            for (int n = 0; n < 8; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int r = e >> 1;
                    bool live;
                    const float x = tl_masked(s[n][e], ia + 8 * r, j0 + 8 * n + 2 * t + (e & 1), n_q, n_k, M, mb, &live);
                    const float p = (live && l2[r] != -INFINITY) ? exp2f(x - l2[r]) : 0.0f;
                    s[n][e] = live ? p * (dp[n][e] - dr[r]) : 0.0f;  // dS
                }
            tl_mma_accum_all<DP, 8, SPLIT, false>(acc, s, Ks, one, g, t);
            __syncthreads();  // everyone is done reading K_j
            if (j0 + TL_BC < kend) tl_stage<DP, 64, true>(Ks, P, kb, j0 + TL_BC, n_k, d, L.k_ld, 1.0f, vec);
            tl_cp_commit();
        }
        bad |= tl_any_nan(acc);
        const int redo_item = __syncthreads_or(bad);
        if (threadIdx.x == 0) tl_mma_flag(redo, item, batch * ntq, redo_item);
        if (redo_item) continue;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const long long i = ia + 8 * r;
            if (i < n_q) {
                float* row = dq + tl_qoff(L, b) + i * L.q_ld;
#pragma unroll
                for (int n = 0; n < DP / 8; ++n)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int col = 8 * n + 2 * t + e;
                        if (col < d) row[col] = acc[n][2 * r + e] * scale;
                    }
            }
        }
    }
}

// -- dK, dV: item = (b, 64 key rows), looping over query steps of 8 NB rows ---------------------
// Transposed scores (rows = keys, columns = queries): S^T = K (q c)^T, dP^T = V dO^T, then
// dV += P^T dO and dK += dS^T (q c) (times ln 2 at the end). Q and dO of the step are staged
// synchronously (with lse and D); a block holds only one query step at a time.
template <int DP, int NB, bool SPLIT>
__device__ void tl_flash_attention_mma_dkv_tc(const float* __restrict__ q, const float* __restrict__ k,
                                              const float* __restrict__ v, TlAttnMask M,
                                              const float* __restrict__ lse, const float* __restrict__ dd,
                                              const float* __restrict__ dout, float* __restrict__ dk,
                                              float* __restrict__ dv, long long batch, long long n_q,
                                              long long n_k, int d, float scale, int vec, TlAttnLay L,
                                              int* __restrict__ redo) {
    constexpr int P = DP + 4, BQ = 8 * NB;
    extern __shared__ float4 tl_smem4[];
    float* Ks = reinterpret_cast<float*>(tl_smem4);  // [64][P]
    float* Vs = Ks + 64 * P;
    float* Qs = Vs + 64 * P;                          // [BQ][P], q * c
    float* Gs = Qs + BQ * P;                          // dout
    float* L2 = Gs + BQ * P;                          // [BQ] lse in base 2
    float* Dd = L2 + BQ;                              // [BQ]
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const float c2 = scale * TL_LOG2E;
    const float one[2] = {1.0f, 1.0f};
    const long long ntk = (n_k + TL_MMA_ROWS - 1) / TL_MMA_ROWS;
    for (long long item = blockIdx.x; item < batch * ntk; item += gridDim.x) {
        const long long b = item / ntk, j0 = (item - b * ntk) * TL_MMA_ROWS;
        const float* mb = M.mode ? tl_mask_base(M, b) : nullptr;
        __syncthreads();
        tl_stage<DP, 64, false>(Ks, P, k + tl_koff(L, b), j0, n_k, d, L.k_ld, 1.0f, vec);
        tl_stage<DP, 64, false>(Vs, P, v + tl_koff(L, b), j0, n_k, d, L.k_ld, 1.0f, vec);
        const long long ja = j0 + w * 16 + g;  // this thread's keys: ja and ja + 8
        float ak[DP / 8][4], av[DP / 8][4];
#pragma unroll
        for (int n = 0; n < DP / 8; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) ak[n][e] = av[n][e] = 0.0f;
        bool bad = false;
        const long long istart = M.causal ? (j0 / BQ) * BQ : 0;
        for (long long i0 = istart; i0 < n_q; i0 += BQ) {
            __syncthreads();  // everyone is done with the previous step's Q, dO, L2, Dd
            tl_stage<DP, BQ, false>(Qs, P, q + tl_qoff(L, b), i0, n_q, d, L.q_ld, c2, vec);
            tl_stage<DP, BQ, false>(Gs, P, dout + tl_ooff(L, b), i0, n_q, d, L.o_ld, 1.0f, vec);
            if (threadIdx.x < BQ) {
                const long long i = i0 + threadIdx.x;
                L2[threadIdx.x] = (i < n_q) ? lse[b * n_q + i] * TL_LOG2E : -INFINITY;
                Dd[threadIdx.x] = (i < n_q) ? dd[b * n_q + i] : 0.0f;
            }
            __syncthreads();
            float s[NB][4], dp[NB][4];
            tl_mma_scores<DP, NB, SPLIT>(s, Ks, w * 16, Qs, g, t);
            tl_mma_scores<DP, NB, SPLIT>(dp, Vs, w * 16, Gs, g, t);
            bad |= tl_any_nan(s) | tl_any_nan(dp);
#pragma unroll
            for (int n = 0; n < NB; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int ic = 8 * n + 2 * t + (e & 1);
                    bool live;
                    const float x = tl_masked(s[n][e], i0 + ic, ja + 8 * (e >> 1), n_q, n_k, M, mb, &live);
                    const float l2 = L2[ic];
                    const float p = (x != -INFINITY && l2 != -INFINITY) ? exp2f(x - l2) : 0.0f;
                    s[n][e] = p;
                    dp[n][e] = live ? p * (dp[n][e] - Dd[ic]) : 0.0f;  // dS^T
                }
            tl_mma_accum_all<DP, NB, SPLIT, false>(av, s, Gs, one, g, t);
            tl_mma_accum_all<DP, NB, SPLIT, false>(ak, dp, Qs, one, g, t);
        }
        bad |= tl_any_nan(ak) | tl_any_nan(av);
        const int redo_item = __syncthreads_or(bad);
        if (threadIdx.x == 0) tl_mma_flag(redo, item, batch * ntk, redo_item);
        if (redo_item) continue;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const long long j = ja + 8 * r;
            if (j < n_k) {
                const long long base = tl_koff(L, b) + j * L.k_ld;
#pragma unroll
                for (int n = 0; n < DP / 8; ++n)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int col = 8 * n + 2 * t + e;
                        if (col < d) {
                            dk[base + col] = ak[n][2 * r + e] * TL_LN2;  // (sum dS q c) ln 2 = scale sum dS q
                            dv[base + col] = av[n][2 * r + e];
                        }
                    }
            }
        }
    }
}

#define TL_ATTN_MMA_INSTANCE(DP, NB, SPLIT, SUF, MINB_F, MINB_Q, MINB_KV)                                        \
    extern "C" __global__ void __launch_bounds__(TL_NT, MINB_F) tl_flash_attention_mma_fwd_d##DP##SUF(         \
        const float* q, const float* k, const float* v, TL_ATTN_MASK_ARGS, float* out, float* lse,             \
        long long batch, long long n_q, long long n_k, int d, float scale, int vec, TlAttnLay L, int* redo) {  \
        TlAttnMask M = TL_ATTN_MASK;                                                                           \
        tl_flash_attention_mma_fwd_tc<DP, SPLIT>(q, k, v, M, out, lse, batch, n_q, n_k, d, scale, vec, L, redo); \
    }                                                                                                          \
    extern "C" __global__ void __launch_bounds__(TL_NT, MINB_Q) tl_flash_attention_mma_dq_d##DP##SUF(          \
        const float* q, const float* k, const float* v, TL_ATTN_MASK_ARGS, const float* lse, const float* dd,  \
        const float* dout, float* dq, long long batch, long long n_q, long long n_k, int d, float scale, int vec, \
        TlAttnLay L, int* redo) {                                                                              \
        TlAttnMask M = TL_ATTN_MASK;                                                                           \
        tl_flash_attention_mma_dq_tc<DP, SPLIT>(q, k, v, M, lse, dd, dout, dq, batch, n_q, n_k, d, scale, vec, L, \
                                                redo);                                                          \
    }                                                                                                          \
    extern "C" __global__ void __launch_bounds__(TL_NT, MINB_KV) tl_flash_attention_mma_dkv_d##DP##SUF(        \
        const float* q, const float* k, const float* v, TL_ATTN_MASK_ARGS, const float* lse, const float* dd,  \
        const float* dout, float* dk, float* dv, long long batch, long long n_q, long long n_k, int d,         \
        float scale, int vec, TlAttnLay L, int* redo) {                                                        \
        TlAttnMask M = TL_ATTN_MASK;                                                                           \
        tl_flash_attention_mma_dkv_tc<DP, NB, SPLIT>(q, k, v, M, lse, dd, dout, dk, dv, batch, n_q, n_k, d, scale, \
                                                     vec, L, redo);                                             \
    }

#endif  // __CUDA_ARCH__ >= 800
