"""load: the kernel, its shapes, reachable chat models, the GPU's floors, the measured baseline, and
the search floor.

Each role's chat model is checked first, so a wrong URL or key is an error before any GPU work.
The baseline is tested and timed at every shape; it starts as the front (the fastest kernel at
every shape). The search floor is the table shipped for this GPU (the template searched offline):
its pick at each shape, checked and timed here as a candidate that the profiler judges against the
baseline before the first plan, so every model candidate competes with search alone and the run's
front is never worse than it at any shape it measured correct (issue 43); a shape a recording lacks
keeps the baseline there, and a floor incorrect somewhere (a shipped table that no longer checks) is
kept out whole, said in the events. The GPU's facts for the prompts come from measurements, not
assumptions: its copy bandwidth (the bytes floor's denominator) from the baseline's evaluations,
and the launch floor from an empty kernel replayed the same way, where this evaluator can run one.
"""

from __future__ import annotations

import time

from langgraph.runtime import Runtime

from astra_kernels.nodes.context import RunContext
from astra_kernels.nodes.state import AgentState, Candidate, FrontEntry, ModelCall
from astra_kernels.jobs.benchmark import shipped_table_for
from astra_kernels import suite

from astra_kernels.nodes.shared.chat import make_chat_model, preflight, role_settings
from astra_kernels.nodes.shared.measure import evaluate, launch_floor_us, stored_evaluator
from astra_kernels.nodes.shared.progress import say


def load(state: AgentState, runtime: Runtime[RunContext]) -> dict:
    context = runtime.context
    folder = suite.load(state.get("kernel"))
    spec = folder.spec
    dtype = state.get("dtype") or spec.default_dtype()
    shapes = _checked_shapes(spec, state.get("shapes")) or spec.default_shapes()
    started = time.time()  # the run's wall time counts from here: the checks and the baseline are in it
    checked, calls = [], []  # one check per endpoint: the roles often share one model
    for role in ("planner", "coder"):
        model = make_chat_model(context, role)
        same = model if getattr(context, f"{role}_chat_model", None) or context.chat_model else \
            role_settings(context, role)["model"]
        if model is not None and not any(same is c or same == c for c in checked):
            started_check = time.monotonic()
            preflight(model, context)
            checked.append(same)
            calls.append(ModelCall(role="preflight", seconds=round(time.monotonic() - started_check, 3)).model_dump())
    baseline = evaluate(context, spec.name, dtype, shapes, Candidate(id=0, origin="baseline",
                                                                   source=folder.baseline.source))
    worker = stored_evaluator(context, spec.name).worker
    gpu = {"device": dict(worker.device or {}), "launch_floor_us": launch_floor_us(context, spec.name),
           "copy_bandwidth_gbs": baseline.copy_bandwidth_gbs}
    update = {"dtype": dtype, "shapes": shapes, "template": folder.template.source, "round": 0, "failed_attempts": 0,
              "tuned": [], "started_at": started, "candidate": None, "decision": None, "gpu": gpu,
              "gpu_seconds": baseline.gpu_seconds, "calls": calls}
    if baseline.verdict != "passed":
        return {**update, "baseline": baseline.model_dump(), "best": None,
                "stop_reason": f"the baseline failed {baseline.message}",
                "events": [say("load", f"the baseline failed: {baseline.message[:200]}")]}
    baseline = baseline.model_copy(update={"verdict": "accepted"})
    times = ", ".join(f"{label} {us:.2f} us" for label, us in baseline.times().items())
    front = {m.label: FrontEntry(candidate=0, origin="baseline", median_us=m.median_us, floor_us=m.floor_us,
                                 fraction_of_copy_bandwidth=m.fraction_of_copy_bandwidth).model_dump()
             for m in baseline.measurements}
    events = [say("load", f"{spec.name} {dtype} baseline: {times}", times=baseline.times())]
    floor = floor_candidate(context, folder, dtype, shapes, gpu["device"]) if context.search_floor else None
    if floor is not None:
        floor = evaluate(context, spec.name, dtype, shapes, floor)
        update["gpu_seconds"] += floor.gpu_seconds
        if floor.verdict == "unmeasured" and any(m.status == "ok" for m in floor.measurements):
            # a recording (or a lost worker) lacks some shapes: the floor holds those it measured
            floor = floor.model_copy(update={"verdict": "passed"})
        events.append(say("load", f"search floor: candidate {floor.id}, {floor.rationale}: {floor.verdict}"
                                  + (f" ({floor.message[:200]})" if floor.message else "")))
        if floor.verdict == "passed":  # to the profiler, which judges it shape by shape
            update["candidate"] = floor.model_dump()
        else:  # unmeasured (a recording without its picks) or failed: kept in the history, the front as it is
            update["history"] = [floor.model_dump()]
    return {**update, "baseline": baseline.model_dump(), "best": baseline.model_dump(), "front": front,
            "events": events}


def floor_candidate(context, folder: suite.KernelFolder, dtype: str, shapes: list[dict[str, int]],
                 device: dict) -> Candidate | None:
    """The shipped table's template picks at the run's shapes as one candidate (id 1), or None where
    no table is shipped for this GPU in this dtype, or it picks the baseline everywhere. The picks
    are the table's own rule (DispatchTable.pick) for this GPU's multiprocessors: a shape the table
    was not tuned at gets what `astra export` would launch there."""
    name = device.get("name") or ""
    table = shipped_table_for(folder.spec.name, name, dtype, "default", context.l2)
    if table is None:
        return None
    sms, arch = device.get("multiprocessors", suite.DEFAULT_SMS), device.get("arch")
    default = folder.template.default  # a parameter the template gained after the table: its default
    configs = {}
    for shape in shapes:
        pick = table.pick(shape, sms, arch)
        if pick.source == "template":
            configs[folder.spec.label(shape)] = {name: pick.config.get(name, value) for name, value in default.items()}
    if not configs:
        return None
    # where the table runs the baseline (which holds the shape already), the template's default runs
    return Candidate(id=1, origin="tune", source=folder.template.source, configs=configs,
                     rationale=f"the table shipped for {name or 'this GPU'} (tuned with {table.l2} L2: search alone)")


def _checked_shapes(spec, shapes) -> list[dict[str, int]] | None:
    """The caller's shapes, each one checked against the kernel's symbols: a client such as
    LangGraph Studio sends whatever was typed, and a wrong key must not surface as a KeyError."""
    if not shapes:
        return None
    wanted = "{" + ", ".join(f'"{s}": N' for s in spec.symbols) + "}"
    for shape in shapes:
        if (not isinstance(shape, dict) or set(shape) != set(spec.symbols)
                or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in shape.values())):
            raise ValueError(f"{shape!r} is not a {spec.name} shape; give each shape as {wanted} "
                             "with positive integers")
    return shapes
