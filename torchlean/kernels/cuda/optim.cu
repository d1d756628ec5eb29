// Fused optimizer steps: adam_step (Adam / AdamW) and sgd_step, and their multi-tensor forms
// (adam_step_many, sgd_step_many: one launch over a table of tensors). One grid-stride pass: each element
// of p, g, m, v (or buf) is read once and each output written once, float4 loads and stores when
// every pointer is 16-byte aligned (the launcher checks), a scalar tail for n % 4.
// Arithmetic follows PyTorch's CPU kernels (see runtime/primitives_optim.py): fmaf exactly where
// torch's vectorized kernels fuse a multiply-add, one rounding per operation elsewhere
// (--fmad=false keeps the compiler from contracting the rest); IEEE sqrt and division
// (-prec-sqrt=true -prec-div=true). The coefficients arrive as float32, derived on the host.

struct TlAdamCoef {
    float wd, decay, w1, w1m1, b2, w2, bc2s, eps, nss;
    int mode;   // 0: no weight decay, 1: g + wd p (Adam), 2: p (1 - lr wd) (AdamW)
    bool small; // w1 < 0.5: torch's lerp form m + w (g - m), else g + (w - 1)(g - m)
};

__device__ __forceinline__ void tl_adam_elem(float p, float g, float m, float v, const TlAdamCoef& c,
                                             float& po, float& mo, float& vo) {
    if (c.mode == 1) g = fmaf(p, c.wd, g);
    else if (c.mode == 2) p = p * c.decay;
    float d = g - m;
    m = c.small ? fmaf(c.w1, d, m) : fmaf(c.w1m1, d, g);
    v = fmaf(c.w2 * g, g, v * c.b2);
    float den = sqrtf(v) / c.bc2s + c.eps;
    po = p + (c.nss * m) / den;
    mo = m;
    vo = v;
}

extern "C" __global__ void tl_adam_step(const float* __restrict__ p, const float* __restrict__ g,
                                        const float* __restrict__ m, const float* __restrict__ v,
                                        float* __restrict__ po, float* __restrict__ mo, float* __restrict__ vo,
                                        long long n, float wd, float decay, float w1, float b2, float w2,
                                        float bc2s, float eps, float nss, int mode, int vec) {
    TlAdamCoef c{wd, decay, w1, w1 - 1.f, b2, w2, bc2s, eps, nss, mode, w1 < 0.5f};
    long long stride = TL_STRIDE, start = 0;
    if (vec) {
        long long n4 = n >> 2;
        const float4 *p4 = reinterpret_cast<const float4*>(p), *g4 = reinterpret_cast<const float4*>(g),
                     *m4 = reinterpret_cast<const float4*>(m), *v4 = reinterpret_cast<const float4*>(v);
        float4 *po4 = reinterpret_cast<float4*>(po), *mo4 = reinterpret_cast<float4*>(mo),
               *vo4 = reinterpret_cast<float4*>(vo);
        for (long long i = TL_TID; i < n4; i += stride) {
            float4 a = p4[i], b = g4[i], e = m4[i], f = v4[i], rp, rm, rv;
            tl_adam_elem(a.x, b.x, e.x, f.x, c, rp.x, rm.x, rv.x);
            tl_adam_elem(a.y, b.y, e.y, f.y, c, rp.y, rm.y, rv.y);
            tl_adam_elem(a.z, b.z, e.z, f.z, c, rp.z, rm.z, rv.z);
            tl_adam_elem(a.w, b.w, e.w, f.w, c, rp.w, rm.w, rv.w);
            po4[i] = rp;
            mo4[i] = rm;
            vo4[i] = rv;
        }
        start = n4 << 2;
    }
    for (long long i = start + TL_TID; i < n; i += stride)
        tl_adam_elem(p[i], g[i], m[i], v[i], c, po[i], mo[i], vo[i]);
}

struct TlSgdCoef {
    float wd, mom, keep, nlr;
    bool has_wd, first, nesterov;
};

