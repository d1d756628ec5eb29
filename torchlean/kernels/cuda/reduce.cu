// Reductions and the fused row kernels (softmax, log-softmax and their VJPs).
//
// Every reduction here runs in a fixed order for a given shape: per-thread accumulation over a
// grid-stride range of a FIXED grid (sizes chosen from the shape alone, never from timing or
// occupancy), then warp butterflies and a block tree. So results are bitwise repeatable run to
// run, and none of these needs a separate fast (atomic) path. Sums accumulate in double:
// on an H200 the extra adds are free in these memory-bound loops, and the result is far inside
// the float32 contract (gamma(n) * sum|x|).

#define TL_NAN __int_as_float(0x7fc00000)

struct SumOp {
    typedef double T;
    static __device__ __forceinline__ T init() { return 0.0; }
    static __device__ __forceinline__ T step(T a, float x) { return a + (double)x; }
    static __device__ __forceinline__ T comb(T a, T b) { return a + b; }
    static __device__ __forceinline__ float fin(T a) { return (float)a; }
};

struct MaxOp {  // np.fmax.reduce: NaN is ignored unless every value is NaN
    typedef float T;
    static __device__ __forceinline__ T init() { return TL_NAN; }
    static __device__ __forceinline__ T step(T a, float x) { return fmaxf(a, x); }
    static __device__ __forceinline__ T comb(T a, T b) { return fmaxf(a, b); }
    static __device__ __forceinline__ float fin(T a) { return a; }
};

template <class Op>
__device__ __forceinline__ typename Op::T warp_reduce(typename Op::T v) {
    for (int o = 16; o > 0; o >>= 1) v = Op::comb(v, __shfl_xor_sync(TL_FULL_MASK, v, o));
    return v;
}

