// Pooling kernels: max_pool, avg_pool, smooth_max_pool and their backward passes.
//
// Flat float32 buffers (planes, *spatial), channels-first; rank r = 1..8. The geometry lives in
// a small cached device array g (int64, see TL_G_* below). Each kernel is instantiated for the
// ranks 1, 2, 3 (R = r: loops over axes unroll and stay in registers) and once for any rank
// (R = 0: r read from g[0]).
//
// Forward: one thread per output (grid-stride). The window's in-bounds positions form a box
// [lo_i, hi_i) of input coordinates; tl_box_walk visits it in row-major order of the kernel
// offsets (innermost axis contiguous), so padding is never touched and the visiting order is the
// one the CPU backend uses: max and avg give the same bits on both backends.
// Backward (gather form, no atomics): one thread per input element q. The windows containing q
// form a box [plo_i, phi_i] of output coordinates; the thread walks it in row-major order and
// accumulates in float from +0: the same additions, in the same order, as the CPU backend's
// per-plane walk, so dx is bitwise repeatable in every mode (and max/avg match the CPU bits).
// max_pool_bwd first writes each window's winner (uint32 in-plane index, ~0u for an all-padding
// window) to a workspace, then gathers dy where the winner is q.
//
// Conventions (spec/pool.py): max: the first NaN wins, else the first strict maximum (v > best
// keeps the first of equal values, -0/+0 included). avg: window sum, then / float32(K).
// smooth max: m = max beta*v (NaN ignored; 0 when the window has padding), t = beta*v - m (0
// when equal), acc = sum expf(t) in row-major order, then + float(npad) * expf(0 - m) for the
// padding, y = (m + logf(acc)) / beta; backward term dy[w] * expf(beta*x[q] - beta*y[w]).

#define TL_G_N 1
#define TL_G_K 9
#define TL_G_S 17
#define TL_G_P 25
#define TL_G_O 33
#define TL_G_IS 41
#define TL_G_OS 49
#define TL_POOL_NONE 0xffffffffu
#define TL_NEG_INF __int_as_float(0xff800000)

// Registers for one call: the geometry of up to RM axes.
template <int R>
struct TlPoolGeom {
    static constexpr int RM = R > 0 ? R : 8;
    int r;
    long long n[RM], k[RM], s[RM], p[RM], o[RM], is[RM], os[RM];
    __device__ __forceinline__ explicit TlPoolGeom(const long long* __restrict__ g) {
        r = R > 0 ? R : (int)g[0];
#pragma unroll
        for (int i = 0; i < RM; ++i) {
            if (i >= r) break;
            n[i] = g[TL_G_N + i];
            k[i] = g[TL_G_K + i];
            s[i] = g[TL_G_S + i];
            p[i] = g[TL_G_P + i];
            o[i] = g[TL_G_O + i];
            is[i] = g[TL_G_IS + i];
            os[i] = g[TL_G_OS + i];
        }
    }
};

// Calls f(offset) for every point of the box [lo, hi) in row-major order, offset = sum c_i st_i
// (st[r-1] == 1). Stops early when f returns true. The box must be non-empty.
template <int RM, typename F>
__device__ __forceinline__ void tl_box_walk(int r, const long long* lo, const long long* hi, const long long* st, F f) {
    long long c[RM];
    long long base = 0;
#pragma unroll
    for (int i = 0; i < RM; ++i) {
        if (i >= r - 1) break;
        c[i] = lo[i];
        base += lo[i] * st[i];
    }
    const long long a = lo[r - 1], b = hi[r - 1];
    for (;;) {
        for (long long j = a; j < b; ++j)
            if (f(base + j)) return;
        // odometer over the outer axes (unrolled for a compile-time rank: c stays in registers)
        bool more = false;
#pragma unroll
        for (int ii = 0; ii < RM - 1; ++ii) {
            const int i = r - 2 - ii;
            if (i < 0) break;
            ++c[i];
            base += st[i];
            if (c[i] < hi[i]) { more = true; break; }
            base -= (hi[i] - lo[i]) * st[i];
            c[i] = lo[i];
        }
        if (!more) return;
    }
}