// mode bits (runtime/primitives_optim.py): 1 weight decay, 2 first step, 4 nesterov
__device__ __forceinline__ TlSgdCoef tl_sgd_coef(float wd, float mom, float keep, float nlr, int mode) {
    return TlSgdCoef{wd, mom, keep, nlr, (mode & 1) != 0, (mode & 2) != 0, (mode & 4) != 0};
}

__device__ __forceinline__ void tl_sgd_elem(float p, float g, float b, const TlSgdCoef& c, float& po, float& bo) {
    if (c.has_wd) g = fmaf(p, c.wd, g);
    b = c.first ? g : fmaf(g, c.keep, b * c.mom);
    float d = c.nesterov ? fmaf(b, c.mom, g) : b;
    po = fmaf(d, c.nlr, p);
    bo = b;
}

// Four elements (a float4 of each input; b is not read on the first step: the caller passes g).
__device__ __forceinline__ void tl_sgd_elem4(float4 a, float4 g, float4 b, const TlSgdCoef& c, float4& po,
                                             float4& bo) {
    tl_sgd_elem(a.x, g.x, b.x, c, po.x, bo.x);
    tl_sgd_elem(a.y, g.y, b.y, c, po.y, bo.y);
    tl_sgd_elem(a.z, g.z, b.z, c, po.z, bo.z);
    tl_sgd_elem(a.w, g.w, b.w, c, po.w, bo.w);
}

// buf is not read on the first step (the launcher then passes g in its place).
extern "C" __global__ void tl_sgd_step(const float* __restrict__ p, const float* __restrict__ g,
                                       const float* __restrict__ buf, float* __restrict__ po,
                                       float* __restrict__ bo, long long n, float wd, float mom, float keep,
                                       float nlr, int mode, int vec) {
    const TlSgdCoef c = tl_sgd_coef(wd, mom, keep, nlr, mode);
    long long stride = TL_STRIDE, start = 0;
    if (vec) {
        long long n4 = n >> 2;
        const float4 *p4 = reinterpret_cast<const float4*>(p), *g4 = reinterpret_cast<const float4*>(g),
                     *b4 = reinterpret_cast<const float4*>(buf);
        float4 *po4 = reinterpret_cast<float4*>(po), *bo4 = reinterpret_cast<float4*>(bo);
        for (long long i = TL_TID; i < n4; i += stride) {
            float4 a = p4[i], gg = g4[i], bb = c.first ? gg : b4[i], rp, rb;
            tl_sgd_elem4(a, gg, bb, c, rp, rb);
            po4[i] = rp;
            bo4[i] = rb;
        }
        start = n4 << 2;
    }
    for (long long i = start + TL_TID; i < n; i += stride)
        tl_sgd_elem(p[i], g[i], c.first ? 0.f : buf[i], c, po[i], bo[i]);
}

// The multi-tensor kernels (PyTorch's multi_tensor_apply idea): `ptrs` holds R rows of T device
// pointers (the inputs, then the outputs); `quads` the prefix sums of each tensor's quad count
// (ceil(n_i / 4)), T + 1 entries; `sizes` the n_i. The prefix sums go to shared memory, and a
// thread's global quad index picks its tensor by binary search in them; each quad is a float4
// (the launcher sends only 16-byte aligned tensors) or, at a tensor's end, up to 3 scalars.
#define TL_STEP_MANY_MAX 1024

// Calls body(t, k, n) for each quad this thread owns: tensor t, its quad k, its size n. Every
// thread of the block calls it (a barrier after the prefix sums are in shared memory).
template <class Body>
__device__ __forceinline__ void tl_step_many_each(const long long* __restrict__ quads,
                                                  const long long* __restrict__ sizes, int T, Body body) {
    __shared__ long long q[TL_STEP_MANY_MAX + 1];
    for (int i = threadIdx.x; i <= T; i += blockDim.x) q[i] = quads[i];
    __syncthreads();
    const long long total = q[T];
    for (long long j = TL_TID; j < total; j += TL_STRIDE) {
        int lo = 0, hi = T - 1;  // the last t with q[t] <= j (tensors of size 0 have q[t] == q[t+1])
        while (lo < hi) {
            int mid = (lo + hi + 1) >> 1;
            if (q[mid] <= j) lo = mid; else hi = mid - 1;
        }
        body(lo, j - q[lo], sizes[lo]);
    }
}

