"""`astra tune`: search the template's space at each shape on the local GPU; write the results and a report."""

from __future__ import annotations

import contextlib
from pathlib import Path

from rich.markup import escape

from astra_kernels.cli.arguments import (
    add_measuring_arguments, count, positive_int, positive_seconds, sets_named_somewhere, shapes_from,
)
from astra_kernels.cli.cluster import add_cluster_arguments, check_cluster_arguments, cluster_pool
from astra_kernels.cli.output import cannot_measure, console, messages, progress_bar
from astra_kernels.tools.measuring.regimes import L2_REGIMES


def add_parser(sub) -> None:
    from astra_kernels.defaults import TUNE_SECONDS
    from astra_kernels.tools.search.strategies import STRATEGIES

    tune = sub.add_parser("tune", help="search a kernel's template on the local GPU (the offline main job)")
    tune.add_argument("kernel", nargs="+", help="one kernel or several (each to out/KERNEL)")
    tune.add_argument("--shapes", help="comma-separated shapes (default: the kernel's astra set, else serving); "
                                       "sweep@WIDTH is the sweep's 27 token counts at that width (sweep@5120: a "
                                       "model's own width along the token axis)")
    tune.add_argument("--set", help="a shape set of the kernel's spec, or several comma-separated (the shipped kernels have astra, serving and odd; every kernel has sweep, the token axis at its serving widths; the widths in no set that `astra bench --set sweep` adds stay untuned; with several kernels, each takes the named sets it has)")
    tune.add_argument("--dtype")
    tune.add_argument("--variant", default="default")
    tune.add_argument("--strategy", default="auto", choices=["auto", *STRATEGIES],
                      help="auto (default): exhaustive when the pruned space fits the budget, else tpe")
    tune.add_argument("--budget", type=positive_int, help="evaluations per shape (default: no limit)")
    tune.add_argument("--seconds", type=positive_seconds,
                      help="search seconds per shape (default: without --budget, "
                           f"{TUNE_SECONDS:.0f} s shared by the shapes)")
    tune.add_argument("--search-rounds", type=positive_int, default=3, help="planned search rounds per shape (default 3)")
    tune.add_argument("--at-least", type=count, default=8,
                      help="evaluations per shape that --seconds cannot cut short (default 8): a large "
                           "shape's evaluation takes seconds, and its share of the time alone may allow two")
    tune.add_argument("--max-spill-bytes", type=count, default=0,
                      help="prune configurations that spill more than this to local memory (default 0)")
    tune.add_argument("--verify", choices=["tuned", "sets"], default="tuned",
                      help="run the dispatch table's pick through the correctness checks at every shape "
                           "of every set (sets), or only at the tuned shapes (tuned, the default)")
    tune.add_argument("--sample", type=positive_int, help="search a seeded sample of this many configurations")
    tune.add_argument("--start", metavar="TABLE",
                      help="measure first, at each shape, the configuration this dispatch table runs there "
                           "(`shipped`: the table shipped for this GPU, for each GPU kind with --ray; or a "
                           "dispatch.json or astra tune output folder, for every kind); a parameter the template "
                           "gained after the table was made is set to its default. A re-tune after a template change then keeps the table's picks wherever the "
                           "search finds nothing faster; the start round counts against --budget and --seconds")
    tune.add_argument("--onto", metavar="TABLE",
                      help="keep this dispatch table's entries at the shapes not tuned now, so the table written "
                           "extends it (a model's width, token counts tuned again with a larger budget) instead of "
                           "replacing it (`shipped`: the table shipped for this GPU in the --l2 regime; or a "
                           "dispatch.json or astra tune output folder of the same kernel, dtype, variant, regime and GPU kind)")
    tune.add_argument("--l2", choices=L2_REGIMES, default="cold",
                      help="L2 regime every configuration is timed in: cold (rotating inputs larger than L2, the "
                           "default) or warm (inputs resident, as in decode); the dispatch table records it")
    tune.add_argument("--seed", type=int, default=0)
    tune.add_argument("--out", help="output folder (default out/KERNEL; with several kernels, OUT/KERNEL)")
    add_measuring_arguments(tune)
    add_cluster_arguments(tune, "spread the kernels and their shapes")
    tune.add_argument("--json", action="store_true")
    # renamed on 2026-11-29 (--rounds is the planner's, astra optimize's): refused, naming the new one
    tune.set_defaults(run=run, renamed_flags={"--rounds": "--search-rounds"})


