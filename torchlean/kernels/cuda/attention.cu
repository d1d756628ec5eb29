// Flash attention (forward, dQ, fused dK/dV) over float32 (batch, n, d) buffers.
//
// Tiled kernels (head dim padded to DP = 32, 64 or 128; any d <= 128 runs in the next
// instantiation with the tail zero-filled; DP >= 32 because the forward's P V step gives each
// thread float4 columns t*32 + cg*4 for t < DP/32), 128 threads per block. Backward
// (tl_flash_attention_bwd_dq_d*, tl_flash_attention_bwd_dkv_d*): tiles of 64 rows x 64 columns,
// each thread a 4 x 8 register micro-tile of scores (rows rg*4 .. rg*4+3, columns cg*4 .. cg*4+3
// and 32+cg*4 .. 32+cg*4+3, rg = tid / 8, cg = tid % 8, so the 8 threads of a row are adjacent
// lanes and row reductions are 3 xor-shuffles). Operand tiles are stored transposed in shared
// memory ([dim][row], row length TL_LD = 68 floats) so each k-step reads one float4 of rows and two
// float4s of columns; inner products are explicit fmaf (the module compiles with --fmad=false).
// Scores are kept in base 2: q is multiplied by c = scale * log2(e) as it is staged, and exp2f is
// used throughout (lse is converted back to natural units when written).
//
// Mask modes: 0 none (the mask pointer is never read), 1 fill (entry 0 -> score -1000 nats),
// 2 hard (entry 0 -> weight exactly 0), 3 add (entry added; -inf -> weight exactly 0). The mask
// entry of (b, i, j) is mask[(b / heads) s_n + (b % heads) s_h + i s_q + j s_k]. Causal: key j
// allowed for query i iff j <= i; key tiles entirely above the diagonal are skipped.
//
// Work: a 1-D grid-stride loop over (batch, tile) items; every output element is written by the
// one block that owns its tile, accumulating in a fixed order: deterministic, no atomics.
// Generic fallback kernels (one warp per row, any d <= 32 * TL_NPL) serve d > 128.
//
// Layouts: every kernel takes a TlAttnLay (by value) saying where row i of (batch, head) pair b
// lives for each role -- q and dq, k v dk dv, out and dout: base + (b / heads) s_n + (b % heads) s_h
// + i ld, the row's d floats contiguous. The unpacked primitives pass heads 1, s_n = n d, ld = d;
// the packed ones read q, k, v from one (batch, n, 3, heads, d) buffer (ld = 3 heads d) and write
// out (batch, n, heads, d) and dqkv in place of the copies that would move the heads. lse and D
// stay (batch heads, n). The arithmetic does not depend on the layout: same bits either way.
//
// Forward (tl_flash_attention_fwd_d*): 64 query rows per block, row-major Q/K tiles, a 4 x 8
// micro-tile and cp.async-staged K/V tiles. All tiled kernels take `vec`: 1 reads tiles as coalesced
// float4 rows (the launcher passes it only when d % 4 == 0 and every operand pointer is 16-byte
// aligned), 0 scalar loads.
//
// Role: on GPUs with tensor cores (sm_80+) attention_mma.cu computes every 64-row item first; these
// float32 kernels then run only the items it flagged in `redo` (non-finite operands or results),
// which gives those IEEE semantics, and return at once when redo[items] (the flagged count) is 0.
// Before sm_80 they run every item (redo = null).

#include "attention_common.cuh"

// sectors; the transposed shared stores of a warp hit 16 consecutive rows at two chunk offsets
// 16 banks apart: conflict-free. Otherwise consecutive threads take consecutive rows (scalar).
template <int DP>
__device__ __forceinline__ void tl_load_t(float* dst, const float* src, long long row0, long long nrows, int d,
                                          long long ld, float mul, int vec) {
    if (vec) {
        for (int idx = threadIdx.x; idx < 16 * DP; idx += TL_NT) {
            const int r = (idx >> 1) & 63, c = ((idx & 1) + 2 * (idx >> 7)) * 4;
            float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (row0 + r < nrows && c < d) {
                x = *reinterpret_cast<const float4*>(src + (row0 + r) * ld + c);
                x.x = x.x * mul; x.y = x.y * mul; x.z = x.z * mul; x.w = x.w * mul;
            }
            dst[(c + 0) * TL_LD + r] = x.x;
            dst[(c + 1) * TL_LD + r] = x.y;
            dst[(c + 2) * TL_LD + r] = x.z;
            dst[(c + 3) * TL_LD + r] = x.w;
        }
        return;
    }
    for (int idx = threadIdx.x; idx < 64 * DP; idx += TL_NT) {
        int r = idx & 63, c = idx >> 6;
        float x = 0.0f;
        if (row0 + r < nrows && c < d) x = src[(row0 + r) * ld + c] * mul;
        dst[c * TL_LD + r] = x;
    }
}

