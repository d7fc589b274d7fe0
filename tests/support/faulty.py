"""Kernels that misbehave on purpose, with problems for them, for the GPU tests.

Lives in its own module so the evaluation worker (a spawned process) can import the case
factories by name.
"""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np

from astra_kernels.tools.measuring.evaluation import EvaluationRequest, LaunchShape
from astra_kernels.tools.measuring.problem import Case, Param, Problem

SCALE_SOURCE = r"""
#include <cuda_bf16.h>
extern "C" __global__ void scale(const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ y,
                                 int n, float alpha) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
#if VARIANT == 0      // correct
    if (i < n) y[i] = __float2bfloat16(__bfloat162float(x[i]) * alpha);
#elif VARIANT == 1    // wrong math
    if (i < n) y[i] = __float2bfloat16(__bfloat162float(x[i]) * alpha + 0.25f);
#elif VARIANT == 2    // forgets the last element
    if (i < n - 1) y[i] = __float2bfloat16(__bfloat162float(x[i]) * alpha);
#elif VARIANT == 3    // scribbles on its input
    if (i < n) { y[i] = __float2bfloat16(__bfloat162float(x[i]) * alpha); ((__nv_bfloat16*)x)[i] = y[i]; }
#elif VARIANT == 4    // illegal address
    if (i == 0) *(volatile int*)(0x10) = 1;
    if (i < n) y[i] = x[i];
#elif VARIANT == 5    // never finishes
    while (true) __nanosleep(1000);
#endif
}

#if VARIANT == 6      // replays the first answer it ever computed
__device__ int cached_ready;
__device__ __nv_bfloat16 cached_out[1 << 20];
extern "C" __global__ void scale_cached(const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ y,
                                        int n, float alpha) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    if (cached_ready) { y[i] = cached_out[i]; return; }
    y[i] = __float2bfloat16(__bfloat162float(x[i]) * alpha);
    cached_out[i] = y[i];
    __threadfence();
    if (i == 0) cached_ready = 1;
}
#endif
"""

DYNAMIC_SHARED_SOURCE = r"""
extern "C" __global__ void reverse_tile(const float* __restrict__ x, float* __restrict__ y, int per_block) {
    extern __shared__ float tile[];
    const float* in = x + (size_t)blockIdx.x * per_block;
    for (int i = threadIdx.x; i < per_block; i += blockDim.x) tile[i] = in[i];
    __syncthreads();
    for (int i = threadIdx.x; i < per_block; i += blockDim.x)
        y[(size_t)blockIdx.x * per_block + i] = tile[per_block - 1 - i];
}
"""

# The same `scale`, cheating or faulting in ways the checks above do not already see.
FAULTS_SOURCE = r"""
#include <cuda_bf16.h>
#if VARIANT == 9
__device__ unsigned int scale_blocks_started;  // over every launch of this loaded module
#endif
#if VARIANT == 10
extern "C" __global__ void scale_child(const __nv_bfloat16* x, __nv_bfloat16* y, int n, float alpha) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __float2bfloat16(__bfloat162float(x[i]) * alpha);
}
#endif
extern "C" __global__ void scale(const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ y,
                                 int n, float alpha) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
#if VARIANT == 7      // an unmasked tail: writes one element past the end of its output
    if (i < n) y[i] = __float2bfloat16(__bfloat162float(x[i]) * alpha);
    else if (i == n) y[i] = __float2bfloat16(1.0f);
#elif VARIANT == 8    // writes one element in front of its input
    if (i < n) y[i] = __float2bfloat16(__bfloat162float(x[i]) * alpha);
    if (i == 0) ((__nv_bfloat16*)x)[-1] = __float2bfloat16(1.0f);
#elif VARIANT == 9    // works only in its first two launches, the ones the checks see
    __shared__ unsigned int launch;
    if (threadIdx.x == 0) launch = atomicAdd(&scale_blocks_started, 1u) / gridDim.x;
    __syncthreads();
    if (launch < 2 && i < n) y[i] = __float2bfloat16(__bfloat162float(x[i]) * alpha);
#elif VARIANT == 10   // hands its work to a child grid on a fire-and-forget stream
    if (i == 0) scale_child<<<(n + 255) / 256, 256, 0, cudaStreamFireAndForget>>>(x, y, n, alpha);
#endif
}
"""