def run(args) -> int:
    """Search the template's space at each shape on the local GPU; write the results and a report.

    On the local GPU, or replayed from a recorded results store (whose copy in the output folder
    becomes the run's store, so the recording itself is never written); several kernels one after
    another; with --ray, all of them at once over a cluster's GPUs."""
    from astra_kernels import suite
    from astra_kernels.tools.errors import UsageError

    check_cluster_arguments(args)
    kernels = list(dict.fromkeys(args.kernel))
    for flag, value in (("--start", args.start), ("--onto", args.onto)):
        if value is not None and not value.strip():
            raise UsageError(f"{flag} needs a table: shipped, a dispatch.json or an astra tune output folder")
        if value and value != "shipped" and len(kernels) > 1:
            raise UsageError(f"{flag} TABLE is one kernel's table: give one kernel, or {flag} shipped")
    if len(kernels) > 1 and args.store and args.replay and args.ray is None:
        raise UsageError("--store with --replay and several kernels: each replay works on its own copy of its "
                         "kernel's recording; leave --store out (each goes to OUT/KERNEL/results.sqlite)")
    if len(kernels) > 1:
        sets_named_somewhere([suite.load(k) for k in kernels], args)
    requests = tune_requests(args)
    for request in requests:  # every name, shape and dtype checked before any kernel is tuned
        suite.check_run(request.folder, request.shapes, request.dtype, request.variant)
    with contextlib.ExitStack() as stack:  # one run at a time per output folder (jobs/outputs.py)
        from astra_kernels.jobs import outputs

        for request in requests:
            stack.enter_context(outputs.held(output_folder(args, request.folder.spec.name), "tune"))
        if args.ray is not None:
            return _tune_on_cluster(args, requests)
        code, reports = 0, []
        for request in requests:
            code = max(code, _tune_one(args, request, reports))
    _print_json(args, reports)
    return code


def tune_requests(args) -> list:
    """Each kernel's tuning.TuneRequest, the one place the command line's choices become a tune's:
    its shapes, dtype, search options, the shapes its table is verified at, the --start table given
    (read before any GPU work, so a wrong file is one line; `shipped` is resolved once the GPU is
    known), and its budget: without --seconds or --budget, TUNE_SECONDS split over the shapes
    searched one after another (a kernel's own; on a cluster, where every shape runs at once, the
    most any kernel has)."""
    from astra_kernels import suite
    from astra_kernels.defaults import TUNE_SECONDS
    from astra_kernels.jobs import tuning
    from astra_kernels.tools.search.runner import Budget

    folders = [suite.load(k) for k in dict.fromkeys(args.kernel)]
    several = len(folders) > 1
    shapes = {f.spec.name: shapes_from(f, args, tuning=True, several=several) or f.spec.default_shapes() for f in folders}
    requests = []
    for folder in folders:
        spec = folder.spec
        dtype = args.dtype or spec.default_dtype()
        in_turn = max(map(len, shapes.values())) if args.ray is not None else len(shapes[spec.name])
        seconds = TUNE_SECONDS / in_turn if args.seconds is None and args.budget is None else args.seconds
        requests.append(tuning.TuneRequest(
            folder, shapes[spec.name], dtype, args.variant, strategy=args.strategy,
            budget=Budget(evaluations=args.budget, seconds=seconds, at_least=args.at_least), search_rounds=args.search_rounds,
            seed=args.seed, sample=args.sample, max_spill_bytes=args.max_spill_bytes, l2=args.l2,
            start=_table_argument("--start", args.start, args, spec, dtype),
            onto=_table_argument("--onto", args.onto, args, spec, dtype, same_l2=True), verify={"tuned": [], "sets": spec.all_shapes()}[args.verify]))
    return requests


def _print_json(args, reports: list) -> None:
    """--json: one report as an object, several as an array."""
    if args.json and reports:
        print(reports[0].model_dump_json(indent=2) if len(reports) == 1 else
              "[" + ",\n".join(r.model_dump_json(indent=2) for r in reports) + "]")


