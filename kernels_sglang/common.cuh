// Shared by every kernel of the suite; the loader inlines this file where a kernel includes it,
// so the compile cache sees one complete text. DTYPE and ELEM_BYTES come from the loader as -D.
#ifndef ASTRA_COMMON_CUH
#define ASTRA_COMMON_CUH
#include <cuda_fp16.h>
#include <cuda_bf16.h>

typedef DTYPE scalar_t;

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename U> __device__ __forceinline__ U from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// N elements moved as one aligned access (N * sizeof(U) of 2, 4, 8 or 16 bytes).
template <typename U, int N> struct alignas(sizeof(U) * N) Vec { U v[N]; };

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
    return x;
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
    return x;
}

__host__ __device__ __forceinline__ int ceil_div_int(int a, int b) { return (a + b - 1) / b; }

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// Thread-block clusters (sm_90): the CTAs of a cluster may read each other's shared memory, so a
// row split over several CTAs can combine its partial sums without a second kernel.
// Arrive after writing what others will read (release); wait before reading it (acquire).
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }

// The float at `p` (this CTA's shared memory) in the shared memory of the cluster's CTA `rank`.
__device__ __forceinline__ float load_cluster_shared(const float* p, unsigned rank) {
    unsigned long long shared_address;
    asm("cvta.to.shared.u64 %0, %1;" : "=l"(shared_address) : "l"(p));
    unsigned remote;
    asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"((unsigned)shared_address), "r"(rank));
    float value;
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(value) : "r"(remote) : "memory");
    return value;
}
#endif
#endif
