// Normalization kernels: layer norm and batch norm, forward and backward (launched by norm.py).
//
// Determinism: every sum runs in an order fixed by the shape alone (per-thread loops over fixed
// ranges, warp butterflies, block trees, partials combined in index order by a separate pass);
// grids that carry partial sums have sizes computed from the shape, never from the device. No
// atomics anywhere, so results are bitwise repeatable in every mode.
//
// Precision: statistics and the per-element formulas run in double (on an H200 the extra
// arithmetic is hidden under the memory traffic) and each output is rounded to float once; this
// is far inside the float32 contracts, and double never overflows or underflows for float32
// data, so huge and tiny rows need no special path. Layer norm's variance is two-pass from
// registers; batch norm's is one pass of shifted sums (sum of d and d^2, d = x - K with K the
// channel's first element), combined in double.

// Sums of two doubles over a block, in a fixed order; every thread gets both results.
// `scratch` holds 64 doubles; blockDim.x is a multiple of 32.
__device__ __forceinline__ void block_sum2_d(double& a, double& b, double* scratch) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    a = tl_warp_sum_d(a);
    b = tl_warp_sum_d(b);
    __syncthreads();  // scratch may still be read by a previous call
    if (lane == 0) { scratch[warp] = a; scratch[32 + warp] = b; }
    __syncthreads();
    a = lane < nwarps ? scratch[lane] : 0.0;
    b = lane < nwarps ? scratch[32 + lane] : 0.0;
    a = tl_warp_sum_d(a);
    b = tl_warp_sum_d(b);
}

// One element of y = ((x - mu) r) g + b, in double, rounded once.
__device__ __forceinline__ float ln_out(float x, double mu, double r, const float* gamma,
                                        const float* beta, long long j) {
    double h = ((double)x - mu) * r;
    if (gamma) h = h * (double)gamma[j];
    if (beta) h = h + (double)beta[j];
    return (float)h;
}

__device__ __forceinline__ double rstd_d(double var, float eps) {
    return 1.0 / sqrt(var + (double)eps);
}

// ==== layer norm forward ===========================================================================
// Rows of at most 1024 columns: a warp per row holding the row in registers (8 float4 per lane
// when cols % 4 == 0, else 32 floats), so x is read once and y written once.
#define LN_REG4 8
#define LN_REG 32

extern "C" __global__ void tl_layer_norm_fwd_warp4(const float* __restrict__ x, const float* __restrict__ gamma,
                                           const float* __restrict__ beta, long long rows, long long cols,
                                           float eps, float* __restrict__ y, float* __restrict__ mean,
                                           float* __restrict__ var) {
    const int lane = threadIdx.x & 31;
    const long long c4 = cols >> 2;
    const double n = (double)cols;
    for (long long r = TL_TID >> 5; r < rows; r += TL_STRIDE >> 5) {
        const float4* xr = reinterpret_cast<const float4*>(x + r * cols);
        float4* yr = reinterpret_cast<float4*>(y + r * cols);
        float4 v[LN_REG4];
        double s = 0.0;
#pragma unroll
        for (int t = 0; t < LN_REG4; ++t) {
            long long j = lane + 32 * t;
            if (j < c4) {
                v[t] = xr[j];
                s += ((double)v[t].x + v[t].y) + ((double)v[t].z + v[t].w);
            }
        }
        const double mu = tl_warp_sum_d(s) / n;
        double q = 0.0;
#pragma unroll
        for (int t = 0; t < LN_REG4; ++t) {
            if (lane + 32 * t < c4) {
                double a = v[t].x - mu, b = v[t].y - mu, c = v[t].z - mu, d = v[t].w - mu;
                q += (a * a + b * b) + (c * c + d * d);
            }
        }
        const double vr = tl_warp_sum_d(q) / n;
        const double rs = rstd_d(vr, eps);
#pragma unroll
        for (int t = 0; t < LN_REG4; ++t) {
            long long j = lane + 32 * t;
            if (j < c4) {
                long long k = 4 * j;
                yr[j] = make_float4(ln_out(v[t].x, mu, rs, gamma, beta, k), ln_out(v[t].y, mu, rs, gamma, beta, k + 1),
                                    ln_out(v[t].z, mu, rs, gamma, beta, k + 2), ln_out(v[t].w, mu, rs, gamma, beta, k + 3));
            }
        }
        if (lane == 0) { mean[r] = (float)mu; var[r] = (float)vr; }
    }
}

