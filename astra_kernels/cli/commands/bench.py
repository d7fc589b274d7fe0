"""`astra bench`: time baseline, tuned kernel and PyTorch peers at every shape, against both floors."""

from __future__ import annotations

import contextlib
from pathlib import Path

from rich.table import Table

from astra_kernels.cli.arguments import count
from astra_kernels.cli.output import console, messages, print_table
from astra_kernels.jobs import outputs
from astra_kernels.tools.measuring.regimes import L2_REGIMES
from astra_kernels.tools.errors import UsageError


def add_parser(sub) -> None:
    bench = sub.add_parser("bench", help="time baseline, tuned kernel and PyTorch peers at every shape against the floors")
    bench.add_argument("--kernels", help="comma-separated (default: the whole suite)")
    bench.add_argument("--set", default="astra,serving",
                       help="shape sets, comma-separated: astra, serving, odd, decode (astra and serving shapes of "
                            "at most 16 tokens), sweep (27 token counts from 1 to 16384 at the serving widths and a "
                            "few in no set; a chart per width) or all (default astra,serving)")
    bench.add_argument("--shapes", help="comma-separated shapes of the one kernel given; sweep@WIDTH is the sweep's "
                                        "27 token counts at that width")
    bench.add_argument("--dtype", default="bf16", help="element type where the kernel has it (default bf16)")
    bench.add_argument("--tuned", help="`astra tune`'s --out folder, or a folder of them, one KERNEL/ subfolder each "
                                       "(default: the tables shipped for this GPU and the --l2 regime, else "
                                       "for the other regime, which the report then names)")
    bench.add_argument("--torch", default="eager,compile", help="PyTorch peers to time: eager, compile or both (default)")
    bench.add_argument("--no-torch", action="store_true", help="leave out the PyTorch peers")
    bench.add_argument("--layout", choices=["arena", "separate"], default="arena",
                       help="rotating input sets packed in one allocation (default) or one allocation per buffer")
    bench.add_argument("--l2", choices=L2_REGIMES, default="cold",
                       help="L2 regime of every time: cold (rotating inputs larger than L2, the default) or warm "
                            "(one input set, resident as when the previous op has just touched it)")
    bench.add_argument("--pdl", action="store_true",
                       help="also time baseline, tuned kernel and copy launched with programmatic dependent launch "
                            "(sm_90+), as separate columns")
    bench.add_argument("--out", help="write bench.json, bench.md and bench.svg here; a folder whose bench.json was not "
                                     "made by this command is refused (a measuring run: unless --resume; --from: unless "
                                     "that bench.json is one of the files it renders)")
    bench.add_argument("--resume", action="store_true",
                       help="with --out: keep the rows its bench.json holds and measure only the shapes it lacks (or "
                            "whose baseline or tuned kernel failed), so a sweep cut by a call's end goes on in the next "
                            "call; refused where the kept rows were measured otherwise (GPU, L2 regime, dtype, --torch, "
                            "--layout, --pdl) or ran configurations this run's tables no longer pick")
    bench.add_argument("--from", dest="from_json", nargs="+", metavar="JSON",
                       help="no GPU: render (and merge) the bench.json of earlier runs instead of measuring")
    bench.add_argument("--gpu", type=count, default=0)
    bench.add_argument("--json", action="store_true")
    bench.set_defaults(run=run)


def bench_shapes(folder, args) -> list[dict]:
    """--shapes, else the named sets (comma-separated; `all` is every set) that the kernel has;
    `decode` is the astra and serving shapes of at most DECODE_TOKENS tokens (issue 5's decode goal);
    `sweep` the token axis at the serving widths and a few in no set (KernelSpec.sweep_shapes)."""
    from astra_kernels.jobs.benchmark import DECODE_TOKENS

    if args.shapes is not None:
        return folder.spec.parse_shapes(args.shapes)
    wanted = list(folder.spec.shapes) if args.set == "all" else args.set.split(",")
    unknown = [w for w in wanted if w not in ("astra", "serving", "odd", "decode", "sweep")]
    if unknown:
        raise UsageError(f"unknown shape set(s) {', '.join(unknown)}: use astra, serving, odd, decode, sweep or all")
    decode = [s for name in ("astra", "serving") for s in folder.spec.shapes.get(name, [])
              if next(iter(s.values())) <= DECODE_TOKENS]
    seen, shapes = set(), []
    for name in wanted:
        chosen = decode if name == "decode" else folder.spec.sweep_shapes() if name == "sweep" else \
            folder.spec.shapes.get(name, [])
        for shape in chosen:
            if folder.spec.label(shape) not in seen:
                seen.add(folder.spec.label(shape))
                shapes.append(shape)
    return shapes