// The in-bounds box of the window of in-plane output index `out`; returns the number of
// in-bounds positions (0 when the window is entirely in padding).
template <int R>
__device__ __forceinline__ long long tl_window_box(const TlPoolGeom<R>& G, unsigned int out, long long* lo, long long* hi) {
    long long cnt = 1;
#pragma unroll
    for (int ii = 0; ii < TlPoolGeom<R>::RM; ++ii) {
        const int i = G.r - 1 - ii;
        if (i < 0) break;
        const unsigned int oi = (unsigned int)G.o[i];  // in-plane indices and dims are < 2**32: 32-bit division
        const long long q = out % oi;
        out /= oi;
        const long long st = q * G.s[i] - G.p[i];
        long long a = st > 0 ? st : 0;
        long long b = st + G.k[i];
        if (b > G.n[i]) b = G.n[i];
        if (a >= b) return 0;
        lo[i] = a;
        hi[i] = b;
        cnt *= b - a;
    }
    return cnt;
}

// The box of windows (output coordinates, hi exclusive) that contain in-plane input index `q`;
// false when no window contains it (a position no window reaches, e.g. between strided windows).
template <int R>
__device__ __forceinline__ bool tl_windows_of(const TlPoolGeom<R>& G, unsigned int q, long long* lo, long long* hi) {
#pragma unroll
    for (int ii = 0; ii < TlPoolGeom<R>::RM; ++ii) {
        const int i = G.r - 1 - ii;
        if (i < 0) break;
        const unsigned int ni = (unsigned int)G.n[i];
        const long long c = q % ni;
        q /= ni;
        const long long num = c + G.p[i] - G.k[i] + 1;  // window w covers c iff w*s - p <= c < w*s - p + k
        const long long a = num <= 0 ? 0 : (num + G.s[i] - 1) / G.s[i];
        long long b = (c + G.p[i]) / G.s[i] + 1;
        if (b > G.o[i]) b = G.o[i];
        if (a >= b) return false;
        lo[i] = a;
        hi[i] = b;
    }
    return true;
}

// Max pool value of a non-empty window box.
template <int RM>
__device__ __forceinline__ float tl_max_value(int r, const float* __restrict__ xb, const long long* lo,
                                              const long long* hi, const long long* is) {
    float best = TL_NEG_INF;
    bool nan = false;
    tl_box_walk<RM>(r, lo, hi, is, [&](long long pos) {
        const float v = xb[pos];
        best = v > best ? v : best;
        nan |= v != v;
        return false;
    });
    if (nan) {
        tl_box_walk<RM>(r, lo, hi, is, [&](long long pos) {
            const float v = xb[pos];
            if (v != v) { best = v; return true; }
            return false;
        });
    }
    return best;
}

template <int R>
__device__ __forceinline__ void tl_max_pool_fwd(const float* __restrict__ x, float* __restrict__ y,
                                                const long long* __restrict__ g, long long planes, long long S,
                                                long long nout, int want_winner, unsigned int* __restrict__ win) {
    const TlPoolGeom<R> G(g);
    constexpr int RM = TlPoolGeom<R>::RM;
    const long long total = planes * nout;
    for (long long idx = TL_TID; idx < total; idx += TL_STRIDE) {
        const unsigned int pl = (unsigned int)idx / (unsigned int)nout;  // idx < planes * nout < 2**32
        long long lo[RM], hi[RM];
        const long long cnt = tl_window_box<R>(G, (unsigned int)(idx - (long long)pl * nout), lo, hi);
        const float* xb = x + pl * S;
        if (cnt == 0) {
            if (want_winner) win[idx] = TL_POOL_NONE;
            else y[idx] = TL_NEG_INF;
            continue;
        }
        if (!want_winner) {
            y[idx] = tl_max_value<RM>(G.r, xb, lo, hi, G.is);
            continue;
        }
        // the winner in one pass: the first strict maximum (the first position when all are -inf);
        // a NaN raises a flag and the window is scanned again for its first NaN
        float best = TL_NEG_INF;
        long long w = -1;
        bool nan = false;
        tl_box_walk<RM>(G.r, lo, hi, G.is, [&](long long pos) {
            const float v = xb[pos];
            if (w < 0) w = pos;
            if (v > best) { best = v; w = pos; }
            nan |= v != v;
            return false;
        });
        if (nan) {
            tl_box_walk<RM>(G.r, lo, hi, G.is, [&](long long pos) {
                if (xb[pos] != xb[pos]) { w = pos; return true; }
                return false;
            });
        }
        win[idx] = (unsigned int)w;
    }
}

