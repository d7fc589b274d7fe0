// fused_add_rmsnorm with its degrees of freedom explicit (kernels.md section 3). A row of H
// elements is H / VEC vectors handled by ROW_THREADS threads (a whole number of warps); ROWS rows
// share a CTA (a warp or a few per row when rows are short and many). Pass 1 forms the fp32 sum
// s = x + residual, writes s rounded to T to residual and sums s^2; pass 2 writes
// s * rsqrt(mean + eps) * w to x from the unrounded fp32 s. Between the passes s lives in
// registers when ITEMS > 0 (ITEMS vectors of VEC floats per thread: no shared-memory round trip),
// or, ITEMS = 0, in dynamic shared memory like SGLang (H floats per row). PRELOAD_W loads w
// alongside x and residual, so its latency hides behind the reduction. The row's reduction is a
// warp butterfly, then (more than one warp per row) one shared-memory exchange after which every
// warp of the row sums the per-warp partials itself: one __syncthreads, no second broadcast.
// With CLUSTER > 1 (few tokens: too few rows to fill the GPU) a row is split over the CTAs of a
// thread-block cluster, each holding its slice in registers; the CTAs' partial sums meet through
// distributed shared memory, so the data is still read once, in one launch. HINT = 1 gives the
// loads L2 eviction priorities as Inductor's kernels do: w, read by every row, evict_last; x and
// residual, read once, evict_first.
// RELOAD = 1 (with ITEMS = 0) is Inductor's two-pass form: pass 1 only sums s^2; pass 2 reads x and
// residual again (from L2, where pass 1 has just left them: evict_last, then evict_first, with HINT),
// forms the same fp32 s anew and writes both outputs. Nothing but the sum lives across the
// reduction, so a thread needs the fewest registers and four CTAs of 512 threads fit an SM: where
// rows are many, that occupancy outweighs the second read, which L2 serves (torch.compile at
// 5175x4096: 28 registers, 89% occupancy; the held row the table ran there: 44, 58%). Where rows
// are few it loses (docs/performance.md entries 13 and 31), so it is a parameter.
// STATIC_ROW = 1 compiles the row length in, as SGLang's JIT norms do (a C++ template on the hidden
// size): loop bounds and offsets become constants, one binary per row length; STATIC_ROW = 2 also
// drops the bounds checks, where a CTA is exactly one row of ROW_THREADS x ITEMS vectors. Where the
// tables ran SGLang's own launch shape and still trailed its kernel, this closed the gap; elsewhere
// either form can be the slower one, so it is a parameter (docs/performance.md entry 22).
#include "common.cuh"