extern "C" __global__ void tl_layer_norm_fwd_warp(const float* __restrict__ x, const float* __restrict__ gamma,
                                          const float* __restrict__ beta, long long rows, long long cols,
                                          float eps, float* __restrict__ y, float* __restrict__ mean,
                                          float* __restrict__ var) {
    const int lane = threadIdx.x & 31;
    const double n = (double)cols;
    for (long long r = TL_TID >> 5; r < rows; r += TL_STRIDE >> 5) {
        const float* xr = x + r * cols;
        float* yr = y + r * cols;
        float v[LN_REG];
        double s = 0.0;
#pragma unroll
        for (int t = 0; t < LN_REG; ++t) {
            long long j = lane + 32 * t;
            if (j < cols) { v[t] = xr[j]; s += (double)v[t]; }
        }
        const double mu = tl_warp_sum_d(s) / n;
        double q = 0.0;
#pragma unroll
        for (int t = 0; t < LN_REG; ++t) {
            if (lane + 32 * t < cols) { double a = v[t] - mu; q += a * a; }
        }
        const double vr = tl_warp_sum_d(q) / n;
        const double rs = rstd_d(vr, eps);
#pragma unroll
        for (int t = 0; t < LN_REG; ++t) {
            long long j = lane + 32 * t;
            if (j < cols) yr[j] = ln_out(v[t], mu, rs, gamma, beta, j);
        }
        if (lane == 0) { mean[r] = (float)mu; var[r] = (float)vr; }
    }
}

// Longer rows: a block per row, three passes over the row (it stays in L1/L2 between them).
extern "C" __global__ void tl_layer_norm_fwd_block(const float* __restrict__ x, const float* __restrict__ gamma,
                                           const float* __restrict__ beta, long long rows, long long cols,
                                           float eps, float* __restrict__ y, float* __restrict__ mean,
                                           float* __restrict__ var) {
    __shared__ double scratch[32];
    const double n = (double)cols;
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* xr = x + r * cols;
        float* yr = y + r * cols;
        double s = 0.0;
        for (long long j = threadIdx.x; j < cols; j += blockDim.x) s += (double)xr[j];
        const double mu = tl_block_sum_d(s, scratch) / n;
        double q = 0.0;
        for (long long j = threadIdx.x; j < cols; j += blockDim.x) { double a = xr[j] - mu; q += a * a; }
        const double vr = tl_block_sum_d(q, scratch) / n;
        const double rs = rstd_d(vr, eps);
        for (long long j = threadIdx.x; j < cols; j += blockDim.x) yr[j] = ln_out(xr[j], mu, rs, gamma, beta, j);
        if (threadIdx.x == 0) { mean[r] = (float)mu; var[r] = (float)vr; }
    }
}

// ==== layer norm backward ==========================================================================
// dx = r (g dy - mean(g dy) - xhat mean(g dy xhat)) per row, fused with the column partial sums
// of dy * xhat (dgamma) and dy (dbeta): each group (a warp or a block) walks a FIXED set of rows
// (r = group, group + ngroups, ...) and keeps its columns' partials in registers; the partials
// are written as rows of part_g / part_b (one per block) and tl_norm_colsum2 adds them in order.