// Tensor t's pointer in row r of the table.
__device__ __forceinline__ float* tl_step_many_row(const long long* __restrict__ ptrs, int T, int r, int t) {
    return reinterpret_cast<float*>(ptrs[r * T + t]);
}

// adam_step_many: tl_adam_step over T tensors in one launch, R = 7 rows (p, g, m, v, p_out, m_out,
// v_out). Same per-element arithmetic as tl_adam_step: the bits equal the one-tensor kernel's.
extern "C" __global__ void tl_adam_step_many(const long long* __restrict__ ptrs, const long long* __restrict__ quads,
                                             const long long* __restrict__ sizes, int T, float wd, float decay,
                                             float w1, float b2, float w2, float bc2s, float eps, float nss,
                                             int mode) {
    const TlAdamCoef c{wd, decay, w1, w1 - 1.f, b2, w2, bc2s, eps, nss, mode, w1 < 0.5f};
    tl_step_many_each(quads, sizes, T, [&](int t, long long k, long long n) {
        const float *p = tl_step_many_row(ptrs, T, 0, t), *g = tl_step_many_row(ptrs, T, 1, t);
        const float *m = tl_step_many_row(ptrs, T, 2, t), *v = tl_step_many_row(ptrs, T, 3, t);
        float *po = tl_step_many_row(ptrs, T, 4, t), *mo = tl_step_many_row(ptrs, T, 5, t),
              *vo = tl_step_many_row(ptrs, T, 6, t);
        const long long e = k << 2;
        if (e + 4 <= n) {
            float4 a = reinterpret_cast<const float4*>(p)[k], b = reinterpret_cast<const float4*>(g)[k];
            float4 f = reinterpret_cast<const float4*>(m)[k], h = reinterpret_cast<const float4*>(v)[k];
            float4 rp, rm, rv;
            tl_adam_elem(a.x, b.x, f.x, h.x, c, rp.x, rm.x, rv.x);
            tl_adam_elem(a.y, b.y, f.y, h.y, c, rp.y, rm.y, rv.y);
            tl_adam_elem(a.z, b.z, f.z, h.z, c, rp.z, rm.z, rv.z);
            tl_adam_elem(a.w, b.w, f.w, h.w, c, rp.w, rm.w, rv.w);
            reinterpret_cast<float4*>(po)[k] = rp;
            reinterpret_cast<float4*>(mo)[k] = rm;
            reinterpret_cast<float4*>(vo)[k] = rv;
        } else {
            for (long long i = e; i < n; ++i) tl_adam_elem(p[i], g[i], m[i], v[i], c, po[i], mo[i], vo[i]);
        }
    });
}

