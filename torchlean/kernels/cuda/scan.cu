// Selective scans (launched by scan.py): h[t, j] = a[t, j] h[t-1, j] + b[t, j] x[t, j], layout
// (seq_len L, state S) row-major, channels contiguous. `cs` is the coefficient stride: S for the
// var forms (a coefficient per token), 0 for the diag forms (one vector for every step).
//
// Chunked scan over time. Time is cut into C chunks of T steps; thread (c, j) (j fastest, so a
// warp reads consecutive channels: coalesced) handles chunk c of channel j.
//   pass 1 (tl_selective_scan_*_agg): the chunk's affine map h_out = P h_in + l: l = the local scan from 0
//          and P = the product of the chunk's coefficients, kept as a float mantissa and an int
//          exponent (each factor is split by frexpf first), so P never overflows or underflows;
//   pass 2 (tl_selective_scan_carry_*): per channel, the carry into every chunk, by applying the chunk maps
//          in order (one thread per channel when chunks are few; else a block per channel: each
//          thread composes a run of chunk maps, thread 0 walks the runs, each thread rescans its run);
//   pass 3 (tl_selective_scan_*_apply): each chunk rescans from its carry and writes the outputs.
// Applying a map to a carry that is exactly 0 returns l without multiplying: l IS the
// sequential result from a zero carry (bitwise), and an infinite P then gives no 0 * inf.
// With C = 1 only pass 3 runs (a plain sequential loop per channel).
// The backward runs the same scheme backwards in time for the adjoint g[t] = dH[t] + a[t+1] g[t+1],
// and pass 3 writes dX (and the var form's dA, dB) and per-chunk double partials of the diag
// form's dA, dB, which tl_selective_scan_diag_bwd_reduce_partials adds in chunk order: no atomics, every result is
// bitwise repeatable.

#define SCAN_EMAX 4096  // |exponent| beyond which ldexpf saturates anyway (float32 spans 2^-149..2^128)

__device__ __forceinline__ int scan_clamp_e(int e) {
    return e > SCAN_EMAX ? SCAN_EMAX : (e < -SCAN_EMAX ? -SCAN_EMAX : e);
}

// m 2^e <- (m 2^e) * a, with m renormalized to [0.5, 1) (or 0, inf, NaN).
__device__ __forceinline__ void scan_mul(float& m, int& e, float a) {
    int ea, ep;
    float ma = frexpf(a, &ea);
    m = frexpf(m * ma, &ep);
    e = scan_clamp_e(e + ea + ep);
}

// The map (m 2^e, l) applied to carry h: (m 2^e) h + l, or l when h == 0.
__device__ __forceinline__ float scan_apply(float m, int e, float l, float h) {
    return h == 0.0f ? l : ldexpf(h * m, e) + l;
}

// ==== forward =======================================================================================
extern "C" __global__ void tl_selective_scan_fwd_agg(const float* __restrict__ A, const float* __restrict__ B,
                                           const float* __restrict__ X, long long L, long long S, long long cs,
                                           long long T, long long C, float* __restrict__ Pm,
                                           int* __restrict__ Pe, float* __restrict__ Lc) {
    for (long long i = TL_TID; i < C * S; i += TL_STRIDE) {
        const long long c = i / S, j = i - c * S;
        const long long t0 = c * T, t1 = min(L, t0 + T);
        float l = 0.0f, m = 1.0f;
        int e = 0;
#pragma unroll 4
        for (long long t = t0; t < t1; ++t) {
            const float a = A[t * cs + j];
            l = a * l + B[t * cs + j] * X[t * S + j];
            scan_mul(m, e, a);
        }
        Pm[i] = m;
        Pe[i] = e;
        Lc[i] = l;
    }
}

extern "C" __global__ void tl_selective_scan_fwd_apply(const float* __restrict__ A, const float* __restrict__ B,
                                             const float* __restrict__ X, const float* __restrict__ h0,
                                             const float* __restrict__ cin, long long L, long long S, long long cs,
                                             long long T, long long C, float* __restrict__ H) {
    for (long long i = TL_TID; i < C * S; i += TL_STRIDE) {
        const long long c = i / S, j = i - c * S;
        const long long t0 = c * T, t1 = min(L, t0 + T);
        float h = c == 0 ? h0[j] : cin[i];
#pragma unroll 4
        for (long long t = t0; t < t1; ++t) {
            h = A[t * cs + j] * h + B[t * cs + j] * X[t * S + j];
            H[t * S + j] = h;
        }
    }
}

// ==== pass 2: carries into the chunks ================================================================
// Forward order (reverse = 0): chunk 0 gets `start` (h0), chunk c + 1 gets map_c(carry of c).
// Backward order (reverse = 1): chunk C - 1 gets 0, chunk c - 1 gets map_c(carry of c).
// cin[c * S + j] receives the carry into chunk c.
extern "C" __global__ void tl_selective_scan_carry_seq(const float* __restrict__ Pm, const int* __restrict__ Pe,
                                             const float* __restrict__ Lc, const float* __restrict__ start,
                                             long long S, long long C, int reverse, float* __restrict__ cin) {
    for (long long j = TL_TID; j < S; j += TL_STRIDE) {
        float h = reverse ? 0.0f : start[j];
        for (long long k = 0; k < C; ++k) {
            const long long i = (reverse ? C - 1 - k : k) * S + j;
            cin[i] = h;
            h = scan_apply(Pm[i], Pe[i], Lc[i], h);
        }
    }
}

#define SCAN_CARRY_THREADS 256