// Rows of at most 128 columns: a warp per row, 4 columns per lane (j = lane + 32 t); the 8 warps
// of a block combine their partials through shared memory in warp order. blockDim.x == 256.
#define LNB_WARP_COLS 128
extern "C" __global__ void __launch_bounds__(256) tl_layer_norm_bwd_warp(
        const float* __restrict__ x, const float* __restrict__ gamma, const float* __restrict__ mean,
        const float* __restrict__ var, const float* __restrict__ dy, long long rows, long long cols, float eps,
        long long ngroups, float* __restrict__ dx, float* __restrict__ part_g, float* __restrict__ part_b) {
    __shared__ float red[8][LNB_WARP_COLS];
    const int lane = threadIdx.x & 31, wib = threadIdx.x >> 5;
    const long long group = (long long)blockIdx.x * 8 + wib;
    const double n = (double)cols;
    float pg[4] = {0.f, 0.f, 0.f, 0.f}, pb[4] = {0.f, 0.f, 0.f, 0.f};
    for (long long r = group; group < ngroups && r < rows; r += ngroups) {
        const double mu = (double)mean[r], rs = rstd_d((double)var[r], eps);
        float xv[4], dv[4];
        double s1 = 0.0, s2 = 0.0;
#pragma unroll
        for (int t = 0; t < 4; ++t) {
            long long j = lane + 32 * t;
            if (j < cols) {
                xv[t] = x[r * cols + j];
                dv[t] = dy[r * cols + j];
                double h = ((double)xv[t] - mu) * rs;
                double gd = gamma ? (double)gamma[j] * dv[t] : (double)dv[t];
                s1 += gd;
                s2 += gd * h;
                pg[t] += (float)(dv[t] * h);
                pb[t] += dv[t];
            }
        }
        const double m1 = tl_warp_sum_d(s1) / n, m2 = tl_warp_sum_d(s2) / n;
#pragma unroll
        for (int t = 0; t < 4; ++t) {
            long long j = lane + 32 * t;
            if (j < cols) {
                double h = ((double)xv[t] - mu) * rs;
                double gd = gamma ? (double)gamma[j] * dv[t] : (double)dv[t];
                dx[r * cols + j] = (float)(rs * ((gd - m1) - h * m2));
            }
        }
    }
    float* const parts[2] = {part_g, part_b};
#pragma unroll
    for (int k = 0; k < 2; ++k) {
#pragma unroll
        for (int t = 0; t < 4; ++t) {
            int j = lane + 32 * t;
            if (j < cols) red[wib][j] = k == 0 ? pg[t] : pb[t];
        }
        __syncthreads();
        for (int j = threadIdx.x; j < cols; j += blockDim.x) {
            double acc = 0.0;
            for (int w = 0; w < 8; ++w) acc += (double)red[w][j];
            parts[k][blockIdx.x * cols + j] = (float)acc;
        }
        __syncthreads();
    }
}

// Rows of 129..256*PER columns: a block (256 threads) per row; thread t owns PER columns
// (float4 groups 4 (t + 256 k) + 0..3 when VEC, else j = t + 256 k) and their partials. The next
// row's x and dy are loaded before this row's block reduction, so loads stay in flight.
template <int PER, bool VEC>
__device__ __forceinline__ long long ln_col(int k) {
    return VEC ? 4 * (threadIdx.x + 256 * (k >> 2)) + (k & 3) : threadIdx.x + 256 * k;
}

template <int PER, bool VEC>
__device__ __forceinline__ void ln_load_row(const float* __restrict__ x, const float* __restrict__ dy, long long r,
                                            long long cols, float* xv, float* dv) {
#pragma unroll
    for (int k = 0; k < PER; ++k) {
        long long j = ln_col<PER, VEC>(k);
        if (VEC && (k & 3) == 0 && j < cols) {  // one float4 load for four columns
            float4 a = reinterpret_cast<const float4*>(x + r * cols)[j >> 2];
            float4 b = reinterpret_cast<const float4*>(dy + r * cols)[j >> 2];
            xv[k] = a.x; xv[k + 1] = a.y; xv[k + 2] = a.z; xv[k + 3] = a.w;
            dv[k] = b.x; dv[k + 1] = b.y; dv[k + 2] = b.z; dv[k + 3] = b.w;
        } else if (!VEC && j < cols) {
            xv[k] = x[r * cols + j];
            dv[k] = dy[r * cols + j];
        }
    }
}