// Every thread gets the block's value. blockDim.x is a multiple of 32, at most 1024.
template <class Op>
__device__ __forceinline__ typename Op::T block_reduce(typename Op::T v) {
    __shared__ typename Op::T scratch[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = warp_reduce<Op>(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < nwarps ? scratch[lane] : Op::init();
    return warp_reduce<Op>(v);
}

// ---- whole-buffer sum / mean ------------------------------------------------------------------
// Thread-level part: four float4 loads in flight per iteration, then the tail.
__device__ __forceinline__ double thread_sum(const float* __restrict__ x, long long n) {
    const float4* x4 = reinterpret_cast<const float4*>(x);
    long long n4 = n >> 2, stride = TL_STRIDE, i = TL_TID;
    double acc = 0.0;
    for (; i + 3 * stride < n4; i += 4 * stride) {
        float4 v0 = x4[i], v1 = x4[i + stride], v2 = x4[i + 2 * stride], v3 = x4[i + 3 * stride];
        acc += ((double)v0.x + v0.y) + ((double)v0.z + v0.w);
        acc += ((double)v1.x + v1.y) + ((double)v1.z + v1.w);
        acc += ((double)v2.x + v2.y) + ((double)v2.z + v2.w);
        acc += ((double)v3.x + v3.y) + ((double)v3.z + v3.w);
    }
    for (; i < n4; i += stride) {
        float4 v = x4[i];
        acc += ((double)v.x + v.y) + ((double)v.z + v.w);
    }
    for (long long j = (n4 << 2) + TL_TID; j < n; j += stride) acc += (double)x[j];
    return acc;
}

// out[0] = float(sum) / div in ONE launch, in a fixed order (CUDA's threadFenceReduction
// pattern): every block writes its sum to partials[block]; the block that finishes last (an
// integer atomic counter, which never touches the float values) adds the partials in index
// order and resets the counter for the next call. So the sum is deterministic at the cost of no
// extra launch, and no float atomics are needed (they would also flush subnormals to zero).
extern "C" __global__ void tl_reduce_sum(const float* __restrict__ x, long long n, double* partials,
                                  unsigned int* counter, float* __restrict__ out, float div) {
    double s = block_reduce<SumOp>(thread_sum(x, n));
    if (gridDim.x == 1) {
        if (threadIdx.x == 0) out[0] = (float)s / div;
        return;
    }
    __shared__ bool last;
    if (threadIdx.x == 0) {
        partials[blockIdx.x] = s;
        __threadfence();  // the partial is visible device-wide before the count says so
        last = atomicAdd(counter, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (last) {
        __threadfence();
        const volatile double* p = partials;
        double acc = 0.0;
        for (int i = threadIdx.x; i < (int)gridDim.x; i += blockDim.x) acc += p[i];
        acc = block_reduce<SumOp>(acc);
        if (threadIdx.x == 0) {
            out[0] = (float)acc / div;
            *counter = 0u;
        }
    }
}

// ---- strided reductions over (outer, len, inner) -----------------------------------------------
// Rows whose length is a multiple of 4 start 16-byte aligned: read them as float4 (the order of
// accumulation is still fixed by the shape alone).
template <class Op>
__device__ __forceinline__ typename Op::T step4(typename Op::T acc, float4 v) {
    return Op::step(Op::step(Op::step(Op::step(acc, v.x), v.y), v.z), v.w);
}

template <class Op>
__device__ __forceinline__ typename Op::T range_acc(const float* __restrict__ row, long long lo,
                                                    long long hi, int t, int nt, bool vec) {
    typename Op::T acc = Op::init();
    if (vec) {  // lo and hi are multiples of 4
        const float4* r4 = reinterpret_cast<const float4*>(row);
        for (long long j = (lo >> 2) + t; j < (hi >> 2); j += nt) acc = step4<Op>(acc, r4[j]);
    } else {
        for (long long j = lo + t; j < hi; j += nt) acc = Op::step(acc, row[j]);
    }
    return acc;
}

// Contiguous rows (inner == 1), short rows: one warp per row.
template <class Op>
__device__ void rows_warp(const float* __restrict__ x, long long outer, long long len,
                          float* __restrict__ out) {
    long long warps = TL_STRIDE >> 5;
    int lane = threadIdx.x & 31;
    bool vec = (len & 3) == 0;
    for (long long r = TL_TID >> 5; r < outer; r += warps) {
        typename Op::T acc = warp_reduce<Op>(range_acc<Op>(x + r * len, 0, len, lane, 32, vec));
        if (lane == 0) out[r] = Op::fin(acc);
    }
}

// Long rows: block b reduces chunk (b % split) of row (b / split); with split == 1 it writes the
// row's result, otherwise a partial that rows_finish combines in chunk order.
template <class Op>
__device__ void rows_block(const float* __restrict__ x, long long outer, long long len,
                           long long split, long long chunk, typename Op::T* __restrict__ partials,
                           float* __restrict__ out) {
    bool vec = (len & 3) == 0 && (chunk & 3) == 0;
    for (long long b = blockIdx.x; b < outer * split; b += gridDim.x) {
        long long r = b / split, c = b % split;
        long long lo = c * chunk, hi = min(len, lo + chunk);
        typename Op::T acc = block_reduce<Op>(range_acc<Op>(x + r * len, lo, hi, threadIdx.x, blockDim.x, vec));
        if (threadIdx.x == 0) {
            if (split == 1) out[r] = Op::fin(acc);
            else partials[b] = acc;
        }
        __syncthreads();
    }
}

template <class Op>
__device__ void rows_finish(const typename Op::T* __restrict__ partials, long long outer,
                            long long split, float* __restrict__ out) {
    for (long long r = TL_TID; r < outer; r += TL_STRIDE) {
        typename Op::T acc = Op::init();
        for (long long c = 0; c < split; ++c) acc = Op::comb(acc, partials[r * split + c]);
        out[r] = Op::fin(acc);
    }
}

// inner > 1: thread t = (c * outer + o) * inner + i walks chunk c of axis `len` at (o, i); reads
// are coalesced across i. split == 1 writes out[o * inner + i]; otherwise a partial.
template <class Op>
__device__ void cols(const float* __restrict__ x, long long outer, long long len, long long inner,
                     long long split, long long chunk, typename Op::T* __restrict__ partials,
                     float* __restrict__ out) {
    long long oi = outer * inner, total = oi * split;
    for (long long t = TL_TID; t < total; t += TL_STRIDE) {
        long long c = t / oi, rest = t - c * oi, o = rest / inner, i = rest - o * inner;
        long long lo = c * chunk, hi = min(len, lo + chunk);
        const float* p = x + o * len * inner + i;
        typename Op::T acc = Op::init();
        for (long long l = lo; l < hi; ++l) acc = Op::step(acc, p[l * inner]);
        if (split == 1) out[rest] = Op::fin(acc);
        else partials[t] = acc;
    }
}

template <class Op>
__device__ void cols_finish(const typename Op::T* __restrict__ partials, long long oi,
                            long long split, float* __restrict__ out) {
    for (long long j = TL_TID; j < oi; j += TL_STRIDE) {
        typename Op::T acc = Op::init();
        for (long long c = 0; c < split; ++c) acc = Op::comb(acc, partials[c * oi + j]);
        out[j] = Op::fin(acc);
    }
}

// inner > 1, short axis (one launch, no partials): block b owns a 32-wide tile of columns of one
// o; its warps split the axis (warp w takes l = w, w + nwarps, ...; lane i is column i of the
// tile, so a warp reads 128 contiguous bytes), and warp 0 adds the nwarps partials in warp order.
#define TL_TILE_WARPS 32
template <class Op>
__device__ void cols_tile(const float* __restrict__ x, long long outer, long long len, long long inner,
                          float* __restrict__ out) {
    __shared__ typename Op::T part[TL_TILE_WARPS][33];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    long long tiles = (inner + 31) >> 5;
    for (long long b = blockIdx.x; b < outer * tiles; b += gridDim.x) {
        long long o = b / tiles, i = ((b - o * tiles) << 5) + lane;
        typename Op::T acc = Op::init();
        if (i < inner) {
            const float* p = x + o * len * inner + i;
            long long l = warp;
            for (; l + 3 * nwarps < len; l += 4 * nwarps) {  // four loads in flight, added in order
                float v0 = p[l * inner], v1 = p[(l + nwarps) * inner];
                float v2 = p[(l + 2 * nwarps) * inner], v3 = p[(l + 3 * nwarps) * inner];
                acc = Op::step(Op::step(Op::step(Op::step(acc, v0), v1), v2), v3);
            }
            for (; l < len; l += nwarps) acc = Op::step(acc, p[l * inner]);
        }
        part[warp][lane] = acc;
        __syncthreads();
        if (warp == 0 && i < inner) {
            typename Op::T r = part[0][lane];
            for (int w = 1; w < nwarps; ++w) r = Op::comb(r, part[w][lane]);
            out[o * inner + i] = Op::fin(r);
        }
        __syncthreads();
    }
}

// inner > 1, long axis, few outputs (a bias gradient: 8192 rows of 384-3072 columns): the tile
// kernel above would run one block per 32 columns, too few to load the GPU. Block (b, c) here
// takes a 128-wide tile of columns (a float4 per lane when vec) over rows chunk c of the axis: its
// 8 warps take rows warp, warp + 8, ... of the chunk, and warp 0 adds the 8 partials in warp
// order into partials[c][o * inner + i]; cols_finish adds the chunks in order. The chunk count
// depends on the shape alone (strided_reduce), so the order of the adds is fixed by the shape.
#define TL_CHUNK_WARPS 8
template <class Op>
__device__ void cols_chunk(const float* __restrict__ x, long long outer, long long len, long long inner,
                           long long chunk, int vec, typename Op::T* __restrict__ partials) {
    __shared__ typename Op::T part[TL_CHUNK_WARPS][4 * 32 + 1];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    long long tiles = (inner + 127) >> 7, oi = outer * inner;
    long long lo = blockIdx.y * chunk, hi = min(len, lo + chunk);
    for (long long b = blockIdx.x; b < outer * tiles; b += gridDim.x) {
        long long o = b / tiles, i0 = ((b - o * tiles) << 7) + 4 * lane;
        typename Op::T a0 = Op::init(), a1 = Op::init(), a2 = Op::init(), a3 = Op::init();
        const float* p = x + o * len * inner + i0;
        if (vec && i0 < inner) {  // vec: inner % 4 == 0 and x 16-byte aligned, so i0 + 3 < inner
#pragma unroll 4
            for (long long l = lo + warp; l < hi; l += TL_CHUNK_WARPS) {
                float4 v = *reinterpret_cast<const float4*>(p + l * inner);
                a0 = Op::step(a0, v.x); a1 = Op::step(a1, v.y); a2 = Op::step(a2, v.z); a3 = Op::step(a3, v.w);
            }
        } else {
#pragma unroll 4
            for (long long l = lo + warp; l < hi; l += TL_CHUNK_WARPS) {
                const float* r = p + l * inner;
                if (i0 < inner) a0 = Op::step(a0, r[0]);
                if (i0 + 1 < inner) a1 = Op::step(a1, r[1]);
                if (i0 + 2 < inner) a2 = Op::step(a2, r[2]);
                if (i0 + 3 < inner) a3 = Op::step(a3, r[3]);
            }
        }
        part[warp][4 * lane] = a0; part[warp][4 * lane + 1] = a1;
        part[warp][4 * lane + 2] = a2; part[warp][4 * lane + 3] = a3;
        __syncthreads();
        if (warp == 0) {
            for (int w = 0; w < 4; ++w) {
                long long i = i0 + w;
                if (i < inner) {
                    typename Op::T r = part[0][4 * lane + w];
                    for (int k = 1; k < TL_CHUNK_WARPS; ++k) r = Op::comb(r, part[k][4 * lane + w]);
                    partials[blockIdx.y * oi + o * inner + i] = r;
                }
            }
        }
        __syncthreads();
    }
}

// (A, B, C) summed over A and C: out[b] (a per-channel sum such as a conv bias gradient), one
// launch. Block b owns channel b: warp w walks rows a = w, w + nwarps, ... (each a contiguous run
// of C floats, as float4 when vec), lanes striding the run; then a block tree. The order of the
// adds depends on the shape and the block size alone.
extern "C" __global__ void tl_reduce_from_broadcast_outer_inner(const float* __restrict__ x, long long A, long long B,
                                              long long C, int vec, float* __restrict__ out) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    for (long long b = blockIdx.x; b < B; b += gridDim.x) {
        double acc = 0.0;
        for (long long a = warp; a < A; a += nwarps) {
            const float* row = x + (a * B + b) * C;
            if (vec) {
                const float4* r4 = reinterpret_cast<const float4*>(row);
                for (long long j = lane; j < (C >> 2); j += 32) {
                    float4 v = r4[j];
                    acc += ((double)v.x + v.y) + ((double)v.z + v.w);
                }
            } else {
                for (long long j = lane; j < C; j += 32) acc += (double)row[j];
            }
        }
        acc = block_reduce<SumOp>(acc);
        if (threadIdx.x == 0) out[b] = (float)acc;
        __syncthreads();
    }
}

#define TL_STRIDED(SUFFIX, OP)                                                                   \
extern "C" __global__ void tl_reduce_rows_warp_##SUFFIX(const float* x, long long outer, long long len, \
                                                 float* out) {                                   \
    rows_warp<OP>(x, outer, len, out);                                                           \
}                                                                                                \
extern "C" __global__ void tl_reduce_rows_block_##SUFFIX(const float* x, long long outer, long long len,\
        long long split, long long chunk, OP::T* partials, float* out) {                         \
    rows_block<OP>(x, outer, len, split, chunk, partials, out);                                  \
}                                                                                                \
extern "C" __global__ void tl_reduce_rows_finish_##SUFFIX(const OP::T* partials, long long outer,       \
                                                   long long split, float* out) {                \
    rows_finish<OP>(partials, outer, split, out);                                                \
}                                                                                                \
extern "C" __global__ void tl_reduce_cols_##SUFFIX(const float* x, long long outer, long long len,      \
        long long inner, long long split, long long chunk, OP::T* partials, float* out) {        \
    cols<OP>(x, outer, len, inner, split, chunk, partials, out);                                 \
}                                                                                                \
extern "C" __global__ void tl_reduce_cols_finish_##SUFFIX(const OP::T* partials, long long oi,         \
                                                   long long split, float* out) {                \
    cols_finish<OP>(partials, oi, split, out);                                                   \
}                                                                                                \
extern "C" __global__ void tl_reduce_cols_tile_##SUFFIX(const float* x, long long outer, long long len, \
                                                 long long inner, float* out) {                  \
    cols_tile<OP>(x, outer, len, inner, out);                                                    \
}                                                                                                \
extern "C" __global__ void tl_reduce_cols_chunk_##SUFFIX(const float* x, long long outer, long long len, \
        long long inner, long long chunk, int vec, OP::T* partials) {                            \
    cols_chunk<OP>(x, outer, len, inner, chunk, vec, partials);                                  \
}

