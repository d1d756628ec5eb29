// Tensor-core flash attention, one TF32 product (the user allowed TF32): the kernels of
// attention_mma.cuh instantiated without SPLIT, names ending in _tf32 (see attention_mma.cu).

#include "attention_mma.cuh"

#if __CUDA_ARCH__ >= 800
// (DP, query columns / 8 of the dK/dV step, split, name suffix, min blocks per SM: forward, dQ, dK/dV)
TL_ATTN_MMA_INSTANCE(32, 8, false, _tf32, 3, 3, 3)
TL_ATTN_MMA_INSTANCE(64, 8, false, _tf32, 2, 2, 2)
TL_ATTN_MMA_INSTANCE(128, 4, false, _tf32, 2, 1, 1)
#endif  // __CUDA_ARCH__ >= 800