// acc[r][c] += sum_k A[k][rg*4 + r] * B[k][col(c)] over k < DP, A and B transposed tiles.
template <int DP>
__device__ __forceinline__ void tl_mma_4x8(float acc[4][8], const float* A, const float* B, int rg, int cg) {
#pragma unroll 4
    for (int k = 0; k < DP; ++k) {
        float4 a = *reinterpret_cast<const float4*>(A + k * TL_LD + rg * 4);
        float4 b0 = *reinterpret_cast<const float4*>(B + k * TL_LD + cg * 4);
        float4 b1 = *reinterpret_cast<const float4*>(B + k * TL_LD + 32 + cg * 4);
        float av[4] = {a.x, a.y, a.z, a.w};
        float bv[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
        for (int r = 0; r < 4; ++r)
#pragma unroll
            for (int c = 0; c < 8; ++c) acc[r][c] = fmaf(av[r], bv[c], acc[r][c]);
    }
}

// acc + a.x b.x + a.y b.y + a.z b.z + a.w b.w: four fmaf, in that order.
__device__ __forceinline__ float tl_fma_dot4(float4 a, float4 b, float acc) {
    return fmaf(a.w, b.w, fmaf(a.z, b.z, fmaf(a.y, b.y, fmaf(a.x, b.x, acc))));
}

__device__ __forceinline__ int tl_col(int cg, int c) { return (c < 4) ? cg * 4 + c : 32 + cg * 4 + (c - 4); }

// The backward's two score micro-tiles from zero: s = A1^T B1 and dp = A2^T B2 (tl_mma_4x8).
template <int DP>
__device__ __forceinline__ void tl_scores_4x8(float s[4][8], float dp[4][8], const float* A1, const float* B1,
                                              const float* A2, const float* B2, int rg, int cg) {
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int c = 0; c < 8; ++c) { s[r][c] = 0.0f; dp[r][c] = 0.0f; }
    tl_mma_4x8<DP>(s, A1, B1, rg, cg);
    tl_mma_4x8<DP>(dp, A2, B2, rg, cg);
}

// row[tl_col(cg, c)] = v[c] for c < 8: two float4 stores.
__device__ __forceinline__ void tl_store_row8(float* row, int cg, const float v[8]) {
    *reinterpret_cast<float4*>(row + cg * 4) = make_float4(v[0], v[1], v[2], v[3]);
    *reinterpret_cast<float4*>(row + 32 + cg * 4) = make_float4(v[4], v[5], v[6], v[7]);
}

// -- forward ---------------------------------------------------------------------------------
// 128 threads, BR = 16 RT query rows x 64 keys per step, each thread an RT x 8 register micro-tile
// of scores: rows rg*RT + r (rg = tid / 8), key columns cg + 8c (cg = tid % 8, c < 8), so the 8
// threads of a row are adjacent lanes (row reductions: 3 xor-shuffles). Q (scaled by c) and K are
// row-major in shared memory with row pitch DP + 4: a k-step of 4 reads one float4 per row (the 8
// lanes of a quarter-warp share it: broadcast) and one float4 per column (8 consecutive key rows at
// pitch DP + 4: distinct banks). P goes to shared memory transposed ([key][query], pitch BR + 4,
// float4 stores of 4 rows, conflict-free) and O += P V reads one float4 of P and DP/32 float4s of
// V per key (O columns t*32 + cg*4 + e). K and V tiles are staged with cp.async (16-byte, coalesced
// along d) into single buffers, staggered: V_j loads while S_j = Q K_j^T is computed, K_{j+1}
// while the softmax and P V of tile j run. Without vec (d % 4 != 0 or unaligned rows) the same
// buffers are filled by scalar loads. The key tile stays 64 wide (same online-softmax rescales).

