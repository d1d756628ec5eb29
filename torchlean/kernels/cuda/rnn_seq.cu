// The LSTM recurrence of one layer-direction, one launch per time step (launched by rnn_seq.py's
// lstm_recurrence_fwd / lstm_recurrence_bwd, which loop over the steps): each launch fuses the
// small GEMM of the step with the cell, so a step is one kernel instead of three (forward) or four
// (backward). Layouts (flat, row-major float32): gi (T, B, 4H); h0, c0 (B, H); w_hh (4H, H), gates
// i, f, g, o stacked; y (T + 1, B, H) = the h of each step, then c_n; cs (T, B, H); act (T, B, 5H)
// = [i, f, g, o, tanh(c)] per row; dgates (T, B, 4H). The arguments come as one struct (below).
//
// Forward step t (tl_lstm_recurrence_fwd_b*): gh[b, r] = sum_k h_prev[b, k] w[r, k] (+ b_hh[r]),
// then rnn_lstm_fwd(gi_t + gh, c_prev). blockIdx.y: a tile of R <= BT batch rows (BT: R rounded up
// to 4, the kernel's accumulator count); blockIdx.x: JB hidden units, each taken by KS warps (its 4
// gate rows q H + j, the columns shared out in groups of RING steps). The tile's h_prev rows come
// into shared memory transposed ([k][b], cp.async), in one chunk when they fit, else in
// double-buffered chunks. Lane l of a warp takes the columns k = 32 s + l: its 4 weights of column
// k from global memory (coalesced, L2-resident, prefetched RING steps ahead in registers), h_prev[.,
// k] as float4 reads of 4 rows, and keeps 4 BT accumulators (fmaf, k ascending). The lanes' partial
// sums are added by recursive halving (a fixed butterfly), then the KS warps' in order; thread
// (b, unit) adds the bias, then gi (both loaded before the products), and runs the spec's cell.
//
// Backward step t (tl_lstm_recurrence_bwd_b*): dh = gy_t + sum_r dg_next[b, r] w[r, j], then
// rnn_lstm_bwd. blockIdx.y: the batch tile; blockIdx.x: JC hidden columns; thread (jj = tid % JC,
// rr = tid / JC) takes the gate rows r = 4 RR s + 4 rr + {0..3} (weights from global memory,
// prefetched RING steps ahead), dg_next through shared memory ([b][r], 16-byte cp.async, one chunk
// or double-buffered chunks; each read a float4 of 4 rows r). The RR partial sums of a (b, j) go
// through shared memory and are added in order of rr by thread (b, j), which runs the cell.
// Modes (flags >> 2): 0 = the first step walked (no recurrent term: dh = gy_t, dc = gy_T),
// 1 = a later step (dg_next = dgates of the step walked before), 2 = dh0 = dgates_t W (no cell).
//
// No atomics; each output is written by one thread, each sum has a fixed order: bitwise repeatable.
// Subnormals are kept (-ftz=false) and NaN / inf flow through the products as in a plain GEMM
// (padding columns are zeros on both sides of a product, never 0 times a real value).

#include "rnn_cell.cuh"

#define TL_LSTM_REC_RING 2  // weight steps prefetched ahead in registers

// ---- asynchronous global -> shared copies (cp.async on sm_80+, plain copies before) ----

__device__ __forceinline__ void lstm_rec_cp4(float* dst, const float* src) {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src));
#else
    *dst = *src;
#endif
}

__device__ __forceinline__ void lstm_rec_cp16(float* dst, const float* src) {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src));
#else
    *reinterpret_cast<float4*>(dst) = *reinterpret_cast<const float4*>(src);
#endif
}

__device__ __forceinline__ void lstm_rec_commit() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}

// Wait until at most N committed groups of this thread are still in flight.
template <int N>
__device__ __forceinline__ void lstm_rec_wait() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

// Wait until at most n committed groups are still in flight (n >= 7: at most 7, which waits longer).
__device__ __forceinline__ void lstm_rec_wait_n(int n) {
    switch (n) {
        case 0: lstm_rec_wait<0>(); break;
        case 1: lstm_rec_wait<1>(); break;
        case 2: lstm_rec_wait<2>(); break;
        case 3: lstm_rec_wait<3>(); break;
        case 4: lstm_rec_wait<4>(); break;
        case 5: lstm_rec_wait<5>(); break;
        case 6: lstm_rec_wait<6>(); break;
        default: lstm_rec_wait<7>(); break;
    }
}

