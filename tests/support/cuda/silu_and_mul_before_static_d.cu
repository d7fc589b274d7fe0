// silu_and_mul with its degrees of freedom explicit. A row of d outputs is cut into d / VEC
// vectors; CHUNKS CTAs share a row when tokens are few (so more than T of the 132 SMs work),
// ROWS rows share a CTA when tokens are many; each thread keeps UNROLL independent vector loads
// in flight before the first use. FLAT = 1 is Inductor's pointwise launch instead: one grid over
// every output vector of every row, THREADS * UNROLL consecutive vectors a CTA, so no thread idles
// at a short row and a large launch is many short CTAs (no long last wave; the next launch starts
// on SMs as they free up). STREAM = 1 marks the loads and stores, each byte touched once, as
// streaming (ld.global.cs / st.global.cs: first out of the caches).
#include "common.cuh"

//@ kernel: act_and_mul
//@ param THREADS: 64, 128, 256, 512, 1024      -- threads per CTA
//@ param VEC: 1, 2, 4, 8                       -- elements per load
//@ param CHUNKS: 1, 2, 4, 8, 16, 32            -- CTAs per row
//@ param ROWS: 1, 2, 4                         -- rows per CTA
//@ param UNROLL: 1, 2, 4                       -- vector loads in flight per thread
//@ param FAST_MATH: 0, 1                       -- --use_fast_math
//@ param FLAT: 0, 1                            -- one flat grid over all output vectors (rows and chunks ignored)
//@ param STREAM: 0, 1                          -- streaming cache hints on the loads and stores (each byte used once)
//@ require VEC * ELEM_BYTES <= 16              -- a load is at most 16 bytes
//@ require D % VEC == 0                        -- the row splits into whole vectors (and stays aligned)
//@ require CHUNKS == 1 or ROWS == 1            -- split rows or group them, not both
//@ require CHUNKS == 1 or ceil_div(D // VEC, CHUNKS) >= 32   -- every CTA of a split row gets at least a warp's work
//@ require FLAT == 0 or (CHUNKS == 1 and ROWS == 1)   -- a flat grid has no rows or chunks to set
//@ require FLAT == 1 or THREADS <= max(32, ceil_div(D // VEC, CHUNKS)) * 2   -- no more than twice the threads a chunk can use
//@ require FLAT == 0 or THREADS <= max(32, T * (D // VEC)) * 2   -- no more than twice the threads the whole output can use
//@ grid: ceil_div(T * (D // VEC), THREADS * UNROLL) if FLAT else ceil_div(T, ROWS), 1 if FLAT else CHUNKS
//@ block: THREADS
//@ fast_math: FAST_MATH
//@ default: THREADS=256 VEC=8 CHUNKS=1 ROWS=1 UNROLL=1 FAST_MATH=1 FLAT=0 STREAM=0
//@ work: 1 if FLAT else ROWS * ceil_div(ceil_div(D // VEC, CHUNKS), THREADS * UNROLL)   -- rounds of UNROLL loads a thread makes (a flat grid: one)
__device__ __forceinline__ float act(float a) {
#if ACT == 0
    return a / (1.0f + expf(-a));
#elif ACT == 1
    return 0.5f * a * (1.0f + erff(a * 0.70710678118654752f));
#else
    const float inner = 0.7978845608028654f * (a + 0.044715f * a * a * a);
    return 0.5f * a * (1.0f + tanhf(inner));
#endif
}

// A vector of VEC elements as the integer of its size, the type the streaming intrinsics take.
template <int BYTES> struct Bits;
template <> struct Bits<16> { typedef uint4 type; };
template <> struct Bits<8> { typedef uint2 type; };
template <> struct Bits<4> { typedef unsigned int type; };
template <> struct Bits<2> { typedef unsigned short type; };

template <typename V> __device__ __forceinline__ V load_vec(const V* p) {
#if STREAM
    typedef typename Bits<sizeof(V)>::type B;
    const B b = __ldcs(reinterpret_cast<const B*>(p));
    return *reinterpret_cast<const V*>(&b);
#else
    return *p;
#endif
}

template <typename V> __device__ __forceinline__ void store_vec(V* p, const V& v) {
#if STREAM
    typedef typename Bits<sizeof(V)>::type B;
    __stcs(reinterpret_cast<B*>(p), *reinterpret_cast<const B*>(&v));
#else
    *p = v;
#endif
}

template <typename V> __device__ __forceinline__ V act_mul(const V& a, const V& b) {
    V o;
#pragma unroll
    for (int j = 0; j < VEC; ++j) o.v[j] = from_float<scalar_t>(act(to_float(a.v[j])) * to_float(b.v[j]));
    return o;
}

extern "C" __global__ void __launch_bounds__(THREADS)
act_and_mul(const scalar_t* __restrict__ x, scalar_t* __restrict__ out, int tokens, int d) {
    typedef Vec<scalar_t, VEC> V;
    const int nvec = d / VEC;
#if FLAT
    // Output vector i is row i / nvec, column i % nvec; a CTA's THREADS * UNROLL vectors are
    // consecutive, each warp's loads contiguous within a row's half.
    const long long total = (long long)tokens * nvec;
    const long long first = (long long)blockIdx.x * (THREADS * UNROLL) + threadIdx.x;
    V av[UNROLL], bv[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
        const long long i = first + u * THREADS;
        if (i < total) {
            const long long token = i / nvec;
            const int c = (int)(i - token * nvec);
            const V* row = reinterpret_cast<const V*>(x + token * 2 * d);
            av[u] = load_vec(row + c);
            bv[u] = load_vec(row + nvec + c);
        }
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
        const long long i = first + u * THREADS;
        if (i < total) store_vec(reinterpret_cast<V*>(out) + i, act_mul(av[u], bv[u]));
    }
#else
    const int per_chunk = ceil_div_int(nvec, CHUNKS);
    const int begin = blockIdx.y * per_chunk;
    const int end = min(nvec, begin + per_chunk);
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        const long long token = (long long)blockIdx.x * ROWS + r;
        if (token >= tokens) return;
        const V* a = reinterpret_cast<const V*>(x + token * 2 * d);
        const V* b = reinterpret_cast<const V*>(x + token * 2 * d + d);
        V* o = reinterpret_cast<V*>(out + token * d);
        for (int base = begin + threadIdx.x; base < end; base += THREADS * UNROLL) {
            V av[UNROLL], bv[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                const int i = base + u * THREADS;
                if (i < end) { av[u] = load_vec(a + i); bv[u] = load_vec(b + i); }
            }
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                const int i = base + u * THREADS;
                if (i < end) store_vec(o + i, act_mul(av[u], bv[u]));
            }
        }
    }
#endif
}