def _tune_on_cluster(args, requests: list) -> int:
    """Every kernel at its shapes over the cluster's GPUs, each GPU kind tuning for itself (run()
    has checked each kernel's shapes and dtype)."""
    from astra_kernels.jobs import cluster_tuning
    from astra_kernels.suite import recordings as shipped
    from astra_kernels.tools.measuring.results import ResultsStore

    names = [r.folder.spec.name for r in requests]
    recordings = {name: str(shipped.resolve(args.replay, name)) for name in names} if args.replay else None
    paths = {name: Path(args.store or output_folder(args, name) / "results.sqlite") for name in names}
    stores = {}
    with contextlib.ExitStack() as stack:
        for name, path in paths.items():
            stores[name] = stack.enter_context(ResultsStore(path))
        stack.enter_context(_saved_if_interrupted("every evaluation so far, in the results store(s) "
                                                  + ", ".join(str(p) for p in paths.values())))
        pool = stack.enter_context(cluster_pool(args, list(recordings.values()) if recordings else None,
                                                f"tuning {', '.join(stores)}"))
        kinds = pool.kinds
        for request in requests:  # a table given to --onto, before any GPU work: it is one GPU kind's
            for kind in kinds:
                _check_onto_gpu(args, request.onto, kind)
        starts = {(kind, r.folder.spec.name): table for kind in kinds for r in requests if r.start is None
                  and (table := _shipped_start(args, r.folder.spec, r.dtype, kind)) is not None}
        ontos = {(kind, r.folder.spec.name): table for kind in kinds for r in requests if r.onto is None
                 and (table := _shipped_onto(args, r.folder.spec, r.dtype, kind)) is not None}
        reports = cluster_tuning.tune_on_cluster(pool, requests, stores, recordings=recordings, starts=starts,
                                                 ontos=ontos)
    code, printed = 0, []
    for (kind, name), report in reports.items():
        request = requests[names.index(name)]
        out = output_folder(args, name)
        tuned_on = [k for k, n in reports if n == name]  # a replay: the kinds its recording holds
        out = out / cluster_tuning.kind_folder(kind, kinds) if len(tuned_on) > 1 else out
        code = max(code, finish(args, request.folder, report, out, paths[name]))
        printed.append(report)
    _print_json(args, printed)
    return code


def output_folder(args, name: str) -> Path:
    """--out for one kernel, OUT/KERNEL for several, else out/KERNEL."""
    if args.out:
        return Path(args.out) / name if len(set(args.kernel)) > 1 else Path(args.out)
    return Path(f"out/{name}")


def _tune_one(args, request, reports: list) -> int:
    import dataclasses

    from astra_kernels.evaluators import open_evaluator
    from astra_kernels.jobs import tuning
    from astra_kernels import suite
    from astra_kernels.suite import recordings
    from astra_kernels.tools.errors import AstraError
    from astra_kernels.tools.measuring.probes import record_launch_floor
    from astra_kernels.tools.measuring.results import ResultsStore
    from astra_kernels.tools.measuring.worker import EvaluationWorker
    from astra_kernels.tools.search.runner import StoredEvaluator

    folder = request.folder
    spec = folder.spec
    out = output_folder(args, spec.name)
    store_path = Path(args.store or out / "results.sqlite")
    # a replay is offered only for a kernel that has a shipped recording (a folder of the user's has none)
    replayable = any(r.kernel == spec.name for r in recordings.shipped()) and suite.is_shipped(spec.name)
    try:
        worker_context = open_evaluator(spec.name, store_path, replay=args.replay, gpu=args.gpu, needs=(
            "tuning measures kernels, so it needs an NVIDIA GPU. What runs without one: "
            + (f"`astra tune {spec.name} --replay recorded` (the same run, answered from the recording shipped "
               "for this kernel), " if replayable else "")
            + f"`astra space {spec.name} --shape {spec.label(request.shapes[0])}` (the pruned search space, compiled), "
            f"`astra check {spec.name}` (compiles the baseline and sampled configurations)."))
    except AstraError as exc:  # NoGpuError among them: what runs without one
        return cannot_measure(exc)
    with _saved_if_interrupted(f"every evaluation so far, in the results store {store_path}"), \
            worker_context as worker, ResultsStore(store_path) as store:
        evaluator = StoredEvaluator(worker, store, run_id=f"tune-{spec.name}")
        if request.start is None:
            request = dataclasses.replace(request, start=_shipped_start(args, spec, request.dtype, worker.device["name"]))
        if request.onto is None:
            request = dataclasses.replace(request, onto=_shipped_onto(args, spec, request.dtype, worker.device["name"]))
        _check_onto_gpu(args, request.onto, worker.device["name"])
        if isinstance(worker, EvaluationWorker):  # the GPU's launch floor, kept for a replay of the store
            record_launch_floor(worker, store)
        with progress_bar(f"tuning {spec.name} on {worker.device['name']}") as update:

            def progress(label, trial):
                if trial is None:
                    update(description=f"{spec.name} {label}")
                else:
                    update(advance=1)

            def compiling(label, done, total):
                update(done=done, total=total, description=f"{spec.name} {label}: compiling the space")
                if done == total:  # the search that follows counts evaluations, of no known total
                    update(restart=True, description=f"{spec.name} {label}: searching")

            report = tuning.tune(request, worker, evaluator, progress=progress, compiling=compiling,
                                 searched=None if console.is_terminal else _searched_line(args, spec.name))
    reports.append(report)
    return finish(args, folder, report, out, store_path)