// One step of the recursive-halving sum of LEN values per lane over the lanes that differ in bit O:
// the lane with bit O set keeps the upper half. After the steps O = 16, 8, 4, 2, 1 (LEN = N, N / 2,
// ...), lane l holds the sums of the values [l N / 32, (l + 1) N / 32) in v[0 ..].
template <int LEN, int O>
__device__ __forceinline__ void lstm_rec_halve(float* v, int lane) {
    const bool up = (lane & O) != 0;
#pragma unroll
    for (int i = 0; i < LEN / 2; ++i) {
        const float send = up ? v[i] : v[i + LEN / 2];
        const float keep = up ? v[i + LEN / 2] : v[i];
        v[i] = keep + __shfl_xor_sync(TL_FULL_MASK, send, O);
    }
}

// Sums each of NV values over the 32 lanes of a warp (recursive halving in the fixed butterfly
// order; NVP = NV rounded up to a multiple of 32, the values past NV zeros); lane l then writes the
// totals of the values [l P, (l + 1) P) below NV (P = NVP / 32) into out.
template <int NV, int NVP>
__device__ __forceinline__ void lstm_rec_lanes_sum(float* v, int lane, float* out) {
    lstm_rec_halve<NVP, 16>(v, lane);
    lstm_rec_halve<NVP / 2, 8>(v, lane);
    lstm_rec_halve<NVP / 4, 4>(v, lane);
    lstm_rec_halve<NVP / 8, 2>(v, lane);
    lstm_rec_halve<NVP / 16, 1>(v, lane);
    constexpr int P = NVP / 32;
#pragma unroll
    for (int m = 0; m < P; ++m)
        if (lane * P + m < NV) out[lane * P + m] = v[m];
}

// The launch arguments, one struct passed by value (rnn.py fills an int64 array once per call and
// changes only t (word 11) and flags (word 17) between the launches: one argument for CuPy to convert).
struct TlLstmRecFwdArgs {
    const float* gi;
    const float* h0;
    const float* c0;
    const float* w;
    const float* bias;  // any valid pointer when flags has no bias bit
    float* y;
    float* cs;
    float* act;
    long long B, H, T, t;
    long long R;      // batch rows per tile (blockIdx.y: the tile), R <= BT
    long long KCH;    // h_prev columns per shared-memory chunk (a multiple of 32 RING KS but the last)
    long long JB;     // hidden units per block (blockIdx.x: the slice of units)
    long long KS;     // warps per unit, each over a share of the columns: blockDim.x = 32 JB KS
    long long NBUF;   // chunk buffers (all the chunks when they fit, else 2)
    long long flags;  // bit 0: bias, bit 1: reverse
};

struct TlLstmRecBwdArgs {
    const float* act;
    const float* cs;
    const float* c0;
    const float* w;
    const float* gy;
    float* dgates;
    float* dc;  // the carried dc, updated in place (dc0 at the end)
    float* dh0;
    long long B, H, T, t;
    long long R;
    long long RC;     // dg_next gate columns per chunk (a multiple of 4 RR RING but the last)
    long long JC;     // hidden columns per block
    long long RR;     // row groups: blockDim.x = JC RR, thread (jj = tid % JC, rr = tid / JC)
    long long NBUF;   // chunk buffers (all the chunks when they fit, else 2)
    long long flags;  // bit 1: reverse; bits 2..3: mode (0 first step walked, 1 later steps, 2 dh0)
};

// ---- forward step ----