template <int DP, int RT>
__device__ void tl_flash_attention_fwd_tiled(const float* __restrict__ q, const float* __restrict__ k,
                                   const float* __restrict__ v, TlAttnMask M, float* __restrict__ out,
                                   float* __restrict__ lse, long long batch, long long n_q, long long n_k, int d,
                                   float scale, int vec, TlAttnLay L, const int* __restrict__ redo) {
    constexpr int BR = 16 * RT, QP = DP + 4, PP = BR + 4;
    extern __shared__ float4 tl_smem4[];
    float* smem = reinterpret_cast<float*>(tl_smem4);
    float* Qs = smem;             // [BR][QP], q * c
    float* Ks = Qs + BR * QP;     // [64][QP]
    float* Vs = Ks + 64 * QP;     // [64][DP]
    float* PT = Vs + 64 * DP;     // [64 keys][PP]
    const int tid = threadIdx.x, cg = tid & 7, rg = tid >> 3;
    const float c2 = scale * TL_LOG2E;
    const long long ntq = (n_q + BR - 1) / BR;
    if (redo != nullptr && redo[batch * ntq] == 0) return;
    for (long long item = blockIdx.x; item < batch * ntq; item += gridDim.x) {
        if (redo != nullptr && redo[item] == 0) continue;
        const long long b = item / ntq, i0 = (item - b * ntq) * BR;
        const float* mb = M.mode ? tl_mask_base(M, b) : nullptr;
        const float* kb = k + tl_koff(L, b);
        const float* vb = v + tl_koff(L, b);
        tl_cp_wait<0>();
        __syncthreads();  // the previous item's readers are done with every buffer
        tl_stage<DP, BR, false>(Qs, QP, q + tl_qoff(L, b), i0, n_q, d, L.q_ld, c2, vec);
        tl_stage<DP, 64, true>(Ks, QP, kb, 0, n_k, d, L.k_ld, 1.0f, vec);
        tl_cp_commit();
        float m[RT], l[RT], o[RT][DP / 8];
#pragma unroll
        for (int r = 0; r < RT; ++r) {
            m[r] = -INFINITY;
            l[r] = 0.0f;
#pragma unroll
            for (int t = 0; t < DP / 8; ++t) o[r][t] = 0.0f;
        }
        const long long kend = M.causal ? min(n_k, i0 + BR) : n_k;
        for (long long j0 = 0; j0 < kend; j0 += TL_BC) {
            tl_cp_wait<0>();
            __syncthreads();  // K_j (and Q) visible; everyone is done with V and PT of tile j-1
            tl_stage<DP, 64, true>(Vs, DP, vb, j0, n_k, d, L.k_ld, 1.0f, vec);
            tl_cp_commit();
            float s[RT][8];
#pragma unroll
            for (int r = 0; r < RT; ++r)
#pragma unroll
                for (int c = 0; c < 8; ++c) s[r][c] = 0.0f;
#pragma unroll 1  // unrolling further spills at DP = 64
            for (int kk = 0; kk < DP; kk += 4) {
                float4 bk[8];
#pragma unroll
                for (int c = 0; c < 8; ++c) bk[c] = *reinterpret_cast<const float4*>(Ks + (cg + 8 * c) * QP + kk);
#pragma unroll
                for (int r = 0; r < RT; ++r) {
                    const float4 a = *reinterpret_cast<const float4*>(Qs + (rg * RT + r) * QP + kk);
#pragma unroll
                    for (int c = 0; c < 8; ++c) s[r][c] = tl_fma_dot4(a, bk[c], s[r][c]);
                }
            }
            __syncthreads();  // everyone is done reading K_j
            if (j0 + TL_BC < kend) tl_stage<DP, 64, true>(Ks, QP, kb, j0 + TL_BC, n_k, d, L.k_ld, 1.0f, vec);
            tl_cp_commit();
#pragma unroll
            for (int r = 0; r < RT; ++r) {
                const long long i = i0 + rg * RT + r;
                float mx = -INFINITY;
#pragma unroll
                for (int c = 0; c < 8; ++c) {
                    bool live;
                    s[r][c] = tl_masked(s[r][c], i, j0 + cg + 8 * c, n_q, n_k, M, mb, &live);
                    mx = fmaxf(mx, s[r][c]);
                }
                mx = fmaxf(mx, __shfl_xor_sync(TL_FULL_MASK, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(TL_FULL_MASK, mx, 2));
                mx = fmaxf(mx, __shfl_xor_sync(TL_FULL_MASK, mx, 4));
                const float m_new = fmaxf(m[r], mx);
                const float m_use = (m_new == -INFINITY) ? 0.0f : m_new;
                const float alpha = exp2f(m[r] - m_use);
                m[r] = m_new;
                float ps = 0.0f;
#pragma unroll
                for (int c = 0; c < 8; ++c) {
                    s[r][c] = exp2f(s[r][c] - m_use);
                    ps += s[r][c];
                }
                l[r] = l[r] * alpha + ps;
#pragma unroll
                for (int t = 0; t < DP / 8; ++t) o[r][t] *= alpha;
            }
#pragma unroll
            for (int c = 0; c < 8; ++c)
#pragma unroll
                for (int h = 0; h < RT / 4; ++h)
                    *reinterpret_cast<float4*>(PT + (cg + 8 * c) * PP + rg * RT + 4 * h) =
                        make_float4(s[4 * h][c], s[4 * h + 1][c], s[4 * h + 2][c], s[4 * h + 3][c]);
            tl_cp_wait<1>();  // V_j landed (K_{j+1} may still be in flight)
            __syncthreads();  // P and V_j visible
            // O += P V: thread columns t*32 + cg*4 + e (e < 4), t < DP/32
#pragma unroll 4
            for (int j = 0; j < TL_BC; ++j) {
                float pv[RT];
#pragma unroll
                for (int h = 0; h < RT / 4; ++h) {
                    const float4 p4 = *reinterpret_cast<const float4*>(PT + j * PP + rg * RT + 4 * h);
                    pv[4 * h] = p4.x; pv[4 * h + 1] = p4.y; pv[4 * h + 2] = p4.z; pv[4 * h + 3] = p4.w;
                }
#pragma unroll
                for (int t = 0; t < DP / 32; ++t) {
                    const float4 vv = *reinterpret_cast<const float4*>(Vs + j * DP + t * 32 + cg * 4);
#pragma unroll
                    for (int r = 0; r < RT; ++r) {
                        o[r][t * 4 + 0] = fmaf(pv[r], vv.x, o[r][t * 4 + 0]);
                        o[r][t * 4 + 1] = fmaf(pv[r], vv.y, o[r][t * 4 + 1]);
                        o[r][t * 4 + 2] = fmaf(pv[r], vv.z, o[r][t * 4 + 2]);
                        o[r][t * 4 + 3] = fmaf(pv[r], vv.w, o[r][t * 4 + 3]);
                    }
                }
            }
        }
#pragma unroll
        for (int r = 0; r < RT; ++r) {
            float lt = l[r];
            lt += __shfl_xor_sync(TL_FULL_MASK, lt, 1);
            lt += __shfl_xor_sync(TL_FULL_MASK, lt, 2);
            lt += __shfl_xor_sync(TL_FULL_MASK, lt, 4);
            const long long i = i0 + rg * RT + r;
            if (i < n_q) {
                const bool ok = !(lt == 0.0f);  // NaN rows stay NaN; rows without weight give 0
                float* orow = out + tl_ooff(L, b) + i * L.o_ld;
#pragma unroll
                for (int t = 0; t < DP / 32; ++t)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        int col = t * 32 + cg * 4 + e;
                        if (col < d) orow[col] = ok ? o[r][t * 4 + e] / lt : 0.0f;
                    }
                if (cg == 0) lse[b * n_q + i] = ok ? (m[r] + log2f(lt)) * TL_LN2 : -INFINITY;
            }
        }
    }
}

