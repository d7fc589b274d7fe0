"""`astra eval-agent`: what a chat model adds over search alone, kernel by kernel (graph layer: it runs the graph).

For each kernel the agent runs twice on the same evaluator, shapes and budget (rounds, tune
seconds, wall time): once with no model (the rule-based planner: the shipped table's picks, then
the tuner's searches, i.e. search alone) and once with the model. Each run has its own results
store, so neither reuses the other's measurements. From the two reports, per kernel: the share of
the model's candidates that compiled and that passed the checks, the speedup of the agent's
result over search alone's at each shape (and their geometric mean), fast_p in KernelBench's
manner (the share of shapes where the agent's result is faster than search alone's by more than a
factor p: 1.0, 1.05, 1.1), the shapes where it is slower, and the tokens and seconds spent. So a
user with a model measures what it adds on their kernels before trusting it with a serving run.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, Field

from astra_kernels.graph.builder import build_graph, recursion_limit
from astra_kernels.nodes.context import RunContext

FAST_P = (1.0, 1.05, 1.1)
COMPILE_FAILED = ("compile_error", "invalid", "duplicate")  # verdicts of a candidate that never ran
PASSED = ("accepted", "slower", "rejected", "passed")  # verdicts of a candidate the checks passed
MODEL_ORIGINS = ("rewrite", "template")  # a model's candidates (tune and baseline are not)
# The model settings a search-alone run drops (RunContext's fields), so its planner is the rules'.
MODEL_FIELDS = ("model", "planner_model", "coder_model", "chat_model", "planner_chat_model", "coder_chat_model")


class KernelEval(BaseModel):
    kernel: str
    shapes: list[str] = Field(default_factory=list)
    search_us: dict[str, float | None] = Field(default_factory=dict)  # search alone's result per shape
    agent_us: dict[str, float | None] = Field(default_factory=dict)  # the agent's result per shape
    model_candidates: int = 0
    compiled: int = 0
    passed: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    tokens_unknown: bool = False  # a server reported no usage for some answer
    search_seconds: float = 0.0  # the search-alone run's wall time
    agent_seconds: float = 0.0
    agent_stop: str = ""

    def speedups(self) -> dict[str, float]:
        """Search alone's time over the agent's, at each shape both measured."""
        return {s: self.search_us[s] / self.agent_us[s] for s in self.shapes
                if self.search_us.get(s) and self.agent_us.get(s)}

    def geomean(self) -> float | None:
        values = list(self.speedups().values())
        return math.exp(sum(map(math.log, values)) / len(values)) if values else None

    def fast(self, p: float) -> float | None:
        """The share of shapes (of those both runs measured) where the agent is faster by more than p."""
        values = list(self.speedups().values())
        return sum(v > p for v in values) / len(values) if values else None

    def slower(self, noise: float) -> list[str]:
        """Shapes where the agent's result is slower than search alone's beyond `noise` (a fraction)."""
        return [s for s, v in self.speedups().items() if v < 1.0 - noise]


def _front(report: dict) -> dict[str, float | None]:
    return {row["shape"]: row["best_us"] for row in report.get("shapes", [])}


def _tokens(report: dict) -> tuple[int, int, bool]:
    models = (report.get("costs") or {}).get("models") or {}
    unknown = any(c.get("unreported") for c in models.values())
    return (sum(c.get("input_tokens", 0) for c in models.values()),
            sum(c.get("output_tokens", 0) for c in models.values()), unknown)


def run_once(kernel: str, payload: dict, context: RunContext) -> tuple[dict, float]:
    """One agent run without checkpoints; its report and wall seconds."""
    started = time.monotonic()
    app = build_graph().compile()
    final = app.invoke(payload, config={"recursion_limit": recursion_limit(context)}, context=context)
    return final.get("report") or {}, time.monotonic() - started


def evaluate_kernel(kernel: str, payload: dict, context: RunContext, out: Path,
                    say: Callable[[str], None] = lambda line: None,
                    open_worker: Callable[[Path], object] | None = None) -> KernelEval:
    """Search alone, then the agent, with `context`'s budget, each writing its own folder under
    `out` (search/, agent/: report, kernels, results store). `open_worker(results)`: a fresh
    evaluator for each run, its results store the run's (a replay copies its recording there);
    without it, both runs use `context.evaluator`."""
    alone = dataclasses.replace(context, **{f: None for f in MODEL_FIELDS},
                                results=str(out / "search" / "results.sqlite"), out=str(out / "search"))
    with_model = dataclasses.replace(context, results=str(out / "agent" / "results.sqlite"), out=str(out / "agent"))

    def measured(run_context: RunContext) -> tuple[dict, float]:
        if open_worker is None:
            return run_once(kernel, payload, run_context)
        Path(run_context.results).parent.mkdir(parents=True, exist_ok=True)
        with open_worker(Path(run_context.results)) as worker:
            return run_once(kernel, payload, dataclasses.replace(run_context, evaluator=worker))

    say(f"{kernel}: search alone")
    search, search_s = measured(alone)
    say(f"{kernel}: the agent")
    agent, agent_s = measured(with_model)
    path = [p for p in agent.get("path", []) if p["origin"] in MODEL_ORIGINS]
    tokens_in, tokens_out, unknown = _tokens(agent)
    search_front, agent_front = _front(search), _front(agent)
    return KernelEval(
        kernel=kernel, shapes=list(agent_front or search_front), search_us=search_front, agent_us=agent_front,
        model_candidates=len(path), compiled=sum(p["verdict"] not in COMPILE_FAILED for p in path),
        passed=sum(p["verdict"] in PASSED for p in path), tokens_in=tokens_in, tokens_out=tokens_out,
        tokens_unknown=unknown, search_seconds=round(search_s, 1), agent_seconds=round(agent_s, 1),
        agent_stop=agent.get("stop_reason", ""))


def render(results: list[KernelEval], model: str, noise: float) -> str:
    def share(n: int, total: int) -> str:
        return f"{n}/{total}" if total else "-"

    def ratio(value: float | None, digits: int = 3) -> str:
        return f"{value:.{digits}f}" if value is not None else "-"

    lines = [f"# What {model} adds over search alone", "",
             "Each kernel ran twice on the same evaluator, shapes and budget: with no model (the rules: "
             "the shipped table, then the tuner's searches) and with the model. Speedup: search alone's "
             f"time over the agent's at each shape; fast_p: the share of shapes faster by more than p; "
             f"slower: beyond {noise:.0%}.", "",
             "| kernel | model candidates | compiled | passed | geomean speedup | "
             + " | ".join(f"fast_{p:g}" for p in FAST_P) + " | slower at | tokens in / out | seconds (search alone, agent) |",
             "|---|---|---|---|---|" + "---|" * len(FAST_P) + "---|---|---|"]
    for r in results:
        tokens = "unknown" if r.tokens_unknown and not (r.tokens_in or r.tokens_out) else f"{r.tokens_in} / {r.tokens_out}"
        lines.append(f"| {r.kernel} | {r.model_candidates} | {share(r.compiled, r.model_candidates)} | "
                     f"{share(r.passed, r.model_candidates)} | {ratio(r.geomean())} | "
                     + " | ".join(ratio(r.fast(p), 2) for p in FAST_P)
                     + f" | {', '.join(r.slower(noise)) or 'none'} | {tokens} | {r.search_seconds:.1f}, {r.agent_seconds:.1f} |")
    lines += ["", "Per shape (us):", ""]
    for r in results:
        lines.append(f"- {r.kernel}: " + "; ".join(
            f"{s} {ratio(r.search_us.get(s), 2)} alone, {ratio(r.agent_us.get(s), 2)} agent" for s in r.shapes))
    return "\n".join(lines) + "\n"


def write(results: list[KernelEval], model: str, noise: float, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    data = {"model": model, "noise": noise, "fast_p": list(FAST_P),
            "kernels": [{**r.model_dump(), "speedups": r.speedups(), "geomean": r.geomean(),
                         "fast": {f"{p:g}": r.fast(p) for p in FAST_P}, "slower": r.slower(noise)} for r in results]}
    (out / "eval.json").write_text(json.dumps(data, indent=2) + "\n")
    (out / "eval.md").write_text(render(results, model, noise))
    return [out / "eval.json", out / "eval.md"]