template <int PER, bool VEC>
__device__ void ln_bwd_block(const float* __restrict__ x, const float* __restrict__ gamma,
                             const float* __restrict__ mean, const float* __restrict__ var,
                             const float* __restrict__ dy, long long rows, long long cols, float eps,
                             float* __restrict__ dx, float* __restrict__ part_g, float* __restrict__ part_b) {
    __shared__ double scratch[64];
    const double n = (double)cols;
    float pg[PER], pb[PER], xv[PER], dv[PER], xn[PER], dn[PER];
#pragma unroll
    for (int k = 0; k < PER; ++k) { pg[k] = 0.f; pb[k] = 0.f; xv[k] = 0.f; dv[k] = 0.f; xn[k] = 0.f; dn[k] = 0.f; }
    long long r = blockIdx.x;
    if (r < rows) ln_load_row<PER, VEC>(x, dy, r, cols, xv, dv);
    for (; r < rows; r += gridDim.x) {
        if (r + gridDim.x < rows) ln_load_row<PER, VEC>(x, dy, r + gridDim.x, cols, xn, dn);
        const double mu = (double)mean[r], rs = rstd_d((double)var[r], eps);
        double s1 = 0.0, s2 = 0.0;
#pragma unroll
        for (int k = 0; k < PER; ++k) {
            long long j = ln_col<PER, VEC>(k);
            if (j < cols) {
                double h = ((double)xv[k] - mu) * rs;
                double gd = gamma ? (double)gamma[j] * dv[k] : (double)dv[k];
                s1 += gd;
                s2 += gd * h;
                pg[k] += (float)(dv[k] * h);
                pb[k] += dv[k];
            }
        }
        block_sum2_d(s1, s2, scratch);
        const double m1 = s1 / n, m2 = s2 / n;
#pragma unroll
        for (int k = 0; k < PER; ++k) {
            long long j = ln_col<PER, VEC>(k);
            if (j < cols) {
                double h = ((double)xv[k] - mu) * rs;
                double gd = gamma ? (double)gamma[j] * dv[k] : (double)dv[k];
                dx[r * cols + j] = (float)(rs * ((gd - m1) - h * m2));
            }
            xv[k] = xn[k];
            dv[k] = dn[k];
        }
    }
#pragma unroll
    for (int k = 0; k < PER; ++k) {
        long long j = ln_col<PER, VEC>(k);
        if (j < cols) {
            part_g[blockIdx.x * cols + j] = pg[k];
            part_b[blockIdx.x * cols + j] = pb[k];
        }
    }
}

#define TL_LN_BWD_BLOCK(PER, VEC, NAME)                                                              \
extern "C" __global__ void __launch_bounds__(256) NAME(                                            \
        const float* x, const float* gamma, const float* mean, const float* var, const float* dy,    \
        long long rows, long long cols, float eps, float* dx, float* part_g, float* part_b) {        \
    ln_bwd_block<PER, VEC>(x, gamma, mean, var, dy, rows, cols, eps, dx, part_g, part_b);            \
}
TL_LN_BWD_BLOCK(4, true, tl_layer_norm_bwd_block4_v)
TL_LN_BWD_BLOCK(8, true, tl_layer_norm_bwd_block8_v)
TL_LN_BWD_BLOCK(16, true, tl_layer_norm_bwd_block16_v)
TL_LN_BWD_BLOCK(4, false, tl_layer_norm_bwd_block4)
TL_LN_BWD_BLOCK(8, false, tl_layer_norm_bwd_block8)
TL_LN_BWD_BLOCK(16, false, tl_layer_norm_bwd_block16)

// Rows of more than 256*16 columns: dx by a block per row (two passes over the row), and the
// column partials by tl_layer_norm_bwd_cols (a thread per column and chunk of rows) in a second launch.
extern "C" __global__ void tl_layer_norm_bwd_rows(const float* __restrict__ x, const float* __restrict__ gamma,
                                          const float* __restrict__ mean, const float* __restrict__ var,
                                          const float* __restrict__ dy, long long rows, long long cols,
                                          float eps, float* __restrict__ dx) {
    __shared__ double scratch[64];
    const double n = (double)cols;
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        const double mu = (double)mean[r], rs = rstd_d((double)var[r], eps);
        const float* xr = x + r * cols;
        const float* dr = dy + r * cols;
        double s1 = 0.0, s2 = 0.0;
        for (long long j = threadIdx.x; j < cols; j += blockDim.x) {
            double h = ((double)xr[j] - mu) * rs;
            double gd = gamma ? (double)gamma[j] * dr[j] : (double)dr[j];
            s1 += gd;
            s2 += gd * h;
        }
        block_sum2_d(s1, s2, scratch);
        const double m1 = s1 / n, m2 = s2 / n;
        for (long long j = threadIdx.x; j < cols; j += blockDim.x) {
            double h = ((double)xr[j] - mu) * rs;
            double gd = gamma ? (double)gamma[j] * dr[j] : (double)dr[j];
            dx[r * cols + j] = (float)(rs * ((gd - m1) - h * m2));
        }
    }
}

