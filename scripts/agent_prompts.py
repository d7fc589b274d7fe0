"""Capture one prompt of each role the agent sends a model, as a model receives it.

    python scripts/agent_prompts.py OUT.md [--kernel silu_and_mul] [--replay recorded]

Runs the graph with a scripted model that plans a rewrite, answers with a kernel that does not
compile (so the repair request is captured too), fixes it, plans a template (noting two lessons, the
run's memory, which the later requests show), answers with the suite's template, and stops; every message sent is written to OUT.md, one section per request.
On a GPU the facts are this GPU's (its launch floor included); with `--replay` they are the
recording's. docs/agent.md quotes such a capture.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support.agent_fakes import ScriptedChatModel, decision  # noqa: E402

from astra_kernels.graph import RunContext, build_graph, recursion_limit  # noqa: E402
from astra_kernels import suite  # noqa: E402


def role(messages) -> str:
    """Which node sent a request, from what it says."""
    if len(messages) == 1:
        return "the preflight check"
    if messages[0].content.startswith("You plan"):
        return "planner"
    node = "templater" if messages[1].content.startswith("Refactor") else "generator"
    return f"{node} (a repair, in the draft's conversation)" if len(messages) > 2 else f"{node} (first draft)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--kernel", default="silu_and_mul")
    parser.add_argument("--replay")
    parser.add_argument("--results", help="the results store (default out/agent-prompts/KERNEL/results.sqlite: one "
                        "per kernel, since the run's replay measures only the kernel it was made for)")
    args = parser.parse_args()
    args.results = args.results or f"out/agent-prompts/{args.kernel}/results.sqlite"
    folder = suite.load(args.kernel)
    kernel = folder.baseline.source
    broken = kernel.replace("{", "{ undefined_helper();", 2).replace("{ undefined_helper();", "{", 1)
    model = ScriptedChatModel(answers=[
        "ready", decision("rewrite", "the small shapes are far from their launch floor"),
        f"Split each row over more CTAs.\n```cuda\n{broken}```",
        f"Fixed: the helper does not exist.\n```cuda\n// rewritten\n{kernel}```",
        json.dumps({"action": "templatize", "rationale": "expose the launch shape to the tuner",
                    "optimizations": ["rows split over CTAs as a parameter"],
                    "lessons": ["A helper that common.cuh does not declare fails to compile: the draft had to be repaired.",
                                "The rewrite kept the baseline's launch, so it could not win the latency-bound shapes."]}),
        f"The suite's parameters.\n```cuda\n{folder.template.source}```", decision("stop")])
    model.seen = []
    context = RunContext(chat_model=model, replay=args.replay, results=args.results, tune_seconds=20, rounds=3,
                         fixes=1)
    app = build_graph().compile()
    app.invoke({"kernel": folder.name}, context=context, config={"recursion_limit": recursion_limit(context)})
    lines = [f"# The prompts of one run ({folder.name}, captured {datetime.now(UTC).date()})", ""]
    for i, messages in enumerate(model.seen):
        lines += [f"## Request {i + 1}: {role(messages)}", ""]
        for m in messages:
            lines += [f"### {m.type}", "", "````text", str(m.content), "````", ""]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines))
    print(f"wrote {len(model.seen)} requests to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
