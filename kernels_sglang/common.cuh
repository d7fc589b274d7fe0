// Shared by every kernel of the suite; the loader inlines this file where a kernel includes it,
// so the compile cache sees one complete text. DTYPE and ELEM_BYTES come from the loader as -D.
#ifndef ASTRA_COMMON_CUH
#define ASTRA_COMMON_CUH
#include <cuda_fp16.h>
#include <cuda_bf16.h>

typedef DTYPE scalar_t;

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename U> __device__ __forceinline__ U from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// N elements moved as one aligned access (N * sizeof(U) of 2, 4, 8 or 16 bytes).
template <typename U, int N> struct alignas(sizeof(U) * N) Vec { U v[N]; };

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
    return x;
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
    return x;
}

__host__ __device__ __forceinline__ int ceil_div_int(int a, int b) { return (a + b - 1) / b; }
#endif
