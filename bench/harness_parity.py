"""One configuration timed by both harnesses: the evaluation worker's (what `astra tune` and
`astra bench` time the tuned kernel with) and the PyTorch peers' (what they time torch.compile
with), beside torch.compile and SGLang's JIT kernel, at one shape.

    python bench/harness_parity.py silu_and_mul 128x28672 --config '{"THREADS": 128, ...}' [--l2 cold]
    ASTRA_KERNELS_PATH=.sglang-imported python bench/harness_parity.py --from FOCUSED_GRID.json [--json OUT.json]

Both harnesses check against the float64 reference and time CUDA-graph replay over rotating
input sets, but they are not the same code: the worker launches into one arena of input sets and
outputs; a peer's sets are separate torch tensors and each captured call allocates its outputs from
torch's graph pool. Where the bench says torch.compile is faster than a configuration, this says
how much of that the harness accounts for: the configuration exported (`astra export` of a table
that runs it everywhere) and called as a user calls it, through its Python callable on torch
tensors, is timed by the peers' harness in the same worker as torch.compile. `--from` takes each
shape's fastest configuration of a bench/focused_grid.py run. bf16, the default variant (the
focused grid's).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from rich.table import Table

from astra_kernels.cli.output import console, print_table
from astra_kernels.jobs.benchmark import _evaluate, _imported, _time_of
from astra_kernels.jobs.exporting.cuda_file import export, resolve_source
from astra_kernels.jobs.torch_peers import measure_exported, measure_peer
from astra_kernels import suite
from astra_kernels.runtime.dispatch import DispatchEntry, DispatchTable
from astra_kernels.tools.errors import AstraError
from astra_kernels.tools.measuring.worker import EvaluationWorker


def parity(worker, kernel: str, shape: dict[str, int], config: dict[str, int], l2: str, scratch: Path) -> dict:
    folder = suite.load(kernel)
    sms, arch = worker.device["multiprocessors"], worker.device["arch"]
    row: dict = {"kernel": kernel, "shape": shape, "config": config, "l2": l2}
    row["worker_us"], row["worker_spread"], row["worker_status"] = _time_of(
        _evaluate(worker, folder, "template", shape, "bf16", config, sms, "arena", l2=l2))
    table = DispatchTable(kernel=kernel, dtype="bf16", variant="default", general=config, l2=l2,
                          entries=[DispatchEntry(shape=shape, config=config, median_us=row["worker_us"])])
    where = scratch / f"{kernel}-{'x'.join(map(str, shape.values()))}"
    where.mkdir(parents=True, exist_ok=True)
    (where / "dispatch.json").write_text(table.model_dump_json(indent=2))
    export(resolve_source(where / "dispatch.json"), where / "export", shapes=[shape], sms=sms, arch=arch)
    exported = worker.call(measure_exported, str(where / "export"), shape, l2, timeout_s=900)
    row["exported_us"], row["exported_status"] = exported.median_us, exported.status
    row["exported_spread"] = exported.timing.spread if exported.timing else None
    if exported.status != "ok":
        row["exported_message"] = exported.message
    peer = worker.call(measure_peer, kernel, shape, "bf16", "default", "compile", l2, timeout_s=900)
    row["torch_compile_us"] = peer.median_us
    row["torch_compile_spread"] = peer.timing.spread if peer.timing else None
    imported, _ = _imported(kernel)
    if imported is not None:
        row["sglang_jit_us"] = _time_of(_evaluate(worker, imported, "baseline", shape, "bf16", None, sms, "arena",
                                                  l2=l2))[0]
    return row


def _config(text: str) -> dict[str, int]:
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise AstraError(f"--config is not JSON ({exc})") from None
    if not isinstance(config, dict) or not all(isinstance(v, int) for v in config.values()):
        raise AstraError(f"--config must be a JSON object of whole numbers, like '{{\"THREADS\": 128}}', not {text!r}")
    return config


def _todo(args, parser) -> list[tuple[str, dict[str, int], dict[str, int]]]:
    if args.grid:
        try:
            grid = json.loads(Path(args.grid).read_text())
            todo = []
            for row in grid["rows"]:
                ok = sorted((c for c in row["configs"] if c.get("us")), key=lambda c: c["us"])
                if ok:
                    todo.append((row["kernel"], row["shape"], ok[0]["config"]))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise AstraError(f"{args.grid} is not a bench/focused_grid.py output ({type(exc).__name__}: {exc})") from None
        for kernel, _, _ in todo:
            suite.load(kernel)
        return todo
    if args.kernel and args.shape and args.config:
        return [(args.kernel, suite.load(args.kernel).spec.parse_shape(args.shape), _config(args.config))]
    parser.error("give KERNEL SHAPE --config JSON, or --from a focused grid's JSON")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernel", nargs="?")
    parser.add_argument("shape", nargs="?", help="e.g. 128x28672")
    parser.add_argument("--config", help="the template configuration, as JSON")
    parser.add_argument("--from", dest="grid", metavar="JSON", help="a bench/focused_grid.py output: each shape's "
                                                                     "fastest configuration")
    parser.add_argument("--l2", choices=["cold", "warm"], default="cold")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    try:
        todo = _todo(args, parser)
    except AstraError as exc:  # bad input: one line naming it
        console.print(f"error: {exc}", highlight=False)
        return 2
    rows = []
    with EvaluationWorker(device_index=0, timeout_s=600) as worker, tempfile.TemporaryDirectory() as scratch:
        for kernel, shape, config in todo:
            rows.append(parity(worker, kernel, shape, config, args.l2, Path(scratch)))
            if args.json:
                Path(args.json).write_text(json.dumps({"device": worker.device, "l2": args.l2, "rows": rows}, indent=2))
        device = worker.device["name"]
    table = Table(title=f"one configuration in both harnesses, {device}, L2 {args.l2} (us, graph-replay medians)")
    for column in ("kernel", "shape", "worker", "exported, peers' harness", "torch.compile", "SGLang JIT",
                   "torch.compile over ours: worker's / peers' harness", "configuration"):
        table.add_column(column)

    def us(value) -> str:
        return f"{value:.3f}" if value else "-"

    for r in rows:
        over = [f"{r['torch_compile_us'] / r[k]:.3f}" if r.get(k) and r.get("torch_compile_us") else "-"
                for k in ("worker_us", "exported_us")]
        table.add_row(r["kernel"], "x".join(map(str, r["shape"].values())), us(r["worker_us"]), us(r["exported_us"]),
                      us(r["torch_compile_us"]), us(r.get("sglang_jit_us")), " / ".join(over),
                      json.dumps(r["config"], separators=(",", ":")))
    print_table(table)
    for r in rows:
        if r.get("exported_message"):
            console.print(f"{r['kernel']} {r['shape']}: exported {r['exported_status']}: {r['exported_message']}",
                          highlight=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