def endless_source(lines: int = 4096) -> str:
    """`scale` behind a compile that takes minutes: each line makes NVRTC's front end evaluate a
    2^19-step constexpr loop (about 0.2 s on a 2-core CI machine, in ~140 MB), with a distinct
    seed so no evaluation is reused. One loop of 2^20 steps would hit the front end's step
    limit and fail at once; many loops under it add up, in constant memory."""
    body = "\n".join(f"    constexpr unsigned long long v{k} = spin({k}ull); acc ^= v{k};" for k in range(lines))
    return r"""
#include <cuda_bf16.h>
__device__ constexpr unsigned long long spin(unsigned long long seed) {
    unsigned long long s = seed;
    for (unsigned long long k = 0; k < (1ull << 19); ++k) s = s * 6364136223846793005ull + k;
    return s;
}
extern "C" __global__ void scale(const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ y,
                                 int n, float alpha) {
    unsigned long long acc = 0;
""" + body + r"""
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __float2bfloat16(__bfloat162float(x[i]) * alpha + (acc == 1 ? 1.0f : 0.0f));
}
"""


ALPHA = 1.75


def _scale_case(n: int, seed: int) -> Case:
    x = np.random.default_rng(seed).standard_normal(n).astype(ml_dtypes.bfloat16)
    return Case(inputs={"x": x}, expected={"y": x.astype(np.float64) * ALPHA})


def scale_request(variant: int, n: int = 1_000_003, kernel: str = "scale", source: str = SCALE_SOURCE,
                  extra: tuple[str, ...] = (), bytes_moved: int | None = None) -> EvaluationRequest:
    from astra_kernels.tools.toolchain.nvrtc import CompileOptions

    problem = Problem(
        params=[Param("x", "in", "bf16", (n,)), Param("y", "out", "bf16", (n,)),
                Param("n", "scalar", "int32", value=n), Param("alpha", "scalar", "fp32", value=ALPHA)],
        make_case=functools.partial(_scale_case, n), bytes_moved=bytes_moved or 4 * n, label=f"scale v{variant}",
    )
    return EvaluationRequest(
        source=source, kernel=kernel, options=CompileOptions(defines={"VARIANT": variant}, extra=list(extra)),
        launch=LaunchShape(grid=(-(-n // 256),), block=(256,)), problem=problem, label=problem.label,
    )


def _reverse_case(blocks: int, per_block: int, seed: int) -> Case:
    x = np.random.default_rng(seed).standard_normal(blocks * per_block).astype(np.float32)
    y = x.reshape(blocks, per_block)[:, ::-1].reshape(-1).astype(np.float64)
    return Case(inputs={"x": x}, expected={"y": y})


def dynamic_shared_request(blocks: int = 264, per_block: int = 24576) -> EvaluationRequest:
    """Each block stages 96 KB in dynamic shared memory: only possible with the opt-in attribute."""
    n = blocks * per_block
    problem = Problem(
        params=[Param("x", "in", "fp32", (n,)), Param("y", "out", "fp32", (n,)),
                Param("per_block", "scalar", "int32", value=per_block)],
        make_case=functools.partial(_reverse_case, blocks, per_block), bytes_moved=8 * n,
    )
    return EvaluationRequest(
        source=DYNAMIC_SHARED_SOURCE, kernel="reverse_tile", problem=problem,
        launch=LaunchShape(grid=(blocks,), block=(512,), shared_bytes=per_block * 4), label="reverse",
    )


def device_facts(device, tag: str) -> dict:
    """Run in the worker through EvaluationWorker.call: what the worker's device is."""
    return {"tag": tag, "name": device.properties.name, "sms": device.properties.multiprocessors}


def raises_in_worker(device) -> None:
    raise RuntimeError("a peer that does not run")