// part_g[s, j] = sum of dy * xhat and part_b[s, j] = sum of dy over rows [s chunk, (s+1) chunk).
extern "C" __global__ void tl_layer_norm_bwd_cols(const float* __restrict__ x, const float* __restrict__ mean,
                                          const float* __restrict__ var, const float* __restrict__ dy,
                                          long long rows, long long cols, float eps, long long nchunks,
                                          long long chunk, float* __restrict__ part_g, float* __restrict__ part_b) {
    for (long long t = TL_TID; t < nchunks * cols; t += TL_STRIDE) {
        long long s = t / cols, j = t - s * cols;
        long long r1 = min(rows, (s + 1) * chunk);
        double ag = 0.0, ab = 0.0;
        for (long long r = s * chunk; r < r1; ++r) {
            double h = ((double)x[r * cols + j] - (double)mean[r]) * rstd_d((double)var[r], eps);
            double d = (double)dy[r * cols + j];
            ag += d * h;
            ab += d;
        }
        part_g[t] = (float)ag;
        part_b[t] = (float)ab;
    }
}

// out_g[j] = sum over s of part_g[s, j] (and out_b from part_b, blockIdx.y == 1), in a fixed
// order: thread (tx, ty) of a 32 x 8 block sums rows s = ty, ty + 8, ... of column j, then the
// eight partials are added in ty order. Grid: (ceil(cols / 32), 2).
extern "C" __global__ void tl_norm_colsum2(const float* __restrict__ part_g, const float* __restrict__ part_b,
                                           long long nparts, long long cols, float* __restrict__ out_g,
                                           float* __restrict__ out_b) {
    __shared__ double acc[8][32];
    const float* part = blockIdx.y == 0 ? part_g : part_b;
    float* out = blockIdx.y == 0 ? out_g : out_b;
    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    for (long long j0 = (long long)blockIdx.x * 32; j0 < cols; j0 += (long long)gridDim.x * 32) {
        long long j = j0 + tx;
        double a = 0.0;
        if (j < cols)
            for (long long s = ty; s < nparts; s += 8) a += (double)part[s * cols + j];
        acc[ty][tx] = a;
        __syncthreads();
        if (ty == 0 && j < cols) {
            double t = 0.0;
            for (int k = 0; k < 8; ++k) t += acc[k][tx];
            out[j] = (float)t;
        }
        __syncthreads();
    }
}

// ==== batch norm ===================================================================================
// x is (B, C, I). Per channel, two sums over its B * I elements go into double2 partials:
//   forward:  (sum d, sum d^2), d = x - K, K = the channel's first element (0 if not finite)
//   backward: (sum dy, sum dy (x - mean))
// Planes layout (I >= 64): unit u = c * S + s sums planes b in [s pc, (s+1) pc) of channel c with a
//   block; partial[u].
// Columns layout (I < 64): x viewed as (B, C*I); thread (j, s) sums rows b in [s rc, (s+1) rc)
//   of column j; partial[s * C*I + j].
// tl_batch_norm_finish and tl_batch_norm_bwd_finish (a warp per channel) adds a channel's partials in index order and writes the
// outputs and the per-channel coefficients of the elementwise pass (tl_batch_norm_apply*).

__device__ __forceinline__ double bn_shift(const float* x, long long c, long long inner) {
    float k = x[c * inner];
    return fabsf(k) <= 3.402823466e38f ? (double)k : 0.0;  // finite (NaN compares false)
}

template <bool BWD>
__device__ __forceinline__ void bn_acc(double& a1, double& a2, float xv, float dv, double k) {
    if (BWD) {
        a1 += (double)dv;
        a2 += (double)dv * ((double)xv - k);
    } else {
        double d = (double)xv - k;
        a1 += d;
        a2 += d * d;
    }
}

