// Rotary embedding with its degrees of freedom explicit. The unit of work is an item: NeoX, a
// vector of VEC elements from the first half of the rotated dims and its partner vector R/2 further
// (one thread owns both, so in place needs no barrier and each element is loaded once); interleaved,
// one vector of VEC/2 pairs. A head has ITEMS = R / (2 VEC) (NeoX) or R / VEC (interleaved) items;
// dims >= R are never touched (the buffers are updated in place, so they stay as they were).
// A CTA is a (ITEMS, HT, TOKENS) block: TOKENS tokens, HT threads per item splitting the CTA's HPC
// heads between them, UNROLL heads loaded per thread before the first use. The grid is
// (tokens / TOKENS, heads / HPC): many heads per CTA reuse a token's cos/sin, few spread small
// batches over more SMs. CS_MODE says where cos/sin live: 0 re-read from global memory (L1) for
// each group of UNROLL heads, 1 loaded once per thread into registers, 2 staged per token in shared
// memory by the whole CTA (coalesced) and read from there for each group of heads.
// q and k rows lie q_stride and k_stride elements apart (views into a QKV output, as SGLang passes
// them; HQ * D and HK * D when contiguous). Shape values are runtime arguments (no shape-dependent defines), so one binary per
// configuration, dtype and variant serves every shape. Fast math is on (the kernel has no
// transcendental: cos/sin come from the cache, so it only relaxes the fp32 rounding of the rotation).
#include "common.cuh"

//@ kernel: rope
//@ param VEC: 1, 2, 4, 8                -- elements per vector load
//@ param HT: 1, 2, 4, 8                 -- threads per item along the head axis (split a CTA's heads)
//@ param TOKENS: 1, 2, 4, 8, 16         -- tokens per CTA
//@ param HPC: 1, 2, 4, 8, 16, 64        -- heads (q then k) per CTA; 64 means all of them here
//@ param UNROLL: 1, 2, 4                -- heads a thread loads before the first store
//@ param CS_MODE: 0, 1, 2               -- cos/sin: 0 re-read per head group, 1 registers, 2 shared memory
//@ derive CSN = VEC // 2 if INTERLEAVE == 1 else VEC       -- cos (and sin) values per item
//@ derive CSW = min(CSN, 4)                                -- floats per cos/sin load
//@ require VEC * ELEM_BYTES <= 16                          -- a load is at most 16 bytes
//@ require INTERLEAVE == 0 or VEC % 2 == 0                 -- an interleaved vector holds whole pairs
//@ require D % VEC == 0                                    -- heads start on a vector boundary
//@ require (R // 2) % VEC == 0 if INTERLEAVE == 0 else R % VEC == 0   -- vectors tile the rotated dims (NeoX: each half)
//@ require 32 <= (R // 2 // VEC if INTERLEAVE == 0 else R // VEC) * HT * TOKENS <= 512   -- at least a warp, at most the launch bound
//@ require HPC <= next_pow2(HQ + HK)                       -- a CTA's head range no wider than needed
//@ require HT <= min(HPC, HQ + HK)                         -- every head lane of a CTA has a head
//@ require UNROLL <= ceil_div(min(HPC, HQ + HK), HT)       -- no more heads in flight than a lane has
//@ require CS_MODE != 2 or TOKENS * R * 4 <= 48 * 1024     -- the staged cos/sin rows fit in static-limit shared memory
//@ grid: ceil_div(N, TOKENS), ceil_div(HQ + HK, HPC)
//@ block: R // 2 // VEC if INTERLEAVE == 0 else R // VEC, HT, TOKENS
//@ shared: TOKENS * R * 4 if CS_MODE == 2 else 0
//@ fast_math: 1
//@ default: VEC=8 HT=4 TOKENS=4 HPC=8 UNROLL=1 CS_MODE=1

