"""`astra tune`: search the template's space at each shape on the local GPU; write the results and a report."""

from __future__ import annotations

from pathlib import Path


from astra_kernels.cli.arguments import shapes_from
from astra_kernels.cli.output import console


def add_parser(sub) -> None:
    from astra_kernels.defaults import TUNE_SECONDS
    from astra_kernels.tools.search.strategies import STRATEGIES

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
                           f"{TUNE_SECONDS:.0f} s shared by the shapes)")
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
    tune.set_defaults(run=run)


def run(args) -> int:
    """Search the template's space at each shape on the local GPU; write the results and a report.

    On the local GPU, or replayed from a recorded results store (whose copy in the output folder
    becomes the run's store, so the recording itself is never written)."""
    from rich.progress import Progress

    from astra_kernels.defaults import TUNE_SECONDS
    from astra_kernels.evaluators import open_evaluator
    from astra_kernels.jobs import tuning
    from astra_kernels.kernels_sglang import suite
    from astra_kernels.tools.errors import AstraError, NoGpuError
    from astra_kernels.tools.measuring.results import ResultsStore
    from astra_kernels.tools.search.runner import Budget, StoredEvaluator

    folder = suite.load(args.kernel)
    spec = folder.spec
    shapes = shapes_from(folder, args) or spec.default_shapes()
    dtype = args.dtype or spec.default_dtype()
    out = Path(args.out or f"out/{spec.name}")
    store_path = Path(args.store or out / "results.sqlite")
    try:
        worker_context = open_evaluator(spec.name, store_path, replay=args.replay, gpu=args.gpu, needs=(
            "tuning measures kernels, so it needs an NVIDIA GPU. What runs without one: "
            f"`astra space {spec.name} --shape {spec.label(shapes[0])}` (the pruned search space, compiled), "
            f"`astra check {spec.name}` (compiles the baseline and sampled configurations)."))
    except NoGpuError as exc:
        console.print(f"[yellow]no GPU here:[/yellow] {exc}", highlight=False)
        return 2
    except AstraError as exc:
        console.print(f"[red]error:[/red] {exc}", highlight=False)
        return 2
    seconds = args.seconds
    if seconds is None and args.budget is None:
        seconds = TUNE_SECONDS / len(shapes)
    budget = Budget(evaluations=args.budget, seconds=seconds, at_least=args.at_least)
    verify = {"tuned": [], "sets": spec.all_shapes()}[args.verify]
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