def _searched_line(args, kernel: str):
    """Piped or logged (no progress bar), a line as each shape's search ends, flushed at once: a
    log otherwise got nothing for minutes, then the whole report."""
    from astra_kernels.jobs.tune_report import searched_line

    say = messages(args)

    def searched(shape) -> None:
        say.print(searched_line(kernel, shape), markup=False, highlight=False)
        say.file.flush()

    return searched


def _shipped_start(args, spec, dtype: str, device: str):
    """With --start shipped, the table shipped for `device` (a GPU kind's name) when it is of this
    dtype and variant, saying which: the one tuned in the --l2 regime, else the other one; None otherwise."""
    if args.start != "shipped":
        return None
    from astra_kernels.jobs.benchmark import shipped_table_for

    table = shipped_table_for(spec.name, device, dtype, args.variant, args.l2)
    messages(args).print(
        f"starting from the {spec.name} table shipped for {device} (tuned with {table.l2} L2)" if table else
        f"no {spec.name} table in {dtype} ({args.variant}) is shipped for {device}: the search starts from nothing",
        highlight=False)
    return table


def _shipped_onto(args, spec, dtype: str, device: str):
    """With --onto shipped, the table shipped for `device` in the --l2 regime (never the other
    regime's: DispatchTable.onto), saying which; None, said, where none is shipped."""
    if args.onto != "shipped":
        return None
    from astra_kernels.jobs.benchmark import shipped_table_for

    table = shipped_table_for(spec.name, device, dtype, args.variant, args.l2)
    table = table if table is not None and table.l2 == args.l2 else None
    messages(args).print(
        f"tuning onto the {spec.name} table shipped for {device} ({len(table.entries)} entries, {table.l2} L2)" if table
        else f"no {spec.name} table in {dtype} ({args.variant}) tuned with {args.l2} L2 is shipped for {device}: "
             "the table written holds this run's shapes only", highlight=False)
    return table


def _check_onto_gpu(args, table, device: str) -> None:
    """A table given to --onto was tuned on a GPU of `device`'s kind (where it says): else a
    UsageError before any GPU work, as the other checks of --onto are (a table of picks timed on
    two GPU kinds is neither's)."""
    from astra_kernels.suite.tuned_tables import same_kind
    from astra_kernels.tools.errors import UsageError

    if table is not None and not same_kind(table.tuned_on, device):
        raise UsageError(f"--onto {args.onto} was tuned on {table.tuned_on}, and this tune runs on {device}: each GPU "
                         "kind's picks are a table of their own (give --onto shipped, or a table tuned on this kind)")