template <bool BWD>
__device__ void bn_stats_planes(const float* __restrict__ x, const float* __restrict__ dy,
                                const float* __restrict__ mean, long long B, long long C, long long I,
                                long long S, long long pc, double2* __restrict__ part) {
    __shared__ double scratch[64];
    const bool vec = (I & 3) == 0;
    for (long long u = blockIdx.x; u < C * S; u += gridDim.x) {
        const long long c = u / S, s = u - c * S;
        const double k = BWD ? (double)mean[c] : bn_shift(x, c, I);
        const long long b1 = min(B, (s + 1) * pc);
        double a1 = 0.0, a2 = 0.0;
        for (long long b = s * pc; b < b1; ++b) {
            const long long off = (b * C + c) * I;
            if (vec) {
                const float4* x4 = reinterpret_cast<const float4*>(x + off);
                const float4* d4 = reinterpret_cast<const float4*>((BWD ? dy : x) + off);
                for (long long j = threadIdx.x; j < (I >> 2); j += blockDim.x) {
                    float4 v = x4[j], w = BWD ? d4[j] : v;
                    bn_acc<BWD>(a1, a2, v.x, w.x, k);
                    bn_acc<BWD>(a1, a2, v.y, w.y, k);
                    bn_acc<BWD>(a1, a2, v.z, w.z, k);
                    bn_acc<BWD>(a1, a2, v.w, w.w, k);
                }
            } else {
                for (long long j = threadIdx.x; j < I; j += blockDim.x)
                    bn_acc<BWD>(a1, a2, x[off + j], BWD ? dy[off + j] : 0.f, k);
            }
        }
        block_sum2_d(a1, a2, scratch);
        if (threadIdx.x == 0) part[u] = make_double2(a1, a2);
    }
}

template <bool BWD>
__device__ void bn_stats_cols(const float* __restrict__ x, const float* __restrict__ dy,
                              const float* __restrict__ mean, long long B, long long C, long long I,
                              long long S, long long rc, double2* __restrict__ part) {
    const long long ci = C * I;
    const long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= ci) return;
    const long long c = j / I;
    const double k = BWD ? (double)mean[c] : bn_shift(x, c, I);
    for (long long s = blockIdx.y; s < S; s += gridDim.y) {
        const long long b1 = min(B, (s + 1) * rc);
        double a1 = 0.0, a2 = 0.0;
        for (long long b = s * rc; b < b1; ++b)
            bn_acc<BWD>(a1, a2, x[b * ci + j], BWD ? dy[b * ci + j] : 0.f, k);
        part[s * ci + j] = make_double2(a1, a2);
    }
}

extern "C" __global__ void tl_batch_norm_stats_planes(const float* x, long long B, long long C, long long I,
                                              long long S, long long pc, double2* part) {
    bn_stats_planes<false>(x, nullptr, nullptr, B, C, I, S, pc, part);
}
extern "C" __global__ void tl_batch_norm_stats_cols(const float* x, long long B, long long C, long long I,
                                            long long S, long long rc, double2* part) {
    bn_stats_cols<false>(x, nullptr, nullptr, B, C, I, S, rc, part);
}
extern "C" __global__ void tl_batch_norm_bwd_stats_planes(const float* x, const float* dy, const float* mean,
                                                  long long B, long long C, long long I, long long S,
                                                  long long pc, double2* part) {
    bn_stats_planes<true>(x, dy, mean, B, C, I, S, pc, part);
}
extern "C" __global__ void tl_batch_norm_bwd_stats_cols(const float* x, const float* dy, const float* mean,
                                                long long B, long long C, long long I, long long S,
                                                long long rc, double2* part) {
    bn_stats_cols<true>(x, dy, mean, B, C, I, S, rc, part);
}

