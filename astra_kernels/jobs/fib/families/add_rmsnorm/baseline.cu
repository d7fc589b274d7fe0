// The first kernel of an out-of-place fused add + RMS norm, as a reference implementation writes it:
// a CTA of 256 threads per row, the widest vector the row's width allows, the row read twice (sum
// of squares, then the normalised output). The template's ITEMS = 0, ROWS = 1 form at one point.
#include "common.cuh"

//@ kernel: add_rmsnorm
//@ derive VEC = pow2_divisor(H, 16 // ELEM_BYTES)   -- the widest load that keeps every row aligned
//@ grid: T
//@ block: 256
//@ fast_math: 1

extern "C" __global__ void __launch_bounds__(256)
add_rmsnorm(const scalar_t* __restrict__ x, const scalar_t* __restrict__ r, const scalar_t* __restrict__ w,
            scalar_t* __restrict__ out, float eps, int tokens, int hidden) {
    typedef Vec<scalar_t, VEC> V;
    const long long base = (long long)blockIdx.x * hidden;
    const V* xr = reinterpret_cast<const V*>(x + base);
    const V* rr = reinterpret_cast<const V*>(r + base);
    const V* wr = reinterpret_cast<const V*>(w);
    V* orow = reinterpret_cast<V*>(out + base);
    const int nvec = hidden / VEC;
    float sum_sq = 0.f;
    for (int i = threadIdx.x; i < nvec; i += 256) {
        const V xv = xr[i], rv = rr[i];
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            const float f = to_float(xv.v[j]) + to_float(rv.v[j]);
            sum_sq += f * f;
        }
    }
    __shared__ float partial[8];
    float total = warp_sum(sum_sq);
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = total;
    __syncthreads();
    total = warp_sum((threadIdx.x & 31) < 8 ? partial[threadIdx.x & 31] : 0.f);
    const float scale = rsqrtf(total / (float)hidden + eps);
    for (int i = threadIdx.x; i < nvec; i += 256) {
        const V xv = xr[i], rv = rr[i], wv = wr[i];
        V ov;
#pragma unroll
        for (int j = 0; j < VEC; ++j)
            ov.v[j] = from_float<scalar_t>((to_float(xv.v[j]) + to_float(rv.v[j])) * scale * to_float(wv.v[j]));
        orow[i] = ov;
    }
}
