// Shared by every torchlean .cu file (the loader prepends this text; NVRTC sees no #include).
// Conventions: flat float32 buffers; sizes and indices are long long; kernels are extern "C" and
// use grid-stride loops, so any grid size is correct and the launcher picks one for the device.
// Compiled with --fmad=false: a*b+c rounds twice, as NumPy does, so plain arithmetic gives the
// same bits on the CPU and the GPU.

#define TL_TID ((long long)blockIdx.x * blockDim.x + threadIdx.x)
#define TL_STRIDE ((long long)blockDim.x * gridDim.x)
#define TL_FULL_MASK 0xffffffffu
// NVRTC has no <math.h>: INFINITY (which nvcc's headers define) is spelled out here for every file.
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif

__device__ __forceinline__ double tl_warp_sum_d(double v) {
    // Fixed butterfly order: bitwise repeatable.
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(TL_FULL_MASK, v, o);
    return v;
}

__device__ __forceinline__ float tl_warp_sum_f(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(TL_FULL_MASK, v, o);
    return v;
}

__device__ __forceinline__ float tl_warp_max_f(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(TL_FULL_MASK, v, o));
    return v;
}

// Block-wide sum in a fixed order (warp butterflies, then warp 0 over the warp sums); every
// thread gets the result. `scratch` holds at least 32 doubles; blockDim.x is a multiple of 32.
__device__ __forceinline__ double tl_block_sum_d(double v, double* scratch) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = tl_warp_sum_d(v);
    __syncthreads();  // scratch may still be read by a previous call
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = (lane < nwarps) ? scratch[lane] : 0.0;
    v = tl_warp_sum_d(v);
    return v;
}

__device__ __forceinline__ float tl_block_max_f(float v, float* scratch) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = tl_warp_max_f(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = (lane < nwarps) ? scratch[lane] : __int_as_float(0x7fc00000);  // NaN loses to fmaxf
    v = tl_warp_max_f(v);
    return v;
}
