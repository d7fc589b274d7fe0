"""The `astra` command line."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from astra_kernels import __version__

console = Console()


def _parse_define(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not name.isidentifier():
        raise argparse.ArgumentTypeError(f"-D {text!r}: expected NAME or NAME=VALUE")
    return name, value if sep else "1"


def cmd_doctor(args) -> int:
    """Say what this machine can do: compile (NVRTC, headers) and launch (driver, GPU)."""
    from astra_kernels.tools.toolchain import device, driver, headers, nvrtc
    from astra_kernels.tools.errors import AstraError

    report: dict[str, object] = {"astra-kernels": __version__}
    ok = True
    try:
        report["nvrtc"] = nvrtc.nvrtc_version()
        report["nvrtc archs"] = ", ".join(f"sm_{a}" for a in nvrtc.supported_archs())
        report["cuda headers"] = str(headers.cuda_include_dir())
    except AstraError as exc:
        report["compile"] = f"unavailable: {exc}"
        ok = False
    arch = driver.local_arch(args.gpu)
    if arch is None:
        report["gpu"] = "none: compiling and CPU tests work here; launching, checking and timing need a GPU"
    else:
        gpu = device.Device(args.gpu)
        props = gpu.properties
        report["gpu"] = f"{props.name} ({props.arch}, {props.multiprocessors} SMs, {props.memory_bytes / 2**30:.0f} GiB)"
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        table = Table(show_header=False, box=None)
        for key, value in report.items():
            table.add_row(f"[bold]{key}", str(value))
        console.print(table)
    return 0 if ok else 1


def cmd_compile(args) -> int:
    """Compile a .cu file with NVRTC and print each kernel's registers, spills and shared memory."""
    from astra_kernels.tools.toolchain.nvrtc import CompileOptions
    from astra_kernels.tools.toolchain.compiler import compile_source
    from astra_kernels.tools.errors import CompileError

    path = Path(args.source)
    if not path.is_file():
        console.print(f"[red]no such file: {path}")
        return 2
    options = CompileOptions(
        arch=args.arch, fast_math=args.fast_math, max_registers=args.max_registers,
        defines=dict(args.define or []),
    )
    try:
        module = compile_source(path.read_text(), options, name=path.name, cache=not args.no_cache)
    except CompileError as exc:
        console.print(f"[red]{path}: {exc}", highlight=False)
        return 1
    kernels = [module.kernel(args.kernel)] if args.kernel else list(module.kernels.values())
    if args.json:
        print(json.dumps({
            "arch": module.arch, "nvrtc": module.nvrtc_version, "cached": module.cached,
            "compile_seconds": module.compile_seconds,
            "kernels": {k.name: k.resources.model_dump() for k in kernels},
        }, indent=2))
        return 0
    table = Table(title=f"{path.name} for {module.arch} (NVRTC {module.nvrtc_version}, "
                        f"{'cached' if module.cached else f'{module.compile_seconds * 1000:.0f} ms'})")
    for column in ("kernel", "params", "registers", "spill st/ld B", "smem B", "stack B"):
        table.add_column(column)
    for k in kernels:
        r = k.resources
        table.add_row(k.name, str(len(k.params)), str(r.registers),
                      f"{r.spill_store_bytes}/{r.spill_load_bytes}", str(r.shared_bytes),
                      str(r.stack_frame_bytes))
    console.print(table)
    return 0


def cmd_kernels(args) -> int:
    """List the suite: what each kernel computes, its dtypes, variants, shape sets and template space."""
    from astra_kernels.kernels_sglang import suite

    folders = [suite.load(name) for name in suite.names()]
    if args.json:
        print(json.dumps([{
            "name": f.name, "summary": f.spec.summary, "dtypes": f.spec.dtypes,
            "variants": list(f.spec.variants), "template_space": f.template.size(),
            "shapes": {k: [f.spec.label(s) for s in v] for k, v in f.spec.shapes.items()},
        } for f in folders], indent=2))
        return 0
    table = Table(title=f"The SGLang kernel suite ({len(folders)} kernels)", show_lines=True)
    for column in ("kernel", "computes", "dtypes / variants", "shapes", "template space"):
        table.add_column(column)
    for f in folders:
        shapes = "\n".join(
            f"{k} ({len(v)}): {', '.join(f.spec.label(s) for s in v[:3])}{', ...' if len(v) > 3 else ''}"
            for k, v in f.spec.shapes.items()
        )
        table.add_row(f.name, escape(f.spec.summary), f"{', '.join(f.spec.dtypes)}\n{', '.join(f.spec.variants)}",
                      shapes, f"{f.template.size()} configs, {len(f.template.parameters)} params")
    console.print(table)
    return 0


