// topk_softmax with its degrees of freedom explicit. A group of GROUP adjacent lanes owns a row
// of E logits, read as vectors of VEC elements (vector j of lane g is vector j * GROUP + g of the
// row, so a group's loads are contiguous); a CTA of WARPS warps holds WARPS * 32 / GROUP groups
// and each group takes ROWS rows, issuing every load before any math. Selection is by the logits
// (exact), largest first, ties to the lower index, like the reference:
//   KEYS = 1: each logit becomes an integer key, its bits made order-preserving (-0 folded onto
//     +0) above the complemented column, so one unsigned max is the argmax with its tie-break and
//     a butterfly step is one shuffle and one max (16-bit types: 32-bit keys; fp32: 64-bit keys).
//     A selected key is masked by comparing keys, which are unique in a row: no owner lookup.
//   KEYS = 0: float compares plus the column, as SGLang, masked by comparing columns.
// Both fold the row max into the first selection (the largest logit is the max), and k is known
// at compile time, so the selections stay in registers: the renormalized variant needs no exp sum
// over the row at all (weight r = e_r / sum of the k selected e).
// A selection (SORT = 0) scans every key a lane holds: k passes over the row, a chain of dependent
// max operations each, which is what loses where k is close to E (8 of 8 experts). SORT = 1 (keys
// only) sorts each lane's keys once, largest first, with a bitonic network of independent min/max
// pairs (depth log2(n)(log2(n)+1)/2), after which a selection compares only the lanes' first keys
// and the winning lane shifts its list by one; with one lane a row, the sorted list is the answer.
// Every lane ends with all k selections. STORE = 0: lane g writes selections g, g + GROUP, ...,
// one element each; STORE = 1: lane g writes its K / GROUP consecutive selections as vectors of up
// to 16 bytes, so a group writes its row's K weights and K indices contiguously.
#include "common.cuh"

//@ kernel: topk_softmax
//@ param TPR: 1, 2, 4, 8, 16, 32   -- lanes per row; 32 means as many as the row has vectors (up to the warp)
//@ param LOAD_BYTES: 2, 4, 8, 16   -- bytes per vector load; 16 means the widest vector that divides the row
//@ param WARPS: 1, 2, 4, 8         -- warps per CTA
//@ param ROWS: 1, 2, 4             -- rows per lane group, all loads issued before any math
//@ param KEYS: 1, 0                -- 1: select on packed integer (logit, index) keys; 0: float compare plus index
//@ param FAST_MATH: 1, 0           -- --use_fast_math (exp as ex2.approx, approximate division)
//@ param SORT: 0, 1                -- 1: each lane sorts its keys once, then selections compare the lanes' first keys; 0: each selection scans every key
//@ param STORE: 0, 1               -- 1: lane g writes selections g*K/GROUP.. as vectors; 0: selections g, g+GROUP, .. one at a time
//@ derive VEC = pow2_divisor(E, max(1, LOAD_BYTES // ELEM_BYTES))
//@ derive NVEC = E // VEC
//@ derive GROUP = min(TPR, next_pow2(NVEC))
//@ derive LDG = ceil_div(NVEC, GROUP)
//@ derive GUARD = 1 if LDG * GROUP != NVEC else 0
//@ derive EXPERTS = E
//@ derive TOPK = K
//@ derive SLOTS = next_pow2(LDG * VEC)               -- a lane's keys padded to the sorting network's size
//@ derive HEADS = min(LDG * VEC, K)                  -- a lane's keys that a selection can still take, after its sort
//@ derive CHUNK = K // GROUP if STORE == 1 else 1     -- selections a lane writes (STORE 1)
//@ derive SVEC = pow2_divisor(CHUNK, 4)              -- elements a vector store writes (STORE 1)
//@ require LOAD_BYTES >= ELEM_BYTES -- a load holds at least one element
//@ require VEC * ELEM_BYTES == LOAD_BYTES or LOAD_BYTES == 16 -- only the widest setting narrows to fit the row (a narrower one would duplicate a smaller LOAD_BYTES)
//@ require GROUP == TPR or TPR == 32 -- only TPR=32 narrows to the row's vector count (a narrower one would duplicate a smaller TPR)
//@ require LDG * VEC * ROWS * (2 if KEYS == 1 and ELEM_BYTES == 4 else 1) <= 64 -- at most 64 registers of row values per thread
//@ require K <= E -- k distinct experts must exist
//@ require SORT == 0 or (KEYS == 1 and LDG * VEC > 1 and SLOTS <= 32) -- a sort of packed keys, of more than one and at most 32 a lane
//@ require STORE == 0 or (K % GROUP == 0 and K // GROUP > 1) -- a lane writes a whole share of the k selections, more than one (one is STORE 0)
//@ grid: ceil_div(T, WARPS * (32 // GROUP) * ROWS)
//@ block: 32 * WARPS
//@ fast_math: FAST_MATH
//@ default: TPR=32 LOAD_BYTES=16 WARPS=4 ROWS=1 KEYS=1 FAST_MATH=1 SORT=0 STORE=0

