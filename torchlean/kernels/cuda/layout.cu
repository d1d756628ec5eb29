// Layout kernels: one strided gather (broadcast, permute, axis swaps), a tiled 2-D transpose, and
// narrow_block / narrow_block_bwd (at the end).
//
// tl_layout_strided_m{MODE}_r{R}: out[i] = x[offset(i)] for i in [0, n), where the output is row-major
// over dims d0..d{R-1} and offset(i) = sum_k coord_k(i) * s_k (s_k = 0 on broadcast axes). Each
// thread divides once to find its first coordinates, then walks its grid-stride sequence with a
// mixed-radix add (no division per element). Writes are always coalesced.
//   MODE 0: float -> float.
//   MODE 1: float4 -> float4: dims, strides and n are in float4 units (innermost stride 1).
//   MODE 2: float -> float4 splat: the innermost axis has stride 0 and d{R-1}, n count float4s;
//           strides count floats.
// tl_layout_strided_tab_m{MODE}: as R = 8, but axis 0's offsets come from a table (tab[c0]); the host
// uses it when more than 8 axes remain after collapsing (axis 0 enumerates the outer axes).

template <int MODE, int R, bool TAB>
__device__ __forceinline__ void tl_layout_strided_body(const float* __restrict__ x, float* __restrict__ out,
                                                const long long* __restrict__ tab, long long n,
                                                const long long (&d)[8], const long long (&s)[8]) {
    long long i = TL_TID;
    if (i >= n) return;
    const long long step = TL_STRIDE;
    long long c[R], sd[R], w[R];
    long long off = 0, dstep = 0, t = i, u = step;
#pragma unroll
    for (int k = R - 1; k >= 0; --k) {
        const long long dk = d[k];
        const long long sk = (TAB && k == 0) ? 0 : s[k];
        c[k] = t % dk; t /= dk;
        sd[k] = u % dk; u /= dk;
        off += c[k] * sk;
        dstep += sd[k] * sk;
        // a carry out of axis k: coordinate k drops by d_k, coordinate k-1 rises by one
        const long long sprev = (k == 0 || (TAB && k == 1)) ? 0 : s[k - 1];
        w[k] = sprev - dk * sk;
    }
    for (;;) {
        const long long o = TAB ? off + tab[c[0]] : off;
        if (MODE == 0) {
            out[i] = x[o];
        } else if (MODE == 1) {
            reinterpret_cast<float4*>(out)[i] = reinterpret_cast<const float4*>(x)[o];
        } else {
            const float v = x[o];
            reinterpret_cast<float4*>(out)[i] = make_float4(v, v, v, v);
        }
        i += step;
        if (i >= n) break;  // past this point the coordinates never overflow axis 0
        off += dstep;
        int carry = 0;
#pragma unroll
        for (int k = R - 1; k >= 0; --k) {
            c[k] += sd[k] + carry;
            carry = c[k] >= d[k];
            if (carry) { c[k] -= d[k]; off += w[k]; }
        }
    }
}

// The gather's shape, passed by value as one argument (the host caches its bytes per plan: one
// argument costs the launch far less host time than seventeen).
struct TlStrided {
    long long n;
    long long d[8];
    long long s[8];
};

#define TL_STRIDED(MODE, R)                                                                        \
    extern "C" __global__ void tl_layout_strided_m##MODE##_r##R(const float* __restrict__ x,             \
                                                         float* __restrict__ out, const TlStrided a) { \
        tl_layout_strided_body<MODE, R, false>(x, out, nullptr, a.n, a.d, a.s);                          \
    }
#define TL_STRIDED_ALL_R(MODE) \
    TL_STRIDED(MODE, 1) TL_STRIDED(MODE, 2) TL_STRIDED(MODE, 3) TL_STRIDED(MODE, 4) \
    TL_STRIDED(MODE, 5) TL_STRIDED(MODE, 6) TL_STRIDED(MODE, 7) TL_STRIDED(MODE, 8)
#define TL_STRIDED_TAB(MODE)                                                                       \
    extern "C" __global__ void tl_layout_strided_tab_m##MODE(const float* __restrict__ x,                \
                                                      float* __restrict__ out,                     \
                                                      const long long* __restrict__ tab, const TlStrided a) { \
        tl_layout_strided_body<MODE, 8, true>(x, out, tab, a.n, a.d, a.s);                               \
    }

TL_STRIDED_ALL_R(0)
TL_STRIDED_ALL_R(1)
TL_STRIDED_ALL_R(2)
TL_STRIDED_TAB(0)
TL_STRIDED_TAB(1)
TL_STRIDED_TAB(2)

