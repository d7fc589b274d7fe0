"""Kernels written as a cheating optimiser would write them (issue 39), with their requests.

Each computes `scale` (y = x * alpha in bf16, as support/faulty.py's), correctly in every launch the
checks look at, and games the timer its own way; the protocol (tools/measuring/evaluation.py) must
reject each through the ordinary evaluation, naming why. VARIANT picks one (see CASES). They live
in a module of their own so the evaluation worker (a spawned process) can import the case factory.
"""

from __future__ import annotations

from support import faulty

SOURCE = r"""
#include <cuda_bf16.h>
#define SCALE(v) __float2bfloat16(__bfloat162float(v) * alpha)
#define BITS(v) __bfloat16_as_ushort(v)

#if VARIANT == 21 || VARIANT == 22 || VARIANT == 23
__device__ unsigned int blocks_done;  // the last block of a launch to finish finds it at gridDim.x - 1
__device__ __forceinline__ bool last_block() {
    __shared__ bool last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(&blocks_done, 1u) == gridDim.x - 1;
    __syncthreads();
    if (last && threadIdx.x == 0) blocks_done = 0;
    return last && threadIdx.x == 0;
}
#endif
#if VARIANT == 21
__device__ const void* served_x;  // the input address the last launch served
#endif
#if VARIANT == 22
__device__ unsigned long long memo_key;          // the first input words of the memoised launch
__device__ __nv_bfloat16 memo_out[1 << 19];      // its outputs
#endif
#if VARIANT == 23
__device__ unsigned long long previous_key;      // the previous launch's first input words
__device__ __nv_bfloat16* previous_y;            // and its outputs, still in L2
#endif
#if VARIANT == 24 || VARIANT == 25
__device__ unsigned int blocks_started;          // over every launch since the module was loaded
#endif

extern "C" __global__ void scale(const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ y,
                                 int n, float alpha) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
#if VARIANT == 0      // honest
    if (i < n) y[i] = SCALE(x[i]);
#elif VARIANT == 20   // skip-if-already-written: an output holding anything but NaN was written before
    if (i < n) {
        if ((BITS(y[i]) & 0x7FFF) <= 0x7F80) return;
        y[i] = SCALE(x[i]);
    }
#elif VARIANT == 21   // memoises on pointer: a launch at the address served last time returns at once
    if (served_x == (const void*)x) return;
    if (i < n) y[i] = SCALE(x[i]);
    if (last_block()) served_x = x;
#elif VARIANT == 22   // memoises on input content: keyed on the first four input words
    const unsigned long long key = *(const unsigned long long*)x;
    if (memo_key == key) {
        if (i < n) y[i] = memo_out[i];
        return;
    }
    if (i < n) memo_out[i] = y[i] = SCALE(x[i]);
    if (last_block()) memo_key = key;
#elif VARIANT == 23   // reuses the previous rotating set's results, left in L2, when its input looks the same
    const unsigned long long key = *(const unsigned long long*)x;
    if (previous_y != nullptr && previous_y != y && previous_key == key) {
        if (i < n) y[i] = previous_y[i];
        return;
    }
    if (i < n) y[i] = SCALE(x[i]);
    if (last_block()) { previous_key = key; previous_y = y; }
#elif VARIANT == 24   // keeps __device__ state: after the checks' two launches, every other launch does nothing
    __shared__ unsigned int launch;
    if (threadIdx.x == 0) launch = atomicAdd(&blocks_started, 1u) / gridDim.x;
    __syncthreads();
    if (launch >= 2 && (launch & 1u)) return;
    if (i < n) y[i] = SCALE(x[i]);
#elif VARIANT == 25   // launches work the timing does not see: works only in the first two launches
    __shared__ unsigned int launch;
    if (threadIdx.x == 0) launch = atomicAdd(&blocks_started, 1u) / gridDim.x;
    __syncthreads();
    if (launch < 2 && i < n) y[i] = SCALE(x[i]);
#elif VARIANT == 26   // "faster" than its bytes allow: a block whose first output is already right skips the rest
    __shared__ bool done;
    const int first = blockIdx.x * blockDim.x;
    if (threadIdx.x == 0) done = first < n && BITS(y[first]) == BITS(SCALE(x[first]));
    __syncthreads();
    if (done) return;
    if (i < n) y[i] = SCALE(x[i]);
#elif VARIANT == 27   // special-cases the timed shapes: no tail, so correct only where n is a multiple of 256
    if (i < n - n % 256) y[i] = SCALE(x[i]);
#endif
}
"""

# (name, variant, elements, expected status, words the message must hold, a failed check's name)
OVERCLAIMED = 100        # the honest kernel (VARIANT 0) in a problem claiming 16x the bytes it moves
SMALL = (1 << 18) + 3   # 1 MB a set: 256 rotating sets, every set launched once a replay
LARGE = 1 << 24         # 64 MB a set: 4 rotating sets, each launched 5 times a replay
CASES = [
    ("honest", 0, SMALL, "ok", [], None),
    ("honest, large", 0, LARGE, "ok", [], None),
    ("skip-if-already-written", 20, SMALL, "incorrect",
     ["timed outputs", "skips work when its output already holds values"], "timed outputs"),
    ("memoise on pointer", 21, SMALL, "incorrect",
     ["y (seed 2)", "NaN", "same addresses", "keeps results by address"], "y (seed 2)"),
    ("memoise on input content", 22, SMALL, "incorrect",
     ["device state", "'memo_key'", "kept state across launches"], "device state"),
    ("reuse the previous set's results from L2", 23, SMALL, "incorrect",
     ["device state", "kept state across launches"], "device state"),
    ("keep __device__ state across launches", 24, SMALL, "incorrect", ["timed outputs"], "device state"),
    ("work the timing does not see", 25, SMALL, "incorrect",
     ["timed outputs", "did not do the work the checks saw"], "device state"),
    # Spot-checks one output per block and skips the block when it is right: not faster than the
    # floor (it reads every block's first element), so the fill before each replay catches it.
    ("skip a block whose first output is right", 26, LARGE, "incorrect",
     ["timed outputs", "did not do the work the checks saw"], "timed outputs"),
    # Faster than its bytes allow: an honest kernel whose problem claims 16x the bytes it moves,
    # as a kernel that reads a sixteenth of what it must would look; only the floor can see it.
    ("faster than its bytes allow", OVERCLAIMED, LARGE, "invalid",
     ["physical floor", "faster than its bytes allow", "under the floor"], "physical floor"),
]
# Correct at the timed shape, wrong at any other: no single evaluation can see it; an evaluation at
# an odd shape does (what `astra optimize` runs for a model's template at its default configuration).
TIMED_SHAPE_ONLY = 27


def request(variant: int, n: int):
    """The `scale` problem of support/faulty.py at `n` elements, with this module's SOURCE."""
    if variant == OVERCLAIMED:
        return faulty.scale_request(0, n=n, source=SOURCE, bytes_moved=16 * 4 * n)
    return faulty.scale_request(variant, n=n, source=SOURCE)