def run(args) -> int:
    """Time baseline, tuned kernel and PyTorch peers at every shape, against both floors."""
    out = Path(args.out) if args.out else None
    # One run at a time writes the folder (a second is refused in one line), from before it reads
    # the bench.json it continues until its last file is written.
    with outputs.held(out, "benchmark") if out else contextlib.nullcontext():
        return _from_files(args, out) if args.from_json else _measure(args, out)


def _from_files(args, out: Path | None) -> int:
    """--from: render and merge earlier runs' reports, no GPU."""
    from astra_kernels.jobs import benchmark

    if args.resume:
        raise UsageError("--resume continues a measuring run; --from renders files: give one of them")
    own = out is not None and (out / "bench.json").is_file()
    if own and not any(Path(p).resolve() == (out / "bench.json").resolve() for p in args.from_json):
        raise UsageError(f"{out / 'bench.json'} holds rows that are not among the --from files: "
                         "give another --out, or name it in --from to merge it")
    if own and args.kernels:
        raise UsageError(f"--kernels would drop the other kernels' rows from {out / 'bench.json'}, one of the --from "
                         "files: give another --out")
    reports = [_read_report(Path(p)) for p in args.from_json]
    if twice := benchmark.measured_twice(reports):
        console.print(f"[yellow]note:[/yellow] {len(twice)} shape(s) measured in more than one file; each is "
                      f"the newest run's row: {', '.join(twice)}", highlight=False)
    report = benchmark.merge(reports)
    if args.kernels:
        wanted = args.kernels.split(",")
        present = sorted({row.kernel for row in report.rows})
        if unknown := [k for k in wanted if k not in present]:
            raise UsageError(f"--kernels {', '.join(unknown)}: not in {', '.join(args.from_json)}; "
                             f"they hold {', '.join(present) or 'no rows'}")
        report = report.model_copy(update={"rows": [r for r in report.rows if r.kernel in wanted]})
    return _bench_outputs(args, report)


