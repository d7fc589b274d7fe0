"""`astra export`: write a dispatch table as a standalone .cu, a Python callable on framework tensors, and a guide."""

from __future__ import annotations

import json
from pathlib import Path

from rich.markup import escape

from astra_kernels.cli.arguments import positive_int
from astra_kernels.cli.output import console
from astra_kernels.tools.toolchain.targets import DEFAULT_ARCH, DEFAULT_SMS


def add_parser(sub) -> None:
    export = sub.add_parser("export", help="a tuned kernel as a standalone .cu, a Python callable and an SGLang guide")
    export.add_argument("source", nargs="?", help="the --out folder of `astra tune` or a dispatch .json "
                                                  "(or none, with --gpu-kind and --kernel)")
    from astra_kernels.suite import tuned_tables

    export.add_argument("--gpu-kind", help="export the table shipped for this GPU kind "
                                           f"({', '.join(tuned_tables.gpu_kinds())})")
    export.add_argument("--kernel", help="the kernel of the shipped table (or a check on SOURCE's)")
    export.add_argument("--l2", choices=list(tuned_tables.REGIMES),
                        help="the L2 regime of the shipped table: cold (the default; inputs streamed from memory) "
                             "or warm (inputs resident, as when the previous op has just written them); "
                             "with SOURCE, a check on its table's")
    export.add_argument("--out", help="the folder to write (default export/KERNEL)")
    export.add_argument("--shapes", help="comma-separated shapes the .cu must cover besides the table's and the spec's")
    export.add_argument("--sms", type=positive_int, default=DEFAULT_SMS,
                        help=f"multiprocessors of the target GPU (default {DEFAULT_SMS}: H100, H200)")
    export.add_argument("--arch", default=DEFAULT_ARCH, help=f"the target architecture (default {DEFAULT_ARCH})")
    export.add_argument("--build", action="store_true",
                        help="also build the PyTorch op's library now (nvcc and a CUDA build of PyTorch; cached by "
                             "content hash), instead of on the first runtime.torch_op.load")
    export.add_argument("--fib", metavar="TRACESET",
                        help="also write the table as a FlashInfer-Bench Solution (TVM-FFI binding, destination "
                             "passing), with its definition, workloads and this project's traces, into the trace set "
                             "TRACESET (a kernel `astra import-fib` wrote; `flashinfer-bench run --local TRACESET` "
                             "then judges it)")
    export.add_argument("--json", action="store_true")
    export.set_defaults(run=run)


def run(args) -> int:
    """Write a dispatch table as a standalone .cu, a Python callable on framework tensors, and a guide."""
    import shlex

    from astra_kernels.jobs import outputs
    from astra_kernels.jobs.exporting import cuda_file as export
    from astra_kernels import suite

    source = export.resolve_source(args.source, args.gpu_kind, args.kernel, args.l2)
    folder = suite.load(source.table.kernel)
    shapes = folder.spec.parse_shapes(args.shapes) if args.shapes is not None else []
    out = Path(args.out or f"export/{source.table.kernel}")
    with outputs.held(out, "export"):  # one run at a time per folder (jobs/outputs.py)
        result = export.export(source, out, shapes=shapes, sms=args.sms, arch=args.arch,
                               command=shlex.join(["astra", "export", *args.argv]))
    fib = None
    if args.fib:
        from astra_kernels.jobs.fib import solution

        fib = solution.write(source, result.out, Path(args.fib))
    library = _build(result.out) if args.build else None
    if args.json:
        print(json.dumps({"out": str(result.out), "files": [str(f) for f in result.files],
                          "kernels": [b.name for b in result.binaries], "unrunnable": result.unrunnable,
                          **({"library": str(library)} if library else {}), **({"fib": fib} if fib else {})},
                         indent=2))
        return 0
    console.print(f"{source.table.kernel} ({source.table.dtype}, {len(source.table.entries)} tuned shapes, "
                  f"tuned with {source.table.l2} L2) from "
                  f"{source.shown}: {len(result.binaries)} kernels in {len(result.groups)} flag group(s)", highlight=False)
    for path in result.files:
        console.print(f"  {path}", highlight=False)
    for label, reason in result.unrunnable.items():
        console.print(f"[yellow]no configuration runs at {label}:[/yellow] {escape(reason)}", highlight=False)
    if fib:
        console.print(f"FlashInfer-Bench solution {fib['solution']} ({fib['traces']} traces of this project's "
                      f"measurements) in {escape(args.fib)}:", highlight=False)
        for path in fib["files"]:
            console.print(f"  {escape(path)}", highlight=False)
        console.print(f"judge it: flashinfer-bench run --local {escape(args.fib)}", highlight=False)
    if library:
        console.print(f"  the PyTorch op's library: {library}", highlight=False)
    return 0


def _build(out: Path) -> Path:
    """The op's library for the folder just written (runtime/torch_op.build: nvcc against PyTorch's
    headers, cached). The export is already complete when this runs: a machine without nvcc gets its
    one-line error and keeps the folder, whose Python callable works without the op."""
    from astra_kernels.runtime import torch_op
    from astra_kernels.runtime.export_format import ExportError

    try:
        import torch  # noqa: F401  (the op is built against its headers)
    except ImportError:
        raise ExportError(f"--build needs PyTorch (with CUDA) to build the op against; {out} is written, and its "
                          "Python callable runs without it") from None
    return torch_op.build(out)