TL_STRIDED(sum, SumOp)
TL_STRIDED(max, MaxOp)

// ---- softmax / log-softmax rows --------------------------------------------------------------
// Group = a warp (rows of <= 1024 columns) or a block (longer rows); the group makes three
// passes over its row (max, sum of exp, write), so a short row is read from DRAM once and then
// from L1. The sum accumulates in double. Same formulas as kernels/cpu/reduce.py.
template <bool BLOCK_GROUP>
__device__ __forceinline__ float group_max(float v) {
    return BLOCK_GROUP ? block_reduce<MaxOp>(v) : warp_reduce<MaxOp>(v);
}
template <bool BLOCK_GROUP>
__device__ __forceinline__ double group_sum(double v) {
    return BLOCK_GROUP ? block_reduce<SumOp>(v) : warp_reduce<SumOp>(v);
}

template <bool BLOCK_GROUP, bool LOG>
__device__ void softmax_rows_impl(const float* __restrict__ x, long long rows, long long cols,
                                  float* __restrict__ y) {
    long long g0 = BLOCK_GROUP ? blockIdx.x : (TL_TID >> 5);
    long long ng = BLOCK_GROUP ? gridDim.x : (TL_STRIDE >> 5);
    int t = BLOCK_GROUP ? threadIdx.x : (threadIdx.x & 31);
    int nt = BLOCK_GROUP ? blockDim.x : 32;
    for (long long r = g0; r < rows; r += ng) {
        const float* xr = x + r * cols;
        float* yr = y + r * cols;
        float m = TL_NAN;
        for (long long j = t; j < cols; j += nt) m = fmaxf(m, xr[j]);
        m = group_max<BLOCK_GROUP>(m);
        // np.max propagates NaN: exp(NaN - m) below then makes the whole row NaN, as on the CPU.
        double s = 0.0;
        for (long long j = t; j < cols; j += nt) s += (double)expf(xr[j] - m);
        s = group_sum<BLOCK_GROUP>(s);
        float sf = (float)s;
        if (LOG) {
            float lse = logf(sf);
            for (long long j = t; j < cols; j += nt) yr[j] = (xr[j] - m) - lse;
        } else {
            for (long long j = t; j < cols; j += nt) yr[j] = expf(xr[j] - m) / sf;
        }
    }
}

