"""`astra import-fib DEFINITION.json --dir DIR`: a kernel folder from a FlashInfer-Bench definition
(jobs/fib/importing.py)."""

from __future__ import annotations

import json
from pathlib import Path

from rich.markup import escape

from astra_kernels.cli.output import console


def add_parser(sub) -> None:
    command = sub.add_parser(
        "import-fib",
        help="write a kernel folder from a FlashInfer-Bench definition (and its workloads), to tune and export back",
        description="Reads a FlashInfer-Bench definition (JSON) and, with --workloads, its workload file (JSON lines), "
                    "recognises it as a kernel family this project has a template for (rmsnorm; fused add + rmsnorm "
                    "out of place; a gated activation), proves the match by running the definition's reference on "
                    "the CPU against the family's math, and writes DIR/<definition name>/: the family's baseline and "
                    "template, the definition's reference as the folder's (float64) and as its PyTorch peer, the "
                    "workloads as the `workloads` shape set. A definition no family computes gets the folder `astra new` "
                    "would write: the spec, reference and peer filled in, the kernel marked ASTRA-TODO. "
                    "The reference is Python that FlashInfer-Bench runs too: "
                    "import only definitions you would run. Needs PyTorch.")
    command.add_argument("definition", metavar="DEFINITION.json")
    command.add_argument("--workloads", metavar="FILE.jsonl", help="the definition's workloads (FlashInfer-Bench's "
                         "workload traces, one JSON a line); default: tokens 1 to 16384 at the definition's width")
    command.add_argument("--dir", dest="dest", required=True, metavar="DIR",
                         help="where the kernel folder goes (a --kernels-dir directory)")
    command.add_argument("--force", action="store_true", help="write over a folder an earlier import-fib left in DIR")
    command.add_argument("--json", action="store_true")
    command.set_defaults(run=run)


def run(args) -> int:
    from astra_kernels.jobs.fib import importing

    result = importing.import_definition(args.definition, Path(args.dest).expanduser(),
                                         workloads_path=args.workloads, force=args.force)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    console.print(escape(importing.describe(result)), highlight=False)
    name, dest = result["definition"], escape(str(args.dest))
    console.print(f"Next: astra check {name} --kernels-dir {dest}; astra tune {name} --kernels-dir {dest} --out "
                  f"out/{name}; astra export out/{name} --kernels-dir {dest} --fib TRACESET", highlight=False)
    return 0