def _shapes(folder, args) -> list[dict] | None:
    if args.shapes:
        return [folder.spec.parse_shape(s) for s in args.shapes.split(",")]
    if args.set:
        if args.set not in folder.spec.shapes:
            raise SystemExit(f"{folder.name} has no shape set {args.set!r}; it has {', '.join(folder.spec.shapes)}")
        return folder.spec.shapes[args.set]
    return None


def cmd_check(args) -> int:
    """Compile and test the baseline and a sample of template configurations on the local GPU."""
    from rich.progress import Progress

    from astra_kernels.jobs import checking
    from astra_kernels.kernels_sglang import suite
    from astra_kernels.tools.measuring.worker import EvaluationWorker
    from astra_kernels.tools.toolchain.compiler import compile_many
    from astra_kernels.tools.toolchain.driver import gpu_available

    folder = suite.load(args.kernel)
    shapes = _shapes(folder, args)
    dtypes = args.dtype.split(",") if args.dtype else None
    variants = args.variant.split(",") if args.variant else None
    if not gpu_available():
        rows = checking.plan(folder, shapes=shapes, dtypes=dtypes, variants=variants,
                             samples=args.samples, arch=args.arch or "sm_90")
        unique = {(r.source, r.options.model_dump_json()): (r.source, r.options) for _, r in rows if r}
        outcomes = compile_many(unique.values())
        failed = [o for o in outcomes if o.module is None]
        console.print(f"[yellow]no GPU here:[/yellow] compiled {len(outcomes)} binaries of {folder.name} "
                      f"({len(failed)} failed) for {args.arch or 'sm_90'}; testing them needs an NVIDIA GPU.")
        for o in failed[:3]:
            console.print(o.error, highlight=False)
        return 1 if failed else 0
    with EvaluationWorker(device_index=args.gpu) as worker:
        rows = checking.plan(folder, shapes=shapes, dtypes=dtypes, variants=variants, samples=args.samples)
        with Progress(console=console, transient=True) as bar:
            task = bar.add_task(f"checking {folder.name} on {worker.device['name']}", total=len(rows))
            results = checking.run(rows, worker, time=args.time, progress=lambda _: bar.advance(task))
    failed = [r for r in results if r.status not in ("ok", "excluded")]
    if args.json:
        print(json.dumps([r.model_dump() for r in results], indent=2))
    else:
        table = Table(title=f"{folder.name} on {worker.device['name']}: {len(results) - len(failed)} of "
                            f"{len(results)} rows ok or excluded")
        for column in ("shape", "dtype", "variant", "which", "status", "us", "of copy bw", "note"):
            table.add_column(column)
        for r in results:
            which = "baseline" if r.which == "baseline" else "template " + " ".join(f"{k}={v}" for k, v in r.config.items())
            colour = "green" if r.status == "ok" else ("dim" if r.status == "excluded" else "red")
            table.add_row(r.shape, r.dtype, r.variant, which, f"[{colour}]{r.status}",
                          f"{r.median_us:.2f}" if r.median_us else "",
                          f"{r.fraction_of_copy_bandwidth:.0%}" if r.fraction_of_copy_bandwidth else "",
                          escape(r.message[:80]))
        console.print(table)
    return 1 if failed else 0


def cmd_space(args) -> int:
    """Show a template's space at one shape shrinking: constraints, compile, hardware limits."""
    from astra_kernels.kernels_sglang import suite
    from astra_kernels.tools.toolchain.device import Device
    from astra_kernels.tools.toolchain.driver import local_arch
    from astra_kernels.tools.search.hardware import limits_for
    from astra_kernels.tools.search.space import build_space

    folder = suite.load(args.kernel)
    spec = folder.spec
    shape = spec.parse_shape(args.shape)
    dtype = args.dtype or ("bf16" if "bf16" in spec.dtypes else spec.dtypes[0])
    arch = args.arch or local_arch(args.gpu) or "sm_90"
    sms = optin = None
    if args.arch is None and local_arch(args.gpu):
        props = Device(args.gpu).properties
        sms, optin = props.multiprocessors, props.max_shared_per_block_optin
    limits = limits_for(arch, sms, optin)
    env = suite.environment(spec, shape, dtype, args.variant, limits.multiprocessors, arch)
    configs = folder.template.sample_configs(args.sample, args.seed) if args.sample else None
    report = build_space(folder.template, env, suite.base_options(dtype, spec.variants[args.variant], arch),
                         limits, configs=configs, max_spill_bytes=args.max_spill_bytes)
    if args.json:
        print(report.model_dump_json(indent=2))
        return 0
    title = f"{spec.name} {args.shape} {dtype} {args.variant} on {arch}: {report.total} -> {report.after_hardware} configurations"
    table = Table(title=title)
    for column in ("stage", "left", "why configurations were cut (count)"):
        table.add_column(column)
    table.add_row("space", str(report.total), "")
    for stage, left in (("constraint", report.after_constraints), ("compile", report.after_compile),
                        ("hardware", report.after_hardware)):
        reasons = "\n".join(f"{escape(r)} ({n})" for r, n in report.reasons(stage)[:4])
        table.add_row(stage, str(left), reasons)
    console.print(table)
    return 0