#define PER_THREAD (LDG * VEC)             // logits per lane per row
#define GROUPS_PER_CTA (WARPS * (32 / GROUP))
#define FULL_MASK 0xffffffffu
#define NEG_INF __uint_as_float(0xff800000u)  // -inf (NVRTC has no INFINITY macro)

// The storage type's raw bits, and back to float (exact).
__device__ __forceinline__ unsigned int raw_bits(float x) { return __float_as_uint(x); }
__device__ __forceinline__ unsigned int raw_bits(__half x) { return __half_as_ushort(x); }
__device__ __forceinline__ unsigned int raw_bits(__nv_bfloat16 x) { return __bfloat16_as_ushort(x); }
__device__ __forceinline__ float float_of_bits(unsigned int u, float) { return __uint_as_float(u); }
__device__ __forceinline__ float float_of_bits(unsigned int u, __half) {
    return __half2float(__ushort_as_half((unsigned short)u));
}
__device__ __forceinline__ float float_of_bits(unsigned int u, __nv_bfloat16) { return __uint_as_float(u << 16); }

#if ELEM_BYTES == 2
typedef unsigned int sel_key;  // ordered 16-bit logit << 16 | (0xffff - column)
#define BITS 16
#define ALL_BITS 0xffffu
#else
typedef unsigned long long sel_key;  // ordered 32-bit logit << 32 | (0xffffffff - column)
#define BITS 32
#define ALL_BITS 0xffffffffu
#endif
#define SIGN_BIT (1u << (BITS - 1))

// Unsigned order of the result = float order of the logit; -0 and +0 are equal logits, one key.
// 0 is below every key of a non-NaN logit: it marks empty and already selected slots.
__device__ __forceinline__ sel_key make_key(unsigned int u, int col) {
    if ((u & (SIGN_BIT - 1u)) == 0u) u = 0u;
    const unsigned int ord = (u & SIGN_BIT) ? (~u & ALL_BITS) : (u | SIGN_BIT);
    return ((sel_key)ord << BITS) | (sel_key)(ALL_BITS - (unsigned int)col);
}
__device__ __forceinline__ float key_logit(sel_key key) {
    const unsigned int ord = (unsigned int)(key >> BITS);
    const unsigned int u = (ord & SIGN_BIT) ? (ord & (SIGN_BIT - 1u)) : (~ord & ALL_BITS);
    return float_of_bits(u, scalar_t());
}
__device__ __forceinline__ int key_col(sel_key key) { return (int)(ALL_BITS - (unsigned int)(key & ALL_BITS)); }

extern "C" __global__ void __launch_bounds__(32 * WARPS)
topk_softmax(const scalar_t* __restrict__ gating, float* __restrict__ weights, int* __restrict__ indices,
             int tokens, int experts, int k) {
    typedef Vec<scalar_t, VEC> V;
    const int lane = threadIdx.x % GROUP;
    const long long first_row = (long long)blockIdx.x * (GROUPS_PER_CTA * ROWS) + threadIdx.x / GROUP;

    // Every load first. Rows past the end and vectors past the row load nothing, but every lane
    // runs the whole kernel: the shuffles use full-warp masks.
    V raw[ROWS][LDG];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        const long long row = first_row + (long long)r * GROUPS_PER_CTA;
        const V* src = reinterpret_cast<const V*>(gating + row * EXPERTS);
#pragma unroll
        for (int j = 0; j < LDG; ++j) {
            const int v = j * GROUP + lane;
            if (row < tokens && (!GUARD || v < NVEC)) raw[r][j] = src[v];
        }
    }

    float row_max[ROWS], row_sum[ROWS];
