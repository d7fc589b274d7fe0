// per_token_group_quant_fp8 with its degrees of freedom explicit. A team of TPG threads quantises
// one group of 128 contiguous elements; a CTA holds GPC teams and each team handles GPT groups,
// loading all of them before the first reduction (loads in flight). A thread owns chunks of
// CHUNK = VEC * CONTIG contiguous elements (CONTIG loads of VEC elements), chunk c of the team at
// lane + c * TPG. The absmax is a shfl_xor butterfly inside the team; s = max(eps, absmax) / 448
// and q = clamp(x * (1 / s), -448, 448) through the hardware cvt (nearest-even, satfinite) two
// elements at a time. KEEP holds the group in registers between the passes, or re-reads it from
// global memory as SGLang's original kernel does; PACK writes a chunk's CHUNK fp8 bytes in one
// store (16 bytes at most per store), or one byte per element as SGLang's original kernel does.
// The grid rounds up: teams past the last group load nothing and store nothing (but take part in
// the shuffles, so every lane of a warp reaches them).
#include "common.cuh"
#include <cuda_fp8.h>

//@ kernel: per_token_group_quant_fp8
//@ param TPG: 4, 8, 16, 32               -- threads per group
//@ param VEC: 4, 8                       -- elements per load (8 or 16 bytes)
//@ param CONTIG: 1, 2, 4                 -- consecutive loads per chunk (a thread's contiguous run)
//@ param GPC: 1, 2, 4, 8, 16, 32         -- teams (concurrent groups) per CTA
//@ param GPT: 1, 2, 4                    -- groups per team, all loaded before the first reduction
//@ param KEEP: 0, 1                      -- keep the group in registers (1) or re-read it (0)
//@ param PACK: 0, 1                      -- one store per chunk (1) or one byte store per element (0)
//@ param FAST_MATH: 0, 1                 -- --use_fast_math
//@ require H % 128 == 0                  -- the op is defined on whole groups of 128
//@ require VEC * ELEM_BYTES <= 16        -- a load is at most 16 bytes
//@ require TPG * VEC * CONTIG <= 128     -- every thread of a team owns at least one chunk
//@ require TPG * GPC >= 32               -- whole warps (the shuffles name all 32 lanes)
//@ require TPG * GPC <= 1024             -- CTA size limit
//@ require (128 // TPG) * GPT <= 64      -- at most 64 elements held per thread (registers)
//@ grid: ceil_div(T * (H // 128), GPC * GPT)
//@ block: TPG * GPC
//@ fast_math: FAST_MATH
//@ default: TPG=8 VEC=8 CONTIG=2 GPC=16 GPT=1 KEEP=1 PACK=1 FAST_MATH=1

#define GROUP 128
#define FP8_MAX 448.0f
#define CHUNK (VEC * CONTIG)                  // contiguous elements per chunk
#define STEPS (GROUP / (TPG * CHUNK))         // chunks per thread per group

typedef Vec<scalar_t, VEC> V;

// A load the compiler cannot merge with an earlier one: the re-read of KEEP=0 must really happen.
__device__ __forceinline__ V reload(const scalar_t* p) {
    V v;
    const size_t g = __cvta_generic_to_global(p);
#if VEC * ELEM_BYTES == 16
    uint4 r;
    asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(g));
#else
    uint2 r;
    asm volatile("ld.global.nc.v2.u32 {%0, %1}, [%2];" : "=r"(r.x), "=r"(r.y) : "l"(g));
#endif
    v = *reinterpret_cast<const V*>(&r);
    return v;
}

// CHUNK fp8 bytes (as CHUNK / 4 little-endian words) to 4-byte-aligned global memory.
__device__ __forceinline__ void store_chunk(unsigned char* dst, const unsigned int (&w)[CHUNK / 4]) {
#if CHUNK == 4
    *reinterpret_cast<unsigned int*>(dst) = w[0];
#elif CHUNK == 8
    *reinterpret_cast<uint2*>(dst) = make_uint2(w[0], w[1]);
#else
#pragma unroll
    for (int k = 0; k < CHUNK / 16; ++k)
        reinterpret_cast<uint4*>(dst)[k] = make_uint4(w[4 * k], w[4 * k + 1], w[4 * k + 2], w[4 * k + 3]);
#endif
}