// -- D = rowsum(dout * out): one warp per row (b, i), fixed order; D is (batch heads, n_q) ---------
extern "C" __global__ void tl_flash_attention_bwd_rowdot(const float* __restrict__ dout, const float* __restrict__ out,
                                          float* __restrict__ dd, long long rows, long long d, long long n_q,
                                          TlAttnLay L) {
    const int lane = threadIdx.x & 31;
    const long long warps = (long long)gridDim.x * (blockDim.x >> 5);
    for (long long r = TL_TID >> 5; r < rows; r += warps) {
        const long long b = r / n_q, off = tl_ooff(L, b) + (r - b * n_q) * L.o_ld;
        float acc = 0.0f;
        for (long long c = lane; c < d; c += 32) acc = fmaf(dout[off + c], out[off + c], acc);
        acc = tl_warp_sum_f(acc);
        if (lane == 0) dd[r] = acc;
    }
}

// -- dQ: a block owns a query tile and loops over key tiles -----------------------------------
template <int DP>
__device__ void tl_flash_attention_bwd_dq_tiled(const float* __restrict__ q, const float* __restrict__ k,
                                    const float* __restrict__ v, TlAttnMask M, const float* __restrict__ lse,
                                    const float* __restrict__ dd, const float* __restrict__ dout,
                                    float* __restrict__ dq, long long batch, long long n_q, long long n_k, int d,
                                    float scale, int vec, TlAttnLay L, const int* __restrict__ redo) {
    extern __shared__ float4 tl_smem4[];
    float* smem = reinterpret_cast<float*>(tl_smem4);
    float* QsT = smem;                // q * c
    float* GsT = QsT + DP * TL_LD;    // dout
    float* KsT = GsT + DP * TL_LD;
    float* VsT = KsT + DP * TL_LD;
    float* Ss = VsT + DP * TL_LD;     // dS [64 queries][TL_LD]
    const int tid = threadIdx.x, cg = tid & 7, rg = tid >> 3;
    const float c2 = scale * TL_LOG2E;
    const long long ntq = (n_q + TL_BR - 1) / TL_BR;
    if (redo != nullptr && redo[batch * ntq] == 0) return;
    for (long long item = blockIdx.x; item < batch * ntq; item += gridDim.x) {
        if (redo != nullptr && redo[item] == 0) continue;
        const long long b = item / ntq, i0 = (item - b * ntq) * TL_BR;
        const float* mb = M.mode ? tl_mask_base(M, b) : nullptr;
        __syncthreads();
        tl_load_t<DP>(QsT, q + tl_qoff(L, b), i0, n_q, d, L.q_ld, c2, vec);
        tl_load_t<DP>(GsT, dout + tl_ooff(L, b), i0, n_q, d, L.o_ld, 1.0f, vec);
        float l2[4], dr[4], acc[4][DP / 8];
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const long long i = i0 + rg * 4 + r;
            l2[r] = (i < n_q) ? lse[b * n_q + i] * TL_LOG2E : -INFINITY;
            dr[r] = (i < n_q) ? dd[b * n_q + i] : 0.0f;
#pragma unroll
            for (int t = 0; t < DP / 8; ++t) acc[r][t] = 0.0f;
        }
        const long long kend = M.causal ? min(n_k, i0 + TL_BR) : n_k;
        for (long long j0 = 0; j0 < kend; j0 += TL_BC) {
            __syncthreads();
            tl_load_t<DP>(KsT, k + tl_koff(L, b), j0, n_k, d, L.k_ld, 1.0f, vec);
            tl_load_t<DP>(VsT, v + tl_koff(L, b), j0, n_k, d, L.k_ld, 1.0f, vec);
            __syncthreads();
            float s[4][8], dp[4][8];
            tl_scores_4x8<DP>(s, dp, QsT, KsT, GsT, VsT, rg, cg);
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const long long i = i0 + rg * 4 + r;
                float dsv[8];
#pragma unroll
                for (int c = 0; c < 8; ++c) {
                    bool live;
                    float t = tl_masked(s[r][c], i, j0 + tl_col(cg, c), n_q, n_k, M, mb, &live);
                    float p = (live && l2[r] != -INFINITY) ? exp2f(t - l2[r]) : 0.0f;
                    dsv[c] = live ? p * (dp[r][c] - dr[r]) : 0.0f;
                }
                tl_store_row8(Ss + (rg * 4 + r) * TL_LD, cg, dsv);
            }
            __syncthreads();
            // acc[r][t] += sum_j dS[row][j] K[j][cg + 8t]
#pragma unroll 2
            for (int j = 0; j < TL_BC; j += 4) {
                float4 sv[4];
#pragma unroll
                for (int r = 0; r < 4; ++r) sv[r] = *reinterpret_cast<const float4*>(Ss + (rg * 4 + r) * TL_LD + j);
#pragma unroll
                for (int t = 0; t < DP / 8; ++t) {
                    float4 k4 = *reinterpret_cast<const float4*>(KsT + (cg + 8 * t) * TL_LD + j);
#pragma unroll
                    for (int r = 0; r < 4; ++r) acc[r][t] = tl_fma_dot4(sv[r], k4, acc[r][t]);
                }
            }
        }
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const long long i = i0 + rg * 4 + r;
            if (i < n_q) {
#pragma unroll
                for (int t = 0; t < DP / 8; ++t) {
                    int col = cg + 8 * t;
                    if (col < d) dq[tl_qoff(L, b) + i * L.q_ld + col] = acc[r][t] * scale;
                }
            }
        }
    }
}

