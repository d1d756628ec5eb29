// Tensor-core flash attention, 3xTF32 products (float32 accuracy): the kernels of attention_mma.cuh
// instantiated with SPLIT. Their one-product TF32 twins (set_allow_tf32(True)) live in
// attention_mma_tf32.cu: two files that compile in parallel, each about half the work.

#include "attention_mma.cuh"

#if __CUDA_ARCH__ >= 800
// (DP, query columns / 8 of the dK/dV step, split, name suffix, min blocks per SM: forward, dQ, dK/dV).
// At DP = 64, 3 blocks per SM (170 registers, a few spills) made the forward and dQ 4-10% faster on
// the H100 and dK/dV 3% slower, so dK/dV keeps 2.
TL_ATTN_MMA_INSTANCE(32, 8, true, , 3, 3, 3)
TL_ATTN_MMA_INSTANCE(64, 8, true, , 3, 3, 2)
TL_ATTN_MMA_INSTANCE(128, 4, true, , 2, 1, 1)
#endif  // __CUDA_ARCH__ >= 800
