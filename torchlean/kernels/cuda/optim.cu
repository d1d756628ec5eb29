// Fused optimizer steps: adam_step (Adam / AdamW) and sgd_step. One grid-stride pass: each element
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

__device__ __forceinline__ void tl_sgd_elem(float p, float g, float b, const TlSgdCoef& c, float& po, float& bo) {
    if (c.has_wd) g = fmaf(p, c.wd, g);
    b = c.first ? g : fmaf(g, c.keep, b * c.mom);
    float d = c.nesterov ? fmaf(b, c.mom, g) : b;
    po = fmaf(d, c.nlr, p);
    bo = b;
}

// buf is not read on the first step (the launcher then passes g in its place).
extern "C" __global__ void tl_sgd_step(const float* __restrict__ p, const float* __restrict__ g,
                                       const float* __restrict__ buf, float* __restrict__ po,
                                       float* __restrict__ bo, long long n, float wd, float mom, float keep,
                                       float nlr, int mode, int vec) {
    TlSgdCoef c{wd, mom, keep, nlr, (mode & 1) != 0, (mode & 2) != 0, (mode & 4) != 0};
    long long stride = TL_STRIDE, start = 0;
    if (vec) {
        long long n4 = n >> 2;
        const float4 *p4 = reinterpret_cast<const float4*>(p), *g4 = reinterpret_cast<const float4*>(g),
                     *b4 = reinterpret_cast<const float4*>(buf);
        float4 *po4 = reinterpret_cast<float4*>(po), *bo4 = reinterpret_cast<float4*>(bo);
        for (long long i = TL_TID; i < n4; i += stride) {
            float4 a = p4[i], gg = g4[i], bb = c.first ? gg : b4[i], rp, rb;
            tl_sgd_elem(a.x, gg.x, bb.x, c, rp.x, rb.x);
            tl_sgd_elem(a.y, gg.y, bb.y, c, rp.y, rb.y);
            tl_sgd_elem(a.z, gg.z, bb.z, c, rp.z, rb.z);
            tl_sgd_elem(a.w, gg.w, bb.w, c, rp.w, rb.w);
            po4[i] = rp;
            bo4[i] = rb;
        }
        start = n4 << 2;
    }
    for (long long i = start + TL_TID; i < n; i += stride)
        tl_sgd_elem(p[i], g[i], c.first ? 0.f : buf[i], c, po[i], bo[i]);
}

// adam_step_many: the same step over T tensors in one launch (PyTorch's multi_tensor_apply idea).
// `ptrs` holds 7 rows of T device pointers (p, g, m, v, p_out, m_out, v_out); `quads` holds the
// prefix sums of each tensor's quad count (ceil(n_i / 4)), T + 1 entries; `sizes` the n_i. A
// thread's global quad index picks its tensor by binary search in `quads` (kept in shared memory);
// each quad is a float4 (every tensor is a whole CuPy allocation, hence 16-byte aligned) or, at a
// tensor's end, up to 3 scalars. Same per-element arithmetic as tl_adam_step: the bits equal the
// one-tensor kernel's.
#define TL_ADAM_MANY_MAX 1024
extern "C" __global__ void tl_adam_step_many(const long long* __restrict__ ptrs, const long long* __restrict__ quads,
                                             const long long* __restrict__ sizes, int T, float wd, float decay,
                                             float w1, float b2, float w2, float bc2s, float eps, float nss,
                                             int mode) {
    __shared__ long long q[TL_ADAM_MANY_MAX + 1];
    for (int i = threadIdx.x; i <= T; i += blockDim.x) q[i] = quads[i];
    __syncthreads();
    TlAdamCoef c{wd, decay, w1, w1 - 1.f, b2, w2, bc2s, eps, nss, mode, w1 < 0.5f};
    const long long total = q[T];
    for (long long j = TL_TID; j < total; j += TL_STRIDE) {
        int lo = 0, hi = T - 1;  // the last t with q[t] <= j (tensors of size 0 have q[t] == q[t+1])
        while (lo < hi) {
            int mid = (lo + hi + 1) >> 1;
            if (q[mid] <= j) lo = mid; else hi = mid - 1;
        }
        const int t = lo;
        const long long k = j - q[t], n = sizes[t], e = k << 2;
        const float* p = reinterpret_cast<const float*>(ptrs[t]);
        const float* g = reinterpret_cast<const float*>(ptrs[T + t]);
        const float* m = reinterpret_cast<const float*>(ptrs[2 * T + t]);
        const float* v = reinterpret_cast<const float*>(ptrs[3 * T + t]);
        float* po = reinterpret_cast<float*>(ptrs[4 * T + t]);
        float* mo = reinterpret_cast<float*>(ptrs[5 * T + t]);
        float* vo = reinterpret_cast<float*>(ptrs[6 * T + t]);
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
    }
}
