"""reporter: the final kernel, its measurements against the baseline, and the path that led there.

The report is part of the graph's output (so a parent graph or a notebook gets it), and, when the
context names an output folder, written there as report.json, report.md and the best kernel.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from langgraph.runtime import Runtime

from astra_kernels.graph.context import RunContext
from astra_kernels.graph.state import AgentState, Candidate, Decision

from astra_kernels.nodes.shared.progress import say


def build_report(state: AgentState) -> dict:
    baseline = Candidate.model_validate(state["baseline"]) if state.get("baseline") else None
    best = Candidate.model_validate(state["best"]) if state.get("best") else None
    rows, speedups = [], []
    if baseline and best:
        base_times = baseline.times()
        for m in best.measurements:
            base = base_times.get(m.label)
            speedup = base / m.median_us if base and m.median_us else None
            if speedup:
                speedups.append(speedup)
            rows.append({"shape": m.label, "baseline_us": base, "best_us": m.median_us, "speedup": speedup,
                         "fraction_of_copy_bandwidth": m.fraction_of_copy_bandwidth,
                         "config": best.configs.get(m.label) or m.config})
    decision = Decision.model_validate(state["decision"]) if state.get("decision") else None
    return {
        "kernel": state["kernel"], "dtype": state.get("dtype"),
        "stop_reason": state.get("stop_reason") or (decision.rationale if decision else ""),
        "best": {"id": best.id, "origin": best.origin, "source": best.source} if best else None,
        "shapes": rows,
        "geomean_speedup": math.exp(sum(map(math.log, speedups)) / len(speedups)) if speedups else None,
        "path": [{"id": c["id"], "origin": c["origin"], "verdict": c["verdict"],
                  "geomean_us": Candidate.model_validate(c).geomean_us(), "message": c["message"][:300]}
                 for c in state.get("history", [])],
        "events": state.get("events", []),
    }


def render(report: dict) -> str:
    lines = [f"# {report['kernel']} ({report['dtype']}): the agent's result", ""]
    if report["geomean_speedup"]:
        best = report["best"]
        lines += [f"Best: candidate {best['id']} ({best['origin']}), geometric-mean speedup over the baseline "
                  f"{report['geomean_speedup']:.3f}.", ""]
    lines += ["| shape | baseline us | best us | speedup | fraction of copy bandwidth |", "|---|---|---|---|---|"]
    for r in report["shapes"]:
        fmt = (lambda v, d=2: f"{v:.{d}f}" if v else "—")
        lines.append(f"| {r['shape']} | {fmt(r['baseline_us'])} | {fmt(r['best_us'])} | {fmt(r['speedup'], 3)} | "
                     f"{fmt(r['fraction_of_copy_bandwidth'])} |")
    lines += ["", f"Stopped: {report['stop_reason']}", "", "## The path", ""]
    lines += [f"- candidate {p['id']} ({p['origin']}): {p['verdict']}"
              + (f", {p['geomean_us']:.2f} us" if p["geomean_us"] else "") for p in report["path"]]
    lines += ["", "## Events", ""] + [f"- {e}" for e in report["events"]]
    return "\n".join(lines) + "\n"


def report(state: AgentState, runtime: Runtime[RunContext]) -> dict:
    built = build_report(state)
    if runtime.context.out:
        out = Path(runtime.context.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.json").write_text(json.dumps(built, indent=2))
        (out / "report.md").write_text(render(built))
        if built["best"]:
            (out / "best.cu").write_text(built["best"]["source"])
    geo = built["geomean_speedup"]
    line = say("reporter", f"done: {built['stop_reason']}" + (f"; {geo:.3f}x over the baseline" if geo else ""))
    return {"report": built, "stop_reason": built["stop_reason"], "events": [line]}
