// RMS norm of a sum, out of place: out = s / sqrt(mean(s^2) + eps) * w with s = x + r formed in fp32,
// x and r left as they are. This is FlashInfer-Bench's fused_add_rmsnorm (its output is a tensor of
// its own), which the suite's in-place fused_add_rmsnorm cannot compute. A row of H elements is
// H / VEC vectors handled by ROW_THREADS threads; ROWS rows share a CTA. Pass 1 forms s and sums
// s^2; pass 2 writes the normalised row. With ITEMS > 0 a thread keeps its ITEMS vectors of s in
// registers between the passes (the row is read once); ITEMS = 0 reads x and r again in pass 2.
// The row's sum is a warp butterfly, then (several warps a row) one shared-memory exchange.
#include "common.cuh"

//@ kernel: add_rmsnorm
//@ param ROW_THREADS: 32, 64, 128, 256, 512, 1024  -- threads per row (whole warps)
//@ param ROWS: 1, 2, 4, 8                          -- rows per CTA
//@ param VEC: 8, 4, 2, 1                           -- elements per load
//@ param ITEMS: 0, 1, 2, 4, 8                      -- vectors of fp32 s per thread held in registers; 0: read x and r twice
//@ require VEC * ELEM_BYTES <= 16                  -- a load is at most 16 bytes
//@ require H % VEC == 0                            -- the row splits into whole vectors (and stays aligned)
//@ require ROW_THREADS * ROWS <= 1024              -- at most 1024 threads per CTA
//@ require ROW_THREADS <= max(32, next_pow2(H // VEC))   -- no more threads per row than its vectors (rounded up to a power of two)
//@ require ITEMS == 0 or ceil_div(H // VEC, ROW_THREADS) <= ITEMS   -- the row fits in the register slots of its threads
//@ require ITEMS <= 4 * ceil_div(H // VEC, ROW_THREADS)   -- at least a quarter of the register slots hold data
//@ require ITEMS * VEC <= 32                       -- the held sums take at most 32 of a thread's registers
//@ grid: ceil_div(T, ROWS)
//@ block: ROW_THREADS * ROWS
//@ fast_math: 1
//@ default: ROW_THREADS=256 ROWS=1 VEC=8 ITEMS=2

#define THREADS (ROW_THREADS * ROWS)
#define WARPS_PER_ROW (ROW_THREADS / 32)

extern "C" __global__ void __launch_bounds__(THREADS)
add_rmsnorm(const scalar_t* __restrict__ x, const scalar_t* __restrict__ r, const scalar_t* __restrict__ w,
            scalar_t* __restrict__ out, float eps, int tokens, int hidden) {
    typedef Vec<scalar_t, VEC> V;
    const int group = threadIdx.x / ROW_THREADS;  // the CTA's row this thread works on
    const int t = threadIdx.x % ROW_THREADS;      // its index within the row's threads
    const int lane = threadIdx.x & 31;
    const long long row = (long long)blockIdx.x * ROWS + group;
    const bool valid = row < tokens;
#if WARPS_PER_ROW == 1
    if (!valid) return;  // a warp per row: no CTA-wide barrier below
#endif
    const int nvec = hidden / VEC;
    const long long base = (valid ? row : 0) * (long long)hidden;
    const V* xr = reinterpret_cast<const V*>(x + base);
    const V* rr = reinterpret_cast<const V*>(r + base);
    const V* wr = reinterpret_cast<const V*>(w);
    V* orow = reinterpret_cast<V*>(out + base);

    float sum_sq = 0.f;
#if ITEMS > 0
    float s[ITEMS][VEC];
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        const int i = t + k * ROW_THREADS;
        if (valid && i < nvec) {
            const V xv = xr[i], rv = rr[i];
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
                s[k][j] = to_float(xv.v[j]) + to_float(rv.v[j]);
                sum_sq += s[k][j] * s[k][j];
            }
        }
    }
#else
    if (valid) {
        for (int i = t; i < nvec; i += ROW_THREADS) {
            const V xv = xr[i], rv = rr[i];
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
                const float f = to_float(xv.v[j]) + to_float(rv.v[j]);
                sum_sq += f * f;
            }
        }
    }
#endif

    float total = warp_sum(sum_sq);
#if WARPS_PER_ROW > 1
    __shared__ float partial[ROWS][WARPS_PER_ROW];
    if (lane == 0) partial[group][t >> 5] = total;
    __syncthreads();
    total = warp_sum(lane < WARPS_PER_ROW ? partial[group][lane] : 0.f);
    if (!valid) return;
#endif
    const float scale = rsqrtf(total / (float)hidden + eps);

#if ITEMS > 0
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        const int i = t + k * ROW_THREADS;
        if (i < nvec) {
            const V wv = wr[i];
            V ov;
#pragma unroll
            for (int j = 0; j < VEC; ++j) ov.v[j] = from_float<scalar_t>(s[k][j] * scale * to_float(wv.v[j]));
            orow[i] = ov;
        }
    }
#else
    for (int i = t; i < nvec; i += ROW_THREADS) {
        const V xv = xr[i], rv = rr[i], wv = wr[i];
        V ov;
#pragma unroll
        for (int j = 0; j < VEC; ++j)
            ov.v[j] = from_float<scalar_t>((to_float(xv.v[j]) + to_float(rv.v[j])) * scale * to_float(wv.v[j]));
        orow[i] = ov;
    }
#endif
}