//@ kernel: fused_add_rmsnorm
//@ param ROW_THREADS: 32, 64, 128, 256, 512, 1024  -- threads per row (whole warps)
//@ param ROWS: 1, 2, 4, 8                          -- rows per CTA
//@ param VEC: 8, 4, 2, 1                           -- elements per load
//@ param ITEMS: 0, 1, 2, 4, 8, 16                  -- vectors of fp32 s per thread held in registers; 0: s in shared memory like SGLang, or with RELOAD not held
//@ param PRELOAD_W: 0, 1                           -- load w into registers with x and residual, before the reduction
//@ param REG_CAP: 128, 64, 32                     -- registers per thread at most (sets __launch_bounds__' CTAs per SM)
//@ param CLUSTER: 1, 2, 4, 8                       -- CTAs per row, a thread-block cluster (split rows when tokens are few)
//@ param HINT: 0, 1                                -- L2 eviction priorities on the loads (evict_last where read again, evict_first where last)
//@ param STATIC_ROW: 0, 1, 2                      -- the row length: given at run time (0); compiled in (1); compiled in, no bounds checks (2)
//@ param RELOAD: 0, 1                             -- 1: pass 2 reads x and residual again instead of holding s (Inductor's two-pass form)
//@ derive ROW_LEN = H if STATIC_ROW > 0 else 0     -- the row length compiled in (0: read from `hidden` at run time)
//@ require VEC * ELEM_BYTES <= 16                  -- a load is at most 16 bytes
//@ require H % VEC == 0                            -- the row splits into whole vectors (and stays aligned)
//@ require ROW_THREADS * ROWS <= 1024              -- at most 1024 threads per CTA
//@ require CLUSTER == 1 or SM >= 90               -- thread-block clusters need sm_90
//@ require HINT == 0 or SM >= 80                  -- L2 cache policies need sm_80
//@ require RELOAD == 0 or (ITEMS == 0 and CLUSTER == 1)   -- the two-pass form holds nothing between the passes
//@ require STATIC_ROW == 0 or (ROWS == 1 and CLUSTER == 1 and (ITEMS > 0 or RELOAD == 1))   -- the row length compiled in only where a CTA holds one row, in registers or read twice (where it pays: docs/performance.md entries 22 and 31)
//@ require STATIC_ROW < 2 or H // VEC == ROW_THREADS * ITEMS   -- no bounds checks only where every thread holds exactly ITEMS vectors of the row
//@ require CLUSTER == 1 or (ROWS == 1 and ITEMS > 0)   -- a split row is one row per CTA, its slice in registers
//@ require CLUSTER == 1 or ceil_div(H // VEC, CLUSTER) >= 32   -- every CTA of a split row gets at least a warp's vectors
//@ require ROW_THREADS <= max(32, next_pow2(ceil_div(H // VEC, CLUSTER)))   -- no more threads per row than its vectors (rounded up to a power of two)
//@ require ITEMS == 0 or ceil_div(ceil_div(H // VEC, CLUSTER), ROW_THREADS) <= ITEMS   -- the row (slice) fits in the register slots of its threads
//@ require ITEMS <= 4 * ceil_div(ceil_div(H // VEC, CLUSTER), ROW_THREADS)   -- at least a quarter of the register slots hold data (more only wastes registers)
//@ require PRELOAD_W == 0 or ITEMS > 0             -- preloading w is part of the registers mode
//@ require REG_CAP == 128 or ROW_THREADS * ROWS * REG_CAP < 65536   -- a cap below what the CTA's threads already impose (65536 registers an SM)
//@ require REG_CAP == 128 or 65536 // (ROW_THREADS * ROWS * REG_CAP) <= 32   -- no more CTAs an SM than sm_80 and sm_90 hold (32)
//@ require ITEMS * VEC * (max(4, 2 * max(ELEM_BYTES, 4 // VEC)) + PRELOAD_W * max(ELEM_BYTES, 4 // VEC)) <= 4 * (min(REG_CAP, 65536 // (ROW_THREADS * ROWS)) - 32)   -- held data (x and residual as loaded, then s; w; an element takes a whole register when VEC = 1) leaves at least 32 of the registers a thread may have (else spills)
//@ require ITEMS > 0 or RELOAD == 1 or ROWS * H * 4 <= 226 * 1024   -- the fp32 rows fit in a CTA's shared memory (227 KB on sm_90, less the static partials)
//@ grid: ceil_div(T, ROWS) * CLUSTER
//@ block: ROW_THREADS * ROWS
//@ shared: 0 if ITEMS > 0 or RELOAD == 1 else ROWS * H * 4
//@ fast_math: 1
//@ max_registers: 128
//@ default: ROW_THREADS=512 ROWS=1 VEC=8 ITEMS=4 PRELOAD_W=0 REG_CAP=128 CLUSTER=1 HINT=0 STATIC_ROW=0 RELOAD=0
//@ work: ROWS * ceil_div(ceil_div(H // VEC, CLUSTER), ROW_THREADS)   -- vectors of its rows (slices) a thread loads
#define THREADS (ROW_THREADS * ROWS)
#define WARPS_PER_ROW (ROW_THREADS / 32)
// Whether this thread's vector k exists: with STATIC_ROW 2 the row is exactly ROW_THREADS x ITEMS
// vectors, so every one does and the check compiles away.
#define HAS_VECTOR(k) (STATIC_ROW == 2 || (k) * ROW_THREADS < rem)
// __launch_bounds__' second argument: enough resident CTAs that the compiler keeps a thread
// within REG_CAP registers (-maxrregcount does not apply to a kernel with launch bounds).
#define MIN_CTAS ((65536 / (THREADS * REG_CAP)) > 0 ? (65536 / (THREADS * REG_CAP)) : 1)

#if ITEMS == 0 && !RELOAD
// VEC floats to or from shared memory in 16-byte (or narrower) pieces: a row's vectors start at
// multiples of 4 * VEC bytes from a 16-byte aligned base (H * 4 bytes a row, H a multiple of VEC).
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
#endif

