"""`astra optimize`: the agent: plan, rewrite or template, test, profile, tune, report, with a checkpoint per step."""

from __future__ import annotations

import json
from pathlib import Path

from rich.markup import escape

from astra_kernels.cli.arguments import shapes_from
from astra_kernels.cli.output import console


def add_parser(sub) -> None:
    from astra_kernels.graph.context import RunContext
    from astra_kernels.tools.search.strategies import STRATEGIES

    defaults = RunContext()  # the agent's defaults are RunContext's, whoever starts the run
    optimize = sub.add_parser("optimize", help="the agent: a chat model rewrites and templates, the tuner searches")
    optimize.add_argument("kernel")
    optimize.add_argument("--model", help="provider:name, e.g. openai:o4-mini (default: none, the rule-based planner)")
    optimize.add_argument("--base-url", help="an OpenAI-compatible server (vLLM, Ollama, SGLang)")
    optimize.add_argument("--temperature", type=float)
    optimize.add_argument("--reasoning-effort", choices=["low", "medium", "high"])
    optimize.add_argument("--timeout", type=float, default=defaults.timeout_s,
                          help=f"seconds per model request (default {defaults.timeout_s:g})")
    optimize.add_argument("--rounds", type=int, default=defaults.rounds,
                          help=f"planner decisions (default {defaults.rounds})")
    optimize.add_argument("--retries", type=int, default=defaults.retries,
                          help=f"fixes per candidate (default {defaults.retries})")
    optimize.add_argument("--wall-seconds", type=float, default=defaults.wall_seconds,
                          help=f"the whole run (default {defaults.wall_seconds:g})")
    optimize.add_argument("--strategy", default=defaults.strategy, choices=["auto", *STRATEGIES])
    optimize.add_argument("--tune-seconds", type=float, default=defaults.tune_seconds,
                          help=f"search time per tune action (default {defaults.tune_seconds:g})")
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
    optimize.set_defaults(run=run)


def run(args) -> int:
    """The agent: plan, rewrite or template, test, profile, tune, report, with a checkpoint per step."""
    import uuid

    from astra_kernels.evaluators import open_evaluator
    from astra_kernels.graph import RunContext, build_graph, recursion_limit
    from astra_kernels.graph.checkpoints import sqlite_checkpointer
    from astra_kernels.graph.threads import run_thread
    from astra_kernels.kernels_sglang import suite
    from astra_kernels.nodes.reporter import render
    from astra_kernels.tools.errors import AstraError, NoGpuError

    folder = suite.load(args.kernel)
    out = Path(args.out or f"out/{folder.name}-agent")
    context = RunContext(
        model=args.model, base_url=args.base_url, temperature=args.temperature,
        reasoning_effort=args.reasoning_effort, timeout_s=args.timeout, rounds=args.rounds, retries=args.retries,
        wall_seconds=args.wall_seconds, strategy=args.strategy, tune_seconds=args.tune_seconds, gpu=args.gpu,
        approve=args.approve, results=str(args.store or out / "results.sqlite"), out=str(out))
    try:
        evaluator = open_evaluator(folder.name, context.results, replay=args.replay, gpu=args.gpu, needs=(
            "the agent measures every candidate, so it needs an NVIDIA GPU. What runs without one: "
            f"`astra space {folder.name}`, `astra check {folder.name}`, `astra optimize {folder.name} --replay "
            "STORE` (answers from a recorded results store), and the agent's tests (`pytest tests/agent`)."))
    except NoGpuError as exc:
        console.print(f"[yellow]no GPU here:[/yellow] {exc}", highlight=False)
        return 2
    except AstraError as exc:
        console.print(f"[red]error:[/red] {exc}", highlight=False)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    thread = args.resume or args.thread or f"{folder.name}-{uuid.uuid4().hex[:8]}"
    config = {"configurable": {"thread_id": thread}, "recursion_limit": recursion_limit(context)}
    payload = None if args.resume else {"kernel": folder.name, "shapes": shapes_from(folder, args) or [],
                                        **({"dtype": args.dtype} if args.dtype else {})}
    app = build_graph().compile(checkpointer=sqlite_checkpointer(args.checkpoints or out / "checkpoints.sqlite"))
    if args.resume and not app.get_state(config).values:
        console.print(f"[red]error:[/red] no checkpoint for thread {thread!r} in {args.checkpoints or out / 'checkpoints.sqlite'}")
        return 2
    console.print(f"thread {thread} (resume with `astra optimize {folder.name} --resume {thread}`)", highlight=False)

    def show(event: dict) -> None:
        console.print(f"[bold]{event['node']}[/bold] {escape(event['message'])}")

    def ask(question: dict) -> bool:
        return console.input(f"{question['question']} [y/N] ").strip().lower() in ("y", "yes")

    with evaluator:
        context.evaluator = evaluator
        final = run_thread(app, payload, config=config, context=context, on_event=show, answer=ask)
    if args.json:
        print(json.dumps(final.get("report"), indent=2))
    elif final.get("report"):
        console.print(render(final["report"]), markup=False, highlight=False)
        console.print(f"wrote {out / 'report.md'}, {out / 'report.json'}, {out / 'best.cu'}")
    return 0