template <int BT, int MAXW>
__device__ __forceinline__ void lstm_rec_fwd_step(const TlLstmRecFwdArgs& a) {
    constexpr int NV = 4 * BT;                        // accumulators per lane: index b * 4 + q
    constexpr int NVP = (NV + 31) & ~31;              // and zeros up to a multiple of 32 (the lane sum)
    constexpr int S = ((BT / 4) & 1) ? BT : BT + 4;  // shared row stride of a column k: S / 4 odd, so
                                                      // 8 lanes' float4 reads hit 8 different bank quads
    constexpr int D = TL_LSTM_REC_RING;
    extern __shared__ float4 lstm_rec_dyn[];
    float* hs = reinterpret_cast<float*>(lstm_rec_dyn);  // [buffer][KCH][S]: h_prev transposed
    __shared__ float part[MAXW][NV];                     // each warp's lane sums

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nthreads = blockDim.x;
    const int KS = (int)a.KS, JB = (int)a.JB;
    const int u = warp / KS, p = warp - u * KS;  // unit slot, share of the columns
    const long long B = a.B, T = a.T, t = a.t;
    const int H = (int)a.H, KCH = (int)a.KCH;
    const bool rev = (a.flags & 2) != 0, has_bias = (a.flags & 1) != 0;
    const long long n = B * H;
    const bool first = rev ? t == T - 1 : t == 0;
    const long long tp = rev ? t + 1 : t - 1;
    const float* hp = first ? a.h0 : a.y + tp * n;
    const float* cp = first ? a.c0 : a.cs + tp * n;
    const long long b0 = (long long)blockIdx.y * a.R;
    const int nb = (int)min(a.R, B - b0);
    const int j = blockIdx.x * JB + u;
    const bool active = j < H;  // warp-uniform
    const long long HH = (long long)H * H;
    // Gate q's weights of column 32 s + lane (global step s): w_q[32 s], 0 past H.
    const float* w_0 = a.w + (long long)(active ? j : 0) * H + lane;
    const float* w_1 = w_0 + HH;
    const float* w_2 = w_1 + HH;
    const float* w_3 = w_2 + HH;
    const int klim = active ? H - lane : 0;

    // The cell's operands, loaded now (their latency hidden by the products): thread e < JB nb takes
    // (row e / JB, unit e % JB) of the tile (JB nb <= JB 32 <= blockDim.x: one at most).
    const long long G = 4LL * H;
    const int ebl = tid / JB, eul = tid - ebl * JB;
    const int ej = blockIdx.x * JB + eul;
    const bool epi = ebl < nb && ej < H;
    float egi[4] = {0.f, 0.f, 0.f, 0.f}, ebias[4] = {0.f, 0.f, 0.f, 0.f}, ecp = 0.f;
    if (epi) {
        const long long b = b0 + ebl;
        const float* gr = a.gi + t * B * G + b * G + ej;
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            egi[q] = gr[(long long)q * H];
            if (has_bias) ebias[q] = a.bias[q * H + ej];
        }
        ecp = cp[b * H + ej];
    }

    float acc[NVP];
#pragma unroll
    for (int e = 0; e < NVP; ++e) acc[e] = 0.f;

    // This warp's global steps: groups of D, group g (from 0) taken by warp p = g % KS.
    float ring[D][4];
