"""Scaling benchmark: compiles with and without Ray on this host's cores, and a Ray cluster's
evaluation rate against its number of workers, measured on CPUs with replay workers.

    python bench/scaling.py [--variants 48] [--workers 1,2,4,8] [--pace 1.0] [--json out/scaling.json]

Part 1 compiles the same variants (bench/toolchain.py's kernel, cache off) three ways on this host:
one process, all cores through compile_many's process pool, and as Ray tasks on a local cluster of
the same cores (`astra tune --ray`'s path), and prints variants per second.

Part 2 starts W replay workers (tools/cluster/pool.py, W from --workers) on a local Ray cluster,
each answering silu_and_mul's recorded H200 evaluations after `pace` times the recorded wall time
of each (what the GPU spent on it: compile, checks, timing), and sends them every recorded template
evaluation of the recording, as many in flight as there are workers. It prints the evaluations per
second, the speedup over one worker and the efficiency (speedup / W): what the pool and Ray add to
the GPUs' own time, without a GPU. A real cluster's rate is bounded by its GPUs the same way.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from datetime import datetime, timezone

from rich.table import Table

from astra_kernels.cli.output import console, print_table
from astra_kernels.jobs.tuning import _Requests
from astra_kernels import suite
from astra_kernels.suite import recordings
from astra_kernels.tools.cluster.compiling import RayCompileExecutor
from astra_kernels.tools.cluster.pool import WorkerPool
from astra_kernels.tools.cluster.runtime import connected
from astra_kernels.tools.concurrency import map_in_threads
from astra_kernels.tools.measuring.results import ResultsStore, evaluation_key
from astra_kernels.tools.search.hardware import limits_for
from astra_kernels.tools.toolchain.compiler import compile_many, compiling_with

sys.path.insert(0, os.path.dirname(__file__))
from toolchain import VARIANT_SOURCE  # noqa: E402  the same kernel bench/toolchain.py compiles

from astra_kernels.tools.toolchain.nvrtc import CompileOptions  # noqa: E402

KERNEL = "silu_and_mul"


def compile_figures(count: int) -> dict:
    variants = [
        (VARIANT_SOURCE, CompileOptions(arch="sm_90", defines={"THREADS": t, "VEC": v, "UNROLL": u}))
        for t in (64, 128, 256, 512) for v in (1, 2, 4, 8) for u in (1, 2, 4)
    ][:count]
    cores = os.cpu_count() or 1
    figures = {}

    def timed(label: str, run) -> None:
        start = time.perf_counter()
        outcomes = run()
        seconds = time.perf_counter() - start
        assert all(o.module is not None for o in outcomes), [o.error for o in outcomes if o.error]
        figures[label] = {"variants": len(variants), "wall_s": seconds, "variants_per_s": len(variants) / seconds}

    timed("one process", lambda: compile_many(variants, workers=1, cache=False))
    timed(f"process pool, {cores} cores", lambda: compile_many(variants, workers=cores, cache=False))
    with connected(None, num_cpus=cores):
        start = time.perf_counter()
        with compiling_with(RayCompileExecutor()):
            compile_many(variants[:2], cache=False)  # Ray's workers start on first use: not counted
        figures["ray start and first tasks"] = {"wall_s": time.perf_counter() - start}
        with compiling_with(RayCompileExecutor()):
            timed(f"Ray tasks, local cluster of {cores} CPUs", lambda: compile_many(variants, cache=False))
    return figures


def recorded_requests(limit: int) -> tuple[str, list]:
    """Every recorded template evaluation of the kernel's recording (up to `limit`), rebuilt as the
    tuner's requests, each checked to be in the recording (so every answer is a paced, recorded one)."""
    recording = recordings.resolve("recorded", KERNEL)
    folder = suite.load(KERNEL)
    with gzip.open(recording, "rb") as packed, tempfile.NamedTemporaryFile(suffix=".sqlite") as copy:
        shutil.copyfileobj(packed, copy)
        copy.flush()
        with ResultsStore(copy.name, read_only=True) as store:
            rows = [r for r in store.rows(kernel=KERNEL, which="template", status="ok")]
            device = rows[0]["device"]
            requests = _Requests(folder, rows[0]["dtype"], rows[0]["variant"], limits_for("sm_90", None, None))
            found = []
            for row in rows:
                request = requests.request("template", row["shape"], row["config"])
                if not hasattr(request, "source") or store.get(evaluation_key(request, device)) is None:
                    continue
                found.append(request)
                if len(found) == limit:
                    break
    return str(recording), found


def rate_figures(worker_counts: list[int], pace: float, limit: int) -> dict:
    recording, requests = recorded_requests(limit)
    figures = {"recording": recording, "evaluations": len(requests), "pace": pace, "rows": []}
    with connected(None, num_cpus=os.cpu_count() or 1):
        for count in worker_counts:
            with WorkerPool(count, recordings=[recording], pace=pace, gpus_per_worker=0) as pool:
                view = pool.view(pool.kinds[0])
                start = time.perf_counter()
                results = map_in_threads(view.evaluate, requests, count)
                seconds = time.perf_counter() - start
            assert all(r.status == "ok" for r in results), {r.status for r in results}
            gpu_s = sum(r.wall_seconds for r in results) * pace
            figures["rows"].append({"workers": count, "wall_s": seconds, "per_s": len(requests) / seconds,
                                    "paced_s": gpu_s, "ideal_per_s": len(requests) * count / gpu_s})
    one = figures["rows"][0]["per_s"]
    for row in figures["rows"]:
        row["speedup"] = row["per_s"] / one
        row["efficiency"] = row["speedup"] / row["workers"]
        row["of_ideal"] = row["per_s"] / row["ideal_per_s"]
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", type=int, default=48)
    parser.add_argument("--workers", default="1,2,4,8")
    parser.add_argument("--pace", type=float, default=1.0)
    parser.add_argument("--evaluations", type=int, default=240)
    parser.add_argument("--skip-compile", action="store_true")
    parser.add_argument("--json")
    args = parser.parse_args()
    import ray

    figures = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "host": platform.node(),
               "cpus": os.cpu_count(), "python": platform.python_version(), "ray": ray.__version__,
               "command": "python " + " ".join(sys.argv)}
    if not args.skip_compile:
        figures["compile"] = compile_figures(args.variants)
        table = Table(title=f"NVRTC compiles of {args.variants} variants on this host ({os.cpu_count()} CPUs), cache off")
        for column in ("how", "wall s", "variants/s"):
            table.add_column(column)
        for label, row in figures["compile"].items():
            table.add_row(label, f"{row['wall_s']:.2f}", f"{row['variants_per_s']:.2f}" if "variants_per_s" in row else "-")
        print_table(table)
    figures["evaluations"] = rate_figures([int(w) for w in args.workers.split(",")], args.pace, args.evaluations)
    e = figures["evaluations"]
    table = Table(title=f"{e['evaluations']} recorded {KERNEL} evaluations through W replay workers, each answer after "
                        f"{e['pace']:g}x its recorded wall time")
    for column in ("workers", "wall s", "evaluations/s", "speedup", "efficiency", "of the paced ideal"):
        table.add_column(column)
    for row in e["rows"]:
        table.add_row(str(row["workers"]), f"{row['wall_s']:.2f}", f"{row['per_s']:.2f}", f"{row['speedup']:.2f}",
                      f"{row['efficiency']:.2f}", f"{row['of_ideal']:.2f}")
    print_table(table)
    if args.json:
        os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=2)
        console.print(f"wrote {args.json}", highlight=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