def _measure(args, out: Path | None) -> int:
    """Measure on the local GPU, continuing OUT/bench.json with --resume; the folder is held."""
    from astra_kernels.jobs import benchmark
    from astra_kernels import suite
    from astra_kernels.tools.measuring.worker import EvaluationWorker
    from astra_kernels.tools.toolchain.driver import gpu_available

    names = args.kernels.split(",") if args.kernels else suite.names()
    folders = [suite.load(n) for n in names]
    if args.shapes and len(folders) != 1:
        raise UsageError("--shapes needs exactly one kernel (--kernels NAME)")
    kernels = {f.name: bench_shapes(f, args) for f in folders}
    modes = () if args.no_torch else tuple(m for m in args.torch.split(",") if m)
    if unknown := [m for m in modes if m not in ("eager", "compile")]:
        raise UsageError(f"--torch takes eager and/or compile, not {', '.join(unknown)}")
    earlier = _earlier_run(out, args)
    if earlier is not None:
        settings = benchmark.run_settings(modes, args.layout, args.pdl)
        if earlier.settings and earlier.settings != settings:
            raise UsageError(f"--resume: {out / 'bench.json'} was measured with " + ", ".join(
                f"{k} {v}" for k, v in earlier.settings.items()) + "; this run asks for " + ", ".join(
                f"{k} {v}" for k, v in settings.items()) + ": give the same options, or another --out")
        done = {(row.kernel, row.label) for row in earlier.rows if _finished(row)}
        kernels = {name: [s for s in shapes if (name, suite.load(name).spec.label(s)) not in done]
                   for name, shapes in kernels.items()}
        kernels = {name: shapes for name, shapes in kernels.items() if shapes}
        left = sum(map(len, kernels.values()))
        messages(args).print(f"--resume: {len(done)} row(s) of {out / 'bench.json'} kept as measured, {left} shape(s) "
                             "to measure", highlight=False)
        if not kernels:
            return _bench_outputs(args, earlier)
    if not gpu_available():
        console.print("[yellow]no GPU here:[/yellow] the benchmark times kernels, so it needs an NVIDIA GPU. "
                      "What runs without one: `astra bench --from BENCH.json ...` renders (and merges) the bench.json of "
                      "earlier runs; docs/benchmarks.md holds the latest measured table.", highlight=False)
        return 2

    def with_earlier(report):
        return benchmark.merge([earlier, report]) if earlier is not None and report.rows else earlier or report

    def checkpoint(report) -> None:  # bench.json after every row, whole: an interrupted run keeps its rows
        if out:
            outputs.write_whole(out / "bench.json", with_earlier(report).model_dump_json(indent=2))

    try:
        with EvaluationWorker(device_index=args.gpu, timeout_s=900) as worker:
            if earlier is not None and (earlier.device, earlier.l2, earlier.dtype) != (worker.device["name"], args.l2,
                                                                                       args.dtype):
                raise UsageError(f"--resume: {out / 'bench.json'} was measured on {earlier.device} with {earlier.l2} "
                                 f"L2 in {earlier.dtype}, not on {worker.device['name']} with {args.l2} L2 in "
                                 f"{args.dtype}: give another --out")
            tables = benchmark.bench_tables(list(kernels), worker.device["name"], args.l2,
                                            Path(args.tuned) if args.tuned else None)
            if earlier is not None:
                _check_kept_rows(earlier, tables, worker.device, out)
            missing = [n for n, t in tables.items() if t is None]
            say = messages(args)
            if missing:
                say.print(f"[yellow]note:[/yellow] no dispatch table for {', '.join(missing)} on "
                          f"{worker.device['name']}: no tuned column there (run `astra tune`, then --tuned OUT)")
            for name, table in tables.items():
                if table is not None and table.l2 != args.l2:
                    say.print(f"[yellow]note:[/yellow] the tuned column of {name} runs a table tuned with {table.l2} "
                              f"L2, timed here with {args.l2} L2", highlight=False)
            report = benchmark.bench(worker, kernels, dtype=args.dtype, tables=tables, torch_modes=modes,
                                     command="astra bench " + " ".join(args.argv),
                                     input_layout=args.layout, pdl=args.pdl, checkpoint=checkpoint, l2=args.l2,
                                     progress=lambda label: say.print(f"[dim]{label}[/dim]", highlight=False))
    except KeyboardInterrupt as exc:
        if out and (out / "bench.json").is_file():
            exc.add_note(f"{out / 'bench.json'}, every row measured (the same command with --resume goes on)")
        raise
    return _bench_outputs(args, with_earlier(report))


# statuses of a measurement that may come out otherwise the next time (evaluation.Status)
RETRIED = ("timeout", "compile_timeout", "lost", "toolchain_error")


def _finished(row) -> bool:
    """A kept row that --resume does not measure again: all but those whose baseline or tuned kernel
    ended in a status a retry may change (a time limit, a lost worker, a compiler that could not
    run). An incorrect, invalid, crashed or excluded result would come out the same each call, and a
    failed peer stays as it failed."""
    return not any(status.startswith(RETRIED) for status in (row.baseline_status, row.tuned_status))


def _check_kept_rows(earlier, tables: dict, device: dict, out: Path) -> None:
    """--resume adds rows to a report only where its kept rows ran what this run runs at their shapes
    (benchmark.tuned_column): the same table's pick (a table re-tuned between two calls, or another
    --tuned, would mix two tables' rows in one summary), excluded where it is excluded, and no tuned
    column where this run has no table. Only the kernels this run measures are asked; the others'
    rows are carried as they are."""
    from astra_kernels import suite
    from astra_kernels.jobs import benchmark

    sms = device.get("multiprocessors") or suite.DEFAULT_SMS
    for kernel, table in tables.items():
        if table is not None and earlier.table_l2.get(kernel, table.l2) != table.l2:
            raise UsageError(f"--resume: the kept {kernel} rows ran a table tuned with {earlier.table_l2[kernel]} L2; "
                             f"this run's is tuned with {table.l2} L2: give another --out")
        kept = [r for r in earlier.rows if r.kernel == kernel and _finished(r)]
        other = [r.label for r in kept if r.tuned_column != benchmark.tuned_column(table, r.shape, sms, device["arch"])]
        if other:
            raise UsageError(f"--resume: {len(other)} of the kept {kernel} rows ({', '.join(other[:3])}"
                             f"{', ...' if len(other) > 3 else ''}) ran another tuned column than this run would there "
                             "(a table re-tuned since, another --tuned, or none): give another --out")


