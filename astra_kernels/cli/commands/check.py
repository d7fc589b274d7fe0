"""`astra check`: compile and test the baseline and a sample of template configurations on the local GPU."""

from __future__ import annotations

import json

from rich.markup import escape
from rich.table import Table

from astra_kernels.cli.arguments import count, shapes_from
from astra_kernels.cli.output import console, print_table, progress_bar
from astra_kernels.tools.toolchain.targets import DEFAULT_ARCH


def add_parser(sub) -> None:
    check = sub.add_parser("check", help="compile and test a kernel's baseline and template sample on the GPU")
    check.add_argument("kernel", help="a kernel of the suite (see `astra kernels`)")
    check.add_argument("--shapes", help="comma-separated shapes, e.g. 16x4096,64x8192 (default: every set)")
    check.add_argument("--set", help="a shape set of the kernel's spec, or several comma-separated (the shipped kernels have astra, serving and odd; every kernel has sweep, the token axis at its serving widths)")
    check.add_argument("--dtype", help="comma-separated dtypes (default: all of the kernel's)")
    check.add_argument("--variant", help="comma-separated variants (default: all)")
    check.add_argument("--samples", type=count, default=4, help="template configurations per shape (default 4)")
    check.add_argument("--time", action="store_true", help="also time each correct configuration")
    check.add_argument("--table", metavar="TABLE",
                       help="check every configuration a dispatch table can run instead of a sample: a dispatch.json, "
                            "an `astra tune` --out folder, or `shipped` (the tables shipped for this GPU's kind, "
                            "each L2 regime); by default at the kernel's odd shapes, in all of its dtypes and variants")
    check.add_argument("--arch", help=f"compile target when there is no GPU (default {DEFAULT_ARCH})")
    check.add_argument("--gpu", type=count, default=0)
    check.add_argument("--json", action="store_true")
    check.set_defaults(run=run)