// -- dK, dV: a block owns a key tile and loops over query tiles --------------------------------
template <int DP>
__device__ void tl_flash_attention_bwd_dkv_tiled(const float* __restrict__ q, const float* __restrict__ k,
                                     const float* __restrict__ v, TlAttnMask M, const float* __restrict__ lse,
                                     const float* __restrict__ dd, const float* __restrict__ dout,
                                     float* __restrict__ dk, float* __restrict__ dv, long long batch, long long n_q,
                                     long long n_k, int d, float scale, int vec, TlAttnLay L,
                                     const int* __restrict__ redo) {
    extern __shared__ float4 tl_smem4[];
    float* smem = reinterpret_cast<float*>(tl_smem4);
    float* KsT = smem;                // [DP][TL_LD] keys
    float* VsT = KsT + DP * TL_LD;
    float* QsT = VsT + DP * TL_LD;    // q * c, [DP][TL_LD] queries
    float* GsT = QsT + DP * TL_LD;    // dout
    float* Ps = GsT + DP * TL_LD;     // [64 keys][TL_LD queries]
    float* Ss = Ps + 64 * TL_LD;      // dS, same layout
    float* L2 = Ss + 64 * TL_LD;      // [64] lse in base 2
    float* Dd = L2 + 64;              // [64]
    const int tid = threadIdx.x, cg = tid & 7, rg = tid >> 3;
    const float c2 = scale * TL_LOG2E;
    const long long ntk = (n_k + TL_BC - 1) / TL_BC;
    if (redo != nullptr && redo[batch * ntk] == 0) return;
    for (long long item = blockIdx.x; item < batch * ntk; item += gridDim.x) {
        if (redo != nullptr && redo[item] == 0) continue;
        const long long b = item / ntk, j0 = (item - b * ntk) * TL_BC;
        const float* mb = M.mode ? tl_mask_base(M, b) : nullptr;
        __syncthreads();
        tl_load_t<DP>(KsT, k + tl_koff(L, b), j0, n_k, d, L.k_ld, 1.0f, vec);
        tl_load_t<DP>(VsT, v + tl_koff(L, b), j0, n_k, d, L.k_ld, 1.0f, vec);
        float ak[4][DP / 8], av[4][DP / 8];
#pragma unroll
        for (int r = 0; r < 4; ++r)
#pragma unroll
            for (int t = 0; t < DP / 8; ++t) { ak[r][t] = 0.0f; av[r][t] = 0.0f; }
        const long long istart = M.causal ? (j0 / TL_BR) * TL_BR : 0;
        for (long long i0 = istart; i0 < n_q; i0 += TL_BR) {
            __syncthreads();
            tl_load_t<DP>(QsT, q + tl_qoff(L, b), i0, n_q, d, L.q_ld, c2, vec);
            tl_load_t<DP>(GsT, dout + tl_ooff(L, b), i0, n_q, d, L.o_ld, 1.0f, vec);
            if (tid < 64) {
                const long long i = i0 + tid;
                L2[tid] = (i < n_q) ? lse[b * n_q + i] * TL_LOG2E : -INFINITY;
                Dd[tid] = (i < n_q) ? dd[b * n_q + i] : 0.0f;
            }
            __syncthreads();
            // transposed scores: rows = keys (rg*4 + r), columns = queries tl_col(cg, c)
            float s[4][8], dp[4][8];
            tl_scores_4x8<DP>(s, dp, KsT, QsT, VsT, GsT, rg, cg);
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const long long j = j0 + rg * 4 + r;
                float pv[8], sv[8];
#pragma unroll
                for (int c = 0; c < 8; ++c) {
                    const int ic = tl_col(cg, c);
                    bool live;
                    float t = tl_masked(s[r][c], i0 + ic, j, n_q, n_k, M, mb, &live);
                    const float l2 = L2[ic];
                    float p = (t != -INFINITY && l2 != -INFINITY) ? exp2f(t - l2) : 0.0f;
                    pv[c] = p;
                    sv[c] = live ? p * (dp[r][c] - Dd[ic]) : 0.0f;
                }
                tl_store_row8(Ps + (rg * 4 + r) * TL_LD, cg, pv);
                tl_store_row8(Ss + (rg * 4 + r) * TL_LD, cg, sv);
            }
            __syncthreads();
            // av[r][t] += sum_i P[key][i] dout[i][cg + 8t]; ak[r][t] += sum_i dS[key][i] (q c)[i][cg + 8t]
#pragma unroll 1
            for (int i = 0; i < TL_BR; i += 4) {
                float4 pp[4], ss[4];
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    pp[r] = *reinterpret_cast<const float4*>(Ps + (rg * 4 + r) * TL_LD + i);
                    ss[r] = *reinterpret_cast<const float4*>(Ss + (rg * 4 + r) * TL_LD + i);
                }
#pragma unroll
                for (int t = 0; t < DP / 8; ++t) {
                    float4 g4 = *reinterpret_cast<const float4*>(GsT + (cg + 8 * t) * TL_LD + i);
                    float4 q4 = *reinterpret_cast<const float4*>(QsT + (cg + 8 * t) * TL_LD + i);
#pragma unroll
                    for (int r = 0; r < 4; ++r) {
                        av[r][t] = tl_fma_dot4(pp[r], g4, av[r][t]);
                        ak[r][t] = tl_fma_dot4(ss[r], q4, ak[r][t]);
                    }
                }
            }
        }
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const long long j = j0 + rg * 4 + r;
            if (j < n_k) {
#pragma unroll
                for (int t = 0; t < DP / 8; ++t) {
                    int col = cg + 8 * t;
                    if (col < d) {
                        const long long o = tl_koff(L, b) + j * L.k_ld + col;
                        dk[o] = ak[r][t] * TL_LN2;  // (sum dS q c) ln 2 = scale sum dS q
                        dv[o] = av[r][t];
                    }
                }
            }
        }
    }
}


