// topk_softmax as SGLang runs it (kernels.md section 6).
//
// E a power of two <= 256: one fused kernel with blocks of 4 warps, block (32, 4). A row of E
// logits belongs to a group of TPR = E / VPT adjacent lanes, so a warp holds 32 / TPR rows. Each
// lane reads VPT values as VPT / ELTS vectors of ELTS = min(16 bytes, E elements); vector j of
// lane g covers columns (j * TPR + g) * ELTS .. + ELTS - 1. VPT = ELTS, or a multiple of it when
// a warp's 32 vectors do not cover the row (E = 256 in fp32: VPT = 8, two vectors per lane).
// shfl_xor butterflies within the group give the row max, the exp sum and, k times, the argmax
// (ties to the lower index); the owner lane masks the winner in its value array with a run-time
// index (as SGLang does, which puts the array in local memory), lane 0 of the group writes each
// selection as it is found and, when renormalizing, rescales them afterwards. Fast math and a
// 128-register cap, as sgl-kernel's SM90 build.
//
// Any other E: SGLang launches two kernels (a 256-thread block per row writes the softmax to a
// workspace, then a block per row runs the k argmax rounds with block reductions). The harness
// launches exactly one kernel and the signature has no workspace, so this single kernel handles
// those E too, with one warp per row (ELTS = 1, TPR = 32: lane l holds columns l, l + 32, ...,
// guarded at E) and the same butterflies. No timing anchor exists for those shapes.
//
// One deliberate difference: SGLang picks the top k by the fp32 probabilities; this kernel picks
// them by the logits (exact in every storage type), largest first, ties to the lower index.
// Softmax is increasing, so that is the top k of the exact probabilities, while fp32 exp can
// round two different logits to one probability and break the tie differently from the
// reference. The cost: the selected logit's expf is taken by lane 0 at each selection.
#include "common.cuh"

//@ kernel: topk_softmax
//@ derive FUSED = 1 if is_pow2(E) and E <= 256 else 0
//@ derive ELTS = min(16 // ELEM_BYTES, E) if FUSED else 1
//@ derive VPT = max(1, E // (ELTS * 32)) * ELTS if FUSED else ceil_div(E, 32)
//@ derive TPR = E // VPT if FUSED else 32
//@ derive EXPERTS = E
//@ grid: ceil_div(T, 4 * (32 // TPR))
//@ block: 32, 4
//@ fast_math: 1
//@ max_registers: 128

#define LDG (VPT / ELTS)            // vector loads per lane
#define RPW (32 / TPR)              // rows per warp
#define COLS_PER_PASS (ELTS * TPR)  // columns one load of every lane of a group covers
#define GUARD (LDG * COLS_PER_PASS != EXPERTS)
#define FULL_MASK 0xffffffffu
#define NEG_INF __uint_as_float(0xff800000u)  // -inf (NVRTC has no INFINITY macro)

extern "C" __global__ void __launch_bounds__(128)
topk_softmax(const scalar_t* __restrict__ gating, float* __restrict__ weights, int* __restrict__ indices,
             int tokens, int experts, int k) {
    typedef Vec<scalar_t, ELTS> V;
    const int lane = threadIdx.x % TPR;
    const long long row = ((long long)blockIdx.x * blockDim.y + threadIdx.y) * RPW + threadIdx.x / TPR;
    // Rows past the end still take part in the shuffles (full-warp masks); they load and store nothing.
    const bool active = row < tokens;
    const scalar_t* src = gating + row * EXPERTS;

    float vals[VPT];
#pragma unroll
    for (int j = 0; j < LDG; ++j) {
        const int col = (j * TPR + lane) * ELTS;
        if (active && (!GUARD || col < EXPERTS)) {
            const V v = *reinterpret_cast<const V*>(src + col);
#pragma unroll
            for (int i = 0; i < ELTS; ++i) vals[j * ELTS + i] = to_float(v.v[i]);
        } else {
#pragma unroll
            for (int i = 0; i < ELTS; ++i) vals[j * ELTS + i] = NEG_INF;
        }
    }

    float row_max = vals[0];
#pragma unroll
    for (int i = 1; i < VPT; ++i) row_max = fmaxf(row_max, vals[i]);
#pragma unroll
    for (int m = TPR / 2; m > 0; m >>= 1) row_max = fmaxf(row_max, __shfl_xor_sync(FULL_MASK, row_max, m));

    float row_sum = 0.f;
#pragma unroll
    for (int i = 0; i < VPT; ++i) row_sum += expf(vals[i] - row_max);  // guarded slots: exp(-inf) = 0
#pragma unroll
    for (int m = TPR / 2; m > 0; m >>= 1) row_sum += __shfl_xor_sync(FULL_MASK, row_sum, m);
    const float inv_sum = 1.f / row_sum;

    float selected_sum = 0.f;
    for (int r = 0; r < k; ++r) {
        float best = NEG_INF;
        int best_col = 0x7fffffff;
#pragma unroll
        for (int j = 0; j < LDG; ++j) {
#pragma unroll
            for (int i = 0; i < ELTS; ++i) {
                const float v = vals[j * ELTS + i];
                if (v > best) {  // columns ascend within a lane: strict > keeps the lowest
                    best = v;
                    best_col = (j * TPR + lane) * ELTS + i;
                }
            }
        }
#pragma unroll
        for (int m = TPR / 2; m > 0; m >>= 1) {
            const float other = __shfl_xor_sync(FULL_MASK, best, m);
            const int other_col = __shfl_xor_sync(FULL_MASK, best_col, m);
            if (other > best || (other == best && other_col < best_col)) {
                best = other;
                best_col = other_col;
            }
        }
        if (active && lane == 0) {
            const float w = expf(best - row_max) * inv_sum;
            weights[row * k + r] = w;
            indices[row * k + r] = best_col;
            selected_sum += w;
        }
        if (best_col < EXPERTS && lane == (best_col / ELTS) % TPR)
            vals[(best_col / COLS_PER_PASS) * ELTS + best_col % ELTS] = NEG_INF;
    }
#if RENORM
    if (active && lane == 0) {
        const float inv_selected = 1.f / selected_sum;
        for (int r = 0; r < k; ++r) weights[row * k + r] *= inv_selected;
    }
#endif
}
