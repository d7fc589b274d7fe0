"""tester: compile, then correctness at every shape, through the evaluation worker.

A failure keeps the candidate (its message names the shape and the largest differences, or
holds the compile log) for the generator's next attempt, and counts against the retries.
"""

from __future__ import annotations

from langgraph.runtime import Runtime

from astra_kernels.graph.context import RunContext
from astra_kernels.graph.state import AgentState, Candidate

from astra_kernels.nodes.shared.attempts import failed
from astra_kernels.nodes.shared.measure import evaluate
from astra_kernels.nodes.shared.progress import say


def test(state: AgentState, runtime: Runtime[RunContext]) -> dict:
    candidate = Candidate.model_validate(state["candidate"])
    tested = evaluate(runtime.context, state["kernel"], state["dtype"], state["shapes"], candidate, time=False)
    if tested.verdict != "passed":
        return failed(state, tested, "tester")
    line = say("tester", f"candidate {tested.id} is correct at all {len(state['shapes'])} shapes")
    return {"candidate": tested.model_dump(), "events": [line]}