#define TL_ATTN_FWD_INSTANCE(DP, RT, MINB)                                                                      \
    extern "C" __global__ void __launch_bounds__(TL_NT, MINB) tl_flash_attention_fwd_d##DP(                   \
        const float* q, const float* k, const float* v, TL_ATTN_MASK_ARGS, float* out, float* lse,             \
        long long batch, long long n_q, long long n_k, int d, float scale, int vec, TlAttnLay L,               \
        const int* redo) {                                                                                     \
        TlAttnMask M = TL_ATTN_MASK;                                                                           \
        tl_flash_attention_fwd_tiled<DP, RT>(q, k, v, M, out, lse, batch, n_q, n_k, d, scale, vec, L, redo);   \
    }

#define TL_ATTN_BWD_INSTANCE(DP)                                                                               \
    extern "C" __global__ void __launch_bounds__(TL_NT) tl_flash_attention_bwd_dq_d##DP(                      \
        const float* q, const float* k, const float* v, TL_ATTN_MASK_ARGS, const float* lse, const float* dd,  \
        const float* dout, float* dq, long long batch, long long n_q, long long n_k, int d, float scale, int vec, \
        TlAttnLay L, const int* redo) {                                                                        \
        TlAttnMask M = TL_ATTN_MASK;                                                                           \
        tl_flash_attention_bwd_dq_tiled<DP>(q, k, v, M, lse, dd, dout, dq, batch, n_q, n_k, d, scale, vec, L, redo); \
    }                                                                                                          \
    extern "C" __global__ void __launch_bounds__(TL_NT) tl_flash_attention_bwd_dkv_d##DP(                     \
        const float* q, const float* k, const float* v, TL_ATTN_MASK_ARGS, const float* lse, const float* dd,  \
        const float* dout, float* dk, float* dv, long long batch, long long n_q, long long n_k, int d,         \
        float scale, int vec, TlAttnLay L, const int* redo) {                                                  \
        TlAttnMask M = TL_ATTN_MASK;                                                                           \
        tl_flash_attention_bwd_dkv_tiled<DP>(q, k, v, M, lse, dd, dout, dk, dv, batch, n_q, n_k, d, scale, vec, L, \
                                             redo);                                                            \
    }

