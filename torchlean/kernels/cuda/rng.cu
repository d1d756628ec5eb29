// Counter-based random numbers, bit-identical to torchlean/kernels/cpu/rng.py.
//
// Every per-element function is __host__ __device__: scripts/rng-host-check compiles this same
// text for the host and compares it bitwise with the CPU backend. The only host/device
// difference is inside the tl_rng_* primitives below: on the device they are the correctly
// rounded, never-contracted intrinsics (__dadd_rn, __dmul_rn, ...); on the host they are the plain
// IEEE operations (x86-64 SSE2, built with -ffp-contract=off), which round identically.
//
// Output buffers must be 16-byte aligned (cupy.empty gives 256): the kernels use float4/float2
// stores. Keys are unsigned long long (pass numpy.uint64), sizes long long (pass numpy.int64).

// ---- correctly rounded primitives (no FMA contraction on either side) -------------------------
// TL_RNG_OP(device, host): the device intrinsic, or the plain IEEE operation on the host.
#ifdef __CUDA_ARCH__
#define TL_RNG_OP(DEV, HOST) DEV
#else
#define TL_RNG_OP(DEV, HOST) HOST
#endif
#define TL_RNG_FN __host__ __device__ __forceinline__

TL_RNG_FN double tl_rng_add(double a, double b) { return TL_RNG_OP(__dadd_rn(a, b), a + b); }
TL_RNG_FN double tl_rng_sub(double a, double b) { return TL_RNG_OP(__dsub_rn(a, b), a - b); }
TL_RNG_FN double tl_rng_mul(double a, double b) { return TL_RNG_OP(__dmul_rn(a, b), a * b); }
TL_RNG_FN double tl_rng_div(double a, double b) { return TL_RNG_OP(__ddiv_rn(a, b), a / b); }
// SSE2 sqrtsd: correctly rounded; sqrt(-0.0) == -0.0 as on the device
TL_RNG_FN double tl_rng_sqrt(double a) { return TL_RNG_OP(__dsqrt_rn(a), __builtin_sqrt(a)); }
TL_RNG_FN double tl_rng_floor(double a) { return TL_RNG_OP(floor(a), __builtin_floor(a)); }
TL_RNG_FN float tl_rng_d2f(double a) { return TL_RNG_OP(__double2float_rn(a), (float)a); }  // to nearest even
TL_RNG_FN float tl_rng_u2f(unsigned int a) { return TL_RNG_OP(__uint2float_rn(a), (float)a); }  // to nearest even
TL_RNG_FN double tl_rng_u2d(unsigned int a) { return TL_RNG_OP(__uint2double_rn(a), (double)a); }  // exact
TL_RNG_FN float tl_rng_fmul(float a, float b) { return TL_RNG_OP(__fmul_rn(a, b), a * b); }
TL_RNG_FN unsigned long long tl_rng_bits(double a) {
    return TL_RNG_OP((unsigned long long)__double_as_longlong(a), __builtin_bit_cast(unsigned long long, a));
}
TL_RNG_FN double tl_rng_from_bits(unsigned long long b) {
    return TL_RNG_OP(__longlong_as_double((long long)b), __builtin_bit_cast(double, b));
}

// ---- constants: the Python doubles of kernels/cpu/rng.py, pasted from float.hex() ------------

#define TL_RNG_GOLDEN_GAMMA 0x9E3779B97F4A7C15ull
#define TL_RNG_MIX1 0xBF58476D1CE4E5B9ull
#define TL_RNG_MIX2 0x94D049BB133111EBull

#define TL_RNG_LN2 0x1.62e42fefa39efp-1        // math.log(2.0)
#define TL_RNG_SQRT_HALF 0x1.6a09e667f3bcdp-1  // math.sqrt(0.5)
#define TL_RNG_TWO_PI 0x1.921fb54442d18p+2     // 2.0 * math.pi
#define TL_RNG_TWO_M32 0x1p-32                 // 2.0**-32 (exact)

#define TL_RNG_NLOG 12  // LOG_SERIES[k] = 1 / (2k + 1)
#define TL_RNG_NSIN 9   // SIN_SERIES[k] = (-1)**k / (2k + 1)!
#define TL_RNG_NCOS 10  // COS_SERIES[k] = (-1)**k / (2k)!

// Horner (highest coefficient first), as kernels/cpu/rng.py::_horner: p = coeffs[-1]; then for
// c in reversed(coeffs[:-1]): p = p * z + c, two correctly rounded operations.
#define TL_RNG_STEP(c) p = tl_rng_add(tl_rng_mul(p, z), (c))

