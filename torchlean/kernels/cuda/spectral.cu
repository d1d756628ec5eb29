// Spectral family helpers (launched by spectral.py): the transforms themselves are cuFFT or
// cuBLAS; these kernels are the small elementwise passes around them. No sums, no atomics: every
// result is bitwise repeatable.

// irfft input preparation: cuFFT C2R overwrites its input, so the half spectrum is copied anyway;
// the copy also applies the 1/n scale (folded here, where it costs nothing) and zeroes the
// imaginary parts of bin 0 and (even n) bin n/2, which the convention ignores (cuFFT's C2R
// assumes them 0 rather than guaranteeing to ignore them).
extern "C" __global__ void tl_irfft1d_packed_prep(const float* __restrict__ spec, float* __restrict__ out, long long rows,
                                         long long bins, long long n, float scale) {
    const long long total = rows * bins * 2;
    for (long long i = TL_TID; i < total; i += TL_STRIDE) {
        const long long k = (i >> 1) % bins;
        float v = spec[i] * scale;
        if ((i & 1) && (k == 0 || 2 * k == n)) v = 0.0f;
        out[i] = v;
    }
}

// The real block matrices of the per-mode complex mixing, (modes, 2w, 2w) row-major:
// [[w_re, w_im], [-w_im, w_re]], so that the row vector [Re X | Im X] times block k is [Re Y | Im Y].
extern "C" __global__ void tl_spectral_conv1d_rfft_weight_blocks(const float* __restrict__ wr, const float* __restrict__ wi,
                                              float* __restrict__ wb, long long modes, long long width) {
    const long long w2 = 2 * width;
    const long long total = modes * w2 * w2;
    for (long long idx = TL_TID; idx < total; idx += TL_STRIDE) {
        const long long k = idx / (w2 * w2);
        const long long r = (idx / w2) % w2;
        const long long c = idx % w2;
        const bool top = r < width, left = c < width;
        const long long src = k * width * width + (top ? r : r - width) * width + (left ? c : c - width);
        float v;
        if (top == left) v = wr[src];
        else if (top) v = wi[src];
        else v = -wi[src];
        wb[idx] = v;
    }
}

// Weight gradients from the per-mode products P_k = [Xr Xi]^T [dYr dYi] (modes, 2w, 2w):
// dw_re = P00 + P11, dw_im = P01 - P10 (each w x w block).
extern "C" __global__ void tl_spectral_conv1d_rfft_bwd_w_combine(const float* __restrict__ p, float* __restrict__ dwr,
                                                  float* __restrict__ dwi, long long modes, long long width) {
    const long long w2 = 2 * width;
    const long long total = modes * width * width;
    for (long long idx = TL_TID; idx < total; idx += TL_STRIDE) {
        const long long k = idx / (width * width);
        const long long i = (idx / width) % width;
        const long long o = idx % width;
        const float* pk = p + k * w2 * w2;
        const float p00 = pk[i * w2 + o], p01 = pk[i * w2 + width + o];
        const float p10 = pk[(width + i) * w2 + o], p11 = pk[(width + i) * w2 + width + o];
        dwr[idx] = p00 + p11;
        dwi[idx] = p01 - p10;
    }
}
