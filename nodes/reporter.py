"""reporter: the run's result per shape, what it cost, and the files a user takes away.

The result is the front: at each shape the fastest correct kernel measured there (the baseline,
a tuned template at its configuration, or a rewrite), so it is a dispatch table over everything
measured and no shape is slower than the baseline. The report is part of the graph's output (so
a parent graph or a notebook gets it) and, when the context names an output folder, written
there: report.json, report.md, each winning kernel as `kernels/candidate-N.cu` (`kernels/baseline.cu`
where the baseline holds a shape), `best.cu` when
one kernel at one configuration serves every shape (`single_kernel`; else the report says the
table is the result; `best` is the candidate holding the most shapes), and `dispatch.json`, the
front in `astra export`'s format: the suite's template and baseline by name, every other winning
kernel (a rewrite, a model's template) carried in the table as a named source `candidate-N`, so
`astra export OUT` builds the whole result into one file.
"""

from __future__ import annotations

import json
import math
import re
import time
from datetime import UTC, datetime
from pathlib import Path

from langgraph.runtime import Runtime

from astra_kernels.nodes.context import RunContext
from astra_kernels.nodes.state import AgentState, Candidate, Decision, FrontEntry

from astra_kernels import suite
from astra_kernels.runtime.dispatch import DispatchEntry, DispatchTable

from astra_kernels.nodes.shared.chat import TRUNCATED_CAP_FACTOR
from astra_kernels.nodes.shared.progress import say


def fixed_source(source: str, config: dict[str, int]) -> str:
    """A template at one configuration: each parameter a constant (`//@ derive`), no default."""
    for name, value in config.items():
        source = re.sub(rf"^//@ param {name}:.*$", f"//@ derive {name} = {value}", source, flags=re.M)
    return re.sub(r"^//@ default:.*\n", "", source, flags=re.M)


def token_text(c: dict) -> str:
    """A role's tokens as the report says them: unknown where the server reported no usage for
    any answer (some servers never do), and how many answers lack it where only some do."""
    answered = c["answered"] if "answered" in c else c["calls"] - c["failed"] - c["timed_out"]
    unreported = c.get("unreported", 0)
    if answered and unreported >= answered:
        return "tokens unknown (the server reported no usage)"
    text = f"{c['input_tokens']} tokens in, {c['output_tokens']} out"
    return text + (f" ({unreported} of {answered} answers without usage)" if unreported else "")


def cost_lines(models: dict) -> list[str]:
    """The report's model cost: a line per role (requests, failures, timeouts, cut-off answers,
    tokens or that they are unknown, seconds), and a total where there are several roles."""
    lines = []
    for role, c in models.items():
        cut = (f", {c['truncated']} answers cut off at the output cap (an unusable one is asked again once "
               f"with {TRUNCATED_CAP_FACTOR}x the cap where the cap is known)") if c.get("truncated") else ""
        unsent = (f"; {c['not_sent']} not sent, the run's token budget being spent" if c.get("not_sent") else "")
        lines.append(f"- {role}: {c['calls']} requests ({c['failed']} failed, {c['timed_out']} timed out{cut}), "
                     f"{token_text(c)}, {c['seconds']:.1f} s{unsent}")
    if len(models) > 1:
        total = {k: sum(c.get(k, 0) for c in models.values())
                 for k in ("calls", "input_tokens", "output_tokens", "unreported", "seconds")}
        total["answered"] = sum(c["calls"] - c["failed"] - c["timed_out"] for c in models.values())
        lines.append(f"- all roles: {total['calls']} requests, {token_text(total)}, {total['seconds']:.1f} s")
    return lines


def _tally(calls: list[dict], key) -> dict:
    """Model requests grouped by `key(call)`: requests, failures, timeouts, cut-off answers, tokens
    in and out (an answer whose server sent no usage counted as unreported: unknown, not zero),
    seconds, and the requests the token budget stopped (not sent: no request, no tokens)."""
    groups: dict = {}
    for call in calls:
        group = groups.setdefault(key(call), {"calls": 0, "failed": 0, "timed_out": 0, "input_tokens": 0,
                                              "output_tokens": 0, "unreported": 0, "truncated": 0,
                                              "seconds": 0.0, "not_sent": 0})
        if call["outcome"] == "not_sent":
            group["not_sent"] += 1
            continue
        group["calls"] += 1
        group["failed"] += call["outcome"] == "failed"
        group["timed_out"] += call["outcome"] == "timed_out"
        group["unreported"] += call["outcome"] == "answered" and call.get("output_tokens") is None
        group["truncated"] += bool(call.get("truncated"))
        group["input_tokens"] += call.get("input_tokens") or 0
        group["output_tokens"] += call.get("output_tokens") or 0
        group["seconds"] = round(group["seconds"] + call["seconds"], 3)
    return groups


def by_round(calls: list[dict]) -> list[dict]:
    """The model requests per planner round and node (the preflight's first), in run order: where
    the tokens went (a round's plan, its drafts and their repairs)."""
    groups = _tally(calls, lambda call: (call.get("round") or 0, call.get("node") or call["role"]))
    return [{"round": r, "node": node, "requests": g["calls"], **g}
            for (r, node), g in sorted(groups.items(), key=lambda item: item[0][0])]