#if KEYS
    sel_key key[ROWS][PER_THREAD];
    sel_key win[ROWS][TOPK];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        const bool active = first_row + (long long)r * GROUPS_PER_CTA < tokens;
#pragma unroll
        for (int j = 0; j < LDG; ++j) {
            const int v = j * GROUP + lane;
            const bool ok = active && (!GUARD || v < NVEC);
#pragma unroll
            for (int i = 0; i < VEC; ++i) key[r][j * VEC + i] = ok ? make_key(raw_bits(raw[r][j].v[i]), v * VEC + i) : (sel_key)0;
        }
    }
#if SORT
    // Largest first within each lane: a bitonic network over SLOTS keys (the padding empty, 0), its
    // blocks of `size` alternating direction until the last, which runs largest first throughout.
    sel_key ranked[ROWS][SLOTS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
#pragma unroll
        for (int i = 0; i < SLOTS; ++i) ranked[r][i] = i < PER_THREAD ? key[r][i] : (sel_key)0;
#pragma unroll
        for (int size = 2; size <= SLOTS; size <<= 1) {
#pragma unroll
            for (int stride = size / 2; stride > 0; stride >>= 1) {
#pragma unroll
                for (int i = 0; i < SLOTS; ++i) {
                    const int j = i ^ stride;
                    if (j > i) {
                        const sel_key hi = max(ranked[r][i], ranked[r][j]), lo = min(ranked[r][i], ranked[r][j]);
                        const bool largest_first = (i & size) == 0;
                        ranked[r][i] = largest_first ? hi : lo;
                        ranked[r][j] = largest_first ? lo : hi;
                    }
                }
            }
        }
    }
#endif
#if SORT && GROUP == 1
    // One lane holds the whole row: its sorted keys are the selections, in order. The exp sum runs
    // over them in that order, so each selection's exp below is the same expression as its term
    // here and is computed once (the kernel's code is shorter: under a cold L2 its instructions
    // come from memory too, and at a few tokens their fetch is much of the time).
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
#pragma unroll
        for (int t = 0; t < TOPK; ++t) win[r][t] = ranked[r][t];
        row_max[r] = key_logit(ranked[r][0]);
#if !RENORM
        float s = 0.f;
#pragma unroll
        for (int i = 0; i < PER_THREAD; ++i) s += expf(key_logit(ranked[r][i]) - row_max[r]);
        row_sum[r] = s;
#endif
    }
#else
#pragma unroll
    for (int t = 0; t < TOPK; ++t) {
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
#if SORT
            sel_key best = ranked[r][0];
#else
            sel_key best = key[r][0];
#pragma unroll
            for (int i = 1; i < PER_THREAD; ++i) best = max(best, key[r][i]);
#endif
#pragma unroll
            for (int m = GROUP / 2; m > 0; m >>= 1) best = max(best, __shfl_xor_sync(FULL_MASK, best, m));
            win[r][t] = best;
            if (t == 0) {
                row_max[r] = key_logit(best);
#if !RENORM
                float s = 0.f;
#pragma unroll
                for (int i = 0; i < PER_THREAD; ++i) s += key[r][i] ? expf(key_logit(key[r][i]) - row_max[r]) : 0.f;
#pragma unroll
                for (int m = GROUP / 2; m > 0; m >>= 1) s += __shfl_xor_sync(FULL_MASK, s, m);
                row_sum[r] = s;
#endif
            }
            if (t + 1 < TOPK) {
#if SORT
                // The lane that held the winner drops it: its next key moves to the front. Only the
                // first TOPK - 1 - t keys can still be selected, so only they move.
                const bool mine = ranked[r][0] == best;
#pragma unroll
                for (int i = 0; i < HEADS; ++i)
                    if (i < TOPK - 1 - t) ranked[r][i] = mine ? (i + 1 < HEADS ? ranked[r][i + 1] : (sel_key)0) : ranked[r][i];
#else
#pragma unroll
                for (int i = 0; i < PER_THREAD; ++i) key[r][i] = key[r][i] == best ? (sel_key)0 : key[r][i];
#endif
            }
        }
    }
#endif
#define WIN_LOGIT(r, t) key_logit(win[r][t])
#define WIN_COL(r, t) key_col(win[r][t])
#else
    float val[ROWS][PER_THREAD];
    float win_val[ROWS][TOPK];
    int win_col[ROWS][TOPK];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        const bool active = first_row + (long long)r * GROUPS_PER_CTA < tokens;