def cmd_tune(args) -> int:
    """Search the template's space at each shape on the local GPU; write the results and a report."""
    from astra_kernels.kernels_sglang import recordings, suite
    from astra_kernels.tools.toolchain.driver import gpu_available

    folder = suite.load(args.kernel)
    spec = folder.spec
    shapes = _shapes(folder, args) or spec.shapes.get("astra") or spec.shapes["serving"]
    dtype = args.dtype or ("bf16" if "bf16" in spec.dtypes else spec.dtypes[0])
    if args.replay:
        return _tune(args, folder, shapes, dtype, replay=recordings.resolve(args.replay, folder.name))
    if not gpu_available():
        console.print(
            "[yellow]no GPU here:[/yellow] tuning measures kernels, so it needs an NVIDIA GPU. What runs "
            f"without one: `astra space {spec.name} --shape {spec.label(shapes[0])}` (the pruned search "
            f"space, compiled), `astra check {spec.name}` (compiles the baseline and sampled configurations).")
        return 2
    return _tune(args, folder, shapes, dtype)


def _replay_store(recording: Path, store_path: Path):
    """A ReplayWorker over a working copy of `recording` at `store_path` (the run's store), or None
    after saying why not."""
    from astra_kernels.tools.errors import AstraError
    from astra_kernels.tools.measuring.replay import ReplayWorker

    try:
        return ReplayWorker.from_recording(recording, store_path)
    except AstraError as exc:
        console.print(f"[red]error:[/red] {exc}", highlight=False)
        return None


def _tune(args, folder, shapes, dtype, replay: Path | None = None) -> int:
    """The tuning run proper, on the local GPU or replayed from a recorded results store (whose
    copy in the output folder becomes the run's store, so the recording itself is never written)."""
    from rich.progress import Progress

    from astra_kernels.jobs import tuning
    from astra_kernels.tools.measuring.worker import EvaluationWorker
    from astra_kernels.tools.measuring.results import ResultsStore
    from astra_kernels.tools.search.runner import Budget, StoredEvaluator

    spec = folder.spec
    out = Path(args.out or f"out/{spec.name}")
    store_path = Path(args.store or out / "results.sqlite")
    replayed = None
    if replay is not None and (replayed := _replay_store(replay, store_path)) is None:
        return 2
    seconds = args.seconds
    if seconds is None and args.budget is None:
        seconds = tuning.DEFAULT_SEARCH_SECONDS / len(shapes)
    budget = Budget(evaluations=args.budget, seconds=seconds, at_least=args.at_least)
    verify = {"tuned": [], "sets": spec.all_shapes()}[args.verify]
    worker_context = replayed or EvaluationWorker(device_index=args.gpu)
    with worker_context as worker, ResultsStore(store_path) as store:
        evaluator = StoredEvaluator(worker, store, run_id=f"tune-{spec.name}")
        with Progress(console=console, transient=True) as bar:
            task = bar.add_task(f"tuning {spec.name} on {worker.device['name']}", total=None)

            def progress(label, trial):
                if trial is None:
                    bar.update(task, description=f"{spec.name} {label}")
                else:
                    bar.advance(task)

            report = tuning.tune(folder, worker, evaluator, shapes=shapes, dtype=dtype, variant=args.variant,
                                 strategy=args.strategy, budget=budget, rounds=args.rounds, seed=args.seed,
                                 sample=args.sample, verify=verify, max_spill_bytes=args.max_spill_bytes,
                                 progress=progress)
    written = tuning.write_outputs(folder, report, out)
    if args.json:
        print(report.model_dump_json(indent=2))
    else:
        console.print(tuning.render_markdown(report), markup=False, highlight=False)
        console.print(f"wrote {', '.join(str(p) for p in written)}; results store {store_path}")
    if failures := report.verification_failures:
        console.print(f"[red]the dispatch table failed at {len(failures)} shape(s):[/red] "
                      + "; ".join(f"{v.label}: {v.status} {v.message[:120]}" for v in failures))
        return 1
    return 0


