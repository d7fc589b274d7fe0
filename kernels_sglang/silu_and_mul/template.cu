// silu_and_mul with its degrees of freedom explicit. A row of d outputs is cut into d / VEC
// vectors; CHUNKS CTAs share a row when tokens are few (so more than T of the 132 SMs work),
// ROWS rows share a CTA when tokens are many; each thread keeps UNROLL independent vector loads
// in flight before the first use.
#include "common.cuh"

//@ kernel: act_and_mul
//@ param THREADS: 64, 128, 256, 512, 1024      -- threads per CTA
//@ param VEC: 1, 2, 4, 8                       -- elements per load
//@ param CHUNKS: 1, 2, 4, 8, 16, 32            -- CTAs per row
//@ param ROWS: 1, 2, 4                         -- rows per CTA
//@ param UNROLL: 1, 2, 4                       -- vector loads in flight per thread
//@ param FAST_MATH: 0, 1                       -- --use_fast_math
//@ require VEC * ELEM_BYTES <= 16              -- a load is at most 16 bytes
//@ require D % VEC == 0                        -- the row splits into whole vectors (and stays aligned)
//@ require CHUNKS == 1 or ROWS == 1            -- split rows or group them, not both
//@ require CHUNKS == 1 or ceil_div(D // VEC, CHUNKS) >= 32   -- every CTA of a split row gets at least a warp's work
//@ require THREADS <= max(32, ceil_div(D // VEC, CHUNKS)) * 2   -- no more than twice the threads a chunk can use
//@ grid: ceil_div(T, ROWS), CHUNKS
//@ block: THREADS
//@ fast_math: FAST_MATH
//@ default: THREADS=256 VEC=8 CHUNKS=1 ROWS=1 UNROLL=1 FAST_MATH=1

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

extern "C" __global__ void __launch_bounds__(THREADS)
act_and_mul(const scalar_t* __restrict__ x, scalar_t* __restrict__ out, int tokens, int d) {
    typedef Vec<scalar_t, VEC> V;
    const int nvec = d / VEC;
    const int per_chunk = ceil_div_int(nvec, CHUNKS);
    const int begin = blockIdx.y * per_chunk;
    const int end = min(nvec, begin + per_chunk);
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        const long long token = (long long)blockIdx.x * ROWS + r;
        if (token >= tokens) return;
        const V* a = reinterpret_cast<const V*>(x + token * 2 * d);
        const V* b = reinterpret_cast<const V*>(x + token * 2 * d + d);
        V* o = reinterpret_cast<V*>(out + token * d);
        for (int base = begin + threadIdx.x; base < end; base += THREADS * UNROLL) {
            V av[UNROLL], bv[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                const int i = base + u * THREADS;
                if (i < end) { av[u] = a[i]; bv[u] = b[i]; }
            }
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                const int i = base + u * THREADS;
                if (i < end) {
                    V ov;
#pragma unroll
                    for (int j = 0; j < VEC; ++j)
                        ov.v[j] = from_float<scalar_t>(act(to_float(av[u].v[j])) * to_float(bv[u].v[j]));
                    o[i] = ov;
                }
            }
        }
    }
}