def run(args) -> int:
    """Compile and test the baseline and a sample of template configurations on the local GPU."""
    from astra_kernels.jobs import checking, new_kernel
    from astra_kernels import suite
    from astra_kernels.tools.measuring.worker import COMPILE_TIMEOUT_S, EvaluationWorker
    from astra_kernels.tools.toolchain.compiler import compile_many
    from astra_kernels.tools.toolchain.driver import gpu_available

    folder = suite.load(args.kernel)
    shapes = shapes_from(folder, args)
    dtypes = args.dtype.split(",") if args.dtype else None
    variants = args.variant.split(",") if args.variant else None
    tables = _tables(args, folder)  # read before any GPU work: a wrong file is one line
    if args.table == "shipped" and not gpu_available():
        console.print("[yellow]no GPU here:[/yellow] `--table shipped` takes the tables of the GPU it runs on; "
                      "give a dispatch.json to compile a table's configurations here")
        return 2

    def planned(device: str = "", sms: int = suite.DEFAULT_SMS, arch: str | None = None):
        measuring = dict(time=args.time, stream_timing=False)  # timed only with --time, by graph replay
        if tables is None:
            return checking.plan(folder, shapes=shapes, dtypes=dtypes, variants=variants, samples=args.samples,
                                 sms=sms, arch=arch, **measuring)
        return [row for table in tables(device) for row in checking.table_plan(
            folder, table, shapes=shapes, dtypes=dtypes, variants=variants, sms=sms, arch=arch, **measuring)]
    todo = new_kernel.unfinished(folder.path)  # a folder from `astra new` still to fill in: said, then compiled
    for line in todo:
        console.print(f"[yellow]{new_kernel.TODO}[/yellow] {escape(line)}", highlight=False)
    # the folder's own Python, run here on the CPU before anything compiles (not while TODOs remain)
    cpu_runs = [] if todo else [
        (checking.reference_problems, f"{folder.name}'s reference fails on this machine's CPU (above), before "
         "anything is compiled: fix reference.py (or make_inputs) and run astra check again."),
        (checking.peer_problems, f"{folder.name}'s PyTorch peer disagrees with its reference on this machine's CPU "
         "(above): fix peer.py (FORMAT.md, \"The PyTorch peer\") and run astra check again.")]
    for run_here, verdict in cpu_runs:
        if problems := run_here(folder, dtypes=dtypes, variants=variants):
            for line in problems:
                console.print(f"[red]error:[/red] {escape(line)}", highlight=False)
            console.print(verdict, highlight=False)
            return 1
    if todo or not gpu_available():
        rows = planned(arch=args.arch or DEFAULT_ARCH)
        unique = {}  # each binary once, with the first row that asked for it (named in its error)
        for row, r in rows:
            if r:
                unique.setdefault((r.source, r.options.model_dump_json()), (row, (r.source, r.options)))
        # the worker's compile deadline: a compile that never ends stops, named, as on a GPU
        with progress_bar(f"compiling {folder.name} for {args.arch or DEFAULT_ARCH}") as update:
            outcomes = compile_many([job for _, job in unique.values()], timeout_s=COMPILE_TIMEOUT_S,
                                    progress=lambda done, total: update(done=done, total=total))
        failed = [o for o in outcomes if o.module is None]
        said = checking.compile_failures([(row, o.error if o.module is None else None)
                                          for (row, _), o in zip(unique.values(), outcomes)])
        if todo:
            console.print(f"{folder.name} is not finished: {len(todo)} lines marked {new_kernel.TODO} (above); "
                          f"compiled {len(outcomes)} binaries ({len(failed)} failed) for {args.arch or DEFAULT_ARCH}. "
                          "Fill them in and run astra check again.", highlight=False)
            for line in said:
                console.print(line, markup=False, highlight=False)  # compiler text: `x[i]` is no markup
            return 1
        console.print(f"[yellow]no GPU here:[/yellow] compiled {len(outcomes)} binaries of {folder.name} "
                      f"({len(failed)} failed) for {args.arch or DEFAULT_ARCH}; testing them needs an NVIDIA GPU.")
        for line in said:
            console.print(line, markup=False, highlight=False)  # compiler text: `x[i]` is no markup
        return 1 if failed else 0
    with EvaluationWorker(device_index=args.gpu) as worker:
        rows = planned(worker.device["name"], worker.device.get("multiprocessors") or suite.DEFAULT_SMS,
                       worker.device["arch"])
        with progress_bar(f"checking {folder.name} on {worker.device['name']}") as update:
            update(total=len(rows))
            results = checking.run(rows, worker, progress=lambda _: update(advance=1))
    failed = [r for r in results if r.status not in ("ok", "excluded")]
    if args.json:
        print(json.dumps([r.model_dump() for r in results], indent=2))
    else:
        table = Table(title=f"{folder.name} on {worker.device['name']}: {len(results) - len(failed)} of "
                            f"{len(results)} rows ok or excluded")
        for column in ("shape", "dtype", "variant", "which", "status", "us", "of copy bw", "note"):
            table.add_column(column)
        for r in results:
            which = r.which if not r.config else r.which + " " + " ".join(f"{k}={v}" for k, v in r.config.items())
            colour = "green" if r.status == "ok" else ("dim" if r.status == "excluded" else "red")
            table.add_row(r.shape, r.dtype, r.variant, which, f"[{colour}]{r.status}",
                          f"{r.median_us:.2f}" if r.median_us else "",
                          f"{r.fraction_of_copy_bandwidth:.0%}" if r.fraction_of_copy_bandwidth else "",
                          escape(r.message[:80]))
        print_table(table)
    return 1 if failed else 0


def _tables(args, folder):
    """None without --table; else a function of the GPU's name giving the tables to check: the
    file's (read now, so a wrong path is a one-line error before any work), or those shipped for
    that GPU's kind."""
    from astra_kernels.jobs.benchmark import load_table, shipped_table
    from astra_kernels.suite.tuned_tables import REGIMES
    from astra_kernels.tools.errors import AstraError, UsageError

    if not args.table:
        return None
    if args.table == "shipped":
        def shipped(device: str):
            found = [t for r in REGIMES if (t := shipped_table(folder.name, device, r)) is not None]
            if not found:
                raise UsageError(f"no {folder.name} table is shipped for {device}")
            return found
        return shipped
    try:
        table = load_table(args.table)
    except AstraError as exc:
        raise UsageError(f"--table: {exc}") from None
    except OSError as exc:
        raise UsageError(f"--table {args.table}: {exc.strerror or exc}") from None
    except ValueError as exc:  # pydantic's: not a dispatch table
        raise UsageError(f"--table {args.table}: not a dispatch table ({str(exc).splitlines()[0]})") from None
    if table.kernel != folder.name:
        raise UsageError(f"--table {args.table} is a table of {table.kernel}, not of {folder.name}")
    return lambda _device: [table]