def cmd_verify(args) -> int:
    """Run a tuned output folder's dispatch table at every shape of the kernel's sets."""
    from astra_kernels.kernels_sglang import suite
    from astra_kernels.jobs import tuning
    from astra_kernels.tools.measuring.worker import EvaluationWorker
    from astra_kernels.tools.toolchain.driver import gpu_available
    from astra_kernels.tools.measuring.results import ResultsStore
    from astra_kernels.tools.search.runner import StoredEvaluator

    out = Path(args.out)
    report_path = out / "report.json"
    if not report_path.is_file():
        console.print(f"[red]error:[/red] {report_path} does not exist: verify takes the --out folder of `astra tune`")
        return 2
    report = tuning.TuneReport.model_validate_json(report_path.read_text())
    folder = suite.load(report.kernel)
    shapes = _shapes(folder, args) or folder.spec.all_shapes()
    if not gpu_available():
        console.print("[yellow]no GPU here:[/yellow] verifying runs the kernel, so it needs an NVIDIA GPU.")
        return 2
    with EvaluationWorker(device_index=args.gpu) as worker, ResultsStore(args.store or out / "results.sqlite") as store:
        if worker.device["name"] != report.device:
            console.print(f"[yellow]note:[/yellow] tuned on {report.device}, verifying on {worker.device['name']}")
        tuning.verify_dispatch(report, folder, worker, StoredEvaluator(worker, store, run_id=f"verify-{report.kernel}"),
                               shapes, progress=lambda label, _: console.print(label, highlight=False))
    tuning.write_outputs(folder, report, out)
    failures = report.verification_failures
    console.print(f"{len(report.verified) - len(failures)} of {len(report.verified)} shapes correct; "
                  f"report rewritten in {out / 'report.md'}")
    for v in failures:
        console.print(f"[red]{v.label}[/red]: {v.status} {v.message[:200]}", highlight=False)
    return 1 if failures else 0


def cmd_export(args) -> int:
    """Write a dispatch table as a standalone .cu, a Python callable on framework tensors, and a guide."""
    import shlex

    from astra_kernels.jobs.exporting import cuda_file as export
    from astra_kernels.kernels_sglang import suite

    source = export.resolve_source(args.source, args.gpu_kind, args.kernel)
    folder = suite.load(source.table.kernel)
    shapes = [folder.spec.parse_shape(s) for s in args.shapes.split(",")] if args.shapes else []
    out = Path(args.out or f"export/{source.table.kernel}")
    result = export.export(source, out, shapes=shapes, sms=args.sms, arch=args.arch,
                           command=shlex.join(["astra", "export", *args.argv]))
    if args.json:
        print(json.dumps({"out": str(result.out), "files": [str(f) for f in result.files],
                          "kernels": [b.name for b in result.binaries], "unrunnable": result.unrunnable}, indent=2))
        return 0
    console.print(f"{source.table.kernel} ({source.table.dtype}, {len(source.table.entries)} tuned shapes) from "
                  f"{source.shown}: {len(result.binaries)} kernels in {len(result.groups)} flag group(s)", highlight=False)
    for path in result.files:
        console.print(f"  {path}", highlight=False)
    for label, reason in result.unrunnable.items():
        console.print(f"[yellow]no configuration runs at {label}:[/yellow] {escape(reason)}", highlight=False)
    return 0


def _bench_shapes(folder, args) -> list[dict]:
    """--shapes, else the named sets (comma-separated; `all` is every set) that the kernel has;
    `decode` is the astra and serving shapes of at most DECODE_TOKENS tokens (issue 5's decode goal)."""
    from astra_kernels.jobs.benchmark import DECODE_TOKENS

    if args.shapes:
        return [folder.spec.parse_shape(s) for s in args.shapes.split(",")]
    wanted = list(folder.spec.shapes) if args.set == "all" else args.set.split(",")
    unknown = [w for w in wanted if w not in ("astra", "serving", "odd", "decode")]
    if unknown:
        raise SystemExit(f"unknown shape set(s) {', '.join(unknown)}: use astra, serving, odd, decode or all")
    decode = [s for name in ("astra", "serving") for s in folder.spec.shapes.get(name, [])
              if next(iter(s.values())) <= DECODE_TOKENS]
    seen, shapes = set(), []
    for name in wanted:
        for shape in decode if name == "decode" else folder.spec.shapes.get(name, []):
            if folder.spec.label(shape) not in seen:
                seen.add(folder.spec.label(shape))
                shapes.append(shape)
    return shapes