// Channel c's partials: part[c * base_mult + s * stride_s + i] for s < S, i < L (planes: base_mult
// = S, stride_s = 1, L = 1; columns: base_mult = I, stride_s = C*I, L = I), added by a warp: lane l
// takes q = l, l + 32, ... (q = s * L + i) in order, then the butterfly.
__device__ __forceinline__ double2 bn_channel_sum(const double2* __restrict__ part, long long c, long long S,
                                                  long long L, long long stride_s, long long base_mult) {
    const int lane = threadIdx.x & 31;
    double a1 = 0.0, a2 = 0.0;
    for (long long q = lane; q < S * L; q += 32) {
        long long s = q / L, i = q - s * L;
        double2 p = part[c * base_mult + s * stride_s + i];
        a1 += p.x;
        a2 += p.y;
    }
    return make_double2(tl_warp_sum_d(a1), tl_warp_sum_d(a2));
}

// Forward: mean, biased var (outputs) and coef[c] = (mean, r gamma, beta) for y = (x - a) s + t.
extern "C" __global__ void tl_batch_norm_finish(const double2* __restrict__ part, const float* __restrict__ x,
                                        const float* __restrict__ gamma, const float* __restrict__ beta,
                                        long long C, long long I, long long S, long long L, long long stride_s,
                                        long long base_mult, double n, float eps, float* __restrict__ mean,
                                        float* __restrict__ var, double* __restrict__ coef) {
    for (long long c = TL_TID >> 5; c < C; c += TL_STRIDE >> 5) {
        double2 a = bn_channel_sum(part, c, S, L, stride_s, base_mult);
        if ((threadIdx.x & 31) == 0) {
            double dm = a.x / n;
            double mu = bn_shift(x, c, I) + dm;
            double v = (a.y - a.x * dm) / n;
            if (v < 0.0) v = 0.0;  // rounding of the one-pass form; NaN stays NaN
            mean[c] = (float)mu;
            var[c] = (float)v;
            double rs = rstd_d(v, eps);
            coef[3 * c] = mu;
            coef[3 * c + 1] = gamma ? rs * (double)gamma[c] : rs;
            coef[3 * c + 2] = beta ? (double)beta[c] : 0.0;
        }
    }
}

// Backward: dbeta = sum dy, dgamma = r sum dy (x - mean), and coef[c] = (mean, r^2 sum dy (x -
// mean) / n, sum dy / n, gamma r) for dx = k ((dy - m1) - (x - mean) b2).
extern "C" __global__ void tl_batch_norm_bwd_finish(const double2* __restrict__ part, const float* __restrict__ gamma,
                                            const float* __restrict__ mean, const float* __restrict__ var,
                                            long long C, long long S, long long L, long long stride_s,
                                            long long base_mult, double n, float eps, float* __restrict__ dgamma,
                                            float* __restrict__ dbeta, double* __restrict__ coef) {
    for (long long c = TL_TID >> 5; c < C; c += TL_STRIDE >> 5) {
        double2 a = bn_channel_sum(part, c, S, L, stride_s, base_mult);
        if ((threadIdx.x & 31) == 0) {
            double rs = rstd_d((double)var[c], eps);
            dbeta[c] = (float)a.x;
            dgamma[c] = (float)(a.y * rs);
            coef[4 * c] = (double)mean[c];
            coef[4 * c + 1] = rs * rs * a.y / n;
            coef[4 * c + 2] = a.x / n;
            coef[4 * c + 3] = gamma ? (double)gamma[c] * rs : rs;
        }
    }
}

// Eval mode: coef[c] = (mean, r gamma, beta) from the given statistics.
extern "C" __global__ void tl_batch_norm_infer_coef(const float* __restrict__ mean, const float* __restrict__ var,
                                            const float* __restrict__ gamma, const float* __restrict__ beta,
                                            long long C, float eps, double* __restrict__ coef) {
    for (long long c = TL_TID; c < C; c += TL_STRIDE) {
        double rs = rstd_d((double)var[c], eps);
        coef[3 * c] = (double)mean[c];
        coef[3 * c + 1] = gamma ? rs * (double)gamma[c] : rs;
        coef[3 * c + 2] = beta ? (double)beta[c] : 0.0;
    }
}

// The elementwise passes: y = (x - a) s + t (APPLY2 false: coef (a, s, t)) or
// dx = k ((dy - m1) - (x - mean) b2) (APPLY2: coef (mean, b2, m1, k)), in double, rounded once.
template <bool APPLY2>
__device__ __forceinline__ float bn_elem(float xv, float dv, const double* cf) {
    if (APPLY2) return (float)(cf[3] * (((double)dv - cf[2]) - ((double)xv - cf[0]) * cf[1]));
    return (float)(((double)xv - cf[0]) * cf[1] + cf[2]);
}