extern "C" __global__ void __launch_bounds__(TPG * GPC)
per_token_group_quant_fp8(const scalar_t* __restrict__ x, unsigned char* __restrict__ q,
                          float* __restrict__ scales, int tokens, int hidden, float eps) {
    const int team = threadIdx.x / TPG;
    const int lane = threadIdx.x % TPG;
    const long long groups = (long long)tokens * (hidden / GROUP);
    const long long first = (long long)blockIdx.x * (GPC * GPT) + team;

    V buf[GPT][STEPS][CONTIG];
    float absmax[GPT];
#pragma unroll
    for (int r = 0; r < GPT; ++r) {
        const long long g = first + (long long)r * GPC;
        absmax[r] = 0.0f;
        if (g < groups) {
            const V* in = reinterpret_cast<const V*>(x + g * GROUP);
#pragma unroll
            for (int s = 0; s < STEPS; ++s)
#pragma unroll
                for (int c = 0; c < CONTIG; ++c) buf[r][s][c] = in[(s * TPG + lane) * CONTIG + c];
        }
    }
#pragma unroll
    for (int r = 0; r < GPT; ++r) {
        const long long g = first + (long long)r * GPC;
        if (g < groups) {
#pragma unroll
            for (int s = 0; s < STEPS; ++s)
#pragma unroll
                for (int c = 0; c < CONTIG; ++c)
#pragma unroll
                    for (int j = 0; j < VEC; ++j) absmax[r] = fmaxf(absmax[r], fabsf(to_float(buf[r][s][c].v[j])));
        }
    }
#pragma unroll
    for (int r = 0; r < GPT; ++r)
#pragma unroll
        for (int o = TPG / 2; o > 0; o >>= 1)
            absmax[r] = fmaxf(absmax[r], __shfl_xor_sync(0xFFFFFFFFu, absmax[r], o));

#pragma unroll
    for (int r = 0; r < GPT; ++r) {
        const long long g = first + (long long)r * GPC;
        if (g >= groups) continue;
        const float s = fmaxf(absmax[r], eps) / FP8_MAX;
        const float inv = 1.0f / s;
        if (lane == 0) scales[g] = s;
#if !KEEP
        const scalar_t* in = x + g * GROUP;
#endif
        unsigned char* out = q + g * GROUP;
#pragma unroll
        for (int st = 0; st < STEPS; ++st) {
            const int base = (st * TPG + lane) * CHUNK;  // first element of this chunk
            V chunk[CONTIG];
#pragma unroll
            for (int c = 0; c < CONTIG; ++c) {
#if KEEP
                chunk[c] = buf[r][st][c];
#else
                chunk[c] = reload(in + base + c * VEC);
#endif
            }
            unsigned int words[CHUNK / 4];
#pragma unroll
            for (int k = 0; k < CHUNK / 4; ++k) {
                unsigned int w = 0;
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int e = 4 * k + 2 * h;  // element within the chunk (VEC is a multiple of 4)
                    float2 y;
                    y.x = fminf(fmaxf(to_float(chunk[e / VEC].v[e % VEC]) * inv, -FP8_MAX), FP8_MAX);
                    y.y = fminf(fmaxf(to_float(chunk[e / VEC].v[e % VEC + 1]) * inv, -FP8_MAX), FP8_MAX);
                    w |= (unsigned int)__nv_cvt_float2_to_fp8x2(y, __NV_SATFINITE, __NV_E4M3) << (16 * h);
                }
                words[k] = w;
            }
#if PACK
            store_chunk(out + base, words);
#else
#pragma unroll
            for (int e = 0; e < CHUNK; ++e) out[base + e] = (unsigned char)(words[e / 4] >> (8 * (e % 4)));
#endif
        }
    }
}