def round_lines(groups: list[dict]) -> list[str]:
    """The report's cost by round and node: a line per round, its nodes' requests and tokens."""
    rounds: dict[int, list[str]] = {}
    for g in groups:
        tokens = ("tokens unknown" if g["requests"] and g["unreported"] >= g["requests"]
                  else f"{g['input_tokens']} in, {g['output_tokens']} out")
        unsent = f", {g['not_sent']} not sent" if g["not_sent"] else ""
        rounds.setdefault(g["round"], []).append(f"{g['node']} {g['requests']} requests ({tokens}, {g['seconds']:.1f} s{unsent})")
    return [f"- {'before the first plan' if r == 0 else f'round {r}'}: " + "; ".join(parts)
            for r, parts in rounds.items()]


def costs(state: AgentState) -> dict:
    """Model requests and tokens per role, the agent's evaluation seconds, the searches' and the run's wall time."""
    roles = _tally(state.get("calls", []), lambda call: call["role"])
    started = state.get("started_at")
    replayed = bool(((state.get("gpu") or {}).get("device") or {}).get("replay"))
    return {"models": roles, "by_round": by_round(state.get("calls", [])), "replayed": replayed,
            "gpu_seconds": round(state.get("gpu_seconds") or 0.0, 3),
            "search_seconds": round(state.get("search_seconds") or 0.0, 1),
            "wall_seconds": round(time.time() - started, 1) if started else None}


def build_report(state: AgentState) -> dict:
    baseline = Candidate.model_validate(state["baseline"]) if state.get("baseline") else None
    front = {label: FrontEntry.model_validate(e) for label, e in (state.get("front") or {}).items()}
    rows, speedups = [], []
    base_times = baseline.times() if baseline else {}
    for label, entry in front.items():
        base = base_times.get(label)
        speedup = base / entry.median_us if base and entry.median_us else None
        if speedup:
            speedups.append(speedup)
        rows.append({"shape": label, "baseline_us": base, "best_us": entry.median_us, "speedup": speedup,
                     "candidate": entry.candidate, "origin": entry.origin, "config": entry.config,
                     "fraction_of_copy_bandwidth": entry.fraction_of_copy_bandwidth})
    known = {c["id"]: c for c in state.get("history", [])}
    if baseline:
        known[0] = state["baseline"]
    winners = sorted({e.candidate for e in front.values()})
    decision = Decision.model_validate(state["decision"]) if state.get("decision") else None
    single = _single_kernel(front, known)
    best = Candidate.model_validate(state["best"]) if state.get("best") else None  # holds the most shapes
    device = (state.get("gpu") or {}).get("device") or {}
    return {
        "kernel": state["kernel"], "dtype": state.get("dtype"),
        "device": device.get("name", "unknown device"), "arch": device.get("arch", "?"),
        "date": datetime.now(UTC).date().isoformat(),
        "stop_reason": state.get("stop_reason") or (decision.rationale if decision else ""),
        "shapes": rows,
        "geomean_speedup": math.exp(sum(map(math.log, speedups)) / len(speedups)) if speedups else None,
        "winners": [{"id": i, "origin": known[i]["origin"], "source": known[i]["source"],
                     "shapes": [label for label, e in front.items() if e.candidate == i],
                     "odd_shapes": known[i].get("odd_shapes", "")} for i in winners if i in known],
        "best": ({"id": best.id, "origin": best.origin, "source": best.source} if best else None),
        "single_kernel": single,
        "path": [{"id": c["id"], "origin": c["origin"], "verdict": c["verdict"],
                  "geomean_us": Candidate.model_validate(c).geomean_us(), "message": c["message"][:300]}
                 for c in state.get("history", [])],
        "costs": costs(state),
        "events": state.get("events", []),
    }


def _single_kernel(front: dict[str, FrontEntry], known: dict[int, dict]) -> dict | None:
    """The one kernel at one configuration that serves every shape, where there is one."""
    holders = {(e.candidate, json.dumps(e.config, sort_keys=True)) for e in front.values()}
    if len(holders) != 1:
        return None
    (candidate, config), = holders
    record = known.get(candidate)
    if record is None:
        return None
    return {"id": candidate, "origin": record["origin"], "source": fixed_source(record["source"], json.loads(config))}