// sgd_step_many: tl_sgd_step over T tensors in one launch, R = 5 rows (p, g, buf, p_out, buf_out);
// the same per-element arithmetic (tl_sgd_elem), so the bits equal the one-tensor kernel's. buf
// is not read on the first step (the launcher then passes g's pointers in its row). In place the
// output rows are the input rows: each thread reads its quad before it writes it (no __restrict__
// on these pointers). Mode bit TL_SGD_NO_BUF (sgd_step_many_inplace without buffers: plain SGD
// keeps none) leaves buf_out unwritten.
#define TL_SGD_NO_BUF 8
extern "C" __global__ void tl_sgd_step_many(const long long* __restrict__ ptrs, const long long* __restrict__ quads,
                                            const long long* __restrict__ sizes, int T, float wd, float mom,
                                            float keep, float nlr, int mode) {
    const TlSgdCoef c = tl_sgd_coef(wd, mom, keep, nlr, mode);
    const bool write_buf = (mode & TL_SGD_NO_BUF) == 0;
    tl_step_many_each(quads, sizes, T, [&](int t, long long k, long long n) {
        const float *p = tl_step_many_row(ptrs, T, 0, t), *g = tl_step_many_row(ptrs, T, 1, t),
                    *b = tl_step_many_row(ptrs, T, 2, t);
        float *po = tl_step_many_row(ptrs, T, 3, t), *bo = tl_step_many_row(ptrs, T, 4, t);
        const long long e = k << 2;
        if (e + 4 <= n) {
            float4 a = reinterpret_cast<const float4*>(p)[k], gg = reinterpret_cast<const float4*>(g)[k];
            float4 bb = c.first ? gg : reinterpret_cast<const float4*>(b)[k], rp, rb;
            tl_sgd_elem4(a, gg, bb, c, rp, rb);
            reinterpret_cast<float4*>(po)[k] = rp;
            if (write_buf) reinterpret_cast<float4*>(bo)[k] = rb;
        } else {
            for (long long i = e; i < n; ++i) {
                float rp, rb;
                tl_sgd_elem(p[i], g[i], c.first ? 0.f : b[i], c, rp, rb);
                po[i] = rp;
                if (write_buf) bo[i] = rb;
            }
        }
    });
}

// ---- multi-tensor 2-norms and scaling (clip_grad_norm_) ------------------------------------------
// norm2_many: out[t] = sqrt(sum_j x_t[j]^2) for T tensors in two launches, whatever T and the sizes.
// The squares are formed and summed in double (a float32 square is exact in double, and no square
// or sum of squares of float32 values can overflow or underflow there), in an order fixed by the
// sizes alone, so the result is bitwise repeatable and independent of the grid:
//  1. tl_norm2_many_chunks: each tensor is cut into chunks of TL_NORM2_CHUNK elements (the table's
//     prefix sums count chunks, not quads); ONE block of TL_NORM2_THREADS threads sums ONE chunk:
//     thread j adds, in k order, the quad sums (x0^2 + x1^2) + (x2^2 + x3^2) of the chunk's quads
//     j + TL_NORM2_THREADS k (k < TL_NORM2_QUADS; elements past the tensor's end count as 0, which
//     adds nothing), then tl_block_sum_d (warp butterflies, then the 8 warp sums) gives the chunk's
//     partial. A 6.5M-element tensor is ~800 blocks' work, a tiny one a block's.
//  2. tl_norm2_many_finish: one warp per tensor; lane l adds the tensor's partials l, l + 32, ... in
//     order, a butterfly adds the lanes, and out[t] = (float)sqrt(sum) (0 for an empty tensor).
// No atomics. kernels/cpu/optim.py (norm2_many) runs exactly this order, so the two backends give
// the same bits. A tensor whose storage is not 16-byte aligned (a DLPack view) loads its quads as
// scalars: the same values in the same order.
#define TL_NORM2_THREADS 256
#define TL_NORM2_QUADS 8
#define TL_NORM2_CHUNK (4 * TL_NORM2_THREADS * TL_NORM2_QUADS)

// The tensor that owns unit j (a chunk): the last t with pre[t] <= j (empty tensors have
// pre[t] == pre[t + 1] and are skipped). pre has T + 1 entries, pre[0] = 0, j < pre[T].
__device__ __forceinline__ int tl_norm2_owner(const long long* __restrict__ pre, int T, long long j) {
    int lo = 0, hi = T - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (pre[mid] <= j) lo = mid; else hi = mid - 1;
    }
    return lo;
}

__device__ __forceinline__ double tl_norm2_quad(float4 v) {
    return ((double)v.x * v.x + (double)v.y * v.y) + ((double)v.z * v.z + (double)v.w * v.w);
}