#if HINT
// L2 eviction priorities, as Inductor's Triton kernels give them: a policy made once per thread
// (createpolicy, sm_80+) and passed with each load (ld.global.L2::cache_hint). evict_last keeps a
// line that will be read again (w, by every row), evict_first lets a line read for the last time
// (x and residual) leave first.
__device__ __forceinline__ unsigned long long l2_evict_last() {
    unsigned long long policy;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
    return policy;
}
__device__ __forceinline__ unsigned long long l2_evict_first() {
    unsigned long long policy;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    return policy;
}
__device__ __forceinline__ uint4 load_bits(const uint4* p, unsigned long long policy) {
    uint4 r;
    asm volatile("ld.global.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p), "l"(policy));
    return r;
}
__device__ __forceinline__ uint2 load_bits(const uint2* p, unsigned long long policy) {
    uint2 r;
    asm volatile("ld.global.L2::cache_hint.v2.u32 {%0, %1}, [%2], %3;" : "=r"(r.x), "=r"(r.y) : "l"(p), "l"(policy));
    return r;
}
__device__ __forceinline__ unsigned int load_bits(const unsigned int* p, unsigned long long policy) {
    unsigned int r;
    asm volatile("ld.global.L2::cache_hint.u32 %0, [%1], %2;" : "=r"(r) : "l"(p), "l"(policy));
    return r;
}
__device__ __forceinline__ unsigned short load_bits(const unsigned short* p, unsigned long long policy) {
    unsigned short r;
    asm volatile("ld.global.L2::cache_hint.u16 %0, [%1], %2;" : "=h"(r) : "l"(p), "l"(policy));
    return r;
}
template <int BYTES> struct Bits;
template <> struct Bits<16> { typedef uint4 type; };
template <> struct Bits<8> { typedef uint2 type; };
template <> struct Bits<4> { typedef unsigned int type; };
template <> struct Bits<2> { typedef unsigned short type; };
template <typename V> __device__ __forceinline__ V load_hinted(const V* p, unsigned long long policy) {
    typedef typename Bits<sizeof(V)>::type B;
    const B b = load_bits(reinterpret_cast<const B*>(p), policy);
    return *reinterpret_cast<const V*>(&b);
}
#define HINT_POLICIES const unsigned long long keep_policy = l2_evict_last(), last_policy = l2_evict_first();
#define LOAD_KEEP(p) load_hinted((p), keep_policy)  // read again later: w
#define LOAD_LAST(p) load_hinted((p), last_policy)  // read for the last time
#else
#define HINT_POLICIES
#define LOAD_KEEP(p) (*(p))
#define LOAD_LAST(p) (*(p))
#endif

#if CLUSTER > 1
#define CLUSTER_DIMS __cluster_dims__(CLUSTER, 1, 1)
#else
#define CLUSTER_DIMS
#endif

extern "C" __global__ void __launch_bounds__(THREADS, MIN_CTAS) CLUSTER_DIMS
fused_add_rmsnorm(scalar_t* __restrict__ x, scalar_t* __restrict__ residual, const scalar_t* __restrict__ w,
                  float eps, int tokens, int hidden_at_run_time) {
#if STATIC_ROW
    constexpr int hidden = ROW_LEN;  // compiled in, as SGLang's JIT norms have it: constant loop bounds and offsets
#else
    const int hidden = hidden_at_run_time;
#endif
    typedef Vec<scalar_t, VEC> V;
    HINT_POLICIES
    const int group = threadIdx.x / ROW_THREADS;  // the CTA's row this thread works on
    const int t = threadIdx.x % ROW_THREADS;      // its index within the row's threads
    const int lane = threadIdx.x & 31;
    const long long row = (long long)(blockIdx.x / CLUSTER) * ROWS + group;
    const bool valid = STATIC_ROW == 2 || row < tokens;  // STATIC_ROW 2: ROWS = 1, so the grid is T CTAs
#if WARPS_PER_ROW == 1
    if (!valid) return;  // a warp per row: no CTA-wide barrier below
#endif
    const int nvec = hidden / VEC;
    const long long base = (valid ? row : 0) * (long long)hidden;
#if CLUSTER > 1
    // This CTA's slice of the row: the cluster's CTAs are consecutive blocks, rank = block % CLUSTER.
    const int per_cta = ceil_div_int(nvec, CLUSTER);
    const int first = (int)(blockIdx.x % CLUSTER) * per_cta;
    const int slice = min(per_cta, nvec - first);
#else
    const int first = 0;
    const int slice = nvec;
#endif
    V* xr = reinterpret_cast<V*>(x + base) + first;
    V* rr = reinterpret_cast<V*>(residual + base) + first;
    const V* wr = reinterpret_cast<const V*>(w) + first;

    float sum_sq = 0.f;
#if ITEMS > 0
    // Vector k of this thread is t + k * ROW_THREADS: constant offsets from one pointer each.
    const int rem = valid ? slice - t : 0;  // vector k exists when k * ROW_THREADS < rem
    V* xt = xr + t;
    V* rt = rr + t;
    const V* wt = wr + t;
    V xv[ITEMS], rv[ITEMS];
#if PRELOAD_W
    V wv[ITEMS];
#endif
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        if (HAS_VECTOR(k)) {
            xv[k] = LOAD_LAST(xt + k * ROW_THREADS);
            rv[k] = LOAD_LAST(rt + k * ROW_THREADS);
#if PRELOAD_W
            wv[k] = LOAD_KEEP(wt + k * ROW_THREADS);
#endif
        }
    }
    float s[ITEMS][VEC];
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        if (HAS_VECTOR(k)) {
            V ro;
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
                s[k][j] = to_float(xv[k].v[j]) + to_float(rv[k].v[j]);
                sum_sq += s[k][j] * s[k][j];
                ro.v[j] = from_float<scalar_t>(s[k][j]);
            }
            rt[k * ROW_THREADS] = ro;
        }
    }
