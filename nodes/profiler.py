"""profiler: time, fraction of the roofline and resources, then keep the candidate or backtrack.

A correct candidate is timed at every shape (a tuned one already was, by the search) and
compared with the best so far by the geometric mean of its times. Faster by more than the noise
margin, it becomes the best, after a person's yes when the run asks for approval (an interrupt
that the CLI, a notebook or Studio answers); otherwise the run backtracks to the best so far.
"""

from __future__ import annotations

from langgraph.runtime import Runtime
from langgraph.types import interrupt

from astra_kernels.graph.context import RunContext
from astra_kernels.defaults import TIMING_NOISE
from astra_kernels.graph.state import AgentState, Candidate

from astra_kernels.nodes.shared.measure import evaluate
from astra_kernels.nodes.shared.progress import say



def profile(state: AgentState, runtime: Runtime[RunContext]) -> dict:
    context = runtime.context
    candidate = Candidate.model_validate(state["candidate"])
    if candidate.origin != "tune":
        candidate = evaluate(context, state["kernel"], state["dtype"], state["shapes"], candidate, check=False)
    best = Candidate.model_validate(state["best"])
    mine, theirs = candidate.geomean_us(), best.geomean_us()
    if mine is None:
        candidate = candidate.model_copy(update={"verdict": "incorrect", "message": candidate.message or "not timed"})
        verdict_line = f"candidate {candidate.id} could not be timed at every shape"
    elif mine < theirs * (1 - TIMING_NOISE):
        approved = True
        if context.approve:
            approved = bool(interrupt({
                "question": f"accept candidate {candidate.id} ({candidate.origin})? geometric mean "
                            f"{mine:.2f} us against {theirs:.2f} us",
                "candidate": candidate.id, "times": candidate.times(), "best_times": best.times()}))
        candidate = candidate.model_copy(update={"verdict": "accepted" if approved else "rejected"})
        verdict_line = (f"candidate {candidate.id} {'accepted' if approved else 'rejected by the person'}: "
                        f"{mine:.2f} us against {theirs:.2f} us ({theirs / mine:.3f}x)")
    else:
        candidate = candidate.model_copy(update={"verdict": "slower"})
        verdict_line = (f"candidate {candidate.id} is correct but not faster ({mine:.2f} us against "
                        f"{theirs:.2f} us): back to candidate {best.id}")
    update = {"candidate": candidate.model_dump(), "history": [candidate.model_dump()],
              "events": [say("profiler", verdict_line, verdict=candidate.verdict)]}
    if candidate.verdict == "accepted":
        update["best"] = candidate.model_dump()
    return update
