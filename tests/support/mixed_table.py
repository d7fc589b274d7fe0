"""A dispatch table of silu_and_mul like the agent's result: the shipped H200 table with a model's
rewrite holding two shapes and a model's own template (a parameter of its own) holding two more,
beside the suite's template and baseline. The rewrite requires an even D, so at an odd D the pick
passes it by, as the dispatch table does for any source whose constraints refuse a shape."""

from __future__ import annotations

from astra_kernels.suite import tuned_tables
from astra_kernels.runtime.dispatch import DispatchEntry, DispatchTable

REWRITE = """\
// A flat rewrite: one thread per pair of elements over the whole T x D output (silu only).
#include "common.cuh"

//@ kernel: silu_flat
//@ require D % 2 == 0 -- each thread takes a pair of elements
//@ grid: ceil_div(T * (D // 2), 256)
//@ block: 256
//@ fast_math: 1

extern "C" __global__ void silu_flat(const scalar_t* __restrict__ x, scalar_t* __restrict__ out, int tokens, int d) {
    const long long pair = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long half = d / 2;
    if (pair >= (long long)tokens * half) return;
    const long long t = pair / half, i = (pair % half) * 2;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        const float a = to_float(x[t * 2 * d + i + j]), b = to_float(x[t * 2 * d + d + i + j]);
        out[t * d + i + j] = from_float<scalar_t>(a / (1.0f + expf(-a)) * b);
    }
}
"""

MODEL_TEMPLATE = """\
// A model's template: one CTA per token, THREADS threads striding over the row (silu only).
#include "common.cuh"

//@ kernel: silu_rows
//@ param THREADS: 64, 128, 256 -- threads per token
//@ param SPLIT: 1, 2 -- CTAs per token, each a contiguous part of the row
//@ default: THREADS=128 SPLIT=1
//@ derive PART = ceil_div(D, SPLIT)
//@ grid: T * SPLIT
//@ block: THREADS

extern "C" __global__ void silu_rows(const scalar_t* __restrict__ x, scalar_t* __restrict__ out, int tokens, int d) {
    const long long t = blockIdx.x / SPLIT;
    const int begin = (blockIdx.x % SPLIT) * PART;
    const int end = min(d, begin + PART);
    for (int i = begin + threadIdx.x; i < end; i += THREADS) {
        const float a = to_float(x[t * 2 * d + i]), b = to_float(x[t * 2 * d + d + i]);
        out[t * d + i] = from_float<scalar_t>(a / (1.0f + expf(-a)) * b);
    }
}
"""

REWRITE_SHAPES = ({"T": 16, "D": 4096}, {"T": 32, "D": 5120})
MODEL_TEMPLATE_SHAPES = {(16, 12288): {"THREADS": 256, "SPLIT": 2}, (64, 8192): {"THREADS": 64, "SPLIT": 1}}


def mixed_silu_and_mul_table() -> DispatchTable:
    """The shipped H200 silu_and_mul table, its first entries taken over by `candidate-3` (the
    rewrite) and `candidate-5` (the model's template), as the agent's reporter names them."""
    table = DispatchTable.model_validate_json(tuned_tables.table_path("silu_and_mul", "h200").read_text())
    entries = []
    for entry in table.entries:
        key = (entry.shape["T"], entry.shape["D"])
        if entry.shape in REWRITE_SHAPES:
            entry = DispatchEntry(shape=entry.shape, config={}, median_us=entry.median_us, source="candidate-3")
        elif key in MODEL_TEMPLATE_SHAPES:
            entry = DispatchEntry(shape=entry.shape, config=MODEL_TEMPLATE_SHAPES[key], median_us=entry.median_us,
                                  source="candidate-5")
        entries.append(entry)
    return DispatchTable(kernel="silu_and_mul", dtype=table.dtype, variant=table.variant, entries=entries,
                         general=table.general, sources={"candidate-3": REWRITE, "candidate-5": MODEL_TEMPLATE})