def render(report: dict) -> str:
    lines = [f"# {report['kernel']} ({report['dtype']}): the agent's result", ""]
    if report["geomean_speedup"]:
        lines += [f"Geometric-mean speedup over the baseline {report['geomean_speedup']:.3f}, each shape served "
                  "by the fastest correct kernel measured there.", ""]
    if report["single_kernel"]:
        single = report["single_kernel"]
        lines += [f"One kernel serves every shape: candidate {single['id']} ({single['origin']}), in best.cu.", ""]
    elif len(report["winners"]) > 1 or any(r["config"] for r in report["shapes"]):
        lines += ["The result is a dispatch table: different kernels or configurations win different shapes "
                  "(the table below; the kernels in kernels/, the table in dispatch.json); "
                  "`astra export OUT` builds it into one .cu file with a launcher.", ""]
    lines += ["| shape | baseline us | best us | speedup | kernel | configuration | fraction of copy bandwidth |",
              "|---|---|---|---|---|---|---|"]
    for r in report["shapes"]:
        fmt = (lambda v, d=2: f"{v:.{d}f}" if v else "—")
        config = ", ".join(f"{k}={v}" for k, v in r["config"].items()) or "—"
        lines.append(f"| {r['shape']} | {fmt(r['baseline_us'])} | {fmt(r['best_us'])} | {fmt(r['speedup'], 3)} | "
                     f"{r['candidate']} ({r['origin']}) | {config} | {fmt(r['fraction_of_copy_bandwidth'])} |")
    untested = [w for w in report["winners"] if w["odd_shapes"] == "unmeasured"]
    if untested:
        lines += ["", "Serving only the tested shapes: the odd shapes of candidates "
                  + ", ".join(str(w["id"]) for w in untested) + " were not measured (the recording lacks them)."]
    for w in report["winners"]:
        if "excludes" in w["odd_shapes"] or w["odd_shapes"].startswith("excluded"):
            lines += ["", f"Candidate {w['id']} does not run at every shape of the kernel: its own constraints "
                          f"exclude some of the odd shapes ({w['odd_shapes']}); dropped into SGLang alone it needs "
                          "the baseline beside it for those."]
    cost = report["costs"]
    lines += ["", f"Stopped: {report['stop_reason']}", "", "## Cost", ""]
    lines += cost_lines(cost["models"])
    recorded = " (a replay: as recorded)" if cost.get("replayed") else ""
    lines.append(f"- GPU: {cost['gpu_seconds']:.1f} s of the agent's own evaluations{recorded}; "
                 f"the tuner's searches {cost['search_seconds']:.1f} s of wall time; the run {cost['wall_seconds']} s")
    if len(cost.get("by_round") or []) > 1:
        lines += ["", "By round and node:", ""] + round_lines(cost["by_round"])
    lines += ["", "## The path", ""]
    lines += [f"- candidate {p['id']} ({p['origin']}): {p['verdict']}"
              + (f", {p['geomean_us']:.2f} us" if p["geomean_us"] else "")
              + (f": {p['message'].splitlines()[0][:200]}" if p["message"] else "") for p in report["path"]]
    lines += ["", "## Events", ""] + [f"- {e}" for e in report["events"]]
    return "\n".join(lines) + "\n"


def dispatch_table(state: AgentState, l2: str = "cold") -> DispatchTable:
    """The front in `astra export`'s format: each shape's winner as the baseline, the suite's
    template (a candidate whose source is the template's own text), or a named source
    `candidate-N` that the table carries."""
    folder = suite.load(state["kernel"])
    known = {c["id"]: c for c in state.get("history", [])}
    entries, sources = [], {}
    for shape in state["shapes"]:
        entry = FrontEntry.model_validate(state["front"][folder.spec.label(shape)])
        source = known.get(entry.candidate, {}).get("source")
        if entry.origin == "baseline":
            name = "baseline"
        elif source == folder.template.source:
            name = "template"
        else:
            name = f"candidate-{entry.candidate}"
            sources[name] = source
        entries.append(DispatchEntry(shape=shape, config=entry.config, median_us=entry.median_us, source=name))
    device = (state.get("gpu") or {}).get("device") or {}
    return DispatchTable(kernel=state["kernel"], dtype=state["dtype"], variant="default", entries=entries,
                         sources=sources, l2=l2,
                         tuned_on=f"{device['name']} ({device.get('arch', '?')})" if device.get("name") else None,
                         tuned_date=(device.get("recorded") or datetime.now(UTC).isoformat(timespec="seconds"))
                         if device.get("name") else None)  # a replay's: its recording's


def report(state: AgentState, runtime: Runtime[RunContext]) -> dict:
    built = build_report(state)
    if runtime.context.out:
        out = Path(runtime.context.out)
        (out / "kernels").mkdir(parents=True, exist_ok=True)
        (out / "report.json").write_text(json.dumps(built, indent=2))
        (out / "report.md").write_text(render(built))
        # An earlier run's files in the same folder would pass for this run's result.
        for stale in [out / "best.cu", out / "dispatch.json", *(out / "kernels").glob("*.cu")]:
            stale.unlink(missing_ok=True)
        for winner in built["winners"]:
            name = "baseline" if winner["origin"] == "baseline" else f"candidate-{winner['id']}"
            (out / "kernels" / f"{name}.cu").write_text(winner["source"])
        if built["single_kernel"]:
            (out / "best.cu").write_text(built["single_kernel"]["source"])
        if state.get("front"):
            (out / "dispatch.json").write_text(dispatch_table(state, runtime.context.l2).model_dump_json(indent=2))
    geo = built["geomean_speedup"]
    line = say("reporter", f"done: {built['stop_reason']}" + (f"; {geo:.3f}x over the baseline" if geo else ""))
    return {"report": built, "stop_reason": built["stop_reason"], "events": [line]}
