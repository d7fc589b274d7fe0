// merge_attn_states with its degrees of freedom explicit. The [N, HD, D] tensors are N * HD
// rows of D elements, each row with one LSE; a row goes to a group of LANES threads of one warp
// (D / VEC vectors, VPL = ceil(D / VEC / LANES) per lane, all loaded before the first use), a
// warp takes ROWS * 32 / LANES consecutive rows, a CTA THREADS / 32 warps. The per-row weights
// are hoisted out of the element loop: computed once per row and turned into two scales
// pa = wa / (wa + wb), pb = wb / (wa + wb), so each element costs two multiplies and an add.
// WEIGHTS picks who computes them: 0, every lane of the row's group (redundant, broadcast LSE
// loads, no communication); 1, one lane per row (lane r of the warp takes the warp's row r, so
// the LSE loads and s stores are coalesced and the exp/log work is spread over the warp), then
// shuffled to the row's lanes.
//
// Infinite LSEs (reference.py defines the same): +inf or -inf means an empty partial state and
// is read as -inf, as SGLang's merge_state_v2 does; one empty side yields the other side
// exactly; both empty yields v = 0 and s = -inf. LSE_BASE2 (the variant's define) picks e/ln
// (0) or 2/log2 (1).
#include "common.cuh"

//@ kernel: merge_attn_states
//@ param THREADS: 64, 128, 256, 512, 1024      -- threads per CTA
//@ param VEC: 1, 2, 4, 8                       -- elements per vector load
//@ param LANES: 4, 8, 16, 32                   -- threads per row (a power of two within a warp)
//@ param ROWS: 1, 2, 4                         -- rows per lane group, their loads all in flight together
//@ param WEIGHTS: 0, 1                         -- 0: every lane computes its row's weights; 1: one lane per row, shuffled
//@ param FAST_MATH: 0, 1                       -- --use_fast_math
//@ derive NV = D // VEC                        -- vectors per row
//@ derive VPL = ceil_div(NV, LANES)            -- vectors per lane per row
//@ require VEC * ELEM_BYTES <= 16              -- a load is at most 16 bytes
//@ require D % VEC == 0                        -- the row splits into whole, aligned vectors
//@ require 2 * NV >= LANES                     -- at most half a row's lanes idle
//@ require VPL * ROWS * VEC * ELEM_BYTES // 2 <= min(128, 65536 // THREADS) // 2 - 12   -- the loaded vectors (registers) fit in half the register budget: bf16 spills beyond it
//@ require VPL * ROWS <= 16                    -- bounded unrolling
//@ require THREADS == 64 or (THREADS // LANES) * ROWS <= 2 * N * HD   -- no CTA mostly idle
//@ grid: ceil_div(N * HD, (THREADS // LANES) * ROWS)
//@ block: THREADS
//@ fast_math: FAST_MATH
//@ max_registers: 128
//@ default: THREADS=256 VEC=8 LANES=16 ROWS=2 WEIGHTS=1 FAST_MATH=1

#define GPW (32 / LANES)              // lane groups (rows at a time) per warp
#define ROWS_PER_WARP (GPW * ROWS)    // at most 32: LANES >= 4 and ROWS <= 4
#define ROWS_PER_CTA ((THREADS / 32) * ROWS_PER_WARP)
#define NEG_INF __int_as_float(0xff800000)

#if LSE_BASE2
#define LSE_EXP(x) exp2f(x)
#define LSE_LOG(x) log2f(x)
#else
#define LSE_EXP(x) expf(x)
#define LSE_LOG(x) logf(x)
#endif

__device__ __forceinline__ float empty_if_inf(float x) {
    return (fabsf(x) == __int_as_float(0x7f800000)) ? NEG_INF : x;
}