#pragma unroll
    for (int d = 0; d < D; ++d) {
        const int off = 32 * (p * D + d);
        const bool ok = off < klim;
        ring[d][0] = ok ? __ldg(w_0 + off) : 0.f;
        ring[d][1] = ok ? __ldg(w_1 + off) : 0.f;
        ring[d][2] = ok ? __ldg(w_2 + off) : 0.f;
        ring[d][3] = ok ? __ldg(w_3 + off) : 0.f;
    }

    const int nchunks = (H + KCH - 1) / KCH, NBUF = (int)a.NBUF;
    const float* hsrc = hp + b0 * H;
    // Chunk c into buffer c % NBUF: columns [k0, k0 + kn) of the tile's rows, zeros in the columns up to
    // the next multiple of 32 (their weights are 0: the products must be too) and in rows nb..BT-1.
    auto issue = [&](int c) {
        const int k0 = c * KCH;
        const int kn = min(KCH, H - k0);
        const int kp = (kn + 31) & ~31;
        float* dst = hs + (c % NBUF) * KCH * S;
        for (int b = 0; b < nb; ++b) {
            const float* src = hsrc + (long long)b * H + k0;
            for (int kk = tid; kk < kn; kk += nthreads) lstm_rec_cp4(dst + kk * S + b, src + kk);
        }
        for (int e = tid; e < (kp - kn) * BT; e += nthreads) dst[(kn + e / BT) * S + e % BT] = 0.f;
        if (nb < BT)
            for (int e = tid; e < kn * (BT - nb); e += nthreads) dst[(e / (BT - nb)) * S + nb + e % (BT - nb)] = 0.f;
        lstm_rec_commit();
    };
    // The chunks in flight from the start (each its own group), chunk c computed as soon as it has
    // landed; a buffer is refilled (NBUF < nchunks) once its chunk is done.
    for (int c = 0; c < min(NBUF, nchunks); ++c) issue(c);
    for (int c = 0; c < nchunks; ++c) {
        if (c > 0 && c + NBUF - 1 < nchunks) issue(c + NBUF - 1);
        lstm_rec_wait_n(min(nchunks - c - 1, NBUF - 1));
        __syncthreads();
        if (active) {
            const int k0 = c * KCH;
            const int kn = min(KCH, H - k0);
            const int steps = (kn + 31) >> 5;  // a multiple of D KS but in the last chunk
            const float* hb = hs + (c % NBUF) * KCH * S + lane * S;
            for (int g = p * D; g < steps; g += KS * D) {
#pragma unroll
                for (int d = 0; d < D; ++d) {
                    const float w0 = ring[d][0], w1 = ring[d][1], w2 = ring[d][2], w3 = ring[d][3];
                    {
                        const int off = k0 + 32 * (g + KS * D + d);  // this warp's next group
                        const bool ok = off < klim;
                        ring[d][0] = ok ? __ldg(w_0 + off) : 0.f;
                        ring[d][1] = ok ? __ldg(w_1 + off) : 0.f;
                        ring[d][2] = ok ? __ldg(w_2 + off) : 0.f;
                        ring[d][3] = ok ? __ldg(w_3 + off) : 0.f;
                    }
                    if (g + d < steps) {  // uniform
                        const float* hrow = hb + 32 * (g + d) * S;
#pragma unroll
                        for (int i = 0; i < BT / 4; ++i) {
                            const float4 hv = *reinterpret_cast<const float4*>(hrow + 4 * i);
                            const float h4[4] = {hv.x, hv.y, hv.z, hv.w};
#pragma unroll
                            for (int v = 0; v < 4; ++v) {
                                float* ab = acc + (4 * i + v) * 4;
                                ab[0] = fmaf(w0, h4[v], ab[0]);
                                ab[1] = fmaf(w1, h4[v], ab[1]);
                                ab[2] = fmaf(w2, h4[v], ab[2]);
                                ab[3] = fmaf(w3, h4[v], ab[3]);
                            }
                        }
                    }
                }
            }
        }
        if (c + NBUF < nchunks) __syncthreads();  // its buffer is refilled next
    }

    // Each warp's lane sums, then per (b, unit) the KS shares in order, and the cell.
    lstm_rec_lanes_sum<NV, NVP>(acc, lane, part[warp]);
    __syncthreads();
    if (epi) {
        const int bl = ebl, ul = eul, jj = ej;
        const long long b = b0 + bl;
        float pre[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            float s = part[ul * KS][bl * 4 + q];
            for (int v = 1; v < KS; ++v) s = s + part[ul * KS + v][bl * 4 + q];
            const float gh = has_bias ? s + ebias[q] : s;
            pre[q] = egi[q] + gh;
        }
        const long long k = b * H + jj;
        const RnnLstmFwd r = rnn_lstm_fwd(pre[0], pre[1], pre[2], pre[3], ecp);
        a.y[t * n + k] = r.h;
        a.cs[t * n + k] = r.c;
        if (rev ? t == 0 : t == T - 1) a.y[T * n + k] = r.c;  // c_n
        float* ar = a.act + t * 5 * n + b * 5 * H + jj;
        ar[0] = r.i;
        ar[H] = r.f;
        ar[2LL * H] = r.g;
        ar[3LL * H] = r.o;
        ar[4LL * H] = r.tc;
    }
}

// ---- backward step ----