// dx = y * (dy - sum(dy * y)) (softmax) or dy - exp(y) * sum(dy) (log-softmax)
template <bool BLOCK_GROUP, bool LOG>
__device__ void softmax_rows_bwd_impl(const float* __restrict__ y, const float* __restrict__ dy,
                                      long long rows, long long cols, float* __restrict__ dx) {
    long long g0 = BLOCK_GROUP ? blockIdx.x : (TL_TID >> 5);
    long long ng = BLOCK_GROUP ? gridDim.x : (TL_STRIDE >> 5);
    int t = BLOCK_GROUP ? threadIdx.x : (threadIdx.x & 31);
    int nt = BLOCK_GROUP ? blockDim.x : 32;
    for (long long r = g0; r < rows; r += ng) {
        const float* yr = y + r * cols;
        const float* dr = dy + r * cols;
        float* xr = dx + r * cols;
        double s = 0.0;
        for (long long j = t; j < cols; j += nt) s += LOG ? (double)dr[j] : (double)dr[j] * yr[j];
        float sf = (float)group_sum<BLOCK_GROUP>(s);
        for (long long j = t; j < cols; j += nt)
            xr[j] = LOG ? dr[j] - expf(yr[j]) * sf : yr[j] * (dr[j] - sf);
    }
}