def cmd_bench(args) -> int:
    """Time baseline, tuned kernel and PyTorch peers at every shape, against both floors."""
    from astra_kernels.jobs import benchmark
    from astra_kernels.kernels_sglang import suite
    from astra_kernels.tools.measuring.worker import EvaluationWorker
    from astra_kernels.tools.toolchain.driver import gpu_available

    if args.from_json:
        report = benchmark.merge([benchmark.BenchReport.model_validate_json(Path(p).read_text())
                                  for p in args.from_json])
        return _bench_outputs(args, report)
    names = args.kernels.split(",") if args.kernels else suite.names()
    folders = [suite.load(n) for n in names]
    if args.shapes and len(folders) != 1:
        raise SystemExit("--shapes needs exactly one kernel (--kernels NAME)")
    kernels = {f.name: _bench_shapes(f, args) for f in folders}
    modes = () if args.no_torch else tuple(m for m in args.torch.split(",") if m)
    if unknown := [m for m in modes if m not in ("eager", "compile")]:
        raise SystemExit(f"--torch takes eager and/or compile, not {', '.join(unknown)}")
    if not gpu_available():
        console.print("[yellow]no GPU here:[/yellow] the benchmark times kernels, so it needs an NVIDIA GPU. "
                      "docs/benchmarks.md holds the latest measured table; `astra kernels` lists the shapes.")
        return 2
    out = Path(args.out) if args.out else None
    if out:
        out.mkdir(parents=True, exist_ok=True)

    def checkpoint(report) -> None:  # bench.json after every row: an interrupted run keeps its rows
        if out:
            (out / "bench.json").write_text(report.model_dump_json(indent=2))

    with EvaluationWorker(device_index=args.gpu, timeout_s=900) as worker:
        tables = {}
        for name in kernels:
            path = Path(args.tuned) / name if args.tuned else None
            tables[name] = (benchmark.load_table(path) if path and path.exists()
                            else benchmark.shipped_table(name, worker.device["name"]))
        missing = [n for n, t in tables.items() if t is None]
        if missing:
            console.print(f"[yellow]note:[/yellow] no dispatch table for {', '.join(missing)} on "
                          f"{worker.device['name']}: no tuned column there (run `astra tune`, then --tuned OUT)")
        report = benchmark.bench(worker, kernels, dtype=args.dtype, tables=tables, torch_modes=modes,
                                 command="astra bench " + " ".join(args.argv),
                                 input_layout=args.layout, pdl=args.pdl, checkpoint=checkpoint,
                                 progress=lambda label: console.print(f"[dim]{label}[/dim]", highlight=False))
    return _bench_outputs(args, report)


def _bench_outputs(args, report) -> int:
    from astra_kernels.jobs import benchmark

    out = Path(args.out) if args.out else None
    if args.json:
        print(report.model_dump_json(indent=2))
    else:
        table = Table(title=f"{report.device}, {report.dtype}, microseconds per call (graph replay, cold L2)")
        for column in benchmark.COLUMNS:
            table.add_column(column)
        for cells in benchmark.table_rows(report):
            table.add_row(*cells)
        console.print(table)
        if pdl_rows := benchmark.pdl_table_rows(report):
            table = Table(title=f"with programmatic dependent launch (PDL-chained empty kernel "
                                f"{report.launch_floor_pdl_us or float('nan'):.2f} us)")
            for column in benchmark.PDL_COLUMNS:
                table.add_column(column)
            for cells in pdl_rows:
                table.add_row(*cells)
            console.print(table)
        for line in report.goals():
            console.print(line, highlight=False)
    if out:
        out.mkdir(parents=True, exist_ok=True)
        (out / "bench.json").write_text(report.model_dump_json(indent=2))
        (out / "bench.md").write_text(benchmark.render_markdown(report))
        (out / "bench.svg").write_text(benchmark.chart(report))
        if not args.json:
            console.print(f"wrote {out / 'bench.json'}, {out / 'bench.md'}, {out / 'bench.svg'}")
    return 0


