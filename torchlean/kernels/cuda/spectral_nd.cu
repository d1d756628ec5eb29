// The per-mode channel mixing of the 2-D/3-D FNO spectral convolutions (launched by
// spectral_nd.py; the truncated transforms around it are cuBLAS GEMMs). A spectrum is (L, 2, M):
// L = batch * channels, [re, im], then the M kept modes flattened as (k1, k2, k3) with K1 = 2 m1
// (two corners), K2 = 2 m2 (3-D: two corners) or m2 (2-D: the last axis), K3 = m3 (3-D) or 1.
// The weights keep the reference's layout (corners, cin, cout, m1, m2, m3, 2): a mode's corner is
// bit 0 for the high half of axis 1 and bit 1 for the high half of axis 2 (3-D only).
// One thread per output, the modes fastest (coalesced spectrum reads and writes); every sum runs
// in a fixed order (no atomics): results are bitwise repeatable.

struct TlModeMap {
    long long m1, m2, m3, k2, mm, modes;
    int corner2;
};

__device__ __forceinline__ TlModeMap tl_mode_map(long long m1, long long m2, long long m3, int corner2) {
    TlModeMap t;
    t.m1 = m1; t.m2 = m2; t.m3 = m3; t.corner2 = corner2;
    t.k2 = corner2 ? 2 * m2 : m2;
    t.mm = m1 * m2 * m3;
    t.modes = 2 * m1 * t.k2 * m3;
    return t;
}

// flat mode m -> (corner, index into the corner's m1 x m2 x m3 block)
__device__ __forceinline__ void tl_mode_to_corner(const TlModeMap& t, long long m, long long* corner, long long* local) {
    const long long k3 = m % t.m3;
    const long long k2 = (m / t.m3) % t.k2;
    const long long k1 = m / (t.m3 * t.k2);
    const long long hi1 = k1 >= t.m1, hi2 = t.corner2 && k2 >= t.m2;
    *corner = hi1 + 2 * hi2;
    *local = ((k1 - hi1 * t.m1) * t.m2 + (k2 - hi2 * t.m2)) * t.m3 + k3;
}

// y[b, o, :, m] = sum_i x[b, i, m] w[corner(m), i, o, local(m)] (complex), for spectral_conv{2,3}d_rfft_fwd
extern "C" __global__ void tl_spectral_conv_nd_rfft_mix(const float* __restrict__ x, const float* __restrict__ w,
        float* __restrict__ y, long long batch, long long cin, long long cout, long long m1, long long m2, long long m3,
        int corner2) {
    const TlModeMap t = tl_mode_map(m1, m2, m3, corner2);
    const long long M = t.modes, total = batch * cout * M;
    for (long long idx = TL_TID; idx < total; idx += TL_STRIDE) {
        const long long m = idx % M, o = (idx / M) % cout, b = idx / (M * cout);
        long long corner, local;
        tl_mode_to_corner(t, m, &corner, &local);
        float yr = 0.0f, yi = 0.0f;
        for (long long i = 0; i < cin; ++i) {
            const float* xs = x + (b * cin + i) * 2 * M + m;
            const float* ws = w + (((corner * cin + i) * cout + o) * t.mm + local) * 2;
            const float xr = xs[0], xi = xs[M], wr = ws[0], wi = ws[1];
            yr += xr * wr - xi * wi;
            yi += xr * wi + xi * wr;
        }
        float* ys = y + (b * cout + o) * 2 * M + m;
        ys[0] = yr;
        ys[M] = yi;
    }
}

// dx[b, i, :, m] = sum_o dy[b, o, m] conj(w[corner(m), i, o, local(m)]), for spectral_conv{2,3}d_rfft_bwd_x
extern "C" __global__ void tl_spectral_conv_nd_rfft_mix_adjoint(const float* __restrict__ g, const float* __restrict__ w,
        float* __restrict__ dx, long long batch, long long cin, long long cout, long long m1, long long m2, long long m3,
        int corner2) {
    const TlModeMap t = tl_mode_map(m1, m2, m3, corner2);
    const long long M = t.modes, total = batch * cin * M;
    for (long long idx = TL_TID; idx < total; idx += TL_STRIDE) {
        const long long m = idx % M, i = (idx / M) % cin, b = idx / (M * cin);
        long long corner, local;
        tl_mode_to_corner(t, m, &corner, &local);
        float dr = 0.0f, di = 0.0f;
        for (long long o = 0; o < cout; ++o) {
            const float* gs = g + (b * cout + o) * 2 * M + m;
            const float* ws = w + (((corner * cin + i) * cout + o) * t.mm + local) * 2;
            const float gr = gs[0], gi = gs[M], wr = ws[0], wi = ws[1];
            dr += gr * wr + gi * wi;
            di += gi * wr - gr * wi;
        }
        float* ds = dx + (b * cin + i) * 2 * M + m;
        ds[0] = dr;
        ds[M] = di;
    }
}

// dw[corner, i, o, local, :] = sum_b conj(x[b, i, m]) dy[b, o, m], m the mode of (corner, local), for
// spectral_conv{2,3}d_rfft_bwd_w: every weight element is written (each mode belongs to one corner).
extern "C" __global__ void tl_spectral_conv_nd_rfft_bwd_w(const float* __restrict__ x, const float* __restrict__ g,
        float* __restrict__ dw, long long batch, long long cin, long long cout, long long m1, long long m2, long long m3,
        int corner2) {
    const TlModeMap t = tl_mode_map(m1, m2, m3, corner2);
    const long long M = t.modes, ncorner = corner2 ? 4 : 2;
    const long long total = ncorner * cin * cout * t.mm;
    for (long long idx = TL_TID; idx < total; idx += TL_STRIDE) {
        const long long local = idx % t.mm, o = (idx / t.mm) % cout, i = (idx / (t.mm * cout)) % cin;
        const long long corner = idx / (t.mm * cout * cin);
        const long long k3 = local % t.m3, x2 = (local / t.m3) % t.m2, x1 = local / (t.m3 * t.m2);
        const long long k1 = x1 + (corner & 1) * t.m1, k2 = x2 + ((corner >> 1) & 1) * t.m2;
        const long long m = (k1 * t.k2 + k2) * t.m3 + k3;
        float sr = 0.0f, si = 0.0f;
        for (long long b = 0; b < batch; ++b) {
            const float* xs = x + (b * cin + i) * 2 * M + m;
            const float* gs = g + (b * cout + o) * 2 * M + m;
            const float xr = xs[0], xi = xs[M], gr = gs[0], gi = gs[M];
            sr += xr * gr + xi * gi;
            si += xr * gi - xi * gr;
        }
        dw[2 * idx] = sr;
        dw[2 * idx + 1] = si;
    }
}
