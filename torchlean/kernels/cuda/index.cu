// Gather and scatter-add kernels. Indices are uint32 (the host checked them < 2**32); an index
// that is out of bounds reads 0 in a gather and is skipped in a scatter.
//
// Row kernels walk the flat (row, column) space with a grid-stride loop: each thread divides once
// for its first (row, column) and then steps by a precomputed (rows, columns) increment, so
// consecutive threads touch consecutive columns (coalesced) for any row length.

__device__ __forceinline__ float tl_zero(float) { return 0.0f; }
__device__ __forceinline__ float4 tl_zero(float4) { return make_float4(0.0f, 0.0f, 0.0f, 0.0f); }

extern "C" __global__ void tl_gather_vec(const float* __restrict__ vec, const unsigned int* __restrict__ idx,
                                         float* __restrict__ out, long long n, long long k) {
    for (long long i = TL_TID; i < k; i += TL_STRIDE) {
        const long long j = idx[i];
        out[i] = (j < n) ? vec[j] : 0.0f;
    }
}

// Calls f(i, r, c) for each flat index i = r * C + c in [0, total) of this thread's grid-stride
// sequence: one division for the first (r, c), then a precomputed (rows, columns) step.
template <typename F>
__device__ __forceinline__ void tl_for_each_rc(long long C, long long total, F f) {
    long long i = TL_TID;
    if (i >= total) return;
    const long long step = TL_STRIDE;
    long long r = i / C, c = i % C;
    const long long sr = step / C, sc = step % C;
    for (;;) {
        f(i, r, c);
        i += step;
        if (i >= total) break;
        r += sr; c += sc;
        if (c >= C) { c -= C; ++r; }
    }
}

// out (k, C) = mat (rows, C)[idx]; T = float4 when cols % 4 == 0 (C = cols / 4).
template <typename T>
__device__ __forceinline__ void tl_gather_rows_body(const T* __restrict__ mat, const unsigned int* __restrict__ idx,
                                                    T* __restrict__ out, long long rows, long long C,
                                                    long long total) {
    tl_for_each_rc(C, total, [&](long long i, long long r, long long c) {
        const long long src = idx[r];
        out[i] = (src < rows) ? mat[src * C + c] : tl_zero(T());
    });
}

extern "C" __global__ void tl_gather_rows(const float* __restrict__ mat, const unsigned int* __restrict__ idx,
                                          float* __restrict__ out, long long rows, long long C, long long total) {
    tl_gather_rows_body<float>(mat, idx, out, rows, C, total);
}

extern "C" __global__ void tl_gather_rows4(const float4* __restrict__ mat, const unsigned int* __restrict__ idx,
                                           float4* __restrict__ out, long long rows, long long C, long long total) {
    tl_gather_rows_body<float4>(mat, idx, out, rows, C, total);
}

// ---- fast (non-deterministic) scatter-add: float atomics into a copy of the destination ----

extern "C" __global__ void tl_scatter_add_atomic(const float* __restrict__ values, const unsigned int* __restrict__ idx,
                                                 float* __restrict__ out, long long n, long long k) {
    for (long long i = TL_TID; i < k; i += TL_STRIDE) {
        const long long j = idx[i];
        if (j < n) atomicAdd(out + j, values[i]);
    }
}

extern "C" __global__ void tl_scatter_add_rows_atomic(const float* __restrict__ values,
                                                      const unsigned int* __restrict__ idx, float* __restrict__ out,
                                                      long long rows, long long cols, long long total) {
    tl_for_each_rc(cols, total, [&](long long i, long long r, long long c) {
        const long long dst = idx[r];
        if (dst < rows) atomicAdd(out + dst * cols + c, values[i]);
    });
}

// out[off + j] += row[j] for j < cols (scatter_add_row: one row, no conflicts).
extern "C" __global__ void tl_scatter_add_row(float* __restrict__ out, const float* __restrict__ row, long long off,
                                      long long cols) {
    for (long long j = TL_TID; j < cols; j += TL_STRIDE) out[off + j] = out[off + j] + row[j];
}

// ---- deterministic scatter-add: fixed-order segmented sums, no atomics ----
//
// The host sorts the indices (stable), so the contributions to each destination row form a
// segment of the sorted order, in index order. A segment of at most TL_CHUNK source rows is one
// job; a longer one is cut into chunks of TL_CHUNK rows whose partial sums (a double buffer) are
// the source of the next level, and so on until every segment is short. Each job is summed by one
// thread per column, sequentially in source order, so every launch is a pure function of the
// indices and the values: repeated runs are bitwise equal.
//
// Accumulation is in double (the partial buffers too), and a final job writes
// out = float((double)out + sum): one rounding to float32 per destination element, well inside
// the |err| <= gamma(k) * sum|x| contract (the CPU's sequential float32 np.add.at rounds k times).
//
// Job j covers source rows [js[j], je[j]) of the current level; the source row for position p is
// order[p] at level 0 when the indices were not already sorted (ORDERED), else p itself.
// FINAL: out[jt[j] * cols + c] = float((double)out[...] + acc); else partial[j * cols + c] = acc.
template <typename S, bool ORDERED, bool FINAL>
__device__ __forceinline__ void tl_scatter_add_seg_body(const S* __restrict__ src, const unsigned int* __restrict__ order,
                                            const unsigned int* __restrict__ js, const unsigned int* __restrict__ je,
                                            const unsigned int* __restrict__ jt, long long njobs, long long cols,
                                            float* __restrict__ out, double* __restrict__ partial) {
    const long long total = njobs * cols;
    for (long long p = TL_TID; p < total; p += TL_STRIDE) {
        const long long j = p / cols, c = p - j * cols;
        const long long b = js[j], e = je[j];
        double acc = 0.0;
        for (long long q = b; q < e; ++q) {
            const long long r = ORDERED ? (long long)order[q] : q;
            acc += (double)src[r * cols + c];
        }
        if (FINAL) {
            float* o = out + (long long)jt[j] * cols + c;
            *o = (float)((double)*o + acc);
        } else {
            partial[p] = acc;
        }
    }
}

#define TL_SEG(NAME, S, ORDERED, FINAL)                                                                      \
    extern "C" __global__ void NAME(const S* __restrict__ src, const unsigned int* __restrict__ order,        \
                                    const unsigned int* __restrict__ js, const unsigned int* __restrict__ je,  \
                                    const unsigned int* __restrict__ jt, long long njobs, long long cols,      \
                                    float* __restrict__ out, double* __restrict__ partial) {                   \
        tl_scatter_add_seg_body<S, ORDERED, FINAL>(src, order, js, je, jt, njobs, cols, out, partial);                   \
    }

TL_SEG(tl_scatter_add_seg_f_ord_final, float, true, true)
TL_SEG(tl_scatter_add_seg_f_ord_part, float, true, false)
TL_SEG(tl_scatter_add_seg_f_id_final, float, false, true)
TL_SEG(tl_scatter_add_seg_f_id_part, float, false, false)
TL_SEG(tl_scatter_add_seg_d_id_final, double, false, true)
TL_SEG(tl_scatter_add_seg_d_id_part, double, false, false)