// A block per channel; thread r owns the run of chunks [r K, r K + K) in walk order.
extern "C" __global__ void tl_selective_scan_carry_block(const float* __restrict__ Pm, const int* __restrict__ Pe,
                                               const float* __restrict__ Lc, const float* __restrict__ start,
                                               long long S, long long C, int reverse, float* __restrict__ cin) {
    __shared__ float sm[SCAN_CARRY_THREADS], sl[SCAN_CARRY_THREADS], sc[SCAN_CARRY_THREADS];
    __shared__ int se[SCAN_CARRY_THREADS];
    const int r = threadIdx.x;
    const long long K = (C + SCAN_CARRY_THREADS - 1) / SCAN_CARRY_THREADS;
    const long long k0 = r * K, k1 = min(C, k0 + K);
    for (long long j = blockIdx.x; j < S; j += gridDim.x) {
        // compose the run's maps: (M 2^E, Lr) = map_{k1-1} o ... o map_{k0}
        float M = 1.0f, Lr = 0.0f;
        int E = 0;
        for (long long k = k0; k < k1; ++k) {
            const long long i = (reverse ? C - 1 - k : k) * S + j;
            const float m = Pm[i], l = Lc[i];
            const int e = Pe[i];
            Lr = scan_apply(m, e, l, Lr);
            int ep;
            M = frexpf(M * m, &ep);
            E = scan_clamp_e(E + e + ep);
        }
        sm[r] = M;
        se[r] = E;
        sl[r] = Lr;
        __syncthreads();
        if (r == 0) {
            float h = reverse ? 0.0f : start[j];
            for (int q = 0; q < SCAN_CARRY_THREADS; ++q) {
                sc[q] = h;
                if ((long long)q * K < C) h = scan_apply(sm[q], se[q], sl[q], h);
            }
        }
        __syncthreads();
        float h = sc[r];
        for (long long k = k0; k < k1; ++k) {
            const long long i = (reverse ? C - 1 - k : k) * S + j;
            cin[i] = h;
            h = scan_apply(Pm[i], Pe[i], Lc[i], h);
        }
        __syncthreads();  // shared arrays are reused by the next channel
    }
}

// ==== backward =======================================================================================
// Chunk c's map takes g[t1] (the adjoint at the first step of chunk c + 1) to g[t0]:
// g[t] = a[t+1] g[t+1] + dH[t] for t = t1-1 .. t0, with no multiplication at t = L - 1.
extern "C" __global__ void tl_selective_scan_bwd_agg(const float* __restrict__ A, const float* __restrict__ dH,
                                           long long L, long long S, long long cs, long long T, long long C,
                                           float* __restrict__ Pm, int* __restrict__ Pe, float* __restrict__ Lc) {
    for (long long i = TL_TID; i < C * S; i += TL_STRIDE) {
        const long long c = i / S, j = i - c * S;
        const long long t0 = c * T, t1 = min(L, t0 + T);
        float l = 0.0f, m = 1.0f;
        int e = 0;
#pragma unroll 4
        for (long long t = t1 - 1; t >= t0; --t) {
            if (t == L - 1) {
                l = dH[t * S + j];
            } else {
                const float a = A[(t + 1) * cs + j];
                l = a * l + dH[t * S + j];
                scan_mul(m, e, a);
            }
        }
        Pm[i] = m;
        Pe[i] = e;
        Lc[i] = l;
    }
}

// var = (cs != 0). diag: partA, partB (C * S doubles) get the chunk's sums of g Hprev and g X
// (written straight to dA, dB as floats when C == 1); var: dA, dB are per token.
extern "C" __global__ void tl_selective_scan_bwd_apply(const float* __restrict__ A, const float* __restrict__ B,
                                             const float* __restrict__ X, const float* __restrict__ h0,
                                             const float* __restrict__ H, const float* __restrict__ dH,
                                             const float* __restrict__ cin, long long L, long long S, long long cs,
                                             long long T, long long C, float* __restrict__ dA,
                                             float* __restrict__ dB, float* __restrict__ dX,
                                             float* __restrict__ dh0, double* __restrict__ partA,
                                             double* __restrict__ partB) {
    const bool var = cs != 0;
    for (long long i = TL_TID; i < C * S; i += TL_STRIDE) {
        const long long c = i / S, j = i - c * S;
        const long long t0 = c * T, t1 = min(L, t0 + T);
        float g = c == C - 1 ? 0.0f : cin[i];
        double sa = 0.0, sb = 0.0;
        for (long long t = t1 - 1; t >= t0; --t) {
            const long long k = t * S + j;
            g = (t == L - 1) ? dH[k] : dH[k] + A[(t + 1) * cs + j] * g;
            dX[k] = g * B[t * cs + j];
            const float hp = t == 0 ? h0[j] : H[k - S];
            const float pa = g * hp, pb = g * X[k];
            if (var) {
                dA[k] = pa;
                dB[k] = pb;
            } else {
                sa += (double)pa;
                sb += (double)pb;
            }
        }
        if (c == 0) dh0[j] = A[j] * g;
        if (!var) {
            if (C == 1) {
                dA[j] = (float)sa;
                dB[j] = (float)sb;
            } else {
                partA[i] = sa;
                partB[i] = sb;
            }
        }
    }
}

// dA[j] = sum_c partA[c S + j] in chunk order (and dB), rounded once.
extern "C" __global__ void tl_selective_scan_diag_bwd_reduce_partials(const double* __restrict__ partA,
                                                   const double* __restrict__ partB, long long S, long long C,
                                                   float* __restrict__ dA, float* __restrict__ dB) {
    for (long long j = TL_TID; j < S; j += TL_STRIDE) {
        double sa = 0.0, sb = 0.0;
        for (long long c = 0; c < C; ++c) {
            sa += partA[c * S + j];
            sb += partB[c * S + j];
        }
        dA[j] = (float)sa;
        dB[j] = (float)sb;
    }
}