TL_RNG_FN double tl_rng_horner_log(double z) {
    double p = 0x1.642c8590b2164p-5;  // LOG_SERIES[11]
    TL_RNG_STEP(0x1.8618618618618p-5);
    TL_RNG_STEP(0x1.af286bca1af28p-5);
    TL_RNG_STEP(0x1.e1e1e1e1e1e1ep-5);
    TL_RNG_STEP(0x1.1111111111111p-4);
    TL_RNG_STEP(0x1.3b13b13b13b14p-4);
    TL_RNG_STEP(0x1.745d1745d1746p-4);
    TL_RNG_STEP(0x1.c71c71c71c71cp-4);
    TL_RNG_STEP(0x1.2492492492492p-3);
    TL_RNG_STEP(0x1.999999999999ap-3);
    TL_RNG_STEP(0x1.5555555555555p-2);
    TL_RNG_STEP(0x1.0000000000000p+0);  // LOG_SERIES[0]
    return p;
}

TL_RNG_FN double tl_rng_horner_sin(double z) {
    double p = 0x1.952c77030ad4ap-49;  // SIN_SERIES[8]
    TL_RNG_STEP(-0x1.ae7f3e733b81fp-41);
    TL_RNG_STEP(0x1.6124613a86d09p-33);
    TL_RNG_STEP(-0x1.ae64567f544e4p-26);
    TL_RNG_STEP(0x1.71de3a556c734p-19);
    TL_RNG_STEP(-0x1.a01a01a01a01ap-13);
    TL_RNG_STEP(0x1.1111111111111p-7);
    TL_RNG_STEP(-0x1.5555555555555p-3);
    TL_RNG_STEP(0x1.0000000000000p+0);  // SIN_SERIES[0]
    return p;
}

TL_RNG_FN double tl_rng_horner_cos(double z) {
    double p = -0x1.6827863b97d97p-53;  // COS_SERIES[9]
    TL_RNG_STEP(0x1.ae7f3e733b81fp-45);
    TL_RNG_STEP(-0x1.93974a8c07c9dp-37);
    TL_RNG_STEP(0x1.1eed8eff8d898p-29);
    TL_RNG_STEP(-0x1.27e4fb7789f5cp-22);
    TL_RNG_STEP(0x1.a01a01a01a01ap-16);
    TL_RNG_STEP(-0x1.6c16c16c16c17p-10);
    TL_RNG_STEP(0x1.5555555555555p-5);
    TL_RNG_STEP(-0x1.0000000000000p-1);
    TL_RNG_STEP(0x1.0000000000000p+0);  // COS_SERIES[0]
    return p;
}

#undef TL_RNG_STEP

// ---- per-element math --------------------------------------------------------------------------

TL_RNG_FN unsigned long long tl_splitmix64(unsigned long long x) {
    unsigned long long z = x + TL_RNG_GOLDEN_GAMMA;
    z = (z ^ (z >> 30)) * TL_RNG_MIX1;
    z = (z ^ (z >> 27)) * TL_RNG_MIX2;
    return z ^ (z >> 31);
}

// float32(low32(splitmix64(x))) * 2**-32 (the float32 product is exact: a power-of-two scale).
TL_RNG_FN float tl_rng_uniform_at(unsigned long long x) {
    return tl_rng_fmul(tl_rng_u2f((unsigned int)tl_splitmix64(x)), 0x1p-32f);
}

// Natural log of u in [2**-32, 1] (always a normal double), as kernels/cpu/rng.py::log_unit.
// frexp by bit manipulation (exact for normal u): u = m * 2**e, m in [0.5, 1).
TL_RNG_FN double tl_rng_log_unit(double u) {
    unsigned long long b = tl_rng_bits(u);
    int e = (int)((b >> 52) & 0x7ff) - 1022;
    double m = tl_rng_from_bits((b & 0x800fffffffffffffull) | (1022ull << 52));
    if (m < TL_RNG_SQRT_HALF) {
        m = tl_rng_mul(m, 2.0);
        e = e - 1;
    }
    double ed = (double)e;  // exact
    double s = tl_rng_div(tl_rng_sub(m, 1.0), tl_rng_add(m, 1.0));
    double a = tl_rng_mul(ed, TL_RNG_LN2);
    double p = tl_rng_horner_log(tl_rng_mul(s, s));
    return tl_rng_add(a, tl_rng_mul(tl_rng_mul(2.0, s), p));
}

