"""tuner: search the current template's parameters at every shape (tools/ and `astra tune`).

The template is the suite's, or the one the templater wrote. Every configuration the search
keeps passed the correctness checks at its shape, so the result goes straight to the profiler
as a candidate whose configuration differs per shape (its dispatch table). A template of the
model's with no correct configuration at some shape goes back to the templater with sample
errors from its configurations; the search's space and pruning figures are kept for the
templater's next prompt. The search takes no more than the run's wall time has left.
"""

from __future__ import annotations

import dataclasses
import time

from langgraph.runtime import Runtime

from astra_kernels.nodes.context import RunContext
from astra_kernels.nodes.state import AgentState, Candidate, ShapeMeasurement, next_candidate_id
from astra_kernels import suite
from astra_kernels.jobs import checking, tuning
from astra_kernels.tools.search.runner import Budget

from astra_kernels.nodes.shared.attempts import failed, template_key
from astra_kernels.nodes.shared.measure import parallelism, parse_candidate, stored_evaluator
from astra_kernels.nodes.shared.progress import say
from astra_kernels.tools.measuring.worker import COMPILE_TIMEOUT_S


def tune(state: AgentState, runtime: Runtime[RunContext]) -> dict:
    context = runtime.context
    source = state["template"]
    shipped = suite.load(state["kernel"])
    model_template = source != shipped.template.source  # a model's, not the suite's own
    folder = dataclasses.replace(shipped, template=parse_candidate(state["kernel"], source))
    run = stored_evaluator(context, state["kernel"])
    shapes = state["shapes"]

    def progress(label, trial):
        if trial is None:
            say("tuner", label)

    reported = {}

    def compiling(label, done, total):
        # A progress event (a bar in `astra optimize`) at each twentieth of the space, not each
        # of its hundreds of compiles: the stream is the notebook's and Studio's too.
        step = done * 20 // total
        if reported.get(label) != step:
            reported[label] = step
            say("tuner", f"{label}: compiling the space", progress={"done": done, "total": total})

    # A model's template may compile for ever at some parameter values; the suite's own never does.
    deadline = COMPILE_TIMEOUT_S if model_template else None
    left = context.wall_seconds - (time.time() - state["started_at"])
    seconds = max(1.0, min(context.tune_seconds, left))
    started = time.monotonic()
    request = tuning.TuneRequest(folder, shapes, state["dtype"], strategy=context.strategy,
                                 budget=Budget(seconds=seconds / len(shapes)), sample=context.tune_sample, l2=context.l2)
    report = tuning.tune(request, run.worker, run, parallel=parallelism(context, state["kernel"]), progress=progress,
                         compile_timeout_s=deadline, compiling=compiling)
    searched_s = time.monotonic() - started  # for the report's costs
    measurements, configs = [], {}
    for shaped in report.shapes:
        best, best_us = shaped.search.best_config, shaped.search.best_us
        entry = next((e for e in report.dispatch.entries if e.shape == shaped.shape), None) if report.dispatch else None
        if entry is not None and entry.source == "template" and entry.median_us is not None:
            best, best_us = entry.config, entry.median_us  # another shape's winner can be faster here
        trial = next((t for t in shaped.search.trials if t.config == best), None)
        configs[shaped.label] = best or {}
        unrecorded = bool(shaped.search.trials) and all(t.status == "unrecorded" for t in shaped.search.trials)
        measurements.append(ShapeMeasurement(
            label=shaped.label, status="ok" if best else ("unrecorded" if unrecorded else "incorrect"),
            config=best or {}, median_us=best_us, message="" if best else sample_errors(shaped),
            fraction_of_copy_bandwidth=trial.fraction_of_copy_bandwidth if trial else None,
            floor_us=state["front"].get(shaped.label, {}).get("floor_us"),
            registers=trial.registers if trial else None,
            occupancy_blocks_per_sm=trial.occupancy_blocks_per_sm if trial else None))
    if any(m.status == "ok" for m in measurements):
        # a shape where no configuration of the search ran at all (a sample's all excluded there) is one
        # this template does not serve, not one it got wrong; where no shape ran, the template is wrong
        # (below: back to the templater, with why nothing was left to measure)
        ran = {s.label for s in report.shapes if s.search.trials}
        measurements = [m.model_copy(update={"status": "excluded"}) if m.status == "incorrect" and m.label not in ran
                        else m for m in measurements]
    measured = sum(t.status != "unrecorded" for s in report.shapes for t in s.search.trials)
    template = state.get("candidate") or {}
    candidate = Candidate(id=next_candidate_id(state), origin="tune", source=source, configs=configs, measurements=measurements,
                          rationale=f"{report.strategy} search, {measured} evaluations", idea=template.get("idea", []),
                          conversation=template.get("conversation", []) if template.get("source") == source else [],
                          message=space_summary(report))
    tuned = [*state.get("tuned", []), template_key(source)]
    # Per shape, as every candidate: a shape with no correct configuration is one this template does
    # not win; only a template correct nowhere goes back (to the templater, where it came from there).
    bad = next((m for m in measurements if m.status == "incorrect"), None)
    if bad is not None and not any(m.status == "ok" for m in measurements):
        message = f"no configuration was correct at shape {bad.label}; {bad.message}"
        return {**failed(state, candidate.model_copy(update={"verdict": "incorrect", "message": message}), "tuner"),
                "tuned": tuned, "search_seconds": searched_s}
    if any(m.status == "unrecorded" for m in measurements):
        candidate = candidate.model_copy(update={"verdict": "unmeasured", "message": (
            "the recording has no measurement of this template at "
            + ", ".join(m.label for m in measurements if m.status == "unrecorded"))})
        line = say("tuner", f"candidate {candidate.id} is unmeasured: {candidate.message}")
        return {"candidate": candidate.model_dump(), "history": [candidate.model_copy(update={"conversation": []}).model_dump()],
                "tuned": tuned, "events": [line], "search_seconds": searched_s}
    candidate = checked_away(report, candidate.model_copy(update={"verdict": "passed"}),
                             model_template=model_template)
    if candidate.verdict != "passed":
        return {**failed(state, candidate, "tuner"), "tuned": tuned, "search_seconds": searched_s}
    geomean, timed = candidate.geomean_us(), candidate.times()
    # a shape where no configuration of the search (a --tune-sample, say) was correct is one it does not win
    line = say("tuner", f"candidate {candidate.id}: {candidate.rationale}; " + (
        f"geometric mean {geomean:.2f} us" if geomean is not None else
        f"measured at {len(timed)} of {len(measurements)} shapes ({', '.join(timed) or 'none'})"))
    return {"candidate": candidate.model_dump(), "tuned": tuned, "events": [line], "search_seconds": searched_s,
            "tuning": {"source_key": template_key(source), "space": candidate.message, "configs": configs}}


