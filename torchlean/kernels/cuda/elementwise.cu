// Elementwise primitives and their backward kernels. Each kernel is one grid-stride loop over
// float4 vectors (torchlean buffers are whole CuPy allocations, so 16-byte aligned) plus a
// scalar tail. Semantics follow kernels/cpu/elementwise.py expression for expression; with
// --fmad=false the plain arithmetic rounds as NumPy's does.

#define SAFE_LOG_EPS 1e-6f

__device__ __forceinline__ float tl_nan_max(float a, float b) {  // np.maximum: NaN propagates
    return (a != a || b != b) ? a + b : fmaxf(a, b);
}
__device__ __forceinline__ float tl_nan_min(float a, float b) {  // np.minimum: NaN propagates
    return (a != a || b != b) ? a + b : fminf(a, b);
}
// fmax/fmin (NaN loses) with IEEE 754-2019 signed zeros: max(-0, +0) = +0, min(-0, +0) = -0,
// as kernels/cpu/elementwise.py settles them.
__device__ __forceinline__ float tl_fmax(float a, float b) {
    return (a == 0.f && b == 0.f) ? a + b : fmaxf(a, b);
}
__device__ __forceinline__ float tl_fmin(float a, float b) {
    return (a == 0.f && b == 0.f) ? -((-a) + (-b)) : fminf(a, b);
}
__device__ __forceinline__ float tl_sign(float x) {  // np.sign: 0 at 0, NaN at NaN
    return x > 0.f ? 1.f : (x < 0.f ? -1.f : (x == 0.f ? 0.f : x));
}
__device__ __forceinline__ float tl_sigmoid(float x) {
    float e = expf(-fabsf(x));                  // in (0, 1]: never overflows
    float num = x >= 0.f ? 1.f : e;             // NaN: x >= 0 is false, e is NaN
    // The divisor is in [1, 2], where __fdividef is within 2 ulp (the contract allows 16u in
    // all) and far cheaper than the IEEE division: sigmoid then runs at the copy bandwidth.
    return __fdividef(num, 1.f + e);
}
__device__ __forceinline__ float tl_softplus(float x) {
    return (x > 0.f ? x : 0.f) + log1pf(expf(-fabsf(x)));  // NaN: 0 + log1p(NaN)
}

#define TL_VEC_APPLY(OUT, IN4, EXPR1)                                                           \
    { float x; x = IN4.x; OUT.x = (EXPR1); x = IN4.y; OUT.y = (EXPR1);                          \
      x = IN4.z; OUT.z = (EXPR1); x = IN4.w; OUT.w = (EXPR1); }

// Main loop: two float4 per iteration (i and i + stride), so each thread keeps two 16-byte loads
// in flight; that is what lifts compute-heavier ops (exp, sigmoid) to the copy bandwidth.
#define TL_UNARY(NAME, PARAMS, EXPR)                                                            \
extern "C" __global__ void NAME(const float* __restrict__ xs, float* __restrict__ ys,          \
                                long long n PARAMS) {                                           \
    long long n4 = n >> 2, stride = TL_STRIDE, i = TL_TID;                                      \
    const float4* x4 = reinterpret_cast<const float4*>(xs);                                     \
    float4* y4 = reinterpret_cast<float4*>(ys);                                                 \
    for (; i + stride < n4; i += 2 * stride) {                                                  \
        float4 v0 = x4[i], v1 = x4[i + stride], r0, r1;                                         \
        TL_VEC_APPLY(r0, v0, EXPR)                                                              \
        TL_VEC_APPLY(r1, v1, EXPR)                                                              \
        y4[i] = r0;                                                                             \
        y4[i + stride] = r1;                                                                    \
    }                                                                                           \
    if (i < n4) {                                                                               \
        float4 v = x4[i], r;                                                                    \
        TL_VEC_APPLY(r, v, EXPR)                                                                \
        y4[i] = r;                                                                              \
    }                                                                                           \
    for (long long j = (n4 << 2) + TL_TID; j < n; j += stride) {                                \
        float x = xs[j];                                                                        \
        ys[j] = (EXPR);                                                                         \
    }                                                                                           \
}

#define TL_PAIR_APPLY(OUT, VA, VB, EXPR)                                                        \
    { float a = VA.x, b = VB.x; OUT.x = (EXPR); }                                               \
    { float a = VA.y, b = VB.y; OUT.y = (EXPR); }                                               \
    { float a = VA.z, b = VB.z; OUT.z = (EXPR); }                                               \
    { float a = VA.w, b = VB.w; OUT.w = (EXPR); }