template <int R>
__device__ __forceinline__ void tl_avg_pool_fwd(const float* __restrict__ x, float* __restrict__ y,
                                                const long long* __restrict__ g, long long planes, long long S,
                                                long long nout, float kf) {
    const TlPoolGeom<R> G(g);
    constexpr int RM = TlPoolGeom<R>::RM;
    const long long total = planes * nout;
    for (long long idx = TL_TID; idx < total; idx += TL_STRIDE) {
        const unsigned int pl = (unsigned int)idx / (unsigned int)nout;  // idx < planes * nout < 2**32
        long long lo[RM], hi[RM];
        const long long cnt = tl_window_box<R>(G, (unsigned int)(idx - (long long)pl * nout), lo, hi);
        const float* xb = x + pl * S;
        float acc = 0.0f;
        if (cnt > 0)
            tl_box_walk<RM>(G.r, lo, hi, G.is, [&](long long pos) { acc = acc + xb[pos]; return false; });
        y[idx] = acc / kf;
    }
}

template <int R>
__device__ __forceinline__ void tl_smooth_max_pool_fwd(const float* __restrict__ x, float* __restrict__ y,
                                                       const long long* __restrict__ g, long long planes,
                                                       long long S, long long nout, long long kprod, float beta) {
    const TlPoolGeom<R> G(g);
    constexpr int RM = TlPoolGeom<R>::RM;
    const long long total = planes * nout;
    for (long long idx = TL_TID; idx < total; idx += TL_STRIDE) {
        const unsigned int pl = (unsigned int)idx / (unsigned int)nout;  // idx < planes * nout < 2**32
        long long lo[RM], hi[RM];
        const long long cnt = tl_window_box<R>(G, (unsigned int)(idx - (long long)pl * nout), lo, hi);
        const long long npad = kprod - cnt;
        const float* xb = x + pl * S;
        float m = npad > 0 ? 0.0f : TL_NEG_INF;
        float acc = 0.0f;
        if (cnt > 0) {
            tl_box_walk<RM>(G.r, lo, hi, G.is, [&](long long pos) {
                const float bv = beta * xb[pos];
                if (bv > m) m = bv;
                return false;
            });
            tl_box_walk<RM>(G.r, lo, hi, G.is, [&](long long pos) {
                const float bv = beta * xb[pos];
                const float t = (bv == m) ? 0.0f : bv - m;
                acc = acc + expf(t);
                return false;
            });
        }
        if (npad > 0) {
            const float t0 = (m == 0.0f) ? 0.0f : 0.0f - m;
            acc = acc + (float)npad * expf(t0);
        }
        y[idx] = (m + logf(acc)) / beta;
    }
}

// MODE 0: max (win: the winners), 1: avg (divide by kf), 2: smooth max (x, y, beta).
template <int R, int MODE>
__device__ __forceinline__ void tl_pool_bwd(const float* __restrict__ x, const float* __restrict__ y,
                                            const float* __restrict__ dy, const unsigned int* __restrict__ win,
                                            float* __restrict__ dx, const long long* __restrict__ g,
                                            long long planes, long long S, long long nout, float kf, float beta) {
    const TlPoolGeom<R> G(g);
    constexpr int RM = TlPoolGeom<R>::RM;
    const long long total = planes * S;
    for (long long idx = TL_TID; idx < total; idx += TL_STRIDE) {
        const unsigned int pl = (unsigned int)idx / (unsigned int)S;  // idx < planes * S < 2**32
        const unsigned int q = (unsigned int)(idx - (long long)pl * S);
        long long lo[RM], hi[RM];
        float acc = 0.0f;
        if (tl_windows_of<R>(G, q, lo, hi)) {
            const float* dyb = dy + pl * nout;
            if (MODE == 0) {
                const unsigned int* wb = win + pl * nout;
                const unsigned int qq = (unsigned int)q;
                tl_box_walk<RM>(G.r, lo, hi, G.os, [&](long long w) {
                    if (wb[w] == qq) acc = acc + dyb[w];
                    return false;
                });
            } else if (MODE == 1) {
                tl_box_walk<RM>(G.r, lo, hi, G.os, [&](long long w) { acc = acc + dyb[w]; return false; });
            } else {
                const float bx = beta * x[idx];
                const float* yb = y + pl * nout;
                tl_box_walk<RM>(G.r, lo, hi, G.os, [&](long long w) {
                    const float by = beta * yb[w];
                    const float d = (bx == by) ? 0.0f : bx - by;
                    acc = acc + dyb[w] * expf(d);
                    return false;
                });
            }
        }
        dx[idx] = (MODE == 1) ? acc / kf : acc;
    }
}

