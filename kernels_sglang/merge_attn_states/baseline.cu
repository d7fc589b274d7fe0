// merge_attn_states as SGLang runs it (kernels.md section 4, the v1 scheme of FlashInfer's
// merge_state that sgl-kernel builds): one CTA per token, block (D / vec, heads) with
// vec = max(16 / sizeof(T), D / 32), so each thread owns one vector of one head; every thread
// reads both LSEs of its head and computes the weights itself (nothing is shared: no shared
// memory, no shuffles), merges its vector in fp32 and divides each element by the weight sum;
// thread x = 0 of each head writes the merged LSE. Built with fast math and a 128-register cap
// like sgl-kernel's SM90 build; PDL is left off, as on the tuned side.
//
// Departures, for shapes SGLang does not handle (none of Astra's or the serving shapes):
// - where vec does not divide D (D = 100, say), vec falls back to the widest power of two that
//   divides D within 16 bytes;
// - where D / vec * heads would exceed 1024 threads (5x48x100: 25 x 48), the block keeps
//   1024 / (D / vec) heads and each thread loops over heads (and over vectors if D / vec > 1024).
//
// Infinite LSEs (reference.py defines the same): +inf or -inf means an empty partial state and
// is read as -inf, as SGLang's merge_state_v2 does; one empty side yields the other side
// exactly; both empty yields v = 0 and s = -inf (instead of the NaN of -inf - -inf).
// LSE_BASE2 (the variant's define) picks e/ln (0, SGLang's v2) or 2/log2 (1, FlashInfer).
#include "common.cuh"

//@ kernel: merge_attn_states
//@ derive VEC0 = max(16 // ELEM_BYTES, D // 32)
//@ derive VEC = VEC0 if (is_pow2(VEC0) and D % VEC0 == 0) else pow2_divisor(D, 16 // ELEM_BYTES)
//@ grid: N
//@ block: min(D // VEC, 1024), min(HD, max(1, 1024 // min(D // VEC, 1024)))
//@ fast_math: 1
//@ max_registers: 128

#if LSE_BASE2
#define LSE_EXP(x) exp2f(x)
#define LSE_LOG(x) log2f(x)
#else
#define LSE_EXP(x) expf(x)
#define LSE_LOG(x) logf(x)
#endif

__device__ __forceinline__ float empty_if_inf(float x) {
    return (fabsf(x) == __int_as_float(0x7f800000)) ? __int_as_float(0xff800000) : x;
}

extern "C" __global__ void __launch_bounds__(1024)
merge_attn_states(const scalar_t* __restrict__ va, const float* __restrict__ sa,
                  const scalar_t* __restrict__ vb, const float* __restrict__ sb,
                  scalar_t* __restrict__ v, float* __restrict__ s,
                  int tokens, int heads, int head_dim) {
    typedef Vec<scalar_t, VEC> V;
    const long long token = blockIdx.x;
    const int nvec = head_dim / VEC;
    for (int head = threadIdx.y; head < heads; head += blockDim.y) {
        const long long row = token * heads + head;
        const float a = empty_if_inf(sa[row]);
        const float b = empty_if_inf(sb[row]);
        const float m = fmaxf(a, b);
        const bool empty = m == __int_as_float(0xff800000);
        const float wa = empty ? 0.0f : LSE_EXP(a - m);
        const float wb = empty ? 0.0f : LSE_EXP(b - m);
        const float sum = wa + wb;
        const V* pa = reinterpret_cast<const V*>(va + row * head_dim);
        const V* pb = reinterpret_cast<const V*>(vb + row * head_dim);
        V* po = reinterpret_cast<V*>(v + row * head_dim);
        for (int i = threadIdx.x; i < nvec; i += blockDim.x) {
            const V x = pa[i], y = pb[i];
            V o;
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
                const float merged = to_float(x.v[j]) * wa + to_float(y.v[j]) * wb;
                o.v[j] = from_float<scalar_t>(empty ? 0.0f : merged / sum);
            }
            po[i] = o;
        }
        if (threadIdx.x == 0) s[row] = empty ? __int_as_float(0xff800000) : m + LSE_LOG(sum);
    }
}