#define TL_BINARY(NAME, PARAMS, EXPR)                                                           \
extern "C" __global__ void NAME(const float* __restrict__ as, const float* __restrict__ bs,    \
                                float* __restrict__ ys, long long n PARAMS) {                   \
    long long n4 = n >> 2, stride = TL_STRIDE, i = TL_TID;                                      \
    const float4* a4 = reinterpret_cast<const float4*>(as);                                     \
    const float4* b4 = reinterpret_cast<const float4*>(bs);                                     \
    float4* y4 = reinterpret_cast<float4*>(ys);                                                 \
    for (; i + stride < n4; i += 2 * stride) {                                                  \
        float4 a0 = a4[i], b0 = b4[i], a1 = a4[i + stride], b1 = b4[i + stride], r0, r1;        \
        TL_PAIR_APPLY(r0, a0, b0, EXPR)                                                         \
        TL_PAIR_APPLY(r1, a1, b1, EXPR)                                                         \
        y4[i] = r0;                                                                             \
        y4[i + stride] = r1;                                                                    \
    }                                                                                           \
    if (i < n4) {                                                                               \
        float4 va = a4[i], vb = b4[i], r;                                                       \
        TL_PAIR_APPLY(r, va, vb, EXPR)                                                          \
        y4[i] = r;                                                                              \
    }                                                                                           \
    for (long long j = (n4 << 2) + TL_TID; j < n; j += stride) {                                \
        float a = as[j], b = bs[j];                                                             \
        ys[j] = (EXPR);                                                                         \
    }                                                                                           \
}

#define NO_PARAMS
#define ONE_SCALAR , float c
#define TWO_SCALARS , float lo, float hi

TL_UNARY(tl_abs, NO_PARAMS, fabsf(x))
TL_UNARY(tl_sqrt, NO_PARAMS, sqrtf(x))
TL_UNARY(tl_exp, NO_PARAMS, expf(x))
TL_UNARY(tl_log, NO_PARAMS, logf(x))
TL_UNARY(tl_inv, NO_PARAMS, 1.f / x)
TL_UNARY(tl_relu, NO_PARAMS, (x != x) ? x : (x > 0.f ? x : 0.f))
TL_UNARY(tl_sigmoid_k, NO_PARAMS, tl_sigmoid(x))
TL_UNARY(tl_tanh, NO_PARAMS, tanhf(x))
TL_UNARY(tl_softplus_k, NO_PARAMS, tl_softplus(x))
TL_UNARY(tl_safe_log, NO_PARAMS, logf(tl_softplus(x) + SAFE_LOG_EPS))
TL_UNARY(tl_sin, NO_PARAMS, sinf(x))
TL_UNARY(tl_cos, NO_PARAMS, cosf(x))
TL_UNARY(tl_erf, NO_PARAMS, erff(x))
TL_UNARY(tl_log1p, NO_PARAMS, log1pf(x))
TL_UNARY(tl_expm1, NO_PARAMS, expm1f(x))
TL_UNARY(tl_atan, NO_PARAMS, atanf(x))
TL_UNARY(tl_asin, NO_PARAMS, asinf(x))
TL_UNARY(tl_acos, NO_PARAMS, acosf(x))
TL_UNARY(tl_asinh, NO_PARAMS, asinhf(x))
TL_UNARY(tl_acosh, NO_PARAMS, acoshf(x))
TL_UNARY(tl_atanh, NO_PARAMS, atanhf(x))
TL_UNARY(tl_floor, NO_PARAMS, floorf(x))
TL_UNARY(tl_ceil, NO_PARAMS, ceilf(x))
TL_UNARY(tl_round, NO_PARAMS, rintf(x))  // ties to even, as np.rint and torch.round
TL_UNARY(tl_trunc, NO_PARAMS, truncf(x))
TL_UNARY(tl_sign_k, NO_PARAMS, x > 0.f ? 1.f : (x < 0.f ? -1.f : 0.f))  // torch.sign: +0 at +-0 and NaN
// x ** 0.5 is sqrt(x), as in NumPy and torch (they take that exponent to sqrt): it differs from
// powf at -inf (NaN, not +inf) and at -0 (-0, not +0)
TL_UNARY(tl_pow_scalar, ONE_SCALAR, c == 0.5f ? sqrtf(x) : powf(x, c))
TL_UNARY(tl_scale, ONE_SCALAR, x * c)
TL_UNARY(tl_add_scalar, ONE_SCALAR, x + c)
TL_UNARY(tl_clamp, TWO_SCALARS, tl_nan_min(tl_nan_max(x, lo), hi))
TL_UNARY(tl_leaky_relu, ONE_SCALAR, x > 0.f ? x : x * c)  // NaN * c is NaN: NaN propagates

