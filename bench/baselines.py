"""The suite's baselines against SGLang's own timings in docs/kernels.md, on this GPU.

    python bench/baselines.py [--kernels silu_and_mul,...] [--json out.json]

Times each baseline (and the template's default configuration) at every anchor shape of the
detected device (H200 or H100) by the project's protocol: CUDA-graph replay over rotating input
sets, cold L2, correctness checked first. A baseline port should land within about 15% of
SGLang's time, or speedups measured against it mean nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from datetime import datetime, timezone

from rich.table import Table

from astra_kernels.cli.output import console, print_table  # one console: whole lines and Markdown tables when piped
from astra_kernels import suite
from astra_kernels.suite.tuned_tables import device_key
from astra_kernels.tools.measuring.worker import EvaluationWorker


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", help="comma-separated (default: every kernel with anchors)")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    names = args.kernels.split(",") if args.kernels else suite.names()
    rows = []
    with EvaluationWorker(timeout_s=600) as worker:
        key = device_key(worker.device["name"])
        if key is None:
            print(f"docs/kernels.md has no timings for {worker.device['name']}; nothing to compare", file=sys.stderr)
            return 1
        for name in names:
            folder = suite.load(name)
            for anchor in (a for a in folder.spec.anchors if a.device == key):
                row = {"kernel": name, "shape": folder.spec.label(anchor.shape), "dtype": anchor.dtype,
                       "variant": anchor.variant, "sglang_us": anchor.sglang_us,
                       "torch_compile_us": anchor.torch_compile_us}
                for which in ("baseline", "template"):
                    req = suite.request(folder, which, anchor.shape, anchor.dtype, anchor.variant,
                                        sms=worker.device["multiprocessors"], stream_timing=False)
                    result = worker.evaluate(req)
                    ok = result.status == "ok"
                    row[f"{which}_status"] = result.status if ok else f"{result.status}: {result.message[:200]}"
                    row[f"{which}_us"] = result.timing.median_us if ok else None
                    row[f"{which}_spread"] = result.timing.spread if ok else None
                    row["floor_us"] = result.floor_us
                    row["copy_bandwidth_gbs"] = result.copy_bandwidth_gbs
                rows.append(row)
    table = Table(title=f"Baselines vs SGLang on {worker.device['name']} (docs/kernels.md {key} table), bf16, us")
    for col in ("kernel", "shape", "SGLang", "baseline", "baseline/SGLang", "template default",
                "torch.compile", "floor"):
        table.add_column(col)
    ratios = []
    for r in rows:
        ratio = r["baseline_us"] / r["sglang_us"] if r["baseline_us"] else None
        if ratio:
            ratios.append(ratio)
        table.add_row(r["kernel"], r["shape"], f"{r['sglang_us']:.2f}",
                      f"{r['baseline_us']:.2f}" if r["baseline_us"] else r["baseline_status"][:30],
                      f"{ratio:.2f}" if ratio else "",
                      f"{r['template_us']:.2f}" if r["template_us"] else r["template_status"][:30],
                      f"{r['torch_compile_us']:.2f}" if r["torch_compile_us"] else "",
                      f"{r['floor_us']:.2f}" if r["floor_us"] else "")
    print_table(table)
    if ratios:
        geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
        within = sum(0.85 <= x <= 1.15 for x in ratios)
        console.print(f"baseline/SGLang: geometric mean {geo:.3f}; {within} of {len(ratios)} within 15%")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"device": worker.device["name"], "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                       "rows": rows}, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