// The row's scales and merged LSE from its two LSEs.
__device__ __forceinline__ void row_weights(float a, float b, float& pa, float& pb, float& lse) {
    a = empty_if_inf(a);
    b = empty_if_inf(b);
    const float m = fmaxf(a, b);
    if (m == NEG_INF) {  // both empty
        pa = 0.0f; pb = 0.0f; lse = NEG_INF;
        return;
    }
    const float wa = LSE_EXP(a - m);  // one of them is exactly 1
    const float wb = LSE_EXP(b - m);
    const float sum = wa + wb;        // in [1, 2]
    const float inv = 1.0f / sum;
    pa = wa * inv;
    pb = wb * inv;
    lse = m + LSE_LOG(sum);
}

// At least 512 threads' worth of CTAs per SM: at most 128 registers a thread (64 at 1024 threads),
// the cap sgl-kernel builds with (__launch_bounds__ overrides --maxrregcount).
extern "C" __global__ void __launch_bounds__(THREADS, (THREADS >= 512 ? 1 : 512 / THREADS))
merge_attn_states(const scalar_t* __restrict__ va, const float* __restrict__ sa,
                  const scalar_t* __restrict__ vb, const float* __restrict__ sb,
                  scalar_t* __restrict__ v, float* __restrict__ s,
                  int tokens, int heads, int head_dim) {
    typedef Vec<scalar_t, VEC> V;
    const long long rows = (long long)tokens * heads;
    const int lane = threadIdx.x & 31;
    const int group = lane / LANES;   // which row of the warp's GPW at a time
    const int l = lane % LANES;       // lane within the row's group
    const long long warp_row0 = (long long)blockIdx.x * ROWS_PER_CTA + (threadIdx.x >> 5) * ROWS_PER_WARP;

    float pa[ROWS], pb[ROWS];
#if WEIGHTS == 1
    {
        // lane r < ROWS_PER_WARP computes the warp's row r; its row j * GPW + group comes back by shuffle.
        float my_pa = 0.0f, my_pb = 0.0f;
        const long long r = warp_row0 + lane;
        if (lane < ROWS_PER_WARP && r < rows) {
            float lse;
            row_weights(sa[r], sb[r], my_pa, my_pb, lse);
            s[r] = lse;
        }
#pragma unroll
        for (int j = 0; j < ROWS; ++j) {
            pa[j] = __shfl_sync(0xffffffffu, my_pa, j * GPW + group);
            pb[j] = __shfl_sync(0xffffffffu, my_pb, j * GPW + group);
        }
    }
#else
#pragma unroll
    for (int j = 0; j < ROWS; ++j) {
        const long long r = warp_row0 + j * GPW + group;
        pa[j] = 0.0f; pb[j] = 0.0f;
        if (r < rows) {
            float lse;
            row_weights(sa[r], sb[r], pa[j], pb[j], lse);
            if (l == 0) s[r] = lse;
        }
    }
#endif

    // Every load of the thread first, then the merges and stores.
    V xa[ROWS][VPL], xb[ROWS][VPL];
#pragma unroll
    for (int j = 0; j < ROWS; ++j) {
        const long long r = warp_row0 + j * GPW + group;
        const V* ra = reinterpret_cast<const V*>(va + r * NV * VEC);
        const V* rb = reinterpret_cast<const V*>(vb + r * NV * VEC);
#pragma unroll
        for (int k = 0; k < VPL; ++k) {
            const int i = l + k * LANES;
            if (r < rows && (NV % LANES == 0 || i < NV)) { xa[j][k] = ra[i]; xb[j][k] = rb[i]; }
        }
    }
#pragma unroll
    for (int j = 0; j < ROWS; ++j) {
        const long long r = warp_row0 + j * GPW + group;
        V* ro = reinterpret_cast<V*>(v + r * NV * VEC);
#pragma unroll
        for (int k = 0; k < VPL; ++k) {
            const int i = l + k * LANES;
            if (r < rows && (NV % LANES == 0 || i < NV)) {
                V o;
#pragma unroll
                for (int e = 0; e < VEC; ++e)
                    o.v[e] = from_float<scalar_t>(to_float(xa[j][k].v[e]) * pa[j] + to_float(xb[j][k].v[e]) * pb[j]);
                ro[i] = o;
            }
        }
    }
}