// backward kernels read (a, b) = (x or y, dy)
TL_BINARY(tl_abs_bwd, NO_PARAMS, tl_sign(a) * b)
TL_BINARY(tl_sqrt_bwd, NO_PARAMS, a > 0.f ? b / (2.f * sqrtf(a)) : 0.f)
TL_BINARY(tl_relu_bwd, NO_PARAMS, a > 0.f ? b : 0.f)
TL_BINARY(tl_clamp_bwd, TWO_SCALARS, (a > lo && a < hi) ? b : 0.f)
TL_BINARY(tl_leaky_relu_bwd, ONE_SCALAR, a > 0.f ? b : b * c)
TL_BINARY(tl_sigmoid_bwd, NO_PARAMS, b * (a * (1.f - a)))
TL_BINARY(tl_tanh_bwd, NO_PARAMS, b * (1.f - a * a))
TL_BINARY(tl_softplus_bwd, NO_PARAMS, b * tl_sigmoid(a))
TL_BINARY(tl_safe_log_bwd, NO_PARAMS, b * tl_sigmoid(a) / (tl_softplus(a) + SAFE_LOG_EPS))

TL_BINARY(tl_add, NO_PARAMS, a + b)
TL_BINARY(tl_sub, NO_PARAMS, a - b)
TL_BINARY(tl_mul, NO_PARAMS, a * b)
TL_BINARY(tl_div, NO_PARAMS, a / b)
TL_BINARY(tl_atan2, NO_PARAMS, atan2f(a, b))
TL_BINARY(tl_max, NO_PARAMS, tl_fmax(a, b))
TL_BINARY(tl_min, NO_PARAMS, tl_fmin(a, b))
TL_BINARY(tl_axpy, ONE_SCALAR, a + b * c)

// max_bwd / min_bwd: the strict winner gets dy, a tie (or two NaNs) splits it 0.5 / 0.5, a NaN
// loses to a number (fmax / fmin semantics).
template <bool IS_MAX>
__device__ __forceinline__ void tl_pick(float a, float b, float dy, float& da, float& db) {
    bool an = a != a, bn = b != b;
    bool a_wins = (IS_MAX ? a > b : a < b) || (bn && !an);
    bool b_wins = (IS_MAX ? b > a : b < a) || (an && !bn);
    float half = dy * 0.5f;
    da = a_wins ? dy : (b_wins ? 0.f : half);
    db = b_wins ? dy : (a_wins ? 0.f : half);
}

template <bool IS_MAX>
__device__ void tl_pair_bwd(const float* __restrict__ as, const float* __restrict__ bs,
                            const float* __restrict__ dys, float* __restrict__ das,
                            float* __restrict__ dbs, long long n) {
    for (long long i = TL_TID; i < n; i += TL_STRIDE) {
        float da, db;
        tl_pick<IS_MAX>(as[i], bs[i], dys[i], da, db);
        das[i] = da;
        dbs[i] = db;
    }
}

extern "C" __global__ void tl_max_bwd(const float* a, const float* b, const float* dy, float* da,
                                      float* db, long long n) {
    tl_pair_bwd<true>(a, b, dy, da, db, n);
}
extern "C" __global__ void tl_min_bwd(const float* a, const float* b, const float* dy, float* da,
                                      float* db, long long n) {
    tl_pair_bwd<false>(a, b, dy, da, db, n);
}

// fill: the backend's `full`
extern "C" __global__ void tl_elementwise_fill(float* __restrict__ ys, long long n, float v) {
    long long n4 = n >> 2;
    float4* y4 = reinterpret_cast<float4*>(ys);
    for (long long i = TL_TID; i < n4; i += TL_STRIDE) y4[i] = make_float4(v, v, v, v);
    for (long long i = (n4 << 2) + TL_TID; i < n; i += TL_STRIDE) ys[i] = v;
}