// 512: the largest block the requires allow (so at most 128 registers). The explicit minimum of
// one CTA per SM matters: with __launch_bounds__(512) alone ptxas spilled 4-8 bytes at 40-64
// registers on some configurations.
extern "C" __global__ void __launch_bounds__(512, 1)
rope(const long long* __restrict__ positions, scalar_t* __restrict__ q, scalar_t* __restrict__ k,
     const float* __restrict__ cos_sin_cache, int nnz, int num_q_heads, int num_k_heads,
     int head_dim, int rotary_dim, int q_stride, int k_stride) {
    typedef Vec<scalar_t, VEC> V;
    typedef Vec<float, CSW> CV;
    const int half = rotary_dim >> 1;
    const int x_off = threadIdx.x * VEC;  // this item's (first) vector within a head
    const int cs_off = threadIdx.x * CSN; // its first cos column
    const long long token = (long long)blockIdx.x * TOKENS + threadIdx.z;
    const int nheads = num_q_heads + num_k_heads;
    const int h_begin = blockIdx.y * HPC;
    const int h_end = min(nheads, h_begin + HPC);

#if CS_MODE == 2
    // The CTA's TOKENS cache rows, copied with CSW-float loads (CSW divides R/2 by the requires).
    extern __shared__ __align__(16) float cs_tile[];
    {
        const int tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
        const int nthreads = blockDim.x * blockDim.y * blockDim.z;
        const int per_row = rotary_dim / CSW;
        for (int e = tid; e < TOKENS * per_row; e += nthreads) {
            const int t = e / per_row, col = e - t * per_row;
            const long long tok = (long long)blockIdx.x * TOKENS + t;
            if (tok < nnz)
                reinterpret_cast<CV*>(cs_tile + t * rotary_dim)[col] =
                    reinterpret_cast<const CV*>(cos_sin_cache + positions[tok] * rotary_dim)[col];
        }
        __syncthreads();
    }
    if (token >= nnz) return;
    const float* cs_row = cs_tile + threadIdx.z * rotary_dim;
#else
    if (token >= nnz) return;
    const float* cs_row = cos_sin_cache + positions[token] * rotary_dim;
#endif

    float c[CSN], s[CSN];
#if CS_MODE == 1
#pragma unroll
    for (int j = 0; j < CSN; j += CSW) {
        const CV cv = *reinterpret_cast<const CV*>(cs_row + cs_off + j);
        const CV sv = *reinterpret_cast<const CV*>(cs_row + half + cs_off + j);
#pragma unroll
        for (int u = 0; u < CSW; ++u) { c[j + u] = cv.v[u]; s[j + u] = sv.v[u]; }
    }
#endif

#pragma unroll 1  // UNROLL alone decides the loads in flight
    for (int hb = h_begin + (int)threadIdx.y; hb < h_end; hb += HT * UNROLL) {
        scalar_t* ptr[UNROLL];
        V a[UNROLL];
#if !INTERLEAVE
        V b[UNROLL];
#endif
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int h = hb + u * HT;
            if (h < h_end) {
                ptr[u] = h < num_q_heads
                    ? q + token * q_stride + h * head_dim
                    : k + token * k_stride + (h - num_q_heads) * head_dim;
                a[u] = *reinterpret_cast<const V*>(ptr[u] + x_off);
#if !INTERLEAVE
                b[u] = *reinterpret_cast<const V*>(ptr[u] + half + x_off);
#endif
            }
        }
#if CS_MODE != 1
#pragma unroll
        for (int j = 0; j < CSN; j += CSW) {
            const CV cv = *reinterpret_cast<const CV*>(cs_row + cs_off + j);
            const CV sv = *reinterpret_cast<const CV*>(cs_row + half + cs_off + j);
#pragma unroll
            for (int u = 0; u < CSW; ++u) { c[j + u] = cv.v[u]; s[j + u] = sv.v[u]; }
        }
#endif
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            if (hb + u * HT < h_end) {
#if INTERLEAVE
                V o;
#pragma unroll
                for (int p = 0; p < VEC / 2; ++p) {
                    const float e = to_float(a[u].v[2 * p]), f = to_float(a[u].v[2 * p + 1]);
                    o.v[2 * p] = from_float<scalar_t>(e * c[p] - f * s[p]);
                    o.v[2 * p + 1] = from_float<scalar_t>(f * c[p] + e * s[p]);
                }
                *reinterpret_cast<V*>(ptr[u] + x_off) = o;
#else
                V o1, o2;
#pragma unroll
                for (int j = 0; j < VEC; ++j) {
                    const float x = to_float(a[u].v[j]), y = to_float(b[u].v[j]);
                    o1.v[j] = from_float<scalar_t>(x * c[j] - y * s[j]);
                    o2.v[j] = from_float<scalar_t>(y * c[j] + x * s[j]);
                }
                *reinterpret_cast<V*>(ptr[u] + x_off) = o1;
                *reinterpret_cast<V*>(ptr[u] + half + x_off) = o2;
#endif
            }
        }
    }
}