#define TL_POOL_KERNELS(SUF, R)                                                                                  \
    extern "C" __global__ void tl_max_pool_##SUF(const float* __restrict__ x, float* __restrict__ y,             \
                                                 const long long* __restrict__ g, long long planes, long long S,  \
                                                 long long nout) {                                                \
        tl_max_pool_fwd<R>(x, y, g, planes, S, nout, 0, nullptr);                                                \
    }                                                                                                             \
    extern "C" __global__ void tl_max_pool_winner_##SUF(const float* __restrict__ x, unsigned int* __restrict__ win, \
                                                        const long long* __restrict__ g, long long planes,       \
                                                        long long S, long long nout) {                           \
        tl_max_pool_fwd<R>(x, nullptr, g, planes, S, nout, 1, win);                                              \
    }                                                                                                             \
    extern "C" __global__ void tl_avg_pool_##SUF(const float* __restrict__ x, float* __restrict__ y,             \
                                                 const long long* __restrict__ g, long long planes, long long S,  \
                                                 long long nout, float kf) {                                      \
        tl_avg_pool_fwd<R>(x, y, g, planes, S, nout, kf);                                                        \
    }                                                                                                             \
    extern "C" __global__ void tl_smooth_max_pool_##SUF(const float* __restrict__ x, float* __restrict__ y,      \
                                                        const long long* __restrict__ g, long long planes,       \
                                                        long long S, long long nout, long long kprod, float beta) { \
        tl_smooth_max_pool_fwd<R>(x, y, g, planes, S, nout, kprod, beta);                                        \
    }                                                                                                             \
    extern "C" __global__ void tl_max_pool_bwd_##SUF(const float* __restrict__ dy,                                \
                                                     const unsigned int* __restrict__ win, float* __restrict__ dx, \
                                                     const long long* __restrict__ g, long long planes,          \
                                                     long long S, long long nout) {                              \
        tl_pool_bwd<R, 0>(nullptr, nullptr, dy, win, dx, g, planes, S, nout, 1.0f, 1.0f);                        \
    }                                                                                                             \
    extern "C" __global__ void tl_avg_pool_bwd_##SUF(const float* __restrict__ dy, float* __restrict__ dx,        \
                                                     const long long* __restrict__ g, long long planes,          \
                                                     long long S, long long nout, float kf) {                    \
        tl_pool_bwd<R, 1>(nullptr, nullptr, dy, nullptr, dx, g, planes, S, nout, kf, 1.0f);                      \
    }                                                                                                             \
    extern "C" __global__ void tl_smooth_max_pool_bwd_##SUF(const float* __restrict__ x, const float* __restrict__ y, \
                                                            const float* __restrict__ dy, float* __restrict__ dx, \
                                                            const long long* __restrict__ g, long long planes,   \
                                                            long long S, long long nout, float beta) {           \
        tl_pool_bwd<R, 2>(x, y, dy, nullptr, dx, g, planes, S, nout, 1.0f, beta);                                \
    }

TL_POOL_KERNELS(r1, 1)
TL_POOL_KERNELS(r2, 2)
TL_POOL_KERNELS(r3, 3)
TL_POOL_KERNELS(rn, 0)