// ptrs: T tensor pointers; chunks: T + 1 prefix sums of ceil(n_t / TL_NORM2_CHUNK); sizes: the n_t;
// total = chunks[T]. partials[c] = the sum of squares of chunk c. Launch with TL_NORM2_THREADS threads.
extern "C" __global__ void __launch_bounds__(TL_NORM2_THREADS)
tl_norm2_many_chunks(const long long* __restrict__ ptrs, const long long* __restrict__ chunks,
                     const long long* __restrict__ sizes, int T, long long total, double* __restrict__ partials) {
    __shared__ double scratch[32];
    for (long long c = blockIdx.x; c < total; c += gridDim.x) {  // uniform over the block
        const int t = tl_norm2_owner(chunks, T, c);
        const float* x = reinterpret_cast<const float*>(ptrs[t]);
        const long long lo = (c - chunks[t]) * TL_NORM2_CHUNK;
        const long long m = min(sizes[t] - lo, (long long)TL_NORM2_CHUNK);  // elements of this chunk, >= 1
        const float* xc = x + lo;  // lo is a multiple of 4: xc is aligned where x is
        const bool vec = (reinterpret_cast<unsigned long long>(x) & 15ull) == 0;
        float4 v[TL_NORM2_QUADS];
#pragma unroll
        for (int k = 0; k < TL_NORM2_QUADS; ++k) {  // every load first, then the adds in k order
            const long long e = 4ll * (threadIdx.x + TL_NORM2_THREADS * k);
            if (vec && e + 4 <= m) {
                v[k] = reinterpret_cast<const float4*>(xc)[e >> 2];
            } else {
                v[k].x = e < m ? xc[e] : 0.f;
                v[k].y = e + 1 < m ? xc[e + 1] : 0.f;
                v[k].z = e + 2 < m ? xc[e + 2] : 0.f;
                v[k].w = e + 3 < m ? xc[e + 3] : 0.f;
            }
        }
        double acc = 0.0;
#pragma unroll
        for (int k = 0; k < TL_NORM2_QUADS; ++k) acc += tl_norm2_quad(v[k]);
        acc = tl_block_sum_d(acc, scratch);
        if (threadIdx.x == 0) partials[c] = acc;
    }
}

// out[t] = (float)sqrt(the sum of tensor t's partials chunks[t] .. chunks[t + 1] - 1); one warp per
// tensor (blockDim.x a multiple of 32).
extern "C" __global__ void tl_norm2_many_finish(const long long* __restrict__ chunks, int T,
                                                const double* __restrict__ partials, float* __restrict__ out) {
    const int lane = threadIdx.x & 31;
    const long long nwarps = TL_STRIDE >> 5;
    for (long long t = TL_TID >> 5; t < T; t += nwarps) {  // uniform over the warp
        const long long hi = chunks[t + 1];
        double s = 0.0;
        for (long long c = chunks[t] + lane; c < hi; c += 32) s += partials[c];
        s = tl_warp_sum_d(s);
        if (lane == 0) out[t] = (float)sqrt(s);
    }
}

// scale_many: out_t = x_t * coef[0] for T tensors in one launch (R = 2 rows: x, out; the quads of
// tl_step_many_each). One float32 product per element, as mul's kernel: the same bits as
// mul(x, broadcast_to(coef, n)). coef is read on the device (no host round trip). A tensor whose
// storage is not 16-byte aligned (a DLPack view) takes the scalar path: the same products.
extern "C" __global__ void tl_scale_many(const long long* __restrict__ ptrs, const long long* __restrict__ quads,
                                         const long long* __restrict__ sizes, int T, const float* __restrict__ coef) {
    const float a = coef[0];
    tl_step_many_each(quads, sizes, T, [&](int t, long long k, long long n) {
        const float* x = tl_step_many_row(ptrs, T, 0, t);
        float* o = tl_step_many_row(ptrs, T, 1, t);
        const long long e = k << 2;
        const bool vec = ((reinterpret_cast<unsigned long long>(x) | reinterpret_cast<unsigned long long>(o)) & 15ull) == 0;
        if (vec && e + 4 <= n) {
            const float4 v = reinterpret_cast<const float4*>(x)[k];
            reinterpret_cast<float4*>(o)[k] = make_float4(v.x * a, v.y * a, v.z * a, v.w * a);
        } else {
            for (long long i = e; i < n && i < e + 4; ++i) o[i] = x[i] * a;
        }
    });
}