#pragma unroll
        for (int j = 0; j < LDG; ++j) {
            const int v = j * GROUP + lane;
            const bool ok = active && (!GUARD || v < NVEC);
#pragma unroll
            for (int i = 0; i < VEC; ++i) val[r][j * VEC + i] = ok ? to_float(raw[r][j].v[i]) : NEG_INF;
        }
    }
    const int base_col = lane * VEC;  // column of slot (j, i) = base_col + j * GROUP * VEC + i
#pragma unroll
    for (int t = 0; t < TOPK; ++t) {
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            float best = NEG_INF;
            int best_col = 0x7fffffff;
#pragma unroll
            for (int j = 0; j < LDG; ++j) {
#pragma unroll
                for (int i = 0; i < VEC; ++i) {
                    const float x = val[r][j * VEC + i];
                    if (x > best) {  // columns ascend within a lane: strict > keeps the lowest
                        best = x;
                        best_col = base_col + j * GROUP * VEC + i;
                    }
                }
            }
#pragma unroll
            for (int m = GROUP / 2; m > 0; m >>= 1) {
                const float other = __shfl_xor_sync(FULL_MASK, best, m);
                const int other_col = __shfl_xor_sync(FULL_MASK, best_col, m);
                if (other > best || (other == best && other_col < best_col)) {
                    best = other;
                    best_col = other_col;
                }
            }
            win_val[r][t] = best;
            win_col[r][t] = best_col;
            if (t == 0) {
                row_max[r] = best;
#if !RENORM
                float s = 0.f;
#pragma unroll
                for (int i = 0; i < PER_THREAD; ++i) s += expf(val[r][i] - best);  // empty slots: exp(-inf) = 0
#pragma unroll
                for (int m = GROUP / 2; m > 0; m >>= 1) s += __shfl_xor_sync(FULL_MASK, s, m);
                row_sum[r] = s;
#endif
            }
            if (t + 1 < TOPK) {
                const int d = best_col - base_col;
#pragma unroll
                for (int j = 0; j < LDG; ++j) {
#pragma unroll
                    for (int i = 0; i < VEC; ++i)
                        if (d == j * GROUP * VEC + i) val[r][j * VEC + i] = NEG_INF;
                }
            }
        }
    }
#define WIN_LOGIT(r, t) win_val[r][t]
#define WIN_COL(r, t) win_col[r][t]
#endif

#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        const long long row = first_row + (long long)r * GROUPS_PER_CTA;
        if (row >= tokens) continue;
        float e[TOPK];
#pragma unroll
        for (int t = 0; t < TOPK; ++t) e[t] = expf(WIN_LOGIT(r, t) - row_max[r]);
#if RENORM
        float denom = 0.f;
#pragma unroll
        for (int t = 0; t < TOPK; ++t) denom += e[t];
#else
        const float denom = row_sum[r];
#endif
        const float inv = 1.f / denom;
#if STORE
        // Lane g's share, selections g * CHUNK .. g * CHUNK + CHUNK - 1: picked out of the K every
        // lane holds by compile-time index (a run-time index would put e[] in local memory).
        typedef Vec<float, SVEC> WV;
        typedef Vec<int, SVEC> IV;
#pragma unroll
        for (int c = 0; c < CHUNK; c += SVEC) {
            WV w;
            IV ix;
#pragma unroll
            for (int q = 0; q < SVEC; ++q) {
                w.v[q] = e[c + q] * inv;
                ix.v[q] = WIN_COL(r, c + q);
#pragma unroll
                for (int g = 1; g < GROUP; ++g) {
                    if (lane == g) {
                        w.v[q] = e[g * CHUNK + c + q] * inv;
                        ix.v[q] = WIN_COL(r, g * CHUNK + c + q);
                    }
                }
            }
            *reinterpret_cast<WV*>(weights + row * TOPK + lane * CHUNK + c) = w;
            *reinterpret_cast<IV*>(indices + row * TOPK + lane * CHUNK + c) = ix;
        }
#else
#pragma unroll
        for (int t = 0; t < TOPK; ++t) {
            if (t % GROUP == lane) {
                weights[row * TOPK + t] = e[t] * inv;
                indices[row * TOPK + t] = WIN_COL(r, t);
            }
        }
#endif
    }
}
