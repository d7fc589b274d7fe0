// silu_and_mul as SGLang runs it (kernels.md section 1): one CTA per token, blockDim =
// min(d / vec, 256), vec the widest power of two dividing d within 16 bytes, a block-stride loop
// over the row that the compiler must not unroll (one vector of each half in flight per thread,
// as in the production loop), no shared memory; built with fast math and a 128-register cap like
// sgl-kernel's SM90 build. PDL is left off, as on the tuned side (compare with it off on both).
#include "common.cuh"

//@ kernel: act_and_mul
//@ derive VEC = pow2_divisor(D, 16 // ELEM_BYTES)
//@ grid: T
//@ block: min(D // VEC, 256)
//@ fast_math: 1
//@ max_registers: 128

__device__ __forceinline__ float act(float a) {
#if ACT == 0
    return a / (1.0f + expf(-a));
#elif ACT == 1
    return 0.5f * a * (1.0f + erff(a * 0.70710678118654752f));
#else
    const float inner = 0.7978845608028654f * (a + 0.044715f * a * a * a);
    return 0.5f * a * (1.0f + tanhf(inner));
#endif
}

extern "C" __global__ void __launch_bounds__(256)
act_and_mul(const scalar_t* __restrict__ x, scalar_t* __restrict__ out, int tokens, int d) {
    typedef Vec<scalar_t, VEC> V;
    const long long token = blockIdx.x;
    const V* a = reinterpret_cast<const V*>(x + token * 2 * d);
    const V* b = reinterpret_cast<const V*>(x + token * 2 * d + d);
    V* o = reinterpret_cast<V*>(out + token * d);
#pragma unroll 1
    for (int i = threadIdx.x; i < d / VEC; i += blockDim.x) {
        const V av = a[i], bv = b[i];
        V ov;
#pragma unroll
        for (int j = 0; j < VEC; ++j) ov.v[j] = from_float<scalar_t>(act(to_float(av.v[j])) * to_float(bv.v[j]));
        o[i] = ov;
    }
}
