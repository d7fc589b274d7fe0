"""Toolchain benchmark: compile throughput and the host cost of one evaluation.

    python bench/toolchain.py [--variants 48] [--json out/toolchain.json]

Prints (1) NVRTC compile time per variant on one core and on all cores, cache off; (2) on a GPU,
the wall time of an evaluation beyond the GPU time of the launches it makes, the launch floor
(an empty kernel, graph-replayed and from a Python loop) and the copy probe against the copy
bandwidth. Without a GPU it prints part (1) and says why part (2) is missing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from datetime import datetime, timezone

from rich.table import Table

from astra_kernels.cli.output import console, print_table  # one console: whole lines and Markdown tables when piped
from astra_kernels.tools.toolchain.nvrtc import CompileOptions, nvrtc_version
from astra_kernels.tools.toolchain.compiler import compile_many
from astra_kernels.tools.measuring.worker import EvaluationWorker
from astra_kernels.tools.measuring import probes
from astra_kernels.tools.toolchain.driver import gpu_available

# A realistic memory-bound kernel shape: vectorised bf16 loads, fp32 math, an unrolled loop.
VARIANT_SOURCE = r"""
#include <cuda_bf16.h>
extern "C" __global__ void __launch_bounds__(THREADS)
silu_mul(const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ out, int d) {
    const __nv_bfloat16* a = x + (size_t)blockIdx.x * 2 * d;
    const __nv_bfloat16* b = a + d;
    __nv_bfloat16* o = out + (size_t)blockIdx.x * d;
    #pragma unroll UNROLL
    for (int i = (threadIdx.x) * VEC; i < d; i += THREADS * VEC) {
        #pragma unroll
        for (int v = 0; v < VEC; ++v) {
            if (i + v < d) {
                float av = __bfloat162float(a[i + v]), bv = __bfloat162float(b[i + v]);
                o[i + v] = __float2bfloat16(av / (1.0f + __expf(-av)) * bv);
            }
        }
    }
}
"""


def compile_figures(count: int) -> dict:
    variants = [
        (VARIANT_SOURCE, CompileOptions(arch="sm_90", defines={"THREADS": t, "VEC": v, "UNROLL": u}))
        for t in (64, 128, 256, 512) for v in (1, 2, 4, 8) for u in (1, 2, 4)
    ][:count]
    figures = {}
    for label, workers in (("one core", 1), ("all cores", os.cpu_count() or 1)):
        start = time.perf_counter()
        outcomes = compile_many(variants, workers=workers, cache=False)
        seconds = time.perf_counter() - start
        assert all(o.module is not None for o in outcomes), [o.error for o in outcomes if o.error]
        per_variant = [o.module.compile_seconds for o in outcomes]
        figures[label] = {
            "workers": workers, "variants": len(variants), "wall_s": seconds,
            "ms_per_variant_wall": 1000 * seconds / len(variants),
            "ms_per_variant_nvrtc_median": 1000 * statistics.median(per_variant),
            "variants_per_s": len(variants) / seconds,
        }
    return figures


def _gpu_time_us(result) -> float:
    """GPU time an evaluation spent in the kernel itself: checks, warm-up, replays, stream loop."""
    t = result.timing
    launches = 2 + t.launches_per_replay * (len(t.samples_us) + 2)
    if result.stream_timing:
        launches += result.stream_timing.launches_per_replay * len(result.stream_timing.samples_us) + 1
    return launches * t.median_us


def gpu_figures(repeats: int) -> dict:
    figures: dict = {}
    with EvaluationWorker() as worker:
        copy = worker.evaluate(probes.copy_request(1 << 30), timeout_s=300)
        assert copy.status == "ok", copy.message
        figures["device"] = copy.device
        figures["copy_bandwidth_gbs"] = copy.copy_bandwidth_gbs
        figures["copy_probe_1gb"] = {
            "median_us": copy.timing.median_us, "spread": copy.timing.spread,
            "fraction_of_copy_bandwidth": copy.fraction_of_copy_bandwidth,
        }
        empty = worker.evaluate(probes.empty_request())
        assert empty.status == "ok", empty.message
        figures["launch_floor_us"] = {
            "graph": empty.timing.median_us, "stream": empty.stream_timing.median_us,
        }
        small = probes.copy_request(1 << 20)
        rows = []
        for i in range(repeats):
            started = time.perf_counter()
            result = worker.evaluate(small)
            wall = time.perf_counter() - started
            assert result.status == "ok", result.message
            rows.append({"wall_s": wall, "gpu_s": _gpu_time_us(result) / 1e6,
                         "kernel_us": result.timing.median_us, "compile_cached": result.compile_cached})
        steady = rows[1:] or rows
        figures["evaluation_1mb_copy"] = {
            "first_wall_s": rows[0]["wall_s"],
            "wall_s_median": statistics.median(r["wall_s"] for r in steady),
            "gpu_s_median": statistics.median(r["gpu_s"] for r in steady),
            "host_overhead_s_median": statistics.median(r["wall_s"] - r["gpu_s"] for r in steady),
            "kernel_us_median": statistics.median(r["kernel_us"] for r in steady),
            "launches_per_replay": result.timing.launches_per_replay,
        }
        check_only = probes.copy_request(1 << 20)
        check_only.time = False
        walls = []
        for _ in range(repeats):
            started = time.perf_counter()
            assert worker.evaluate(check_only).correct
            walls.append(time.perf_counter() - started)
        figures["check_only_wall_s_median"] = statistics.median(walls)
    return figures


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args(argv)
    report = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(), "cpus": os.cpu_count(), "nvrtc": nvrtc_version(),
        "compile": compile_figures(args.variants),
    }
    table = Table(title=f"NVRTC {report['nvrtc']}: compiling {args.variants} variants for sm_90, cache off")
    for col in ("cores", "wall s", "ms / variant (wall)", "ms / variant (one NVRTC call)", "variants / s"):
        table.add_column(col)
    for label, f in report["compile"].items():
        table.add_row(f"{label} ({f['workers']})", f"{f['wall_s']:.2f}", f"{f['ms_per_variant_wall']:.1f}",
                      f"{f['ms_per_variant_nvrtc_median']:.1f}", f"{f['variants_per_s']:.1f}")
    print_table(table)
    if gpu_available():
        report["gpu"] = g = gpu_figures(args.repeats)
        t = Table(title=f"Evaluation on {g['device']}")
        t.add_column("figure")
        t.add_column("value")
        e = g["evaluation_1mb_copy"]
        t.add_row("copy ceiling (best of driver memcpy and copy kernel, 1 GiB)", f"{g['copy_bandwidth_gbs']:.0f} GB/s")
        t.add_row("copy probe, 1 GiB, graph replay", f"{g['copy_probe_1gb']['median_us']:.1f} us = "
                  f"{g['copy_probe_1gb']['fraction_of_copy_bandwidth']:.1%} of copy bandwidth")
        t.add_row("launch floor: empty kernel, graph replay", f"{g['launch_floor_us']['graph']:.2f} us")
        t.add_row("launch floor: empty kernel, Python loop", f"{g['launch_floor_us']['stream']:.2f} us")
        t.add_row("evaluation wall time (1 MiB copy, cached compile)", f"{e['wall_s_median'] * 1000:.0f} ms")
        t.add_row("  of which GPU time in the kernel", f"{e['gpu_s_median'] * 1000:.1f} ms")
        t.add_row("  host overhead beyond the kernel", f"{e['host_overhead_s_median'] * 1000:.0f} ms")
        t.add_row("first evaluation (compile + worker warm-up)", f"{e['first_wall_s'] * 1000:.0f} ms")
        t.add_row("check-only evaluation wall time", f"{g['check_only_wall_s_median'] * 1000:.0f} ms")
        print_table(t)
    else:
        console.print("[yellow]no GPU here: evaluation figures need one (compile figures above are real)")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(report, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