template <int BT>
__device__ __forceinline__ void lstm_rec_bwd_step(const TlLstmRecBwdArgs& a) {
    constexpr int D = TL_LSTM_REC_RING;
    extern __shared__ float4 lstm_rec_dyn[];
    float* ds = reinterpret_cast<float*>(lstm_rec_dyn);  // [buffer][BT][RC]; then the partial sums

    const int tid = threadIdx.x, nthreads = blockDim.x;
    const int JC = (int)a.JC, RR = (int)a.RR;
    const int rr = tid / JC, jj = tid - rr * JC;
    const long long B = a.B, T = a.T, t = a.t;
    const int H = (int)a.H, RC = (int)a.RC;
    const bool rev = (a.flags & 2) != 0;
    const int mode = (int)(a.flags >> 2);
    const long long n = B * H;
    const int G = 4 * H;
    const long long b0 = (long long)blockIdx.y * a.R;
    const int nb = (int)min(a.R, B - b0);
    const int j0 = blockIdx.x * JC;
    const bool firstfwd = rev ? t == T - 1 : t == 0;
    const float* cprow = firstfwd ? a.c0 : a.cs + (rev ? t + 1 : t - 1) * n;

    // The cell's operands of (row e / JC, column e % JC), e = tid, loaded now (their latency hidden by
    // the products); further elements (when nb JC > blockDim.x) load theirs in the loop below.
    struct Ops {
        float d, dc, cp, i, f, g, o, tc;
    };
    auto load_ops = [&](int e, Ops& v) {
        const int bl = e / JC, jl = e - bl * JC;
        const long long b = b0 + bl, k = b * H + j0 + jl;
        v.d = a.gy[t * n + k];
        v.dc = mode == 0 ? a.gy[T * n + k] : a.dc[k];
        v.cp = cprow[k];
        const float* ar = a.act + t * 5 * n + b * 5 * H + j0 + jl;
        v.i = ar[0];
        v.f = ar[H];
        v.g = ar[2LL * H];
        v.o = ar[3LL * H];
        v.tc = ar[4LL * H];
    };
    Ops pre{};
    if (mode != 2 && tid < nb * JC && j0 + tid % JC < H) load_ops(tid, pre);

    if (mode != 0) {
        const int j = j0 + jj;
        const bool active = j < H;  // per thread: its products are never summed with another column's
        const int ST = 4 * RR;      // gate rows per step: thread rows ST s + 4 rr + {0..3}
        const float* wr = a.w + (active ? j : 0) + (long long)(4 * rr) * H;
        const long long wstep = (long long)ST * H;
        const int rlim = active ? G - 4 * rr : 0;
        const long long src = mode == 1 ? (rev ? t - 1 : t + 1) : t;
        const float* dsrc = a.dgates + src * B * G + b0 * G;

        float acc[BT];
#pragma unroll
        for (int b = 0; b < BT; ++b) acc[b] = 0.f;
        float ring[D][4];
#pragma unroll
        for (int d = 0; d < D; ++d) {
            const bool ok = ST * d < rlim;
            const float* q = wr + d * wstep;
#pragma unroll
            for (int cc = 0; cc < 4; ++cc) ring[d][cc] = ok ? __ldg(q + (long long)cc * H) : 0.f;
        }

        const int nchunks = (G + RC - 1) / RC, NBUF = (int)a.NBUF;
        // Chunk c into buffer c % NBUF: gate columns [r0, r0 + rn) of the tile's rows (16-byte pieces:
        // 4H, r0 and rn are multiples of 4), zeros up to the next multiple of ST and in rows nb..BT-1.
        auto issue = [&](int c) {
            const int r0 = c * RC;
            const int rn4 = min(RC, G - r0) >> 2;
            const int rp4 = ((rn4 * 4 + ST - 1) / ST * ST) >> 2;
            const int rc4 = RC >> 2;
            float4* dst = reinterpret_cast<float4*>(ds + (c % NBUF) * BT * RC);
            for (int b = 0; b < nb; ++b) {
                const float* srow = dsrc + (long long)b * G + r0;
                for (int e = tid; e < rn4; e += nthreads)
                    lstm_rec_cp16(reinterpret_cast<float*>(dst + b * rc4 + e), srow + 4 * e);
            }
            const float4 z = make_float4(0.f, 0.f, 0.f, 0.f);
            for (int e = tid; e < (rp4 - rn4) * BT; e += nthreads)
                dst[(e / (rp4 - rn4)) * rc4 + rn4 + e % (rp4 - rn4)] = z;
            if (nb < BT)
                for (int e = tid; e < rn4 * (BT - nb); e += nthreads) dst[(nb + e / rn4) * rc4 + e % rn4] = z;
            lstm_rec_commit();
        };
        for (int c = 0; c < min(NBUF, nchunks); ++c) issue(c);
        for (int c = 0; c < nchunks; ++c) {
            if (c > 0 && c + NBUF - 1 < nchunks) issue(c + NBUF - 1);
            lstm_rec_wait_n(min(nchunks - c - 1, NBUF - 1));
            __syncthreads();
            const int r0 = c * RC;
            const int rn = min(RC, G - r0);
            const int steps = (rn + ST - 1) / ST;  // a multiple of D but in the last chunk
            const int s0 = r0 / ST;                // the chunk's first global step
            const float* db = ds + (c % NBUF) * BT * RC + 4 * rr;
            for (int g = 0; g < steps; g += D) {
#pragma unroll
                for (int d = 0; d < D; ++d) {
                    const float w0 = ring[d][0], w1 = ring[d][1], w2 = ring[d][2], w3 = ring[d][3];
                    {
                        const int s = s0 + g + d + D;  // global step D ahead
                        const bool ok = ST * s < rlim;
                        const float* q = wr + s * wstep;
#pragma unroll
                        for (int cc = 0; cc < 4; ++cc) ring[d][cc] = ok ? __ldg(q + (long long)cc * H) : 0.f;
                    }
                    if (g + d < steps) {  // uniform
                        const float* drow = db + ST * (g + d);
#pragma unroll
                        for (int b = 0; b < BT; ++b) {
                            const float4 v = *reinterpret_cast<const float4*>(drow + b * RC);
                            acc[b] = fmaf(v.x, w0, acc[b]);
                            acc[b] = fmaf(v.y, w1, acc[b]);
                            acc[b] = fmaf(v.z, w2, acc[b]);
                            acc[b] = fmaf(v.w, w3, acc[b]);
                        }
                    }
                }
            }
            __syncthreads();  // its buffer is refilled next, or (the last) holds the partial sums next
        }
        float* red = ds;  // [RR][BT][JC]
#pragma unroll
        for (int b = 0; b < BT; ++b) red[(rr * BT + b) * JC + jj] = acc[b];
        __syncthreads();
    }

    // (b, column) of the tile: the RR partial sums in order, then the cell (or dh0).
    for (int e = tid; e < nb * JC; e += nthreads) {
        const int bl = e / JC, jl = e - bl * JC;
        const int j = j0 + jl;
        if (j >= H) continue;
        float s = 0.f;
        if (mode != 0) {
            const float* red = ds + bl * JC + jl;
            s = red[0];
            for (int v = 1; v < RR; ++v) s = s + red[v * BT * JC];
        }
        const long long b = b0 + bl, k = b * H + j;
        if (mode == 2) {
            a.dh0[k] = s;
            continue;
        }
        Ops v = pre;
        if (e != tid) load_ops(e, v);
        const float d = mode == 0 ? v.d : v.d + s;
        const RnnLstmBwd r = rnn_lstm_bwd(v.i, v.f, v.g, v.o, v.tc, v.cp, d, v.dc);
        float* dg = a.dgates + t * B * G + b * G + j;
        dg[0] = r.di;
        dg[H] = r.df;
        dg[2LL * H] = r.dg;
        dg[3LL * H] = r.d_o;
        a.dc[k] = r.dcp;
    }
}

// BT: the tile's rows rounded up to a multiple of 4 (rnn.py picks the kernel); MAXT: the most
// threads a block of it may have (its register budget).
#define TL_LSTM_REC_KERNELS(BT, MAXT)                                                                  \
    extern "C" __global__ void __launch_bounds__(MAXT, 1) tl_lstm_recurrence_fwd_b##BT(const TlLstmRecFwdArgs a) { \
        lstm_rec_fwd_step<BT, MAXT / 32>(a);                                                               \
    }                                                                                                  \
    extern "C" __global__ void __launch_bounds__(MAXT, 1) tl_lstm_recurrence_bwd_b##BT(const TlLstmRecBwdArgs a) { \
        lstm_rec_bwd_step<BT>(a);                                                                      \
    }

TL_LSTM_REC_KERNELS(4, 512)
TL_LSTM_REC_KERNELS(8, 512)
TL_LSTM_REC_KERNELS(12, 512)
TL_LSTM_REC_KERNELS(16, 320)
TL_LSTM_REC_KERNELS(20, 320)
TL_LSTM_REC_KERNELS(24, 256)
TL_LSTM_REC_KERNELS(28, 256)
TL_LSTM_REC_KERNELS(32, 256)
