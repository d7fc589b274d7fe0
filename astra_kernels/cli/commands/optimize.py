"""`astra optimize`: the agent: plan, rewrite or template, test, profile, tune, report, with a checkpoint per step."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from rich.markup import escape

from astra_kernels.cli.arguments import (
    add_measuring_arguments, count, positive_int, positive_seconds, shapes_from,
)
from astra_kernels.cli.cluster import add_cluster_arguments, check_cluster_arguments, cluster_pool
from astra_kernels.cli.output import cannot_measure, console, messages, progress_bar
from astra_kernels.tools.measuring.regimes import L2_REGIMES


def add_agent_arguments(parser) -> None:
    """The agent's model, budget and search settings, as `astra optimize` and `astra eval-agent`
    take them (RunContext's fields; agent_settings reads them back)."""
    from astra_kernels.nodes.context import RunContext
    from astra_kernels.nodes.shared.presets import CHAT, REASONING
    from astra_kernels.tools.search.strategies import STRATEGIES

    defaults = RunContext()  # the agent's defaults are RunContext's, whoever starts the run
    # flags renamed on 2026-11-29 so that no name means two things: refused, naming the new one
    parser.set_defaults(renamed_flags={"--candidates": "--best-of", "--retries": "--fixes"})
    parser.add_argument("--model", help="provider:name, e.g. openai:o4-mini (default: none, the rule-based planner)")
    parser.add_argument("--base-url", help="an OpenAI-compatible server (vLLM, Ollama, SGLang)")
    parser.add_argument("--temperature", type=float)
    parser.add_argument("--reasoning-effort", choices=["low", "medium", "high"])
    parser.add_argument("--planner-model", help="provider:name for the planner (default: --model)")
    parser.add_argument("--coder-model", help="provider:name for the generator and templater (default: --model)")
    parser.add_argument("--planner-temperature", type=float)
    parser.add_argument("--coder-temperature", type=float)
    parser.add_argument("--planner-reasoning-effort", choices=["low", "medium", "high"])
    parser.add_argument("--coder-reasoning-effort", choices=["low", "medium", "high"])
    parser.add_argument("--max-tokens", type=positive_int, metavar="N",
                        help=f"output tokens per answer, every role (default: the model's preset: planner "
                             f"{CHAT.planner_max_tokens}, coder {CHAT.coder_max_tokens}; a reasoning model "
                             f"(o1-o4, gpt-5, *-reasoner, *-r1, qwq) {REASONING.planner_max_tokens} and "
                             f"{REASONING.coder_max_tokens})")
    parser.add_argument("--best-of", type=positive_int, default=defaults.best_of, metavar="N",
                        help=f"rewrites asked for each round, compiled in parallel, timed one by one "
                             f"(default {defaults.best_of})")
    parser.add_argument("--timeout", type=positive_seconds, default=defaults.timeout_s,
                        help=f"seconds per model request (default {defaults.timeout_s:g})")
    parser.add_argument("--token-budget", type=positive_int, metavar="N",
                        help="tokens (in and out) the run's model requests may use in all; once spent, no request "
                             "is sent: the planner takes the rules and a draft fails saying so (default: no limit)")
    parser.add_argument("--rounds", type=positive_int, default=defaults.rounds,
                        help=f"planner decisions (default {defaults.rounds})")
    parser.add_argument("--fixes", type=count, default=defaults.fixes,
                        help=f"fixes per candidate (default {defaults.fixes})")
    parser.add_argument("--wall-seconds", type=positive_seconds, default=defaults.wall_seconds,
                        help=f"the whole run (default {defaults.wall_seconds:g})")
    parser.add_argument("--strategy", default=defaults.strategy, choices=["auto", *STRATEGIES])
    parser.add_argument("--l2", choices=L2_REGIMES, default=defaults.l2,
                        help="L2 regime every candidate is timed in: cold (rotating inputs, the default) or warm "
                             "(inputs resident, as in decode)")
    parser.add_argument("--tune-seconds", type=positive_seconds, default=defaults.tune_seconds,
                        help=f"search time per tune action (default {defaults.tune_seconds:g})")
    parser.add_argument("--tune-sample", type=positive_int, metavar="N",
                        help="each tune action searches a seeded sample of N configurations of the space (with the "
                             "start table's picks), so a search that measures them all ends the same on a loaded "
                             "machine as on an idle one (default: the whole space)")
    parser.add_argument("--no-search-floor", dest="search_floor", action="store_false",
                        help="start from the baseline alone, without first measuring the table shipped for this GPU "
                             "(the search floor every candidate otherwise competes with)")
    parser.add_argument("--no-nsight", dest="nsight", action="store_false",
                        help="do not profile the slowest shape of each class with Nsight Compute after each round "
                             "(done where ncu is installed and the run measures on a GPU of this machine)")


def agent_settings(args) -> dict:
    """RunContext's fields from add_agent_arguments' flags."""
    return dict(
        model=args.model, base_url=args.base_url, temperature=args.temperature,
        reasoning_effort=args.reasoning_effort, planner_model=args.planner_model, coder_model=args.coder_model,
        planner_temperature=args.planner_temperature, coder_temperature=args.coder_temperature,
        planner_reasoning_effort=args.planner_reasoning_effort, coder_reasoning_effort=args.coder_reasoning_effort,
        **({"planner_max_tokens": args.max_tokens, "coder_max_tokens": args.max_tokens} if args.max_tokens else {}),
        best_of=args.best_of, timeout_s=args.timeout, token_budget=args.token_budget, rounds=args.rounds,
        fixes=args.fixes, wall_seconds=args.wall_seconds, strategy=args.strategy, l2=args.l2,
        tune_seconds=args.tune_seconds, tune_sample=args.tune_sample, gpu=args.gpu, search_floor=args.search_floor, nsight=args.nsight)


def add_parser(sub) -> None:
    optimize = sub.add_parser("optimize", help="the agent: a chat model rewrites and templates, the tuner searches")
    optimize.add_argument("kernel")
    add_agent_arguments(optimize)
    optimize.add_argument("--shapes")
    optimize.add_argument("--set")
    optimize.add_argument("--dtype")
    optimize.add_argument("--approve", action="store_true", help="ask before accepting a faster candidate")
    optimize.add_argument("--thread", help="name this run's checkpoint thread")
    optimize.add_argument("--resume", metavar="THREAD", help="continue a stopped run from its last checkpoint")
    optimize.add_argument("--checkpoints", help="checkpoint database (default OUT/checkpoints.sqlite)")
    optimize.add_argument("--out", help="output folder (default out/KERNEL-agent)")
    add_measuring_arguments(optimize)
    add_cluster_arguments(optimize, "test each round's candidates, and tune, at once")
    optimize.add_argument("--json", action="store_true")
    optimize.set_defaults(run=run)


def run(args) -> int:
    """The agent: plan, rewrite or template, test, profile, tune, report, with a checkpoint per step;
    its output folder held for the run, so a second run into it is refused (jobs/outputs.py)."""
    from astra_kernels.jobs import outputs
    from astra_kernels import suite

    with outputs.held(Path(args.out or f"out/{suite.load(args.kernel).name}-agent"), "optimize"):
        return _optimize(args)


def _optimize(args) -> int:
    import uuid

    from astra_kernels.evaluators import open_evaluator
    from astra_kernels.graph import RunContext, build_graph, recursion_limit
    from astra_kernels.graph.checkpoints import sqlite_checkpointer
    from astra_kernels.graph.threads import run_thread
    from astra_kernels import suite
    from astra_kernels.nodes.reporter import render
    from astra_kernels.nodes.shared.chat import make_chat_model
    from astra_kernels.tools.errors import AstraError, UsageError

    check_cluster_arguments(args)
    folder = suite.load(args.kernel)
    out = Path(args.out or f"out/{folder.name}-agent")
    context = RunContext(**agent_settings(args), approve=args.approve, results=str(args.store or out / "results.sqlite"),
                         out=str(out))
    for role in ("planner", "coder"):
        make_chat_model(context, role)  # a typo in a model is named before anything is written
    checkpoints = Path(args.checkpoints or out / "checkpoints.sqlite")
    thread = args.resume or args.thread or f"{folder.name}-{uuid.uuid4().hex[:8]}"
    config = {"configurable": {"thread_id": thread}, "recursion_limit": recursion_limit(context)}
    if args.resume:
        # Checked before anything is written: a resume that cannot resume leaves no files behind.
        if not checkpoints.is_file():
            console.print(f"[red]error:[/red] no checkpoints at {checkpoints} to resume {thread!r} from", highlight=False)
            return 2
        payload = None
    else:
        shapes = shapes_from(folder, args, tuning=True) or []
        suite.check_run(folder, shapes or folder.spec.default_shapes(), args.dtype or folder.spec.default_dtype())
        payload = {"kernel": folder.name, "shapes": shapes, **({"dtype": args.dtype} if args.dtype else {})}
        checkpoints.parent.mkdir(parents=True, exist_ok=True)
    app = build_graph().compile(checkpointer=sqlite_checkpointer(checkpoints))
    if args.resume and not (resumed := app.get_state(config).values):
        console.print(f"[red]error:[/red] no checkpoint for thread {thread!r} in {checkpoints}", highlight=False)
        return 2
    if args.resume and resumed.get("kernel") != folder.name:
        # The thread holds its kernel, and the resume would carry on with it whatever the command
        # names: `astra optimize rmsnorm --resume <a silu_and_mul thread>` printed silu_and_mul's result.
        console.print(f"[red]error:[/red] thread {thread!r} in {checkpoints} is a run of {resumed.get('kernel')}, "
                      f"not of {folder.name}: resume it with `astra optimize {resumed.get('kernel')} --resume {thread}`",
                      highlight=False)
        return 2
    try:
        evaluator = _on_cluster(args, folder.name) if args.ray is not None else open_evaluator(
            folder.name, context.results, replay=args.replay, gpu=args.gpu, needs=(
            "the agent measures every candidate, so it needs an NVIDIA GPU. What runs without one: "
            f"`astra optimize {folder.name} --replay recorded` (answers from the recording shipped for every "
            f"kernel), `astra space {folder.name}`, `astra check {folder.name}`, and the agent's tests "
            "(`pytest tests/agent`)."))
    except AstraError as exc:  # NoGpuError among them: what runs without one
        return cannot_measure(exc)
    out.mkdir(parents=True, exist_ok=True)
    say = messages(args)
    say.print(f"thread {thread}", highlight=False)

    def show(event: dict) -> None:
        if "progress" in event:  # long work of known size (the tune step's compiles): a bar, not lines
            update(done=event["progress"]["done"], total=event["progress"]["total"],
                   description=f"{event['node']} {event['message']}")
            return
        update(restart=True, description="the agent")
        say.print(f"[bold]{event['node']}[/bold] {escape(event['message'])}")

    def ask(question: dict) -> bool:
        try:
            answer = say.input(f"{escape(question['question'])} \\[y/N] ")
        except EOFError:  # `--approve < /dev/null`, or stdin closed: no one to ask
            raise UsageError("--approve asks before accepting each faster candidate, but stdin is closed (end of "
                             f"input); answer at a terminal (`{resume_command(args, thread, out)}` goes on from "
                             "here) or leave --approve out") from None
        return answer.strip().lower() in ("y", "yes")

    try:
        with evaluator as worker, progress_bar("the agent", enabled=not args.approve and not args.json) as update:
            context.evaluator = worker
            final = run_thread(app, payload, config=config, context=context, on_event=show, answer=ask)
    except KeyboardInterrupt:
        if app.get_state(config).values:  # only a thread with a checkpoint can be resumed
            say.print(f"resume with `{escape(resume_command(args, thread, out))}`", highlight=False)
        raise
    report = final.get("report") or {}
    if args.json:
        print(json.dumps(final.get("report"), indent=2))
    elif report:
        console.print(render(report), markup=False, highlight=False)
        written = [out / "report.md", out / "report.json"] + [
            out / name for name in ("best.cu", "dispatch.json") if (out / name).is_file()]
        console.print(f"wrote {', '.join(map(str, written))} and the winning kernels in {out / 'kernels'}"
                      + ("" if (out / "best.cu").is_file() else
                         "; no best.cu: different kernels or configurations win different shapes, the table is the result"
                         + (f" (`astra export {out}` builds it)" if (out / "dispatch.json").is_file() else "")),
                      highlight=False)
    if not any(row.get("baseline_us") for row in report.get("shapes", [])):
        say.print(f"[red]nothing was measured:[/red] {escape(report.get('stop_reason') or 'the run stopped')}",
                      highlight=False)
        return 1
    return 0


# What a resume reads from its thread, not from the command line: the shapes and dtype are the
# thread's; the thread and --out are written out by resume_command itself.
_NOT_FOR_RESUME = {"kernel", "thread", "resume", "shapes", "set", "dtype", "out"}


def resume_command(args, thread: str, out: Path) -> str:
    """The command that resumes this run, to print when it stops. The checkpoint holds the state,
    not the run's context: the models, budgets and where the measurements come from (--replay,
    --gpu, --store, --ray, --kernels-dir) are read from the command line again, so every option
    given is repeated (a hint without `--replay recorded` exited 2 on a machine without a GPU)."""
    import shlex

    words = ["astra", "optimize", args.kernel]
    for action in args.parser_of_command._actions:
        if not action.option_strings or action.dest in _NOT_FOR_RESUME or action.dest == "help":
            continue
        value, flag = getattr(args, action.dest, None), max(action.option_strings, key=len)
        if value is None or value == action.default:
            continue
        if action.nargs == 0 or (action.nargs == "?" and value == action.const):  # a flag: --approve, --ray
            words.append(flag)
        else:
            for one in value if isinstance(value, list) else [value]:
                words += [flag, f"{one:.0f}" if isinstance(one, float) and one.is_integer() else str(one)]
    return shlex.join([*words, "--resume", thread, "--out", str(out)])


@contextlib.contextmanager
def _on_cluster(args, kernel: str):
    """The cluster's workers of one GPU kind as the agent's evaluator (its measurements are only
    compared within a kind: the kind with the most workers), its compiles on the cluster's CPUs."""
    from astra_kernels.suite import recordings
    from astra_kernels.tools.cluster.compiling import RayCompileExecutor
    from astra_kernels.tools.toolchain.compiler import compiling_with

    recording = [str(recordings.resolve(args.replay, kernel))] if args.replay else None
    with cluster_pool(args, recording, f"the agent on {kernel}", live=False) as pool, compiling_with(RayCompileExecutor()):
        kind = max(pool.kinds, key=lambda k: len(pool.live(k)))
        if len(pool.kinds) > 1:
            messages(args).print(
                f"measuring on the cluster's {kind} workers (of {', '.join(pool.kinds)}): one kind per run",
                highlight=False)
        yield pool.view(kind, recording[0] if recording else None)
