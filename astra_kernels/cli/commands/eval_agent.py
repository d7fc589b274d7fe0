"""`astra eval-agent`: the agent and search alone on the same budget, kernel by kernel (graph/agent_eval.py)."""

from __future__ import annotations

from pathlib import Path

from rich.markup import escape

from astra_kernels.cli.arguments import add_measuring_arguments, shapes_from
from astra_kernels.cli.commands.optimize import add_agent_arguments, agent_settings
from astra_kernels.cli.output import cannot_measure, console, messages

NOISE = 0.02  # a shape's speedup within this share of 1 is neither faster nor slower


def add_parser(sub) -> None:
    evaluate = sub.add_parser("eval-agent", help="what a chat model adds over search alone: both on the same "
                                                 "budget, kernel by kernel (fast_p, compiled and passed shares, tokens)")
    evaluate.add_argument("kernels", nargs="+", help="the kernels to run both on")
    add_agent_arguments(evaluate)
    evaluate.add_argument("--shapes", help="comma-separated shapes (one kernel given)")
    evaluate.add_argument("--set", help="each kernel's shape set (default: its default shapes, Astra's else serving)")
    evaluate.add_argument("--dtype")
    evaluate.add_argument("--noise", type=float, default=NOISE,
                          help=f"a shape's speedup within this share of 1 counts as neither (default {NOISE})")
    evaluate.add_argument("--out", help="output folder (default out/eval-agent): KERNEL/search, KERNEL/agent, eval.md")
    add_measuring_arguments(evaluate)
    evaluate.set_defaults(run=run)


def run(args) -> int:
    from astra_kernels.evaluators import open_evaluator
    from astra_kernels.graph import RunContext
    from astra_kernels.graph.agent_eval import evaluate_kernel, write
    from astra_kernels.jobs import outputs
    from astra_kernels import suite
    from astra_kernels.nodes.shared.chat import make_chat_model, preflight
    from astra_kernels.tools.errors import AstraError

    if not (args.model or args.planner_model or args.coder_model):
        console.print("[red]error:[/red] eval-agent compares a model with search alone: give --model (or "
                      "--planner-model and --coder-model)", highlight=False)
        return 2
    if args.store:
        console.print("[red]error:[/red] eval-agent keeps a results store per kernel and run (OUT/KERNEL/search, "
                      "OUT/KERNEL/agent); --store does not apply", highlight=False)
        return 2
    out = Path(args.out or "out/eval-agent")
    context = RunContext(**agent_settings(args))
    for role in ("planner", "coder"):  # a typo, or a server that does not answer, named before search alone runs
        if (model := make_chat_model(context, role)) is not None:
            preflight(model, context)
    folders = [suite.load(k) for k in args.kernels]
    if args.shapes and len(folders) > 1:
        console.print("[red]error:[/red] --shapes names one kernel's shapes: give one kernel, or --set", highlight=False)
        return 2
    say = messages(args)
    results = []
    with outputs.held(out, "eval-agent"):
        for folder in folders:
            shapes = shapes_from(folder, args, tuning=True) or folder.spec.default_shapes()
            dtype = args.dtype or folder.spec.default_dtype()
            suite.check_run(folder, shapes, dtype)
            payload = {"kernel": folder.name, "shapes": shapes, "dtype": dtype}

            def open_worker(results_path: Path, kernel: str = folder.name):
                return open_evaluator(kernel, results_path, replay=args.replay, gpu=args.gpu, needs=(
                    "the agent and search alone measure every candidate, so eval-agent needs an NVIDIA GPU; "
                    f"without one, `astra eval-agent {kernel} --model ... --replay recorded` answers both from the "
                    "recording shipped for the kernel"))
            try:
                results.append(evaluate_kernel(folder.name, payload, context, out / folder.name,
                                               say=lambda line: say.print(escape(line), highlight=False),
                                               open_worker=open_worker))
            except AstraError as exc:  # NoGpuError among them: what runs without one
                return cannot_measure(exc)
        model = args.model or ", ".join(f"{name} ({role})" for name, role in
                                        ((args.planner_model, "planner"), (args.coder_model, "coder")) if name)
        files = write(results, model, args.noise, out)
    console.print((out / "eval.md").read_text(), markup=False, highlight=False)
    console.print(f"wrote {', '.join(map(str, files))}", highlight=False)
    return 0
