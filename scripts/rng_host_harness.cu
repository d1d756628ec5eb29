// Host build of torchlean/kernels/cuda/rng.cu for scripts/rng-host-check: the same source text
// the GPU compiles (common.cuh + rng.cu), with the loop bodies run serially on the CPU. Each
// function simulates a grid of `threads` threads (thread t handles work items t, t + threads, ...),
// so the float4/float2 stores and the partial tail group run exactly as in the kernels.
#include "common.cuh"
#include "rng.cu"

extern "C" {

void host_rand_uniform(float* out, long long n, unsigned long long key, long long threads) {
    for (long long t = 0; t < threads; ++t) tl_rng_uniform_body<false>(out, n, key, 0.0f, t, threads);
}

void host_bernoulli_mask(float* out, long long n, float keep, unsigned long long key, long long threads) {
    for (long long t = 0; t < threads; ++t) tl_rng_uniform_body<true>(out, n, key, keep, t, threads);
}

void host_rand_normal(float* out, long long n, unsigned long long key, long long threads) {
    for (long long t = 0; t < threads; ++t) tl_rng_normal_body(out, n, key, t, threads);
}

// The float64 values (r cos, r sin) of pairs 0 .. pairs-1, before the rounding to float32: a far
// stronger check of the series arithmetic than the float32 outputs (which hide most 1-ulp slips).
void host_normal_f64(double* out, long long pairs, unsigned long long key) {
    for (long long j = 0; j < pairs; ++j) tl_rng_normal_pair_f64(key + (unsigned long long)j, &out[2 * j], &out[2 * j + 1]);
}

}  // extern "C"