// (DP, rows per thread, min blocks per SM): BR = 16 RT query rows per block
TL_ATTN_FWD_INSTANCE(32, 4, 2)
TL_ATTN_FWD_INSTANCE(64, 4, 2)
TL_ATTN_FWD_INSTANCE(128, 4, 1)
TL_ATTN_BWD_INSTANCE(32)
TL_ATTN_BWD_INSTANCE(64)
TL_ATTN_BWD_INSTANCE(128)

// -- generic fallback (d > 128): one warp per row, lane holds dims lane + 32 t ------------------
#define TL_NPL 32  // d <= 1024

__device__ __forceinline__ float tl_warp_dot(const float* a, const float* __restrict__ row, int d, int lane) {
    float acc = 0.0f;
#pragma unroll
    for (int t = 0; t < TL_NPL; ++t) {
        int c = lane + 32 * t;
        if (c < d) acc = fmaf(a[t], row[c], acc);
    }
    return tl_warp_sum_f(acc);
}

// A lane's share of a row of d floats: a[t] = row[lane + 32 t] * mul (0 past d).
__device__ __forceinline__ void tl_lane_load(float* a, const float* row, int d, int lane, float mul) {
#pragma unroll
    for (int t = 0; t < TL_NPL; ++t) {
        int c = lane + 32 * t;
        a[t] = (c < d) ? row[c] * mul : 0.0f;
    }
}

extern "C" __global__ void tl_flash_attention_fwd_generic(const float* q, const float* k, const float* v, TL_ATTN_MASK_ARGS,
                                               float* out, float* lse, long long batch, long long n_q,
                                               long long n_k, int d, float scale, TlAttnLay L) {
    TlAttnMask M = TL_ATTN_MASK;
    const int lane = threadIdx.x & 31;
    const long long warps = (long long)gridDim.x * (blockDim.x >> 5);
    const float c2 = scale * TL_LOG2E;
    for (long long row = TL_TID >> 5; row < batch * n_q; row += warps) {
        const long long b = row / n_q, i = row - b * n_q;
        const float* mb = M.mode ? tl_mask_base(M, b) : nullptr;
        const float* qr = q + tl_qoff(L, b) + i * L.q_ld;
        const float* kb = k + tl_koff(L, b);
        const float* vb = v + tl_koff(L, b);
        float qa[TL_NPL], o[TL_NPL] = {};
        tl_lane_load(qa, qr, d, lane, c2);
        float m = -INFINITY, l = 0.0f;
        const long long kend = M.causal ? min(n_k, i + 1) : n_k;
        for (long long j = 0; j < kend; ++j) {
            bool live;
            float s = tl_masked(tl_warp_dot(qa, kb + j * L.k_ld, d, lane), i, j, n_q, n_k, M, mb, &live);
            const float m_new = fmaxf(m, s);
            const float m_use = (m_new == -INFINITY) ? 0.0f : m_new;
            const float alpha = exp2f(m - m_use), p = exp2f(s - m_use);
            m = m_new;
            l = l * alpha + p;
            const float* vr = vb + j * L.k_ld;
#pragma unroll
            for (int t = 0; t < TL_NPL; ++t) {
                int c = lane + 32 * t;
                o[t] = fmaf(p, (c < d) ? vr[c] : 0.0f, o[t] * alpha);
            }
        }
        const bool ok = !(l == 0.0f);
        float* orow = out + tl_ooff(L, b) + i * L.o_ld;
#pragma unroll
        for (int t = 0; t < TL_NPL; ++t) {
            int c = lane + 32 * t;
            if (c < d) orow[c] = ok ? o[t] / l : 0.0f;
        }
        if (lane == 0) lse[row] = ok ? (m + log2f(l)) * TL_LN2 : -INFINITY;
    }
}

