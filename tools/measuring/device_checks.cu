// The correctness checks' comparisons, run on the GPU (tools/measuring/device_checks.py).
//
// compare_<dtype>: a kernel's output against the float64 reference, element for element, with
// the tolerance test and every stage of correctness.compare: NaN where the reference has none,
// an infinite reference value not matched, a non-finite error where the reference is finite,
// then |out - ref| - (atol + rtol * |ref|) per element, its worst, the error's and the
// reference's sums of squares. Each block writes one Found; the host merges them. The excess is
// computed with explicit round-to-nearest operations in the host's order, so no fused
// multiply-add makes an element pass here that NumPy fails (or the reverse).
//
// bytes_differ: whether two buffers differ in any byte (an input the kernel must not change, two
// draws' outputs, a timed set's outputs against the checked launch's).
//
// ranges_differ, copy_ranges, fill_ranges: the same over a table of ranges in one launch (a
// timing's thousands of small rotating sets: each its own driver call and synchronisation was
// most of a few-token evaluation). blockIdx.y walks the table, blockIdx.x a range's bytes.

typedef unsigned long long u64;
#define NONE 0xFFFFFFFFFFFFFFFFull  // no such element found (the identity of a minimum)
#define THREADS 256

struct Found {  // the order of correctness.Findings' fields, 8 bytes each
    u64 bad_nan, first_bad_nan, inf_mismatch, first_inf_mismatch, first_nonfinite, failing, worst;
    double max_abs, diff_sq, ref_sq, worst_excess;
};

__device__ __forceinline__ void merge(Found& a, const Found& b) {
    a.bad_nan += b.bad_nan;
    a.first_bad_nan = min(a.first_bad_nan, b.first_bad_nan);
    a.inf_mismatch += b.inf_mismatch;
    a.first_inf_mismatch = min(a.first_inf_mismatch, b.first_inf_mismatch);
    a.first_nonfinite = min(a.first_nonfinite, b.first_nonfinite);
    a.failing += b.failing;
    a.max_abs = fmax(a.max_abs, b.max_abs);
    a.diff_sq += b.diff_sq;
    a.ref_sq += b.ref_sq;
    // the largest excess, the lowest index among equals: what np.argmax finds in one pass
    if (b.worst_excess > a.worst_excess || (b.worst_excess == a.worst_excess && b.worst < a.worst)) {
        a.worst = b.worst;
        a.worst_excess = b.worst_excess;
    }
}

__device__ __forceinline__ double element_bf16(const void* p, u64 i) {
    return (double)__uint_as_float(((unsigned)((const unsigned short*)p)[i]) << 16);
}
__device__ __forceinline__ double element_fp16(const void* p, u64 i) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(((const unsigned short*)p)[i]));
    return (double)f;
}
__device__ __forceinline__ double element_fp32(const void* p, u64 i) { return (double)((const float*)p)[i]; }
__device__ __forceinline__ double element_fp64(const void* p, u64 i) { return ((const double*)p)[i]; }

template <double (*ELEMENT)(const void*, u64)>
__device__ void compare(const void* got, const double* __restrict__ ref, u64 n, double neg_rtol, double atol,
                        Found* __restrict__ partials) {
    Found mine = {0, NONE, 0, NONE, NONE, 0, NONE, 0.0, 0.0, 0.0, -__longlong_as_double(0x7FF0000000000000ll)};
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const double g = ELEMENT(got, i), r = ref[i];
        const bool r_nan = isnan(r), r_finite = isfinite(r);
        if (isnan(g) && !r_nan) {
            mine.bad_nan++;
            mine.first_bad_nan = min(mine.first_bad_nan, i);
        }
        if (!r_finite && !r_nan && g != r) {
            mine.inf_mismatch++;
            mine.first_inf_mismatch = min(mine.first_inf_mismatch, i);
        }
        const double fr = r_finite ? r : 0.0;
        const double d = r_finite ? fabs(__dsub_rn(g, r)) : 0.0;
        if (!isfinite(d)) mine.first_nonfinite = min(mine.first_nonfinite, i);
        const double excess = __dadd_rn(__dsub_rn(__dmul_rn(fabs(fr), neg_rtol), atol), d);
        mine.max_abs = fmax(mine.max_abs, d);
        mine.diff_sq = __dadd_rn(mine.diff_sq, __dmul_rn(d, d));
        mine.ref_sq = __dadd_rn(mine.ref_sq, __dmul_rn(fr, fr));
        if (excess > 0.0) mine.failing++;
        if (excess > mine.worst_excess) {  // strictly greater: the first of equals stays
            mine.worst = i;
            mine.worst_excess = excess;
        }
    }
    __shared__ Found all[THREADS];
    all[threadIdx.x] = mine;
    __syncthreads();
    for (unsigned half = THREADS / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) merge(all[threadIdx.x], all[threadIdx.x + half]);
        __syncthreads();
    }
    if (threadIdx.x == 0) partials[blockIdx.x] = all[0];
}

