// fused_add_rmsnorm as SGLang runs it (FlashInfer's FusedAddRMSNorm kernel; kernels.md section 3):
// one CTA per row, block (32, num_warps) with num_warps = ceil(min(1024, H / vec) / 32),
// vec = gcd(16 / sizeof(T), H). Pass 1 loads x and residual in vectors (rounds of 32 * num_warps
// vectors), forms the fp32 sum s = x + residual, writes s rounded to T back to residual, keeps the
// fp32 s in dynamic shared memory (H floats after the per-warp partials, padded to 4 floats) and
// sums s^2 in fp32; a warp butterfly, per-warp partials in shared memory, warp 0 finishes. Pass 2
// reads s from shared memory and w from global memory and writes s * rsqrt(mean + eps) * w to x.
// Built with fast math and a 128-register cap like sgl-kernel's SM90 build. PDL is left off, as on
// the tuned side (compare with it off on both). Above 48 KB of dynamic shared memory (H > ~12200)
// the harness raises the kernel's limit, as SGLang does.
#include "common.cuh"

//@ kernel: fused_add_rmsnorm
//@ derive VEC = gcd(16 // ELEM_BYTES, H)
//@ grid: T
//@ block: 32, ceil_div(min(1024, H // VEC), 32)
//@ shared: (ceil_div(ceil_div(min(1024, H // VEC), 32), 4) * 4 + H) * 4
//@ fast_math: 1
//@ max_registers: 128

// VEC floats to or from shared memory in 16-byte (or narrower) pieces: a row's vectors start at
// multiples of 4 * VEC bytes from a 16-byte aligned base.
__device__ __forceinline__ void store_floats(float* p, const float (&v)[VEC]) {
#if VEC % 4 == 0
#pragma unroll
    for (int q = 0; q < VEC / 4; ++q)
        reinterpret_cast<float4*>(p)[q] = make_float4(v[4 * q], v[4 * q + 1], v[4 * q + 2], v[4 * q + 3]);
#elif VEC == 2
    *reinterpret_cast<float2*>(p) = make_float2(v[0], v[1]);
#else
    p[0] = v[0];
#endif
}

__device__ __forceinline__ void load_floats(const float* p, float (&v)[VEC]) {
#if VEC % 4 == 0
#pragma unroll
    for (int q = 0; q < VEC / 4; ++q) {
        const float4 f = reinterpret_cast<const float4*>(p)[q];
        v[4 * q] = f.x; v[4 * q + 1] = f.y; v[4 * q + 2] = f.z; v[4 * q + 3] = f.w;
    }
#elif VEC == 2
    const float2 f = *reinterpret_cast<const float2*>(p);
    v[0] = f.x; v[1] = f.y;
#else
    v[0] = p[0];
#endif
}

extern "C" __global__ void __launch_bounds__(1024)
fused_add_rmsnorm(scalar_t* __restrict__ x, scalar_t* __restrict__ residual, const scalar_t* __restrict__ w,
                  float eps, int tokens, int hidden) {
    typedef Vec<scalar_t, VEC> V;
    extern __shared__ __align__(16) float smem[];
    const int lane = threadIdx.x, warp = threadIdx.y;
    const int num_warps = blockDim.y;
    const int num_threads = num_warps * 32;
    const int tid = warp * 32 + lane;
    const int nvec = hidden / VEC;
    const int rounds = ceil_div_int(hidden, VEC * num_threads);
    float* partial = smem;                              // one float per warp
    float* row_f = smem + ceil_div_int(num_warps, 4) * 4;  // the fp32 row
    const long long row = blockIdx.x;
    V* xr = reinterpret_cast<V*>(x + row * hidden);
    V* rr = reinterpret_cast<V*>(residual + row * hidden);
    const V* wr = reinterpret_cast<const V*>(w);

    float sum_sq = 0.f;
    for (int r = 0; r < rounds; ++r) {
        const int i = r * num_threads + tid;
        if (i < nvec) {
            const V xv = xr[i];
            V rv = rr[i];
            float s[VEC];
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
                s[j] = to_float(xv.v[j]) + to_float(rv.v[j]);
                sum_sq += s[j] * s[j];
                rv.v[j] = from_float<scalar_t>(s[j]);
            }
            rr[i] = rv;
            store_floats(row_f + i * VEC, s);
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
            const V wv = wr[i];
            float s[VEC];
            load_floats(row_f + i * VEC, s);
            V ov;
#pragma unroll
            for (int j = 0; j < VEC; ++j) ov.v[j] = from_float<scalar_t>(s[j] * rms_rcp * to_float(wv.v[j]));
            xr[i] = ov;
        }
    }
}
