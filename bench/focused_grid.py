"""A focused grid: at the shapes where a shipped table lost to a peer, every configuration of a
chosen sub-space of the template, timed side by side with the shipped pick, the baseline, SGLang's
JIT kernel (where `astra import-sglang`'s folders are on the kernel path) and torch.compile, in
one evaluation worker on one GPU with `astra bench`'s protocol (arena layout, graph replay, the
given L2 regime). It answers "can the template win there at all, and with what": a tune of a few
seconds a shape measures a sliver of spaces of thousands, so a loss in `astra bench` may be the
search's, not the template's.

    ASTRA_KERNELS_PATH=imported python bench/focused_grid.py OUT.json [--kernels rmsnorm,fused_add_rmsnorm]
        [--tokens small|large] [--l2 cold|warm] [--at fused_add_rmsnorm:5175x4096,...]

The sub-spaces: the norms' row-per-CTA configurations with 16-byte vectors (every ROW_THREADS,
ROWS, ITEMS, PRELOAD_W, REG_CAP and HINT; CLUSTER too at 16 tokens or fewer; fewer values at 2048
tokens or more, whose evaluations take seconds; there also fused_add_rmsnorm's two-pass form, RELOAD,
at ROW_THREADS 256 and up, every REG_CAP including 32, STATIC_ROW 0 and 1); silu_and_mul's flat
grids (THREADS, UNROLL, STREAM, STATIC_D) and, at 128 tokens or fewer, its split rows. The shapes are those
where the tables shipped on 2026-11-26 were behind the fastest peer (docs/benchmarks.md), of which
--tokens picks those under 2048 tokens or those at or above it; or all those given with --at. Each
shape's configurations are compiled on every core first.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time

from astra_kernels.jobs.benchmark import _evaluate, _imported, _time_of, shipped_table
from astra_kernels.jobs.torch_peers import measure_peer
from astra_kernels import suite
from astra_kernels.tools.measuring.worker import EvaluationWorker
from astra_kernels.tools.templating.template import Exclusion
from astra_kernels.tools.toolchain.compiler import compile_many

LOSING = {  # (T, H) or (T, D): behind the fastest peer in docs/benchmarks.md's 2026-11-26 runs
    "rmsnorm": [(1, 8192), (16, 4096), (16, 8192), (128, 4096), (128, 8192), (256, 4096), (1024, 8192),
                (2048, 4096), (16384, 8192)],
    "fused_add_rmsnorm": [(1, 4096), (1, 8192), (16, 8192), (2048, 4096), (16384, 4096), (16384, 8192)],
    "silu_and_mul": [(1, 14336), (128, 28672), (2048, 14336), (2048, 28672), (16384, 14336)],
}


def norm_grid(tokens: int, names: list[str]):
    big = tokens >= 2048
    if big and "RELOAD" in names:  # the two-pass form: nothing held between the passes (the template's comment)
        for threads, cap, hint, static in itertools.product((256, 512, 1024), (128, 64, 32), (0, 1), (0, 1)):
            yield dict(ROW_THREADS=threads, ROWS=1, VEC=8, ITEMS=0, PRELOAD_W=0, REG_CAP=cap, CLUSTER=1, HINT=hint,
                       STATIC_ROW=static, RELOAD=1)
    for threads, rows, items, preload, cap, hint, cluster in itertools.product(
            (64, 128, 256, 512, 1024), (1, 2) if big else (1, 2, 4), (0, 1, 2, 4), (0, 1),
            (128,) if big else (128, 64), (0, 1), (1,) if tokens > 16 else (1, 2, 4, 8)):
        yield dict(ROW_THREADS=threads, ROWS=rows, VEC=8, ITEMS=items, PRELOAD_W=preload, REG_CAP=cap,
                   CLUSTER=cluster, HINT=hint)


def silu_grid(tokens: int, names: list[str]):
    statics = (0, 1) if "STATIC_D" in names else (0,)  # the row length at run time, and compiled in
    for threads, unroll, stream, static in itertools.product((128, 256, 512, 1024), (1, 2, 4), (0, 1), statics):
        yield dict(THREADS=threads, VEC=8, CHUNKS=1, ROWS=1, UNROLL=unroll, FAST_MATH=1, FLAT=1, STREAM=stream,
                   STATIC_D=static)
    if tokens <= 128:
        for threads, chunks, unroll, static in itertools.product((64, 128, 256), (8, 16, 32), (1, 2), statics):
            yield dict(THREADS=threads, VEC=8, CHUNKS=chunks, ROWS=1, UNROLL=unroll, FAST_MATH=1, FLAT=0, STREAM=1,
                       STATIC_D=static)


def probe(worker, kernel: str, dims: tuple[int, int], l2: str) -> dict:
    folder = suite.load(kernel)
    sms, arch = worker.device["multiprocessors"], worker.device["arch"]
    shape = dict(zip(folder.spec.symbols, dims))
    row: dict = {"kernel": kernel, "shape": shape, "l2": l2, "configs": []}
    table = shipped_table(kernel, worker.device["name"])
    if table is not None:
        config, _, source = table.pick(shape, sms, arch)
        result = _evaluate(worker, folder, source, shape, "bf16", config or None, sms, "arena", l2=l2,
                           template=table.source_of(source))
        row["shipped"] = {"config": config, "source": source, "us": _time_of(result)[0], "status": result.status}
    row["baseline_us"] = _time_of(_evaluate(worker, folder, "baseline", shape, "bf16", None, sms, "arena", l2=l2))[0]
    imported, _ = _imported(kernel)
    if imported is not None:
        row["sglang_jit_us"] = _time_of(_evaluate(worker, imported, "baseline", shape, "bf16", None, sms, "arena",
                                                  l2=l2))[0]
    row["torch_compile_us"] = worker.call(measure_peer, kernel, shape, "bf16", "default", "compile", l2,
                                          timeout_s=900).median_us
    grid = [folder.template.point(c) for c in (silu_grid(dims[0], folder.template.names) if kernel == "silu_and_mul"
                                               else norm_grid(dims[0], folder.template.names))]
    if None in grid:  # a value the template no longer offers: this script's grid is behind the template
        print(f"{kernel}: {grid.count(None)} grid configurations are not in today's template; left out", flush=True)
        grid = [c for c in grid if c is not None]
    runnable = []
    for config in grid:
        request = suite.request(folder, "template", shape, "bf16", "default", config, sms=sms, arch=arch)
        if not isinstance(request, Exclusion):
            runnable.append((config, request))
    compile_many([(r.source, r.options) for _, r in runnable])  # every core, before the GPU's turn
    for config, _ in runnable:
        us, spread, status = _time_of(_evaluate(worker, folder, "template", shape, "bf16", config, sms, "arena",
                                                l2=l2))
        row["configs"].append({"config": config, "us": us, "spread": spread, "status": status})
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="the JSON written after every shape")
    parser.add_argument("--kernels", default="rmsnorm,fused_add_rmsnorm,silu_and_mul")
    parser.add_argument("--tokens", choices=["small", "large"], default="small")
    parser.add_argument("--l2", choices=["cold", "warm"], default="cold")
    parser.add_argument("--at", help="these shapes instead of the losing ones, their kernels instead of --kernels: "
                                     "KERNEL:TxH, comma-separated")
    args = parser.parse_args()
    losing = LOSING
    if args.at:
        losing = {}
        for item in args.at.split(","):
            kernel, _, shape = item.partition(":")
            try:
                dims = tuple(int(n) for n in shape.split("x"))
                suite.load(kernel)
            except (ValueError, suite.AstraError) as exc:
                parser.error(f"--at {item!r}: give KERNEL:TxH, a kernel of the suite and two whole numbers ({exc})")
            if len(dims) != 2:
                parser.error(f"--at {item!r}: give KERNEL:TxH, a kernel of the suite and two whole numbers")
            losing.setdefault(kernel, []).append(dims)
        args.kernels = ",".join(losing)
    rows = []
    with EvaluationWorker(device_index=0, timeout_s=600) as worker:
        for kernel in args.kernels.split(","):
            for dims in losing[kernel]:
                if not args.at and (dims[0] >= 2048) != (args.tokens == "large"):
                    continue
                started = time.time()
                row = probe(worker, kernel, dims, args.l2)
                rows.append(row)
                ok = sorted((c for c in row["configs"] if c["us"]), key=lambda c: c["us"])
                peers = {k: row[k] for k in ("sglang_jit_us", "torch_compile_us") if row.get(k)}
                shipped = row.get("shipped", {}).get("us")
                print(f"{kernel} {'x'.join(map(str, dims))}: shipped {shipped and round(shipped, 3)}, "
                      f"baseline {row['baseline_us'] and round(row['baseline_us'], 3)}, "
                      f"peers { {k: round(v, 3) for k, v in peers.items()} }; fastest of {len(ok)} configurations "
                      f"{ok[0]['us']:.3f} us {ok[0]['config']} [{time.time() - started:.0f} s]" if ok else "none ran",
                      flush=True)
                with open(args.out, "w") as out:
                    json.dump({"device": worker.device, "arguments": vars(args), "rows": rows}, out)


if __name__ == "__main__":
    main()