// Rows of at most 1024 columns, a multiple of 4: a warp holds its row in registers (8 float4
// per lane), so each row is read from DRAM once and written once.
#define TL_REG4 8
template <bool LOG>
__device__ void softmax_rows_reg(const float* __restrict__ x, long long rows, long long cols,
                                 float* __restrict__ y) {
    const int lane = threadIdx.x & 31;
    const long long c4 = cols >> 2;
    for (long long r = TL_TID >> 5; r < rows; r += TL_STRIDE >> 5) {
        const float4* xr = reinterpret_cast<const float4*>(x + r * cols);
        float4* yr = reinterpret_cast<float4*>(y + r * cols);
        float4 v[TL_REG4];
        float m = TL_NAN;
#pragma unroll
        for (int t = 0; t < TL_REG4; ++t) {
            long long j = lane + 32 * t;
            if (j < c4) { v[t] = xr[j]; m = fmaxf(fmaxf(fmaxf(fmaxf(m, v[t].x), v[t].y), v[t].z), v[t].w); }
        }
        m = warp_reduce<MaxOp>(m);
        double s = 0.0;
#pragma unroll
        for (int t = 0; t < TL_REG4; ++t) {
            if (lane + 32 * t < c4) {
                float4 e = make_float4(expf(v[t].x - m), expf(v[t].y - m), expf(v[t].z - m), expf(v[t].w - m));
                s += ((double)e.x + e.y) + ((double)e.z + e.w);
                if (!LOG) v[t] = e;
            }
        }
        float sf = (float)warp_reduce<SumOp>(s);
        float lse = LOG ? logf(sf) : 0.f;
#pragma unroll
        for (int t = 0; t < TL_REG4; ++t) {
            long long j = lane + 32 * t;
            if (j < c4) {
                float4 o;
                if (LOG) o = make_float4((v[t].x - m) - lse, (v[t].y - m) - lse, (v[t].z - m) - lse, (v[t].w - m) - lse);
                else o = make_float4(v[t].x / sf, v[t].y / sf, v[t].z / sf, v[t].w / sf);
                yr[j] = o;
            }
        }
    }
}