// Batched transpose: x is (batch, rows, cols), out is (batch, cols, rows). Block (32, 8); each
// block moves 32x32 tiles through shared memory (+1 column of padding: no bank conflicts), so
// both the reads and the writes are coalesced. Grid-stride over tiles on all three grid axes, so
// any grid (within the hardware limits) is correct.
#define TL_TILE 32
#define TL_TILE_ROWS 8
extern "C" __global__ void tl_layout_transpose(const float* __restrict__ x, float* __restrict__ out,
                                        long long batch, long long rows, long long cols) {
    __shared__ float tile[TL_TILE][TL_TILE + 1];
    const long long tiles_x = (cols + TL_TILE - 1) / TL_TILE;
    const long long tiles_y = (rows + TL_TILE - 1) / TL_TILE;
    const long long plane = rows * cols;
    const int tx = threadIdx.x, ty = threadIdx.y;
    for (long long b = blockIdx.z; b < batch; b += gridDim.z) {
        const float* src = x + b * plane;
        float* dst = out + b * plane;
        for (long long by = blockIdx.y; by < tiles_y; by += gridDim.y) {
            for (long long bx = blockIdx.x; bx < tiles_x; bx += gridDim.x) {
                const long long r0 = by * TL_TILE, c0 = bx * TL_TILE;
#pragma unroll
                for (int j = ty; j < TL_TILE; j += TL_TILE_ROWS) {
                    const long long r = r0 + j, c = c0 + tx;
                    if (r < rows && c < cols) tile[j][tx] = src[r * cols + c];
                }
                __syncthreads();
#pragma unroll
                for (int j = ty; j < TL_TILE; j += TL_TILE_ROWS) {
                    const long long r = c0 + j, c = r0 + tx;  // output row = input column
                    if (r < cols && c < rows) dst[r * rows + c] = tile[tx][j];
                }
                __syncthreads();  // the tile is refilled by the next iteration
            }
        }
    }
}

// narrow_block: x (rows, s) -> out (rows, w) = x[:, off:off+w], a row of the output per blockIdx.y
// (grid-stride over rows when there are more than gridDim.y), its columns grid-stride over
// blockIdx.x: no division per element. _v4 moves float4s: the host passes w, s and off in float4
// units, and only when all three are multiples of 4 floats and both pointers are 16-byte aligned.
// narrow_block_bwd: dy (rows, w) -> out (rows, s), dy at columns [off, off+w), zeros elsewhere;
// each output element written once (no memset first).
#define TL_NARROW_BLOCK(SUFFIX, T, ZERO)                                                               \
    extern "C" __global__ void tl_narrow_block_##SUFFIX(const T* __restrict__ x, T* __restrict__ out,  \
                                                       long long rows, long long w, long long s,       \
                                                       long long off) {                                \
        for (long long r = blockIdx.y; r < rows; r += gridDim.y) {                                     \
            const T* src = x + r * s + off;                                                            \
            T* dst = out + r * w;                                                                      \
            for (long long j = TL_TID; j < w; j += TL_STRIDE) dst[j] = src[j];                         \
        }                                                                                              \
    }                                                                                                  \
    extern "C" __global__ void tl_narrow_block_bwd_##SUFFIX(const T* __restrict__ dy, T* __restrict__ out, \
                                                           long long rows, long long w, long long s,   \
                                                           long long off) {                            \
        for (long long r = blockIdx.y; r < rows; r += gridDim.y) {                                     \
            const T* src = dy + r * w;                                                                 \
            T* dst = out + r * s;                                                                      \
            for (long long j = TL_TID; j < s; j += TL_STRIDE) {                                        \
                const long long k = j - off; /* k < 0 wraps to a huge unsigned value: a zero */       \
                dst[j] = (unsigned long long)k < (unsigned long long)w ? src[k] : ZERO;                \
            }                                                                                          \
        }                                                                                              \
    }

TL_NARROW_BLOCK(f, float, 0.0f)
TL_NARROW_BLOCK(v4, float4, make_float4(0.0f, 0.0f, 0.0f, 0.0f))

// concat_block: rows of a (rows, wa) and b (rows, wb) joined into out (rows, wa + wb); the grid as
// narrow_block_bwd's (one row per blockIdx.y), each element of out written once.
#define TL_CONCAT_BLOCK(SUFFIX, T)                                                                     \
    extern "C" __global__ void tl_concat_block_##SUFFIX(const T* __restrict__ a, const T* __restrict__ b, \
                                                        T* __restrict__ out, long long rows,           \
                                                        long long wa, long long wb) {                  \
        const long long s = wa + wb;                                                                   \
        for (long long r = blockIdx.y; r < rows; r += gridDim.y) {                                     \
            const T* ra = a + r * wa;                                                                  \
            const T* rb = b + r * wb;                                                                  \
            T* dst = out + r * s;                                                                      \
            for (long long j = TL_TID; j < s; j += TL_STRIDE) dst[j] = j < wa ? ra[j] : rb[j - wa];    \
        }                                                                                              \
    }

TL_CONCAT_BLOCK(f, float)
TL_CONCAT_BLOCK(v4, float4)