def cmd_optimize(args) -> int:
    """The agent: plan, rewrite or template, test, profile, tune, report, with a checkpoint per step."""
    import uuid

    from langgraph.types import Command

    from astra_kernels.graph import RunContext, build_graph, recursion_limit
    from astra_kernels.graph.checkpoints import sqlite_checkpointer
    from astra_kernels.kernels_sglang import recordings, suite
    from astra_kernels.nodes.reporter import render
    from astra_kernels.tools.toolchain.driver import gpu_available

    folder = suite.load(args.kernel)
    out = Path(args.out or f"out/{folder.name}-agent")
    context = RunContext(
        model=args.model, base_url=args.base_url, temperature=args.temperature,
        reasoning_effort=args.reasoning_effort, timeout_s=args.timeout, rounds=args.rounds, retries=args.retries,
        wall_seconds=args.wall_seconds, strategy=args.strategy, tune_seconds=args.tune_seconds, gpu=args.gpu,
        approve=args.approve, results=str(args.store or out / "results.sqlite"), out=str(out))
    if args.replay:
        context.evaluator = _replay_store(recordings.resolve(args.replay, folder.name), Path(context.results))
        if context.evaluator is None:
            return 2
    elif not gpu_available():
        console.print("[yellow]no GPU here:[/yellow] the agent measures every candidate, so it needs an NVIDIA "
                      f"GPU. What runs without one: `astra space {folder.name}`, `astra check {folder.name}`, "
                      f"`astra optimize {folder.name} --replay STORE` (answers from a recorded results store), "
                      "and the agent's tests (`pytest tests/test_agent_graph.py`).")
        return 2
    out.mkdir(parents=True, exist_ok=True)
    thread = args.resume or args.thread or f"{folder.name}-{uuid.uuid4().hex[:8]}"
    config = {"configurable": {"thread_id": thread}, "recursion_limit": recursion_limit(context)}
    payload = None if args.resume else {"kernel": folder.name, "shapes": _shapes(folder, args) or [],
                                        **({"dtype": args.dtype} if args.dtype else {})}
    app = build_graph().compile(checkpointer=sqlite_checkpointer(args.checkpoints or out / "checkpoints.sqlite"))
    if args.resume and not app.get_state(config).values:
        console.print(f"[red]error:[/red] no checkpoint for thread {thread!r} in {args.checkpoints or out / 'checkpoints.sqlite'}")
        return 2
    console.print(f"thread {thread} (resume with `astra optimize {folder.name} --resume {thread}`)", highlight=False)
    while True:
        # durability="sync": each step's checkpoint is on disk before the next step starts, so a
        # SIGKILL loses at most the step in flight (the default writes them in the background).
        for mode, chunk in app.stream(payload, config=config, context=context, stream_mode=["custom", "updates"],
                                      durability="sync"):
            if mode == "custom":
                console.print(f"[bold]{chunk['node']}[/bold] {escape(chunk['message'])}")
        pending = app.get_state(config).interrupts
        if not pending:
            break
        answer = console.input(f"{pending[0].value['question']} [y/N] ").strip().lower() in ("y", "yes")
        payload = Command(resume=answer)
    final = app.get_state(config).values
    if args.json:
        print(json.dumps(final.get("report"), indent=2))
    elif final.get("report"):
        console.print(render(final["report"]), markup=False, highlight=False)
        console.print(f"wrote {out / 'report.md'}, {out / 'report.json'}, {out / 'best.cu'}")
    return 0


def cmd_report(args) -> int:
    """Markdown, a self-contained HTML page and SVG charts from a results store; measures nothing."""
    from astra_kernels.jobs import reporting
    from astra_kernels.tools.errors import AstraError

    try:
        rendered = reporting.report(args.store, kernel=args.kernel, out=Path(args.out))
    except (AstraError, OSError) as exc:  # a missing, foreign or empty store; an unwritable --out
        console.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
        return 2
    if args.json:
        print(rendered.summary.model_dump_json(
            indent=2, exclude={"groups": {"__all__": {"shapes": {"__all__": {"convergence"}}}}}))
    else:
        console.print(rendered.markdown, markup=False, highlight=False)
        console.print(f"wrote {', '.join(str(p) for p in rendered.written)}", highlight=False)
    return 0