template <bool APPLY2>
__device__ void bn_apply_planes(const float* __restrict__ x, const float* __restrict__ dy,
                                const double* __restrict__ coef, long long B, long long C, long long I,
                                float* __restrict__ out) {
    const int nc = APPLY2 ? 4 : 3;
    const bool vec = (I & 3) == 0;
    for (long long p = blockIdx.x; p < B * C; p += gridDim.x) {
        const long long c = p % C, off = p * I;
        double cf[4];
        for (int k = 0; k < nc; ++k) cf[k] = coef[nc * c + k];
        if (vec) {
            const float4* x4 = reinterpret_cast<const float4*>(x + off);
            const float4* d4 = reinterpret_cast<const float4*>((APPLY2 ? dy : x) + off);
            float4* o4 = reinterpret_cast<float4*>(out + off);
            for (long long j = threadIdx.x; j < (I >> 2); j += blockDim.x) {
                float4 v = x4[j], w = APPLY2 ? d4[j] : v;
                o4[j] = make_float4(bn_elem<APPLY2>(v.x, w.x, cf), bn_elem<APPLY2>(v.y, w.y, cf),
                                    bn_elem<APPLY2>(v.z, w.z, cf), bn_elem<APPLY2>(v.w, w.w, cf));
            }
        } else {
            for (long long j = threadIdx.x; j < I; j += blockDim.x)
                out[off + j] = bn_elem<APPLY2>(x[off + j], APPLY2 ? dy[off + j] : 0.f, cf);
        }
    }
}

// Columns: thread (j, phase) handles column j of (B, C*I) at rows b = phase, phase + gridDim.y, ...
template <bool APPLY2>
__device__ void bn_apply_cols(const float* __restrict__ x, const float* __restrict__ dy,
                              const double* __restrict__ coef, long long B, long long C, long long I,
                              float* __restrict__ out) {
    const int nc = APPLY2 ? 4 : 3;
    const long long ci = C * I;
    const long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= ci) return;
    const long long c = j / I;
    double cf[4];
    for (int k = 0; k < nc; ++k) cf[k] = coef[nc * c + k];
    for (long long b = blockIdx.y; b < B; b += gridDim.y)
        out[b * ci + j] = bn_elem<APPLY2>(x[b * ci + j], APPLY2 ? dy[b * ci + j] : 0.f, cf);
}

extern "C" __global__ void tl_batch_norm_apply_planes(const float* x, const double* coef, long long B, long long C,
                                              long long I, float* out) {
    bn_apply_planes<false>(x, nullptr, coef, B, C, I, out);
}
extern "C" __global__ void tl_batch_norm_apply_cols(const float* x, const double* coef, long long B, long long C,
                                            long long I, float* out) {
    bn_apply_cols<false>(x, nullptr, coef, B, C, I, out);
}
extern "C" __global__ void tl_batch_norm_bwd_apply_planes(const float* x, const float* dy, const double* coef,
                                                  long long B, long long C, long long I, float* out) {
    bn_apply_planes<true>(x, dy, coef, B, C, I, out);
}
extern "C" __global__ void tl_batch_norm_bwd_apply_cols(const float* x, const float* dy, const double* coef,
                                                long long B, long long C, long long I, float* out) {
    bn_apply_cols<true>(x, dy, coef, B, C, I, out);
}

// Batch norm's running statistics: out = fl(fl(r keep) + fl(m fl(s f))), each product and the sum
// rounded once (no FMA: the module is compiled with --fmad=false), as the CPU computes it.
extern "C" __global__ void tl_running_stat_update(const float* __restrict__ running, const float* __restrict__ stat,
                                                  long long n, float keep, float m, float f,
                                                  float* __restrict__ out) {
    for (long long i = TL_TID; i < n; i += TL_STRIDE) out[i] = __fadd_rn(__fmul_rn(running[i], keep),
                                                                      __fmul_rn(m, __fmul_rn(stat[i], f)));
}