#elif RELOAD
    if (valid) {
        for (int i = t; i < nvec; i += ROW_THREADS) {
            const V xv = LOAD_KEEP(xr + i);  // read again in pass 2
            const V rv = LOAD_KEEP(rr + i);
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
                const float s = to_float(xv.v[j]) + to_float(rv.v[j]);
                sum_sq += s * s;
            }
        }
    }
#else
    extern __shared__ __align__(16) float smem[];
    float* row_f = smem + group * hidden;  // this row's fp32 s
    if (valid) {
        for (int i = t; i < nvec; i += ROW_THREADS) {
            const V xv = LOAD_LAST(xr + i);
            V rv = LOAD_LAST(rr + i);
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
#endif

    float total = warp_sum(sum_sq);
#if WARPS_PER_ROW > 1
    __shared__ float partial[ROWS][WARPS_PER_ROW];
    if (lane == 0) partial[group][t >> 5] = total;
    __syncthreads();
    total = warp_sum(lane < WARPS_PER_ROW ? partial[group][lane] : 0.f);
    if (!valid) return;
#endif
#if CLUSTER > 1
    // Every thread holds its CTA's sum; the cluster's sums meet through distributed shared memory.
    __shared__ float cta_sum;
    if (threadIdx.x == 0) cta_sum = total;
    cluster_arrive();
    cluster_wait();
    total = warp_sum(lane < CLUSTER ? load_cluster_shared(&cta_sum, lane) : 0.f);
    cluster_arrive();  // this CTA is done reading the others; each waits for that before it exits
#endif
    const float rms_rcp = rsqrtf(total / (float)hidden + eps);

#if ITEMS > 0
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        if (HAS_VECTOR(k)) {
#if PRELOAD_W
            const V wk = wv[k];
#else
            const V wk = LOAD_KEEP(wt + k * ROW_THREADS);
#endif
            V ov;
#pragma unroll
            for (int j = 0; j < VEC; ++j) ov.v[j] = from_float<scalar_t>(s[k][j] * rms_rcp * to_float(wk.v[j]));
            xt[k * ROW_THREADS] = ov;
        }
    }
#elif RELOAD
    for (int i = t; i < nvec; i += ROW_THREADS) {
        const V xv = LOAD_LAST(xr + i);
        const V rv = LOAD_LAST(rr + i);
        const V wv = LOAD_KEEP(wr + i);
        V ro, ov;
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            const float s = to_float(xv.v[j]) + to_float(rv.v[j]);
            ro.v[j] = from_float<scalar_t>(s);
            ov.v[j] = from_float<scalar_t>(s * rms_rcp * to_float(wv.v[j]));
        }
        rr[i] = ro;
        xr[i] = ov;
    }
#else
    // Each thread reads back only the floats it wrote itself: no barrier needed for row_f.
    for (int i = t; i < nvec; i += ROW_THREADS) {
        const V wv = LOAD_KEEP(wr + i);
        float s[VEC];
        load_floats(row_f + i * VEC, s);
        V ov;
#pragma unroll
        for (int j = 0; j < VEC; ++j) ov.v[j] = from_float<scalar_t>(s[j] * rms_rcp * to_float(wv.v[j]));
        xr[i] = ov;
    }
#endif
#if CLUSTER > 1
    cluster_wait();  // no CTA leaves (freeing its shared memory) while another may still read it
#endif
}