def build_parser() -> argparse.ArgumentParser:
    from astra_kernels.jobs.tuning import DEFAULT_SEARCH_SECONDS
    from astra_kernels.tools.search.strategies import STRATEGIES

    parser = argparse.ArgumentParser(
        prog="astra",
        description="astra-kernels: make SGLang's CUDA kernels faster, with every number measured.",
    )
    parser.add_argument("--version", action="version", version=f"astra-kernels {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    doctor = sub.add_parser("doctor", help="what this machine can do: compiler, headers, GPU")
    doctor.add_argument("--gpu", type=int, default=0, help="GPU index (default 0)")
    doctor.add_argument("--json", action="store_true", help="machine-readable output")
    doctor.set_defaults(func=cmd_doctor)

    comp = sub.add_parser("compile", help="compile a .cu file with NVRTC and show its resources")
    comp.add_argument("source", help="path to a CUDA C++ file")
    comp.add_argument("--kernel", help="report only this extern \"C\" kernel")
    comp.add_argument("--arch", help="target, e.g. sm_90 (default: the local GPU's, else sm_90)")
    comp.add_argument("-D", "--define", action="append", type=_parse_define, metavar="NAME=VALUE")
    comp.add_argument("--fast-math", action="store_true")
    comp.add_argument("--max-registers", type=int)
    comp.add_argument("--no-cache", action="store_true", help="compile even if cached")
    comp.add_argument("--json", action="store_true")
    comp.set_defaults(func=cmd_compile)

    kernels = sub.add_parser("kernels", help="list the SGLang kernel suite with its shapes")
    kernels.add_argument("--json", action="store_true")
    kernels.set_defaults(func=cmd_kernels)

    check = sub.add_parser("check", help="compile and test a kernel's baseline and template sample on the GPU")
    check.add_argument("kernel", help="a kernel of the suite (see `astra kernels`)")
    check.add_argument("--shapes", help="comma-separated shapes, e.g. 16x4096,64x8192 (default: every set)")
    check.add_argument("--set", help="one shape set: astra, serving or odd")
    check.add_argument("--dtype", help="comma-separated dtypes (default: all of the kernel's)")
    check.add_argument("--variant", help="comma-separated variants (default: all)")
    check.add_argument("--samples", type=int, default=4, help="template configurations per shape (default 4)")
    check.add_argument("--time", action="store_true", help="also time each correct configuration")
    check.add_argument("--arch", help="compile target when there is no GPU (default sm_90)")
    check.add_argument("--gpu", type=int, default=0)
    check.add_argument("--json", action="store_true")
    check.set_defaults(func=cmd_check)

    space = sub.add_parser("space", help="a template's search space at one shape, pruned stage by stage")
    space.add_argument("kernel")
    space.add_argument("--shape", required=True, help="e.g. 16x4096")
    space.add_argument("--dtype")
    space.add_argument("--variant", default="default")
    space.add_argument("--arch", help="target (default: the local GPU's, else sm_90)")
    space.add_argument("--sample", type=int, help="a seeded sample of this many configurations (default: all)")
    space.add_argument("--seed", type=int, default=0)
    space.add_argument("--max-spill-bytes", type=int, default=0)
    space.add_argument("--gpu", type=int, default=0)
    space.add_argument("--json", action="store_true")
    space.set_defaults(func=cmd_space)

    tune = sub.add_parser("tune", help="search a kernel's template on the local GPU (the offline main job)")
    tune.add_argument("kernel")
    tune.add_argument("--shapes", help="comma-separated shapes (default: the kernel's astra set, else serving)")
    tune.add_argument("--set", help="one shape set: astra, serving or odd")
    tune.add_argument("--dtype")
    tune.add_argument("--variant", default="default")
    tune.add_argument("--strategy", default="auto", choices=["auto", *STRATEGIES],
                      help="auto (default): exhaustive when the pruned space fits the budget, else tpe")
    tune.add_argument("--budget", type=int, help="evaluations per shape (default: no limit)")
    tune.add_argument("--seconds", type=float,
                      help="search seconds per shape (default: without --budget, "
                           f"{DEFAULT_SEARCH_SECONDS:.0f} s shared by the shapes)")
    tune.add_argument("--rounds", type=int, default=3, help="planned search rounds per shape (default 3)")
    tune.add_argument("--at-least", type=int, default=8,
                      help="evaluations per shape that --seconds cannot cut short (default 8): a large "
                           "shape's evaluation takes seconds, and its share of the time alone may allow two")
    tune.add_argument("--max-spill-bytes", type=int, default=0,
                      help="prune configurations that spill more than this to local memory (default 0)")
    tune.add_argument("--verify", choices=["tuned", "sets"], default="tuned",
                      help="run the dispatch table's pick through the correctness checks at every shape "
                           "of every set (sets), or only at the tuned shapes (tuned, the default)")
    tune.add_argument("--sample", type=int, help="search a seeded sample of this many configurations")
    tune.add_argument("--seed", type=int, default=0)
    tune.add_argument("--out", help="output folder (default out/KERNEL)")
    tune.add_argument("--store", help="results store (default OUT/results.sqlite)")
    tune.add_argument("--replay", metavar="STORE",
                      help="no GPU: answer every evaluation from this recorded results store (.sqlite or "
                           ".sqlite.gz, or `recorded` for the one shipped with the package), refusing what "
                           "it lacks; copied to the run's store first")
    tune.add_argument("--gpu", type=int, default=0)
    tune.add_argument("--json", action="store_true")
    tune.set_defaults(func=cmd_tune)

    optimize = sub.add_parser("optimize", help="the agent: a chat model rewrites and templates, the tuner searches")
    optimize.add_argument("kernel")
    optimize.add_argument("--model", help="provider:name, e.g. openai:o4-mini (default: none, the rule-based planner)")
    optimize.add_argument("--base-url", help="an OpenAI-compatible server (vLLM, Ollama, SGLang)")
    optimize.add_argument("--temperature", type=float)
    optimize.add_argument("--reasoning-effort", choices=["low", "medium", "high"])
    optimize.add_argument("--timeout", type=float, default=180.0, help="seconds per model request (default 180)")
    optimize.add_argument("--rounds", type=int, default=4, help="planner decisions (default 4)")
    optimize.add_argument("--retries", type=int, default=2, help="fixes per candidate (default 2)")
    optimize.add_argument("--wall-seconds", type=float, default=3600.0)
    optimize.add_argument("--strategy", default="auto", choices=["auto", *STRATEGIES])
    optimize.add_argument("--tune-seconds", type=float, default=100.0, help="search time per tune action")
    optimize.add_argument("--shapes")
    optimize.add_argument("--set")
    optimize.add_argument("--dtype")
    optimize.add_argument("--approve", action="store_true", help="ask before accepting a faster candidate")
    optimize.add_argument("--thread", help="name this run's checkpoint thread")
    optimize.add_argument("--resume", metavar="THREAD", help="continue a stopped run from its last checkpoint")
    optimize.add_argument("--checkpoints", help="checkpoint database (default OUT/checkpoints.sqlite)")
    optimize.add_argument("--store", help="results store (default OUT/results.sqlite)")
    optimize.add_argument("--out", help="output folder (default out/KERNEL-agent)")
    optimize.add_argument("--replay", metavar="STORE",
                          help="no GPU: answer every evaluation from this recorded results store (.sqlite or "
                               ".sqlite.gz, or `recorded` for the one shipped with the package), refusing "
                               "what it lacks; copied to the run's store first")
    optimize.add_argument("--gpu", type=int, default=0)
    optimize.add_argument("--json", action="store_true")
    optimize.set_defaults(func=cmd_optimize)

    bench = sub.add_parser("bench", help="time baseline, tuned kernel and PyTorch peers at every shape against the floors")
    bench.add_argument("--kernels", help="comma-separated (default: the whole suite)")
    bench.add_argument("--set", default="astra,serving",
                       help="shape sets, comma-separated: astra, serving, odd, decode (astra and serving shapes of "
                            "at most 16 tokens) or all (default astra,serving)")
    bench.add_argument("--shapes", help="comma-separated shapes of the one kernel given")
    bench.add_argument("--dtype", default="bf16", help="element type where the kernel has it (default bf16)")
    bench.add_argument("--tuned", help="folder of `astra tune` outputs, one KERNEL/ subfolder each "
                                       "(default: the tables shipped for this GPU)")
    bench.add_argument("--torch", default="eager,compile", help="PyTorch peers to time: eager, compile or both (default)")
    bench.add_argument("--no-torch", action="store_true", help="leave out the PyTorch peers")
    bench.add_argument("--layout", choices=["arena", "separate"], default="arena",
                       help="rotating input sets packed in one allocation (default) or one allocation per buffer")
    bench.add_argument("--pdl", action="store_true",
                       help="also time baseline, tuned kernel and copy launched with programmatic dependent launch "
                            "(sm_90+), as separate columns")
    bench.add_argument("--out", help="write bench.json, bench.md and bench.svg here")
    bench.add_argument("--from", dest="from_json", nargs="+", metavar="JSON",
                       help="no GPU: render (and merge) the bench.json of earlier runs instead of measuring")
    bench.add_argument("--gpu", type=int, default=0)
    bench.add_argument("--json", action="store_true")
    bench.set_defaults(func=cmd_bench)

    verify = sub.add_parser("verify", help="run a tuned dispatch table through the correctness checks at every shape")
    verify.add_argument("out", help="the output folder of `astra tune`")
    verify.add_argument("--shapes", help="comma-separated shapes (default: every shape of every set)")
    verify.add_argument("--set", help="one shape set: astra, serving or odd")
    verify.add_argument("--store", help="results store (default OUT/results.sqlite)")
    verify.add_argument("--gpu", type=int, default=0)
    verify.set_defaults(func=cmd_verify)

    export = sub.add_parser("export", help="a tuned kernel as a standalone .cu, a Python callable and an SGLang guide")
    export.add_argument("source", nargs="?", help="the --out folder of `astra tune` or a dispatch .json "
                                                  "(or none, with --gpu-kind and --kernel)")
    export.add_argument("--gpu-kind", help="export the table shipped for this GPU kind (h200)")
    export.add_argument("--kernel", help="the kernel of the shipped table (or a check on SOURCE's)")
    export.add_argument("--out", help="the folder to write (default export/KERNEL)")
    export.add_argument("--shapes", help="comma-separated shapes the .cu must cover besides the table's and the spec's")
    export.add_argument("--sms", type=int, default=132, help="multiprocessors of the target GPU (default 132: H100, H200)")
    export.add_argument("--arch", default="sm_90", help="the target architecture (default sm_90)")
    export.add_argument("--json", action="store_true")
    export.set_defaults(func=cmd_export)

    report = sub.add_parser("report", help="markdown and HTML with charts from a results store (no GPU needed)")
    report.add_argument("store", help="a results store (.sqlite or .sqlite.gz), the --out folder of `astra tune` "
                                      "(its results.sqlite), or `recorded` / `recorded:SESSION` with --kernel "
                                      "(a recording shipped with the package)")
    report.add_argument("--kernel", help="report only this kernel (needed with `recorded`)")
    report.add_argument("--out", default="out/report",
                        help="write report.md, report.html, report.json and the SVG charts here (default out/report)")
    report.add_argument("--json", action="store_true", help="print the summary as JSON instead of the markdown")
    report.set_defaults(func=cmd_report)
    return parser


def main(argv: list[str] | None = None) -> int:
    from astra_kernels.tools.errors import AstraError

    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)[1:]
    try:
        return args.func(args)
    except AstraError as exc:
        console.print(f"[red]error:[/red] {exc}", highlight=False)
        return 1