// One entry point per output dtype the host compares on the GPU (device_checks.COMPARED).
#define COMPARE_KERNEL(NAME, ELEMENT)                                                                  \
    extern "C" __global__ void __launch_bounds__(THREADS) NAME(const void* got, const double* ref, u64 n, \
                                                               double neg_rtol, double atol, Found* partials) { \
        compare<ELEMENT>(got, ref, n, neg_rtol, atol, partials);                                       \
    }
COMPARE_KERNEL(compare_bf16, element_bf16)
COMPARE_KERNEL(compare_fp16, element_fp16)
COMPARE_KERNEL(compare_fp32, element_fp32)
COMPARE_KERNEL(compare_fp64, element_fp64)

// `words` 16-byte words from the start (both buffers 16-byte aligned, or 0), then bytes to `n`.
extern "C" __global__ void __launch_bounds__(THREADS) bytes_differ(const unsigned char* a, const unsigned char* b,
                                                                    u64 n, u64 words, unsigned* differs) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    const u64 first = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    bool found = false;
    for (u64 i = first; i < words; i += stride) {
        const uint4 x = ((const uint4*)a)[i], y = ((const uint4*)b)[i];
        found |= (x.x != y.x) | (x.y != y.y) | (x.z != y.z) | (x.w != y.w);
    }
    for (u64 i = words * 16 + first; i < n; i += stride) found |= a[i] != b[i];
    if (found) *differs = 1u;
}

extern "C" __global__ void __launch_bounds__(THREADS) ranges_differ(const u64* __restrict__ table, u64 count,
                                                                     unsigned* differs) {
    for (u64 r = blockIdx.y; r < count; r += gridDim.y) {  // table: (a, b, bytes) triples
        const unsigned char* a = (const unsigned char*)table[3 * r];
        const unsigned char* b = (const unsigned char*)table[3 * r + 1];
        const u64 n = table[3 * r + 2];
        bool found = false;
        for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
            found |= a[i] != b[i];
        if (found) differs[r] = 1u;
    }
}

extern "C" __global__ void __launch_bounds__(THREADS) copy_ranges(const u64* __restrict__ table, u64 count) {
    for (u64 r = blockIdx.y; r < count; r += gridDim.y) {  // table: (destination, source, bytes) triples
        unsigned char* to = (unsigned char*)table[3 * r];
        const unsigned char* from = (const unsigned char*)table[3 * r + 1];
        const u64 n = table[3 * r + 2];
        for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
            to[i] = from[i];
    }
}

extern "C" __global__ void __launch_bounds__(THREADS) fill_ranges(const u64* __restrict__ table, u64 count,
                                                                  unsigned byte) {
    for (u64 r = blockIdx.y; r < count; r += gridDim.y) {  // table: (start, bytes) pairs
        unsigned char* to = (unsigned char*)table[2 * r];
        const u64 n = table[2 * r + 1];
        for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
            to[i] = (unsigned char)byte;
    }
}

// A position-weighted sum of 8-byte words (mod 2^64): a resident copy of a draw's inputs or
// reference is summed when uploaded and again around each use, so a kernel that writes into it
// (far outside its own buffers, past the guard bands) is seen, and never checks a later one.
extern "C" __global__ void __launch_bounds__(THREADS) checksum(const u64* __restrict__ words, u64 n, u64* sum) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    u64 acc = 0;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) acc += words[i] * (2 * i + 1);
    for (int offset = 16; offset > 0; offset /= 2) acc += __shfl_down_sync(0xFFFFFFFFu, acc, offset);
    if ((threadIdx.x & 31) == 0) atomicAdd(sum, acc);
}
