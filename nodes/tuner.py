"""tuner: search the current template's parameters at every shape (tools/ and `astra tune`).

The template is the suite's, or the one the templater wrote. Every configuration the search
keeps passed the correctness checks at its shape, so the result goes straight to the profiler
as a candidate whose configuration differs per shape (its dispatch table).
"""

from __future__ import annotations

import dataclasses

from langgraph.runtime import Runtime

from astra_kernels.graph.context import RunContext
from astra_kernels.graph.state import AgentState, Candidate, ShapeMeasurement
from astra_kernels.kernels_sglang import suite
from astra_kernels.jobs import tuning
from astra_kernels.tools.search.runner import Budget

from astra_kernels.nodes.shared.attempts import failed, next_id, template_key
from astra_kernels.nodes.shared.measure import parse_candidate, stored_evaluator
from astra_kernels.nodes.shared.progress import say
from astra_kernels.tools.measuring.worker import COMPILE_TIMEOUT_S


def tune(state: AgentState, runtime: Runtime[RunContext]) -> dict:
    context = runtime.context
    source = state["template"]
    folder = dataclasses.replace(suite.load(state["kernel"]), template=parse_candidate(state["kernel"], source))
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
    deadline = None if source == suite.load(state["kernel"]).template.source else COMPILE_TIMEOUT_S
    report = tuning.tune(folder, run.worker, run, shapes=shapes, dtype=state["dtype"], strategy=context.strategy,
                         budget=Budget(seconds=context.tune_seconds / len(shapes)), sample=context.tune_sample,
                         progress=progress, compile_timeout_s=deadline, compiling=compiling)
    measurements, configs = [], {}
    for shaped in report.shapes:
        best, best_us = shaped.search.best_config, shaped.search.best_us
        entry = next((e for e in report.dispatch.entries if e.shape == shaped.shape), None) if report.dispatch else None
        if entry is not None and entry.source == "template" and entry.median_us is not None:
            best, best_us = entry.config, entry.median_us  # another shape's winner can be faster here
        trial = next((t for t in shaped.search.trials if t.config == best), None)
        configs[shaped.label] = best or {}
        measurements.append(ShapeMeasurement(
            label=shaped.label, status="ok" if best else "incorrect", config=best or {},
            median_us=best_us, message="" if best else "no configuration was correct here",
            fraction_of_copy_bandwidth=trial.fraction_of_copy_bandwidth if trial else None))
    measured = sum(t.status != "unrecorded" for s in report.shapes for t in s.search.trials)
    candidate = Candidate(id=next_id(state), origin="tune", source=source, configs=configs, measurements=measurements,
                          rationale=f"{report.strategy} search, {measured} evaluations")
    tuned = [*state.get("tuned", []), template_key(source)]
    if any(m.status != "ok" for m in measurements):
        bad = next(m for m in measurements if m.status != "ok")
        return {**failed(state, candidate.model_copy(update={"verdict": "incorrect",
                                                               "message": f"at shape {bad.label}: {bad.message}"}),
                         "tuner"), "tuned": tuned}
    line = say("tuner", f"candidate {candidate.id}: {candidate.rationale}; geometric mean {candidate.geomean_us():.2f} us")
    return {"candidate": candidate.model_dump(), "tuned": tuned, "events": [line]}