template <bool LOG>
__device__ void softmax_rows_bwd_reg(const float* __restrict__ y, const float* __restrict__ dy,
                                     long long rows, long long cols, float* __restrict__ dx) {
    const int lane = threadIdx.x & 31;
    const long long c4 = cols >> 2;
    for (long long r = TL_TID >> 5; r < rows; r += TL_STRIDE >> 5) {
        const float4* yr = reinterpret_cast<const float4*>(y + r * cols);
        const float4* dr = reinterpret_cast<const float4*>(dy + r * cols);
        float4* xr = reinterpret_cast<float4*>(dx + r * cols);
        float4 yv[TL_REG4], dv[TL_REG4];
        double s = 0.0;
#pragma unroll
        for (int t = 0; t < TL_REG4; ++t) {
            if (lane + 32 * t < c4) {
                yv[t] = yr[lane + 32 * t];
                dv[t] = dr[lane + 32 * t];
                if (LOG) s += ((double)dv[t].x + dv[t].y) + ((double)dv[t].z + dv[t].w);
                else s += ((double)dv[t].x * yv[t].x + (double)dv[t].y * yv[t].y) +
                          ((double)dv[t].z * yv[t].z + (double)dv[t].w * yv[t].w);
            }
        }
        float sf = (float)warp_reduce<SumOp>(s);
#pragma unroll
        for (int t = 0; t < TL_REG4; ++t) {
            if (lane + 32 * t < c4) {
                float4 a = yv[t], d = dv[t], o;
                if (LOG) o = make_float4(d.x - expf(a.x) * sf, d.y - expf(a.y) * sf, d.z - expf(a.z) * sf, d.w - expf(a.w) * sf);
                else o = make_float4(a.x * (d.x - sf), a.y * (d.y - sf), a.z * (d.z - sf), a.w * (d.w - sf));
                xr[lane + 32 * t] = o;
            }
        }
    }
}

extern "C" __global__ void tl_softmax_rows_reg(const float* x, long long rows, long long cols, float* y) {
    softmax_rows_reg<false>(x, rows, cols, y);
}
extern "C" __global__ void tl_log_softmax_rows_reg(const float* x, long long rows, long long cols, float* y) {
    softmax_rows_reg<true>(x, rows, cols, y);
}
extern "C" __global__ void tl_softmax_rows_bwd_reg(const float* y, const float* dy, long long rows,
                                                   long long cols, float* dx) {
    softmax_rows_bwd_reg<false>(y, dy, rows, cols, dx);
}
extern "C" __global__ void tl_log_softmax_rows_bwd_reg(const float* y, const float* dy, long long rows,
                                                       long long cols, float* dx) {
    softmax_rows_bwd_reg<true>(y, dy, rows, cols, dx);
}

// PRIM is softmax_rows or log_softmax_rows; VARIANT warp (a warp per row) or block (a block per row).
#define TL_SOFTMAX(PRIM, VARIANT, BG, LOG)                                                       \
extern "C" __global__ void tl_##PRIM##_##VARIANT(const float* x, long long rows, long long cols, \
                                                 float* y) {                                     \
    softmax_rows_impl<BG, LOG>(x, rows, cols, y);                                                \
}                                                                                                \
extern "C" __global__ void tl_##PRIM##_bwd_##VARIANT(const float* y, const float* dy,            \
                                                     long long rows, long long cols, float* dx) { \
    softmax_rows_bwd_impl<BG, LOG>(y, dy, rows, cols, dx);                                       \
}

TL_SOFTMAX(softmax_rows, warp, false, false)
TL_SOFTMAX(softmax_rows, block, true, false)
TL_SOFTMAX(log_softmax_rows, warp, false, true)
TL_SOFTMAX(log_softmax_rows, block, true, true)
