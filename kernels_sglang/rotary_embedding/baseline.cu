// Rotary embedding as SGLang runs it (kernels.md section 5; sgl-kernel's
// apply_rope_pos_ids_cos_sin_cache, FlashInfer's scheme): a head of D elements is handled by
// BDX = D / vec threads, vec = max(16 / sizeof(T), D / 32) elements each, and a CTA of
// max(128, BDX) threads is a (BDX, BDY) tile of BDY tokens. Each thread loads its cos/sin once per
// token, then per head loads its own vector and (NeoX) the partner vector R/2 away, and writes its
// own vector back; threads past R (partial rotary) copy their vector back unchanged. With enough
// tokens to give every SM its resident CTAs (ceil(N / BDY) >= blocks_per_sm * SMS) one CTA loops
// over all q then k heads (`#pragma unroll 1`); otherwise the grid is (tokens / BDY, HQ + HK), a
// head per CTA. SGLang picks between its two kernels on the host; here the choice is the derived
// HEAD_PARALLEL and both are this one kernel. Fast math and a 128-register cap as sgl-kernel's
// SM90 build; PDL is left off. q and k rows lie q_stride and k_stride elements apart, as SGLang's
// q_stride_n and k_stride_n (views into the QKV output).
//
// Deviations from SGLang:
// - Shapes SGLang does not dispatch (its head dims are 64/128/256/512, R/2 a multiple of vec): vec
//   falls back to the widest power of two dividing D and R/2 (NeoX) or R (interleaved), so a
//   vector never straddles R/2 or R and stays aligned; SGLang's own vec wherever it is valid.
// - In place (every shape), a thread's partner vector is another thread's output: SGLang relies
//   on the two threads running in lockstep within a warp. Here a __syncwarp (a head inside one
//   warp) or a __syncthreads (a head across warps: fallback shapes only) separates the loads from
//   the stores; threads past the last token stay in the loop (predicated) so barriers are uniform.
// - Interleaved: SGLang loads vec cos/sin floats and uses the first vec/2; this loads the vec/2 it
//   uses (its wider load can run past the cache's last row).
// - The rule's blocks_per_sm is what cudaOccupancyMaxActiveBlocksPerMultiprocessor gives for
//   the token-parallel kernel; SGLang asks the driver, a template cannot, so K0_REGS states this
//   port's register count (ptxas, sm_90: 48 NeoX bf16, 44 fp16, 31 interleaved; the test checks it
//   still gives the same occupancy), and __launch_bounds__' minimum of BLOCKS_PER_SM CTAs holds
//   ptxas to it (the row strides' 64-bit offsets took interleaved bf16 to 33-36 without it). At 48 registers a 128-thread CTA gets 10 per SM, so
//   N=16384, D=128 (2048 CTAs >= 1320) runs token-parallel; at <= 32 it would get 16 (2112 CTAs)
//   and run head-parallel. FlashInfer's own kernel may differ: check which kernel SGLang launches.
#include "common.cuh"

//@ kernel: rope
//@ derive HEAD_DIM = D
//@ derive VEC = pow2_divisor(gcd(D, R // 2 if INTERLEAVE == 0 else R), max(16 // ELEM_BYTES, D // 32))
//@ derive BDX = D // VEC
//@ derive BDY = max(128, BDX) // BDX
//@ derive CSN = VEC if INTERLEAVE == 0 else VEC // 2
//@ derive CSW = pow2_divisor(gcd(R // 2, CSN), 4)
//@ derive WARP_LOCAL = 1 if 32 % BDX == 0 else 0
//@ derive K0_REGS = 48 if INTERLEAVE == 0 else 32
//@ derive K0_WARPS = ceil_div(BDX * BDY, 32)
//@ derive BLOCKS_PER_SM = min(32, 64 // K0_WARPS, 65536 // (K0_WARPS * ceil_div(K0_REGS * 32, 256) * 256))
//@ derive HEAD_PARALLEL = 1 if ceil_div(N, BDY) < BLOCKS_PER_SM * SMS else 0
//@ grid: ceil_div(N, BDY), HQ + HK if HEAD_PARALLEL == 1 else 1
//@ block: BDX, BDY
//@ fast_math: 1
//@ max_registers: 128

extern "C" __global__ void __launch_bounds__(BDX * BDY, BLOCKS_PER_SM)
rope(const long long* __restrict__ positions, scalar_t* q, scalar_t* k,
     const float* __restrict__ cos_sin_cache, int nnz, int num_q_heads, int num_k_heads,
     int head_dim, int rotary_dim, int q_stride, int k_stride) {
    typedef Vec<scalar_t, VEC> V;
    typedef Vec<float, CSW> CV;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const long long idx = (long long)blockIdx.x * BDY + ty;
    const bool active = idx < nnz;
    const int half = rotary_dim / 2;
    const int off = tx * VEC;  // this thread's first element within a head
    const bool rotated = off < rotary_dim;

    // cos/sin for this thread's elements, loaded once per token and reused across heads.
    float c[CSN], s[CSN];
#pragma unroll
    for (int j = 0; j < CSN; ++j) c[j] = s[j] = 0.0f;
    if (active && rotated) {
        const float* row = cos_sin_cache + positions[idx] * rotary_dim;
        const int col = INTERLEAVE ? off / 2 : off % half;
#pragma unroll
        for (int j = 0; j < CSN; j += CSW) {
            const CV cv = *reinterpret_cast<const CV*>(row + col + j);
            const CV sv = *reinterpret_cast<const CV*>(row + half + col + j);
#pragma unroll
            for (int u = 0; u < CSW; ++u) { c[j + u] = cv.v[u]; s[j + u] = sv.v[u]; }
        }
    }

#if HEAD_PARALLEL
    const int h_begin = blockIdx.y, h_end = blockIdx.y + 1;
#else
    const int h_begin = 0, h_end = num_q_heads + num_k_heads;
#endif
    scalar_t* const q_row = q + idx * q_stride;
    scalar_t* const k_row = k + idx * k_stride;
#pragma unroll 1
    for (int h = h_begin; h < h_end; ++h) {
        const bool is_q = h < num_q_heads;
        scalar_t* head = (is_q ? q_row : k_row) + (is_q ? h : h - num_q_heads) * HEAD_DIM;
        V out;
        if (active) {
            const V x = *reinterpret_cast<const V*>(head + off);
            out = x;
            if (rotated) {
#if INTERLEAVE
#pragma unroll
                for (int p = 0; p < VEC / 2; ++p) {
                    const float e = to_float(x.v[2 * p]), o = to_float(x.v[2 * p + 1]);
                    out.v[2 * p] = from_float<scalar_t>(e * c[p] - o * s[p]);
                    out.v[2 * p + 1] = from_float<scalar_t>(o * c[p] + e * s[p]);
                }
#else
                const bool first = off < half;
                const V y = *reinterpret_cast<const V*>(head + (first ? off + half : off - half));
#pragma unroll
                for (int j = 0; j < VEC; ++j) {
                    const float xv = to_float(x.v[j]), yv = to_float(y.v[j]);
                    out.v[j] = from_float<scalar_t>(xv * c[j] + (first ? -yv : yv) * s[j]);
                }
#endif
            }
        }
#if !INTERLEAVE
        // Every thread of the head has read its partner vector before any thread overwrites it.
#if WARP_LOCAL
        __syncwarp();
#else
        __syncthreads();
#endif
#endif
        if (active) *reinterpret_cast<V*>(head + off) = out;
    }
}
