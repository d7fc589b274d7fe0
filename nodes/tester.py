"""tester: the round's new rewrites compiled in parallel, then checked and timed one by one (on a
cluster, all at once).

Each candidate is checked and timed at every shape of the run in one evaluation per shape
(shared/measure.py), then, when correct there, checked at the kernel's `odd` shapes (widths
that are not multiples of a vector, a single token), which the run does not time but a kernel
dropped into SGLang will meet. A failure keeps the candidate, its message naming the shape and
the largest differences or holding the compile log, for its repair; it goes into the history.
A draft that is a sibling's kernel again (the same code, normalised: comments and spacing aside)
is a "duplicate" before any GPU time, repaired as a failure is.
"""

from __future__ import annotations

from langgraph.runtime import Runtime

from astra_kernels.nodes.context import RunContext
from astra_kernels.nodes.state import AgentState, Candidate

from astra_kernels.nodes.shared import answers
from astra_kernels.nodes.shared.attempts import first_line
from astra_kernels.nodes.shared.measure import evaluate, odd_shapes, parallelism, precompile
from astra_kernels.tools.concurrency import map_in_threads
from astra_kernels.nodes.shared.progress import say


def test(state: AgentState, runtime: Runtime[RunContext]) -> dict:
    context = runtime.context
    drafts = [Candidate.model_validate(d) for d in state.get("drafts", [])]
    earlier = [d for d in drafts if d.verdict in ("passed", "unmeasured")]  # siblings tested before a repair
    pending, twins = [], []
    for draft in (d for d in drafts if d.verdict == "pending"):
        same = next((p for p in [*earlier, *pending] if answers.same_code(p.source, draft.source)), None)
        if same is None:
            pending.append(draft)
        else:
            twins.append(draft.model_copy(update={"verdict": "duplicate", "message": (
                f"it is candidate {same.id} (slot {same.slot}) of this round again, not measured twice; "
                "write a different kernel")}))
    precompile(context, state["kernel"], state["dtype"], state["shapes"], pending)

    def check(candidate: Candidate) -> Candidate:
        candidate = evaluate(context, state["kernel"], state["dtype"], state["shapes"], candidate)
        return odd_shapes(context, state, candidate) if candidate.verdict == "passed" else candidate

    # On a cluster, the round's candidates at once (each its shapes at once); else one by one.
    checked = map_in_threads(check, pending, parallelism(context, state["kernel"]))
    tested, failed_ones, lines, seconds = list(twins), list(twins), [], 0.0
    lines += [say("tester", f"candidate {c.id} duplicate: {c.message}") for c in twins]
    for before, candidate in zip(pending, checked):
        seconds += candidate.gpu_seconds - before.gpu_seconds
        tested.append(candidate)
        if candidate.verdict == "passed":
            lines.append(say("tester", f"candidate {candidate.id} is correct at all {len(state['shapes'])} shapes"
                                       + ("" if candidate.odd_shapes in ("", "passed") else
                                          f" (odd shapes {candidate.odd_shapes})")))
        elif candidate.verdict == "unmeasured":
            lines.append(say("tester", f"candidate {candidate.id} is unmeasured: {first_line(candidate.message)}"))
        else:
            failed_ones.append(candidate)
            lines.append(say("tester", f"candidate {candidate.id} {candidate.verdict}: {first_line(candidate.message)}"))
    history = [c.model_copy(update={"conversation": []}).model_dump() for c in failed_ones]
    return {"drafts": [c.model_dump() for c in tested], "history": history, "events": lines, "gpu_seconds": seconds}