def _table_argument(flag: str, value: str | None, args, spec, dtype: str, same_l2: bool = False):
    """A TABLE given to --start or --onto, read before any GPU work, so a wrong file is one line,
    not a lost run (`shipped` is resolved once the GPU is known). `same_l2`: the table must have
    been tuned in the --l2 regime (--onto: a table of one regime)."""
    from astra_kernels.jobs.benchmark import load_table
    from astra_kernels.tools.errors import AstraError, UsageError

    if not value or value == "shipped":
        return None
    try:
        table = load_table(Path(value))
    except AstraError as exc:  # no such file
        raise UsageError(f"{flag}: {exc}") from None
    except OSError as exc:
        raise UsageError(f"{flag} {value}: {exc.strerror or exc}") from None
    except ValueError as exc:  # pydantic's: not a dispatch table
        raise UsageError(f"{flag} {value}: not a dispatch table ({str(exc).splitlines()[0]})") from None
    if (table.kernel, table.dtype, table.variant) != (spec.name, dtype, args.variant):
        raise UsageError(f"{flag} {value} is a table of {table.kernel} in {table.dtype} ({table.variant}), "
                         f"not of {spec.name} in {dtype} ({args.variant})")
    if same_l2 and table.l2 != args.l2:
        raise UsageError(f"{flag} {value} was tuned with {table.l2} L2 and this tune times with {args.l2} L2: "
                         f"give --l2 {table.l2}, or a table of the {args.l2} regime")
    return table


def finish(args, folder, report, out: Path, store_path: Path) -> int:
    """Write a kernel's outputs, print its report, and say what failed (the exit code).

    The files are written to a staging folder and moved into `out` one by one (os.replace), so no
    reader sees half of them; a failed run (nothing measured, or a table that failed its checks)
    moves them only where `out` holds no earlier result, which it must never replace: that folder
    is left byte for byte as it was, and the failed run's report is the one printed."""
    from astra_kernels.jobs import checking, outputs, tune_report

    failed = (bool(report.unmeasured) and len(report.unmeasured) == len(report.shapes)) or bool(
        report.verification_failures) or bool(report.config_check_failures)
    with outputs.staged(out) as stage:
        staged = tune_report.write_outputs(folder, report, stage)
        kept = failed and outputs.holds_any(out, [p.name for p in staged])
        written = [] if kept else outputs.publish(staged, out)
    if not args.json:
        console.print(tune_report.render_markdown(report), markup=False, highlight=False)
        if written:
            console.print(f"wrote {', '.join(str(p) for p in written)}; results store {store_path}")
    say = messages(args)
    if kept:
        say.print(f"{out} keeps its earlier result: this run failed, so it replaced nothing there "
                  f"(its evaluations are in the results store {store_path})", highlight=False, markup=False)
    if unmeasured := report.unmeasured:
        why = "; ".join(f"{label} ({statuses})" for label, statuses in unmeasured.items())
        where = f"the recording {report.replayed_from} holds no evaluation there" if report.replayed_from else (
            "no evaluation there ran")
        if len(unmeasured) == len(report.shapes):
            say.print(f"[red]nothing was measured:[/red] {where}: {why}", highlight=False)
            return 1
        say.print(f"[yellow]not measured at {len(unmeasured)} of {len(report.shapes)} shapes:[/yellow] "
                      f"{where}: {why}", highlight=False)
    if lost := report.verification_lost:
        say.print(f"[yellow]not verified at {len(lost)} shape(s):[/yellow] the cluster lost the workers "
                      "checking them: " + ", ".join(v.label for v in lost) + f" (`astra verify {out}` checks them)",
                      highlight=False)
    if failures := report.verification_failures:
        say.print(f"[red]the dispatch table failed at {len(failures)} shape(s):[/red] "
                      + "; ".join(f"{v.label}: {v.status} {v.message[:120]}" for v in failures))
        return 1
    if failures := report.config_check_failures:
        say.print(f"[red]{len(failures)} check(s) of the table's configurations away from the tuned shapes "
                  f"failed[/red] (the report's last section): " + "; ".join(
                      escape(checking.describe(r)[:160]) for r in failures[:3]), highlight=False)
        return 1
    return 0


@contextlib.contextmanager
def _saved_if_interrupted(what: str):
    """On Ctrl-C or SIGTERM, tell the CLI's main what is kept (it prints the exception's notes):
    each evaluation is a row of the results store the moment it is measured, so the same command
    run again answers those from the store and goes on from there."""
    try:
        yield
    except KeyboardInterrupt as exc:
        exc.add_note(what)
        raise
