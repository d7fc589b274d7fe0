"""The tuned kernel and torch.compile's at one shape, side by side, for Nsight Compute to read.

    python bench/inductor_compare.py KERNEL SHAPE [--calls 3]
    ncu --metrics "$(python bench/inductor_compare.py --metrics)" --csv \
        python bench/inductor_compare.py silu_and_mul 2048x14336 > ncu.csv

Where torch.compile beats a tuned kernel (docs/benchmarks.md), the question is what Inductor's
kernel does differently: its grid and block, registers, achieved occupancy, DRAM throughput, and
how wide its loads and stores are (bytes per instruction: global bytes over global instructions).
This runs both on the same seeded inputs: the tuned kernel as a user gets it (the shipped table,
exported, through the Python callable) and the kernel's PyTorch peer (SGLang's PyTorch path)
under torch.compile, each `--calls` times after a warm-up, and checks both outputs against the
float64 reference, so a profile is never of a wrong kernel. With TORCH_LOGS=output_code set,
Inductor prints the Triton source it generated (block sizes, eviction hints). `--metrics` prints
the ncu metric list this project reads, and `--summarize CSV` turns ncu's CSV into one table.
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import sys
import tempfile

import numpy as np
from rich.table import Table

from astra_kernels.cli.output import console, print_table  # one console: whole lines and Markdown tables when piped

METRICS = [
    "gpu__time_duration.sum",
    "launch__grid_size",
    "launch__block_size",
    "launch__registers_per_thread",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "smsp__inst_executed_op_global_ld.sum",
    "smsp__inst_executed_op_global_st.sum",
    "l1tex__t_bytes_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_bytes_pipe_lsu_mem_global_op_st.sum",
]


def run(kernel: str, shape_text: str, calls: int) -> int:
    import torch

    from astra_kernels.jobs import torch_tensors
    from astra_kernels.jobs.exporting import cuda_file
    from astra_kernels import suite
    from astra_kernels.runtime.exported_kernel import load_callable
    from astra_kernels.tools.measuring.correctness import compare

    folder = suite.load(kernel)
    shape = folder.spec.parse_shape(shape_text)
    dtype = "bf16" if "bf16" in folder.spec.dtypes else folder.spec.dtypes[0]
    problem = suite.problem(folder, shape, dtype)
    inputs = folder.reference.make_inputs(np.random.default_rng(7), shape, dtype, "default")
    expected = folder.reference.reference(inputs, shape, dtype, "default")
    with tempfile.TemporaryDirectory() as out:
        cuda_file.export(cuda_file.resolve_source(None, "h200", kernel), out)
        tuned = load_callable(out)
        peer = torch.compile(suite.load_peer(kernel).forward, fullgraph=True, dynamic=False)
        tensors, scalars = torch_tensors.arguments(problem, inputs, "cuda")
        outputs = {p.name: torch.empty(p.shape, dtype=getattr(torch, {"bf16": "bfloat16", "fp16": "float16",
                                                                        "fp32": "float32"}[p.dtype]), device="cuda")
                   for p in problem.buffers if p.role == "out"}
        for _ in range(calls + 1):  # the first call of each compiles and loads
            fresh = {n: t.clone() for n, t in tensors.items()}
            args = [fresh.get(p.name, outputs.get(p.name)) for p in problem.buffers]
            launch = tuned(*args, **{n: v for n, v in scalars.items() if n in tuned.given})
            got_tuned = torch_tensors.results(problem, fresh, outputs)
            fresh_peer = {n: t.clone() for n, t in tensors.items()}
            got_peer = torch_tensors.results(problem, fresh_peer, peer(fresh_peer, scalars, "default"))
        torch.cuda.synchronize()
    for who, got in (("tuned", got_tuned), ("torch.compile", got_peer)):
        for name, array in got.items():
            check = compare(name, array, expected[name], problem.tolerance(dtype))
            if not check.passed:
                console.print(f"{who} {kernel} {shape_text}: {check.name}: {check.detail}", highlight=False)
                return 1
    console.print(f"{kernel} {shape_text}: the tuned kernel ({launch.kernel}, {launch.picked_by}, grid {launch.grid}, "
                  f"block {launch.block}) and torch.compile's are both correct", highlight=False)
    return 0


def summarize(path: str) -> int:
    """ncu --csv output as one row per kernel launch, with bytes per warp-level global load and store
    instruction (512 = every thread of the warp moving 16 bytes)."""
    text = open(path).read()
    start = text.find('"ID"')
    rows = list(csv.DictReader(io.StringIO(text[start:])))
    launches: dict[tuple, dict] = {}
    for row in rows:
        key = (row["ID"], row["Kernel Name"])
        launches.setdefault(key, {})[row["Metric Name"]] = row["Metric Value"].replace(",", "")
    table = Table(title=f"Nsight Compute, {path}")
    for column in ("launch", "kernel", "us", "grid", "block", "regs", "occupancy %", "DRAM % of peak",
                   "DRAM read MB", "DRAM write MB", "B per warp ld", "B per warp st"):
        table.add_column(column)
    for (launch, name), m in launches.items():
        def number(metric: str) -> float:
            try:
                return float(m.get(metric, "nan"))
            except ValueError:
                return float("nan")
        ld, st = number("smsp__inst_executed_op_global_ld.sum"), number("smsp__inst_executed_op_global_st.sum")
        table.add_row(launch, name[:48], f"{number('gpu__time_duration.sum') / 1e3:.2f}",
                      m.get("launch__grid_size", "?"), m.get("launch__block_size", "?"),
                      m.get("launch__registers_per_thread", "?"),
                      f"{number('sm__warps_active.avg.pct_of_peak_sustained_active'):.1f}",
                      f"{number('dram__throughput.avg.pct_of_peak_sustained_elapsed'):.1f}",
                      f"{number('dram__bytes_read.sum') / 1e6:.2f}", f"{number('dram__bytes_write.sum') / 1e6:.2f}",
                      f"{number('l1tex__t_bytes_pipe_lsu_mem_global_op_ld.sum') / ld:.0f}" if ld and not math.isnan(ld) else "—",
                      f"{number('l1tex__t_bytes_pipe_lsu_mem_global_op_st.sum') / st:.0f}" if st and not math.isnan(st) else "—")
    print_table(table)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernel", nargs="?")
    parser.add_argument("shape", nargs="?")
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--metrics", action="store_true", help="print the ncu metric list and exit")
    parser.add_argument("--summarize", metavar="CSV", help="render an ncu --csv output of this script")
    args = parser.parse_args(argv)
    if args.metrics:
        print(",".join(METRICS))
        return 0
    if args.summarize:
        return summarize(args.summarize)
    if not args.kernel or not args.shape:
        parser.error("give KERNEL and SHAPE (or --metrics, or --summarize CSV)")
    return run(args.kernel, args.shape, args.calls)


if __name__ == "__main__":
    sys.exit(main())
