// y = x * alpha + bias, in bf16 storage with fp32 math: a small real kernel for compiler tests.
#include <cuda_bf16.h>

extern "C" __global__ void __launch_bounds__(SCALE_THREADS)
scale_bf16(const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ y, int n, float alpha) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __float2bfloat16(__bfloat162float(x[i]) * alpha + SCALE_BIAS);
}
