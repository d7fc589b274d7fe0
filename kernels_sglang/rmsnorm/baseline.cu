// rmsnorm as SGLang runs it (FlashInfer's RMSNorm kernel; kernels.md section 2): one CTA per row,
// block (32, num_warps) with num_warps = ceil(min(1024, H / vec) / 32), vec = gcd(16 / sizeof(T), H).
// Pass 1 loads the row in vectors (rounds of 32 * num_warps vectors) and sums squares in fp32;
// a warp butterfly (shfl_xor), per-warp partials in dynamic shared memory, warp 0 finishes and
// publishes the total through shared memory. Pass 2 re-reads x and w from global memory and
// writes x * rsqrt(mean + eps) * w. Built with fast math and a 128-register cap like sgl-kernel's
// SM90 build. PDL is left off, as on the tuned side (compare with it off on both).
#include "common.cuh"

//@ kernel: rmsnorm
//@ derive VEC = gcd(16 // ELEM_BYTES, H)
//@ grid: T
//@ block: 32, ceil_div(min(1024, H // VEC), 32)
//@ shared: ceil_div(min(1024, H // VEC), 32) * 4
//@ fast_math: 1
//@ max_registers: 128

extern "C" __global__ void __launch_bounds__(1024)
rmsnorm(const scalar_t* __restrict__ x, const scalar_t* __restrict__ w, scalar_t* __restrict__ out,
        float eps, int tokens, int hidden) {
    typedef Vec<scalar_t, VEC> V;
    extern __shared__ float partial[];  // one float per warp
    const int lane = threadIdx.x, warp = threadIdx.y;
    const int num_warps = blockDim.y;
    const int num_threads = num_warps * 32;
    const int tid = warp * 32 + lane;
    const int nvec = hidden / VEC;
    const int rounds = ceil_div_int(hidden, VEC * num_threads);
    const long long row = blockIdx.x;
    const V* xr = reinterpret_cast<const V*>(x + row * hidden);
    const V* wr = reinterpret_cast<const V*>(w);
    V* orow = reinterpret_cast<V*>(out + row * hidden);

    float sum_sq = 0.f;
    for (int r = 0; r < rounds; ++r) {
        const int i = r * num_threads + tid;
        if (i < nvec) {
            const V xv = xr[i];
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
                const float f = to_float(xv.v[j]);
                sum_sq += f * f;
            }
        }
    }
    sum_sq = warp_sum(sum_sq);
    if (lane == 0) partial[warp] = sum_sq;
    __syncthreads();
    if (warp == 0) {
        float s = lane < num_warps ? partial[lane] : 0.f;
        s = warp_sum(s);
        if (lane == 0) partial[0] = s;
    }
    __syncthreads();
    const float rms_rcp = rsqrtf(partial[0] / (float)hidden + eps);

    for (int r = 0; r < rounds; ++r) {
        const int i = r * num_threads + tid;
        if (i < nvec) {
            const V xv = xr[i];
            const V wv = wr[i];
            V ov;
#pragma unroll
            for (int j = 0; j < VEC; ++j)
                ov.v[j] = from_float<scalar_t>(to_float(xv.v[j]) * rms_rcp * to_float(wv.v[j]));
            orow[i] = ov;
        }
    }
}