def _earlier_run(out: Path | None, args):
    """The report in OUT/bench.json that --resume continues; None where there is none to continue.
    A measuring run never writes over one without --resume: a run cut early would leave fewer rows."""
    if args.resume and out is None:
        raise UsageError("--resume needs --out DIR: the folder whose bench.json it continues")
    if out is None or not (out / "bench.json").is_file():
        return None
    if not args.resume:
        raise UsageError(f"{out / 'bench.json'} holds an earlier run's rows: --resume measures only the shapes it "
                         "lacks and keeps them; or give another --out")
    return _read_report(out / "bench.json", flag="--resume")


def _read_report(path: Path, flag: str = "--from"):
    """One bench.json, or a UsageError naming the file and what is wrong with it."""
    from pydantic import ValidationError

    from astra_kernels.jobs import benchmark

    try:
        report = benchmark.BenchReport.model_validate_json(path.read_text())
    except OSError as exc:
        raise UsageError(f"{flag} {path}: {exc.strerror or exc}") from None
    except (ValidationError, UnicodeDecodeError) as exc:
        raise UsageError(f"{flag} {path} is not the bench.json of `astra bench --out` "
                         f"({str(exc).splitlines()[0]})") from None
    _check_times(path, report, flag)
    return report


LONGEST_US = 1e9  # no kernel call takes a quarter of an hour


def _check_times(path: Path, report, flag: str = "--from") -> None:
    """A file's times are what a kernel can take: positive, finite, under LONGEST_US (spreads and
    bandwidths not negative), else a UsageError naming the row and the field. A hand-edited or
    damaged bench.json once rendered -1e300 us as a 300-digit number and a speedup from it."""
    import math

    rows = [(f"{r.kernel} {r.label}", r) for r in report.rows]
    for where, model in [("the report", report), *rows]:
        for name, value in model:
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                continue
            if name.endswith("_us"):
                wrong = not (math.isfinite(value) and 0 < value <= LONGEST_US)
            elif name.endswith(("_spread", "_gbs")) or name == "bytes_moved":
                wrong = not (math.isfinite(value) and value >= 0)
            else:
                continue
            if wrong:
                raise UsageError(f"{flag} {path}: {where}: {name} {value!r} is not what a kernel measures "
                                 f"(times are positive and at most {LONGEST_US:.0e} us, spreads not negative)")


def _bench_outputs(args, report) -> int:
    from astra_kernels.jobs import benchmark

    out = Path(args.out) if args.out else None
    if out:  # written before anything is printed: `astra bench ... --out D | head -2` closes the pipe early
        out.mkdir(parents=True, exist_ok=True)
        outputs.write_whole(out / "bench.json", report.model_dump_json(indent=2))
        outputs.write_whole(out / "bench.md", benchmark.render_markdown(report))
        outputs.write_whole(out / "bench.svg", benchmark.chart(report))
        for name, svg in benchmark.sweep_charts(report).items():  # `--set sweep`: one per kernel and width
            outputs.write_whole(out / name, svg)
    if args.json:
        print(report.model_dump_json(indent=2))
    else:
        table = Table(title=f"{report.device}, {report.dtype}, microseconds per call (graph replay, {report.l2} L2)")
        for column in benchmark.COLUMNS:
            table.add_column(column)
        for cells in benchmark.table_rows(report):
            table.add_row(*cells)
        print_table(table)
        if pdl_rows := benchmark.pdl_table_rows(report):
            table = Table(title=f"with programmatic dependent launch (PDL-chained empty kernel "
                                f"{report.launch_floor_pdl_us or float('nan'):.2f} us)")
            for column in benchmark.PDL_COLUMNS:
                table.add_column(column)
            for cells in pdl_rows:
                table.add_row(*cells)
            print_table(table)
        for line in report.goals():
            console.print(line, highlight=False)
        if spent := report.time_spent():
            console.print(spent, highlight=False)
    if out and not args.json:
        console.print(f"wrote {out / 'bench.json'}, {out / 'bench.md'}, {out / 'bench.svg'}")
    return 0