def checked_away(report, candidate: Candidate, *, model_template: bool) -> Candidate:
    """The candidate after the tune's checks of its table's configurations away from the tuned
    shapes (tuning.check_table_configs: the odd shapes, every dtype and variant): one failed makes
    it incorrect; for a model's template `odd_shapes` says how they went ("passed", or
    "unmeasured" where a replay lacks them), as the tester's odd_shapes says for a direct rewrite."""
    if failures := report.config_check_failures:
        first = checking.describe(failures[0])
        return candidate.model_copy(update={
            "verdict": "incorrect", "odd_shapes": f"failed {first[:300]}",
            "message": f"(away from the tuned shapes, not timed) {len(failures)} check(s) of its configurations "
                       f"failed; the first: {first}"})
    if not model_template or not report.config_checks:
        return candidate
    unanswered = any(r.status in ("unrecorded", "lost") for r in report.config_checks)
    return candidate.model_copy(update={"odd_shapes": "unmeasured" if unanswered else "passed"})


def sample_errors(shaped, samples: int = 4) -> str:
    """Why the search found nothing correct at one shape: a few configurations' own errors."""
    failed = [t for t in shaped.search.trials if t.status not in ("ok", "unrecorded")]
    if not failed:
        return (f"no configuration was left to measure: {shaped.space_total} in the space, "
                f"{shaped.space_after_constraints} after constraints, {shaped.space_after_compile} compiled; "
                f"pruned: {'; '.join(f'{r} ({n})' for r, n in shaped.pruned_reasons) or 'nothing'}")
    lines = [f"{len(failed)} configurations failed; for example:"]
    lines += [f"- {t.config}: {t.status}: {t.message[:600]}" for t in failed[:samples]]
    return "\n".join(lines)


def space_summary(report) -> str:
    """The searched space per shape, for the templater's next prompt: sizes after each pruning
    step and the most common reasons."""
    lines = []
    for s in report.shapes:
        reasons = "; ".join(f"{r} ({n})" for r, n in s.pruned_reasons[:4]) or "none"
        lines.append(f"- {s.label}: {s.space_total} configurations, {s.space_after_constraints} after constraints, "
                     f"{s.space_after_compile} compiled, {s.space_candidates} within the hardware's limits; "
                     f"pruned for: {reasons}")
    return "\n".join(lines)