// (cos 2 pi u, sin 2 pi u) for u in [0, 1), as kernels/cpu/rng.py::cos_sin_2pi.
TL_RNG_FN void tl_rng_cos_sin_2pi(double u, double* cos_out, double* sin_out) {
    double q = tl_rng_floor(tl_rng_add(tl_rng_mul(u, 4.0), 0.5));
    double t = tl_rng_mul(tl_rng_sub(u, tl_rng_mul(q, 0.25)), TL_RNG_TWO_PI);
    double t2 = tl_rng_mul(t, t);
    double s = tl_rng_mul(t, tl_rng_horner_sin(t2));
    double c = tl_rng_horner_cos(t2);
    int quadrant = (int)q & 3;  // q in {0, ..., 4}: exact
    double co, si;
    switch (quadrant) {  // cos: [c, -s, -c, s]; sin: [s, c, -s, -c]
        case 0: co = c; si = s; break;
        case 1: co = -s; si = c; break;
        case 2: co = -c; si = -s; break;
        default: co = s; si = -c; break;
    }
    *cos_out = co;
    *sin_out = si;
}

// Box-Muller pair j (x = key + j) in float64: (r cos, r sin), before the rounding to float32.
TL_RNG_FN void tl_rng_normal_pair_f64(unsigned long long x, double* z0, double* z1) {
    unsigned long long w = tl_splitmix64(x);
    double u1 = tl_rng_mul(tl_rng_add(tl_rng_u2d((unsigned int)(w >> 32)), 1.0), TL_RNG_TWO_M32);
    double u2 = tl_rng_mul(tl_rng_u2d((unsigned int)w), TL_RNG_TWO_M32);
    double r = tl_rng_sqrt(tl_rng_mul(-2.0, tl_rng_log_unit(u1)));
    double c, s;
    tl_rng_cos_sin_2pi(u2, &c, &s);
    *z0 = tl_rng_mul(r, c);
    *z1 = tl_rng_mul(r, s);
}

// Box-Muller pair j (x = key + j): (float32(r cos), float32(r sin)).
TL_RNG_FN void tl_rng_normal_pair(unsigned long long x, float* z0, float* z1) {
    double a, b;
    tl_rng_normal_pair_f64(x, &a, &b);
    *z0 = tl_rng_d2f(a);
    *z1 = tl_rng_d2f(b);
}

// ---- loop bodies (grid-stride; the host check runs them with its own tid/stride) --------------

// MASK == false: rand_uniform; MASK == true: bernoulli_mask (1.0f where keep > u, else 0.0f).
// Four consecutive outputs per iteration, one float4 store; the last partial group is scalar.
template <bool MASK>
TL_RNG_FN void tl_rng_uniform_body(float* out, long long n, unsigned long long key, float keep, long long tid,
                                   long long stride) {
    auto draw = [keep](unsigned long long x) {
        const float u = tl_rng_uniform_at(x);
        return MASK ? (keep > u ? 1.0f : 0.0f) : u;
    };
    long long groups = (n + 3) >> 2;
    for (long long g = tid; g < groups; g += stride) {
        long long i = g << 2;
        unsigned long long x = key + (unsigned long long)i;  // wraps mod 2**64
        if (i + 4 <= n) {
            reinterpret_cast<float4*>(out)[g] = make_float4(draw(x), draw(x + 1), draw(x + 2), draw(x + 3));
        } else {
            for (long long k = i; k < n; ++k) out[k] = draw(key + (unsigned long long)k);
        }
    }
}

// One Box-Muller pair per iteration, one float2 store; for odd n the last pair keeps only cos.
TL_RNG_FN void tl_rng_normal_body(float* out, long long n, unsigned long long key,
                                  long long tid, long long stride) {
    long long pairs = (n + 1) >> 1;
    for (long long j = tid; j < pairs; j += stride) {
        float z0, z1;
        tl_rng_normal_pair(key + (unsigned long long)j, &z0, &z1);
        if (2 * j + 1 < n) {
            reinterpret_cast<float2*>(out)[j] = make_float2(z0, z1);
        } else {
            out[2 * j] = z0;
        }
    }
}

// ---- kernels -----------------------------------------------------------------------------------

// Launch over (n + 3) / 4 work items.
extern "C" __global__ void tl_rand_uniform(float* __restrict__ out, long long n, unsigned long long key) {
    tl_rng_uniform_body<false>(out, n, key, 0.0f, TL_TID, TL_STRIDE);
}

// Launch over (n + 3) / 4 work items; keep is float32(keep_prob).
extern "C" __global__ void tl_bernoulli_mask(float* __restrict__ out, long long n, float keep, unsigned long long key) {
    tl_rng_uniform_body<true>(out, n, key, keep, TL_TID, TL_STRIDE);
}

// Launch over (n + 1) / 2 work items.
extern "C" __global__ void tl_rand_normal(float* __restrict__ out, long long n, unsigned long long key) {
    tl_rng_normal_body(out, n, key, TL_TID, TL_STRIDE);
}
