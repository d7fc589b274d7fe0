"""load: the kernel, its shapes, a reachable chat model, and the measured baseline.

The chat model is checked first, so a wrong URL or key is an error before any GPU work. The
baseline is tested and timed at every shape; it starts as the best so far.
"""

from __future__ import annotations

import time

from langgraph.runtime import Runtime

from astra_kernels.graph.context import RunContext
from astra_kernels.graph.state import AgentState, Candidate
from astra_kernels.kernels_sglang import suite

from astra_kernels.nodes.shared.chat import make_chat_model, preflight
from astra_kernels.nodes.shared.measure import evaluate
from astra_kernels.nodes.shared.progress import say


def load(state: AgentState, runtime: Runtime[RunContext]) -> dict:
    context = runtime.context
    folder = suite.load(state.get("kernel"))
    spec = folder.spec
    dtype = state.get("dtype") or spec.default_dtype()
    shapes = _checked_shapes(spec, state.get("shapes")) or spec.default_shapes()
    model = make_chat_model(context)
    if model is not None:
        preflight(model, context)
    baseline = evaluate(context, spec.name, dtype, shapes, Candidate(id=0, origin="baseline",
                                                                   source=folder.baseline.source))
    update = {"dtype": dtype, "shapes": shapes, "template": folder.template.source, "round": 0, "retries": 0,
              "tuned": [], "started_at": time.time(), "candidate": None, "decision": None}
    if baseline.verdict != "passed":
        return {**update, "baseline": baseline.model_dump(), "best": None,
                "stop_reason": f"the baseline failed {baseline.message}",
                "events": [say("load", f"the baseline failed: {baseline.message[:200]}")]}
    baseline = baseline.model_copy(update={"verdict": "accepted"})
    times = ", ".join(f"{label} {us:.2f} us" for label, us in baseline.times().items())
    return {**update, "baseline": baseline.model_dump(), "best": baseline.model_dump(),
            "events": [say("load", f"{spec.name} {dtype} baseline: {times}", times=baseline.times())]}


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