extern "C" __global__ void tl_flash_attention_bwd_dq_generic(const float* q, const float* k, const float* v, TL_ATTN_MASK_ARGS,
                                                 const float* lse, const float* dd, const float* dout, float* dq,
                                                 long long batch, long long n_q, long long n_k, int d, float scale,
                                                 TlAttnLay L) {
    TlAttnMask M = TL_ATTN_MASK;
    const int lane = threadIdx.x & 31;
    const long long warps = (long long)gridDim.x * (blockDim.x >> 5);
    const float c2 = scale * TL_LOG2E;
    for (long long row = TL_TID >> 5; row < batch * n_q; row += warps) {
        const long long b = row / n_q, i = row - b * n_q;
        const float* mb = M.mode ? tl_mask_base(M, b) : nullptr;
        const long long qo = tl_qoff(L, b) + i * L.q_ld;
        const float* gr = dout + tl_ooff(L, b) + i * L.o_ld;
        const float* kb = k + tl_koff(L, b);
        const float* vb = v + tl_koff(L, b);
        float qa[TL_NPL], ga[TL_NPL], acc[TL_NPL] = {};
#pragma unroll
        for (int t = 0; t < TL_NPL; ++t) {
            int c = lane + 32 * t;
            qa[t] = (c < d) ? q[qo + c] * c2 : 0.0f;
            ga[t] = (c < d) ? gr[c] : 0.0f;
        }
        const float l2 = lse[row] * TL_LOG2E, dr = dd[row];
        const long long kend = M.causal ? min(n_k, i + 1) : n_k;
        for (long long j = 0; j < kend; ++j) {
            bool live;
            const float* kr = kb + j * L.k_ld;
            float s = tl_masked(tl_warp_dot(qa, kr, d, lane), i, j, n_q, n_k, M, mb, &live);
            float dp = tl_warp_dot(ga, vb + j * L.k_ld, d, lane);
            float p = (live && l2 != -INFINITY) ? exp2f(s - l2) : 0.0f;
            float ds = live ? p * (dp - dr) : 0.0f;
#pragma unroll
            for (int t = 0; t < TL_NPL; ++t) {
                int c = lane + 32 * t;
                if (c < d) acc[t] = fmaf(ds, kr[c], acc[t]);
            }
        }
#pragma unroll
        for (int t = 0; t < TL_NPL; ++t) {
            int c = lane + 32 * t;
            if (c < d) dq[qo + c] = acc[t] * scale;
        }
    }
}

extern "C" __global__ void tl_flash_attention_bwd_dkv_generic(const float* q, const float* k, const float* v, TL_ATTN_MASK_ARGS,
                                                  const float* lse, const float* dd, const float* dout, float* dk,
                                                  float* dv, long long batch, long long n_q, long long n_k, int d,
                                                  float scale, TlAttnLay L) {
    TlAttnMask M = TL_ATTN_MASK;
    const int lane = threadIdx.x & 31;
    const long long warps = (long long)gridDim.x * (blockDim.x >> 5);
    const float c2 = scale * TL_LOG2E;
    for (long long row = TL_TID >> 5; row < batch * n_k; row += warps) {
        const long long b = row / n_k, j = row - b * n_k;
        const float* mb = M.mode ? tl_mask_base(M, b) : nullptr;
        const long long ko = tl_koff(L, b) + j * L.k_ld;
        const float* qb = q + tl_qoff(L, b);
        const float* gb = dout + tl_ooff(L, b);
        float va[TL_NPL], ak[TL_NPL] = {}, av[TL_NPL] = {};
        tl_lane_load(va, v + ko, d, lane, 1.0f);
        for (long long i = M.causal ? j : 0; i < n_q; ++i) {
            const float* qr = qb + i * L.q_ld;
            const float* gr = gb + i * L.o_ld;
            float qs[TL_NPL];
            tl_lane_load(qs, qr, d, lane, c2);
            bool live;
            float s = tl_masked(tl_warp_dot(qs, k + ko, d, lane), i, j, n_q, n_k, M, mb, &live);
            float dp = tl_warp_dot(va, gr, d, lane);
            const float l2 = lse[b * n_q + i] * TL_LOG2E;
            float p = (s != -INFINITY && l2 != -INFINITY) ? exp2f(s - l2) : 0.0f;
            float ds = live ? p * (dp - dd[b * n_q + i]) : 0.0f;
#pragma unroll
            for (int t = 0; t < TL_NPL; ++t) {
                int c = lane + 32 * t;
                if (c < d) {
                    av[t] = fmaf(p, gr[c], av[t]);
                    ak[t] = fmaf(ds, qs[t], ak[t]);
                }
            }
        }
#pragma unroll
        for (int t = 0; t < TL_NPL; ++t) {
            int c = lane + 32 * t;
            if (c < d) {
                dk[ko + c] = ak[t] * TL_LN2;
                dv[ko + c] = av[t];
            }
        }
    }
}
